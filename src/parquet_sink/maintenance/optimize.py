"""``optimize``: compact the committed small data files of an output in one swap every reader sees atomically, as
a library feature (the CLI only prints what :func:`optimize` returns); the counterpart of delta-rs's
``DeltaTable.optimize.compact()`` / ``z_order()``, Delta's ``OPTIMIZE`` and Iceberg's ``rewrite_data_files``.

The rewrite and the swap live in :mod:`parquet_sink.write.rewrite` (the sink's ``optimize_every`` runs them too,
and the writers may not import maintenance); this module is their public surface.

Example::

    >>> from parquet_sink.maintenance import optimize
    >>> optimize("/data/events", target_file_size="128MB", dry_run=True).plan.files_removed
    180
"""

from ..write import rewrite as _rewrite
from ..write.rewrite import (
    DEFAULT_TARGET_FILE_SIZE,
    Bin,
    InputFile,
    OptimizePlan,
    OptimizeResult,
    optimize,
    parse_file_size,
    plan_optimize,
)

__all__ = [name for name in _rewrite.__all__ if name != "BackgroundOptimizer"]  # the sink's, not a library call
