"""parquet_sink: an exactly-once Parquet file sink for PySpark ``foreachBatch``, compatible with Spark's
``_spark_metadata`` log, a reader that only ever sees committed data, and :func:`write_batch`, exactly-once
appends from plain Python (pyarrow, pandas, polars) chained on committed batches.

The public names below are imported on first use (PEP 562), so ``import parquet_sink`` and the command line's
``--help`` do not load pyarrow, fsspec or Spark until something needs them.

Example::

    >>> from parquet_sink import ParquetSink, read_committed
    >>> query = df.writeStream.foreachBatch(ParquetSink("/data/out")).option(
    ...     "checkpointLocation", "/data/ckpt").start()
    >>> read_committed("/data/out").num_rows
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import errors
from .errors import ParquetSinkError, original_error

__version__ = "0.1.0"

_LAZY = {  # public name -> the module that defines it
    "BatchProgress": "write.sink",
    "ParquetSink": "write.sink",
    "await_termination": "write.termination",
    "WriteResult": "write.appends",
    "write_batch": "write.appends",
    "CommittedFile": "read.reader",
    "CommittedFiles": "read.reader",
    "committed_dataset": "read.reader",
    "committed_files": "read.reader",
    "count_committed": "read.reader",
    "read_committed": "read.reader",
    "snapshot": "read.reader",
    "history": "read.history",
    "SourceBatch": "read.chain",
    "committed_version": "read.chain",
    "iter_batches": "read.chain",
    "LogEntry": "log.entry",
    "MetadataLog": "log.metadata_log",
    "Storage": "storage.filesystem",
    "DeltaSyncResult": "delta.sync",
    "sync_delta_log": "delta.sync",
    "IcebergSyncResult": "iceberg.sync",
    "sync_iceberg": "iceberg.sync",
    "doctor": "maintenance.doctor",
    "optimize": "maintenance.optimize",
    "vacuum": "maintenance.vacuum",
    "verify": "maintenance.inspect",
    "SinkOutput": "table.sink_output",
}

if TYPE_CHECKING:
    from .delta.sync import DeltaSyncResult, sync_delta_log
    from .iceberg.sync import IcebergSyncResult, sync_iceberg
    from .log.entry import LogEntry
    from .log.metadata_log import MetadataLog
    from .maintenance.doctor import doctor
    from .maintenance.inspect import verify
    from .maintenance.optimize import optimize
    from .maintenance.vacuum import vacuum
    from .read.history import history
    from .read.chain import SourceBatch, committed_version, iter_batches
    from .read.reader import (
        CommittedFile, CommittedFiles, committed_dataset, committed_files, count_committed, read_committed, snapshot,
    )
    from .storage.filesystem import Storage
    from .table.sink_output import SinkOutput
    from .write.appends import WriteResult, write_batch
    from .write.sink import BatchProgress, ParquetSink
    from .write.termination import await_termination


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["ParquetSinkError", "errors", "original_error", *_LAZY]
