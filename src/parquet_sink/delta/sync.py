"""``sync_delta_log``: keep a Delta Lake transaction log (``_delta_log/``) listing exactly the files
``_spark_metadata`` commits, so every Delta reader (delta-rs, polars, duckdb, Trino, Spark's Delta connector)
reads exactly-once data without a copy. The counterpart of delta-rs's ``write_deltalake`` and of Delta's
``OptimisticTransaction``, for files already written and committed by a streaming file sink. delta-rs (the
``deltalake`` package) creates the table, changes its schema and properties and writes checkpoints; the commit
of each sync is a commit file this module writes itself (the protocol's "Delta Log Entries", created only if
absent, as delta-rs commits), because delta-rs's own commit path rebuilds the table's whole file list.

One sync is one Delta commit that catches up every log batch not mirrored yet: ``add`` actions for the files
the batches after the mirrored one committed (partition values, size, time and statistics from the footer,
:mod:`.actions`), ``remove`` actions for files Delta lists and a compaction's snapshot dropped (retention), and
a ``txn`` action ``(APP_ID, latest log batch id)``: a sync that finds the Delta log's ``txn`` at the latest log
batch does nothing, so a replay never commits twice. The Delta log never lists a file the log does not commit;
it can only be behind (a crash between the two commits), and the next sync catches up. Concurrent syncs are
serialized by Delta's commit protocol (the loser re-reads). Cost per batch: the batch's delta file, its files'
footers and the new commit files (the Delta state is kept per process and read forward; a process's first sync
reads the Delta log's recent commits, :func:`read_recent_state`); the whole snapshot and the Delta log's file list
only at a compaction batch or an optimize, the whole table at checkpoints (delta-rs writes them).

The Delta log is a read-only view for Delta tools: every version this module commits carries the commitInfo
marker ``parquetSinkLogBatchId`` (and ``parquetSinkCheckedVersion``, the version up to which every commit was
found to be ours), so a commit of another Delta writer (``write_deltalake``, a Delta-side ``VACUUM`` or
``OPTIMIZE``, a table another tool created) is found and refused (:class:`DeltaLogError` naming the remedy,
``recreate=True``), never silently undone. The Delta state is read before ``_spark_metadata``: a sync beside a
batch and its own sync can then only find the Delta log behind the log, never ahead of it.

Example::

    >>> result = sync_delta_log("/data/events")
    >>> result.log_batch_id, result.delta_version, result.added, result.removed
    (57, 12, 4, 0)
    >>> import polars as pl; pl.read_delta("/data/events").height == read_committed("/data/events").num_rows
    True
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import math
import os
import posixpath
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from ..errors import MissingDependencyError, ParquetSinkError, SnapshotExpiredError, names_output
from ..failpoints import failpoint
from ..log.compaction import check_flags, check_positive_int, parse_duration_ms
from ..log.files import DELTA_DIR, require_output
from ..parquet_read import open_sized
from ..partitioning import DEFAULT_PARTITION_NAME, check_time_zone, parse_partition_path
from ..log.entry import records_of
from ..log.metadata_log import MetadataLog
from ..log.snapshot import read_snapshot
from ..read.history import optimize_figures, optimize_key
from ..read.reader import (
    CommittedFile,
    CommittedFiles,
    Snapshot,
    dataset_of,
    snapshot,
    snapshot_after,
    snapshot_of_log,
    unreadable_file,
)
from ..storage.filesystem import Storage
from ..statistics import file_statistics
from ..table_formats import TableFormat, TableLocks, kept_formats
from .actions import delta_partition_value, delta_schema, delta_type, file_stats, out_of_range
from .errors import DeltaLogError, DeltaRangeError

logger = logging.getLogger(__name__)

APP_ID = "parquet-sink/_spark_metadata"  # the txn app id whose version is the last log batch mirrored
MARKER = "parquetSinkLogBatchId"  # commitInfo key of every version this module commits
CHECKED = "parquetSinkCheckedVersion"  # commitInfo key: every version up to this one was found to be ours
ENGINE = "parquet-sink"  # commitInfo engineInfo of the commit files this module writes itself
TIME_ZONE_PROPERTY = "parquetSink.timeZone"  # table property: the session time zone of timestamp partitions
DELETED_FILE_RETENTION = "delta.deletedFileRetentionDuration"
LOG_RETENTION = "delta.logRetentionDuration"
INSTALL = 'pip install "parquet-sink[delta]"'
_ATTEMPTS = 10
_REREADS = 3  # a Delta log found ahead of the log is read again this many times before it is called reset
_FOOTER_THREADS = 8
_CHECKPOINT_ROWS = 100  # rows of a checkpoint read at a time while looking for its metaData and txn
_WEEK_MS = 7 * 86_400_000  # Delta's default deletedFileRetentionDuration
_MONTH_MS = 30 * 86_400_000  # Delta's default logRetentionDuration
_COMMIT_FILE = re.compile(r"^\d{20}\.json$")
_CHECKPOINT_FILE = re.compile(r"^(\d{20})\.checkpoint(?:\.\d+\.\d+)?\.parquet$")
_INTERVAL = re.compile(r"^\s*(?:interval\s+)?(\d+)\s*([a-z]+?)s?\s*$", re.IGNORECASE)
_UNIT_MS = {"nanosecond": 1e-6, "microsecond": 1e-3, "millisecond": 1, "second": 1000, "minute": 60_000,
            "hour": 3_600_000, "day": 86_400_000, "week": 7 * 86_400_000}


class DeltaDependencyError(MissingDependencyError):
    """The ``deltalake`` package (delta-rs) is missing or too old for a Delta log."""


def require_deltalake(what: str) -> ModuleType:
    """The ``deltalake`` module (1.0+: commits with explicit add actions), or DeltaDependencyError naming ``what``
    needed it and how to install it.

    Example: ``require_deltalake("sync_delta_log('/data/events')").__version__`` -> ``'1.6.6'``.
    """
    return DeltaDependencyError.require(
        what, ["deltalake", "deltalake.transaction"], (1, 0), "the deltalake package (delta-rs) >= 1.0", INSTALL
    )


@dataclass(frozen=True)
class DeltaSyncResult:
    """What :func:`sync_delta_log` did. ``log_batch_id``: the latest committed log batch (None: nothing
    committed yet); ``previous_log_batch_id``: the log batch the Delta log mirrored before (None: no Delta log
    or none recorded); ``delta_version``: the Delta table version after the sync (None: no Delta log, the
    output has no file yet); ``added``/``removed``: files the commit added and removed; ``committed``: whether
    a Delta commit was made (False: already in step); ``duplicates``: files ``_spark_metadata`` commits more
    than once (listed once by Delta, logged as a warning)."""

    path: str
    log_batch_id: int | None
    previous_log_batch_id: int | None
    delta_version: int | None
    added: int = 0
    removed: int = 0
    committed: bool = False
    created: bool = False
    seconds: float = 0.0
    duplicates: int = 0
    optimizes: int = 0


@dataclass(frozen=True)
class OptimizeStep:
    """How a sync mirrors the optimize committed as log batch ``batch`` (:mod:`parquet_sink.maintenance.optimize`,
    whose commit record carries ``key``, the hash of the files it replaced): ``upto`` is the log batch this
    Delta commit mirrors, the batch before the swap first (so the swap gets a Delta commit of its own), then the
    swap (or the swap at once when the batches before it add no file: an optimize's empty batches); ``exact``:
    this commit is the swap's alone. Without ``exact`` (the snapshot before it cannot be read any more: one
    commit then mirrors it with other batches, whose rows its new files may hold) every action is a data change.
    ``latest``: the log's latest batch (a sync commits again while ``upto`` is before it)."""

    batch: int
    key: str
    files: int
    bytes: int
    upto: int
    exact: bool
    latest: int


@dataclass
class DeltaState:
    """The Delta log of an output as the latest Delta version sees it: its version, the last log batch it mirrors
    (its ``txn`` version, None if none), partition columns, schema, table properties and ``metaData`` action (its
    id, name, description and creation time), and the commits of other writers found so far. Its files
    (root-relative, decoded, with their sizes) and its delta-rs table are read when first asked for
    (:attr:`files`, :attr:`table`): a per-batch sync that adds only new files needs neither, and reading them
    costs the table, not the batch."""

    version: int
    log_batch_id: int | None
    partition_columns: list[str]
    schema: pa.Schema
    storage: Storage = field(repr=False)
    configuration: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict, repr=False)
    foreign: list[dict[str, Any]] = field(default_factory=list)  # commits of other writers found so far
    known_files: dict[str, int] | None = field(default=None, repr=False)  # None: not read yet
    loaded_table: Any = field(default=None, repr=False)

    @property
    def table(self) -> Any:
        """The delta-rs table, loaded at :attr:`version` when first asked for."""
        if self.loaded_table is None:
            self.loaded_table = _load_table(self.storage, self.version)
        return self.loaded_table

    @property
    def files(self) -> dict[str, int]:
        """The files of :attr:`version` (relative path -> size), read through delta-rs when first asked for (every
        ``add`` action of the table: the cost of the table), then kept commit by commit (:func:`_apply`)."""
        if self.known_files is None:
            if self.loaded_table is not None and self.loaded_table.version() != self.version:
                self.loaded_table = None
            self.known_files = _files_of(self.storage, self.table)
        return self.known_files


def _load_table(storage: Storage, version: int | None = None) -> Any:
    """The delta-rs table of the output (at ``version``, default the newest); DeltaLogError when delta-rs cannot
    read it (a damaged newest commit named)."""
    deltalake = require_deltalake(f"reading the Delta log of {storage.display(storage.root)}")
    uri, options = storage.object_store_location()
    try:
        return deltalake.DeltaTable(uri, storage_options=options, version=version)
    except (deltalake.exceptions.DeltaError, OSError) as exc:
        raise _unreadable(storage, exc) from exc


def _unreadable(storage: Storage, exc: Exception) -> DeltaLogError:
    """The error for delta-rs failing to read the output's Delta log with ``exc``; raises a more precise one first:
    NotAnOutputError for a path that is no output (a file, a typo), DeltaLogError naming a damaged newest commit
    and its remedy."""
    require_output(storage)
    _check_newest_commit(storage)
    return delta_failure(storage, "reading", exc)


def _files_of(storage: Storage, table: Any) -> dict[str, int]:
    """Every file ``table`` lists (relative path, decoded -> size)."""
    import deltalake

    try:
        actions = pa.table(table.get_add_actions(flatten=False)).select(["path", "size_bytes"])
    except (deltalake.exceptions.DeltaError, OSError) as exc:
        raise delta_failure(storage, "reading", exc) from exc
    return dict(zip(map(unquote, actions.column("path").to_pylist()), actions.column("size_bytes").to_pylist()))


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


def _recreate_remedy(where: str) -> str:
    """The remedy of a Delta log that cannot follow the log any more: write it again from the log."""
    return (
        f"Run `parquet-sink delta-sync --recreate {where}` (sync_delta_log(..., recreate=True)): it deletes "
        f"{where}/{DELTA_DIR} and writes it again from {where}/_spark_metadata (Delta readers lose its history)."
    )


def read_delta_state(storage: Storage, deltalake: ModuleType | None = None) -> DeltaState | None:
    """The Delta log at the output root of ``storage`` read whole through delta-rs (its files included), or None
    when there is none; DeltaLogError when it cannot be read.

    Example: ``read_delta_state(Storage("/data/events")).log_batch_id`` -> ``57``.
    """
    deltalake = deltalake or require_deltalake(f"reading the Delta log of {storage.display(storage.root)}")
    uri, options = storage.object_store_location()
    try:
        if not deltalake.DeltaTable.is_deltatable(uri, options):
            return None
    except (deltalake.exceptions.DeltaError, OSError) as exc:
        raise _unreadable(storage, exc) from exc
    table = _load_table(storage)
    files = _files_of(storage, table)
    _check_newest_commit(storage)  # delta-rs may read past a damaged last line, or stop before a damaged commit
    metadata = table.metadata()
    return DeltaState(
        table.version(), table.transaction_version(APP_ID), list(metadata.partition_columns),
        pa.schema(table.schema()), storage, dict(metadata.configuration),
        {"id": metadata.id, "name": metadata.name, "description": metadata.description,
         "createdTime": metadata.created_time},
        known_files=files, loaded_table=table,
    )


class _Unusual(Exception):
    """A Delta log :func:`read_recent_state` leaves to delta-rs (:func:`read_delta_state`)."""


def read_recent_state(storage: Storage, deltalake: ModuleType) -> DeltaState | None:
    """The Delta log's state as :func:`read_delta_state` reads it, without its files (read when asked for,
    :attr:`DeltaState.files`) and at the cost of its recent commits, not of the table: one listing of
    ``_delta_log``, the commit files after its newest checkpoint from the newest back to the one holding the
    newest ``metaData`` and our ``txn`` (and back to the version the newest commit's sync checked, for
    :func:`foreign_commits`), and only when one is not found there, the ``metaData`` and ``txn`` columns of that
    checkpoint. A Delta log this does not follow (a gap, a damaged older commit, a checkpoint of another layout)
    is read whole by delta-rs; a damaged newest commit is DeltaLogError (:func:`_actions_of`), as there.

    Example: ``read_recent_state(Storage("/data/events"), deltalake).log_batch_id`` -> ``57``.
    """
    try:
        return _recent_state(storage, deltalake)
    except _Unusual as exc:
        logger.debug("%s: reading the Delta log whole (%s)", storage.display(storage.root), exc)
    state = read_delta_state(storage, deltalake)
    if state is not None:
        state.foreign = foreign_commits(state)
    return state


def _recent_state(storage: Storage, deltalake: ModuleType) -> DeltaState:
    """:func:`read_recent_state`'s reading; _Unusual where it leaves the Delta log to delta-rs."""
    try:
        names = [posixpath.basename(p) for p in storage.ls_names(storage.join(DELTA_DIR))]
    except FileNotFoundError:
        raise _Unusual("no _delta_log") from None
    commits = {int(name[:20]) for name in names if _COMMIT_FILE.match(name)}
    checkpoints: dict[int, list[str]] = {}
    for name in names:
        if match := _CHECKPOINT_FILE.match(name):
            checkpoints.setdefault(int(match.group(1)), []).append(name)
    if not commits:
        raise _Unusual("no commit file")
    newest = max(commits)
    base = max((v for v in checkpoints if v <= newest), default=-1)
    if any(v not in commits for v in range(base + 1, newest + 1)):
        raise _Unusual("a commit file missing after the checkpoint")
    read: dict[int, list[dict[str, Any]]] = {}

    def actions(version: int) -> list[dict[str, Any]]:
        if version not in read:
            try:
                body = storage.read_bytes(_commit_file(storage, version))
            except FileNotFoundError:
                raise _Unusual(f"the commit file of version {version} went away") from None
            try:
                read[version] = _actions_of(storage, version, body)
            except DeltaLogError:
                if version == newest:
                    raise
                raise _Unusual(f"the commit file of version {version} is damaged") from None
        return read[version]

    def history(limit: int) -> list[dict[str, Any]]:
        infos = []
        for version in range(newest, max(newest - limit, -1), -1):
            info = next((a["commitInfo"] for a in actions(version) if "commitInfo" in a), {})
            infos.append({**info, "version": version})
        return infos

    foreign = _foreign_among(newest, history)
    metadata: dict[str, Any] | None = None
    txn: dict[str, Any] | None = None
    for version in range(newest, base, -1):
        for action in actions(version):
            ((kind, body),) = action.items()
            if kind == "metaData" and metadata is None:
                metadata = body
            elif kind == "txn" and txn is None and body.get("appId") == APP_ID:
                txn = body
        if metadata is not None and txn is not None:
            break
    if (metadata is None or txn is None) and base >= 0:
        metadata, txn = _checkpoint_state(storage, checkpoints[base], metadata, txn)
    if metadata is None:
        raise _Unusual("no metaData action found")
    return DeltaState(
        newest, None if txn is None else txn["version"], list(metadata.get("partitionColumns") or []),
        pa.schema(deltalake.Schema.from_json(metadata["schemaString"])), storage,
        dict(metadata.get("configuration") or {}), metadata, foreign,
    )


def _checkpoint_state(
    storage: Storage, parts: list[str], metadata: dict[str, Any] | None, txn: dict[str, Any] | None
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The ``metaData`` and our ``txn`` of a checkpoint (``parts``: its file names), where not given: only those
    two columns are read (an ``add`` row holds neither), a slice of rows at a time until both are found (delta-rs
    writes them first, before the ``add`` rows)."""
    filesystem = storage.arrow_filesystem()
    for name in parts:
        try:
            with filesystem.open_input_file(storage.join(DELTA_DIR, name)) as source:
                for rows in pq.ParquetFile(source).iter_batches(_CHECKPOINT_ROWS, columns=["metaData", "txn"]):
                    if metadata is None:
                        found = rows.column("metaData").drop_null().to_pylist()
                        if found:
                            metadata = {**found[0], "configuration": dict(found[0].get("configuration") or {})}
                    if txn is None:
                        txn = next((t for t in rows.column("txn").drop_null().to_pylist() if t["appId"] == APP_ID), None)
                    if metadata is not None and txn is not None:
                        return metadata, txn
        except (OSError, KeyError, ValueError, pa.ArrowInvalid) as exc:
            raise _Unusual(f"checkpoint {name}: {exc}") from None
    return metadata, txn


_STATES: dict[tuple[str, str], tuple[DeltaState, tuple[int, int]]] = {}  # per process: the last state read
_LOCKS = TableLocks()


def _cache_key(storage: Storage) -> tuple[str, str]:
    uri, options = storage.object_store_location()
    return uri, json.dumps(options or {}, sort_keys=True, default=str)


def _sync_lock(storage: Storage) -> threading.Lock:
    """One lock per Delta log in this process: syncs in threads of one process take turns (the cached state
    and its delta-rs table are not shared by two at once); processes are serialized by Delta's commits."""
    return _LOCKS(_cache_key(storage))


def _commit_file(storage: Storage, version: int) -> str:
    return storage.join(DELTA_DIR, f"{version:020d}.json")


def _stamp(storage: Storage, version: int) -> tuple[int, int]:
    """Size and time of the commit file of ``version``: a cached state is only brought forward from a Delta
    log whose commit file it read is still the same file (not a log deleted and written again)."""
    info = storage.info(_commit_file(storage, version))
    return info.size, info.mtime_ms


def _actions_of(storage: Storage, version: int, commit: bytes) -> list[dict[str, Any]]:
    """The actions of the commit file of ``version``, one JSON object a line; DeltaLogError naming the file and
    the remedy when it is damaged: empty, a line that is not one action, or a commit this module wrote (its
    ``engineInfo``) cut short (each ends with its ``txn`` and a newline). Commit files are created whole
    (put-if-absent, as delta-rs creates its own): a damaged one was truncated or overwritten since, and a sync
    that went on from it would call the Delta log in step while Delta readers fail or miss files."""
    try:
        actions = [json.loads(line) for line in commit.splitlines() if line.strip()]
    except ValueError:  # not JSON, or not UTF-8
        actions = []
    whole = bool(actions) and all(isinstance(a, dict) and len(a) == 1 for a in actions)
    info = next((a["commitInfo"] for a in actions if isinstance(a, dict) and "commitInfo" in a), None) if whole else None
    if whole and isinstance(info, dict) and info.get("engineInfo") == ENGINE:
        last = actions[-1].get("txn")
        whole = commit.endswith(b"\n") and isinstance(last, dict) and last.get("appId") == APP_ID
    if not whole:
        where = storage.display(storage.root)
        raise DeltaLogError(
            f"{storage.display(_commit_file(storage, version))}, the commit of Delta version {version}, is damaged "
            f"({len(commit)} bytes that are not a whole Delta commit: truncated or overwritten after it was "
            "written), so Delta readers fail on it or miss files it adds, and the sync cannot tell which log "
            f"batch the Delta log mirrors. Nothing was committed. {_recreate_remedy(where)}"
        )
    return actions


def _check_newest_commit(storage: Storage) -> None:
    """DeltaLogError (:func:`_actions_of`) when the newest commit file of the Delta log is damaged: what every
    sync and Delta reader reads last, and what a reader that skips what it cannot parse would leave out."""
    versions = [int(name[:20]) for name in map(posixpath.basename, storage.ls_names(storage.join(DELTA_DIR)))
                if _COMMIT_FILE.match(name)]
    if versions:
        try:
            body = storage.read_bytes(_commit_file(storage, max(versions)))
        except FileNotFoundError:  # cleaned up since the listing: a newer one exists
            return
        _actions_of(storage, max(versions), body)


def _apply(state: DeltaState, actions: list[dict[str, Any]], version: int) -> None:
    """Apply the ``actions`` of the commit of ``version`` to ``state``: ``add``/``remove`` to its files (when
    read), our ``txn``, ``metaData`` (schema, partition columns, properties); a commit whose ``commitInfo`` lacks
    :data:`MARKER` (or that has none) is another writer's (``state.foreign``)."""
    import deltalake

    info: dict[str, Any] = {"operation": "a commit without commitInfo"}
    for action in actions:
        ((kind, body),) = action.items()
        if kind == "add" and state.known_files is not None:
            state.known_files[unquote(body["path"])] = body["size"]
        elif kind == "remove" and state.known_files is not None:
            state.known_files.pop(unquote(body["path"]), None)
        elif kind == "txn" and body.get("appId") == APP_ID:
            state.log_batch_id = body["version"]
        elif kind == "metaData":
            state.partition_columns = list(body.get("partitionColumns") or [])
            state.configuration = dict(body.get("configuration") or {})
            state.metadata = body
            state.schema = pa.schema(deltalake.Schema.from_json(body["schemaString"]))
        elif kind == "commitInfo":
            info = body
    if MARKER not in info:
        state.foreign.insert(0, {**info, "version": version})
    state.version = version


def _forward(storage: Storage, state: DeltaState) -> None:
    """Bring ``state`` to the Delta log's newest version by reading only the commit files after it: the cost
    of the new commits, not of the table (delta-rs's own incremental update rebuilds its file list)."""
    while True:
        try:
            commit = storage.read_bytes(_commit_file(storage, state.version + 1))
        except FileNotFoundError:
            return
        _apply(state, _actions_of(storage, state.version + 1, commit), state.version + 1)


def _remember(storage: Storage, state: DeltaState) -> None:
    _STATES[_cache_key(storage)] = (state, _stamp(storage, state.version))


def current_delta_state(storage: Storage, deltalake: ModuleType) -> DeltaState | None:
    """The Delta log's state (with ``foreign`` from :func:`foreign_commits`), kept per process and brought
    forward commit by commit (:func:`_forward`) while the same Delta log is there: a sync after a batch costs
    that batch, not the table. The first call of a process (or after the log was replaced) reads its recent
    commits (:func:`read_recent_state`), not its files."""
    cached = _STATES.pop(_cache_key(storage), None)
    state = None
    if cached is not None:
        try:
            if _stamp(storage, cached[0].version) == cached[1]:
                _forward(storage, cached[0])
                state = cached[0]
        except (FileNotFoundError, ValueError, KeyError, OSError, ParquetSinkError) as exc:
            logger.debug("%s: reading the Delta log whole (%s)", storage.display(storage.root), exc)
    if state is None:
        state = read_recent_state(storage, deltalake)
    if state is not None:
        _remember(storage, state)
    return state


def foreign_commits(state: DeltaState) -> list[dict[str, Any]]:
    """The commits of other Delta writers (commitInfo without :data:`MARKER`) among the versions no sync has
    checked yet: the latest one, and those between the version the latest one's sync checked and it (commits
    delta-rs let that sync's commit pass). Each sync checks before it commits and records what it checked
    (:data:`CHECKED`), so every older version was found to be ours. Newest first; empty when all are ours.

    Example: after ``write_deltalake(out, data, mode="append")``, ``foreign_commits(state)[0]["operation"]``
    -> ``'WRITE'``.
    """
    return _foreign_among(state.version, lambda limit: state.table.history(limit=limit))


def _foreign_among(version: int, history: Callable[[int], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """:func:`foreign_commits` of the Delta log at ``version`` whose ``history(limit)`` is the commitInfo (with its
    ``version``) of its newest ``limit`` versions, newest first."""
    latest = history(1)
    if not latest or MARKER not in latest[0]:
        return latest
    checked = int(latest[0].get(CHECKED, version - 1))
    if checked >= version - 1:
        return []
    return [info for info in history(version - checked) if MARKER not in info]


def _foreign_error(where: str, commits: list[dict[str, Any]]) -> DeltaLogError:
    """The refusal of a Delta log another Delta writer committed to: what it did, why it is refused, what to do."""
    first = commits[-1]
    engine = first.get("engineInfo") or first.get("clientVersion") or "an unknown engine"
    return DeltaLogError(
        f"{where}/{DELTA_DIR}: {len(commits)} version(s) were committed by another Delta writer, first version "
        f"{first.get('version')} ({first.get('operation')} by {engine}). The Delta log of a parquet-sink output is "
        f"a read-only view of {where}/_spark_metadata: an append or overwrite (write_deltalake), a Delta-side "
        "VACUUM or OPTIMIZE, or a table another tool created would be undone by the next sync, so nothing was "
        "committed. Write rows through parquet-sink (write_batch, ParquetSink) instead; the other writer's rows "
        f"are not part of the output. {_recreate_remedy(where)}"
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


def duplicate_files(snap: Snapshot) -> list[tuple[str, list[int | None]]]:
    """The files ``snap`` commits more than once (the same path in two entries), each with the batches that
    commit it. Spark's readers read such a file once per entry; a Delta log keys files by path and lists it
    once, so the two views differ: reported, never collapsed silently.

    Example: ``duplicate_files(snapshot("/data/events"))`` -> ``[('part-0...parquet', [3, 7])]``.
    """
    table = snap.files.table.select(["relative_path", "batch_id"])
    if len(pc.unique(table.column("relative_path"))) == table.num_rows:  # (count_distinct is ~10x slower)
        return []
    grouped = table.group_by("relative_path").aggregate([("batch_id", "list"), ("relative_path", "count")])
    grouped = grouped.filter(pc.greater(grouped.column("relative_path_count"), 1))
    batches = [sorted(b, key=lambda batch: (batch is None, batch or 0)) for b in grouped.column("batch_id_list").to_pylist()]
    return sorted(zip(grouped.column("relative_path").to_pylist(), batches))  # a list aggregate keeps no order


def _duplicates_text(where: str, duplicates: list[tuple[str, list[int | None]]]) -> str:
    path, batches = duplicates[0]
    return (
        f"{where}/_spark_metadata commits {len(duplicates)} file(s) more than once (first: {path}, in batches "
        f"{batches}): Spark's readers and read_committed read their rows once per entry, Delta readers once (a "
        "Delta log keys files by path). Each file should be committed once: if an entry was copied into a "
        "later batch by hand or by another tool, that batch's log file is wrong."
    )


def _add_actions(
    snap: Snapshot, files: Mapping[str, int], dataset: ds.FileSystemDataset, new: list[str],
    partition_columns: list[str], schema: pa.Schema,
) -> list[Any]:
    """Add actions of the committed files ``new`` (relative paths, keys of ``files``): partition values from
    the reader's typed partition expressions (``dataset``), size and time from the log, statistics from each
    footer (read in parallel, one ranged read each); ``schema``: the Delta table's."""
    from deltalake.transaction import AddAction

    prefix = snap.storage.root.rstrip("/") + "/"
    fragments = {f.path[len(prefix) :]: f for f in dataset.get_fragments()}
    data_schema = pa.schema([f for f in schema if f.name not in partition_columns])
    types = {c: schema.field(c).type for c in partition_columns}

    def action(relative: str) -> Any:
        committed: CommittedFile = snap.files[files[relative]]
        what = f"committed file {snap.storage.display(committed.path)} of batch {committed.batch_id}"
        try:
            keys = ds.get_partition_keys(fragments[relative].partition_expression)
        except OverflowError:  # a timestamp directory whose instant lies in year 0 or 10000 in UTC
            timestamps = [c for c in partition_columns if pa.types.is_timestamp(types[c])]
            raise out_of_range(", ".join(timestamps), f"{what} (its directory, read in the output's time zone)") from None
        values = {c: delta_partition_value(keys.get(c), types[c]) for c in partition_columns}
        try:
            with open_sized(snap.storage, committed.path, committed.size) as parquet:
                stats = file_stats(parquet, data_schema, what)
        except (OSError, pa.ArrowInvalid) as exc:  # ArrowInvalid: not Parquet (truncated, empty)
            raise unreadable_file(snap.storage, committed, exc) or DeltaLogError(
                f"reading {what} failed ({type(exc).__name__}: {exc}); nothing was committed to {DELTA_DIR}. Fix "
                f"the cause, then run `parquet-sink delta-sync {snap.storage.display(snap.storage.root)}`."
            ) from exc
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


def _holds(table_type: pa.DataType, inferred: pa.DataType) -> bool:
    """Whether every directory value inferred as ``inferred`` (Spark's inference) reads as a value of a
    partition column the table declares as ``table_type``: Spark's widening of the two is the table's type
    (an int column keeps being a string column when retention dropped the values that made it a string)."""
    inferred = delta_type(inferred) if not pa.types.is_null(inferred) else inferred
    if pa.types.is_null(inferred) or table_type.equals(inferred) or pa.types.is_string(table_type):
        return True
    if pa.types.is_int64(table_type) or pa.types.is_float64(table_type):
        return pa.types.is_int32(inferred)
    if pa.types.is_decimal(table_type) and table_type.scale == 0:
        width = {pa.int32(): 10, pa.int64(): 20}.get(inferred, getattr(inferred, "precision", 99))
        return (pa.types.is_integer(inferred) or pa.types.is_decimal(inferred)) and width <= table_type.precision
    if pa.types.is_timestamp(table_type):
        return pa.types.is_date(inferred)
    return False


def _check_compatible(
    state: DeltaState, table_schema: pa.Schema, schema: pa.Schema, partition_columns: list[str], where: str
) -> list[pa.Field]:
    """The columns to add to the Delta table's schema (``table_schema``: the table's, with the columns
    :func:`_retyped` retypes); DeltaLogError when the output's partition columns or a column's type differ from
    the table's (types of partition columns are inferred from directory names, as Spark does: a new value can
    widen them beyond the table's type)."""
    remedy = _recreate_remedy(where)
    if partition_columns != state.partition_columns:
        raise DeltaLogError(
            f"{where}: the Delta log is partitioned by {state.partition_columns} but the committed files by "
            f"{partition_columns}. {remedy}"
        )
    added = []
    for column in schema:
        if column.name not in table_schema.names:
            added.append(column)
        elif not table_schema.field(column.name).type.equals(column.type):
            raise DeltaLogError(
                f"{where}: column {column.name!r} is {table_schema.field(column.name).type} in the Delta log but "
                f"{column.type} in the committed files ({_why_retyped(column.name, partition_columns)}). {remedy}"
            )
    return added


def _why_retyped(column: str, partition_columns: list[str]) -> str:
    """Why the committed files read ``column`` as another type than the Delta log declares."""
    if column in partition_columns:
        return ("a partition column's type is inferred from all its directory names, as Spark reads it, and a new "
                "value widened it")
    return ("a writer other than this package's (Spark's own file sink) committed files holding another type than "
            "a file the Delta log lists holds values of; a column of nulls only takes the type of its first values, "
            "unless a struct, list or map")


def _evolved(schema: pa.Schema, added: list[pa.Field], partition_columns: list[str]) -> pa.Schema:
    """The table's ``schema`` with the ``added`` columns after its data columns and before its partition
    columns: the order ``read_committed`` and ``spark.read.parquet`` give (partition columns last), so a Delta
    reader's columns come in the same order after a batch added one."""
    data = [f for f in schema if f.name not in partition_columns]
    return pa.schema(data + added + [f for f in schema if f.name in partition_columns])


def _retyped(state: DeltaState, inferred: pa.Schema, gone: Iterable[str]) -> dict[str, pa.DataType]:
    """The columns the table declares as ``string`` whose new files (``inferred``: their types, as
    ``read_committed`` and Spark's reader type them) hold another type, while every file the table keeps (its
    files but ``gone``) holds no value of the column (:func:`_valued`): each to the Delta type of its new values.
    Such a column is a string only because the table was created while its values were all null (Delta has no
    null type): a partition column whose directories were all the null partition, or a data column of nulls only
    (Parquet's null type, as pyarrow writes ``pa.null()`` and Spark's writer its ``NullType``). No reader of the
    table's versions so far saw a value of it, so retyping it (a ``metaData`` action, as schema evolution writes)
    loses nothing, and Delta readers then read the type ``read_committed`` reads (not a struct, list or map: the
    kept files' statistics hold the column as a string's). Time travel to the versions
    before reads them with their own ``metaData``. A column with a value in a kept file keeps the table's type
    (:func:`_table_partition_types`; a data column is refused by :func:`_check_compatible`). Reads the table's
    file list (once per process, :attr:`DeltaState.files`) only when a column may be retyped, and the footers of
    the kept files only when a data column may be."""
    candidates = {}
    for column in inferred.names:
        declared = state.schema.field(column).type if column in state.schema.names else None
        if declared is not None and pa.types.is_string(declared):
            found = inferred.field(column).type
            # not to a nested type: the files' statistics count the string's nulls as one number, where a
            # struct's are per field (delta-rs then fails to read the table)
            typed = not pa.types.is_null(found) and not pa.types.is_nested(found)
            if typed and not pa.types.is_string(delta_type(found)):
                candidates[column] = delta_type(found)
    for relative in set(state.files).difference(gone) if candidates else ():
        for column in _valued(state, relative, set(candidates)):
            candidates.pop(column)
        if not candidates:
            break
    return candidates


def _valued(state: DeltaState, relative: str, columns: set[str]) -> set[str]:
    """The ``columns`` the table's file ``relative`` may hold a value of: a partition column whose directory is
    not the null partition; a data column its footer declares with another type than Parquet's null type, unless
    its statistics count as many nulls as rows (the footer read only when a data column is asked for)."""
    partitions = dict(parse_partition_path(relative))
    valued = {c for c in columns & partitions.keys() if partitions[c] != DEFAULT_PARTITION_NAME}
    data = columns - partitions.keys()
    if data:
        with open_sized(state.storage, state.storage.join(relative), state.files[relative]) as parquet:
            footer = parquet.metadata
        schema, leaves = footer.schema.to_arrow_schema(), file_statistics(footer)
        for column in data & set(schema.names):
            nulls = leaves.get((column,), None)
            counted = nulls is not None and nulls.null_count == footer.num_rows
            if not pa.types.is_null(schema.field(column).type) and not counted:
                valued.add(column)
    return valued


def _with_types(schema: pa.Schema, types: Mapping[str, pa.DataType]) -> pa.Schema:
    """``schema`` with the columns of ``types`` of those types."""
    return pa.schema([f.with_type(types[f.name]) if f.name in types else f for f in schema])


def _table_partition_types(
    partition_columns: list[str], table_schema: pa.Schema, inferred: pa.Schema, zone: str
) -> dict[str, pa.DataType]:
    """The partition types to read the committed directories with: the table's (``table_schema``) for each
    column whose inferred type it holds (:func:`_holds`; a timestamp read in the session zone ``zone``), so a
    sync never flips the table's type back; the inferred one otherwise (then refused by
    :func:`_check_compatible`)."""
    forced = {}
    for column in partition_columns:
        if column in inferred.names and column in table_schema.names:
            table_type = table_schema.field(column).type
            found = inferred.field(column).type
            if not table_type.equals(delta_type(found)) and _holds(table_type, found):
                forced[column] = pa.timestamp("us", zone) if pa.types.is_timestamp(table_type) else table_type
    return forced


def _timestamp_partitions(schema: pa.Schema, partition_columns: list[str]) -> set[str]:
    """The partition columns ``schema`` declares as timestamps."""
    return {c for c in partition_columns if c in schema.names and pa.types.is_timestamp(schema.field(c).type)}


def _session_zone(state: DeltaState | None, time_zone: str | None, where: str) -> str:
    """The session time zone to read timestamp partition directories in: ``time_zone``, else the table's
    recorded one (:data:`TIME_ZONE_PROPERTY`), else UTC. DeltaLogError when the table has a timestamp
    partition column and recorded another zone: the same directory names would be other instants."""
    recorded = None if state is None else state.configuration.get(TIME_ZONE_PROPERTY)
    zone = time_zone or recorded or "UTC"
    timestamps = state is not None and bool(_timestamp_partitions(state.schema, state.partition_columns))
    if recorded and zone != recorded and timestamps:
        raise DeltaLogError(
            f"{where}: the Delta log's timestamp partition values were read in session time zone {recorded!r} "
            f"(table property {TIME_ZONE_PROPERTY}), this sync was given {zone!r}: the same directory names would "
            f"be other instants, so nothing was committed. Sync with time_zone={recorded!r} (`--time-zone "
            f"{recorded}`); if the directories were written in {zone!r}, run `parquet-sink delta-sync --recreate "
            f"--time-zone {zone} {where}`."
        )
    return zone


def _properties(deltalake: ModuleType, log_batch_id: int, checked: int, creating: bool = False) -> Any:
    """The commit's ``txn`` (the idempotency key) and commitInfo marker (:data:`MARKER`, :data:`CHECKED`). A
    creation that loses the race for version 0 must fail (delta-rs would otherwise commit it again as version
    1); an append is retried by delta-rs only past commits its ``txn`` does not conflict with."""
    return deltalake.CommitProperties(
        app_transactions=[deltalake.Transaction(APP_ID, log_batch_id)],
        custom_metadata={MARKER: str(log_batch_id), CHECKED: str(checked)},
        max_commit_retries=0 if creating else None,
    )


def _record_zone(deltalake: ModuleType, table: Any, zone: str, log_batch_id: int, checked: int) -> None:
    """Record the session time zone as a table property (delta-rs takes no custom property at creation)."""
    table.alter.set_table_properties(
        {TIME_ZONE_PROPERTY: zone}, raise_if_not_exists=False,
        commit_properties=_properties(deltalake, log_batch_id, checked),
    )
    table.update_incremental()


def _create(
    deltalake: ModuleType, storage: Storage, schema: pa.Schema, partition_columns: list[str], adds: list[Any],
    log_batch_id: int, configuration: dict[str, str], zone: str,
) -> int:
    """Create the table (version 0) with the files ``adds`` already there and record the session time zone;
    its Delta version."""
    from deltalake.transaction import create_table_with_add_actions

    uri, options = storage.object_store_location()
    create_table_with_add_actions(
        uri, deltalake.Schema.from_arrow(schema), adds, mode="error", partition_by=partition_columns or None,
        configuration=configuration, storage_options=options,
        commit_properties=_properties(deltalake, log_batch_id, -1, creating=True),
    )
    table = deltalake.DeltaTable(uri, storage_options=options, version=0)
    _record_zone(deltalake, table, zone, log_batch_id, 0)
    return table.version()


_UNQUOTED = re.compile(r"[A-Za-z0-9/:&+=@,;'!$()_.~-]*")


def _quote(relative: str) -> str:
    """A root-relative path as a Delta action's ``path`` (a URI reference), percent-encoded as delta-rs does."""
    return relative if _UNQUOTED.fullmatch(relative) else quote(relative, safe="/:&+=@,;'!$()")


@dataclass(frozen=True)
class QuietActions:
    """The actions of a sync's commit that change no data (``dataChange=false``, which Delta streaming readers
    skip): the root-relative paths of the ``adds`` and the ``removes`` an optimize rewrote, and the commitInfo
    of an optimize (``OPTIMIZE``, as delta-rs's ``optimize.compact()`` writes it) when the commit is an
    optimize's alone."""

    adds: frozenset[str] = frozenset()
    removes: frozenset[str] = frozenset()
    info: dict[str, Any] | None = None


def _size_metrics(sizes: list[int]) -> str:
    """delta-rs's ``filesAdded``/``filesRemoved`` operation metric of files of ``sizes``."""
    return json.dumps({
        "avg": sum(sizes) / len(sizes) if sizes else 0.0, "max": max(sizes, default=0), "min": min(sizes, default=0),
        "totalFiles": len(sizes), "totalSize": sum(sizes),
    }, separators=(",", ":"))


def _quiet_actions(
    step: OptimizeStep | None, adds: list[Any], gone: list[str], state: DeltaState | None, where: str
) -> QuietActions:
    """Which actions of this commit change no data: none unless the commit is an optimize's swap alone (its
    inputs all mirrored before: the new files hold no row Delta readers have not seen); then its adds, and its
    removes with an ``OPTIMIZE`` commitInfo when the removed files are exactly the swap's (their
    :func:`~parquet_sink.read.history.optimize_key`; else retention dropped some with it, a data change)."""
    if step is None or not step.exact or state is None:
        return QuietActions()
    quiet_adds = frozenset(a.path for a in adds)
    if optimize_key(gone) != step.key:
        logger.warning(
            "%s: the Delta commit of log batch %d (an optimize) also removes files that retention dropped: they are "
            "removed with dataChange=true", where, step.upto,
        )
        return QuietActions(quiet_adds)
    added = [a.size for a in adds]
    removed = [state.files[r] for r in gone]
    info = {
        "operation": "OPTIMIZE", "operationParameters": {"predicate": "[]"},
        "operationMetrics": {
            "numFilesAdded": len(added), "numFilesRemoved": len(removed), "filesAdded": _size_metrics(added),
            "filesRemoved": _size_metrics(removed),
            "partitionsOptimized": len({a.path.rpartition("/")[0] for a in adds}),
            "numBatches": len(added), "totalConsideredFiles": len(removed), "totalFilesSkipped": 0,
        },
    }
    return QuietActions(quiet_adds, frozenset(gone), info)


def _commit_lines(
    state: DeltaState, adds: list[Any], gone: list[str], log_batch_id: int, partition_columns: list[str],
    quiet: QuietActions,
) -> list[dict[str, Any]]:
    """The actions of the commit file of one sync (written one JSON object a line, as the Delta protocol's "Delta
    Log Entries" say): commitInfo (with our marker), the ``add`` and ``remove`` actions and the ``txn``; the
    actions ``quiet`` names with ``dataChange=false`` (a remove of those with its partition values, as delta-rs
    writes it)."""
    now_ms = _now_ms()
    info = {
        "timestamp": now_ms, "operation": "WRITE",
        "operationParameters": {"mode": "Append", "partitionBy": json.dumps(partition_columns, ensure_ascii=False)},
        "readVersion": state.version, "engineInfo": ENGINE, "isBlindAppend": False, **(quiet.info or {}),
        MARKER: str(log_batch_id), CHECKED: str(state.version),
    }
    actions: list[dict[str, Any]] = [{"commitInfo": info}]
    actions += [
        {"add": {"path": _quote(a.path), "partitionValues": a.partition_values, "size": a.size,
                 "modificationTime": a.modification_time, "dataChange": a.path not in quiet.adds, "stats": a.stats}}
        for a in adds
    ]
    values = {a.path.rpartition("/")[0]: a.partition_values for a in adds}
    for r in gone:
        remove = {"path": _quote(r), "deletionTimestamp": now_ms, "dataChange": r not in quiet.removes,
                  "size": state.files[r]}
        directory = r.rpartition("/")[0]
        if r in quiet.removes and directory in values:
            remove.update(extendedFileMetadata=True, partitionValues=values[directory])
        actions.append({"remove": remove})
    actions.append({"txn": {"appId": APP_ID, "version": log_batch_id, "lastUpdated": now_ms}})
    return actions


# A commit's actions as UTF-8 JSON lines, non-ASCII characters as they are, as delta-rs writes them: delta-rs reads
# an escaped surrogate pair (a character beyond U+FFFF, such as U+20000, written "\ud840\udc00") as another
# character (U+10000), which made a partition value wrong and a string bound too low (filtered reads skipped the
# file). One encoder: json.dumps builds one per call.
_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _append(
    deltalake: ModuleType, storage: Storage, state: DeltaState, schema: pa.Schema | None, adds: list[Any],
    gone: list[str], log_batch_id: int, zone: str, quiet: QuietActions,
) -> int | None:
    """Commit ``adds`` and the removal of ``gone`` to the existing table as its next version, with ``schema`` as
    the table's new schema when given (new nullable columns: the schema evolution the writers allow; partition
    columns :func:`_retyped` retypes; a ``metaData`` action in the same commit, recording the session zone when
    it makes a partition column a timestamp) and after recording the session zone if the table has none
    (through delta-rs, once); the table's version after it, or None when
    another commit took that version (read again and retry). The commit file is created only if absent (the
    Delta protocol's mutual exclusion, as delta-rs commits), and costs the batch, not the table; a checkpoint
    is written through delta-rs every ``delta.checkpointInterval`` versions, expired commit files cleaned."""
    if TIME_ZONE_PROPERTY not in state.configuration:
        state.table.update_incremental()
        _record_zone(deltalake, state.table, zone, log_batch_id, state.version)
        _forward(storage, state)
    version = state.version + 1
    actions = _commit_lines(state, adds, gone, log_batch_id, state.partition_columns, quiet)
    if schema is not None:  # the new columns and types in the same commit as the files that bring them
        actions.insert(0, _metadata_action(deltalake, state, schema, zone))
    commit = "\n".join(map(_COMPACT_JSON.encode, actions)).encode("utf-8") + b"\n"
    if not storage.put_if_absent(_commit_file(storage, version), commit):
        return None
    _apply(state, actions, version)
    _remember(storage, state)
    if version % _checkpoint_interval(state.configuration) == 0:
        try:
            state.table.update_incremental()
            state.table.create_checkpoint()
            state.table.cleanup_metadata()
        except (deltalake.exceptions.DeltaError, OSError) as exc:  # the commit is made: readers replay JSON
            logger.warning("%s", delta_failure(storage, f"writing the checkpoint of version {version}", exc))
    return version


def _checkpoint_interval(configuration: Mapping[str, str]) -> int:
    """The table's ``delta.checkpointInterval``; Delta's default (100) where it is unset or not a positive integer
    (as another writer may have set it), as delta-rs reads it."""
    text = configuration.get("delta.checkpointInterval") or ""
    return int(text) if text.isascii() and text.isdigit() and int(text) > 0 else 100


def _metadata_action(deltalake: ModuleType, state: DeltaState, schema: pa.Schema, zone: str) -> dict[str, Any]:
    """The table's ``metaData`` with ``schema`` as its schema (its id, partitioning, properties and creation
    time kept), as the Delta protocol changes a schema: a commit holding a new ``metaData`` action. The id, name,
    description and creation time come from the newest ``metaData`` read (they never change; another writer's
    commit is refused before), the properties and partitioning from ``state`` (kept current commit by commit);
    the session zone ``zone`` recorded (:data:`TIME_ZONE_PROPERTY`) when ``schema`` makes a partition column a
    timestamp (:func:`_retyped`: it held no value, so no directory was read in another zone)."""
    metadata = state.metadata
    configuration = dict(state.configuration)
    columns = state.partition_columns
    if _timestamp_partitions(schema, columns) - _timestamp_partitions(state.schema, columns):
        configuration[TIME_ZONE_PROPERTY] = zone
    body = {
        "id": metadata["id"], "name": metadata.get("name"), "description": metadata.get("description"),
        "format": {"provider": "parquet", "options": {}},
        "schemaString": deltalake.Schema.from_arrow(schema).to_json(),
        "partitionColumns": list(state.partition_columns), "configuration": configuration,
        "createdTime": metadata.get("createdTime"),
    }
    return {"metaData": body}


def _file_set_problems(
    state: DeltaState, storage: Storage, options: dict[str, Any], latest: Snapshot | None = None
) -> tuple[list[str], list[str]]:
    """(problems, warnings) of comparing the Delta log's files with the files ``_spark_metadata`` commits as of
    the log batch the Delta log mirrors (its ``txn``; ``latest`` when that is the latest snapshot): a file only
    Delta lists (another writer's, or a log replaced) or only the log commits (removed by another writer) is
    a problem; a snapshot that cannot be read as of that batch any more a warning."""
    where = storage.display(storage.root)
    mirrored = state.log_batch_id
    if mirrored is None:
        return [f"{where}/{DELTA_DIR} (version {state.version}) records no log batch of parquet-sink: another tool "
                f"created it. {_recreate_remedy(where)}"], []
    try:
        snap = latest if latest is not None and latest.latest_batch_id == mirrored else snapshot(
            storage.url, as_of_batch=mirrored,
            storage_options=options,
        )
    except SnapshotExpiredError as exc:
        return [], [f"{where}/{DELTA_DIR} was not compared file by file with the log as of batch {mirrored}: {exc}"]
    committed = _relative_files(snap)
    extra = sorted(set(state.files) - set(committed))
    missing = sorted(set(committed) - set(state.files))
    problems = []
    if extra:
        problems.append(
            f"{where}/{DELTA_DIR} (version {state.version}, mirroring log batch {mirrored}) lists {len(extra)} "
            f"file(s) that {where}/_spark_metadata does not commit as of that batch (first: {extra[0]}): Delta "
            f"readers read them. {_recreate_remedy(where)}"
        )
    if missing:
        problems.append(
            f"{where}/{DELTA_DIR} (version {state.version}, mirroring log batch {mirrored}) misses {len(missing)} "
            f"file(s) that {where}/_spark_metadata commits as of that batch (first: {missing[0]}): Delta readers "
            f"miss their rows. {_recreate_remedy(where)}"
        )
    return problems, []


def _now_ms() -> int:
    """This machine's clock in epoch ms (the deletion time of a ``remove`` action)."""
    return int(time.time() * 1000)


@names_output
def sync_delta_log(
    path: str | os.PathLike[str],
    *,
    storage_options: dict[str, Any] | None = None,
    time_zone: str | None = None,
    checkpoint_interval: int = 10,
    log_retention: str | datetime.timedelta = "7d",
    recreate: bool = False,
    check_files: bool = True,
) -> DeltaSyncResult:
    """Create or bring up to date the Delta log (``<path>/_delta_log``) of the output at ``path`` (written by
    :class:`~parquet_sink.ParquetSink`, :func:`~parquet_sink.write_batch` or Spark's own
    ``writeStream.format("parquet")``), so that it lists exactly the files ``committed_files(path)`` returns.
    One Delta commit catches up every log batch not mirrored yet (see the module docstring); an output whose
    log commits no file yet gets no Delta log. No data file is read beyond its footer, none is written.

    ``time_zone``: the zone timestamp partition directories were written in (Spark's session time zone,
    ``write_batch``'s ``time_zone``), as :func:`~parquet_sink.read_committed` takes it: Delta stores them as UTC.
    It is recorded in the table (property ``parquetSink.timeZone``); None takes the recorded one (else UTC), and
    another one than recorded is refused when the table has a timestamp partition column.

    ``checkpoint_interval`` (``delta.checkpointInterval``) and ``log_retention`` (a duration, ``7d``:
    ``delta.logRetentionDuration``) are set when the table is created: delta-rs then writes a checkpoint every
    that many versions and deletes expired commit files after it, so the Delta log stays bounded.
    ``delta.deletedFileRetentionDuration`` is set to the longer of ``log_retention`` and 7 days, so checkpoints
    keep every tombstone a Delta version within the log's retention still needs.

    ``recreate``: delete ``_delta_log`` first and write it again from the log (the remedy of a Delta log another
    writer committed to or that diverged); refused (NotAnOutputError) where there is no ``_spark_metadata``, so a
    plain Delta table is never deleted. ``check_files``: compare the Delta log's files with the log's as of the
    batch it mirrors before committing (costs a read of that snapshot; the writers' per-batch hook skips it).

    Raises DeltaDependencyError (deltalake not installed), NotAnOutputError (no ``_spark_metadata``),
    DeltaLogError (see its docstring).

    Example::

        >>> sync_delta_log("/data/events").committed
        True
        >>> sync_delta_log("/data/events").committed  # already in step: nothing to do
        False
    """
    path = os.fspath(path)
    deltalake = require_deltalake(f"sync_delta_log({path!r})")
    if time_zone is not None:
        check_time_zone(time_zone)
    check_positive_int("checkpoint_interval", checkpoint_interval, "delta.checkpointInterval, a checkpoint every that many versions")
    check_flags(recreate=recreate, check_files=check_files)
    retention_s = max(1, math.ceil(parse_duration_ms(log_retention, "log_retention") / 1000))
    started = time.monotonic()
    options = dict(storage_options or {})
    storage = Storage(path, options)
    storage.check_reachable()  # a missing bucket, credential or endpoint named, not delta-rs's "Generic" error
    where = storage.display(storage.root)
    if recreate:
        require_output(storage)  # never delete the Delta log of a table that is not a sink's output
        logger.warning("%s: deleting %s to write it again from _spark_metadata", where, DELTA_DIR)
        storage.remove_tree(storage.join(DELTA_DIR))
        _STATES.pop(_cache_key(storage), None)
    with _sync_lock(storage):
        first: DeltaSyncResult | None = None
        attempt = 0
        while attempt < _ATTEMPTS:
            done = _sync_once(
                deltalake, path, storage, options, time_zone, check_files, checkpoint_interval, retention_s, started,
                attempt,
            )
            if done is None:
                attempt += 1
                continue
            step, more = done
            if first is not None:  # the commits of one call, before and of an optimize, as one result
                step = dataclasses.replace(
                    step, previous_log_batch_id=first.previous_log_batch_id, added=first.added + step.added,
                    removed=first.removed + step.removed, committed=True, created=first.created,
                    optimizes=first.optimizes + step.optimizes,
                )
            if not more:
                return step
            first, attempt = step, 0
    raise DeltaLogError(
        f"{path}: other commits to {DELTA_DIR} won {_ATTEMPTS} times in a row; run `parquet-sink delta-sync {path}` "
        "again when fewer writers sync at once."
    )


def _optimize_step(log_snap: Any, mirrored: int) -> OptimizeStep | None:
    """The :class:`OptimizeStep` of the first optimize swap committed after log batch ``mirrored`` in the
    snapshot ``log_snap`` (its commit records), None when there is none."""
    swaps = {}
    for record in records_of(log_snap.table):
        figures = optimize_figures(record)
        if figures is not None and record.log_batch_id > mirrored:
            swaps[record.log_batch_id] = figures
    if not swaps:
        return None
    batch = min(swaps)
    key, files, size = swaps[batch]
    upto = batch - 1 if mirrored < batch - 1 else batch
    return OptimizeStep(batch, key, files, size, upto, upto == batch, log_snap.latest)


def _all_new(since: Snapshot, state: DeltaState, log: MetadataLog) -> bool:
    """Whether the files the batches of ``since`` commit are each committed once and none is in the Delta log
    yet: then they are the sync's adds, and nothing is removed. The Delta log lists the files the log commits as
    of the batch it mirrors (``state.log_batch_id``), each logged with its modification time when it was
    committed, before that batch's log file was written: a file logged with a later time than that log file's
    (:func:`_written_after`) is not among them, and the Delta log's files are read (the cost of the table) only
    for a file logged earlier (a file written before that batch and committed after it, an entry copied, an
    optimize's file, which is logged with its oldest input's time)."""
    table = since.files.table
    relative = table.column("relative_path").to_pylist()
    if len(set(relative)) != len(relative):
        return False
    if not relative or (state.known_files is None and _written_after(log, state.log_batch_id, table)):
        return True
    return not any(r in state.files for r in relative)


def _written_after(log: MetadataLog, batch: int | None, files: pa.Table) -> bool:
    """Whether every file of ``files`` (a :class:`CommittedFiles` table) is logged with a modification time after
    the one of the log file of ``batch`` (False when that file is gone: cleaned up after a compaction). Both times
    are the storage's clock (a written file's status, as Spark's and this package's writers log it)."""
    times = files.column("modification_time")
    if batch is None or times.null_count:
        return False
    for compact in (False, True):
        try:
            written = log.storage.info(log.path_of(batch, compact)).mtime_ms
        except FileNotFoundError:
            continue
        return pc.min(times).as_py() > written
    return False


def _log_changes(
    path: str, storage: Storage, options: dict[str, Any], state: DeltaState | None, full: bool
) -> tuple[Snapshot, Snapshot, list[str], list[tuple[str, list[int | None]]], OptimizeStep | None]:
    """(the log read, the files to add, the relative paths to remove, files committed twice, the optimize this
    commit mirrors). Without ``full`` and with a Delta log that mirrors a batch, only the delta files of the
    batches after it are read (:func:`~parquet_sink.read.reader.snapshot_after`); the whole snapshot when one of
    them is a compaction (retention may have dropped entries: the removals are what Delta lists and the snapshot
    does not; an optimize's swap is one), when a file would be added twice, or when asked. An optimize swap
    after the mirrored batch gets a Delta commit of its own (:func:`_optimize_step`): the log is then read as of
    the batch before it, or as of it."""
    mirrored = None if state is None else state.log_batch_id
    log = MetadataLog(path, storage=storage, cleanup=False)
    if not full and mirrored is not None:
        since = snapshot_after(path, mirrored, storage_options=options)
        if since is not None and _all_new(since, state, log):
            return since, since, [], [], None
    log_snap = read_snapshot(log)
    step = None if mirrored is None or log_snap.latest is None else _optimize_step(log_snap, mirrored)
    if step is not None and step.upto < step.batch and not full:  # the batches before the swap, if all deltas
        since = snapshot_after(path, mirrored, storage_options=options, upto=step.upto)
        if since is not None and not since.files.table.num_rows:  # only empty batches (the optimize's waits)
            step = dataclasses.replace(step, upto=step.batch, exact=True)  # the swap's commit covers them
        elif since is not None and _all_new(since, state, log):
            return since, since, [], [], step
    snap = snapshot(path, storage_options=options) if log_snap.latest is None else snapshot_of_log(log, log_snap)
    if step is not None and step.upto != log_snap.latest:
        try:
            snap = snapshot_of_log(log, log_snap, step.upto)
        except SnapshotExpiredError as exc:  # one commit to the latest batch, every action a data change
            logger.warning(
                "%s: the optimize of log batch %d gets no Delta commit of its own (%s): it is mirrored with the "
                "batches around it, every action with dataChange=true (a Delta stream sees its removes as a change)",
                storage.display(storage.root), step.batch, exc,
            )
            step = dataclasses.replace(step, upto=log_snap.latest, exact=False)
    if state is None:
        return snap, snap, [], duplicate_files(snap), None
    table = snap.files.table
    known = pa.array(list(state.files), pa.string())
    live = table.column("relative_path").combine_chunks()
    new = table.filter(pc.invert(pc.is_in(table.column("relative_path"), value_set=known)))
    gone = known.filter(pc.invert(pc.is_in(known, value_set=live))).to_pylist()
    fresh = Snapshot(storage, snap.latest_batch_id, CommittedFiles(storage, new))
    return snap, fresh, gone, duplicate_files(snap), step


def _sync_once(
    deltalake: ModuleType, path: str, storage: Storage, options: dict[str, Any], time_zone: str | None,
    check_files: bool, checkpoint_interval: int, retention_s: int, started: float, attempt: int,
) -> tuple[DeltaSyncResult, bool] | None:
    """One attempt of :func:`sync_delta_log`: its result and whether the log holds batches after the one it
    mirrored (an optimize's swap gets a commit of its own), or None to try again (a lost commit race, or the
    Delta log found ahead of the log read)."""
    from deltalake.exceptions import CommitFailedError, DeltaError

    where = storage.display(storage.root)
    # the Delta log first, then _spark_metadata: a batch committed in between leaves the Delta log behind
    state = current_delta_state(storage, deltalake)
    if state is not None and state.foreign:
        raise _foreign_error(where, state.foreign)
    failpoint("delta_read")
    snap, fresh, gone, duplicates, step = _log_changes(path, storage, options, state, check_files)
    previous = None if state is None else state.log_batch_id
    latest = snap.latest_batch_id

    def result(**kw: Any) -> DeltaSyncResult:
        version = kw.pop("delta_version", None if state is None else state.version)
        return DeltaSyncResult(where, latest, previous, version, seconds=time.monotonic() - started, **kw)

    if previous is not None and (latest is None or previous > latest):
        if attempt + 1 < _REREADS:
            logger.info("%s: the Delta log mirrors log batch %d, the log read is at %s: reading again",
                        where, previous, latest)
            return None
        raise DeltaLogError(
            f"{where}: the Delta log mirrors log batch {previous} but {storage.display(storage.join('_spark_metadata'))} "
            f"holds batches up to {latest} (read {attempt + 1} times): the output was reset or its log replaced, "
            f"and the Delta log may list files it no longer commits. {_recreate_remedy(where)}"
        )
    zone = _session_zone(state, time_zone, where)
    if state is not None and check_files:
        problems, warnings = _file_set_problems(state, storage, options, snap)
        if problems:
            raise DeltaLogError(f"{problems[0]} Nothing was committed.")
        for warning in warnings:
            logger.warning("%s", warning)
    if latest is None or (previous is not None and previous >= latest):
        return result(), False
    files = _relative_files(fresh)
    if state is None and not files:
        logger.info("%s: no committed file yet (log batch %d): no Delta log to create", where, latest)
        return result(), False
    if duplicates:
        logger.warning("%s", _duplicates_text(where, duplicates))
    partition_columns = _partition_columns(fresh, files) if files else state.partition_columns
    dataset = dataset_of(fresh, zone) if files else None
    table_schema = None if state is None else state.schema
    retyped: dict[str, pa.DataType] = {}
    if dataset is not None and state is not None:
        retyped = _retyped(state, dataset.schema, gone)
        table_schema = _with_types(state.schema, retyped)
        forced = _table_partition_types(state.partition_columns, table_schema, dataset.schema, zone)
        dataset = dataset_of(fresh, zone, partition_types=forced) if forced else dataset
    schema = delta_schema(dataset.schema, where) if dataset is not None else state.schema
    added_columns = [] if state is None else _check_compatible(state, table_schema, schema, partition_columns, where)
    if state is not None:  # the table's columns, with the new ones: a batch may lack some
        schema = _evolved(table_schema, added_columns, partition_columns)
    adds = _add_actions(fresh, files, dataset, list(files), partition_columns, schema) if files else []
    quiet = _quiet_actions(step, adds, gone, state, where)
    failpoint("delta_commit")
    try:
        if state is None:
            configuration = {
                "delta.checkpointInterval": str(checkpoint_interval),
                LOG_RETENTION: f"interval {retention_s} seconds",
                DELETED_FILE_RETENTION: f"interval {max(retention_s, _WEEK_MS // 1000)} seconds",
            }
            version = _create(deltalake, storage, schema, partition_columns, adds, latest, configuration, zone)
        else:
            changed = schema if added_columns or retyped else None
            version = _append(deltalake, storage, state, changed, adds, gone, latest, zone, quiet)
    except (DeltaError, OSError) as exc:
        # lost a race: a concurrent commit (delta-rs's conflict checker), or another sync created the table
        if not (isinstance(exc, CommitFailedError) or "already exists" in str(exc)):
            raise delta_failure(storage, f"committing log batch {latest}", exc) from exc
        version = None
    if version is None:
        logger.info("%s: another commit to %s won (attempt %d): re-reading", where, DELTA_DIR, attempt + 1)
        return None
    logger.info(
        "%s: Delta log version %d mirrors log batch %d (was %s): %d files added, %d removed",
        where, version, latest, previous, len(adds), len(gone),
    )
    return result(
        delta_version=version, added=len(adds), removed=len(gone), committed=True, created=state is None,
        duplicates=len(duplicates), optimizes=int(quiet.info is not None),
    ), step is not None and step.upto < step.latest


def sync_after_commit(
    path: str, storage_options: Mapping[str, Any] | None, what: str, time_zone: str | None = "UTC"
) -> DeltaSyncResult | None:
    """The writers' hook (``delta_log=True``), called on the driver after a ``_spark_metadata`` commit: the
    sync (without the file-by-file check: ``verify`` and ``delta-sync`` make it), whose failure never fails the
    batch (committed already): it is logged as a WARNING with the remedy, and the next batch's sync catches up.
    Returns None when it failed.

    Example: ``sync_after_commit("/data/events", None, "batch 7")``.
    """
    try:
        return sync_delta_log(
            path, storage_options=dict(storage_options or {}), time_zone=time_zone, check_files=False
        )
    except Exception as exc:  # the batch is committed: a Delta failure must not fail or retry it
        logger.warning(
            "%s: %s is committed, but the Delta log could not follow (%s: %s); Delta readers see the previous "
            "state until the next batch catches up, or run `parquet-sink delta-sync %s`",
            path, what, type(exc).__name__, exc, path,
        )
        return None


def _interval_ms(text: str | None, default_ms: int) -> int:
    """A Delta table property's interval (``interval 604800 seconds``, ``7 days``) in ms; ``default_ms`` (Delta's
    default) when absent, the longer of both when it cannot be parsed."""
    match = _INTERVAL.match(text or "")
    unit = _UNIT_MS.get(match.group(2).lower()) if match else None
    if unit is None:
        return default_ms if text is None else max(default_ms, _MONTH_MS)
    return int(int(match.group(1)) * unit)


def _tombstones(storage: Storage) -> Iterator[tuple[str, int | None, bool]]:
    """Every ``remove`` action the Delta log still records: (path as logged, deletion time in ms or None,
    whether it is in a commit file still present, i.e. a version Delta time travel can still reach), from the
    commit files and the newest checkpoint (which keeps tombstones ``delta.deletedFileRetentionDuration``)."""
    names = {posixpath.basename(p): p for p in storage.ls_names(storage.join(DELTA_DIR))}
    for name, full in names.items():
        if _COMMIT_FILE.match(name):
            for line in storage.read_bytes(full).splitlines():
                if b'"remove"' in line:
                    remove = json.loads(line).get("remove")
                    if remove:
                        yield remove["path"], remove.get("deletionTimestamp"), True
    checkpoints = [(int(m.group(1)), full) for name, full in names.items() if (m := _CHECKPOINT_FILE.match(name))]
    newest = max((v for v, _ in checkpoints), default=None)
    filesystem = storage.arrow_filesystem()
    for version, full in checkpoints:
        if version != newest:
            continue
        column = pq.read_table(full, columns=["remove"], filesystem=filesystem).column("remove")
        for remove in column.drop_null().to_pylist():
            yield remove["path"], remove.get("deletionTimestamp"), False


def referenced_files(storage: Storage, retention_ms: int) -> set[str]:
    """The fsspec paths of the files a Delta version within retention may still read: the latest version's
    files, and every file a ``remove`` action (tombstone) names when that action is in a commit file still
    present (Delta time travel reaches the versions before it), or is younger than the longest of
    ``retention_ms``, the table's ``delta.deletedFileRetentionDuration`` and ``delta.logRetentionDuration``,
    or has no time or one in the future (a syncing clock ahead). Empty when the output has no Delta log.

    Example: ``referenced_files(Storage("/data/events"), parse_duration_ms("7d"))`` -> ``{'/data/events/k=a/part-0...parquet'}``.
    """
    state = read_delta_state(storage)
    if state is None:
        return set()
    keep_ms = max(
        retention_ms,
        _interval_ms(state.configuration.get(DELETED_FILE_RETENTION), _WEEK_MS),
        _interval_ms(state.configuration.get(LOG_RETENTION), _MONTH_MS),
    )
    cutoff = int(time.time() * 1000) - keep_ms
    prefix = storage.root.rstrip("/") + "/"
    kept = {prefix + r for r in state.files}
    for logged, deleted_ms, reachable in _tombstones(storage):
        if reachable or deleted_ms is None or deleted_ms >= cutoff:  # kept at the boundary, as Delta keeps it
            kept.add(_under(storage, prefix, logged if "://" in logged else unquote(logged)))
    return kept


def _under(storage: Storage, prefix: str, found: str) -> str:
    """A path of the Delta log (relative to the root and decoded, or a URI) as an fsspec path."""
    path = storage.from_uri(found) if "://" in found else found
    return path if path.startswith(prefix) else posixpath.join(prefix, path)


def compare_logs(
    path: str | os.PathLike[str], *, storage_options: Mapping[str, Any] | None = None
) -> tuple[list[str], list[str]]:
    """What disagrees between ``_delta_log`` and ``_spark_metadata`` at ``path``: (problems, warnings).
    Problems: a commit of another Delta writer, a Delta log that lists a file the log does not commit as of
    the batch it mirrors or misses one it does (file sets compared, not batch ids), a Delta log ahead of the
    log, a file the log commits more than once; a Delta log behind the log is a warning. Both empty without a
    Delta log. The Delta log is read first, then the log (a batch and its sync running beside can only leave
    the Delta log behind); a disagreement is read again before it is reported.

    Example: ``compare_logs("/data/events")`` -> ``([], ['... the Delta log mirrors log batch 55, the log is at 57 ...'])``.
    """
    path = os.fspath(path)
    options = dict(storage_options or {})
    storage = Storage(path, options)
    where = storage.display(storage.root)
    problems: list[str] = []
    for _ in range(_REREADS):
        state = read_delta_state(storage)
        if state is None:
            return [], []
        failpoint("delta_read")
        snap = snapshot(path, storage_options=options)
        foreign = foreign_commits(state)
        problems = [str(_foreign_error(where, foreign))] if foreign else []
        warnings: list[str] = []
        mirrored, latest = state.log_batch_id, snap.latest_batch_id
        if mirrored is not None and (latest is None or mirrored > latest):
            problems.append(
                f"{where}/{DELTA_DIR} mirrors log batch {mirrored} but the log holds batches up to {latest}: the "
                f"output was reset or its log replaced. {_recreate_remedy(where)}"
            )
        else:
            found, warnings = _file_set_problems(state, storage, options, snap)
            problems += found
        duplicates = duplicate_files(snap)
        if duplicates:
            problems.append(_duplicates_text(where, duplicates))
        if not problems:
            break
    if mirrored is not None and latest is not None and mirrored < latest:
        warnings.append(
            f"{where}/{DELTA_DIR} is behind: it mirrors log batch {mirrored}, the log is at "
            f"{latest}; Delta readers miss the later batches' files until `parquet-sink delta-sync "
            f"{where}` or the next batch written with delta_log=True."
        )
    return problems, warnings


# the Delta log as the writers' check before a commit sees it (:func:`~parquet_sink.table_formats.refuse_before_commit`):
# dates and timestamps outside 0001..9999 refused (DeltaRangeError); its types are checked by the sync
DELTA = TableFormat("a Delta log", DELTA_DIR, lambda schema: [], DeltaRangeError)


def has_delta_log(storage: Storage) -> bool:
    """Whether the output keeps a Delta log (its ``_delta_log`` directory exists: the table formats' rule,
    :func:`~parquet_sink.table_formats.kept_formats`; no deltalake import needed)."""
    return bool(kept_formats(storage, [(DELTA, None)]))


__all__ = [
    "APP_ID",
    "DELTA",
    "CHECKED",
    "DELTA_DIR",
    "MARKER",
    "TIME_ZONE_PROPERTY",
    "DeltaDependencyError",
    "DeltaLogError",
    "DeltaState",
    "DeltaSyncResult",
    "compare_logs",
    "delta_failure",
    "duplicate_files",
    "foreign_commits",
    "has_delta_log",
    "read_delta_state",
    "referenced_files",
    "require_deltalake",
    "sync_after_commit",
    "sync_delta_log",
]
