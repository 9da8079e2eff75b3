"""How every part of the package opens committed Parquet data files: as Spark reads them.

Spark's writer stores timestamps as INT96 unless told otherwise (``spark.sql.parquet.outputTimestampType``), and
so do the files of the sink's Spark writer path and of Spark's own file sink. pyarrow reads an INT96 as
nanoseconds unless told otherwise, which wraps silently outside 1677-09-21 .. 2262-04-11: a Spark timestamp of
year 1000 read as 2169-02-08, and an optimize writing that back would make the wrong value permanent. Spark's
timestamps have microsecond precision (``ParquetRowConverter`` reads an INT96 into microseconds), so reading INT96
as microseconds loses nothing and holds every instant of years 1..9999. Every reader, footer schema, statistic and
rewrite here opens data files through this module.

A data file whose size is known (the log records it) opens with :func:`open_sized`: its footer from one ranged
read of its end, then only the column chunks a caller reads (one ranged read each): on an object store one GET
per footer, where opening it as a file costs a HEAD and two reads.

Example::

    >>> open_parquet("part-0.parquet").read().schema.field("ts").type  # an INT96 column
    TimestampType(timestamp[us])
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from .storage.filesystem import Storage

INT96_UNIT = "us"  # Spark's timestamp precision
_TAIL = 64 * 1024  # bytes read from a file's end for its footer: one ranged read for most files


def open_parquet(source: Any, filesystem: pyarrow.fs.FileSystem | None = None, **options: Any) -> pq.ParquetFile:
    """``pq.ParquetFile(source, ...)`` reading INT96 timestamps as Spark does (close it, or use it in a ``with``)."""
    return pq.ParquetFile(source, filesystem=filesystem, coerce_int96_timestamp_unit=INT96_UNIT, **options)


def read_footer(storage: Storage, path: str, size: int) -> pq.FileMetaData:
    """The footer of the Parquet file ``path`` of ``size`` bytes, from one ranged read of its end (two when the
    footer is longer than 64 KiB): no HEAD, as the size is known. ``pa.ArrowInvalid`` when the bytes there are not
    a footer (the file is shorter or longer than ``size``, or not Parquet)."""
    start = max(0, size - _TAIL)
    tail = storage.read_bytes(path, start, size)
    if len(tail) != size - start:
        raise pa.ArrowInvalid(f"{path} holds {start + len(tail)} bytes, its log entry says {size}")
    length = int.from_bytes(tail[-8:-4], "little") + 8
    if tail[-4:] == b"PAR1" and len(tail) < length <= size:
        tail = storage.read_bytes(path, size - length, size)
    return pq.read_metadata(pa.BufferReader(tail))


class _RangedFile(io.RawIOBase):
    """A read-only file of known size whose every read is one ranged read through ``storage``: seeking and
    telling ask the store nothing."""

    def __init__(self, storage: Storage, path: str, size: int) -> None:
        super().__init__()
        self._storage, self._path, self._size, self._position = storage, path, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._position = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence] + offset
        return self._position

    def tell(self) -> int:
        return self._position

    def readinto(self, buffer: Any) -> int:
        end = min(self._size, self._position + len(buffer))
        data = self._storage.read_bytes(self._path, self._position, end) if end > self._position else b""
        memoryview(buffer)[: len(data)] = data
        self._position += len(data)
        return len(data)


def open_sized(storage: Storage, path: str, size: int) -> pq.ParquetFile:
    """:func:`open_parquet` of the data file ``path`` of ``size`` bytes (its log entry's), its footer from
    :func:`read_footer` and each column chunk read when asked for, by one ranged read."""
    return open_parquet(_RangedFile(storage, path, size), metadata=read_footer(storage, path, size))


def read_schema(source: Any, filesystem: pyarrow.fs.FileSystem | None = None, *, int96_zoned: bool = False) -> pa.Schema:
    """The Arrow schema of a data file's footer, its INT96 columns as microsecond timestamps: naive, as pyarrow
    reads them, or with ``int96_zoned`` in UTC, so that every timestamp is zoned where Spark reads an instant
    (``TimestampType``: INT96, or a TIMESTAMP adjusted to UTC) and naive where it reads a ``TimestampNTZType``
    (a TIMESTAMP not adjusted to UTC), at any depth: the Spark types a writer must keep."""
    with open_parquet(source, filesystem) as parquet:
        schema = parquet.schema_arrow
        if not int96_zoned:
            return schema
        stored = parquet.schema  # its leaves in the order of the Arrow schema's, depth first
        int96 = [stored.column(i).physical_type == "INT96" for i in range(len(stored))]
    leaves = iter(int96)
    zoned = pa.schema([f.with_type(_int96_zoned(f.type, leaves)) for f in schema], metadata=schema.metadata)
    if next(leaves, None) is not None:  # leaves that do not pair up: as pyarrow reads them
        return schema
    naive = any(holds_naive_timestamp(f.type) for f in zoned)
    return zoned.with_metadata({**(zoned.metadata or {}), INT96_ONLY: b"true"}) if any(int96) and not naive else zoned


INT96_ONLY = b"parquet_sink.int96_only"  # read_schema(int96_zoned=True): every timestamp of the file is INT96


def holds_naive_timestamp(typ: pa.DataType) -> bool:
    """Whether ``typ`` holds a naive timestamp (Spark's TimestampNTZ), at any depth."""
    found = False

    def look(leaf: pa.DataType) -> pa.DataType:
        nonlocal found
        found = found or (pa.types.is_timestamp(leaf) and leaf.tz is None)
        return leaf

    map_leaves(typ, look)
    return found


def naive_timestamps(typ: pa.DataType) -> pa.DataType:
    """``typ`` with every timestamp naive (its UTC wall clock when it was zoned), at any depth."""
    return map_leaves(typ, lambda leaf: pa.timestamp(leaf.unit) if pa.types.is_timestamp(leaf) else leaf)


def map_leaves(typ: pa.DataType, leaf: Callable[[pa.DataType], pa.DataType]) -> pa.DataType:
    """``typ`` with each of its leaf types (every type but a struct, list or map) replaced by ``leaf(t)``, at any
    depth, visited depth first (struct fields in order, a list's element, a map's key then its value: the order of a
    Parquet file's leaf columns).

    Example: ``map_leaves(pa.list_(pa.timestamp("ns")), lambda t: pa.timestamp("us") if pa.types.is_timestamp(t) else t)``
    -> ``list<item: timestamp[us]>``.
    """
    if pa.types.is_struct(typ):
        return pa.struct([f.with_type(map_leaves(f.type, leaf)) for f in typ])
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        element = typ.value_field.with_type(map_leaves(typ.value_type, leaf))
        return pa.list_(element) if pa.types.is_list(typ) else pa.large_list(element)
    if pa.types.is_map(typ):
        key = typ.key_field.with_type(map_leaves(typ.key_type, leaf))
        return pa.map_(key, typ.item_field.with_type(map_leaves(typ.item_type, leaf)), typ.keys_sorted)
    return leaf(typ)


def _int96_zoned(typ: pa.DataType, int96: Iterator[bool]) -> pa.DataType:
    """``typ`` with each timestamp leaf that ``int96`` (one item per leaf, depth first) says is INT96 zoned UTC."""

    def zoned(leaf: pa.DataType) -> pa.DataType:
        is_int96 = next(int96, False)  # one item per leaf, whatever its type
        return pa.timestamp(leaf.unit, "UTC") if is_int96 and pa.types.is_timestamp(leaf) else leaf

    return map_leaves(typ, zoned)


def _as_read(typ: pa.DataType, instants: bool) -> pa.DataType:
    """``typ`` with every timestamp in it (struct fields, list elements, map keys and values) in microseconds when
    it is coarser (Spark's precision), and zoned UTC when ``instants``."""

    def read(leaf: pa.DataType) -> pa.DataType:
        if not pa.types.is_timestamp(leaf):
            return leaf
        return pa.timestamp("us" if leaf.unit in ("s", "ms") else leaf.unit, "UTC" if instants else leaf.tz)

    return map_leaves(typ, read)


def unify_schemas(schemas: list[pa.Schema]) -> pa.Schema:
    """The schema a dataset reads files of ``schemas`` (footers of some of an output's files) as: pyarrow's
    permissive unification, with every timestamp in microseconds where the footers give seconds or milliseconds
    (Spark's precision, as Spark reads TIMESTAMP_MILLIS: another file of the output may hold microseconds, which
    a millisecond column cannot), and a column whose timestamps are naive in one file and zoned in another (Spark's
    INT96, read naive, next to its TIMESTAMP_MICROS / TIMESTAMP_MILLIS, zoned UTC: one Spark type, which an output
    may hold both of), or zoned differently, as instants in UTC (Arrow reads a naive timestamp into a zoned type as
    UTC, as Spark reads an INT96). ``pa.ArrowTypeError`` / ``pa.ArrowInvalid`` for types nothing unifies.

    Example: ``unify_schemas([int96_footer, millis_footer]).field("ts").type`` -> ``timestamp[us, tz=UTC]``.
    """
    try:
        unified = pa.unify_schemas(schemas, promote_options="permissive")
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        types: dict[str, set[pa.DataType]] = {}
        for schema in schemas:
            for f in schema:
                types.setdefault(f.name, set()).add(f.type)
        differ = {name for name, kinds in types.items() if len(kinds) > 1}
        instants = [pa.schema([f.with_type(_as_read(f.type, f.name in differ)) for f in schema],
                              metadata=schema.metadata) for schema in schemas]
        unified = pa.unify_schemas(instants, promote_options="permissive")
    return pa.schema([f.with_type(_as_read(f.type, False)) for f in unified], metadata=unified.metadata)


def parquet_format() -> ds.ParquetFileFormat:
    """The dataset format of committed data files (INT96 timestamps read as Spark does)."""
    return ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(coerce_int96_timestamp_unit=INT96_UNIT))


__all__ = [
    "INT96_ONLY", "INT96_UNIT", "holds_naive_timestamp", "map_leaves", "naive_timestamps", "open_parquet", "open_sized", "parquet_format",
    "read_footer", "read_schema",
    "unify_schemas",
]
