"""Exactly-once after Spark's own file sink compacted the log (issue 54, the output model's
``replay-after-spark-compaction``): Spark's compaction (``CompactibleFileStreamLog.compact``) re-serialises every entry
as its ``SinkFileStatus`` (seven keys), so every key of ours is gone from its compact file, the commit records with
them. A record's entry names the record in its path, which Spark keeps verbatim: a replay of the last sink batch (both
writer paths) or a retry of ``write_batch``'s last version, after such a compaction, is still seen as committed and
writes nothing, also when the first attempt was killed right after its log commit (the ``after_commit`` failpoint) or
inside it (``commit_publish``: not committed, then committed once). Spark's readers and Spark's sink go on as before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from parquet_sink import ParquetSink, read_committed, verify, write_batch
from parquet_sink.log.entry import CommitRecord, records_of
from parquet_sink.log.snapshot import read_snapshot
from parquet_sink.log.metadata_log import MetadataLog
from tests.helpers.crash_util import assert_group_gone, start_child
from tests.helpers.spark_util import spark_sink_batch

OPTIMIZE_CHILD = Path(__file__).resolve().parents[1] / "helpers" / "optimize_child.py"
SCHEMA = "id long"
INTERVAL = "spark.sql.streaming.fileSink.log.compactInterval"


def _frame(spark, ids: list[int]):
    return spark.createDataFrame([(i,) for i in ids], SCHEMA)


def _spark_compacts(spark, out: Path, ids: list[int]) -> None:
    """Spark's own sink commits the log's next batches up to a compaction batch (interval 2), ``ids`` in that one:
    its compact file holds every entry with Spark's seven keys only."""
    latest = MetadataLog(str(out), cleanup=False).latest_batch_id()
    compaction = latest + 1 + latest % 2  # the next batch b with (b + 1) % 2 == 0
    spark.conf.set(INTERVAL, "2")
    try:
        for batch in range(latest + 1, compaction + 1):
            spark_sink_batch(spark, _frame(spark, ids if batch == compaction else []), str(out), batch)
    finally:
        spark.conf.unset(INTERVAL)
    compact = (out / "_spark_metadata" / f"{compaction}.compact").read_bytes()
    assert b'"commitId"' not in compact  # every key of ours gone


def _once(spark, out: Path, expected: list[int]) -> None:
    """Every id once, in our reader and in Spark's, and the log well formed."""
    assert sorted(read_committed(str(out)).column("id").to_pylist()) == expected
    assert sorted(r.id for r in spark.read.parquet(str(out)).collect()) == expected
    assert verify(str(out)).ok


def _committer(spark, tmp_path: Path, writer: str, **sink_options):
    """``commit(ids, version, **options)``: ``write_batch`` of app "nightly load" at ``version`` into
    ``tmp_path/out``, or the sink (``writer``'s path, ``sink_options``) with a checkpoint's query id at batch
    ``version``; returns the write's result (the sink's ``last_progress``)."""
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    ckpt.mkdir(exist_ok=True)
    (ckpt / "metadata").write_text(json.dumps({"id": "8c1d6f0e-query"}))
    if writer == "write_batch":
        def commit(ids: list[int], version: int, **options):
            return write_batch(str(out), pa.table({"id": ids}), app_id="nightly load", version=version, **options)
    else:
        def commit(ids: list[int], version: int, **options):
            sink = ParquetSink(str(out), writer=writer, checkpoint_location=str(ckpt), **sink_options, **options)
            sink(_frame(spark, ids), version)
            return sink.last_progress
    return commit


@pytest.mark.parametrize("writer", ["spark", "arrow", "write_batch"])
def test_a_replay_after_spark_s_compaction_commits_nothing(spark, tmp_path: Path, writer: str) -> None:
    out = tmp_path / "out"
    commit = _committer(spark, tmp_path, writer, on_foreign_query="append")
    first = commit([0, 1], 0, compact_interval=2)
    assert first.log_batch_id == 0
    _spark_compacts(spark, out, [2])
    again = commit([0, 1], 0, spark_sink_stopped=True)  # the restart replays its last batch (version)
    _once(spark, out, [0, 1, 2])
    assert (not again.committed and again.log_batch_id == 0) if writer == "write_batch" else again.skipped, again
    records = records_of(read_snapshot(MetadataLog(str(out), cleanup=False)).table)
    assert [(r.log_batch_id, r.query_batch_id) for r in records] == [(0, 0)]  # read from its entry's name
    if writer == "write_batch":  # (the sink's paths go on alike: the output model draws them)
        commit([3], 1, spark_sink_stopped=True)  # the writer goes on after Spark's batch
        spark_sink_batch(spark, _frame(spark, [4]), str(out), 3)  # so does Spark's own sink (its next batch id)
        _once(spark, out, [0, 1, 2, 3, 4])


@pytest.mark.parametrize("point", ["commit_publish", "after_commit"])
def test_a_killed_commit_then_spark_s_compaction_then_the_retry_commits_once(spark, tmp_path: Path, point: str) -> None:
    """write_batch killed inside its log commit (nothing committed) or right after it (committed, no answer), then
    Spark's sink compacts the log: the retry of the version commits it once."""
    out = tmp_path / "out"
    write_batch(str(out), pa.table({"id": [0]}), app_id="load", version=0, compact_interval=2)
    table = pa.table({"id": [1, 2]})
    with pa.OSFile(str(tmp_path / "v1.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as ipc:
        ipc.write_table(table)
    config = {"out": str(out), "table": str(tmp_path / "v1.arrow"), "kwargs": {"app_id": "load", "version": 1}}
    child = start_child(tmp_path / "children", config, failpoints=f"{point}=kill", script=OPTIMIZE_CHILD)
    assert child.wait() == -9, child.log_tail()
    assert_group_gone(child.pgid)
    committed = point == "after_commit"
    assert MetadataLog(str(out), cleanup=False).latest_batch_id() == (1 if committed else 0)
    _spark_compacts(spark, out, [3])
    retry = write_batch(str(out), table, app_id="load", version=1, spark_sink_stopped=True)
    _once(spark, out, [0, 1, 2, 3])
    assert retry.committed is not committed and retry.log_batch_id == (1 if committed else 2), retry


def test_a_record_s_entry_names_every_id_exactly() -> None:
    """Any query or app id and commit id (spaces, dots, slashes, '~', '%', non-ASCII) round-trips through the name."""
    from parquet_sink.log.entry import LogEntry, with_marker_records, entries_table

    for query, query_batch in (("a b/c.d~e%f", 7), ("λ-ü", 12), (None, 12), ("", 0)):
        record = CommitRecord(12, query, query_batch, "9f1c0a7e5b3d2c41-5e0d")
        name = record.marker_name
        assert "/" not in name and "%" not in name and ".." not in name
        bare = LogEntry(f"file:///o/_spark_metadata/{name}", 0, True, 1, 0, 0, "add")  # as Spark's compaction left it
        assert CommitRecord.from_entry(LogEntry.from_json(bare.to_json())) == record
        table = with_marker_records(entries_table([LogEntry("file:///o/a.parquet", 5), bare]))
        assert records_of(table) == [record]
        # column-wise as one by one: a compact file's columnar copy equals its JSON parsed (verify compares them)
        assert table == entries_table([LogEntry("file:///o/a.parquet", 5), LogEntry.from_json(bare.to_json())])


@pytest.mark.parametrize("writer", ["spark", "arrow", "write_batch"])
def test_replays_after_compactions_that_thinned_the_records_commit_nothing(spark, tmp_path: Path, writer: str) -> None:
    """Our compactions keep a query's first and newest record only (an app's every record: each carries its data's
    fingerprint); the replay of the newest batch (version), and a retry of an older version, commit nothing, before
    and after Spark's own sink compacted the thinned log."""
    out = tmp_path / "out"
    commit = _committer(spark, tmp_path, writer)
    for batch in range(6):  # compactions at batches 1, 3 and 5
        assert commit([batch], batch, compact_interval=2).log_batch_id == batch
    records = records_of(read_snapshot(MetadataLog(str(out), cleanup=False)).table)
    kept = list(range(6)) if writer == "write_batch" else [0, 5]  # the old rule kept every compaction's end: 0, 1, 3, 5
    assert [(r.log_batch_id, r.query_batch_id) for r in records] == [(b, b) for b in kept]
    if writer == "write_batch":  # every record keeps its fingerprint: a retry of an old version is compared with it
        assert all(r.fingerprint for r in records)
    for version in (5, 2) if writer == "write_batch" else (5,):  # a query replays its newest batch only
        again = commit([version], version)
        assert (not again.committed and again.log_batch_id == 5) if writer == "write_batch" else again.skipped
    _once(spark, out, list(range(6)))
    _spark_compacts(spark, out, [6])  # Spark's sink: batch 6, then 7.compact with its seven keys only
    records = records_of(read_snapshot(MetadataLog(str(out), cleanup=False)).table)
    assert [(r.log_batch_id, r.query_batch_id) for r in records] == [(b, b) for b in kept]  # from the entries' names
    again = commit([5], 5, spark_sink_stopped=True)
    assert (not again.committed and again.log_batch_id == 5) if writer == "write_batch" else again.skipped
    _once(spark, out, list(range(7)))
