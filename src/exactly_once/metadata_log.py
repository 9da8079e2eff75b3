"""The ``_spark_metadata`` log, byte-compatible with Spark's ``FileStreamSinkLog``.

Layers, as in Spark: :class:`LogEntry` is the entry format (``SinkFileStatus``); :class:`MetadataLog` is
the versioned log with atomic add (``HDFSMetadataLog``) plus compaction, retention and cleanup
(``CompactibleFileStreamLog``). All I/O goes through :class:`~exactly_once.storage.Storage`.

File format: ``v1`` then one ``\\n{json}`` line per entry, no trailing newline. Batch ``N`` is the file
``N``, or ``N.compact`` when ``(N + 1) % compact_interval == 0``; a compact file holds every live entry
up to and including its batch.

Example::

    >>> log = MetadataLog("/tmp/out")
    >>> log.add(0, [LogEntry("file:///tmp/out/part-0.parquet", size=392, modification_time=1)])
    True
    >>> [e.path for e in log.all_files()]
    ['file:///tmp/out/part-0.parquet']
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import logging
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import CorruptLogError, LogError, MissingLogFileError, UnsupportedLogVersionError
from .failpoints import failpoint
from .storage import FileInfo, Storage

logger = logging.getLogger(__name__)

VERSION = 1
METADATA_DIR = "_spark_metadata"
COMPACT_SUFFIX = ".compact"
DEFAULT_BLOCK_SIZE = 33554432
_REQUIRED = (
    ("path", str),
    ("size", int),
    ("isDir", bool),
    ("modificationTime", int),
    ("blockReplication", int),
    ("blockSize", int),
    ("action", str),
)
_JSON_STRING = r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"'
# A valid entry in the exact layout Spark and this package write (all seven keys, in order, typed, then
# extra keys with scalar values such as batchId and the sink's commit record);
# compaction copies such lines without parsing them.
_CANONICAL = re.compile(
    r'\{"path":' + _JSON_STRING + r',"size":-?\d+,"isDir":(?:true|false),"modificationTime":-?\d+,'
    r'"blockReplication":-?\d+,"blockSize":-?\d+,"action":' + _JSON_STRING
    + r'(?:,' + _JSON_STRING + r':(?:-?\d+|true|false|null|' + _JSON_STRING + r'))*\}$'
)
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$")
_UNIT_MS = {"ms": 1, None: 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(value: str | int | float | _dt.timedelta) -> int:
    """Spark's time strings (``"7d"``, ``"12h"``, ``"30m"``, ``"10s"``, ``"500ms"``; a bare number is ms).

    Example: ``parse_duration_ms("7d") == 604_800_000``.
    """
    if isinstance(value, _dt.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, (int, float)):
        return int(value)
    match = _DURATION.match(value)
    if not match:
        raise ValueError(f"invalid duration {value!r}: use a number followed by ms, s, m, h or d, e.g. '7d'")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One line of the log: Spark's ``SinkFileStatus`` plus, after ``action``, keys of ours Spark ignores.

    ``batch_id`` is written as ``"batchId"`` so entries stay attributable after compaction; entries read
    from a Spark-written delta file get it from the file name. ``extra`` holds other keys (the sink's
    commit record uses it).
    """

    path: str
    size: int
    is_dir: bool = False
    modification_time: int = 0
    block_replication: int = 1
    block_size: int = DEFAULT_BLOCK_SIZE
    action: str = "add"
    batch_id: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, hash=False)

    def to_json(self) -> str:
        """One log line, keys in Spark's order, compact separators."""
        line = (
            f'{{"path":{json.dumps(self.path, ensure_ascii=False)},"size":{self.size},'
            f'"isDir":{"true" if self.is_dir else "false"},"modificationTime":{self.modification_time},'
            f'"blockReplication":{self.block_replication},"blockSize":{self.block_size},'
            f'"action":{json.dumps(self.action)}'
        )
        if self.batch_id is not None:
            line += f',"batchId":{self.batch_id}'
        for key, value in self.extra.items():
            line += f",{json.dumps(key)}:{json.dumps(value, ensure_ascii=False, separators=(',', ':'))}"
        return line + "}"

    @classmethod
    def from_json(cls, line: str, batch_id: int | None = None) -> LogEntry:
        """Parse one log line; ValueError (with the reason) if it is not a valid entry."""
        obj = json.loads(line)
        if not isinstance(obj, dict):
            raise ValueError("entry is not a JSON object")
        for key, typ in _REQUIRED:
            value = obj.get(key)
            if value is None:
                raise ValueError(f"missing key {key!r}")
            if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
                raise ValueError(f"key {key!r} has wrong type {type(value).__name__}")
        logged_batch = obj.pop("batchId", None)
        extra = {k: v for k, v in obj.items() if k not in _REQUIRED_KEYS}
        return cls(
            obj["path"],
            obj["size"],
            obj["isDir"],
            obj["modificationTime"],
            obj["blockReplication"],
            obj["blockSize"],
            obj["action"],
            logged_batch if isinstance(logged_batch, int) else batch_id,
            extra,
        )


_REQUIRED_KEYS = frozenset(k for k, _ in _REQUIRED)


def derive_compact_interval(default_interval: int, latest_compact_batch_id: int) -> int:
    """Spark's ``CompactibleFileStreamLog.deriveCompactInterval`` (one compact file left)."""
    n = latest_compact_batch_id + 1
    if n <= default_interval:
        return n
    if default_interval < n // 2:
        return next((i for i in range(default_interval, n // 2 + 1) if n % i == 0), n)
    return n


class MetadataLog:
    """A Spark-compatible file sink log under ``<path>/_spark_metadata``.

    Args:
        path: the output directory (any fsspec URL).
        storage_options: passed to fsspec (credentials etc.).
        compact_interval: default compaction interval; an existing log's interval is inferred from its
            compact files exactly as Spark does.
        retention: Spark's ``retention`` option (``"7d"``): entries whose modification time is older are
            left out when a compact file is written.
        min_batches_to_retain / cleanup_delay: Spark's rule for deleting expired log files after a commit
            (``spark.sql.streaming.minBatchesToRetain``, ``fileCleanupDelayMs``). ``cleanup=False`` keeps all.

    Example::

        >>> log = MetadataLog("s3://bucket/out", {"anon": False}, compact_interval=10)
        >>> log.latest_batch_id()
        41
    """

    def __init__(
        self,
        path: str,
        storage_options: dict[str, Any] | None = None,
        *,
        compact_interval: int = 10,
        retention: str | int | _dt.timedelta | None = None,
        min_batches_to_retain: int = 100,
        cleanup_delay: str | int | _dt.timedelta = "10m",
        cleanup: bool = True,
        storage: Storage | None = None,
    ) -> None:
        if compact_interval < 1:
            raise ValueError(f"compact_interval must be >= 1, got {compact_interval}")
        self.storage = storage or Storage(path, storage_options)
        self.log_dir = self.storage.join(METADATA_DIR)
        self.default_compact_interval = compact_interval
        self.retention_ms = None if retention is None else parse_duration_ms(retention)
        self.min_batches_to_retain = min_batches_to_retain
        self.cleanup_delay_ms = parse_duration_ms(cleanup_delay)
        self.cleanup_enabled = cleanup
        self._interval: int | None = None

    def __repr__(self) -> str:
        return f"MetadataLog({self.storage.display(self.log_dir)!r})"

    # -- naming ----------------------------------------------------------------------------------

    def batch_path(self, batch_id: int, interval: int | None = None) -> str:
        """Where batch ``batch_id`` lives (``N`` or ``N.compact``); ``interval`` defaults to
        :attr:`compact_interval`."""
        suffix = COMPACT_SUFFIX if self.is_compaction_batch(batch_id, interval) else ""
        return self.storage.join(METADATA_DIR, f"{batch_id}{suffix}")

    def display(self, path: str) -> str:
        return self.storage.display(path)

    @staticmethod
    def parse_batch_name(name: str) -> tuple[int, bool] | None:
        """``"12"`` -> (12, False), ``"19.compact"`` -> (19, True); anything else (temp, crc) -> None."""
        base = name.rsplit("/", 1)[-1]
        compact = base.endswith(COMPACT_SUFFIX)
        digits = base[: -len(COMPACT_SUFFIX)] if compact else base
        if not digits.isdigit() or not digits.isascii():
            return None
        return int(digits), compact

    def list_batches(self) -> dict[int, FileInfo]:
        """Batch id -> log file, from a fresh listing of the log directory."""
        found: dict[int, FileInfo] = {}
        for info in self.storage.ls(self.log_dir):
            parsed = self.parse_batch_name(info.path)
            if parsed and not info.is_dir:
                found[parsed[0]] = info
        return found

    def latest_batch_id(self) -> int | None:
        """The newest committed batch id (from the listing, like Spark), or None for an empty log."""
        return max(self.list_batches(), default=None)

    @property
    def compact_interval(self) -> int:
        """The compaction interval, inferred once from existing compact files like Spark does (the
        default while there are none)."""
        return self._interval if self._interval is not None else self._interval_for(self.list_batches())

    def _interval_for(self, listing: dict[int, FileInfo]) -> int:
        """:attr:`compact_interval` from a listing the caller already holds (no second listing)."""
        if self._interval is None:
            compacts = sorted(
                (bid for bid, info in listing.items() if info.path.endswith(COMPACT_SUFFIX)), reverse=True
            )
            interval = self.default_compact_interval
            if len(compacts) >= 2:
                interval = compacts[0] - compacts[1]
            elif len(compacts) == 1:
                interval = derive_compact_interval(interval, compacts[0])
            if not compacts:
                return interval  # nothing to infer from yet: ask again once compact files exist
            if interval != self.default_compact_interval:
                logger.info("%s: compact interval inferred as %d from existing compact files", self, interval)
            self._interval = interval
        return self._interval

    def is_compaction_batch(self, batch_id: int, interval: int | None = None) -> bool:
        return (batch_id + 1) % (interval or self.compact_interval) == 0

    def snapshot_batches(self, latest: int, interval: int | None = None) -> list[int]:
        """The log files a reader at ``latest`` needs: the newest compact batch <= latest, then deltas."""
        interval = interval or self.compact_interval
        start = max(0, (latest + 1) // interval * interval - 1)
        return list(range(start, latest + 1))

    # -- reading ---------------------------------------------------------------------------------

    def _iter_file(self, path: str, batch_id: int) -> Iterator[LogEntry]:
        """Stream and validate the entries of one log file. FileNotFoundError if it does not exist."""
        with self.storage.open(path, "rb") as fh:
            header = fh.readline()
            if not header:
                raise CorruptLogError(
                    f"Incomplete log file {self.display(path)} (batch {batch_id}): the file is empty. It was "
                    "truncated or written by a writer that crashed; restore it from backup or delete it and "
                    "replay the batch from the query's checkpoint."
                )
            self._check_header(header, path, batch_id)
            # Entries of a delta file belong to its batch; a compact file's only say so with "batchId".
            owner = None if path.endswith(COMPACT_SUFFIX) else batch_id
            for number, raw in enumerate(fh, start=2):
                try:
                    line = raw.decode("utf-8")
                    yield LogEntry.from_json(line, owner)
                except (UnicodeDecodeError, ValueError) as exc:
                    raise CorruptLogError(
                        f"corrupt log file {self.display(path)} (batch {batch_id}), line {number}: {exc}. The "
                        "file was truncated or damaged; restore it from backup, or run `exactly-once verify` to "
                        "see every problem."
                    ) from exc

    def _check_header(self, header: bytes, path: str, batch_id: int) -> None:
        text = header.rstrip(b"\n")
        version = text[1:].decode("ascii", "replace")
        if not text.startswith(b"v") or not version.isdigit():
            raise CorruptLogError(
                f"malformed log file {self.display(path)} (batch {batch_id}): header {text[:20]!r} is not "
                "'v<version>'. The file is not a Spark metadata log file or is damaged; restore it from backup."
            )
        if int(version) > VERSION:
            raise UnsupportedLogVersionError(
                f"unsupported log version v{version} in {self.display(path)} (batch {batch_id}): this "
                f"exactly_once supports up to v{VERSION}. The log was written by a newer Spark or tool; upgrade "
                "exactly_once to read it."
            )

    def read_file(self, path: str, batch_id: int) -> list[LogEntry]:
        """All entries of one log file, validated."""
        return list(self._iter_file(path, batch_id))

    def get(self, batch_id: int) -> list[LogEntry] | None:
        """The entries written by batch ``batch_id`` (for a compact batch: the whole compact file),
        or None if the batch is not in the log."""
        info = self.list_batches().get(batch_id)
        if info is None:
            return None
        return self.read_file(info.path, batch_id)

    def iter_snapshot(self, latest: int | None = None) -> Iterator[LogEntry]:
        """Stream every live entry as of batch ``latest`` (default: the newest): the newest compact file
        up to it, then the deltas after it. Raises :class:`MissingLogFileError` on a gap in the chain."""
        listing = self.list_batches()
        if latest is None:
            latest = max(listing, default=None)
            if latest is None:
                return
        elif latest not in listing and latest > max(listing, default=-1):
            raise LogError(
                f"batch {latest} is not committed in {self.display(self.log_dir)}: the newest is "
                f"{max(listing, default=None)}. Ask for a committed batch."
            )
        interval = self._interval_for(listing)
        for batch_id in self.snapshot_batches(latest, interval):
            info = listing.get(batch_id)
            expected = self.batch_path(batch_id, interval)
            if info is None or info.path != expected:
                raise MissingLogFileError(
                    f"log file {self.display(expected)} (batch {batch_id}) is missing: the chain of batches up to "
                    f"{latest} needs it. It was deleted or never written; restore it from backup. Data of "
                    "this batch cannot be told apart from uncommitted files without it."
                )
            yield from self._iter_file(info.path, batch_id)

    def all_files(self, as_of_batch: int | None = None) -> list[LogEntry]:
        """Every live entry as of ``as_of_batch`` (default: newest). Same set Spark's reader uses."""
        return list(self.iter_snapshot(as_of_batch))

    def check(self) -> list[LogError]:
        """Every problem in the log (each log file parsed, the batch chain checked), without raising."""
        problems: list[LogError] = []
        listing = self.list_batches()
        for batch_id, info in sorted(listing.items()):
            try:
                for _ in self._iter_file(info.path, batch_id):
                    pass
            except LogError as exc:
                problems.append(exc)
            except FileNotFoundError:
                pass  # deleted by a concurrent cleanup
        if listing:
            latest, interval = max(listing), self._interval_for(listing)
            for batch_id in self.snapshot_batches(latest, interval):
                expected = self.batch_path(batch_id, interval)
                if batch_id not in listing or listing[batch_id].path != expected:
                    problems.append(
                        MissingLogFileError(
                            f"log file {self.display(expected)} (batch {batch_id}) is missing; "
                            f"the chain up to batch {latest} needs it. Restore it from backup."
                        )
                    )
        return problems

    def validate(self) -> None:
        """Raise the first problem :meth:`check` finds."""
        problems = self.check()
        if problems:
            raise problems[0]

    # -- writing ---------------------------------------------------------------------------------

    def add(self, batch_id: int, entries: Sequence[LogEntry]) -> bool:
        """Atomically commit batch ``batch_id``. False if the batch (or a later one) already exists; never
        overwrites. Batches form an unbroken chain from 0: adding past ``latest + 1`` raises LogError.

        Entries are stamped with ``batchId``. On a compaction batch the compact file is streamed from the
        previous compact file and the deltas (bounded memory, raw lines copied). After a commit, expired log
        files are cleaned up with Spark's rule.
        """
        listing = self.list_batches()
        latest = max(listing, default=-1)
        if batch_id <= latest:
            return False
        if batch_id != latest + 1:
            raise LogError(
                f"cannot add batch {batch_id} to {self.display(self.log_dir)}: the next batch must be "
                f"{latest + 1} (log batches form an unbroken chain). Commit batches in order."
            )
        stamped = [e if e.batch_id == batch_id else dataclasses.replace(e, batch_id=batch_id) for e in entries]
        interval = self._interval_for(listing)
        path = self.batch_path(batch_id, interval)
        if self.is_compaction_batch(batch_id, interval):
            started = time.monotonic()
            ok = self.storage.put_if_absent(path, self._compact_chunks(batch_id, listing, interval, stamped))
            logger.info("%s: compacted batch %d in %.3fs", self, batch_id, time.monotonic() - started)
        else:
            ok = self.storage.put_if_absent(path, _serialize(stamped))
        if ok and self.cleanup_enabled:
            self.cleanup(batch_id)
        return ok

    def _compact_chunks(
        self, batch_id: int, listing: dict[int, FileInfo], interval: int, new_entries: list[LogEntry]
    ) -> Iterator[bytes]:
        yield b"v1"
        now = int(time.time() * 1000)
        for source in self.snapshot_batches(batch_id - 1, interval) if batch_id > 0 else []:
            info = listing.get(source)
            expected = self.batch_path(source, interval)
            if info is None or info.path != expected:
                raise MissingLogFileError(
                    f"cannot compact batch {batch_id}: log file {self.display(expected)} "
                    f"(batch {source}) is missing. Restore it from backup before the query continues."
                )
            yield from self._compact_lines(info.path, source, now)
            failpoint("compaction")
        for entry in new_entries:
            if self._retained(entry, now):
                yield b"\n" + entry.to_json().encode()

    def _compact_lines(self, path: str, batch_id: int, now: int) -> Iterator[bytes]:
        """Lines of one source file for a compact file. Plain delta lines get their batchId stamped;
        lines of a compact file are copied raw unless retention needs their modification time."""
        is_compact = path.endswith(COMPACT_SUFFIX)
        if is_compact and self.retention_ms is None:
            with self.storage.open(path, "rb") as fh:
                self._check_header(fh.readline(), path, batch_id)
                buffer: list[bytes] = []
                for number, raw in enumerate(fh, start=2):
                    line = raw.rstrip(b"\n")
                    try:
                        text = line.decode("utf-8")
                        if not _CANONICAL.match(text):  # cheap check of the usual layout, else full parse
                            LogEntry.from_json(text)
                    except (UnicodeDecodeError, ValueError) as exc:
                        raise CorruptLogError(
                            f"corrupt log file {self.display(path)} (batch {batch_id}), line {number}: {exc}. "
                            "Restore the file from backup before the query compacts the log again."
                        ) from exc
                    buffer.append(b"\n" + line)
                    if len(buffer) >= 4096:
                        yield b"".join(buffer)
                        buffer.clear()
                yield b"".join(buffer)
            return
        for entry in self._iter_file(path, batch_id):
            if self._retained(entry, now):
                yield b"\n" + entry.to_json().encode()

    def _retained(self, entry: LogEntry, now: int) -> bool:
        return self.retention_ms is None or entry.modification_time >= now - self.retention_ms

    def cleanup(self, current_batch_id: int) -> list[str]:
        """Delete expired log files after committing ``current_batch_id`` (Spark's rule), never the two
        newest compact files, never a file younger than ``cleanup_delay``. Returns the deleted paths."""
        interval = self.compact_interval
        min_batch_id = current_batch_id + 1 - self.min_batches_to_retain
        if interval > min_batch_id:
            return []
        threshold = min_batch_id - (min_batch_id % interval) - 1
        listing = self.storage.ls(self.log_dir)
        compacts = sorted(
            (p[0] for p in (self.parse_batch_name(i.path) for i in listing) if p and p[1]), reverse=True
        )
        if len(compacts) >= 2:
            threshold = min(threshold, compacts[1])
        expired_before = int(time.time() * 1000) - self.cleanup_delay_ms
        deleted = []
        for info in listing:
            parsed = self.parse_batch_name(info.path)
            stale_temp = parsed is None and info.path.rsplit("/", 1)[-1].endswith(".tmp")
            if info.mtime_ms >= expired_before or not ((parsed and parsed[0] < threshold) or stale_temp):
                continue
            self.storage.delete(info.path)
            deleted.append(info.path)
            failpoint("cleanup")
        if deleted:
            logger.info("%s: deleted %d expired log files below batch %d", self, len(deleted), threshold)
        return deleted


def _serialize(entries: Iterable[LogEntry]) -> bytes:
    return ("v1" + "".join("\n" + e.to_json() for e in entries)).encode("utf-8")
