"""The ``_spark_metadata`` log, byte-compatible with Spark's ``FileStreamSinkLog``: the public face.

The log is split as Spark's own code is:

* :mod:`parquet_sink.log.files` - the versioned log files: naming, listing, reading one file, atomic
  create (``HDFSMetadataLog``);
* :mod:`parquet_sink.log.compaction` - compaction, the compact interval, retention and cleanup
  (``CompactibleFileStreamLog``);
* :mod:`parquet_sink.log.entry` - the entry format and the sink's commit records (``FileStreamSinkLog``);
* :mod:`parquet_sink.log.snapshot` - the columnar snapshot reader the reader, the sink and the CLI use.

:class:`MetadataLog` ties them together and adds the entry-object API (:meth:`MetadataLog.all_files`,
:meth:`MetadataLog.get`, :meth:`MetadataLog.check`) for callers that want :class:`LogEntry` objects.

Example::

    >>> log = MetadataLog("/tmp/out")
    >>> log.add(0, [LogEntry("file:///tmp/out/part-0.parquet", size=392, modification_time=1)])
    True
    >>> [e.path for e in log.all_files()]
    ['file:///tmp/out/part-0.parquet']
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
from collections.abc import Collection, Iterator
from typing import Any

import pyarrow as pa

from ..errors import CorruptLogError, LogError, call_text, parameters_of
from .compaction import DEFAULT_COMPACT_INTERVAL, CompactibleLog, LogOptions, LogSettings, check_flags, derive_compact_interval, parse_duration_ms
from .files import COMPACT_SUFFIX, METADATA_DIR, VERSION, is_compact_path
from .entry import DEFAULT_BLOCK_SIZE, CommitRecord, LogEntry
from ..storage.filesystem import Storage

logger = logging.getLogger(__name__)

# On an object store, where a directory exists only while an object lies under it, the log directory is made to
# exist by this empty object: a name Spark's log ignores (not a batch id), hidden from directory readers.
STARTED_MARKER = ".started"

__all__ = [
    "COMPACT_SUFFIX",
    "DEFAULT_BLOCK_SIZE",
    "METADATA_DIR",
    "VERSION",
    "CommitRecord",
    "LogEntry",
    "MetadataLog",
    "derive_compact_interval",
    "parse_duration_ms",
]


class MetadataLog(CompactibleLog):
    """A Spark-compatible file sink log under ``<path>/_spark_metadata``.

    Args:
        path: the output directory (any fsspec URL).
        storage_options: passed to fsspec (credentials etc.).
        compact_interval: compaction interval (>= 1) of a new log (default 10); an existing log's is the one its
            first writer recorded, or is inferred from its compact files exactly as Spark does.
        retention: Spark's ``retention`` option (``"7d"``): entries whose modification time is older are
            left out when a compact file is written.
        min_batches_to_retain / cleanup_delay: Spark's rule for deleting expired log files after a commit
            (``spark.sql.streaming.minBatchesToRetain`` >= 1, ``fileCleanupDelayMs``). ``cleanup=False``
            keeps all.
        default_interval, defaults: what a new output gets where the four are not given (Spark's defaults: 10,
            and :class:`~.compaction.LogSettings`'s); the sink passes its session's, as Spark's sink takes them.

    The four are the output's settings: its first commit records them (:class:`~.compaction.LogSettings`), every
    later one applies the recorded ones, None (the default) meaning the output's, and a commit given one that
    contradicts them is refused (OutputSettingsError, nothing committed: :meth:`check_settings`). Invalid values
    raise ParameterError (a ValueError) here, before anything is written; an unreachable store a StorageError
    within seconds (:meth:`Storage.check_reachable`).

    Example::

        >>> log = MetadataLog("s3://bucket/out", storage_options={"anon": False}, compact_interval=10)
        >>> log.latest_batch_id()
        41
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        storage_options: dict[str, Any] | None = None,
        compact_interval: int | None = None,
        retention: str | _dt.timedelta | None = None,
        min_batches_to_retain: int | None = None,
        cleanup_delay: str | _dt.timedelta | None = None,
        cleanup: bool = True,
        storage: Storage | None = None,
        default_interval: int = DEFAULT_COMPACT_INTERVAL,
        defaults: LogSettings | None = None,
    ) -> None:
        with parameters_of(call_text("MetadataLog", path)):  # the checks name the argument; this names the output
            kept = defaults or LogSettings()
            options = LogOptions(
                compact_interval, retention, min_batches_to_retain, cleanup_delay, default_interval,
                kept.min_batches_to_retain, kept.cleanup_delay_ms,
            )
            check_flags(cleanup=cleanup)
        storage = storage or Storage(os.fspath(path), storage_options)
        storage.check_reachable()  # a StorageError in seconds, not the backend's minutes of retries
        super().__init__(storage, options, cleanup=cleanup)

    def __repr__(self) -> str:
        return f"MetadataLog({self.storage.display(self.log_dir)!r})"

    def start(self) -> None:
        """Create the log directory, as Spark's ``HDFSMetadataLog`` does when a file sink's query starts: from
        then on ``spark.read.parquet`` and Spark's streaming file source take the output for a sink output
        (``FileStreamSink.hasMetadata``: the directory exists) and read only committed batches, and this
        package's readers answer "no committed batch" for it. A writer calls it before it places the first data
        file of an output, so files of a first batch that fails before its commit are never read as data.

        On local disk a directory (made durable); on an object store, where a "directory" exists while an object
        lies under its prefix (Hadoop's S3A and ABFS clients, s3fs and adlfs all decide so), the empty object
        :data:`STARTED_MARKER` in it, which Spark's log ignores (its name is no batch id). Idempotent.

        Example: ``MetadataLog("s3://bucket/out").start()`` -> ``bucket/out/_spark_metadata/.started`` exists.
        """
        storage = self.storage
        if storage.is_local:
            if not os.path.isdir(self.log_dir):
                os.makedirs(self.log_dir, exist_ok=True)
                storage.fsync(storage.root)
        elif not storage.exists(self.log_dir):
            storage.put(storage.join(METADATA_DIR, STARTED_MARKER), b"")

    def latest_batch_id(self) -> int | None:
        """The newest committed batch id (from the listing, like Spark), or None for an empty log."""
        return max(self.list_names(), default=None)

    def read_file(self, path: str, batch_id: int) -> list[LogEntry]:
        """All entries of one log file, validated."""
        return list(self.iter_entries(path, batch_id))

    def get(self, batch_id: int) -> list[LogEntry] | None:
        """The entries written by batch ``batch_id`` (for a compact batch: the whole compact file),
        or None if the batch is not in the log."""
        path = self.list_names().get(batch_id)
        return None if path is None else self.read_file(path, batch_id)

    def iter_live_entries(self, latest: int | None = None) -> Iterator[LogEntry]:
        """Stream every live entry as of batch ``latest`` (default: the newest): the newest compact file
        up to it, then the deltas after it. Raises :class:`MissingLogFileError` on a gap in the chain."""
        listing = self.list_names()
        newest = max(listing, default=None)
        if latest is None:
            latest = newest
            if latest is None:
                return
        elif latest not in listing and latest > (-1 if newest is None else newest):
            raise LogError(
                f"batch {latest} is not committed in {self.display(self.log_dir)}: the newest is "
                f"{newest}. Ask for a committed batch."
            )
        for batch_id, path in self.files_for(latest, listing):
            yield from self.iter_entries(path, batch_id)

    def all_files(self, as_of_batch: int | None = None) -> list[LogEntry]:
        """Every live entry as of ``as_of_batch`` (default: newest) as :class:`LogEntry` objects; the same
        set Spark's reader uses. Hot paths use :func:`~parquet_sink.log.snapshot.read_snapshot` instead.

        Example: ``[e.path for e in log.all_files(3)]``.
        """
        return list(self.iter_live_entries(as_of_batch))

    def check(self, interval: int | None = None, parsed: Collection[int] = ()) -> list[LogError]:
        """Every problem in the log (each log file parsed, the batch chain checked), without raising.
        ``interval``: the writer's compact interval, when the log cannot tell it; ``parsed``: batches whose delta
        files the caller has just parsed whole from their JSON (a snapshot read), not parsed a second time.

        Example: ``[str(p) for p in MetadataLog("/data/events").check()]`` -> ``[]``.
        """
        problems: list[LogError] = []
        listing = self.list_names()
        for batch_id, path in sorted(listing.items()):
            if batch_id in parsed and not is_compact_path(path):
                continue
            sidecar = listing.sidecars.get(batch_id) if is_compact_path(path) else None
            try:
                if sidecar is None:
                    for block in self.blocks(path, batch_id):
                        self.parse_block(block, path, batch_id)
                else:  # parsed whole once (storing no copy over it), then compared with it
                    problem = self._check_sidecar(batch_id, sidecar, path, self._parse_table(path, batch_id, None))
                    if problem:
                        problems.append(problem)
            except LogError as exc:
                problems.append(exc)
            except FileNotFoundError:
                pass  # deleted by a concurrent cleanup
        if listing:
            try:
                self.files_for(max(listing), listing, interval)
            except LogError as exc:
                problems.append(exc)
        return problems

    def _check_sidecar(self, batch_id: int, sidecar: str, path: str, parsed: pa.Table) -> LogError | None:
        """A CorruptLogError when the columnar copy ``sidecar`` of compact file ``path`` (whose entries are
        ``parsed``) does not hold the same entries. A copy left behind by a deleted compact file is not
        looked at: cleanup removes it."""
        copy = self.read_sidecar(sidecar, path, batch_id)
        try:
            same = copy is not None and copy.table().equals(parsed)
        except (pa.ArrowException, OSError):  # damaged: a page CRC-32 failed
            same = False
        if same:
            return None
        return CorruptLogError(
            f"the columnar copy {self.display(sidecar)} of log batch {batch_id} does not hold the entries of "
            f"{self.display(path)}: it is damaged or stale. Delete it (readers then parse the JSON) or rewrite it "
            f"with MetadataLog(...).write_columnar_copy({batch_id})."
        )

    def validate(self) -> None:
        """Raise the first problem :meth:`check` finds."""
        problems = self.check()
        if problems:
            raise problems[0]

