"""vacuum and an output's Iceberg table: a file a snapshot within the retention references is kept (time travel to
each such snapshot reads its batch's rows after the vacuum), the snapshots past it are expired from the table's
metadata first, and no snapshot left names a file vacuum deleted."""

from __future__ import annotations

import datetime as _dt
import os
import posixpath
import time
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import StaticTable

from parquet_sink import (
    MetadataLog, SinkOutput, committed_files, optimize, read_committed, sync_iceberg, vacuum, write_batch,
)
from parquet_sink.iceberg import IcebergSyncError, current_metadata, expiry, sync as iceberg_sync
from parquet_sink.iceberg.sync import MARKER
from parquet_sink.errors import ParameterError
from parquet_sink.storage.filesystem import Storage
from tests.delta.readers import spark_style_batch
from tests.iceberg.readers import assert_mirrors
from tests.iceberg.test_sync import _catalog_properties

DAY_S = 86_400


@pytest.fixture(autouse=True)
def _polars_plans_through_pyiceberg(monkeypatch):
    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")


def _rows(table: pa.Table) -> list[dict]:
    return sorted(table.select(["i"]).to_pylist(), key=repr)


def _batch(version: int) -> pa.Table:
    return pa.table({"i": pa.array([version * 10 + i for i in range(3)], pa.int64()), "k": ["a", "b", "a"]})


def _age(root: Path, days: int) -> None:
    """Every data file of the output as written ``days`` ago (time on storage)."""
    then = time.time() - days * DAY_S
    for path in root.rglob("*.parquet"):
        if not any(part.startswith(("_", ".")) for part in path.relative_to(root).parts):
            os.utime(path, (then, then))


def _check_every_snapshot(root: Path, location: str) -> dict[int, int]:
    """Each snapshot of the table reads its batch's rows and every file it names exists: {batch: snapshot id}."""
    table = StaticTable.from_metadata(location)
    snapshots = {int(s.summary[MARKER]): s.snapshot_id for s in table.metadata.snapshots}
    for batch, snapshot_id in snapshots.items():
        files = table.scan(snapshot_id=snapshot_id).plan_files()
        assert all(Path(task.file.file_path).exists() for task in files), batch
        assert _rows(table.scan(snapshot_id=snapshot_id).to_arrow()) == _rows(read_committed(str(root), as_of_batch=batch))
    return snapshots


def test_vacuum_keeps_what_snapshots_within_retention_read_and_expires_the_rest(tmp_path):
    root = tmp_path / "out"
    log = MetadataLog(str(root), compact_interval=3, retention="7d", cleanup=False)
    spark_style_batch(log, _batch(0), ("k",), old=True)  # retention drops it at the compaction (batch 2)
    spark_style_batch(log, _batch(1), ("k",), old=False)
    sync_iceberg(str(root))
    spark_style_batch(log, _batch(2), ("k",), old=False)  # the compaction: batch 0's files leave the log
    spark_style_batch(log, _batch(3), ("k",), old=False)
    sync_iceberg(str(root))
    optimize(str(root), spark_sink_stopped=True)
    result = sync_iceberg(str(root))
    _age(root, 30)  # every file old on storage: only the Iceberg snapshots within the retention protect them
    dropped = {f.path for f in committed_files(str(root), as_of_batch=1)} - {f.path for f in committed_files(str(root))}
    assert dropped

    # within the retention (7 days): the snapshots before the drop and the optimize still read their rows
    dry = vacuum(str(root), "7d", dry_run=True)
    assert {i.path for i in dry.plan.iceberg_kept} >= {p for p in dropped if p not in {i.path for i in dry.plan.replaced_kept}}
    kept = vacuum(str(root), "7d")
    assert not ({i.path for i in kept.plan.orphans} & dropped)
    assert sorted(_check_every_snapshot(root, iceberg_sync.current_metadata(iceberg_sync.Storage(str(root))))) == \
        list(range(result.log_batch + 1))

    # past the retention: every snapshot but the current one is expired first, then their files go
    gone = vacuum(str(root), _dt.timedelta(0), allow_short_retention=True)
    assert dropped <= {i.path for i in gone.plan.orphans} and not gone.plan.iceberg_kept
    location = iceberg_sync.current_metadata(iceberg_sync.Storage(str(root)))
    assert location != result.metadata_location
    assert list(_check_every_snapshot(root, location)) == [result.log_batch]
    assert _rows(StaticTable.from_metadata(location).scan().to_arrow()) == _rows(read_committed(str(root)))
    assert sync_iceberg(str(root)).snapshots == 0  # the sync goes on from the expired table


def test_expired_snapshots_decides():
    """A snapshot expires once the one after it is older than the cutoff; the current one never does."""
    assert expiry.expired_snapshots([(1, 100), (2, 200), (3, 300)], 3, 250) == {1}
    assert expiry.expired_snapshots([(1, 100), (2, 200), (3, 300)], 3, 301) == {1, 2}
    assert expiry.expired_snapshots([(1, 100)], 1, 10**9) == set()
    assert expiry.expired_snapshots([], None, 10**9) == set()


def _metadata_files(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()}


def _age_all(directory: Path, days: int) -> None:
    then = time.time() - days * DAY_S
    for path in directory.iterdir():
        os.utime(path, (then, then))


def _optimized_output(tmp_path: Path, iceberg) -> Path:
    """An output of 4 write_batch versions kept in step with ``iceberg``, optimized and synced again (the
    optimize's swap drops every file of the first batches), every data file old on storage."""
    root = tmp_path / "out"
    for version in range(4):
        write_batch(str(root), _batch(version), app_id="a", version=version, partition_by=["k"], iceberg=iceberg)
    assert optimize(str(root)).committed
    write_batch(str(root), _batch(4), app_id="a", version=4, partition_by=["k"], iceberg=iceberg)
    _age(root, 30)
    return root


def test_vacuum_expires_a_catalog_tables_snapshots_through_its_catalog(tmp_path):
    """Without iceberg=, vacuum keeps every file of a catalog table's snapshots and touches none of its metadata
    (every snapshot still reads its batch's rows); a dry run with iceberg= expires nothing and reports what the
    expiry would leave; vacuum with iceberg= expires the snapshots past the retention through the catalog, deletes
    the files only they read and the metadata only they needed, and every snapshot left (the catalog's table, its
    current metadata file) reads read_committed's rows. Before, vacuum had no iceberg= (TypeError)."""
    target = {"catalog": _catalog_properties(tmp_path), "table": "db.events"}
    root = _optimized_output(tmp_path, target)
    catalog = SqlCatalog("c", uri=target["catalog"]["uri"], warehouse=target["catalog"]["warehouse"])
    directory = root / "_exactly_once" / ".iceberg" / ".db.events"
    swapped = {f.path for f in committed_files(str(root), as_of_batch=3)} - {f.path for f in committed_files(str(root))}
    latest = MetadataLog(str(root)).latest_batch_id()
    assert swapped
    _age_all(directory, 30)
    before = _metadata_files(directory)

    blind = vacuum(str(root), _dt.timedelta(0), allow_short_retention=True)
    assert swapped <= {i.path for i in blind.plan.iceberg_kept} and not blind.plan.iceberg_stale
    assert _metadata_files(directory) == before
    assert sorted(assert_mirrors(catalog.load_table("db.events"), root, latest=latest)) == list(range(latest + 1))

    dry = vacuum(str(root), _dt.timedelta(0), allow_short_retention=True, dry_run=True, iceberg=target)
    assert swapped <= {i.path for i in dry.plan.orphans} and not dry.plan.iceberg_kept
    assert dry.plan.iceberg_stale and _metadata_files(directory) == before
    assert len(catalog.load_table("db.events").metadata.snapshots) == latest + 1

    done = SinkOutput(str(root)).vacuum(_dt.timedelta(0), allow_short_retention=True, iceberg=target)
    assert swapped <= {i.path for i in done.plan.orphans} and not any(Path(p).exists() for p in swapped)
    table = catalog.load_table("db.events")
    assert list(assert_mirrors(table, root, latest=latest)) == [latest]
    assert {posixpath.basename(i.path) for i in done.plan.iceberg_stale} >= (
        {posixpath.basename(i.path) for i in dry.plan.iceberg_stale} - {posixpath.basename(table.metadata_location)})
    assert not _metadata_files(directory) & {posixpath.basename(i.path) for i in done.plan.iceberg_stale}
    assert _rows(StaticTable.from_metadata(table.metadata_location).scan().to_arrow()) == _rows(read_committed(str(root)))
    assert sync_iceberg(str(root), **target).snapshots == 0  # the sync goes on from the expired table


def test_vacuum_refuses_another_outputs_catalog_table(tmp_path):
    """iceberg= naming a catalog table located elsewhere: IcebergSyncError, nothing deleted; a malformed iceberg=
    is the writers' ParameterError."""
    target = {"catalog": _catalog_properties(tmp_path), "table": "db.events"}
    other = _optimized_output(tmp_path / "other", target)
    root = tmp_path / "out"
    write_batch(str(root), _batch(0), app_id="a", version=0)
    with pytest.raises(IcebergSyncError, match="not at this output"):
        vacuum(str(root), _dt.timedelta(0), allow_short_retention=True, iceberg=target)
    with pytest.raises(ParameterError, match="namespace.name"):
        vacuum(str(other), iceberg={"catalog": target["catalog"], "table": "events"})
    assert [len(s.manifests(t.io)) > 0 for t in [SqlCatalog("c", **{k: v for k, v in target["catalog"].items() if k != "name"}).load_table("db.events")]
            for s in t.metadata.snapshots].count(True) == MetadataLog(str(other)).latest_batch_id() + 1


def test_vacuum_deletes_the_metadata_expired_snapshots_left(tmp_path):
    """The table without catalog, synced once per batch (a dozen metadata versions, of which each commit kept the
    current one and the PREVIOUS_VERSIONS before it): vacuum past the retention expires every snapshot but the current
    one (a commit, which deletes the metadata file falling out), then deletes every manifest list and manifest the
    current snapshot does not reference; a dry run reports as much and deletes nothing. A manifest no metadata names yet
    (a sync in flight) stays while younger than UNREFERENCED_AGE_MS. Every snapshot left, and the previous metadata
    files' current snapshots that are kept, read read_committed's rows. Before, no metadata file was ever deleted."""
    root = tmp_path / "out"
    for version in range(12):
        write_batch(str(root), _batch(version), app_id="a", version=version, partition_by=["k"], iceberg=True)
    assert optimize(str(root)).iceberg.snapshots
    _age(root, 30)
    directory = root / "_exactly_once" / ".iceberg" / ".metadata"
    _age_all(directory, 30)
    in_flight = directory / "0123-in-flight-m0.avro"
    in_flight.write_bytes(b"Obj")
    before = _metadata_files(directory)
    assert sum(n.endswith(".metadata.json") for n in before) == expiry.PREVIOUS_VERSIONS + 1  # 14 versions made

    dry = vacuum(str(root), _dt.timedelta(0), allow_short_retention=True, dry_run=True)
    assert _metadata_files(directory) == before
    done = vacuum(str(root), _dt.timedelta(0), allow_short_retention=True)
    left = _metadata_files(directory)
    stale = {posixpath.basename(i.path) for i in done.plan.iceberg_stale}
    assert {posixpath.basename(i.path) for i in dry.plan.iceberg_stale if i.path.endswith(".avro")} == \
        {s for s in stale if s.endswith(".avro")}
    assert {n for n in left if n.endswith(".avro")} == {n for n in before - stale if n.endswith(".avro")}
    assert in_flight.name in left

    location = current_metadata(Storage(str(root)))
    table = StaticTable.from_metadata(location)
    versions = sorted(int(n.split("-", 1)[0]) for n in left if n.endswith(".metadata.json"))
    assert versions == list(range(versions[-1] - expiry.PREVIOUS_VERSIONS, versions[-1] + 1))
    (snap,) = table.metadata.snapshots
    needed = {posixpath.basename(snap.manifest_list)} | {posixpath.basename(m.manifest_path) for m in snap.manifests(table.io)}
    assert {n for n in left if n.endswith(".avro")} == needed | {in_flight.name}
    assert list(assert_mirrors(table, root)) == [int(snap.summary[MARKER])]
    for name in {n for n in left if n.endswith(".metadata.json")}:  # the kept ones open; their current snapshot if kept
        previous = StaticTable.from_metadata(str(directory / name))
        if previous.current_snapshot().snapshot_id == snap.snapshot_id:
            assert _rows(previous.scan().to_arrow()) == _rows(read_committed(str(root)))
    _age_all(directory, 30)
    again = vacuum(str(root), _dt.timedelta(0), allow_short_retention=True)
    assert [posixpath.basename(i.path) for i in again.plan.iceberg_stale] == [in_flight.name]
    write_batch(str(root), _batch(12), app_id="a", version=12, partition_by=["k"], iceberg=True)
    assert list(assert_mirrors(StaticTable.from_metadata(current_metadata(Storage(str(root)))), root)) == \
        [int(snap.summary[MARKER]), int(snap.summary[MARKER]) + 1]


def test_stale_metadata_decides():
    """Metadata versions more than keep versions back go, however young (the rule each commit applies: one rule);
    the current version and later ones (a commit in flight) stay; manifests go when unneeded and old; hidden
    half-written files (a metadata file's, the version hint's) go when old; other files stay."""
    temp = f".version-hint.text.{'0' * 32}.tmp"
    files = [("00001-a.metadata.json", 1), ("00002-b.metadata.json", 30), ("00003-c.metadata.json", 30),
             ("00004-d.metadata.json", 40), ("00005-e.metadata.json", 50), ("snap-1.avro", 1), ("m-1.avro", 1),
             ("m-2.avro", 60), (".00005-f.metadata.json.inprogress", 3), ("version-hint.text", 1), (temp, 3)]
    assert expiry.stale_metadata(files, "00004-d.metadata.json", {"snap-1.avro"}, 20, keep=1) == \
        [".00005-f.metadata.json.inprogress", temp, "00001-a.metadata.json", "00002-b.metadata.json", "m-1.avro"]
    assert expiry.stale_metadata(files, "00004-d.metadata.json", set(), 35, keep=1) == \
        [".00005-f.metadata.json.inprogress", temp, "00001-a.metadata.json", "00002-b.metadata.json", "m-1.avro",
         "snap-1.avro"]
    assert expiry.stale_metadata(files, "00004-d.metadata.json", set(), 0, keep=1) == \
        ["00001-a.metadata.json", "00002-b.metadata.json"]
    assert expiry.stale_metadata(files, "00004-d.metadata.json", set(), 35, keep=10) == \
        [".00005-f.metadata.json.inprogress", temp, "m-1.avro", "snap-1.avro"]
