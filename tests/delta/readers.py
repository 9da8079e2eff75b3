"""What every Delta test checks: the Delta log lists exactly the committed files, and each Delta reader
(delta-rs to Arrow and to a pyarrow dataset, polars ``read_delta``/``scan_delta``, duckdb over delta-rs's
dataset) returns exactly ``read_committed``'s rows with the same types, in its own type system."""

from __future__ import annotations

import datetime
import decimal
import json
import math
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import deltalake
import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from parquet_sink import MetadataLog, committed_files, read_committed
from parquet_sink.delta.actions import delta_schema
from parquet_sink.log.entry import LogEntry
from parquet_sink.rebase import to_proleptic
from parquet_sink.partitioning import DEFAULT_PARTITION_NAME, parse_partition_path, unescape_path_name
from parquet_sink.storage.filesystem import Storage
from parquet_sink.write.parquet_files import WriteSpec, write_rows

DAY_MS = 86_400_000
LAST_MILLISECOND = "9999-12-31T23:59:59.999Z"  # a timestamp max there is truncated, as the protocol says


def spark_style_batch(
    log: MetadataLog, table: pa.Table, partition_by: tuple[str, ...], old: bool, time_zone: str = "UTC"
) -> int:
    """Commit ``table`` as the next batch of ``log`` the way Spark's own sink logs one (no commit record),
    its entries logged 30 days ago when ``old`` (a compaction with retention then drops them), timestamp
    partitions in ``time_zone``; its batch id."""
    storage: Storage = log.storage
    latest = log.latest_batch_id() if storage.exists(storage.root) else None
    batch = 0 if latest is None else latest + 1
    statuses = write_rows(WriteSpec(storage, partition_by, "snappy", None, time_zone), [table])
    mtime = int(time.time() * 1000) - (30 * DAY_MS if old else 0)
    assert log.add(batch, [LogEntry(storage.to_uri(s.path), s.size, False, mtime) for s in statuses])
    return batch


def _key(row: tuple) -> tuple:
    return tuple((v is None, str(v)) for v in row)


def canonical(value: Any) -> Any:
    """``value`` with every NaN, at any depth, as one marker (NaN equals nothing, itself included)."""
    if isinstance(value, float) and value != value:
        return "<NaN>"
    if isinstance(value, dict):
        return {k: canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(canonical(v) for v in value)
    return value


def rows(table: pa.Table, columns: list[str]) -> list[tuple]:
    """The rows of ``table`` as tuples in ``columns`` order, sorted (every reader orders files its own way),
    NaN made comparable."""
    if not table.num_rows:
        return []
    return sorted((canonical(row) for row in zip(*(table.column(c).to_pylist() for c in columns))), key=_key)


def in_table_types(out: str, expected: pa.Table, schema: pa.Schema, options: dict[str, Any]) -> pa.Table:
    """``expected`` (read_committed's rows) in the Delta table's types ``schema``. A partition column the table
    keeps as a string while read_committed infers another type from its directory names (retention dropped the
    values that made it a string, and a kept file holds a value) holds the names themselves in the table:
    ``0.0``, where a cast of the double would say ``0``. Those are taken from the directory of each row's file
    (by ``id``)."""
    partition_columns = deltalake.DeltaTable(out).metadata().partition_columns
    named = [c for c in partition_columns
             if pa.types.is_string(schema.field(c).type) and not pa.types.is_string(expected.schema.field(c).type)]
    if not named or "id" not in expected.column_names:
        return expected.cast(schema)
    directory_of: dict[int, dict[str, str | None]] = {}
    for file in committed_files(out, **options):
        values = {c: None if raw == DEFAULT_PARTITION_NAME else unescape_path_name(raw)
                  for c, raw in parse_partition_path(file.relative_path)}
        for row_id in pq.read_table(file.path, columns=["id"]).column("id").to_pylist():
            directory_of[row_id] = values
    ids = expected.column("id").to_pylist()
    table = expected
    for name in named:
        index = table.schema.get_field_index(name)
        strings = pa.array([directory_of[i].get(name) for i in ids], pa.string())
        table = table.set_column(index, pa.field(name, pa.string()), strings)
    return table.cast(schema)


def delta_files(out: str) -> set[str]:
    """The files the latest Delta version lists, relative to the root and decoded."""
    actions = pa.table(deltalake.DeltaTable(out).get_add_actions(flatten=False))
    return set(map(unquote, actions.column("path").to_pylist()))


def assert_delta_matches(out: str, time_zone: str = "UTC", **options: Any) -> pa.Table:
    """Delta files == committed files; every Delta reader == ``read_committed`` (rows and types). Types: as
    read_committed's, but Delta's: timestamps are UTC (``timestamp``), a partition column of nulls only a string.
    ``time_zone``: the writer's, for timestamp partition directories (polars' own reader is then left out: it
    reads partition values from directory names, not from the Delta log)."""
    assert delta_files(out) == {f.relative_path for f in committed_files(out, **options)}
    expected = read_committed(out, time_zone=time_zone, **options)
    table = deltalake.DeltaTable(out)
    if not expected.num_columns:  # nothing committed (retention dropped every file): no schema to compare
        assert table.to_pyarrow_table().num_rows == 0 and pl.read_delta(out).height == 0
        return expected
    columns = expected.column_names
    # a partition column keeps the table's type when retention dropped the values that decided it (a string
    # column whose remaining directory names all read as numbers): the same values, in the table's type
    kept = {c: pa.schema(table.schema()).field(c).type for c in table.metadata().partition_columns}
    schema = pa.schema([f.with_type(kept.get(f.name, f.type)) for f in delta_schema(expected.schema)])
    # the same columns of the same types; their order may differ: read_committed orders them as the files still
    # committed first hold them, the Delta table as they arrived (retention dropping the older files of an
    # evolved schema changes the first, never the second; added partitioned columns: see test_sync.py)
    want_types = sorted((f.name, str(f.type)) for f in schema)
    in_types = in_table_types(out, expected, schema, options)
    want = rows(in_types, columns)

    # A column whose every file retention dropped stays in the Delta schema (Delta never drops a column on its
    # own), all null; read_committed, reading the remaining files' footers as Spark does, has no such column.
    arrow = table.to_pyarrow_table()
    kept_only = [name for name in arrow.column_names if name not in columns]
    assert all(arrow.column(name).null_count == arrow.num_rows for name in kept_only), kept_only
    assert sorted((f.name, str(f.type)) for f in arrow.schema if f.name in columns) == want_types
    assert rows(arrow, columns) == want
    dataset = table.to_pyarrow_dataset()
    assert sorted((f.name, str(f.type)) for f in dataset.schema if f.name in columns) == want_types
    assert rows(dataset.to_table(), columns) == want

    expected_pl = pl.from_arrow(in_types)
    frames = [pl.read_delta(out, use_pyarrow=True), pl.scan_delta(out, use_pyarrow=True).collect()]
    if time_zone == "UTC":  # polars' own reader takes partition values from the directory names (docs/delta.md)
        frames += [pl.read_delta(out), pl.scan_delta(out).collect()]
    for frame in frames:
        frame = frame.select(expected_pl.columns)  # by name (the order may differ, see above)
        assert frame.schema == expected_pl.schema
        assert rows(frame.to_arrow(), columns) == rows(expected_pl.to_arrow(), columns)

    duck = duckdb.connect()
    duck.register("delta_dataset", dataset)
    duck.register("committed", in_types)
    names = ", ".join('"' + c.replace('"', '""') + '"' for c in columns)
    on_delta = duck.sql(f"select {names} from delta_dataset")
    on_committed = duck.sql(f"select {names} from committed")
    assert on_delta.types == on_committed.types
    found = sorted(map(canonical, on_delta.fetchall()), key=_key)
    assert found == sorted(map(canonical, on_committed.fetchall()), key=_key)
    assert duck.execute("select count(*) from delta_dataset").fetchall()[0][0] == expected.num_rows
    return expected


def data_commits(out: str) -> list[dict[str, Any]]:
    """The Delta versions that add or remove files: the history without the creation's second version, which
    records the session time zone as a table property (delta-rs takes none at creation)."""
    return [h for h in deltalake.DeltaTable(out).history() if h["operation"] != "SET TBLPROPERTIES"]


def _leaf_values(array: pa.Array, typ: pa.DataType, path: tuple[str, ...], out: dict) -> None:
    """The non-null values of every leaf reached through structs (parent nulls applied), by tuple path."""
    if pa.types.is_struct(typ):
        for field, child in zip(typ, array.flatten()):
            _leaf_values(child, field.type, path + (field.name,), out)
        return
    if pa.types.is_dictionary(typ):
        array = array.dictionary_decode()
    if pa.types.is_timestamp(typ) and typ.tz is not None:  # year 1 in New York is year 0: not a Python datetime
        array = array.cast(pa.timestamp(typ.unit, "UTC"))
    values = [v for v in array.to_pylist() if v is not None and v == v]  # NaN satisfies no bound
    out[path] = values


def _typed(value: Any, typ: pa.DataType) -> Any:
    """A bound from a stats JSON (parsed with Decimal floats) as a value comparable with the data's."""
    if pa.types.is_timestamp(typ):
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if pa.types.is_date(typ):
        return datetime.date.fromisoformat(value)
    if pa.types.is_decimal(typ):
        return decimal.Decimal(value)
    if pa.types.is_floating(typ):
        return float(value)
    return value


def _data_value(value: Any, typ: pa.DataType) -> Any:
    if pa.types.is_timestamp(typ) and value.tzinfo is None:
        return value.replace(tzinfo=datetime.UTC)
    return value


def _bound_at(stats: dict, key: str, path: tuple[str, ...]) -> Any:
    node = stats.get(key, {})
    for name in path:
        if not isinstance(node, dict) or name not in node:
            return None
        node = node[name]
    return node


def check_add_stats(root: str, add: dict, data_columns: pa.Schema, theirs: dict | None = None) -> None:
    """The ``stats`` of the add action ``add`` hold true bounds of the file's data as Spark reads it (every non-NaN,
    non-null
    value within them; null counts exact); with ``theirs`` (delta-rs's stats of the same file), every bound
    delta-rs writes that is true is ours too where our file's footer has bounds for the column."""
    stats = json.loads(add["stats"], parse_float=decimal.Decimal)
    parquet = pq.ParquetFile(f"{root}/{unquote(add['path'])}")
    metadata = parquet.metadata
    table = to_proleptic(parquet.read(), metadata)  # as Spark reads it (a LEGACY writer's dates: rebased)
    assert stats["numRecords"] == table.num_rows
    leaves: dict = {}
    for field in data_columns:
        if field.name in table.column_names:
            column = table.column(field.name).combine_chunks()
            _leaf_values(column, table.schema.field(field.name).type, (field.name,), leaves)
    types = {}
    for field in data_columns:
        stack = [((field.name,), field.type)]
        while stack:
            path, typ = stack.pop()
            if pa.types.is_struct(typ):
                stack += [(path + (f.name,), f.type) for f in typ]
            else:
                types[path] = typ
    for path, values in leaves.items():
        typ = types[path]
        nulls = _bound_at(stats, "nullCount", path)
        if nulls is not None:
            assert nulls == table.num_rows - len(values) - _nans(table, path), (path, nulls)
        their_nulls = None if theirs is None else _bound_at(theirs, "nullCount", path)
        if isinstance(their_nulls, int):  # delta-rs counts the same nulls
            assert nulls == their_nulls, (path, nulls, their_nulls)
        values = [_data_value(v, typ) for v in values]
        for key, pick, ok in (("minValues", min, lambda b, v: b <= v), ("maxValues", max, lambda b, v: b >= v)):
            ours = _bound_at(stats, key, path)
            if ours is not None and values and ours != LAST_MILLISECOND:  # the protocol's max, widened by readers
                assert ok(_typed(ours, typ), pick(values)), (path, key, ours, pick(values))
            if theirs is None or not values:
                continue
            their = _bound_at(theirs, key, path)
            if their is None or isinstance(their, dict):
                continue
            try:
                their_true = ok(_typed(their, typ), pick(values))
            except (TypeError, ValueError):
                their_true = False
            infinite = any(isinstance(v, float) and math.isinf(v) for v in values)  # we give both bounds or none
            if their_true and _footer_has_bounds(metadata, path) and not infinite:
                assert ours is not None, (path, key, their)


def _footer_has_bounds(metadata: pq.FileMetaData, path: tuple[str, ...]) -> bool:
    """Whether every row group of a footer has a min and max for the leaf at ``path`` (a string over the
    writer's statistics size has none: then no bound can be ours, whatever delta-rs's own file says)."""
    dotted = ".".join(path)
    for group in range(metadata.num_row_groups):
        for index in range(metadata.num_columns):
            column = metadata.row_group(group).column(index)
            if column.path_in_schema == dotted and (column.statistics is None or not column.statistics.has_min_max):
                return False
    return True


def _nans(table: pa.Table, path: tuple[str, ...]) -> int:
    """The NaN values of a float leaf (counted as values by Parquet, left out of the bounds' check)."""
    array = table.column(path[0]).combine_chunks()
    for name in path[1:]:
        array = array.flatten()[array.type.get_field_index(name)]
    if not pa.types.is_floating(array.type):
        return 0
    return sum(1 for v in array.to_pylist() if v is not None and v != v)


def add_actions(root: str) -> dict[str, dict]:
    """Every add action of the Delta log's JSON commits, by decoded path (the latest one per path)."""
    adds = {}
    for log in sorted(Path(root, "_delta_log").glob("*.json")):
        for line in filter(None, log.read_text().split("\n")):  # not splitlines: U+2028 may stand in a string
            action = json.loads(line)
            if "add" in action:
                adds[unquote(action["add"]["path"])] = action["add"]
    return adds
