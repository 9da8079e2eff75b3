"""Dates and timestamps Spark stored in the hybrid Julian calendar, read as Spark reads them: in the proleptic
Gregorian calendar (the counterpart of Spark's ``RebaseDateTime`` and ``DataSourceUtils.datetimeRebaseSpec``).

Spark before 3.0 (3.1 for INT96), and Spark 3+ under ``spark.sql.parquet.datetimeRebaseModeInWrite`` /
``int96RebaseModeInWrite`` ``LEGACY``, stores a date or timestamp as the day the hybrid calendar (Julian before
1582-10-15) gives it, and marks the file (:func:`~parquet_sink.statistics.hybrid_calendar`). Spark's reader rebases
such values: 1000-01-01 is stored as the day Parquet's own calendar (proleptic Gregorian) calls 1000-01-06, and
``spark.read.parquet`` returns 1000-01-01. pyarrow returns the stored day. This module gives every reader here
Spark's values:

* a date before 1582-10-15 becomes the proleptic Gregorian date of the same year, month and day, a Julian leap day
  the Gregorian calendar lacks (1000-02-29) the day after the 28th (Spark's ``LocalDate.of(y, m, 1).plusDays(d - 1)``);
* a timestamp the same, for its local date-time in the writer's time zone (the file's ``org.apache.spark.timeZone``,
  else UTC; Spark uses its JVM's default zone there), the time of day kept. Before 1582 every zone's offset is its
  local mean time, constant, so the instant moves by whole days.

Only top-level columns are rebased (a date inside a struct or list is read as stored), and only values before
1582-10-15: Spark's tables also move some zones' timestamps up to 1900, where ``java.util.TimeZone`` and
``java.time`` disagree on old offsets, which this module does not reproduce.

Example::

    >>> to_proleptic(pq.read_table("part-0.parquet"), pq.read_metadata("part-0.parquet")).column("day")[0]
    <pyarrow.Date32Scalar: datetime.date(1000, 1, 1)>
"""

from __future__ import annotations

import datetime as _dt
import json
import zoneinfo

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .statistics import (
    LEGACY_KEYS, SPARK_VERSION_KEY, LeafPath, LeafStatistics, file_statistics, hybrid_calendar, hybrid_keys,
    stored_hybrid,
)

GREGORIAN_START_DAY = -141427  # 1582-10-15 in days since 1970-01-01: the hybrid calendar is Julian before it
_EPOCH_JDN = 2440588  # the Julian day number of 1970-01-01
_UNITS_PER_DAY = {"s": 86_400, "ms": 86_400_000, "us": 86_400_000_000, "ns": 86_400_000_000_000}
_SPARK_TIME_ZONE = b"org.apache.spark.timeZone"  # the zone Spark's LEGACY writer rebased timestamps in
_OLD = _dt.datetime(1500, 1, 1)  # an instant before every zone's first transition: its local mean time


def gregorian_days(days: np.ndarray) -> np.ndarray:
    """Spark's ``rebaseJulianToGregorianDays``: each day (since 1970-01-01) before 1582-10-15 as the hybrid
    calendar's year, month and day read in the proleptic Gregorian calendar; later days as they are."""
    jdn = days.astype(np.int64) + _EPOCH_JDN
    # the Julian calendar's date of a Julian day number (Richards' algorithm, floor division throughout)
    c = jdn + 32082
    d = (4 * c + 3) // 1461
    e = c - (1461 * d) // 4
    m = (5 * e + 2) // 153
    day = e - (153 * m + 2) // 5 + 1
    month = m + 3 - 12 * (m // 10)
    year = d - 4800 + m // 10
    # the proleptic Gregorian day of year-month-01 (Hinnant's days_from_civil), then day - 1 days on
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * ((month + 9) % 12) + 2) // 5
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    first = era * 146097 + doe - 719468
    return np.where(days < GREGORIAN_START_DAY, first + day - 1, days)


def gregorian_instants(values: np.ndarray, unit: str, offset_seconds: int) -> np.ndarray:
    """Spark's ``rebaseJulianToGregorianMicros`` for instants (``unit`` since the epoch) whose local time is
    ``offset_seconds`` ahead of UTC: the local date moved as :func:`gregorian_days` moves it, the time of day kept."""
    per_day = _UNITS_PER_DAY[unit]
    local_day = (values + offset_seconds * (per_day // 86_400)) // per_day
    return values + (gregorian_days(local_day) - local_day) * per_day


def _offset_seconds(metadata: pq.FileMetaData) -> int:
    """The offset before 1582 of the zone Spark's writer rebased the file's timestamps in (UTC when unnamed or
    unknown here)."""
    name = (metadata.metadata or {}).get(_SPARK_TIME_ZONE)
    try:
        zone = zoneinfo.ZoneInfo(name.decode()) if name else None
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, UnicodeDecodeError):
        zone = None
    offset = zone.utcoffset(_OLD) if zone is not None else None
    return int(offset.total_seconds()) if offset is not None else 0


def rebased_columns(metadata: pq.FileMetaData, schema: pa.Schema) -> dict[str, int | None]:
    """The top-level columns of ``schema`` (a read of the file whose footer is ``metadata``) that hold values in
    the hybrid calendar: dates (None) and Spark ``TimestampType`` timestamps (the writer zone's offset in seconds;
    ``TimestampNTZType`` is never rebased, as Spark's reader leaves it). Empty for most files."""
    hybrid = hybrid_calendar(metadata)
    if not any(hybrid):
        return {}
    columns = {metadata.schema.column(i).path: metadata.schema.column(i) for i in range(metadata.num_columns)}
    out: dict[str, int | None] = {}
    for f in schema:
        column = columns.get(f.name)
        if column is None or not pa.types.is_date32(f.type) and not pa.types.is_timestamp(f.type):
            continue
        if not stored_hybrid(f.type, column.physical_type, hybrid):
            continue
        if pa.types.is_date32(f.type):
            out[f.name] = None
            continue
        # INT96 is Spark's TimestampType; an INT64 one only when adjusted to UTC (TimestampNTZ is never rebased)
        logical = json.loads(column.logical_type.to_json() or "{}")
        if column.physical_type == "INT96" or logical.get("isAdjustedToUTC") is True:
            out[f.name] = _offset_seconds(metadata)
    return out


def _gregorian_start(typ: pa.DataType) -> pa.Scalar:
    """1582-10-16 (UTC: a day's margin for zones) as a value of ``typ`` (date32 or timestamp): no value from then
    on is stored otherwise in the hybrid calendar."""
    per_day = 1 if pa.types.is_date32(typ) else _UNITS_PER_DAY[typ.unit]
    return pa.scalar((GREGORIAN_START_DAY + 1) * per_day, pa.int32() if per_day == 1 else pa.int64()).cast(typ)


def before_gregorian(column: pa.ChunkedArray) -> np.ndarray:
    """Which values of ``column`` (date32 or timestamp) are before :func:`_gregorian_start`, the only ones the hybrid
    calendar can have stored otherwise (nulls: False)."""
    return np.asarray(pc.fill_null(pc.less(column, _gregorian_start(column.type)), False))


def may_need_rebase(table: pa.Table) -> list[str]:
    """The top-level date and timestamp columns of ``table`` holding a value :func:`before_gregorian`: only a file
    of those can need :func:`to_proleptic`. One pass (a minimum) over each such column."""
    names = []
    for f in table.schema:
        if pa.types.is_date32(f.type) or pa.types.is_timestamp(f.type):
            low = pc.min(table.column(f.name))
            if low.is_valid and pc.less(low, _gregorian_start(f.type)).as_py():
                names.append(f.name)
    return names


def _rebased(column: pa.ChunkedArray, offset: int | None, rows: np.ndarray | None) -> pa.ChunkedArray:
    """``column`` (date32 or timestamp) with its values (of ``rows`` only, a boolean mask, when given) rebased."""
    array = column.combine_chunks()
    typ = array.type
    valid = np.asarray(array.is_valid())
    raw = np.asarray(array.cast(pa.int32() if pa.types.is_date32(typ) else pa.int64()).fill_null(0))
    moved = gregorian_days(raw) if offset is None else gregorian_instants(raw, typ.unit, offset)
    if rows is not None:
        moved = np.where(rows, moved, raw)
    values = pa.array(moved.astype(np.int32 if pa.types.is_date32(typ) else np.int64), mask=~valid)
    return pa.chunked_array([values.cast(typ)])


def to_proleptic(table: pa.Table, metadata: pq.FileMetaData) -> pa.Table:
    """``table``, read from the one file whose footer is ``metadata``, with the values Spark reads from it (see the
    module docstring); ``table`` itself when the file holds none in the hybrid calendar."""
    for name, offset in rebased_columns(metadata, table.schema).items():
        table = table.set_column(table.schema.get_field_index(name), table.schema.field(name),
                                 _rebased(table.column(name), offset, None))
    return table


def rows_to_proleptic(
    table: pa.Table, fragment: np.ndarray, footers: dict[int, pq.FileMetaData], names: list[str]
) -> pa.Table:
    """``table``, whose row ``i`` was read from file ``fragment[i]`` (``footers``: the footer of each), with the
    values Spark reads in the columns ``names`` (:func:`may_need_rebase`)."""
    plans = {i: rebased_columns(footer, table.schema) for i, footer in footers.items()}
    for name in names:
        files = {i: plan[name] for i, plan in plans.items() if name in plan}
        if not files:
            continue
        offsets = set(files.values())
        for offset in offsets:  # one pass per distinct zone (one, nearly always)
            chosen = np.isin(fragment, [i for i, o in files.items() if o == offset])
            index = table.schema.get_field_index(name)
            table = table.set_column(index, table.schema.field(name), _rebased(table.column(name), offset, chosen))
    return table


def proleptic_bounds(low: pa.Scalar, high: pa.Scalar, offset: int | None) -> tuple[pa.Scalar, pa.Scalar]:
    """Bounds of what Spark reads (:func:`to_proleptic`) from a column whose stored values lie within
    ``low``..``high`` (date32 or timestamp scalars; ``offset``: :func:`rebased_columns`' value of the column).

    The rebase is monotonic for dates: a later hybrid day has a later (year, month, day), and the proleptic day of
    a (year, month, day) grows with it, two days at most meeting (a Julian leap day the Gregorian calendar lacks,
    1000-02-29, and the 1st of March after it both read as 1000-03-01), so the least and the greatest stored day
    give the least and the greatest day read: the bounds are exact. For timestamps it is monotonic but at those
    meetings, where the later day's early hours read before the leap day's late ones (1000-02-29T12:00 reads
    as 1000-03-01T12:00, 1000-03-01T00:00 as itself): there a bound is widened to the whole day read (a lower
    bound to its first instant, an upper bound to its last), still a bound of every value, no longer the value.

    Example: ``proleptic_bounds(pa.scalar(-354280, pa.date32()), pa.scalar(10957, pa.date32()), None)`` ->
    (1000-01-01, 2000-01-01) for stored days 1000-01-06 and 2000-01-01.
    """
    if pa.types.is_date32(low.type):
        days = gregorian_days(np.array([low.value, high.value], np.int64))
        return pa.scalar(int(days[0]), pa.date32()), pa.scalar(int(days[1]), pa.date32())
    unit = low.type.unit
    per_day = _UNITS_PER_DAY[unit]
    shift = (offset or 0) * (per_day // 86_400)
    moved = gregorian_instants(np.array([low.value, high.value], np.int64), unit, offset or 0)
    day_low, day_high = (low.value + shift) // per_day, (high.value + shift) // per_day
    read = gregorian_days(np.array([day_low, day_low + 1, day_high - 1, day_high], np.int64))
    lower = int(read[0]) * per_day - shift if read[0] == read[1] else int(moved[0])  # the next day reads as this one
    upper = int(read[3] + 1) * per_day - shift - 1 if read[2] == read[3] else int(moved[1])  # the day before does
    return pa.scalar(lower, pa.int64()).cast(low.type), pa.scalar(upper, pa.int64()).cast(high.type)


def hybrid_leaf_statistics(
    metadata: pq.FileMetaData, leaves: dict[LeafPath, LeafStatistics] | None = None
) -> dict[LeafPath, LeafStatistics]:
    """The leaves of ``leaves`` (a file's statistics of its stored values: ``file_statistics(metadata,
    stored=True)``, its default, with ``data_statistics``' for leaves the footer has no bounds of) that Spark
    stored in the hybrid calendar, with bounds of what Spark (and ``read_committed``) reads from them: a top-level
    column :func:`to_proleptic` rebases gets :func:`proleptic_bounds`, a ``TimestampNTZ`` its own (never rebased), a
    date or timestamp inside a struct none (Spark rebases it, ``read_committed`` does not: no bound holds both). Empty
    for a file without the hybrid calendar's markers. The one rule of both table-format mirrors' statistics.

    A reader that rebases (Spark, Delta on Spark) then prunes exactly; one that reads the stored days (delta-rs,
    polars, duckdb, pyiceberg: 1000-01-06 for 1000-01-01) never loses by it a row it reads as ``read_committed``
    does (every value from 1582-10-15 on, which the rebase leaves as it is, lies within the bounds), and returns no
    row ``read_committed`` leaves out that it would not return under the stored bounds.

    Example: ``hybrid_leaf_statistics(footer, file_statistics(footer, stored=True))[("d",)].min`` ->
    ``<pyarrow.Date32Scalar: datetime.date(1000, 1, 1)>`` (stored as 1000-01-06).
    """
    hybrid = hybrid_calendar(metadata)
    if not any(hybrid):
        return {}
    if leaves is None:
        leaves = file_statistics(metadata, stored=True)
    rebased = rebased_columns(metadata, metadata.schema.to_arrow_schema())
    physical = {metadata.schema.column(i).path: metadata.schema.column(i).physical_type
                for i in range(metadata.num_columns)}
    found = {}
    for path, stats in leaves.items():
        typ = next((b.type for b in (stats.min, stats.max) if b is not None), None)
        if typ is None or not stored_hybrid(typ, physical.get(".".join(path)), hybrid):
            continue
        if len(path) > 1:
            found[path] = LeafStatistics(None, None, stats.null_count)
        elif path[0] in rebased and stats.min is not None and stats.max is not None:
            found[path] = LeafStatistics(*proleptic_bounds(stats.min, stats.max, rebased[path[0]]), stats.null_count)
    return found


def proleptic_metadata(metadata: dict[bytes, bytes] | None) -> dict[bytes, bytes] | None:
    """Footer metadata for a file written from rebased values (``optimize``'s): ``metadata`` (an input's) without
    the keys that would make Spark read it in the hybrid calendar (the LEGACY markers, a Spark version before 3.1)."""
    if not metadata:
        return metadata
    kept = {k: v for k, v in metadata.items() if k not in (*LEGACY_KEYS, _SPARK_TIME_ZONE)}
    if any(hybrid_keys(kept)):  # the Spark version alone still says hybrid (before 3.0 / 3.1)
        del kept[SPARK_VERSION_KEY]
    return kept


__all__ = [
    "GREGORIAN_START_DAY", "before_gregorian", "gregorian_days", "gregorian_instants", "hybrid_leaf_statistics",
    "may_need_rebase", "proleptic_bounds", "proleptic_metadata", "rebased_columns", "rows_to_proleptic", "to_proleptic",
]
