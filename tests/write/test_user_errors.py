"""What a user gets wrong, with a real streaming query: the sink's typed error comes back out of Spark's
StreamingQueryException (await_termination, original_error), a forgotten checkpointLocation is named, the sink
handed to foreach is told apart, so is a streaming DataFrame handed to the sink itself, a partition column typo
gets "did you mean", and executors without this
package get a typed error that says how to ship it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from parquet_sink import ParquetSink, await_termination, history, original_error, read_committed
from parquet_sink.errors import (
    ForeignQueryError,
    ParameterError,
    SchemaMismatchError,
    SinkUsageError,
    TemporaryCheckpointWarning,
)
from tests.helpers.spark_util import write_input_files

SCHEMA = "id long, day string"
ROOT = Path(__file__).resolve().parents[2]


def _input(tmp_path: Path, name: str, batches: int = 2, per: int = 5, offset: int = 0) -> str:
    src = str(tmp_path / name)
    rows = [[{"id": offset + b * per + i, "day": f"2026-11-{(b % 2) + 1:02d}"} for i in range(per)] for b in range(batches)]
    write_input_files(src, rows)
    return src


def _start(spark, src: str, sink, checkpoint: str | None = None, foreach: bool = False):
    writer = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(src).writeStream
    if checkpoint is not None:
        writer = writer.option("checkpointLocation", checkpoint)
    writer = writer.foreach(sink) if foreach else writer.foreachBatch(sink)
    return writer.trigger(availableNow=True).start()


def test_typed_error_comes_back_from_the_failed_query(spark, tmp_path):
    out = str(tmp_path / "out")
    first = _start(spark, _input(tmp_path, "in1"), ParquetSink(out), str(tmp_path / "ckpt1"))
    assert await_termination(first) is None and await_termination(first, timeout=0.5) is True
    for wrong in (0, -1, "5", True):
        with pytest.raises(ParameterError, match="timeout is a number of seconds > 0"):
            await_termination(first, timeout=wrong)
    sink = ParquetSink(out)
    second = _start(spark, _input(tmp_path, "in2", offset=100), sink, str(tmp_path / "ckpt2"))
    with pytest.raises(ForeignQueryError) as caught:
        await_termination(second)
    assert first.id in str(caught.value) and "on_foreign_query='append'" in str(caught.value)
    assert "StreamingQueryException" in type(caught.value.__cause__).__name__
    again = original_error(second.exception())  # the same from query.exception()
    assert type(again) is ForeignQueryError and str(again) == str(caught.value)
    assert sorted(read_committed(out).column("id").to_pylist()) == list(range(10))
    assert original_error(RuntimeError("not ours")) is None


def test_forgotten_checkpoint_location_is_named(spark, tmp_path):
    out = str(tmp_path / "out")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        await_termination(_start(spark, _input(tmp_path, "in1"), ParquetSink(out)))
    temporary = [w for w in caught if issubclass(w.category, TemporaryCheckpointWarning)]
    assert len(temporary) == 1 and "has no checkpointLocation" in str(temporary[0].message)
    assert "/temporary-" in str(temporary[0].message)
    with pytest.raises(ForeignQueryError, match="The cause: this query has no checkpointLocation"):
        with pytest.warns(TemporaryCheckpointWarning):  # a new query again: warned, then refused
            await_termination(_start(spark, _input(tmp_path, "in2", offset=100), ParquetSink(out)))
    assert sorted(read_committed(out).column("id").to_pylist()) == list(range(10))
    with warnings.catch_warnings(record=True) as caught:  # with a checkpoint: no warning
        warnings.simplefilter("always")
        await_termination(_start(spark, _input(tmp_path, "in3"), ParquetSink(str(tmp_path / "o2")), str(tmp_path / "c3")))
    assert not [w for w in caught if issubclass(w.category, TemporaryCheckpointWarning)]


def test_misuse_gets_a_typed_error_that_says_what_to_do(spark, tmp_path):
    out = str(tmp_path / "out")
    with pytest.raises(SinkUsageError, match=r"Use df.writeStream.foreachBatch\(sink\), not .foreach\(sink\)"):
        await_termination(_start(spark, _input(tmp_path, "in"), ParquetSink(out), str(tmp_path / "c1"), foreach=True))
    with pytest.raises(SinkUsageError, match=r"writeStream.format\?.*foreachBatch\(sink\)"):
        spark.readStream.schema(SCHEMA).json(_input(tmp_path, "in")).writeStream.format(ParquetSink(out))
    with pytest.raises(SchemaMismatchError, match=r"\['dya'\] are not in .* Did you mean 'day' for 'dya'\?"):
        await_termination(_start(spark, _input(tmp_path, "in"), ParquetSink(out, partition_by=["dya"]), str(tmp_path / "c2")))
    assert not os.path.exists(os.path.join(out, "_spark_metadata", "0"))
    # a streaming DataFrame handed to the sink itself (not a micro-batch): Spark's AnalysisException before
    with pytest.raises(SinkUsageError, match=r"batch 0: was given a streaming DataFrame.*foreachBatch\(sink\)"):
        ParquetSink(out)(spark.readStream.schema(SCHEMA).json(_input(tmp_path, "in")), 0)
    assert not os.path.exists(os.path.join(out, "_spark_metadata", "0"))
    sink = ParquetSink(out, partition_by=["day"])
    await_termination(_start(spark, _input(tmp_path, "in"), sink, str(tmp_path / "c3")))
    assert sorted(read_committed(out).column("id").to_pylist()) == list(range(10))
    # recent progress: one entry per batch with its time, and the history the log keeps agrees
    assert [(p.batch_id, p.rows) for p in sink.recent_progress] == [(0, 5), (1, 5)]
    assert sink.recent_progress[0].timestamp <= sink.recent_progress[1].timestamp
    logged = history(out).to_pylist()[::-1]
    assert [(h["query_batch_id"], h["rows"], h["files"]) for h in logged] == [(0, 5, 1), (1, 5, 1)]
    assert all(p.timestamp <= h["commit_time"] for p, h in zip(sink.recent_progress, logged))


_CHILD = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    from parquet_sink import ParquetSink, await_termination
    from parquet_sink.errors import ExecutorDependencyError
    from tests.helpers.jvm_archive import driver_java_options
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.driver.extraJavaOptions", driver_java_options()).getOrCreate())
    src, out, ckpt = sys.argv[1:4]
    stream = spark.readStream.schema("id long").json(src)
    query = stream.writeStream.option("checkpointLocation", ckpt).trigger(availableNow=True).foreachBatch(
        ParquetSink(out, writer="arrow")).start()
    try:
        await_termination(query)
    except ExecutorDependencyError as exc:
        print("TYPED:", exc)
    """
)


def test_executors_without_the_package_get_a_typed_error(tmp_path):
    """The executors' Python lacks this package (a wrapper puts a package named parquet_sink that cannot be
    imported first on their path; the driver has the real one): the Arrow path says how to ship it."""
    blocker = tmp_path / "blocker" / "parquet_sink"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'parquet_sink'\", name='parquet_sink')\n")
    wrapper = tmp_path / "executor-python"
    wrapper.write_text(f'#!/bin/sh\nexport PYTHONPATH="{blocker.parent}:$PYTHONPATH"\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    src = tmp_path / "in"
    src.mkdir()
    (src / "0.json").write_text('{"id": 1}\n')
    out = tmp_path / "out"
    env = {**os.environ, "PYSPARK_PYTHON": str(wrapper), "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(src), str(out), str(tmp_path / "ckpt")],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert "TYPED:" in result.stdout, result.stderr[-3000:]
    message = result.stdout.split("TYPED:", 1)[1]
    assert "cannot import 'parquet_sink'" in message and "addArtifacts" in message and "--py-files" in message
    assert not (out / "_spark_metadata" / "0").exists()


def test_a_sink_object_reused_across_runs_reads_the_output_as_a_new_one_would(spark, tmp_path):
    """A notebook restarts a query with the same ParquetSink object. A batch that failed (a UDF raising) after its
    schema check left its new column in the sink's cached view, so the fixed restart was refused ("column 's' is
    missing"); and an output deleted between runs was not noticed (the next batch committed as log batch 0, the
    earlier batches gone without an error). Both now behave as with a new sink object."""
    import shutil

    from pyspark.sql import functions as F, types as T

    from parquet_sink.errors import OutputResetError

    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    src = _input(tmp_path, "in", batches=1)
    sink = ParquetSink(out)
    await_termination(_start(spark, src, sink, ckpt))
    write_input_files(src + "_more", [[{"id": 10 + i, "day": "bad" if i == 4 else "x"} for i in range(5)]])
    shutil.copy(src + "_more/0000.json", src + "/0001.json")

    @F.udf(T.StringType())
    def checked(day):
        if day == "bad":
            raise ValueError("a bad row")
        return day

    def started(frame):
        return frame.writeStream.foreachBatch(sink).option("checkpointLocation", ckpt).trigger(availableNow=True).start()

    rows = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(src)
    with pytest.raises(Exception, match="a bad row"):
        await_termination(started(rows.withColumn("extra", checked("day"))))  # a new column, then the failure
    await_termination(started(rows.where("day != 'bad'")))  # fixed: the same columns as before
    assert sorted(read_committed(out).column("id").to_pylist()) == [0, 1, 2, 3, 4, 10, 11, 12, 13]
    assert read_committed(out).column_names == ["id", "day"]

    shutil.rmtree(out)  # the output reset between runs of the same query and sink object
    write_input_files(src + "_last", [[{"id": 20, "day": "x"}]])
    shutil.copy(src + "_last/0000.json", src + "/0002.json")
    with pytest.raises(OutputResetError, match="would leave a gap"):
        await_termination(started(rows))
    assert not os.path.exists(os.path.join(out, "_spark_metadata", "0"))


def test_a_refused_first_run_leaves_nothing_that_refuses_its_remedy(spark, tmp_path):
    """SPARK-35565's shape (FileStreamSinkSuite "read data from outputs of another streaming query but ignore its
    metadata"), translated: Spark's own sink writes an output, its `_spark_metadata` is deleted, and a session with
    compactInterval=3 starts ParquetSink there. The first run is refused (ExistingDataError, nothing written); the
    advised re-run (allow_existing_files=True, a fresh checkpoint) commits every batch, through a compaction (the
    issue saw it refused with ForeignQueryError naming the refused query); readers see exactly its rows."""
    from parquet_sink.errors import ExistingDataError

    out = str(tmp_path / "out")
    q0 = spark.readStream.schema(SCHEMA).json(_input(tmp_path, "in0", batches=1, offset=900)).writeStream.format(
        "parquet").option("checkpointLocation", str(tmp_path / "c0")).trigger(availableNow=True).start(out)
    q0.awaitTermination()
    subprocess.run(["rm", "-rf", os.path.join(out, "_spark_metadata")], check=True)
    src = _input(tmp_path, "in1", batches=4)
    previous = spark.conf.get("spark.sql.streaming.fileSink.log.compactInterval", None)
    spark.conf.set("spark.sql.streaming.fileSink.log.compactInterval", "3")
    try:
        with pytest.raises(ExistingDataError, match="allow_existing_files=True"):
            await_termination(_start(spark, src, ParquetSink(out), str(tmp_path / "c1")))
        assert not os.path.exists(os.path.join(out, "_spark_metadata", "0"))
        sink = ParquetSink(out, allow_existing_files=True)
        await_termination(_start(spark, src, sink, str(tmp_path / "c2")))
    finally:
        if previous is None:
            spark.conf.unset("spark.sql.streaming.fileSink.log.compactInterval")
        else:
            spark.conf.set("spark.sql.streaming.fileSink.log.compactInterval", previous)
    assert [(p.batch_id, p.log_batch_id, p.skipped) for p in sink.recent_progress] == [(b, b, False) for b in range(4)]
    assert os.path.exists(os.path.join(out, "_spark_metadata", "2.compact"))
    assert sorted(read_committed(out).column("id").to_pylist()) == list(range(20))
    assert sorted(r.id for r in spark.read.parquet(out).select("id").collect()) == list(range(20))
