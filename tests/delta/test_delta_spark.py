"""With Spark: ParquetSink(..., delta_log=True) on both writer paths, and an output written by Spark's own
``writeStream.format("parquet")`` then synced; a failed attempt's stray file stays out of Delta; every Delta reader
equals read_committed, and ``spark.read.parquet`` still reads ``_spark_metadata`` (it ignores ``_delta_log``)."""

from __future__ import annotations

from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parquet_sink import ParquetSink, read_committed, sync_delta_log
from parquet_sink.delta import APP_ID, DeltaRangeError
from parquet_sink.maintenance import verify
from tests.delta.readers import assert_delta_matches, data_commits, delta_files
from tests.helpers.spark_util import run_available_now, write_input_files

SCHEMA = "id long, cat string, v double, at timestamp"
CATS = ["a b", "c:d", None, "plain"]


def _inputs(src: str, batches: int, per: int) -> None:
    write_input_files(src, [
        [{"id": b * per + i, "cat": CATS[(b + i) % 4], "v": i / 2, "at": f"2024-01-0{1 + i % 3}T0{i % 9}:00:00.123456Z"}
         for i in range(per)]
        for b in range(batches)
    ])


def _stream(spark, src: str):
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(src)


def _stray(out: str) -> str:
    """A complete Parquet file of a failed attempt inside a partition directory: no reader may see it."""
    name = "cat=plain/part-00099-stray.c000.snappy.parquet"
    pq.write_table(pa.table({"id": [10**9], "v": [0.0], "at": pa.array([None], pa.timestamp("us"))}), Path(out, name))
    return name


def _spark_equals_committed(spark, out: str, expected: pa.Table) -> None:
    rows = sorted((r.id, r.cat, r.v) for r in spark.read.parquet(out).collect())
    assert rows == sorted(zip(*(expected.column(c).to_pylist() for c in ("id", "cat", "v"))))


@pytest.mark.parametrize("writer", ["spark", "arrow"])
def test_sink_with_delta_log(spark, tmp_path, writer):
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    _inputs(src, 3, 8)
    sink = ParquetSink(out, partition_by=["cat"], compact_interval=2, writer=writer, delta_log=True)
    run_available_now(_stream(spark, src), str(tmp_path / "ckpt"), sink)
    assert (Path(out) / "_spark_metadata" / "1.compact").exists()
    assert deltalake.DeltaTable(out).transaction_version(APP_ID) == 2
    assert len(data_commits(out)) == 3  # one Delta commit per batch
    stray = _stray(out)
    assert stray not in delta_files(out)
    expected = assert_delta_matches(out)
    assert sorted(expected.column("id").to_pylist()) == list(range(24))
    _spark_equals_committed(spark, out, expected)
    assert verify(out).ok and not verify(out).warnings


def test_spark_file_sink_output_then_sync(spark, tmp_path):
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    _inputs(src, 4, 6)
    spark.conf.set("spark.sql.streaming.fileSink.log.compactInterval", "2")
    try:
        run_available_now(_stream(spark, src), str(tmp_path / "ckpt"), path=out, partitionBy=["cat"])
    finally:
        spark.conf.unset("spark.sql.streaming.fileSink.log.compactInterval")
    assert (Path(out) / "_spark_metadata" / "1.compact").exists()
    _stray(out)
    result = sync_delta_log(out)
    assert (result.created, result.log_batch_id) == (True, 3)
    expected = assert_delta_matches(out)
    assert sorted(expected.column("id").to_pylist()) == list(range(24))
    # Spark's reader keeps reading _spark_metadata, not _delta_log (hidden), nor the stray file
    _spark_equals_committed(spark, out, expected)
    assert spark.read.parquet(out).count() == 24


def test_sink_refuses_a_timestamp_no_delta_log_can_hold_before_its_commit(spark, tmp_path):
    """Issue 54, item 8: a delta_log=True sink committed a batch holding a timestamp in year 10000 (Spark holds
    it, Delta cannot): every later sync failed and Delta readers silently stayed at the batch before. Now the batch
    is refused before its commit (DeltaRangeError), its files deleted, and once the value is fixed every reader
    reads every committed row: read_committed, Spark, delta-rs. Spark's writer path: INT96 timestamps, whose
    footers carry no bounds, so the check reads the column (write_batch's pyarrow files: test_formats.py)."""
    out = str(tmp_path / "out")
    sink = ParquetSink(out, writer="spark", delta_log=True)
    batch = "select id, timestamp_seconds(id * {scale}) as at from range({start}, {end})"
    sink(spark.sql(batch.format(scale=1, start=0, end=3)), 0)
    before = sorted(str(p) for p in Path(out).rglob("*") if "_delta_log" not in p.parts)
    with pytest.raises(DeltaRangeError, match=r"column 'at' holds a value outside 0001-01-01\.\.9999-12-31"):
        sink(spark.sql(batch.format(scale=253402300800 // 4, start=3, end=5)), 1)  # id 4: 10000-01-01
    assert sorted(str(p) for p in Path(out).rglob("*") if "_delta_log" not in p.parts) == before
    sink(spark.sql(batch.format(scale=1, start=3, end=5)), 1)
    assert sorted(read_committed(out).column("id").to_pylist()) == list(range(5))
    assert sorted(r.id for r in spark.read.parquet(out).collect()) == list(range(5))
    assert sorted(deltalake.DeltaTable(out).to_pyarrow_table().column("id").to_pylist()) == list(range(5))
