"""The entry format of the file sink log (Spark's ``FileStreamSinkLog`` / ``SinkFileStatus``) and the
sink's commit record.

A log line is a JSON object with Spark's seven keys in Spark's order, then keys of ours that Spark
ignores: ``batchId`` (so entries stay attributable after compaction) and, on a commit record, the
streaming query id, the query's own batch id and a unique commit id (for a ``write_batch`` commit,
followed by a fingerprint of its data).

A *commit record* (the streaming query id, its batch id, a unique commit id) is the batch's first entry, an
entry of its own that Spark skips (``isDir: true``, size 0), with the record and the batch's figures as extra
keys (the figures on the first data entry too). It makes replays idempotent per query, tells a second query
apart from a replay, and makes every commit payload unique (for lost-acknowledgement read-back on object
stores). Delta files keep every record and leave
``batchId`` to the file name; compaction stamps ``batchId`` on every entry and keeps only the records decisions
and ``parquet-sink ls`` need (:func:`records_to_keep`), dropping the others' entries (a batch's figures stay,
on its first data entry or, for a batch without files, on an entry of its own pointing at the log directory).
Records of older versions ride on the batch's first data entry as extra keys (compaction strips them there).

Spark's own file sink, compacting a log our writers also wrote, rewrites every entry with its seven keys only
(``CompactibleFileStreamLog.compact`` re-serialises each ``SinkFileStatus``): every key of ours is gone, the
seven fields stay verbatim. So the record's entry also says the record in its path, a name under the log
directory that no file has (:meth:`CommitRecord.marker_name`, ``_spark_metadata/.commit.<log batch>.<query
batch>.<commit id>.<query id>``, escaped to URI-safe bytes): an entry without the keys but with such a path
(:func:`with_marker_records`, :meth:`LogEntry.from_json`) is read as the record it names, so exactly-once
decisions survive Spark's compaction (docs/design.md, "Spark's own sink on the same output").

Example::

    >>> LogEntry("file:///out/part-0.parquet", 392, batch_id=3).to_json()
    '{"path":"file:///out/part-0.parquet","size":392,"isDir":false,...,"action":"add","batchId":3}'
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import re
import secrets
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from ..storage.filesystem import Storage

DEFAULT_BLOCK_SIZE = 33554432
QUERY_ID_KEY = "queryId"
QUERY_BATCH_KEY = "queryBatchId"
COMMIT_ID_KEY = "commitId"
BATCH_KEY = "batchId"
EXPIRED_KEY = "expiredUpTo"  # on a retention marker: entries of batches up to this one may have been dropped
COMMIT_TIME_KEY = "commitTime"  # on a commit record: when the batch was committed (ms since the epoch)
BATCH_ROWS_KEY = "batchRows"  # on a commit record: the rows the batch wrote
STATS_KEY = "stats"  # on a data entry the sink wrote: the file's statistics (log.file_stats), a JSON text
_RECORD_KEYS = (QUERY_ID_KEY, QUERY_BATCH_KEY, COMMIT_ID_KEY)  # the record's identity; its figures outlive it
_FIGURE_KEYS = (COMMIT_TIME_KEY, BATCH_ROWS_KEY)

_REQUIRED = (
    ("path", str),
    ("size", int),
    ("isDir", bool),
    ("modificationTime", int),
    ("blockReplication", int),
    ("blockSize", int),
    ("action", str),
)
REQUIRED_KEYS = tuple(k for k, _ in _REQUIRED)
_REQUIRED_SET = frozenset(REQUIRED_KEYS)

MARKER_PREFIX = ".commit."  # a record entry's name under _spark_metadata (CommitRecord.marker_name)
_SAFE = frozenset((string.ascii_letters + string.digits + "_-").encode())
_FIELD = r"[A-Za-z0-9_~-]+"
# a record's path: the log directory, then its name (one segment: no "/", no "..", no "%")
_MARKER = (
    r"/_spark_metadata/\.commit\.(?P<log>\d+)\.(?P<query_batch>-?\d+)\.(?P<commit>" + _FIELD + r")\."
    r"(?P<query>n|q[A-Za-z0-9_~-]*)$"
)
_MARKER_RE = re.compile(_MARKER)
_ESCAPE_RE = re.compile(rb"~([0-9A-F]{2})")

# The columns the columnar reader keeps: Spark's seven keys, the batch id, the commit record's keys, the file's stats.
ENTRY_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("size", pa.int64()),
        ("isDir", pa.bool_()),
        ("modificationTime", pa.int64()),
        ("blockReplication", pa.int64()),
        ("blockSize", pa.int64()),
        ("action", pa.string()),
        (BATCH_KEY, pa.int64()),
        (QUERY_ID_KEY, pa.string()),
        (QUERY_BATCH_KEY, pa.int64()),
        (COMMIT_ID_KEY, pa.string()),
        (EXPIRED_KEY, pa.int64()),
        (COMMIT_TIME_KEY, pa.int64()),
        (BATCH_ROWS_KEY, pa.int64()),
        (STATS_KEY, pa.string()),
    ]
)


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One line of the log: Spark's ``SinkFileStatus`` plus, after ``action``, keys of ours Spark ignores.

    ``batch_id`` is written as ``"batchId"`` so entries stay attributable after compaction; entries read
    from a Spark-written delta file get it from the file name. ``extra`` holds other keys (the sink's
    commit record uses it).

    Example::

        >>> LogEntry.from_json('{"path":"file:///o/a","size":1,"isDir":false,"modificationTime":1,'
        ...                    '"blockReplication":1,"blockSize":1,"action":"add"}', batch_id=4).batch_id
        4
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
        logged_batch = obj.pop(BATCH_KEY, None)
        extra = {k: v for k, v in obj.items() if k not in _REQUIRED_SET}
        logged = logged_batch if isinstance(logged_batch, int) and not isinstance(logged_batch, bool) else batch_id
        named = _marker(obj["path"]) if obj["isDir"] and COMMIT_ID_KEY not in extra else None
        if named is not None:  # a record whose keys Spark's compaction dropped: its path says it
            extra.update(named.keys)
            logged = named.log_batch_id
        return cls(
            obj["path"],
            obj["size"],
            obj["isDir"],
            obj["modificationTime"],
            obj["blockReplication"],
            obj["blockSize"],
            obj["action"],
            logged,
            extra,
        )

    def to_row(self) -> dict[str, Any]:
        """The entry as a row of :data:`ENTRY_SCHEMA`; ValueError if a commit record key has a wrong type."""
        extra = self.extra
        row: dict[str, Any] = {
            "path": self.path,
            "size": self.size,
            "isDir": self.is_dir,
            "modificationTime": self.modification_time,
            "blockReplication": self.block_replication,
            "blockSize": self.block_size,
            "action": self.action,
            BATCH_KEY: self.batch_id,
            QUERY_ID_KEY: None,
            QUERY_BATCH_KEY: None,
            COMMIT_ID_KEY: None,
            EXPIRED_KEY: None,
            COMMIT_TIME_KEY: None,
            BATCH_ROWS_KEY: None,
            STATS_KEY: None,
        }
        stats = extra.get(STATS_KEY)
        if stats is not None:
            if not isinstance(stats, str):
                raise ValueError(f"key {STATS_KEY!r} is not a string")
            row[STATS_KEY] = stats
        for key in (EXPIRED_KEY, *_FIGURE_KEYS):
            value = extra.get(key)
            if value is not None:
                if not isinstance(value, int) or isinstance(value, bool):
                    raise ValueError(f"key {key!r} is not an integer")
                row[key] = value
        if COMMIT_ID_KEY in extra:
            query_batch = extra.get(QUERY_BATCH_KEY)  # absent: the same as the log batch id
            if query_batch is not None and (not isinstance(query_batch, int) or isinstance(query_batch, bool)):
                raise ValueError(f"commit record key {QUERY_BATCH_KEY!r} is not an integer")
            query_id = extra.get(QUERY_ID_KEY)
            row[QUERY_ID_KEY] = None if query_id is None else str(query_id)
            row[QUERY_BATCH_KEY] = query_batch
            row[COMMIT_ID_KEY] = str(extra[COMMIT_ID_KEY])
        return row


def entry_from_row(row: dict[str, Any]) -> LogEntry:
    """The entry of a row of :data:`ENTRY_SCHEMA` (the inverse of :meth:`LogEntry.to_row`).

    Example: ``entry_from_row(LogEntry("file:///o/a", 1).to_row()) == LogEntry("file:///o/a", 1)``.
    """
    extra: dict[str, Any] = {}
    if row[COMMIT_ID_KEY] is not None:
        extra = {QUERY_ID_KEY: row[QUERY_ID_KEY], QUERY_BATCH_KEY: row[QUERY_BATCH_KEY], COMMIT_ID_KEY: row[COMMIT_ID_KEY]}
        if extra[QUERY_BATCH_KEY] is None:
            del extra[QUERY_BATCH_KEY]
    for key in (EXPIRED_KEY, *_FIGURE_KEYS, STATS_KEY):
        if row.get(key) is not None:
            extra[key] = row[key]
    return LogEntry(
        row["path"], row["size"], row["isDir"], row["modificationTime"], row["blockReplication"],
        row["blockSize"], row["action"], row[BATCH_KEY], extra,
    )


def entries_table(entries: Iterable[LogEntry]) -> pa.Table:
    """Entries as a table of :data:`ENTRY_SCHEMA` (ValueError if one cannot be represented).

    Example: ``entries_table([LogEntry("file:///o/a", 1)]).num_rows == 1``.
    """
    try:
        return pa.Table.from_pylist([e.to_row() for e in entries], schema=ENTRY_SCHEMA)
    except (OverflowError, pa.ArrowException) as exc:
        raise ValueError(str(exc)) from exc


@dataclass(frozen=True)
class CommitRecord:
    """Who committed a log batch: the streaming query id and that query's own batch id.

    Example::

        >>> record = CommitRecord(7, "6abb5a0d-...", 7, "9f1c...")
        >>> CommitRecord.from_entry(record.to_entry(storage, now_ms=0)) == record
        True
    """

    log_batch_id: int
    query_id: str | None
    query_batch_id: int
    commit_id: str

    @classmethod
    def new(
        cls, log_batch_id: int, query_id: str | None, query_batch_id: int, fingerprint: str | None = None
    ) -> CommitRecord:
        """A record with a fresh random commit id (64 bits: unique per attempt), followed by ``-`` and the
        ``fingerprint`` of the batch's data when given (:func:`parquet_sink.write_batch` gives one).

        Example: ``CommitRecord.new(7, "daily-job", 41, "5e0d...").commit_id`` -> ``'9f1c0a7e5b3d2c41-5e0d...'``.
        """
        token = secrets.token_hex(8)
        return cls(log_batch_id, query_id, query_batch_id, f"{token}-{fingerprint}" if fingerprint else token)

    @property
    def fingerprint(self) -> str | None:
        """The fingerprint of the batch's data carried in the commit id, None when it carries none (a
        streaming batch, a record inferred inside a run, a commit of an older release).

        Example: ``CommitRecord(0, "job", 0, "9f1c0a7e5b3d2c41-5e0d").fingerprint`` -> ``'5e0d'``.
        """
        return self.commit_id.partition("-")[2] or None

    @property
    def is_app(self) -> bool:
        """Whether a ``write_batch`` app committed (its record carries a fingerprint), not a streaming query."""
        return self.fingerprint is not None and self.query_id is not None

    @property
    def writer(self) -> str:
        """Who committed, as messages name it: a ``write_batch`` app (:attr:`is_app`) or a query.

        Example: ``CommitRecord(0, "job", 0, "9f1c0a7e5b3d2c41-5e0d").writer`` -> ``"write_batch's app 'job'"``.
        """
        if self.is_app:
            return f"write_batch's app {self.query_id!r}"
        return f"query {self.query_id or '(not recorded: written with allow_batch_id_only)'}"

    @property
    def keys(self) -> dict[str, Any]:
        """The record as extra keys of an entry (``queryBatchId`` only when it differs from the log batch id)."""
        if self.query_batch_id == self.log_batch_id:
            return {QUERY_ID_KEY: self.query_id, COMMIT_ID_KEY: self.commit_id}
        return {QUERY_ID_KEY: self.query_id, QUERY_BATCH_KEY: self.query_batch_id, COMMIT_ID_KEY: self.commit_id}

    def log_entries(
        self, storage: Storage, now_ms: int, data: Sequence[LogEntry], rows: int | None = None
    ) -> list[LogEntry]:
        """The entries of a batch committing ``data`` with this record: first the record's own entry
        (:meth:`to_entry`) with the batch's figures, the commit time ``now_ms`` and its ``rows`` (what
        :func:`parquet_sink.history` reports), then ``data``, the first data entry with the figures too: a
        compaction that no longer keeps the record drops its entry, the figures stay on the data entry.

        Example: ``record.log_entries(storage, now, [LogEntry("file:///o/a.parquet", 10)], rows=5)[0].extra["batchRows"]``.
        """
        figures = {COMMIT_TIME_KEY: now_ms} if rows is None else {COMMIT_TIME_KEY: now_ms, BATCH_ROWS_KEY: rows}
        own = self.to_entry(storage, now_ms, figures)
        if not data:
            return [own]
        return [own, dataclasses.replace(data[0], extra={**data[0].extra, **figures}), *data[1:]]

    @property
    def marker_name(self) -> str:
        """The name of this record's entry under ``_spark_metadata`` (no file has it): the log batch id, the query
        batch id, the commit id and the query id (``n`` for none, else ``q`` and the id), each byte outside
        ``[A-Za-z0-9_-]`` as ``~XX``. Spark's compaction keeps a path verbatim, so the record survives it.

        Example: ``CommitRecord(7, "my app", 3, "9f1c-5e0d").marker_name`` -> ``'.commit.7.3.9f1c-5e0d.qmy~20app'``.
        """
        query = "n" if self.query_id is None else "q" + _escape(self.query_id)
        return f"{MARKER_PREFIX}{self.log_batch_id}.{self.query_batch_id}.{_escape(self.commit_id)}.{query}"

    def to_entry(self, storage: Storage, now_ms: int, figures: dict[str, int] | None = None) -> LogEntry:
        """An entry of its own carrying this record (``isDir``, size 0, named :meth:`marker_name` under the log
        directory) and the batch's ``figures`` (:func:`figures_of`)."""
        return LogEntry(
            storage.to_uri(storage.join("_spark_metadata", self.marker_name)),
            0,
            True,
            now_ms,
            0,
            0,
            "add",
            self.log_batch_id,
            {**self.keys, **(figures or {})},
        )

    @classmethod
    def from_entry(cls, entry: LogEntry) -> CommitRecord | None:
        """The record carried by ``entry``, or None for an entry without one (or a Spark-written log)."""
        if COMMIT_ID_KEY not in entry.extra or entry.batch_id is None:
            return None
        extra = entry.extra
        query_batch = extra.get(QUERY_BATCH_KEY, entry.batch_id)
        return cls(entry.batch_id, extra.get(QUERY_ID_KEY), int(query_batch), str(extra[COMMIT_ID_KEY]))


def record_rows(table: pa.Table) -> pa.Table:
    """The rows of a table of :data:`ENTRY_SCHEMA` that carry a commit record, in log order: one per batch, or
    fewer (a caller wanting a record's other columns, its commit time, reads them here; :func:`records_of`
    turns the same rows into records).

    Example: ``record_rows(snapshot_table).column("commitTime")`` -> ``[[1732430000000, 1732430060000]]``.
    """
    mask = pa.compute.and_(pa.compute.is_valid(table.column(COMMIT_ID_KEY)), pa.compute.is_valid(table.column(BATCH_KEY)))
    return table.filter(mask)


def records_of(table: pa.Table) -> list[CommitRecord]:
    """The commit records in a table of :data:`ENTRY_SCHEMA`, in log order (only their rows become
    Python objects).

    Example: ``[r.log_batch_id for r in records_of(snapshot_table)]`` -> ``[0, 41]``.
    """
    rows = record_rows(table).select([BATCH_KEY, QUERY_ID_KEY, QUERY_BATCH_KEY, COMMIT_ID_KEY]).to_pylist()
    return [
        CommitRecord(r[BATCH_KEY], r[QUERY_ID_KEY], r[BATCH_KEY] if r[QUERY_BATCH_KEY] is None else r[QUERY_BATCH_KEY], r[COMMIT_ID_KEY])
        for r in rows
    ]


def without_record(entry: LogEntry) -> LogEntry:
    """``entry`` without commit record keys (an entry whose record compaction no longer keeps); a record's own
    entry then points at the log directory itself (its path no longer names the record).

    Example: ``without_record(old_format_entries[0]) == data_entry``.
    """
    path = entry.path.rsplit("/", 1)[0] if entry.is_dir and _MARKER_RE.search(entry.path) else entry.path
    return dataclasses.replace(
        entry, path=path, extra={k: v for k, v in entry.extra.items() if k not in _RECORD_KEYS}
    )


def _escape(text: str) -> str:
    return "".join(chr(b) if b in _SAFE else f"~{b:02X}" for b in text.encode())


def _unescape(text: str) -> str:
    return _ESCAPE_RE.sub(lambda m: bytes([int(m.group(1), 16)]), text.encode()).decode("utf-8", "replace")


def _marker(path: str) -> CommitRecord | None:
    """The record a record entry's path names (:meth:`CommitRecord.marker_name`), None for any other path."""
    found = _MARKER_RE.search(path)
    if found is None:
        return None
    query = found["query"]
    return CommitRecord(
        int(found["log"]), None if query == "n" else _unescape(query[1:]), int(found["query_batch"]),
        _unescape(found["commit"]),
    )


def with_marker_records(table: pa.Table) -> pa.Table:
    """``table`` (of :data:`ENTRY_SCHEMA`) with the record of every record entry that lost its keys (a compact
    file Spark's own sink wrote: only its seven keys stay) read from its path, as :meth:`LogEntry.from_json`
    reads one entry: its ``batchId`` and commit record columns filled. Column-wise; the table itself when no
    directory entry lacks a record (every log but one Spark compacted after us).

    Example: ``with_marker_records(spark_compact_table).column("queryId")`` -> ``[None, 'q1', ...]``.
    """
    if not table.num_rows:
        return table
    lost = pc.and_(table.column("isDir"), pc.is_null(table.column(COMMIT_ID_KEY)))
    if not pc.any(lost).as_py():
        return table
    paths = pc.if_else(lost, table.column("path"), pa.scalar(None, pa.string())).combine_chunks()
    named = pc.match_substring_regex(paths, _MARKER)  # null where not lost
    named = pc.fill_null(named, False)
    if not pc.any(named).as_py():
        return table
    found = pc.extract_regex(paths.filter(named), _MARKER).flatten()  # one row per record entry, every field set
    log, query_batch, commit, query = (found[i] for i in range(4))
    query = pc.if_else(pc.equal(query, "n"), pa.scalar(None, pa.string()), pc.utf8_slice_codeunits(query, 1))
    log, query_batch = log.cast(pa.int64()), query_batch.cast(pa.int64())
    # as the entry's keys say it (CommitRecord.keys): no queryBatchId when it is the log batch id
    values = {BATCH_KEY: log, QUERY_BATCH_KEY: pc.if_else(pc.equal(log, query_batch), pa.scalar(None, pa.int64()), query_batch)}
    for key, column in ((COMMIT_ID_KEY, commit), (QUERY_ID_KEY, query)):
        escaped = pc.any(pc.match_substring(column, "~")).as_py()
        values[key] = pa.array([None if v is None else _unescape(v) for v in column.to_pylist()], pa.string()) if escaped else column
    for key, column in values.items():
        index = table.schema.get_field_index(key)
        table = table.set_column(index, key, pc.replace_with_mask(table.column(key).combine_chunks(), named, column))
    return table


def figures_of(entry: LogEntry) -> dict[str, int]:
    """The batch figures an entry carries (commit time, rows): they stay when compaction drops the record.

    Example: ``figures_of(entries[0])`` -> ``{'commitTime': 1732430000000, 'batchRows': 5}``.
    """
    return {key: entry.extra[key] for key in _FIGURE_KEYS if key in entry.extra}


def _same_run(a: CommitRecord, b: CommitRecord) -> bool:
    """Whether ``b`` continues ``a``'s run: the same query, log and query batch ids advancing together."""
    return a.query_id == b.query_id and b.log_batch_id - a.log_batch_id == b.query_batch_id - a.query_batch_id


def records_to_keep(records: Sequence[CommitRecord]) -> set[int]:
    """The log batch ids whose commit record a compact file keeps, given the records of its sources in log order
    (those the previous compact file kept, then every delta's, then the new batch's). Pure: compaction decides with
    it, on the records alone.

    Contract: every reader and writer answers from the kept records what it answered from all of them, since
    :func:`attribute` infers a dropped record from its run's ends. A *run* is a stretch of records, adjacent in log
    order, of one query whose log and query batch ids advance together (:func:`_same_run`), whatever batches without
    a record lie between them (dropped by an earlier compaction: :func:`attribute` reads the gap as the run's too).
    Kept, and needed:

    * the newest record of each query or app, the last of its newest run: replay detection
      (:func:`~parquet_sink.write.sink.decide_batch`, ``write_batch``'s
      :func:`~parquet_sink.read.chain.decide_write`), ``on_foreign_query``, the newest batch's writer
      (:func:`committed_by_spark_sink`) and the lost-acknowledgement read-back of the commit id just written;
    * the first and the last record of every run: :func:`attribute` infers every batch between them (``ls``,
      ``doctor``, the conflict checks of a lost race, :func:`~parquet_sink.read.chain.version_record`); batches
      outside every run stay Spark's own sink's;
    * every record carrying a fingerprint, whatever its age: ``write_batch`` compares a version written again with
      it (an inferred record has none: a changed retry of an old version would pass unseen), and an optimize's
      record carries its swap's figures (``history``, ``sync_delta_log``, ``sync_iceberg`` read them).

    Dropped: the other records of a run (a streaming query's inner batches); their commit ids and ``queryId`` keys
    go, their batch's figures stay (:meth:`CommitRecord.log_entries`). A snapshot at an older batch (time travel)
    reads the log files of that batch, whose records the retained files keep (``min_batches_to_retain``); retention
    drops data entries, never a kept record (it stays as an entry of its own). So one query's stream keeps two
    records, however many compactions it went through.

    Example::

        >>> sorted(records_to_keep([CommitRecord(b, "q", b, str(b)) for b in range(5)]))
        [0, 4]
        >>> sorted(records_to_keep([CommitRecord(0, "q", 0, "a"), CommitRecord(4, "q", 4, "b"), CommitRecord(5, "q", 5, "c")]))
        [0, 5]
    """
    keep: set[int] = set()
    previous: CommitRecord | None = None
    for record in records:
        if record.fingerprint:
            keep.add(record.log_batch_id)
        if previous is None or not _same_run(previous, record):
            keep.add(record.log_batch_id)
            if previous is not None:
                keep.add(previous.log_batch_id)
        previous = record
    if previous is not None:
        keep.add(previous.log_batch_id)
    return keep


def attribute(records: Sequence[CommitRecord], batch_ids: Iterable[int]) -> dict[int, CommitRecord]:
    """The commit record of each batch in ``batch_ids``: its own, or inferred inside its run from the
    run's first and last record (a compact file keeps only :func:`records_to_keep`). Batches outside every
    run (committed by Spark's own sink) are left out. Inferred records have an empty ``commit_id``.

    Example::

        >>> attribute([CommitRecord(0, "q", 0, "a"), CommitRecord(4, "q", 4, "b")], [2])[2].query_batch_id
        2
    """
    ordered = sorted(records, key=lambda r: r.log_batch_id)
    starts = [r.log_batch_id for r in ordered]
    result: dict[int, CommitRecord] = {}
    for batch_id in batch_ids:
        index = bisect.bisect_right(starts, batch_id) - 1
        if index < 0:
            continue
        before = ordered[index]
        if before.log_batch_id == batch_id:
            result[batch_id] = before
        elif index + 1 < len(ordered) and _same_run(before, ordered[index + 1]):
            offset = batch_id - before.log_batch_id
            result[batch_id] = CommitRecord(batch_id, before.query_id, before.query_batch_id + offset, "")
    return result


def committed_by_spark_sink(records: Sequence[CommitRecord], batch_id: int | None) -> bool:
    """Whether log batch ``batch_id`` was committed by Spark's own file sink: it carries no commit record of ours
    (its own, or one inferred inside its run by :func:`attribute`, as a compact file keeps only the ends of each
    run), whatever it holds. Every batch of ours carries one (a batch without files on an entry of its own), so a
    batch without one is Spark's, files or none: a log file with only the version line (an empty micro-batch, or a
    partitioned query's batch with no rows), or a compact file Spark wrote (it keeps no key of ours). False for None
    (an empty log). ``records``: those of a log snapshot (:func:`records_of`), or each writer's newest (the newest
    batch, when it is ours, is the newest record of its writer). Pure: every writer and ``doctor`` decide with it.

    Example::

        >>> committed_by_spark_sink([CommitRecord(0, "q", 0, "a"), CommitRecord(4, "q", 4, "b")], 5)
        True
        >>> committed_by_spark_sink([CommitRecord(0, "q", 0, "a"), CommitRecord(4, "q", 4, "b")], 2)
        False
    """
    return batch_id is not None and batch_id >= 0 and batch_id not in attribute(records, [batch_id])
