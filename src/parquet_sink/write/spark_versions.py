"""What differs between the PySpark versions the sink supports (3.5 and 4.0 on; ``SUPPORTED``), in one place.

- PySpark's Arrow type of a Spark type (``pyspark.sql.pandas.types.to_arrow_type`` / ``to_arrow_schema``): 3.5
  takes the type alone and gives every ``TimestampType`` as ``timestamp[us, UTC]``; 4.0 and 4.1 take
  ``timestamp_utc=True``; 4.2 on ``timezone="UTC"`` (keyword-only) and no longer ``timestamp_utc``. The sink asks
  for UTC, which every one of them can give: :func:`arrow_schema`, :func:`arrow_type`.
- PySpark's own refusal of a type that has no Arrow type (``PySparkTypeError``, a ``TypeError``): the user's
  column, where any other error of the conversion is this package's (:func:`type_refusals`).
- The oldest PySpark the sink runs on: :func:`require_supported_pyspark`, when a sink is built.

The JAR's classes (:mod:`parquet_sink.write.jvm`) check the Spark they run in themselves (``usable()``); where they
are not usable, batches are written with ``df.write``, as without them.

Spark's counterpart: none (Spark's sink runs inside the Spark it belongs to).

Example::

    >>> arrow_schema(StructType([StructField("t", TimestampType())]))
    t: timestamp[us, tz=UTC]
"""

from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, Any

from ..errors import MissingDependencyError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import DataType, StructType

SUPPORTED = "3.5 and 4.0-4.3"  # the lines CI runs (.ci/run: the whole suite on the newest, a subset on the others)
_OLDEST = (3, 5)


def arrow_schema(schema: StructType) -> pa.Schema:
    """PySpark's Arrow schema of ``schema``, its ``TimestampType`` columns as ``timestamp[us, UTC]``, on every
    supported PySpark."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, **_utc(to_arrow_schema))


def arrow_type(data_type: DataType) -> pa.DataType:
    """PySpark's Arrow type of ``data_type`` (``TimestampType`` as ``timestamp[us, UTC]``), on every supported
    PySpark; raises one of :func:`type_refusals` for a type that has none (``CalendarIntervalType``)."""
    from pyspark.sql.pandas.types import to_arrow_type

    return to_arrow_type(data_type, **_utc(to_arrow_type))


def type_refusals() -> tuple[type[BaseException], ...]:
    """The errors by which PySpark refuses a Spark type: one with no Arrow type (``PySparkTypeError``), or one
    PySpark 3.5 cannot read into Python at all (``PySparkValueError``, ``CANNOT_PARSE_DATATYPE``: a calendar
    interval). A user's column; a plain ``TypeError`` (a changed signature, say) is not one of them."""
    from pyspark.errors import PySparkTypeError, PySparkValueError

    return (PySparkTypeError, PySparkValueError)


def parse_refusals() -> tuple[type[BaseException], ...]:
    """The errors by which PySpark refuses to read a Spark type into Python: :func:`type_refusals`, and PySpark
    3.5.0's ``AssertionError`` (it fails its own check of the ``CANNOT_PARSE_DATATYPE`` message's parameters while
    raising that error; 3.5.9 raises the error). Asked only once the batch's schema already failed to convert."""
    return (*type_refusals(), AssertionError)


def unparsable_columns(df: Any) -> dict[str, str]:
    """The columns of the classic DataFrame ``df`` whose Spark type PySpark cannot read into Python (PySpark 3.5 has
    no ``CalendarIntervalType``), with their Spark types, read from the JVM; {} where there is no JVM to ask."""
    from pyspark.sql.types import _parse_datatype_json_string

    jdf = getattr(df, "_jdf", None)
    if jdf is None:
        return {}
    unparsable = {}
    for field in jdf.schema().fields():
        try:
            _parse_datatype_json_string(field.dataType().json())
        except parse_refusals():
            unparsable[field.name()] = field.dataType().simpleString()
    return unparsable


@functools.cache
def _utc(convert: Any) -> dict[str, Any]:
    """The keyword arguments that make ``convert`` (``to_arrow_schema`` or ``to_arrow_type``) give timestamps in
    UTC: ``timezone="UTC"`` (4.2 on), ``timestamp_utc=True`` (4.0, 4.1), none (3.5, UTC always)."""
    parameters = inspect.signature(convert).parameters
    if "timezone" in parameters:
        return {"timezone": "UTC"}
    if "timestamp_utc" in parameters:
        return {"timestamp_utc": True}
    return {}


def pyspark_version() -> tuple[int, int]:
    """The installed PySpark's (major, minor)."""
    import pyspark

    major, minor = pyspark.__version__.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def require_supported_pyspark() -> None:
    """Raise :class:`MissingDependencyError` when the installed PySpark is older than the oldest the sink supports
    (its Arrow conversions and streaming API differ), naming the versions that are."""
    import pyspark

    if pyspark_version() < _OLDEST:
        raise MissingDependencyError(
            f"ParquetSink supports PySpark {SUPPORTED}; this is PySpark {pyspark.__version__}. Upgrade it "
            '(pip install "parquet-sink[spark]", or "parquet-sink[spark35]" for Spark 3.5 clusters).'
        )
