"""``SinkOutput``: one output of the sink (``<path>`` with its ``_spark_metadata`` log) as an object, opened once
with its path and storage options, with a typed method for everything the free functions do: read (columns,
filters, time travel, ``spark=``), count, files, snapshot, schema, latest batch, history, write, verify, doctor,
vacuum, optimize and the Delta sync. The counterpart of delta-rs's ``DeltaTable`` (``.history()``,
``.optimize.compact()``, ``.vacuum()``, ``.files()``, ``.version()``, ``.schema()``) and pyiceberg's ``Table``.

Each method is the free function of the same operation (:func:`parquet_sink.read_committed`,
:func:`parquet_sink.vacuum`, ...) on this output, with this output's storage options: the same checks, errors and
results (one implementation; the suites run both surfaces where the point is that they agree). The storage is
opened once, when the object is made (a bad URL or missing credentials fail there); fsspec keeps its file system,
which every call reuses.

Example::

    >>> from parquet_sink import SinkOutput
    >>> events = SinkOutput("s3://bucket/events", storage_options={"anon": False})
    >>> events.read(columns=["id"], filter=ds.field("day") == "2024-01-01").num_rows
    1000
    >>> events.history(limit=1).column("log_batch_id").to_pylist(), events.latest_batch()
    ([57], 57)
    >>> events.optimize(target_file_size="128MB").files_added
    3
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Unpack, overload

import pyarrow as pa

from ..delta.sync import DeltaSyncResult, sync_delta_log
from ..errors import ParameterError, checks_keywords
from ..iceberg.sync import IcebergSyncResult, sync_iceberg
from ..log.metadata_log import MetadataLog
from ..maintenance.doctor import Diagnosis, doctor
from ..maintenance.inspect import VerifyReport, verify
from ..maintenance.optimize import OptimizeResult, optimize
from ..maintenance.vacuum import SAFE_AGE, VacuumResult, vacuum
from ..read.history import history
from ..read.reader import (
    CommittedFiles, Snapshot, SnapshotOptions, committed_dataset, committed_files, count_committed, read_committed,
    snapshot,
)
from ..storage.filesystem import Storage
from ..write.appends import WriteResult, write_batch

if TYPE_CHECKING:
    import datetime as _dt

    import pyarrow.dataset as ds
    from pyspark.sql import DataFrame, SparkSession


class SinkOutput:
    """An output of the sink at ``path`` (any fsspec URL; local disk by default), with ``storage_options`` for
    every call. Nothing is read until a method asks (an output that does not exist yet can be written by
    :meth:`write`).

    Example: ``SinkOutput("/data/events").count()`` -> ``1000``.
    """

    @checks_keywords
    def __init__(self, path: str | os.PathLike[str], *, storage_options: Mapping[str, Any] | None = None) -> None:
        self.path = os.fspath(path)
        self.storage_options: dict[str, Any] = dict(storage_options or {})
        self.storage = Storage(self.path, self.storage_options)  # opened once: a bad URL fails here

    def __repr__(self) -> str:
        return f"SinkOutput({self.storage.display(self.storage.root)!r})"

    def _options(self, method: str, options: Mapping[str, Any]) -> dict[str, Any]:
        """``options`` with this output's storage options; ParameterError for storage options given again."""
        if "storage_options" in options:
            raise ParameterError(
                f"{self!r}.{method}(storage_options=...): the storage options are the output's, given once to "
                "SinkOutput(path, storage_options=...)"
            )
        return {**options, "storage_options": self.storage_options}

    # -- reading -------------------------------------------------------------------------------------------

    @overload
    def read(self, *, spark: None = None, columns: list[str] | None = None, filter: Any = None,
             time_zone: str = "UTC", **options: Unpack[SnapshotOptions]) -> pa.Table: ...

    @overload
    def read(self, *, spark: SparkSession, columns: list[str] | None = None, filter: Any = None,
             time_zone: str = "UTC", **options: Unpack[SnapshotOptions]) -> DataFrame: ...

    def read(self, *, spark: SparkSession | None = None, columns: list[str] | None = None, filter: Any = None,
             time_zone: str = "UTC", **options: Unpack[SnapshotOptions]) -> pa.Table | DataFrame:
        """The committed rows (:func:`parquet_sink.read_committed`): a ``pyarrow.Table``, or a Spark DataFrame
        with ``spark``; ``as_of_batch`` / ``as_of_time`` / ``batches`` travel in time.

        Example: ``SinkOutput("/data/events").read(as_of_batch=3, columns=["id"]).num_rows`` -> ``400``.
        """
        return read_committed(self.path, spark=spark, columns=columns, filter=filter, time_zone=time_zone,
                              **self._options("read", options))

    def count(self, *, filter: Any = None, time_zone: str = "UTC", **options: Unpack[SnapshotOptions]) -> int:
        """The number of committed rows matching ``filter`` (:func:`parquet_sink.count_committed`: from the log's
        statistics, opening only the files they cannot decide).

        Example: ``SinkOutput("/data/events").count(filter=ds.field("n") > 5)`` -> ``120``.
        """
        return count_committed(self.path, filter=filter, time_zone=time_zone, **self._options("count", options))

    def files(self, **options: Unpack[SnapshotOptions]) -> CommittedFiles:
        """The committed data files (:func:`parquet_sink.committed_files`).

        Example: ``len(SinkOutput("/data/events").files())`` -> ``120``.
        """
        return committed_files(self.path, **self._options("files", options))

    def dataset(self, *, time_zone: str = "UTC", **options: Unpack[SnapshotOptions]) -> ds.Dataset:
        """A lazy ``pyarrow.dataset.Dataset`` over the committed files (:func:`parquet_sink.committed_dataset`).

        Example: ``SinkOutput("/data/events").dataset().count_rows()`` -> ``1000``.
        """
        return committed_dataset(self.path, time_zone=time_zone, **self._options("dataset", options))

    def snapshot(self, **options: Unpack[SnapshotOptions]) -> Snapshot:
        """The committed files with the storage that reads them (:func:`parquet_sink.snapshot`).

        Example: ``SinkOutput("/data/events").snapshot(as_of_batch=3).latest_batch_id`` -> ``3``.
        """
        return snapshot(self.path, **self._options("snapshot", options))

    def schema(self, *, time_zone: str = "UTC", **options: Unpack[SnapshotOptions]) -> pa.Schema:
        """The schema ``read()`` returns, partition columns included, from the footers (no row is read).

        Example: ``SinkOutput("/data/events").schema().names`` -> ``['id', 'day']``.
        """
        return self.dataset(time_zone=time_zone, **options).schema

    def latest_batch(self) -> int | None:
        """The newest committed log batch (delta-rs's ``version()``), None for a log without one.

        Example: ``SinkOutput("/data/events").latest_batch()`` -> ``57``.
        """
        return MetadataLog(self.path, storage=self.storage, cleanup=False).latest_batch_id()

    def history(self, *, limit: int | None = None, compact_interval: int | None = None) -> pa.Table:
        """One row per committed batch, newest first (:func:`parquet_sink.history`).

        Example: ``SinkOutput("/data/events").history(limit=1).column("rows").to_pylist()`` -> ``[1000]``.
        """
        return history(self.path, limit=limit, compact_interval=compact_interval,
                       storage_options=self.storage_options)

    # -- writing and maintenance ---------------------------------------------------------------------------

    def write(self, data: Any, *, app_id: str, version: int, **options: Any) -> WriteResult:
        """Append ``data`` exactly once per ``(app_id, version)`` (:func:`parquet_sink.write_batch`, whose keyword
        options it takes).

        Example: ``SinkOutput("/data/daily").write(table, app_id="daily-job", version=41).committed`` -> ``True``.
        """
        return write_batch(self.path, data, app_id=app_id, version=version, **self._options("write", options))

    def verify(self, *, compact_interval: int | None = None, iceberg: Any = None) -> VerifyReport:
        """Check the log, every committed file and the Delta log and Iceberg tables kept in step
        (:func:`parquet_sink.verify`; ``iceberg``: a catalog's table, as the writers take it).

        Example: ``SinkOutput("/data/events").verify().ok`` -> ``True``.
        """
        return verify(self.path, storage_options=self.storage_options, compact_interval=compact_interval,
                      iceberg=iceberg)

    def doctor(self, *, checkpoint: str | None = None, app_id: str | None = None, version: int | None = None,
               **options: Any) -> Diagnosis:
        """Predict a restart from ``checkpoint``, or a rerun of ``write(app_id=, version=)``
        (:func:`parquet_sink.doctor`).

        Example: ``SinkOutput("/data/events").doctor(checkpoint="/data/ckpt").plan.ok`` -> ``True``.
        """
        return doctor(self.path, checkpoint=checkpoint, app_id=app_id, version=version,
                      **self._options("doctor", options))

    def vacuum(self, older_than: str | _dt.timedelta = SAFE_AGE, **options: Any) -> VacuumResult:
        """Delete orphan data files older than ``older_than`` (:func:`parquet_sink.vacuum`).

        Example: ``SinkOutput("/data/events").vacuum("7d", dry_run=True).plan.orphans`` -> ``[]``.
        """
        return vacuum(self.path, older_than, **self._options("vacuum", options))

    def optimize(self, **options: Any) -> OptimizeResult:
        """Compact the committed small files in one atomic swap (:func:`parquet_sink.optimize`: ``target_file_size``,
        ``partitions``, ``sort_by``, ``z_order``, ``dry_run``, ...).

        Example: ``SinkOutput("/data/events").optimize(z_order=["x", "y"]).files_added`` -> ``8``.
        """
        return optimize(self.path, **self._options("optimize", options))

    def sync_delta_log(self, **options: Any) -> DeltaSyncResult:
        """Bring the Delta log (``_delta_log``) in step with the log (:func:`parquet_sink.sync_delta_log`).

        Example: ``SinkOutput("/data/events").sync_delta_log().version`` -> ``12``.
        """
        return sync_delta_log(self.path, **self._options("sync_delta_log", options))

    def sync_iceberg(self, **options: Any) -> IcebergSyncResult:
        """Bring the output's Iceberg table in step with the log (:func:`parquet_sink.sync_iceberg`: without
        ``catalog``, its metadata with the output).

        Example: ``SinkOutput("/data/events").sync_iceberg().metadata_location`` -> ``'/data/events/_exactly_once/.iceberg/.metadata/00002-....metadata.json'``.
        """
        return sync_iceberg(self.path, **self._options("sync_iceberg", options))


__all__ = ["SinkOutput"]
