"""``read_committed``: read only what the log says is committed (the counterpart of Spark's
``MetadataLogFileIndex``).

The file list comes from the log alone (newest compact file plus the deltas after it), read as one
snapshot pinned at the latest batch: a cleanup or compaction racing the read makes it retry, never mix
two states. The data directory is never listed, so files of failed or in-flight batches are never seen.

Example::

    >>> table = read_committed("/data/events")                    # pyarrow.Table
    >>> df = read_committed("/data/events", spark=spark)          # Spark DataFrame
    >>> new = read_committed("/data/events", batches=(42, 57))    # only what batches 42..57 added
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, Unpack, overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs

from ..errors import (
    call_text,
    names_output,
    nearest_keyword,
    DamagedDataFileError, KeywordError, MissingDataFileError, MissingLogFileError, ParameterError, ParquetSinkError,
    SchemaMismatchError, SnapshotExpiredError,
)
from ..log.snapshot import (
    LogSnapshot,
    batch_ids_known,
    data_files,
    full_paths,
    last_drop,
    read_log_files,
    read_snapshot,
    require_batch,
    resolve_paths,
)
from ..log.compaction import LogSettings, check_compact_interval, check_flags, duration_text
from ..log.files import is_compact_path, require_output
from .history import batch_as_of_time, batch_history
from ..log.metadata_log import MetadataLog
from ..parquet_read import parquet_format, read_schema, unify_schemas
from ..rebase import before_gregorian, may_need_rebase, rows_to_proleptic
from ..partitioning import check_time_zone, convert_partition_value, infer_partition_types, parse_partition_path
from ..log.entry import BATCH_KEY, ENTRY_SCHEMA, EXPIRED_KEY, STATS_KEY
from ..log.file_stats import FileStats, decode_stats
from .pruning import FileVerdicts, file_verdicts, filter_columns, filter_fields, filter_tree
from ..storage.filesystem import Storage

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

logger = logging.getLogger(__name__)

FETCH_MAX_BYTES = 256 * 2**20  # read_committed fetches an object store's files whole up to this much in all
# The log columns a reader needs (the snapshot of a big output holds only these).
_LOG_COLUMNS = ["path", "size", "isDir", "modificationTime", BATCH_KEY, EXPIRED_KEY]


@dataclass(frozen=True)
class CommittedFile:
    """One committed data file, resolved under the output root."""

    path: str  # fsspec path, no protocol
    relative_path: str  # relative to the root, e.g. "day=2024-01-01/part-00000-....parquet"
    size: int
    modification_time: int
    batch_id: int | None  # None only for entries of a compact file written by Spark itself
    partition: tuple[tuple[str, str], ...]  # (column, raw escaped value)


class CommittedFiles(Sequence[CommittedFile]):
    """The committed files of a snapshot: Arrow columns (``table``: relative_path, outside_path (null unless
    the file is outside the root), size, modification_time, batch_id), seen as a sequence of
    :class:`CommittedFile` built only when accessed; :meth:`paths` gives every path at once.

    Example::

        >>> files = committed_files("/data/events")
        >>> len(files), files[0].relative_path, files.paths()[0].as_py()
        (120, 'part-00000-....parquet', '/data/events/part-00000-....parquet')
    """

    def __init__(self, storage: Storage, table: pa.Table) -> None:
        self.storage = storage
        self.table = table
        self._prefix = storage.root.rstrip("/") + "/"

    def paths(self) -> pa.ChunkedArray:
        """The fsspec path of every file (no protocol), as one Arrow column."""
        return full_paths(self.storage, self.table.column("relative_path"), self.table.column("outside_path"))

    def __len__(self) -> int:
        return self.table.num_rows

    @overload
    def __getitem__(self, index: int) -> CommittedFile: ...

    @overload
    def __getitem__(self, index: slice) -> list[CommittedFile]: ...

    def __getitem__(self, index: int | slice) -> CommittedFile | list[CommittedFile]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"committed file {index} out of range ({len(self)} files)")
        return self._file(self.table.slice(index, 1).to_pylist()[0])

    def __iter__(self) -> Iterator[CommittedFile]:
        for batch in self.table.to_batches(max_chunksize=65536):
            yield from map(self._file, batch.to_pylist())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CommittedFiles):
            return self.table.equals(other.table)
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"CommittedFiles({len(self)} files)"

    def _file(self, row: dict[str, Any]) -> CommittedFile:
        relative = row["relative_path"]
        partition = tuple(parse_partition_path(relative)) if "/" in relative else ()
        return CommittedFile(
            row["outside_path"] or self._prefix + relative,
            relative,
            row["size"],
            row["modification_time"],
            row["batch_id"],
            partition,
        )


@dataclass(frozen=True)
class Snapshot:
    """The committed files of an output as of one batch. ``older``: what a read of older batches asked for
    (``"the snapshot as of batch 12"``, ``"batches 0..5"``: a time travel or a batch range, whose files an
    optimize or retention may have removed since), else None."""

    storage: Storage
    latest_batch_id: int | None
    files: CommittedFiles
    older: str | None = None


def _expired_upto(table: pa.Table) -> int:
    """The newest batch whose entries retention may have dropped from this snapshot (-1: none)."""
    value = pc.max(table.column(EXPIRED_KEY)).as_py()
    return -1 if value is None else value


def _select(
    log: MetadataLog,
    snap: LogSnapshot,
    as_of_batch: int | None,
    batches: tuple[int, int] | None,
    interval: int | None,
    columns: list[str],
) -> pa.Table:
    """The entries of the latest snapshot restricted to ``as_of_batch`` and/or the batch range ``batches``.

    An older snapshot is read from its own log files while they exist (retention may have dropped entries
    from newer compact files); else it is the latest one filtered by batch id, unless that cannot answer in
    full (retention dropped entries of those batches, or Spark's compact files carry no batch ids), which
    raises :class:`SnapshotExpiredError` naming the missing log file.
    """
    latest = snap.latest
    assert latest is not None
    if as_of_batch is not None:
        require_batch(log, snap, as_of_batch, f"as_of_batch={as_of_batch}")
    high = latest if as_of_batch is None else as_of_batch
    low = 0
    if batches is not None:
        require_batch(log, snap, batches[1], f"batches={tuple(batches)}")
        low, high = batches[0], min(high, batches[1])
    if low == 0 and high == latest:
        return snap.table
    upto = _entries_at(log, snap, high, low, interval, columns)
    if low == 0:
        return upto
    if batch_ids_known(upto):
        ids = upto.column(BATCH_KEY)
        return upto.filter(pc.greater_equal(ids, low))
    before = _entries_at(log, snap, low - 1, low, interval, columns)
    return upto.filter(pc.invert(pc.is_in(upto.column("path"), before.column("path"))))


def _entries_at(
    log: MetadataLog, snap: LogSnapshot, batch: int, low: int, interval: int | None, columns: list[str]
) -> pa.Table:
    """The snapshot at ``batch`` (<= latest); ``low``: the first batch the caller needs in full."""
    if batch == snap.latest:
        return snap.table
    try:
        return read_log_files(log, batch, snap.listing, interval, columns)
    except (MissingLogFileError, FileNotFoundError) as exc:
        gone = exc
    table = snap.table
    expired = _expired_upto(table)
    if batch_ids_known(table) and expired < low:
        return table.filter(pc.less_equal(table.column(BATCH_KEY), batch))
    raise _expired_snapshot(log, snap, batch, low, gone) from gone


def _expired_snapshot(
    log: MetadataLog, snap: LogSnapshot, batch: int, low: int, gone: Exception
) -> SnapshotExpiredError:
    """Why the snapshot at ``batch`` cannot be answered in full, naming the real causes: the log files it needs were
    cleaned up after compaction (or are missing: ``gone``), and the latest snapshot no longer holds every entry of
    batches from ``low`` (an optimize replaced their files, retention expired them, or Spark's compact files do not
    say which batch added a file); and the oldest batch that can still be read, which the advice names."""
    table = snap.table
    expired = _expired_upto(table)
    compacts = [b for b, path in snap.listing.items() if is_compact_path(path)]
    first = min(compacts + ([0] if 0 in snap.listing else []), default=snap.latest)  # its own log files answer it
    known = batch_ids_known(table)
    where = log.display(log.log_dir)
    settings = log.recorded_settings()
    if batch < min(snap.listing):
        kept = settings or log.settings
        files = (
            f"the log files before batch {min(snap.listing)} are gone (cleaned up after compaction: the log keeps "
            f"those of the newest min_batches_to_retain={kept.min_batches_to_retain} batches, once older than "
            f"cleanup_delay={duration_text(kept.cleanup_delay_ms)!r})"
        )
    else:
        files = str(gone)
    if not known:
        dropped = "the newer compact files written by Spark do not record which batch added each file"
    else:
        dropped = f"the latest snapshot no longer holds every file of batches up to {expired} (" + drop_cause(
            log, low, settings) + ")"
    ranges = f"batches=({expired + 1}, ...) or later batches, " if known and 0 < expired + 1 <= snap.latest else ""
    return SnapshotExpiredError(
        f"the snapshot of {where} as of batch {batch} cannot be answered in full: {files}, and {dropped}. Read "
        f"{ranges}as_of_batch={first} or later (the oldest snapshot the log still answers), or the latest snapshot. "
        "To keep time travel further back, raise min_batches_to_retain or cleanup_delay (the log files are kept "
        "longer)."
    )


def removal_cause(later_optimizes: Sequence[int], settings: LogSettings | None) -> str:
    """Why committed files of a batch are no longer in the latest snapshot, in words: the optimizes committed after
    it (``later_optimizes``, log batches, oldest first), the output's retention (``settings``: the recorded ones; None
    when the output records none, then retention cannot be ruled out). Pure: the errors (:func:`drop_cause`) and
    ``parquet-sink ls``'s notes say it alike.

    Example: ``removal_cause([4], LogSettings())`` -> ``'replaced by optimize (log batch 4)'``;
    ``removal_cause([], LogSettings(retention_ms=604_800_000))`` -> ``"expired by retention='7d'"``.
    """
    shown = ", ".join(map(str, later_optimizes[:3])) + (", ..." if len(later_optimizes) > 3 else "")
    replaced = f"replaced by optimize (log batch{'es' if len(later_optimizes) > 1 else ''} {shown})"
    if settings is not None and settings.retention_ms is None:
        return replaced if later_optimizes else "dropped by an optimize or retention of an earlier release"
    expired = "retention" if settings is None else f"retention={duration_text(settings.retention_ms)!r}"
    return f"{replaced} or expired by {expired}" if later_optimizes else f"expired by {expired}"


def drop_cause(log: MetadataLog, after: int, settings: LogSettings | None) -> str:
    """What removed committed files of batches from ``after`` on from the latest snapshot, for a message
    (:func:`removal_cause` of the optimizes committed since, by log batch, and ``settings``).

    Example: ``drop_cause(log, 0, LogSettings())`` -> ``'replaced by optimize (log batch 4)'``.
    """
    operations = batch_history(read_snapshot(log)).select(["log_batch_id", "operation"]).to_pylist()
    optimizes = [r["log_batch_id"] for r in operations if r["operation"] == "optimize" and r["log_batch_id"] > after]
    return removal_cause(optimizes, settings)


class SnapshotOptions(TypedDict, total=False):
    """Keyword options shared by :func:`snapshot`, :func:`committed_files`, :func:`committed_dataset` and
    :func:`read_committed`."""

    as_of_batch: int | None
    as_of_time: _dt.datetime | str | None
    batches: tuple[int, int] | None
    storage_options: dict[str, Any] | None
    allow_outside_root: bool
    ignore_missing_files: bool
    compact_interval: int | None


def _check_options(
    function: str, path: str | os.PathLike[str], options: dict[str, Any], own: tuple[str, ...] = ()
) -> None:
    """ParameterError naming ``function`` (not :func:`snapshot`, which the options are passed on to) for a
    keyword it does not take: neither one of its ``own`` nor a :class:`SnapshotOptions` key."""
    unknown = [name for name in options if name not in SnapshotOptions.__annotations__]
    if unknown:
        known = [*own, *SnapshotOptions.__annotations__]
        near = nearest_keyword(unknown[0], known)
        raise KeywordError(
            f"{call_text(function, path)}: unknown keyword argument {unknown[0]!r}"
            f"{f' (did you mean {near!r}?)' if near else ''}; it takes {', '.join(known)}"
        )


def _batch_id(name: str, value: object) -> int:
    """``value`` if it is a batch id (an int >= 0), else ParameterError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ParameterError(
            f"{name}={value!r}: a batch id is an integer >= 0 (`parquet-sink ls` lists the committed batches); "
            "for the latest snapshot leave it out"
        )
    return value


def parse_as_of_time(value: object) -> _dt.datetime:
    """``as_of_time`` as an aware datetime: an aware ``datetime``, or an ISO-8601 string with its offset
    (``"2026-11-24T06:00:00Z"``, ``"2026-11-24 07:00+01:00"``), as delta-rs's ``load_as_version`` takes an
    RFC 3339 string. A time without a zone (a naive datetime or string, a date alone) is refused: whose 06:00 is
    it? ParameterError naming the value and an example.

    Example: ``parse_as_of_time("2026-11-24T06:00:00Z") == datetime(2026, 11, 24, 6, tzinfo=timezone.utc)``.
    """
    when = value
    if isinstance(value, str):
        try:
            when = _dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise ParameterError(
                f"as_of_time={value!r} is not an ISO-8601 time: use e.g. '2026-11-24T06:00:00Z' or "
                "'2026-11-24T07:00:00+01:00', or an aware datetime"
            ) from None
    if not isinstance(when, _dt.datetime):
        raise ParameterError(
            f"as_of_time={value!r}: pass an aware datetime or an ISO-8601 string with its offset, e.g. "
            "'2026-11-24T06:00:00Z'"
        )
    if when.tzinfo is None or when.utcoffset() is None:
        raise ParameterError(
            f"as_of_time={value!r} has no time zone: pass an aware datetime (datetime(..., tzinfo=timezone.utc)) "
            "or an ISO-8601 string with its offset ('2026-11-24T06:00:00Z', '...+01:00')"
        )
    return when


@names_output
def snapshot(
    path: str | os.PathLike[str],
    *,
    as_of_batch: int | None = None,
    as_of_time: _dt.datetime | str | None = None,
    batches: tuple[int, int] | None = None,
    storage_options: dict[str, Any] | None = None,
    allow_outside_root: bool = False,
    ignore_missing_files: bool = False,
    compact_interval: int | None = None,
    statistics: bool = False,
) -> Snapshot:
    """The committed files of ``path`` with the storage that reads them (see :func:`committed_files`).

    ``compact_interval``: the writer's compaction interval, for an output whose log cannot tell it
    (normally inferred from the log's files). ``as_of_time``: an aware datetime or an ISO-8601 string with
    its offset (:func:`parse_as_of_time`). ``statistics``: the files' table also holds the ``stats`` their log
    entries carry (:mod:`parquet_sink.log.file_stats`; null for a file without).
    SnapshotNotFoundError for ``as_of_batch``, ``batches`` past the latest committed batch or an
    ``as_of_time`` before the first commit; ParameterError for a negative batch id or a time without a zone.

    Example::

        >>> snap = snapshot("/data/events")
        >>> snap.latest_batch_id, len(snap.files)
        (57, 120)
    """
    check_flags(allow_outside_root=allow_outside_root, ignore_missing_files=ignore_missing_files, statistics=statistics)
    if as_of_time is not None and as_of_batch is not None:
        raise ParameterError("pass as_of_batch or as_of_time, not both")
    if as_of_batch is not None:
        _batch_id("as_of_batch", as_of_batch)
    if as_of_time is not None:
        as_of_time = parse_as_of_time(as_of_time)
    if batches is not None:
        if isinstance(batches, (str, bytes)) or not isinstance(batches, Sequence) or len(batches) != 2:
            raise ParameterError(f"batches={batches!r}: give (first, last), two batch ids, e.g. batches=(3, 5)")
        _batch_id("batches[0]", batches[0])
        _batch_id("batches[1]", batches[1])
        if batches[0] > batches[1]:
            raise ParameterError(f"batches={batches}: the first batch must not be after the last")
    storage = Storage(path, storage_options)
    check_compact_interval(compact_interval)
    log = MetadataLog(path, storage=storage, cleanup=False, compact_interval=compact_interval or 10)
    columns = _LOG_COLUMNS + [STATS_KEY] if statistics else _LOG_COLUMNS
    log_snap = read_snapshot(log, compact_interval, None if as_of_time is not None else columns)
    if log_snap.latest is None:
        require_output(storage)
        if as_of_time is not None:
            batch_as_of_time(log, batch_history(log_snap), as_of_time)  # raises: nothing committed then
        empty = _files_table(ENTRY_SCHEMA.empty_table(), storage, False, statistics)
        return Snapshot(storage, None, CommittedFiles(storage, empty))
    if as_of_time is not None:
        as_of_batch = batch_as_of_time(log, batch_history(log_snap), as_of_time)
        log_snap = LogSnapshot(log_snap.listing, log_snap.latest, log_snap.table.select(columns))
    latest = log_snap.latest
    files = _committed(log, log_snap, as_of_batch, batches, compact_interval, columns, allow_outside_root)
    del log_snap  # the parsed log: only the files' columns are kept
    if ignore_missing_files:
        present = pa.array([storage.exists(p) for p in files.paths().to_pylist()], pa.bool_())
        for gone in CommittedFiles(storage, files.table.filter(pc.invert(present))):
            logger.warning("skipping missing committed file %s (batch %s)", storage.display(gone.path), gone.batch_id)
        files = CommittedFiles(storage, files.table.filter(present))
    older = f"batches {batches[0]}..{batches[1]}" if batches is not None else None
    if as_of_batch is not None and as_of_batch < latest:
        older = f"the snapshot as of batch {as_of_batch}" + (f" ({older})" if older else "")
    return Snapshot(storage, latest, files, older)


def snapshot_after(
    path: str, batch: int, *, storage_options: dict[str, Any] | None = None, upto: int | None = None,
    across_compactions: bool = False,
) -> Snapshot | None:
    """The files the batches after ``batch`` (up to ``upto``, default the newest) committed, read from those
    batches' own delta files only (no compact file: the cost of those batches, not of the output), as a
    :class:`Snapshot` whose ``latest_batch_id`` is the last of them (no file when ``batch`` is it). None when
    one of those batches is a compaction (retention may have dropped entries: read the whole snapshot) or its
    log file is gone; ``latest_batch_id`` below ``batch`` when the log is behind it (an output reset).

    ``across_compactions`` (with ``upto`` None): a compaction among those batches is no reason for None when no
    batch after ``batch`` dropped a file (:func:`~parquet_sink.log.snapshot.last_drop`): the files are then those
    of the latest snapshot from batches after ``batch``, read with the log's columns only (a compact file's
    columnar copy decodes neither the statistics nor the commit records) and filtered before their paths are
    resolved, so a sync in step across a compaction batch resolves its batches' files, not the output's.

    Example: ``[f.relative_path for f in snapshot_after("/data/events", 56).files]`` -> ``['k=a/part-0...parquet']``.
    """
    storage = Storage(path, storage_options)
    log = MetadataLog(path, storage=storage, cleanup=False)
    listing = log.list_names()
    latest = max(listing, default=None)
    latest = latest if upto is None or latest is None else min(latest, upto)
    names = [listing.get(b) for b in range(batch + 1, (latest if latest is not None else batch) + 1)]
    missing = any(name is None for name in names)
    compacted = any(name is not None and is_compact_path(name) for name in names)
    try:
        if not missing and not compacted:
            tables = [log.read_table(name, b, listing.sidecars, _LOG_COLUMNS) for b, name in enumerate(names, batch + 1)]
            entries = pa.concat_tables(tables) if tables else ENTRY_SCHEMA.empty_table().select(_LOG_COLUMNS)
        elif across_compactions and upto is None and compacted:
            entries = read_log_files(log, latest, listing, log.listing_interval(listing), _LOG_COLUMNS)
            dropped = last_drop(entries)
            if dropped is None or dropped > batch:
                return None
            entries = entries.filter(pc.greater(entries.column(BATCH_KEY), batch))
        else:
            return None
    except (FileNotFoundError, MissingLogFileError):
        return None
    entries = data_files(entries, ["path", "size", "modificationTime", BATCH_KEY])
    return Snapshot(storage, latest, CommittedFiles(storage, _files_table(entries, storage, False)))


def _files_table(entries: pa.Table, storage: Storage, allow_outside_root: bool, statistics: bool = False) -> pa.Table:
    """The columns of :class:`CommittedFiles` from data file entries of the log (and their ``stats``)."""
    relative, outside = resolve_paths(storage, entries.column("path"), entries.column(BATCH_KEY), allow_outside_root)
    columns = {
        "relative_path": relative,
        "outside_path": outside,
        "size": entries.column("size"),
        "modification_time": entries.column("modificationTime"),
        "batch_id": entries.column(BATCH_KEY),
    }
    if statistics:
        columns[STATS_KEY] = entries.column(STATS_KEY)
    return pa.table(columns)


def snapshot_of_log(log: MetadataLog, log_snap: LogSnapshot, as_of_batch: int | None = None) -> Snapshot:
    """The committed files of a log snapshot already read (``read_snapshot(log)``, every entry column), as of
    ``as_of_batch`` (read as :func:`snapshot` reads it, SnapshotExpiredError included) and with that batch as
    ``latest_batch_id``: for a caller that needs the snapshot's commit records too without reading the log twice
    (the Delta sync finds an optimize's batch in them).

    Example: ``snapshot_of_log(log, read_snapshot(log), 18).latest_batch_id`` -> ``18``.
    """
    assert log_snap.latest is not None
    files = _committed(log, log_snap, as_of_batch, None, None, _LOG_COLUMNS, False)
    return Snapshot(log.storage, log_snap.latest if as_of_batch is None else as_of_batch, files)


def _committed(
    log: MetadataLog, log_snap: LogSnapshot, as_of_batch: int | None, batches: Sequence[int] | None,
    compact_interval: int | None, columns: list[str], allow_outside_root: bool,
) -> CommittedFiles:
    """The committed files of ``log_snap`` as of ``as_of_batch`` (or of ``batches``), with the entry
    ``columns`` beyond the log's own (the statistics) kept."""
    selected = _select(log, log_snap, as_of_batch, batches, compact_interval, columns)
    entries = data_files(selected, ["path", "size", "modificationTime", BATCH_KEY] + columns[len(_LOG_COLUMNS):])
    del selected  # the parsed log: only the columns above are kept
    statistics = STATS_KEY in columns
    return CommittedFiles(log.storage, _files_table(entries, log.storage, allow_outside_root, statistics))


@names_output
def committed_files(path: str | os.PathLike[str], **options: Unpack[SnapshotOptions]) -> CommittedFiles:
    """The committed data files of the output at ``path``, from the log only (options as :func:`snapshot`).

    A sequence of :class:`CommittedFile`, backed by Arrow columns (``.table``); objects are built only
    for the files accessed. ``as_of_batch=N``: as after batch N. ``batches=(a, b)``: only the files
    batches a..b committed.
    Directories and zero-size entries are skipped like Spark does; entries outside the root are refused
    unless ``allow_outside_root``; a relocated output is followed.

    Example::

        >>> [f.relative_path for f in committed_files("/data/events", batches=(3, 3))]
        ['day=2024-01-01/part-00000-1f0c...c000.snappy.parquet']
    """
    _check_options("committed_files", path, options)
    return snapshot(path, **options).files


@dataclass(frozen=True)
class _Layout:
    """How a snapshot's files are read: the dataset ``schema`` (data columns, then Spark's partition columns)
    and each file's partition ``values`` (column -> the typed value per file, in the files' order), or, when
    not every file has every partition column, each file's own (column, raw value) pairs (``mixed``).
    ``directory``: each file's partition directory, an index into ``directory_values`` (column -> the typed
    value per directory): files share few directories, so a directory's values are converted and its
    partition expression built once."""

    schema: pa.Schema
    mixed: list[tuple[tuple[str, str], ...]] | None = None
    directory: np.ndarray | None = None
    directory_values: dict[str, pa.Array] | None = None

    @property
    def values(self) -> dict[str, pa.Array]:
        """Each file's partition values (column -> the typed value per file, in the files' order); none when
        ``mixed``."""
        if not self.directory_values:
            return {}
        take = pa.array(self.directory)
        return {column: v.take(take) for column, v in self.directory_values.items()}


def _directories(relatives: pa.ChunkedArray) -> tuple[np.ndarray, list[tuple[tuple[str, str], ...]]]:
    """Each file's partition directory as an index into the distinct directories' ``(column, raw value)``
    pairs, parsed once per directory (10,000 files in 4 directories: 4 parses, not 10,000)."""
    has_directory = pc.match_substring(relatives, "/")
    if len(relatives) and not pc.any(has_directory).as_py():  # none in a directory (100,000 files: 16 -> 3 ms)
        return np.zeros(len(relatives), np.int32), [()]
    directories = pc.if_else(has_directory, pc.replace_substring_regex(relatives, r"/[^/]*$", ""), "")
    encoded = pc.dictionary_encode(directories.combine_chunks())
    parsed = [tuple(parse_partition_path(d + "/")) if d else () for d in encoded.dictionary.to_pylist()]
    return encoded.indices.to_numpy(zero_copy_only=False), parsed


def _layout(
    snap: Snapshot, time_zone: str, filesystem: pyarrow.fs.FileSystem,
    partition_types: Mapping[str, pa.DataType] | None = None,
) -> _Layout:
    """The :class:`_Layout` of ``snap`` (with files): the partition columns from the files' paths (typed as
    inferred, or as ``partition_types`` says), the data columns from the footers of the first and the last file."""
    directory, partitions = _directories(snap.files.table.column("relative_path"))
    raw_values: dict[str, list[str]] = {}
    for partition in partitions:
        for column, raw in partition:
            raw_values.setdefault(column, []).append(raw)
    types = infer_partition_types(raw_values, time_zone) | dict(partition_types or {})
    paths = snap.files.paths()
    ends = list(dict.fromkeys([paths[0].as_py(), paths[-1].as_py()]))
    try:
        with ThreadPoolExecutor(len(ends)) as pool:  # on an object store, two round trips at once
            schemas = list(pool.map(lambda p: read_schema(p, filesystem), ends))
    except (OSError, pa.ArrowInvalid) as exc:  # ArrowInvalid: not Parquet (truncated, empty)
        raise _unreadable(snap, exc) from exc
    try:
        data_schema = unify_schemas(schemas)
    except (pa.ArrowTypeError, pa.ArrowInvalid) as exc:  # another writer than ours (Spark's sink) changed a type
        raise SchemaMismatchError(
            f"the committed files {', '.join(snap.storage.display(p) for p in ends)} of "
            f"{snap.storage.display(snap.storage.root)} hold a column in types pyarrow cannot read as one ({exc}): "
            "a writer other than the sink changed its type. Read the batches of each type apart (as_of_batch=, "
            "batches=)."
        ) from exc
    data_schema = pa.schema([f for f in data_schema if f.name not in types])
    schema = pa.schema(list(data_schema) + [pa.field(c, t) for c, t in types.items()])
    if not all(tuple(c for c, _ in p) == tuple(types) for p in partitions):  # files under other directories
        return _Layout(schema, [partitions[i] for i in directory])
    directory_values = {
        column: pa.array([convert_partition_value(p[index][1], typ) for p in partitions], typ)
        for index, (column, typ) in enumerate(types.items())
    }
    return _Layout(schema, None, directory, directory_values)


def _partition_expression(row: list[tuple[str, pa.Scalar]]) -> ds.Expression:
    """The expression a file's partition values make true: each column equal to its value, or null."""
    expr = ds.scalar(True)
    for column, value in row:
        field = ds.field(column)
        expr = expr & (field == value if value.is_valid else field.is_null())
    return expr


def _dataset(snap: Snapshot, layout: _Layout, filesystem: pyarrow.fs.FileSystem) -> ds.Dataset:
    """The dataset of the files of ``snap`` laid out as ``layout`` says."""
    if layout.mixed is not None:  # not every file has every partition column
        types = {f.name: f.type for f in layout.schema}
        rows = [[(c, pa.scalar(convert_partition_value(raw, types[c]), types[c])) for c, raw in p] for p in layout.mixed]
        expressions = [_partition_expression(row) for row in rows]
    elif layout.directory_values:  # Arrow scalars, not Python values: a timestamp in year 0 has no datetime
        assert layout.directory is not None
        names = list(layout.directory_values)
        used = np.unique(layout.directory)  # of the files kept: one expression per directory they are in
        rows = zip(*(v.take(pa.array(used)) for v in layout.directory_values.values()))
        per_directory = dict(zip(used.tolist(), (_partition_expression(list(zip(names, r))) for r in rows)))
        expressions = [per_directory[i] for i in layout.directory.tolist()]
    else:
        expressions = []
    return ds.FileSystemDataset.from_paths(
        snap.files.paths().to_pylist(),
        schema=layout.schema,
        format=parquet_format(),
        filesystem=filesystem,
        partitions=expressions or None,
    )


def dataset_of(
    snap: Snapshot, time_zone: str = "UTC", filesystem: pyarrow.fs.FileSystem | None = None,
    partition_types: Mapping[str, pa.DataType] | None = None,
) -> ds.Dataset:
    """A ``pyarrow.dataset.Dataset`` over the committed files of ``snap`` with Spark's partition columns (see
    :func:`committed_dataset`), for a caller that holds a snapshot; ``filesystem``: where to read them (default:
    the snapshot's storage); ``partition_types``: types that replace the inferred ones of these partition
    columns (a Delta table's, which every directory value must read as).

    Example: ``dataset_of(snapshot("/data/events")).count_rows()`` -> ``1000``.
    """
    if not snap.files.table.num_rows:
        return ds.dataset([], schema=pa.schema([]))
    filesystem = filesystem or snap.storage.arrow_filesystem()
    return _dataset(snap, _layout(snap, time_zone, filesystem, partition_types), filesystem)


def _kept(snap: Snapshot, layout: _Layout, keep: np.ndarray) -> tuple[Snapshot, _Layout]:
    """``snap`` and ``layout`` with only the files ``keep`` marks."""
    mask = pa.array(keep, pa.bool_())
    files = CommittedFiles(snap.storage, snap.files.table.filter(mask))
    mixed = None if layout.mixed is None else [p for p, kept in zip(layout.mixed, keep) if kept]
    directory = None if layout.directory is None else layout.directory[keep]
    kept = _Layout(layout.schema, mixed, directory, layout.directory_values)
    return Snapshot(snap.storage, snap.latest_batch_id, files, snap.older), kept


def _in_directories(snap: Snapshot, layout: _Layout, filter: ds.Expression) -> tuple[Snapshot, _Layout]:
    """``snap`` and ``layout`` without the files of the partition directories where ``filter`` cannot match, decided
    once per distinct directory from its partition values (the data columns unknown there), not once per file:
    10,000 one-file partitions and ``p == k`` keep one file before any statistics are decoded or any dataset is
    built."""
    fields = filter_fields(filter)
    values = layout.directory_values
    if not values or (fields is not None and not fields & set(values)):
        return snap, layout
    directories = len(next(iter(values.values())))
    may_match = file_verdicts(filter, FileStats(pa.nulls(directories, pa.int64()), {}), values).may_match
    keep = may_match[layout.directory]
    return (snap, layout) if keep.all() else _kept(snap, layout, keep)


def _decoded(snap: Snapshot, layout: _Layout | None, filter: ds.Expression | None) -> FileStats:
    """The log's statistics of the files of ``snap``: row counts, and bounds of the columns ``filter`` reads
    (of every column when it reads a nested field): decoding costs per column and file."""
    if layout is None or filter is None:
        return decode_stats(snap.files.table.column(STATS_KEY), pa.schema([]))
    fields = filter_fields(filter)
    schema = layout.schema if fields is None else pa.schema([f for f in layout.schema if f.name in fields])
    return decode_stats(snap.files.table.column(STATS_KEY), schema)


def _verdicts(stats: FileStats, layout: _Layout, filter: ds.Expression) -> FileVerdicts:
    """Which files (their decoded ``stats``, laid out as ``layout``) ``filter`` may match, and matches whole."""
    return file_verdicts(filter, stats, layout.values)


def _unreadable(snap: Snapshot, exc: Exception) -> Exception:
    """Turn a read failure into a typed error naming the committed file at fault and its batch
    (:func:`unreadable_file`). The files the failure names are checked first; where every file is present with its
    logged size and pyarrow found one not Parquet, the first whose footer does not read is named (its bytes were
    changed in place); else ``exc`` itself (a store failing, Spark's own error)."""
    named = sorted(snap.files, key=lambda f: f.path not in str(exc))
    for f in named:
        error = unreadable_file(snap.storage, f, exc)
        if error is not None:
            return (_vacuumed_since(snap, f) or error) if isinstance(error, MissingDataFileError) else error
    if not isinstance(exc, pa.ArrowInvalid):  # a store failing, Spark's own errors: as they are
        return exc
    filesystem = snap.storage.arrow_filesystem()
    for f in named:
        try:
            read_schema(f.path, filesystem)
        except (OSError, pa.ArrowInvalid) as damaged:
            return damaged_in_place(snap.storage, f, damaged)
    return exc


def damaged_in_place(storage: Storage, f: CommittedFile, cause: Exception, then: str = "") -> DamagedDataFileError:
    """The error of committed file ``f``, of its logged size, that is not Parquet (``cause``: the read's error):
    its bytes were changed in place. ``then``: what the caller did not do, said after the remedy."""
    return DamagedDataFileError(
        f"committed file {storage.display(f.path)} of batch {f.batch_id} cannot be read although it has its logged "
        f"size ({type(cause).__name__}: {cause}): its bytes were changed outside the sink. Restore it from "
        f"backup{then}."
    )


def _vacuumed_since(snap: Snapshot, f: CommittedFile) -> SnapshotExpiredError | None:
    """For a read of older batches (``snap.older``: ``as_of_batch``, ``as_of_time``, ``batches``) whose committed
    file ``f`` is missing: SnapshotExpiredError when the latest snapshot no longer commits ``f`` (an optimize
    replaced it, or retention dropped it, and ``vacuum`` deleted it: those batches cannot be read any more, as a
    Delta version after VACUUM); None otherwise (deleted outside the sink: MissingDataFileError says so)."""
    if snap.older is None:
        return None
    storage = snap.storage
    try:
        latest = snapshot(storage.url, storage_options=storage.storage_options)
    except ParquetSinkError:  # the missing file is the error to report
        return None
    if f.path in set(latest.files.paths().to_pylist()):
        return None
    log = MetadataLog(storage.url, storage=storage, cleanup=False)
    cause = drop_cause(log, f.batch_id or 0, log.recorded_settings())
    return SnapshotExpiredError(
        f"{snap.older} of {storage.display(storage.root)} cannot be read any more: its file "
        f"{storage.display(f.path)} (committed by batch {f.batch_id}) is gone from storage, and the output no longer "
        f"commits it ({cause}; `vacuum` then deleted it). Read the latest snapshot (batch {latest.latest_batch_id}: "
        "every row still committed is there) or later batches; to keep time travel this far back, run vacuum with a "
        "longer --older-than."
    )


def unreadable_file(
    storage: Storage, f: CommittedFile, exc: Exception
) -> MissingDataFileError | DamagedDataFileError | None:
    """The typed error of committed file ``f`` whose read failed with ``exc``, naming it and its batch: missing
    from storage, or not of the size the log recorded (truncated, empty, replaced); None when it is there with
    its logged size (the failure is something else).

    Example: ``unreadable_file(storage, f, exc)`` -> ``MissingDataFileError('committed file ... of batch 3 is missing ...')``.
    """
    where = f"committed file {storage.display(f.path)} of batch {f.batch_id}"
    try:
        size = storage.info(f.path).size
    except FileNotFoundError:
        return MissingDataFileError(
            f"{where} is missing from storage. It was deleted outside the sink; restore it from backup, or "
            "pass ignore_missing_files=True to read the rest (that data is then missing from the result)."
        )
    if size != f.size:
        return DamagedDataFileError(
            f"{where} cannot be read: the log says it has {f.size} bytes, storage holds {size} "
            f"({type(exc).__name__}: {exc}). It was truncated or replaced outside the sink; run "
            f"`parquet-sink verify {storage.display(storage.root)}` to list every damaged file, "
            "then restore them from backup."
        )
    return None


@names_output
def committed_dataset(
    path: str | os.PathLike[str], *, time_zone: str = "UTC", **options: Unpack[SnapshotOptions]
) -> ds.Dataset:
    """A lazy ``pyarrow.dataset.Dataset`` over exactly the committed files, with Spark's partition columns
    (options as :func:`snapshot`). Timestamp partition values are read in ``time_zone``, as Spark reads
    them in its session time zone: pass the writer's ``spark.sql.session.timeZone``. Values as the files store
    them: dates before 1582 a file of Spark's LEGACY rebase mode holds are not rebased (:func:`read_committed`
    rebases them, :func:`as_spark_reads`).

    Example::

        >>> dset = committed_dataset("/data/events")
        >>> dset.to_table(filter=ds.field("day") == "2024-01-01").num_rows
        1000
    """
    _check_options("committed_dataset", path, options, ("time_zone",))
    check_time_zone(time_zone)
    return dataset_of(snapshot(path, **options), time_zone)


@overload
def read_committed(
    path: str | os.PathLike[str],
    *,
    spark: None = None,
    columns: Sequence[str] | None = None,
    filter: Any = None,
    time_zone: str = "UTC",
    **options: Unpack[SnapshotOptions],
) -> pa.Table: ...


@overload
def read_committed(
    path: str | os.PathLike[str],
    *,
    spark: SparkSession,
    columns: Sequence[str] | None = None,
    filter: Any = None,
    time_zone: str = "UTC",
    **options: Unpack[SnapshotOptions],
) -> DataFrame: ...


@names_output
def read_committed(
    path: str | os.PathLike[str],
    *,
    spark: SparkSession | None = None,
    columns: Sequence[str] | None = None,
    filter: Any = None,
    time_zone: str = "UTC",
    **options: Unpack[SnapshotOptions],
) -> pa.Table | DataFrame:
    """Read exactly the committed rows of a streaming file sink output (typed: a ``pyarrow.Table`` without
    ``spark``, a Spark ``DataFrame`` with it).

    Without ``spark``: a ``pyarrow.Table`` (``filter`` is a ``pyarrow.dataset`` expression; use
    ``.to_pandas()`` / ``polars.from_arrow`` / duckdb on it, zero-copy). With ``spark=session``: a Spark
    DataFrame over exactly the committed files (``filter`` is a Column or SQL string), partition columns
    included, as ``spark.read.parquet(path)`` returns them (timestamp partition values in ``time_zone``,
    where Spark uses its session time zone). ``options`` are those of :func:`snapshot`
    (``as_of_batch``, ``batches``, ``storage_options``, ``allow_outside_root``, ``ignore_missing_files``,
    ``compact_interval``).

    Example::

        >>> read_committed("/data/events", columns=["id"], filter=ds.field("day") == "2024-01-01")
        pyarrow.Table ...
        >>> read_committed("/data/events", spark=spark).count()
        1000
    """
    _check_options("read_committed", path, options, ("spark", "columns", "filter", "time_zone"))
    if isinstance(columns, (str, bytes)):
        raise ParameterError(
            f"columns must be a list of column names, got the string {columns!r}: write columns=[{columns!r}]"
        )
    if spark is None:
        _check_filter(filter)
        check_time_zone(time_zone)
    snap = snapshot(path, **options, statistics=spark is None and filter is not None)
    if spark is not None:
        return _spark_dataframe(spark, snap, columns, filter)
    if not len(snap.files):  # nothing committed yet: no file tells the schema
        return pa.table({c: pa.array([], pa.null()) for c in columns or ()})
    layout = _layout(snap, time_zone, snap.storage.arrow_filesystem())
    if filter is not None:
        _check_filter_columns(filter, snap, layout)
        snap, layout = _in_directories(snap, layout, filter)
        snap, layout = _kept(snap, layout, _verdicts(_decoded(snap, layout, filter), layout, filter).may_match)
    try:
        dataset = _dataset(snap, layout, _fetched(snap) or snap.storage.arrow_filesystem())
        unknown = [c for c in columns or () if c not in dataset.schema.names]
        if unknown:
            raise ParameterError(
                f"columns {unknown} are not in the committed data of {snap.storage.display(snap.storage.root)}, "
                f"whose columns are {dataset.schema.names}"
            )
        wanted = list(columns) if columns is not None else None
        if filter is None:
            return as_spark_reads(dataset, dataset.to_table(columns=wanted))
        # filtered here, not by the scan: a scan skips row groups by their bounds as if no float were NaN
        # (``~(x < 3)`` loses the NaN rows of a row group whose x is in [0, 2])
        table = as_spark_reads(dataset, dataset.to_table(columns=_read_columns(filter, layout, wanted)))
    except (OSError, pa.ArrowInvalid) as exc:  # ArrowInvalid: not Parquet (truncated, empty)
        raise _unreadable(snap, exc) from exc
    table = _filtered(table, filter, snap)
    return table if wanted is None else table.select(wanted)


def as_spark_reads(dataset: ds.Dataset, table: pa.Table) -> pa.Table:
    """``table`` (a scan of ``dataset``) with the dates and timestamps that files in Spark's hybrid Julian calendar
    hold as Spark reads them (:mod:`parquet_sink.rebase`). Costs one pass over each date and timestamp column; only
    where one holds a day before 1582-10-15, a second scan telling each row's file, and the footers of the files
    those old values come from."""
    names = may_need_rebase(table)
    if not names:
        return table
    scanned = dataset.to_table(columns=[*table.column_names, "__fragment_index"])
    fragment = scanned.column("__fragment_index").to_numpy()
    old = np.logical_or.reduce([before_gregorian(scanned.column(name)) for name in names])
    fragments = list(dataset.get_fragments())
    footers = {int(i): fragments[i].metadata for i in np.unique(fragment[old])}
    return rows_to_proleptic(scanned.drop_columns(["__fragment_index"]), fragment, footers, names)


def _filtered(table: pa.Table, filter: ds.Expression, snap: Snapshot) -> pa.Table:
    """``table``'s rows that ``filter`` keeps; ParameterError where pyarrow cannot evaluate it on the data's types
    (a string column compared with a number, a value a cast cannot hold)."""
    try:
        return table.filter(filter)
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowInvalid) as exc:
        raise ParameterError(
            f"pyarrow cannot evaluate filter {filter} on the "
            f"committed data (columns {dict(zip(table.column_names, map(str, table.schema.types)))}): {exc}. Compare "
            "each column with a value of its type."
        ) from exc


def _read_columns(filter: ds.Expression, layout: _Layout, wanted: list[str] | None) -> list[str] | None:
    """The columns to read for ``wanted`` (None: all) and ``filter``: every column when the filter reads a
    nested field; a column the output lacks is left to the filter to report."""
    fields = filter_fields(filter)
    if wanted is None or fields is None:
        return None
    distinct = list(dict.fromkeys(wanted))  # a column asked for twice is read once, selected twice
    return distinct + sorted((fields & set(layout.schema.names)) - set(wanted))


@names_output
def count_committed(
    path: str | os.PathLike[str], *, filter: ds.Expression | None = None, time_zone: str = "UTC", **options: Unpack[SnapshotOptions]
) -> int:
    """The number of committed rows (that match ``filter``, a ``pyarrow.dataset`` expression), from the row
    counts and statistics the log records for each file (:mod:`parquet_sink.log.file_stats`): without a
    filter no file is opened; with one, only the files the statistics cannot decide (some rows may match,
    not provably all) are read. A file without statistics in the log (written by Spark's own sink, or by an
    older release) has its footer read. Options as :func:`snapshot`.

    Example::

        >>> count_committed("/data/events"), count_committed("/data/events", filter=ds.field("n") > 5)
        (1000, 412)
    """
    _check_options("count_committed", path, options, ("filter", "time_zone"))
    _check_filter(filter)
    check_time_zone(time_zone)
    snap = snapshot(path, **options, statistics=True)
    if not len(snap.files):
        return 0
    layout = None if filter is None else _layout(snap, time_zone, snap.storage.arrow_filesystem())
    if filter is not None and layout is not None:
        _check_filter_columns(filter, snap, layout)
        snap, layout = _in_directories(snap, layout, filter)
    stats = _decoded(snap, layout, filter)
    may = whole = np.ones(len(stats.rows), bool)
    if layout is not None:
        verdicts = _verdicts(stats, layout, filter)
        may, whole = verdicts.may_match, verdicts.all_match
    counted = whole & stats.rows.is_valid().to_numpy(zero_copy_only=False)
    total = int(pc.sum(stats.rows.filter(pa.array(counted))).as_py() or 0)
    rest = may & ~counted
    if not rest.any():
        return total
    snap, layout = _kept(snap, layout or _layout(snap, time_zone, snap.storage.arrow_filesystem()), rest)
    try:
        dataset = _dataset(snap, layout, snap.storage.arrow_filesystem())
        if filter is None:
            return total + dataset.count_rows()
        table = as_spark_reads(dataset, dataset.to_table(columns=_read_columns(filter, layout, [])))
    except (OSError, pa.ArrowInvalid) as exc:  # ArrowInvalid: not Parquet (truncated, empty)
        raise _unreadable(snap, exc) from exc
    return total + _filtered(table, filter, snap).num_rows


def _check_filter(filter: Any) -> None:
    """ParameterError unless ``filter`` is None or a ``pyarrow.dataset`` expression naming its columns (the public
    call names itself and the output: errors.names_output)."""
    if filter is None:
        return
    if not isinstance(filter, ds.Expression):
        raise ParameterError(
            f"filter={filter!r} is a {type(filter).__name__}, not a pyarrow.dataset expression; "
            "write it as one, e.g. pyarrow.dataset.field('day') == '2024-01-01' (with spark=, pass a Column or SQL text)."
        )
    try:
        filter_tree(filter)
    except pa.ArrowNotImplementedError as exc:  # "Serialization of non-name field_refs"
        raise ParameterError(
            f"filter {filter} refers to a column by its position ({exc}); name it, e.g. "
            "pyarrow.dataset.field('n') or field('s', 'a') for a struct's field (positions change with the columns read)."
        ) from exc


def _check_filter_columns(filter: ds.Expression, snap: Snapshot, layout: _Layout) -> None:
    """ParameterError when ``filter`` reads a column the snapshot's data does not have (a name mistyped, or a time
    travel to before the column was added)."""
    missing = sorted(filter_columns(filter) - set(layout.schema.names))
    if missing:
        raise ParameterError(
            f"filter {filter} reads {missing}, which the committed "
            f"data read does not have (a name mistyped, or a column added after the batch read); its columns are "
            f"{layout.schema.names}."
        )


def _fetched(snap: Snapshot) -> pyarrow.fs.FileSystem | None:
    """On an object store, the committed files fetched whole and concurrently when they are many and small
    (:data:`FETCH_MAX_BYTES` in all): a file read through pyarrow's fsspec bridge costs a HEAD and two ranged
    GETs, one file after another (2,000 small files on moto: 21 s, fetched: 10 s). None: read in place."""
    if snap.storage.is_local or len(snap.files) < 2:
        return None
    if pc.sum(snap.files.table.column("size")).as_py() > FETCH_MAX_BYTES:
        return None
    return snap.storage.fetched(snap.files.paths().to_pylist())


def _spark_dataframe(spark: SparkSession, snap: Snapshot, columns: Sequence[str] | None, filter: Any) -> DataFrame:
    storage = snap.storage
    if not len(snap.files):
        df = spark.createDataFrame([], "struct<>")
    else:
        paths = [storage.to_hadoop_path(p) for p in snap.files.paths().to_pylist()]
        try:
            reader = spark.read.option("basePath", storage.to_hadoop_path(storage.root))
            # The paths are file names, never glob patterns ('[', '{' in a directory name); mergeSchema: new
            # nullable columns (allowed schema evolution) show, as in the Arrow reader.
            reader = reader.option("__globPaths__", "false").option("mergeSchema", "true")
            df = reader.parquet(*paths)
        except Exception as exc:
            if "PATH_NOT_FOUND" in str(exc) or "does not exist" in str(exc):
                raise _unreadable(snap, exc) from exc
            raise
    if filter is not None:
        df = df.filter(filter)
    if columns is not None:
        df = df.select(*columns)
    return df
