"""The snapshot reader: every live entry of the log as of one batch, as Arrow columns (the counterpart
of Spark's ``FileStreamSinkLog.allFiles`` as ``MetadataLogFileIndex`` uses it).

One word, one meaning: a *snapshot* is the output as of one log batch. :class:`LogSnapshot` holds its live log
entries (this module); :class:`parquet_sink.read.reader.Snapshot` its committed data files, what readers read;
``SnapshotOptions`` select one (``as_of_batch``, ``batches``) and ``SnapshotError`` / ``SnapshotExpiredError``
say when one cannot be had.

One names-only listing of ``_spark_metadata`` per snapshot; the newest compact file (its columnar copy,
see :mod:`.sidecar`, when it has a valid one) and the deltas after it are parsed in bulk
(:meth:`~parquet_sink.log.files.LogFiles.read_table`). Log paths (Hadoop URIs) are
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
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..arrow_versions import nonzero
from ..errors import MissingLogFileError, OutsideRootError, SnapshotError, SnapshotNotFoundError
from .compaction import CompactibleLog
from .files import Listing, is_compact_path
from .lines import joined, scan_pieces
from .sidecar import columns_pool
from .entry import BATCH_KEY, COMMIT_ID_KEY, COMMIT_TIME_KEY, ENTRY_SCHEMA, EXPIRED_KEY
from ..storage.filesystem import Storage

logger = logging.getLogger(__name__)

_ATTEMPTS = 20
_MAX_SLICES = 256  # data_files: past this many skipped rows, one filtered copy beats many slices
_PERCENT = ord("%")
_DOTS = ord(".") * 0x101  # two dots as a 16-bit value, in either byte order


@dataclass(frozen=True)
class LogSnapshot:
    """The log as one listing saw it, and the entries of the snapshot at its ``latest`` batch (``table``,
    with the columns of :data:`~parquet_sink.log.entry.ENTRY_SCHEMA`)."""

    listing: Listing
    latest: int | None
    table: pa.Table


def read_log_files(
    log: CompactibleLog, batch: int, listing: Listing, interval: int | None = None, columns: list[str] | None = None
) -> pa.Table:
    """The entries of the snapshot at ``batch`` from the files ``listing`` holds (MissingLogFileError if one
    of them is not there, FileNotFoundError if it vanished since the listing); only ``columns`` if given."""
    files = log.files_for(batch, listing, interval)
    tables = [log.read_table(path, batch_id, listing.sidecars, columns) for batch_id, path in files]
    return pa.concat_tables(tables) if tables else _empty(columns)


def _empty(columns: list[str] | None) -> pa.Table:
    table = ENTRY_SCHEMA.empty_table()
    return table if columns is None else table.select(columns)


def read_snapshot(log: CompactibleLog, interval: int | None = None, columns: list[str] | None = None) -> LogSnapshot:
    """The latest snapshot of ``log``, retrying while a concurrent compaction or cleanup moves the log
    (never mixing two states). ``interval``: the writer's compact interval when it cannot be inferred;
    ``columns``: the entry columns to keep (all by default).

    Example: ``read_snapshot(log).table.column("path")``.
    """
    return _consistent(log, interval, columns, lambda latest, listing, step: read_log_files(log, latest, listing, step, columns))


def read_recent(
    log: CompactibleLog, interval: int | None = None, *, whole_after: int | None = None, whole_newest: int = 0,
    columns: list[str] | None = None,
) -> LogSnapshot:
    """The latest snapshot of ``log`` as a writer deciding its commit and ``history(limit=)`` need it, read as
    :func:`read_snapshot` reads it but at the cost of the batches they look at, not of the output: every entry of
    the batches after ``whole_after`` and of the newest ``whole_newest`` ones; of the older batches only the
    entries carrying a commit record, a batch's figures (commit time, rows) or a retention marker, and the newest
    data entry (what readers read). A delta file among those is read at its two ends
    (:meth:`~parquet_sink.log.files.LogFiles.read_ends`), a compact file whole (its columnar copy) and then
    filtered. So :func:`~parquet_sink.log.entry.records_of`, the newest commit time, the newest data file and
    the entries of the batches read whole are those of the whole snapshot. ``columns``: the entry columns to keep
    (all by default; those :func:`_decisive` looks at are kept too): a compact file's columnar copy then decodes
    only those (its ``path`` and ``stats`` columns are most of it).

    Example: ``read_recent(log, whole_after=6).table`` -> the records of every batch, every entry of 7 and later.
    """
    wanted = None if columns is None else list(dict.fromkeys([*columns, *_DECISIVE_COLUMNS]))

    def read(latest: int, listing: Listing, step: int | None) -> pa.Table:
        start = latest + 1 - whole_newest if whole_after is None else min(whole_after + 1, latest + 1 - whole_newest)
        tables = []
        for batch_id, path in log.files_for(latest, listing, step):
            ends = None if batch_id >= start or is_compact_path(path) else log.read_ends(path, batch_id)
            if ends is None:
                table = log.read_table(path, batch_id, listing.sidecars, wanted)
                ends = table if batch_id >= start else _decisive(table, start)
            tables.append(ends if wanted is None else ends.select(wanted))
        return pa.concat_tables(tables) if tables else _empty(wanted)

    return _consistent(log, interval, None, read)


_DECISIVE_COLUMNS = (BATCH_KEY, COMMIT_ID_KEY, COMMIT_TIME_KEY, EXPIRED_KEY, "isDir", "size")  # what _decisive reads


def _decisive(table: pa.Table, start: int) -> pa.Table:
    """The entries of a log file :func:`read_recent` keeps: those of batches from ``start`` on, those carrying a
    commit record, figures or a retention marker, and the newest data entry; all of a compact file Spark wrote
    (its entries tell no batch)."""
    ids = table.column(BATCH_KEY)
    if ids.null_count or not table.num_rows:
        return table
    keep = pc.or_(pc.greater_equal(ids, start), pc.is_valid(table.column(COMMIT_ID_KEY)))
    for key in (COMMIT_TIME_KEY, EXPIRED_KEY):
        keep = pc.or_(keep, pc.is_valid(table.column(key)))
    data = np.flatnonzero(pc.invert(pc.or_(table.column("isDir"), pc.less_equal(table.column("size"), 0))).to_numpy())
    if len(data):
        keep = pc.or_(keep, pa.array(np.arange(table.num_rows) == data[-1]))
    return table.filter(keep)


def _consistent(
    log: CompactibleLog, interval: int | None, columns: list[str] | None,
    read: Callable[[int, Listing, int | None], pa.Table],
) -> LogSnapshot:
    """The snapshot ``read(latest, listing, interval)`` reads from one listing, listed and read again while a
    concurrent compaction or cleanup moves the log (never mixing two states)."""
    last_error: Exception | None = None
    for attempt in range(_ATTEMPTS):
        listing = log.list_names()
        latest = max(listing, default=None)
        if latest is None:
            return LogSnapshot(listing, None, _empty(columns))
        # inferred from this listing, not cached: cleanup may leave one compact file, and the interval it
        # suggests (Spark's deriveCompactInterval) may not hold for the next one
        step = interval or log.listing_interval(listing)
        try:
            return LogSnapshot(listing, latest, read(latest, listing, step))
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
    """SnapshotNotFoundError unless ``batch`` is committed in ``snap`` (``what`` names the caller's option)."""
    if snap.latest is None or batch > snap.latest:
        newest = "no batch is committed yet" if snap.latest is None else f"the latest committed batch is {snap.latest}"
        raise SnapshotNotFoundError(
            f"{what} asks for batch {batch} but {log.display(log.log_dir)} has none: {newest}. Ask for a committed "
            "batch (`parquet-sink ls` lists them)."
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
        if ".." in path.split("/"):  # never resolved, even with allow_outside_root: Spark never writes one
            raise OutsideRootError(
                f"batch {batch_id} of {self.storage.display(self.storage.root)} lists {uri}, whose path climbs "
                "out of its directory with '..': Spark and the sink never write such a path, so the log was "
                "edited or damaged. Nothing outside the root was read; run `parquet-sink verify` and restore "
                "the log file of that batch from backup."
            )
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
    return pc.binary_slice(strings.view(pa.binary()), length, 2**31 - 1, memory_pool=columns_pool()).view(pa.string())


def _may_hold_escapes_or_dots(strings: pa.Array) -> bool:
    """Whether a value of ``strings`` may hold a ``%`` or a ``..``: one scan of their bytes, a piece at a
    time (Arrow's substring kernels take ~0.13 s each on 1M paths, this ~0.03 s for both). A ``..`` across
    two values says yes too: the caller then asks the kernels row by row."""
    data = np.frombuffer(joined(strings.view(pa.binary())), np.uint8)
    for _, piece, found in scan_pieces(data, overlap=1):  # a byte more: a pair across two pieces
        if np.equal(piece, _PERCENT, out=found).any():
            return True
        for first in (0, 1):  # both byte pairs at once: two dots read as one 16-bit value
            pairs = piece[first : first + (len(piece) - first) // 2 * 2].view(np.uint16)
            if np.equal(pairs, _DOTS, out=found[: len(pairs)]).any():
                return True
    return False


_PREFIX_ROUNDS = 8  # URI prefixes of other forms (a relocated output's old roots) resolved column-wise per chunk


def _resolve_by_prefix(
    resolver: _Resolver, chunk: pa.Array, ids: pa.Array, relative: pa.Array, unusual: pa.BooleanArray
) -> tuple[pa.Array, pa.BooleanArray]:
    """(relative, unusual) with the unusual rows that share a URI prefix resolved column-wise: the first
    unusual row is resolved one by one; when it maps to a file under the root (an output copied or moved from
    elsewhere, a URI of another form) and its URI ends with its relative path, every row starting with the same
    prefix whose rest has no ``%`` and only ``k=v`` directories maps the same way, as :meth:`_Resolver.resolve`
    would map it (10,000 entries of a copied output: ~5 ms instead of ~50 ms). Rows it leaves stay unusual."""
    for _ in range(_PREFIX_ROUNDS):
        if not pc.any(unusual).as_py():
            break
        first = pc.index(unusual, True).as_py()
        uri = chunk[first].as_py()
        path, rel = resolver.resolve(uri, ids[first].as_py())
        if path != resolver.prefix + rel or not uri.endswith(rel) or len(rel) == len(uri):
            break
        prefix = uri[: len(uri) - len(rel)]
        rest = _drop_prefix(chunk, len(prefix.encode()))
        same = pc.and_(unusual, pc.starts_with(chunk, prefix))
        shape = pc.match_substring_regex(rest, r"^([^/]*=[^/]*/)*[^/]*$")  # a "=" in each directory
        plain = pc.invert(pc.match_substring(rest, "%"))  # (a ".." segment has no "=")
        taken = pc.and_(same, pc.and_(shape, plain))
        if not taken[first].as_py():
            break
        relative = pc.if_else(taken, rest, relative)
        unusual = pc.and_(unusual, pc.invert(taken))
    return relative, unusual


def resolve_paths(
    storage: Storage, uris: pa.ChunkedArray, batch_ids: pa.ChunkedArray, allow_outside_root: bool
) -> tuple[pa.ChunkedArray, pa.ChunkedArray]:
    """(root-relative path, path outside the root or null) of each log URI, chunk by chunk. URIs under
    the root in the form Spark and the sink write, without percent-escapes or ``..``, are resolved
    column-wise; the others one by one: a relocated output maps to the same relative path under the root, a
    file outside the root is an OutsideRootError unless ``allow_outside_root``, a path with a ``..`` segment
    (plain or percent-encoded) always is. :func:`full_paths` joins them.

    Example::

        >>> resolve_paths(Storage("/o"), pa.chunked_array([["file:///o/a.parquet"]]), pa.chunked_array([[0]]), False)
        (['a.parquet'], [None])
    """
    root_prefix = storage.root.rstrip("/") + "/"
    uri_prefix = storage.to_uri(root_prefix + "x")[:-1]
    resolver = _Resolver(storage, allow_outside_root)
    if [len(c) for c in uris.chunks] != [len(c) for c in batch_ids.chunks]:
        uris, batch_ids = pa.chunked_array([uris.combine_chunks()]), pa.chunked_array([batch_ids.combine_chunks()])
    relatives, outsides = [], []
    for chunk, ids in zip(uris.chunks, batch_ids.chunks):
        relative = _drop_prefix(chunk, len(uri_prefix.encode()))
        unusual = pc.invert(pc.starts_with(chunk, uri_prefix))
        if _may_hold_escapes_or_dots(relative):
            plain = pc.and_(pc.invert(pc.match_substring(relative, "%")), pc.invert(pc.match_substring(relative, "..")))
            unusual = pc.or_(unusual, pc.invert(plain))
        outside = pa.nulls(len(chunk), pa.string())
        relative, unusual = _resolve_by_prefix(resolver, chunk, ids, relative, unusual)
        if pc.any(unusual).as_py():
            rows = pa.array(nonzero(unusual), pa.int64())
            resolved = [resolver.resolve(u, b) for u, b in zip(chunk.take(rows).to_pylist(), ids.take(rows).to_pylist())]
            relative = pc.replace_with_mask(relative, unusual, pa.array([r for _, r in resolved], pa.string()))
            elsewhere = [None if p == root_prefix + r else p for p, r in resolved]
            outside = pc.replace_with_mask(outside, unusual, pa.array(elsewhere, pa.string()))
            logger.debug("%d of %d log paths resolved one by one", len(resolved), len(chunk))
        relatives.append(relative)
        outsides.append(outside)
    return pa.chunked_array(relatives, pa.string()), pa.chunked_array(outsides, pa.string())


def full_paths(storage: Storage, relative: pa.ChunkedArray, outside: pa.ChunkedArray) -> pa.ChunkedArray:
    """The fsspec path of each file from :func:`resolve_paths`' two columns.

    Example: ``full_paths(Storage("/o"), ["a.parquet"], [None])`` -> ``['/o/a.parquet']``.
    """
    root_prefix = storage.root.rstrip("/") + "/"
    joined = pc.binary_join_element_wise(root_prefix, relative, "")
    return pc.coalesce(outside, joined) if outside.null_count < len(outside) else joined


def data_files(table: pa.Table, columns: list[str] | None = None) -> pa.Table:
    """The entries a reader reads (Spark skips directories and empty files), only ``columns`` if given.
    When few rows go (commit records), the result is zero-copy slices of ``table``."""
    table = table if columns is None else table.select(columns + [c for c in ("isDir", "size") if c not in columns])
    skip = pc.or_(table.column("isDir"), pc.less_equal(table.column("size"), 0))
    skipped = nonzero(skip)
    if len(skipped) > _MAX_SLICES:
        kept = table.filter(pc.invert(skip))
    else:
        bounds = [-1, *skipped, table.num_rows]
        kept = pa.concat_tables([table.slice(a + 1, b - a - 1) for a, b in zip(bounds, bounds[1:])])
    return kept if columns is None else kept.select(columns)


def batch_ids_known(table: pa.Table) -> bool:
    """Whether every entry is attributed to a batch (a compact file Spark wrote has no batch ids)."""
    return table.column(BATCH_KEY).null_count == 0


def last_drop(entries: pa.Table) -> int | None:
    """The newest log batch after which every batch's snapshot is the latest one's files of that batch and
    before (no file dropped since), from the entries of the latest log snapshot ``entries``: the batch of its
    retention marker (every compaction after a drop carries it on), -1 when there is none; None when the
    entries do not all carry their batch (a compact file Spark wrote). Pure.

    Example: ``last_drop(read_snapshot(log).table)`` -> ``-1`` (an output nothing was ever dropped from).
    """
    if not batch_ids_known(entries):
        return None
    markers = pc.max(entries.column(BATCH_KEY).filter(pc.is_valid(entries.column(EXPIRED_KEY)))).as_py()
    return -1 if markers is None else markers
