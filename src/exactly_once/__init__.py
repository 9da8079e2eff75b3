"""exactly_once: an exactly-once Parquet file sink for PySpark ``foreachBatch``, compatible with Spark's
``_spark_metadata`` log, a reader that only ever sees committed data, and :func:`write_batch`, exactly-once
appends from plain Python (pyarrow, pandas, polars) chained on committed batches.

Example::

    >>> from exactly_once import ParquetSink, read_committed
    >>> query = df.writeStream.foreachBatch(ParquetSink("/data/out")).option(
    ...     "checkpointLocation", "/data/ckpt").start()
    >>> read_committed("/data/out").num_rows
"""

from . import errors, metadata_log
from .chain import SourceBatch, committed_version, iter_batches
from .errors import ExactlyOnceError
from .metadata_log import LogEntry, MetadataLog
from .python_writer import WriteResult, write_batch
from .reader import CommittedFile, CommittedFiles, committed_dataset, committed_files, read_committed, snapshot
from .sink import BatchProgress, ParquetSink
from .storage import Storage

__all__ = [
    "BatchProgress",
    "CommittedFile",
    "CommittedFiles",
    "ExactlyOnceError",
    "LogEntry",
    "MetadataLog",
    "ParquetSink",
    "SourceBatch",
    "Storage",
    "WriteResult",
    "committed_dataset",
    "committed_files",
    "committed_version",
    "errors",
    "iter_batches",
    "metadata_log",
    "read_committed",
    "snapshot",
    "write_batch",
]
__version__ = "0.1.0"
