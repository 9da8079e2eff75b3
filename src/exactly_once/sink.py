"""``ParquetSink``: the exactly-once ``foreachBatch`` sink (the counterpart of Spark's ``FileStreamSink``).

Per micro-batch: decide from the log whether the batch is new, a replay, or another query's; check the
schema; write Parquet on the executors (:mod:`exactly_once.writer`); then commit every file of the
batch at once with :meth:`MetadataLog.add` (atomic, exclusive). A batch is visible to readers exactly
when its log file exists.

Each commit carries one *commit record*: an entry Spark skips (``isDir: true``, size 0, pointing at the
log directory) whose extra keys name the streaming query, the query's own batch id and a unique commit
id. It makes replays idempotent per query, lets a second query be told apart from a replay, and makes
every commit payload unique (for lost-acknowledgement read-back on object stores).
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from .dependencies import require_sink_dependencies
from .errors import CommitConflictError, ForeignQueryError, LogError, OutputResetError, SchemaMismatchError
from .failpoints import failpoint
from .metadata_log import LogEntry, MetadataLog
from .partitioning import parse_partition_path
from .storage import Storage
from .writer import STATUS_SCHEMA, WriteSpec, codec_extension, write_task

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

logger = logging.getLogger(__name__)

QUERY_ID_KEY = "queryId"
QUERY_BATCH_KEY = "queryBatchId"
COMMIT_ID_KEY = "commitId"


@dataclass(frozen=True)
class CommitRecord:
    """Who committed a log batch: the streaming query id and that query's own batch id."""

    log_batch_id: int
    query_id: str | None
    query_batch_id: int
    commit_id: str

    def to_entry(self, storage: Storage, now_ms: int) -> LogEntry:
        return LogEntry(
            storage.to_uri(storage.join("_spark_metadata")),
            0,
            True,
            now_ms,
            0,
            0,
            "add",
            self.log_batch_id,
            {QUERY_ID_KEY: self.query_id, QUERY_BATCH_KEY: self.query_batch_id, COMMIT_ID_KEY: self.commit_id},
        )

    @classmethod
    def from_entry(cls, entry: LogEntry) -> CommitRecord | None:
        """The record carried by ``entry``, or None for a data file entry (or a Spark-written log)."""
        if not entry.is_dir or COMMIT_ID_KEY not in entry.extra or entry.batch_id is None:
            return None
        extra = entry.extra
        return cls(entry.batch_id, extra.get(QUERY_ID_KEY), int(extra[QUERY_BATCH_KEY]), str(extra[COMMIT_ID_KEY]))


@dataclass
class BatchProgress:
    """Figures of one ``foreachBatch`` call, also logged at INFO."""

    batch_id: int
    log_batch_id: int | None
    query_id: str | None
    skipped: bool = False
    rows: int = 0
    files: int = 0
    bytes: int = 0
    write_seconds: float = 0.0
    commit_seconds: float = 0.0


@dataclass
class _OutputState:
    """What the driver knows about the output: latest log batch, last commit per query, schema."""

    latest: int  # -1 for an empty log
    queries: dict[str | None, CommitRecord] = field(default_factory=dict)
    schema: pa.Schema | None = None
    partition_columns: tuple[str, ...] | None = None


def _normalise(typ: pa.DataType) -> pa.DataType:
    if pa.types.is_large_string(typ):
        return pa.string()
    if pa.types.is_large_binary(typ):
        return pa.binary()
    if pa.types.is_timestamp(typ):
        return pa.timestamp(typ.unit)
    if pa.types.is_large_list(typ) or pa.types.is_list(typ):
        return pa.list_(_normalise(typ.value_type))
    return typ


class ParquetSink:
    """Exactly-once Parquet output for ``df.writeStream.foreachBatch``, readable by Spark's own
    ``spark.read.parquet(path)`` and by :func:`exactly_once.read_committed`.

    Args:
        path: output directory, any fsspec URL (local path, ``abfs://container/dir``, ``s3://bucket/dir``).
        partition_by: Hive partition columns (``k=v/`` directories, escaped like Spark).
        compact_interval, retention: as Spark's file sink (``spark.sql.streaming.fileSink.log.compactInterval``
            and the ``retention`` option).
        storage_options: fsspec options (credentials); never logged or written to the log.
        compression: Parquet codec (snappy, zstd, gzip, lz4, brotli, none).
        max_records_per_file: roll over to a new file after this many rows (Spark's ``maxRecordsPerFile``).
        on_foreign_query: what to do when another query's batches (a new checkpoint) are already in the
            log: ``"error"`` (default) raises :class:`ForeignQueryError`; ``"append"`` commits this query's
            batches after the latest log batch, staying idempotent across this query's restarts.
        min_batches_to_retain, cleanup_delay: Spark's log cleanup rule.

    Example::

        >>> sink = ParquetSink("/data/events", partition_by=["day"])
        >>> query = (df.writeStream.foreachBatch(sink)
        ...          .option("checkpointLocation", "/data/_checkpoints/events").start())
        >>> sink.last_progress.rows
        1000
    """

    def __init__(
        self,
        path: str,
        *,
        partition_by: list[str] | tuple[str, ...] | None = None,
        compact_interval: int = 10,
        retention: str | None = None,
        storage_options: dict[str, Any] | None = None,
        compression: str = "snappy",
        max_records_per_file: int | None = None,
        on_foreign_query: Literal["error", "append"] = "error",
        min_batches_to_retain: int = 100,
        cleanup_delay: str = "10m",
    ) -> None:
        require_sink_dependencies()
        if on_foreign_query not in ("error", "append"):
            raise ValueError(f"on_foreign_query must be 'error' or 'append', got {on_foreign_query!r}")
        codec_extension(compression)  # validate early
        self.path = path
        self.partition_by = tuple(partition_by or ())
        self.compact_interval = compact_interval
        self.retention = retention
        self.storage_options = dict(storage_options or {})
        self.compression = compression
        self.max_records_per_file = max_records_per_file
        self.on_foreign_query = on_foreign_query
        self.min_batches_to_retain = min_batches_to_retain
        self.cleanup_delay = cleanup_delay
        self.last_progress: BatchProgress | None = None
        self._state: _OutputState | None = None
        self._metadata_log: MetadataLog | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_state"] = state["_metadata_log"] = None  # driver caches, rebuilt on first use
        return state

    def __repr__(self) -> str:
        return f"ParquetSink({self.path!r}, partition_by={list(self.partition_by)})"

    @property
    def log(self) -> MetadataLog:
        if self._metadata_log is None:
            self._metadata_log = MetadataLog(
                self.path,
                self.storage_options,
                compact_interval=self.compact_interval,
                retention=self.retention,
                min_batches_to_retain=self.min_batches_to_retain,
                cleanup_delay=self.cleanup_delay,
            )
        return self._metadata_log

    # -- the foreachBatch entry point ---------------------------------------------------------------

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Write and commit one micro-batch (called by Spark with the batch DataFrame and its id)."""
        query_id = _query_id(df)
        state = self._refresh_state()
        target = self._target_batch(state, query_id, batch_id)
        progress = BatchProgress(batch_id, target, query_id, skipped=target is None)
        if target is None:
            logger.info(
                "%s: skipping batch %d of query %s: already committed (log batch %d)",
                self, batch_id, query_id, state.queries[query_id].log_batch_id,
            )
            self.last_progress = progress
            return
        self._check_schema(state, df, target)
        failpoint("before_write")
        started = time.monotonic()
        spec = WriteSpec(self.log.storage, self.partition_by, self.compression, self.max_records_per_file)
        statuses = df.mapInArrow(functools.partial(write_task, spec), STATUS_SCHEMA).collect()
        progress.write_seconds = time.monotonic() - started
        failpoint("before_commit")

        started = time.monotonic()
        record = CommitRecord(target, query_id, batch_id, uuid.uuid4().hex)
        storage = self.log.storage
        entries = [record.to_entry(storage, int(time.time() * 1000))]
        entries += [LogEntry(storage.to_uri(s.path), s.size, False, s.modification_time) for s in statuses]
        self._commit(target, entries, query_id, batch_id)
        failpoint("after_commit")
        progress.commit_seconds = time.monotonic() - started
        state.latest = target
        state.queries[query_id] = record
        progress.rows = sum(s.num_rows for s in statuses)
        progress.files = len(statuses)
        progress.bytes = sum(s.size for s in statuses)
        self.last_progress = progress
        logger.info(
            "%s: committed batch %d of query %s as log batch %d: %d rows, %d files, %d bytes, "
            "write %.3fs, commit %.3fs",
            self, batch_id, query_id, target, progress.rows, progress.files, progress.bytes,
            progress.write_seconds, progress.commit_seconds,
        )

    def _commit(self, target: int, entries: list[LogEntry], query_id: str | None, batch_id: int) -> None:
        committed = self.log.add(target, entries)
        if not committed:
            self._state = None  # another writer moved the log: re-read it next time
            raise CommitConflictError(
                f"batch {batch_id} of query {query_id} could not be committed to "
                f"{self.log.display(self.log.log_dir)} as log batch {target}: another writer committed it "
                "first. Two streaming queries are writing this output at once; stop one of them (its data "
                "files of this batch are not committed and `exactly-once vacuum` removes them)."
            )

    # -- decisions ---------------------------------------------------------------------------------

    def _refresh_state(self) -> _OutputState:
        """Load the output state once, then only read the log batches committed since."""
        log = self.log
        latest = log.latest_batch_id()
        latest = -1 if latest is None else latest
        if self._state is None:
            self._state = _OutputState(-1)
            entries = log.iter_snapshot(latest) if latest >= 0 else iter(())
        elif latest > self._state.latest:
            entries = (e for b in range(self._state.latest + 1, latest + 1) for e in log.get(b) or ())
        else:
            entries = iter(())
        state = self._state
        last_data = None
        for entry in entries:
            record = CommitRecord.from_entry(entry)
            if record is not None:
                state.queries[record.query_id] = record
            elif not entry.is_dir and entry.size > 0:
                last_data = entry
        if last_data is not None:
            self._read_committed_schema(state, last_data)
        state.latest = latest
        return state

    def _read_committed_schema(self, state: _OutputState, entry: LogEntry) -> None:
        storage = self.log.storage
        path = storage.from_uri(entry.path)
        relative = path[len(storage.root) + 1 :] if path.startswith(storage.root + "/") else path.rsplit("/", 1)[-1]
        try:
            with storage.open(path, "rb") as fh:
                state.schema = pq.read_schema(fh)
        except FileNotFoundError:
            return  # a missing file is the reader's and `verify`'s to report; keep the previous schema
        state.partition_columns = tuple(name for name, _ in parse_partition_path(relative))

    def _target_batch(self, state: _OutputState, query_id: str | None, batch_id: int) -> int | None:
        """The log batch id to commit to, or None when this query already committed ``batch_id``."""
        action, log_batch = decide_batch(
            state.latest, state.queries, query_id, batch_id, self.on_foreign_query == "append"
        )
        if action == "foreign":
            owner = self._owner(min(batch_id, state.latest))
            raise ForeignQueryError(
                f"batch {batch_id} of query {query_id} cannot go into {self.log.display(self.log.log_dir)}: its "
                f"batches up to {state.latest} were committed by "
                f"{'query ' + str(owner) if owner else 'another writer (e.g. Spark’s own file sink)'}. "
                "This is a new checkpoint on an old output; skipping would silently lose this query's data. "
                "Resume the original checkpoint, write to a new output path, or pass "
                "ParquetSink(..., on_foreign_query='append') to append after the latest batch "
                f"({state.latest})."
            )
        if action == "reset":
            raise OutputResetError(
                f"batch {batch_id} of query {query_id} would leave a gap in {self.log.display(self.log.log_dir)}: "
                f"its newest batch is {state.latest}, so batches {state.latest + 1}..{batch_id - 1} that Spark's "
                "checkpoint says are done are missing (the output was deleted or reset). Restore the output, "
                "or start a new checkpoint; ParquetSink(..., on_foreign_query='append') appends anyway."
            )
        return log_batch if action == "commit" else None

    def _owner(self, log_batch_id: int) -> str | None:
        try:
            entries = self.log.get(log_batch_id) or []
        except LogError:
            return None
        records = (CommitRecord.from_entry(e) for e in entries)
        return next((r.query_id for r in records if r and r.log_batch_id == log_batch_id), None)

    def _check_schema(self, state: _OutputState, df: DataFrame, target: int) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        missing = [c for c in self.partition_by if c not in df.columns]
        if missing:
            raise SchemaMismatchError(
                f"batch for log batch {target} of {self.path}: partition columns {missing} are not in the "
                f"batch's columns {df.columns}. Fix partition_by or the query."
            )
        incoming = to_arrow_schema(df.schema, timezone="UTC")  # time zones are not compared
        data_schema = pa.schema([f for f in incoming if f.name not in self.partition_by])
        if state.schema is None:
            state.schema, state.partition_columns = data_schema, self.partition_by
            return
        problems = []
        if state.partition_columns is not None and state.partition_columns != self.partition_by:
            problems.append(
                f"partition columns {list(self.partition_by)} differ from the committed {list(state.partition_columns)}"
            )
        new_fields = {f.name: f for f in data_schema}
        for old in state.schema:
            new = new_fields.get(old.name)
            if new is None:
                problems.append(f"column {old.name!r} ({old.type}) is missing")
            elif _normalise(new.type) != _normalise(old.type):
                problems.append(f"column {old.name!r} changed type from {old.type} to {new.type}")
        added = [f for f in data_schema if f.name not in state.schema.names]
        problems += [f"new column {f.name!r} is not nullable" for f in added if not f.nullable]
        if problems:
            raise SchemaMismatchError(
                f"batch for log batch {target} of {self.path} is incompatible with the committed data: "
                + "; ".join(problems)
                + ". Nothing was written. Only new nullable columns may be added; write incompatible data to a "
                "new output path (or cast the columns back to the committed types)."
            )
        if added:
            logger.info("%s: schema evolves with new nullable columns %s", self, [f.name for f in added])
            state.schema = data_schema


Action = Literal["commit", "skip", "foreign", "reset"]


def decide_batch(
    latest: int,
    queries: Mapping[str | None, CommitRecord],
    query_id: str | None,
    batch_id: int,
    append: bool = False,
) -> tuple[Action, int | None]:
    """What the sink does with batch ``batch_id`` of query ``query_id``, given the newest log batch
    ``latest`` (-1 when empty) and the last commit record of each query: ``("commit", log batch)``,
    ``("skip", log batch holding it)``, ``("foreign", None)`` (ForeignQueryError: the log belongs to
    another query) or ``("reset", None)`` (OutputResetError: the checkpoint is ahead of the log).
    ``append`` is ``on_foreign_query="append"``. Pure, so ``exactly-once doctor`` predicts with it.

    Example::

        >>> decide_batch(-1, {}, "q1", 0)
        ('commit', 0)
        >>> decide_batch(4, {}, "q1", 0)
        ('foreign', None)
    """
    own = queries.get(query_id)
    if own is not None and batch_id <= own.query_batch_id:
        return "skip", own.log_batch_id
    if append and latest >= 0:
        return "commit", latest + 1
    if batch_id <= latest or (own is None and queries and latest >= 0):
        return "foreign", None
    if batch_id > latest + 1:
        return "reset", None
    return "commit", batch_id


def _query_id(df: DataFrame) -> str | None:
    """The running streaming query's id (stable across restarts from one checkpoint)."""
    try:
        return df.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
    except Exception:  # Spark Connect has no SparkContext on the client side
        logger.warning("no streaming query id available: replays are detected by batch id only")
        return None
