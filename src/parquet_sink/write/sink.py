"""``ParquetSink``: the exactly-once ``foreachBatch`` sink (the counterpart of Spark's ``FileStreamSink``).

Per micro-batch: decide from the log whether the batch is new, a replay, or another query's; check the
schema; take the batch's lease (:mod:`parquet_sink.write.inflight`); write Parquet, either with Spark's own
writer into a hidden staging directory and an atomic rename of each file into place
(:mod:`parquet_sink.write.spark_staging`, stores with atomic renames), with Spark's own writer in place through the
session's Hadoop filesystem (:mod:`parquet_sink.write.spark_in_place`, object stores, ``writer="spark"``), or with
pyarrow on the executors (:mod:`parquet_sink.write.parquet_files`); then commit every file of the batch at once with :meth:`MetadataLog.add`
(atomic, exclusive; a race lost to another writer's append moves it to the next log batch, as Delta's
optimistic transactions do: :mod:`parquet_sink.write.conflicts`) and drop the lease. A batch is visible to
readers exactly when its log file exists. The log directory exists before the output's first data file
(:func:`~parquet_sink.write.inflight.start_output`), as with Spark's sink.

Each commit carries one *commit record*: the batch's first log entry, one of its own that Spark skips, named
after the record (so that it survives a compaction by Spark's own sink: :mod:`parquet_sink.log.entry`), naming
the streaming query, the query's own batch id and a unique commit id. It makes replays idempotent per query, lets a second query be told
apart from a replay, and makes every commit payload unique (for lost-acknowledgement read-back on object
stores).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as _dt
import json
import logging
import os
import re
import time
import warnings
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, cast

import pyarrow as pa

from ..delta.sync import DELTA, require_deltalake, sync_after_commit
from ..iceberg import follow as iceberg_follow
from ..table_formats import refuse_before_commit
from .rewrite import DEFAULT_TARGET_FILE_SIZE, BackgroundOptimizer, parse_file_size
from .dependencies import require_sink_dependencies
from ..errors import (
    checks_keywords,
    CommitConflictError,
    ForeignQueryError,
    LogError,
    MissingLogFileError,
    OutputResetError,
    ParameterError,
    ParquetSinkError,
    QueryIdentityError,
    SchemaMismatchError,
    SinkUsageError,
    SparkSinkBatchError,
    TemporaryCheckpointWarning,
    call_text,
    original_error,
    parameters_of,
)
from ..failpoints import failpoint
from .conflicts import (
    Conflict, Transaction, check_commit, spark_sink_refusal, spark_sink_window, winning_commits,
)
from .inflight import InFlightBatch, refuse_missing_files, start_output
from .jvm import per_context
from .manifest_write import COMMIT_PROTOCOL, DEFAULT_COMMIT_PROTOCOL, unloadable_commit_protocol
from ..log.snapshot import data_files, read_log_files
from ..read.history import OPTIMIZE_APP_ID, newest_commit_time, next_commit_time
from ..log.compaction import (
    DEFAULT_COMPACT_INTERVAL, LogOptions, LogSettings, check_flags, check_positive_int, parse_duration_ms,
)
from ..log.files import check_output_root, is_compact_path
from ..log.metadata_log import LogEntry, MetadataLog
from .schema import check_batch_schema, check_partition_by, read_committed_schema
from ..log.entry import BATCH_KEY, ENTRY_SCHEMA, CommitRecord, attribute, committed_by_spark_sink, records_of
from .spark_in_place import in_place_problem, write_in_place
from .spark_staging import publish, refuse_nul_partition_values, write_staged
from .spark_versions import arrow_schema, arrow_type, parse_refusals, type_refusals, unparsable_columns
from ..storage.filesystem import Storage
from .parquet_files import WriteSpec, log_entry, parquet_codec, stored_type, write_files, write_schema_file

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

logger = logging.getLogger(__name__)

_TEMPORARY = re.compile(r"/temporary-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/?$")  # Spark's
SESSION_COMPACT_INTERVAL = "spark.sql.streaming.fileSink.log.compactInterval"  # Spark's sink's interval
SESSION_MIN_BATCHES = "spark.sql.streaming.minBatchesToRetain"  # Spark's sink's log cleanup rule
SESSION_CLEANUP_DELAY = "spark.sql.streaming.fileSink.log.cleanupDelay"
SESSION_LOG_DELETION = "spark.sql.streaming.fileSink.log.deletion"
SESSION_CODEC = "spark.sql.parquet.compression.codec"  # Spark's writer's codec when the write gives none
RECENT_PROGRESS = 100  # batches kept in ParquetSink.recent_progress (Spark keeps 100 in query.recentProgress)
MAX_COMMIT_ATTEMPTS = 100  # commit races a batch may lose in a row to other writers' appends


@dataclass
class BatchProgress:
    """Figures of one ``foreachBatch`` call, also logged at INFO (``parquet_sink.write.sink``)."""

    batch_id: int
    log_batch_id: int | None
    query_id: str | None
    timestamp: _dt.datetime = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc))  # when the call began
    skipped: bool = False
    rows: int = 0
    files: int = 0
    bytes: int = 0
    write_seconds: float = 0.0  # writing the batch's files, publishing included
    publish_seconds: float = 0.0  # Spark writer path: footers, fsync and renames out of staging
    commit_seconds: float = 0.0
    conflicts: int = 0  # commit races lost to other writers (the batch moved to a later log batch each time)


@dataclass
class _OutputState:
    """What the driver knows about the output: latest log batch, last commit per query, schema."""

    latest: int  # -1 for an empty log
    queries: dict[str | None, CommitRecord] = field(default_factory=dict)
    schema: pa.Schema | None = None
    partition_columns: tuple[str, ...] | None = None
    newest_commit_ms: int | None = None  # the newest commit time in the log (commit times only increase)


class ParquetSink:
    """Exactly-once Parquet output for ``df.writeStream.foreachBatch``, readable by Spark's own
    ``spark.read.parquet(path)`` and by :func:`parquet_sink.read_committed`.

    Args:
        path: output directory, any fsspec URL (local path, ``abfs://container/dir``, ``s3://bucket/dir``).
        partition_by: Hive partition columns (``k=v/`` directories, escaped like Spark).
        compact_interval, retention, min_batches_to_retain, cleanup_delay: the output's log settings, as Spark's
            file sink's (``spark.sql.streaming.fileSink.log.compactInterval``, the ``retention`` option, Spark's log
            cleanup rule). The output's first commit records them; None (the default) applies the recorded ones (an
            output without a record: the session's compact interval, ``minBatchesToRetain`` and
            ``fileSink.log.cleanupDelay``, else Spark's defaults, 10, none, 100, ``"10m"``); one that contradicts them is refused with :class:`OutputSettingsError` at the first batch,
            nothing written. Its ``optimize_every`` optimize, ``write_batch`` and ``optimize`` apply the same ones.
        storage_options: fsspec options (credentials); never logged or written to the log.
        compression: Parquet codec, Spark's names: snappy, zstd, gzip, lz4_raw, brotli, none (or uncompressed);
            files get Spark's extensions (``.snappy.parquet``). ``lzo`` and Spark's ``lz4`` (Hadoop-framed)
            are refused: pyarrow cannot write them. None (the default): the session's
            ``spark.sql.parquet.compression.codec`` (Spark's default snappy), as Spark's sink writes.
        max_records_per_file: roll over to a new file after this many rows (Spark's ``maxRecordsPerFile``;
            None for no limit).
        on_foreign_query: what to do when, at this query's first batch, other writers' batches (a new
            checkpoint on an old output?) are already in the log: ``"error"`` (default) raises
            :class:`ForeignQueryError`; ``"append"`` commits this query's batches after the latest log batch,
            staying idempotent across this query's restarts. A query that has committed to the output goes on
            after other writers' appends either way, and a commit race lost to them moves its batch to the next
            log batch (:mod:`parquet_sink.write.conflicts`).
        writer: who writes the Parquet files. ``"spark"``: Spark's own Parquet writer, as Spark's file sink
            writes: on a store with atomic renames (local disk) into a hidden staging directory, then an atomic
            rename of each file into place; on an object store straight to the final names through the session's
            Hadoop filesystem for it (S3A for ``s3://``, ABFS for ``abfs://``: classic PySpark whose
            configuration reaches the same store as ``storage_options``; checked at the first batch, which
            otherwise fails with :class:`SinkUsageError` before writing). ``"arrow"``: pyarrow in ``mapInArrow``
            tasks, straight to the final names (any store, Spark Connect too). ``"auto"`` (default): ``"spark"``
            on local disk, ``"arrow"`` on an object store (on moto 0.85x Spark's sink time unpartitioned against
            0.95x in place, partitioned 0.68x against 1.03x: docs/performance.md).
        checkpoint_location: the query's ``checkpointLocation`` (any fsspec or Hadoop URL, read with
            ``storage_options``). The sink takes the query id from ``<checkpoint>/metadata``, which Spark
            writes before batch 0; on classic PySpark it must equal the running query's id. Required under
            Spark Connect, where the sink cannot see the query id otherwise.
        allow_batch_id_only: under Spark Connect without ``checkpoint_location``, accept telling replays
            apart by batch id only: a new checkpoint on an old output then has its first batches skipped as
            replays (data loss). Without it the sink refuses with :class:`QueryIdentityError`.
        allow_existing_files: write into a directory that holds Parquet files but no log yet (an existing
            dataset, whose files every reader then hides). Without it the first batch refuses with
            :class:`ExistingDataError`.
        delta_log: after each batch's commit (and on a replay), bring the output's Delta log (``_delta_log``)
            in step with the log on the driver (:func:`~parquet_sink.sync_delta_log`), so every Delta reader
            reads exactly the committed files; a failure of that commit is logged, never raised, and the next
            batch catches up. Needs ``pip install "parquet-sink[delta]"``. A batch no Delta log can hold (a date
            or timestamp outside 0001..9999) is refused before its commit on an output that keeps one, with or
            without this flag (:class:`~parquet_sink.delta.DeltaRangeError`, its files deleted).
        iceberg: after each batch's commit (and on a replay), bring the output's Iceberg table in step with the
            log on the driver (:func:`~parquet_sink.sync_iceberg`), so every Iceberg reader reads exactly the
            committed files; a failure is logged, never raised, and the next batch catches up. True: the table's
            metadata alone, with the output (``sync_iceberg(path).metadata_location`` opens it);
            ``{"catalog": ..., "table": "ns.name"}``: the table in that catalog (a pyiceberg ``Catalog`` or its
            properties, such as ``{"type": "sql", "uri": "sqlite:///catalog.db"}``: properties pickle, for Spark
            Connect). Needs ``pip install "parquet-sink[iceberg]"``. A batch no Iceberg table can hold (a type
            Iceberg lacks, a date or timestamp outside 0001..9999) is refused before its commit on an output that
            keeps one, with or without this argument (:class:`~parquet_sink.iceberg.IcebergRefusalError`, its
            files deleted).
        optimize_every, target_file_size: after every ``optimize_every``-th batch of the stream, compact the
            output's small files into files near ``target_file_size`` (bytes or ``"128MB"``) on a driver thread,
            off the batch's critical path (:class:`~parquet_sink.write.rewrite.BackgroundOptimizer`, reachable as
            ``sink.optimizer``: its ``last`` result, its ``error``, ``wait()``); it never fails the query. The
            Delta log (``delta_log``) and the Iceberg table (``iceberg``) follow its swap.
        spark_sink_stopped: the query of Spark's own file sink (``writeStream.format("parquet")``) that committed
            the output's newest log batch is stopped for good. Without it a batch that would commit after such a
            batch (``on_foreign_query="append"``, or a query continuing beside that sink) is refused with
            :class:`SparkSinkBatchError`, nothing written: that query skips every batch id the log holds, so it
            would lose its next batch. The query Spark's sink ran, moved to this sink with its checkpoint, needs no
            flag (its next batch id is the log's next batch). Also for ``optimize_every``'s optimize.
        check_storage: check at construction that the store answers (StorageError within seconds otherwise).
            Pass False where this process cannot reach the store but the query's driver can (a Spark Connect
            client on another network): the driver then checks at the first batch.

    Raises:
        ParameterError: (a ValueError) a parameter out of range (named in the message), at construction.
        StorageError: the store cannot be reached (within ``$PARQUET_SINK_CONNECT_TIMEOUT``, 10 s), at construction.

    Example::

        >>> sink = ParquetSink("/data/events", partition_by=["day"])
        >>> query = (df.writeStream.foreachBatch(sink)
        ...          .option("checkpointLocation", "/data/_checkpoints/events").start())
        >>> sink.last_progress.rows
        1000
        >>> # Spark Connect: name the checkpoint, the query id is read from it
        >>> sink = ParquetSink("/data/events", checkpoint_location="/data/_checkpoints/events")
    """

    @checks_keywords
    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        partition_by: list[str] | tuple[str, ...] | None = None,
        compact_interval: int | None = None,
        retention: str | _dt.timedelta | None = None,
        storage_options: dict[str, Any] | None = None,
        compression: str | None = None,
        max_records_per_file: int | None = None,
        on_foreign_query: Literal["error", "append"] = "error",
        min_batches_to_retain: int | None = None,
        cleanup_delay: str | _dt.timedelta | None = None,
        checkpoint_location: str | None = None,
        allow_batch_id_only: bool = False,
        writer: Literal["auto", "spark", "arrow"] = "auto",
        allow_existing_files: bool = False,
        delta_log: bool = False,
        iceberg: bool | Mapping[str, Any] | None = None,
        check_storage: bool = True,
        optimize_every: int | None = None,
        target_file_size: int | str = DEFAULT_TARGET_FILE_SIZE,
        spark_sink_stopped: bool = False,
    ) -> None:
        require_sink_dependencies()
        call = call_text("ParquetSink", path)
        with parameters_of(call):  # the checks name the argument; this names the output
            check_flags(allow_batch_id_only=allow_batch_id_only, allow_existing_files=allow_existing_files,
                        delta_log=delta_log, check_storage=check_storage, spark_sink_stopped=spark_sink_stopped)
            partition_by = check_partition_by(partition_by)  # once: an iterator is read once
            parse_file_size(target_file_size)  # checked whether or not optimize_every asks for it yet
            if delta_log:
                require_deltalake(f"ParquetSink({path!r}, delta_log=True)")
            self.iceberg = iceberg_follow.iceberg_target(iceberg, call)
            _check_parameters(
                partition_by=partition_by,
                compact_interval=compact_interval,
                retention=retention,
                max_records_per_file=max_records_per_file,
                on_foreign_query=on_foreign_query,
                min_batches_to_retain=min_batches_to_retain,
                cleanup_delay=cleanup_delay,
                checkpoint_location=checkpoint_location,
                writer=writer,
            )
            storage = Storage(path, storage_options)
            check_output_root(path, storage, call)
            storage.require_shared("ParquetSink")
        if check_storage:
            storage.check_reachable()  # a wrong account name or endpoint fails here, not at batch 0
        self.path = os.fspath(path)
        self.partition_by = partition_by
        self.compact_interval = compact_interval
        self.retention = retention
        self.storage_options = dict(storage_options or {})
        self.compression = None if compression is None else parquet_codec(compression)  # None: the session's
        self.max_records_per_file = max_records_per_file
        self.on_foreign_query = on_foreign_query
        self.min_batches_to_retain = min_batches_to_retain
        self.cleanup_delay = cleanup_delay
        self.checkpoint_location = checkpoint_location
        self.allow_batch_id_only = allow_batch_id_only
        self.writer = writer
        self.allow_existing_files = allow_existing_files
        self.delta_log = delta_log
        self.spark_sink_stopped = spark_sink_stopped
        self.optimizer = None if optimize_every is None else BackgroundOptimizer(
            self.path, self.storage_options, every=optimize_every, target_file_size=target_file_size,
            compression=self.compression or "snappy", delta_log=delta_log, spark_sink_stopped=spark_sink_stopped,
            iceberg=iceberg or False, log_options={
                "compact_interval": compact_interval, "retention": retention,
                "min_batches_to_retain": min_batches_to_retain, "cleanup_delay": cleanup_delay,
            },
        )
        self._recent: collections.deque[BatchProgress] = collections.deque(maxlen=RECENT_PROGRESS)
        self._state: _OutputState | None = None
        self._metadata_log: MetadataLog | None = None
        self._checkpoints: dict[str | None, str | None] = {}  # query id -> its temporary checkpoint, if any
        self._warned: set[str | None] = set()
        self._in_place: dict[Any, str | None] = {}  # SparkContext -> why Spark's writer cannot write in place (None: it can)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_state"] = state["_metadata_log"] = None  # driver caches, rebuilt on first use
        state["_in_place"] = {}
        return state

    def _get_object_id(self) -> str:
        """py4j asks this of an object passed to a JVM method: only a misuse such as
        ``writeStream.format(sink)`` passes the sink there (classic PySpark)."""
        raise SinkUsageError(
            f"{self} was passed to a Spark method that takes a name or a JVM object (writeStream.format?). "
            "The sink is a function for df.writeStream.foreachBatch(sink)."
        )

    @property
    def last_progress(self) -> BatchProgress | None:
        """The figures of the newest ``foreachBatch`` call in this process (None before the first).

        Example: ``sink.last_progress.rows`` -> ``1000``.
        """
        return self._recent[-1] if self._recent else None

    @property
    def recent_progress(self) -> list[BatchProgress]:
        """The figures of the last :data:`RECENT_PROGRESS` calls in this process, oldest first, each with its
        ``timestamp`` (like Spark's ``query.recentProgress``). Under Spark Connect the sink runs in the server's
        Python process: read :func:`parquet_sink.history` there instead.

        Example: ``[(p.batch_id, p.rows, p.timestamp) for p in sink.recent_progress[-3:]]``.
        """
        return list(self._recent)

    def __repr__(self) -> str:
        return f"ParquetSink({self.path!r}, partition_by={list(self.partition_by)})"

    @property
    def log(self) -> MetadataLog:
        return self._log_for(None)

    def _log_for(self, df: DataFrame | None) -> MetadataLog:
        """The output's log, made at the first batch: a new log's compact interval, when none is given, is the
        session's ``spark.sql.streaming.fileSink.log.compactInterval``, as Spark's sink takes it (so Spark's reader
        in that session reads the output), else 10; likewise ``spark.sql.streaming.minBatchesToRetain`` and
        ``spark.sql.streaming.fileSink.log.cleanupDelay`` (recorded with a new output), and
        ``spark.sql.streaming.fileSink.log.deletion=false`` keeps every log file, as Spark's sink does."""
        if self._metadata_log is None:
            interval = None if df is None or self.compact_interval is not None else _session_interval(df, self)
            defaults, deletion = (LogSettings(), True) if df is None else _session_log_settings(df, self)
            self._metadata_log = MetadataLog(
                self.path,
                storage_options=self.storage_options,
                compact_interval=self.compact_interval,
                retention=self.retention,
                min_batches_to_retain=self.min_batches_to_retain,
                cleanup_delay=self.cleanup_delay,
                cleanup=deletion,
                default_interval=interval or DEFAULT_COMPACT_INTERVAL,
                defaults=defaults,
            )
        return self._metadata_log

    # -- the foreachBatch entry point ---------------------------------------------------------------

    def __call__(self, df: DataFrame, batch_id: int | None = None) -> None:
        """Write and commit one micro-batch (called by Spark with the batch DataFrame and its id)."""
        if batch_id is None or not hasattr(df, "sparkSession"):
            raise SinkUsageError(
                f"{self} was called with {type(df).__name__}{' and no batch id' if batch_id is None else ''}: it "
                "takes a whole micro-batch. Use df.writeStream.foreachBatch(sink), not .foreach(sink) (one row) or "
                ".format(sink) (a source name). Nothing was written."
            )
        try:
            self._write_and_commit(df, batch_id)
        except BaseException as exc:
            # a failed batch leaves no trace: what it changed of the cached view of the output (the schema it
            # brought) is read again from the log by the next call, as a new sink object would
            self._state = None
            typed = self._typed_failure(df, batch_id, exc) if isinstance(exc, Exception) else None
            if typed is not None:
                raise typed from exc
            raise

    def _typed_failure(self, df: DataFrame, batch_id: int, exc: Exception) -> ParquetSinkError | None:
        """The typed error a failed batch's Spark or py4j error ``exc`` stands for, naming the output and the batch;
        None when it is none of these (or already typed). Asked only once the write failed: no round trip and no
        Spark job on a batch's path."""
        if isinstance(exc, ParquetSinkError):
            return None
        what = f"{self}, batch {batch_id}"
        raised = original_error(exc)  # this package's error raised in an executor (the Arrow path's tasks)
        if raised is not None:
            return type(raised)(f"{what}: {raised}")
        protocol = unloadable_commit_protocol(df, exc)
        if protocol is not None:
            return ParameterError(
                f"{what}: the session's {COMMIT_PROTOCOL} names {protocol!r}, a class Spark cannot load "
                "(ClassNotFoundException). Nothing was written or committed. Fix the name or put its JAR on the "
                f"classpath, or unset the setting (Spark's default: {DEFAULT_COMMIT_PROTOCOL}), then restart the query."
            )
        if self.partition_by and "\x00" in str(exc):  # Spark's writer failed on a directory name holding NUL
            try:
                refuse_nul_partition_values(df, self.partition_by)
            except ParameterError as nul:
                return ParameterError(f"{what}: {nul}")
        if _is_streaming(df):  # Spark's AnalysisException
            return SinkUsageError(
                f"{what}: was given a streaming DataFrame, which only a streaming query can run; "
                "nothing was committed. Start the query with df.writeStream.foreachBatch(sink).option("
                "'checkpointLocation', ...).start(): Spark then calls the sink with each micro-batch."
            )
        return None

    def _write_and_commit(self, df: DataFrame, batch_id: int) -> None:
        """The body of :meth:`__call__`: decide, write, commit and report one batch."""
        query_id = self._query_id(df, batch_id)
        self._log_for(df)
        state = self._refresh_state()
        if state.latest < 0 or query_id not in state.queries:
            self._warn_temporary_checkpoint(df, query_id, batch_id)
        target = self._target_batch(state, query_id, batch_id, df)
        progress = BatchProgress(batch_id, target, query_id, skipped=target is None)
        if target is None:
            logger.info(
                "%s: skipping batch %d of query %s: already committed (log batch %d)",
                self, batch_id, query_id, state.queries[query_id].log_batch_id,
            )
            self._recent.append(progress)
            self._sync_mirrors(df, f"batch {batch_id} of query {query_id}")
            return
        # no committed file yet: an empty batch commits a schema-only file, as Spark's sink, so readers get the schema
        schema_file = state.schema is None and not self.partition_by
        data_schema = self._check_schema(state, df, target)
        failpoint("before_write")
        started = time.monotonic()
        record = CommitRecord.new(target, query_id, batch_id)
        storage = self.log.storage
        codec = self.compression or _session_codec(df, self, batch_id)
        if state.latest < 0:
            start_output(self.log, self.allow_existing_files, f"{self}, batch {batch_id}")
        # with a query id the lease lives until the query commits this batch, at whatever log batch a lost
        # commit race moves it to
        batch = InFlightBatch.begin(
            storage, target, record.commit_id, query_id, batch_id, until_committed=query_id is not None
        )
        path = "arrow"
        try:
            path = self._writer_path(df, batch)
            if path == "staged":
                staged = write_staged(
                    df, batch, partition_by=self.partition_by, compression=codec,
                    max_records_per_file=self.max_records_per_file,
                )
                publishing = time.monotonic()
                statuses = publish(batch, staged, schema_file)
                progress.publish_seconds = time.monotonic() - publishing
            elif path == "in_place":
                statuses = write_in_place(
                    df, batch, partition_by=self.partition_by, compression=codec,
                    max_records_per_file=self.max_records_per_file, schema_file=schema_file,
                )
            else:
                spec = WriteSpec(storage, self.partition_by, codec, self.max_records_per_file, _session_zone(df))
                statuses = write_files(df, spec)
            if not statuses and schema_file and path != "staged":
                statuses = write_schema_file(WriteSpec(storage, (), codec, None), _arrow_schema(df))
            progress.write_seconds = time.monotonic() - started
            refuse_before_commit(
                storage, [(s.path, s.size) for s in statuses], data_schema, f"{self}, batch {batch_id}",
                [(DELTA, self.delta_log), (iceberg_follow.ICEBERG, self.iceberg is not None)],
            )
            failpoint("before_commit")

            started = time.monotonic()
            data = [log_entry(storage, s) for s in statuses]
            progress.rows = sum(s.num_rows for s in statuses)
            txn = Transaction(query_id, batch_id, data_schema, self.partition_by)
            record, progress.conflicts = self._commit(record, txn, [s.path for s in statuses], data, progress.rows)
        finally:
            batch.end(staged=path == "staged")
        failpoint("after_commit")
        progress.commit_seconds = time.monotonic() - started
        target = progress.log_batch_id = record.log_batch_id
        progress.files = len(statuses)
        progress.bytes = sum(s.size for s in statuses)
        self._recent.append(progress)
        logger.info(
            "%s: committed batch %d of query %s as log batch %d: %d rows, %d files, %d bytes, "
            "write %.3fs, commit %.3fs",
            self, batch_id, query_id, target, progress.rows, progress.files, progress.bytes,
            progress.write_seconds, progress.commit_seconds,
        )
        self._sync_mirrors(df, f"batch {batch_id} of query {query_id} (log batch {target})")
        if self.optimizer is not None:
            self.optimizer.after_batch(batch_id, codec, _session_zone(df))

    def _sync_mirrors(self, df: DataFrame, what: str) -> None:
        """With ``delta_log`` (``iceberg``): the Delta log (the Iceberg table) follows the commit (never failing
        the batch); timestamp partition directories are in the session time zone."""
        if not self.delta_log and self.iceberg is None:
            return
        time_zone = _session_zone(df)
        if self.delta_log:
            sync_after_commit(self.path, self.storage_options, what, time_zone)
        if self.iceberg is not None:
            iceberg_follow.sync_after_commit(self.path, self.storage_options, self.iceberg, what, time_zone)

    def _writer_path(self, df: DataFrame, batch: InFlightBatch) -> Literal["staged", "in_place", "arrow"]:
        """How this batch is written (``writer`` in the class docstring): Spark's writer into staging on a store
        with atomic renames; on an object store the Arrow path, or with ``writer='spark'`` Spark's writer in place
        where the session can write to the store (checked once per SparkContext, with the batch's lease), else
        :class:`SinkUsageError`, nothing written."""
        if self.writer == "arrow":
            return "arrow"
        if batch.storage.renames_atomically:
            return "staged"
        if self.writer == "auto":
            return "arrow"
        classic = hasattr(df, "_jdf")
        key = df.sparkSession.sparkContext if classic else None
        problem = per_context(
            self._in_place, key, lambda: in_place_problem(df, batch) if classic else "Spark Connect has no JVM to call"
        )
        if problem is None:
            return "in_place"
        remedy = "Use writer='auto' or 'arrow'." if key is None else (
            "Configure the session for the store (e.g. hadoop-aws on the classpath and spark.hadoop.fs.s3a.* "
            "naming the same endpoint and credentials as storage_options), or use writer='auto' or 'arrow'."
        )
        raise SinkUsageError(
            f"{self}, log batch {batch.log_batch_id}: writer='spark' writes {batch.storage.display(batch.storage.root)} "
            f"through the session's Hadoop filesystem, but {problem}. Nothing was written. {remedy}"
        )

    def _query_id(self, df: DataFrame, batch_id: int) -> str | None:
        """This query's identity (stable across restarts from one checkpoint): the id in
        ``<checkpoint_location>/metadata`` (checked against the ``sql.streaming.queryId`` local property
        on classic PySpark), else that local property. None (replays told apart by batch id only) only
        for a direct call outside a streaming query on classic PySpark, or with ``allow_batch_id_only``."""
        connect = type(df).__module__.startswith("pyspark.sql.connect.")
        running = None if connect else df.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
        if self.checkpoint_location is not None:
            storage = Storage(self.checkpoint_location, self.storage_options)
            from_checkpoint = checkpoint_query_id(self.checkpoint_location, self.storage_options)
            if from_checkpoint is None:
                raise QueryIdentityError(
                    f"{self}, batch {batch_id}: checkpoint_location {storage.display(storage.join('metadata'))} "
                    "does not exist, but Spark writes it before a query's first batch: checkpoint_location is not "
                    "this query's checkpointLocation. Pass the same location as .option('checkpointLocation', ...). "
                    "Nothing was written."
                )
            if running is not None and running != from_checkpoint:
                raise QueryIdentityError(
                    f"{self}, batch {batch_id}: the running query is {running} but checkpoint_location "
                    f"{storage.display(storage.root)} belongs to query {from_checkpoint}. Pass this query's "
                    "checkpointLocation as checkpoint_location. Nothing was written."
                )
            return from_checkpoint
        if running is not None:
            return running
        if connect and not self.allow_batch_id_only:
            raise QueryIdentityError(
                f"{self}, batch {batch_id}: under Spark Connect the sink cannot see the streaming query's id, so "
                "it could not tell a new checkpoint on this output from a replay (and would skip the new query's "
                "first batches). "
                "Pass ParquetSink(..., checkpoint_location=<the query's checkpointLocation>), or "
                "allow_batch_id_only=True to accept replay detection by batch id only. Nothing was written."
            )
        logger.warning("%s: no streaming query id: replays are detected by batch id only", self)
        return None

    def _commit(
        self, record: CommitRecord, txn: Transaction, paths: list[str], data: list[LogEntry], rows: int
    ) -> tuple[CommitRecord, int]:
        """Commit ``data`` (the entries of the data files ``paths``) with ``record`` (the driver's state then
        says so); returns the record committed and the commit races lost. A race lost to other writers' appends
        moves the commit to the next log batch, as Delta's optimistic transactions do
        (:mod:`parquet_sink.write.conflicts`); a real conflict, or too many races in a row, is a
        CommitConflictError (or SchemaMismatchError), with nothing committed. Before each attempt the files are
        checked to be there (MissingDataFileError: the log never points at missing data)."""
        log = self.log
        state = self._state
        assert state is not None
        for lost in range(MAX_COMMIT_ATTEMPTS):
            refuse_missing_files(
                log.storage, paths, f"{self}: log batch {record.log_batch_id}",
                "Spark retries the batch when the query restarts",
            )
            commit_ms = next_commit_time(state.newest_commit_ms)
            if log.add(record.log_batch_id, record.log_entries(log.storage, commit_ms, data, rows)):
                state.latest, state.newest_commit_ms = record.log_batch_id, commit_ms
                state.queries[record.query_id] = record
                if data and txn.data_schema is not None:  # the newest committed file is this batch's
                    state.schema, state.partition_columns = txn.data_schema, txn.partition_by
                return record, lost
            read = record.log_batch_id - 1
            state, new = self._catch_up()
            if not self.spark_sink_stopped and committed_by_spark_sink(list(state.queries.values()), state.latest):
                self._state = None
                raise spark_sink_refusal(
                    log.display(log.log_dir), state.latest, f"batch {txn.query_batch_id} of query {txn.query_id}",
                    "Nothing was committed (its data files are left for `parquet-sink vacuum`; Spark retries the "
                    "batch when the query restarts).",
                )
            conflict = check_commit(txn, winning_commits(log.storage, new, read, state.latest))
            if conflict is not None:
                self._state = None  # re-read from scratch next time
                self._refuse(conflict, txn, record)
            logger.info(
                "%s: log batch %d was committed by another writer (batches %d..%d appended since): committing "
                "batch %d of query %s as log batch %d", self, record.log_batch_id, read + 1, state.latest,
                txn.query_batch_id, txn.query_id, state.latest + 1,
            )
            record = dataclasses.replace(record, log_batch_id=state.latest + 1)
            failpoint("commit_retry")
        self._state = None
        raise CommitConflictError(
            f"batch {txn.query_batch_id} of query {txn.query_id} could not be committed to "
            f"{log.display(log.log_dir)}: other writers committed first {MAX_COMMIT_ATTEMPTS} times in a row. Its "
            "data files are not committed (`parquet-sink vacuum` removes them); Spark retries the batch when the "
            "query restarts. Fewer writers appending at once make this rarer."
        )

    def _refuse(self, conflict: Conflict, txn: Transaction, record: CommitRecord) -> None:
        """Raise the typed error of a real conflict found after losing log batch ``record.log_batch_id``."""
        where = self.log.display(self.log.log_dir)
        what = f"batch {txn.query_batch_id} of query {txn.query_id}"
        if conflict.kind in ("schema", "partitioning"):
            raise SchemaMismatchError(
                f"{what} lost log batch {record.log_batch_id} of {where} to another writer whose log batch "
                f"{conflict.log_batch_id} this batch does not fit: {conflict.detail}. Nothing was committed. Writers "
                "of one output must keep its partition columns and add only nullable columns."
            )
        cause = (
            "another run of this query (the same checkpoint) committed it: two runs of one checkpoint are "
            "writing this output. Stop one of them; the batch is committed once, by the other run"
            if conflict.kind == "replay" else
            "without a query id the sink cannot tell whether that writer replayed this batch. Pass "
            "checkpoint_location (Spark Connect) or run the query under classic PySpark"
        )
        raise CommitConflictError(
            f"{what} could not be committed to {where} as log batch {record.log_batch_id}: log batch "
            f"{conflict.log_batch_id} ({conflict.detail}): {cause}. Its data files are not committed (`parquet-sink "
            "vacuum` removes them)."
        )

    # -- decisions ---------------------------------------------------------------------------------

    def _refresh_state(self) -> _OutputState:
        """Load the output state once, then only read the log batches committed since: one listing of
        the log per call (the whole log again when cleanup deleted log files of batches it has not read)."""
        return self._catch_up()[0]

    def _catch_up(self) -> tuple[_OutputState, pa.Table]:
        """:meth:`_refresh_state`, with the log entries read (those of the batches committed since the state's
        latest batch; all of them on the first load)."""
        log = self.log
        listing = log.list_names()
        latest = max(listing, default=-1)
        if self._state is not None and latest < self._state.latest:  # the log shrank: deleted, reset or restored
            self._state = None  # read as a new sink object reads it (a query's batches beyond it: OutputResetError)
        new: list[int] = []  # the batches committed since the state's latest, when there is a state
        if self._state is not None and latest > self._state.latest:
            new = sorted(b for b in listing if b > self._state.latest)
            expected = range(self._state.latest + 1, latest + 1)
            gap = next((b for b, found in zip(expected, [*new, None]) if b != found), None)
            if gap is not None and any(  # a compact file after the gap, and every batch from it on
                c > gap and is_compact_path(listing[c]) and all(b in listing for b in range(c, latest + 1)) for c in new
            ):
                # log files of batches it has not read are gone: other writers committed past them and their
                # cleanup (min_batches_to_retain, cleanup_delay) deleted them, a compact file holding them. Read the
                # log as a new sink object reads it: from that compact file
                self._state = None
            elif gap is not None:
                raise MissingLogFileError(
                    f"log file of batch {gap} is missing from {log.display(log.log_dir)}, which holds batches up to "
                    f"{latest}: the log has a gap (a stray file named after a batch far ahead, or a deleted log "
                    "file). Remove the stray file or restore the missing one from backup; the query cannot commit "
                    "until the log is an unbroken chain."
                )
        if self._state is None:
            log.check_settings(listing)  # an argument contradicting the output's settings: before anything is written
            self._state = _OutputState(-1)
            table = read_log_files(log, latest, listing) if latest >= 0 else ENTRY_SCHEMA.empty_table()
        elif new:
            tables = [log.read_table(listing[b], b, listing.sidecars) for b in new]
            table = pa.concat_tables(tables)
        else:
            table = ENTRY_SCHEMA.empty_table()
        state = self._state
        for record in records_of(table):
            state.queries[record.query_id] = record
        newest = newest_commit_time(table)
        if newest is not None and (state.newest_commit_ms is None or newest > state.newest_commit_ms):
            state.newest_commit_ms = newest
        data = data_files(table)
        if data.num_rows:
            last = data.slice(data.num_rows - 1)
            self._read_committed_schema(state, last.column("path"), last.column(BATCH_KEY))
        state.latest = latest
        return state, table

    def _read_committed_schema(self, state: _OutputState, uri: pa.ChunkedArray, batch_id: pa.ChunkedArray) -> None:
        """The committed schema and partition columns from one committed file (``uri`` as logged), found
        through the reader's rule, which follows a copied or moved output."""
        found = read_committed_schema(self.log.storage, uri, batch_id)
        if found is not None:  # a missing file is the reader's and `verify`'s to report; keep the previous schema
            state.schema, state.partition_columns = found

    def _temporary_checkpoint(self, df: DataFrame, query_id: str | None) -> str | None:
        """The temporary checkpoint Spark gave the running query when it has no ``checkpointLocation``, else
        None (also under Spark Connect, where the sink cannot see the query: ``checkpoint_location`` covers it)."""
        if query_id is None or type(df).__module__.startswith("pyspark.sql.connect."):
            return None
        if query_id not in self._checkpoints:
            root = None
            try:
                from pyspark.sql import SparkSession

                # the batch's session is a clone without the query: ask the session that started it
                for candidate in (SparkSession._instantiatedSession, df.sparkSession):
                    query = None if candidate is None else candidate.streams.get(query_id)
                    if query is not None:
                        root = str(query._jsq.streamingQuery().resolvedCheckpointRoot())
                        break
            except Exception:  # a private API: never fail a batch over a diagnostic
                logger.debug("%s: cannot read the checkpoint of query %s", self, query_id, exc_info=True)
            self._checkpoints[query_id] = root if root and _TEMPORARY.search(root) else None
        return self._checkpoints[query_id]

    def _warn_temporary_checkpoint(self, df: DataFrame, query_id: str | None, batch_id: int) -> None:
        temporary = self._temporary_checkpoint(df, query_id)
        if temporary is not None and query_id not in self._warned:
            self._warned.add(query_id)
            message = (
                f"{self}: query {query_id} has no checkpointLocation, so Spark gave it the temporary checkpoint "
                f"{temporary}: exactly-once holds within this run only, and the next run is a new query that the "
                "sink refuses (ForeignQueryError). Set .option('checkpointLocation', <a durable path>)."
            )
            logger.warning(message)
            warnings.warn(message, TemporaryCheckpointWarning, stacklevel=2)

    def _target_batch(
        self, state: _OutputState, query_id: str | None, batch_id: int, df: DataFrame | None = None
    ) -> int | None:
        """The log batch id to commit to, or None when this query already committed ``batch_id``."""
        spark_newest = committed_by_spark_sink(list(state.queries.values()), state.latest)
        action, log_batch = decide_batch(
            state.latest, state.queries, query_id, batch_id, self.on_foreign_query == "append", spark_newest,
            self.spark_sink_stopped,
        )
        window = spark_sink_window(state.latest, batch_id, spark_newest)
        where = f"batch {batch_id} of query {query_id} cannot go into {self.log.display(self.log.log_dir)}"
        if window is not None and action in ("spark", "foreign"):  # as doctor says it: anything else doubles the batch
            raise (SparkSinkBatchError if action == "spark" else ForeignQueryError)(
                f"{where}: its newest batch {state.latest} was committed by Spark's own file sink, which records no "
                f"query id. Nothing was written. {window}"
            )
        if action == "spark":
            raise spark_sink_refusal(
                self.log.display(self.log.log_dir), state.latest, f"batch {batch_id} of query {query_id}"
            )
        if action == "foreign":
            owner = self._owner(min(batch_id, state.latest))
            temporary = None if df is None else self._temporary_checkpoint(df, query_id)
            cause = (
                f" The cause: this query has no checkpointLocation (Spark gave it the temporary checkpoint "
                f"{temporary}), so every run is a new query. Set .option('checkpointLocation', ...) and, to keep "
                "this output, pass on_foreign_query='append' once."
                if temporary else ""
            )
            committed_by = owner.writer if owner else "another writer (e.g. Spark's own file sink)"
            what = (
                "This query's first batch meets an output other writers already append to"
                if owner is not None and owner.is_app
                else "This is a new checkpoint on an old output"
            )
            stopped = ", spark_sink_stopped=True" if spark_newest else ""  # else refused: SparkSinkBatchError
            whose = ", whose writer, Spark's own file sink, must be stopped for good" if spark_newest else ""
            raise ForeignQueryError(
                f"{where}: its "
                f"batches up to {state.latest} were committed by {committed_by}. {what}; skipping would silently "
                "lose this query's data. Resume the original checkpoint, write to a new output path, or pass "
                f"ParquetSink(..., on_foreign_query='append'{stopped}) to append after the latest batch "
                f"({state.latest}{whose})."
                f"{cause}"
            )
        if action == "reset":
            own = state.queries.get(query_id)
            newest = (
                f"this query's newest batch in it is {own.query_batch_id} (log batch {own.log_batch_id})"
                if own is not None and query_id is not None else f"its newest batch is {state.latest}"
            )
            first = state.latest + 1 if own is None or query_id is None else own.query_batch_id + 1
            raise OutputResetError(
                f"batch {batch_id} of query {query_id} would leave a gap in {self.log.display(self.log.log_dir)}: "
                f"{newest}, so batches {first}..{batch_id - 1} that Spark's "
                "checkpoint says are done are missing (the output was deleted or reset). Restore the output, "
                "or start a new checkpoint; ParquetSink(..., on_foreign_query='append') appends anyway."
            )
        return log_batch if action == "commit" else None

    def _owner(self, log_batch_id: int) -> CommitRecord | None:
        """The record of who committed log batch ``log_batch_id`` (a query, or a ``write_batch`` app: its record
        carries a fingerprint), from its log file (a compact file keeps the ends of each run: the batch is
        attributed inside its run); None for a batch without one (Spark's own sink)."""
        try:
            entries = self.log.get(log_batch_id) or []
        except LogError:
            return None
        records = [r for r in map(CommitRecord.from_entry, entries) if r is not None]
        record = attribute(records, [log_batch_id]).get(log_batch_id)
        return None if record is None or record.query_id is None else record

    def _check_schema(self, state: _OutputState, df: DataFrame, target: int) -> pa.Schema:
        try:
            incoming = _arrow_schema(df)
        except Exception as exc:
            unwritable = _unwritable_columns(df)
            if not unwritable:
                raise
            raise SchemaMismatchError(
                f"batch for log batch {target} of {self.path}: columns {unwritable} have a type Parquet cannot hold "
                "(Spark's own file sink refuses them too). Nothing was written. Cast them before the sink, e.g. to "
                "string, or express them as year-month or day-time intervals (make_ym_interval, make_dt_interval), "
                "which the sink writes as Spark does."
            ) from exc
        committed = None if state.schema is None else (state.schema, state.partition_columns)
        data_schema = check_batch_schema(incoming, self.partition_by, committed, f"batch for log batch {target}", self.path)
        added = [f.name for f in data_schema if state.schema is not None and f.name not in state.schema.names]
        if added:
            logger.info("%s: schema evolves with new nullable columns %s", self, added)
        if state.schema is None or added:
            state.schema, state.partition_columns = data_schema, self.partition_by
        return data_schema


def _is_streaming(df: DataFrame) -> bool:
    """Whether ``df`` is a streaming DataFrame (False when even that cannot be asked)."""
    try:
        return bool(df.isStreaming)
    except Exception:  # noqa: BLE001 - a session gone, Spark Connect's server errors: the original error stands
        return False


def _session_zone(df: DataFrame) -> str:
    """The session time zone of ``df`` (which timestamp partition directories are written in)."""
    return df.sparkSession.conf.get("spark.sql.session.timeZone") or "UTC"


def _arrow_schema(df: DataFrame) -> pa.Schema:
    """The batch's schema in Arrow types as its files hold them (timestamps in UTC: time zones are not compared;
    year-month intervals as their months: :func:`~parquet_sink.write.parquet_files.stored_type`)."""
    return arrow_schema(cast("StructType", stored_type(df.schema)))


def _unwritable_columns(df: DataFrame) -> dict[str, str]:
    """The columns of ``df`` that PySpark refuses to give an Arrow type (Spark's ``CalendarIntervalType``, which no
    Parquet writer holds), with their Spark types: asked once the batch's schema failed to convert. Only PySpark's
    refusal of a type counts: any other error is no fault of a column's. PySpark 3.5 cannot even read such a type
    into Python (``df.schema`` fails): the columns are then those whose JVM type it cannot parse."""
    try:
        fields = [(f.name, f.dataType) for f in df.schema]
    except parse_refusals():
        return unparsable_columns(df)
    unwritable = {}
    for name, data_type in fields:
        try:
            arrow_type(stored_type(data_type))
        except type_refusals():
            unwritable[name] = data_type.simpleString()
    return unwritable


Action = Literal["commit", "skip", "foreign", "reset", "spark"]


def decide_batch(
    latest: int,
    queries: Mapping[str | None, CommitRecord],
    query_id: str | None,
    batch_id: int,
    append: bool = False,
    spark_newest: bool = False,
    spark_sink_stopped: bool = False,
) -> tuple[Action, int | None]:
    """What the sink does with batch ``batch_id`` of query ``query_id``, given the newest log batch
    ``latest`` (-1 when empty) and the last commit record of each query: ``("commit", log batch)``,
    ``("skip", log batch holding it)``, ``("foreign", None)`` (ForeignQueryError: the log belongs to
    another query; not for a query without id whose own batches only an optimize's followed: :func:`optimized_since`), ``("reset", None)`` (OutputResetError: the checkpoint is ahead of the log) or ``("spark",
    None)`` (SparkSinkBatchError: Spark's own file sink committed the newest log batch, ``spark_newest``
    (:func:`~parquet_sink.log.entry.committed_by_spark_sink`), and a commit after it would make that query skip
    its next batch; ``spark_sink_stopped`` says that query never runs again). ``append`` is
    ``on_foreign_query="append"``. Pure, so ``parquet-sink doctor`` predicts with it.

    A query that has committed before continues at the next log batch with its next batch id, whatever other
    writers (``write_batch`` apps, other queries) appended after its last commit, as a Delta streaming sink
    does; its batch ids and log batch ids then differ, and the commit record maps one to the other. A batch id
    past its next one is ``"reset"``. A query's first batch takes the log batch of its batch id (an output that
    only Spark's own sink wrote can be taken over by the same checkpoint: the one commit after Spark's newest batch
    that is not ``"spark"``), and refuses a log other queries already wrote (``"foreign"``: a new checkpoint on an
    old output).

    Example::

        >>> decide_batch(-1, {}, "q1", 0)
        ('commit', 0)
        >>> decide_batch(4, {}, "q1", 0)
        ('foreign', None)
        >>> decide_batch(6, {"q1": CommitRecord(4, "q1", 4, "c")}, "q1", 5)   # an app appended 5 and 6
        ('commit', 7)
        >>> decide_batch(4, {}, "q1", 5, spark_newest=True)   # Spark's sink's query, moved here with its checkpoint
        ('commit', 5)
        >>> decide_batch(4, {}, "q1", 0, append=True, spark_newest=True)   # Spark's sink would skip its batch 5
        ('spark', None)
        >>> decide_batch(9, {None: CommitRecord(5, None, 5, "c"), OPTIMIZE_APP_ID: CommitRecord(9, OPTIMIZE_APP_ID, 9, "o")},
        ...              None, 6)   # batch-id-only: an optimize committed 6..9 (no rows: not another writer)
        ('commit', 10)
    """
    own = queries.get(query_id)
    if own is not None and batch_id <= own.query_batch_id:
        return "skip", own.log_batch_id
    if query_id is None and own is not None and batch_id == own.query_batch_id + 1 and optimized_since(
        latest, queries, own
    ):  # a batch-id-only sink's next batch after its own optimize_every's (or any optimize's) batches
        return "commit", latest + 1
    action, log_batch = _decide_commit(latest, own, bool(queries), query_id, batch_id, append)
    taken_over = own is None and not queries and batch_id == latest + 1
    if action == "commit" and spark_newest and not spark_sink_stopped and not taken_over:
        return "spark", None
    return action, log_batch


def optimized_since(latest: int, queries: Mapping[str | None, CommitRecord], own: CommitRecord) -> bool:
    """Whether the log batches after ``own`` (a writer's last commit) up to ``latest``, if any, are an optimize's:
    its record is the newest batch's and no other writer's record is newer than ``own``. An optimize adds no row and
    replays no batch, so a sink without a query id (which cannot tell another writer's batch from a replay of its
    own) continues after it, its batch ids and log batch ids apart from then on."""
    if own.log_batch_id == latest:
        return True
    optimized = queries.get(OPTIMIZE_APP_ID)
    return optimized is not None and optimized.log_batch_id == latest and all(
        record.log_batch_id < own.log_batch_id
        for writer, record in queries.items()
        if writer != OPTIMIZE_APP_ID and record is not own
    )


def _decide_commit(
    latest: int, own: CommitRecord | None, others: bool, query_id: str | None, batch_id: int, append: bool
) -> tuple[Action, int | None]:
    """:func:`decide_batch` for a batch this query has not committed, Spark's own sink's batches apart."""
    if append and latest >= 0:
        return "commit", latest + 1
    if own is not None and query_id is not None:
        return ("commit", latest + 1) if batch_id == own.query_batch_id + 1 else ("reset", None)
    if batch_id <= latest or (own is None and others and latest >= 0):
        return "foreign", None
    if batch_id > latest + 1:
        return "reset", None
    return "commit", batch_id


def _session_interval(df: DataFrame, sink: ParquetSink) -> int | None:
    """The session's ``spark.sql.streaming.fileSink.log.compactInterval`` (None when unset); ParameterError naming
    it when it is no positive integer (Spark's own sink would fail on it too)."""
    value = df.sparkSession.conf.get(SESSION_COMPACT_INTERVAL, None)
    if value is None:
        return None
    try:
        return _positive_int(str(value).strip())
    except ValueError:
        raise ParameterError(
            f"{sink}: the session's {SESSION_COMPACT_INTERVAL} is {value!r}, not a positive integer. Nothing was "
            "written. Fix or unset it, or pass ParquetSink(..., compact_interval=N)."
        ) from None


def _session_log_settings(df: DataFrame, sink: ParquetSink) -> tuple[LogSettings, bool]:
    """The log settings Spark's sink takes from the session where a new output is given none: its
    ``minBatchesToRetain`` and ``fileSink.log.cleanupDelay`` (Spark's defaults when unset; Spark checked both when
    they were set), and whether it deletes expired log files (``fileSink.log.deletion``)."""
    conf = df.sparkSession.conf
    defaults = LogSettings()
    batches = conf.get(SESSION_MIN_BATCHES, None)
    if batches is not None:
        defaults = dataclasses.replace(defaults, min_batches_to_retain=int(str(batches).strip()))
    delay = conf.get(SESSION_CLEANUP_DELAY, None)
    if delay is not None:
        defaults = dataclasses.replace(defaults, cleanup_delay_ms=_spark_time_ms(str(delay), SESSION_CLEANUP_DELAY))
    return defaults, str(conf.get(SESSION_LOG_DELETION, None)).strip().lower() != "false"


def _spark_time_ms(text: str, name: str) -> int:
    """A Spark time setting in ms, as Spark reads it: a bare number is ms, "us" microseconds, else a unit."""
    text = text.strip()
    micros = re.fullmatch(r"(\d+)\s*us", text)
    if micros:
        return int(micros.group(1)) // 1000
    return int(text) if text.isdigit() and text.isascii() else parse_duration_ms(text, name)


def _positive_int(text: str) -> int:
    if not text.isdigit() or not text.isascii() or int(text) < 1:
        raise ValueError("not a positive integer")
    return int(text)


def _session_codec(df: DataFrame, sink: ParquetSink, batch_id: int) -> str:
    """The Parquet codec of a sink given no ``compression``: the session's ``spark.sql.parquet.compression.codec``,
    as Spark's sink writes (snappy when unset); ParameterError naming it for a codec the sink cannot write."""
    value = df.sparkSession.conf.get(SESSION_CODEC, None)
    try:
        return parquet_codec("snappy" if value is None else str(value).strip())
    except ParameterError as exc:
        raise ParameterError(
            f"{sink}, batch {batch_id}: the session's {SESSION_CODEC} is {value!r}: {exc} Nothing was written. "
            "Pass ParquetSink(..., compression=...) with a codec it writes (e.g. 'lz4_raw', 'zstd'), or change the "
            "session's setting."
        ) from exc


def checkpoint_query_id(checkpoint_location: str, storage_options: Mapping[str, Any] | None = None) -> str | None:
    """The streaming query id Spark wrote into ``<checkpoint_location>/metadata`` (``{"id": ...}``, written
    before the query's first batch and kept across restarts), or None when that file does not exist.
    ``checkpoint_location`` is any fsspec or Hadoop URL (``/ckpt``, ``file:/ckpt``, ``s3a://bucket/ckpt``,
    ``abfss://container@account.dfs.core.windows.net/ckpt``). QueryIdentityError if the file is damaged.

    Example::

        >>> checkpoint_query_id("/data/_checkpoints/events")
        '6abb5a0d-3f4e-4a43-9c55-0b8f3c1e2d11'
    """
    storage = Storage(checkpoint_location, dict(storage_options or {}))
    path = storage.join("metadata")
    try:
        raw = storage.read_bytes(path)
    except FileNotFoundError:
        return None
    try:
        query_id = json.loads(raw)["id"]
    except (ValueError, KeyError, TypeError) as exc:
        query_id, problem = None, f"{type(exc).__name__}: {exc}"
    else:
        problem = None if isinstance(query_id, str) and query_id else f"id {query_id!r}"
    if problem is not None:
        raise QueryIdentityError(
            f"checkpoint metadata {storage.display(path)} is not Spark's JSON with the query id ({problem}): it "
            "is damaged or not a streaming checkpoint. Restore it from a backup or start a new checkpoint."
        )
    return query_id


def _check_parameters(
    *,
    partition_by: Any,
    compact_interval: Any,
    retention: Any,
    max_records_per_file: Any,
    on_foreign_query: Any,
    min_batches_to_retain: Any,
    cleanup_delay: Any,
    checkpoint_location: Any,
    writer: Any,
) -> None:
    """ValueError naming the first ParquetSink parameter out of range (checked on the driver, so a bad
    value never reaches the executors or the log)."""

    check_partition_by(partition_by)
    LogOptions(compact_interval, retention, min_batches_to_retain, cleanup_delay)
    if max_records_per_file is not None:
        check_positive_int("max_records_per_file", max_records_per_file, "use None for no limit")
    if on_foreign_query not in ("error", "append"):
        raise ParameterError(f"on_foreign_query must be 'error' or 'append', got {on_foreign_query!r}")
    if writer not in ("auto", "spark", "arrow"):
        raise ParameterError(f"writer must be 'auto', 'spark' or 'arrow', got {writer!r}")
    if checkpoint_location is not None and (not isinstance(checkpoint_location, str) or not checkpoint_location):
        raise ParameterError(f"checkpoint_location must be the query's checkpointLocation URL, got {checkpoint_location!r}")
