"""ParquetSink's own checks: constructor parameters (every bad value a clear ValueError at construction,
every Parquet codec name Spark accepts that pyarrow can write, named as Spark names its files) and the
restart's schema comparison of nested types with a session time zone other than ``UTC``."""

from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from parquet_sink import MetadataLog, ParquetSink, read_committed
from parquet_sink.log.metadata_log import parse_duration_ms

BAD_PARAMETERS = {
    "compact_interval=0": ({"compact_interval": 0}, "compact_interval must be a positive integer"),
    "compact_interval=-3": ({"compact_interval": -3}, "compact_interval must be a positive integer"),
    "max_records_per_file=0": ({"max_records_per_file": 0}, "use None for no limit"),
    "max_records_per_file=-1": ({"max_records_per_file": -1}, "use None for no limit"),
    "min_batches_to_retain=0": ({"min_batches_to_retain": 0}, "min_batches_to_retain must be a positive integer"),
    "min_batches_to_retain=-1": ({"min_batches_to_retain": -1}, "min_batches_to_retain must be a positive"),
    "retention=soon": ({"retention": "soon"}, "retention='soon' is not a duration"),
    "retention=7": ({"retention": "7"}, "retention='7' is not a duration"),
    "retention=0s": ({"retention": "0s"}, "retention must be longer than 0"),
    "cleanup_delay=10 fortnights": ({"cleanup_delay": "10 fortnights"}, "cleanup_delay='10 fortnights' is not a"),
    "cleanup_delay=-5": ({"cleanup_delay": -5}, "a bare number is refused"),
    "on_foreign_query=skip": ({"on_foreign_query": "skip"}, "on_foreign_query must be 'error' or 'append'"),
    "compression=lzo": ({"compression": "lzo"}, "pyarrow cannot write LZO"),
    "compression=lz4": ({"compression": "lz4"}, "use 'lz4_raw'"),
    "compression=zip": ({"compression": "zip"}, "unknown Parquet compression 'zip'"),
    "partition_by=string": ({"partition_by": "day"}, "must be a list of column names"),
}


@pytest.mark.parametrize("case", list(BAD_PARAMETERS))
def test_bad_parameters_refused_at_construction(case: str, tmp_path: Path) -> None:
    kwargs, message = BAD_PARAMETERS[case]
    with pytest.raises(ValueError, match=re.escape(message)):
        ParquetSink(str(tmp_path / "out"), **kwargs)
    assert not (tmp_path / "out").exists(), "a refused sink must not touch the output"


def test_good_parameters_accepted(tmp_path: Path) -> None:
    sink = ParquetSink(
        str(tmp_path / "out"), compact_interval=1, max_records_per_file=1, min_batches_to_retain=1,
        retention="7d", cleanup_delay="0s", on_foreign_query="append", compression="UNCOMPRESSED",
    )
    assert sink.compression == "none"
    assert parse_duration_ms(sink.retention) == 7 * 86_400_000


# Spark's name -> (the extension Spark's own Parquet writer gives its files, the codec in the footer).
SPARK_CODECS = {
    "none": ("", "UNCOMPRESSED"),
    "uncompressed": ("", "UNCOMPRESSED"),
    "snappy": (".snappy", "SNAPPY"),
    "gzip": (".gz", "GZIP"),
    "lz4_raw": (".lz4raw", "LZ4"),  # pyarrow reports LZ4_RAW as "LZ4"; Spark reads it (checked below)
    "zstd": (".zstd", "ZSTD"),
}


def _extension(name: str) -> str:
    """``part-...c000.snappy.parquet`` -> ``.snappy``; ``part-...c000.parquet`` -> ``""``."""
    match = re.fullmatch(r"part-\d{5}-[0-9a-f-]{36}[.-]c\d{3}(\.[a-z0-9]+)?\.parquet", name)
    assert match, name
    return match.group(1) or ""


@pytest.mark.parametrize("codec", list(SPARK_CODECS))
def test_every_spark_codec_name_written_and_named_like_spark(spark, tmp_path: Path, codec: str) -> None:
    """Spark's own writer and the sink, one codec name: the same file extension, and Spark reads ours."""
    spark_dir = tmp_path / "spark"
    spark.range(5).write.option("compression", codec).parquet(str(spark_dir))
    spark_ext = {_extension(n) for n in os.listdir(spark_dir) if n.endswith(".parquet")}
    expected_ext, footer_codec = SPARK_CODECS[codec]
    assert spark_ext == {expected_ext}

    out = str(tmp_path / "out")
    ParquetSink(out, compression=codec)(spark.range(5), 0)
    ours = [e.path for e in MetadataLog(out).all_files() if not e.is_dir]
    assert ours and {_extension(p.rsplit("/", 1)[1]) for p in ours} == spark_ext
    for path in ours:
        metadata = pq.read_metadata(MetadataLog(out).storage.from_uri(path))
        assert metadata.row_group(0).column(0).compression == footer_codec
    assert sorted(r.id for r in spark.read.parquet(out).collect()) == list(range(5))
    assert sorted(read_committed(out).column("id").to_pylist()) == list(range(5))


# -- nested timestamps across a restart ------------------------------------------------------------

NESTED = (
    "select id, timestamp'2026-11-21 10:00:00' + make_interval(0, 0, 0, 0, id) as ts, "
    "named_struct('at', timestamp'2026-11-21 10:00:00' + make_interval(0, 0, 0, id), 'n', id) as s, "
    "array(timestamp'2026-01-01 00:00:00', timestamp'2026-07-01 12:30:00') as a, "
    "map('k', timestamp'2026-03-29 01:30:00') as m, "
    "array(named_struct('m', map(id, timestamp'2026-10-25 02:30:00'))) as deep "
    "from range({start}, {end})"
)


@pytest.mark.parametrize("writer", ["arrow", "spark"])
@pytest.mark.parametrize("zone", ["Etc/UTC", "America/Los_Angeles"])
def test_restart_accepts_nested_timestamps(spark, tmp_path: Path, zone: str, writer: str) -> None:
    """Struct, list, map (and a list of structs of maps) holding timestamps, session time zone other than
    ``UTC``: a new sink (a restart, which reads the committed schema from the files) must accept the same
    schema, and every value must come back as Spark wrote it."""
    out = str(tmp_path / "out")
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        ParquetSink(out, writer=writer)(spark.sql(NESTED.format(start=0, end=3)), 0)
        restarted = ParquetSink(out, writer=writer)
        restarted(spark.sql(NESTED.format(start=3, end=6)), 1)
        assert restarted.last_progress.rows == 3 and not restarted.last_progress.skipped
        expected = spark.sql(NESTED.format(start=0, end=6)).collect()
        theirs = spark.read.parquet(out).collect()
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)
    key = lambda r: r.id  # noqa: E731
    assert sorted(theirs, key=key) == sorted(expected, key=key)
    ours = sorted(read_committed(out).to_pylist(), key=lambda r: r["id"])
    first = ours[1]
    instant = sorted(expected, key=key)[1].s.at.astimezone(dt.timezone.utc)
    # The Arrow path stores UTC-adjusted microseconds (read back with tz=UTC); Spark's writer stores INT96,
    # as Spark's own sink does, which pyarrow reads back as the naive UTC wall time.
    assert first["s"]["at"] == (instant if writer == "arrow" else instant.replace(tzinfo=None))
    assert [r["id"] for r in ours] == list(range(6))
    assert MetadataLog(out).latest_batch_id() == 1


# -- ANSI intervals, with Spark's own file sink as the oracle ------------------------------------------

INTERVALS = (
    "id", "make_ym_interval(cast(id div 12 as int), cast(id % 12 as int) - 5) as ym",
    "make_dt_interval(cast(id as int), 2, 3, id * 1.000001) as dt",
    "named_struct('at', make_ym_interval(1, cast(id as int)), 'n', id) as s", "array(make_ym_interval(0, -cast(id as int))) as a",
)


def _interval_rows(out: str) -> list[dict]:
    """What ``read_committed`` gives, a day-time interval as its microseconds whichever Arrow type holds it."""
    def micros(value):
        return value // dt.timedelta(microseconds=1) if isinstance(value, dt.timedelta) else value

    return sorted(({**r, "dt": micros(r["dt"])} for r in read_committed(out).to_pylist()), key=lambda r: r["id"])


@pytest.mark.parametrize("writer", ["arrow", "spark"])
def test_intervals_are_written_as_sparks_sink_writes_them_across_a_restart(spark, tmp_path: Path, writer: str) -> None:
    """Year-month intervals (``make_ym_interval``) were refused with PySpark's PySparkTypeError though Spark's own
    file sink writes them (Parquet INT32 months); day-time intervals were written, but the Spark writer path refused
    its own files' schema after a restart (the footer's INT64 against the batch's duration: SchemaMismatchError).
    Both, at the top level and nested, in two runs of a stream (a new sink each): every value as Spark's own sink
    wrote it, Spark's reader reads ours as it reads Spark's."""
    from tests.helpers.spark_util import run_available_now

    source = tmp_path / "in"
    source.mkdir()
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    for run in range(2):
        ids = range(run * 20, run * 20 + 20)
        (source / f"{run}.json").write_text("".join(f'{{"id": {i}}}\n' for i in ids))
        os.utime(source / f"{run}.json", (1_700_000_000 + run,) * 2)
        stream = spark.readStream.schema("id LONG").option("maxFilesPerTrigger", 1).json(str(source)).selectExpr(*INTERVALS)
        run_available_now(stream, str(tmp_path / "ckpt-ours"), ParquetSink(ours, writer=writer))
        run_available_now(stream, str(tmp_path / "ckpt-theirs"), path=theirs)
    assert MetadataLog(ours).latest_batch_id() == 1
    expected = _interval_rows(theirs)
    assert [r["id"] for r in expected] == list(range(40))
    assert _interval_rows(ours) == expected
    assert expected[30]["ym"] == 25 and expected[30]["s"] == {"at": 42, "n": 30} and expected[30]["a"] == [-30]
    as_text = [f"cast({c} as string) as {c}" for c in ("id", "ym", "dt", "s", "a")]
    if writer == "spark":  # Spark's types, from the Spark schema in the footers (the Arrow path's files hold none)
        assert sorted(spark.read.parquet(ours).selectExpr(*as_text).collect()) == sorted(
            spark.read.parquet(theirs).selectExpr(*as_text).collect()
        )


def test_a_calendar_interval_is_refused_with_a_typed_error(spark, tmp_path: Path) -> None:
    """``make_interval`` gives Spark's CalendarIntervalType, which no Parquet writer holds (Spark's own sink refuses
    it too): a SchemaMismatchError naming the column, the output and the batch, not PySpark's PySparkTypeError."""
    from parquet_sink.errors import SchemaMismatchError

    out = str(tmp_path / "out")
    with pytest.raises(SchemaMismatchError) as refused:
        ParquetSink(out)(spark.sql("select id, make_interval(1, 2) as ci from range(2)"), 0)
    for part in ("log batch 0", out, "'ci'", "Cast them"):
        assert part in str(refused.value), (part, str(refused.value))
    assert not os.path.exists(os.path.join(out, "_spark_metadata", "0"))


def test_the_outputs_spark_timestamp_type_holds_across_the_sink_and_write_batch(spark, tmp_path: Path) -> None:
    """The sink's Spark writer stores a TimestampType as INT96 (read naive by pyarrow and read_committed): a naive
    pandas batch that write_batch appends after it is those instants in UTC and is stored as instants (it was
    stored as TIMESTAMP_NTZ, so Spark read the output as either type by the order of its files); a batch of
    TimestampNTZ handed to the sink after them is a SchemaMismatchError saying to cast, nothing committed."""
    import pandas as pd

    from parquet_sink import errors, write_batch

    out = str(tmp_path / "out")
    ParquetSink(out, writer="spark")(spark.sql("select 0L as id, timestamp'2024-03-31 01:30:00' as ts"), 0)
    ours_before = read_committed(out).schema.field("ts").type
    naive = pd.DataFrame({"id": [1], "ts": [pd.Timestamp("2024-03-31 02:30:00")]})  # the UTC wall clock
    written = write_batch(out, naive, app_id="job", version=0)
    assert written.committed
    # stored as the sink's Spark writer stores instants (INT96): read_committed takes a column's type from the
    # first and the newest file, and reads INT96 naive, a TIMESTAMP adjusted to UTC zoned: the type stays
    assert {pq.ParquetFile(f).schema.column(1).physical_type for f in written.files} == {"INT96"}
    assert read_committed(out).schema.field("ts").type == ours_before
    read = spark.read.parquet(out)
    assert type(read.schema["ts"].dataType).__name__ == "TimestampType"
    assert sorted((r.id, r.ts) for r in read.collect()) == [
        (0, dt.datetime(2024, 3, 31, 1, 30)), (1, dt.datetime(2024, 3, 31, 2, 30))]  # the session zone is UTC
    with pytest.raises(errors.SchemaMismatchError, match=r"'ts'.*instants.*cast to timestamp"):
        ParquetSink(out, writer="spark", on_foreign_query="append")(spark.sql("select 2L as id, timestamp_ntz'2024-03-31 03:30:00' as ts"), 1)
    assert sorted(read_committed(out).column("id").to_pylist()) == [0, 1]


def test_the_arrow_conversion_asks_for_utc_in_each_pyspark_signature() -> None:
    """PySpark's Arrow conversions changed their keywords (3.5: none, UTC always; 4.0/4.1 ``timestamp_utc``; 4.2 on
    ``timezone``, keyword-only): the sink asks each for UTC in its own words (on the older lines of the version
    matrix the real PySpark of each signature writes batches with timestamps: tests/write/test_sink.py)."""
    from parquet_sink.write.spark_versions import _utc

    def v3_5(schema): ...
    def v4_0(schema, error_on_duplicated_field_names_in_struct=False, timestamp_utc=True, prefers_large_types=False): ...
    def v4_2(schema, *, error_on_duplicated_field_names_in_struct=False, timezone=None, prefers_large_types=False): ...

    assert [_utc(f) for f in (v3_5, v4_0, v4_2)] == [{}, {"timestamp_utc": True}, {"timezone": "UTC"}]


def test_a_failure_inside_the_schema_conversion_is_not_the_users(spark, tmp_path: Path, monkeypatch) -> None:
    """A conversion of the batch's schema that fails for a reason other than PySpark refusing a column's type (here
    a TypeError, as a PySpark without the keyword the sink passes raised) is this package's error, chained as it
    is: never a user's SchemaMismatchError telling them to cast columns Parquet holds. Nothing is committed."""
    import pyspark.sql.pandas.types as pandas_types

    from parquet_sink.errors import SchemaMismatchError

    def broken(*args, **kwargs):
        raise TypeError("to_arrow_schema() got an unexpected keyword argument")

    monkeypatch.setattr(pandas_types, "to_arrow_schema", broken)
    monkeypatch.setattr(pandas_types, "to_arrow_type", broken)
    out = str(tmp_path / "out")
    with pytest.raises(TypeError, match="unexpected keyword") as failed:
        ParquetSink(out)(spark.sql("select id, cast(id as string) as s from range(3)"), 0)
    assert not isinstance(failed.value, SchemaMismatchError)
    assert not os.path.exists(os.path.join(out, "_spark_metadata", "0"))
