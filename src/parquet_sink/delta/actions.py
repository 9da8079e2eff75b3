"""What a Delta ``add`` action says about one committed file: its partition values serialized by the Delta
protocol's "Partition Value Serialization", its per-file statistics (``numRecords``, ``minValues``,
``maxValues``, ``nullCount``) from the Parquet footer, and the table schema Delta readers expect (the
counterpart of what delta-rs's ``write_deltalake`` computes for the files it writes itself).

Formats follow what ``deltalake.write_deltalake`` writes for the same data (``tests/delta/test_formats.py``
compares them): timestamps are Delta ``timestamp`` (UTC instants; partition values
``2024-01-01 01:02:03.456789`` in UTC, statistics ``2024-01-01T01:02:03.456Z`` truncated to milliseconds as the
protocol's readers expect), decimals and doubles as JSON numbers in statistics, nulls as ``None``. Doubles in
partition values are written as Java prints them (what Delta on Spark writes; every reader parses it).

Example::

    >>> delta_partition_value(_dt.date(2024, 1, 2), pa.date32())
    '2024-01-02'
    >>> delta_schema(pa.schema([("t", pa.timestamp("ns"))]))
    t: timestamp[us, tz=UTC]
"""

from __future__ import annotations

import datetime as _dt
import decimal
import json
import math
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..partitioning import java_double_str

# Delta on Spark keeps string statistics to a 32-character prefix (dataSkippingStringPrefixLength): the
# prefix is a lower bound (min); a cut max is no upper bound, so a longer max is left out.
STRING_PREFIX = 32


def delta_type(typ: pa.DataType) -> pa.DataType:
    """The Arrow type a Delta table declares for a column of Arrow type ``typ``: every timestamp (naive,
    zoned, any unit; INT96 reads as naive nanoseconds) is Delta's ``timestamp``, UTC microseconds, which
    every Delta reader accepts (``timestamp_ntz`` needs a table feature older readers refuse); nested types
    are mapped field by field.

    Example: ``delta_type(pa.timestamp("ns")) == pa.timestamp("us", tz="UTC")``.
    """
    if pa.types.is_timestamp(typ):
        return pa.timestamp("us", tz="UTC")
    if pa.types.is_null(typ):  # a partition column whose values are all null: Spark reads it as string
        return pa.string()
    if pa.types.is_large_string(typ) or pa.types.is_string_view(typ):
        return pa.string()
    if pa.types.is_struct(typ):
        return pa.struct([f.with_type(delta_type(f.type)) for f in typ])
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        return pa.list_(typ.value_field.with_type(delta_type(typ.value_type)))
    if pa.types.is_map(typ):
        return pa.map_(delta_type(typ.key_type), typ.item_field.with_type(delta_type(typ.item_type)))
    return typ


def delta_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with :func:`delta_type` applied to each column, every column nullable (a later batch may
    lack a value) and no metadata. Example: see the module docstring."""
    return pa.schema([pa.field(f.name, delta_type(f.type), nullable=True) for f in schema])


def _utc(value: _dt.datetime) -> _dt.datetime:
    """A footer or partition timestamp as a UTC instant (a naive one is taken as UTC wall time, as INT96)."""
    return value.replace(tzinfo=_dt.UTC) if value.tzinfo is None else value.astimezone(_dt.UTC)


def delta_partition_value(value: Any, typ: pa.DataType) -> str | None:
    """A typed partition value (as :func:`parquet_sink.partitioning.convert_partition_value` gives it) in the
    Delta protocol's partition value serialization; None for null.

    Example::

        >>> delta_partition_value(_dt.datetime(2024, 1, 1, 1, 2, 3, 456789, tzinfo=_dt.UTC), pa.timestamp("us", "UTC"))
        '2024-01-01 01:02:03.456789'
        >>> delta_partition_value(1e20, pa.float64()), delta_partition_value(True, pa.bool_())
        ('1.0E20', 'true')
    """
    if value is None:
        return None
    if pa.types.is_timestamp(typ):
        text = _utc(value).strftime("%Y-%m-%d %H:%M:%S")
        return f"{text}.{value.microsecond:06d}" if value.microsecond else text
    if pa.types.is_date(typ):
        return value.isoformat()
    if pa.types.is_boolean(typ):
        return "true" if value else "false"
    if pa.types.is_floating(typ):
        return java_double_str(value)
    if pa.types.is_decimal(typ):
        return format(value, "f")
    return str(value)


def _stat_value(value: Any, typ: pa.DataType, bound: str) -> Any:
    """A footer min or max as Delta's statistics JSON holds it, or None to leave it out (binary, NaN,
    a string max longer than :data:`STRING_PREFIX`)."""
    if value is None or pa.types.is_binary(typ) or pa.types.is_large_binary(typ) or pa.types.is_fixed_size_binary(typ):
        return None
    if (pa.types.is_timestamp(typ) and not isinstance(value, _dt.datetime)) or (
        pa.types.is_date(typ) and not isinstance(value, _dt.date)
    ):
        return None  # a footer that states the bound as a raw number (nanoseconds): no safe conversion here
    if isinstance(value, _dt.datetime):
        instant = _utc(value)
        text = instant.strftime("%Y-%m-%dT%H:%M:%S")
        millis = instant.microsecond // 1000
        return f"{text}.{millis:03d}Z" if millis else f"{text}Z"
    if isinstance(value, _dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, str) and len(value) > STRING_PREFIX:
        return value[:STRING_PREFIX] if bound == "min" else None
    if isinstance(value, bytes):
        return None
    return value


def _column_stats(metadata: pq.FileMetaData) -> dict[str, tuple[Any, Any, int | None]]:
    """(min, max, null count) of each leaf column (dotted Parquet path) over every row group; min/max None
    when a row group has none (INT96, all nulls), the null count None when one is missing."""
    found: dict[str, tuple[Any, Any, int | None]] = {}
    for index in range(metadata.num_columns):
        low = high = None
        nulls: int | None = 0
        comparable = True
        path = ""
        for group in range(metadata.num_row_groups):
            column = metadata.row_group(group).column(index)
            path = column.path_in_schema
            stats = column.statistics
            if stats is None:
                comparable, nulls = False, None
                continue
            nulls = None if nulls is None or not stats.has_null_count else nulls + stats.null_count
            if metadata.row_group(group).num_rows == (stats.null_count if stats.has_null_count else -1):
                continue  # only nulls: no bound to take
            if not stats.has_min_max:
                comparable = False
                continue
            low = stats.min if low is None or stats.min < low else low
            high = stats.max if high is None or stats.max > high else high
        if path:
            found[path] = (low, high, nulls) if comparable else (None, None, nulls)
    return found


def _fill(
    fields: pa.StructType | pa.Schema, leaves: Mapping[str, tuple[Any, Any, int | None]], prefix: str, out: dict[str, dict]
) -> None:
    """Fill ``out["minValues"|"maxValues"|"nullCount"]`` for ``fields`` (nested dicts for structs); lists and
    maps carry no statistics in Delta."""
    for field in fields:
        path = f"{prefix}{field.name}"
        if pa.types.is_struct(field.type):
            nested: dict[str, dict] = {"minValues": {}, "maxValues": {}, "nullCount": {}}
            _fill(field.type, leaves, path + ".", nested)
            for key, value in nested.items():  # as delta-rs: a struct's dicts even when empty
                out[key][field.name] = value
            continue
        if path not in leaves:
            continue
        low, high, nulls = leaves[path]
        for key, value in (("minValues", _stat_value(low, field.type, "min")), ("maxValues", _stat_value(high, field.type, "max"))):
            if value is not None:
                out[key][field.name] = value
        if nulls is not None:
            out["nullCount"][field.name] = nulls


def file_stats(metadata: pq.FileMetaData, schema: pa.Schema) -> str:
    """The ``stats`` JSON of a Delta add action from a Parquet footer: ``numRecords``, and per data column of
    ``schema`` (the table's columns, partition columns left out) its ``minValues``, ``maxValues`` and
    ``nullCount`` where the footer has them.

    Example::

        >>> json.loads(file_stats(pq.read_metadata("part-0.parquet"), pa.schema([("n", pa.int64())])))
        {'numRecords': 2, 'minValues': {'n': 1}, 'maxValues': {'n': 5}, 'nullCount': {'n': 0}}
    """
    out: dict[str, Any] = {"numRecords": metadata.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    _fill(schema, _column_stats(metadata), "", out)
    return json.dumps(out, separators=(",", ":"))


__all__ = ["STRING_PREFIX", "delta_partition_value", "delta_schema", "delta_type", "file_stats"]
