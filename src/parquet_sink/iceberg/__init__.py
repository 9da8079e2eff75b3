"""An Apache Iceberg table kept in step with ``_spark_metadata``, so every engine that reads Iceberg (pyiceberg,
polars, duckdb, Trino, Snowflake, Athena) reads exactly the committed files: the counterpart of Apache XTable's
Delta-to-Iceberg translation and of Delta UniForm (Iceberg metadata beside the data), for files a streaming file
sink already wrote and committed, built on the path of pyiceberg's ``add_files`` (files without field ids, read by
name mapping). Needs the ``pyiceberg`` package (``pip install "parquet-sink[iceberg]"``), imported only when used.

:mod:`.sync` decides what each Iceberg snapshot holds and commits it through pyiceberg; :mod:`.follow` is the
writers' side (``iceberg=``: the sync after each commit, and what a batch to an output with an Iceberg table is
refused for before its commit); :mod:`.expiry` is ``vacuum``'s (snapshots expired, metadata no snapshot left
needs deleted); :mod:`.compare` is ``verify``'s and ``doctor``'s (the table against the log, and the remedy that
makes it again).

Layering: imports ``errors``, ``parquet_read``, ``table_formats`` (what it shares with ``delta``), ``storage``,
``log`` and ``read``; beside ``delta`` (neither imports the other); ``table`` imports it.

Example::

    >>> from parquet_sink.iceberg import sync_iceberg
    >>> sync_iceberg("/data/events").log_batch
    3
"""

from .compare import compare_iceberg, recreate_iceberg
from .errors import IcebergDependencyError, IcebergRefusalError, IcebergSyncError
from .follow import IcebergTarget
from .sync import METADATA_DIR, IcebergSyncResult, current_metadata, require_pyiceberg, sync_iceberg

__all__ = [
    "METADATA_DIR",
    "IcebergDependencyError",
    "IcebergRefusalError",
    "IcebergSyncError",
    "IcebergSyncResult",
    "IcebergTarget",
    "compare_iceberg",
    "current_metadata",
    "recreate_iceberg",
    "require_pyiceberg",
    "sync_iceberg",
]
