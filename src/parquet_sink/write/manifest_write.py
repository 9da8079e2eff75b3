"""Spark's streaming file sink's own write, from classic PySpark: the counterpart of ``FileStreamSink.addBatch``.

Spark's sink does not write a micro-batch with ``df.write``: it calls ``FileFormatWriter.write`` with a
``ManifestFileCommitProtocol`` (the class ``spark.sql.streaming.commitProtocolClass`` names). Each task writes
its files under their final names, ``part-<split>-<uuid>.c000.<codec>.parquet`` with a uuid of their own (a
retried or speculative attempt never meets another's file); a task commit renames nothing and hands the
driver the statuses of its files, an aborted task deletes them; the job commit adds the statuses of the
accepted attempts to a ``FileStreamSinkLog``. No ``_temporary`` directories, no task or job commit renames,
and the row count comes from the accepted attempts' own write statistics (``BasicWriteJobStatsTracker``), not
from an aggregate added to the job.

:func:`write_with_manifest` runs exactly that through py4j, with a ``FileStreamSinkLog`` of its own (the
*manifest*): the list of files it returns is that manifest, the accepted attempts' files and nothing else (a dead
attempt's file is not in it). On local disk the output is the batch's hidden staging directory and the manifest
``<staging>/_manifest/0``; :mod:`parquet_sink.write.spark_staging` publishes the files. On an object store the
output is the root itself, written through the session's Hadoop filesystem (S3A, ABFS) as Spark's sink writes
there, and the manifest lives in a directory on the driver's disk (:mod:`parquet_sink.write.spark_in_place`).
Spark Connect has no JVM to call; a Spark whose ``FileFormatWriter.write`` has another signature, or a
``commitProtocolClass`` that is not a manifest protocol, neither: on local disk both get ``df.write``
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
from .jvm import JarClasses, fs_options, jar_classes, java_reason

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

logger = logging.getLogger(__name__)

MANIFEST_DIR = "_manifest"  # in staging: not a data file (see partitioning.is_data_file)
_MANIFEST_PROTOCOL = "org.apache.spark.sql.execution.streaming.ManifestFileCommitProtocol"
_WRITER = "org.apache.spark.sql.execution.datasources.FileFormatWriter"
_WRITE_ARITY = 12  # Spark 4.x: ..., options, numStaticPartitionCols, a job-commit hook
# The manifest's checkpoint file manager: on FileSystem, not FileContext, whose renames cost a `readlink` process
# each (with the query's own settings the manifest cost 12 processes a batch: its directory, temp file, .crc file,
# renames; the directory is made from Python).
_MANIFEST_FILE_MANAGER = {
    "spark.sql.streaming.checkpointFileManagerClass":
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
}
_JVM: dict[object, _Jvm | None] = {}  # per SparkContext: the JVM objects every batch reuses, or None


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
    """The JVM classes and values every write reuses: py4j resolves a class name a package at a time (a round
    trip each), so a batch only calls constructors and methods (~25 round trips unpartitioned)."""

    def __init__(self, jvm: Any, jar: JarClasses) -> None:
        self.jar = jar  # the local filesystem it writes with, BatchRowsExec (None: the plan as it is)

        def java_class(name: str) -> Any:
            return getattr(jvm, name)

        self.hash_map, self.array_list = java_class("java.util.HashMap"), java_class("java.util.ArrayList")
        self.converters = java_class("scala.jdk.javaapi.CollectionConverters")
        self.scala_maps = java_class("scala.collection.immutable.Map")
        self.option = java_class("scala.Option")
        self.path = java_class("org.apache.hadoop.fs.Path")
        self.writer = java_class(_WRITER)
        self.output_spec = java_class(_WRITER + "$OutputSpec")
        self.sink_log = java_class("org.apache.spark.sql.execution.streaming.sinks.FileStreamSinkLog")
        self.commit_protocol = java_class("org.apache.spark.internal.io.FileCommitProtocol")
        self.stats_tracker = java_class("org.apache.spark.sql.execution.datasources.BasicWriteJobStatsTracker")
        self.serializable_conf = java_class("org.apache.spark.util.SerializableConfiguration")
        self.manifest = java_class("java.lang.Class").forName(_MANIFEST_PROTOCOL)
        self.defaults = (getattr(self.writer, "write$default$11")(), getattr(self.writer, "write$default$12")())
        self.parquet = java_class("org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat")()
        self.none = self.option.empty()
        self.no_columns = self.scala_list([])
        self._maps: dict[tuple[tuple[str, str], ...], Any] = {}
        self._log_session: Any = None

    def log_session(self, session: Any) -> Any:
        """A session of the SparkContext whose Hadoop configuration writes the manifest cheaply
        (:func:`parquet_sink.write.jvm.local_fs_options` and :data:`_MANIFEST_FILE_MANAGER`), made once from ``session``: the manifest log
        reads nothing else of it."""
        if self._log_session is None:
            log_session = session.newSession()
            for name, value in {**fs_options(self.jar.local_fs), **_MANIFEST_FILE_MANAGER}.items():
                log_session.conf().set(name, value)
            self._log_session = log_session
        return self._log_session

    def scala_map(self, items: dict[str, str]) -> Any:
        """An immutable Scala map of ``items`` (made once per distinct ``items``)."""
        key = tuple(sorted(items.items()))
        if key not in self._maps:
            java = self.hash_map()
            for name, value in key:
                java.put(name, value)
            self._maps[key] = getattr(self.scala_maps, "from")(self.converters.asScala(java))
        return self._maps[key]

    def scala_list(self, items: list[Any]) -> Any:
        if len(items) == 1:
            return self.option.apply(items[0]).toList()
        java = self.array_list()
        for item in items:
            java.add(item)
        return self.converters.asScala(java).toList()


def _jvm_of(df: DataFrame) -> _Jvm | None:
    """The reusable JVM objects of ``df``'s SparkContext; None on Spark Connect or where this Spark's
    ``FileFormatWriter.write`` is not the one this module calls (checked once per SparkContext)."""
    jar = jar_classes(df)
    if jar is None:
        return None
    context = df.sparkSession.sparkContext
    if context not in _JVM:
        jvm = context._jvm
        writes = [m for m in jvm.java.lang.Class.forName(_WRITER).getMethods() if m.getName() == "write"]
        if len(writes) == 1 and writes[0].getParameterCount() == _WRITE_ARITY:
            _JVM[context] = _Jvm(jvm, jar)
        else:
            logger.info("FileFormatWriter.write of this Spark is not the one expected: batches go through df.write")
            _JVM[context] = None
    return _JVM[context]


def write_with_manifest(
    df: DataFrame,
    storage: Storage,
    output: str,
    job_id: str,
    partition_by: tuple[str, ...],
    options: dict[str, str],
    directories: tuple[str, ...] = (),
    manifest: str | None = None,
) -> ManifestWrite | None:
    """Write ``df`` as Spark's file sink writes a micro-batch, under ``output`` (a directory of ``storage``), with
    the Parquet writer ``options`` (also copied into the job's Hadoop configuration, as ``df.write`` does); None
    (nothing written) where this path is not available (see the module docstring): the caller writes otherwise.
    ``directories`` (relative to ``output``) are made first, from Python: without this package's JAR Hadoop's local
    filesystem would make each with a `chmod` process. ``manifest``: an empty directory on the driver's local disk for the manifest; by
    default ``<output>/_manifest`` on ``storage`` (``output`` must not exist then)."""
    java = _jvm_of(df)
    if java is None:
        return None
    jdf = df._jdf
    session = jdf.sparkSession()
    session_state = session.sessionState()
    committer = _committer(java, session_state, job_id, storage.to_hadoop_path(output))
    if committer is None:
        return None
    scala_options = java.scala_map(options)
    hadoop_conf = session_state.newHadoopConfWithOptions(scala_options)
    if manifest is None:
        manifest_storage, manifest = storage, storage.join(output, MANIFEST_DIR)
    else:
        manifest_storage = Storage(manifest)
    manifest_storage.makedirs(manifest)  # with the default manifest, output itself too
    for directory in directories:
        storage.makedirs(storage.join(output, directory))
    manifest_log = java.sink_log(1, java.log_session(session), manifest_storage.to_hadoop_path(manifest), java.none)
    committer.setupManifestOptions(manifest_log, 0)
    execution = jdf.queryExecution()
    plan = execution.analyzed().output()
    columns = list(df.columns)
    partition_columns = java.scala_list([plan.apply(columns.index(c)) for c in partition_by]) if partition_by else java.no_columns
    metrics = java.stats_tracker.metrics()
    tracker = java.stats_tracker(java.serializable_conf(hadoop_conf), metrics)
    spec = java.output_spec(storage.to_hadoop_path(output), java.scala_map({}), plan)
    executed = execution.executedPlan()
    if java.jar.batch_rows is not None:  # the streaming plan's rows as they are, as Spark's sink writes them
        executed = java.jar.batch_rows.unwrap(executed)
    java.writer.write(
        session, executed, java.parquet, committer, spec, hadoop_conf, partition_columns,
        java.none, java.scala_list([tracker]), scala_options, *java.defaults,
    )
    rows = metrics.apply("numOutputRows").value()
    return ManifestWrite(rows, _manifest_files(storage, output, manifest_storage, manifest_storage.join(manifest, "0")))


def hadoop_write_problem(df: DataFrame, storage: Storage, probe: str) -> str | None:
    """None when Spark's writer can write into ``storage`` in place from ``df``'s session: classic PySpark with
    the ``FileFormatWriter`` this module calls, a manifest commit protocol, and a Hadoop filesystem for the store's
    URL that sees ``probe`` (a file just written through ``storage``: the same store, reachable with the session's
    own credentials); else why not, in a few words."""
    java = _jvm_of(df)
    if java is None:
        return "this session has no JVM to call (Spark Connect) or another Spark's FileFormatWriter"
    session_state = df._jdf.sparkSession().sessionState()
    if _committer(java, session_state, "probe", storage.to_hadoop_path(storage.root)) is None:
        return "spark.sql.streaming.commitProtocolClass is not a ManifestFileCommitProtocol"
    target = storage.to_hadoop_path(probe)
    try:
        path = java.path(target)
        if path.getFileSystem(session_state.newHadoopConf()).exists(path):
            return None
        return f"the session's Hadoop filesystem does not see {target} (another endpoint or account?)"
    except Exception as exc:  # py4j's Py4JJavaError: no filesystem class for the scheme, no credentials, ...
        return f"the session's Hadoop filesystem cannot read {target} ({java_reason(exc)})"


def _committer(java: _Jvm, session_state: Any, job_id: str, path: str) -> Any:
    """The commit protocol Spark's sink would use (``spark.sql.streaming.commitProtocolClass``), or None if
    it is not a ``ManifestFileCommitProtocol`` (its commit messages are not the files' statuses)."""
    name = session_state.conf().streamingFileCommitProtocolClass()
    committer = java.commit_protocol.instantiate(name, job_id, path, False)
    if not java.manifest.isInstance(committer):
        logger.info("spark.sql.streaming.commitProtocolClass %s is not a manifest protocol: Spark's sink write is not used", name)
        return None
    return committer


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
