"""Partition values, statistics and types of our add actions against what delta-rs's own write_deltalake
writes for the same data and partition columns, and against the data itself (every bound true, every
partition value read back as committed) at the edges of each type."""

from __future__ import annotations

import datetime as _dt
import decimal
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import deltalake
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from parquet_sink import MetadataLog, committed_files, read_committed, sync_delta_log, write_batch
from parquet_sink.delta import DeltaLogError, DeltaRangeError
from parquet_sink.errors import DamagedDataFileError, MissingDataFileError, SchemaMismatchError
from parquet_sink.log.entry import LogEntry
from parquet_sink.statistics import LeafStatistics, file_statistics
from parquet_sink.delta.actions import STRING_PREFIX, delta_partition_value, delta_schema, file_stats
from tests.delta.readers import add_actions, assert_delta_matches, check_add_stats, spark_style_batch


def _data() -> pa.Table:
    at = [_dt.datetime(2024, 1, 1, 1, 2, 3, 456789, tzinfo=_dt.UTC), _dt.datetime(2025, 6, 1, tzinfo=_dt.UTC), None]
    return pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "small": pa.array([-5, 7, None], pa.int32()),
            "v": [1.5, -2.25, None],
            "price": pa.array([decimal.Decimal("1.25"), decimal.Decimal("-3.50"), None], pa.decimal128(9, 2)),
            "name": ["b", "a", None],
            "long": ["z" * 40, "y" * 40, None],
            "flag": [True, False, None],
            "day": [_dt.date(2024, 1, 1), _dt.date(2024, 2, 29), None],
            "at": pa.array(at, pa.timestamp("us", "UTC")),
            "s": pa.array([{"a": 1}, {"a": 4}, None], pa.struct([("a", pa.int64())])),
            "pk": ["x y", "c:d", None],
            "pd": [_dt.date(2024, 1, 1), _dt.date(2024, 1, 1), None],
            "pn": pa.array([1, 2, None], pa.int32()),
        }
    )


def _adds(root: Path) -> dict[tuple, dict]:
    """The add actions of every commit, keyed by their partition values."""
    adds = {}
    for log in sorted((root / "_delta_log").glob("*.json")):
        for line in filter(None, log.read_text().split("\n")):  # not splitlines: U+2028 may stand in a string
            action = json.loads(line)
            if "add" in action:
                add = action["add"]
                adds[tuple(sorted(add["partitionValues"].items(), key=lambda kv: kv[0]))] = add
    return adds


def test_partition_values_stats_and_types_match_write_deltalake(tmp_path):
    data = _data()
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    partition_by = ["pk", "pd", "pn"]
    for row in range(3):  # one row per file, as delta-rs writes one file per partition
        write_batch(str(ours), data.slice(row, 1), app_id="a", version=row, partition_by=partition_by)
    sync_delta_log(str(ours))
    deltalake.write_deltalake(str(theirs), data, partition_by=partition_by)

    ours_adds, their_adds = _adds(ours), _adds(theirs)
    assert set(ours_adds) == set(their_adds)
    assert ("pk", None) in next(k for k in ours_adds if ("pn", None) in k)  # nulls as None
    data_columns = pa.schema([f for f in data.schema if f.name not in partition_by])
    for key, their in their_adds.items():
        mine = ours_adds[key]
        assert mine["partitionValues"] == their["partitionValues"]
        ours_stats, their_stats = json.loads(mine["stats"]), json.loads(their["stats"])
        assert ours_stats["numRecords"] == their_stats["numRecords"] == 1
        assert ours_stats["nullCount"] == their_stats["nullCount"]
        # every bound of ours is true, and every true one of delta-rs's is ours too (a string past 32 characters
        # cut, its max raised: a cut max is no upper bound; a timestamp max rounded up to the millisecond)
        check_add_stats(str(ours), mine, data_columns, json.loads(their["stats"], parse_float=decimal.Decimal))
        assert set(ours_stats["minValues"]) == set(their_stats["minValues"])
        assert set(ours_stats["maxValues"]) == set(their_stats["maxValues"])
        if their_stats["minValues"].get("long"):  # delta-rs keeps whole strings, we a prefix (max raised)
            assert ours_stats["minValues"]["long"] == their_stats["minValues"]["long"][:STRING_PREFIX]
            assert ours_stats["maxValues"]["long"] == their_stats["maxValues"]["long"][: STRING_PREFIX - 1] + chr(
                ord(their_stats["maxValues"]["long"][STRING_PREFIX - 1]) + 1)
        if their_stats["maxValues"].get("at"):  # delta-rs truncates the max down, we round it up
            their_at, our_at = (_dt.datetime.fromisoformat(s["maxValues"]["at"]) for s in (their_stats, ours_stats))
            assert _dt.timedelta(0) <= our_at - their_at <= _dt.timedelta(milliseconds=1)
    assert deltalake.DeltaTable(str(ours)).schema() == deltalake.DeltaTable(str(theirs)).schema()
    mine = deltalake.DeltaTable(str(ours)).to_pyarrow_table().sort_by("id")
    assert mine.equals(deltalake.DeltaTable(str(theirs)).to_pyarrow_table().sort_by("id").select(mine.column_names))


def test_delta_partition_value_rules():
    utc = _dt.UTC
    assert delta_partition_value(_dt.datetime(2024, 1, 1, tzinfo=utc), pa.timestamp("us", "UTC")) == "2024-01-01 00:00:00"
    new_york = _dt.datetime(2024, 1, 1, 7, tzinfo=_dt.timezone(_dt.timedelta(hours=-5)))
    assert delta_partition_value(new_york, pa.timestamp("us", "America/New_York")) == "2024-01-01 12:00:00"
    assert delta_partition_value(float("nan"), pa.float64()) == "NaN"
    assert delta_partition_value(-0.0, pa.float64()) == "-0.0"
    assert delta_partition_value(decimal.Decimal(10**20), pa.decimal128(21, 0)) == "100000000000000000000"
    assert delta_partition_value(None, pa.string()) is None


def _filtered(root: str, column: str, op: str, value: Any, typ: pa.DataType) -> list[int]:
    """The ids delta-rs's dataset and table (with filters) read where ``column op value``."""
    scalar = pa.scalar(value, typ)
    expression = {"==": ds.field(column) == scalar, "<=": ds.field(column) <= scalar, ">=": ds.field(column) >= scalar}[op]
    table = deltalake.DeltaTable(root)
    found = [sorted(table.to_pyarrow_dataset().to_table(filter=expression).column("id").to_pylist())]
    found.append(sorted(table.to_pyarrow_table(filters=[(column, "=" if op == "==" else op, value)]).column("id").to_pylist()))
    assert found[0] == found[1], (column, op, found)
    return found[0]


EDGES = pa.table(
    {
        "id": pa.array([0, 1], pa.int64()),
        "d18": pa.array([decimal.Decimal("1234567890123456.78"), decimal.Decimal("-0.01")], pa.decimal128(18, 2)),
        "d38": pa.array([decimal.Decimal("0." + "1" * 38), decimal.Decimal("-0." + "9" * 38)], pa.decimal128(38, 38)),
        "d380": pa.array([decimal.Decimal("9" * 38), decimal.Decimal(2**63 + 1)], pa.decimal128(38, 0)),
        "ts": pa.array([_dt.datetime(999, 1, 1, 0, 0, 0, 999999), _dt.datetime(2024, 1, 1, 0, 0, 0, 1)],
                       pa.timestamp("us", "UTC")),
        "day": pa.array([_dt.date(1, 1, 1), _dt.date(999, 12, 31)]),
        "x.y": pa.array([100, 200], pa.int64()),
        "x": pa.array([{"y": 1}, {"y": 2}], pa.struct([("y", pa.int64())])),
        "f": pa.array([-0.0, float("nan")]),
        "s": ["\U0001f600" * 40, "\ufffd" + "a" * 40],
        "long": ["a" * 31 + "\uffff" * 9, "z" * 33],
        "top": ["\uffff" * 40, "\U0010ffff" * 33],  # no character to raise: the whole max
        "end": pa.array([_dt.datetime(9999, 12, 31, 23, 59, 59, 999999), _dt.datetime(9999, 12, 31, 23, 59, 59, 999000)],
                        pa.timestamp("us", "UTC")),  # no millisecond to round up to
    }
)


def test_bounds_at_their_edges_stay_bounds_in_every_reader(tmp_path):
    """Decimals not exact as doubles, years below 1000, sub-millisecond maxima, a column ``x.y`` beside struct
    ``x`` with field ``y``: one file per row, every value found by an equality and both range filters."""
    root = str(tmp_path / "out")
    for row in range(EDGES.num_rows):
        write_batch(root, EDGES.slice(row, 1), app_id="a", version=row)
    sync_delta_log(root)
    data_columns = pa.schema([f for f in EDGES.schema if f.name != "id"])
    for add in add_actions(root).values():
        check_add_stats(root, add, data_columns)
    for column in ("d18", "d38", "d380", "ts", "day", "x.y", "s", "long", "top", "end"):
        for row, value in enumerate(EDGES.column(column).to_pylist()):
            for op in ("==", "<=", ">="):
                assert row in _filtered(root, column, op, value, EDGES.schema.field(column).type), (column, op, value)
    assert json.loads(next(iter(add_actions(root).values()))["stats"])["minValues"]["x.y"] == 100
    frame = pl.scan_delta(root).filter(pl.col("d18") == pl.lit(decimal.Decimal("1234567890123456.78"))).collect()
    assert frame["id"].to_list() == [0]


@pytest.mark.parametrize(
    "column, typ, value, text",
    [
        ("day", pa.date32(), _dt.date(999, 1, 2), "0999-01-02"),
        ("at", pa.timestamp("us", "UTC"), _dt.datetime(999, 1, 2, 3, 4, 5, tzinfo=_dt.UTC), "0999-01-02 03:04:05"),
        ("at", pa.timestamp("us", "UTC"), _dt.datetime(1, 1, 1, tzinfo=_dt.UTC), "0001-01-01 00:00:00"),
        ("n", pa.decimal128(25, 0), decimal.Decimal(10**24 + 1), str(10**24 + 1)),
        ("v", pa.float64(), 1e20, "100000000000000000000"),  # Spark reads the directory 1.0E20 as a decimal
        ("v", pa.float64(), 2.5e-7, "2.5E-7"),
        ("v", pa.float64(), -0.0, "-0.0"),
        ("k", pa.string(), "a b/c=d%e:f,g'h\"i\\j#k?\u00fc\U0001f600", "a b/c=d%e:f,g'h\"i\\j#k?\u00fc\U0001f600"),
        ("k", pa.string(), " ", " "),
        ("k", pa.string(), None, None),
    ],
)
def test_partition_values_parse_back_to_the_committed_value(tmp_path, column, typ, value, text):
    """Every Delta reader reads a partition value back as the value read_committed gives; the text is the
    protocol's (four-digit years: delta-rs reads ``999-01-02`` too, Java's parsers do not)."""
    root = str(tmp_path / "out")
    data = pa.table({"id": pa.array([1], pa.int64()), column: pa.array([value], typ)})
    write_batch(root, data, app_id="a", version=0, partition_by=[column], delta_log=True)
    assert assert_delta_matches(root).num_rows == 1
    assert [a["partitionValues"][column] for a in add_actions(root).values()] == [text]
    committed = read_committed(root).column(column)[0]
    condition = ds.field(column) == committed if committed.is_valid else ds.field(column).is_null()
    found = deltalake.DeltaTable(root).to_pyarrow_dataset().to_table(filter=condition)
    assert found.column("id").to_pylist() == [1]


_YEAR_10000_US = (  # the first microsecond past Delta's range
    _dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=_dt.UTC) - _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
) // _dt.timedelta(microseconds=1) + 1
REFUSED = {
    "uint8": pa.array([200], pa.uint8()),
    "uint16": pa.array([60000], pa.uint16()),
    "uint32": pa.array([2**32 - 1], pa.uint32()),
    "uint64": pa.array([2**64 - 1], pa.uint64()),
    "time64": pa.array([1], pa.time64("us")),
    "time32": pa.array([1], pa.time32("ms")),
    "duration": pa.array([1], pa.duration("us")),
    "float16": pa.array([1.5], pa.float16()),
    "fixed_size_binary": pa.array([b"ab"], pa.binary(2)),
    "date64": pa.array([_dt.date(2020, 1, 1)], pa.date64()),
    "struct<uint8>": pa.array([{"u": 1}], pa.struct([("u", pa.uint8())])),
    "list<time64>": pa.array([[1]], pa.list_(pa.time64("us"))),
    "map<string,duration>": pa.array([[("k", 1)]], pa.map_(pa.string(), pa.duration("s"))),
    "struct<list<float16>>": pa.array([{"l": [1.5]}], pa.struct([("l", pa.list_(pa.float16()))])),
    "year 10000": pa.array([_YEAR_10000_US], pa.int64()).cast(pa.timestamp("us", "UTC")),
    "year 0": pa.array([-62135596800000001], pa.int64()).cast(pa.timestamp("us")),
    "date year 10000": pa.array([2932897], pa.date32()),
}

# write_batch refuses these itself (Spark cannot read them) or stores them as a Delta type (date64 as date32), or,
# for an output that keeps a Delta log, refuses them before its commit (dates and timestamps outside 0001..9999)
OUT_OF_RANGE = {"year 10000", "year 0", "date year 10000"}
OTHER_WRITERS_ONLY = {"time64", "time32", "float16", "date64", "list<time64>", "struct<list<float16>>", *OUT_OF_RANGE}


def _refused_batch(kind: str) -> pa.Table:
    if kind == "case":
        return pa.table({"id": [1], "Name": ["a"], "name": ["b"]})
    if kind == "nested case":
        return pa.table({"id": [1], "s": pa.array([{"a": 1, "A": 2}], pa.struct([("a", pa.int64()), ("A", pa.int64())]))})
    return pa.table({"id": [1], "bad col": REFUSED[kind]})


@pytest.mark.parametrize("kind", [*REFUSED, "nested case"])
@pytest.mark.parametrize("first", [True, False], ids=["first-batch", "later-batch"])
def test_types_delta_lacks_are_refused_before_the_delta_log(tmp_path, caplog, kind, first):
    """A column of a type Delta lacks (at any depth), names equal but for case, a date or timestamp outside
    0001..9999: the batch commits to _spark_metadata (through write_batch, or, for what write_batch refuses or
    converts itself, as another writer's file), the sync refuses it with a DeltaLogError naming the column, logged
    by the writer, and _delta_log stays as it was (absent for a first batch)."""
    root = tmp_path / "out"
    if not first:
        write_batch(str(root), pa.table({"id": [0]}), app_id="a", version=0, delta_log=True)
    before = sorted(p.name for p in (root / "_delta_log").glob("*")) if not first else []
    bad = _refused_batch(kind)
    if kind in OTHER_WRITERS_ONLY:  # a file another writer (an older release) committed
        spark_style_batch(MetadataLog(str(root)), bad, (), old=False)
    else:
        with caplog.at_level(logging.WARNING, logger="parquet_sink.delta.sync"):
            result = write_batch(str(root), bad, app_id="a", version=1, delta_log=True)
        assert result.committed and "DeltaLogError" in caplog.text
    column = {"nested case": "s.A"}.get(kind, "bad col")
    with pytest.raises(DeltaLogError, match=re.escape(repr(column)) if "case" in kind else "bad col") as raised:
        sync_delta_log(str(root))
    assert "Nothing was committed to _delta_log" in str(raised.value) and str(root) in str(raised.value)
    assert sorted(p.name for p in (root / "_delta_log").glob("*")) == before
    assert read_committed(str(root)).num_rows == bad.num_rows + (0 if first else 1)
    if not first:
        assert deltalake.DeltaTable(str(root)).to_pyarrow_table().num_rows == 1


def _epoch_of(typ: pa.DataType) -> pa.Array:
    """One in-range value (the epoch) of ``typ``, a date or timestamp or a struct of one."""
    if pa.types.is_struct(typ):
        return pa.StructArray.from_arrays([_epoch_of(f.type) for f in typ], fields=list(typ))
    return pa.array([0], pa.int32() if pa.types.is_date(typ) else pa.int64()).cast(typ)


OUT_OF_RANGE_WRITES = {
    **{kind: REFUSED[kind] for kind in sorted(OUT_OF_RANGE)},
    "struct<year 10000>": pa.StructArray.from_arrays([REFUSED["year 10000"]], names=["t"]),
}


@pytest.mark.parametrize("delta_log", [True, False], ids=["delta_log", "existing-delta-log"])
@pytest.mark.parametrize("kind", OUT_OF_RANGE_WRITES)
def test_write_batch_refuses_a_date_no_delta_log_can_hold_before_its_commit(tmp_path, kind, delta_log):
    """Issue 54, item 8: write_batch on an output that keeps a Delta log (delta_log=True, or a _delta_log there)
    committed a date or timestamp outside 0001..9999 to _spark_metadata; every later sync then failed and Delta
    readers stayed at the batch before, silently. Now the batch is refused (DeltaRangeError naming the column)
    before its commit and its files deleted; the next batch commits and Delta readers read every committed row."""
    root = tmp_path / "out"
    bad = OUT_OF_RANGE_WRITES[kind]
    write_batch(str(root), pa.table({"id": [0], "c": _epoch_of(bad.type)}), app_id="a", version=0, delta_log=True)
    before = sorted(str(p) for p in root.rglob("*") if "_delta_log" not in p.parts)
    with pytest.raises(DeltaRangeError, match=r"column 'c(\.t)?' holds a value outside 0001-01-01\.\.9999-12-31") as raised:
        write_batch(str(root), pa.table({"id": [1], "c": bad}), app_id="a", version=1, delta_log=delta_log)
    assert "Nothing was committed and the batch's files were deleted" in str(raised.value)
    assert sorted(str(p) for p in root.rglob("*") if "_delta_log" not in p.parts) == before
    write_batch(str(root), pa.table({"id": [2], "c": _epoch_of(bad.type)}), app_id="a", version=1, delta_log=True)
    assert sorted(read_committed(str(root)).column("id").to_pylist()) == [0, 2]
    assert sorted(deltalake.DeltaTable(str(root)).to_pyarrow_table().column("id").to_pylist()) == [0, 2]


def test_top_level_names_equal_but_for_case_are_refused_before_anything_is_written(tmp_path):
    """Columns ``Name`` and ``name``: refused by write_batch as Spark's writer refuses them (it compares names
    case-insensitively), before anything is written; they once reached _spark_metadata, where Spark's reader could not
    tell them apart and the Delta sync refused them."""
    root = tmp_path / "out"
    write_batch(str(root), pa.table({"id": [0]}), app_id="a", version=0, delta_log=True)
    before = sorted(str(p) for p in root.rglob("*"))
    with pytest.raises(SchemaMismatchError, match=r"\['Name', 'name'\] more than once"):
        write_batch(str(root), _refused_batch("case"), app_id="a", version=1, delta_log=True)
    assert sorted(str(p) for p in root.rglob("*")) == before
    assert read_committed(str(root)).num_rows == deltalake.DeltaTable(str(root)).to_pyarrow_table().num_rows == 1


@pytest.mark.parametrize(("zone", "wall"), [("Asia/Kolkata", _dt.datetime(1, 1, 1, tzinfo=_dt.UTC)),
                                            ("America/New_York", _dt.datetime(9999, 12, 31, 23, tzinfo=_dt.UTC))])
def test_a_timestamp_partition_beyond_the_calendar_in_the_outputs_zone_is_refused_typed(tmp_path, zone, wall):
    """A timestamp partition directory whose wall time, read in the output's zone, is an instant in year 0 or
    10000 (UTC): the sync refuses it with a DeltaLogError naming the column and file (it was an untyped
    OverflowError), _delta_log is not created, and read_committed reads the rows in that zone."""
    root = str(tmp_path / "out")
    data = pa.table({"id": [1, 2], "ts": pa.array([wall, _dt.datetime(2020, 1, 1, tzinfo=_dt.UTC)], pa.timestamp("us", "UTC"))})
    write_batch(root, data, app_id="a", version=0, partition_by=["ts"])
    with pytest.raises(DeltaLogError, match=r"column 'ts' holds a value outside 0001-01-01\.\.9999-12-31") as raised:
        sync_delta_log(root, time_zone=zone)
    assert "Nothing was committed to _delta_log" in str(raised.value) and "ts=" in str(raised.value)
    assert not (tmp_path / "out" / "_delta_log").exists()
    assert sorted(read_committed(root, time_zone=zone).column("id").to_pylist()) == [1, 2]


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_a_missing_or_truncated_committed_file_is_the_readers_typed_error(tmp_path, damage):
    """The sync reads each new file's footer: a committed file deleted or truncated outside the sink is the
    reader's MissingDataFileError / DamagedDataFileError naming the file and its batch; nothing is committed."""
    root = tmp_path / "out"
    for version in range(3):
        write_batch(str(root), pa.table({"id": [version]}), app_id="a", version=version)
    middle = next(f for f in committed_files(str(root)) if f.batch_id == 1)
    if damage == "missing":
        os.remove(middle.path)
    else:
        with open(middle.path, "r+b") as handle:
            handle.truncate(middle.size // 2)
    error = MissingDataFileError if damage == "missing" else DamagedDataFileError
    with pytest.raises(error, match=f"{re.escape(middle.path)} of batch 1"):
        sync_delta_log(str(root))
    assert not (root / "_delta_log").exists()


def test_string_and_binary_views_are_written_as_their_large_variants(tmp_path):
    """pyarrow can neither partition a view column nor filter it against the ``string`` a Delta table declares:
    write_batch writes views as large_string/large_binary (the same Parquet column), which every reader filters."""
    root = str(tmp_path / "out")
    data = pa.table({"id": [1, 2], "k": ["a", "b"], "s": pa.array(["x", "y" * 40], pa.string_view()),
                     "b": pa.array([b"\x00", None], pa.binary_view()),
                     "n": pa.array([{"v": "q"}, None], pa.struct([("v", pa.string_view())]))})
    write_batch(root, data, app_id="a", version=0, partition_by=["k"], delta_log=True)
    assert assert_delta_matches(root).num_rows == 2
    dataset = deltalake.DeltaTable(root).to_pyarrow_dataset()
    assert dataset.to_table(filter=ds.field("s") == "y" * 40).column("id").to_pylist() == [2]
    assert dataset.to_table(filter=ds.field("n", "v") == "q").column("id").to_pylist() == [1]


def test_footer_statistics_over_row_groups_are_exact_or_absent(tmp_path):
    """parquet_sink.statistics merges every row group's bounds (a group of nulls only adds none), keys leaves
    by tuple path, and leaves out what is not exact (NaN, a row group without statistics)."""
    table = pa.table({
        "n": pa.array([5, None, None, None, -3, 7], pa.int64()),
        "d": pa.array([decimal.Decimal("1.10"), None, None, None, decimal.Decimal("-2.25"), None], pa.decimal128(38, 19)),
        "t": pa.array([1, None, None, None, -5, None], pa.int64()).cast(pa.timestamp("ns", "UTC")),
        "x.y": pa.array([1, 2, None, None, 3, 4], pa.int32()),
        "x": pa.array([{"y": "b"}, None, None, None, {"y": "a"}, {"y": None}], pa.struct([("y", pa.string())])),
        "z": pa.array([0.0, None, None, None, -0.0, 1.0]),
        "f": pa.array([float("nan"), None, None, None, 1.0, 2.0]),
    })
    path = tmp_path / "f.parquet"
    pq.write_table(table, path, row_group_size=2)
    found = file_statistics(pq.read_metadata(path))
    assert pq.read_metadata(path).num_row_groups == 3
    assert (found[("n",)].min.as_py(), found[("n",)].max.as_py(), found[("n",)].null_count) == (-3, 7, 3)
    assert (found[("d",)].min.as_py(), found[("d",)].max.as_py()) == (decimal.Decimal("-2.25"), decimal.Decimal("1.10"))
    assert (found[("t",)].min.value, found[("t",)].max.value, found[("t",)].min.type.unit) == (-5, 1, "ns")
    assert (found[("x.y",)].min.as_py(), found[("x", "y")].min.as_py(), found[("x", "y")].max.as_py()) == (1, "a", "b")
    assert found[("x", "y")].null_count == 4
    assert str(found[("z",)].min.as_py()) == "-0.0" and str(found[("z",)].max.as_py()) == "1.0"
    assert found[("f",)].min is None and found[("f",)].max is None  # the first group's bound is NaN (or none)
    stats = json.loads(file_stats(pq.ParquetFile(path), delta_schema(table.schema)))
    assert (stats["minValues"]["t"], stats["maxValues"]["t"]) == ("1969-12-31T23:59:59.999Z", "1970-01-01T00:00:00.001Z")
    assert (stats["minValues"]["x.y"], stats["minValues"]["x"], stats["maxValues"]["x"]) == (1, {"y": "a"}, {"y": "b"})
    # no exact footer bound for f: from its data (NaN left out), as delta-rs's dataset needs both bounds
    assert (stats["minValues"]["f"], stats["maxValues"]["f"], stats["nullCount"]["f"]) == (1.0, 2.0, 3)
    pq.write_table(table, path, row_group_size=2, write_statistics=["n"])
    found = file_statistics(pq.read_metadata(path))
    assert found[("n",)].max.as_py() == 7 and found[("d",)] == LeafStatistics(None, None, None)


@pytest.mark.parametrize("moment", [_dt.datetime(2024, 1, 1, 0, 0, 0, 1), _dt.datetime(1000, 1, 1, 0, 0, 0, 1)])
def test_columns_whose_footer_has_no_bounds_get_them_from_their_data(tmp_path, moment):
    """delta-rs's dataset compares a missing bound with null and skips the file for every filter on that
    column: a string over the writer's statistics size (no footer bounds) and INT96 timestamps (Spark's) get
    their bounds from the data, an INT96 outside pyarrow's nanosecond range (year 1000) too."""
    root = tmp_path / "out"
    long = "\u03bb" * 3000
    at = pa.array([moment, None], pa.timestamp("us"))
    data = pa.table({"id": [0, 1], "u": [long, None], "at": at})
    log = MetadataLog(str(root))
    for batch in range(2):  # files as Spark writes timestamps (INT96: no footer statistics), logged as Spark does
        path = root / f"part-0000{batch}-{batch}.c000.snappy.parquet"
        root.mkdir(exist_ok=True)
        pq.write_table(data.slice(0, 1), path, use_deprecated_int96_timestamps=True)
        assert log.add(batch, [LogEntry(log.storage.to_uri(str(path)), path.stat().st_size, False, 0)])
    assert pq.read_metadata(path).row_group(0).column(2).statistics is None
    assert not pq.read_metadata(path).row_group(0).column(1).statistics.has_min_max
    sync_delta_log(str(root))
    actions = [json.loads(line) for log in sorted((root / "_delta_log").glob("*.json")) for line in log.read_text().split("\n") if line]
    for add in [a["add"] for a in actions if "add" in a]:
        bounds = json.loads(add["stats"])
        low, high = (_dt.datetime.fromisoformat(bounds[k]["at"]).replace(tzinfo=None) for k in ("minValues", "maxValues"))
        assert low <= moment <= high and high - low <= _dt.timedelta(milliseconds=1), bounds
    if moment.year <= 1677:  # delta-rs's dataset reads an INT96 as nanoseconds (an ArrowInvalid there)
        return
    dataset = deltalake.DeltaTable(str(root)).to_pyarrow_dataset()
    assert dataset.to_table(filter=ds.field("u") == long).column("id").to_pylist() == [0, 0]
    at = pa.scalar(moment, pa.timestamp("us", "UTC"))
    assert dataset.to_table(filter=ds.field("at") == at).column("id").to_pylist() == [0, 0]


_NAN, _INF = float("nan"), float("inf")


@pytest.mark.parametrize("typ", [pa.float64(), pa.float32()], ids=str)
def test_float_bounds_at_nan_zero_and_infinity_are_delta_rs_bounds(tmp_path, typ):
    """Delta's float statistics as delta-rs's write_deltalake writes them for the same values (NaN left out of the
    bounds, a zero as -0.0 / 0.0): every bound we give is delta-rs's, and both are ours wherever delta-rs gives
    both (an infinity leaves both out). Our data files meanwhile carry no footer bounds for a column holding NaN (issue
    54: Spark's pushdown and pyarrow's dataset trusted them), so these come from the data."""
    cases = [[_NAN, 1.0], [_NAN], [_NAN, None], [-0.0], [0.0], [-0.0, 0.0], [_INF, 1.0], [-_INF, _NAN],
             [1.0, -1.0, _NAN, None], [None]]
    for index, values in enumerate(cases):
        table = pa.table({"x": pa.array(values, typ)})
        ours, theirs = tmp_path / f"ours{index}", tmp_path / f"theirs{index}"
        write_batch(str(ours), table, app_id="a", version=0)
        sync_delta_log(str(ours))
        deltalake.write_deltalake(str(theirs), table)
        (mine,), (their,) = (json.loads(add["stats"]) for add in _adds(ours).values()), (
            json.loads(add["stats"]) for add in _adds(theirs).values())
        assert mine["nullCount"] == their["nullCount"], values
        for key in ("minValues", "maxValues"):
            if "x" in mine[key]:
                assert repr(mine[key]["x"]) == repr(their[key]["x"]), (values, key)
        if None not in (their["minValues"].get("x"), their["maxValues"].get("x")):
            assert "x" in mine["minValues"] and "x" in mine["maxValues"], values  # (one infinity drops both)
        footer = pq.read_metadata(next(ours.glob("*.parquet"))).row_group(0).column(0).statistics
        has_nan = any(v is not None and v != v for v in values)
        assert not (footer is not None and footer.has_min_max and has_nan), values
