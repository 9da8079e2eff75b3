"""Batches in flight: the sink's hidden area under the output root, and the lease that protects a batch's
files from ``vacuum`` until its commit.

Layout (one hidden directory, ignored by Spark's readers, pyarrow datasets, :func:`read_committed` and
``vacuum``'s data-file rules because its name starts with ``_``)::

    <root>/_exactly_once/leases/<log batch>-<commit id>      a batch in flight (JSON: query, batch, times)
    <root>/_exactly_once/staging/<commit id>/...             Spark writer path: where Spark writes the batch

The sink creates the lease before the batch's Spark job and deletes it after the commit (and the staging
directory with it). ``vacuum`` lists the data files first, then the leases, then the log: a file it listed
either belongs to a committed batch by the time the log is read, or to a batch whose lease already existed
when the leases were read. A lease is *live* while its log batch is newer than the log's latest batch;
``vacuum`` keeps every unreferenced file not older than a live lease, and deletes the leases (and staging
directories) of batches the log has moved past: those of a killed driver, whose restart committed the batch
again under new names.

Example::

    >>> batch = InFlightBatch.begin(storage, log_batch_id=3, commit_id="ab12", query_id="q", batch_id=3)
    >>> batch.staging                                   # where the Spark writer path writes
    '/data/out/_exactly_once/staging/ab12'
    >>> batch.end(staged=True)                          # after the commit
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

from .storage import FileInfo, Storage

logger = logging.getLogger(__name__)

HIDDEN_DIR = "_exactly_once"
LEASES = "leases"
STAGING = "staging"


@dataclass(frozen=True)
class Lease:
    """A lease found on storage: the log batch it protects and when it was taken (storage clock, ms)."""

    path: str
    log_batch_id: int
    commit_id: str
    started_ms: int

    @property
    def staging(self) -> str:
        return self.path.rsplit("/", 2)[0] + f"/{STAGING}/{self.commit_id}"


@dataclass(frozen=True)
class InFlightBatch:
    """One batch between the start of its write and the end of its commit."""

    storage: Storage
    log_batch_id: int
    commit_id: str

    @classmethod
    def begin(cls, storage: Storage, log_batch_id: int, commit_id: str, query_id: str | None, batch_id: int) -> InFlightBatch:
        """Take the lease (before any data file of the batch is written)."""
        batch = cls(storage, log_batch_id, commit_id)
        body = {"queryId": query_id, "queryBatchId": batch_id, "logBatchId": log_batch_id, "startedMs": int(time.time() * 1000)}
        with storage.open(batch.lease_path, "wb") as fh:
            fh.write(json.dumps(body).encode())
        return batch

    @property
    def lease_path(self) -> str:
        return self.storage.join(HIDDEN_DIR, LEASES, f"{self.log_batch_id}-{self.commit_id}")

    @property
    def staging(self) -> str:
        return self.storage.join(HIDDEN_DIR, STAGING, self.commit_id)

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
        batch, _, commit_id = info.path.rsplit("/", 1)[-1].partition("-")
        if batch.isdigit() and commit_id and not info.is_dir:
            found.append(Lease(info.path, int(batch), commit_id, info.mtime_ms))
    return sorted(found, key=lambda lease: lease.started_ms)


def staging_dirs(storage: Storage) -> list[FileInfo]:
    """Every staging directory (of live or dead attempts).

    Example: ``[d.path for d in staging_dirs(Storage("/data/out"))]`` -> ``['/data/out/_exactly_once/staging/ab12']``.
    """
    return [i for i in storage.ls(storage.join(HIDDEN_DIR, STAGING)) if i.is_dir]
