"""Batches in flight against a concurrent vacuum, durability of published files, and what vacuum cleans.

The hook: ``parquet_sink.write.sink.failpoint`` is wrapped so that, at ``before_commit`` (every file of the batch
written, the log not yet), the test does what a concurrent process would: run ``parquet-sink vacuum`` with
an aggressive threshold, or delete a file of the batch.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import parquet_sink.write.sink as sink_module
from parquet_sink import MetadataLog, ParquetSink, committed_files, read_committed, write_batch
from parquet_sink.cli.main import main as cli_main
from parquet_sink.errors import ExistingDataError, MissingDataFileError
from parquet_sink.maintenance import vacuum as vacuum_plan
from parquet_sink.write.inflight import HIDDEN_DIR, InFlightBatch, leases, refuse_existing_data
from parquet_sink.storage.filesystem import Storage
from tests.helpers.crash_util import parquet_on_disk, vacuum

WRITERS = ["spark", "arrow"]


def _df(spark, first: int, n: int = 40):
    return spark.createDataFrame([(i, f"k{i % 4}") for i in range(first, first + n)], "id long, k string").repartition(2)


def _at_before_commit(monkeypatch, action) -> list[int]:
    """Run ``action()`` when the sink reaches before_commit; returns the list of hits."""
    original = sink_module.failpoint
    hits: list[int] = []

    def hook(name: str) -> None:
        if name == "before_commit":
            hits.append(1)
            action()
        original(name)

    monkeypatch.setattr(sink_module, "failpoint", hook)
    return hits


@pytest.mark.parametrize("writer", WRITERS)
def test_vacuum_during_a_batch_keeps_its_files(spark, tmp_path, monkeypatch, writer):
    """A vacuum with ``--older-than 0s`` between the write and the commit of a batch (a straggler task, a
    slow driver) must not delete the batch's files: the lease protects them. Before leases the vacuum
    deleted them and the sink committed entries for missing files (MissingDataFileError on read)."""
    out = str(tmp_path / "out")
    sink = ParquetSink(out, partition_by=["k"], writer=writer)
    sink(_df(spark, 0), 0)
    reports = []
    hits = _at_before_commit(monkeypatch, lambda: reports.append(vacuum(out)))

    sink(_df(spark, 100), 1)

    assert hits and reports[0]["files"] == [] and reports[0]["in_flight_kept"] == sink.last_progress.files > 0
    assert sorted(read_committed(out).column("id").to_pylist()) == list(range(40)) + list(range(100, 140))
    assert sorted(r.id for r in spark.read.parquet(out).collect()) == list(range(40)) + list(range(100, 140))
    assert not (Path(out) / HIDDEN_DIR / "leases").exists() or not any((Path(out) / HIDDEN_DIR / "leases").iterdir())


@pytest.mark.parametrize("writer", WRITERS)
def test_sink_never_commits_a_vanished_file(spark, tmp_path, monkeypatch, writer):
    """A file of the batch deleted before the commit (by hand, or by a vacuum that ignores leases): the sink
    refuses with MissingDataFileError and commits nothing, instead of logging a missing file."""
    out = str(tmp_path / "out")
    sink = ParquetSink(out, writer=writer)
    sink(_df(spark, 0), 0)
    committed = set(parquet_on_disk(out))
    _at_before_commit(monkeypatch, lambda: os.unlink(sorted(parquet_on_disk(out) - committed)[0]))

    with pytest.raises(MissingDataFileError, match="log batch 1 vanished before its commit"):
        sink(_df(spark, 100), 1)

    assert MetadataLog(out).latest_batch_id() == 0
    assert sorted(read_committed(out).column("id").to_pylist()) == list(range(40))


def test_vacuum_removes_the_partition_directories_it_emptied(spark, tmp_path):
    """Orphans in a partition directory of their own: vacuum deletes them and the directory (nested
    directories too), keeps every directory holding a committed file, and removes no directory at all
    while a batch is in flight."""
    out = tmp_path / "out"
    sink = ParquetSink(str(out), partition_by=["k"])
    sink(_df(spark, 0), 0)
    committed_dirs = {Path(f.path).parent for f in committed_files(str(out))}
    data = next(iter(parquet_on_disk(out)))
    orphan_dirs = [out / "k=orphan", out / "k=k1" / "j=nested"]
    for directory in orphan_dirs:
        directory.mkdir(parents=True)
        (directory / "part-00000-orphan.c000.snappy.parquet").write_bytes(Path(data).read_bytes())
    os.utime(out / "k=k1" / "j=nested" / "part-00000-orphan.c000.snappy.parquet", (1, 1))
    os.utime(out / "k=orphan" / "part-00000-orphan.c000.snappy.parquet", (1, 1))
    for f in committed_files(str(out)):  # batch 0 as if committed long ago: the orphans are not older than it
        os.utime(f.path, (1, 1))

    # A batch in flight (a lease newer than the orphans): orphans go, directories stay.
    storage = Storage(str(out))
    batch = InFlightBatch.begin(storage, 1, "inflight", "q", 1)
    report = vacuum(out)
    assert len(report["files"]) == 2 and report["removed_dirs"] == []
    assert all(d.is_dir() for d in orphan_dirs)
    batch.end(staged=False)

    for directory in orphan_dirs:
        (directory / "part-00001-orphan.c000.snappy.parquet").write_bytes(Path(data).read_bytes())
        os.utime(directory / "part-00001-orphan.c000.snappy.parquet", (1, 1))
    report = vacuum(out)
    assert len(report["files"]) == 2
    assert sorted(report["removed_dirs"]) == sorted(str(d) for d in orphan_dirs)
    assert not any(d.exists() for d in orphan_dirs)
    assert all(d.is_dir() for d in committed_dirs) and (out / "k=k1").is_dir()
    assert sorted(read_committed(str(out)).column("id").to_pylist()) == list(range(40))


def test_existing_dataset_is_refused_and_vacuum_keeps_it(spark, tmp_path):
    """A sink or write_batch pointed at a directory that already holds a Parquet dataset (and no log) refuses
    with ExistingDataError unless allow_existing_files=True; then readers hide the dataset's files, and
    vacuum keeps them (older than the log's first commit) unless asked by name. Before, the sink adopted
    the directory without a word and vacuum deleted the dataset as orphans."""
    out = tmp_path / "out"
    out.mkdir()
    dataset = out / "part-00000-existing.snappy.parquet"
    pq.write_table(pa.table({"id": [-1]}), dataset)
    os.utime(dataset, (time.time() - 3600, time.time() - 3600))
    for write in (
        lambda: ParquetSink(str(out))(_df(spark, 0), 0),
        lambda: write_batch(str(out), pa.table({"id": [0]}), app_id="a", version=0),
    ):
        with pytest.raises(ExistingDataError) as info:
            write()
        assert str(dataset) in str(info.value) and "allow_existing_files=True" in str(info.value)
    assert parquet_on_disk(out) == {str(dataset)} and not (out / "_spark_metadata").exists()

    ParquetSink(str(out), allow_existing_files=True)(_df(spark, 0), 0)
    assert sorted(read_committed(str(out)).column("id").to_pylist()) == list(range(40))
    report = vacuum(out)
    assert (report["files"], report["before_log_kept"]) == ([], 1) and dataset.exists()
    with contextlib.redirect_stdout(io.StringIO()) as stdout:
        assert cli_main(["vacuum", str(out), "--older-than", "0s", "--allow-short-retention", "--include-files-before-log", "--json"]) == 0
    assert [f["path"] for f in json.loads(stdout.getvalue())["files"]] == [str(dataset)] and not dataset.exists()
    assert sorted(read_committed(str(out)).column("id").to_pylist()) == list(range(40))


def test_existing_data_check_does_not_refuse_what_a_concurrent_writer_just_committed(tmp_path):
    """The race CI hit with two write_batch apps on moto: app b read an empty log; app a then committed its
    version 0 and deleted its lease; b's existing-data check found a's files, older than every lease (none), and
    refused with ExistingDataError. The check now reads the log after the leases: a batch committed since the
    caller's read settles it. Files a failed writer deleted after the listing are not reported either."""
    out = tmp_path / "out"
    write_batch(str(out), pa.table({"id": [1, 2]}), app_id="a", version=0)
    (data,) = parquet_on_disk(out)
    os.utime(data, (time.time() - 3600, time.time() - 3600))  # older than any lease b could see
    storage = Storage(str(out))
    refuse_existing_data(storage, "write_batch of version 0 of app 'b'")  # a's commit settled it
    write_batch(str(out), pa.table({"id": [3]}), app_id="b", version=0)
    assert sorted(read_committed(str(out)).column("id").to_pylist()) == [1, 2, 3]

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    pq.write_table(pa.table({"id": [-1]}), foreign / "part-0.parquet")
    with pytest.raises(ExistingDataError):
        refuse_existing_data(Storage(str(foreign)), "write_batch of version 0 of app 'b'")


def test_spark_path_fsyncs_published_files_and_directories_before_the_commit(spark, tmp_path, monkeypatch):
    """Spark writer path on local disk: every published data file (fsynced where it was staged: the same
    inode), its new partition directory and the root are fsynced before the log commit (a power loss must
    not leave a committed file empty)."""
    out = tmp_path / "out"
    synced: list[int] = []  # inodes
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        real_fsync(fd)

    at_commit: list[set[str]] = []
    real_add = MetadataLog.add

    def add(self, batch_id, entries):
        at_commit.append(set(synced))
        return real_add(self, batch_id, entries)

    monkeypatch.setattr(os, "fsync", spy)
    monkeypatch.setattr(MetadataLog, "add", add)
    sink = ParquetSink(str(out), partition_by=["k"], writer="spark")
    sink(_df(spark, 0), 0)

    files = [f.path for f in committed_files(str(out))]
    assert len(files) == sink.last_progress.files > 0
    needed = set(files) | {os.path.dirname(f) for f in files} | {str(out)}
    missed = sorted(p for p in needed if os.stat(p).st_ino not in at_commit[0])
    assert not missed, f"not fsynced before the commit: {missed}"


def test_hidden_area_names_of_older_releases_are_still_read(tmp_path):
    """The hidden area's names are hidden themselves now (``.compact_interval``, ``leases/.<batch>-<id>``,
    ``staging/.<id>``: Spark globs list what they match; tests/read/test_directory_readers.py). What an older
    release named without the dot is still read: its interval record holds, its live lease protects its staging
    directory, and vacuum removes only a staging directory no lease keeps."""
    out = tmp_path / "out"
    write_batch(str(out), pa.table({"id": [1]}), app_id="a", version=0, compact_interval=3)
    hidden = out / HIDDEN_DIR
    (hidden / ".compact_interval").rename(hidden / "compact_interval")
    storage = Storage(str(out))
    live = InFlightBatch.begin(storage, 1, "old", "b", 0, until_committed=True)
    Path(live.lease_path).rename(hidden / "leases" / "1-old")
    (hidden / "staging" / "old" / "k=a").mkdir(parents=True)
    (hidden / "staging" / "dead").mkdir()
    assert [(lease.log_batch_id, lease.staging) for lease in leases(storage)] == [(1, str(hidden / "staging" / "old"))]
    plan = vacuum_plan(str(out), "0s", allow_short_retention=True, dry_run=True).plan
    assert plan.dead_staging == [str(hidden / "staging" / "dead")]
    for version in range(1, 4):  # the recorded interval (the older name) names the batches
        write_batch(str(out), pa.table({"id": [version + 1]}), app_id="a", version=version)
    assert (out / "_spark_metadata" / "2.compact").exists() and not (hidden / ".compact_interval").exists()
    (hidden / "compact_interval").rename(hidden / ".compact_interval")  # docs/design.md's advice, for Spark's globs
    for version in range(4, 6):
        write_batch(str(out), pa.table({"id": [version + 1]}), app_id="a", version=version)
    assert (out / "_spark_metadata" / "5.compact").exists()
    assert sorted(read_committed(str(out)).column("id").to_pylist()) == [1, 2, 3, 4, 5, 6]
