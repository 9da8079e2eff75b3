"""Filtered reads and counts over files written by Spark's Parquet writer (parquet-mr): by ``ParquetSink``'s Spark
writer path (``sink(df, batch_id)``, as ``foreachBatch`` calls it) and by Spark's own file sink
(``writeStream.format("parquet")``), under Spark's writer settings (INT96 / TIMESTAMP_MICROS / TIMESTAMP_MILLIS
timestamps, rebase modes, the legacy decimal format). parquet-mr's statistics are not pyarrow's: no INT96
bounds, decimals stored as INT32 / INT64 / FIXED_LEN_BYTE_ARRAY, NaN as a float's max, strings ordered as
unsigned bytes. The oracle is pyarrow's own filter over the unfiltered ``read_committed``: a filtered read
returns exactly those rows, ``count_committed(filter)`` their number; ``spark.read.parquet`` counts the rows.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from hypothesis import given
from hypothesis import strategies as st

from parquet_sink import ParquetSink, count_committed, read_committed
from tests.helpers.filters import (
    FILTER_KINDS, FilterCase, assert_filters_agree, draw_batches, filters, fixed_or_fuzzed, sorted_rows,
)
from tests.helpers.spark_util import run_available_now, to_arrow
from tests.helpers.strategies import ATOMIC, Kind, _decimal

_KIND = {k.name: k for k in ATOMIC + FILTER_KINDS}
# Spark's column types at the edges of parquet-mr's statistics: decimals of every physical type (INT32 up to
# precision 9, INT64 up to 18, FIXED_LEN_BYTE_ARRAY beyond, all of them with the legacy format), bytes and
# shorts (INT32), timestamps with and without a zone, strings beyond ASCII (compared as unsigned bytes).
_STRINGS = ["", "a", "é", "\x7f", "\x80", "\uffff", "\U0010ffff", "日本", "Z", "z" * 70, "a\x00"]
_TEXT = st.sampled_from(_STRINGS) | st.text(max_size=6)
SPARK_KINDS = [
    *[_KIND[name] for name in ("bool", "byte", "short", "int", "long", "float", "double", "date", "timestamp",
                               "timestamp_ntz")],
    Kind("string", pa.string(), _TEXT),
    Kind("binary", pa.binary(), _TEXT.map(str.encode) | st.binary(max_size=4)),
    *[_decimal(p, s) for p, s in ((1, 0), (9, 2), (10, 0), (18, 18), (19, 5), (38, 0), (38, 38))],
]
# A partition value is a directory name: no NUL (Spark's escapePathName leaves it, and no file system takes it;
# Spark's own sink fails the same way)
_PARTITION_KINDS = [k for k in SPARK_KINDS if k.name not in ("binary", "timestamp_ntz", "string")] + [
    Kind("string", pa.string(), _TEXT.filter(lambda text: "\x00" not in text))]
_SINKS = ["ParquetSink", "spark file sink"]
_CONF = {  # Spark's writer settings, each drawn from its values (the first: Spark's default)
    "spark.sql.parquet.outputTimestampType": ["INT96", "TIMESTAMP_MICROS", "TIMESTAMP_MILLIS"],
    "spark.sql.parquet.datetimeRebaseModeInWrite": ["CORRECTED", "LEGACY"],
    "spark.sql.parquet.int96RebaseModeInWrite": ["CORRECTED", "LEGACY"],
    "spark.sql.parquet.writeLegacyFormat": ["false", "true"],
}


@dataclass(frozen=True)
class SparkCase:
    """An output's batches (rows of each), its column types, partition column, which sink writes it and the
    Spark settings it is written under."""

    kinds: dict[str, Kind]
    partitions: list[str]
    batches: list[list[dict]] = field(repr=False)
    sink: str
    conf: dict[str, str]
    max_records_per_file: int | None
    # ParquetSink only: each batch's writer path and timestamp type (an output may hold INT96 files next to
    # TIMESTAMP_MICROS ones: a setting changed, or the Arrow path's files next to Spark's), None: as ``conf``
    writers: tuple[tuple[str, str | None], ...] = ()

    @property
    def schema(self) -> pa.Schema:
        return pa.schema({"id": pa.int64()} | {c: k.arrow for c, k in self.kinds.items()})

    def __repr__(self) -> str:
        return (f"SparkCase(kinds={ {c: k.name for c, k in self.kinds.items()} }, partitions={self.partitions}, "
                f"sink={self.sink!r}, conf={self.conf}, max_records_per_file={self.max_records_per_file}, "
                f"writers={self.writers}, batches={self.batches!r})")


@st.composite
def spark_cases(draw: st.DrawFn) -> SparkCase:
    """2-3 batches of 0-4 rows over 1-3 Spark columns (0-1 of them a partition column), values from small pools
    (edges and nulls drawn often), written by one of the two sinks under drawn Spark settings."""
    kinds = {f"c{i}": k for i, k in enumerate(draw(st.lists(st.sampled_from(SPARK_KINDS), min_size=1, max_size=3)))}
    partitions = []
    if draw(st.booleans()):
        kinds["p"] = draw(st.sampled_from(_PARTITION_KINDS))
        partitions = ["p"]
    pools = {c: draw(st.lists(st.none() | k.values, min_size=1, max_size=3)) for c, k in kinds.items()}
    batches = draw_batches(draw, pools, st.lists(st.integers(0, 4), min_size=2, max_size=3))
    conf = {key: draw(st.sampled_from(values)) for key, values in _CONF.items()}
    sink = draw(st.sampled_from(_SINKS))
    writers = ()
    if sink == "ParquetSink" and draw(st.booleans()):
        timestamp_types = st.none() | st.sampled_from(_CONF["spark.sql.parquet.outputTimestampType"])
        writers = tuple(draw(st.tuples(st.sampled_from(["spark", "spark", "arrow"]), timestamp_types)) for _ in batches)
    return SparkCase(kinds, partitions, batches, sink, conf, draw(st.sampled_from([None, 1, 2])), writers)


def _inputs(case: SparkCase, directory: Path) -> list[str]:
    """One Parquet file per batch (pyarrow's), mtimes increasing so ``maxFilesPerTrigger=1`` takes them in order."""
    directory.mkdir(parents=True)
    start, paths = time.time() - 1000, []
    for i, rows in enumerate(case.batches):
        path = str(directory / f"{i:04d}.parquet")
        pq.write_table(pa.Table.from_pylist(rows, schema=case.schema), path)
        os.utime(path, (start + i, start + i))
        paths.append(path)
    return paths


def write_with_spark(spark, case: SparkCase, workdir: Path) -> str:
    """``case`` written by its sink with Spark's Parquet writer under its settings; the output's path."""
    out = str(workdir / "out")
    paths = _inputs(case, workdir / "in")
    before = {key: spark.conf.get(key) for key in case.conf}
    for key, value in case.conf.items():
        spark.conf.set(key, value)
    try:
        if case.sink == "ParquetSink":
            for batch_id, path in enumerate(paths):
                writer, timestamp_type = case.writers[batch_id] if case.writers else ("spark", None)
                spark.conf.set("spark.sql.parquet.outputTimestampType",
                               timestamp_type or case.conf["spark.sql.parquet.outputTimestampType"])
                sink = ParquetSink(out, partition_by=case.partitions, writer=writer, compact_interval=3,
                                   max_records_per_file=case.max_records_per_file)
                sink(spark.read.parquet(path), batch_id)
        else:
            stream = spark.readStream.schema(spark.read.parquet(paths[0]).schema).option("maxFilesPerTrigger", 1)
            options = {"maxRecordsPerFile": str(case.max_records_per_file)} if case.max_records_per_file else {}
            run_available_now(stream.parquet(str(workdir / "in")), str(workdir / "checkpoint"), path=out,
                              partitionBy=case.partitions, **options)
    finally:
        for key, value in before.items():
            spark.conf.set(key, value)
    return out


def _extra_values(typ: pa.DataType) -> list:
    """Values of a read column's type beyond the data's, for the filters' literals."""
    if pa.types.is_boolean(typ):
        return [True, False]
    if pa.types.is_floating(typ):
        return [0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1.5]
    if pa.types.is_integer(typ):
        return [0, -1, 1]
    if pa.types.is_decimal(typ):
        return [decimal.Decimal(0)]
    if pa.types.is_string(typ):
        return ["", "a", "é", "\uffff"]
    if pa.types.is_date(typ):
        return [dt.date(1, 1, 1), dt.date(1970, 1, 1)]
    if pa.types.is_timestamp(typ):
        return [dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc if typ.tz else None)]
    return [None]


def _python(value: pa.Scalar) -> object:
    """``value`` as Python's, None where Python cannot hold it (a date before year 1: Spark's LEGACY rebase)."""
    try:
        return value.as_py()
    except (OverflowError, ValueError):
        return None


def filter_case_of(table: pa.Table, partitions: list[str]) -> FilterCase:
    """The :class:`FilterCase` of what ``read_committed`` read (its types, its values), for :func:`filters`;
    binary columns left out (their bounds are not recorded, and the literals are of strings). Rows in id order: the
    files' order (their names) differs from run to run, and Hypothesis replays a draw only from the same choices."""
    table = table.sort_by("id")
    kinds, seen = {}, {}
    for f in table.schema:
        if f.name == "id" or pa.types.is_binary(f.type) or pa.types.is_null(f.type):
            continue
        seen[f.name] = [_python(v) for v in table.column(f.name)]
        values = [v for v in seen[f.name] if v is not None] + _extra_values(f.type)
        kinds[f.name] = Kind(f"read {f.type}", f.type, st.sampled_from(values))
    return FilterCase(kinds, partitions, [[dict(zip(seen, row)) for row in zip(*seen.values())]], 1)


def _canonical(table: pa.Table) -> list[str]:
    """The rows of ``table`` as a multiset, timestamps as microseconds since the epoch (Spark reads every
    timestamp as an instant in microseconds), NaN equal to NaN and -0.0 apart from 0.0."""
    columns = {}
    for f in table.schema:
        column = table.column(f.name)
        if pa.types.is_timestamp(f.type):
            column = column.cast(pa.timestamp("us", f.type.tz)).cast(pa.int64())
        columns[f.name] = column
    return sorted_rows(pa.table(columns))


def check_spark_filters(spark, out: str, chosen: list[ds.Expression], columns: list[str] | None) -> None:
    """Every filter of ``chosen`` agrees with pyarrow's over the unfiltered read of ``out``, which holds Spark's rows
    (those Spark's LEGACY rebase wrote in the hybrid calendar too: read as Spark reads them)."""
    full = read_committed(out)
    assert count_committed(out) == full.num_rows
    assert _canonical(full) == _canonical(to_arrow(spark.read.parquet(out)))
    assert_filters_agree(out, full, chosen, columns)


def test_filtered_reads_of_spark_written_files(spark, tmp_path_factory, fuzz_minutes: float) -> None:
    """Random outputs written with Spark's writer and random filters (fixed seed, a few examples;
    ``--fuzz-minutes`` for a long random search)."""
    config = fixed_or_fuzzed(fuzz_minutes, 5, 40)

    @config
    @given(st.data())
    def run(data: st.DataObject) -> None:
        case = data.draw(spark_cases())
        out = write_with_spark(spark, case, tmp_path_factory.mktemp("spark-filters"))
        full = read_committed(out)
        filter_case = filter_case_of(full, case.partitions)
        chosen = data.draw(st.lists(filters(filter_case), min_size=6, max_size=14)) if filter_case.kinds else []
        check_spark_filters(spark, out, chosen, data.draw(st.none() | st.just(["id"])))

    deadline = time.monotonic() + 60 * fuzz_minutes
    run()
    while time.monotonic() < deadline:
        run()


def test_regression_timestamps_of_two_physical_types(spark, tmp_path):
    """An output whose timestamp column is INT96 in one batch's file and TIMESTAMP_MICROS / _MILLIS in another's
    (Spark's setting changed between batches, or the Arrow path's files next to Spark's: the schema rule takes them
    as one type) reads as instants in UTC when its first and last files differ (naive when both are INT96), filtered
    or not. Before, every read of the first two outputs raised pyarrow's ArrowTypeError ("Cannot merge timestamp
    with timezone and timestamp without timezone")."""
    utc = dt.timezone.utc
    rows = [[{"id": 0, "c0": dt.datetime(1000, 1, 1, tzinfo=utc)}],
            [{"id": 1, "c0": dt.datetime(2020, 1, 1, tzinfo=utc)}], [{"id": 2, "c0": None}]]
    late = pa.scalar(dt.datetime(1500, 1, 1, tzinfo=utc), pa.timestamp("us", "UTC"))
    for name, writers, read_as in (
        ("micros", (("spark", "INT96"), ("spark", "INT96"), ("spark", "TIMESTAMP_MICROS")), pa.timestamp("us", "UTC")),
        ("millis", (("spark", "TIMESTAMP_MILLIS"), ("arrow", None), ("spark", "INT96")), pa.timestamp("us", "UTC")),
        ("ends", (("spark", "INT96"), ("spark", "TIMESTAMP_MICROS"), ("spark", "INT96")), pa.timestamp("us")),
    ):
        case = SparkCase({"c0": _KIND["timestamp"]}, [], rows, "ParquetSink", {k: v[0] for k, v in _CONF.items()}, None,
                         writers)
        out = write_with_spark(spark, case, tmp_path / name)
        full = read_committed(out)
        assert full.schema.field("c0").type == read_as
        literal = late if read_as.tz else late.cast(read_as)
        column = ds.field("c0")
        chosen = [column > literal, column < literal, column.is_null(), ~(column == literal)]
        check_spark_filters(spark, out, chosen, None)


def test_a_column_of_two_types_is_a_schema_mismatch(tmp_path):
    """Files of one column in types nothing unifies (Spark's own sink writing an int, then a string: it checks no
    schema) are a SchemaMismatchError naming the files and what to do, not pyarrow's ArrowTypeError."""
    import pytest

    from parquet_sink import errors
    from parquet_sink.log.metadata_log import MetadataLog
    from tests.delta.readers import spark_style_batch

    out = str(tmp_path / "out")
    log = MetadataLog(out)
    spark_style_batch(log, pa.table({"c": [1]}), (), old=False)
    spark_style_batch(log, pa.table({"c": ["x"]}), (), old=False)
    for read in (lambda: read_committed(out), lambda: read_committed(out, filter=ds.field("c") == 1),
                 lambda: count_committed(out, filter=ds.field("c") == 1)):
        with pytest.raises(errors.SchemaMismatchError, match=r"part-.*part-.* hold a column in types .*batches="):
            read()
    assert read_committed(out, as_of_batch=0).column("c").to_pylist() == [1]


def test_spark_files_in_the_julian_calendar_have_no_date_bounds(spark, tmp_path):
    """Spark's own file sink under ``datetimeRebaseModeInWrite=LEGACY`` stores 1000-01-01 as the day pyarrow reads as
    1000-01-06 (Spark reads 1000-01-01): the footer's statistics give no bound of such a column (before: 1000-01-06,
    a min above the value Spark reads), other columns keep theirs; ``read_committed`` reads 1000-01-01 and 0001-01-01
    as Spark does (it read the stored days, 0001-01-01 as a day before year 1), and filters agree with pyarrow's
    over that read."""
    from parquet_sink import committed_files
    from parquet_sink.statistics import file_statistics

    conf = {k: v[0] for k, v in _CONF.items()} | {"spark.sql.parquet.datetimeRebaseModeInWrite": "LEGACY"}
    rows = [[{"id": 0, "c0": dt.date(1000, 1, 1), "c1": 5}, {"id": 2, "c0": dt.date(1, 1, 1), "c1": 7}],
            [{"id": 1, "c0": dt.date(2000, 1, 1), "c1": 6}]]
    case = SparkCase({"c0": _KIND["date"], "c1": _KIND["int"]}, [], rows, "spark file sink", conf, None)
    out = write_with_spark(spark, case, tmp_path)
    dates = [dt.date(1000, 1, 1), dt.date(2000, 1, 1), dt.date(1, 1, 1)]
    assert [r.c0 for r in spark.read.parquet(out).orderBy("id").collect()] == dates
    for f in committed_files(out):
        leaves = file_statistics(pq.read_metadata(f.path))
        assert leaves[("c0",)].min is None and leaves[("c0",)].null_count == 0 and leaves[("c1",)].min is not None
    day = pa.scalar(dt.date(1000, 1, 3), pa.date32())
    check_spark_filters(spark, out, [ds.field("c0") < day, ds.field("c0") >= day, ds.field("c1") == 5], None)
    assert read_committed(out).sort_by("id").column("c0").to_pylist() == [dates[0], dates[1], dates[2]]
