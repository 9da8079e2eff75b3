"""Checks that the packages the sink needs at run time are installed, before anything runs on a cluster.

``ParquetSink`` writes through ``DataFrame.mapInArrow``, which needs pyspark and, inside Spark's Python
workers, pandas and pyarrow at versions pyspark accepts. Without them the first batch would fail deep
inside a Spark job; this module turns that into one clear error when the sink is built.

Example::

    >>> require_sink_dependencies()   # raises MissingDependencyError naming the package and the fix
"""

from __future__ import annotations

from ..errors import MissingDependencyError
from .spark_versions import require_supported_pyspark

_INSTALL_HINT = 'pip install "parquet-sink[spark]"'


def require_sink_dependencies() -> None:
    """Raise :class:`MissingDependencyError` unless pyspark, and pandas and pyarrow at versions pyspark
    accepts, are importable here (Spark's Python workers use the same environment on a local cluster).

    Example::

        >>> require_sink_dependencies()  # nothing happens when `parquet-sink[spark]` is installed
    """
    try:
        from pyspark.sql.pandas.utils import require_minimum_pandas_version, require_minimum_pyarrow_version
    except ImportError as exc:
        raise MissingDependencyError(f"ParquetSink needs pyspark ({exc}): {_INSTALL_HINT}") from exc
    require_supported_pyspark()
    for require in (require_minimum_pandas_version, require_minimum_pyarrow_version):
        try:
            require()
        except ImportError as exc:  # pyspark's PySparkImportError: names the package and its minimum version
            raise MissingDependencyError(
                f"ParquetSink writes through Spark's mapInArrow, which needs pandas and pyarrow ({exc}). Install "
                f"them with {_INSTALL_HINT} (on a cluster, in the executors' Python too)."
            ) from exc
