"""This package's classes in Spark's JVM (``parquet-sink-jvm.jar``, built from ``jvm/src`` by ``jvm/build.sh``):
loaded once per SparkContext, used by both writer paths where they load, and never required (Spark Connect, a
driver whose class loader takes no JAR, or a Spark they are not built for: the writes run as without them).

- ``parquetsink.hadoop.NioLocalFileSystem``: Hadoop's raw local filesystem setting permissions through java.nio.
  Without Hadoop's native library (the pyspark wheel) the raw filesystem gives every file or directory it creates
  its permission with a `chmod` process (~7 ms here), Spark's writer creates every data file and partition
  directory so. The Spark writer path stages with it (:func:`local_fs_options`).
- ``parquetsink.spark.BatchRowsExec``: ``foreachBatch`` hands its function the batch as a scan of the streaming
  plan's rows (``LogicalRDD`` -> ``RDDScanExec``), which copies every row (~5% of a 1M-row batch here); Spark's
  file sink writes the streaming plan's rows as they are. The node gives Spark's writer
  (:mod:`parquet_sink.write.manifest_write`) and the Arrow path's ``mapInArrow`` (:func:`without_row_copy`) the same
  rows without the copy, where this Spark is the one it is built for (``usable()``).
- ``parquetsink.spark.SinkFileWrite``: Spark's file sink's write of a micro-batch (``FileFormatWriter.write`` with
  its manifest commit protocol and write statistics) in one py4j call, where a call per Spark object took ~28 round
  trips (:mod:`parquet_sink.write.manifest_write`); where it is not usable a batch is written with ``df.write``.

No Spark counterpart: Spark's sink runs inside the JVM and needs neither.

Example::

    >>> local_fs_options(df)
    {'fs.file.impl': 'parquetsink.hadoop.NioLocalFileSystem', 'fs.file.impl.disable.cache': 'true'}
    >>> without_row_copy(batch_df.mapInArrow(encode, schema))  # the same rows, planned without the scan's copy
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

logger = logging.getLogger(__name__)
_V = TypeVar("_V")

# Hadoop's checksummed local filesystem writes a hidden .crc file next to every file; the raw filesystem writes the
# same files without them (an uncached instance: the cached one is the checksummed filesystem). Both writer calls of
# the Spark path stage with it (:mod:`parquet_sink.write.spark_staging`), and the manifest is written with it.
RAW_LOCAL_FS = "org.apache.hadoop.fs.RawLocalFileSystem"
NIO_LOCAL_FS = "parquetsink.hadoop.NioLocalFileSystem"
_BATCH_ROWS = "parquetsink.spark.BatchRowsExec"
_SINK_WRITE = "parquetsink.spark.SinkFileWrite"
JAR = Path(__file__).with_name("parquet-sink-jvm.jar")
_LOADED: dict[object, JarClasses] = {}  # per SparkContext


@dataclass
class JarClasses:
    """What one SparkContext has of this package's classes: the Hadoop filesystem class the Spark path writes local
    disk with (:data:`NIO_LOCAL_FS` where the JAR loaded, else :data:`RAW_LOCAL_FS`), and the classes
    ``BatchRowsExec`` and ``SinkFileWrite`` (None: not loaded, or not usable with this Spark)."""

    local_fs: str
    batch_rows: Any
    sink_write: Any


def jar_classes(df: DataFrame) -> JarClasses | None:
    """This package's classes in the JVM of ``df``'s SparkContext (the JAR loaded at the first call for it); None on
    Spark Connect (no JVM to call)."""
    if type(df).__module__.startswith("pyspark.sql.connect.") or not hasattr(df, "_jdf"):
        return None
    context = df.sparkSession.sparkContext

    def load() -> JarClasses:
        loaded = _load_jar(context)
        return JarClasses(
            NIO_LOCAL_FS if loaded else RAW_LOCAL_FS,
            _usable(context._jvm, _BATCH_ROWS, "Spark's writer gets foreachBatch's copy of each row") if loaded else None,
            _usable(context._jvm, _SINK_WRITE, "batches are written with df.write") if loaded else None,
        )

    return per_context(_LOADED, context, load)


def per_context(cache: MutableMapping[Any, _V], context: Any, make: Callable[[], _V]) -> _V:
    """``cache``'s value for the SparkContext ``context`` (or another key: Spark Connect's), made by ``make`` at the
    key's first use. Adding an entry drops those of stopped contexts (PySpark's ``stop()`` sets ``_jsc`` to None):
    a process that stops a context and starts another would otherwise keep the old one's JVM objects alive for
    ever, in Python and, through py4j's references, in the JVM. The one rule of every per-SparkContext cache.

    Example: ``per_context(_LOADED, spark.sparkContext, load)`` -> the ``JarClasses`` loaded once for it.
    """
    if context not in cache:
        for stopped in [key for key in cache if getattr(key, "_jsc", True) is None]:
            del cache[stopped]
        cache[context] = make()
    return cache[context]


def local_fs_options(df: DataFrame) -> dict[str, str]:
    """The Hadoop options the Spark path writes local disk with from ``df``'s session: the raw local filesystem
    (no ``.crc`` files), permissions set without a `chmod` process where the session loaded this package's JAR."""
    jar = jar_classes(df)
    return fs_options(jar.local_fs if jar is not None else RAW_LOCAL_FS)


def fs_options(local_fs: str) -> dict[str, str]:
    """The Hadoop options that make ``local_fs`` the filesystem of ``file:`` paths (an uncached instance)."""
    return {"fs.file.impl": local_fs, "fs.file.impl.disable.cache": "true"}


def without_row_copy(df: DataFrame) -> DataFrame:
    """``df``, one node over a ``foreachBatch`` batch (the Arrow writer path's ``mapInArrow``), computed without the
    copy of every row that the batch's scan makes (``BatchRowsExec``); ``df`` itself where that node is not
    usable (Spark Connect, no JAR, another Spark) or ``df`` is not such a plan. Planned here, so plan and run it
    under the same session settings."""
    jar = jar_classes(df)
    if jar is None or jar.batch_rows is None:
        return df
    from pyspark.sql import DataFrame

    jdf = jar.batch_rows.withoutRowCopy(df._jdf)
    return df if jdf.equals(df._jdf) else DataFrame(jdf, df.sparkSession)


def java_reason(exc: Exception) -> str:
    """The first line of a py4j error's Java exception (or of ``exc``), for a log line."""
    java_exception = getattr(exc, "java_exception", None)
    text = java_exception.toString() if java_exception is not None else f"{type(exc).__name__}: {exc}"
    return text.strip().splitlines()[0][:300]


def _load_jar(context: Any) -> bool:
    """Whether this package's JAR is on the classpath of ``context``'s driver (added to the class loader its Hadoop
    configurations load filesystems with: Spark's own, which ``spark.jars`` fills) and shipped to its executors
    (``SparkContext.addJar``: an executor fetches it before its next task); if not (a driver whose class loader
    takes no JAR, a JAR missing from the install), the reason is logged and the writes run as without it."""
    jvm = context._jvm
    try:
        loader = context._jsc.hadoopConfiguration().getClassLoader()
        loader.addURL(jvm.java.io.File(str(JAR)).toURI().toURL())
        jvm.java.lang.Class.forName(NIO_LOCAL_FS, False, loader)
        context._jsc.sc().addJar(str(JAR))
    except Exception as exc:  # py4j's errors: no addURL on this loader, no JAR, no class
        logger.info(
            "%s is not loadable in this session (%s): Hadoop's raw local filesystem sets permissions with a chmod "
            "process, and batches are written with df.write", JAR.name, java_reason(exc),
        )
        return False
    return True


def _usable(jvm: Any, name: str, consequence: str) -> Any:
    """The class ``name`` of the JAR if this Spark has everything it needs (its ``usable()``), else None (logged with
    ``consequence``)."""
    try:
        # Loaded and linked first through a reflective call, where py4j reports a Java error as a Py4JJavaError: a
        # class naming a type this Spark lacks (Spark 3.5 has no org.apache.spark.sql.classic) fails to link with a
        # NoClassDefFoundError, which py4j's own class lookup (getattr below) lets kill the calling stream instead.
        jvm.java.lang.Class.forName(name, True, jvm.java.lang.Thread.currentThread().getContextClassLoader())
        found = getattr(jvm, name)  # py4j loads it as the thread's class loader does (Spark's)
        if found.usable():  # links it first: a Spark without a class it names fails here
            return found
        reason = "this Spark lacks a member it calls or implements"
    except Exception as exc:  # py4j's errors: a class it names is missing from this Spark
        reason = java_reason(exc)
    logger.info("%s is not usable with this Spark (%s): %s", name, reason, consequence)
    return None
