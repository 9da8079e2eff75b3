"""Compaction, the compact interval and cleanup of the log (Spark's ``CompactibleFileStreamLog``).

Every ``compact_interval`` batches, the batch's file is ``N.compact``: every live entry up to and
including batch ``N`` (the previous compact file, the deltas after it, the new entries). Readers then
open the newest compact file and the deltas after it. After a commit, log files older than the retained
batches are deleted (Spark's rule).

Compaction is a streamed copy of raw lines at C speed. Pass one plans what to drop (retention, and commit
records that :func:`~parquet_sink.log.entry.records_to_keep` does not keep) from the previous compact
file's columnar copy (:mod:`.sidecar`), or, without one, by validating the JSON block by block
(:meth:`LogFiles.parse_block_layout`, column-wise, two blocks at a time on threads). While no row before it
waits for the plan, a block whose rows' fate is known at once (no commit record in it) is written as soon as
it is parsed: a compact file's bytes as they are, a delta's lines with ``batchId`` stamped column-wise
(:func:`.lines.stamped_lines`), its entries to the new columnar copy. Pass two copies the rest as bytes (only
dropped or rewritten lines, and lines in another layout, cost Python work), checks each source's bytes
against the CRC-32 pass one saw (or its copy records), and writes the new columnar copy alongside. A log
Spark's sink wrote (no commit records) is thus read once and written in one pass. Memory stays bounded by a
few blocks plus the compressed copies (and the entries of the deltas pass two writes).

Example::

    >>> log = CompactibleLog(Storage("/tmp/out"), LogOptions(compact_interval=10))
    >>> log.add(9, [LogEntry("file:///tmp/out/part-9.parquet", 10)])   # writes 9.compact
    True
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as _dt
import functools
import itertools
import json
import logging
import re
import time
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from ..arrow_versions import nonzero
from ..errors import LogError, MissingLogFileError, OutputSettingsError, ParameterError
from ..failpoints import failpoint
from .lines import joined, stamped_lines
from .files import COMPACT_SUFFIX, INTERVAL_RECORD, SETTINGS_RECORD, Block, Listing, LogFiles, is_compact_path, read_record, stamp_batch_id
from .sidecar import Checksum, Sidecar, SidecarWriter, log_memory_pool, sidecar_path
from .threads import ahead, mapped_ahead
from .entry import (
    BATCH_KEY,
    COMMIT_ID_KEY,
    ENTRY_SCHEMA,
    COMMIT_TIME_KEY,
    EXPIRED_KEY,
    QUERY_BATCH_KEY,
    QUERY_ID_KEY,
    CommitRecord,
    LogEntry,
    entries_table,
    entry_from_row,
    figures_of,
    records_of,
    records_to_keep,
    without_record,
)
from ..storage.filesystem import Storage

logger = logging.getLogger(__name__)

_DURATION = re.compile(r"^\s*(?:interval\s+)?(-?\d+)\s*([a-z]+)\s*$", re.IGNORECASE)  # "-1d": negative, refused
_UNIT_MS = {
    **dict.fromkeys(("ms", "millisecond", "milliseconds"), 1),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1000),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60_000),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3_600_000),
    **dict.fromkeys(("d", "day", "days"), 86_400_000),
    **dict.fromkeys(("w", "week", "weeks"), 7 * 86_400_000),
}


_MAX_DURATION_MS = _dt.timedelta.max // _dt.timedelta(milliseconds=1)


def parse_duration_ms(value: str | _dt.timedelta, name: str = "duration") -> int:
    """A duration in ms: a ``datetime.timedelta``, or a whole number with its unit, as Spark's time strings
    (``"7d"``, ``"12h"``, ``"30m"``, ``"10s"``, ``"500ms"``) and as users write them (``"7 days"``, ``"1w"``,
    Delta's ``"interval 7 days"``). The one rule of every duration parameter (``retention``, ``cleanup_delay``,
    ``vacuum``'s ``older_than``, ``sync_delta_log``'s ``log_retention``, the CLI's ``--older-than``): a bare
    number, string or int, is refused (Spark reads ``retention="7"`` as 7 ms, which drops every entry at the
    next compaction), as are negative durations. ParameterError naming ``name``, the value and an example.

    Example: ``parse_duration_ms("7d") == parse_duration_ms("7 days") == 604_800_000``;
    ``parse_duration_ms(7, "retention")`` raises ParameterError.
    """
    match = _DURATION.match(value) if isinstance(value, str) else None
    if isinstance(value, _dt.timedelta):
        result = value // _dt.timedelta(milliseconds=1)
    elif match and match.group(2).lower() in _UNIT_MS:
        result = int(match.group(1)) * _UNIT_MS[match.group(2).lower()]
    else:
        bare = isinstance(value, (int, float)) and not isinstance(value, bool) or (
            isinstance(value, str) and re.fullmatch(r"\s*-?[\d.]+\s*", value) is not None
        )
        raise ParameterError(
            f"{name}={value!r} is not a duration: give a whole number with its unit, e.g. '7d', '12h', '30m', "
            "'10s' or '500ms' (also '7 days', '1w'), or a datetime.timedelta"
            + (f" ({value!r} alone could be ms or days, so a bare number is refused)." if bare else ".")
        )
    if result < 0:
        raise ParameterError(f"{name}={value!r}: a duration must not be negative (e.g. '7d', '12h' or '0s')")
    if result > _MAX_DURATION_MS:  # a time this long before now is no instant a log or a store can hold
        raise ParameterError(f"{name}={value!r}: a duration must be at most datetime.timedelta.max (~2.7 million years)")
    return result


def check_positive_int(name: str, value: object, hint: str) -> None:
    """ValueError unless ``value`` is an integer >= 1 (``hint`` says what the parameter is for).

    Example: ``check_positive_int("compact_interval", 0, "Spark's default is 10")`` raises ValueError.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ParameterError(f"{name} must be a positive integer, got {value!r}: {hint}")


def check_flags(**flags: object) -> None:
    """ParameterError naming the first of ``flags`` that is not a bool: a string such as ``"false"`` is true in
    Python, and these switches decide what a writer hides or keeps.

    Example: ``check_flags(allow_existing_files="false")`` raises ParameterError.
    """
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise ParameterError(f"{name} must be True or False, got {value!r}")


def check_compact_interval(value: int | None) -> None:
    """ParameterError unless ``value`` (a reader's ``compact_interval``: the writer's, for a log that cannot tell it)
    is None or a positive integer."""
    if value is not None:
        check_positive_int("compact_interval", value, "the writer's log compaction interval (Spark's default is 10)")


_DEFAULT_MIN_BATCHES_TO_RETAIN = 100  # Spark's spark.sql.streaming.minBatchesToRetain
_DEFAULT_CLEANUP_DELAY_MS = 600_000  # Spark's spark.sql.streaming.fileSink.log.cleanupDelay (10 min)
DEFAULT_COMPACT_INTERVAL = 10  # Spark's spark.sql.streaming.fileSink.log.compactInterval


@dataclass(frozen=True)
class LogOptions:
    """The log's parameters as a writer or maintenance command was given them, with Spark's names, checked once here
    (ValueError naming the first out of range) for every owner of a log: :class:`~parquet_sink.log.metadata_log.
    MetadataLog`, ``ParquetSink``, ``write_batch`` and ``optimize`` take them as keyword arguments and build one of
    these. None means not given: the output's recorded setting applies (:meth:`CompactibleLog.check_settings`),
    else Spark's default (``default_interval``, ``default_min_batches_to_retain``, ``default_cleanup_delay_ms``: the
    session's for the sink, as Spark's sink takes them from its session). What a log applies is :class:`LogSettings`.

    Example: ``LogOptions(retention="7d").retention_ms == 604_800_000``.
    """

    compact_interval: int | None = None
    retention: str | _dt.timedelta | None = None
    min_batches_to_retain: int | None = None
    cleanup_delay: str | _dt.timedelta | None = None
    default_interval: int = DEFAULT_COMPACT_INTERVAL
    default_min_batches_to_retain: int = _DEFAULT_MIN_BATCHES_TO_RETAIN
    default_cleanup_delay_ms: int = _DEFAULT_CLEANUP_DELAY_MS
    retention_ms: int | None = field(init=False)
    cleanup_delay_ms: int | None = field(init=False)

    def __post_init__(self) -> None:
        if self.compact_interval is not None:
            check_positive_int("compact_interval", self.compact_interval, "Spark's default is 10")
        check_positive_int("default_interval", self.default_interval, "Spark's default is 10")
        check_positive_int("default_min_batches_to_retain", self.default_min_batches_to_retain, "Spark's default is 100")
        if self.min_batches_to_retain is not None:
            check_positive_int(
                "min_batches_to_retain", self.min_batches_to_retain,
                "with fewer, cleanup would delete the log files of committed batches (Spark's default is 100)",
            )
        retention_ms = None if self.retention is None else parse_duration_ms(self.retention, "retention")
        if retention_ms == 0:
            raise ParameterError("retention must be longer than 0 (entries would vanish when compacting); None keeps all")
        object.__setattr__(self, "retention_ms", retention_ms)
        delay = None if self.cleanup_delay is None else parse_duration_ms(self.cleanup_delay, "cleanup_delay")
        object.__setattr__(self, "cleanup_delay_ms", delay)

    @property
    def interval(self) -> int:
        """The compact interval a new log gets: the one given, else ``default_interval``."""
        return self.compact_interval or self.default_interval

    def given(self) -> dict[str, object]:
        """The options given (not None) as their arguments were written, for messages."""
        names = ("compact_interval", "retention", "min_batches_to_retain", "cleanup_delay")
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}


@dataclass(frozen=True)
class LogSettings:
    """The settings a log applies besides its compact interval, recorded with the output by its first writer
    (:data:`~.files.SETTINGS_RECORD`, JSON) so that every writer and maintenance command applies the same:
    Spark's ``retention`` (None: entries never expire), ``minBatchesToRetain`` and the cleanup delay.

    Example: ``LogSettings.of(LogOptions(retention="7d")).retention_ms == 604_800_000``.
    """

    retention_ms: int | None = None
    min_batches_to_retain: int = _DEFAULT_MIN_BATCHES_TO_RETAIN
    cleanup_delay_ms: int = _DEFAULT_CLEANUP_DELAY_MS

    @classmethod
    def of(cls, options: LogOptions) -> LogSettings:
        """The settings ``options`` give, their defaults (Spark's, or its session's) for those not given."""
        return cls(
            options.retention_ms,
            options.min_batches_to_retain or options.default_min_batches_to_retain,
            options.default_cleanup_delay_ms if options.cleanup_delay_ms is None else options.cleanup_delay_ms,
        )

    def to_json(self) -> bytes:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> LogSettings | None:
        """The settings a record holds; None when it holds none (damaged: ignored with a warning by the caller)."""
        try:
            data = json.loads(raw)
            settings = cls(data["retention_ms"], data["min_batches_to_retain"], data["cleanup_delay_ms"])
        except (ValueError, KeyError, TypeError):
            return None
        ints = [settings.min_batches_to_retain, settings.cleanup_delay_ms + 1, settings.retention_ms or 1]
        return settings if all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in ints) else None

    def describe(self, interval: int | None) -> str:
        """The settings (with the compact ``interval``, None: not told yet) in the arguments' terms."""
        retention = "none" if self.retention_ms is None else repr(duration_text(self.retention_ms))
        shown = "" if interval is None else f"compact_interval={interval}, "
        return (
            f"{shown}retention={retention}, min_batches_to_retain={self.min_batches_to_retain}, "
            f"cleanup_delay={duration_text(self.cleanup_delay_ms)!r}"
        )


def duration_text(ms: int) -> str:
    """``ms`` in the largest unit that divides it, as durations are given: ``duration_text(604_800_000) == "7d"``."""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def settings_conflicts(
    options: LogOptions, interval: int | None, recorded: LogSettings | None
) -> list[str]:
    """The options given in ``options`` that contradict what the output goes by, as ``"name=value"``: the compact
    interval ``interval`` (the recorded one, else the one its compact files show; None while it tells none) and the
    ``recorded`` settings (None: none recorded yet, so nothing contradicts them). Durations compare by their length
    (``"7d"`` is ``"168h"``). Pure, so ``doctor`` could predict the refusal.

    Example: ``settings_conflicts(LogOptions(compact_interval=3), 10, None) == ["compact_interval=3"]``.
    """
    given = options.given()
    found = []
    if options.compact_interval is not None and interval is not None and options.compact_interval != interval:
        found.append("compact_interval")
    if recorded is not None:
        if options.retention is not None and options.retention_ms != recorded.retention_ms:
            found.append("retention")
        if options.min_batches_to_retain is not None and options.min_batches_to_retain != recorded.min_batches_to_retain:
            found.append("min_batches_to_retain")
        if options.cleanup_delay is not None and options.cleanup_delay_ms != recorded.cleanup_delay_ms:
            found.append("cleanup_delay")
    return [f"{name}={given[name]!r}" for name in found]


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
    """The compact interval a log's compact files imply (Spark's rule, except that ``default_interval`` is kept
    when the only compact file left is a compaction batch under it), or None when there is none yet.

    Example: ``infer_interval(10, {2: ".../2.compact", 5: ".../5.compact"}) == 3``.
    """
    compacts = sorted((b for b, path in listing.items() if is_compact_path(path)), reverse=True)
    if len(compacts) >= 2:
        return compacts[0] - compacts[1]
    if compacts and (compacts[0] + 1) % default_interval == 0:
        # the interval asked for fits the only compact file left: kept. Spark's rule would pick another divisor
        # (interval 3, cleanup left 5.compact alone: 6), so a writer restarted then wrote 8 as a delta, and one
        # restarted after 5.compact too was gone (11.compact alone: 3) looked for 14.compact
        return default_interval
    if compacts:
        return derive_compact_interval(default_interval, compacts[0])
    return None


def chain_as_written(latest: int, listing: Listing) -> list[tuple[int, str]] | None:
    """(batch id, path) of the log files a snapshot at ``latest`` reads by the names ``listing`` holds, whatever
    the interval: the newest compact file <= ``latest`` (none: from batch 0), then every batch after it; None when
    one of those is missing.

    Example: ``chain_as_written(3, {0: ".../0", 1: ".../1.compact", 2: ".../2", 3: ".../3"})`` ->
    ``[(1, ".../1.compact"), (2, ".../2"), (3, ".../3")]``.
    """
    start = max((b for b, path in listing.items() if b <= latest and is_compact_path(path)), default=0)
    if any(b not in listing for b in range(start, latest + 1)):
        return None
    return [(b, listing[b]) for b in range(start, latest + 1)]


def expired_below(current_batch_id: int, interval: int, min_batches_to_retain: int, listing: Listing) -> int | None:
    """The batch below which every log file has expired after committing ``current_batch_id``: Spark's rule
    (``deleteExpiredLog``: the compaction batch before ``current_batch_id + 1 - min_batches_to_retain``), but never
    past the newest compact file ``listing`` holds at or below it (0: none); None while Spark's rule expires
    nothing yet. Every snapshot a reader may still take
    starts its chain (:func:`chain_as_written`) at a compact file at or after the one returned, so deleting below it
    never breaks one, even where a writer at another interval (Spark's own sink deriving its interval from a lone
    compact file) wrote a delta where ``interval`` names a compact file.

    Example: ``expired_below(9, 3, 1, {5: ".../5.compact", 6: ".../6", 7: ".../7", 8: ".../8"}) == 5`` (Spark's
    rule alone: 8, deleting 5.compact, 6 and 7 that the chain up to 9 reads).
    """
    min_batch_id = current_batch_id + 1 - min_batches_to_retain
    if interval > min_batch_id:
        return None
    threshold = min_batch_id - (min_batch_id % interval) - 1
    return max((b for b, path in listing.items() if b <= threshold and is_compact_path(path)), default=0)


def named_by_another_interval(listing: Mapping[int, str], recorded: int) -> tuple[list[int], int]:
    """The batches after the newest compact file of ``listing`` that the ``recorded`` compact interval names
    ``N.compact``, and so does Spark's own sink run at it, but the log holds as the delta ``N`` (after the newest
    compact file every batch is a delta), and an interval that names them so: Spark's default 10 when it does, else
    the smallest above ``recorded``.

    Spark's own sink names batches by its session's ``spark.sql.streaming.fileSink.log.compactInterval`` until the
    log holds a compact file, then by the interval it derives from the newest one (``CompactibleFileStreamLog.
    compactInterval``, :func:`derive_compact_interval`: with 5.compact newest, 6 for a session at 3); our readers read
    such a log as written (:func:`chain_as_written`), but Spark's sink, compacting across such a batch at the recorded
    interval (or at its own, across one of ours), stops on BATCH_METADATA_NOT_FOUND. Batches before the newest compact
    file no sink reads again. Pure: ``doctor`` and ``verify`` warn with it. ([], 0) when none.

    Example: ``named_by_another_interval({0: ".../0", 1: ".../1", 2: ".../2", 3: ".../3"}, 3) == ([2], 10)``.
    """
    newest = max((b for b, path in listing.items() if is_compact_path(path)), default=-1)
    spark = recorded if newest < 0 else derive_compact_interval(recorded, newest)  # Spark's sink run at the recorded
    batches = sorted(b for b in listing if b > newest and (b + 1) % recorded == 0 and (b + 1) % spark == 0)
    if not batches:
        return [], 0

    def fits(interval: int) -> bool:
        return all((b + 1) % interval for b in batches)

    return batches, next(i for i in itertools.chain([DEFAULT_COMPACT_INTERVAL], itertools.count(recorded + 1)) if fits(i))


@dataclass
class _SourcePlan:
    """What pass one of a compaction learned about one source file (rows count from 0, in file order)."""

    records: list[tuple[int, CommitRecord]] = field(default_factory=list)  # (row, record)
    standalone: set[int] = field(default_factory=set)  # rows of records on an entry of their own
    figured: set[int] = field(default_factory=set)  # rows carrying a batch's figures (commit time, rows)
    carried: dict[int, int] = field(default_factory=dict)  # data entries carrying their batch's figures -> batch
    drop: set[int] = field(default_factory=set)  # rows dropped whatever records are kept: retention, old markers
    replaced: set[int] = field(default_factory=set)  # removed data entries carrying figures: the figures stay
    sidecar: Sidecar | None = None  # a compact source's columnar copy (its rows from ``direct`` on)
    table: pa.Table | None = None  # a delta's entries from row ``direct`` on, for the new columnar copy
    layouts: list[pa.BooleanArray | None] = field(default_factory=list)  # a delta's lines in the layout, by block
    direct: int = 0  # rows (a prefix) pass one already wrote to the new columnar copy
    written: int = 0  # blocks (a prefix) pass one already wrote to the compact file and the copy
    whole: bool = False  # pass one wrote every row
    read: tuple[int, int] | None = None  # the source's (size, CRC-32) as the plan saw it (pass two checks it)

    def scan(
        self, table: pa.Table, offset: int, cutoff: int | None, source: int, removed: frozenset[str] = frozenset()
    ) -> tuple[int, list[int]]:
        """Learn from ``table`` (the source's rows from ``offset``, with their ``batchId``): its commit
        records, its older retention markers and, with a retention ``cutoff``, its expired data entries;
        with ``removed`` (logged paths; ``table`` then has a ``path`` column), the data entries a rewrite
        replaced (an optimize), whose batch figures stay as entries of their own (:meth:`rewrites`).
        Returns (the newest batch whose entries retention or a rewrite dropped (or a marker says were
        dropped), -1 if none; the rows of ``table`` it drops, in order); ``source`` stands for entries of
        unknown batch (a compact file Spark wrote)."""
        expired_upto = -1
        has_record = pc.is_valid(table.column(COMMIT_ID_KEY))
        rows = nonzero(has_record)
        self.records += [(offset + row, record) for row, record in zip(rows, records_of(table))]
        own = pc.and_(has_record, table.column("isDir"))
        self.standalone.update(offset + row for row in nonzero(own))
        figured = pc.is_valid(table.column(COMMIT_TIME_KEY))
        self.figured.update(offset + row for row in nonzero(figured))
        carried = nonzero(pc.and_(figured, pc.invert(pc.or_(has_record, table.column("isDir")))))
        if carried:
            batches = table.column(BATCH_KEY).take(pa.array(carried, pa.int64())).to_pylist()
            self.carried.update((offset + row, batch) for row, batch in zip(carried, batches) if batch is not None)
        markers = nonzero(pc.is_valid(table.column(EXPIRED_KEY)))
        dropped = {offset + row for row in markers}
        if markers:
            expired_upto = pc.max(table.column(EXPIRED_KEY)).as_py()
        if cutoff is not None:
            # data entries, and the figures of a batch without files once its record is gone
            lone_figures = pc.and_(table.column("isDir"), pc.and_(figured, pc.invert(has_record)))
            entries = pc.or_(pc.invert(table.column("isDir")), lone_figures)
            old = pc.and_(pc.less(table.column("modificationTime"), cutoff), entries)
            expired = nonzero(old)
            dropped.update(offset + row for row in expired)
            if expired:
                batches = table.column(BATCH_KEY).take(expired)
                newest = pc.max(batches).as_py()
                expired_upto = max(expired_upto, source if newest is None or batches.null_count else newest)
        if removed:
            listed = pc.is_in(table.column("path"), pa.array(list(removed), pa.string()))
            gone = pc.and_(pc.invert(table.column("isDir")), listed)
            rows = nonzero(gone)
            if rows:
                dropped.update(offset + row for row in rows)
                batches = table.column(BATCH_KEY).take(rows)
                newest = pc.max(batches).as_py()
                expired_upto = max(expired_upto, source if newest is None or batches.null_count else newest)
                self.replaced.update(offset + row for row in nonzero(pc.and_(gone, figured)))
        self.drop |= dropped
        return expired_upto, sorted(dropped)

    def rewrites(self, keep: set[int]) -> tuple[set[int], dict[int, str]]:
        """(rows to drop, rows to rewrite -> how) once the records to keep are known: a record not kept
        loses its keys (``"strip"``; its own entry goes, unless it carries the batch's figures and the next
        row, the batch's first data entry, does not carry them too: they stay);
        a kept record on a data entry that retention drops stays, as an entry of its own (``"standalone"``);
        the figures of a replaced data entry whose record is not kept stay as an entry of their own
        (``"figures"``), so ``history`` and ``as_of_time`` still know when its batch was committed."""
        drop, rewrite = set(self.drop), {}
        for row, record in self.records:
            kept = record.log_batch_id in keep
            if row in self.standalone:
                follow = self.carried.get(row + 1) == record.log_batch_id and row + 1 not in self.drop
                if not kept and row in self.figured and not follow:
                    rewrite[row] = "strip"
                elif not kept:
                    drop.add(row)
            elif row in drop:
                if kept:
                    drop.discard(row)
                    rewrite[row] = "standalone"
            elif not kept:
                rewrite[row] = "strip"
        for row in self.replaced - set(rewrite):
            drop.discard(row)
            rewrite[row] = "figures"
        return drop, rewrite


def _checked(groups: Iterator[tuple[int, pa.Table]], path: str) -> Iterator[tuple[int, pa.Table]]:
    """A columnar copy's row groups; _StaleSidecar if one cannot be decoded."""
    try:
        yield from groups
    except (pa.ArrowException, OSError) as exc:  # a page CRC-32 failed
        raise _StaleSidecar(f"the columnar copy of {path} is damaged ({exc})") from exc


def _rewritten(entry: LogEntry, how: str, storage: Storage) -> LogEntry:
    """``entry`` without its commit record (``"strip"``), its figures alone (``"figures"``), or its record as
    an entry of its own."""
    if how == "strip":
        return without_record(entry)
    if how == "figures":
        return LogEntry(
            storage.to_uri(storage.join("_spark_metadata")), 0, True, entry.modification_time, 0, 0, "add",
            entry.batch_id, figures_of(entry),
        )
    record = CommitRecord.from_entry(entry)
    assert record is not None
    return record.to_entry(storage, entry.modification_time, figures_of(entry))


def _apply(table: pa.Table, drop: set[int], rewrite: dict[int, str], storage: Storage, offset: int = 0) -> pa.Table:
    """``table`` (rows numbered from ``offset``) with ``rewrite`` applied and ``drop`` removed."""
    local = sorted((row - offset, how) for row, how in rewrite.items() if 0 <= row - offset < table.num_rows)
    if local:
        pieces, start = [], 0
        for row, how in local:
            entry = entry_from_row(table.slice(row, 1).to_pylist()[0])
            pieces += [table.slice(start, row - start), entries_table([_rewritten(entry, how, storage)])]
            start = row + 1
        table = pa.concat_tables([*pieces, table.slice(start)]).combine_chunks()
    return _without(table, drop, offset)


# What pass one reads of a columnar copy (everything but the paths and Spark's constant columns).
_PLAN_COLUMNS = [
    "isDir", "modificationTime", BATCH_KEY, QUERY_ID_KEY, QUERY_BATCH_KEY, COMMIT_ID_KEY, EXPIRED_KEY, COMMIT_TIME_KEY,
]


class _Lines(NamedTuple):
    """A block's ``lines`` (each ``"\\n"`` first) and the same lines as a compact file holds them (``out``):
    a delta's stamped with its batch id ``stamp``, ``redo`` marking those to re-serialise one by one."""

    lines: pa.BinaryArray
    out: pa.BinaryArray
    redo: pa.BooleanArray | None
    stamp: int | None


def _read_bytes(read: tuple[int, Block | Checksum | Sidecar]) -> int:
    """The bytes of JSON an item of pass one's reads holds (a block's; a checksum or a copy: none to parse)."""
    return len(read[1].framed) if isinstance(read[1], Block) else 0


def _lines(block: Block, stamp: int | None, table: pa.Table | None, layout: pa.BooleanArray | None) -> _Lines:
    """The :class:`_Lines` of a block of a compact file (``stamp`` None) or of delta file ``stamp``
    (column-wise, :func:`~parquet_sink.log.lines.stamped_lines`)."""
    lines = block.framed_lines()
    if stamp is None:
        return _Lines(lines, lines, None, None)
    out, redo = stamped_lines(lines, table, stamp, layout)
    return _Lines(lines, out, redo, stamp)


class _Read(NamedTuple):
    """One item of pass one (see :meth:`CompactibleLog._sources_read`) for source ``index``, with a block's
    entries, which of its lines are in the layout, and its :class:`_Lines` if the parse thread stamped it."""

    index: int
    item: Block | Checksum | Sidecar
    table: pa.Table | None = None
    layout: pa.BooleanArray | None = None
    lines: _Lines | None = None


class _StaleSidecar(LogError):
    """A columnar copy did not match the bytes of its compact file (always caught: compaction then reads
    the JSON)."""


def _without(table: pa.Table, rows: Iterable[int], offset: int = 0) -> pa.Table:
    """``table`` without the rows ``rows`` (numbered from ``offset``; rows outside the table ignored)."""
    mask = bytearray(b"\x01") * table.num_rows
    for row in rows:
        if 0 <= row - offset < table.num_rows:
            mask[row - offset] = 0
    if all(mask):
        return table
    return table.filter(_mask(mask))


def _mask(flags: bytearray) -> pa.BooleanArray:
    """A boolean array of ``flags`` (one byte, 0 or 1, per row)."""
    return pa.Array.from_buffers(pa.uint8(), len(flags), [None, pa.py_buffer(flags)]).cast(pa.bool_())


class CompactibleLog(LogFiles):
    """A log with compaction, retention and cleanup; see the module docstring.

    Args: as :class:`~parquet_sink.log.metadata_log.MetadataLog`.

    Example::

        >>> CompactibleLog(Storage("/tmp/out"), LogOptions(compact_interval=3)).batches_read_at(7, 3)
        [5, 6, 7]
    """

    def __init__(self, storage: Storage, options: LogOptions = LogOptions(), *, cleanup: bool = True) -> None:
        super().__init__(storage)
        self.options = options
        self.default_compact_interval = options.interval
        self.cleanup_enabled = cleanup
        self._interval: int | None = None
        self._recorded: int | None = None  # the recorded interval once read (0: the record is not an interval)
        self._settings: LogSettings | None = None  # the recorded settings once read
        self._listing: Listing | None = None

    @property
    def settings(self) -> LogSettings:
        """What this log applies when it compacts and cleans up: the output's recorded settings once read
        (:meth:`check_settings`, and every commit: :meth:`add`), else the options given, with Spark's defaults (a
        direct :meth:`cleanup` of a log that has not read them)."""
        return self._settings or LogSettings.of(self.options)

    def recorded_settings(self) -> LogSettings | None:
        """The settings the output's first writer recorded (:data:`~.files.SETTINGS_RECORD`), None without a record
        (an output of Spark's sink or of an older release; a damaged record is ignored with a warning). Read once."""
        if self._settings is None:
            try:
                raw = self.storage.read_bytes(self.storage.join(SETTINGS_RECORD))
            except FileNotFoundError:
                return None
            self._settings = LogSettings.from_json(raw)
            if self._settings is None:
                logger.warning("%s: %s holds %r, not the log's settings: ignored", self, SETTINGS_RECORD, raw[:80])
        return self._settings

    def check_settings(self, listing: Listing | None = None) -> LogSettings:
        """The settings this log applies, after checking that no option given contradicts those the output goes by
        (:func:`settings_conflicts`): OutputSettingsError naming the output, what is recorded and what to do. A
        writer asks before it writes anything; :meth:`add` asks again once the settings are recorded (a first
        writer racing this one may have recorded others)."""
        listing = listing if listing is not None else self.list_names()
        recorded = self.recorded_settings()
        interval = self.recorded_interval() or self.listing_interval(listing)
        conflicts = settings_conflicts(self.options, interval, recorded)
        if conflicts:
            record = self.storage.display(self.storage.join(SETTINGS_RECORD if recorded else INTERVAL_RECORD))
            interval_only = all(c.startswith("compact_interval=") for c in conflicts)
            remedy = (
                "" if interval_only else
                " To change the output's retention, min_batches_to_retain or cleanup_delay: stop every writer of it, "
                f"delete {record} and start one writer with the new settings (its first commit records them)."
            )
            raise OutputSettingsError(
                f"{self.storage.display(self.storage.root)}: {', '.join(conflicts)} contradicts the settings recorded "
                f"with the output ({recorded.describe(interval) if recorded else f'compact_interval={interval}'}; "
                f"{record}), which every writer and maintenance "
                "command applies. Nothing was committed. Omit the argument to apply the output's setting. A log's "
                "compact interval never changes (Spark's readers infer it from its compact files): write to a new "
                f"output for another one.{remedy}"
            )
        return self.settings

    # -- interval and chain ----------------------------------------------------------------------

    def list_names(self) -> Listing:
        """As :meth:`LogFiles.list_names`; the next :meth:`add` reuses this listing instead of listing again
        (safe: the exclusive create refuses a batch someone else committed meanwhile)."""
        self._listing = super().list_names()
        return self._listing

    def interval_for(self, listing: Listing) -> int:
        """The compaction interval, decided once: from two compact files, their distance (Spark's rule); with
        fewer, the interval recorded for the log (:meth:`recorded_interval`) unless the one compact file
        contradicts it; else from that compact file as Spark derives it, or the default while the log has no
        compact file and no record (ask again later)."""
        if self._interval is None:
            inferred = self.listing_interval(listing)
            if inferred is None:
                return self.default_compact_interval
            if inferred != self.default_compact_interval:
                logger.info("%s: compact interval %d (asked for %d)", self, inferred, self.default_compact_interval)
            self._interval = inferred
        return self._interval

    def listing_interval(self, listing: Listing) -> int | None:
        """The interval ``listing`` shows, not cached (readers ask per listing: cleanup may leave one compact
        file): two compact files' distance; with fewer, the recorded interval unless the one compact file
        contradicts it (written before the record: Spark's rule); else :func:`infer_interval`; None for a log
        without compact files and without a record."""
        compacts = [b for b, path in listing.items() if is_compact_path(path)]
        recorded = self.recorded_interval() if len(compacts) < 2 else None
        if recorded is not None and compacts and (compacts[0] + 1) % recorded:
            recorded = None
        return recorded or infer_interval(self.default_compact_interval, listing)

    def recorded_interval(self) -> int | None:
        """The compact interval the log's first writer recorded (:data:`~.files.INTERVAL_RECORD`, :meth:`add`),
        None without one (a log of Spark's sink or of an older release). Read once.

        Before two compact files show the interval, writers asked for different ones would name a batch ``N``
        (a delta) and ``N.compact``: both exclusive creates succeed and readers see one of them. Every writer
        goes by the record instead, as Spark's writers go by the compact files once there are two."""
        if self._recorded is None:
            try:
                text = read_record(self.storage, INTERVAL_RECORD)
            except FileNotFoundError:
                return None  # not recorded yet: ask again
            value = text.decode("ascii", "replace").strip()
            self._recorded = int(value) if value.isdigit() and int(value) > 0 else 0
            if not self._recorded:
                logger.warning("%s: %s holds %r, not an interval: ignored", self, INTERVAL_RECORD, value[:40])
        return self._recorded or None

    def _record_settings(self, listing: Listing) -> None:
        """Record the interval this writer names batches by (the log's, when its files tell one) and the settings it
        applies (:class:`LogSettings`), each unless one is recorded: exclusive creates, so racing first writers
        agree on the winner's; then :meth:`check_settings` against them."""
        if self._recorded is None:
            if self.recorded_interval() is None:
                interval = self.interval_for(listing)
                self.storage.put_if_absent(self.storage.join(INTERVAL_RECORD), str(interval).encode(), commit=False)
                self.recorded_interval()
            self._interval = None  # decided again with the record there (this writer's or another's)
        if self._settings is None and self.recorded_settings() is None:
            self.storage.put_if_absent(self.storage.join(SETTINGS_RECORD), self.settings.to_json(), commit=False)
            self.recorded_settings()
        self.check_settings(listing)

    @property
    def compact_interval(self) -> int:
        return self.interval_for(self.list_names() if self._interval is None else {})

    def is_compaction_batch(self, batch_id: int, interval: int | None = None) -> bool:
        return (batch_id + 1) % (interval or self.compact_interval) == 0

    def batch_path(self, batch_id: int, interval: int | None = None) -> str:
        """Where batch ``batch_id`` lives (``N`` or ``N.compact``) under ``interval`` (default: the log's)."""
        return self.path_of(batch_id, self.is_compaction_batch(batch_id, interval))

    def batches_read_at(self, latest: int, interval: int | None = None) -> list[int]:
        """The log files a reader at ``latest`` needs: the newest compact batch <= latest, then deltas."""
        interval = interval or self.compact_interval
        start = max(0, (latest + 1) // interval * interval - 1)
        return list(range(start, latest + 1))

    def files_for(self, latest: int, listing: Listing, interval: int | None = None) -> list[tuple[int, str]]:
        """(batch id, path) of the files a snapshot at ``latest`` reads, checked against ``listing``:
        MissingLogFileError names the first one that is missing (or plain where a compact file belongs).

        The files are those the interval names (``interval``, else the log's), or else those the log holds as it
        was written (:func:`chain_as_written`): the newest compact file <= ``latest`` (none: from batch 0) and every
        delta after it. Writers that disagree on the interval leave such a chain: a writer with a larger interval
        that has not compacted yet, or Spark's own sink, which goes by its session's interval while the log has
        no compact file (whatever the output recorded), so its ``N`` stands where the recorded interval names
        ``N.compact``. A compact file holds every live entry before it, so the chain is the snapshot; a batch
        missing from it is still the MissingLogFileError.
        """
        interval = interval or self.interval_for(listing)
        files = []
        for batch_id in self.batches_read_at(latest, interval):
            expected = self.batch_path(batch_id, interval)
            if listing.get(batch_id) != expected:
                written = chain_as_written(latest, listing)
                if written is not None:
                    return written
                raise MissingLogFileError(
                    f"log file {self.display(expected)} (batch {batch_id}) is missing: the chain of batches up to "
                    f"{latest} needs it. It was deleted or never written; restore it from backup. Data of "
                    "this batch cannot be told apart from uncommitted files without it."
                )
            files.append((batch_id, expected))
        return files

    # -- writing ---------------------------------------------------------------------------------

    def add(self, batch_id: int, entries: Sequence[LogEntry], removed: frozenset[str] = frozenset()) -> bool:
        """Atomically commit batch ``batch_id``. False if the batch (or a later one) already exists; never
        overwrites. Batches form an unbroken chain from 0: adding past ``latest + 1`` raises LogError.

        ``removed``: logged paths of data entries that the compact file of ``batch_id`` leaves out (the files
        a rewrite replaced with ``entries``: :func:`parquet_sink.maintenance.optimize`), with a retention
        marker so that readers refuse older snapshots newer log files cannot answer; only on a compaction
        batch, the one place a swap is atomic for Spark's readers (LogError elsewhere).

        Entries of a compact file are stamped with ``batchId`` (a delta file's name says it). On a
        compaction batch the compact file is streamed from the previous compact file and the deltas (bounded
        memory, raw lines copied). After a commit, expired log files are cleaned up with Spark's rule.

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
        self._record_settings(listing)
        interval = self.interval_for(listing)
        path = self.batch_path(batch_id, interval)
        if removed and not self.is_compaction_batch(batch_id, interval):
            raise LogError(
                f"cannot remove files at batch {batch_id} of {self.display(self.log_dir)}: it is not a compaction "
                f"batch (interval {interval}), and Spark's readers honour no removal elsewhere."
            )
        if self.is_compaction_batch(batch_id, interval):
            started = time.monotonic()
            sources = self._sources(batch_id, listing, interval)
            try:
                ok = self._write_compact(path, batch_id, sources, listing.sidecars, stamped, removed)
            except _StaleSidecar as exc:
                logger.warning("%s: %s; compacting batch %d from the JSON log files instead", self, exc, batch_id)
                ok = self._write_compact(path, batch_id, sources, {}, stamped, removed)
            logger.info("%s: compacted batch %d in %.3fs", self, batch_id, time.monotonic() - started)
        else:
            # a delta file's name says its batch: its lines carry no batchId (compaction stamps them)
            lines = "".join("\n" + dataclasses.replace(e, batch_id=None).to_json() for e in stamped)
            ok = self.storage.put_if_absent(path, ("v1" + lines).encode())
        if ok:
            listing[batch_id] = path
            if self.cleanup_enabled:
                self.cleanup(batch_id, listing)
        return ok

    def _sources(self, batch_id: int, listing: Listing, interval: int) -> list[tuple[int, str]]:
        if batch_id == 0:
            return []
        try:
            return self.files_for(batch_id - 1, listing, interval)
        except MissingLogFileError as exc:
            raise MissingLogFileError(
                f"cannot compact batch {batch_id}: {exc} Restore it before the query continues."
            ) from exc

    def _write_compact(
        self,
        path: str,
        batch_id: int,
        sources: list[tuple[int, str]],
        sidecars: dict[int, str],
        entries: list[LogEntry],
        removed: frozenset[str] = frozenset(),
    ) -> bool:
        """Write compact file ``path`` (exclusive create), then its columnar copy (see :mod:`.sidecar`).
        A failure to write the copy is logged, not raised: the batch is committed, readers use the JSON."""
        with log_memory_pool():
            copy = SidecarWriter()
            chunks = self._compact_chunks(batch_id, sources, sidecars, entries, copy, removed)
            return self._publish_compact(path, batch_id, chunks, copy)

    def _publish_compact(
        self, path: str, batch_id: int, chunks: Iterator[bytes | memoryview | pa.Buffer], copy: SidecarWriter
    ) -> bool:
        """Publish the compact file made of ``chunks`` (exclusive create), then the columnar copy ``copy``."""
        written = Checksum()
        try:
            # the compact file's bytes are made on a thread while this one checksums and writes them (past its
            # first MiB: a small log's compaction starts no thread)
            ok = self.storage.put_if_absent(path, written.wrap(ahead(chunks, inline=True)))
        except BaseException:
            copy.discard()
            raise
        if not ok:
            copy.discard()
        else:
            failpoint("sidecar")
            self.keep_copy(path, batch_id, copy, written)
        return ok

    def write_columnar_copy(self, batch_id: int) -> str:
        """(Re)write the columnar copy of compact batch ``batch_id`` from its JSON (validated); returns its
        path. Compaction writes the copy itself: this is for compact files written without one (by an older
        version or by Spark's own sink), so readers of a big output stop parsing the JSON.

        Example: ``MetadataLog("/data/events").write_columnar_copy(99)`` -> ``'/data/events/_spark_metadata/99.compact.columnar'``.
        """
        path = self.path_of(batch_id, True)
        checksum = Checksum()
        copy = SidecarWriter()
        for _, table, _ in self.parsed_blocks(path, batch_id, checksum):
            copy.write(table)
        self.put_copy(path, copy, checksum)
        return sidecar_path(path)

    def _sources_read(
        self, sources: list[tuple[int, str]], sidecars: dict[int, str]
    ) -> Iterator[tuple[int, Block | Checksum | Sidecar]]:
        """What pass one reads, in log order, as (index in ``sources``, item): a compact source's columnar
        copy when it has a usable one; else the source's blocks, then the :class:`Checksum` of its bytes."""
        for index, (source, path) in enumerate(sources):
            if is_compact_path(path) and source in sidecars:
                sidecar = self.read_sidecar(sidecars[source], path, source)
                if sidecar is not None:
                    yield index, sidecar
                    continue
            checksum = Checksum()
            for block in self.blocks(path, source, checksum):
                yield index, block
            yield index, checksum

    def _pass_one(
        self,
        sources: list[tuple[int, str]],
        sidecars: dict[int, str],
        cutoff: int | None,
        copy: SidecarWriter,
        plans: list[_SourcePlan],
        removed: frozenset[str] = frozenset(),
    ) -> Generator[bytes | memoryview | pa.Buffer, None, int]:
        """Pass one (see :meth:`_SourcePlan.scan`) over every source, appending their plans to ``plans``:
        from a compact source's columnar copy when there is one, else from its JSON, validated block by
        block. The blocks of all sources are parsed two at a time on threads, in one pipeline.

        While every row before it is written, a block whose rows' fate the plan knows at once (every row
        but commit records, whose keeping depends on the sources after them) is written here, to the
        compact file (yielded) and to ``copy``; a delta's block stamped on the parse thread. From the first
        block that holds a record (or, in a delta, that the JSON parser read) on, pass two writes: a delta's
        entries are kept for it, a compact file's go to a copy made in memory that pass two carries over and
        checks against the bytes it copies. ``removed``: logged paths of data entries to leave out. Returns the
        newest batch whose entries retention or ``removed`` dropped, -1 if none."""
        expired_upto = -1
        direct: list[SidecarWriter | None] = [copy]  # None once a row before the next block waits for pass two
        parsed: list[pa.Table] = []  # the current delta's entries kept for pass two
        made: SidecarWriter | None = None  # the current compact source's copy, made in memory

        def parse(read: tuple[int, Block | Checksum | Sidecar]) -> _Read:
            """On a thread: one block parsed and, for a delta in the layout that goes straight in, stamped."""
            index, block = read
            if not isinstance(block, Block):
                return _Read(index, block)
            source, path = sources[index]
            table, layout = self.parse_block_layout(block, path, source)
            stamp = direct[0] is not None and layout is not None and not is_compact_path(path)
            return _Read(index, block, table, layout, _lines(block, source, None, layout) if stamp else None)

        try:
            reads = self._sources_read(sources, sidecars)
            for index, item, table, layout, lines in mapped_ahead(parse, reads, inline=_read_bytes):
                source, path = sources[index]
                compact = is_compact_path(path)
                if index == len(plans):
                    plans.append(_SourcePlan())
                plan = plans[index]
                if isinstance(item, Sidecar):
                    plan.sidecar, plan.read, direct[0] = item, (item.size, item.crc), None
                    columns = [*_PLAN_COLUMNS, "path"] if removed else _PLAN_COLUMNS
                    for offset, group in _checked(item.groups(columns), path):
                        expired_upto = max(expired_upto, plan.scan(group, offset, cutoff, source, removed)[0])
                    failpoint("compaction")
                    continue
                if isinstance(item, Checksum):  # the end of this source's JSON
                    plan.read, plan.whole = (item.size, item.crc), direct[0] is not None
                    if made is not None:  # pass two carries the entries over from this copy
                        plan.sidecar, made = made.finish_copy(path.rsplit("/", 1)[-1], item), None
                    if not compact:
                        plan.table = pa.concat_tables(parsed) if parsed else ENTRY_SCHEMA.empty_table()
                    parsed = []
                    failpoint("compaction")
                    continue
                assert table is not None
                offset = item.first_line - 2
                if not compact:
                    table = stamp_batch_id(table, source)
                    plan.layouts.append(layout)
                records, replaced = len(plan.records), len(plan.replaced)
                expired, dropped = plan.scan(table, offset, cutoff, source, removed)
                expired_upto = max(expired_upto, expired)
                settled = len(plan.records) == records and len(plan.replaced) == replaced  # nothing to rewrite
                if direct[0] is not None and (compact or layout is not None) and settled:
                    direct[0].write(_without(table, dropped, offset))
                    plan.direct += table.num_rows
                    plan.written += 1
                    if compact and not dropped:  # its bytes, as they are
                        yield item.framed
                    else:
                        lines = lines or _lines(item, None if compact else source, None, layout)
                        yield self._copy_block(offset, dropped, plan.drop, {}, lines)
                    continue
                direct[0] = None
                if not compact:
                    parsed.append(table)
                else:
                    made = made or SidecarWriter()
                    made.write(table)
        except BaseException:
            if made is not None:
                made.discard()
            raise
        return expired_upto

    def _compact_chunks(
        self,
        batch_id: int,
        sources: list[tuple[int, str]],
        sidecars: dict[int, str],
        new_entries: list[LogEntry],
        copy: SidecarWriter,
        removed: frozenset[str] = frozenset(),
    ) -> Iterator[bytes | memoryview | pa.Buffer]:
        """The compact file: pass one validates every source, plans what to drop and writes what it can
        (:meth:`_pass_one`), pass two copies the rest (and feeds the same entries to ``copy``). Raises
        _StaleSidecar, before the file is published, when a columnar copy the plan came from does not match
        its compact file's bytes."""
        now = int(time.time() * 1000)
        retention_ms = self.settings.retention_ms
        cutoff = None if retention_ms is None else now - retention_ms
        plans: list[_SourcePlan] = []
        yield b"v1"
        expired_upto = yield from self._pass_one(sources, sidecars, cutoff, copy, plans, removed)
        new = _SourcePlan()
        new.scan(entries_table(new_entries), 0, cutoff, batch_id)  # retention markers cover older batches only
        keep = records_to_keep([record for plan in [*plans, new] for _, record in plan.records])
        for (source, path), plan in zip(sources, plans):
            if plan.whole:  # pass one wrote every row of this source
                continue
            drop, rewrite = plan.rewrites(keep)
            changed = sorted(drop | set(rewrite))
            stamp = None if is_compact_path(path) else source
            checksum = Checksum()
            if plan.sidecar is not None:  # re-encoded on the copy's thread while the bytes are copied below
                carried = functools.partial(self._carried, plan.sidecar, path, drop, rewrite, plan.direct)
                copy.write_all(carried, plan.sidecar.rows - plan.direct)
            for index, block in enumerate(self.blocks(path, source, checksum)):
                if index < plan.written:
                    continue
                offset = block.first_line - 2
                here = changed[bisect.bisect_left(changed, offset) : bisect.bisect_left(changed, offset + block.lines)]
                layout = plan.layouts[index] if stamp is not None else None
                if not here and stamp is None:  # nothing changes in this block of a compact file: its bytes
                    yield block.framed
                    continue
                table = plan.table.slice(offset - plan.direct, block.lines) if layout is None and stamp is not None else None
                yield self._copy_block(offset, here, drop, rewrite, _lines(block, stamp, table, layout))
            if (checksum.size, checksum.crc) != plan.read:
                raise _StaleSidecar(f"{self.display(path)} changed while it was compacted, or its columnar copy is stale")
            if plan.table is not None:
                copy.write(_apply(plan.table, drop, rewrite, self.storage, plan.direct))
        drop, rewrite = new.rewrites(keep)
        kept_new = [
            _rewritten(e, rewrite[row], self.storage) if row in rewrite else e
            for row, e in enumerate(new_entries)
            if row not in drop
        ]
        if expired_upto >= 0:
            kept_new.append(self._marker(batch_id, expired_upto, now))
        copy.write(entries_table(kept_new))
        yield "".join("\n" + e.to_json() for e in kept_new).encode()

    def _carried(
        self, sidecar: Sidecar, path: str, drop: set[int], rewrite: dict[int, str], first: int
    ) -> Iterator[pa.Table]:
        """A compact source's entries for the new columnar copy, from a copy of its rows from ``first`` on,
        group by group."""
        for start, group in _checked(sidecar.groups(), path):
            yield _apply(group, drop, rewrite, self.storage, first + start)

    def _copy_block(
        self, offset: int, changed: list[int], drop: set[int], rewrite: dict[int, str], lines: _Lines
    ) -> pa.Buffer:
        """One source block (rows from ``offset``, its :func:`_lines`) as the compact file holds it, with
        ``changed`` rows dropped or rewritten; only those, and the lines of a delta that the writer would lay
        out differently, are re-serialised one by one."""
        out, rows = lines.out, {row - offset for row in changed}
        if lines.redo is not None and lines.redo.true_count:
            rows.update(nonzero(lines.redo))
        if rows:
            redone, mask = [], bytearray(len(lines.lines))
            for row in sorted(rows):
                mask[row] = 1
                if offset + row in drop:
                    redone.append(b"")  # an empty value adds no bytes to the block
                    continue
                entry = LogEntry.from_json(lines.lines[row].as_py()[1:].decode("utf-8"), lines.stamp)
                if offset + row in rewrite:
                    entry = _rewritten(entry, rewrite[offset + row], self.storage)
                redone.append(b"\n" + entry.to_json().encode())
            out = pc.replace_with_mask(out, _mask(mask), pa.array(redone, pa.binary()))
        return joined(out)

    def _marker(self, batch_id: int, expired_upto: int, now: int) -> LogEntry:
        """The entry (skipped by Spark, like a commit record) saying that retention dropped entries of
        batches up to ``expired_upto``: readers then refuse older snapshots they cannot answer in full."""
        return LogEntry(self.storage.to_uri(self.log_dir), 0, True, now, 0, 0, "add", batch_id, {EXPIRED_KEY: expired_upto})

    # -- cleanup ---------------------------------------------------------------------------------

    def cleanup(self, current_batch_id: int, listing: Listing | None = None) -> list[str]:
        """Delete expired log files after committing ``current_batch_id``, with Spark's rule
        (``CompactibleFileStreamLog.deleteExpiredLog``): every log file below the compaction batch that
        precedes batch ``current_batch_id + 1 - min_batches_to_retain``, once it is ``cleanup_delay`` old;
        stale temporary files and orphaned columnar copies too. With ``min_batches_to_retain`` below the
        compact interval that can leave one compact file (as Spark does): readers infer the interval from
        each listing (:func:`infer_interval`). Returns the deleted paths. ``listing`` (from :meth:`add`) saves
        a listing: the log directory is listed again (with modification times) only when there is something
        to delete.

        Example: ``log.cleanup(120)`` -> ``['/out/_spark_metadata/0', ...]``.
        """
        listing = listing if listing is not None else super().list_names()
        settings = self.settings
        threshold = expired_below(current_batch_id, self.interval_for(listing), settings.min_batches_to_retain, listing)
        if threshold is None:
            return []
        candidates = {p for b, p in listing.items() if b < threshold} | set(listing.temps)
        candidates |= {p for b, p in listing.sidecars.items() if b < threshold or b not in listing}
        candidates |= set(listing.superseded)
        if not candidates:
            return []
        deleted = self.delete_older(self.storage.ls(self.log_dir), candidates, settings.cleanup_delay_ms)
        if deleted:
            logger.info("%s: deleted %d expired log files below batch %d", self, len(deleted), threshold)
        return deleted


__all__ = [
    "COMPACT_SUFFIX",
    "CompactibleLog",
    "DEFAULT_COMPACT_INTERVAL",
    "LogOptions",
    "LogSettings",
    "chain_as_written",
    "expired_below",
    "check_positive_int",
    "derive_compact_interval",
    "infer_interval",
    "named_by_another_interval",
    "parse_duration_ms",
    "settings_conflicts",
]
