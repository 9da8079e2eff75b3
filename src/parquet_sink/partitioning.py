"""Hive-style ``k=v`` partition directories, formatted, escaped and typed exactly as Spark does.

Writing: :func:`partition_value_str` is Spark's cast of a partition value to string (timestamps in the
session time zone with a trimmed fraction, doubles as Java prints them: ``1.0E20``, ``-0.0``, ``NaN``) and
:func:`partition_dir` escapes it (``ExternalCatalogUtils.escapePathName``; null and ``""`` go to
``__HIVE_DEFAULT_PARTITION__``). Reading: :func:`parse_partition_path` and :func:`infer_partition_types`
(``PartitioningUtils.inferPartitionColumnValue`` + ``resolveTypeConflicts``), so a reader gets the same
columns, types and values as ``spark.read.parquet``. Listing: :func:`is_hidden` and :func:`is_data_file`
(``HadoopFSUtils.shouldFilterOutPathName``), the one rule of what a listing skips.

Example::

    >>> partition_dir([("cat", "c:d"), ("n", partition_value_str(3, pa.int32()))])
    'cat=c%3Ad/n=3'
    >>> parse_partition_path("cat=c%3Ad/n=3/part-0.parquet")
    [('cat', 'c%3Ad'), ('n', '3')]
"""

from __future__ import annotations

import datetime as _dt
import decimal
import math
import re
import struct
import zoneinfo
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from .errors import ParameterError

DEFAULT_PARTITION_NAME = "__HIVE_DEFAULT_PARTITION__"
_ESCAPE = frozenset([chr(c) for c in range(1, 32)] + list("\"#%'*/:=?\\\x7f{[]^"))
# What Java's parsers accept: Integer.parseInt / Long.parseLong, new BigDecimal(s), Double.parseDouble
# (after its trim of characters <= ' '), and the partition formats "yyyy-MM-dd" / "yyyy-MM-dd HH:mm:ss[.S]".
_INT = re.compile(r"^[+-]?\d+$")
_BIG_DECIMAL = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_DOUBLE = re.compile(r"^[+-]?(NaN|Infinity|((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)[fFdD]?)$")
_ESCAPED = re.compile(r"%([0-9A-Fa-f]{2})")
_JAVA_TRIM = "".join(chr(c) for c in range(33))
_DATE = re.compile(r"^([0-9]{4})-([0-9]{2})-([0-9]{2})$")
_TIMESTAMP = re.compile(r"^([0-9]{4})-([0-9]{2})-([0-9]{2}) ([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9])?$")
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_MAX_DECIMAL_PRECISION = 38
_DECIMAL_WIDTH = {"int": 10, "long": 20}  # the decimal precision an int / long widens to


def escape_path_name(value: str) -> str:
    """Spark's ``escapePathName``: ``"c:d"`` -> ``"c%3Ad"``."""
    return "".join(f"%{ord(c):02X}" if c in _ESCAPE else c for c in value)


def unescape_path_name(value: str) -> str:
    """Spark's ``unescapePathName``: ``"c%3Ad"`` -> ``"c:d"`` (malformed escapes stay as they are)."""
    if "%" not in value:  # most names and values: no regex (10,000 partition directories: 80 -> 5 ms)
        return value
    return _ESCAPED.sub(lambda m: chr(int(m.group(1), 16)), value)


# -- writing -------------------------------------------------------------------------------------


def _shortest_float32_digits(value: float) -> str:
    """The shortest ``%e`` text that reads back as the same 32-bit float (Java's ``Float.toString`` digits)."""
    for digits in range(1, 10):
        text = f"{value:.{digits - 1}e}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == value:
            return text
    return repr(value)


def java_double_str(value: float, single: bool = False) -> str:
    """Java's ``Double.toString`` (``Float.toString`` when ``single``), as Spark casts a double to string.

    Example::

        >>> [java_double_str(v) for v in (1e20, 2.5, -0.0, 1e-05, 1e7, float("nan"))]
        ['1.0E20', '2.5', '-0.0', '1.0E-5', '1.0E7', 'NaN']
    """
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    exact = decimal.Decimal(_shortest_float32_digits(value) if single else repr(value))
    sign, digit_tuple, exponent = exact.normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    point = len(digits) + exponent  # the decimal point sits after this many digits
    prefix = "-" if sign else ""
    if 1e-3 <= abs(value) < 1e7:
        if point <= 0:
            return f"{prefix}0.{'0' * -point}{digits}"
        whole, fraction = digits[:point].ljust(point, "0"), digits[point:]
        return f"{prefix}{whole}.{fraction or '0'}"
    return f"{prefix}{digits[0]}.{digits[1:] or '0'}E{point - 1}"


def _zone(name: str) -> _dt.tzinfo:
    """A Spark session time zone: a region (``America/New_York``), ``UTC``/``Z`` or an offset ``+05:30``."""
    match = re.match(r"^([+-])(\d{2}):(\d{2})$", name)
    if match:
        offset = _dt.timedelta(hours=int(match.group(2)), minutes=int(match.group(3)))
        return _dt.timezone(-offset if match.group(1) == "-" else offset)
    return _dt.UTC if name in ("Z", "UTC") else zoneinfo.ZoneInfo(name)


def check_time_zone(name: object) -> str:
    """``name`` if it is a session time zone :func:`_zone` reads, else ParameterError (which the public function
    checking it names with its call and path: :func:`parquet_sink.errors.names_output`) before anything is read or
    written.

    Example: ``check_time_zone("America/New_York")`` returns it; ``check_time_zone("utc")`` raises (zone names are
    case-sensitive, as Spark's are)."""
    if isinstance(name, str):
        try:
            _zone(name)
            return name
        except (KeyError, ValueError, OSError):  # ZoneInfoNotFoundError is a KeyError; "../x" a ValueError
            pass
    raise ParameterError(
        f"time_zone={name!r} is not a time zone. Give the session time zone the writer used "
        "(spark.sql.session.timeZone): a region such as 'America/New_York', 'UTC', or an offset such as '+05:30'. "
        "Nothing was done."
    )


# The Gregorian calendar repeats every 400 years (146097 days): a local time in year 0 or 10000, which
# Python's datetime cannot hold, is handled 400 years later or earlier.
_ERA = _dt.timedelta(days=146097)
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def _year_str(year: int) -> str:
    """A year as Spark prints it (java.time's YEAR, 4 digits, sign beyond): 0000, 9999, +10000, -0001."""
    return f"+{year}" if year > 9999 else f"{year:05d}" if year < 0 else f"{year:04d}"


def _timestamp_str(value: _dt.datetime, years: int = 0) -> str:
    """``value`` (``years`` added to its year) as ``yyyy-MM-dd HH:mm:ss[.fraction]``."""
    text = f"{_year_str(value.year + years)}-{value.month:02d}-{value.day:02d} {value:%H:%M:%S}"
    return f"{text}.{value.microsecond:06d}".rstrip("0") if value.microsecond else text


def _local_timestamp_str(value: _dt.datetime, zone: _dt.tzinfo) -> str:
    """The instant ``value`` as local time in ``zone``, also where that local time lies in year 0 or 10000
    (0001-01-01T00:00Z in New York is 0000-12-31 19:03:58, as Spark prints it)."""
    try:
        return _timestamp_str(value.astimezone(zone))
    except OverflowError:
        shift = 400 if value.year < 5000 else -400
        moved = value + _ERA if shift > 0 else value - _ERA
        return _timestamp_str(moved.astimezone(zone), -shift)


def partition_value_str(value: Any, typ: pa.DataType, time_zone: str = "UTC") -> str | None:
    """A partition value of Arrow type ``typ`` as Spark casts it to string for the directory name (None for
    null). Timestamps with a time zone are shown in ``time_zone`` (Spark's ``spark.sql.session.timeZone``).

    Example::

        >>> ts = _dt.datetime(2026, 2, 3, 7, 8, 9, 120000, tzinfo=_dt.UTC)
        >>> partition_value_str(ts, pa.timestamp("us", tz="UTC"), "America/New_York")
        '2026-02-03 02:08:09.12'
        >>> partition_value_str(1e20, pa.float64())
        '1.0E20'
    """
    if value is None:
        return None
    if pa.types.is_boolean(typ):
        return "true" if value else "false"
    if pa.types.is_floating(typ):
        return java_double_str(value, single=typ.bit_width < 64)
    if pa.types.is_decimal(typ):
        return format(value, "f")
    if pa.types.is_timestamp(typ):
        return _local_timestamp_str(value, _zone(time_zone)) if typ.tz is not None else _timestamp_str(value)
    if pa.types.is_date(typ):
        return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ) or pa.types.is_fixed_size_binary(typ):
        return value.decode("utf-8", "replace")
    return str(value)


def partition_dir(pairs: Iterable[tuple[str, str | None]]) -> str:
    """The relative ``k=v/k2=v2`` directory for one combination of partition values, given as the strings
    of :func:`partition_value_str`; ParameterError for a value holding NUL."""
    parts = []
    for name, text in pairs:
        if text and "\x00" in text:  # Spark escapes 0x01-0x1F but not NUL: no file system takes it in a name
            raise ParameterError(
                f"partition column {name!r} has the value {text!r}, which holds a NUL character: no file system "
                "takes one in a directory name (Spark's own file sink fails on it too). Replace or strip it before "
                "writing. Nothing of this batch was committed."
            )
        escaped = DEFAULT_PARTITION_NAME if not text else escape_path_name(text)
        parts.append(f"{escape_path_name(name)}={escaped}")
    return "/".join(parts)


# -- reading -------------------------------------------------------------------------------------


def is_hidden(name: str) -> bool:
    """Whether Spark's file listing skips a file or directory named ``name`` (one path segment): Spark's
    ``HadoopFSUtils.shouldFilterOutPathName`` / ``PartitioningAwareFileIndex.isDataPath``. A name starting
    with ``.`` or ending in ``._COPYING_`` is hidden; one starting with ``_`` is hidden unless it holds
    ``=``: ``_k=a`` is a partition directory, ``_spark_metadata`` and ``_temporary`` are not. (Spark also
    lists ``_metadata`` and ``_common_metadata``, Parquet summary files that are never data files here.)

    Example: ``[is_hidden(n) for n in ("_k=a", "_SUCCESS", ".part-0.parquet.crc", "k=a")]``
    -> ``[False, True, True, False]``.
    """
    return name.startswith(".") or name.endswith("._COPYING_") or (name.startswith("_") and "=" not in name)


def is_data_file(relative_path: str) -> bool:
    """Whether a path relative to an output root (or a staging directory) is a Parquet data file Spark's
    reader would list: no :func:`is_hidden` segment, named ``*.parquet`` (so a checkpoint or other files
    kept under the root are never data). The one rule of every listing: publishing a staged batch and
    ``vacuum``.

    Example: ``is_data_file("_k=a/part-0.parquet") is True``,
    ``is_data_file("_exactly_once/staging/ab12/k=a/part-0.parquet") is False``.
    """
    return relative_path.endswith(".parquet") and not any(map(is_hidden, relative_path.split("/")))


def parse_partition_path(relative_path: str) -> list[tuple[str, str]]:
    """The ``(column, raw escaped value)`` pairs of the directories of a root-relative file path."""
    pairs = []
    for segment in relative_path.split("/")[:-1]:
        name, sep, raw = segment.partition("=")
        if not sep or not name:
            raise ValueError(f"directory {segment!r} in {relative_path!r} is not a k=v partition directory")
        pairs.append((unescape_path_name(name), raw))
    return pairs


def _whole_decimal(raw: str) -> int | None:
    """The value of a ``BigDecimal`` literal with scale <= 0 and at most 38 digits (``1e5``), else None."""
    if not _BIG_DECIMAL.match(raw):
        return None
    exact = decimal.Decimal(raw)
    if exact.as_tuple().exponent < 0:  # a fraction digit: Spark leaves it to the double rule
        return None
    if exact and exact.adjusted() >= _MAX_DECIMAL_PRECISION:  # more than 38 digits (checked before int())
        return None
    return int(exact)


def _timestamp_value(text: str) -> tuple[int, ...] | None:
    """The fields of ``yyyy-MM-dd HH:mm:ss[.S]`` (or of a plain date), if it names a real instant."""
    match = _TIMESTAMP.match(text) or _DATE.match(text)
    if match is None:
        return None
    fields = [int(g) for g in match.groups()[:6] if g is not None]
    fraction = match.groups()[6] if len(match.groups()) > 6 else None
    fields.append(int(fraction[1]) * 100_000 if fraction else 0)
    try:
        _dt.datetime(fields[0] or 400, *fields[1:])  # year 0 is valid where year 400 is (see _ERA)
    except ValueError:
        return None
    return tuple(fields)


def _kind(raw: str) -> tuple[str, int]:
    """Spark's ``inferPartitionColumnValue`` for one raw directory value: (kind, decimal precision)."""
    if _INT.match(raw):
        value = int(raw)
        if _INT32[0] <= value <= _INT32[1]:
            return "int", 0
        if _INT64[0] <= value <= _INT64[1]:
            return "long", 0
    whole = _whole_decimal(raw)
    if whole is not None:
        return "decimal", len(str(abs(whole)))
    if _DOUBLE.match(raw.strip(_JAVA_TRIM)):
        return "double", 0
    text = unescape_path_name(raw)
    if _TIMESTAMP.match(text) and _timestamp_value(text):
        return "timestamp", 0
    if _DATE.match(raw) and (_timestamp_value(raw) or (0,))[0]:  # a date in year 0 cannot be held in Python
        return "date", 0
    return ("null" if raw == DEFAULT_PARTITION_NAME else "string"), 0


def _wider(a: tuple[str, int], b: tuple[str, int]) -> tuple[str, int]:
    """Spark's ``findWiderTypeForPartitionColumn``: what two kinds resolve to (string when nothing else)."""
    if a == b or b[0] == "null":
        return a
    if a[0] == "null":
        return b
    kinds = {a[0], b[0]}
    if kinds == {"int", "long"}:
        return "long", 0
    if kinds == {"int", "double"}:
        return "double", 0
    if kinds <= {"int", "long", "decimal"}:
        precision = max(_DECIMAL_WIDTH.get(k, p) for k, p in (a, b))
        return "decimal", min(precision, _MAX_DECIMAL_PRECISION)
    if kinds == {"date", "timestamp"}:
        return "timestamp", 0
    return "string", 0


def infer_partition_types(raw_values: Mapping[str, Iterable[str]], time_zone: str = "UTC") -> dict[str, pa.DataType]:
    """Arrow type per partition column, from all its raw values, with Spark's inference and widening rules
    (``1`` int, ``1e5`` decimal, ``2.5`` double, ``2.5`` with ``1e5`` string, ``2026-02-03 02%3A08%3A09``
    timestamp in ``time_zone``, all nulls null).

    Example::

        >>> infer_partition_types({"n": ["1", "10000000000"], "d": ["2.5", "1.0E20"]})
        {'n': DataType(int64), 'd': DataType(string)}
    """
    types = {}
    for column, values in raw_values.items():
        kind = ("null", 0)
        for raw in set(values):
            kind = _wider(kind, _kind(raw))
        types[column] = {
            "null": pa.null(),
            "int": pa.int32(),
            "long": pa.int64(),
            "decimal": pa.decimal128(max(kind[1], 1), 0),
            "double": pa.float64(),
            "timestamp": pa.timestamp("us", tz="UTC" if time_zone == "Z" else time_zone),
            "date": pa.date32(),
            "string": pa.string(),
        }[kind[0]]
    return types


def convert_partition_value(raw: str, typ: pa.DataType) -> Any:
    """The Python value of a raw directory value for the inferred type (None for the default name);
    Spark's ``castPartValueToDesiredType``. A timestamp whose instant Python's datetime cannot hold (year 0 or
    10000 in UTC) is given as microseconds since the epoch, which Arrow takes for the type."""
    if raw == DEFAULT_PARTITION_NAME or pa.types.is_null(typ):
        return None
    if pa.types.is_integer(typ):
        return int(raw)
    if pa.types.is_decimal(typ):
        return decimal.Decimal(int(decimal.Decimal(raw)))
    if pa.types.is_floating(typ):
        return float(raw.strip(_JAVA_TRIM).rstrip("fFdD").replace("Infinity", "inf"))
    text = unescape_path_name(raw)
    if pa.types.is_date(typ):
        return _dt.date(*_timestamp_value(text)[:3])
    if pa.types.is_timestamp(typ):
        year, *fields = _timestamp_value(text)
        try:
            if year:
                return _dt.datetime(year, *fields, tzinfo=_zone(typ.tz)).astimezone(_dt.UTC)
            return _dt.datetime(400, *fields, tzinfo=_zone(typ.tz)).astimezone(_dt.UTC) - _ERA  # year 0
        except OverflowError:  # the instant lies in year 0 or 10000 (0001-01-01 00:00 at +05:00): Arrow holds it
            eras = 1 if year < 5000 else -1  # computed 400 years away, then moved back
            moved = _dt.datetime(year + 400 * eras, *fields, tzinfo=_zone(typ.tz)).astimezone(_dt.UTC)
            return (moved - _EPOCH - eras * _ERA) // _dt.timedelta(microseconds=1)
    return text
