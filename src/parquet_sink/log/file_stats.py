"""The ``stats`` key of a log entry: one data file's row count, null counts and min/max per top-level column,
recorded by the sink's writers when they commit the file (the counterpart of the ``stats`` of a Delta log's
``add`` action, which delta-rs and Delta's ``DataSkippingReader`` skip files with).

Spark's ``SinkFileStatus`` (json4s) ignores the key, as it ignores the commit record's; compaction carries
it into the compact file and the ``stats`` column of its columnar copy (:mod:`.sidecar`), where readers find
it without parsing JSON. Its value is a JSON text (a string inside the entry, as Delta's)::

    {"numRecords":3,"nullCount":{"n":0},"minValues":{"n":1},"maxValues":{"n":7},"types":{"n":"int"}}

Exact or absent, as :mod:`parquet_sink.statistics` gives them: a bound is a true bound of every non-null value
(NaN aside: Parquet leaves it out of bounds, readers assume any float column may hold it). ``types`` names
each bound's kind, so a reader uses a bound only as the type it was taken from: ``int``, ``float``,
``bool``, ``string``, ``date`` (days), ``decimal`` (exact text), ``ts:<unit>:utc|local`` (the raw value).
Left out: infinite float bounds, a max string over :data:`MAX_TEXT` characters (a min is cut to its prefix,
still a lower bound), binary, nested and unsigned 64-bit leaves, dates and timestamps Spark stored in the hybrid
Julian calendar (:func:`~parquet_sink.statistics.hybrid_calendar`).

Example::

    >>> encode_stats(pq.read_metadata("part-0.parquet"))
    '{"numRecords":3,"nullCount":{"n":0},"minValues":{"n":1},"maxValues":{"n":7},"types":{"n":"int"}}'
    >>> decode_stats(pa.array([text]), pa.schema([("n", pa.int32())])).bounds["n"].low
    [1]
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from ..statistics import LeafPath, LeafStatistics, file_statistics
from .entry import STATS_KEY
from .lines import joined

MAX_TEXT = 64  # characters of a string bound: a longer min is cut to this prefix, a longer max left out


def stats_kind(typ: pa.DataType) -> str | None:
    """The ``types`` tag of bounds of Arrow type ``typ``; None for a type without recorded bounds.

    Example: ``stats_kind(pa.timestamp("us", "UTC"))`` -> ``'ts:us:utc'``.
    """
    if pa.types.is_integer(typ):
        return None if typ == pa.uint64() else "int"
    if pa.types.is_float32(typ) or pa.types.is_float64(typ):
        return "float"
    if pa.types.is_boolean(typ):
        return "bool"
    if pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_string_view(typ):
        return "string"
    if pa.types.is_date32(typ):
        return "date"
    if pa.types.is_timestamp(typ):
        return f"ts:{typ.unit}:{'local' if typ.tz is None else 'utc'}"
    if pa.types.is_decimal(typ):
        return "decimal"
    return None


def _encoded(bound: pa.Scalar, kind: str, which: str) -> Any:
    """A bound as its JSON value, None when it cannot be given exactly."""
    if kind == "date":
        return bound.cast(pa.int32()).as_py()
    if kind.startswith("ts:"):
        return bound.value
    value = bound.as_py()
    if kind == "float" and not math.isfinite(value):
        return None
    if kind == "decimal":
        return format(value, "f")
    if kind == "string" and len(value) > MAX_TEXT:
        return value[:MAX_TEXT] if which == "min" else None
    return value


def encode_stats(metadata: pq.FileMetaData, data: Mapping[LeafPath, LeafStatistics] | None = None) -> str:
    """The ``stats`` value of the file whose footer is ``metadata`` (see the module docstring); ``data``: statistics
    its writer took from the rows for columns the footer has none of (:func:`~parquet_sink.statistics.
    nan_column_statistics`: a float column holding NaN)."""
    nulls: dict[str, int] = {}
    bounds: dict[str, dict[str, Any]] = {"min": {}, "max": {}}
    kinds: dict[str, str] = {}
    leaves = file_statistics(metadata)
    leaves.update(data or {})
    for path, leaf in leaves.items():
        if len(path) != 1:
            continue
        name = path[0]
        if leaf.null_count is not None:
            nulls[name] = leaf.null_count
        kind = stats_kind(leaf.min.type) if leaf.min is not None else None
        if kind is None or leaf.max is None:
            continue
        for which, bound in (("min", leaf.min), ("max", leaf.max)):
            value = _encoded(bound, kind, which)
            if value is not None:
                bounds[which][name] = value
                kinds[name] = kind
    body = {
        "numRecords": metadata.num_rows, "nullCount": nulls, "minValues": bounds["min"], "maxValues": bounds["max"],
        "types": kinds,
    }
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True)
class ColumnBounds:
    """One column's statistics over a list of files, one row per file: ``low``/``high`` (of the column's
    type; null: unknown) and ``nulls`` (null: unknown)."""

    low: pa.Array
    high: pa.Array
    nulls: pa.Array


@dataclass(frozen=True)
class FileStats:
    """Decoded ``stats`` of a list of files: ``rows`` (int64, null where unknown) and the :class:`ColumnBounds`
    of each column asked for that has a type with bounds."""

    rows: pa.Array
    bounds: dict[str, ColumnBounds]


def _parsed_type(typ: pa.DataType) -> pa.DataType:
    """How a bound of kind ``stats_kind(typ)`` is parsed from the JSON before it becomes ``typ``."""
    if pa.types.is_integer(typ) or pa.types.is_date32(typ) or pa.types.is_timestamp(typ):
        return pa.int64()
    if pa.types.is_floating(typ):
        return pa.float64()
    if pa.types.is_boolean(typ):
        return pa.bool_()
    return pa.string()


def _as_type(values: pa.Array, typ: pa.DataType) -> pa.Array:
    """Parsed bounds as ``typ``: exact (a value out of its range: every bound unknown, never a wrong one)."""
    try:
        if pa.types.is_date32(typ):
            return pc.cast(pc.cast(values, pa.int32()), typ)
        return pc.cast(values, typ)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return pa.nulls(len(values), typ)


_UNITS = ("s", "ms", "us", "ns")


def _bounds_of(kinds: pa.Array, parsed: pa.Array, typ: pa.DataType) -> pa.Array:
    """The ``parsed`` bounds of files whose kinds are ``kinds`` as ``typ``, where a file's kind is ``typ``'s, or a
    timestamp's of the same zone in a coarser unit (a file of seconds or milliseconds in a column read in
    microseconds), scaled exactly; unknown (null) for any other kind, or where scaling overflows."""
    kind = stats_kind(typ) or ""  # the caller's types all have a kind
    bounds = pc.if_else(pc.fill_null(pc.equal(kinds, kind), False), parsed, None)
    if pa.types.is_timestamp(typ) and typ.unit in _UNITS:
        zone = kind.rsplit(":", 1)[1]
        for unit in _UNITS[: _UNITS.index(typ.unit)]:
            coarser = pc.fill_null(pc.equal(kinds, f"ts:{unit}:{zone}"), False)
            if not pc.any(coarser).as_py():
                continue
            factor = 1000 ** (_UNITS.index(typ.unit) - _UNITS.index(unit))
            try:
                scaled = pc.multiply_checked(pc.if_else(coarser, parsed, None), factor)
            except pa.ArrowInvalid:  # a bound beyond the finer unit's range: unknown
                continue
            bounds = pc.if_else(coarser, scaled, bounds)
    return _as_type(bounds, typ)


def decode_stats(stats: pa.Array | pa.ChunkedArray, schema: pa.Schema) -> FileStats:
    """The statistics of files whose ``stats`` values are ``stats`` (null: none recorded), for the columns of
    ``schema`` (the dataset's types, which bounds are turned into; a bound of another kind is unknown, but a
    timestamp's in a coarser unit than the column's is scaled: :func:`_bounds_of`).
    Parsed column-wise by Arrow's JSON reader.

    Example: ``decode_stats(files.column("stats"), dataset.schema).rows`` -> ``[3, null]``.
    """
    wanted = {f.name: f.type for f in schema if stats_kind(f.type) is not None}
    bounds_type = pa.struct([(name, _parsed_type(typ)) for name, typ in wanted.items()])
    parse_schema = pa.schema([
        ("numRecords", pa.int64()),
        ("nullCount", pa.struct([(name, pa.int64()) for name in wanted])),
        ("minValues", bounds_type),
        ("maxValues", bounds_type),
        ("types", pa.struct([(name, pa.string()) for name in wanted])),
    ])
    n = len(stats)
    if isinstance(stats, pa.ChunkedArray):
        stats = stats.combine_chunks() if stats.num_chunks else pa.array([], pa.string())
    text = joined(pc.binary_join_element_wise(pc.fill_null(stats.cast(pa.string()), "{}"), "", "\n"))
    try:
        table = pa_json.read_json(
            pa.BufferReader(text),
            # blocks parsed at once (Arrow's JSON parser: ~100 MB/s a thread; 10,000 files: ~2 MB)
            read_options=pa_json.ReadOptions(use_threads=True, block_size=max(len(text) // 2 + 1, 1 << 20)),
            parse_options=pa_json.ParseOptions(explicit_schema=parse_schema, unexpected_field_behavior="ignore"),
        )
    except pa.ArrowInvalid:  # a value of another JSON type than the column's: nothing known
        return FileStats(pa.nulls(n, pa.int64()), {})
    if table.num_rows != n:
        return FileStats(pa.nulls(n, pa.int64()), {})
    table = table.combine_chunks()
    found: dict[str, ColumnBounds] = {}
    kinds, lows, highs, nulls = (table.column(c).chunk(0) for c in ("types", "minValues", "maxValues", "nullCount"))
    for name, typ in wanted.items():
        low, high = (_bounds_of(kinds.field(name), side.field(name), typ) for side in (lows, highs))
        found[name] = ColumnBounds(low, high, nulls.field(name))
    return FileStats(table.column("numRecords").chunk(0), found)


__all__ = ["MAX_TEXT", "STATS_KEY", "ColumnBounds", "FileStats", "decode_stats", "encode_stats", "stats_kind"]
