"""How every part of the package opens committed Parquet data files: as Spark reads them.

Spark's writer stores timestamps as INT96 unless told otherwise (``spark.sql.parquet.outputTimestampType``), and
so do the files of the sink's Spark writer path and of Spark's own file sink. pyarrow reads an INT96 as
nanoseconds unless told otherwise, which wraps silently outside 1677-09-21 .. 2262-04-11: a Spark timestamp of
year 1000 read as 2169-02-08, and an optimize writing that back would make the wrong value permanent. Spark's
timestamps have microsecond precision (``ParquetRowConverter`` reads an INT96 into microseconds), so reading INT96
as microseconds loses nothing and holds every instant of years 1..9999. Every reader, footer schema, statistic and
rewrite here opens data files through this module.

Example::

    >>> open_parquet("part-0.parquet").read().schema.field("ts").type  # an INT96 column
    TimestampType(timestamp[us])
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs
import pyarrow.parquet as pq

INT96_UNIT = "us"  # Spark's timestamp precision


def open_parquet(source: Any, filesystem: pyarrow.fs.FileSystem | None = None, **options: Any) -> pq.ParquetFile:
    """``pq.ParquetFile(source, ...)`` reading INT96 timestamps as Spark does (close it, or use it in a ``with``)."""
    return pq.ParquetFile(source, filesystem=filesystem, coerce_int96_timestamp_unit=INT96_UNIT, **options)


def read_schema(source: Any, filesystem: pyarrow.fs.FileSystem | None = None) -> pa.Schema:
    """The Arrow schema of a data file's footer, its INT96 columns as microsecond timestamps."""
    with open_parquet(source, filesystem) as parquet:
        return parquet.schema_arrow


def parquet_format() -> ds.ParquetFileFormat:
    """The dataset format of committed data files (INT96 timestamps read as Spark does)."""
    return ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(coerce_int96_timestamp_unit=INT96_UNIT))


__all__ = ["INT96_UNIT", "open_parquet", "parquet_format", "read_schema"]
