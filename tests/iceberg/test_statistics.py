"""The Iceberg statistics of every data file a sync lists hold the rows actually in that file, under Iceberg's rules
(the spec's "Appendix D: single-value serialization" and metrics modes): record, value, null and NaN counts
right where given (a count left out is unknown), and lower <= every non-null, non-NaN value <= upper in
Iceberg's order (timestamps as microseconds since the epoch, an INT96 one as the instant Spark reads; strings by
code points, bounds truncated to 16 of them by the default ``truncate(16)``, the upper one incremented or left
out when it cannot be). No bound makes a reader skip a file holding matching rows: pyiceberg's scans filtered on
the edge values read read_committed's rows of the same filter."""

from __future__ import annotations

import datetime as _dt
import decimal
import json
import math
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pyiceberg.conversions import from_bytes
from pyiceberg.expressions import EqualTo, GreaterThan, GreaterThanOrEqual, IsNaN, LessThan, LessThanOrEqual, NotNaN
from pyiceberg.table import StaticTable
from pyiceberg.types import DateType, DoubleType, FloatType, StringType

from parquet_sink import MetadataLog, committed_files, read_committed, sync_iceberg, write_batch
from parquet_sink.iceberg.sync import MARKER, statistics_plan, string_upper_bound
from parquet_sink.log.entry import LogEntry
from parquet_sink.rebase import to_proleptic
from tests.iceberg.test_sync import _rows

UTC = _dt.timezone.utc
FIRST = _dt.datetime(1, 1, 1, tzinfo=UTC)
LAST = _dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
LONG = "b" * 40  # over truncate(16): a truncated lower bound, an incremented upper bound
TOP = "\U0010ffff" * 17 + "a"  # a largest value whose 16-code-point prefix cannot be incremented: no upper bound
HANGUL = "z" * 15 + "\ud7ff" + "x"  # the prefix's last code point is U+D7FF: incremented to U+E000, not a surrogate
ASTRAL = "\U0001f600x"  # beyond U+FFFF (a surrogate pair in UTF-16, four bytes in UTF-8)


def _batch(version: int) -> pa.Table:
    """Three rows of edge values, one of nulls; the string column's largest value differs by batch."""
    largest = [TOP, HANGUL, LONG][version]
    return pa.table({
        "i": pa.array([version, version + 10, None], pa.int64()),
        "t": pa.array([FIRST, LAST, None], pa.timestamp("us", "UTC")),
        "n": pa.array([FIRST.replace(tzinfo=None), LAST.replace(tzinfo=None), None], pa.timestamp("us")),
        "d": pa.array([_dt.date(1, 1, 1), _dt.date(9999, 12, 31), None], pa.date32()),
        "dec": pa.array([decimal.Decimal("-99999999999999999999999999.123456789012"),
                         decimal.Decimal("99999999999999999999999999.123456789012"), None], pa.decimal128(38, 12)),
        "small": pa.array([decimal.Decimal("-1.25"), decimal.Decimal("999.99"), None], pa.decimal128(5, 2)),
        "s": pa.array([ASTRAL if version == 0 else "a" * 20, largest, None], pa.string()),
        "f": pa.array([-0.0, float("nan") if version == 1 else 1.5, None], pa.float64()),
    })


def _int96_batch() -> pa.Table:
    """As Spark's writer with outputTimestampType=INT96 writes a batch (within pyiceberg's nanosecond range:
    outside it the batch is refused, tests/iceberg/test_follow.py)."""
    moments = [_dt.datetime(1677, 9, 22, tzinfo=UTC), _dt.datetime(2262, 4, 10, 23, 59, 59, 999999, tzinfo=UTC)]
    table = _batch(2).slice(0, 2).set_column(1, "t", pa.array(moments, pa.timestamp("us", "UTC")))
    table = table.set_column(7, "f", pa.array([float("nan"), 1.5]))  # NaN beside footer bounds (pyarrow's: 1.5..1.5)
    return table.set_column(2, "n", pa.array([m.replace(tzinfo=None) for m in moments], pa.timestamp("us")))


def _assert_same(iceberg: pa.Table, root: Path, **options) -> None:
    """tests/iceberg/test_sync.py's check, rows compared by repr: a NaN equals itself."""
    expected = read_committed(str(root), **options)
    assert repr(_rows(iceberg, expected)) == repr(_rows(expected, expected)), options


def _iceberg_values(column: pa.ChunkedArray) -> list:
    """The non-null values of ``column`` in the representation pyiceberg's ``from_bytes`` decodes bounds to:
    microseconds since the epoch (an INT96 column is read by pyarrow as Spark reads it, the instant), days since
    the epoch, Decimal, str, float."""
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.timestamp("us", column.type.tz)).cast(pa.int64())
    elif pa.types.is_date32(column.type):
        column = column.cast(pa.int32())
    return [v for v in column.to_pylist() if v is not None]


def _key(field_type, value):
    """Iceberg's order: strings by code points (UTF-8 bytes), everything else as Python orders it."""
    return value.encode("utf-8") if isinstance(field_type, StringType) else value


def _assert_statistics_hold(table, root: Path) -> int:
    """Every data file's counts and bounds hold its rows, read as Spark reads them (a date Spark's LEGACY writer
    stored in the hybrid calendar as the day Spark reads); returns how many files were checked."""
    schema = table.schema()
    files = [task.file for task in table.scan().plan_files()]
    for data_file in files:
        rows = _read(data_file.file_path.removeprefix("file://"))
        assert data_file.record_count == rows.num_rows
        for field in schema.fields:
            where = f"{field.name} of {data_file.file_path}"
            column = rows.column(field.name)
            if field.field_id in data_file.value_counts:
                assert data_file.value_counts[field.field_id] == rows.num_rows, where
            if field.field_id in data_file.null_value_counts:
                assert data_file.null_value_counts[field.field_id] == column.null_count, where
            values = _iceberg_values(column)
            nans = [v for v in values if isinstance(v, float) and math.isnan(v)]
            if field.field_id in data_file.nan_value_counts:
                assert data_file.nan_value_counts[field.field_id] == len(nans), where
            values = [v for v in values if not (isinstance(v, float) and math.isnan(v))]
            typ = field.field_type
            if (lower := data_file.lower_bounds.get(field.field_id)) is not None:
                lower = from_bytes(typ, lower)
                assert not (isinstance(lower, float) and math.isnan(lower)), where
                assert all(_key(typ, lower) <= _key(typ, v) for v in values), (where, lower)
                if isinstance(typ, StringType):  # truncate(16): a prefix of the smallest value, 16 code points at most
                    assert len(lower) <= 16 and min(values, key=_key.__get__(typ)).startswith(lower), where
            if (upper := data_file.upper_bounds.get(field.field_id)) is not None:
                upper = from_bytes(typ, upper)
                assert not (isinstance(upper, float) and math.isnan(upper)), where
                assert all(_key(typ, v) <= _key(typ, upper) for v in values), (where, upper)
                if isinstance(typ, StringType):
                    assert len(upper) <= 16, where
            elif isinstance(typ, StringType) and values:  # left out only when no 16-code-point bound exists
                largest = max(values, key=_key.__get__(typ))
                assert string_upper_bound(largest, 16) is None, where
            if isinstance(typ, (FloatType, DoubleType)) and values and lower is not None:
                assert lower == min(values), where  # -0.0 == 0.0, yet the bound is the least
    return len(files)


def _read(path: str) -> pa.Table:
    """The rows of one data file as Spark (and read_committed) reads them."""
    return to_proleptic(pq.read_table(path, coerce_int96_timestamp_unit="us"), pq.read_metadata(path))


def _planned(table, expression, **at) -> set[str]:
    """The names of the files pyiceberg's scan with ``expression`` plans: those the manifests' statistics keep."""
    return {t.file.file_path.rsplit("/", 1)[-1] for t in table.scan(row_filter=expression, **at).plan_files()}


def _holding(table, arrow: pc.Expression, **at) -> set[str]:
    """The names of the files of the scan holding a row of ``arrow`` as Spark reads it (no statistics used)."""
    return {t.file.file_path.rsplit("/", 1)[-1] for t in table.scan(**at).plan_files()
            if _read(t.file.file_path.removeprefix("file://")).filter(arrow).num_rows}


def _file_of(root: Path, batch: int) -> str:
    """The name of the one file ``batch`` of the output at ``root`` committed."""
    [committed] = [f for f in committed_files(str(root)) if f.batch_id == batch]
    return committed.path.rsplit("/", 1)[-1]


def test_statistics_hold_each_files_rows_and_never_prune_matching_rows(tmp_path):
    """write_batch files (Arrow, FIXED_LEN_BYTE_ARRAY decimals) and a Spark-like file (INT96 timestamps, a
    decimal of precision 5 as INT32): years 1 and 9999,
    strings beyond U+FFFF, long strings, a largest string with no 16-code-point upper bound and one whose
    truncation ends in U+D7FF (pyiceberg's increment made a surrogate there and the sync failed), NaN and -0.0.
    Every file's statistics hold its rows; pyiceberg's scans filtered on the edges (which prune by those bounds)
    read read_committed's rows."""
    root = tmp_path / "out"
    for version in range(3):
        write_batch(str(root), _batch(version), app_id="a", version=version)
    spark = root / "part-spark-int96.parquet"
    pq.write_table(_int96_batch(), spark, use_deprecated_int96_timestamps=True, store_decimal_as_integer=True)
    physical = {c.name: c.physical_type for c in pq.ParquetFile(spark).schema}  # as Spark writes decimals too
    assert (physical["t"], physical["small"], physical["dec"]) == ("INT96", "INT32", "FIXED_LEN_BYTE_ARRAY")
    assert MetadataLog(str(root)).add(3, [LogEntry(spark.as_uri(), spark.stat().st_size, False, 0)])
    table = StaticTable.from_metadata(sync_iceberg(str(root)).metadata_location)

    assert _assert_statistics_hold(table, root) == 4
    bounds = {f.file_path.rsplit("/", 1)[-1]: f for f in (t.file for t in table.scan().plan_files())}
    s = table.schema().find_field("s").field_id
    uppers = sorted(from_bytes(StringType(), b.upper_bounds[s]) for b in bounds.values() if s in b.upper_bounds)
    assert uppers == ["bbbbbbbbbbbbbbbc", "bbbbbbbbbbbbbbbc", "z" * 15 + "\ue000"]  # TOP's file has none
    t = table.schema().find_field("t")
    first = next(b for name, b in bounds.items() if "spark" not in name)  # a write_batch file
    assert from_bytes(t.field_type, first.lower_bounds[t.field_id]) == -62135596800000000  # 0001-01-01 in micros
    assert from_bytes(t.field_type, first.upper_bounds[t.field_id]) == 253402300799999999  # 9999-12-31T23:59:59.999999

    # pyiceberg's reader binds a filter on an INT96 column to nanoseconds: a year-1 or year-9999 literal fails to
    # read the INT96 file (a reader's limit, not a bound's), so those edges are read at the batch before it
    before = next(x.snapshot_id for x in table.metadata.snapshots if x.summary[MARKER] == "2")
    edges = [
        ("t", FIRST), ("t", LAST), ("n", FIRST.replace(tzinfo=None)), ("n", LAST.replace(tzinfo=None)),
        ("d", _dt.date(1, 1, 1)), ("d", _dt.date(9999, 12, 31)), ("s", ASTRAL), ("s", LONG), ("s", TOP),
        ("s", HANGUL), ("dec", decimal.Decimal("99999999999999999999999999.123456789012")),
        ("small", decimal.Decimal("-1.25")),
        ("t", _int96_batch()["t"][1].as_py()), ("n", _int96_batch()["n"][0].as_py()),  # the INT96 file's
    ]
    for column, value in edges:
        iceberg = value.isoformat() if isinstance(value, (_dt.datetime, _dt.date)) else value
        if isinstance(value, decimal.Decimal):
            iceberg = str(value)
        at = {"snapshot_id": before} if column in "tn" and not 1677 < value.year < 2262 else {}
        for expression, arrow in [(EqualTo, pc.field(column) == value),
                                  (GreaterThanOrEqual, pc.field(column) >= value),
                                  (LessThanOrEqual, pc.field(column) <= value)]:
            _assert_same(table.scan(row_filter=expression(column, iceberg), **at).to_arrow(), root, filter=arrow,
                         **({"as_of_batch": 2} if at else {}))
    long_prefix = "b" * 17  # above the truncated lower bound's 16 b's, below the file's values
    _assert_same(table.scan(row_filter=GreaterThanOrEqual("s", long_prefix)).to_arrow(), root,
                 filter=pc.field("s") >= long_prefix)

    # no NaN count is written (a footer has none: Iceberg reads a missing count as unknown, "may hold NaN"), and a
    # bound leaves NaN out: pyiceberg's manifest pruning keeps every file holding a row of each NaN filter, the
    # Spark-like file's NaN beside footer bounds 1.5..1.5 and batch 1's in a column without footer statistics (our
    # writers' rule). pyiceberg's reader (pyarrow) then skips the row group of the former by its footer for is_nan
    # (as pyarrow's own dataset does: the file's footer, not the table's statistics), so rows are compared at
    # the batch before it, where every NaN is in a file of ours
    f = table.schema().find_field("f").field_id
    assert not any(b.nan_value_counts.get(f) for b in bounds.values())
    assert {name for name, b in bounds.items() if f in b.lower_bounds} >= {"part-spark-int96.parquet"}
    nan_filters = [(IsNaN("f"), pc.field("f").is_nan()), (NotNaN("f"), ~pc.field("f").is_nan()),
                   (GreaterThan("f", 1.0), pc.field("f") > 1.0), (LessThan("f", 1.0), pc.field("f") < 1.0),
                   (EqualTo("f", 1.5), pc.field("f") == 1.5), (GreaterThanOrEqual("f", 1.5), pc.field("f") >= 1.5)]
    for expression, arrow in nan_filters:
        assert _planned(table, expression) >= _holding(table, arrow), expression
        _assert_same(table.scan(row_filter=expression, snapshot_id=before).to_arrow(), root, filter=arrow,
                     as_of_batch=2)
    assert _holding(table, pc.field("f").is_nan()) == {"part-spark-int96.parquet", _file_of(root, 1)}


@pytest.mark.parametrize(("largest", "length", "bound"), [
    ("abc", 3, "abc"),  # not truncated: the value itself
    ("abcd", None, "abcd"),  # metrics mode full
    ("abcd", 3, "abd"),
    ("ab\U0010ffffz", 3, "ac"),  # U+10FFFF cannot be incremented: the one before is, the rest dropped
    ("\ud7ffab", 1, "\ue000"),  # past the surrogates, which UTF-8 cannot hold
    ("\U0001f600" * 3, 2, "\U0001f600\U0001f601"),  # code points, not UTF-16 units
    ("\U0010ffff" * 3, 2, None),  # no bound of two code points exists
])
def test_string_upper_bound_decides(largest, length, bound):
    assert string_upper_bound(largest, length) == bound
    if bound is not None:  # above every string of the truncated prefix, in UTF-8 byte order
        assert bound.encode() >= largest.encode() or largest.startswith(bound)
        assert bound.encode() > largest[:length].encode() + b"\xf4\x8f\xbf\xbf" * 4 or bound == largest


def test_an_int96_file_spark_wrote_keeps_its_null_count_and_has_no_bound(spark, tmp_path):
    """Spark's writer with outputTimestampType=INT96 puts the INT96 column's null count in the footer, no min or
    max (Parquet leaves INT96's order undefined); pyiceberg's statistics refused that physical type, so every
    sync of such an output failed. The file is listed with its counts and no bound on the column; filters on it
    read read_committed's rows."""
    spark.conf.set("spark.sql.parquet.outputTimestampType", "INT96")
    try:
        frame = spark.createDataFrame([(1, _dt.datetime(2000, 1, 1)), (2, None)], "i long, t timestamp")
        frame.coalesce(1).write.parquet(str(tmp_path / "spark"))
    finally:
        spark.conf.unset("spark.sql.parquet.outputTimestampType")
    root = tmp_path / "out"
    root.mkdir()
    [written] = (tmp_path / "spark").glob("*.parquet")
    file = root / "part-spark-int96.parquet"
    shutil.copy(written, file)
    column = pq.ParquetFile(file).metadata.row_group(0).column(1)
    assert (column.physical_type, column.statistics.null_count, column.statistics.has_min_max) == ("INT96", 1, False)
    assert MetadataLog(str(root)).add(0, [LogEntry(file.as_uri(), file.stat().st_size, False, 0)])
    table = StaticTable.from_metadata(sync_iceberg(str(root)).metadata_location)

    assert _assert_statistics_hold(table, root) == 1
    [data_file] = [task.file for task in table.scan().plan_files()]
    t = table.schema().find_field("t").field_id
    assert data_file.null_value_counts[t] == 1 and t not in data_file.lower_bounds and t not in data_file.upper_bounds
    moment = next(v for v in read_committed(str(root))["t"].to_pylist() if v is not None)
    equal = table.scan(row_filter=EqualTo("t", moment.isoformat())).to_arrow()
    _assert_same(equal, root, filter=pc.field("t") == moment)
    _assert_same(table.scan(row_filter="t is null").to_arrow(), root, filter=pc.field("t").is_null())


def test_statistics_plan_counts_int96_alone():
    from pyiceberg.io.pyarrow import MetricModeTypes, MetricsMode, StatisticsCollector
    from pyiceberg.types import LongType, TimestampType

    truncate, none = MetricsMode(MetricModeTypes.TRUNCATE, 16), MetricsMode(MetricModeTypes.NONE)
    plan = {1: StatisticsCollector(1, TimestampType(), truncate, "t"),
            2: StatisticsCollector(2, TimestampType(), none, "u"), 3: StatisticsCollector(3, LongType(), truncate, "i")}
    decided = statistics_plan(plan, {1, 2})
    assert [decided[i].mode for i in (1, 2, 3)] == [MetricsMode(MetricModeTypes.COUNTS), none, truncate]
    assert [decided[i].column_name for i in (1, 2, 3)] == ["t", "u", "i"]


# what Spark's LEGACY writer stores in the hybrid Julian calendar, one file each: a day after a Julian leap day the
# Gregorian calendar lacks (1500-03-01); 1000-01-01 (stored as 1000-01-06) and the last Julian day (1582-10-04, stored
# as 1582-10-14); year 1 (stored in year 0, proleptic) beside a day every reader reads alike (2000-01-01)
_HYBRID_DAYS = [_dt.date(1500, 3, 1), _dt.date(1000, 1, 1), _dt.date(1582, 10, 4), _dt.date(1, 1, 1),
                _dt.date(2000, 1, 1)]
_AGREED = {4}  # the ids of rows every reader reads as Spark does (from 1582-10-15 on, nothing is rebased)


def test_spark_julian_calendar_files_are_bounded_as_spark_reads_them_in_both_mirrors(spark, tmp_path):
    """Spark's writer under ``datetimeRebaseModeInWrite=LEGACY`` stores dates and timestamps before 1582-10-15 in the
    hybrid calendar (1000-01-01 as the day pyarrow reads as 1000-01-06; 0001-01-01 in year 0) and Spark reads them
    rebased, as read_committed does. Both mirrors' bounds are those of what Spark reads (dates exact), from one rule
    (``rebase.hybrid_leaf_statistics``): before, every Iceberg sync of such an output failed (year 0 is no Python
    date) and the Delta log had no bounds for such columns, so delta-rs's dataset skipped the file for every filter on
    them, 2000-01-01's row too. At the edges: every file holding a row read_committed returns is kept by
    pyiceberg's manifests and by delta-rs's statistics, and every reader returns the rows it reads as Spark does
    (the stored days before 1582 are theirs: pyiceberg, delta-rs, polars and duckdb do not rebase)."""
    import deltalake
    import duckdb
    import polars as pl

    from parquet_sink import sync_delta_log
    from tests.delta.readers import add_actions, check_add_stats

    keys = ("spark.sql.parquet.datetimeRebaseModeInWrite", "spark.sql.parquet.outputTimestampType")
    before = {k: spark.conf.get(k) for k in keys}
    days = ", ".join(f"DATE'{d.isoformat()}'" for d in _HYBRID_DAYS)
    try:
        spark.conf.set(keys[0], "LEGACY")
        spark.conf.set(keys[1], "TIMESTAMP_MICROS")
        # range's partitions [0], [1, 2], [3, 4]: one file each; each day at noon UTC
        spark.sql(f"SELECT id AS i, element_at(array({days}), CAST(id AS INT) + 1) AS d FROM range(0, 5, 1, 3)") \
            .selectExpr("i", "d", "timestamp_seconds(CAST(unix_date(d) AS BIGINT) * 86400 + 43200) AS t") \
            .write.parquet(str(tmp_path / "spark"))
    finally:
        for key, value in before.items():
            spark.conf.set(key, value)
    root = tmp_path / "out"
    root.mkdir()
    for batch, written in enumerate(sorted((tmp_path / "spark").glob("*.parquet"))):
        file = root / f"part-{batch}.parquet"
        shutil.copy(written, file)
        assert b"org.apache.spark.legacyDateTime" in pq.read_metadata(file).metadata
        assert MetadataLog(str(root)).add(batch, [LogEntry(file.as_uri(), file.stat().st_size, False, 0)])
    assert pq.read_table(root / "part-1.parquet")["d"][0].as_py() == _dt.date(1000, 1, 6)  # as stored
    committed = read_committed(str(root))
    assert committed.sort_by("i")["d"].to_pylist() == _HYBRID_DAYS
    table = StaticTable.from_metadata(sync_iceberg(str(root)).metadata_location)
    sync_delta_log(str(root))

    assert _assert_statistics_hold(table, root) == 3
    d = table.schema().find_field("d").field_id
    adds = add_actions(str(root))
    files = {}
    for data_file in (t.file for t in table.scan().plan_files()):
        name = data_file.file_path.rsplit("/", 1)[-1]
        files[name] = _read(data_file.file_path.removeprefix("file://"))
        days = files[name]["d"].to_pylist()
        epoch = [(day - _dt.date(1970, 1, 1)).days for day in days]
        assert (from_bytes(DateType(), data_file.lower_bounds[d]), from_bytes(DateType(), data_file.upper_bounds[d])) \
            == (min(epoch), max(epoch)), name  # exact: the rebase of dates is monotonic
        stats = json.loads(adds[name]["stats"])
        assert (stats["minValues"]["d"], stats["maxValues"]["d"]) == (min(days).isoformat(), max(days).isoformat())
        assert {"d", "t"} <= stats["minValues"].keys() and {"d", "t"} <= stats["maxValues"].keys()
        check_add_stats(str(root), adds[name], pa.schema([("d", pa.date32()), ("t", pa.timestamp("us", "UTC"))]))
    assert len(files) == 3

    delta = deltalake.DeltaTable(str(root))
    dataset = delta.to_pyarrow_dataset()
    duck = duckdb.connect()
    duck.register("delta_dataset", dataset)  # duckdb pushes the filter into delta-rs's dataset
    for day in _HYBRID_DAYS:
        noon = _dt.datetime(day.year, day.month, day.day, 12, tzinfo=UTC)
        for column, value in (("d", day), ("t", noon)):
            literal = value.isoformat()
            for expression, arrow, op in [(EqualTo(column, literal), pc.field(column) == value, "="),
                                          (GreaterThanOrEqual(column, literal), pc.field(column) >= value, ">="),
                                          (LessThanOrEqual(column, literal), pc.field(column) <= value, "<=")]:
                what = (column, op, literal)
                holding = {name for name, rows in files.items() if rows.filter(arrow).num_rows}
                assert _planned(table, expression) >= holding, what
                assert {f.path.rsplit("/", 1)[-1] for f in dataset.get_fragments(filter=arrow)} >= holding, what
                expected = set(committed.filter(arrow)["i"].to_pylist()) & _AGREED
                python = pl.lit(value) if column == "d" else pl.lit(value).dt.replace_time_zone("UTC")
                compare = {"=": pl.col(column) == python, ">=": pl.col(column) >= python,
                           "<=": pl.col(column) <= python}[op]
                for reader, ids in [
                    ("pyiceberg", table.scan(row_filter=expression).to_arrow()["i"]),
                    ("delta-rs", delta.to_pyarrow_table(filters=[(column, op, value)])["i"]),
                    ("delta-rs dataset", dataset.to_table(filter=arrow)["i"]),
                    ("polars", pl.scan_delta(str(root)).filter(compare).collect()["i"].to_arrow()),
                    ("duckdb", pa.array([r[0] for r in duck.execute(
                        f"SELECT i FROM delta_dataset WHERE {column} {op} ?", [value]).fetchall()], pa.int64())),
                ]:
                    assert set(ids.to_pylist()) & _AGREED == expected, (reader, what)
