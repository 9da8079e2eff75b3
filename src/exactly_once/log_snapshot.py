"""The snapshot reader: every live entry of the log as of one batch, as Arrow columns (the counterpart
of Spark's ``FileStreamSinkLog.allFiles`` as ``MetadataLogFileIndex`` uses it).

One names-only listing of ``_spark_metadata`` per snapshot; the newest compact file and the deltas after
it are parsed in bulk (:meth:`~exactly_once.log_files.LogFiles.read_table`). Log paths (Hadoop URIs) are
resolved to fsspec paths under the output root column-wise (:func:`resolve_paths`); only unusual values
(percent-escapes, a relocated output, another scheme) take per-entry Python.

Example::

    >>> snap = read_snapshot(MetadataLog("/data/events", cleanup=False))
    >>> snap.latest, snap.table.num_rows
    (57, 130)
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from .errors import LogError, MissingLogFileError, OutsideRootError, SnapshotError
from .log_compaction import CompactibleLog
from .log_files import Listing
from .sink_log import BATCH_KEY, ENTRY_SCHEMA
from .storage import Storage

logger = logging.getLogger(__name__)

_ATTEMPTS = 20


@dataclass(frozen=True)
class LogSnapshot:
    """The log as one listing saw it, and the entries of the snapshot at its ``latest`` batch (``table``,
    with the columns of :data:`~exactly_once.sink_log.ENTRY_SCHEMA`)."""

    listing: Listing
    latest: int | None
    table: pa.Table


def read_chain(log: CompactibleLog, batch: int, listing: Listing, interval: int | None = None) -> pa.Table:
    """The entries of the snapshot at ``batch`` from the files ``listing`` holds (MissingLogFileError if one
    of them is not there, FileNotFoundError if it vanished since the listing)."""
    tables = [log.read_table(path, batch_id) for batch_id, path in log.chain(batch, listing, interval)]
    return pa.concat_tables(tables) if tables else ENTRY_SCHEMA.empty_table()


def read_snapshot(log: CompactibleLog, interval: int | None = None) -> LogSnapshot:
    """The latest snapshot of ``log``, retrying while a concurrent compaction or cleanup moves the log
    (never mixing two states). ``interval``: the writer's compact interval when it cannot be inferred.

    Example: ``read_snapshot(log).table.column("path")``.
    """
    last_error: Exception | None = None
    for attempt in range(_ATTEMPTS):
        listing = log.list_names()
        latest = max(listing, default=None)
        if latest is None:
            return LogSnapshot(listing, None, ENTRY_SCHEMA.empty_table())
        try:
            return LogSnapshot(listing, latest, read_chain(log, latest, listing, interval))
        except (FileNotFoundError, MissingLogFileError) as exc:
            last_error = exc
            if isinstance(exc, MissingLogFileError) and max(log.list_names(), default=None) == latest:
                raise  # the log did not move: the file is really missing
            logger.debug("log moved while reading batch %s (attempt %d): retrying", latest, attempt + 1)
            time.sleep(0.01 * attempt)
    raise SnapshotError(
        f"could not read a consistent snapshot of {log.display(log.log_dir)} in {_ATTEMPTS} attempts: "
        f"log files kept disappearing ({last_error}). Raise the writer's cleanup_delay."
    )


def require_batch(log: CompactibleLog, snap: LogSnapshot, batch: int, what: str) -> None:
    """LogError unless ``batch`` is committed in ``snap``."""
    if snap.latest is None or batch > snap.latest:
        raise LogError(
            f"{what}={batch} but {log.display(log.log_dir)} has only batches up to {snap.latest}; "
            "ask for a committed batch."
        )


def _relative_segments(path: str) -> str:
    """The root-relative part of a data file path: its name plus the ``k=v`` directories above it."""
    parts = path.split("/")
    start = len(parts) - 1
    while start > 0 and "=" in parts[start - 1]:
        start -= 1
    return "/".join(parts[start:])


class _Resolver:
    """Per-entry resolution of the unusual paths: another URI form, a relocated (copied or moved)
    output, a file outside the root."""

    def __init__(self, storage: Storage, allow_outside_root: bool) -> None:
        self.storage = storage
        self.prefix = storage.root.rstrip("/") + "/"
        self.allow_outside_root = allow_outside_root
        self.relocated: dict[str, bool] = {}

    def resolve(self, uri: str, batch_id: int | None) -> tuple[str, str]:
        path = self.storage.from_uri(uri)
        if path.startswith(self.prefix):
            return path, path[len(self.prefix) :]
        relative = _relative_segments(path)
        old_root = path[: len(path) - len(relative)]
        if old_root not in self.relocated:
            self.relocated[old_root] = self.storage.exists(self.prefix + relative)
            if self.relocated[old_root]:
                logger.info("output was relocated from %s: reading files under %s", old_root, self.prefix)
        if self.relocated[old_root]:
            return self.prefix + relative, relative
        if self.allow_outside_root:
            return path, relative
        raise OutsideRootError(
            f"batch {batch_id} of {self.storage.display(self.storage.root)} lists {uri}, which is outside the "
            "output root and not found under it. If the output was moved, move its data files too; to read "
            "files outside the root on purpose, pass allow_outside_root=True."
        )


def _drop_prefix(strings: pa.Array, length: int) -> pa.Array:
    """Each string without its first ``length`` bytes (a byte slice, much faster than a code point slice;
    rows that do not start with the prefix, where it may cut a character, are replaced by the caller)."""
    return pc.binary_slice(strings.view(pa.binary()), length, 2**31 - 1).view(pa.string())


def resolve_paths(
    storage: Storage, uris: pa.ChunkedArray | pa.Array, batch_ids: pa.ChunkedArray | pa.Array, allow_outside_root: bool
) -> tuple[pa.Array, pa.Array]:
    """(fsspec path, root-relative path) of each log URI. URIs under the root in the form Spark and the
    sink write, without percent-escapes, are resolved column-wise; the others one by one (OutsideRootError
    for a file outside the root that is not found under it, unless ``allow_outside_root``).

    Example::

        >>> resolve_paths(Storage("/o"), pa.array(["file:///o/a.parquet"]), pa.array([0]), False)
        (['/o/a.parquet'], ['a.parquet'])
    """
    uris = uris.combine_chunks() if isinstance(uris, pa.ChunkedArray) else uris
    root_prefix = storage.root.rstrip("/") + "/"
    uri_prefix = storage.to_uri(root_prefix + "x")[:-1]
    if uri_prefix.endswith(root_prefix):  # local, s3, gs, memory: the path is a suffix of the URI
        paths = _drop_prefix(uris, len(uri_prefix.encode()) - len(root_prefix.encode()))
        relative = _drop_prefix(paths, len(root_prefix.encode()))
    else:  # abfss://container@account.dfs.core.windows.net/key
        relative = _drop_prefix(uris, len(uri_prefix.encode()))
        paths = pc.binary_join_element_wise(root_prefix, relative, "")
    plain = pc.and_(pc.starts_with(uris, uri_prefix), pc.invert(pc.match_substring(relative, "%")))
    if pc.all(plain).as_py() is False:
        mask = pc.invert(plain)
        unusual = pc.indices_nonzero(mask)
        resolver = _Resolver(storage, allow_outside_root)
        ids = batch_ids.take(unusual).to_pylist()
        resolved = [resolver.resolve(uri, b) for uri, b in zip(uris.take(unusual).to_pylist(), ids)]
        paths = pc.replace_with_mask(paths, mask, pa.array([p for p, _ in resolved], pa.string()))
        relative = pc.replace_with_mask(relative, mask, pa.array([r for _, r in resolved], pa.string()))
        logger.debug("%d of %d log paths resolved one by one", len(resolved), len(uris))
    return paths, relative


def data_files(table: pa.Table, columns: list[str] | None = None) -> pa.Table:
    """The entries a reader reads (Spark skips directories and empty files), only ``columns`` if given."""
    mask = pc.and_(pc.invert(table.column("isDir")), pc.greater(table.column("size"), 0))
    return (table if columns is None else table.select(columns)).filter(mask)


def batch_ids_known(table: pa.Table) -> bool:
    """Whether every entry is attributed to a batch (a compact file Spark wrote has no batch ids)."""
    return table.column(BATCH_KEY).null_count == 0
