"""``read_committed``: read only what the log says is committed (the counterpart of Spark's
``MetadataLogFileIndex``).

The file list comes from the log alone (newest compact file plus the deltas after it), read as one
snapshot pinned at the latest batch: a cleanup or compaction racing the read makes it retry, never mix
two states. The data directory is never listed, so files of failed or in-flight batches are never seen.

Example::

    >>> table = read_committed("/data/events")                    # pyarrow.Table
    >>> df = read_committed("/data/events", spark=spark)          # Spark DataFrame
    >>> new = read_committed("/data/events", batches=(42, 57))    # only what batches 42..57 added
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from .errors import (
    LogError,
    MissingDataFileError,
    MissingLogFileError,
    NotAnOutputError,
    OutsideRootError,
    SnapshotError,
)
from .metadata_log import METADATA_DIR, LogEntry, MetadataLog
from .partitioning import convert_partition_value, infer_partition_types, parse_partition_path
from .storage import Storage

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

logger = logging.getLogger(__name__)

_SNAPSHOT_ATTEMPTS = 20


@dataclass(frozen=True)
class CommittedFile:
    """One committed data file, resolved under the output root."""

    path: str  # fsspec path, no protocol
    relative_path: str  # relative to the root, e.g. "day=2024-01-01/part-00000-....parquet"
    size: int
    modification_time: int
    batch_id: int | None  # None only for entries of a compact file written by Spark itself
    partition: tuple[tuple[str, str], ...]  # (column, raw escaped value)


@dataclass(frozen=True)
class Snapshot:
    """The committed files of an output as of one batch."""

    storage: Storage
    latest_batch_id: int | None
    files: tuple[CommittedFile, ...]


def _read_snapshot(log: MetadataLog) -> tuple[int | None, list[LogEntry]]:
    """Entries as of the latest batch, retrying while a concurrent compaction/cleanup moves the log."""
    last_error: Exception | None = None
    for attempt in range(_SNAPSHOT_ATTEMPTS):
        latest = log.latest_batch_id()
        if latest is None:
            return None, []
        try:
            return latest, list(log.iter_snapshot(latest))
        except (FileNotFoundError, MissingLogFileError) as exc:
            last_error = exc
            if log.latest_batch_id() == latest and isinstance(exc, MissingLogFileError):
                raise  # the log did not move: the file is really missing
            logger.debug("log moved while reading batch %s (attempt %d): retrying", latest, attempt + 1)
            time.sleep(0.01 * attempt)
    raise SnapshotError(
        f"could not read a consistent snapshot of {log.display(log.log_dir)} in {_SNAPSHOT_ATTEMPTS} attempts: "
        f"log files kept disappearing ({last_error}). Raise the writer's cleanup_delay."
    )


def _select(
    log: MetadataLog,
    latest: int,
    entries: list[LogEntry],
    as_of_batch: int | None,
    batches: tuple[int, int] | None,
) -> list[LogEntry]:
    """Restrict the latest snapshot to ``as_of_batch`` and/or the batch range ``batches``."""
    high = latest if as_of_batch is None else min(as_of_batch, latest)
    low = 0 if batches is None else batches[0]
    if batches is not None:
        high = min(high, batches[1])
    if as_of_batch is not None and as_of_batch > latest:
        raise LogError(
            f"as_of_batch={as_of_batch} but {log.display(log.log_dir)} has only batches up to {latest}; "
            "ask for a committed batch."
        )
    if low == 0 and high == latest:
        return entries
    if all(e.batch_id is not None for e in entries):
        return [e for e in entries if low <= e.batch_id <= high]
    # A compact file written by Spark itself does not attribute its entries to batches: fall back to
    # the older log files (present unless cleaned up), as Spark would read them.
    upto = log.all_files(high)
    if low == 0:
        return upto
    before = {e.path for e in log.all_files(low - 1)}
    return [e for e in upto if e.path not in before]


def _relative_segments(path: str) -> str:
    """The root-relative part of a data file path: its name plus the ``k=v`` directories above it."""
    parts = path.split("/")
    start = len(parts) - 1
    while start > 0 and "=" in parts[start - 1]:
        start -= 1
    return "/".join(parts[start:])


class _Resolver:
    """Maps log paths to files under the root, following a relocated (copied or moved) output."""

    def __init__(self, storage: Storage, allow_outside_root: bool) -> None:
        self.storage = storage
        self.prefix = storage.root.rstrip("/") + "/"
        self.allow_outside_root = allow_outside_root
        self.relocated: dict[str, bool] = {}

    def resolve(self, entry: LogEntry) -> tuple[str, str]:
        path = self.storage.from_uri(entry.path)
        if path.startswith(self.prefix):
            return path, path[len(self.prefix) :]
        relative = _relative_segments(path)
        old_root = path[: len(path) - len(relative)]
        if old_root not in self.relocated:
            self.relocated[old_root] = self.storage.exists(self.prefix + relative)
            if self.relocated[old_root]:
                logger.info("output was relocated from %s: reading files under %s", old_root, self.prefix)
        if self.relocated[old_root]:
            return self.prefix + relative, relative
        if self.allow_outside_root:
            return path, relative
        raise OutsideRootError(
            f"batch {entry.batch_id} of {self.storage.display(self.storage.root)} lists {entry.path}, which is "
            "outside the output root and not found under it. If the output was moved, move its data files too; "
            "to read files outside the root on purpose, pass allow_outside_root=True."
        )


class SnapshotOptions(TypedDict, total=False):
    """Keyword options shared by :func:`snapshot`, :func:`committed_files`, :func:`committed_dataset` and
    :func:`read_committed`."""

    as_of_batch: int | None
    batches: tuple[int, int] | None
    storage_options: dict[str, Any] | None
    allow_outside_root: bool
    ignore_missing_files: bool


def snapshot(
    path: str,
    *,
    as_of_batch: int | None = None,
    batches: tuple[int, int] | None = None,
    storage_options: dict[str, Any] | None = None,
    allow_outside_root: bool = False,
    ignore_missing_files: bool = False,
) -> Snapshot:
    """The committed files of ``path`` with the storage that reads them (see :func:`committed_files`).

    Example::

        >>> snap = snapshot("/data/events")
        >>> snap.latest_batch_id, len(snap.files)
        (57, 120)
    """
    storage = Storage(path, storage_options)
    log = MetadataLog(path, storage=storage, cleanup=False)
    if not storage.exists(log.log_dir):
        raise NotAnOutputError(
            f"{storage.display(storage.root)} has no {METADATA_DIR} log, so committed data cannot be told "
            "apart from files of failed batches. Point at the output directory of a streaming file sink "
            "(ParquetSink or Spark's writeStream.format('parquet'))."
        )
    latest, entries = _read_snapshot(log)
    if latest is None:
        return Snapshot(storage, None, ())
    if batches is not None and batches[0] > batches[1]:
        raise ValueError(f"batches={batches}: the first batch must not be after the last")
    resolver = _Resolver(storage, allow_outside_root)
    files = []
    for entry in _select(log, latest, entries, as_of_batch, batches):
        if entry.is_dir or entry.size <= 0:
            continue  # Spark skips directories and empty files
        file_path, relative = resolver.resolve(entry)
        files.append(
            CommittedFile(
                file_path,
                relative,
                entry.size,
                entry.modification_time,
                entry.batch_id,
                tuple(parse_partition_path(relative)),
            )
        )
    if ignore_missing_files:
        present = [f for f in files if storage.exists(f.path)]
        for gone in set(files) - set(present):
            logger.warning("skipping missing committed file %s (batch %s)", storage.display(gone.path), gone.batch_id)
        files = present
    return Snapshot(storage, latest, tuple(files))


def committed_files(path: str, **options: Unpack[SnapshotOptions]) -> list[CommittedFile]:
    """The committed data files of the output at ``path``, from the log only (options as :func:`snapshot`).

    ``as_of_batch=N``: as after batch N. ``batches=(a, b)``: only the files batches a..b committed.
    Directories and zero-size entries are skipped like Spark does; entries outside the root are refused
    unless ``allow_outside_root``; a relocated output is followed.

    Example::

        >>> [f.relative_path for f in committed_files("/data/events", batches=(3, 3))]
        ['day=2024-01-01/part-00000-1f0c...c000.snappy.parquet']
    """
    return list(snapshot(path, **options).files)


def _dataset_from(snap: Snapshot, time_zone: str = "UTC") -> ds.Dataset:
    storage = snap.storage
    files = snap.files
    raw_values: dict[str, list[str]] = {}
    for f in files:
        for column, raw in f.partition:
            raw_values.setdefault(column, []).append(raw)
    types = infer_partition_types(raw_values, time_zone)
    filesystem = storage.arrow_filesystem()
    if not files:
        return ds.dataset([], schema=pa.schema([]))
    try:
        schemas = [pq.read_schema(p, filesystem=filesystem) for p in {files[0].path, files[-1].path}]
    except (FileNotFoundError, OSError) as exc:
        raise _missing(snap, exc) from exc
    data_schema = pa.unify_schemas(schemas, promote_options="permissive")
    data_schema = pa.schema([f for f in data_schema if f.name not in types])
    schema = pa.schema(list(data_schema) + [pa.field(c, t) for c, t in types.items()])
    partitions = []
    for f in files:
        expr = ds.scalar(True)
        for column, raw in f.partition:
            value = convert_partition_value(raw, types[column])
            field = ds.field(column)
            expr = expr & (field.is_null() if value is None else field == pa.scalar(value, types[column]))
        partitions.append(expr)
    return ds.FileSystemDataset.from_paths(
        [f.path for f in files],
        schema=schema,
        format=ds.ParquetFileFormat(),
        filesystem=filesystem,
        partitions=partitions,
    )


def _missing(snap: Snapshot, exc: Exception) -> Exception:
    """Turn a read failure into a typed error naming the missing committed file and its batch."""
    for f in snap.files:
        if f.path in str(exc) or not snap.storage.exists(f.path):
            return MissingDataFileError(
                f"committed file {snap.storage.display(f.path)} of batch {f.batch_id} is missing from storage. "
                "It was deleted outside the sink; restore it from backup, or pass ignore_missing_files=True "
                "to read the rest (that data is then missing from the result)."
            )
    return exc


def committed_dataset(path: str, *, time_zone: str = "UTC", **options: Unpack[SnapshotOptions]) -> ds.Dataset:
    """A lazy ``pyarrow.dataset.Dataset`` over exactly the committed files, with Spark's partition columns
    (options as :func:`snapshot`). Timestamp partition values are read in ``time_zone``, as Spark reads
    them in its session time zone: pass the writer's ``spark.sql.session.timeZone``.

    Example::

        >>> dset = committed_dataset("/data/events")
        >>> dset.to_table(filter=ds.field("day") == "2024-01-01").num_rows
        1000
    """
    return _dataset_from(snapshot(path, **options), time_zone)


def read_committed(
    path: str,
    *,
    spark: SparkSession | None = None,
    columns: Sequence[str] | None = None,
    filter: Any = None,
    time_zone: str = "UTC",
    **options: Unpack[SnapshotOptions],
) -> pa.Table | DataFrame:
    """Read exactly the committed rows of a streaming file sink output.

    Without ``spark``: a ``pyarrow.Table`` (``filter`` is a ``pyarrow.dataset`` expression; use
    ``.to_pandas()`` / ``polars.from_arrow`` / duckdb on it, zero-copy). With ``spark=session``: a Spark
    DataFrame over exactly the committed files (``filter`` is a Column or SQL string), partition columns
    included, as ``spark.read.parquet(path)`` returns them (timestamp partition values in ``time_zone``,
    where Spark uses its session time zone). ``options`` are those of :func:`snapshot`
    (``as_of_batch``, ``batches``, ``storage_options``, ``allow_outside_root``, ``ignore_missing_files``).

    Example::

        >>> read_committed("/data/events", columns=["id"], filter=ds.field("day") == "2024-01-01")
        pyarrow.Table ...
        >>> read_committed("/data/events", spark=spark).count()
        1000
    """
    snap = snapshot(path, **options)
    if spark is not None:
        return _spark_dataframe(spark, snap, columns, filter)
    if not snap.files:  # nothing committed yet: no file tells the schema
        return pa.table({c: pa.array([], pa.null()) for c in columns or ()})
    dataset = _dataset_from(snap, time_zone)
    try:
        return dataset.to_table(columns=list(columns) if columns is not None else None, filter=filter)
    except (FileNotFoundError, OSError) as exc:
        raise _missing(snap, exc) from exc


def _spark_dataframe(spark: SparkSession, snap: Snapshot, columns: Sequence[str] | None, filter: Any) -> DataFrame:
    storage = snap.storage
    if not snap.files:
        df = spark.createDataFrame([], "struct<>")
    else:
        paths = [storage.to_hadoop_path(f.path) for f in snap.files]
        try:
            reader = spark.read.option("basePath", storage.to_hadoop_path(storage.root))
            # mergeSchema: new nullable columns (allowed schema evolution) show, as in the Arrow reader.
            df = reader.option("mergeSchema", "true").parquet(*paths)
        except Exception as exc:
            if "PATH_NOT_FOUND" in str(exc) or "does not exist" in str(exc):
                raise _missing(snap, exc) from exc
            raise
    if filter is not None:
        df = df.filter(filter)
    if columns is not None:
        df = df.select(*columns)
    return df
