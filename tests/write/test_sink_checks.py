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
