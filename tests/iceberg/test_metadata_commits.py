"""How the table kept without a catalog commits and is found: each version's metadata file named by its version
alone (``metadata_name``) and created exclusively, found from the version hint by probing the next version (no
listing of the metadata directory per sync), a listing only without a usable hint (a torn or missing one, a table
an earlier release made with randomly named files, which goes on syncing), and the metadata files kept bounded
by each commit. Races and kills between processes: tests/iceberg/test_iceberg_crash.py."""

from __future__ import annotations

import json
import logging
import posixpath
import uuid
from collections import Counter
from pathlib import Path

import pytest
from pyiceberg.table import StaticTable

from parquet_sink import read_committed, sync_iceberg, write_batch
from parquet_sink.iceberg import current_metadata
from parquet_sink.iceberg import sync as iceberg_sync
from parquet_sink.iceberg.sync import HINT, METADATA_DIR, PREVIOUS_VERSIONS, TABLE_PROPERTIES, metadata_name
from parquet_sink.storage.filesystem import Storage
from tests.iceberg.readers import assert_mirrors
from tests.iceberg.test_sync import _assert_same, _table


@pytest.fixture
def work(monkeypatch) -> Counter:
    """Calls on the storage seam under the metadata directory of a table without catalog, by method."""
    counted: Counter = Counter()
    for method in ("ls", "ls_names", "find", "exists", "read_bytes", "info"):
        original = getattr(Storage, method)

        def counting(self, path, *args, _method=method, _original=original, **kwargs):
            if METADATA_DIR in path:
                counted[_method] += 1
            return _original(self, path, *args, **kwargs)

        monkeypatch.setattr(Storage, method, counting)
    return counted


def _forget() -> None:
    """Drop what this process knows of the tables it synced, as a new process starts."""
    iceberg_sync._OPENED.clear()
    iceberg_sync._KNOWN.clear()


def _metadata_files(out: Path) -> list[str]:
    return sorted(p.name for p in (out / METADATA_DIR).iterdir() if p.name.endswith(".metadata.json"))


def _write(out: Path, versions: range, iceberg: bool | None = True) -> None:
    for version in versions:
        write_batch(str(out), _table(version, rows=2), app_id="a", version=version, partition_by=["k"], iceberg=iceberg)


def test_metadata_names_are_decided_by_the_version_alone():
    """Two commits of one version name the same file (the exclusive create lets one win); the name has the form
    NNNNN-<uuid>.metadata.json that pyiceberg parses the version of."""
    from pyiceberg.catalog import MetastoreCatalog

    assert metadata_name(3) == metadata_name(3) == "00003-00000000-0000-0000-0000-000000000003.metadata.json"
    assert [MetastoreCatalog._parse_metadata_version(metadata_name(v)) for v in (0, 7, 123456)] == [0, 7, 123456]


def test_a_sync_per_batch_lists_no_metadata_directory(tmp_path, work):
    """The work on the metadata directory of an in-step sync, in the process that synced before and in a new one
    (which starts from the version hint), does not grow with the snapshots and metadata files kept: at 3 and at
    30 snapshots the same calls, none a listing; the metadata files kept stay PREVIOUS_VERSIONS + 1. Before, every
    sync listed the directory (every metadata file, manifest and manifest list kept) and no metadata file was
    deleted by a commit."""

    def per_sync(out: Path, batches: int) -> list[Counter]:
        _write(out, range(batches), iceberg=None)
        sync_iceberg(str(out))
        counts = []
        for version in range(batches, batches + 2):
            _write(out, range(version, version + 1), iceberg=None)
            if version > batches:
                _forget()  # the second as a new process's sync
            work.clear()
            result = sync_iceberg(str(out))
            counts.append(Counter(work))
        assert result.log_batch == batches + 1
        assert len(StaticTable.from_metadata(result.metadata_location).metadata.snapshots) == batches + 2
        return counts

    small, large = per_sync(tmp_path / "small", 3), per_sync(tmp_path / "large", 30)
    assert small == large, (small, large)
    assert not any(count["ls"] or count["ls_names"] or count["find"] for count in large), large
    assert large[1]["read_bytes"] == 1  # the hint
    out = tmp_path / "per-batch"
    _write(out, range(PREVIOUS_VERSIONS + 2))
    assert _metadata_files(out) == [metadata_name(v) for v in range(1, PREVIOUS_VERSIONS + 2)]
    assert (out / METADATA_DIR / HINT).read_text() == str(PREVIOUS_VERSIONS + 1)
    _assert_same(StaticTable.from_metadata(current_metadata(Storage(str(out)))).scan().to_arrow(), out)


@pytest.mark.parametrize("hint", ["missing", "torn", "empty", "behind", "ahead", "gone"])
def test_a_torn_missing_or_stale_hint(tmp_path, work, hint):
    """Whatever the hint holds, the current metadata file is the newest version's: a hint behind (a sync killed
    after its commit, before its hint) is probed past, without a listing; a missing, torn or empty one, one
    naming a version not there (ahead) or one whose file is gone (deleted) falls back to a listing. The next sync
    commits the next version and writes the hint again."""
    out = tmp_path / "out"
    _write(out, range(4))
    newest = current_metadata(Storage(str(out)))
    assert posixpath.basename(newest) == metadata_name(3)
    path = out / METADATA_DIR / HINT
    if hint == "missing":
        path.unlink()
    elif hint == "gone":
        path.write_text("1")
        (out / METADATA_DIR / metadata_name(1)).unlink()
    else:
        path.write_text({"torn": "3\x00", "empty": "", "behind": "1", "ahead": "9"}[hint])
    _forget()
    work.clear()
    assert current_metadata(Storage(str(out))) == newest
    assert work["ls_names"] == (0 if hint == "behind" else 1), work
    _forget()
    _write(out, range(4, 5))
    assert path.read_text() == "4"
    assert posixpath.basename(current_metadata(Storage(str(out)))) == metadata_name(4)
    assert sorted(assert_mirrors(StaticTable.from_metadata(current_metadata(Storage(str(out)))), out)) == \
        list(range(5))


def _named_at_random(out: Path) -> list[str]:
    """The table without catalog as the release before left it: each metadata file named
    NNNNN-<random uuid>.metadata.json (the metadata log naming them so), no version hint, none of the properties
    that bound the metadata files kept. The new names, oldest first."""
    directory = out / METADATA_DIR
    (directory / HINT).unlink()
    renamed = {str(directory / name): str(directory / f"{name[:5]}-{uuid.uuid4()}.metadata.json")
               for name in _metadata_files(out)}
    for old, new in renamed.items():
        metadata = json.loads(Path(old).read_text())
        for entry in metadata["metadata-log"]:
            entry["metadata-file"] = renamed.get(entry["metadata-file"], entry["metadata-file"])
        for key in TABLE_PROPERTIES.keys() - {iceberg_sync.RETRIES}:
            del metadata["properties"][key]
        Path(new).write_text(json.dumps(metadata))
        Path(old).unlink()
    return [posixpath.basename(new) for new in renamed.values()]


def test_a_table_whose_metadata_files_are_named_at_random_goes_on_syncing(tmp_path, work):
    """A table the release before made (metadata files named at random, no hint): found by a listing, read whole,
    and synced on: the next commit is the next version under metadata_name, with the hint and the properties that
    bound the metadata files kept; from then on no listing. Every snapshot reads read_committed's rows."""
    out = tmp_path / "out"
    _write(out, range(4))
    old = _named_at_random(out)
    _forget()
    assert posixpath.basename(current_metadata(Storage(str(out)))) == old[-1]
    work.clear()
    _write(out, range(4, 5))
    assert work["ls_names"] == 1  # finding the table named at random
    location = current_metadata(Storage(str(out)))
    assert posixpath.basename(location) == metadata_name(4) and (out / METADATA_DIR / HINT).read_text() == "4"
    table = StaticTable.from_metadata(location)
    assert TABLE_PROPERTIES.items() <= table.properties.items()
    assert sorted(assert_mirrors(table, out)) == list(range(5))
    _forget()
    work.clear()
    _write(out, range(5, 5 + PREVIOUS_VERSIONS))
    assert not work["ls_names"]
    names = _metadata_files(out)
    assert len(names) == PREVIOUS_VERSIONS + 1 and not set(old) & set(names)  # the old names fell out
    _assert_same(StaticTable.from_metadata(current_metadata(Storage(str(out)))).scan().to_arrow(), out)
    assert read_committed(str(out)).num_rows == 2 * (5 + PREVIOUS_VERSIONS)


@pytest.mark.parametrize("backend", ["local", "moto"], indirect=True)
def test_a_commit_of_a_version_another_made_loses_and_reads_again(backend, monkeypatch, caplog):
    """The race, staged in one process: a sync whose table is version 0 (found just before another sync committed
    batch 1 as version 1) commits version 1 too; its create fails (on local disk the link, on S3 the conditional
    put), it reads the table again and commits batch 2 as version 2. One metadata file per version, one snapshot
    per log batch, the rows read_committed's. Before, it wrote a second file of version 1 and every later sync
    refused the table."""
    url, options = backend.url, backend.storage_options
    storage = Storage(url, options)
    for version in range(2):
        write_batch(url, _table(version, rows=2), app_id="a", version=version, storage_options=options)
        sync_iceberg(url, storage_options=options)
        if version == 0:
            stale = iter([current_metadata(storage)])
    write_batch(url, _table(2, rows=2), app_id="a", version=2, storage_options=options)
    _forget()
    found = iceberg_sync.current_metadata
    monkeypatch.setattr(iceberg_sync, "current_metadata", lambda s, known=None: next(stale, None) or found(s, known))
    with caplog.at_level(logging.INFO, logger=iceberg_sync.__name__):
        result = sync_iceberg(url, storage_options=options)
    assert "made this version first" in caplog.text  # the first attempt lost
    assert (result.log_batch, result.previous_log_batch, result.snapshots) == (2, 1, 1)
    names = [posixpath.basename(p) for p in storage.ls_names(storage.join(METADATA_DIR))]
    assert sorted(n for n in names if n.endswith(".metadata.json")) == [metadata_name(v) for v in range(3)]
    table = StaticTable.from_metadata(result.metadata_location, properties=iceberg_sync._io_properties(storage))
    assert [int(s.summary[iceberg_sync.MARKER]) for s in table.metadata.snapshots] == [0, 1, 2]
    scanned, expected = table.scan().to_arrow(), read_committed(url, storage_options=options)
    assert sorted(scanned.column("i").to_pylist()) == sorted(expected.column("i").to_pylist())
    assert expected.num_rows == 6
