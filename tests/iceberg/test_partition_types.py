"""A partition column whose values are all null when the Iceberg table is created: Iceberg (format 2) has no null
type and promotes no ``string`` to another type, so it is a column without a partition field until its first value,
which gives it its type (read_committed's) and its identity partition field. Every reader (pyiceberg, polars,
duckdb's iceberg extension) then reads ``p=0`` as the integer 0, not "0", and every snapshot before as it was
committed (p null)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.expressions import EqualTo
from pyiceberg.table import StaticTable

from parquet_sink import committed_files, read_committed, sync_iceberg, write_batch
from parquet_sink.iceberg.sync import MARKER
from tests.iceberg.readers import assert_mirrors
from tests.iceberg.test_duckdb import _duckdb


def _batch(version: int, values: pa.Array) -> pa.Table:
    return pa.table({"i": pa.array([version * 10 + j for j in range(len(values))], pa.int64()), "k": values})


def _by_id(table: pa.Table) -> list[tuple]:
    return sorted(zip(table.column("i").to_pylist(), table.column("k").to_pylist()))


@pytest.mark.parametrize("how", ["per batch", "one catch-up sync", "catalog"])
def test_a_partition_column_created_of_nulls_takes_the_type_of_its_first_values(tmp_path, how, monkeypatch):
    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")
    root = tmp_path / "out"
    catalog = {"name": "c", "type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
               "warehouse": f"file://{tmp_path / 'wh'}"}
    target = {"catalog": catalog, "table": "db.events"} if how == "catalog" else True
    ints = pa.int64()
    for version, values in enumerate([[None, None], [0, None], [7]]):
        write_batch(str(root), _batch(version, pa.array(values, ints)), app_id="a", version=version,
                    partition_by=["k"], iceberg=None if how == "one catch-up sync" else target)
    if how == "catalog":
        table = load_catalog(**catalog).load_table("db.events")
    else:
        table = StaticTable.from_metadata(sync_iceberg(str(root)).metadata_location)
    committed = read_committed(str(root))
    assert committed.schema.field("k").type == pa.int32()
    current = table.scan().to_arrow()
    assert current.schema.field("k").type == pa.int32()  # not a string holding "0"
    assert _by_id(current) == _by_id(committed) == [(0, None), (1, None), (10, 0), (11, None), (20, 7)]
    frame = pl.scan_iceberg(table).collect()
    assert frame.schema["k"] == pl.Int32 and _by_id(frame.to_arrow()) == _by_id(committed)
    assert _by_id(table.scan(row_filter="k == 0").to_arrow()) == [(10, 0)]
    assert _by_id(table.scan(row_filter="k is null").to_arrow()) == [(0, None), (1, None), (11, None)]
    snapshots = assert_mirrors(table, root)  # every snapshot, pyiceberg and polars, read_committed(as_of_batch)'s rows
    first = table.scan(snapshot_id=snapshots[0]).to_arrow()  # committed while k was null only: as it was read then
    assert _by_id(first) == [(0, None), (1, None)] and first.schema.field("k").type in (pa.string(), pa.large_string())
    assert [f.name for f in table.spec().fields] == ["k"]
    found = _duckdb(table.metadata_location, {
        "current": (None, ""), "first": (snapshots[0], ""), "zero": (None, "WHERE k = 0"),
        "second": (snapshots[1], ""),
    })
    assert found["current"] == [[0, None], [1, None], [10, 0], [11, None], [20, 7]]
    assert found["first"] == [[0, None], [1, None]]
    assert found["second"] == [[0, None], [1, None], [10, 0], [11, None]]
    assert found["zero"] == [[10, 0]]


def test_a_partition_column_created_of_nulls_whose_first_value_is_a_string(tmp_path):
    """The column keeps its type (``string``) and gets its partition field: files committed since are pruned by it
    (the null partition's too), those committed before are not (they have no partition value of it)."""
    root = tmp_path / "out"
    for version, values in enumerate([[None], ["x", None]]):
        write_batch(str(root), _batch(version, pa.array(values, pa.string())), app_id="a", version=version,
                    partition_by=["k"], iceberg=True)
    table = StaticTable.from_metadata(sync_iceberg(str(root)).metadata_location)
    assert table.schema().find_field("k").field_id == 2  # the column the table was created with
    assert [f.name for f in table.spec().fields] == ["k"]
    assert _by_id(table.scan(row_filter="k == 'x'").to_arrow()) == [(10, "x")]
    tasks = table.scan(row_filter="k == 'x'").plan_files()
    planned = sorted(t.file.file_path.split("/out/")[1].split("/")[0] for t in tasks)
    # the null partition's file of batch 1 pruned; batch 0's, committed before k had a partition field, is not
    assert planned == ["k=__HIVE_DEFAULT_PARTITION__", "k=x"] and len(committed_files(str(root))) == 3
    assert _by_id(table.scan().to_arrow()) == _by_id(read_committed(str(root)))
    assert int(table.current_snapshot().summary[MARKER]) == 1


def test_a_retyped_column_keeps_its_place_and_a_name_spark_escapes_is_found(tmp_path):
    """Two partition columns created of nulls, the first named with a character Spark escapes in directory names
    (``p:q``, directory ``p%3Aq=...``): retyped, it stays before the second, as read_committed orders them."""
    root = tmp_path / "out"
    ints = pa.int64()
    for version, values in enumerate([[None], [3]]):
        rows = pa.table({"i": pa.array([version], ints), "p:q": pa.array(values, ints), "z": pa.array([None], ints)})
        write_batch(str(root), rows, app_id="a", version=version, partition_by=["p:q", "z"], iceberg=True)
    table = StaticTable.from_metadata(sync_iceberg(str(root)).metadata_location)
    committed = read_committed(str(root))
    current = table.scan().to_arrow()
    assert current.column_names == committed.column_names == ["i", "p:q", "z"]
    assert current.schema.field("p:q").type == committed.schema.field("p:q").type == pa.int32()
    assert sorted(current.column("p:q").to_pylist(), key=str) == [3, None]
    assert [f.name for f in table.spec().fields] == ["p:q"]  # z: all null yet, no partition field


def test_a_partition_column_named_with_a_character_spark_escapes(tmp_path):
    """``p:q`` (directory ``p%3Aq=3``, as Spark writes it) is the table's column and partition field ``p:q``: the sync
    looked for the escaped name and failed (ValueError) on any such output."""
    root = tmp_path / "out"
    write_batch(str(root), pa.table({"i": [1, 2], "p:q": [3, None]}), app_id="a", version=0, partition_by=["p:q"])
    table = StaticTable.from_metadata(sync_iceberg(str(root)).metadata_location)
    assert [f.name for f in table.spec().fields] == ["p:q"]
    assert _by_id(table.scan(row_filter=EqualTo("p:q", 3)).to_arrow().rename_columns(["i", "k"])) == [(1, 3)]
