"""Hive-style ``k=v`` partition directories, escaped and typed exactly as Spark does.

Writing: :func:`partition_dir` (``ExternalCatalogUtils.escapePathName``, nulls and empty strings go to
``__HIVE_DEFAULT_PARTITION__``). Reading: :func:`parse_partition_path` and :func:`infer_partition_types`
(``PartitioningUtils.inferPartitionColumnValue`` + ``resolveTypeConflicts``), so a reader gets the
same columns and values as ``spark.read.parquet``.

Example::

    >>> partition_dir([("cat", "c:d"), ("n", 3)])
    'cat=c%3Ad/n=3'
    >>> parse_partition_path("cat=c%3Ad/n=3/part-0.parquet")
    [('cat', 'c%3Ad'), ('n', '3')]
"""

from __future__ import annotations

import datetime as _dt
import decimal
import re
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

DEFAULT_PARTITION_NAME = "__HIVE_DEFAULT_PARTITION__"
_ESCAPE = frozenset([chr(c) for c in range(1, 32)] + list("\"#%'*/:=?\\\x7f{[]^"))
_INT = re.compile(r"^[+-]?\d+$")
_DOUBLE = re.compile(r"^[+-]?(NaN|Infinity|((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)[fFdD]?)$")
_DATE = re.compile(r"^\d{4}-\d{1,2}-\d{1,2}$")
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
# Widening order of Spark's partition type inference (a conflict resolves to the wider type).
_RANK = {"null": 0, "int": 1, "long": 2, "decimal": 3, "double": 4, "date": 5, "string": 6}


def escape_path_name(value: str) -> str:
    """Spark's ``escapePathName``: ``"c:d"`` -> ``"c%3Ad"``."""
    return "".join(f"%{ord(c):02X}" if c in _ESCAPE else c for c in value)


def unescape_path_name(value: str) -> str:
    """Spark's ``unescapePathName``: ``"c%3Ad"`` -> ``"c:d"`` (malformed escapes stay as they are)."""
    return re.sub(r"%([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), value)


def partition_value_str(value: Any) -> str | None:
    """A partition value as Spark casts it to string for the directory name (None for null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, _dt.datetime):
        return value.isoformat(sep=" ")
    return str(value)


def partition_dir(pairs: Iterable[tuple[str, Any]]) -> str:
    """The relative ``k=v/k2=v2`` directory for one combination of partition values."""
    parts = []
    for name, value in pairs:
        text = partition_value_str(value)
        escaped = DEFAULT_PARTITION_NAME if not text else escape_path_name(text)
        parts.append(f"{escape_path_name(name)}={escaped}")
    return "/".join(parts)


def parse_partition_path(relative_path: str) -> list[tuple[str, str]]:
    """The ``(column, raw escaped value)`` pairs of the directories of a root-relative file path."""
    pairs = []
    for segment in relative_path.split("/")[:-1]:
        name, sep, raw = segment.partition("=")
        if not sep or not name:
            raise ValueError(f"directory {segment!r} in {relative_path!r} is not a k=v partition directory")
        pairs.append((unescape_path_name(name), raw))
    return pairs


def _kind(raw: str) -> str:
    if raw == DEFAULT_PARTITION_NAME:
        return "null"
    if _INT.match(raw):
        value = int(raw)
        if _INT32[0] <= value <= _INT32[1]:
            return "int"
        return "long" if _INT64[0] <= value <= _INT64[1] else "decimal"
    if _DOUBLE.match(raw):
        return "double"
    if _DATE.match(unescape_path_name(raw)):
        try:
            _dt.date.fromisoformat("-".join(f"{int(p):02d}" for p in unescape_path_name(raw).split("-")))
            return "date"
        except ValueError:
            return "string"
    return "string"


def _wider(a: str, b: str) -> str:
    if a == b or b == "null":
        return a
    if a == "null":
        return b
    numeric = {"int", "long", "decimal", "double"}
    if a in numeric and b in numeric:
        return max(a, b, key=_RANK.__getitem__)
    return "string"


def infer_partition_types(raw_values: dict[str, Sequence[str]]) -> dict[str, pa.DataType]:
    """Arrow type per partition column, from all its raw values, with Spark's widening rules."""
    types = {}
    for column, values in raw_values.items():
        kind = "null"
        for raw in set(values):
            kind = _wider(kind, _kind(raw))
        if kind == "decimal":
            precision = max(len(r.lstrip("+-")) for r in values if r != DEFAULT_PARTITION_NAME)
            types[column] = pa.decimal128(min(precision, 38), 0)
        else:
            types[column] = {
                "null": pa.string(),
                "int": pa.int32(),
                "long": pa.int64(),
                "double": pa.float64(),
                "date": pa.date32(),
                "string": pa.string(),
            }[kind]
    return types


def convert_partition_value(raw: str, typ: pa.DataType) -> Any:
    """The Python value of a raw directory value for the inferred type (None for the default name)."""
    if raw == DEFAULT_PARTITION_NAME:
        return None
    if pa.types.is_integer(typ):
        return int(raw)
    if pa.types.is_decimal(typ):
        return decimal.Decimal(raw)
    if pa.types.is_floating(typ):
        return float(raw.rstrip("fFdD").replace("Infinity", "inf"))
    text = unescape_path_name(raw)
    if pa.types.is_date(typ):
        year, month, day = (int(p) for p in text.split("-"))
        return _dt.date(year, month, day)
    return text
