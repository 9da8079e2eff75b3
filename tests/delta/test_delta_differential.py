"""The Delta log's differential: random schemas (every Delta type, nested, names at their edges), values at
their edges, several batches by two apps and Spark-style batches dropped by retention at compaction, each
followed by a sync. Oracle: ``read_committed``. Every Delta reader must return its rows, also with random
filters (comparisons on random columns and struct fields, values drawn from the data and next to it), each in
its own semantics: delta-rs's dataset and ``to_pyarrow_table(filters=)`` against the same pyarrow filter on
``read_committed``, polars ``scan_delta`` (its own reader and ``use_pyarrow``) against the same polars filter,
duckdb over delta-rs's dataset against the same WHERE. A filtered read that finds fewer rows is a bound that
is not one (statistics) or a partition value that does not parse back. Every add action's statistics are
checked true against the file's data and against what delta-rs's ``write_deltalake`` writes for the same
file; partition values against ``write_deltalake(..., partition_by=)`` of the same rows.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import time
from pathlib import Path
from typing import Any

import deltalake
import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest
import pyarrow.parquet as pq
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from parquet_sink import MetadataLog, committed_files, read_committed, sync_delta_log, write_batch
from parquet_sink.delta.errors import DeltaLogError
from parquet_sink.delta.sync import DeltaSyncResult
from parquet_sink.delta.actions import delta_schema
from tests.delta.readers import (
    add_actions, assert_delta_matches, canonical, check_add_stats, in_table_types, rows, spark_style_batch,
)
from tests.helpers.strategies import DELTA_ATOMIC, DeltaCase, delta_cases

OPS = ["==", "!=", "<", "<=", ">", ">="]
EXAMPLES = 12


def _settings(fuzz_minutes: float) -> settings:
    if fuzz_minutes:  # rounds of 25 new random examples until the minutes are up
        return settings(max_examples=25, derandomize=False, deadline=None, database=None,
                        suppress_health_check=list(HealthCheck), print_blob=True)
    # No shrinking in the default run (each example writes and reads an output): the first failure is reported.
    return settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])


def _write(case: DeltaCase, out: str) -> None:
    """The case's steps, each followed by the Delta log in step (a sync after it finds nothing to do)."""
    versions = {"a": 0, "b": 0}
    for step, (kind, who, batch_rows) in enumerate(case.steps):
        table = pa.Table.from_pylist(batch_rows, schema=case.schema_at(step))
        if kind == "write":
            write_batch(out, table, app_id=who, version=versions[who], partition_by=case.partitions,
                        compact_interval=2, retention="7d", time_zone=case.time_zone, delta_log=True,
                        spark_sink_stopped=True)  # the case's Spark-written batches: a query stopped for good
            versions[who] += 1
            if Path(out, "_delta_log").exists():
                result, recreated = _sync(out, case)
                assert recreated or not result.committed  # the writer's sync followed (or was refused: _sync)
        else:
            log = MetadataLog(out, compact_interval=2, retention="7d", cleanup=False)
            spark_style_batch(log, table, tuple(case.partitions), old=who, time_zone=case.time_zone)
            _sync(out, case)


def _sync(out: str, case: DeltaCase) -> tuple[DeltaSyncResult, bool]:
    """``sync_delta_log``; when a new directory name widened a partition column's inferred type (a timestamp
    column meeting ``9999-12-31 23:59:59.999999``, which Spark reads as a string), the sync refuses with a
    DeltaLogError and commits nothing (a Delta column's type cannot change): then what its message tells the
    user to do, a recreated Delta log. The result, and whether it was recreated."""
    try:
        return sync_delta_log(out, time_zone=case.time_zone), False
    except DeltaLogError as exc:
        assert "a new value widened it" in str(exc) and "--recreate" in str(exc), exc
        assert any(f"column {c!r} is" in str(exc) for c in case.partitions), exc  # a data column of nulls: retyped
        return sync_delta_log(out, time_zone=case.time_zone, recreate=True), True


# -- filters -------------------------------------------------------------------------------------------------


def _orderable(typ: pa.DataType) -> bool:
    return (pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_decimal(typ)
            or pa.types.is_string(typ) or pa.types.is_date(typ) or pa.types.is_timestamp(typ)
            or pa.types.is_boolean(typ))


def _targets(schema: pa.Schema) -> list[tuple[tuple[str, ...], pa.DataType]]:
    """The columns and struct fields a filter may compare: (path, Delta type)."""
    found = []
    for field in schema:
        if pa.types.is_struct(field.type):
            found += [((field.name, f.name), f.type) for f in field.type if _orderable(f.type)]
        elif _orderable(field.type):
            found.append(((field.name,), field.type))
    return found


def _column(table: pa.Table, path: tuple[str, ...]) -> pa.Array:
    array = table.column(path[0]).combine_chunks()
    if len(path) > 1:
        array = array.flatten()[array.type.get_field_index(path[1])]
    return array


def _near(value: Any, typ: pa.DataType) -> list[Any]:
    """``value`` and values next to it of the same type (one step of its precision either way)."""
    if pa.types.is_boolean(typ):
        return [value, not value]
    steps: list = []
    if pa.types.is_integer(typ):
        steps = [lambda v: v - 1, lambda v: v + 1]
    elif pa.types.is_floating(typ):
        steps = [lambda v: math.nextafter(v, -math.inf), lambda v: math.nextafter(v, math.inf)]
    elif pa.types.is_decimal(typ):
        step = decimal.Decimal(1).scaleb(-typ.scale)
        steps = [lambda v: v - step, lambda v: v + step]
    elif pa.types.is_string(typ):
        steps = [lambda v: v + "\x00", lambda v: v[:-1], lambda v: v[:32]]
    elif pa.types.is_date(typ):
        steps = [lambda v: v - dt.timedelta(days=1), lambda v: v + dt.timedelta(days=1)]
    elif pa.types.is_timestamp(typ):
        millis = lambda v: v.replace(microsecond=v.microsecond - v.microsecond % 1000)  # noqa: E731
        steps = [lambda v: v - dt.timedelta(microseconds=1), lambda v: v + dt.timedelta(microseconds=1), millis,
                 lambda v: millis(v) + dt.timedelta(milliseconds=1)]
    fits = [value]
    for step_of in steps:
        try:  # a value of the column's type (a float32 rounds to one), within its range
            fits.append(pa.scalar(step_of(value), typ).as_py())
        except (pa.ArrowInvalid, OverflowError, ValueError, decimal.InvalidOperation):
            continue
    return fits


@st.composite
def _filters(draw: st.DrawFn, table: pa.Table) -> list[tuple[tuple[str, ...], str, Any, pa.DataType]]:
    targets = [(path, typ) for path, typ in _targets(table.schema) if _column(table, path).null_count < table.num_rows]
    if not targets:
        return []
    found = []
    for _ in range(draw(st.integers(1, 3))):
        path, typ = draw(st.sampled_from(targets))
        values = [v for v in _column(table, path).to_pylist() if v is not None]
        value = draw(st.sampled_from(_near(draw(st.sampled_from(values)), typ)))
        ops = ["==", "!="] if pa.types.is_boolean(typ) else OPS
        found.append((path, draw(st.sampled_from(ops)), value, typ))
    return found


def _arrow_expression(path: tuple[str, ...], op: str, value: Any, typ: pa.DataType) -> ds.Expression:
    field, scalar = ds.field(*path), pa.scalar(value, typ)
    return {"==": field == scalar, "!=": field != scalar, "<": field < scalar, "<=": field <= scalar,
            ">": field > scalar, ">=": field >= scalar}[op]


def _polars_expression(path: tuple[str, ...], op: str, value: Any, typ: pa.DataType) -> pl.Expr:
    column = pl.col(path[0]) if len(path) == 1 else pl.col(path[0]).struct.field(path[1])
    literal = pl.lit(value, dtype=pl.from_arrow(pa.array([value], typ)).dtype)
    return {"==": column == literal, "!=": column != literal, "<": column < literal, "<=": column <= literal,
            ">": column > literal, ">=": column >= literal}[op]


def _duck_types(table: pa.Table) -> dict[str, str]:
    duck = duckdb.connect()
    duck.register("t", table)
    relation = duck.sql("select * from t")
    return dict(zip(relation.columns, map(str, relation.types)))


def _pyarrow_cast_limit(exc: Exception, typ: pa.DataType) -> None:
    """pyarrow does not cast a file's timestamp column to the Delta type for a filter (naive in the file, or of
    another unit or zone): it fails, it never returns wrong rows (docs/delta.md)."""
    text = str(exc)
    assert pa.types.is_timestamp(typ) and ("Cannot compare timestamp with timezone to timestamp without timezone"
                                           in text or "no kernel matching input types (timestamp" in text), exc


def _check_filter(out: str, expected: pa.Table, case: DeltaCase, spec: tuple) -> None:
    path, op, value, typ = spec
    columns = expected.column_names
    table = deltalake.DeltaTable(out)
    arrow = _arrow_expression(path, op, value, typ)
    want = rows(expected.filter(arrow), columns)
    # An infinity or a NaN has no JSON bound: delta-rs's dataset compares the missing bound with null and skips
    # the file (on its own tables too, docs/delta.md): its filtered reads are left out for such a column, and
    # so are polars' with use_pyarrow=True, which filters through that dataset.
    leaf = _column(expected, path)
    unbounded = pa.types.is_floating(typ) and pc.any(pc.invert(pc.is_finite(leaf))).as_py()
    if not unbounded:
        try:
            assert rows(table.to_pyarrow_dataset().to_table(filter=arrow), columns) == want, ("delta-rs dataset", spec)
            if len(path) == 1:
                filtered = table.to_pyarrow_table(filters=[(path[0], "=" if op == "==" else op, value)])
                assert rows(filtered, columns) == want, ("delta-rs table", spec)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid) as exc:
            _pyarrow_cast_limit(exc, typ)

    polars = _polars_expression(path, op, value, typ)
    frame = pl.from_arrow(expected)
    want_pl = rows(frame.filter(polars).to_arrow(), columns)
    scans = [] if unbounded else [pl.scan_delta(out, use_pyarrow=True)]
    scans += [pl.scan_delta(out)] if case.time_zone == "UTC" else []
    # polars with use_pyarrow=True filters in pyarrow, where NaN is no match: either semantics is the filter's
    nan = pa.types.is_floating(typ) and pc.any(pc.is_nan(_column(expected, path))).as_py()
    for scan in scans:
        try:
            found = scan.filter(polars).collect()
        except pl.exceptions.InvalidOperationError as exc:
            # polars 2.1's own reader casts a struct's statistics to the struct's type, which fails when the
            # struct holds a list or map (Delta has no statistics for them): on delta-rs's own tables too
            assert "structs do not have the same number of fields" in str(exc), exc
            continue
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid) as exc:  # use_pyarrow=True
            _pyarrow_cast_limit(exc, typ)
            continue
        except NameError as exc:  # polars 2.1 with use_pyarrow=True writes a NaN literal as the name NaN
            assert "NaN" in str(exc) and value != value, exc
            continue
        assert rows(found.to_arrow(), columns) in ([want_pl, want] if nan else [want_pl]), ("polars", spec)

    if len(path) == 1 and not unbounded:
        duck = duckdb.connect()
        duck.register("delta_dataset", table.to_pyarrow_dataset())
        duck.register("committed", expected)
        sql_op = "=" if op == "==" else op
        where = f'"{path[0]}" {sql_op} CAST($1 AS {_duck_types(expected)[path[0]]})'
        # by name: a column a later batch added may stand elsewhere in the Delta schema than in read_committed's
        selected = ", ".join(f'"{c}"' for c in columns)
        try:  # duckdb hands the filter to delta-rs's pyarrow dataset
            got = duck.execute(f"select {selected} from delta_dataset where {where}", [value]).fetchall()
        except duckdb.InvalidInputException as exc:
            _pyarrow_cast_limit(exc, typ)
            return
        want_duck = duck.execute(f"select {selected} from committed where {where}", [value]).fetchall()
        key = lambda row: tuple((v is None, str(v)) for v in row)  # noqa: E731
        assert sorted(map(canonical, got), key=key) == sorted(map(canonical, want_duck), key=key), ("duckdb", spec)


# -- statistics and partition values against delta-rs's own writer -----------------------------------------


def _check_actions(out: str, expected: pa.Table, case: DeltaCase, workdir: Path) -> None:
    data_columns = pa.schema([f for f in expected.schema if f.name not in case.partitions])
    live = {f.relative_path for f in committed_files(out)}
    adds = {p: a for p, a in add_actions(out).items() if p in live}
    assert set(adds) == live
    for index, (relative, add) in enumerate(sorted(adds.items())):
        file_table = pq.ParquetFile(f"{out}/{relative}").read()
        theirs_root = workdir / f"theirs-{index}"
        if not file_table.num_rows:  # the schema-only file of an all-empty first batch: delta-rs adds no file
            check_add_stats(out, add, data_columns)
            continue
        try:
            deltalake.write_deltalake(str(theirs_root), file_table.cast(delta_schema(file_table.schema)))
        except Exception:  # a shape delta-rs cannot write itself: our stats are still checked against the data
            check_add_stats(out, add, data_columns)
            continue
        (their,) = add_actions(str(theirs_root)).values()
        check_add_stats(out, add, data_columns, json.loads(their["stats"], parse_float=decimal.Decimal))
    if case.partitions and expected.num_rows:
        theirs_root = workdir / "theirs-partitioned"
        deltalake.write_deltalake(str(theirs_root), expected, partition_by=case.partitions)
        types = {c: expected.schema.field(c).type for c in case.partitions}

        def value(column: str, text: str | None) -> Any:
            """Doubles: Java's 1.0E-5 where delta-rs writes 0.00001, -0.0 where it writes -0; timestamps: delta-rs
            writes year 1 with ``.000000``, other years without (both the protocol's form): the same values."""
            if text is None:
                return None
            if pa.types.is_floating(types[column]):  # by repr: -0.0 and 0.0 are two directories, equal as floats
                return repr(float(text))
            if pa.types.is_timestamp(types[column]):
                return dt.datetime.fromisoformat(text)
            return text

        def parsed(values: dict) -> tuple:
            return tuple(sorted((c, value(c, v)) for c, v in values.items()))

        mine = {parsed(a["partitionValues"]) for a in adds.values()}
        theirs = {parsed(a["partitionValues"]) for a in add_actions(str(theirs_root)).values()}
        assert {tuple((c, str(v)) for c, v in m) for m in mine} == {tuple((c, str(v)) for c, v in t) for t in theirs}


def check_case(case: DeltaCase, workdir: Path, data: st.DataObject) -> None:
    out = str(workdir / "out")
    _write(case, out)
    if not Path(out, "_delta_log").exists():
        assert not len(committed_files(out))  # no file committed yet: no Delta log
        return
    committed = assert_delta_matches(out, time_zone=case.time_zone)
    if not committed.num_columns:
        return
    # in the table's types: a partition column keeps the type it was created with (a first batch of nulls
    # makes it a string; a later ``0`` does not make it a number), as assert_delta_matches compares
    table = deltalake.DeltaTable(out)
    kept = {c: pa.schema(table.schema()).field(c).type for c in table.metadata().partition_columns}
    table_schema = pa.schema([f.with_type(kept.get(f.name, f.type)) for f in delta_schema(committed.schema)])
    expected = in_table_types(out, committed, table_schema, {})
    _check_actions(out, expected, case, workdir)
    for spec in data.draw(_filters(expected), label="filters"):
        _check_filter(out, expected, case, spec)


def test_every_delta_reader_with_filters_matches_read_committed(tmp_path_factory, fuzz_minutes: float) -> None:
    """Random outputs (fixed seed, a few examples; ``--fuzz-minutes`` for a long random search)."""

    @_settings(fuzz_minutes)
    @given(delta_cases(), st.data())
    def run(case: DeltaCase, data: st.DataObject) -> None:
        check_case(case, tmp_path_factory.mktemp("delta-diff"), data)

    deadline = time.monotonic() + 60 * fuzz_minutes
    run()
    while time.monotonic() < deadline:
        run()


def test_filtered_reads_at_the_known_edges(tmp_path) -> None:
    """The shapes that broke before, as a plain case: a decimal(18,2) not exact as a double, a year below
    1000, a sub-millisecond maximum, a column ``x.y`` beside struct ``x`` with field ``y``."""
    schema = pa.schema([("id", pa.int64()), ("d", pa.decimal128(18, 2)), ("t", pa.timestamp("us", "UTC")),
                        ("x.y", pa.int64()), ("x", pa.struct([("y", pa.int64())]))])
    rows_ = [{"id": 0, "d": decimal.Decimal("1234567890123456.78"), "t": dt.datetime(999, 1, 1, 0, 0, 0, 999999, tzinfo=dt.UTC),
              "x.y": 100, "x": {"y": 1}}]
    out = str(tmp_path / "out")
    write_batch(out, pa.Table.from_pylist(rows_, schema=schema), app_id="a", version=0, delta_log=True)
    expected = read_committed(out)
    case = DeltaCase({}, [], [])
    for spec in [(("d",), "==", rows_[0]["d"], schema.field("d").type), (("t",), "==", rows_[0]["t"], pa.timestamp("us", "UTC")),
                 (("x.y",), "==", 100, pa.int64()), (("x", "y"), "==", 1, pa.int64()), (("x", "y"), ">=", 1, pa.int64())]:
        _check_filter(out, expected, case, spec)
    assert pl.scan_delta(out).filter(pl.col("x.y") == 100).collect().height == 1


def test_filtered_reads_of_a_file_without_bounds(tmp_path) -> None:
    """A float column whose only value in a file is NaN has no JSON bound: delta-rs's pyarrow dataset (and polars
    with use_pyarrow=True, and duckdb, which filter through it) skip that file for any filter on the column, on
    delta-rs's own tables too; polars' own reader and read_committed keep the row."""
    out = str(tmp_path / "out")
    for version, value in enumerate([0.0, math.nan]):
        table = pa.table({"id": pa.array([version], pa.int64()), "s p": pa.array([value], pa.float32())})
        write_batch(out, table, app_id="a", version=version, delta_log=True)
    expected = read_committed(out)
    _check_filter(out, expected, DeltaCase({}, [], []), (("s p",), "!=", 0.0, pa.float32()))
    assert pl.scan_delta(out).filter(pl.col("s p") != 0.0).collect()["id"].to_list() == [1]


def test_a_partition_column_created_all_null_then_numbers(tmp_path) -> None:
    """A partition column whose first values are all null is a string in the Delta table; a later ``0.0``
    directory retypes it to the double read_committed infers (no file it keeps holds a value: docs/delta.md):
    every reader, the add actions and filtered reads agree with read_committed. A column still all null stays a
    string."""
    out = str(tmp_path / "out")
    schema = pa.schema([("id", pa.int64()), ("s p", pa.float32()), ("x.y", pa.bool_())])
    for version, value in enumerate([None, 0.0]):
        table = pa.Table.from_pylist([{"id": version, "s p": value, "x.y": None}], schema=schema)
        write_batch(out, table, app_id="a", version=version, partition_by=["s p", "x.y"], delta_log=True)
    committed = assert_delta_matches(out)
    assert pa.types.is_floating(committed.schema.field("s p").type)
    case = DeltaCase({}, ["s p", "x.y"], [])
    table = deltalake.DeltaTable(out)
    kept = {c: pa.schema(table.schema()).field(c).type for c in table.metadata().partition_columns}
    assert kept["s p"] == pa.float64() and kept["x.y"] == pa.string()
    table_schema = pa.schema([f.with_type(kept.get(f.name, f.type)) for f in delta_schema(committed.schema)])
    expected = in_table_types(out, committed, table_schema, {})
    assert sorted(expected.column("s p").to_pylist(), key=str) == [0.0, None]
    _check_actions(out, expected, case, tmp_path)
    _check_filter(out, expected, case, (("s p",), "==", 0.0, pa.float64()))


def test_signed_zero_partitions_match_write_deltalake(tmp_path) -> None:
    """-0.0 and 0.0 of a double partition column are two directories and two partition values (delta-rs writes
    ``-0`` and ``0``); compared as floats they would be one."""
    out = str(tmp_path / "out")
    for version, value in enumerate([0.0, -0.0]):
        table = pa.table({"id": pa.array([version], pa.int64()), "s p": pa.array([value], pa.float64())})
        write_batch(out, table, app_id="a", version=version, partition_by=["s p"], delta_log=True)
    expected = assert_delta_matches(out)
    assert sorted(str(v) for v in expected.column("s p").to_pylist()) == ["-0.0", "0.0"]
    _check_actions(out, expected, DeltaCase({}, ["s p"], []), tmp_path)


def test_a_column_whose_files_retention_dropped(tmp_path) -> None:
    """A column added by a later batch whose every file retention then dropped stays in the Delta schema, all
    null (Delta never drops a column on its own); read_committed reads the remaining files as Spark does, without
    it: every reader agrees on the remaining columns."""
    kind = next(k for k in DELTA_ATOMIC if k.name == "bool")
    case = DeltaCase(columns={"x.y": kind, "s p": kind}, partitions=[], late={"x.y": 1}, time_zone="UTC", steps=[
        ("write", "a", []), ("write", "a", []), ("spark", True, [{"id": 0, "x.y": None, "s p": None}]),
        ("spark", True, [{"id": 1, "x.y": None, "s p": None}])])
    out = str(tmp_path / "out")
    _write(case, out)
    assert "x.y" in pa.schema(deltalake.DeltaTable(out).schema()).names
    assert "x.y" not in assert_delta_matches(out).column_names


@pytest.mark.parametrize("kind_name", ["int", "timestamp", "string"])
def test_a_data_column_of_nulls_typed_by_a_later_spark_batch(tmp_path, kind_name) -> None:
    """A data column of the null type in the first batches (a Delta string), given a type by a batch of Spark's
    own sink: the sync retyped no such column and refused every batch from there on; now every reader reads
    read_committed's rows and types, with filters on the column too."""
    kind = next(k for k in DELTA_ATOMIC if k.name == kind_name)
    value = {"int": 7, "timestamp": dt.datetime(2024, 1, 2, tzinfo=dt.UTC), "string": "x"}[kind_name]
    case = DeltaCase(columns={"c": kind}, partitions=[], late={}, nulls={"c": 2}, time_zone="UTC", steps=[
        ("write", "a", [{"id": 0, "c": None}]), ("spark", False, [{"id": 1, "c": None}]),
        ("spark", False, [{"id": 2, "c": value}, {"id": 3, "c": None}]), ("write", "b", [{"id": 4, "c": value}])])
    out = str(tmp_path / "out")
    _write(case, out)
    expected = assert_delta_matches(out)
    assert expected.schema.field("c").type == delta_schema(case.schema).field("c").type
    first = deltalake.DeltaTable(out, version=0)  # not recreated: the version before reads c as it declared it
    assert pa.schema(first.schema()).field("c").type == pa.string() and first.to_pyarrow_table().num_rows == 1
    for op in ("==", "!="):
        _check_filter(out, expected, case, (("c",), op, value, expected.schema.field("c").type))


def test_a_partition_type_widened_by_a_later_directory(tmp_path) -> None:
    """A timestamp partition column whose later directory (``9999-12-31 23:59:59.999999``: Spark reads a
    fraction of more than one digit as a string) widens the inferred type to string: the sync refuses (a Delta
    column's type cannot change) and commits nothing; recreated as its message says, every reader agrees."""
    kind = next(k for k in DELTA_ATOMIC if k.name == "timestamp")
    case = DeltaCase(columns={"t": kind}, partitions=["t"], late={}, time_zone="UTC", steps=[
        ("write", "a", [{"id": 0, "t": dt.datetime(1, 1, 1, tzinfo=dt.UTC)}]),
        ("write", "a", [{"id": 1, "t": dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC)}])])
    out = str(tmp_path / "out")
    _write(case, out)
    committed = assert_delta_matches(out)
    assert pa.types.is_string(committed.schema.field("t").type)
    assert pa.types.is_string(pa.schema(deltalake.DeltaTable(out).schema()).field("t").type)


@pytest.mark.parametrize("partitioned", [False, True])
def test_characters_beyond_the_basic_plane(tmp_path, partitioned) -> None:
    """A character beyond U+FFFF (U+20000, an emoji) in a string column and a partition value, in commits the sync
    writes itself (the first is delta-rs's): delta-rs read an escaped surrogate pair as another character, so the
    partition value was wrong and the bounds too low (a filtered read skipped every file but the first)."""
    out = str(tmp_path / "out")
    for version, value in enumerate(["\U00020000", "\U0001F600", "\U00020000"]):
        table = pa.table({"id": pa.array([version], pa.int64()), "s": [value], "p": [value]})
        write_batch(out, table, app_id="a", version=version, delta_log=True, partition_by=["p"] if partitioned else None)
    expected = assert_delta_matches(out)
    case = DeltaCase({}, ["p"] if partitioned else [], [])
    _check_filter(out, expected, case, (("s",), "==", "\U00020000", pa.string()))
    _check_filter(out, expected, case, (("p",), "==", "\U00020000", pa.string()))
    assert deltalake.DeltaTable(out).to_pyarrow_dataset().to_table(filter=ds.field("s") == "\U00020000").num_rows == 2
