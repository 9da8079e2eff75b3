"""The file writer: one Spark task (or one :func:`parquet_sink.write_batch` call) writes its rows as
Parquet files, straight to their final names through the storage layer, and returns one status per file
(:func:`write_rows`, the one piece of code both call).

Runs inside ``DataFrame.mapInArrow``: no rows go through the driver. File names follow Spark
(``part-<task:05d>-<uuid>.c<nnn>.<codec>.parquet``, under the root or Hive ``k=v/`` directories); the
uuid is per task attempt, so a retried or speculative attempt never overwrites another attempt's file.
Only the statuses of the attempt Spark accepted reach the driver, so a failed attempt's files are never
committed.

Bounded like Spark's writer: :func:`write_files` sorts each task's rows by the partition columns, so a
task writes one partition directory after the other and keeps one file open at a time (at most
``_MAX_OPEN_WRITERS`` in any case), whatever the number of partition values. On an object store a file's
close is its upload: up to ``_UPLOADS`` closed files upload (and have their size and time read) in the
background while the task encodes the next ones (:class:`_Closer`), so a task writing many partition
directories waits for one round trip at a time no longer. On local disk the files and their directories are
fsynced before the task reports them, so a committed file survives a power loss.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import re
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..arrow_versions import nonzero
from ..errors import ExecutorDependencyError, ParameterError
from ..failpoints import failpoint
from ..log.entry import STATS_KEY, LogEntry
from ..log.file_stats import encode_stats
from ..partitioning import partition_dir, partition_value_str
from ..statistics import FooterRule, LeafPath, LeafStatistics, footer_rule, merged, nan_column_statistics
from ..storage.filesystem import FileInfo, Storage
from .jvm import without_row_copy

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession
    from pyspark.sql.types import DataType, StructType

logger = logging.getLogger(__name__)
_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([^']+)'")
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Spark's Parquet codec names (ParquetOptions) that pyarrow can write, with the file-name extension
# parquet-mr gives each (CompressionCodecName.getExtension). Every key is also a pyarrow codec name.
_CODEC_EXT = {"none": "", "snappy": ".snappy", "gzip": ".gz", "brotli": ".br", "lz4_raw": ".lz4raw", "zstd": ".zstd"}
_CODEC_ALIASES = {"uncompressed": "none"}
_CODEC_REFUSED = {
    "lzo": "pyarrow cannot write LZO",
    "lz4": "Spark's 'lz4' is the Hadoop-framed LZ4 codec (.lz4hadoop files), which pyarrow cannot write; "
    "use 'lz4_raw' (the same LZ4 compression without Hadoop framing, read by Spark 3.4 and later)",
}
_FLUSH_BYTES = 64 * 1024 * 1024


def parquet_codec(compression: str) -> str:
    """The canonical name of a Parquet codec Spark accepts (case-insensitive, ``uncompressed`` is
    ``none``), which pyarrow writes too: ``"SNAPPY"`` -> ``"snappy"``. ValueError for a name Spark does
    not know or a codec pyarrow cannot write.

    Example: ``parquet_codec("uncompressed") == "none"``; ``parquet_codec("lzo")`` raises ValueError.
    """
    key = str(compression).lower()
    key = _CODEC_ALIASES.get(key, key)
    if key in _CODEC_REFUSED:
        raise ParameterError(f"compression {compression!r} is not supported: {_CODEC_REFUSED[key]}.")
    if key not in _CODEC_EXT:
        names = sorted([*_CODEC_EXT, *_CODEC_ALIASES])
        raise ParameterError(f"unknown Parquet compression {compression!r}; use one of {names}")
    return key


def codec_extension(compression: str) -> str:
    """Spark's file-name extension for a Parquet codec: ``snappy`` -> ``.snappy``, ``none`` -> ``""``;
    ValueError as :func:`parquet_codec`.

    Example: ``codec_extension("lz4_raw") == ".lz4raw"``.
    """
    return _CODEC_EXT[parquet_codec(compression)]


@dataclass(frozen=True)
class WriteSpec:
    """Everything a task needs to write its part of one batch (pickled to the executors).

    ``time_zone`` is the session's ``spark.sql.session.timeZone``: timestamp partition values are written
    in it, as Spark's own writer does. ``int96``: timestamps stored as INT96 (naive UTC in the table), as Spark's
    writer stores the instants of the output the files join, so that every file of it reads the same type.
    """

    storage: Storage
    partition_by: tuple[str, ...]
    compression: str
    max_records_per_file: int | None
    time_zone: str = "UTC"
    int96: bool = False


class _FileWriter:
    """Writes one partition directory's files for one task, rolling over at max_records_per_file."""

    def __init__(self, spec: WriteSpec, next_path: Callable[[], str], closer: _Closer) -> None:
        self.spec, self.next_path = spec, next_path
        self.writer: pq.ParquetWriter | None = None
        self.handle = None
        self.path = ""
        self.rows_in_file = 0
        self.pending: list[pa.RecordBatch] = []
        self.pending_bytes = 0
        self.closer = closer  # closes the files of every writer of the task
        self.rule = FooterRule()  # the open file's
        self.data_stats: dict[LeafPath, LeafStatistics] = {}  # its columns without footer statistics, from the rows

    def write(self, table: pa.Table) -> None:
        limit = self.spec.max_records_per_file
        offset = 0
        rule = footer_rule(table)
        if self.writer is not None and not self.rule.covers(rule):
            self.close()  # e.g. a NaN where the open file keeps float statistics: the rows go into a file of their own
        while offset < table.num_rows:
            if self.writer is None:
                self._open(table.schema, rule)
            room = table.num_rows - offset if not limit else min(limit - self.rows_in_file, table.num_rows - offset)
            piece = table.slice(offset, room)
            for leaf, found in nan_column_statistics(piece, self.rule).items():
                self.data_stats[leaf] = merged(self.data_stats[leaf], found) if leaf in self.data_stats else found
            self.pending.extend(piece.to_batches())
            self.pending_bytes += piece.nbytes
            self.rows_in_file += room
            offset += room
            if self.pending_bytes >= _FLUSH_BYTES:
                self.flush()
            if limit and self.rows_in_file >= limit:
                self.close()

    def _open(self, schema: pa.Schema, rule: FooterRule = FooterRule()) -> None:
        self.path = self.next_path()
        self.handle = self.spec.storage.open(self.path, "wb", publish=True)
        failpoint("file_open")  # a file begun, not whole: under its in-progress name on local disk
        self.writer = pq.ParquetWriter(
            self.handle, schema, compression=self.spec.compression, use_deprecated_int96_timestamps=self.spec.int96,
            **rule.writer_options(schema),
        )
        self.rows_in_file, self.rule, self.data_stats = 0, rule, {}

    def flush(self) -> None:
        if self.pending and self.writer is not None:
            with self.spec.storage.translating("writing", self.path):  # a full disk: StorageError, not OSError
                self.writer.write_table(pa.Table.from_batches(self.pending), row_group_size=1 << 30)
        self.pending, self.pending_bytes = [], 0

    def close(self) -> None:
        if self.writer is None:
            return
        self.flush()
        with self.spec.storage.translating("writing", self.path):
            self.writer.close()  # the footer, into the handle
        self.closer.close(self.path, self.handle, self.rows_in_file, encode_stats(self.writer.writer.metadata, self.data_stats))
        self.writer = self.handle = None


# Background closes (uploads) per task on an object store, and what may wait for them: closed files (each holds
# its unuploaded bytes in memory, up to a buffer block: 50 MiB for s3fs) at most twice as many, and at most
# _UPLOAD_BYTES written in all (one file of any size when none waits).
_UPLOADS = 4
_UPLOAD_BYTES = 64 * 1024 * 1024


class _Closer:
    """Closes a task's written files and reports them as statuses, in the order they were closed.

    On local disk a close is immediate; :meth:`statuses` fsyncs the files and their directories. On an object
    store a close is the file's upload, and its size and time take one more round trip: up to ``_UPLOADS`` of
    these run in the background (at most ``2 * _UPLOADS`` closed files, of ``_UPLOAD_BYTES`` in all, waiting or
    under way: memory stays bounded whatever the files' number and sizes), and the first failure is raised by the
    next :meth:`close` or by :meth:`statuses`, so a task never reports a file that was not stored. Use as a
    context manager: leaving it waits for the uploads under way (a failed task leaves no thread behind)."""

    def __init__(self, spec: WriteSpec) -> None:
        self.spec = spec
        self.closed: list[tuple[str, int, str]] = []  # (path, rows, stats) of each file handed to close
        self.stored = 0  # how many of them are stored (their close returned)
        self._infos: dict[str, FileInfo] = {}
        self._pool = None if spec.storage.is_local else ThreadPoolExecutor(_UPLOADS, "parquet-sink-upload")
        self._room = threading.Condition()
        self._pending_files = self._pending_bytes = 0  # closes submitted and not returned, the bytes they wrote
        self._uploads: list[Future[None]] = []

    def __enter__(self) -> _Closer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def close(self, path: str, handle: IO[bytes], rows: int, stats: str) -> None:
        """Close ``handle``, the file ``path`` holding ``rows`` rows with statistics ``stats``."""
        self.closed.append((path, rows, stats))
        if self._pool is None:
            self._store(path, handle)
            return
        waiting = []
        for upload in self._uploads:  # one pass: an upload ending meanwhile is checked at the next close
            if upload.done():
                upload.result()  # a failed upload fails the task now
            else:
                waiting.append(upload)
        self._uploads = waiting
        size = handle.tell()
        with self._room:
            self._room.wait_for(lambda: not self._pending_files or (
                self._pending_files < 2 * _UPLOADS and self._pending_bytes + size <= _UPLOAD_BYTES
            ))
            self._pending_files += 1
            self._pending_bytes += size
        self._uploads.append(self._pool.submit(self._upload, path, handle, size))

    def _upload(self, path: str, handle: IO[bytes], size: int) -> None:
        try:
            self._store(path, handle)
            self._infos[path] = self.spec.storage.info(path)
        finally:
            with self._room:
                self._pending_files -= 1
                self._pending_bytes -= size
                self._room.notify_all()

    def _store(self, path: str, handle: IO[bytes]) -> None:
        with self.spec.storage.translating("writing", path):
            handle.close()
        self.stored += 1

    def statuses(self) -> list[FileStatus]:
        """Every closed file, stored and durable (local disk: fsynced with its directories), with its size and time."""
        for upload in self._uploads:
            upload.result()
        storage = self.spec.storage
        storage.sync_files([path for path, _, _ in self.closed])
        statuses = []
        for path, rows, stats in self.closed:
            info = self._infos.get(path) or storage.info(path)
            statuses.append(FileStatus(path, info.size, info.mtime_ms, rows, stats))
        return statuses


# Open files per task. Sorted input needs one; a few more absorb values Spark's sort keeps together but
# that are different directories (0.0 and -0.0, NaNs), without reopening files.
_MAX_OPEN_WRITERS = 8


class _TaskFiles:
    """All files of one task: one :class:`_FileWriter` per partition directory, at most
    ``_MAX_OPEN_WRITERS`` open (the least recently used is closed first; its directory gets a new file if
    rows for it come again). Buffered rows are flushed when the task moves to another directory, so memory
    holds one directory's buffer at a time."""

    def __init__(self, spec: WriteSpec, task: int, token: str, closer: _Closer) -> None:
        self.spec, self.task, self.token = spec, task, token
        self.open: OrderedDict[str, _FileWriter] = OrderedDict()
        self.counters: dict[str, int] = {}  # next file number per directory: names are never reused
        self.closer = closer

    def _next_path(self, directory: str) -> str:
        counter = self.counters.get(directory, 0)
        self.counters[directory] = counter + 1
        name = f"part-{self.task:05d}-{self.token}.c{counter:03d}{codec_extension(self.spec.compression)}.parquet"
        return self.spec.storage.join(directory, name) if directory else self.spec.storage.join(name)

    def write(self, directory: str, rows: pa.Table) -> None:
        previous = next(reversed(self.open), None)
        if previous is not None and previous != directory:
            self.open[previous].flush()  # only the directory being written holds rows in memory
        writer = self.open.get(directory)
        if writer is None:
            if len(self.open) >= _MAX_OPEN_WRITERS:
                self.open.popitem(last=False)[1].close()
            next_path = functools.partial(self._next_path, directory)
            writer = self.open[directory] = _FileWriter(self.spec, next_path, self.closer)
        self.open.move_to_end(directory)
        writer.write(rows)

    def close(self) -> None:
        while self.open:
            self.open.popitem(last=False)[1].close()


def _decoded(table: pa.Table, columns: tuple[str, ...]) -> pa.Table:
    """``table`` with its dictionary-encoded partition columns (a pandas categorical, a polars Enum) decoded: a
    directory names a value, as Spark's cast of it to string does (``-0.0``, ``true``), not its code."""
    for column in columns:
        typ = table.schema.field(column).type
        if pa.types.is_dictionary(typ):
            index = table.schema.get_field_index(column)
            table = table.set_column(index, table.schema.field(index).with_type(typ.value_type),
                                     table.column(index).cast(typ.value_type))
    return table


def _group_keys(table: pa.Table, columns: tuple[str, ...]) -> pa.Table:
    """The partition columns as grouping keys: floats by their bits, since Spark writes 0.0 and -0.0 (and
    each NaN) to separate directories while Arrow's sort compares them equal; a column of Arrow's null type
    (polars' Null) as null integers, which Arrow can compare."""
    keys = {}
    for column in columns:
        values = table.column(column).combine_chunks()
        if pa.types.is_floating(values.type):
            values = values.view({16: pa.int16(), 32: pa.int32(), 64: pa.int64()}[values.type.bit_width])
        elif pa.types.is_null(values.type):
            values = values.cast(pa.int8())
        keys[column] = values
    return pa.table(keys)


def _run_starts(keys: pa.Table) -> list[int]:
    """Where each run of equal keys starts in sorted ``keys`` (nulls equal to nulls)."""
    changed = pa.array([False] * (keys.num_rows - 1), pa.bool_())
    for column in keys.columns:
        values = column.combine_chunks()
        before, after = values.slice(0, len(values) - 1), values.slice(1)
        differs = pc.or_(
            pc.fill_null(pc.not_equal(before, after), False), pc.xor(pc.is_null(before), pc.is_null(after))
        )
        changed = pc.or_(changed, differs)
    return [0] + [i + 1 for i in nonzero(changed)]


def _utc(value: pa.Scalar) -> pa.Scalar:
    """A zoned timestamp as UTC (the same instant): Python holds every instant Spark does in UTC, not in
    every zone (0001-01-01T00:00Z is in year 0 in New York)."""
    if pa.types.is_timestamp(value.type) and value.type.tz is not None:
        return value.cast(pa.timestamp(value.type.unit, "UTC"))
    return value


def _split(table: pa.Table, columns: tuple[str, ...], time_zone: str) -> Iterator[tuple[str, pa.Table]]:
    """(relative ``k=v`` directory, rows without the partition columns) per distinct partition value."""
    if not columns:
        yield "", table
        return
    table = _decoded(table, columns)
    keys = _group_keys(table, columns)
    order = pc.sort_indices(keys, [(c, "ascending") for c in columns])
    keys, ordered = keys.take(order), table.take(order)
    data = ordered.drop_columns(list(columns))
    starts = _run_starts(keys)
    for start, end in zip(starts, starts[1:] + [table.num_rows]):
        first = ordered.slice(start, 1)
        values = [(c, partition_value_str(_utc(first.column(c)[0]).as_py(), first.schema.field(c).type, time_zone))
                  for c in columns]
        yield partition_dir(values), data.slice(start, end - start)


@dataclass(frozen=True)
class FileStatus:
    """One written data file at its final path (fsspec path), as its log entry needs it: size in bytes,
    modification time (ms), row count and statistics (:func:`~parquet_sink.log.file_stats.encode_stats`, from
    the footer the writer wrote or read). Both writer paths report their files as these."""

    path: str
    size: int
    modification_time: int
    num_rows: int
    stats: str | None = None


def log_entry(storage: Storage, status: FileStatus | Row) -> LogEntry:
    """The log entry of a written file (a :class:`FileStatus` or a status row of :func:`write_files`), its
    statistics under ``stats`` (Spark ignores the key).

    Example: ``log_entry(storage, FileStatus("/o/part-0.parquet", 392, 1, 10, "{...}")).extra`` -> ``{'stats': '{...}'}``.
    """
    extra = {STATS_KEY: status.stats} if status.stats else {}
    return LogEntry(storage.to_uri(status.path), status.size, False, status.modification_time, extra=extra)


def write_rows(spec: WriteSpec, tables: Iterable[pa.Table], task: int = 0) -> list[FileStatus]:
    """Write rows as one task's Parquet files (Spark's names, ``k=v/`` directories, bounded open files),
    fsync them on local disk and return their statuses. The one file writer of the package: a Spark task
    (:func:`write_task`) and :func:`parquet_sink.write_batch` both call it.

    Failpoint ``task_write`` fires after the first file is complete.

    Example::

        >>> spec = WriteSpec(Storage("/data/events"), ("day",), "snappy", None)
        >>> [s.num_rows for s in write_rows(spec, [table])]
        [600, 400]
    """
    with _Closer(spec) as closer:
        files = _TaskFiles(spec, task, str(uuid.uuid4()), closer)  # Spark's form: dashed uuid
        failpoint_armed = True
        for table in tables:
            if table.num_rows == 0:
                continue
            for directory, rows in _split(table, spec.partition_by, spec.time_zone):
                files.write(directory, rows)
                if failpoint_armed and closer.stored:
                    failpoint("task_write")
                    failpoint_armed = False
        files.close()
        statuses = closer.statuses()
        if failpoint_armed and statuses:
            failpoint("task_write")
        return statuses


def write_schema_file(spec: WriteSpec, schema: pa.Schema) -> list[FileStatus]:
    """The one file of an empty batch of an unpartitioned output: a Parquet file with ``schema`` and no rows,
    named as task 0's file. Spark's sink commits such a file for an empty batch (``FileFormatWriter`` writes
    one for an empty job), so ``spark.read.parquet`` infers the schema of an output whose batches are all
    empty instead of failing. (Partitioned, Spark writes none: no directory to put it in.)

    Example: ``write_schema_file(WriteSpec(Storage("/data/agg"), (), "snappy", None), schema)[0].num_rows == 0``.
    """
    with _Closer(spec) as closer:
        files = _TaskFiles(spec, 0, str(uuid.uuid4()), closer)
        writer = _FileWriter(spec, functools.partial(files._next_path, ""), closer)
        writer._open(schema)
        writer.close()
        return closer.statuses()


_STATUS_ARROW_SCHEMA = pa.schema(
    [("path", pa.string()), ("size", pa.int64()), ("modification_time", pa.int64()), ("num_rows", pa.int64()), ("stats", pa.string())]
)


def write_task(spec: WriteSpec, names: list[str], batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function: write this task's rows (their columns renamed back to ``names``), yield
    one status row per file written."""
    from pyspark import TaskContext

    context = TaskContext.get()
    task = context.partitionId() if context else 0
    tables = (pa.Table.from_arrays(batch.columns, names=names) for batch in batches)
    statuses = write_rows(spec, tables, task)
    yield pa.RecordBatch.from_pylist([dataclasses.asdict(s) for s in statuses], schema=_STATUS_ARROW_SCHEMA)


def _plain_names(names: list[str]) -> bool:
    """Whether ``mapInArrow`` resolves each of ``names`` as itself: identifiers only (no dot, backtick or other
    character Spark's name parser reads), distinct even case-insensitively (Spark's default resolution)."""
    return all(_PLAIN_NAME.fullmatch(n) for n in names) and len({n.lower() for n in names}) == len(names)


def _status_type() -> StructType:
    """The status rows' Spark type, from :data:`_STATUS_ARROW_SCHEMA` (a DDL string would be parsed in the JVM
    on every batch: ~5 ms of py4j round trips)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(_STATUS_ARROW_SCHEMA)


def stored_type(data_type: DataType) -> DataType:
    """The Spark type ``data_type`` as the package's Arrow schema and the Arrow path's files hold it: a year-month
    interval (``INTERVAL '1-2' YEAR TO MONTH``), at any depth, as its months, an ``int``, as Spark's writer stores it
    (Parquet INT32; Arrow has no year-month interval that pyarrow reads or writes, and Spark sends none to Python); a
    day-time interval is Arrow's ``duration[us]`` as it is (Spark's writer: INT64 microseconds). Anything else as it is.

    Example: ``stored_type(StructType([StructField("ym", YearMonthIntervalType())]))`` ->
    ``StructType([StructField("ym", IntegerType())])``.
    """
    from pyspark.sql.types import ArrayType, IntegerType, MapType, StructField, StructType, YearMonthIntervalType

    if isinstance(data_type, YearMonthIntervalType):
        return IntegerType()
    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, stored_type(f.dataType), f.nullable, f.metadata) for f in data_type])
    if isinstance(data_type, ArrayType):
        return ArrayType(stored_type(data_type.elementType), data_type.containsNull)
    if isinstance(data_type, MapType):
        return MapType(stored_type(data_type.keyType), stored_type(data_type.valueType), data_type.valueContainsNull)
    return data_type


# Spark 4 closes an Arrow batch sent to Python at spark.sql.execution.arrow.maxRecordsPerBatch rows (10,000 by
# default) or at this many bytes (64 MiB by default), and to check the bytes it sizes every vector of the batch
# after every row (BatchedPythonArrowInput.writeSizedBatch: ArrowWriter.sizeInBytes per row, skipped only when the
# value is Int.MaxValue). That check was about half of the JVM's time in the write job (JFR samples) and ~470 ms of
# a 1M-row batch on 2 cores (docs/performance.md).
_ARROW_BATCH_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"
_INT_MAX = str(2**31 - 1)


@contextlib.contextmanager
def _row_bounded_arrow_batches(session: SparkSession) -> Iterator[None]:
    """Within the block, the session's Arrow batches to Python are bounded by their row count alone, as in Spark
    3.5 (whose mapInArrow had no byte bound), unless the user set a byte bound themselves: theirs is kept. The
    setting is undone after the block. In ``foreachBatch`` the session is the query's own (each streaming query
    runs in a clone of the session that started it), so no other query sees it. A platform that refuses the
    setting (some managed Spark Connect services allow only listed keys) gets the job with its own bound: slower,
    the same files."""
    set_here = False
    if session.conf.get(_ARROW_BATCH_BYTES, None) is None:
        try:
            session.conf.set(_ARROW_BATCH_BYTES, _INT_MAX)
            set_here = True
        except Exception as exc:  # any refusal of a speed-up must not fail the batch: py4j, Connect and SQL errors alike
            logger.info("cannot set %s (%s): Arrow batches keep Spark's byte bound", _ARROW_BATCH_BYTES, exc)
    try:  # outside the handler: the job's own errors are not chained to a refusal
        yield
    finally:
        if set_here:
            session.conf.unset(_ARROW_BATCH_BYTES)


def write_files(df: DataFrame, spec: WriteSpec) -> list[Row]:
    """Write one batch on the executors; one status row (the fields of :class:`FileStatus`) per file written.

    The partition columns are replaced by Spark's cast of them to string (the directory names), then each
    task's rows are sorted by them (within the task, no shuffle), as Spark's
    own writer does, so a task finishes one directory before the next and open files stay bounded.

    Example::

        >>> spec = WriteSpec(Storage("/data/events"), ("day",), "snappy", None, "UTC")
        >>> sum(s.num_rows for s in write_files(df, spec))
        1000
    """
    from pyspark.sql import functions as F

    quoted = {c: f"`{c.replace('`', '``')}`" for c in df.columns}
    stored = {f.name: typ for f in df.schema if (typ := stored_type(f.dataType)) != f.dataType}
    if spec.partition_by or stored:
        # Directory names are Spark's own cast to string in the session time zone, as its sink computes them
        # (FileFormatDataWriter's partitionPathExpression), so they match it on any JDK; the task groups the
        # rows by these strings and never writes partition columns into the files. Year-month intervals go to
        # Python as their months (stored_type).
        df = df.select(*(
            F.col(quoted[c]).cast("string").alias(c) if c in spec.partition_by
            else F.col(quoted[c]).cast(stored[c]).alias(c) if c in stored else F.col(quoted[c])
            for c in df.columns
        ))
    if spec.partition_by:
        df = df.sortWithinPartitions(*(quoted[c] for c in spec.partition_by))
    # mapInArrow resolves every column by its name, which fails for a name holding a dot ("a.b" is read as
    # field b of column a): such names become positional ones, the task puts the real ones back. Plain names
    # skip the rename (a projection Spark analyses again: ~5 ms of a batch's fixed cost).
    names = df.columns
    if not _plain_names(names):
        df = df.toDF(*(f"c{i}" for i in range(len(names))))
    try:
        with _row_bounded_arrow_batches(df.sparkSession):
            return without_row_copy(df.mapInArrow(functools.partial(write_task, spec, names), _status_type())).collect()
    except Exception as exc:
        missing = _MISSING_MODULE.search(str(exc))
        if missing is None:
            raise
        raise ExecutorDependencyError(
            f"writing a batch to {spec.storage.display(spec.storage.root)}: the executors' Python cannot import "
            f"{missing.group(1)!r}, which the Arrow writer path runs there. Install parquet-sink[spark] in the "
            "executors' environment (cluster libraries, a shared venv via spark.archives / PYSPARK_PYTHON), ship "
            "it with --py-files or spark.sparkContext.addPyFile, or under Spark Connect with "
            "spark.addArtifacts(<wheel or zip>, pyfile=True). Nothing was committed."
        ) from exc
