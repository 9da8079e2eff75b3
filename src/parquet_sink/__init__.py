"""parquet_sink: an exactly-once Parquet file sink for PySpark ``foreachBatch``, compatible with Spark's
``_spark_metadata`` log, a reader that only ever sees committed data, and :func:`write_batch`, exactly-once
appends from plain Python (pyarrow, pandas, polars) chained on committed batches.

Example::

    >>> from parquet_sink import ParquetSink, read_committed
    >>> query = df.writeStream.foreachBatch(ParquetSink("/data/out")).option(
    ...     "checkpointLocation", "/data/ckpt").start()
    >>> read_committed("/data/out").num_rows
"""

from . import errors
from .read.chain import SourceBatch, committed_version, iter_batches
from .errors import ParquetSinkError
from .log.metadata_log import LogEntry, MetadataLog
from .write.appends import WriteResult, write_batch
from .read.reader import CommittedFile, CommittedFiles, committed_dataset, committed_files, read_committed, snapshot
from .write.sink import BatchProgress, ParquetSink
from .storage.filesystem import Storage

__all__ = [
    "BatchProgress",
    "CommittedFile",
    "CommittedFiles",
    "ParquetSinkError",
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
    "read_committed",
    "snapshot",
    "write_batch",
]
__version__ = "0.1.0"
