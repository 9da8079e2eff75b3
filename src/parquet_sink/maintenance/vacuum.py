"""``vacuum``: delete the data files no committed batch references (orphans of failed batches), the directories
that leaves empty, and the leases and staging directories of dead attempts; as a library feature (the CLI only
prints what :func:`vacuum` returns), like pyiceberg's ``table/maintenance`` orphan-file removal and Delta's
``VACUUM``. Spark's file sink has none: its orphans stay forever.

What is never deleted: hidden paths (``_x``, ``.x`` as Spark hides them; ``_x=1/`` is a partition directory), files
that are not Parquet data files, files younger than ``older_than``, files of batches in flight (not older than a
live lease, :mod:`parquet_sink.write.inflight`), files an optimize replaced less than ``older_than`` ago while the
snapshot before it can still be read (time travel), and files older than the log's first commit unless asked (data
the output may have been created over).

Example::

    >>> from parquet_sink.maintenance import vacuum
    >>> result = vacuum("/data/events", older_than="7d", dry_run=True)
    >>> [result.plan.storage.display(f.path) for f in result.plan.orphans]
    ['/data/events/part-00003-....c000.snappy.parquet']
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import posixpath
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..arrow_versions import nonzero
from ..delta.sync import DELTA, referenced_files
from ..errors import LogError, ParameterError, SnapshotExpiredError, names_output
from ..iceberg import expiry as iceberg_expiry
from ..iceberg.follow import IcebergTarget, iceberg_target
from ..log.compaction import check_flags, parse_duration_ms
from ..log.entry import (
    BATCH_KEY, COMMIT_ID_KEY, COMMIT_TIME_KEY, QUERY_BATCH_KEY, QUERY_ID_KEY, CommitRecord, record_rows, records_of,
)
from ..log.files import ORPHANED_COPY_AGE_MS, nested_roots, parse_batch_name, require_output
from ..log.metadata_log import MetadataLog
from ..log.snapshot import full_paths, read_snapshot, resolve_paths
from ..partitioning import is_data_file
from ..read.chain import app_commits
from ..read.history import optimize_figures
from ..read.reader import snapshot
from ..storage.filesystem import FileInfo, Storage
from ..storage.paths import published_name
from ..table_formats import kept_formats
from ..write.inflight import CLOCK_SLACK_MS, Lease, leases, staging_dirs
from .inspect import Progress, _silent

logger = logging.getLogger(__name__)

# the entry columns vacuum reads: paths and times, and the commit records (not the statistics, most of the bytes)
_ENTRY_COLUMNS = ["path", "isDir", "modificationTime", BATCH_KEY, QUERY_ID_KEY, QUERY_BATCH_KEY, COMMIT_ID_KEY, COMMIT_TIME_KEY]


@dataclass
class VacuumPlan:
    """What ``vacuum`` found: orphans old enough to delete, unreferenced files it keeps (younger than the
    threshold, not older than a live lease: a batch in flight, or older than the log's first commit: data
    the output may have been created over), and the hidden leftovers of dead attempts (leases of batches
    the log has moved past, staging directories without a live lease)."""

    storage: Storage
    orphans: list[FileInfo]
    young: list[FileInfo]
    in_flight: list[FileInfo]
    live_leases: list[Lease]
    dead_leases: list[Lease]
    dead_staging: list[str]
    before_log: list[FileInfo] = field(default_factory=list)
    delta_kept: list[FileInfo] = field(default_factory=list)  # a Delta version within retention may read them
    iceberg_kept: list[FileInfo] = field(default_factory=list)  # an Iceberg snapshot within retention reads them
    # the Iceberg tables' own metadata files, manifest lists and manifests no snapshot left needs
    iceberg_stale: list[FileInfo] = field(default_factory=list)
    # files an optimize replaced less than older_than ago: the snapshot before it (time travel) still reads them
    replaced_kept: list[FileInfo] = field(default_factory=list)
    orphaned_copies: list[FileInfo] = field(default_factory=list)  # columnar copies of compact files Spark deleted
    log_temps: list[FileInfo] = field(default_factory=list)  # temporary files of log commits that never finished
    nested_kept: list[FileInfo] = field(default_factory=list)  # files of another output or table nested in this one


def find_orphans(
    url: str,
    storage_options: Mapping[str, Any] | None = None,
    older_than_ms: int = 0,
    include_before_log: bool = False,
    iceberg: IcebergTarget | None = None,
    now_ms: int | None = None,
) -> VacuumPlan:
    """Data files (:func:`~parquet_sink.partitioning.is_data_file`, and those a dead writer left half-written under
    :func:`~parquet_sink.storage.paths.in_progress_name`) under ``url`` that no entry of the latest snapshot
    references, and the log's columnar copies whose compact file Spark's log cleanup deleted (older than
    ``older_than_ms``, and at least :data:`~parquet_sink.log.files.ORPHANED_COPY_AGE_MS`). Refuses (raises) if any log file is unreadable. Files older than the log's first
    commit (older than every committed file and log file, by logged time and time on storage), or every
    unreferenced file of a log without batches, are kept unless ``include_before_log``: they may be a dataset
    the output was created over (``ParquetSink(allow_existing_files=True)``). Files under a directory holding a log
    of its own (``_spark_metadata``, ``_exactly_once`` or ``_delta_log``: another output or a Delta table nested in
    this one) are that log's, never orphans (``nested_kept``). With a Delta log, a file that a
    Delta version within the table's retention or ``older_than_ms`` may read (the latest version's, or removed by a
    commit still in the Delta log or more recently than that retention, or by a tombstone stamped in the future) is
    kept (``delta_kept``, :func:`parquet_sink.delta.referenced_files`). With an Iceberg table (``sync_iceberg``), a
    file a snapshot within ``older_than_ms`` references is kept (``iceberg_kept``,
    :func:`parquet_sink.iceberg.expiry.references`: of the table without catalog, and of the catalog table
    ``iceberg`` names; every snapshot's of another catalog's table), and the metadata files of those two that
    no snapshot left needs are listed (``iceberg_stale``). ``now_ms``: the time the Iceberg snapshots' ages are
    measured from (default now; vacuum passes the one it expired them at, so the plan expires no more).

    Order matters against a sink writing at the same time: the files are listed first, then the leases
    (:mod:`parquet_sink.write.inflight`), then the log. A listed file is then either committed in the log read
    last, or written by a batch whose lease existed when the leases were read, and is kept.

    Example::

        >>> plan = find_orphans("/data/events", older_than_ms=parse_duration_ms("1h"))
        >>> [plan.storage.display(f.path) for f in plan.orphans]
        ['/data/events/part-00003-....c000.snappy.parquet']
    """
    storage = Storage(url, dict(storage_options or {}))
    storage.check_reachable()
    require_output(storage)  # a path that is no output (or is a file) is named so before anything is listed
    listed = storage.find(storage.root)
    staging = staging_dirs(storage)
    found_leases = leases(storage)
    log = MetadataLog(url, storage=storage, cleanup=False)
    # the log read once, as columns: every live entry (also directories and empty files, which the reader
    # skips), its paths resolved below as the reader resolves them (a moved output's); then every other log file
    # checked (a delta the snapshot parsed is not parsed again)
    try:
        log_snap = read_snapshot(log, columns=_ENTRY_COLUMNS)
    except LogError as exc:  # every problem named, as the check finds them
        raise _refusal(storage, log.check() or [exc]) from exc
    parsed = set()
    if log_snap.latest is not None:
        interval = log.listing_interval(log_snap.listing)
        parsed = {batch for batch, _ in log.files_for(log_snap.latest, log_snap.listing, interval)}
    problems = log.check(parsed=parsed)
    if problems:
        raise _refusal(storage, problems)
    entries = log_snap.table
    # what the entries name, but for commit records' own entries (named after their record, not after a file)
    named_entries = entries.filter(pc.invert(pc.and_(entries.column("isDir"), pc.is_valid(entries.column(COMMIT_ID_KEY)))))
    relative, outside = resolve_paths(storage, named_entries.column("path"), named_entries.column(BATCH_KEY), False)
    paths = pa.array([i.path for i in listed], pa.string())
    mtimes = np.fromiter((i.mtime_ms for i in listed), np.int64, len(listed))
    named = full_paths(storage, relative, outside).combine_chunks()
    is_committed = pc.is_in(paths, value_set=named).to_numpy(zero_copy_only=False)
    log_files = log.log_dir + "/"  # and the log files themselves (a log of empty batches has no entries)
    log_times = {  # each log file's time on storage, by batch
        batch[0]: listed[i].mtime_ms
        for i in nonzero(pc.starts_with(paths, log_files)) if (batch := parse_batch_name(listed[i].path))
    }
    cutoff = int(time.time() * 1000) - older_than_ms
    rows = record_rows(entries)
    records = records_of(rows)
    swaps = [  # optimizes committed within older_than: the snapshot before each keeps its files
        record.log_batch_id
        for record, logged in zip(records, rows.column(COMMIT_TIME_KEY).to_pylist())
        if optimize_figures(record) and _swap_time(record, logged, log_times) >= cutoff
    ]
    first_commit_ms = None
    if log_snap.latest is not None:  # the oldest of the committed files (logged time, time on storage) and log files
        times = [*log_times.values(), pc.min(entries.column("modificationTime")).as_py()]
        if is_committed.any():
            times.append(int(mtimes[is_committed].min()))
        first_commit_ms = min((t for t in times if t is not None), default=None)
    latest = -1 if log_snap.latest is None else log_snap.latest
    versions = {app: r.query_batch_id for app, r in app_commits(records).items()}
    live = [lease for lease in found_leases if lease.is_live(latest, versions)]
    dead = [lease for lease in found_leases if not lease.is_live(latest, versions)]
    protected_from = min((lease.started_ms for lease in live), default=None)
    live_staging = {lease.staging for lease in live}
    in_delta = referenced_files(storage, older_than_ms) if kept_formats(storage, [(DELTA, None)]) else set()
    now_ms = cutoff + older_than_ms if now_ms is None else now_ms
    found = iceberg_expiry.references(storage, now_ms - older_than_ms, now_ms, *_catalog_table(iceberg))
    in_iceberg = found.data_files
    replaced = _replaced_files(url, storage_options, swaps)
    prefix = storage.root.rstrip("/") + "/"
    plan = VacuumPlan(storage, [], [], [], live, dead, [d.path for d in staging if d.path not in live_staging])
    plan.iceberg_stale = found.stale
    # a younger temporary file may be a commit in flight
    plan.orphaned_copies, plan.log_temps = log.leftovers(max(older_than_ms, ORPHANED_COPY_AGE_MS))
    hidden = nonzero(pc.match_substring(paths, "/_"))  # a nested log's path holds one (most data files none)
    nested = nested_roots([listed[i].path[len(prefix) :] for i in hidden if listed[i].path.startswith(prefix)])
    # only the files no entry names are looked at one by one (most files of an output are committed)
    for info in sorted((listed[i] for i in np.flatnonzero(~is_committed)), key=lambda i: i.path):
        relative_path = info.path[len(prefix) :] if info.path.startswith(prefix) else info.path
        if not is_data_file(published_name(relative_path)):  # a dead writer's half file: an orphan too
            continue
        if any(relative_path.startswith(root) for root in nested):
            plan.nested_kept.append(info)
        elif protected_from is not None and info.mtime_ms >= protected_from - CLOCK_SLACK_MS:
            plan.in_flight.append(info)
        elif info.path in in_delta:
            plan.delta_kept.append(info)
        elif info.path in in_iceberg:
            plan.iceberg_kept.append(info)
        elif info.path in replaced:
            plan.replaced_kept.append(info)
        elif not include_before_log and (first_commit_ms is None or info.mtime_ms < first_commit_ms):
            plan.before_log.append(info)
        else:
            (plan.orphans if info.mtime_ms < cutoff else plan.young).append(info)
    return plan


def _catalog_table(target: IcebergTarget | None) -> tuple[Any, str | None]:
    """(catalog, table) of the Iceberg table ``target`` names; (None, None): the table kept without a catalog."""
    return (None, None) if target is None else (target.catalog, target.table)


def _refusal(storage: Storage, problems: Sequence[LogError]) -> LogError:
    """The error vacuum raises when its log cannot be read (``problems``: what the check found)."""
    return LogError(
        f"refusing to vacuum {storage.display(storage.root)}: its log cannot be read, so committed files "
        f"cannot be told apart from orphans ({len(problems)} problem(s); run `parquet-sink verify`). "
        f"First: {problems[0]}"
    )


def _swap_time(record: CommitRecord, logged_ms: int | None, log_times: Mapping[int, int]) -> int:
    """When the optimize of ``record`` was committed: the later of its logged commit time ``logged_ms`` (the
    optimizing machine's clock) and its log file's time on storage (the clock of the files' ages), so that a
    swap a clock behind stamped in the past is not taken for an old one. Pure.

    Example: ``_swap_time(record, 1732420000000, {19: 1732430000000})`` -> ``1732430000000``.
    """
    return max(logged_ms or 0, log_times.get(record.log_batch_id, 0))


def _replaced_files(url: str, storage_options: Mapping[str, Any] | None, swaps: Sequence[int]) -> set[str]:
    """The files of the snapshots just before the optimizes committed at log batches ``swaps`` that can still
    be read (their log files exist: Delta's rule of keeping a removed file while a version within the
    retention references it)."""
    files: set[str] = set()
    for batch in swaps:
        try:
            before = snapshot(url, as_of_batch=batch - 1, storage_options=dict(storage_options or {}))
        except SnapshotExpiredError:
            continue  # its log files are gone: no reader can ask for it any more
        files.update(f.path for f in before.files)
    return files


def remove_emptied_dirs(storage: Storage, deleted: Sequence[str]) -> list[str]:
    """Remove the directories under the root that deleting ``deleted`` left empty, deepest first, up to
    (not including) the root. A directory that still holds anything is kept (``rmdir`` is atomic).

    Example: ``remove_emptied_dirs(storage, ["/data/events/k=a/part-0.parquet"])`` -> ``["/data/events/k=a"]``.
    """
    prefix = storage.root.rstrip("/") + "/"
    candidates = set()
    for path in deleted:
        parent = posixpath.dirname(path)
        while parent.startswith(prefix):
            candidates.add(parent)
            parent = posixpath.dirname(parent)
    return [d for d in sorted(candidates, key=len, reverse=True) if storage.remove_empty_dir(d)]


@dataclass
class VacuumResult:
    """What :func:`vacuum` did (or, with ``dry_run``, would do): the plan it followed and the emptied directories
    it removed. ``plan.orphans`` are the files deleted; ``plan.young``, ``plan.in_flight`` and ``plan.before_log``
    the unreferenced files kept, and why."""

    plan: VacuumPlan
    older_than: str
    dry_run: bool
    removed_dirs: list[str] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        """Bytes of the orphans deleted (or to delete). Example: ``vacuum(p, "7d").bytes``."""
        return sum(i.size for i in self.plan.orphans)


SAFE_AGE = "7d"  # as delta-rs: files younger than this may still be read through an older snapshot


def check_age(older_than: str | _dt.timedelta, allow_short_retention: bool = False) -> int:
    """``older_than`` in ms: a duration with its unit (``"30m"``, ``"12h"``, ``"7d"``) or a ``timedelta``; a bare
    number is refused (is ``7`` days or ms?), as for every duration
    (:func:`~parquet_sink.log.compaction.parse_duration_ms`). Under :data:`SAFE_AGE` only with
    ``allow_short_retention``: files retention dropped from the log, or of a batch whose lease was lost, may
    still be read by a reader of an older snapshot. ParameterError naming the accepted forms otherwise.

    Example: ``check_age("7d") == 604_800_000``; ``check_age("1h")`` raises ParameterError.
    """
    age_ms = parse_duration_ms(older_than, "older_than")
    if age_ms < parse_duration_ms(SAFE_AGE) and not allow_short_retention:
        raise ParameterError(
            f"older_than={_age_text(older_than)} is shorter than the safe minimum of {SAFE_AGE}: an unreferenced file "
            "younger than that may still be read through an older snapshot (as_of_batch, a running reader) or "
            "belong to a writer whose lease was lost. Pass allow_short_retention=True (CLI: "
            "--allow-short-retention) if no reader or writer can need them."
        )
    return age_ms


def _age_text(older_than: str | _dt.timedelta) -> str:
    return older_than.strip() if isinstance(older_than, str) else str(older_than)


@names_output
def vacuum(
    path: str | os.PathLike[str],
    older_than: str | _dt.timedelta = SAFE_AGE,
    *,
    dry_run: bool = False,
    allow_short_retention: bool = False,
    include_files_before_log: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    progress: Progress = _silent,
    iceberg: bool | Mapping[str, Any] | None = None,
) -> VacuumResult:
    """Delete the orphan data files under ``path`` older than ``older_than`` (a duration with its unit: ``"12h"``,
    ``"7d"``, or a ``timedelta``; at least :data:`SAFE_AGE` unless ``allow_short_retention``, see
    :func:`check_age`), then the directories that left empty (unless a batch is in flight), the leases and
    staging directories of dead attempts, and the log's columnar copies whose compact file is gone. The snapshots
    of the output's Iceberg table without catalog, and with ``iceberg={"catalog": ..., "table": "ns.name"}`` (as
    the writers take it) of that catalog's table, that stopped being current more than ``older_than`` ago are
    expired first (:func:`parquet_sink.iceberg.expiry.expire_snapshots`, a catalog's through its own commit), the
    files the others reference kept, and those tables' metadata files no snapshot left needs deleted
    (:func:`parquet_sink.iceberg.expiry.stale_metadata`). Without ``iceberg``, a catalog's table keeps every
    file its newest metadata lists. ``dry_run``: delete nothing, expire nothing, report what would go. Refuses
    (LogError) when the log cannot be read; ParameterError for an ``iceberg`` the writers refuse,
    IcebergSyncError when its table is another output's. Safe while writers run (see :func:`find_orphans`).

    Example::

        >>> result = vacuum("s3://bucket/events", "7d", storage_options={"anon": False})
        >>> len(result.plan.orphans), result.bytes
        (3, 52331)
        >>> vacuum("/data/events", "10m", allow_short_retention=True, dry_run=True).plan.orphans
        []
    """
    check_flags(dry_run=dry_run, allow_short_retention=allow_short_retention, include_files_before_log=include_files_before_log)
    age_ms = check_age(older_than, allow_short_retention)
    target = iceberg_target(iceberg, f"vacuum({os.fspath(path)!r})")
    now_ms = int(time.time() * 1000)  # one clock for the expiry and the plan: what expired is what goes
    if not dry_run:  # the Iceberg snapshots past the retention go first: then no metadata names what is deleted
        storage = Storage(os.fspath(path), dict(storage_options or {}))
        storage.check_reachable()  # a wrong account or path is refused in seconds, before anything changes
        require_output(storage)
        iceberg_expiry.expire_snapshots(storage, now_ms - age_ms)
        if target is not None and target.catalog is not None:
            iceberg_expiry.expire_snapshots(storage, now_ms - age_ms, target.catalog, target.table)
    plan = find_orphans(path, storage_options, age_ms, include_files_before_log, target, now_ms)
    result = VacuumResult(plan, _age_text(older_than), dry_run)
    if dry_run:
        return result
    storage = plan.storage
    for info in progress(plan.orphans, "deleting"):
        storage.delete(info.path)
        logger.info("deleted orphan %s", storage.display(info.path))
    for info in plan.orphaned_copies:
        storage.delete(info.path)
        logger.info("deleted orphaned columnar copy %s", storage.display(info.path))
    for info in plan.log_temps:
        storage.delete(info.path)
        logger.info("deleted the temporary file of an unfinished log commit %s", storage.display(info.path))
    for staging in plan.dead_staging:
        storage.remove_tree(staging)
    for lease in plan.dead_leases:
        storage.delete(lease.path)
    iceberg_expiry.delete_stale(storage, plan.iceberg_stale)
    if not plan.live_leases:  # an in-flight batch may be about to write into an empty directory
        result.removed_dirs = remove_emptied_dirs(storage, [i.path for i in plan.orphans])
    return result


__all__ = ["SAFE_AGE", "VacuumPlan", "VacuumResult", "check_age", "find_orphans", "remove_emptied_dirs", "vacuum"]
