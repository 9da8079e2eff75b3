"""What the table-format mirrors (:mod:`parquet_sink.delta`, :mod:`parquet_sink.iceberg`) share, below both (the
seam issue 55 item 6 asks for): one lock per mirrored table in a process, as delta-rs and pyiceberg leave a
table's in-process state to their caller (the counterpart of Apache XTable's per-table sync lock); which mirrors
an output keeps (:func:`kept_formats`: the one rule of the writers, ``optimize``, ``vacuum`` and ``verify``); and
the one decision, made before a writer commits a batch, of what a mirror the output keeps could never list
(:func:`refuse_before_commit`: dates and timestamps outside 0001..9999, which neither Delta nor pyiceberg's
statistics hold, and each format's types), so a batch no mirror can follow is refused with nothing written
instead of committed and leaving the mirror behind for good.

Layering: imports ``errors``, ``parquet_read``, ``rebase`` and ``statistics`` only (``storage`` for its annotations);
``delta``, ``iceberg`` and ``write`` import it.
"""

from __future__ import annotations

import datetime as _dt
import threading
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import ParquetSinkError
from .parquet_read import open_sized
from .rebase import hybrid_leaf_statistics
from .statistics import LeafPath, LeafStatistics, column_leaves, data_statistics, file_statistics

if TYPE_CHECKING:
    from .storage.filesystem import Storage

_EPOCH = _dt.datetime(1970, 1, 1)
_US = _dt.timedelta(microseconds=1)
# the range of dates and timestamps every mirror holds (Delta's and Spark's; pyiceberg's statistics are Python
# datetimes): 0001-01-01 to 9999-12-31, in microseconds from the epoch
DATE_MIN_US = (_dt.datetime(1, 1, 1) - _EPOCH) // _US
DATE_MAX_US = (_dt.datetime(9999, 12, 31, 23, 59, 59, 999999) - _EPOCH) // _US
_PER_US = {"s": (1_000_000, 1), "ms": (1000, 1), "us": (1, 1), "ns": (1, 1000)}  # (multiply, divide)
DATE_RANGE = "0001-01-01..9999-12-31"
# the instants a timestamp in nanoseconds holds (int64 from the epoch: 1677-09-21 to 2262-04-11), in microseconds
NANOS_MIN_US, NANOS_MAX_US = -(2**63) // 1000 + 1, (2**63 - 1) // 1000
NANOS_RANGE = "1677-09-21..2262-04-11"


class TableLocks:
    """One ``threading.Lock`` per table key (a mirror's own: a Delta log's URI and options, an Iceberg table's
    output and identifier), created on first use: syncs of one table in threads of one process take turns.

    Example::

        >>> locks = TableLocks()
        >>> with locks(("/data/events", None)):
        ...     pass
    """

    def __init__(self) -> None:
        self._locks: dict[Hashable, threading.Lock] = {}
        self._guard = threading.Lock()

    def __call__(self, key: Hashable) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())


class TableFormatRefusal(ParquetSinkError):
    """A batch a table-format mirror the output keeps could never list, refused before its commit (nothing
    committed, its files deleted). ``column`` names the column (``s.f`` for a struct's field); each mirror
    raises its own subclass (:class:`~parquet_sink.delta.DeltaRangeError`,
    :class:`~parquet_sink.iceberg.IcebergRefusalError`), so ``except TableFormatRefusal`` catches either."""

    def __init__(self, message: str, column: str) -> None:
        super().__init__(message)
        self.column = column


@dataclass(frozen=True)
class TableFormat:
    """A mirror as :func:`refuse_before_commit` sees it: ``name`` (``"a Delta log"``), ``directory`` (relative to
    the output root: the output keeps this mirror when it exists), ``problems`` (the columns of a schema the
    format cannot hold, each ``(column, why)``), ``refusal`` (its :class:`TableFormatRefusal`) and
    ``int96_nanos``: its readers read INT96 timestamps as nanoseconds (pyiceberg does), so such a value outside
    :data:`NANOS_RANGE` comes back wrong. ``followed``: the directory (relative to the output root) of the table
    the output's maintenance (optimize) brings in step unnamed, when it differs from ``directory``: an Iceberg
    table without catalog (a catalog's table is synced only when named: the output cannot tell which catalog
    holds it)."""

    name: str
    directory: str
    problems: Callable[[pa.Schema], list[tuple[str, str]]]
    refusal: type[TableFormatRefusal]
    int96_nanos: bool = False
    followed: str | None = None


def timestamp_micros(scalar: pa.Scalar, bound: str) -> int:
    """A timestamp scalar in microseconds from the epoch, a nanosecond min rounded down, a max up."""
    multiply, divide = _PER_US[scalar.type.unit]
    value = scalar.value * multiply
    return value // divide if bound == "min" else -(-value // divide)


def date_micros(scalar: pa.Scalar, bound: str) -> int:
    """A date or timestamp scalar in microseconds from the epoch (a date: its midnight)."""
    if pa.types.is_timestamp(scalar.type):
        return timestamp_micros(scalar, bound)
    return scalar.cast(pa.date32()).value * 86_400_000_000


def in_date_range(scalar: pa.Scalar, bound: str, nanos: bool = False) -> bool:
    """Whether the date or timestamp ``scalar`` lies within :data:`DATE_MIN_US`..:data:`DATE_MAX_US` (``nanos``:
    and within what a timestamp in nanoseconds holds)."""
    micros = date_micros(scalar, bound)
    return DATE_MIN_US <= micros <= DATE_MAX_US and (not nanos or NANOS_MIN_US <= micros <= NANOS_MAX_US)


def dated_fields(fields: pa.StructType | pa.Schema) -> list[pa.Field]:
    """The date and timestamp columns of ``fields``, and the structs holding such fields at any depth (pruned
    to them): the columns whose values are checked against the range (lists and maps carry no statistics).

    Example: ``dated_fields(pa.schema([("n", pa.int64()), ("t", pa.date32())]))`` -> ``[pa.field("t", pa.date32())]``.
    """
    found = []
    for f in fields:
        if pa.types.is_timestamp(f.type) or pa.types.is_date(f.type):
            found.append(f)
        elif pa.types.is_struct(f.type):
            nested = dated_fields(f.type)
            if nested:
                found.append(f.with_type(pa.struct(nested)))
    return found


def unbounded_leaves(
    fields: pa.StructType | pa.Schema, leaves: dict[LeafPath, LeafStatistics], prefix: LeafPath, rows: int
) -> list[LeafPath]:
    """The leaves of ``fields`` (through structs) the footer gives no bounds for although they hold values,
    binary left out (no mirror keeps binary bounds)."""
    found = []
    for field in fields:
        path = prefix + (field.name,)
        if pa.types.is_struct(field.type):
            found += unbounded_leaves(field.type, leaves, path, rows)
        elif path in leaves and not pa.types.is_binary(field.type) and leaves[path].min is None:
            if leaves[path].null_count != rows:
                found.append(path)
    return found


def leaf_statistics(parquet: pq.ParquetFile, schema: pa.Schema | pa.StructType) -> dict[LeafPath, LeafStatistics]:
    """The exact statistics of the leaves of ``parquet``: the footer's, and for ``schema``'s leaves whose footer
    has no bounds (INT96 timestamps, strings over the writer's statistics size) from their data; the dates and
    timestamps Spark stored in the hybrid calendar bounding what Spark reads (:func:`hybrid_leaf_statistics`)."""
    metadata = parquet.metadata
    leaves = file_statistics(metadata, stored=True)
    leaves.update(data_statistics(parquet, unbounded_leaves(schema, leaves, (), metadata.num_rows)))
    leaves.update(hybrid_leaf_statistics(metadata, leaves))
    return leaves


def columns_out_of_range(parquet: pq.ParquetFile, schema: pa.Schema) -> tuple[str | None, str | None]:
    """(the first date or timestamp column of ``schema``, ``s.f`` for a struct's field, holding a value outside
    :data:`DATE_RANGE` in ``parquet``; the first INT96 timestamp column holding one outside :data:`NANOS_RANGE`),
    None where there is none, from the file's footer bounds and its data where the footer has none (INT96).

    Example: ``columns_out_of_range(pq.ParquetFile("part-0.parquet"), schema)`` -> ``('at', None)``.
    """
    dated = pa.schema(dated_fields(schema))
    if not len(dated):
        return None, None
    leaves = leaf_statistics(parquet, dated)
    metadata = parquet.metadata
    int96 = {metadata.schema.column(i).path for i in range(metadata.num_columns)
             if metadata.schema.column(i).physical_type == "INT96"}
    found: list[str | None] = [None, None]
    for path in (p for f in dated for p, _, repeated, _ in column_leaves(f.type, (f.name,)) if not repeated):
        stats = leaves.get(path)
        column = ".".join(path)
        for index, nanos in enumerate((False, True)):
            if stats is None or found[index] is not None or (nanos and column not in int96):
                continue
            if any(s is not None and not in_date_range(s, b, nanos) for b, s in (("min", stats.min), ("max", stats.max))):
                found[index] = column
    return found[0], found[1]


def kept_formats(
    storage: Storage, formats: Sequence[tuple[TableFormat, bool | None]], followed: bool = False
) -> list[TableFormat]:
    """The mirrors the output of ``storage`` keeps among ``formats``, each with the caller's setting: True (the
    caller keeps it: ``delta_log=True``, ``iceberg=``), False (the caller keeps none, whatever the output holds:
    ``optimize(delta_log=False)``), None (as the output has it: its directory exists, another writer or a sync
    made it). ``followed``: the table the caller brings in step unnamed (:attr:`TableFormat.followed`) rather than
    any table of the format. The one rule of the writers' refusal (:func:`refuse_before_commit`) and of what
    ``optimize``, ``vacuum`` and ``verify`` bring in step or keep; one existence check per format set to None.

    Example: ``kept_formats(Storage("/data/events"), [(DELTA, None), (ICEBERG, None)], followed=True)`` -> ``[DELTA]``.
    """
    def exists(table_format: TableFormat) -> bool:
        directory = (table_format.followed or table_format.directory) if followed else table_format.directory
        return storage.exists(storage.join(directory))

    return [f for f, setting in formats if setting or (setting is None and exists(f))]


def refuse_before_commit(
    storage: Storage, files: Iterable[tuple[str, int]], schema: pa.Schema, what: str,
    formats: Sequence[tuple[TableFormat, bool]],
) -> None:
    """Before a writer commits a batch's ``files`` (path, size), whose data columns are ``schema``, to an output:
    for each mirror of ``formats`` (each with whether the writer keeps it) the output keeps (:func:`kept_formats`:
    the writer's, and those whose directory exists), the mirror's refusal when a column
    has a type it lacks, or a file holds a date or timestamp outside 0001-01-01..9999-12-31 (every later sync
    would refuse the file and the mirror's readers would stay at the batch before, for good). The batch's
    files are deleted first: nothing of it is committed or left. Costs nothing without a mirror; else a check
    of the schema, one existence check per mirror not kept by the writer, and for a batch with a date or
    timestamp column its footers (and the data of such columns without footer bounds: INT96), as the syncs
    after the commit read them (a batch with neither: no request).

    Example: ``refuse_before_commit(storage, [(path, size)], schema, "write_batch of version 3 of app 'a'", [(DELTA, True)])``.
    """
    files = list(files)
    dated = bool(dated_fields(schema))
    # only a mirror that could refuse this batch is looked for: a batch without a date, a timestamp or a type some
    # mirror lacks costs no request
    kept = kept_formats(storage, [(f, flag or None) for f, flag in formats if dated or f.problems(schema)])
    if not kept:
        return
    where = storage.display(storage.root)

    def refuse(table_format: TableFormat, column: str, why: str) -> TableFormatRefusal:
        for path, _ in files:
            storage.delete(path)
        return table_format.refusal(
            f"{what}: column {column!r} {why}, and {where} keeps {table_format.name} ({table_format.directory}), "
            "which can never list such a file: every later sync would fail and its readers would stay at the batch "
            f"before. Nothing was committed and the batch's files were deleted. {_REMEDY}",
            column,
        )

    for table_format in kept:
        problems = table_format.problems(schema)
        if problems:
            raise refuse(table_format, *problems[0])
    if not dated:
        return
    for path, size in files:
        with open_sized(storage, path, size) as parquet:
            beyond, int96 = columns_out_of_range(parquet, schema)
        if beyond is not None:
            raise refuse(kept[0], beyond, f"holds a value outside {DATE_RANGE} (the range of dates and timestamps "
                                          "the table formats hold)")
        nanos = next((f for f in kept if f.int96_nanos), None)
        if int96 is not None and nanos is not None:
            raise refuse(nanos, int96, f"holds an INT96 timestamp outside {NANOS_RANGE} (its readers read INT96 as "
                                       "nanoseconds: such a value comes back wrong)")


_REMEDY = ("Write such values as null or within that range, or such columns with a type the format has (filter, "
           "clamp or cast them before the writer), or write them to an output without that table.")


__all__ = [
    "DATE_MAX_US", "DATE_MIN_US", "DATE_RANGE", "NANOS_RANGE", "TableFormat", "TableFormatRefusal", "TableLocks",
    "columns_out_of_range",
    "date_micros", "dated_fields", "in_date_range", "kept_formats", "leaf_statistics", "refuse_before_commit",
    "timestamp_micros", "unbounded_leaves",
]
