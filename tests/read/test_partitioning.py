"""Partition parity with Spark: the directories our sink writes for every partition type are the ones
Spark's own file sink writes (same names, same rows in each), and the types read back by read_committed
are the ones Spark's reader infers, under a non-UTC session time zone."""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from parquet_sink import MetadataLog, ParquetSink, committed_files, read_committed
from parquet_sink.partitioning import infer_partition_types, is_data_file, is_hidden, java_double_str
from tests.helpers.spark_util import run_available_now, spark_sink_batch, write_input_files

ZONE = "America/New_York"
INPUT_SCHEMA = "id long, ts string, d string, f string, dec string, b boolean, dt string, bin string, n long"
# Rows of one micro-batch each; 0.0 and -0.0 interleave inside a batch (the sort must not merge them).
MIXED = [
    [
        {"id": 1, "ts": "2026-02-03T07:08:09.120Z", "d": "1e20", "f": "0.1", "dec": "1.50", "b": True, "dt": "2026-02-03", "bin": "a:b", "n": 1},
        {"id": 2, "ts": "2026-07-01T00:00:00.000001Z", "d": "0.0", "f": "1e10", "dec": "0.0000001", "b": False, "dt": "0001-01-01", "bin": "x/y", "n": 10_000_000_000},
        {"id": 3, "ts": "2026-07-01T00:00:00Z", "d": "-0.0", "f": "-0.0", "dec": "-12345678901234567890.12", "b": None, "dt": None, "bin": None, "n": None},
        {"id": 4, "ts": None, "d": "0.0", "f": "3.4e38", "dec": None, "b": True, "dt": "2026-12-31", "bin": "ü", "n": -5},
        {"id": 5, "ts": "1969-12-31T23:59:59.5Z", "d": "-0.0", "f": "NaN", "dec": "0.00", "b": True, "dt": "2026-01-01", "bin": "a:b", "n": 1},
        {"id": 6, "ts": "2026-11-01T05:30:00Z", "d": "NaN", "f": "-Infinity", "dec": "100", "b": True, "dt": "2026-01-01", "bin": "a:b", "n": 1},
    ],
    [
        {"id": 7, "ts": "2026-02-03T07:08:09.120Z", "d": "Infinity", "f": "1e-5", "dec": "1E+5", "b": True, "dt": "2026-01-01", "bin": "a:b", "n": 1},
        {"id": 8, "ts": "2026-11-01T06:30:00Z", "d": "1e-5", "f": "1.5e7", "dec": "1", "b": True, "dt": "2026-01-01", "bin": "a:b", "n": 1},
        {"id": 9, "ts": "2026-02-03T07:08:09Z", "d": "0.001", "f": "123456.79", "dec": "1", "b": True, "dt": "2026-01-01", "bin": "a:b", "n": 1},
        {"id": 10, "ts": "2026-02-03T07:08:09Z", "d": "1e7", "f": "100.0", "dec": "1", "b": True, "dt": "2026-01-01", "bin": "a:b", "n": 1},
        {"id": 11, "ts": "2026-02-03T07:08:09Z", "d": "-0.0", "f": "100.0", "dec": "1", "b": True, "dt": "2026-01-01", "bin": "a:b", "n": 1},
        {"id": 12, "ts": "2026-02-03T07:08:09Z", "d": "0.0", "f": "2.5", "dec": "1", "b": True, "dt": "2026-01-01", "bin": "a:b", "n": 1},
    ],
]
# Values Spark's reader gives a real type to (one fraction digit at most, no decimal/double mix).
TYPED = [
    [
        {"id": 1, "ts": "2026-02-03T07:08:09.500Z", "d": "2.5", "dt": "2026-02-03", "n": 1},
        {"id": 2, "ts": "2026-07-01T00:00:00Z", "d": "0.0", "dt": "2026-02-04", "n": 2},
        {"id": 3, "ts": None, "d": "-0.0", "dt": None, "n": None},
        {"id": 4, "ts": "2026-11-01T05:30:00Z", "d": "0.0", "dt": "2026-02-03", "n": 3},
        {"id": 5, "ts": "2026-11-01T06:30:00Z", "d": "-0.0", "dt": "2026-02-03", "n": 3},
    ],
    [
        {"id": 6, "ts": "1969-12-31T23:59:59.5Z", "d": "NaN", "dt": "2026-02-03", "n": 1},
        {"id": 7, "ts": "2026-02-03T07:08:09.500Z", "d": "1.0E-5", "dt": "2026-02-03", "n": 1},
        {"id": 8, "ts": "2026-02-03T07:08:09Z", "d": "-Infinity", "dt": "2026-02-03", "n": 1},
    ],
]
TYPED_SCHEMA = "id long, ts string, d string, dt string, n long"


@pytest.fixture
def ny_spark(spark) -> Iterator:
    """The shared session with a non-UTC session time zone for the duration of one test."""
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", ZONE)
    yield spark
    spark.conf.set("spark.sql.session.timeZone", before)


_COLUMNS = {  # SQL expressions over the JSON input
    "ts": "cast(ts as timestamp)",
    "ntz": "cast(cast(ts as timestamp) as timestamp_ntz)",
    "d": "cast(d as double)",
    "f": "cast(f as float)",
    "dec": "cast(dec as decimal(30,8))",
    "b": "b",
    "dt": "cast(dt as date)",
    "bin": "cast(bin as binary)",
    "n": "n",
    "i": "try_cast(n as int)",
    "s": "try_cast(n as smallint)",
}


def _both_outputs(
    spark, tmp_path: Path, batches: list[list[dict]], schema: str, partition_by: list[str], writer: str = "arrow"
) -> tuple[str, str]:
    """The same stream (id plus the ``partition_by`` columns, typed) written by ParquetSink (on the
    ``writer`` path) and by Spark's own file sink."""
    return _outputs(spark, tmp_path, batches, schema, [partition_by], writer)[0]


def _outputs(
    spark, tmp_path: Path, batches: list[list[dict]], schema: str, layouts: list[list[str]], writer: str = "arrow"
) -> list[tuple[str, str]]:
    """For each of ``layouts`` (partition columns), the stream of id plus those columns (typed) written by ParquetSink
    (on the ``writer`` path) and by Spark's own file sink (``FileStreamSink.addBatch``, as its streaming query calls
    it): one query (one micro-batch per input file), whose every batch goes to every output, a pair of (ours,
    theirs) per layout."""
    src = str(tmp_path / "in")
    write_input_files(src, batches)
    pairs, sinks = [], []
    for n, partition_by in enumerate(layouts):
        ours, theirs = str(tmp_path / f"ours-{n}"), str(tmp_path / f"spark-{n}")
        pairs.append((ours, theirs))
        sinks.append(ParquetSink(ours, partition_by=partition_by, writer=writer))

    def each_output(df, batch_id: int) -> None:
        for partition_by, sink, (_, theirs) in zip(layouts, sinks, pairs):
            typed = df.selectExpr("id", *(f"{_COLUMNS[c]} as {c}" for c in partition_by))
            sink(typed, batch_id)
            spark_sink_batch(spark, typed, theirs, batch_id, partition_by)

    raw = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(src)
    run_available_now(raw, str(tmp_path / "ck"), each_output)
    assert all(MetadataLog(o).latest_batch_id() == len(batches) - 1 for pair in pairs for o in pair), "a batch each"
    return pairs


def _placement(out: str) -> dict[int, str]:
    """Row id -> the partition directory of the committed file holding it."""
    placed: dict[int, str] = {}
    for f in committed_files(out):
        for row_id in pq.read_table(f.path, columns=["id"]).column("id").to_pylist():
            assert row_id not in placed, f"row {row_id} committed twice"
            placed[row_id] = os.path.dirname(f.relative_path)
    return placed


def _arrow_type(spark_type: T.DataType) -> pa.DataType:
    return {
        T.NullType: pa.null(),
        T.IntegerType: pa.int32(),
        T.LongType: pa.int64(),
        T.DoubleType: pa.float64(),
        T.StringType: pa.string(),
        T.DateType: pa.date32(),
        T.TimestampType: pa.timestamp("us", tz=ZONE),
    }.get(type(spark_type)) or pa.decimal128(spark_type.precision, spark_type.scale)


def _canonical(value):
    """A comparable form: floats by repr (keeps -0.0 and NaN apart), the rest as they are."""
    return repr(value) if isinstance(value, float) else value


def _spark_values(df, columns: list[str]) -> dict[int, tuple]:
    """id -> partition values as Spark reads them (timestamps as epoch microseconds)."""
    types = {f.name: f.dataType for f in df.schema.fields}
    exprs = [F.unix_micros(c).alias(c) if isinstance(types[c], T.TimestampType) else F.col(c) for c in columns]
    return {r.id: tuple(_canonical(r[c]) for c in columns) for r in df.select("id", *exprs).collect()}


def _our_values(table: pa.Table, columns: list[str]) -> dict[int, tuple]:
    arrays = [
        pc.cast(table.column(c), pa.int64()) if pa.types.is_timestamp(table.schema.field(c).type) else table.column(c)
        for c in columns
    ]
    ids = table.column("id").to_pylist()
    return dict(zip(ids, zip(*([_canonical(v) for v in a.to_pylist()] for a in arrays))))


def _assert_read_parity(spark, ours: str, theirs: str, columns: list[str]) -> None:
    """Spark's reader on our output == read_committed == Spark's reader on Spark's own output."""
    spark_on_ours, spark_on_theirs = spark.read.parquet(ours), spark.read.parquet(theirs)
    table = read_committed(ours, time_zone=ZONE)
    for c in columns:
        assert spark_on_ours.schema[c].dataType == spark_on_theirs.schema[c].dataType, c
        assert table.schema.field(c).type == _arrow_type(spark_on_ours.schema[c].dataType), c
    expected = _spark_values(spark_on_theirs, columns)
    assert _spark_values(spark_on_ours, columns) == expected
    assert _our_values(table, columns) == expected


def test_every_partition_type_lands_where_spark_puts_it(ny_spark, tmp_path: Path) -> None:
    """Timestamps (session-local, trimmed fraction, DST fold), timestamp_ntz, doubles as Java prints them
    (1.0E20, NaN, Infinity, 0.0 and -0.0 interleaved in one batch), floats, decimals, booleans, dates,
    binary, long/int/short and nulls: the same directories as Spark's own sink, each with the same rows."""
    columns = ["ts", "ntz", "d", "f", "dec", "b", "dt", "bin", "n", "i", "s"]
    misplaced, misread = {}, {}
    for column, (ours, theirs) in zip(columns, _outputs(ny_spark, tmp_path, MIXED, INPUT_SCHEMA, [[c] for c in columns])):
        placed, expected = _placement(ours), _placement(theirs)
        if placed != expected:
            misplaced[column] = {i: (placed.get(i), d) for i, d in expected.items() if placed.get(i) != d}
        try:
            _assert_read_parity(ny_spark, ours, theirs, [column])
        except AssertionError as exc:
            misread[column] = str(exc)
    assert not misplaced, f"row id: (our directory, Spark's directory) per column: {misplaced}"
    assert not misread, f"read parity per column: {misread}"


def test_typed_partitions_read_back_as_spark_types(ny_spark, tmp_path: Path) -> None:
    """Multi-level partitions whose values Spark infers as timestamp, double (with -0.0, NaN), date and
    int: read_committed returns Spark's types and values; Spark's reader agrees on our output."""
    columns = ["ts", "d", "dt", "n"]
    ours, theirs = _both_outputs(ny_spark, tmp_path, TYPED, TYPED_SCHEMA, columns)
    placement = _placement(ours)
    assert placement == _placement(theirs)
    assert placement[1].startswith("ts=2026-02-03 02%3A08%3A09.5/d=2.5/")
    _assert_read_parity(ny_spark, ours, theirs, columns)
    table = read_committed(ours, time_zone=ZONE)
    assert table.schema.field("ts").type == pa.timestamp("us", tz=ZONE)
    assert table.schema.field("d").type == pa.float64()


# Value sets for Spark's partition type inference and widening, read by Spark's own reader.
INFERENCE_CASES = [
    ["1", "2.5"], ["1", "1e5"], ["1e5"], ["2.5", "1e5"], ["10000000000", "2.5"], ["1", "10000000000"],
    ["1", "2026-02-03"], ["2026-2-3"], ["NaN", "1"], ["Infinity", "-0.0"], ["1.0E20"], ["1.0E-5"],
    ["123456789012345678901234567890", "1"], ["1f", "1d"], ["true", "false"], ["__HIVE_DEFAULT_PARTITION__"],
    ["__HIVE_DEFAULT_PARTITION__", "1"], ["2026-02-03 02%3A08", "2026-02-03T02%3A08%3A09"], ["+1", "-5", "007"],
    [".5", "5.", "1e400"], ["99999999999999999999999999999999999999999", "1"], ["2026-02-03 02%3A08%3A09.12"],
    ["2026-02-03", "2026-02-03 02%3A08%3A09"], ["1e5", "10000000000"], ["1e-5", "1"], ["1969-12-31 18%3A59%3A59.5"],
    ["2026-02-30"], ["5."], ["0e5", "1"], ["2026-02-03 24%3A00%3A00"],
]


def test_inference_and_widening_match_spark_reader(ny_spark, tmp_path: Path) -> None:
    """For each set of raw directory values, infer_partition_types gives the type Spark's reader infers."""
    table = pa.table({"id": [1]})
    for k, values in enumerate(INFERENCE_CASES):
        for v, raw in enumerate(values):
            directory = tmp_path / f"case{k}" / f"x={raw}"
            directory.mkdir(parents=True)
            pq.write_table(table, directory / f"part-{v}.parquet")
    for k, values in enumerate(INFERENCE_CASES):
        spark_type = ny_spark.read.parquet(str(tmp_path / f"case{k}")).schema["x"].dataType
        assert infer_partition_types({"x": values}, ZONE)["x"] == _arrow_type(spark_type), values


def test_signed_zeros_in_one_task_on_the_spark_writer_path(spark, tmp_path: Path) -> None:
    """A double partition column holding 0.0 and -0.0 interleaved in one task (batch 0 of MIXED): Spark's
    batch writer alone fails (it reopens ``d=0.0/part-00000-<job>.c000``); the Spark writer path commits
    every batch, each row in the directory Spark's own file sink puts it (``d=0.0`` and ``d=-0.0``)."""
    ours, theirs = _both_outputs(spark, tmp_path, MIXED, INPUT_SCHEMA, ["d"], writer="spark")
    placed = _placement(ours)
    assert placed == _placement(theirs)
    assert {placed[i] for i in (2, 4, 12)} == {"d=0.0"} and {placed[i] for i in (3, 5, 11)} == {"d=-0.0"}


def _zeros_and_nans(batches):  # runs in a Python worker
    """Give each row of ``id`` a double ``d`` and a float ``f`` cycling through 0.0, -0.0 and NaNs of two
    bit patterns (Python's and the one x86 gives 0/0), the way mixed sources can."""
    nans = [struct.unpack("<d", struct.pack("<Q", bits))[0] for bits in (0x7FF8000000000000, 0xFFF8000000000000)]
    cycle = [0.0, -0.0, nans[0], 0.0, nans[1], -0.0, 1.5]
    for batch in batches:
        values = [cycle[i % len(cycle)] for i in batch.column(0).to_pylist()]
        floats = [cycle[(i // 2) % len(cycle)] for i in batch.column(0).to_pylist()]
        yield pa.RecordBatch.from_arrays(
            [batch.column(0), pa.array(values, pa.float64()), pa.array(floats, pa.float32())], names=["id", "d", "f"]
        )


def test_signed_zeros_and_nan_bits_on_both_writer_paths(spark, tmp_path: Path) -> None:
    """Double and float partition columns with 0.0, -0.0 and NaNs of two bit patterns in one task: both
    writer paths commit every row once, in the same ``d=.../f=...`` directories (``NaN`` one directory)."""
    df = spark.range(28).coalesce(1).mapInArrow(_zeros_and_nans, "id long, d double, f float")
    placements = {}
    for writer in ("spark", "arrow"):
        out = str(tmp_path / writer)
        ParquetSink(out, partition_by=["d", "f"], writer=writer)(df, 0)
        placements[writer] = _placement(out)
        assert sorted(placements[writer]) == list(range(28))
    assert placements["spark"] == placements["arrow"]
    assert {d.split("/")[0] for d in placements["spark"].values()} == {"d=0.0", "d=-0.0", "d=NaN", "d=1.5"}


def test_java_double_strings() -> None:
    """Doubles and floats as Java's Double.toString / Float.toString print them (Spark's cast to string)."""
    assert [java_double_str(v) for v in (1e20, 2.5, 0.0, -0.0, 1e-5, 1e7, 9999999.0, 0.001, 1e-3 * 0.999)] == [
        "1.0E20", "2.5", "0.0", "-0.0", "1.0E-5", "1.0E7", "9999999.0", "0.001", "9.99E-4",
    ]
    assert [java_double_str(v) for v in (math.nan, math.inf, -math.inf, -1.5e-300, 123456.5)] == [
        "NaN", "Infinity", "-Infinity", "-1.5E-300", "123456.5",
    ]
    as_float = pa.array([0.1, 1e10, 3.4e38, 123456.79], pa.float32()).to_pylist()
    assert [java_double_str(v, single=True) for v in as_float] == ["0.1", "1.0E10", "3.4E38", "123456.79"]


def test_hidden_names_follow_spark() -> None:
    """Spark's listing rule (HadoopFSUtils.shouldFilterOutPathName): ``_`` hides a name unless it holds
    ``=`` (a partition directory), ``.`` and ``._COPYING_`` always hide; one rule for every listing."""
    visible = ["k=a", "_k=a", "__HIVE_DEFAULT_PARTITION__=x", "part-0.parquet", "_=1"]
    hidden = ["_spark_metadata", "_exactly_once", "_temporary", "_SUCCESS", ".part-0.parquet.crc", ".k=a", "x._COPYING_"]
    assert [is_hidden(n) for n in visible] == [False] * len(visible)
    assert [is_hidden(n) for n in hidden] == [True] * len(hidden)
    assert is_data_file("_k=a/_j=b/part-0.parquet") and is_data_file("part-0.parquet")
    assert not is_data_file("_k=a/.part-0.parquet") and not is_data_file("_k=a/part-0.json")
    assert not is_data_file("_exactly_once/staging/ab12/_k=a/part-0.parquet")


@pytest.mark.parametrize("zone", [ZONE, "Asia/Kolkata"])
def test_timestamp_partitions_at_the_ends_of_the_calendar_read_as_spark_reads_them(spark, tmp_path: Path, zone) -> None:
    """Directory values whose instant lies in year 0 or 10000 in UTC (``0001-01-01 00:00:00`` east of UTC,
    ``9999-12-31 23:59:59`` west of it), which Python's datetime cannot hold: read_committed reads them,
    as Spark's reader does, instead of failing with an untyped OverflowError."""
    from parquet_sink import write_batch

    ends = [_dt_utc(1, 1, 1), _dt_utc(1, 1, 1, 12), _dt_utc(9999, 12, 31, 23, 59, 59), _dt_utc(9999, 12, 31, 12)]
    data = pa.table({"id": list(range(len(ends))), "ts": pa.array(ends, pa.timestamp("us", tz="UTC"))})
    out = str(tmp_path / "out")
    write_batch(out, data, app_id="ends", version=0, partition_by=["ts"])  # directories in UTC wall time
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        expected = _spark_values(spark.read.parquet(out), ["ts"])
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)
    table = read_committed(out, time_zone=zone)
    assert table.schema.field("ts").type == pa.timestamp("us", tz=zone)
    assert _our_values(table, ["ts"]) == expected
    assert len(expected) == len(ends)


def _dt_utc(*fields: int):
    import datetime as dt

    return dt.datetime(*fields, tzinfo=dt.UTC)


def test_a_partition_value_holding_nul_is_refused_before_any_commit(tmp_path):
    """Spark escapes control characters 0x01-0x1F in a partition directory's name but not NUL, which no file system
    takes: the write failed with a StorageError saying to check that the location exists. Now a ParameterError
    naming the column and the value; the log stays empty and the other values' rows are not committed."""
    from parquet_sink import write_batch
    from parquet_sink.errors import ParameterError

    out = tmp_path / "out"
    with pytest.raises(ParameterError, match=r"partition column 'p' has the value 'a\\x00b', which holds a NUL"):
        write_batch(out, pa.table({"p": ["ok", "a\x00b"], "x": [1, 2]}), app_id="a", version=0, partition_by=["p"])
    assert not (out / "_spark_metadata" / "0").exists()
    write_batch(out, pa.table({"p": ["ok", "a\x01b"], "x": [1, 2]}), app_id="a", version=0, partition_by=["p"])
    assert sorted(read_committed(out).column("p").to_pylist()) == ["a\x01b", "ok"]  # 0x01 escaped, as Spark does
