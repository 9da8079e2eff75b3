"""``write_batch``: exactly-once appends from plain Python (pyarrow, pandas, polars), without Spark.

One call writes a table as Parquet files exactly as the Spark sink does (:func:`~parquet_sink.write.parquet_files.write_rows`:
Spark's file names, ``k=v/`` directories, escaping) and commits them as the next log batch, with a commit
record ``(app_id, version)`` (the sink's ``(query id, query batch id)``: one format). Delta's
txnAppId/txnVersion rule makes retries idempotent: when the log already holds a commit of ``app_id`` with a
version >= ``version``, nothing is written. Unlike Delta, the data are checked: each commit record carries a
fingerprint of its data (:func:`data_fingerprint`), and a version written again with other data (an app
whose state was reset) is refused with :class:`~parquet_sink.errors.StaleVersionError` instead of being
dropped without a word.

Concurrency is optimistic: the commit is an exclusive create of the next log file
(:meth:`MetadataLog.add`). A writer that loses the race re-reads the log, re-checks its version (another
run of the same app may have committed it: then it stops, skipped) and what the winning commits changed
(:func:`~parquet_sink.write.conflicts.check_commit`: other partition columns, or a schema the data does not
fit, raise SchemaMismatchError), and commits the *same* files as the following batch. Re-committing
them is safe: the lost create published nothing (a lost acknowledgement is read back by the storage
layer), so no log batch references them, and they are
complete, fsynced files; rewriting them would only cost time. Files of an attempt that never commits (a
crash, or a skip after a lost race) stay uncommitted: invisible to both readers, removed by
``parquet-sink vacuum``.

Example::

    >>> result = write_batch("/data/daily", table, app_id="daily-job", version=41, partition_by=["day"])
    >>> result.committed, result.log_batch_id, result.rows
    (True, 12, 1000)
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import logging
import os
import secrets
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ..delta.sync import DELTA, require_deltalake, sync_after_commit
from ..iceberg import follow as iceberg_follow
from ..table_formats import refuse_before_commit
from ..read.chain import app_commits, check_app_version, decide_write, version_record
from ..read.history import newest_commit_time, next_commit_time
from ..errors import CommitConflictError, ParameterError, SchemaMismatchError, StaleVersionError, call_text, names_output
from ..failpoints import failpoint
from ..partitioning import check_time_zone
from ..parquet_read import INT96_ONLY, holds_naive_timestamp, map_leaves, naive_timestamps
from .conflicts import Transaction, check_commit, spark_sink_refusal, winning_commits
from .inflight import InFlightBatch, refuse_missing_files, start_output
from ..log.compaction import check_flags, check_positive_int
from ..log.files import check_output_root
from ..log.snapshot import data_files, read_recent
from ..log.metadata_log import MetadataLog
from .schema import (
    check_batch_schema, check_partition_by, check_partition_columns, check_storable, committed_zones, read_committed_schema,
)
from ..log.entry import BATCH_KEY, CommitRecord, committed_by_spark_sink, records_of
from .parquet_files import FileStatus, WriteSpec, codec_extension, log_entry, write_rows, write_schema_file

logger = logging.getLogger(__name__)

_MAX_ATTEMPTS = 100
_FINGERPRINT_ROWS = 65536  # rows hashed at a time: bounded memory, independent of the table's chunking


@dataclass
class WriteResult:
    """What :func:`write_batch` did.

    ``committed``: False when skipped (the app already committed this version or a newer one);
    ``log_batch_id``: the log batch that holds this write (or, when skipped, the app's newest commit);
    ``committed_version``: the app's newest version in the log before the call (None: none);
    ``files``: the data files committed (fsspec paths); ``conflicts``: commit races lost to other writers.
    """

    committed: bool
    app_id: str
    version: int
    log_batch_id: int | None
    committed_version: int | None
    files: list[str] = field(default_factory=list)
    rows: int = 0
    bytes: int = 0
    conflicts: int = 0


def _stored_type(typ: pa.DataType) -> pa.DataType:
    """``typ`` as :func:`write_batch` stores it, at any depth (struct fields, list elements, map keys and values):
    ``string_view``/``binary_view`` as ``large_string``/``large_binary`` (the same Parquet column, but a type in the
    footer's Arrow schema that every reader takes: pyarrow can neither split views into partitions nor filter them
    against the ``string`` a Delta table declares), nanosecond timestamps as microseconds (Spark's precision: it
    reads no nanosecond column, at any depth) and ``date64`` as ``date32`` (Spark's date, and the type the footer
    reads back as; polars reads a ``date64`` column as a datetime)."""

    def stored(leaf: pa.DataType) -> pa.DataType:
        if pa.types.is_string_view(leaf) or pa.types.is_binary_view(leaf):
            return pa.large_string() if pa.types.is_string_view(leaf) else pa.large_binary()
        if pa.types.is_timestamp(leaf) and leaf.unit == "ns":
            return pa.timestamp("us", leaf.tz)
        return pa.date32() if pa.types.is_date64(leaf) else leaf

    return map_leaves(typ, stored)


def _as_table(data: Any, what: str, where: str) -> pa.Table:
    """pyarrow Table / RecordBatch / RecordBatchReader / iterable of RecordBatches, pandas or polars
    DataFrame -> pyarrow Table, its columns of the types it is stored as (:func:`_stored_type`). A pandas
    DataFrame's named index levels are columns (a ``groupby`` result's keys), as ``DataFrame.to_parquet`` keeps
    them; an unnamed index (positions) is not. Data that does not convert: ParameterError naming ``what``; values
    their stored type cannot hold (nanoseconds, a date64 within a day): SchemaMismatchError naming the column,
    ``what`` and ``where`` (the output)."""
    usage = "pass a pyarrow Table or record batches, a pandas or a polars DataFrame"
    try:
        if isinstance(data, pa.Table):
            table = data
        elif isinstance(data, pa.RecordBatch):
            table = pa.Table.from_batches([data])
        elif isinstance(data, pa.RecordBatchReader):
            table = data.read_all()
        elif type(data).__module__.startswith("pandas") and hasattr(data, "columns"):
            named = [name for name in data.index.names if name is not None]
            table = pa.Table.from_pandas(data.reset_index(level=named) if named else data, preserve_index=False)
        elif hasattr(data, "to_arrow") and hasattr(data, "columns"):  # polars (a LazyFrame: collect it first)
            objects = [name for name, dtype in data.schema.items() if str(dtype) == "Object"]
            if objects:  # polars hands them to Arrow as their memory addresses; its own write_parquet refuses them
                raise TypeError(f"columns {objects} hold Python objects (polars' Object), which no Parquet type stores: "
                                "cast them to a type of their values")
            table = data.to_arrow()
        elif isinstance(data, Iterable) and not isinstance(data, (str, bytes, Mapping)) and not hasattr(data, "dtype"):
            batches = list(data)
            if not batches or not all(isinstance(b, pa.RecordBatch) for b in batches):
                raise TypeError("an iterable of pyarrow RecordBatches (at least one, for the schema)")
            table = pa.Table.from_batches(batches)
        else:
            raise TypeError("one column (a Series, an array), no table" if hasattr(data, "dtype") else "no table")
    except (TypeError, ValueError, pa.ArrowException) as exc:
        raise ParameterError(
            f"write_batch, {what}: cannot write a {type(data).__name__} ({exc}); {usage}. Nothing was written."
        ) from exc
    folded = Counter(name.lower() for name in table.column_names)
    duplicates = sorted({name for name in table.column_names if folded[name.lower()] > 1})
    if duplicates:  # Spark's writer and reader refuse them (case-insensitive, spark.sql.caseSensitive=false)
        raise SchemaMismatchError(
            f"write_batch, {what}: the data has columns {duplicates} more than once (as Spark compares names: "
            "case-insensitively), which no reader could tell apart; rename them. Nothing was written."
        )
    for index, column in enumerate(table.schema):
        stored = _stored_type(column.type)
        if stored.equals(column.type):
            continue
        try:
            table = table.set_column(index, column.with_type(stored), table.column(index).cast(stored))
        except pa.ArrowInvalid as exc:  # "Casting from timestamp[ns] to ..." or "from date64[ms] to ...": which lost data
            held = "date64 values that are not whole days" if "date64" in str(exc) else "timestamps with nanoseconds"
            raise SchemaMismatchError(
                f"{what} to {where}: column {column.name!r} holds {held}, which Spark cannot read (it stores "
                "microseconds and days). Round them to microseconds (dates to days) before writing. Nothing was written."
            ) from None
    return table


def data_fingerprint(table: pa.Table) -> str:
    """A fingerprint of a table's data as :func:`write_batch` writes it: the SHA-256 (first 128 bits, hex)
    of the Arrow IPC encoding of its schema (schema metadata, such as pandas', left out) and of its rows in
    windows of 65,536, so the same columns, types and values in the same order give the same fingerprint
    however the table is chunked or sliced; file bytes (with their timestamps) play no part. Values under null slots
    count, as in the IPC encoding: tables built the same way fingerprint the same.

    Example: ``data_fingerprint(pa.table({"n": [1, 2]})) == data_fingerprint(pa.table({"n": [1, 2]}))``.
    """
    table = table.replace_schema_metadata(None)
    digest = hashlib.sha256(table.schema.serialize().to_pybytes())
    for start in range(0, table.num_rows, _FINGERPRINT_ROWS):
        window = table.slice(start, _FINGERPRINT_ROWS)
        # each column's values copied into buffers of their own: the IPC encoding of a slice holds the buffers of
        # the table it was cut from (a source that grew meanwhile, rows beside it), not only its rows
        columns = [pa.concat_arrays(column.chunks) for column in window.columns]
        digest.update(pa.RecordBatch.from_arrays(columns, schema=window.schema).serialize())
    return digest.hexdigest()[:32]


def _check_replay(
    records: list[CommitRecord], app_id: str, version: int, fingerprint: str, newest: int, ignore_changed_data: bool,
    output: str,
) -> str:
    """How a version the app already committed or went past (``newest``: its newest version) compares with
    what the log says of it: ``"same"`` (a retry: same fingerprint) or ``"unknown"`` (its record carries
    no fingerprint: a commit of an older release, or inferred inside a compacted run); different data, or
    a version below ``newest`` that was never committed, raise StaleVersionError (``"changed"`` when
    ``ignore_changed_data``)."""
    record = version_record(records, app_id, version)
    if record is not None and record.fingerprint in (fingerprint, None):
        return "same" if record.fingerprint else "unknown"
    if ignore_changed_data:
        return "changed"
    what = (
        f"version {version} was committed (log batch {record.log_batch_id}) with other data"
        if record is not None
        else f"version {version} was never committed, and the app has gone past it"
    )
    raise StaleVersionError(
        f"app {app_id!r} wrote version {version} to {output}, but its newest committed version is {newest} and {what}: "
        "writing it would drop these rows without a word. If the app's state was reset (a lost checkpoint), "
        f"write the new data as version {newest + 1} or later, or under a new app_id; if this is a retry whose "
        "data legitimately differ (non-deterministic input), pass ignore_changed_data=True to skip it. Nothing "
        "was committed."
    )


def _zoned_as(data: pa.Table, committed: pa.Schema) -> pa.Table:
    """``data`` with its naive timestamps zoned UTC where the ``committed`` data schema's column holds instants
    (:func:`~parquet_sink.write.schema.committed_zones`), at any depth."""
    types = {f.name: f.type for f in committed}
    for index, column in enumerate(data.schema):
        if column.name in types and (typ := committed_zones(column.type, types[column.name])) != column.type:
            data = data.set_column(index, column.with_type(typ), data.column(index).cast(typ))
    return data


def _check_schema(
    log: MetadataLog, table: pa.Table, data: pa.Table, partition_by: tuple[str, ...], what: str
) -> tuple[pa.Table, bool]:
    """``data`` (partition columns included) as it is written, and whether its timestamps are stored as INT96:
    SchemaMismatchError unless it fits the committed data (``table`` is the log snapshot; the newest committed file's
    footer gives its schema), its naive timestamps zoned UTC where the committed column holds instants
    (:func:`_zoned_as`), stored as INT96 where the newest file stores all its timestamps so (:func:`_int96`)."""
    files = data_files(table)
    last = files.slice(files.num_rows - 1) if files.num_rows else None
    found = None if last is None else read_committed_schema(log.storage, last.column("path"), last.column(BATCH_KEY))
    if found is not None:
        data = _zoned_as(data, found[0])
    check_batch_schema(data.schema, partition_by, found, what, log.display(log.storage.root))
    return data, found is not None and _int96(found[0], data, partition_by)


def _int96(committed: pa.Schema, data: pa.Table, partition_by: tuple[str, ...]) -> bool:
    """Whether ``data`` is stored with INT96 timestamps: the committed file (its ``committed`` schema, as
    :func:`~parquet_sink.write.schema.read_committed_schema` reads it) stores every timestamp so (Spark's writer:
    its instants), and every timestamp ``data`` writes is an instant. Its files then read as the output's other files
    do (pyarrow and ``read_committed`` read INT96 naive, a TIMESTAMP adjusted to UTC zoned), whichever file a reader
    takes a column's type from."""
    if not (committed.metadata or {}).get(INT96_ONLY):
        return False
    written = [f for f in data.schema if f.name not in partition_by]
    return not any(holds_naive_timestamp(f.type) for f in written)


def _as_int96(data: pa.Table, partition_by: tuple[str, ...]) -> pa.Table:
    """``data`` with the timestamps it writes into files naive (their UTC wall clock), as Spark's INT96 reads back:
    the file's Arrow schema then says what its INT96 columns read as."""
    naive = pa.schema(
        [f if f.name in partition_by else f.with_type(naive_timestamps(f.type)) for f in data.schema],
        metadata=data.schema.metadata,
    )
    return data if naive.equals(data.schema) else data.cast(naive)


@names_output  # every ParameterError, of the arguments or of the data, names the call and its output
def write_batch(
    path: str | os.PathLike[str],
    data: Any,
    *,
    app_id: str,
    version: int,
    partition_by: Sequence[str] | None = None,
    storage_options: dict[str, Any] | None = None,
    compression: str = "snappy",
    max_records_per_file: int | None = None,
    time_zone: str = "UTC",
    compact_interval: int | None = None,
    allow_existing_files: bool = False,
    ignore_changed_data: bool = False,
    delta_log: bool = False,
    iceberg: bool | Mapping[str, Any] | None = None,
    spark_sink_stopped: bool = False,
    retention: str | _dt.timedelta | None = None,
    min_batches_to_retain: int | None = None,
    cleanup_delay: str | _dt.timedelta | None = None,
) -> WriteResult:
    """Append ``data`` to the output at ``path`` exactly once per ``(app_id, version)``.

    Writes Parquet files named and partitioned like the Spark sink's, then commits them as the next log
    batch with the commit record ``(app_id, version)``. If the log already holds a commit of ``app_id``
    with a version >= ``version``, nothing is written and ``committed`` is False: when the data are the
    same as that version's (:func:`data_fingerprint`, recorded in each commit record), a retry. Other data
    under a committed version, or a version below the newest that was never committed, raise
    StaleVersionError, unless ``ignore_changed_data`` (then skipped, with a warning). Versions of one app
    must increase (e.g. the source batch id a chained job consumed). Several apps may append to one output at
    once: a lost commit race is retried as the following batch (see the module docstring).

    Args:
        data: a pyarrow Table, RecordBatch, RecordBatchReader or iterable of RecordBatches, or a pandas or
            polars DataFrame. An empty one still commits the version (a batch with no files; the first
            commit of an unpartitioned output gets one schema-only file, as Spark's sink writes for an empty
            batch, so that ``spark.read.parquet`` reads the output as an empty table).
        partition_by: Hive partition columns (``k=v/`` directories, escaped like Spark).
        compression, max_records_per_file: as :class:`~parquet_sink.ParquetSink`.
        time_zone: the time zone timestamp partition values are written in (Spark's session time zone).
        compact_interval, retention, min_batches_to_retain, cleanup_delay: the output's log settings, as
            :class:`~parquet_sink.ParquetSink`'s: None (the default) applies those recorded with the output (else
            Spark's defaults: 10, none, 100, ``"10m"``); one that contradicts them is refused with
            OutputSettingsError, nothing written.
        allow_existing_files: as :class:`~parquet_sink.ParquetSink` (else ExistingDataError when the
            directory holds Parquet files but no committed batch).
        delta_log: after the commit (or a skip), bring the output's Delta log (``_delta_log``) in step with
            the log (:func:`~parquet_sink.sync_delta_log`); its failure is logged, never raised. Data no Delta
            log can hold (a date or timestamp outside 0001..9999) is refused before the commit on an output that
            keeps one, with or without this flag (DeltaRangeError, nothing committed, the files deleted).
        iceberg: after the commit (or a skip), bring the output's Iceberg table in step with the log
            (:func:`~parquet_sink.sync_iceberg`); its failure is logged, never raised, and the next call catches
            up. True: the table's metadata alone, with the output; ``{"catalog": ..., "table": "ns.name"}``: the
            table in that catalog (a pyiceberg ``Catalog`` or its properties). Needs ``pip install
            "parquet-sink[iceberg]"``. Data no Iceberg table can hold (a type Iceberg lacks, a date or timestamp
            outside 0001..9999) is refused before the commit on an output that keeps one, with or without this
            argument (IcebergRefusalError, nothing committed, the files deleted).
        spark_sink_stopped: the query of Spark's own file sink that committed the output's newest log batch is
            stopped for good. Without it such an output is refused (SparkSinkBatchError, nothing written): that
            query skips every batch id the log holds, so this commit would make it lose its next batch.

    Raises SchemaMismatchError (nothing written) when the data does not fit the committed schema, or has a
    column Spark cannot read or Parquet cannot hold (:func:`~parquet_sink.write.schema.check_storable`),
    StaleVersionError (nothing written) as above, SparkSinkBatchError (nothing written) as ``spark_sink_stopped``
    says, and CommitConflictError after many lost races in a row.

    Example::

        >>> import pandas as pd
        >>> write_batch("/data/daily", pd.DataFrame({"day": ["2024-01-01"], "n": [3]}),
        ...             app_id="daily-job", version=0, partition_by=["day"]).committed
        True
    """
    version = check_app_version(app_id, version)
    codec_extension(compression)  # validate early
    check_flags(
        allow_existing_files=allow_existing_files, ignore_changed_data=ignore_changed_data, delta_log=delta_log,
        spark_sink_stopped=spark_sink_stopped,
    )
    check_time_zone(time_zone)
    if max_records_per_file is not None:
        check_positive_int("max_records_per_file", max_records_per_file, "use None for no limit")
    if delta_log:
        require_deltalake(f"write_batch(..., delta_log=True) to {path}")
    target = iceberg_follow.iceberg_target(iceberg, f"write_batch({os.fspath(path)!r})")
    partition_by = check_partition_by(partition_by)
    log = MetadataLog(
        path, storage_options=storage_options, compact_interval=compact_interval, retention=retention,
        min_batches_to_retain=min_batches_to_retain, cleanup_delay=cleanup_delay,
    )
    check_output_root(path, log.storage, call_text("write_batch", path))
    what = f"version {version} of app {app_id!r}"
    statuses: list[FileStatus] | None = None
    read = -1  # the latest log batch when this call last read the log
    table = _as_table(data, what, log.display(log.storage.root))
    check_storable(table.schema, what, log.display(log.storage.root))
    check_partition_columns(table.schema, partition_by, what, log.display(log.storage.root))
    fingerprint = data_fingerprint(table)
    lease: InFlightBatch | None = None
    int96 = False  # timestamps stored as INT96, as the output's newest file stores them (_check_schema)
    try:
        for attempt in range(_MAX_ATTEMPTS):
            # the log at the cost of this append: the commit records, the newest data file and commit time, and the
            # batches committed since the last attempt read it (what the winners of a lost race changed)
            snap = read_recent(log, whole_after=read if attempt else None)
            if not attempt:
                log.check_settings(snap.listing)  # before anything is written (a commit checks again)
            latest = -1 if snap.latest is None else snap.latest
            records = records_of(snap.table)
            commits = app_commits(records)
            own = commits.get(app_id)
            result = WriteResult(False, app_id, version, None, None if own is None else own.query_batch_id)
            result.conflicts = attempt
            spark_newest = committed_by_spark_sink(records, snap.latest)
            action, log_batch = decide_write(latest, commits, app_id, version, spark_newest, spark_sink_stopped)
            if action == "spark":
                raise spark_sink_refusal(
                    log.display(log.storage.root), latest, what, "Nothing was written." if statuses is None else
                    "Nothing was committed (its data files are left for `parquet-sink vacuum`).",
                )
            result.log_batch_id = log_batch
            if action == "skip":
                assert result.committed_version is not None
                replay = _check_replay(
                    records, app_id, version, fingerprint, result.committed_version, ignore_changed_data,
                    log.display(log.storage.root),
                )
                logger.log(
                    logging.INFO if replay == "same" else logging.WARNING,
                    "%s: skipping %s: already committed version %s as log batch %d%s%s",
                    log.display(log.storage.root), what, result.committed_version, log_batch,
                    {"same": "", "unknown": " (its data cannot be compared: the log keeps no fingerprint of it)",
                     "changed": " although its data differ (ignore_changed_data=True)"}[replay],
                    "" if statuses is None else " (this attempt's files stay uncommitted)",
                )
                break
            if statuses is None and table.num_rows:
                table, int96 = _check_schema(log, snap.table, table, partition_by, what)
            elif statuses is not None:  # a race lost: what the winners changed may conflict with this commit
                winners = winning_commits(log.storage, snap.table, read, latest)
                zoned = table  # instants a winner committed first: this batch's naive values are those, in UTC
                for schema in [w.data_schema for w in winners if w.data_schema is not None] if table.num_rows else []:
                    zoned = _zoned_as(zoned, schema)
                schema = pa.schema([f for f in zoned.schema if f.name not in partition_by]) if table.num_rows else None
                txn = Transaction(app_id, version, schema, partition_by)
                conflict = check_commit(txn, winners)
                if conflict is not None:
                    raise SchemaMismatchError(
                        f"{what} lost log batch {read + 1} of {log.display(log.storage.root)} to another writer whose "
                        f"log batch {conflict.log_batch_id} it does not fit: {conflict.detail}. Nothing was committed "
                        "(its data files are left for `parquet-sink vacuum`). Writers of one output must keep its "
                        "partition columns and add only nullable columns."
                    )
                if zoned is not table:  # its files hold naive timestamps (TIMESTAMP_NTZ): written again, as instants
                    assert lease is not None
                    lease.end(staged=False)
                    lease, statuses, table = None, None, zoned
                    int96 = any(_int96(w.data_schema, table, partition_by) for w in winners if w.data_schema is not None)
            read = latest
            if statuses is None:
                if latest < 0:
                    start_output(log, allow_existing_files, f"write_batch of {what}")
                # the lease protects the files from `vacuum` until the app commits this version (whatever
                # log batch that ends up as) or the call ends
                lease = InFlightBatch.begin(
                    log.storage, log_batch, secrets.token_hex(8), app_id, version, until_committed=True
                )
                failpoint("before_write")
                spec = WriteSpec(log.storage, partition_by, compression, max_records_per_file, time_zone, int96)
                statuses = write_rows(spec, [_as_int96(table, partition_by) if int96 else table])
                if not statuses and not partition_by and not data_files(snap.table).num_rows:
                    statuses = write_schema_file(spec, table.schema)  # as the sink: readers get the schema
                data_schema = pa.schema([f for f in table.schema if f.name not in partition_by])
                refuse_before_commit(
                    log.storage, [(s.path, s.size) for s in statuses], data_schema, f"write_batch of {what}",
                    [(DELTA, delta_log), (iceberg_follow.ICEBERG, target is not None)],
                )
                failpoint("before_commit")
            record = CommitRecord.new(log_batch, app_id, version, fingerprint)
            data = [log_entry(log.storage, s) for s in statuses]
            rows = sum(s.num_rows for s in statuses)
            entries = record.log_entries(log.storage, next_commit_time(newest_commit_time(snap.table)), data, rows)
            refuse_missing_files(
                log.storage, [s.path for s in statuses], f"{what}: log batch {log_batch}",
                "call write_batch again to rewrite them",
            )
            if log.add(log_batch, entries):
                failpoint("after_commit")
                result.committed = True
                result.files = [s.path for s in statuses]
                result.rows = rows
                result.bytes = sum(s.size for s in statuses)
                logger.info(
                    "%s: committed %s as log batch %d: %d rows, %d files, %d bytes (%d lost races)",
                    log.display(log.storage.root), what, log_batch, result.rows, len(statuses), result.bytes, attempt,
                )
                break
            logger.info("%s: log batch %d was committed by another writer; re-reading the log", what, log_batch)
        else:
            raise CommitConflictError(
                f"{what} could not be committed to {log.display(log.storage.root)}: another writer committed first "
                f"{_MAX_ATTEMPTS} times in a row. Its data files are not committed (`parquet-sink vacuum` removes them); "
                "retry the call, with fewer writers appending at once."
            )
    finally:
        if lease is not None:
            lease.end(staged=False)
    if delta_log:
        sync_after_commit(path, storage_options, f"log batch {result.log_batch_id} ({what})", time_zone)
    if target is not None:
        iceberg_follow.sync_after_commit(
            os.fspath(path), storage_options, target, f"log batch {result.log_batch_id} ({what})", time_zone
        )
    return result
