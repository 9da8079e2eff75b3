"""``sync_delta_log``: keep a Delta Lake transaction log (``_delta_log/``) listing exactly the files
``_spark_metadata`` commits, so every Delta reader (delta-rs, polars, duckdb, Trino, Spark's Delta connector)
reads exactly-once data without a copy. The counterpart of delta-rs's ``write_deltalake`` and of Delta's
``OptimisticTransaction``, for files already written and committed by a streaming file sink: the protocol is
delta-rs's (the ``deltalake`` package: table creation with add actions, commits with app transactions,
checkpoints and log cleanup as post-commit hooks); this module only decides what to commit.

One sync is one Delta commit that catches up every log batch not mirrored yet: ``add`` actions for files the
latest snapshot of ``_spark_metadata`` has and Delta has not (partition values, size, time and statistics
from the footer, :mod:`.actions`), ``remove`` actions for files Delta lists and the snapshot dropped
(retention at compaction), and a ``txn`` action ``(APP_ID, latest log batch id)``: a sync that finds the
Delta log's ``txn`` at the latest log batch does nothing, so a replay never commits twice. The Delta log never
lists a file the log does not commit; it can only be behind (a crash between the two commits), and the next
sync catches up. Concurrent syncs are serialized by Delta's own commit protocol (the loser re-reads).

Example::

    >>> result = sync_delta_log("/data/events")
    >>> result.log_batch_id, result.delta_version, result.added, result.removed
    (57, 12, 4, 0)
    >>> import polars as pl; pl.read_delta("/data/events").height == read_committed("/data/events").num_rows
    True
"""

from __future__ import annotations

import datetime
import logging
import math
import os
import posixpath
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from ..errors import MissingDependencyError, ParquetSinkError
from ..failpoints import failpoint
from ..log.compaction import parse_duration_ms
from ..partitioning import parse_partition_path
from ..read.reader import CommittedFile, Snapshot, dataset_of, snapshot
from ..storage.filesystem import Storage
from .actions import delta_partition_value, delta_schema, file_stats

logger = logging.getLogger(__name__)

DELTA_DIR = "_delta_log"
APP_ID = "parquet-sink/_spark_metadata"  # the txn app id whose version is the last log batch mirrored
INSTALL = 'pip install "parquet-sink[delta]"'
_ATTEMPTS = 10
_FOOTER_THREADS = 8


class DeltaDependencyError(MissingDependencyError):
    """The ``deltalake`` package (delta-rs) is missing or too old for a Delta log."""


class DeltaLogError(ParquetSinkError):
    """The Delta log cannot be brought in step with ``_spark_metadata`` (it is ahead of it, its partition
    columns or their types differ, or concurrent commits kept winning)."""


def require_deltalake(what: str) -> ModuleType:
    """The ``deltalake`` module, or DeltaDependencyError naming ``what`` needed it and how to install it.

    Example: ``require_deltalake("sync_delta_log('/data/events')").__version__`` -> ``'1.6.6'``.
    """
    try:
        import deltalake.transaction  # 1.0+: commits with explicit add actions
    except ImportError as exc:
        raise DeltaDependencyError(
            f"{what} needs the deltalake package (delta-rs) >= 1.0, which is missing or older ({exc}). "
            f"Install it with: {INSTALL}"
        ) from exc
    return deltalake


@dataclass(frozen=True)
class DeltaSyncResult:
    """What :func:`sync_delta_log` did. ``log_batch_id``: the latest committed log batch (None: nothing
    committed yet); ``previous_log_batch_id``: the log batch the Delta log mirrored before (None: no Delta log
    or none recorded); ``delta_version``: the Delta table version after the sync (None: no Delta log, the
    output has no file yet); ``added``/``removed``: files the commit added and removed; ``committed``: whether
    a Delta commit was made (False: already in step)."""

    path: str
    log_batch_id: int | None
    previous_log_batch_id: int | None
    delta_version: int | None
    added: int = 0
    removed: int = 0
    committed: bool = False
    created: bool = False
    seconds: float = 0.0


@dataclass
class DeltaState:
    """The Delta log of an output as the latest Delta version sees it: its files (root-relative, decoded),
    the last log batch it mirrors (its ``txn`` version, None if none), its version, partition columns and schema."""

    version: int
    log_batch_id: int | None
    files: dict[str, int]  # relative path -> size
    partition_columns: list[str]
    schema: pa.Schema
    table: Any = field(repr=False)


def delta_failure(storage: Storage, what: str, exc: Exception) -> DeltaLogError:
    """A delta-rs failure as a DeltaLogError naming the output, what failed and the remedy, with no secret of
    the storage options (delta-rs may quote a signed URL)."""
    where = storage.display(storage.root)
    first_line = next(iter(str(exc).strip().splitlines()), "")
    detail = storage.redact(f"{type(exc).__name__}: {first_line}")[:300]  # the storage layer's redaction
    return DeltaLogError(
        f"{what} of {where}/{DELTA_DIR} failed ({detail}). The data and {where}/_spark_metadata are not affected; "
        f"fix the cause, then run `parquet-sink delta-sync {where}`."
    )


def read_delta_state(storage: Storage, deltalake: ModuleType | None = None) -> DeltaState | None:
    """The Delta log at the output root of ``storage``, or None when there is none; DeltaLogError when it
    cannot be read.

    Example: ``read_delta_state(Storage("/data/events")).log_batch_id`` -> ``57``.
    """
    deltalake = deltalake or require_deltalake(f"reading the Delta log of {storage.display(storage.root)}")
    uri, options = storage.object_store_location()
    try:
        if not deltalake.DeltaTable.is_deltatable(uri, options):
            return None
        table = deltalake.DeltaTable(uri, storage_options=options)
        actions = pa.table(table.get_add_actions(flatten=False)).select(["path", "size_bytes"])
    except (deltalake.exceptions.DeltaError, OSError) as exc:
        raise delta_failure(storage, "reading", exc) from exc
    files = dict(zip(map(unquote, actions.column("path").to_pylist()), actions.column("size_bytes").to_pylist()))
    schema = pa.schema(table.schema())
    return DeltaState(
        table.version(), table.transaction_version(APP_ID), files, list(table.metadata().partition_columns), schema, table
    )


def _relative_files(snap: Snapshot) -> dict[str, int]:
    """The committed files' root-relative paths, each to its index in ``snap.files`` (a
    :class:`CommittedFile` is built only for the files a commit adds); DeltaLogError for a file outside the
    root (a Delta add path could name it, but a moved output would then point elsewhere)."""
    table = snap.files.table
    outside = [p for p in table.column("outside_path").to_pylist() if p is not None]
    if outside:
        raise DeltaLogError(
            f"{snap.storage.display(snap.storage.root)}: the log commits {len(outside)} file(s) outside the output "
            f"root (first: {outside[0]}); a Delta log lists files under its table root only. Move those files "
            "under the root (and rewrite the log) before syncing the Delta log."
        )
    return {path: index for index, path in enumerate(table.column("relative_path").to_pylist())}


def _add_actions(
    snap: Snapshot, files: Mapping[str, int], dataset: ds.FileSystemDataset, new: list[str],
    partition_columns: list[str], schema: pa.Schema,
) -> list[Any]:
    """Add actions of the committed files ``new`` (relative paths, keys of ``files``): partition values from
    the reader's typed partition expressions (``dataset``), size and time from the log, statistics from each
    footer (read in parallel); ``schema``: the Delta table's."""
    from deltalake.transaction import AddAction

    prefix = snap.storage.root.rstrip("/") + "/"
    fragments = {f.path[len(prefix) :]: f for f in dataset.get_fragments()}
    data_schema = pa.schema([f for f in schema if f.name not in partition_columns])
    filesystem = snap.storage.arrow_filesystem()
    types = {c: schema.field(c).type for c in partition_columns}

    def action(relative: str) -> Any:
        committed: CommittedFile = snap.files[files[relative]]
        keys = ds.get_partition_keys(fragments[relative].partition_expression)
        values = {c: delta_partition_value(keys.get(c), types[c]) for c in partition_columns}
        stats = file_stats(pq.read_metadata(committed.path, filesystem=filesystem), data_schema)
        return AddAction(relative, committed.size, values, committed.modification_time, True, stats)

    with ThreadPoolExecutor(min(_FOOTER_THREADS, max(1, len(new)))) as pool:
        return list(pool.map(action, new))


def _partition_columns(snap: Snapshot, relative_paths: Iterable[str]) -> list[str]:
    """The partition columns of the committed files (every file of an output has the same ones), from their
    distinct directories."""
    directories = {path.rpartition("/")[0] for path in relative_paths}
    found = {tuple(c for c, _ in parse_partition_path(d + "/file")) if d else () for d in directories}
    if len(found) > 1:
        raise DeltaLogError(
            f"{snap.storage.display(snap.storage.root)}: committed files are partitioned by different columns "
            f"({sorted(found)}); a Delta table has one set of partition columns. Nothing was committed to "
            f"{DELTA_DIR}."
        )
    return list(found.pop()) if found else []


def _check_compatible(state: DeltaState, schema: pa.Schema, partition_columns: list[str], where: str) -> list[pa.Field]:
    """The columns to add to the Delta table's schema; DeltaLogError when the output's partition columns or a
    column's type differ from the table's (types of partition columns are inferred from directory names, as
    Spark does: a new value can widen them)."""
    remedy = (
        f"Delete {where}/{DELTA_DIR} and run `parquet-sink delta-sync {where}` to create it again from the log "
        "(readers of the Delta log lose its history)."
    )
    if partition_columns != state.partition_columns:
        raise DeltaLogError(
            f"{where}: the Delta log is partitioned by {state.partition_columns} but the committed files by "
            f"{partition_columns}. {remedy}"
        )
    added = []
    for column in schema:
        if column.name not in state.schema.names:
            added.append(column)
        elif not state.schema.field(column.name).type.equals(column.type):
            raise DeltaLogError(
                f"{where}: column {column.name!r} is {state.schema.field(column.name).type} in the Delta log but "
                f"{column.type} in the committed files (a partition column's type is inferred from all its "
                f"directory names, as Spark reads it, and a new value widened it). {remedy}"
            )
    return added


def _properties(deltalake: ModuleType, log_batch_id: int, creating: bool) -> Any:
    """The commit's ``txn`` (the idempotency key) and commitInfo. A creation that loses the race for version 0
    must fail (delta-rs would otherwise commit it again as version 1); an append is retried by delta-rs only
    past commits its ``txn`` does not conflict with."""
    return deltalake.CommitProperties(
        app_transactions=[deltalake.Transaction(APP_ID, log_batch_id)],
        custom_metadata={"parquetSinkLogBatchId": str(log_batch_id)},
        max_commit_retries=0 if creating else None,
    )


def _create(
    deltalake: ModuleType, storage: Storage, schema: pa.Schema, partition_columns: list[str], adds: list[Any],
    log_batch_id: int, configuration: dict[str, str],
) -> int:
    """Create the table (version 0) with the files ``adds`` already there; its Delta version."""
    from deltalake.transaction import create_table_with_add_actions

    uri, options = storage.object_store_location()
    create_table_with_add_actions(
        uri, deltalake.Schema.from_arrow(schema), adds, mode="error", partition_by=partition_columns or None,
        configuration=configuration, storage_options=options,
        commit_properties=_properties(deltalake, log_batch_id, creating=True),
    )
    return 0


def _append(
    deltalake: ModuleType, state: DeltaState, schema: pa.Schema, added_columns: list[pa.Field], actions: list[Any],
    log_batch_id: int,
) -> int:
    """Commit ``actions`` (adds and removes) to the existing table, after adding ``added_columns`` (new nullable
    columns: the schema evolution the writers allow); the table's version after it."""
    table = state.table
    if added_columns:
        table.alter.add_columns([deltalake.Field.from_arrow(f) for f in added_columns])
        table.update_incremental()
    table.create_write_transaction(
        actions, mode="append", schema=deltalake.Schema.from_arrow(schema),
        partition_by=state.partition_columns or None, commit_properties=_properties(deltalake, log_batch_id, False),
    )
    table.update_incremental()
    return table.version()


def sync_delta_log(
    path: str | os.PathLike[str],
    *,
    storage_options: dict[str, Any] | None = None,
    time_zone: str = "UTC",
    checkpoint_interval: int = 10,
    log_retention: str | datetime.timedelta = "7d",
) -> DeltaSyncResult:
    """Create or bring up to date the Delta log (``<path>/_delta_log``) of the output at ``path`` (written by
    :class:`~parquet_sink.ParquetSink`, :func:`~parquet_sink.write_batch` or Spark's own
    ``writeStream.format("parquet")``), so that it lists exactly the files ``committed_files(path)`` returns.
    One Delta commit catches up every log batch not mirrored yet (see the module docstring); an output whose
    log commits no file yet gets no Delta log. No data file is read beyond its footer, none is written.

    ``time_zone``: the zone timestamp partition directories were written in (Spark's session time zone,
    ``write_batch``'s ``time_zone``), as :func:`~parquet_sink.read_committed` takes it: Delta stores them as UTC.

    ``checkpoint_interval`` (``delta.checkpointInterval``) and ``log_retention`` (a duration, ``7d``:
    ``delta.logRetentionDuration``) are set when the table is created: delta-rs then writes a checkpoint every
    that many versions and deletes expired commit files after it, so the Delta log stays bounded.

    Raises DeltaDependencyError (deltalake not installed), NotAnOutputError (no ``_spark_metadata``),
    DeltaLogError (see its docstring).

    Example::

        >>> sync_delta_log("/data/events").committed
        True
        >>> sync_delta_log("/data/events").committed  # already in step: nothing to do
        False
    """
    deltalake = require_deltalake(f"sync_delta_log({path!r})")
    from deltalake.exceptions import CommitFailedError, DeltaError
    from deltalake.transaction import RemoveAction

    if not isinstance(checkpoint_interval, int) or checkpoint_interval < 1:
        raise ValueError(f"checkpoint_interval must be an integer >= 1, got {checkpoint_interval!r}")
    retention_s = max(1, math.ceil(parse_duration_ms(log_retention, "log_retention") / 1000))
    started = time.monotonic()
    options = dict(storage_options or {})
    for attempt in range(_ATTEMPTS):
        snap = snapshot(path, storage_options=options)
        storage = snap.storage
        where = storage.display(storage.root)
        state = read_delta_state(storage, deltalake)
        previous = None if state is None else state.log_batch_id
        latest = snap.latest_batch_id

        def result(**kw: Any) -> DeltaSyncResult:
            version = kw.pop("delta_version", None if state is None else state.version)
            return DeltaSyncResult(where, latest, previous, version, seconds=time.monotonic() - started, **kw)

        if previous is not None and (latest is None or previous > latest):
            raise DeltaLogError(
                f"{where}: the Delta log mirrors log batch {previous} but {storage.display(storage.join('_spark_metadata'))} "
                f"holds batches up to {latest}: the output was reset or its log replaced, and the Delta log may list "
                f"files it no longer commits. Delete {where}/{DELTA_DIR} and run `parquet-sink delta-sync {where}` "
                "to create it again from the log."
            )
        if latest is None or (previous is not None and previous >= latest):
            return result()
        files = _relative_files(snap)
        if state is None and not files:
            logger.info("%s: no committed file yet (log batch %d): no Delta log to create", where, latest)
            return result()
        partition_columns = _partition_columns(snap, files) if files else state.partition_columns
        dataset = dataset_of(snap, time_zone) if files else None
        schema = delta_schema(dataset.schema) if dataset is not None else state.schema
        added_columns = [] if state is None else _check_compatible(state, schema, partition_columns, where)
        known = {} if state is None else state.files
        new = [r for r in files if r not in known]
        gone = [r for r in known if r not in files]
        adds = _add_actions(snap, files, dataset, new, partition_columns, schema) if new else []
        now_ms = int(time.time() * 1000)
        removes = [RemoveAction(r, True, now_ms, known[r]) for r in gone]
        failpoint("delta_commit")
        try:
            if state is None:
                configuration = {
                    "delta.checkpointInterval": str(checkpoint_interval),
                    "delta.logRetentionDuration": f"interval {retention_s} seconds",
                }
                version = _create(deltalake, storage, schema, partition_columns, adds, latest, configuration)
            else:
                version = _append(deltalake, state, schema, added_columns, adds + removes, latest)
        except (DeltaError, OSError) as exc:
            # lost a race: a concurrent commit (delta-rs's conflict checker), or another sync created the table
            if not (isinstance(exc, CommitFailedError) or "already exists" in str(exc)):
                raise delta_failure(storage, f"committing log batch {latest}", exc) from exc
            logger.info("%s: another commit to %s won (attempt %d): re-reading", where, DELTA_DIR, attempt + 1)
            continue
        logger.info(
            "%s: Delta log version %d mirrors log batch %d (was %s): %d files added, %d removed",
            where, version, latest, previous, len(adds), len(removes),
        )
        return result(delta_version=version, added=len(adds), removed=len(removes), committed=True, created=state is None)
    raise DeltaLogError(
        f"{path}: other commits to {DELTA_DIR} won {_ATTEMPTS} times in a row; run `parquet-sink delta-sync {path}` "
        "again when fewer writers sync at once."
    )


def sync_after_commit(
    path: str, storage_options: Mapping[str, Any] | None, what: str, time_zone: str = "UTC"
) -> DeltaSyncResult | None:
    """The writers' hook (``delta_log=True``), called on the driver after a ``_spark_metadata`` commit: the
    sync, whose failure never fails the batch (committed already): it is logged as a WARNING with the remedy,
    and the next batch's sync catches up. Returns None when it failed.

    Example: ``sync_after_commit("/data/events", None, "batch 7")``.
    """
    try:
        return sync_delta_log(path, storage_options=dict(storage_options or {}), time_zone=time_zone)
    except Exception as exc:  # the batch is committed: a Delta failure must not fail or retry it
        logger.warning(
            "%s: %s is committed, but the Delta log could not follow (%s: %s); Delta readers see the previous "
            "state until the next batch catches up, or run `parquet-sink delta-sync %s`",
            path, what, type(exc).__name__, exc, path,
        )
        return None


def referenced_files(storage: Storage, retention_ms: int) -> set[str]:
    """The fsspec paths of the files a Delta version within ``retention_ms`` still references: the latest
    version's files and the files removed less than ``retention_ms`` ago (delta-rs's vacuum, dry run, tells
    which removed files expired). Empty when the output has no Delta log.

    Example: ``referenced_files(Storage("/data/events"), parse_duration_ms("7d"))`` -> ``{'/data/events/k=a/part-0...parquet'}``.
    """
    state = read_delta_state(storage)
    if state is None:
        return set()
    def expired(hours: int) -> set[str]:
        return set(state.table.vacuum(hours, dry_run=True, enforce_retention_duration=False, full=False))

    removed_recently = expired(0) - expired(math.ceil(retention_ms / 3_600_000))
    prefix = storage.root.rstrip("/") + "/"
    return {prefix + r for r in state.files} | {_under(storage, prefix, p) for p in removed_recently}


def _under(storage: Storage, prefix: str, found: str) -> str:
    """A path delta-rs's vacuum returns (relative to the root and decoded, or a URI) as an fsspec path."""
    path = storage.from_uri(found) if "://" in found else found
    return path if path.startswith(prefix) else posixpath.join(prefix, path)


def compare_logs(
    path: str | os.PathLike[str], *, storage_options: Mapping[str, Any] | None = None
) -> tuple[list[str], list[str]]:
    """What disagrees between ``_delta_log`` and ``_spark_metadata`` at ``path``: (problems, warnings).
    A file the Delta log lists and the log does not commit is a problem (Delta readers read data the output
    does not hold as committed); a Delta log behind the log (files or batches not mirrored yet) a warning.
    Both empty without a Delta log.

    Example: ``compare_logs("/data/events")`` -> ``([], ['... the Delta log mirrors log batch 55, the log is at 57 ...'])``.
    """
    snap = snapshot(path, storage_options=dict(storage_options or {}))
    storage = snap.storage
    state = read_delta_state(storage)
    if state is None:
        return [], []
    where = storage.display(storage.root)
    committed = _relative_files(snap)
    extra = sorted(set(state.files) - set(committed))
    missing = sorted(set(committed) - set(state.files))
    problems = [
        f"{where}/{DELTA_DIR} (version {state.version}) lists {len(extra)} file(s) that {where}/_spark_metadata does "
        f"not commit (first: {extra[0]}): Delta readers read them. Run `parquet-sink delta-sync {where}` (it removes "
        "files the log dropped), or delete the Delta log and sync again if it was written by another tool."
    ] if extra else []
    warnings = []
    if missing or state.log_batch_id != snap.latest_batch_id:
        warnings.append(
            f"{where}/{DELTA_DIR} is behind: it mirrors log batch {state.log_batch_id}, the log is at "
            f"{snap.latest_batch_id} ({len(missing)} committed file(s) not in the Delta log); Delta readers miss "
            f"them until `parquet-sink delta-sync {where}` or the next batch written with delta_log=True."
        )
    return problems, warnings


def has_delta_log(storage: Storage) -> bool:
    """Whether the output root holds a ``_delta_log`` directory (no deltalake import needed)."""
    return storage.exists(storage.join(DELTA_DIR))


__all__ = [
    "APP_ID",
    "DELTA_DIR",
    "DeltaDependencyError",
    "DeltaLogError",
    "DeltaState",
    "DeltaSyncResult",
    "compare_logs",
    "delta_failure",
    "has_delta_log",
    "read_delta_state",
    "referenced_files",
    "require_deltalake",
    "sync_after_commit",
    "sync_delta_log",
]
