"""The rewrite and swap under ``optimize``: bin-pack the committed small data files of each partition into files
near a target size and swap them in with one commit that every reader sees atomically, like delta-rs's
``DeltaTable.optimize.compact()`` / ``z_order()``, Delta's ``OPTIMIZE`` and Iceberg's ``rewrite_data_files``
(Spark's file sink has none). It lives with the writers because it is one: the sink's ``optimize_every`` runs it
(:class:`BackgroundOptimizer`), and :mod:`parquet_sink.maintenance.optimize` is its library surface (the CLI only
prints what :func:`optimize` returns).

How the swap stays atomic for every reader:

* Spark's readers (``MetadataLogFileIndex``, the streaming file source) honour no ``delete`` entry (Spark 3.1+
  reads one as one more file), and take as the live state the newest compact file plus the deltas after it.
  So the swap is a *compact file*: :meth:`~parquet_sink.log.compaction.CompactibleLog.add` at a compaction
  batch ``N`` (``(N + 1) % interval == 0``) with ``removed=`` writes every live entry but the rewritten files,
  and the new files. When the next log batch is not a compaction batch, empty batches (a commit record on an
  entry of its own, which Spark skips) are committed up to it, each an exclusive create like any commit:
  readers between see no change.
* New files are written first, under Spark's file names in the partition directories of the files they
  replace, which no reader lists (every reader lists the log); a lease (:mod:`parquet_sink.write.inflight`)
  keeps ``vacuum`` off them until an optimize commits at batch ``N`` or later (another writer taking batch ``N``
  does not end it: the lease moves to the next compaction batch, still protecting the files written under the
  first one). A crash before the commit leaves orphans for ``vacuum``; the commit is one exclusive create.
* Beside other writers it is one more writer (:mod:`parquet_sink.write.conflicts`): the sink or
  ``write_batch`` losing a commit race to it re-reads and commits at the next log batch (the optimize's batch
  appends files of the same schema and partitioning: no conflict). The optimize losing a race re-reads, keeps
  the bins whose input files are all still live (the exclusive create at ``latest + 1`` then proves they still
  are) and deletes the files of the others (another optimize, or retention, removed an input). Two optimizes
  of the same files cannot both win.
* Idempotent: a retried optimize plans from the log again; files it rewrote are gone from the live state. The
  commit record carries the plan's key (a hash of the input paths) and its figures (files and bytes removed),
  which :func:`parquet_sink.history` reports (operation ``optimize``, zero rows added).
* Time travel: the compact file carries a retention marker for the batches whose files it removed, so a reader
  asking for an older snapshot reads it from its own log files while they exist, and refuses when they are gone.
  ``vacuum`` keeps the removed files while a snapshot committed within its ``older_than`` references them.

Rows are preserved exactly: each bin's files are read with pyarrow (their columns only: partition values stay in
the directory), unified as ``read_committed`` unifies schemas, optionally sorted (``sort_by``) or clustered
(``z_order``), and written as one Parquet file (a bin larger than the target: ordered rows cut into files near it)
with the inputs' timestamp encoding (INT96 when Spark's writer wrote them) and footer metadata, each committed with
its footer's statistics (:mod:`parquet_sink.log.file_stats`, as every writer's: filtered reads and counts go by them);
dates and timestamps an input holds in Spark's hybrid Julian calendar (LEGACY rebase mode, Spark before 3.0) are
rebased as Spark reads them and written without that calendar's markers (:mod:`parquet_sink.rebase`), so every
reader reads the rewritten file as Spark read its inputs.

Example::

    >>> from parquet_sink.maintenance import optimize  # this module's optimize
    >>> optimize("/data/events", target_file_size="128MB", dry_run=True).plan.files_removed
    180
    >>> result = optimize("/data/events")
    >>> result.log_batch_id, result.files_added, result.plan.files_removed
    (19, 3, 180)
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import functools
import inspect
import logging
import os
import math
import re
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs
import pyarrow.parquet as pq
from pyarrow._parquet import ParquetReader  # under pq.ParquetFile, without its per-file Python set-up

from ..delta.sync import DELTA, DeltaSyncResult, sync_after_commit
from ..iceberg import follow as iceberg_follow
from ..iceberg.sync import IcebergSyncResult
from ..errors import (
    CommitConflictError, MissingDataFileError, OptimizeError, ParameterError, ParquetSinkError, SparkSinkBatchError,
    names_output,
)
from ..failpoints import failpoint
from ..log.compaction import check_flags
from ..log.entry import BATCH_KEY, CommitRecord, committed_by_spark_sink, records_of
from ..log.file_stats import encode_stats
from ..log.files import require_output
from ..log.metadata_log import MetadataLog
from ..log.snapshot import LogSnapshot, data_files, read_snapshot, resolve_paths
from ..parquet_read import INT96_UNIT, unify_schemas
from ..partitioning import DEFAULT_PARTITION_NAME, check_time_zone, parse_partition_path, unescape_path_name
from ..read.history import (
    OPTIMIZE_APP_ID,
    newest_commit_time,
    next_commit_time,
    optimize_fingerprint,
    optimize_key,
)
from ..read.reader import CommittedFile, damaged_in_place, unreadable_file
from ..rebase import proleptic_metadata, to_proleptic
from ..statistics import footer_rule, nan_column_statistics
from ..storage.filesystem import Storage
from ..table_formats import kept_formats
from .conflicts import spark_sink_refusal
from .inflight import InFlightBatch
from .parquet_files import FileStatus, codec_extension, log_entry, parquet_codec

logger = logging.getLogger(__name__)

DEFAULT_TARGET_FILE_SIZE = 128 * 1024 * 1024
_SIZE_UNIT = {  # k, m, g, t as Spark's size settings read them ("128m": 128 MiB)
    None: 1, "b": 1, "kb": 10**3, "kib": 2**10, "k": 2**10, "mb": 10**6, "mib": 2**20, "m": 2**20,
    "gb": 10**9, "gib": 2**30, "g": 2**30, "tb": 10**12, "tib": 2**40, "t": 2**40,
}
_SIZE = re.compile(  # a number, then one of the units (the longest that matches)
    r"^\s*(\d+(?:\.\d+)?)\s*(" + "|".join(sorted(filter(None, _SIZE_UNIT), key=len, reverse=True)) + r")?\s*$",
    re.IGNORECASE,
)
_ROW_GROUP_ROWS = 1 << 20
_READ_THREADS = 8  # runs of files read at once, over all bins, from an object store (latency-bound GETs); on local
# disk one per core: reads of small files are CPU-bound, and more threads only queue for the GIL
_RUN_FILES = 256  # ... of at least this many files each
_BIN_THREADS = 4  # bins rewritten at once
_BIN_MEMORY = 1 << 30  # ... while their inputs (about target_file_size each) fit in this
_SWAP_ATTEMPTS = 10  # commit races lost at the compaction batch before giving up
_CUT_ABOVE = 2  # a sort_by cuts a file larger than this many targets: the files a cut or a bin wrote come out a
# little over the target when they compress worse than their inputs, and with 1 the next sort_by would cut them again


def parse_file_size(value: int | str) -> int:
    """A file size in bytes from an int or a string with an optional unit (``"128MB"``, ``"64MiB"``, ``"1gb"``,
    ``"1.5GB"``). ParameterError for anything else, a fraction of a byte or a size below 1.

    Example: ``parse_file_size("128MiB") == 134217728``.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        result = value
    else:
        match = _SIZE.match(value) if isinstance(value, str) else None
        if not match:
            raise ParameterError(
                f"target_file_size={value!r} is not a size: use bytes or a number with B, KB, MB, GB, TB (or KiB, MiB, "
                "GiB, TiB; Spark's k, m, g, t)"
            )
        unit = match.group(2)
        exact = decimal.Decimal(match.group(1)) * _SIZE_UNIT[unit.lower() if unit else None]
        if exact != exact.to_integral_value():
            raise ParameterError(f"target_file_size={value!r}: {exact} is not a whole number of bytes")
        result = int(exact)
    if result < 1:
        raise ParameterError(f"target_file_size must be at least 1 byte, got {value!r}")
    return result


@dataclass(frozen=True)
class InputFile:
    """A committed data file an optimize rewrites: its storage path, its path as the log records it, its path
    relative to the output root, its size, the log batch that committed it and its logged modification time."""

    path: str
    logged: str
    relative: str
    size: int
    batch_id: int | None
    modification_time: int


@dataclass(frozen=True)
class Bin:
    """Files of one partition directory (``directory``, root-relative, ``""`` for the root) rewritten into one."""

    directory: str
    inputs: tuple[InputFile, ...]

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.inputs)

    @property
    def modification_time(self) -> int:
        """The logged time of its new files: its oldest input's, so that ``retention`` (which drops entries older
        than it when compacting) drops them when it would have dropped that input: a rewrite never extends an
        entry's life (its younger inputs' rows expire with the oldest's)."""
        return min(f.modification_time for f in self.inputs)


@dataclass
class OptimizePlan:
    """What an optimize rewrites, from the log's snapshot at ``latest_batch_id``: the bins (files of one partition
    each: two or more small ones, or one that an ordered rewrite cuts or clusters, see :func:`plan_optimize`), and
    how many committed files it looked at."""

    storage: Storage
    latest_batch_id: int | None
    target_file_size: int
    bins: list[Bin]
    files_considered: int
    bytes_considered: int

    @property
    def files_removed(self) -> int:
        return sum(len(b.inputs) for b in self.bins)

    @property
    def bytes_removed(self) -> int:
        return sum(b.bytes for b in self.bins)

    @property
    def key(self) -> str:
        """The plan's idempotency key (:func:`~parquet_sink.read.history.optimize_key` of its input files)."""
        return optimize_key(f.relative for b in self.bins for f in b.inputs)


@dataclass
class OptimizeResult:
    """What :func:`optimize` did: the plan, whether the swap was committed and at which log batch, the files it
    added (their paths, bytes, rows), the empty batches committed to reach a compaction batch, the commit races
    lost, the bins given up because another writer removed one of their inputs first, and the Delta log's and the
    Iceberg table's syncs after the swap (None: none kept, or its sync failed and was logged)."""

    plan: OptimizePlan
    dry_run: bool
    committed: bool = False
    log_batch_id: int | None = None
    files: list[str] = field(default_factory=list)
    bytes_added: int = 0
    rows: int = 0
    padding_batches: list[int] = field(default_factory=list)
    conflicts: int = 0
    abandoned: list[Bin] = field(default_factory=list)
    seconds: float = 0.0
    delta: DeltaSyncResult | None = None
    iceberg: IcebergSyncResult | None = None

    @property
    def files_added(self) -> int:
        return len(self.files)

    @property
    def files_removed(self) -> int:
        """Files the committed swap removed (0 when nothing was committed)."""
        return self.plan.files_removed - sum(len(b.inputs) for b in self.abandoned) if self.committed else 0

    @property
    def bytes_removed(self) -> int:
        return self.plan.bytes_removed - sum(b.bytes for b in self.abandoned) if self.committed else 0


def _directory_values(directory: str) -> dict[str, str]:
    """The partition values of the directory ``directory``, as written there (unescaped)."""
    return {name: unescape_path_name(value) for name, value in parse_partition_path(directory + "/x")} if directory else {}


def _directory_matches(values: Mapping[str, str], partitions: Mapping[str, str | None]) -> bool:
    """Whether a directory's partition ``values`` hold every value of ``partitions`` (None: the null one)."""
    return all(
        name in values and values[name] == (DEFAULT_PARTITION_NAME if value is None else value)
        for name, value in partitions.items()
    )


def plan_optimize(
    log: MetadataLog,
    snap: LogSnapshot,
    target_file_size: int,
    partitions: Mapping[str, str | None] | None = None,
    whole: bool = False,
    cut: bool = False,
) -> OptimizePlan:
    """The bins of an optimize of snapshot ``snap``: in each partition directory (only those whose values equal
    ``partitions``, given as Spark writes them in directory names, unescaped), its committed files smaller than
    ``target_file_size``, oldest batch first, packed greedily into bins of at most that size; bins of one file are
    left out. ``cut`` (a rewrite in an order asked for, ``sort_by``): a file larger than :data:`_CUT_ABOVE` times
    ``target_file_size`` is a bin of its own too, which the rewrite cuts into files near that size, each holding a
    narrow range of the order (min/max statistics then skip files, not only row groups). ``whole`` (a z-order,
    which clusters a partition's rows across its files): every file of a partition, whatever its size, in one bin, a
    lone file too (as delta-rs's ``z_order()`` rewrites every file of each partition). Files the log lists twice or
    that lie outside the root are left as they are. Pure but for reading.

    Example: ``[len(b.inputs) for b in plan_optimize(log, read_snapshot(log), 1 << 20).bins]`` -> ``[60, 60, 60]``.
    """
    storage = log.storage
    table = data_files(snap.table, ["path", "size", BATCH_KEY, "modificationTime"]) if snap.latest is not None else None
    if table is None or not table.num_rows:
        return OptimizePlan(storage, snap.latest, target_file_size, [], 0, 0)
    relative, outside = resolve_paths(storage, table.column("path"), table.column(BATCH_KEY), True)
    logged = table.column("path").to_pylist()
    counts: dict[str, int] = {}
    for path in logged:
        counts[path] = counts.get(path, 0) + 1
    by_directory: dict[str, list[InputFile]] = {}
    directories: dict[str, dict[str, str]] = {}  # each directory's values, parsed once
    limit = math.inf if whole else target_file_size
    for path, rel, out, size, batch, mtime in zip(
        logged, relative.to_pylist(), outside.to_pylist(), table.column("size").to_pylist(),
        table.column(BATCH_KEY).to_pylist(), table.column("modificationTime").to_pylist(),
    ):
        if out is not None:
            continue
        directory = rel.rsplit("/", 1)[0] if "/" in rel else ""
        if directory not in directories:
            directories[directory] = _directory_values(directory)
        if counts[path] > 1 or partitions and not _directory_matches(directories[directory], partitions):
            continue
        if size >= limit and not (cut and size > _CUT_ABOVE * limit):  # compaction leaves a file this large
            continue
        by_directory.setdefault(directory, []).append(InputFile(storage.join(rel), path, rel, size, batch, mtime))
    columns = {name for values in directories.values() for name in values}
    unknown = sorted(set(partitions or ()) - columns)
    if unknown:  # a name mistyped: it would match no directory and rewrite nothing, silently (optimize names itself)
        raise ParameterError(
            f"partitions names {unknown}, but the output's partition columns "
            f"are {sorted(columns) or 'none'}. Nothing was rewritten."
        )

    def rewritten(files: list[InputFile], size: int) -> bool:  # a lone file only when z-ordered or to be cut
        return len(files) > 1 or whole or cut and size > _CUT_ABOVE * target_file_size

    bins: list[Bin] = []
    for directory in sorted(by_directory):
        files = sorted(by_directory[directory], key=lambda f: (-1 if f.batch_id is None else f.batch_id, f.path))
        current: list[InputFile] = []
        size = 0
        for info in files:
            if current and size + info.size > limit:
                if rewritten(current, size):
                    bins.append(Bin(directory, tuple(current)))
                current, size = [], 0
            current.append(info)
            size += info.size
        if current and rewritten(current, size):
            bins.append(Bin(directory, tuple(current)))
    return OptimizePlan(
        storage, snap.latest, target_file_size, bins, table.num_rows, pc.sum(table.column("size")).as_py() or 0
    )


def _open_options() -> dict[str, Any]:
    """What :class:`pyarrow.parquet.ParquetFile` passes its reader by default (``arrow_extensions_enabled`` where
    this pyarrow has it: Parquet's UUID and JSON types read as Arrow's extension types and written back as such),
    with ``pre_buffer`` off (one small file: one read) and INT96 timestamps read as Spark reads them
    (:mod:`parquet_sink.parquet_read`)."""
    defaults = inspect.signature(pq.ParquetFile).parameters
    return {"pre_buffer": False, "coerce_int96_timestamp_unit": INT96_UNIT} | {
        name: defaults[name].default for name in ("arrow_extensions_enabled",) if name in defaults
    }


_OPEN_OPTIONS = _open_options()


def _holds_timestamp(typ: pa.DataType) -> bool:
    """Whether ``typ`` is a timestamp or holds one (in a struct, list or map: Spark stores those INT96 too)."""
    if pa.types.is_timestamp(typ):
        return True
    return any(_holds_timestamp(typ.field(i).type) for i in range(typ.num_fields))


def _has_int96(filesystem: pyarrow.fs.FileSystem, path: str) -> bool:
    """Whether a column of the file at ``path`` is an INT96 timestamp (as Spark's writer stores timestamps)."""
    with filesystem.open_input_file(path) as handle:
        physical = pq.read_metadata(handle).schema
    return any(physical.column(i).physical_type == "INT96" for i in range(len(physical)))


def _read_files(
    storage: Storage, filesystem: pyarrow.fs.FileSystem, inputs: Sequence[InputFile]
) -> tuple[pa.Table, bool]:
    """The rows of ``inputs`` read one after the other, schemas unified permissively, with the last file's footer
    metadata, and whether one of them holds an INT96 timestamp (Spark's writer: asked of the footers only when
    a timestamp column was read, up to the first that has one).

    Small files are CPU-bound and their Python-side work holds the GIL, which decides how far threads overlap: a
    thread per file costs more than it saves, and the reader under :class:`pyarrow.parquet.ParquetFile` is used
    bare (its wrapper's set-up per file is a third of the per-file cost: 10,000 files of 100 rows, two threads,
    0.83 s -> 0.62 s; per-file checks cost as much again)."""
    tables: list[pa.Table] = []
    for info in inputs:
        try:
            with filesystem.open_input_file(info.path) as handle:
                reader = ParquetReader()
                reader.open(handle, **_OPEN_OPTIONS)
                # a pool hop per small file costs more than it saves; values as Spark reads them, so that the file
                # written from them (without the hybrid calendar's markers) reads the same
                tables.append(to_proleptic(reader.read_all(use_threads=False), reader.metadata))
        except Exception as exc:  # translated only when it fails: its cost is per file
            _raise_unreadable(storage, info, exc)
    table = _concatenated(tables)
    int96 = any(map(_holds_timestamp, table.schema.types)) and any(_has_int96(filesystem, info.path) for info in inputs)
    return table.replace_schema_metadata(proleptic_metadata(tables[-1].schema.metadata)), int96


def _concatenated(tables: list[pa.Table]) -> pa.Table:
    """``tables`` one after the other in the schema ``read_committed`` reads their files as (:func:`unify_schemas`:
    an INT96 timestamp, read naive, next to a TIMESTAMP_MICROS one, read zoned, as instants in UTC; milliseconds as
    microseconds), a column a table lacks null there. Before, an INT96 file next to a TIMESTAMP_MICROS one failed
    every optimize of their bin with pyarrow's ArrowTypeError. Types nothing unifies still raise pyarrow's error."""
    if any(not t.schema.equals(tables[0].schema) for t in tables[1:]):  # (a Schema with metadata is unhashable < pyarrow 22)
        unified = unify_schemas([t.schema for t in tables])
        tables = [t.cast(pa.schema([unified.field(name) for name in t.column_names], metadata=t.schema.metadata))
                  for t in tables]
    return pa.concat_tables(tables, promote_options="permissive")


def _raise_unreadable(storage: Storage, info: InputFile, exc: Exception) -> None:
    """Raise the typed error of committed input ``info`` whose read failed with ``exc``: MissingDataFileError when
    it is gone, DamagedDataFileError when it is not of its logged size or, of its size, not Parquet (its bytes
    changed in place), naming the file and its batch (as the readers do); else ``exc`` as a StorageError."""
    committed = CommittedFile(info.path, info.relative, info.size, 0, info.batch_id, ())
    error = unreadable_file(storage, committed, exc)
    if error is None and isinstance(exc, pa.ArrowInvalid):
        error = damaged_in_place(storage, committed, exc, "; nothing was swapped")
    if error is not None:
        raise error from exc
    with storage.translating("reading", info.path):
        raise exc


def _read_bin(storage: Storage, bin_: Bin, threads: int) -> tuple[pa.Table, bool]:
    """The rows of the bin's files in their order (their file columns, schemas unified permissively as
    ``read_committed`` does: a column a file lacks is null there), read in up to ``threads`` runs of at least
    :data:`_RUN_FILES` files on threads, and whether a timestamp column of theirs is INT96."""
    filesystem = storage.arrow_filesystem()
    inputs = bin_.inputs
    size = max(_RUN_FILES, math.ceil(len(inputs) / threads))
    runs = [inputs[i : i + size] for i in range(0, len(inputs), size)]
    with ThreadPoolExecutor(len(runs)) as pool:
        read = list(pool.map(functools.partial(_read_files, storage, filesystem), runs))
    metadata = read[-1][0].schema.metadata  # the newest file's footer (Spark's row metadata): the widest schema
    table = _concatenated([t for t, _ in read])
    return table.replace_schema_metadata(metadata), any(int96 for _, int96 in read)


def z_order_indices(table: pa.Table, columns: Sequence[str], where: str = "the rows") -> pa.Array:
    """The row order of ``table`` along a Z-order (Morton) curve over ``columns``, as delta-rs's ``z_order()``
    clusters: each column's dense rank (nulls last, NaN after numbers), scaled to ``52 // len(columns)`` bits
    (at most 32), the bits interleaved from the most significant, rows sorted by that key (ties in input order).
    Rows close in every column end up close, so files cut from the order have narrow min/max bounds in each.
    ParameterError naming ``where`` for a column whose type has no order (struct, list, map).

    Example: ``table.take(z_order_indices(table, ["x", "y"]))``.
    """
    bits = min(32, 52 // len(columns))
    key = np.zeros(table.num_rows, np.uint64)
    ranks = []
    for column in columns:
        values = table.column(column).combine_chunks()
        try:
            rank = pc.rank(values, "ascending", tiebreaker="dense").to_numpy().astype(np.float64) - 1
        except pa.ArrowNotImplementedError as exc:
            raise ParameterError(
                f"z_order: column {column!r} of {where} is {values.type}, which has no order to cluster by; pick "
                "columns of an ordered type (numbers, strings, binary, dates, timestamps, decimals, booleans)"
            ) from exc
        top = rank.max() if len(rank) else 0
        ranks.append((rank * (((1 << bits) - 1) / top) if top else rank).astype(np.uint64))
    for bit in range(bits - 1, -1, -1):
        for rank in ranks:
            key = (key << np.uint64(1)) | ((rank >> np.uint64(bit)) & np.uint64(1))
    return pa.array(np.argsort(key, kind="stable"))


def _order(table: pa.Table, bin_: Bin, storage: Storage, sort_by: Sequence[str], z_order: Sequence[str]) -> pa.Table:
    """``table`` sorted by ``sort_by`` or along ``z_order``; ParameterError naming the partition when a column is
    not a data column of the bin's files."""
    columns = list(sort_by) or list(z_order)
    if not columns:
        return table
    where = f"the files in {storage.display(storage.join(bin_.directory) if bin_.directory else storage.root)}"
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        option = "sort_by" if sort_by else "z_order"
        raise ParameterError(
            f"{option}={columns}: {missing} are not data columns of {where} (partition columns live in directory "
            "names and cannot be sorted on)"
        )
    if sort_by:
        return table.sort_by([(c, "ascending") for c in sort_by])
    return table.take(z_order_indices(table, z_order, where))


def _write_bin(
    storage: Storage, bin_: Bin, compression: str, sort_by: Sequence[str], z_order: Sequence[str], target: int,
    threads: int,
) -> list[FileStatus]:
    """Write one bin's rows as Parquet files in its partition directory; their statuses, with the statistics of
    their footers (as every writer's). One file, unless the bin holds more than ``target`` bytes (a z-order's
    partition, a large file to cut for ``sort_by``): then its ordered rows are cut into files of about ``target`` bytes
    each (as many as the inputs' bytes fill), so each file covers a narrow range of the order."""
    table, int96 = _read_bin(storage, bin_, threads)
    table = _order(table, bin_, storage, sort_by, z_order)
    pieces = max(1, min(table.num_rows, math.ceil(bin_.bytes / target)))
    bounds = [table.num_rows * i // pieces for i in range(pieces + 1)]
    written = []
    for start, stop in zip(bounds, bounds[1:]):
        name = f"part-{len(written):05d}-{uuid.uuid4()}.c000{codec_extension(compression)}.parquet"
        path = storage.join(bin_.directory, name) if bin_.directory else storage.join(name)
        with storage.translating("writing", path), storage.open(path, "wb", publish=True) as handle:
            footer, stats = _write_rows(table.slice(start, stop - start), handle, parquet_codec(compression), int96)
        written.append((path, footer, stats))
    storage.sync_files([path for path, _, _ in written])
    statuses = []
    for path, footer, stats in written:
        info = storage.info(path)
        statuses.append(FileStatus(path, info.size, info.mtime_ms, footer.num_rows, stats))
    return statuses


def _write_rows(table: pa.Table, handle: Any, codec: str, int96: bool) -> tuple[pq.FileMetaData, str]:
    """``table`` as one Parquet file, each row group's rows made contiguous first: a table of thousands of small
    files' chunks is written five times slower chunk by chunk than combined (0.16 s vs 0.03 s for 2,500 chunks
    of 100 rows), and combining one row group at a time bounds the copy. Returns the file's footer and
    its log statistics (:func:`~parquet_sink.log.file_stats.encode_stats`)."""
    rule = footer_rule(table)
    with pq.ParquetWriter(handle, table.schema, compression=codec, use_deprecated_int96_timestamps=int96,
                          **rule.writer_options(table.schema)) as writer:
        for start in range(0, max(table.num_rows, 1), _ROW_GROUP_ROWS):
            writer.write_table(table.slice(start, _ROW_GROUP_ROWS).combine_chunks(), row_group_size=_ROW_GROUP_ROWS)
    return writer.writer.metadata, encode_stats(writer.writer.metadata, nan_column_statistics(table, rule))


@names_output
def optimize(
    path: str | os.PathLike[str],
    *,
    target_file_size: int | str = DEFAULT_TARGET_FILE_SIZE,
    partitions: Mapping[str, str | None] | None = None,
    sort_by: Sequence[str] | None = None,
    z_order: Sequence[str] | None = None,
    dry_run: bool = False,
    compression: str = "snappy",
    compact_interval: int | None = None,
    storage_options: dict[str, Any] | None = None,
    progress: Callable[[Sequence[Any], str], Iterable[Any]] = lambda items, label: items,
    delta_log: bool | None = None,
    spark_sink_stopped: bool = False,
    retention: str | datetime.timedelta | None = None,
    min_batches_to_retain: int | None = None,
    cleanup_delay: str | datetime.timedelta | None = None,
    iceberg: bool | Mapping[str, Any] | None = None,
    time_zone: str = "UTC",
) -> OptimizeResult:
    """Rewrite the committed small files of the output at ``path`` into files near ``target_file_size`` (bytes,
    or a string such as ``"128MB"``), one partition directory at a time, and swap them in with one commit that
    every reader sees atomically (see the module docstring). Safe beside a running sink, ``write_batch`` calls
    and another optimize.

    Args:
        partitions: only partition directories whose values equal these (``{"day": "2024-01-01"}``, values as
            Spark writes them in directory names, unescaped; ``None`` for the null partition).
        sort_by: data columns to sort each rewritten file by (min/max statistics of its row groups then skip); a
            file more than twice ``target_file_size`` is rewritten too, alone, its sorted rows cut into files near
            that size (min/max statistics then skip files too).
        z_order: data columns to cluster each partition's rows by along a Z-order curve (:func:`z_order_indices`,
            as delta-rs's ``z_order()``): every file of a partition is rewritten (a lone one too), its rows cut
            into files of about ``target_file_size``, so min/max statistics (Parquet footers, the log's, the Delta
            log's) skip files for a filter on any of them. Not with ``sort_by``.
        dry_run: plan only: write and commit nothing (``result.plan`` says what would be rewritten).
        compression: the Parquet codec of the new files (as the sink's).
        compact_interval, retention, min_batches_to_retain, cleanup_delay: the output's log settings, as the sink's:
            None (the default) applies those recorded with the output (which its compaction and log cleanup follow:
            a sink's ``min_batches_to_retain``, its ``retention``); one that contradicts them is OutputSettingsError,
            nothing written.
        progress: wraps the bins' rewrites as they complete (the CLI draws a counter with it).
        delta_log: after the swap, bring the output's Delta log in step (:func:`~parquet_sink.sync_delta_log`:
            the swap becomes an ``OPTIMIZE`` commit whose ``remove`` and ``add`` actions carry
            ``dataChange=false``, so Delta streaming readers skip it); None: when the output has a Delta log.
            Its failure is logged, never raised (the swap is committed; the next sync catches up).
        iceberg: after the swap, bring the output's Iceberg table in step (:func:`~parquet_sink.sync_iceberg`: the
            swap becomes a ``replace`` snapshot, which incremental Iceberg readers skip), as the writers take it:
            True (the table kept without a catalog), ``{"catalog": ..., "table": "ns.name"}`` (that catalog's
            table), False (none); None: the table without catalog when the output keeps one (its metadata
            directory exists; a catalog's table is synced only when named). Its failure is logged, never raised.
        time_zone: the zone timestamp partition directories were written in (the writer's session time zone), for
            the Iceberg sync, as :func:`~parquet_sink.sync_iceberg` takes it.
        spark_sink_stopped: the query of Spark's own file sink that committed the output's newest log batch is
            stopped for good (see below), as the sink's and ``write_batch``'s option of that name.

    Returns an :class:`OptimizeResult`; ``committed`` is False when there was nothing to rewrite, on a dry run,
    or when another writer removed every input first. Raises NotAnOutputError for a path without a log,
    SparkSinkBatchError (a CommitConflictError) when the log's newest batch was committed by Spark's own sink
    (:func:`~parquet_sink.log.entry.committed_by_spark_sink`, whatever the batch holds: an optimize's batches would
    make that query skip its next batches) unless ``spark_sink_stopped``, nothing written, and CommitConflictError
    after many lost races in a row.

    Example::

        >>> optimize("/data/events", target_file_size="64MB", sort_by=["ts"]).files_added
        3
    """
    started = time.monotonic()
    path = os.fspath(path)
    check_flags(dry_run=dry_run, spark_sink_stopped=spark_sink_stopped)
    if delta_log is not None:  # None: as the output has a Delta log
        check_flags(delta_log=delta_log)
    mirror = None if iceberg is None else iceberg_follow.iceberg_target(iceberg, f"optimize({path!r})")
    check_time_zone(time_zone)
    target = parse_file_size(target_file_size)
    codec_extension(compression)  # validate early
    for option, value in (("sort_by", sort_by), ("z_order", z_order)):
        if isinstance(value, str):
            raise ParameterError(f"{option} must be a list of column names, e.g. [{value!r}], got the string {value!r}")
    sort_by, z_order = list(sort_by or ()), list(z_order or ())
    if sort_by and z_order:
        raise ParameterError(f"pass sort_by={sort_by} or z_order={z_order}, not both: a file has one row order")
    if partitions is not None and (
        not isinstance(partitions, Mapping)
        or not all(isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in partitions.items())
    ):
        raise ParameterError(
            f"partitions must map columns to values as written in the directory names (strings; None for the null "
            f"value), e.g. {{'day': '2024-01-01', 'hour': '5'}}, got {partitions!r}"
        )
    log = MetadataLog(
        path, storage_options=storage_options, compact_interval=compact_interval, retention=retention,
        min_batches_to_retain=min_batches_to_retain, cleanup_delay=cleanup_delay,
    )
    storage = log.storage
    snap = read_snapshot(log)
    if snap.latest is None:
        require_output(storage)
    log.check_settings(snap.listing)
    plan = plan_optimize(log, snap, target, partitions, whole=bool(z_order), cut=bool(sort_by))
    result = OptimizeResult(plan, dry_run)
    where = storage.display(storage.root)
    if plan.bins:  # a dry run is refused as the run would be
        _refuse_spark_sink(snap, where, spark_sink_stopped)
    def follow(what: str) -> None:
        """The Delta log and the Iceberg table the output keeps follow the log (never failing the optimize)."""
        settings = [(DELTA, delta_log), (iceberg_follow.ICEBERG, None if iceberg is None else mirror is not None)]
        kept = kept_formats(storage, settings, followed=True)
        if DELTA in kept:
            result.delta = sync_after_commit(path, storage_options, what, None)
        if iceberg_follow.ICEBERG in kept:
            target = mirror or iceberg_follow.IcebergTarget()
            result.iceberg = iceberg_follow.sync_after_commit(path, storage_options, target, what, time_zone)

    if dry_run or not plan.bins:
        if not dry_run:  # nothing to rewrite: the mirrors in step all the same (a run killed after its commit and
            # before its sync, then run again, finds nothing to do and left them behind)
            follow("the optimize (nothing to rewrite)")
        result.seconds = time.monotonic() - started
        return result
    interval = log.interval_for(snap.listing)
    target_batch = _next_compaction(snap.latest, interval)
    # live until an optimize commits at its batch or later: a writer taking that batch first does not end it (the
    # swap moves on to the next compaction batch, with these files)
    began_ms = int(time.time() * 1000)
    lease = InFlightBatch.begin(storage, target_batch, secrets.token_hex(8), OPTIMIZE_APP_ID, target_batch, True)
    try:  # the storage's clock, which the files' ages are read with; a moved lease protects from it
        began_ms = storage.info(lease.lease_path).mtime_ms
    except FileNotFoundError:  # already deleted by a vacuum (another optimize committed at its batch): this clock
        pass
    written: dict[Bin, list[FileStatus]] = {}
    try:
        failpoint("optimize_write")
        readers = (os.cpu_count() or 2) if storage.is_local else _READ_THREADS
        workers = max(1, min(_BIN_THREADS, readers, len(plan.bins), _BIN_MEMORY // target))
        with ThreadPoolExecutor(workers) as pool:  # Arrow reads, sorts and writes without the GIL
            threads = max(1, readers // workers)
            futures = [
                pool.submit(_write_bin, storage, b, compression, sort_by, z_order, target, threads) for b in plan.bins
            ]
            vanished: dict[Bin, MissingDataFileError] = {}
            for bin_, future in zip(plan.bins, progress(futures, "rewriting")):
                try:
                    written[bin_] = future.result()
                except MissingDataFileError as exc:  # an input gone: replaced and vacuumed since the plan, or lost
                    vanished[bin_] = exc
        if vanished and not _give_up_vanished(log, vanished, result, where):
            result.seconds = time.monotonic() - started
            return result
        failpoint("optimize_commit")
        lease = _commit(log, result, written, interval, lease, snap, began_ms, spark_sink_stopped)
    finally:
        lease.end(staged=False)
    if result.committed:
        follow(f"the optimize at log batch {result.log_batch_id}")
    result.seconds = time.monotonic() - started
    return result


def _next_compaction(latest: int | None, interval: int) -> int:
    """The first compaction batch after ``latest``."""
    after = (-1 if latest is None else latest) + 1
    return after + (interval - 1 - after % interval) % interval


def _refuse_spark_sink(snap: LogSnapshot, where: str, stopped: bool, written: str = "Nothing was written.") -> None:
    """SparkSinkBatchError when the newest log batch was committed by Spark's own sink
    (:func:`~parquet_sink.log.entry.committed_by_spark_sink`) and its query is not ``stopped`` for good."""
    if not stopped and committed_by_spark_sink(records_of(snap.table), snap.latest):
        assert snap.latest is not None
        raise spark_sink_refusal(where, snap.latest, "an optimize", written)


def _commit(
    log: MetadataLog,
    result: OptimizeResult,
    written: dict[Bin, list[FileStatus]],
    interval: int,
    lease: InFlightBatch,
    planned: LogSnapshot,
    protects_from_ms: int,
    spark_sink_stopped: bool = False,
) -> InFlightBatch:
    """Commit the swap of ``written`` (bin -> its new files) at the next compaction batch: empty batches up to it,
    then the compact file; re-read after every lost race, giving up the bins whose inputs are gone. ``planned``:
    the snapshot the plan read, used as it is while no batch was committed since. A re-read whose newest batch Spark's
    own sink committed refuses (SparkSinkBatchError, unless ``spark_sink_stopped``), the new files deleted. When
    another writer took the
    compaction batch, the lease moves to the next one before the empty batches, still protecting the files
    written since ``protects_from_ms`` (the first lease's storage time), and the new files are checked to be
    there before the swap names them. Returns the lease it holds last."""
    storage = log.storage
    where = storage.display(storage.root)
    lost = 0
    snap: LogSnapshot | None = planned if log.latest_batch_id() == planned.latest else None
    newest_time = newest_commit_time(planned.table)
    while True:
        reread = snap is None
        if snap is None:  # first, and after every lost race: what changed since
            snap = read_snapshot(log)
            newest_time = newest_commit_time(snap.table)
            # planned before the log had a compact file, ``interval`` was the default: a writer's first compact
            # file since tells the log's (and ``log.add`` goes by it)
            interval = log.interval_for(snap.listing)
            if not spark_sink_stopped and committed_by_spark_sink(records_of(snap.table), snap.latest):
                for file in [f for files in written.values() for f in files]:
                    storage.delete(file.path)  # never committed: no reader can have them
                padded = f" (after its empty batches {result.padding_batches})" if result.padding_batches else ""
                _refuse_spark_sink(snap, where, False, f"Nothing was swapped{padded}.")
            live = set(data_files(snap.table, ["path"]).column("path").to_pylist())
            for bin_ in [b for b in written if not all(f.logged in live for f in b.inputs)]:
                for file in written.pop(bin_):  # never committed: no reader can have them
                    storage.delete(file.path)
                result.abandoned.append(bin_)
                logger.info(
                    "%s: another writer removed an input of a bin in %s first: its rewrite is dropped",
                    where, bin_.directory or "/",
                )
            if not written:
                return lease
        latest = -1 if snap.latest is None else snap.latest
        batch = latest + 1
        target = _next_compaction(latest, interval)
        if lease.log_batch_id != target:  # moved past a compaction batch another writer took: before its empty batches
            moved = InFlightBatch.begin(
                storage, target, secrets.token_hex(8), OPTIMIZE_APP_ID, target, True, protects_from_ms
            )
            lease.end(staged=False)
            lease = moved
        if reread and not _drop_missing(storage, written, result, where):
            return lease
        now = next_commit_time(newest_time)
        if not log.is_compaction_batch(batch, interval):
            entries = CommitRecord.new(batch, OPTIMIZE_APP_ID, batch).log_entries(storage, now, [], 0)
            failpoint("optimize_padding")
            if log.add(batch, entries):  # an empty batch changes no live file: no need to read the log again
                result.padding_batches.append(batch)
                snap, newest_time = LogSnapshot(snap.listing, batch, snap.table), now
            else:
                result.conflicts += 1
                snap = None
            continue
        bins = list(written)
        removed = [f for b in bins for f in b.inputs]
        fingerprint = optimize_fingerprint(
            optimize_key(f.relative for f in removed), len(removed), sum(f.size for f in removed)
        )
        record = CommitRecord.new(batch, OPTIMIZE_APP_ID, batch, fingerprint)
        new = [file for b in bins for file in written[b]]
        # each new file keeps its bin's oldest input's time: retention never lets a rewrite extend a row's life
        data = [log_entry(storage, dataclasses.replace(file, modification_time=b.modification_time))
                for b in bins for file in written[b]]
        entries = record.log_entries(storage, now, data, 0)
        if log.add(batch, entries, removed=frozenset(f.logged for f in removed)):
            failpoint("optimize_after_commit")
            result.committed, result.log_batch_id = True, batch
            result.files = [file.path for file in new]
            result.bytes_added = sum(file.size for file in new)
            result.rows = sum(file.num_rows for file in new)
            logger.info(
                "%s: optimize committed as log batch %d: %d files (%d bytes) replaced by %d (%d bytes), %d empty "
                "batches before it, %d lost races", where, batch, len(removed), sum(f.size for f in removed),
                len(new), result.bytes_added, len(result.padding_batches), result.conflicts,
            )
            return lease
        result.conflicts += 1
        snap = None
        lost += 1
        if lost >= _SWAP_ATTEMPTS:
            raise CommitConflictError(
                f"the optimize of {where} lost the commit race at a compaction batch {lost} times in a row to other "
                "writers. Nothing was swapped (its new files are left for `parquet-sink vacuum`); run it again, "
                "at a quieter time."
            )


def _give_up_vanished(
    log: MetadataLog, vanished: dict[Bin, MissingDataFileError], result: OptimizeResult, where: str
) -> bool:
    """The bins an input of which could not be read (``vanished``: bin -> the error): given up when the log no
    longer commits every input (another optimize replaced it, and a vacuum deleted it, since the plan), else
    MissingDataFileError naming the committed file and its batch (deleted outside the sink). Whether any other
    bin is left to swap."""
    live = set(data_files(read_snapshot(log).table, ["path"]).column("path").to_pylist())
    for bin_, exc in vanished.items():
        if all(f.logged in live for f in bin_.inputs):
            missing = set(log.storage.missing([f.path for f in bin_.inputs]))
            gone = [f for f in bin_.inputs if f.path in missing]
            if not gone:  # there after all: what failed is not a missing input
                raise exc
            raise MissingDataFileError(
                f"optimize {where}: committed file {log.storage.display(gone[0].path)} of batch {gone[0].batch_id} "
                "is missing from storage. It was deleted outside the sink; restore it from backup (`parquet-sink "
                f"verify {where}` lists every missing file). Nothing was swapped."
            ) from exc
        result.abandoned.append(bin_)
        logger.info("%s: another optimize replaced an input of a bin in %s first: its rewrite is dropped", where,
                    bin_.directory or "/")
    return len(result.abandoned) < len(result.plan.bins)


def _drop_missing(
    storage: Storage, written: dict[Bin, list[FileStatus]], result: OptimizeResult, where: str
) -> bool:
    """Give up the bins of ``written`` a new file of which is gone (deleted by a vacuum that did not see a live
    lease: never name a missing file in the log), deleting the rest of their files; whether any bin is left."""
    gone = set(storage.missing([file.path for files in written.values() for file in files]))
    for bin_ in [b for b, files in written.items() if any(file.path in gone for file in files)]:
        for file in written.pop(bin_):
            if file.path not in gone:
                storage.delete(file.path)
        result.abandoned.append(bin_)
        logger.warning(
            "%s: a file the optimize wrote in %s vanished before its commit (a vacuum, or a manual clean-up): "
            "its rewrite is dropped, the old files stay committed", where, bin_.directory or "/",
        )
    return bool(written)


class BackgroundOptimizer:
    """The sink's ``optimize_every=N``: after every ``N``-th batch of the stream, an :func:`optimize` of the output
    on a daemon thread of the driver, off the batch's critical path (the batch is committed already). One runs at
    a time: a trigger while the previous one runs is skipped (the next one compacts what it left). Its commits
    race the next batches' commits as any other writer's do (:mod:`parquet_sink.write.conflicts`: the loser
    re-reads and moves on). It never fails the query: a lost race (:class:`CommitConflictError`) is logged at INFO,
    any other failure at WARNING and kept as :attr:`error` (a typed :class:`ParquetSinkError`; an untyped cause is
    wrapped in :class:`OptimizeError`); :attr:`last` is the newest :class:`OptimizeResult`.

    Example::

        >>> optimizer = BackgroundOptimizer("/data/events", None, every=100, target_file_size="128MB")
        >>> optimizer.after_batch(99)   # starts an optimize; after_batch(0..98) start none
        True
        >>> optimizer.wait(); optimizer.last.files_added
        3
    """

    def __init__(
        self, path: str, storage_options: Mapping[str, Any] | None, *, every: int,
        target_file_size: int | str = DEFAULT_TARGET_FILE_SIZE, compression: str = "snappy",
        delta_log: bool = False, spark_sink_stopped: bool = False, log_options: Mapping[str, Any] | None = None,
        iceberg: bool | Mapping[str, Any] = False,
    ) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ParameterError(f"optimize_every must be an integer >= 1 (batches), got {every!r}")
        self.path, self.every = path, every
        self._options = {
            "target_file_size": parse_file_size(target_file_size), "compression": compression,
            "storage_options": dict(storage_options or {}), "delta_log": delta_log, "iceberg": iceberg,
            "spark_sink_stopped": spark_sink_stopped, **(log_options or {}),
        }
        self.last: OptimizeResult | None = None
        self.error: ParquetSinkError | None = None
        self._thread: threading.Thread | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickled with the sink (Spark Connect ships it to the server): the settings, not the thread."""
        return {**self.__dict__, "_thread": None, "last": None, "error": None}

    def after_batch(self, batch_id: int, compression: str | None = None, time_zone: str = "UTC") -> bool:
        """Start an optimize after the stream's batch ``batch_id`` when it is an ``every``-th one
        (``(batch_id + 1) % every == 0``) and none runs; whether one was started. ``compression``: the codec the
        batch was written with (the session's, for a sink given none), else the one given at construction;
        ``time_zone``: the session's, which timestamp partition directories were written in (the Iceberg sync)."""
        if (batch_id + 1) % self.every or (self._thread is not None and self._thread.is_alive()):
            return False
        self._thread = threading.Thread(
            target=self._run, args=(batch_id, compression, time_zone), name=f"parquet-sink optimize {self.path}",
            daemon=True,
        )
        self._thread.start()
        return True

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the running optimize (if any); whether none runs any more."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return thread is None or not thread.is_alive()

    def _run(self, batch_id: int, compression: str | None = None, time_zone: str = "UTC") -> None:
        what = f"{self.path}: the background optimize after batch {batch_id}"
        try:
            options = {**self._options, "compression": compression or self._options["compression"], "time_zone": time_zone}
            self.last = optimize(self.path, **options)
            self.error = None
            logger.info("%s: %d files replaced by %d (log batch %s)", what, self.last.files_removed,
                        self.last.files_added, self.last.log_batch_id)
        except ParquetSinkError as exc:
            if isinstance(exc, CommitConflictError) and not isinstance(exc, SparkSinkBatchError):
                logger.info("%s lost its commit races; the next one compacts: %s", what, exc)
                return
            self.error = exc
            logger.warning("%s failed (%s: %s); the stream's batches are committed", what, type(exc).__name__, exc)
        except Exception as exc:  # a thread's failure must not vanish: typed, kept and logged
            self.error = OptimizeError(
                f"{what} failed ({type(exc).__name__}: {exc}); the stream's batches are committed and nothing was "
                f"swapped. Run `parquet-sink optimize {self.path}` to see the cause; `parquet-sink vacuum` removes "
                "its leftover files."
            )
            self.error.__cause__ = exc
            logger.warning("%s", self.error)


__all__ = [
    "BackgroundOptimizer",
    "DEFAULT_TARGET_FILE_SIZE",
    "Bin",
    "InputFile",
    "OptimizePlan",
    "OptimizeResult",
    "optimize",
    "parse_file_size",
    "plan_optimize",
]
