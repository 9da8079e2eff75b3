"""Spark helpers shared by the tests, the demo and the crash-test child processes."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyspark

from pyspark.sql import DataFrame, SparkSession

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def make_session(master: str = "local[2]", app: str = "parquet-sink-tests", **conf: str) -> SparkSession:
    """A small local session: no UI, few shuffle partitions, quiet logs (and the run's class archive once it
    exists: ``tests/helpers/jvm_archive.py``)."""
    from tests.helpers.jvm_archive import driver_java_options

    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    )
    conf = dict(conf)
    java_options = driver_java_options(conf.pop("spark.driver.extraJavaOptions", ""))
    if java_options:
        builder = builder.config("spark.driver.extraJavaOptions", java_options)
    if master.startswith("local-cluster") and "spark.executor.extraJavaOptions" not in conf:
        executor_options = driver_java_options()  # executors: JVMs of their own, on the same jars
        if executor_options:
            builder = builder.config("spark.executor.extraJavaOptions", executor_options)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def run_available_now(stream: DataFrame, checkpoint: str, sink: Callable | None = None, **writer_options: str):
    """Run a streaming query until its source is drained (trigger availableNow), foreachBatch(sink) or
    Spark's own parquet sink when ``sink`` is None and ``writer_options`` has ``path``."""
    writer = stream.writeStream.option("checkpointLocation", checkpoint).trigger(availableNow=True)
    mode = writer_options.pop("outputMode", None)
    if mode:
        writer = writer.outputMode(mode)
    if sink is not None:
        writer = writer.foreachBatch(sink)
    else:
        partition_by = writer_options.pop("partitionBy", None)
        writer = writer.format("parquet")
        if partition_by:
            writer = writer.partitionBy(*partition_by)
        for key, value in writer_options.items():
            writer = writer.option(key, value)
    query = writer.start()
    query.awaitTermination()
    return query


def write_input_files(directory: str, batches: list[list[dict]]) -> None:
    """One JSON-lines file per future micro-batch, with increasing mtimes so the file source (and
    ``maxFilesPerTrigger=1``) takes them in order."""
    import json
    import time

    os.makedirs(directory, exist_ok=True)
    start = time.time() - 1000
    for i, rows in enumerate(batches):
        path = os.path.join(directory, f"{i:04d}.json")
        with open(path, "w") as fh:
            fh.write("\n".join(json.dumps(r) for r in rows))
        os.utime(path, (start + i, start + i))


def spark_home_for_local_cluster(tmp_path: Path) -> Path:
    """A ``SPARK_HOME`` for a ``local-cluster[...]`` driver: pyspark's own files, linked into a directory of
    the test's, since executors of ``local-cluster`` work (and would write a relative path) in
    ``$SPARK_HOME/work``, which must not be the installed package."""
    home = tmp_path / "spark-home"
    home.mkdir()
    for entry in Path(pyspark.__file__).parent.iterdir():
        (home / entry.name).symlink_to(entry)
    return home


def to_arrow(df: DataFrame) -> "pyarrow.Table":  # noqa: F821
    """``df.toArrow()`` (PySpark 4.0 on), or on PySpark 3.5 the same table from its Arrow collect."""
    if hasattr(df, "toArrow"):
        return df.toArrow()
    import pyarrow as pa

    batches = df._collect_as_arrow()
    return pa.Table.from_batches(batches) if batches else pa.Table.from_pylist([], schema=to_arrow_schema(df))


def to_arrow_schema(df: DataFrame) -> "pyarrow.Schema":  # noqa: F821
    """``df``'s Arrow schema as PySpark gives it (timestamps in UTC)."""
    from parquet_sink.write.spark_versions import arrow_schema

    return arrow_schema(df.schema)


def spark_sink_batch(spark: Any, frame: DataFrame, path: str, batch: int, partition_by: Sequence[str] = ()) -> None:
    """Spark's own file sink commits ``frame`` as batch ``batch`` of the output at ``path``, as its streaming query
    calls it (``FileStreamSink.addBatch``: the session's log settings apply; a batch it already committed is skipped).
    ``FileStreamSink`` moved to ``...execution.streaming.sinks`` in Spark 4.1."""
    jvm = spark._jvm
    for name in ("org.apache.spark.sql.execution.streaming.sinks", "org.apache.spark.sql.execution.streaming"):
        try:
            jvm.java.lang.Class.forName(f"{name}.FileStreamSink")
        except Exception:  # py4j's error for a class this Spark does not have
            continue
        package = jvm
        for part in name.split("."):
            package = getattr(package, part)
        break
    else:
        raise AssertionError("no FileStreamSink class in this Spark")
    utils = jvm.org.apache.spark.api.python.PythonUtils
    columns = jvm.java.util.ArrayList()
    for column in partition_by:
        columns.add(column)
    parquet = jvm.org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat()
    sink = package.FileStreamSink(spark._jsparkSession, path, parquet, utils.toSeq(columns),
                                  utils.toScalaMap(jvm.java.util.HashMap()))
    sink.addBatch(batch, frame._jdf)
