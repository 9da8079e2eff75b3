"""The Spark writer path on object stores: Spark's own Parquet writer writes a batch's files in place, through
the session's Hadoop filesystem for the store (S3A for ``s3://``, ABFS for ``abfs://``), as Spark's streaming file
sink writes there (``FileStreamSink.addBatch`` with its ``ManifestFileCommitProtocol``).

A store without atomic renames gets no staging directory (publishing would copy every byte again): each task
writes ``part-<split>-<uuid>.c000.<codec>.parquet`` under its final name in the root (``k=v/`` directories
for partitions), an aborted task deletes its files, and the accepted attempts' files are listed by the manifest
(:mod:`parquet_sink.write.manifest_write`, kept on the driver's disk). Nothing is visible to a log reader until
the log commit, exactly as on the Arrow path: the files of a batch that failed or whose driver died are
unreferenced, protected by the batch's lease while it lives, then vacuum's. Before the commit every listed file's
footer is read through ``storage`` (in parallel, one ranged read each:
:func:`parquet_sink.parquet_read.read_footer`): the rows in the accepted files must equal the rows Spark's job
wrote, and the footers give each file's statistics; the sizes and times are those the task commits read.

:func:`in_place_problem` decides whether a session can: classic PySpark, a manifest commit protocol, and a
Hadoop filesystem for the store's URL that sees the batch's lease, written a moment earlier through ``storage``
(the same store and credentials on both sides). ``ParquetSink(writer="spark")`` uses this path on object stores
(and requires it); ``"auto"`` takes the Arrow path there, which measured faster (docs/performance.md).

Example::

    >>> problem = in_place_problem(df, batch)      # None: Spark's writer can write in place
    >>> statuses = write_in_place(df, batch, partition_by=(), compression="snappy", max_records_per_file=None)
    >>> statuses[0].path
    'bucket/out/part-00000-6f1c....c000.snappy.parquet'
"""

from __future__ import annotations

import posixpath
import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from ..errors import RowCountMismatchError, SinkUsageError
from ..log.file_stats import encode_stats
from ..parquet_read import read_footer
from .inflight import InFlightBatch
from .manifest_write import ManifestFile, hadoop_write_problem, write_with_manifest
from .parquet_files import FileStatus
from .spark_staging import IO_THREADS, writer_options, writer_order

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def in_place_problem(df: DataFrame, batch: InFlightBatch) -> str | None:
    """None when ``df``'s session can write ``batch`` in place (see the module docstring); else why not."""
    return hadoop_write_problem(df, batch.storage, batch.lease_path)


def write_in_place(
    df: DataFrame,
    batch: InFlightBatch,
    *,
    partition_by: tuple[str, ...],
    compression: str,
    max_records_per_file: int | None,
    schema_file: bool = False,
) -> list[FileStatus]:
    """Write ``df`` with Spark's Parquet writer straight into the root of ``batch``'s store and return the
    statuses of its files with rows (the schema-only file of an empty batch too if ``schema_file``; other
    empty files are deleted). :class:`RowCountMismatchError` if the files hold another number of rows than
    Spark's job wrote (nothing is committed; the files are left to vacuum)."""
    storage = batch.storage
    options = writer_options(df, compression, max_records_per_file)
    with tempfile.TemporaryDirectory(prefix="parquet-sink-manifest-") as manifest:
        written = write_with_manifest(
            writer_order(df, partition_by), storage, storage.root, batch.commit_id, partition_by, options,
            manifest=posixpath.join(manifest, "m"),
        )
    if written is None:  # in_place_problem said yes at the query's first batch: the session's conf changed since
        raise SinkUsageError(
            f"log batch {batch.log_batch_id} of {storage.display(storage.root)}: spark.sql.streaming.commitProtocolClass "
            "is no longer a ManifestFileCommitProtocol, so Spark's writer cannot write in place; nothing was written or "
            "committed. Set it back to Spark's default, or use writer='arrow'."
        )

    def status(file: ManifestFile) -> FileStatus:
        path = storage.join(file.path)
        footer = read_footer(storage, path, file.size)
        return FileStatus(path, file.size, file.modification_time, footer.num_rows, encode_stats(footer))

    with ThreadPoolExecutor(min(IO_THREADS, max(1, len(written.files)))) as pool:
        statuses = list(pool.map(status, written.files))
    rows = sum(s.num_rows for s in statuses)
    if rows != written.rows:
        raise RowCountMismatchError(
            f"log batch {batch.log_batch_id} of {storage.display(storage.root)}: Spark's job wrote {written.rows} "
            f"rows but its {len(statuses)} data file(s) hold {rows}; nothing was committed. Something else wrote "
            "into or deleted from the output; Spark retries the batch when the query restarts (`parquet-sink "
            "vacuum` removes the unreferenced files)."
        )
    if schema_file and not rows:
        return statuses[:1]
    empty = [s.path for s in statuses if not s.num_rows]
    if empty:  # Spark's empty files (an empty batch or task): never committed
        with ThreadPoolExecutor(min(IO_THREADS, len(empty))) as pool:
            list(pool.map(storage.delete, empty))
    return [s for s in statuses if s.num_rows]

