"""The Spark writer path: Spark's own Parquet writer produces a batch's files in a hidden staging
directory, then each file is published under the output root by an atomic, no-overwrite rename.

Used where the store renames atomically and cheaply (:attr:`Storage.renames_atomically`, local disk).
Spark writes exactly what its streaming file sink would (same encoder, codec, ``maxRecordsPerFile``
and ``k=v/`` directory names for every type), into ``_exactly_once/staging/.<commit id>/`` (hidden from
the log's readers, pyarrow datasets and Spark's globs two levels deep; a ``**/*.parquet`` glob finds what a killed
batch leaves there: docs/design.md, *Readers that list the directory*). On classic PySpark the batch is written as Spark's sink writes it, with its
``ManifestFileCommitProtocol`` (:mod:`parquet_sink.write.manifest_write`): tasks write their files in place in
staging, the accepted attempts' commit messages list them, their write statistics count the rows. On Spark
Connect ``df.write`` runs the Hadoop output committer with algorithm 1: a task commit renames the attempt's
directory at once, the job commit moves the committed tasks' files into staging, so staging holds exactly the
files of the task attempts Spark accepted, and an ``Observation`` counts the rows. Neither writes a
``_SUCCESS`` (the staging directory is not the output, the log commit is), and Hadoop's raw local filesystem
stages the files without ``.crc`` checksum files. Before publishing, the rows in the accepted files must equal
the rows Spark's job wrote, else nothing is published. Publishing keeps each file's path relative to the
staging directory, so the output has the layout of Spark's sink. Spark's file names carry a uuid, so a
replayed batch publishes under new names, and a rename never replaces a file.

After the renames the files and the directories that gained entries are fsynced (local disk), so the log
commit never points at data a power loss could empty.

Example::

    >>> staged = write_staged(df, batch, partition_by=("day",), compression="snappy", max_records_per_file=None)
    >>> files = publish(batch, staged)
    >>> files[0].path, files[0].size, files[0].num_rows
    ('/data/out/day=2026-01-01/part-00000-....c000.snappy.parquet', 1234, 100)
"""

from __future__ import annotations

import functools
import operator
import posixpath
from dataclasses import dataclass
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import pyarrow.fs
import pyarrow.parquet as pq

from ..errors import RowCountMismatchError
from ..failpoints import failpoint
from ..log.file_stats import encode_stats
from .inflight import InFlightBatch
from .jvm import local_fs_options, per_context
from .manifest_write import write_with_manifest
from .parquet_files import FileStatus
from ..partitioning import is_data_file, partition_dir
from ..storage.filesystem import Storage
from ..storage.writeback import EarlyWriteback

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# Hadoop settings Spark copies from write options into the job's configuration.
_COMMITTER_OPTIONS = {  # df.write only
    # A task commit is one rename of the attempt's directory (algorithm 1), so staging ends up with exactly
    # the files of the accepted attempts: algorithm 2 moves a task's files one by one at task commit, and an
    # attempt that dies after moving some, or whose retry writes other files, leaves stale ones behind.
    "mapreduce.fileoutputcommitter.algorithm.version": "1",
    "mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",  # no _SUCCESS file
}
IO_THREADS = 8  # files whose footers are read, or fsynced, at once (also spark_in_place's)
_ROWS_COUNTED: dict[object, Column] = {}  # see _rows_counted


@dataclass(frozen=True)
class Staged:
    """A batch written into staging: the rows Spark's job wrote, and the staging-relative paths of the files of
    the task attempts it accepted (None: every data file in staging is one, see :func:`write_staged`)."""

    rows: int
    files: list[str] | None


def write_staged(
    df: DataFrame,
    batch: InFlightBatch,
    *,
    partition_by: tuple[str, ...],
    compression: str,
    max_records_per_file: int | None,
) -> Staged:
    """Write ``df`` with Spark's Parquet writer into the batch's staging directory (nothing is visible
    yet; :func:`publish` moves the files under the root).

    Classic PySpark writes as Spark's streaming file sink does (:mod:`parquet_sink.write.manifest_write`): the
    files and rows are those of the accepted task attempts, from their commit messages and write statistics.
    Elsewhere (Spark Connect) ``df.write`` runs the Hadoop output committer with algorithm 1, so staging holds
    exactly the accepted attempts' files, and the rows are counted as they reach the writer, in the attempts
    Spark accepted (an ``Observation``)."""
    df = writer_order(df, partition_by)
    options = {**writer_options(df, compression, max_records_per_file), **local_fs_options(df)}
    with EarlyWriteback(batch.storage, batch.staging):  # the files go to disk while Spark's job writes them
        manifest = write_with_manifest(
            df, batch.storage, batch.staging, batch.commit_id, partition_by, options
        )
        if manifest is None:  # Spark Connect, no JAR, or another Spark: df.write
            staged = _write_observed(df, batch, partition_by, options)
        else:
            staged = Staged(manifest.rows, [f.path for f in manifest.files])
    failpoint("before_publish")
    return staged


def _write_observed(df: DataFrame, batch: InFlightBatch, partition_by: tuple[str, ...], options: dict[str, str]) -> Staged:
    """``df.write`` into staging (output committer algorithm 1), the rows counted by an ``Observation``."""
    from pyspark.sql import Observation

    observation = Observation(f"parquet_sink_{batch.commit_id}")
    writer = df.observe(observation, _rows_counted(df)).write.mode("error").options(**_COMMITTER_OPTIONS, **options)
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.parquet(batch.storage.to_hadoop_path(batch.staging))
    return Staged(observation.get["rows"], None)


def _rows_counted(df: DataFrame) -> Column:
    """The observed metric ``count(1) AS rows``, built once per SparkContext (classic: the Column lives in its
    JVM) or once for Spark Connect (an expression): building it takes ~17 py4j round trips (with PySpark's
    call-site capture), ~1 ms of every batch's fixed cost; a Column is immutable and not tied to a DataFrame."""
    from pyspark.sql import functions as F

    key = "connect" if type(df).__module__.startswith("pyspark.sql.connect.") else df.sparkSession.sparkContext
    return per_context(_ROWS_COUNTED, key, lambda: F.count(F.lit(1)).alias("rows"))


def refuse_nul_partition_values(df: DataFrame, partition_by: tuple[str, ...]) -> None:
    """ParameterError naming a partition column of ``df`` and a value of it that holds a NUL character, as
    Spark's cast to string names its directory (:func:`parquet_sink.partitioning.partition_dir`'s refusal, which the
    Arrow path and ``write_batch`` meet before writing); nothing when no value does. One Spark job: asked only once
    Spark's writer failed on such a directory name (Hadoop's ``Mkdirs failed``), never on a batch's path.

    Example: ``refuse_nul_partition_values(spark.sql("select 1 id, 'a' || char(0) p"), ("p",))`` raises.
    """
    from pyspark.sql import functions as F

    quoted = [f"`{c.replace('`', '``')}`" for c in partition_by]
    texts = df.select(*(F.col(q).cast("string").alias(c) for q, c in zip(quoted, partition_by)))
    holds_nul = functools.reduce(operator.or_, [F.instr(F.col(q), "\x00") > 0 for q in quoted])
    for row in texts.where(holds_nul).limit(1).collect():
        partition_dir(zip(partition_by, row))


def writer_options(df: DataFrame, compression: str, max_records_per_file: int | None) -> dict[str, str]:
    """Spark's Parquet writer options of a batch (both Spark writer paths): the codec, ``maxRecordsPerFile``, and
    no dictionary encoding of a float or double column (``parquet.enable.dictionary#<column path>``, parquet-mr's
    per-column setting), as the Arrow path writes a float column holding a zero
    (:class:`~parquet_sink.statistics.FooterRule`): parquet-mr's ``DictionaryFilter`` tests ``x = -0.0`` by
    ``Double.equals``, so Spark's reader with filter pushdown on skipped a row group whose dictionary held ``0.0``
    (Spark SQL's ``0.0 = -0.0`` is true: rows lost; Spark's own sink writes such files too).

    Example: ``writer_options(df, "snappy", None)`` for ``id long, x double`` ->
    ``{'compression': 'snappy', 'parquet.enable.dictionary#x': 'false'}``.
    """
    options = {"compression": compression}
    if max_records_per_file:
        options["maxRecordsPerFile"] = str(max_records_per_file)
    for path in _float_leaves(df.schema):
        options[f"parquet.enable.dictionary#{path}"] = "false"
    return options


def _float_leaves(typ: object, path: str = "") -> list[str]:
    """The dotted Parquet column paths of the float and double leaves of a Spark type, as Spark's writer names
    them (``a.b``; a list's element ``a.list.element``, a map's ``a.key_value.key`` / ``a.key_value.value``)."""
    from pyspark.sql.types import ArrayType, DoubleType, FloatType, MapType, StructType

    prefix = f"{path}." if path else ""
    if isinstance(typ, StructType):
        return [leaf for f in typ.fields for leaf in _float_leaves(f.dataType, prefix + f.name)]
    if isinstance(typ, ArrayType):
        return _float_leaves(typ.elementType, f"{path}.list.element")
    if isinstance(typ, MapType):
        return _float_leaves(typ.keyType, f"{path}.key_value.key") + _float_leaves(typ.valueType, f"{path}.key_value.value")
    return [path] if isinstance(typ, (FloatType, DoubleType)) else []


def writer_order(df: DataFrame, partition_by: tuple[str, ...]) -> DataFrame:
    """``df`` ordered so that Spark's writer never goes back to a partition directory it has closed.

    Spark's writer sorts by the partition columns, where ``0.0`` equals ``-0.0`` and every NaN equals
    every other, but starts a new file, named after the job and task only, whenever the bits change: a
    task holding ``0.0, -0.0, 0.0`` would reopen ``d=0.0/part-00000-<job>.c000`` and fail
    (``FileAlreadyExistsException``). So float and double partition columns get NaNs of one bit pattern
    (they all print ``NaN``: same directory, and partition values are not stored in the files) and a
    second sort key, the directory text, that puts ``-0.0`` before ``0.0``; Spark's own sort is then
    satisfied and not added. Other columns are left alone.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, FloatType

    quoted = {c: f"`{c.replace('`', '``')}`" for c in partition_by}
    types = {c: df.schema[c].dataType for c in partition_by}
    floats = {c: t for c, t in types.items() if isinstance(t, (FloatType, DoubleType))}
    if not floats:
        return df
    df = df.withColumns({c: F.nanvl(F.col(quoted[c]), F.lit(float("nan")).cast(t)) for c, t in floats.items()})
    keys = [F.col(quoted[c]) for c in partition_by] + [F.col(quoted[c]).cast("string") for c in floats]
    return df.sortWithinPartitions(*keys)


def _staged_files(storage: Storage, staging: str) -> list[str]:
    """Staging-relative paths of the data files Spark left (:func:`is_data_file`: not ``_temporary/``,
    but ``_k=a/`` partition directories)."""
    prefix = staging.rstrip("/") + "/"
    relative = (info.path[len(prefix) :] for info in storage.find(staging) if info.path.startswith(prefix))
    return sorted(filter(is_data_file, relative))


def publish(batch: InFlightBatch, staged: Staged, schema_file: bool = False) -> list[FileStatus]:
    """Rename every staged data file of ``batch`` that has rows to the same relative path under the root
    (never overwriting; Spark's schema-only file of an empty batch stays behind, unless ``schema_file``: then an
    empty batch publishes it, as Spark's sink commits it), then fsync the files and every directory that gained
    an entry, and read sizes and mtimes.

    The staged files are ``staged.files`` (the accepted attempts', from Spark's commit messages), else every
    data file in staging. If they hold another number of rows than Spark's job wrote (``staged.rows``),
    :class:`RowCountMismatchError` is raised before anything is renamed.

    Example::

        >>> [f.path for f in publish(batch, Staged(rows=100, files=None))]
        ['/data/out/k=a/part-00000-....c000.snappy.parquet']
    """
    storage, staging, written_rows = batch.storage, batch.staging, staged.rows
    relative = _staged_files(storage, staging) if staged.files is None else staged.files
    staged_paths = [posixpath.join(staging, path) for path in relative]
    filesystem = storage.arrow_filesystem()
    with ThreadPoolExecutor(IO_THREADS) as pool:
        # a file's data is made durable where it was staged: the rename keeps the inode
        footers = list(pool.map(lambda path: _footer_made_durable(storage, filesystem, path), staged_paths))
        rows = [footer.num_rows for footer in footers]
        if sum(rows) != written_rows:
            raise RowCountMismatchError(
                f"log batch {batch.log_batch_id} of {storage.display(storage.root)}: Spark's job wrote "
                f"{written_rows} rows but the {len(staged_paths)} data file(s) in {storage.display(staging)} hold "
                f"{sum(rows)}; nothing was published or committed. Something else wrote into or deleted from "
                "the staging directory, or a file there is not a data file; Spark retries the batch when the "
                "query restarts (`parquet-sink vacuum` removes the staging directory)."
            )
        targets = []
        directories = {storage.root}
        for source, footer in zip(staged_paths, footers):
            if not footer.num_rows and not (schema_file and not written_rows):
                continue
            if not footer.num_rows:  # the schema-only file: not made durable above
                storage.fsync(source)
            target = storage.join(source[len(staging) + 1 :])
            parent = posixpath.dirname(target)
            if storage.rename_no_overwrite(source, target):
                while parent != storage.root and parent not in directories:  # new directories: their parents too
                    directories.add(parent)
                    parent = posixpath.dirname(parent)
            directories.add(posixpath.dirname(target))
            targets.append((target, footer))
            failpoint("publish_rename")
        list(pool.map(storage.fsync, sorted(directories, key=len, reverse=True)))
        return list(pool.map(lambda item: _status(storage, *item), targets))


def _footer_made_durable(storage: Storage, filesystem: pyarrow.fs.FileSystem, path: str) -> pq.FileMetaData:
    """The file's footer (not the data: its row count and statistics); a file with rows is fsynced."""
    footer = pq.read_metadata(path, filesystem=filesystem)
    if footer.num_rows:
        storage.fsync(path)
    return footer


def _status(storage: Storage, path: str, footer: pq.FileMetaData) -> FileStatus:
    info = storage.info(path)
    return FileStatus(path, info.size, info.mtime_ms, footer.num_rows, encode_stats(footer))
