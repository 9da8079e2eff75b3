"""A data column holding nulls only when an output that keeps an Iceberg table gets it. Given Arrow's or Spark's null
type (``pa.nulls(n)``, ``lit(None)``), its files store Parquet's null type, which pyiceberg's reader refuses in a
format 2 table (every scan of the table failed with a ValueError, every snapshot), and the output's schema rule keeps
that type for every later batch (its first values could never be written): the writers refuse it before the commit
(IcebergRefusalError naming the column, nothing committed). Given a type (``pa.nulls(n, pa.int64())``), the column is
the table's of that type from the start, and its later values are read by every reader at every snapshot."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.table import StaticTable

from parquet_sink import ParquetSink, read_committed, sync_iceberg, write_batch
from parquet_sink.iceberg import IcebergRefusalError
from tests.iceberg.readers import assert_mirrors
from tests.iceberg.test_duckdb import _duckdb


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and ".iceberg" not in p.parts)


def test_a_column_of_the_null_type_is_refused_before_the_commit(tmp_path):
    root = tmp_path / "out"
    with pytest.raises(IcebergRefusalError, match=r"version 0 of app 'a'.*column 'k' is null .*pa\.int64") as raised:
        write_batch(str(root), pa.table({"i": [0], "k": pa.nulls(1)}), app_id="a", version=0, iceberg=True)
    assert raised.value.column == "k" and str(root) in str(raised.value)
    assert not list(root.rglob("*.parquet"))  # nothing committed, no file left
    # with the type its values will have: committed, and the table reads them at every snapshot
    for version, values in enumerate([[None, None], [None], [3, None]]):
        rows = pa.table({"i": [version * 10 + j for j in range(len(values))], "k": pa.array(values, pa.int64())})
        assert write_batch(str(root), rows, app_id="a", version=version, iceberg=True).committed
    table = StaticTable.from_metadata(sync_iceberg(str(root)).metadata_location)
    assert table.schema().find_field("k").field_type.__class__.__name__ == "LongType"
    snapshots = assert_mirrors(table, root)  # pyiceberg and polars, every snapshot: read_committed(as_of_batch)'s rows
    found = _duckdb(table.metadata_location, {str(b): (s, "") for b, s in snapshots.items()})
    for batch in snapshots:
        expected = read_committed(str(root), as_of_batch=batch)
        assert found[str(batch)] == sorted([r["i"], r["k"]] for r in expected.to_pylist())
    assert read_committed(str(root)).schema.field("k").type == pa.int64()


def test_parquet_sink_refuses_a_void_column(spark, tmp_path):
    """Spark's ``NullType`` (``lit(None)``), which Spark's writer stores as Parquet's null type too (a BOOLEAN
    column): refused as write_batch refuses it; before, the batch was committed and every Iceberg sync failed on its
    file (pyiceberg: "Unexpected physical type BOOLEAN for string"), the table behind for good."""
    from pyspark.sql import functions as F

    root = tmp_path / "out"
    sink = ParquetSink(str(root), iceberg=True)
    with pytest.raises(IcebergRefusalError, match="column 'k' is null"):
        sink(spark.range(2).withColumn("k", F.lit(None)), 0)
    assert not list(root.rglob("*.parquet"))
    sink(spark.range(2).withColumn("k", F.lit(None).cast("bigint")), 0)
    table = StaticTable.from_metadata(sync_iceberg(str(root)).metadata_location)
    assert_mirrors(table, root, latest=0)
    assert sorted(table.scan().to_arrow().column("k").to_pylist(), key=str) == [None, None]
