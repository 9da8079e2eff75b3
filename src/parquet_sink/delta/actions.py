"""What a Delta ``add`` action says about one committed file: its partition values serialized by the Delta
protocol's "Partition Value Serialization", its per-file statistics (``numRecords``, ``minValues``,
``maxValues``, ``nullCount``) from the Parquet footer, and the table schema Delta readers expect (the
counterpart of what delta-rs's ``write_deltalake`` computes for the files it writes itself, and of Delta's
``SchemaUtils`` type checks).

Formats follow what ``deltalake.write_deltalake`` writes for the same data (``tests/delta/test_formats.py``
compares them) wherever its bound is true; where it is not, ours is safer (``tests/delta/test_delta_differential.py``
reads every Delta reader with filters against ``read_committed``):

- partition values: timestamps in UTC ``2024-01-01 01:02:03.456789``, dates ``2024-01-02``, years always four
  digits (``0999-01-01``), doubles as Java prints them (what Delta on Spark writes), decimals in plain
  notation, null as ``None``;
- statistics: the exact footer bounds of :mod:`parquet_sink.statistics` (keyed by tuple path, so a column
  ``x.y`` and field ``y`` of a struct ``x`` keep their own); decimals as exact JSON numbers (never through a
  float: a rounded bound stops being one); timestamps in milliseconds as the protocol says, a min truncated
  down and a max rounded up (but for the last millisecond of 9999, truncated as the protocol says); strings longer than :data:`STRING_PREFIX` characters cut to it, the max with its
  last character raised so that it stays an upper bound; binary, NaN and infinities left out; a column gets
  both bounds or neither (delta-rs's dataset skips a file whose column has one bound only);
- types: Delta has only ``string``, ``binary``, signed integers, ``float``/``double``, ``decimal`` (precision
  <= 38), ``boolean``, ``date``, ``timestamp``, ``struct``, ``array`` and ``map``, names unique regardless of
  case, dates and timestamps in years 0001..9999. Anything else is refused with a :class:`DeltaLogError` naming
  the column, before the sync commits anything.

Example::

    >>> delta_partition_value(_dt.date(2024, 1, 2), pa.date32())
    '2024-01-02'
    >>> delta_schema(pa.schema([("t", pa.timestamp("ns"))]), "/data/events")
    t: timestamp[us, tz=UTC]
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import json
import math
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..partitioning import java_double_str
from ..statistics import LeafPath, LeafStatistics
from ..table_formats import DATE_MAX_US as DELTA_MAX_US
from ..table_formats import DATE_MIN_US as DELTA_MIN_US
from ..table_formats import date_micros, in_date_range, leaf_statistics
from .errors import DeltaLogError, DeltaRangeError

# Delta on Spark keeps string statistics to a 32-character prefix (dataSkippingStringPrefixLength): the
# prefix is a lower bound (min); a cut max is no upper bound, so it gets its last character raised (_string_max).
STRING_PREFIX = 32

_EPOCH = _dt.datetime(1970, 1, 1)
# Delta's (and Spark's) range of dates and timestamps, DELTA_MIN_US..DELTA_MAX_US: the table formats' shared one


def _refusal(typ: pa.DataType) -> str | None:
    """Why a column of Arrow type ``typ`` (its own type, not its children's) has no Delta type, or None."""
    if pa.types.is_unsigned_integer(typ):
        return (
            f"{typ} (unsigned: Delta integers are signed, and delta-rs would declare it as the signed type of the "
            "same width, which polars refuses); cast it to a wider signed integer"
        )
    if pa.types.is_float16(typ):
        return f"{typ} (Delta has float and double); cast it to float32"
    if pa.types.is_time(typ) or pa.types.is_duration(typ) or pa.types.is_interval(typ):
        return f"{typ} (Delta has no time-of-day, duration or interval type); cast it to int64 or string"
    if pa.types.is_date64(typ):
        return f"{typ} (polars reads its files as a datetime, not as Delta's date); cast it to date32"
    if pa.types.is_decimal(typ) and typ.precision > 38:
        return f"{typ} (Delta decimals hold at most 38 digits)"
    if pa.types.is_fixed_size_binary(typ) or pa.types.is_fixed_size_list(typ):
        return f"{typ} (fixed-size: Delta readers read the column of a variable-size type); cast it to binary or a list"
    if isinstance(typ, pa.ListViewType | pa.LargeListViewType) or pa.types.is_union(typ) or pa.types.is_run_end_encoded(typ):
        return f"{typ} (no Delta type)"
    return None


def delta_type(typ: pa.DataType) -> pa.DataType:
    """The Arrow type a Delta table declares for a column of Arrow type ``typ``: every timestamp (naive,
    zoned, any unit; INT96 reads as naive microseconds) is Delta's ``timestamp``, UTC microseconds, which
    every Delta reader accepts (``timestamp_ntz`` needs a table feature older readers refuse); large and
    view variants of string and binary are Delta's ``string`` and ``binary``, a dictionary its values' type;
    nested types are mapped field by field. Types Delta lacks stay as they are (see :func:`delta_schema`).

    Example: ``delta_type(pa.timestamp("ns")) == pa.timestamp("us", tz="UTC")``.
    """
    if pa.types.is_dictionary(typ):
        return delta_type(typ.value_type)
    if pa.types.is_timestamp(typ):
        return pa.timestamp("us", tz="UTC")
    if pa.types.is_null(typ):  # a partition column whose values are all null: Spark reads it as string
        return pa.string()
    if pa.types.is_large_string(typ) or pa.types.is_string_view(typ):
        return pa.string()
    if pa.types.is_large_binary(typ) or pa.types.is_binary_view(typ):
        return pa.binary()
    if pa.types.is_decimal(typ):
        return pa.decimal128(typ.precision, typ.scale) if typ.precision <= 38 else typ
    if pa.types.is_struct(typ):
        return pa.struct([f.with_type(delta_type(f.type)) for f in typ])
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        return pa.list_(typ.value_field.with_type(delta_type(typ.value_type)))
    if pa.types.is_map(typ):
        return pa.map_(delta_type(typ.key_type), typ.item_field.with_type(delta_type(typ.item_type)))
    return typ


def _problems(fields: list[pa.Field], path: str) -> list[str]:
    """What keeps ``fields`` (at ``path``: ``""`` for the columns, ``"s."`` for a struct's fields) from Delta:
    types it lacks, at any depth, and names equal but for case."""
    problems, seen = [], {}
    for field in fields:
        name = f"{path}{field.name}"
        other = seen.setdefault(field.name.lower(), name)
        if other != name:
            problems.append(
                f"{other!r} and {name!r} differ only by case (Delta column names are case-insensitive); rename one"
            )
        typ = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
        why = _refusal(typ)
        if why is not None:
            problems.append(f"{name!r} is {why}")
        elif pa.types.is_struct(typ):
            problems += _problems(list(typ), f"{name}.")
        elif pa.types.is_map(typ):
            problems += _problems([typ.key_field.with_name("key"), typ.item_field.with_name("value")], f"{name}.")
        elif pa.types.is_list(typ) or pa.types.is_large_list(typ):
            problems += _problems([typ.value_field.with_name("element")], f"{name}.")
    return problems


def delta_schema(schema: pa.Schema, where: str = "the output") -> pa.Schema:
    """``schema`` with :func:`delta_type` applied to each column, every column nullable (a later batch may
    lack a value) and no metadata; DeltaLogError naming every column (and ``where``: the output) whose type
    Delta lacks (unsigned integers, float16, time, duration, interval, fixed-size binary and lists, date64, decimals
    over 38 digits; at any depth) or whose name equals another's but for case. Example: see the module
    docstring."""
    problems = _problems(list(schema), "")
    if problems:
        raise DeltaLogError(
            f"{where}: the committed files have columns a Delta table cannot hold: {'; '.join(problems)}. Nothing "
            f"was committed to _delta_log and Delta readers keep the previous state; the data and _spark_metadata "
            "are not affected. Write such columns with a Delta type (or write this output without delta_log): "
            "the files already committed with them keep the Delta log from following this output."
        )
    return pa.schema([pa.field(f.name, delta_type(f.type), nullable=True) for f in schema])


def _utc(value: _dt.datetime) -> _dt.datetime:
    """A partition timestamp as a UTC instant (a naive one is taken as UTC wall time, as INT96)."""
    return value.replace(tzinfo=_dt.UTC) if value.tzinfo is None else value.astimezone(_dt.UTC)


def _date_text(value: _dt.date) -> str:
    """A date with its year in four digits, as every Delta reader parses it (``0999-01-02``)."""
    return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"


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
        instant = _utc(value)
        text = f"{_date_text(instant)} {instant:%H:%M:%S}"
        return f"{text}.{instant.microsecond:06d}" if instant.microsecond else text
    if pa.types.is_date(typ):
        return _date_text(value)
    if pa.types.is_boolean(typ):
        return "true" if value else "false"
    if pa.types.is_floating(typ):
        return java_double_str(value)
    if pa.types.is_decimal(typ):
        return format(value, "f")
    return str(value)


class _Number:
    """A JSON number written as its exact text (a decimal bound: ``json`` would go through a float)."""

    def __init__(self, text: str) -> None:
        self.text = text


def _timestamp_text(micros: int, bound: str) -> str:
    """A timestamp bound in Delta's statistics format, milliseconds: a min truncated down, a max rounded up,
    but not past Delta's last millisecond (9999-12-31T23:59:59.999: there the protocol's truncated max, which
    its readers widen by a millisecond, as delta-rs and polars do; leaving it out would make delta-rs skip the
    file)."""
    millis = micros // 1000 if bound == "min" else min(-(-micros // 1000), DELTA_MAX_US // 1000)
    instant = _EPOCH + _dt.timedelta(milliseconds=millis)
    text = f"{_date_text(instant)}T{instant:%H:%M:%S}"
    return f"{text}.{millis % 1000:03d}Z" if millis % 1000 else f"{text}Z"


def _string_max(value: str) -> str | None:
    """An upper bound of ``value`` in :data:`STRING_PREFIX` characters: its prefix with the last character that
    can be raised raised by one (greater in UTF-8 byte, code point and UTF-16 order alike: U+FFFF, whose next
    code point sorts lower in UTF-16, is passed over, as is U+10FFFF); None when no character can be (the
    caller then writes the whole value)."""
    prefix = value[:STRING_PREFIX]
    for index in range(len(prefix) - 1, -1, -1):
        code = ord(prefix[index])
        if code not in (0xFFFF, 0x10FFFF):
            return prefix[:index] + chr(0xE000 if code == 0xD7FF else code + 1)
    return None


def out_of_range(column: str, what: str) -> DeltaRangeError:
    return DeltaRangeError(
        f"{what}: column {column!r} holds a value outside 0001-01-01..9999-12-31, the range of Delta dates and "
        "timestamps, which Delta readers cannot read. Nothing was committed to _delta_log; the data and "
        "_spark_metadata are not affected. Write such values as null or within that range (or write this output "
        "without delta_log): the file keeps the Delta log from following this output.",
        column,
    )


def _stat_value(scalar: pa.Scalar | None, bound: str, column: str, what: str) -> Any:
    """A footer bound as Delta's statistics JSON holds it, or None to leave it out (binary, NaN, infinities);
    DeltaLogError for a date or timestamp outside Delta's range."""
    if scalar is None:
        return None
    typ = scalar.type
    if pa.types.is_timestamp(typ) or pa.types.is_date(typ):
        if not in_date_range(scalar, bound):
            raise out_of_range(column, what)
        if pa.types.is_date(typ):
            return _date_text(scalar.as_py())
        return _timestamp_text(date_micros(scalar, bound), bound)
    value = scalar.as_py()
    if isinstance(value, decimal.Decimal):
        return _Number(format(value, "f"))
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, str):
        if len(value) <= STRING_PREFIX:
            return value
        return value[:STRING_PREFIX] if bound == "min" else _string_max(value) or value  # whole when none is raisable
    if isinstance(value, bool | int | float):
        return value
    return None  # binary: no Delta statistics


def _fill(
    fields: pa.StructType | pa.Schema, leaves: dict[LeafPath, LeafStatistics], prefix: LeafPath, out: dict[str, dict],
    what: str,
) -> None:
    """Fill ``out["minValues"|"maxValues"|"nullCount"]`` for ``fields`` (nested dicts for structs); lists and
    maps carry no statistics in Delta."""
    for field in fields:
        path = prefix + (field.name,)
        if pa.types.is_struct(field.type):
            nested: dict[str, dict] = {"minValues": {}, "maxValues": {}, "nullCount": {}}
            _fill(field.type, leaves, path, nested, what)
            for key, value in nested.items():  # as delta-rs: a struct's dicts even when empty
                out[key][field.name] = value
            continue
        if path not in leaves:
            continue
        stats = leaves[path]
        column = ".".join(path)
        low, high = _stat_value(stats.min, "min", column, what), _stat_value(stats.max, "max", column, what)
        if low is not None and high is not None:  # one bound alone: delta-rs's dataset compares with null
            out["minValues"][field.name], out["maxValues"][field.name] = low, high
        if stats.null_count is not None:
            out["nullCount"][field.name] = stats.null_count


def _json(value: Any) -> str:
    """Compact JSON of ``value``, :class:`_Number` written as its text, characters beyond ASCII as themselves
    (as delta-rs writes them: its parser reads the escaped pair ``\\udbff\\udfff`` as U+FFFFF, not U+10FFFF)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{_json(k)}:{_json(v)}" for k, v in value.items()) + "}"
    return value.text if isinstance(value, _Number) else json.dumps(value, ensure_ascii=False)


def _writer_schema(metadata: pq.FileMetaData) -> pa.Schema:
    """The Arrow schema the writer stored in the footer (``ARROW:schema``; empty when there is none): the types
    as written, which pyarrow's reader may show otherwise (a date64 column reads as date32, polars reads it as a
    datetime)."""
    stored = (metadata.metadata or {}).get(b"ARROW:schema")
    if stored is None:
        return pa.schema([])
    try:
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(stored)))
    except (pa.ArrowInvalid, ValueError):  # not an Arrow schema: nothing to learn from it
        return pa.schema([])


def file_stats(parquet: pq.ParquetFile, schema: pa.Schema, what: str = "a committed file") -> str:
    """The ``stats`` JSON of a Delta add action from a Parquet file's footer: ``numRecords``, and per data column
    of ``schema`` (the table's columns, partition columns left out) its ``minValues``, ``maxValues`` and
    ``nullCount`` (module docstring). A column with values whose footer has no bounds (INT96 timestamps, strings
    over the writer's statistics size) gets them from its data: delta-rs's dataset skips a file whose column
    has no bounds for every filter on it (it compares with null). DeltaLogError naming the column and
    ``what`` (the file and its batch) when a date or timestamp lies outside Delta's range, or when the writer's
    Arrow schema stored in the footer has a type Delta lacks (see :func:`delta_schema`).

    Example::

        >>> json.loads(file_stats(pq.ParquetFile("part-0.parquet"), pa.schema([("n", pa.int64())])))
        {'numRecords': 2, 'minValues': {'n': 1}, 'maxValues': {'n': 5}, 'nullCount': {'n': 0}}
    """
    metadata = parquet.metadata
    problems = _problems(list(_writer_schema(metadata)), "")
    if problems:  # types Arrow reads back as others (date64 as date32) that other readers do not
        raise DeltaLogError(
            f"{what} was written with columns a Delta table cannot hold: {'; '.join(problems)}. Nothing was "
            f"committed to _delta_log; the data and _spark_metadata are not affected. Write such columns with a "
            "Delta type (or write this output without delta_log): the file keeps the Delta log from following."
        )
    return _json(_statistics(parquet, schema, what))


def _statistics(parquet: pq.ParquetFile, schema: pa.Schema, what: str) -> dict[str, Any]:
    """:func:`file_stats` before its JSON encoding."""
    out: dict[str, Any] = {"numRecords": parquet.metadata.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    leaves = leaf_statistics(parquet, schema)
    _fill(schema, leaves, (), out, what)
    return out




__all__ = [
    "DELTA_MAX_US", "DELTA_MIN_US", "STRING_PREFIX", "delta_partition_value", "delta_schema", "delta_type", "file_stats",
    "out_of_range",
]
