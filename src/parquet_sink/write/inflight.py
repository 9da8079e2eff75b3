"""Batches in flight: the sink's hidden area under the output root, and the lease that protects a batch's
files from ``vacuum`` until its commit.

Layout (one hidden directory, ignored by Spark's readers, pyarrow datasets, :func:`read_committed` and
``vacuum``'s data-file rules because its name starts with ``_``)::

    <root>/_exactly_once/leases/.<log batch>-<commit id>     a batch in flight (JSON: query, batch, times)
    <root>/_exactly_once/staging/.<commit id>/...            Spark writer path: where Spark writes the batch

The leases and staging directories are hidden names themselves (Spark's rule: a leading ``.``), so that a Spark
glob over the output (``spark.read.option("basePath", out).parquet(out + "/*/*")``), whose matches Spark lists
whatever their names, finds nothing of them at two levels below the root (docs/design.md, *Hidden names*).
Leases and staging directories an older release named without the dot are still found, and their staging
directory is the one without the dot.

The sink creates the lease before the batch's Spark job and deletes it after the commit (and the staging
directory with it). ``vacuum`` lists the data files first, then the leases, then the log: a file it listed
either belongs to a committed batch by the time the log is read, or to a batch whose lease already existed
when the leases were read. Both writers may lose commit races and commit as a later log batch
(:mod:`parquet_sink.write.conflicts`), so a lease of :func:`~parquet_sink.write_batch`, and of a sink that knows
its query id, is *live* until the log holds a commit of its app (query) at its version (batch id) or a later
one; a lease of a sink without a query id is live while its log batch is newer than the log's latest batch.
``vacuum`` keeps every unreferenced file not older than a live lease, and deletes the leases (and staging
directories) of dead ones: those of a killed driver, whose restart committed the batch again under new names.

Example::

    >>> batch = InFlightBatch.begin(storage, log_batch_id=3, commit_id="ab12", query_id="q", batch_id=3)
    >>> batch.staging                                   # where the Spark writer path writes
    '/data/out/_exactly_once/staging/.ab12'
    >>> batch.end(staged=True)                          # after the commit
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import ExistingDataError, MissingDataFileError
from ..log.files import HIDDEN_DIR, METADATA_DIR, check_output_root, nested_roots, output_started, parse_batch_name
from ..log.metadata_log import MetadataLog
from ..partitioning import is_data_file
from ..storage.filesystem import FileInfo, Storage

logger = logging.getLogger(__name__)

LEASES = "leases"
STAGING = "staging"
HIDDEN = "."  # the prefix of a lease's and a staging directory's name (an older release wrote none)
_APP_KEY = "writeBatch"  # in a lease's body: live until its query or app commits (named when only write_batch did)
_PROTECTS_KEY = "protectsFromMs"  # in a moved lease's body: the storage time of the lease it replaced
CLOCK_SLACK_MS = 2000  # file mtimes vs a lease's mtime: same store clock, coarse timestamps on some


@dataclass(frozen=True)
class Lease:
    """A lease found on storage: the log batch it protects and when it was taken (storage clock, ms)."""

    path: str
    log_batch_id: int
    commit_id: str
    started_ms: int  # its own mtime, or the first lease's of a writer that moved it (files older are its too)
    app: tuple[str, int] | None = None  # (query or app id, batch id or version) of a lease live until committed

    def is_live(self, latest: int, app_versions: Mapping[str | None, int]) -> bool:
        """Whether the lease still protects a write in flight, given the log's latest batch (-1: none) and
        each app's newest committed version."""
        if self.app is None:
            return self.log_batch_id > latest
        app_id, version = self.app
        committed = app_versions.get(app_id)
        return committed is None or committed < version

    @property
    def staging(self) -> str:
        """Its batch's staging directory, named as the lease is (hidden, or without the dot: an older release's)."""
        hidden = HIDDEN if self.path.rsplit("/", 1)[-1].startswith(HIDDEN) else ""
        return self.path.rsplit("/", 2)[0] + f"/{STAGING}/{hidden}{self.commit_id}"


@dataclass(frozen=True)
class InFlightBatch:
    """One batch between the start of its write and the end of its commit."""

    storage: Storage
    log_batch_id: int
    commit_id: str

    @classmethod
    def begin(
        cls,
        storage: Storage,
        log_batch_id: int,
        commit_id: str,
        query_id: str | None,
        batch_id: int,
        until_committed: bool = False,
        protects_from_ms: int | None = None,
    ) -> InFlightBatch:
        """Take the lease (before any data file of the batch is written). ``until_committed``: live until
        ``query_id`` (a query or an app id) commits ``batch_id`` (its batch id or version) or a later one, at
        whatever log batch lost commit races move it to (``write_batch``, the sink when it knows its query
        id, and ``optimize``); else live while log batch ``log_batch_id`` is not committed.
        ``protects_from_ms``: the storage time of the lease this one replaces (a writer moving its lease to
        another batch), so that the files it wrote under that one stay protected."""
        batch = cls(storage, log_batch_id, commit_id)
        body = {"queryId": query_id, "queryBatchId": batch_id, "logBatchId": log_batch_id, "startedMs": int(time.time() * 1000)}
        if until_committed:
            body[_APP_KEY] = True
        if protects_from_ms is not None:
            body[_PROTECTS_KEY] = protects_from_ms
        with storage.open(batch.lease_path, "wb") as fh:
            fh.write(json.dumps(body).encode())
        return batch

    @property
    def lease_path(self) -> str:
        return self.storage.join(HIDDEN_DIR, LEASES, f"{HIDDEN}{self.log_batch_id}-{self.commit_id}")

    @property
    def staging(self) -> str:
        return self.storage.join(HIDDEN_DIR, STAGING, f"{HIDDEN}{self.commit_id}")

    def end(self, staged: bool) -> None:
        """After the commit (or a failed write): drop the staging directory if ``staged``, then the lease."""
        if staged:
            self.storage.remove_tree(self.staging)
        self.storage.delete(self.lease_path)


def leases(storage: Storage) -> list[Lease]:
    """Every lease under the output root, oldest first.

    Example: ``[lease.log_batch_id for lease in leases(Storage("/data/out"))]`` -> ``[7]``.
    """
    found = []
    for info in storage.ls(storage.join(HIDDEN_DIR, LEASES)):
        batch, _, commit_id = info.path.rsplit("/", 1)[-1].removeprefix(HIDDEN).partition("-")
        if batch.isdigit() and commit_id and not info.is_dir:
            try:
                app, protects_from = _parse_body(storage.read_bytes(info.path))
            except FileNotFoundError:  # ended since the listing
                continue
            started = info.mtime_ms if protects_from is None else min(info.mtime_ms, protects_from)
            found.append(Lease(info.path, int(batch), commit_id, started, app))
    return sorted(found, key=lambda lease: lease.started_ms)


def _parse_body(body: bytes) -> tuple[tuple[str, int] | None, int | None]:
    """(app id, version) of a lease live until committed (None for a lease of a log batch, or a body being
    written: its writer has written no data file yet), and the storage time a moved lease protects from."""
    try:
        fields = json.loads(body)
    except ValueError:
        return None, None
    if not isinstance(fields, dict):
        return None, None
    protects_from = fields.get(_PROTECTS_KEY)
    protects_from = protects_from if isinstance(protects_from, int) and not isinstance(protects_from, bool) else None
    if fields.get(_APP_KEY) is not True:
        return None, protects_from
    app_id, version = fields.get("queryId"), fields.get("queryBatchId")
    return ((app_id, version) if isinstance(app_id, str) and isinstance(version, int) else None), protects_from


def staging_dirs(storage: Storage) -> list[FileInfo]:
    """Every staging directory (of live or dead attempts).

    Example: ``[d.path for d in staging_dirs(Storage("/data/out"))]`` -> ``['/data/out/_exactly_once/staging/.ab12']``.
    """
    return [i for i in storage.ls(storage.join(HIDDEN_DIR, STAGING)) if i.is_dir]


def start_output(log: MetadataLog, allow_existing_files: bool, what: str) -> None:
    """Before a writer places the first data file of an output whose log holds no batch: refuse a directory
    holding a dataset (:func:`refuse_existing_data`, unless ``allow_existing_files``), then create the log
    directory (:meth:`MetadataLog.start`), as Spark's sink does when its query starts, so that Spark's readers
    take the output for a sink output from then on and never read files of a first batch that fails.

    An output already started (its log directory, or the hidden area of a writer in flight, exists) is not
    checked again: the Parquet files in it were written by writers of it (a first batch that failed before
    its commit, this query's or another's), never a dataset the output was created over, so a restart takes
    over its own failed attempt. ``what`` names the writer and the batch, for the error.

    Example: ``start_output(MetadataLog("/data/events"), False, "ParquetSink('/data/events'), batch 0")``.
    """
    if not output_started(log.storage):
        check_output_root(log.storage.display(log.storage.root), log.storage, what, anywhere=True)
        if not allow_existing_files:
            refuse_existing_data(log.storage, what)
    log.start()


def refuse_existing_data(storage: Storage, what: str) -> None:
    """Before the first commit to ``storage`` (its log held no batch when the caller read it): ExistingDataError
    if the directory holds Parquet data files that no write in flight wrote (older than every lease): a dataset
    the output would be created over, whose files every reader would then hide. Files of an output or a Delta table
    nested in it (:func:`~parquet_sink.log.files.nested_roots`) are that one's, not such a dataset.

    Race-free against concurrent writers by the order ``vacuum`` uses: data files first, then the leases, then the
    log. A writer creates its lease before its first file and deletes it only after its commit (or after
    deleting its files), so a listed file whose lease is gone by the time the leases are read was committed (the
    log now holds a batch, and whoever committed it ran this check) or deleted (it no longer exists).

    Example: ``refuse_existing_data(Storage("/data/events"), "ParquetSink('/data/events')")``.
    """
    prefix = storage.root.rstrip("/") + "/"
    try:
        listed = storage.find(storage.root)
    except FileNotFoundError:  # a new output
        return
    relative = {i.path: i.path[len(prefix) :] for i in listed if i.path.startswith(prefix)}
    nested = nested_roots(relative.values())  # another output's or table's files: its log commits them
    found = [i for i in listed if is_data_file(relative.get(i.path, "")) and
             not any(relative[i.path].startswith(root) for root in nested)]
    started = min((lease.started_ms for lease in leases(storage)), default=None)
    older = sorted(i.path for i in found if started is None or i.mtime_ms < started - CLOCK_SLACK_MS)
    if not older or _log_has_batch(storage):
        return
    gone = set(storage.missing(older))
    existing = [path for path in older if path not in gone]
    if existing:
        raise ExistingDataError(
            f"{what}: {storage.display(storage.root)} has no committed batch but already holds {len(existing)} "
            f"Parquet file(s), e.g. {storage.display(existing[0])}. Every reader of the output would hide them. "
            "Write to a new or empty directory; pass allow_existing_files=True to write here anyway (those files stay "
            "invisible to readers, and `parquet-sink vacuum` keeps them unless --include-files-before-log). If they are "
            "what a failed first batch left, delete them. Nothing was written."
        )


def _log_has_batch(storage: Storage) -> bool:
    """Whether the log under ``storage`` holds a batch file now (a concurrent writer committed one)."""
    return any(parse_batch_name(path) is not None for path in storage.ls_names(storage.join(METADATA_DIR)))


def refuse_missing_files(storage: Storage, paths: list[str], what: str, retry: str) -> None:
    """Before a commit: MissingDataFileError if a data file of the batch in flight is gone (deleted by hand, or by
    a vacuum that ignores the leases), so that the log never points at missing data. ``what`` names the batch
    (``"... log batch 7"``), ``retry`` says how it gets written again.

    Example: ``refuse_missing_files(storage, paths, "ParquetSink('/data/out'): log batch 7", "Spark retries it")``.
    """
    gone = storage.missing(paths)
    if gone:
        raise MissingDataFileError(
            f"{what} vanished before its commit: {len(gone)} data file(s) under {storage.display(storage.root)}, "
            f"e.g. {storage.display(gone[0])}; nothing was committed. Something deleted files of a batch in flight (a "
            f"vacuum that ignores the leases under {HIDDEN_DIR}/, or a manual clean-up); {retry}."
        )

