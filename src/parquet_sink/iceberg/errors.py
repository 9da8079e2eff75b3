"""The Iceberg mirror's typed errors (pyiceberg's own counterpart: ``pyiceberg.exceptions``), apart so that every
module of :mod:`parquet_sink.iceberg` raises them; ``parquet_sink.iceberg`` re-exports them."""

from __future__ import annotations

from ..errors import MissingDependencyError, ParquetSinkError


class IcebergSyncError(ParquetSinkError):
    """The Iceberg table cannot be brought in step with ``_spark_metadata``: another Iceberg writer committed to
    it, it mirrors a log batch the log does not hold (an output reset), it belongs to another output, its
    partitioning or a column's type differs from the committed files', or a column has a type Iceberg lacks."""


class IcebergDependencyError(MissingDependencyError):
    """The ``pyiceberg`` package is missing or too old for an Iceberg table."""


__all__ = ["IcebergDependencyError", "IcebergSyncError"]
