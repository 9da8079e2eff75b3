"""Exact per-column statistics of one Parquet file from its footer: for each leaf column reached through
structs only (not inside a list or a map), keyed by its tuple path (``("x", "y")`` for field ``y`` of struct
``x``, apart from a column named ``"x.y"``), the smallest and largest non-null value and the null count over
every row group. The counterpart of parquet-mr's ``ParquetMetadataConverter`` statistics and of what Delta's
``StatisticsCollection`` and delta-rs's ``stats_from_metadata`` derive from a footer; format-independent (the
Delta log's ``add`` actions serialize it, :mod:`parquet_sink.delta.actions`).

Exact or absent: a bound is given only when it is a true bound of every non-null value in the file, never
an approximation. Absent are the bounds of a column when one row group with values has no min/max (INT96
timestamps, a writer that wrote none, values over the writer's statistics size), bounds that are NaN (older
writers), float16 and INTERVAL leaves, strings that are not UTF-8, dates and timestamps Spark's writer stored
in the hybrid Julian calendar (:func:`hybrid_calendar`; ``stored=True`` keeps their stored bounds, which
:func:`parquet_sink.rebase.hybrid_leaf_statistics` turns into the bounds of what Spark reads); a zero float
bound is ``-0.0`` as a min and ``0.0`` as a max (either may hide behind a zero in the footer). NaN is never in
a bound, as Parquet orders floats (IEEE: NaN satisfies no comparison). The null count is absent when one row
group lacks it.

:func:`data_statistics` computes the same from the data, for leaves whose footer has no bounds.

Bounds are ``pyarrow`` scalars of the leaf's logical type as the file stores it (a timestamp in the unit of
the file, UTC-adjusted or not; out-of-range years stay representable), so a caller serializes them its own
way and checks its own ranges.

Layering: imports pyarrow and the standard library only.

Example::

    >>> stats = file_statistics(pq.read_metadata("part-0.parquet"))
    >>> stats[("n",)]
    LeafStatistics(min=<pyarrow.Int64Scalar: 1>, max=<pyarrow.Int64Scalar: 5>, null_count=0)
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

LeafPath = tuple[str, ...]

_TIME_UNITS = {"milliseconds": "ms", "microseconds": "us", "nanoseconds": "ns"}
# Spark's footer keys (DataSourceUtils): its writer rebased the file's dates and timestamps (INT96 timestamps) to
# the hybrid Julian calendar (spark.sql.parquet.datetimeRebaseModeInWrite / int96RebaseModeInWrite=LEGACY)
SPARK_VERSION_KEY = b"org.apache.spark.version"
_LEGACY_DATETIME = b"org.apache.spark.legacyDateTime"
_LEGACY_INT96 = b"org.apache.spark.legacyINT96"
LEGACY_KEYS = (_LEGACY_DATETIME, _LEGACY_INT96)


@dataclass(frozen=True)
class LeafStatistics:
    """What a footer tells exactly about one leaf column of a file: ``min``/``max`` (pyarrow scalars; None:
    unknown or no non-null value) and ``null_count`` (None: unknown)."""

    min: pa.Scalar | None
    max: pa.Scalar | None
    null_count: int | None


def hybrid_calendar(metadata: pq.FileMetaData) -> tuple[bool, bool]:
    """Whether Spark's writer stored the dates and INT64 timestamps, and the INT96 timestamps, of the file whose
    footer is ``metadata`` in the hybrid Julian calendar, as Spark's reader tells from the footer
    (``DataSourceUtils.datetimeRebaseSpec``: a LEGACY rebase mode's key, or Spark before 3.0 / 3.1). Spark reads such
    values rebased to the proleptic Gregorian calendar (1000-01-01 stored as the day pyarrow reads as 1000-01-06), so
    the stored values bound neither what Spark reads nor, once rebased, what other readers do: no bound is exact.

    Example: ``hybrid_calendar(pq.read_metadata("part-0.parquet"))`` -> ``(True, False)`` (LEGACY dates, INT96 not).
    """
    return hybrid_keys(metadata.metadata or {})


def hybrid_keys(keys: Mapping[bytes, bytes]) -> tuple[bool, bool]:
    """:func:`hybrid_calendar` of a footer whose key-value metadata is ``keys``."""
    if SPARK_VERSION_KEY not in keys:
        return False, False  # not Spark's: proleptic Gregorian, as Parquet's spec says
    version = keys[SPARK_VERSION_KEY].decode(errors="replace")
    return version < "3.0.0" or _LEGACY_DATETIME in keys, version < "3.1.0" or _LEGACY_INT96 in keys


def stored_hybrid(typ: pa.DataType, physical: str | None, hybrid: tuple[bool, bool]) -> bool:
    """Whether values of a leaf of Arrow type ``typ`` (Parquet ``physical`` type; None: either) are stored in the
    hybrid calendar (``hybrid``: :func:`hybrid_calendar`)."""
    if pa.types.is_date(typ):
        return hybrid[0]
    if pa.types.is_timestamp(typ):
        return {"INT96": hybrid[1], "INT64": hybrid[0]}.get(physical or "", hybrid[0] or hybrid[1])
    return False


_LISTS = (pa.ListType, pa.LargeListType, pa.FixedSizeListType, pa.ListViewType, pa.LargeListViewType)


def column_leaves(
    typ: pa.DataType, path: LeafPath, array: pa.Array | None = None, repeated: bool = False
) -> Iterator[tuple[LeafPath, pa.DataType, bool, pa.Array | None]]:
    """The leaf columns of a column of type ``typ`` at ``path``, in Parquet's column order and under the names
    pyarrow's writer gives them (a map's ``key_value.key`` / ``key_value.value``, a list's ``list.element``):
    (tuple path, Arrow type, inside a list or map, the leaf's values in the column's values ``array`` when given,
    dictionaries decoded). The one walk of nested columns: footers' statistics, the footer rule of a batch's rows,
    the date range check of a file's columns.

    Example: ``[p for p, *_ in column_leaves(pa.struct([("a", pa.list_(pa.float64()))]), ("s",))]`` ->
    ``[('s', 'a', 'list', 'element')]``.
    """
    if pa.types.is_dictionary(typ):
        typ, array = typ.value_type, None if array is None else array.dictionary_decode()
    if pa.types.is_struct(typ):
        for index, child in enumerate(typ):
            values = None if array is None else array.field(index)
            yield from column_leaves(child.type, path + (child.name,), values, repeated)
    elif pa.types.is_map(typ):
        yield from column_leaves(typ.key_type, path + ("key_value", "key"), None if array is None else array.keys, True)
        yield from column_leaves(typ.item_type, path + ("key_value", "value"), None if array is None else array.items, True)
    elif isinstance(typ, _LISTS):
        yield from column_leaves(typ.value_type, path + ("list", "element"), None if array is None else array.flatten(), True)
    else:
        yield path, typ, repeated, array


def _bound(stats: Any, which: str, typ: pa.DataType, logical: dict[str, Any]) -> pa.Scalar | None:
    """One row group's min or max of a leaf of Arrow type ``typ`` as an exact scalar, None when there is no
    exact one. Timestamps and dates come from the physical value (Python's datetime stops at year 9999)."""
    kind = logical.get("Type")
    if kind == "Timestamp":
        unit = _TIME_UNITS[logical["timeUnit"]]
        return pa.scalar(getattr(stats, f"{which}_raw"), pa.timestamp(unit, "UTC" if logical["isAdjustedToUTC"] else None))
    if kind == "Date":
        return pa.scalar(getattr(stats, f"{which}_raw"), pa.date32())
    if kind in ("Float16", "Interval") or pa.types.is_float16(typ) or pa.types.is_timestamp(typ):
        return None  # float16 bytes, INTERVAL, or a timestamp the footer states without its unit (INT96)
    try:
        value = getattr(stats, which)
    except (UnicodeDecodeError, ValueError, OverflowError):  # a string that is not UTF-8; a value out of range
        return None
    if isinstance(value, float):
        if math.isnan(value):
            return None
        value = _signed_zero(value, which)
    binary = pa.types.is_binary(typ) or pa.types.is_large_binary(typ) or pa.types.is_binary_view(typ)
    if isinstance(value, bytes) and not binary:
        return None
    try:
        return pa.scalar(value, typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return None


def _signed_zero(value: float, which: str) -> float:
    """A zero bound as ``-0.0`` (min) or ``0.0`` (max): either zero may stand behind it."""
    return (-0.0 if which == "min" else 0.0) if value == 0.0 else value


def _merge(low: pa.Scalar | None, high: pa.Scalar | None, value: pa.Scalar, which: str) -> pa.Scalar:
    """The smaller (``min``) or larger (``max``) of a running bound and a row group's."""
    current = low if which == "min" else high
    if current is None:
        return value
    return value if pc.less(value, current).as_py() == (which == "min") else current


def file_statistics(metadata: pq.FileMetaData, stored: bool = False) -> dict[LeafPath, LeafStatistics]:
    """The :class:`LeafStatistics` of every leaf column of a file reached through structs only, keyed by tuple
    path (see the module docstring for what is left out). A footer whose columns do not line up with its
    Arrow schema gives no statistics at all (``{}``) rather than statistics of the wrong column. ``stored``: the
    leaves Spark stored in the hybrid calendar get the bounds of their stored values too (not what Spark reads:
    for :func:`parquet_sink.rebase.hybrid_leaf_statistics`).

    Example: ``file_statistics(pq.read_metadata(path))[("x", "y")].max`` -> ``<pyarrow.StringScalar: 'zz'>``.
    """
    leaves = [leaf for field in metadata.schema.to_arrow_schema() for leaf in column_leaves(field.type, (field.name,))]
    if len(leaves) != metadata.num_columns:
        return {}
    found: dict[LeafPath, LeafStatistics] = {}
    hybrid = hybrid_calendar(metadata)
    for index, (path, typ, repeated, _) in enumerate(leaves):
        if repeated:
            continue
        column_schema = metadata.schema.column(index)
        if column_schema.path != ".".join(path):
            return {}
        logical = json.loads(column_schema.logical_type.to_json())
        low: pa.Scalar | None = None
        high: pa.Scalar | None = None
        nulls: int | None = 0
        exact = stored or not stored_hybrid(typ, column_schema.physical_type, hybrid)
        for group in range(metadata.num_row_groups):
            rows = metadata.row_group(group).num_rows
            stats = metadata.row_group(group).column(index).statistics
            if stats is None:
                exact, nulls = exact and rows == 0, None
                continue
            nulls = nulls + stats.null_count if nulls is not None and stats.has_null_count else None
            if stats.has_null_count and stats.null_count == rows:
                continue  # only nulls: no bound to take
            bounds = [_bound(stats, w, typ, logical) if stats.has_min_max else None for w in ("min", "max")]
            if None in bounds:
                exact = False
                continue
            low, high = _merge(low, high, bounds[0], "min"), _merge(low, high, bounds[1], "max")
        found[path] = LeafStatistics(low, high, nulls) if exact else LeafStatistics(None, None, nulls)
    return found


@dataclass(frozen=True)
class FooterRule:
    """How a writer of our files writes float columns so that no reader can skip a row group wrongly by its footer.
    pyarrow (like every parquet-cpp writer) leaves NaN out of a float column's min/max (max 1.0 for [NaN, 1.0])
    without saying so, and Spark's Parquet filter pushdown (parquet-mr's ``StatisticsFilter``) trusts them although
    in Spark SQL NaN is greater than every number (``x > 5`` skipped the NaN row), as does pyarrow's own dataset
    (``x != 1.0``); so a float leaf holding NaN gets no statistics (``no_statistics``), as parquet-mr writes none.
    parquet-mr's ``DictionaryFilter`` tests ``x = -0.0`` by ``Double.equals``, which tells the zeros apart where
    Spark SQL does not (it skipped a row group of 0.0): a float leaf holding a zero is not dictionary-encoded
    (``no_dictionary``: the filter reads no dictionary; the statistics bound a zero by -0.0 and 0.0). Both sets
    hold dotted Parquet column paths. The log still gets such a top-level column's bounds, from the rows
    (:func:`nan_column_statistics`): its readers take every float column to hold NaN."""

    no_statistics: frozenset[str] = frozenset()
    no_dictionary: frozenset[str] = frozenset()

    def covers(self, other: FooterRule) -> bool:
        """Whether a file written under this rule may also take rows that need ``other``."""
        return other.no_statistics <= self.no_statistics and other.no_dictionary <= self.no_dictionary

    def writer_options(self, schema: pa.Schema) -> dict[str, Any]:
        """pyarrow's ``ParquetWriter`` keywords for a file of ``schema`` under this rule (none: its defaults).

        Example: ``FooterRule(frozenset({"x"})).writer_options(schema)`` -> ``{'write_statistics': ['n'], ...}``.
        """
        if not self.no_statistics and not self.no_dictionary:
            return {}
        paths = _parquet_paths(schema.remove_metadata())
        return {
            "write_statistics": [p for p in paths if p not in self.no_statistics] if self.no_statistics else True,
            "use_dictionary": [p for p in paths if p not in self.no_dictionary] if self.no_dictionary else True,
        }


@functools.lru_cache(maxsize=64)
def _parquet_paths(schema: pa.Schema) -> tuple[str, ...]:
    """The Parquet column paths of every leaf of ``schema``, as pyarrow's writer names them (learnt by writing an
    empty file: once per schema, a writer opens many files of one)."""
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink)
    parquet = pq.read_metadata(pa.BufferReader(sink.getvalue())).schema
    return tuple(parquet.column(i).path for i in range(len(parquet)))


def footer_rule(table: pa.Table) -> FooterRule:
    """The :class:`FooterRule` of the rows of ``table``.

    Example: ``footer_rule(pa.table({"x": [float("nan"), 0.0]}))`` -> ``FooterRule(frozenset({'x'}), frozenset({'x'}))``.
    """
    nan, zero = set(), set()
    for index, field in enumerate(table.schema):
        for chunk in table.column(index).chunks:
            for leaf, typ, _, values in column_leaves(field.type, (field.name,), chunk):
                if not pa.types.is_floating(typ) or pa.types.is_float16(typ):
                    continue
                path = ".".join(leaf)
                if pc.any(pc.is_nan(values)).as_py():
                    nan.add(path)
                if pc.any(pc.equal(values, 0.0)).as_py():
                    zero.add(path)
    return FooterRule(frozenset(nan), frozenset(zero))


def _leaf_array(table: pa.Table, path: LeafPath) -> pa.Array:
    """The values of the leaf at ``path`` (through structs, their nulls applied) of ``table``."""
    array = table.column(path[0]).combine_chunks()
    for name in path[1:]:
        array = array.flatten()[array.type.get_field_index(name)]
    return array.dictionary_decode() if pa.types.is_dictionary(array.type) else array


def nan_column_statistics(table: pa.Table, rule: FooterRule) -> dict[LeafPath, LeafStatistics]:
    """The :class:`LeafStatistics` of the top-level float columns of ``table`` that ``rule`` writes without footer
    statistics (they hold NaN), from the data: what the log records for them in place of the footer's (its readers
    take any float column to hold NaN). Exact min/max of the non-NaN values, a zero as the footer's rule says.

    Example: ``nan_column_statistics(pa.table({"x": [nan, 2.0]}), footer_rule(...))[("x",)].max`` -> ``2.0``.
    """
    found = {}
    for name in rule.no_statistics:
        if "." not in name and name in table.column_names:
            array = table.column(name)
            found[(name,)] = _array_statistics(array.combine_chunks() if array.num_chunks else pa.array([], array.type))
    return found


def merged(first: LeafStatistics, second: LeafStatistics) -> LeafStatistics:
    """The statistics of two parts of one column (a file written in pieces)."""
    nulls = None if first.null_count is None or second.null_count is None else first.null_count + second.null_count
    if first.min is None or second.min is None:
        return LeafStatistics(first.min or second.min, first.max or second.max, nulls)
    return LeafStatistics(_merge(first.min, None, second.min, "min"), _merge(None, first.max, second.max, "max"), nulls)


def _array_statistics(array: pa.Array) -> LeafStatistics:
    """Exact min/max of the non-null, non-NaN values of ``array`` (None when there is none, or for a type without
    an order), a zero as the footer's rule says, and its null count."""
    values = array.drop_null()
    if pa.types.is_floating(values.type):
        values = values.filter(pc.invert(pc.is_nan(values)))
    ordered = (pa.types.is_primitive(values.type) or pa.types.is_string(values.type)
               or pa.types.is_large_string(values.type) or pa.types.is_decimal(values.type))
    if not len(values) or not ordered:
        return LeafStatistics(None, None, array.null_count)
    bounds = pc.min_max(values)
    low, high = bounds["min"], bounds["max"]
    if pa.types.is_floating(values.type):
        low = pa.scalar(_signed_zero(low.as_py(), "min"), values.type)
        high = pa.scalar(_signed_zero(high.as_py(), "max"), values.type)
    return LeafStatistics(low, high, array.null_count)


def data_statistics(parquet: pq.ParquetFile, paths: list[LeafPath]) -> dict[LeafPath, LeafStatistics]:
    """The :class:`LeafStatistics` of the leaves ``paths`` (reached through structs) computed from the data of
    ``parquet``, for leaves whose footer has none (INT96 timestamps, strings over the writer's statistics size):
    exact min/max of the non-null, non-NaN values as stored (None when there is none; a zero as in the footer's
    rule; dates and timestamps Spark stored in the hybrid calendar as stored, which
    :func:`parquet_sink.rebase.hybrid_leaf_statistics` turns into what Spark reads) and the null count. Reads
    only the top-level columns of ``paths``.

    Example: ``data_statistics(pq.ParquetFile(path), [("at",)])[("at",)].max`` -> ``<pyarrow.TimestampScalar: ...>``.
    """
    if not paths:
        return {}
    table = parquet.read(columns=sorted({path[0] for path in paths}))  # a dotted name may select more: harmless
    return {path: _array_statistics(_leaf_array(table, path)) for path in paths}


__all__ = [
    "LEGACY_KEYS", "SPARK_VERSION_KEY", "LeafPath", "LeafStatistics", "column_leaves", "data_statistics", "file_statistics",
    "FooterRule", "footer_rule", "hybrid_calendar", "merged", "nan_column_statistics", "hybrid_keys", "stored_hybrid",
]
