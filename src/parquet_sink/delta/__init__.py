"""A Delta Lake transaction log kept in step with ``_spark_metadata``, so every engine that reads Delta
(delta-rs, polars, duckdb, Trino, Spark's Delta connector) reads exactly the committed files: the counterpart of
delta-rs's ``write_deltalake`` and Delta's ``OptimisticTransaction`` for files a streaming file sink already
wrote and committed. Needs the ``deltalake`` package (``pip install "parquet-sink[delta]"``), imported only when
used.

:mod:`.sync` decides what to commit and commits it through delta-rs; :mod:`.actions` turns a committed file into
what a Delta ``add`` action says of it (partition values, statistics, types).

Layering: imports ``errors``, ``failpoints``, ``partitioning``, ``storage``, ``log`` and ``read``; ``write`` and
``maintenance`` import it.

Example::

    >>> from parquet_sink.delta import sync_delta_log
    >>> sync_delta_log("/data/events").delta_version
    3
"""

from .errors import DeltaRangeError
from .sync import (
    APP_ID,
    DELTA_DIR,
    DeltaDependencyError,
    DeltaLogError,
    DeltaSyncResult,
    compare_logs,
    has_delta_log,
    referenced_files,
    require_deltalake,
    sync_after_commit,
    sync_delta_log,
)

__all__ = [
    "APP_ID",
    "DELTA_DIR",
    "DeltaDependencyError",
    "DeltaLogError",
    "DeltaRangeError",
    "DeltaSyncResult",
    "compare_logs",
    "has_delta_log",
    "referenced_files",
    "require_deltalake",
    "sync_after_commit",
    "sync_delta_log",
]
