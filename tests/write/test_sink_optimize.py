"""The sink's opt-in compaction (issue 37, item 1): ``ParquetSink(path, optimize_every=N, target_file_size=...)``
compacts the output's small files on a driver thread after every N-th batch, off the batch's critical path; its
commits race the stream's next commits safely; it never fails the query. Oracles: Spark's own readers
(``spark.read.parquet``, the streaming file source on the output) and ``read_committed`` each read every input
row once.
"""

from __future__ import annotations

import pickle
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from parquet_sink import MetadataLog, ParquetSink, history, read_committed
from parquet_sink.errors import OptimizeError, ParameterError
from parquet_sink.write.rewrite import BackgroundOptimizer
from tests.helpers.spark_util import run_available_now, write_input_files
from tests.maintenance.test_optimize import _assert_statistics_of_every_file

SCHEMA = "id long, cat string"


def _batches(n: int, per: int) -> list[list[dict]]:
    return [[{"id": b * per + i, "cat": ["a b", None, "c=d"][(b + i) % 3]} for i in range(per)] for b in range(n)]


def _streamed_ids(spark, out: str, checkpoint: str) -> list[int]:
    """The ids Spark's streaming file source on the output emits (an availableNow run from ``checkpoint``)."""
    seen: list[int] = []

    def collect(df, _batch_id: int) -> None:
        seen.extend(r[0] for r in df.select("id").collect())

    stream = spark.readStream.schema(SCHEMA).parquet(out)
    run_available_now(stream, checkpoint, collect)
    return seen


@pytest.mark.parametrize("partition_by", [[], ["cat"]])
def test_a_stream_with_optimize_every_compacts_and_every_reader_reads_every_row_once(
    spark, tmp_path: Path, partition_by: list[str]
) -> None:
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    batches = _batches(12, 5)
    write_input_files(src, batches)
    expected = sorted(r["id"] for b in batches for r in b)
    sink = ParquetSink(out, partition_by=partition_by, optimize_every=4, target_file_size="1MB")
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(src)
    run_available_now(stream, str(tmp_path / "ckpt"), sink)
    assert sink.optimizer.wait(120)
    assert sink.optimizer.error is None
    operations = Counter(history(out).column("operation").to_pylist())
    assert operations["optimize"] >= 1 and operations["append"] == 12, operations
    assert sorted(read_committed(out).column("id").to_pylist()) == expected
    assert sorted(r[0] for r in spark.read.parquet(out).select("id").collect()) == expected
    assert sorted(_streamed_ids(spark, out, str(tmp_path / "read-ckpt"))) == expected
    assert MetadataLog(out).check() == []
    _assert_statistics_of_every_file(out)  # the optimize's files too (issue 54, item 2)
    live = len(read_committed(out, columns=["id"]).column("id"))
    assert live == len(expected)


def test_the_optimizer_never_fails_the_query_and_keeps_a_typed_error(tmp_path: Path) -> None:
    """An optimize that cannot run (here: no output yet) leaves a typed error for the caller, raises nothing."""
    optimizer = BackgroundOptimizer(str(tmp_path / "none"), None, every=2)
    assert not optimizer.after_batch(0)  # batch 0 is not a 2nd batch
    assert optimizer.after_batch(1)
    assert optimizer.wait(60)
    assert optimizer.last is None and optimizer.error is not None
    assert "none" in str(optimizer.error) and not isinstance(optimizer.error, OptimizeError)
    assert pickle.loads(pickle.dumps(optimizer)).error is None  # shipped with the sink: settings only


@pytest.mark.parametrize("every", [0, -1, "3", True, 2.5])
def test_bad_optimize_every_is_refused(tmp_path: Path, every) -> None:
    with pytest.raises(ParameterError, match="optimize_every"):
        ParquetSink(str(tmp_path / "out"), optimize_every=every)


@pytest.mark.parametrize("every", [3, None])
def test_bad_target_file_size_is_refused_at_construction(tmp_path: Path, every: int | None) -> None:
    with pytest.raises(ParameterError, match="target_file_size='big' is not a size"):
        ParquetSink(str(tmp_path / "out"), optimize_every=every, target_file_size="big")


def test_the_stream_and_a_background_optimize_race_without_loss(spark, tmp_path: Path) -> None:
    """Every batch starts an optimize (optimize_every=1), so each of the stream's commits races one: the stream
    and its optimizes lose races to each other, nothing fails, every row once."""
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    batches = _batches(15, 3)
    write_input_files(src, batches)
    sink = ParquetSink(out, partition_by=["cat"], optimize_every=1, target_file_size="1MB")
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(src)
    query = run_available_now(stream, str(tmp_path / "ckpt"), sink)
    assert query.exception() is None
    assert sink.optimizer.wait(120) and sink.optimizer.error is None
    expected = sorted(r["id"] for b in batches for r in b)
    assert sorted(read_committed(out).column("id").to_pylist()) == expected
    assert sorted(r[0] for r in spark.read.parquet(out).select("id").collect()) == expected
    table = read_committed(out)
    assert isinstance(table, pa.Table)


def test_a_stream_with_delta_log_and_optimize_every_mirrors_each_swap(spark, tmp_path: Path) -> None:
    """``delta_log=True`` with ``optimize_every``: each background swap becomes an OPTIMIZE commit of the Delta log
    (dataChange=false), the Delta view equals the log's, and a Delta stream replay sees every row once."""
    deltalake = pytest.importorskip("deltalake")
    from parquet_sink.delta.sync import compare_logs
    from tests.maintenance.test_optimize_delta import _streamed_rows

    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    batches = _batches(9, 4)
    write_input_files(src, batches)
    sink = ParquetSink(out, partition_by=["cat"], optimize_every=3, target_file_size="1MB", delta_log=True)
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(src)
    run_available_now(stream, str(tmp_path / "ckpt"), sink)
    assert sink.optimizer.wait(120) and sink.optimizer.error is None
    from parquet_sink import sync_delta_log

    sync_delta_log(out)  # a swap committed after the last batch's sync
    expected = sorted(r["id"] for b in batches for r in b)
    operations = [h["operation"] for h in deltalake.DeltaTable(out).history()]
    assert "OPTIMIZE" in operations
    assert sorted(deltalake.DeltaTable(out).to_pyarrow_table().column("id").to_pylist()) == expected
    assert sorted(_streamed_rows(out).column("id").to_pylist()) == expected
    assert compare_logs(out) == ([], [])
