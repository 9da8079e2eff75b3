"""The Iceberg mirror's typed errors (pyiceberg's own counterpart: ``pyiceberg.exceptions``), apart so that every
module of :mod:`parquet_sink.iceberg` raises them; ``parquet_sink.iceberg`` re-exports them."""

from __future__ import annotations

from ..errors import MissingDependencyError, ParquetSinkError
from ..table_formats import TableFormatRefusal


class IcebergSyncError(ParquetSinkError):
    """The Iceberg table cannot be brought in step with ``_spark_metadata``: another Iceberg writer committed to
    it, it mirrors a log batch the log does not hold (an output reset), it belongs to another output, its
    partitioning or a column's type differs from the committed files', or a column has a type Iceberg lacks."""


class IcebergRefusalError(IcebergSyncError, TableFormatRefusal):
    """A batch whose column has a type Iceberg lacks, or a date or timestamp outside 0001-01-01..9999-12-31, to
    an output that keeps an Iceberg table: its writer refuses it before the commit (nothing committed, its files
    deleted: :func:`~parquet_sink.table_formats.refuse_before_commit`). ``column`` names the column (``s.f`` for a
    struct's field)."""


class IcebergDependencyError(MissingDependencyError):
    """The ``pyiceberg`` package is missing or too old for an Iceberg table."""


__all__ = ["IcebergDependencyError", "IcebergRefusalError", "IcebergSyncError"]
