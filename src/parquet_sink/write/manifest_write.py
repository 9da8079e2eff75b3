"""Spark's streaming file sink's own write, from classic PySpark: the counterpart of ``FileStreamSink.addBatch``.

Spark's sink does not write a micro-batch with ``df.write``: it calls ``FileFormatWriter.write`` with a
``ManifestFileCommitProtocol`` (the class ``spark.sql.streaming.commitProtocolClass`` names). Each task writes
its files under their final names, ``part-<split>-<uuid>.c000.<codec>.parquet`` with a uuid of their own (a
retried or speculative attempt never meets another's file); a task commit renames nothing and hands the
driver the statuses of its files, an aborted task deletes them; the job commit adds the statuses of the
accepted attempts to a ``FileStreamSinkLog``. No ``_temporary`` directories, no task or job commit renames,
and the row count comes from the accepted attempts' own write statistics (``BasicWriteJobStatsTracker``), not
from an aggregate added to the job.

:func:`write_with_manifest` runs exactly that in one py4j call (``parquetsink.spark.SinkFileWrite`` of this
package's JAR, :mod:`parquet_sink.write.jvm`), with a ``FileStreamSinkLog`` of its own (the *manifest*): the list of files it returns is that manifest, the accepted attempts' files and nothing else (a dead
attempt's file is not in it). On local disk the output is the batch's hidden staging directory and the manifest
``<staging>/_manifest/0``; :mod:`parquet_sink.write.spark_staging` publishes the files. On an object store the
output is the root itself, written through the session's Hadoop filesystem (S3A, ABFS) as Spark's sink writes
there, and the manifest lives in a directory on the driver's disk (:mod:`parquet_sink.write.spark_in_place`).
Spark Connect has no JVM to call; a session without the JAR, a Spark whose ``FileFormatWriter.write`` has
another signature than the JAR calls, or a ``commitProtocolClass`` that is not a manifest protocol, neither: on local disk both get ``df.write``
(:func:`parquet_sink.write.spark_staging.write_staged`), on a store the Arrow path.

Example::

    >>> written = write_with_manifest(df, storage, "/data/out/_exactly_once/staging/ab12", "ab12", (), {"compression": "snappy"})
    >>> written.rows, [f.path for f in written.files]
    (100, ['part-00000-6f1c....c000.snappy.parquet'])
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ParquetSinkError
from ..log.files import LogFiles
from ..storage.filesystem import Storage
from .jvm import JarClasses, fs_options, jar_classes, java_reason, per_context

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

logger = logging.getLogger(__name__)

MANIFEST_DIR = "_manifest"  # in staging: not a data file (see partitioning.is_data_file)
# The manifest's checkpoint file manager: on FileSystem, not FileContext, whose renames cost a `readlink` process
# each (with the query's own settings the manifest cost 12 processes a batch: its directory, temp file, .crc file,
# renames).
_MANIFEST_FILE_MANAGER = {
    "spark.sql.streaming.checkpointFileManagerClass":
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
}
# The manifest is one batch, 0, read back as `<manifest>/0`: with a compact interval of 1 (a setting of the
# SparkContext's conf, which the manifest's session takes) Spark names batch 0 `0.compact`. Spark's default.
_MANIFEST_LOG = {"spark.sql.streaming.fileSink.log.compactInterval": "10"}
_JVM: dict[object, _Jvm] = {}  # per SparkContext: the JVM objects every batch reuses
COMMIT_PROTOCOL = "spark.sql.streaming.commitProtocolClass"  # the commit protocol of Spark's sink (and this write)
DEFAULT_COMMIT_PROTOCOL = "org.apache.spark.sql.execution.streaming.ManifestFileCommitProtocol"  # Spark's default


@dataclass(frozen=True)
class ManifestFile:
    """One file of an accepted task attempt: its path relative to the job's output directory, and the size and
    modification time (ms) its task commit read from the filesystem."""

    path: str
    size: int
    modification_time: int


@dataclass(frozen=True)
class ManifestWrite:
    """What Spark's job wrote: the rows (its write statistics) and its files, sorted by path."""

    rows: int
    files: list[ManifestFile]


class _Jvm:
    """What every write of one SparkContext reuses: ``SinkFileWrite.write`` (a py4j member: one round trip a call),
    the session the manifest is written with, and Java copies of the partition columns and options a sink passes
    every batch (py4j copies a Python list or dict one element a round trip)."""

    def __init__(self, context: Any, jar: JarClasses) -> None:
        from py4j.java_collections import ListConverter, MapConverter

        self._converters = ListConverter(), MapConverter()
        self.jar = jar  # the local filesystem it writes with, SinkFileWrite, BatchRowsExec
        self.write = jar.sink_write.write
        self._client = context._gateway._gateway_client
        self._copies: dict[tuple[str, Any], Any] = {}
        self._log_session: Any = None

    def log_session(self, session: Any) -> Any:
        """A session of the SparkContext whose Hadoop configuration writes the manifest cheaply
        (:func:`parquet_sink.write.jvm.local_fs_options` and :data:`_MANIFEST_FILE_MANAGER`) and names its batch 0
        ``0`` (:data:`_MANIFEST_LOG`), made once from ``session``: the manifest log
        reads nothing else of it."""
        if self._log_session is None:
            log_session = session.newSession()
            for name, value in {**fs_options(self.jar.local_fs), **_MANIFEST_FILE_MANAGER, **_MANIFEST_LOG}.items():
                log_session.conf().set(name, value)
            self._log_session = log_session
        return self._log_session

    def java_list(self, items: tuple[str, ...]) -> Any:
        """A ``java.util.List`` of ``items`` (made once per distinct ``items``)."""
        key = ("list", items)
        if key not in self._copies:
            self._copies[key] = self._converters[0].convert(list(items), self._client)
        return self._copies[key]

    def java_map(self, items: dict[str, str]) -> Any:
        """A ``java.util.Map`` of ``items`` (made once per distinct ``items``)."""
        key = ("map", tuple(sorted(items.items())))
        if key not in self._copies:
            self._copies[key] = self._converters[1].convert(dict(items), self._client)
        return self._copies[key]


def _jvm_of(df: DataFrame) -> _Jvm | None:
    """The reusable JVM objects of ``df``'s SparkContext; None on Spark Connect, or where this package's
    ``SinkFileWrite`` did not load or is not usable with this Spark (:func:`parquet_sink.write.jvm.jar_classes`)."""
    jar = jar_classes(df)
    if jar is None or jar.sink_write is None:
        return None
    context = df.sparkSession.sparkContext
    return per_context(_JVM, context, lambda: _Jvm(context, jar))


def write_with_manifest(
    df: DataFrame,
    storage: Storage,
    output: str,
    job_id: str,
    partition_by: tuple[str, ...],
    options: dict[str, str],
    manifest: str | None = None,
) -> ManifestWrite | None:
    """Write ``df`` as Spark's file sink writes a micro-batch, under ``output`` (a directory of ``storage``), with
    the Parquet writer ``options`` (also copied into the job's Hadoop configuration, as ``df.write`` does); None
    (nothing written) where this path is not available (see the module docstring): the caller writes otherwise.
    One py4j call (``parquetsink.spark.SinkFileWrite.write``). ``manifest``: an empty directory on the driver's
    local disk for the manifest; by default ``<output>/_manifest`` on ``storage`` (``output`` must not exist then)."""
    java = _jvm_of(df)
    if java is None:
        return None
    if manifest is None:
        manifest_storage, manifest = storage, storage.join(output, MANIFEST_DIR)
    else:
        manifest_storage = Storage(manifest)
    rows = java.write(
        df._jdf, java.log_session(df.sparkSession._jsparkSession), storage.to_hadoop_path(output),
        manifest_storage.to_hadoop_path(manifest), job_id, java.java_list(partition_by), java.java_map(options),
        java.jar.batch_rows is not None,
    )
    if rows < 0:
        logger.info("spark.sql.streaming.commitProtocolClass is not a manifest protocol: Spark's sink write is not used")
        return None
    return ManifestWrite(rows, _manifest_files(storage, output, manifest_storage, manifest_storage.join(manifest, "0")))


def hadoop_write_problem(df: DataFrame, storage: Storage, probe: str) -> str | None:
    """None when Spark's writer can write into ``storage`` in place from ``df``'s session: classic PySpark with
    this package's ``SinkFileWrite``, a manifest commit protocol, and a Hadoop filesystem for the store's URL that
    sees ``probe`` (a file just written through ``storage``: the same store, reachable with the session's own
    credentials); else why not, in a few words."""
    java = _jvm_of(df)
    if java is None:
        return "this session has no JVM to call (Spark Connect), or this package's JAR is not usable with its Spark"
    session = df.sparkSession._jsparkSession
    if not java.jar.sink_write.writesManifest(session):
        return "spark.sql.streaming.commitProtocolClass is not a ManifestFileCommitProtocol"
    target = storage.to_hadoop_path(probe)
    try:
        path = df.sparkSession.sparkContext._jvm.org.apache.hadoop.fs.Path(target)
        if path.getFileSystem(session.sessionState().newHadoopConf()).exists(path):
            return None
        return f"the session's Hadoop filesystem does not see {target} (another endpoint or account?)"
    except Exception as exc:  # py4j's Py4JJavaError: no filesystem class for the scheme, no credentials, ...
        return f"the session's Hadoop filesystem cannot read {target} ({java_reason(exc)})"


def unloadable_commit_protocol(df: DataFrame, exc: Exception) -> str | None:
    """The class name the session of ``df`` sets :data:`COMMIT_PROTOCOL` to when ``exc``, a failed write, is Spark
    not finding that class (as Spark's own sink fails: ``FileCommitProtocol.instantiate``), else None. Asked only
    once a write failed.

    Example: ``unloadable_commit_protocol(df, exc)`` -> ``'com.example.Missing'``.
    """
    if "ClassNotFoundException" not in str(exc):
        return None
    try:
        name = df.sparkSession.conf.get(COMMIT_PROTOCOL, None)
    except Exception:  # noqa: BLE001 - a session gone: the original error stands
        return None
    return name if name and f"ClassNotFoundException: {name}" in str(exc) else None


def _manifest_files(storage: Storage, output: str, manifest_storage: Storage, manifest: str) -> list[ManifestFile]:
    """The files a manifest (Spark's sink log format, read as the log reads its files) lists, relative to
    ``output``."""
    prefix = output.rstrip("/") + "/"
    entries = [(storage.from_uri(e.path), e) for e in LogFiles(manifest_storage).iter_entries(manifest, 0)]
    outside = [path for path, _ in entries if not path.startswith(prefix)]
    if outside:  # a commit protocol writing elsewhere: nothing here would find those files again
        raise ParquetSinkError(
            f"Spark's job wrote {outside[0]} outside its output directory {storage.display(output)} (its "
            "spark.sql.streaming.commitProtocolClass writes elsewhere): nothing was published or committed. Use "
            "Spark's ManifestFileCommitProtocol, or writer='arrow'."
        )
    files = [ManifestFile(path[len(prefix) :], e.size, e.modification_time) for path, e in entries]
    return sorted(files, key=lambda f: f.path)
