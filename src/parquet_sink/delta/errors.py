"""The Delta log's typed error (Delta's own counterpart: ``DeltaErrors``), apart so that :mod:`.actions` and
:mod:`.sync` both raise it; ``parquet_sink.delta`` and ``parquet_sink.delta.sync`` re-export it."""

from __future__ import annotations

from ..errors import ParquetSinkError
from ..table_formats import TableFormatRefusal


class DeltaLogError(ParquetSinkError):
    """The Delta log cannot be brought in step with ``_spark_metadata``: it is ahead of it, another Delta writer
    committed to it, its files diverged from the log's, its partition columns, their types or its session time
    zone differ, a column has a type or a value Delta cannot hold, or concurrent commits kept winning."""


class DeltaRangeError(DeltaLogError, TableFormatRefusal):
    """A date or timestamp outside 0001-01-01..9999-12-31, which no Delta log can hold: a sync refuses the file
    that holds it, and a writer of an output that keeps a Delta log refuses the batch before its commit (nothing
    committed, its files deleted: :func:`~parquet_sink.table_formats.refuse_before_commit`). ``column`` names the
    column (``s.f`` for a struct's field)."""


__all__ = ["DeltaLogError", "DeltaRangeError"]
