"""Compaction, the compact interval and cleanup of the log (Spark's ``CompactibleFileStreamLog``).

Every ``compact_interval`` batches, the batch's file is ``N.compact``: every live entry up to and
including batch ``N`` (the previous compact file, the deltas after it, the new entries). Readers then
open the newest compact file and the deltas after it. After a commit, log files older than the retained
batches are deleted (Spark's rule).

Compaction is a streamed copy of raw lines at C speed: the previous compact file is validated block by
block with ``pyarrow.json`` (:meth:`LogFiles.parse_block`), then its blocks are copied as bytes; only
dropped lines (retention, and commit records that :func:`~exactly_once.sink_log.records_to_keep` does not
keep) cost Python work. Memory stays bounded by one block.

Example::

    >>> log = CompactibleLog(Storage("/tmp/out"), compact_interval=10)
    >>> log.add(9, [LogEntry("file:///tmp/out/part-9.parquet", 10)])   # writes 9.compact
    True
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pyarrow.compute as pc

from .errors import LogError, MissingLogFileError
from .failpoints import failpoint
from .log_files import COMPACT_SUFFIX, Block, Listing, LogFiles, is_compact_path
from .sink_log import BATCH_KEY, EXPIRED_KEY, CommitRecord, LogEntry, records_of, records_to_keep
from .storage import Storage

logger = logging.getLogger(__name__)

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$")
_UNIT_MS = {"ms": 1, None: 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(value: str | int | float | _dt.timedelta) -> int:
    """Spark's time strings (``"7d"``, ``"12h"``, ``"30m"``, ``"10s"``, ``"500ms"``; a bare number is ms).
    ValueError for anything else, negative durations included.

    Example: ``parse_duration_ms("7d") == 604_800_000``.
    """
    if isinstance(value, _dt.timedelta):
        result = int(value.total_seconds() * 1000)
    elif isinstance(value, bool):
        raise ValueError(f"invalid duration {value!r}: use a number followed by ms, s, m, h or d, e.g. '7d'")
    elif isinstance(value, (int, float)):
        result = int(value)
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise ValueError(f"invalid duration {value!r}: use a number followed by ms, s, m, h or d, e.g. '7d'")
        result = int(match.group(1)) * _UNIT_MS[match.group(2)]
    if result < 0:
        raise ValueError(f"invalid duration {value!r}: it must not be negative")
    return result


def derive_compact_interval(default_interval: int, latest_compact_batch_id: int) -> int:
    """Spark's ``CompactibleFileStreamLog.deriveCompactInterval`` (one compact file left).

    Example: ``derive_compact_interval(5, 11) == 6``.
    """
    n = latest_compact_batch_id + 1
    if n <= default_interval:
        return n
    if default_interval < n // 2:
        return next((i for i in range(default_interval, n // 2 + 1) if n % i == 0), n)
    return n


def infer_interval(default_interval: int, listing: Listing) -> int | None:
    """The compact interval a log's compact files imply (Spark's rule), or None when there is none yet.

    Example: ``infer_interval(10, {2: ".../2.compact", 5: ".../5.compact"}) == 3``.
    """
    compacts = sorted((b for b, path in listing.items() if is_compact_path(path)), reverse=True)
    if len(compacts) >= 2:
        return compacts[0] - compacts[1]
    if compacts:
        return derive_compact_interval(default_interval, compacts[0])
    return None


@dataclass
class _BlockPlan:
    """What pass one of a compaction learned about one block of a source file."""

    records: list[tuple[int, CommitRecord]] = field(default_factory=list)  # (row, record)
    expired: list[int] = field(default_factory=list)  # rows dropped by retention
    markers: list[int] = field(default_factory=list)  # rows of older retention markers


class CompactibleLog(LogFiles):
    """A log with compaction, retention and cleanup; see the module docstring.

    Args: as :class:`~exactly_once.metadata_log.MetadataLog`.

    Example::

        >>> CompactibleLog(Storage("/tmp/out"), compact_interval=3).snapshot_batches(7, 3)
        [5, 6, 7]
    """

    def __init__(
        self,
        storage: Storage,
        *,
        compact_interval: int = 10,
        retention: str | int | _dt.timedelta | None = None,
        min_batches_to_retain: int = 100,
        cleanup_delay: str | int | _dt.timedelta = "10m",
        cleanup: bool = True,
    ) -> None:
        if isinstance(compact_interval, bool) or not isinstance(compact_interval, int) or compact_interval < 1:
            raise ValueError(f"compact_interval must be an integer >= 1, got {compact_interval!r}")
        if (
            isinstance(min_batches_to_retain, bool)
            or not isinstance(min_batches_to_retain, int)
            or min_batches_to_retain < 1
        ):
            raise ValueError(
                f"min_batches_to_retain must be an integer >= 1, got {min_batches_to_retain!r}: with fewer, "
                "cleanup would delete the log files of committed batches (Spark's default is 100)"
            )
        try:
            self.retention_ms = None if retention is None else parse_duration_ms(retention)
            self.cleanup_delay_ms = parse_duration_ms(cleanup_delay)
        except ValueError as exc:
            raise ValueError(f"{exc} (retention and cleanup_delay are durations such as '7d' or '10m')") from exc
        super().__init__(storage)
        self.default_compact_interval = compact_interval
        self.min_batches_to_retain = min_batches_to_retain
        self.cleanup_enabled = cleanup
        self._interval: int | None = None
        self._listing: Listing | None = None

    # -- interval and chain ----------------------------------------------------------------------

    def list_names(self) -> Listing:
        """As :meth:`LogFiles.list_names`; the next :meth:`add` reuses this listing instead of listing again
        (safe: the exclusive create refuses a batch someone else committed meanwhile)."""
        self._listing = super().list_names()
        return self._listing

    def interval_for(self, listing: Listing) -> int:
        """The compaction interval, inferred once from existing compact files like Spark does (the
        default while there are none)."""
        if self._interval is None:
            inferred = infer_interval(self.default_compact_interval, listing)
            if inferred is None:
                return self.default_compact_interval  # nothing to infer from yet: ask again later
            if inferred != self.default_compact_interval:
                logger.info("%s: compact interval inferred as %d from existing compact files", self, inferred)
            self._interval = inferred
        return self._interval

    @property
    def compact_interval(self) -> int:
        return self.interval_for(self.list_names() if self._interval is None else {})

    def is_compaction_batch(self, batch_id: int, interval: int | None = None) -> bool:
        return (batch_id + 1) % (interval or self.compact_interval) == 0

    def batch_path(self, batch_id: int, interval: int | None = None) -> str:
        """Where batch ``batch_id`` lives (``N`` or ``N.compact``) under ``interval`` (default: the log's)."""
        return self.path_of(batch_id, self.is_compaction_batch(batch_id, interval))

    def snapshot_batches(self, latest: int, interval: int | None = None) -> list[int]:
        """The log files a reader at ``latest`` needs: the newest compact batch <= latest, then deltas."""
        interval = interval or self.compact_interval
        start = max(0, (latest + 1) // interval * interval - 1)
        return list(range(start, latest + 1))

    def chain(self, latest: int, listing: Listing, interval: int | None = None) -> list[tuple[int, str]]:
        """(batch id, path) of the files a snapshot at ``latest`` reads, checked against ``listing``:
        MissingLogFileError names the first one that is missing (or plain where a compact file belongs).

        A log without any compact file (a writer with a larger interval that has not compacted yet) is
        read as the plain deltas ``0..latest``, unless ``interval`` is given explicitly.
        """
        if interval is None and infer_interval(self.default_compact_interval, listing) is None:
            if all(b in listing and not is_compact_path(listing[b]) for b in range(latest + 1)):
                return [(b, listing[b]) for b in range(latest + 1)]
        interval = interval or self.interval_for(listing)
        files = []
        for batch_id in self.snapshot_batches(latest, interval):
            expected = self.batch_path(batch_id, interval)
            if listing.get(batch_id) != expected:
                raise MissingLogFileError(
                    f"log file {self.display(expected)} (batch {batch_id}) is missing: the chain of batches up to "
                    f"{latest} needs it. It was deleted or never written; restore it from backup. Data of "
                    "this batch cannot be told apart from uncommitted files without it. If the output was "
                    "written with another compact interval, pass compact_interval= to the reader."
                )
            files.append((batch_id, expected))
        return files

    # -- writing ---------------------------------------------------------------------------------

    def add(self, batch_id: int, entries: Sequence[LogEntry]) -> bool:
        """Atomically commit batch ``batch_id``. False if the batch (or a later one) already exists; never
        overwrites. Batches form an unbroken chain from 0: adding past ``latest + 1`` raises LogError.

        Entries are stamped with ``batchId``. On a compaction batch the compact file is streamed from the
        previous compact file and the deltas (bounded memory, raw lines copied). After a commit, expired log
        files are cleaned up with Spark's rule.

        Example: ``log.add(0, [LogEntry("file:///out/part-0.parquet", 392)])`` -> ``True``.
        """
        listing = self._listing if self._listing is not None else super().list_names()
        if self._listing is not None and self.is_compaction_batch(batch_id, self.interval_for(listing)):
            listing = super().list_names()  # compaction reads the files it lists: list them now
        self._listing = None
        latest = max(listing, default=-1)
        if batch_id <= latest:
            return False
        if batch_id != latest + 1:
            raise LogError(
                f"cannot add batch {batch_id} to {self.display(self.log_dir)}: the next batch must be "
                f"{latest + 1} (log batches form an unbroken chain). Commit batches in order."
            )
        stamped = [e if e.batch_id == batch_id else dataclasses.replace(e, batch_id=batch_id) for e in entries]
        interval = self.interval_for(listing)
        path = self.batch_path(batch_id, interval)
        if self.is_compaction_batch(batch_id, interval):
            started = time.monotonic()
            sources = self._sources(batch_id, listing, interval)
            ok = self.storage.put_if_absent(path, self._compact_chunks(batch_id, sources, stamped))
            logger.info("%s: compacted batch %d in %.3fs", self, batch_id, time.monotonic() - started)
        else:
            ok = self.storage.put_if_absent(path, ("v1" + "".join("\n" + e.to_json() for e in stamped)).encode())
        if ok:
            listing[batch_id] = path
            if self.cleanup_enabled:
                self.cleanup(batch_id, listing)
        return ok

    def _sources(self, batch_id: int, listing: Listing, interval: int) -> list[tuple[int, str]]:
        if batch_id == 0:
            return []
        try:
            return self.chain(batch_id - 1, listing, interval)
        except MissingLogFileError as exc:
            raise MissingLogFileError(
                f"cannot compact batch {batch_id}: {exc} Restore it before the query continues."
            ) from exc

    def _compact_chunks(
        self, batch_id: int, sources: list[tuple[int, str]], new_entries: list[LogEntry]
    ) -> Iterator[bytes]:
        """The compact file: pass one validates every source and plans what to drop, pass two copies."""
        now = int(time.time() * 1000)
        cutoff = None if self.retention_ms is None else now - self.retention_ms
        plans: dict[tuple[int, int], _BlockPlan] = {}
        records: list[CommitRecord] = []
        expired_upto = -1
        for source, path in sources:
            for index, block in enumerate(self.blocks(path, source)):
                table = self.parse_block(block, path, source)
                if not is_compact_path(path):
                    table = table.set_column(
                        table.schema.get_field_index(BATCH_KEY), BATCH_KEY, pc.fill_null(table.column(BATCH_KEY), source)
                    )
                plan = _BlockPlan()
                rows = pc.indices_nonzero(pc.is_valid(table.column("commitId"))).to_pylist()
                block_records = records_of(table)
                plan.records = list(zip(rows, block_records))
                records += block_records
                plan.markers = pc.indices_nonzero(pc.is_valid(table.column(EXPIRED_KEY))).to_pylist()
                if plan.markers:
                    expired_upto = max(expired_upto, pc.max(table.column(EXPIRED_KEY)).as_py())
                if cutoff is not None:
                    old = pc.and_(pc.less(table.column("modificationTime"), cutoff), pc.invert(table.column("isDir")))
                    plan.expired = pc.indices_nonzero(old).to_pylist()
                    if plan.expired:
                        batches = table.column(BATCH_KEY).take(plan.expired)
                        newest = pc.max(batches).as_py()
                        expired_upto = max(expired_upto, source if newest is None or batches.null_count else newest)
                plans[(source, index)] = plan
            failpoint("compaction")
        records += [r for r in map(CommitRecord.from_entry, new_entries) if r is not None]
        keep = records_to_keep(records)
        yield b"v1"
        for source, path in sources:
            stamp = None if is_compact_path(path) else source
            for index, block in enumerate(self.blocks(path, source)):
                plan = plans[(source, index)]
                drop = set(plan.expired) | set(plan.markers)
                drop.update(row for row, record in plan.records if record.log_batch_id not in keep)
                yield from self._copy_block(block, drop, stamp)
        kept_new = [
            e for e in new_entries
            if (cutoff is None or e.is_dir or e.modification_time >= cutoff)
            and (CommitRecord.from_entry(e) is None or e.batch_id in keep)
        ]
        if expired_upto >= 0:
            kept_new.append(self._marker(batch_id, expired_upto, now))
        yield "".join("\n" + e.to_json() for e in kept_new).encode()

    @staticmethod
    def _copy_block(block: Block, drop: set[int], stamp: int | None) -> Iterator[bytes]:
        """One source block for the compact file: raw bytes when nothing changes, else its kept lines
        (lines of a delta file get their ``batchId`` stamped)."""
        if not drop and stamp is None:
            yield b"\n"
            yield block.data
            return
        lines = block.split()
        if stamp is None:
            kept = [line for row, line in enumerate(lines) if row not in drop]
            yield b"".join(b"\n" + line for line in kept)
            return
        entries = (LogEntry.from_json(line.decode("utf-8"), stamp) for row, line in enumerate(lines) if row not in drop)
        yield "".join("\n" + e.to_json() for e in entries).encode()

    def _marker(self, batch_id: int, expired_upto: int, now: int) -> LogEntry:
        """The entry (skipped by Spark, like a commit record) saying that retention dropped entries of
        batches up to ``expired_upto``: readers then refuse older snapshots they cannot answer in full."""
        return LogEntry(self.storage.to_uri(self.log_dir), 0, True, now, 0, 0, "add", batch_id, {EXPIRED_KEY: expired_upto})

    # -- cleanup ---------------------------------------------------------------------------------

    def cleanup(self, current_batch_id: int, listing: Listing | None = None) -> list[str]:
        """Delete expired log files after committing ``current_batch_id`` (Spark's rule), never the two
        newest compact files, never a file younger than ``cleanup_delay``; stale temporary files too.
        Returns the deleted paths. ``listing`` (from :meth:`add`) saves a listing: the log directory is
        listed again (with modification times) only when there is something to delete.

        Example: ``log.cleanup(120)`` -> ``['/out/_spark_metadata/0', ...]``.
        """
        listing = listing if listing is not None else super().list_names()
        interval = self.interval_for(listing)
        min_batch_id = current_batch_id + 1 - self.min_batches_to_retain
        if interval > min_batch_id:
            return []
        threshold = min_batch_id - (min_batch_id % interval) - 1
        compacts = sorted((b for b, p in listing.items() if is_compact_path(p)), reverse=True)
        if len(compacts) >= 2:
            threshold = min(threshold, compacts[1])
        candidates = {p for b, p in listing.items() if b < threshold} | set(listing.temps)
        if not candidates:
            return []
        expired_before = int(time.time() * 1000) - self.cleanup_delay_ms
        deleted = []
        for info in self.storage.ls(self.log_dir):
            if info.path not in candidates or info.mtime_ms >= expired_before:
                continue
            self.storage.delete(info.path)
            deleted.append(info.path)
            failpoint("cleanup")
        if deleted:
            logger.info("%s: deleted %d expired log files below batch %d", self, len(deleted), threshold)
        return deleted


__all__ = ["COMPACT_SUFFIX", "CompactibleLog", "derive_compact_interval", "infer_interval", "parse_duration_ms"]
