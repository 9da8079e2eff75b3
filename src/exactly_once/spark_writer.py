"""The Spark writer path: Spark's own Parquet writer produces a batch's files in a hidden staging
directory, then each file is published under the output root by an atomic, no-overwrite rename.

Used where the store renames atomically and cheaply (:attr:`Storage.renames_atomically`, local disk).
Spark writes exactly what its streaming file sink would (same encoder, codec, ``maxRecordsPerFile``
and ``k=v/`` directory names for every type), into ``_exactly_once/staging/<commit id>/`` (hidden from
every reader). The Hadoop output committer is told to move task output straight into the staging
directory (algorithm 2) and to write no ``_SUCCESS``: the staging directory is not the output, the log
commit is. Hadoop's raw local filesystem stages the files without ``.crc`` checksum files. Publishing
keeps each file's path relative to the staging directory, so the output has the layout of Spark's sink. Spark's file names carry the write job's uuid, so a replayed batch publishes
under new names, and a rename never replaces a file.

After the renames the files and the directories that gained entries are fsynced (local disk), so the log
commit never points at data a power loss could empty.

Example::

    >>> write_staged(df, batch, partition_by=("day",), compression="snappy", max_records_per_file=None)
    >>> files = publish(batch.storage, batch.staging)
    >>> files[0].path, files[0].size, files[0].num_rows
    ('/data/out/day=2026-01-01/part-00000-....c000.snappy.parquet', 1234, 100)
"""

from __future__ import annotations

import posixpath
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow.fs
import pyarrow.parquet as pq

from .failpoints import failpoint
from .inflight import InFlightBatch
from .storage import Storage

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# Hadoop settings Spark copies from write options into the job's configuration.
_COMMITTER_OPTIONS = {
    "mapreduce.fileoutputcommitter.algorithm.version": "2",  # task commit moves files to the output: one rename less
    "mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",  # no _SUCCESS file
    # Hadoop's checksummed local filesystem writes a hidden .crc file next to every data file; publishing
    # leaves those behind in staging anyway. Without Hadoop's native library every file or directory the
    # local filesystem creates costs a `chmod` process (~7 ms here), so the .crc files were a third of a
    # partitioned batch's process spawns. The raw filesystem writes the same data files without them (an
    # uncached instance: the cached one is the checksummed filesystem).
    "fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "fs.file.impl.disable.cache": "true",
}
_IO_THREADS = 8


@dataclass(frozen=True)
class PublishedFile:
    """One data file of the batch at its final path (fsspec path), as the log entry needs it."""

    path: str
    size: int
    modification_time: int
    num_rows: int


def write_staged(
    df: DataFrame,
    batch: InFlightBatch,
    *,
    partition_by: tuple[str, ...],
    compression: str,
    max_records_per_file: int | None,
) -> None:
    """Write ``df`` with Spark's Parquet writer into the batch's staging directory (nothing is visible
    yet; :func:`publish` moves the files under the root)."""
    writer = df.write.mode("error").options(**_COMMITTER_OPTIONS).option("compression", compression)
    if max_records_per_file:
        writer = writer.option("maxRecordsPerFile", str(max_records_per_file))
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.parquet(batch.storage.to_hadoop_path(batch.staging))
    failpoint("before_publish")


def _staged_files(storage: Storage, staging: str) -> list[str]:
    """Staging-relative paths of the data files Spark left (not ``.crc``, ``_SUCCESS``, ``_temporary/``)."""
    prefix = staging.rstrip("/") + "/"
    relative = (info.path[len(prefix) :] for info in storage.find(staging) if info.path.startswith(prefix))
    return sorted(
        r for r in relative if r.endswith(".parquet") and not any(s.startswith(("_", ".")) for s in r.split("/"))
    )


def publish(storage: Storage, staging: str) -> list[PublishedFile]:
    """Rename every staged data file that has rows to the same relative path under the root (never
    overwriting; Spark's schema-only file of an empty batch stays behind), then fsync the files and every
    directory that gained an entry, and read sizes and mtimes.

    Example::

        >>> [f.path for f in publish(storage, "/data/out/_exactly_once/staging/ab12")]
        ['/data/out/k=a/part-00000-....c000.snappy.parquet']
    """
    staged = [posixpath.join(staging, relative) for relative in _staged_files(storage, staging)]
    filesystem = storage.arrow_filesystem()
    with ThreadPoolExecutor(_IO_THREADS) as pool:
        # a file's data is made durable where it was staged: the rename keeps the inode
        rows = list(pool.map(lambda path: _rows_made_durable(storage, filesystem, path), staged))
        targets = []
        directories = {storage.root}
        for source, count in zip(staged, rows):
            if not count:
                continue
            target = storage.join(source[len(staging) + 1 :])
            parent = posixpath.dirname(target)
            if storage.rename_no_overwrite(source, target):
                while parent != storage.root and parent not in directories:  # new directories: their parents too
                    directories.add(parent)
                    parent = posixpath.dirname(parent)
            directories.add(posixpath.dirname(target))
            targets.append((target, count))
            failpoint("publish_rename")
        list(pool.map(storage.fsync, sorted(directories, key=len, reverse=True)))
        return list(pool.map(lambda item: _status(storage, *item), targets))


def _rows_made_durable(storage: Storage, filesystem: pyarrow.fs.FileSystem, path: str) -> int:
    """The file's row count (its footer only, not the data); a file with rows is fsynced."""
    rows = pq.read_metadata(path, filesystem=filesystem).num_rows
    if rows:
        storage.fsync(path)
    return rows


def _status(storage: Storage, path: str, num_rows: int) -> PublishedFile:
    info = storage.info(path)
    return PublishedFile(path, info.size, info.mtime_ms, num_rows)
