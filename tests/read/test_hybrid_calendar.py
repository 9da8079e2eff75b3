"""Files in Spark's hybrid Julian calendar (``datetimeRebaseModeInWrite`` / ``int96RebaseModeInWrite`` LEGACY,
or written by Spark before 3.0 / 3.1) read as Spark reads them: ``spark.read.parquet`` is the oracle.

Files marked as Spark 2.4's (pyarrow-written, Spark's footer keys: every day Spark 2.4 could store, Julian leap
days the proleptic calendar lacks included) and files Spark 4 writes under LEGACY, through ``read_committed``
filtered or not, ``count_committed`` with a filter, and ``optimize``, whose rewritten file must read the same in
Spark and here (before, it kept the newest input's calendar markers for every input's values)."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from hypothesis import example, given, settings
from hypothesis import strategies as st

from parquet_sink import LogEntry, MetadataLog, count_committed, read_committed, write_batch
from parquet_sink.rebase import GREGORIAN_START_DAY, gregorian_days, gregorian_instants, proleptic_bounds
from parquet_sink.write.rewrite import optimize
from tests.helpers.spark_util import to_arrow

DAY_US = 86_400_000_000
_SPARK_24 = {b"org.apache.spark.version": b"2.4.8"}
# stored days: year 1 (pyarrow and Python hold no earlier day) .. a few years after the Gregorian start, the switch drawn often
_DAYS = st.integers(-719_162, GREGORIAN_START_DAY + 2_000) | st.sampled_from(
    [GREGORIAN_START_DAY - 1, GREGORIAN_START_DAY, GREGORIAN_START_DAY - 366, -719_162, -718_800, 0])


def _commit(out: str, tables: list[tuple[pa.Table, dict[bytes, bytes], bool]]) -> None:
    """Each table one committed batch of ``out``: a Parquet file with the footer keys given (INT96 timestamps when
    asked), logged as Spark's sink logs one."""
    log = MetadataLog(out)
    for batch, (table, keys, int96) in enumerate(tables):
        path = Path(out) / f"part-{batch:05d}-0000.c000.snappy.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table.replace_schema_metadata(keys), path, use_deprecated_int96_timestamps=int96)
        assert log.add(batch, [LogEntry(path.as_uri(), path.stat().st_size, False, int(time.time() * 1000))])


def _spark_rows(spark, out: str) -> list[tuple]:
    frame = to_arrow(spark.read.parquet(out))
    return sorted(zip(*(frame.column(c).to_pylist() for c in ("id", "d", "t"))))


def _rows(table: pa.Table) -> list[tuple]:
    t = table.column("t").cast(pa.timestamp("us", "UTC"))
    return sorted(zip(table.column("id").to_pylist(), table.column("d").to_pylist(), t.to_pylist()))


@settings(max_examples=4, derandomize=True, deadline=None, database=None)
@given(
    days=st.lists(_DAYS, min_size=1, max_size=6),
    micros=st.lists(st.integers(0, DAY_US - 1), min_size=6, max_size=6),
    int96=st.booleans(),
    legacy_first=st.booleans(),
)
def test_files_of_spark_24_read_as_spark_reads_them(spark, tmp_path_factory, days, micros, int96, legacy_first) -> None:
    """Random stored days and times of day in a file marked as Spark 2.4's, next to a file of proleptic values (Spark
    3's): every value reads as ``spark.read.parquet`` reads it, unfiltered, filtered and counted; after ``optimize``
    merged both files, Spark and ``read_committed`` still read the same rows (Spark reads the rewritten file)."""
    out = str(tmp_path_factory.mktemp("hybrid") / "out")
    n = len(days)
    stored = pa.table({
        "id": pa.array(range(n), pa.int64()),
        "d": pa.array(days, pa.int32()).cast(pa.date32()),
        "t": pa.array([d * DAY_US + m for d, m in zip(days, micros)], pa.int64()).cast(pa.timestamp("us", "UTC")),
    })
    modern = pa.table({"id": pa.array(range(100, 100 + n), pa.int64()), "d": stored.column("d"), "t": stored.column("t")})
    files = [(stored, _SPARK_24, int96), (modern, {b"org.apache.spark.version": b"3.5.0"}, int96)]
    _commit(out, files if legacy_first else files[::-1])
    # optimize refuses an output whose newest batch Spark's own sink committed: the newest is an app's
    write_batch(out, pa.table({"id": [1000], "d": [dt.date(2000, 1, 1)], "t": [dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)]},
                              schema=stored.schema), app_id="newest", version=0, spark_sink_stopped=True)
    expected = _spark_rows(spark, out)
    assert _rows(read_committed(out)) == expected
    # the hybrid file's values moved by whole days before 1582-10-15 and not at all after (the oracle agrees)
    moved = gregorian_days(np.array(days))
    assert [e[1] for e in sorted(expected) if e[0] < 100] == [dt.date(1970, 1, 1) + dt.timedelta(days=int(v)) for v in moved]
    cut = pa.scalar(expected[len(expected) // 2][1], pa.date32())
    kept = _rows(read_committed(out, filter=ds.field("d") < cut))
    assert kept == [e for e in expected if e[1] < cut.as_py()]
    assert count_committed(out, filter=ds.field("d") < cut) == len(kept)
    result = optimize(out, target_file_size="1GB")
    assert result.files_added == 1
    assert _rows(read_committed(out)) == expected == _spark_rows(spark, out)


def test_spark_4_legacy_files_read_as_spark_reads_them(spark, tmp_path) -> None:
    """Spark 4's own writer under LEGACY rebase modes (dates, INT96 and TIMESTAMP_MICROS timestamps) and a
    TimestampNTZ column, which Spark never rebases: ``read_committed`` and ``spark.read.parquet`` agree."""
    rows = "SELECT id, date_add(DATE'0001-01-01', CAST(id * 97 AS INT)) AS d, " \
           "timestamp_seconds(-62135596800 + id * 86400 * 97 + id * 37) AS t, " \
           "to_timestamp_ntz(timestamp_seconds(-62135596800 + id * 86400 * 97)) AS n FROM range(0, 6000, 1, 2)"
    before = {k: spark.conf.get(k) for k in ("spark.sql.parquet.datetimeRebaseModeInWrite",
                                              "spark.sql.parquet.int96RebaseModeInWrite",
                                              "spark.sql.parquet.outputTimestampType")}
    try:
        spark.conf.set("spark.sql.parquet.datetimeRebaseModeInWrite", "LEGACY")
        spark.conf.set("spark.sql.parquet.int96RebaseModeInWrite", "LEGACY")
        for kind in ("INT96", "TIMESTAMP_MICROS"):
            spark.conf.set("spark.sql.parquet.outputTimestampType", kind)
            out = str(tmp_path / kind)
            from parquet_sink import ParquetSink

            ParquetSink(out)(spark.sql(rows), 0)
            theirs = to_arrow(spark.read.parquet(out)).sort_by("id")
            ours = read_committed(out).sort_by("id")
            for column in ("d", "n"):
                assert ours.column(column).to_pylist() == theirs.column(column).to_pylist(), (kind, column)
            assert ours.column("t").cast(pa.timestamp("us", "UTC")).to_pylist() == \
                theirs.column("t").cast(pa.timestamp("us", "UTC")).to_pylist(), kind
            assert ours.column("d")[0].as_py() == dt.date(1, 1, 1)
    finally:
        for key, value in before.items():
            spark.conf.set(key, value)


# the stored day of the Julian leap day 1500-02-29, which the proleptic calendar lacks: it and the next stored day
# (Julian 1500-03-01) both read as 1500-03-01
_NEAR_1500 = (dt.date(1500, 3, 1) - dt.date(1970, 1, 1)).days - 30
_LEAP_1500 = _NEAR_1500 + int(np.flatnonzero(np.diff(gregorian_days(np.arange(_NEAR_1500, _NEAR_1500 + 60))) == 0)[0])


@settings(max_examples=60, derandomize=True, deadline=None, database=None)
@given(
    days=st.lists(_DAYS | st.sampled_from([_LEAP_1500, _LEAP_1500 + 1]), min_size=1, max_size=6),
    micros=st.lists(st.integers(0, DAY_US - 1) | st.sampled_from([0, DAY_US // 2, DAY_US - 1]), min_size=6, max_size=6),
    offset=st.sampled_from([None, 0, -17_762, 5 * 3600 + 1]),  # a date; UTC; New York's and a made-up local mean time
)
# 02-29T12:00 reads after 03-01T00:00
@example(days=[_LEAP_1500, _LEAP_1500 + 1], micros=[DAY_US // 2, 0, 0, 0, 0, 0], offset=0)
@example(days=[_LEAP_1500 + 1, _LEAP_1500], micros=[0, DAY_US // 2, 0, 0, 0, 0], offset=None)
def test_proleptic_bounds_bound_every_value_spark_reads(days, micros, offset) -> None:
    """The bounds of what Spark reads from stored values within a footer's min..max hold every value Spark reads:
    exact for dates (the rebase of days never decreases), for timestamps exact but where the least (greatest)
    stored value's day and the next (previous) one read as one day, a Julian leap day Gregorian lacks: there the
    whole day read (1500-02-29T12:00 reads as 1500-03-01T12:00, after 1500-03-01T00:00)."""
    if offset is None:
        stored = pa.array(days, pa.int32()).cast(pa.date32())
        read = gregorian_days(np.array(days))
    else:
        values = np.array([d * DAY_US + m - offset * 1_000_000 for d, m in zip(days, micros)])
        stored = pa.array(values, pa.timestamp("us", "UTC"))
        read = gregorian_instants(values, "us", offset)
    bounds = pc.min_max(stored)
    low, high = proleptic_bounds(bounds["min"], bounds["max"], offset)
    assert low.type == high.type == stored.type
    assert low.value <= read.min() and high.value >= read.max()
    if offset is None:
        assert (low.value, high.value) == (read.min(), read.max())
    else:  # widened to the day read only at a leap day's meeting
        meets = {_LEAP_1500, _LEAP_1500 + 1}
        if min(days) not in meets:
            assert low.value == read.min()
        if max(days) not in meets:
            assert high.value == read.max()
        assert read.min() - low.value < DAY_US and high.value - read.max() < DAY_US
