"""Log and reader hardening (issue 13): old snapshots under retention, a stray far-ahead log file, outputs
written with a larger compact interval, constructor validation, copied outputs; and the lean log."""

from __future__ import annotations

import os
import re
import shutil
import time

import pytest

from parquet_sink import MetadataLog, ParquetSink, committed_files, errors, read_committed
from parquet_sink.cli.main import main as cli_main
from parquet_sink.log.metadata_log import CommitRecord, LogEntry
from parquet_sink.log.entry import attribute, records_to_keep
from parquet_sink.storage.filesystem import Storage


def _entry(root: str, name: str, mtime: int = 1, size: int = 10) -> LogEntry:
    return LogEntry(Storage(root).to_uri(os.path.join(root, name)), size, False, mtime)


def _names(files) -> list[str]:
    return sorted(f.relative_path for f in files)


# -- 2: retention must not falsify old snapshots --------------------------------------------------


def _retained_log(root: str) -> None:
    log = MetadataLog(root, compact_interval=2, retention="1h", cleanup=False)
    now = int(time.time() * 1000)
    log.add(0, [_entry(root, "old", mtime=now - 2 * 3_600_000), _entry(root, "new", mtime=now)])
    log.add(1, [_entry(root, "newer", mtime=now)])  # 1.compact: retention drops "old"
    log.add(2, [_entry(root, "newest", mtime=now)])


def test_old_snapshots_are_read_from_their_own_log_files_under_retention(tmp_path):
    root = str(tmp_path)
    _retained_log(root)
    assert _names(committed_files(root)) == ["new", "newer", "newest"]
    assert _names(committed_files(root, as_of_batch=0)) == ["new", "old"]
    assert _names(committed_files(root, batches=(0, 0))) == ["new", "old"]
    assert _names(committed_files(root, batches=(0, 1))) == ["new", "newer"]  # the snapshot at 1 had dropped "old"
    assert _names(committed_files(root, batches=(2, 2))) == ["newest"]


def test_old_snapshot_whose_log_files_are_gone_is_a_typed_error(tmp_path):
    root = str(tmp_path)
    _retained_log(root)
    os.remove(tmp_path / "_spark_metadata" / "0")
    with pytest.raises(errors.SnapshotExpiredError, match=r"before batch 1 are gone.*expired by retention"):
        committed_files(root, as_of_batch=0)
    with pytest.raises(errors.SnapshotExpiredError):
        committed_files(root, batches=(0, 0))
    assert _names(committed_files(root, batches=(2, 2))) == ["newest"]  # batches retention did not touch


def test_old_snapshot_without_retention_is_answered_after_cleanup(tmp_path):
    root = str(tmp_path)
    log = MetadataLog(root, compact_interval=2, cleanup=False)
    for b in range(4):
        log.add(b, [_entry(root, f"f{b}")])
    os.remove(tmp_path / "_spark_metadata" / "0")
    os.remove(tmp_path / "_spark_metadata" / "2")
    assert _names(committed_files(root, as_of_batch=2)) == ["f0", "f1", "f2"]


# -- 3 (log side): parameters are validated in the constructor -------------------------------------


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"min_batches_to_retain": 0}, "min_batches_to_retain"),
        ({"min_batches_to_retain": -3}, "min_batches_to_retain"),
        ({"compact_interval": 0}, "compact_interval"),
        ({"compact_interval": 2.5}, "compact_interval"),
        ({"cleanup_delay": -1}, "bare number is refused"),
        ({"cleanup_delay": "-1s"}, "a duration must not be negative"),
        ({"cleanup_delay": "soon"}, "duration"),
        ({"retention": -5}, "bare number is refused"),
        ({"retention": "1 fortnight"}, "duration"),
    ],
)
def test_metadata_log_rejects_bad_parameters(tmp_path, kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        MetadataLog(str(tmp_path), **kwargs)
    assert not (tmp_path / "_spark_metadata").exists()


# -- 4: a stray far-ahead log file name ------------------------------------------------------------


def test_stray_far_ahead_log_file_is_a_gap_at_once_with_one_listing(spark, tmp_path, monkeypatch):
    out = str(tmp_path / "out")
    sink = ParquetSink(out)
    sink(spark.createDataFrame([(1,)], "id long"), 0)
    (tmp_path / "out" / "_spark_metadata" / "2000").write_bytes(b"v1")
    listings = []
    for name in ("ls", "ls_names", "find"):  # every way to list the log directory
        original = getattr(Storage, name)
        monkeypatch.setattr(
            Storage, name, lambda self, path, _f=original, _n=name: listings.append(_n) or _f(self, path)
        )
    with pytest.raises(errors.MissingLogFileError, match=r"batch 1 is missing.*up to 2000"):
        sink(spark.createDataFrame([(2,)], "id long"), 1)
    assert len(listings) == 1
    with pytest.raises(errors.MissingLogFileError):  # a fresh reader raises the same typed gap error
        read_committed(out)
    (tmp_path / "out" / "_spark_metadata" / "2000").unlink()
    sink(spark.createDataFrame([(2,)], "id long"), 1)  # once the stray file is gone, the query goes on
    assert sorted(read_committed(out).column("id").to_pylist()) == [1, 2]


# -- 5: outputs written with a larger compact interval ---------------------------------------------


def _interval_20_output(root: str, batches: int) -> None:
    log = MetadataLog(root, compact_interval=20, cleanup=False)
    for b in range(batches):
        log.add(b, [_entry(root, f"f{b}")])


def test_larger_compact_interval_readable_before_its_first_compaction(tmp_path):
    root = str(tmp_path)
    _interval_20_output(root, 13)
    assert len(committed_files(root)) == 13
    assert len(committed_files(root, compact_interval=20)) == 13
    assert len(MetadataLog(root).all_files()) == 13
    assert MetadataLog(root).check() == []


def test_explicit_compact_interval_for_readers_and_cli(tmp_path, capsys):
    root = str(tmp_path)
    _interval_20_output(root, 25)  # 19.compact; then deltas 20..24
    for b in range(25):
        (tmp_path / f"f{b}").write_bytes(b"x" * 10)
    assert len(committed_files(root, compact_interval=20)) == 25
    # an interval the files contradict (23.compact would be needed): the log is read as written
    assert len(committed_files(root, compact_interval=4)) == 25
    assert cli_main(["verify", root, "--compact-interval", "20"]) == 0
    assert cli_main(["ls", root, "--compact-interval", "4"]) == 0
    capsys.readouterr()
    (tmp_path / "_spark_metadata" / "19.compact").unlink()
    with pytest.raises(errors.MissingLogFileError, match=r"19\.compact \(batch 19\)"):
        committed_files(root, compact_interval=20)


# -- 12 (copied output): the sink reads the committed schema through the reader's relocation rule --


def test_sink_continues_on_a_copied_partitioned_output(spark, tmp_path):
    out, copy = str(tmp_path / "out"), str(tmp_path / "copy")
    ParquetSink(out, partition_by=["k"])(spark.createDataFrame([(1, "a")], "id long, k string"), 0)
    shutil.copytree(out, copy)
    sink = ParquetSink(copy, partition_by=["k"])
    sink(spark.createDataFrame([(2, "b")], "id long, k string"), 1)
    assert sink._state is not None and sink._state.partition_columns == ("k",)
    assert sorted(read_committed(copy).column("id").to_pylist()) == [1, 2]
    assert sorted(read_committed(out).column("id").to_pylist()) == [1]


# -- the lean log ----------------------------------------------------------------------------------


def test_compaction_keeps_first_and_last_record_of_each_run_and_ls_still_attributes(tmp_path, capsys):
    root = str(tmp_path)
    storage = Storage(root)
    log = MetadataLog(root, compact_interval=5, cleanup=False)
    owners = ["q1"] * 3 + [None] * 2 + ["q1"] * 2 + ["q2"] * 3  # None: Spark's own sink (no record)
    query_batch = {"q1": 0, "q2": 0}
    for b, owner in enumerate(owners):
        entries = [_entry(root, f"f{b}")]
        if owner is not None:
            entries.insert(0, CommitRecord(b, owner, query_batch[owner], f"c{b}").to_entry(storage, 1))
            query_batch[owner] += 1
        log.add(b, entries)
    compact = [CommitRecord.from_entry(e) for e in log.get(9) or []]
    assert sorted(r.log_batch_id for r in compact if r) == [0, 2, 5, 6, 7, 9]
    assert len([e for e in log.get(9) or [] if not e.is_dir]) == 10
    assert cli_main(["ls", root, "--json"]) == 0
    import json

    data = json.loads(capsys.readouterr().out)
    assert [(b["batch"], b["query_id"], b["query_batch"]) for b in data["batches"]] == [
        (0, "q1", 0), (1, "q1", 1), (2, "q1", 2), (3, None, None), (4, None, None),
        (5, "q1", 3), (6, "q1", 4), (7, "q2", 0), (8, "q2", 1), (9, "q2", 2),
    ]


def test_records_to_keep_and_attribute_agree():
    records = [CommitRecord(b, "q", b + 10, str(b)) for b in range(6)] + [CommitRecord(8, "q", 16, "x")]
    keep = records_to_keep(records)
    assert keep == {0, 5, 8}
    kept = [r for r in records if r.log_batch_id in keep]
    inferred = attribute(kept, range(9))
    assert sorted(inferred) == [0, 1, 2, 3, 4, 5, 8]  # 6 and 7 belong to no run
    assert [inferred[b].query_batch_id for b in range(6)] == list(range(10, 16))


def _log_lines(root: str) -> list[bytes]:
    """The entry lines of the log files a reader opens: the newest compact file and the deltas after it."""
    log = MetadataLog(root, cleanup=False)
    listing = log.list_names()
    files = log.files_for(max(listing), listing)
    return [line for _, path in files for line in open(path, "rb").read().split(b"\n")[1:]]


def test_log_is_lean_against_sparks_own_sink_on_the_same_stream(spark, tmp_path):
    from tests.helpers.spark_util import run_available_now, write_input_files

    src = str(tmp_path / "in")
    write_input_files(src, [[{"id": b}] for b in range(13)])  # 13 one-row batches: 9.compact, then 10..12
    stream = spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).json(src)
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "spar")  # same path lengths
    run_available_now(stream, str(tmp_path / "ckpt-ours"), ParquetSink(ours))
    run_available_now(stream, str(tmp_path / "ckpt-spark"), path=theirs)
    assert len(committed_files(ours)) == len(committed_files(theirs)) == 13
    our_lines, spark_lines = _log_lines(ours), _log_lines(theirs)
    records = [line for line in our_lines if b'"commitId"' in line]
    # Commit records are entries of their own (a directory entry Spark's readers skip, named after the record so
    # that it outlives a compaction by Spark's own sink): the compact file keeps 2 (first and newest), each delta
    # after it has its own (queryBatchId left out: it equals the log batch id). Besides them, one line per data
    # file, as Spark's.
    assert all(b'"isDir":true' in line for line in records) and len(records) == 2 + 3
    assert not any(b'"queryBatchId"' in line for line in records)
    our_lines = [line for line in our_lines if line not in records]
    assert len(our_lines) == len(spark_lines) == 13
    # A record's entry: Spark's seven keys, its name (the ids again, ~70 bytes), the ids and the batch's figures.
    uri = len(f"file://{ours}/_spark_metadata/")
    assert all(len(line) <= 2 * uri + 330 for line in records), [len(line) for line in records]
    # Deltas are Spark's lines plus the batch's figures; compacted entries add their batchId.
    deltas = our_lines[-3:]
    assert all(b'"batchId"' not in line for line in deltas) and all(b'"batchId"' in line for line in our_lines[:-3])
    # Per batch, its commit time and rows on its first data entry (what history() reports; kept when compaction
    # drops the record's entry): ~45 bytes a batch, not a file.
    # Each data entry also carries its file's statistics (issue 38: what filtered reads skip files by), a key of
    # its own, apart from the rest.
    stats = [re.search(rb',"stats":"(?:[^"\\]|\\.)*"', line) for line in our_lines]
    assert all(stats)
    our_lines = [line[: m.start()] + line[m.end() :] for line, m in zip(our_lines, stats)]
    overhead = sum(map(len, our_lines)) - sum(map(len, spark_lines))
    figures = [line for line in our_lines if re.search(rb',"commitTime":\d+,"batchRows":\d+}$', line)]
    assert len(figures) == 13 and overhead <= 13 * 60
    # Without those keys, a data entry costs Spark's line plus at most its batchId.
    plain = [re.sub(rb',"(commitTime|batchRows)":\d+', b"", line) for line in our_lines]
    assert sum(map(len, plain)) / len(plain) <= 1.1 * sum(map(len, spark_lines)) / len(spark_lines)


def test_a_query_s_stream_keeps_two_records_through_every_compaction(tmp_path):
    """200 one-file batches of one query at interval 10 (20 compactions): the compact file keeps the run's first
    and newest record (the old rule kept every earlier compaction's newest: 21; at 1,000 batches 101, +11% bytes),
    one line per data file besides, and every batch is still attributed to its query batch."""
    root = str(tmp_path)
    storage = Storage(root)
    log = MetadataLog(root, compact_interval=10, cleanup=False)
    for b in range(200):
        record = CommitRecord.new(b, "6abb5a0d-query", b + 7)
        assert log.add(b, record.log_entries(storage, 1_700_000_000_000 + b, [_entry(root, f"part-{b}")], rows=1))
    entries = log.get(199) or []
    records = [r for r in map(CommitRecord.from_entry, entries) if r is not None]
    assert [(r.log_batch_id, r.query_batch_id) for r in records] == [(0, 7), (199, 206)]
    assert len(entries) == 200 + 2 and sum(not e.is_dir for e in entries) == 200
    inferred = attribute(records, range(200))
    assert [(b, r.query_batch_id) for b, r in inferred.items()] == [(b, b + 7) for b in range(200)]
