"""exactly_once: an exactly-once Parquet file sink for PySpark ``foreachBatch``, compatible with Spark's
``_spark_metadata`` log, and a reader that only ever sees committed data.

Example::

    >>> from exactly_once import ParquetSink, read_committed
    >>> query = df.writeStream.foreachBatch(ParquetSink("/data/out")).option(
    ...     "checkpointLocation", "/data/ckpt").start()
    >>> read_committed("/data/out").num_rows
"""

from . import errors, metadata_log
from .errors import ExactlyOnceError
from .metadata_log import LogEntry, MetadataLog
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
    "Storage",
    "committed_dataset",
    "committed_files",
    "errors",
    "metadata_log",
    "read_committed",
    "snapshot",
]
__version__ = "0.1.0"
