"""One log, two sinks (issue 53 items 1, 2 and 4), with Spark's own file sink (``writeStream.format("parquet")``) as
the oracle: it skips every batch id the log already holds ("Skipping already committed batch"), so any commit of ours
after its newest batch makes its query skip its next batch, rows lost without an error.

* ``write_batch``, ``ParquetSink(..., on_foreign_query="append")`` and ``optimize`` refuse an output whose newest log
  batch Spark's sink committed (:class:`~parquet_sink.errors.SparkSinkBatchError`, nothing written) unless told that
  query is stopped for good (``spark_sink_stopped=True``), all deciding with
  :func:`~parquet_sink.log.entry.committed_by_spark_sink`.
* That decision goes by the commit record alone, whatever the batch holds: a Spark batch without a file (a partitioned
  query's empty micro-batch: a log file holding only ``v1``) is Spark's.
* Spark's sink killed between its log commit and its checkpoint's ``commits/N``, then the same checkpoint under
  ``ParquetSink``: the refusal says what ``doctor`` says (finish that batch with Spark's own sink first), and that
  advice, followed literally, leaves every row once in both readers.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pytest

from parquet_sink import MetadataLog, ParquetSink, doctor, errors, read_committed, write_batch
from parquet_sink.log.compaction import CompactibleLog
from parquet_sink.log.entry import committed_by_spark_sink, records_of
from parquet_sink.log.snapshot import read_snapshot
from parquet_sink.maintenance import optimize
from parquet_sink.write.conflicts import spark_sink_window
from tests.helpers.spark_util import run_available_now

SCHEMA = "id long, k string"
_MTIME = time.time() - 10_000  # input files' mtimes: increasing with their index, so the source takes them in order


def _add_input(src: Path, index: int, ids: list[int], k: str = "a") -> None:
    """The ``index``-th input file (one micro-batch with ``maxFilesPerTrigger=1``); no ids: an empty batch."""
    src.mkdir(parents=True, exist_ok=True)
    path = src / f"{index:04d}.json"
    path.write_text("\n".join(json.dumps({"id": i, "k": k}) for i in ids))
    os.utime(path, (_MTIME + index, _MTIME + index))


def _stream(spark, src: Path):
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(src))


def _spark_sink(spark, src: Path, ckpt: Path, out: Path, **options) -> None:
    """Run Spark's own file sink on ``ckpt`` until the source is drained."""
    run_available_now(_stream(spark, src), str(ckpt), path=str(out), **options)


def _our_sink_refusal(spark, src: Path, ckpt: Path, sink: ParquetSink) -> errors.ParquetSinkError:
    """Run ``sink`` on ``ckpt``, which must fail; the typed error it failed with."""
    with pytest.raises(Exception) as failed:
        run_available_now(_stream(spark, src), str(ckpt), sink)
    refused = errors.original_error(failed.value)
    assert refused is not None, failed.value
    return refused


def _data_files(out: Path) -> set[str]:
    return {str(p.relative_to(out)) for p in out.rglob("*.parquet")}


def _ids_once(spark, out: Path, expected: list[int]) -> None:
    """Every id of ``expected`` exactly once, in both readers."""
    assert sorted(read_committed(str(out)).column("id").to_pylist()) == sorted(expected)
    assert sorted(r.id for r in spark.read.parquet(str(out)).select("id").collect()) == sorted(expected)


def test_write_batch_beside_a_running_spark_sink_is_refused(spark, tmp_path: Path) -> None:
    """Spark's sink writes batch 0; a backfill with write_batch committed log batch 1, and Spark's next batch 1 was
    skipped: its rows in no reader, no error. Now the backfill is refused, nothing written, and goes in once that
    query is stopped for good (spark_sink_stopped=True)."""
    src, out, ckpt = tmp_path / "src", tmp_path / "out", tmp_path / "ckpt"
    _add_input(src, 0, list(range(5)))
    _spark_sink(spark, src, ckpt, out)
    before = _data_files(out)
    backfill = pa.table({"id": pa.array(range(1000, 1003), pa.int64()), "k": ["b"] * 3})
    predicted = doctor(str(out), app_id="backfill", version=0).plan  # doctor predicts it with the same decision
    assert (predicted.action, predicted.ok) == ("spark", False) and "spark_sink_stopped=True" in predicted.message
    assert doctor(str(out), app_id="backfill", version=0, spark_sink_stopped=True).plan.action == "commit"
    with pytest.raises(errors.SparkSinkBatchError) as refused:
        write_batch(str(out), backfill, app_id="backfill", version=0)
    message = str(refused.value)
    assert isinstance(refused.value, errors.ParquetSinkError)
    for said in (str(out), "version 0 of app 'backfill'", "newest log batch 0", "skip its batch 1", "Nothing was written",
                 "spark_sink_stopped=True", "another output path"):
        assert said in message, (said, message)
    assert MetadataLog(str(out)).latest_batch_id() == 0 and _data_files(out) == before

    _add_input(src, 1, list(range(100, 105)))  # Spark's query goes on: its batch 1 is not skipped
    _spark_sink(spark, src, ckpt, out)
    expected = [*range(5), *range(100, 105)]
    _ids_once(spark, out, expected)

    # the query is stopped for good: the backfill goes in, once, and a retry writes nothing
    assert write_batch(str(out), backfill, app_id="backfill", version=0, spark_sink_stopped=True).committed
    assert not write_batch(str(out), backfill, app_id="backfill", version=0).committed
    _ids_once(spark, out, [*expected, 1000, 1001, 1002])


def test_sink_appending_beside_a_running_spark_sink_is_refused(spark, tmp_path: Path) -> None:
    """ParquetSink(on_foreign_query="append") on another checkpoint committed after Spark's sink's batch 0 and that
    query skipped its batch 1. Now refused, nothing written; with spark_sink_stopped=True it appends."""
    src, out, ckpt = tmp_path / "src", tmp_path / "out", tmp_path / "ckpt"
    ours_src, ours_ckpt = tmp_path / "ours-src", tmp_path / "ours-ckpt"
    _add_input(src, 0, list(range(5)))
    _spark_sink(spark, src, ckpt, out)
    _add_input(ours_src, 0, list(range(500, 503)))
    before = _data_files(out)
    refused = _our_sink_refusal(spark, ours_src, ours_ckpt, ParquetSink(str(out), on_foreign_query="append"))
    assert isinstance(refused, errors.SparkSinkBatchError), refused
    # its batch 0 may be Spark's re-run of log batch 0 (the same checkpoint) or another query's: both are said
    for said in (str(out), "batch 0 of query", "newest batch 0 was committed by Spark's own file sink",
                 "finish that batch with Spark's own sink first", "would make it skip its next batch",
                 "spark_sink_stopped=True"):
        assert said in str(refused), (said, str(refused))
    assert MetadataLog(str(out)).latest_batch_id() == 0 and _data_files(out) == before

    _add_input(src, 1, list(range(100, 105)))
    _spark_sink(spark, src, ckpt, out)
    _ids_once(spark, out, [*range(5), *range(100, 105)])

    # without on_foreign_query: ForeignQueryError, whose advice (once that query is stopped for good) is run literally
    foreign = _our_sink_refusal(spark, ours_src, ours_ckpt, ParquetSink(str(out)))
    assert isinstance(foreign, errors.ForeignQueryError), foreign
    advice = "ParquetSink(..., on_foreign_query='append', spark_sink_stopped=True)"
    assert advice in str(foreign) and "stopped for good" in str(foreign), str(foreign)
    sink = ParquetSink(str(out), on_foreign_query="append", spark_sink_stopped=True)
    run_available_now(_stream(spark, ours_src), str(ours_ckpt), sink)
    _ids_once(spark, out, [*range(5), *range(100, 105), *range(500, 503)])


def test_optimize_refuses_when_spark_s_newest_batch_holds_no_file(spark, tmp_path: Path) -> None:
    """A partitioned Spark-sink query's empty micro-batch leaves a log file with only ``v1``: optimize took the newest
    batch for not Spark's (it looked for a data entry) and committed its batches, and Spark's sink skipped its next
    batch. Now refused as any Spark-sink batch; with spark_sink_stopped=True it compacts."""
    src, out, ckpt = tmp_path / "src", tmp_path / "out", tmp_path / "ckpt"
    for index, ids in enumerate([[0, 1], [2, 3], []]):
        _add_input(src, index, ids)
    _spark_sink(spark, src, ckpt, out, partitionBy=["k"])
    assert (out / "_spark_metadata" / "2").read_text() == "v1"  # Spark's empty batch: no entry at all
    with pytest.raises(errors.SparkSinkBatchError) as refused:
        optimize(str(out))
    assert str(out) in str(refused.value) and "newest log batch 2" in str(refused.value)
    with pytest.raises(errors.SparkSinkBatchError):
        optimize(str(out), dry_run=True)  # the dry run says what the run would do
    assert MetadataLog(str(out)).latest_batch_id() == 2

    _add_input(src, 3, [4, 5])
    _spark_sink(spark, src, ckpt, out, partitionBy=["k"])
    _ids_once(spark, out, list(range(6)))
    result = optimize(str(out), spark_sink_stopped=True)
    assert result.committed and result.plan.files_removed == 3
    _ids_once(spark, out, list(range(6)))


def test_who_committed_the_newest_batch_goes_by_the_commit_record_alone(tmp_path: Path) -> None:
    """Ours: a batch with our commit record, kept through our compaction (records per run); Spark's: a batch without
    one, whether it holds only the version line, files, or is a compact file."""
    out = str(tmp_path / "out")

    def spark_newest() -> bool:
        snap = read_snapshot(MetadataLog(out, compact_interval=3))
        return committed_by_spark_sink(records_of(snap.table), snap.latest)

    assert not spark_newest()  # an empty log
    for version in range(4):  # 2.compact keeps the run's ends
        write_batch(out, pa.table({"id": [version]}), app_id="app", version=version, compact_interval=3)
        assert not spark_newest()
    log = MetadataLog(out, compact_interval=3)
    assert log.add(4, [])  # as Spark's sink commits an empty batch: "v1"
    assert Path(out, "_spark_metadata", "4").read_text() == "v1" and spark_newest()
    assert log.add(5, [])  # a compact file without a record of batch 5
    assert Path(out, "_spark_metadata", "5.compact").exists() and spark_newest()
    write_batch(out, pa.table({"id": [9]}), app_id="app", version=9, compact_interval=3, spark_sink_stopped=True)
    assert not spark_newest()


def test_refusal_in_spark_s_commit_window_says_finish_with_spark_s_sink_and_that_works(spark, tmp_path: Path) -> None:
    """Spark's sink killed between its log commit of batch 1 and its checkpoint's commits/1, then the same checkpoint
    under ParquetSink: the error called it "a new checkpoint on an old output" and offered on_foreign_query='append',
    which committed the re-run batch 1 twice. Now it says what doctor says, from the same function; followed literally
    (Spark's own sink once more, then ParquetSink), every row is there once in both readers."""
    src, out, ckpt = tmp_path / "src", tmp_path / "out", tmp_path / "ckpt"
    _add_input(src, 0, list(range(5)))
    _add_input(src, 1, list(range(100, 105)))
    _spark_sink(spark, src, ckpt, out)
    (ckpt / "commits" / "1").unlink()  # the state a kill in Spark's commit window leaves
    (ckpt / "commits" / ".1.crc").unlink(missing_ok=True)
    window = spark_sink_window(1, 1, True)
    assert window is not None and "finish that batch with Spark's own sink first" in window

    refused = _our_sink_refusal(spark, src, ckpt, ParquetSink(str(out)))
    assert isinstance(refused, errors.ForeignQueryError), refused
    assert window in str(refused) and str(out) in str(refused) and "batch 1 of query" in str(refused)
    assert "new checkpoint on an old output" not in str(refused)
    assert window in doctor(str(out), checkpoint=str(ckpt)).plan.message  # the same advice
    appending = _our_sink_refusal(spark, src, ckpt, ParquetSink(str(out), on_foreign_query="append"))
    assert isinstance(appending, errors.SparkSinkBatchError) and window in str(appending)
    assert MetadataLog(str(out)).latest_batch_id() == 1

    # the advice, literally: run the query once more with Spark's own sink, then restart it with ParquetSink
    _spark_sink(spark, src, ckpt, out)
    assert (ckpt / "commits" / "1").exists()
    assert doctor(str(out), checkpoint=str(ckpt)).plan.action == "commit"
    _add_input(src, 2, list(range(200, 205)))
    run_available_now(_stream(spark, src), str(ckpt), ParquetSink(str(out)))
    assert MetadataLog(str(out)).latest_batch_id() == 2
    _ids_once(spark, out, [*range(5), *range(100, 105), *range(200, 205)])


def _spark_wins(monkeypatch, out: str, batch: int) -> None:
    """Spark's own sink commits log batch ``batch`` (an empty micro-batch: ``v1``) right before the writer under test
    creates that log file: a commit race it loses, on real storage (as tests/write/test_neighbours.py stages them)."""
    real_add = CompactibleLog.add

    def add(self, batch_id, entries, removed=frozenset()):
        if batch_id == batch and not Path(out, "_spark_metadata", str(batch)).exists():
            assert real_add(MetadataLog(out), batch, [])
        return real_add(self, batch_id, entries, removed)

    monkeypatch.setattr(CompactibleLog, "add", add)


def test_optimize_losing_its_batch_to_spark_s_sink_refuses_and_swaps_nothing(tmp_path: Path, monkeypatch) -> None:
    """Between optimize's read and its commit, Spark's sink commits the batch it was about to take (its first empty
    batch): the re-read refuses as the first read would, its new files deleted, nothing swapped."""
    out = str(tmp_path / "out")
    for version in range(3):
        write_batch(out, pa.table({"id": [version]}), app_id="app", version=version)
    before = _data_files(Path(out))
    _spark_wins(monkeypatch, out, 3)
    with pytest.raises(errors.SparkSinkBatchError, match="newest log batch 3 .*Nothing was swapped"):
        optimize(out)
    assert MetadataLog(out).latest_batch_id() == 3 and _data_files(Path(out)) == before
    assert sorted(read_committed(out).column("id").to_pylist()) == [0, 1, 2]


def test_write_batch_losing_its_batch_to_spark_s_sink_refuses(tmp_path: Path, monkeypatch) -> None:
    """write_batch loses its log batch to Spark's sink: the re-read refuses to commit after it, nothing committed."""
    out = str(tmp_path / "out")
    write_batch(out, pa.table({"id": [0]}), app_id="app", version=0)
    _spark_wins(monkeypatch, out, 1)
    with pytest.raises(errors.SparkSinkBatchError, match="newest log batch 1 .*Nothing was committed"):
        write_batch(out, pa.table({"id": [1]}), app_id="app", version=1)
    assert MetadataLog(out).latest_batch_id() == 1
    assert read_committed(out).column("id").to_pylist() == [0]


def test_sink_losing_its_batch_to_spark_s_sink_refuses(spark, tmp_path: Path, monkeypatch) -> None:
    """The sink loses its log batch to Spark's sink: it does not move its commit after Spark's batch (which that
    query would then skip), it refuses, nothing committed."""
    out = str(tmp_path / "out")
    sink = ParquetSink(out)
    sink(spark.createDataFrame([(0, "a")], SCHEMA), 0)
    _spark_wins(monkeypatch, out, 1)
    with pytest.raises(errors.SparkSinkBatchError, match="newest log batch 1 .*Nothing was committed"):
        sink(spark.createDataFrame([(1, "a")], SCHEMA), 1)
    assert MetadataLog(out).latest_batch_id() == 1
    assert read_committed(out).column("id").to_pylist() == [0]


def test_decisions_after_a_batch_of_spark_s_sink() -> None:
    """The pure decisions every writer and doctor take: only the query Spark's sink ran, taken over with its
    checkpoint (its next batch id is the log's next batch), commits after Spark's newest batch without the override."""
    from parquet_sink.read.chain import decide_write
    from parquet_sink.write.sink import CommitRecord, decide_batch

    ours = {"q": CommitRecord(2, "q", 2, "c")}
    assert decide_batch(4, {}, "q", 5, spark_newest=True) == ("commit", 5)  # the migration, same checkpoint
    assert decide_batch(4, {}, "q", 5, append=True, spark_newest=True) == ("commit", 5)
    assert decide_batch(4, {}, "q", 0, append=True, spark_newest=True) == ("spark", None)
    assert decide_batch(4, {}, "q", 0, append=True, spark_newest=True, spark_sink_stopped=True) == ("commit", 5)
    assert decide_batch(4, {}, "q", 4, spark_newest=True) == ("foreign", None)  # the commit window: advice apart
    assert decide_batch(4, ours, "q", 3, spark_newest=True) == ("spark", None)  # our query, Spark's sink beside it
    assert decide_batch(4, ours, "q", 3, spark_newest=True, spark_sink_stopped=True) == ("commit", 5)
    assert decide_batch(4, ours, "q", 2, spark_newest=True) == ("skip", 2)  # a replay is never refused
    assert decide_write(4, {}, "app", 0, spark_newest=True) == ("spark", 4)
    assert decide_write(4, {}, "app", 0, spark_newest=True, spark_sink_stopped=True) == ("commit", 5)
    assert decide_write(4, {"app": CommitRecord(3, "app", 0, "c-f")}, "app", 0, spark_newest=True) == ("skip", 3)
    assert spark_sink_window(4, 5, True) is None and spark_sink_window(4, 4, False) is None

