"""An output whose committed batches are all empty (an aggregation's first watermark batches, a quiet source)
reads as an empty table with the stream's schema in ``spark.read.parquet``, as Spark's own sink output does:
Spark's sink commits one schema-only file for an empty unpartitioned batch. Spark's sink run on the same stream
is the oracle (issue 36, item 4)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from parquet_sink import ParquetSink, read_committed, write_batch
from tests.helpers.spark_util import run_available_now, write_input_files

SCHEMA = "id long, k string, t timestamp, d decimal(20,3), a array<int>"


def _stream(spark, src: str):
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(src)


def _counts(spark, src: str):
    """A windowed count of the events in ``src``, in append mode: nothing until the watermark passes a window."""
    from pyspark.sql import functions as F

    events = spark.readStream.schema(SCHEMA).json(src).withWatermark("t", "1 hour")
    return events.groupBy(F.window("t", "10 minutes"), "k").count()


def _read(spark, root: str):
    """(schema as Spark reads it, row count), or the error class Spark's reader raises."""
    try:
        df = spark.read.parquet(root)
        return [(f.name, f.dataType.simpleString()) for f in df.schema], df.count()
    except Exception as exc:  # noqa: BLE001 - compared with the oracle's failure
        return type(exc).__name__, "UNABLE_TO_INFER_SCHEMA" in str(exc)


@pytest.fixture(scope="module")
def oracle(spark, tmp_path_factory: pytest.TempPathFactory):
    """``oracle(query, batches, **options)``: what Spark's reader gives on Spark's own sink's output of the stream
    ``query(spark, input)`` over input files of ``batches`` (``run_available_now``'s ``options``). Spark's sink runs
    once per module for each stream: the writer params of a test compare with the same output."""
    outputs: dict[str, tuple] = {}

    def read(query, batches: list[list[dict]], **options) -> tuple:
        key = repr((query.__name__, batches, sorted(options.items())))
        if key not in outputs:
            work = tmp_path_factory.mktemp("spark-sink")
            write_input_files(str(work / "in"), batches)
            run_available_now(query(spark, str(work / "in")), str(work / "ck"), path=str(work / "out"), **options)
            outputs[key] = _read(spark, str(work / "out"))
        return outputs[key]

    return read


@pytest.mark.xdist_group("spark-sink-oracle")  # the params on one worker: one Spark sink run for both writers
@pytest.mark.parametrize("writer", ["spark", "arrow"])
@pytest.mark.parametrize("partition_by", [[], ["k"]], ids=["unpartitioned", "partitioned"])
def test_all_empty_batches_read_as_spark_sinks_output(spark, oracle, tmp_path: Path, writer: str,
                                                      partition_by: list[str]):
    src = str(tmp_path / "in")
    write_input_files(src, [[], [], []])  # three empty micro-batches
    ours = str(tmp_path / "ours")
    sink = ParquetSink(ours, partition_by=partition_by, writer=writer)
    run_available_now(_stream(spark, src), str(tmp_path / "ck-ours"), sink)
    assert [p.batch_id for p in sink.recent_progress] == [0, 1, 2] and sum(p.rows for p in sink.recent_progress) == 0
    expected = oracle(_stream, [[], [], []], partitionBy=partition_by)
    if not partition_by:
        assert expected[1] == 0 and [name for name, _ in expected[0]] == ["id", "k", "t", "d", "a"], "the oracle"
    assert _read(spark, ours) == expected
    table = read_committed(ours)
    assert table.num_rows == 0
    if not partition_by:
        assert table.column_names == ["id", "k", "t", "d", "a"]
        assert len([p for p in Path(ours).glob("*.parquet")]) == 1, "one schema-only file, for the first batch"
    # the next batch with rows appends to it as usual
    write_input_files(src, [[], [], [], [{"id": 7, "k": "x", "t": "2026-01-01T00:00:00Z", "d": 1.5, "a": [1]}]])
    run_available_now(_stream(spark, src), str(tmp_path / "ck-ours"), sink)
    assert read_committed(ours).column("id").to_pylist() == [7]
    assert [r.id for r in spark.read.parquet(ours).collect()] == [7]


def test_write_batch_of_an_empty_table_reads_with_its_schema(spark, tmp_path: Path):
    out = str(tmp_path / "out")
    empty = pa.table({"id": pa.array([], pa.int64()), "name": pa.array([], pa.string())})
    assert write_batch(out, empty, app_id="a", version=0).committed
    assert write_batch(out, empty, app_id="a", version=1).committed
    assert _read(spark, out) == ([("id", "bigint"), ("name", "string")], 0)
    assert read_committed(out).schema == empty.schema
    assert len(list(Path(out).glob("*.parquet"))) == 1


@pytest.mark.xdist_group("spark-sink-oracle")
@pytest.mark.parametrize("writer", ["spark", "arrow"])
def test_an_aggregations_first_watermark_batches(spark, oracle, tmp_path: Path, writer: str):
    """A windowed count in append mode emits nothing until the watermark passes a window: its first batches are
    empty. Spark's sink output then reads as an empty table with the aggregate's schema; so does ours."""
    src = str(tmp_path / "in")
    events = [[{"id": i, "k": "a", "t": "2026-11-24T06:00:00Z"} for i in range(3)]]
    write_input_files(src, events)
    ours = str(tmp_path / "ours")
    sink = ParquetSink(ours, writer=writer)
    run_available_now(_counts(spark, src), str(tmp_path / "ck-ours"), sink, outputMode="append")
    assert sink.recent_progress and sum(p.rows for p in sink.recent_progress) == 0, "nothing emitted yet"
    expected = oracle(_counts, events, outputMode="append")
    assert expected[1] == 0 and [name for name, _ in expected[0]] == ["window", "k", "count"], "the oracle"
    assert _read(spark, ours) == expected
    assert read_committed(ours).column_names == ["window", "k", "count"]
