"""Child-process driver of the crash tests: one real streaming query, killed and restarted by the parent.

Usage: ``python tests/helpers/crash_child.py CONFIG.json``. The parent starts it with ``start_new_session=True``
so the child leads its own process group; before Spark starts the child exports
``PARQUET_SINK_KILL_PGID=<its pgid>``, which the JVM and the Python workers inherit, so a failpoint
``kill`` fired anywhere (driver or executor task) SIGKILLs the driver, the JVM and every worker at once,
like a machine dying. Failpoints come from the environment the parent gives
(``PARQUET_SINK_FAILPOINTS``, ``PARQUET_SINK_FAILPOINT_STATE``).

The query: a JSON file source over ``input`` (schema ``id LONG, file LONG, name STRING``) with
``maxFilesPerTrigger``, ``foreachBatch(ParquetSink(out, **sink))``, ``trigger(availableNow=True)``.

Config keys: ``input``, ``out``, ``checkpoint``; optional ``master`` (``local[2]``), ``conf`` (extra Spark
conf), ``max_files_per_trigger`` (1), ``sink`` (ParquetSink keyword arguments), ``slow_attempt``
(``{"partition": p, "seconds": s, "attempts_dir": d}``: attempt 0 of task ``p`` of every batch stalls,
to make Spark speculate; every task attempt leaves a marker in ``attempts_dir``), ``task_failpoint``
(rows pass through a ``mapInArrow`` that hits the ``task_write`` failpoint inside every task after its
first rows went on: the way to fail a task of the Spark writer path, whose writing runs in the JVM),
``attempt_bucket`` (adds a column ``bucket``: ``id % 3`` in a task's first attempt, 0 in its retries),
and the files the
parent reads: ``progress`` (one JSON line per foreachBatch call), ``result`` (how the run ended),
``started`` (touched just before the query starts). ``connect``: run the query through a Spark Connect
client of this driver (``conf`` then holds ``tests.helpers.connect_util.SERVER_CONF``). ``spark_read``
(``{"path": url, "result": file}``): once the query drained, the ``[id, name]`` rows ``spark.read.parquet(url)``
returns go to ``file`` (JSON; for outputs only this driver's session reaches, such as ``s3a://``).
``interruptible``: a ``processingTime`` trigger (the query runs until stopped) waited on with
``parquet_sink.await_termination``, as a user's job does, for the Ctrl-C tests; a Ctrl-C exits 130 through it.

Exit codes: 0 the query drained its input; 3 the query failed (``result`` names the error); killed
children exit by SIGKILL.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = "id LONG, file LONG, name STRING"


def _write_json(path: str | None, obj: object) -> None:
    if path:
        tmp = f"{path}.tmp"
        with open(tmp, "w") as fh:
            json.dump(obj, fh)
        os.replace(tmp, path)


def _append_line(path: str | None, obj: object) -> None:
    if path:
        with open(path, "a") as fh:  # one write per line, closed at once: survives a SIGKILL
            fh.write(json.dumps(obj) + "\n")


def _slow_attempt(partition: int, seconds: float, attempts_dir: str, batches):  # runs in a Python worker
    """Pass rows through; attempt 0 of task ``partition`` stalls first (a straggler to speculate on)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is not None:
        os.makedirs(attempts_dir, exist_ok=True)
        marker = f"stage{context.stageId()}-part{context.partitionId()}-attempt{context.attemptNumber()}"
        Path(attempts_dir, marker).touch()
        if context.partitionId() == partition and context.attemptNumber() == 0:
            time.sleep(seconds)
    yield from batches


def _task_failpoint(batches):  # runs in a Python worker
    """Pass rows through; after the first rows of this task went on to the writer, hit ``task_write``."""
    from parquet_sink.failpoints import failpoint

    hit = False
    for batch in batches:
        yield batch
        if not hit:
            hit = True
            failpoint("task_write")


def _attempt_bucket(batches):  # runs in a Python worker
    """Add ``bucket``: ``id % 3`` in a task's first attempt, 0 in its retries (a partition value that is
    not deterministic, like one from ``rand()``: a retry writes other files than the attempt it replaces)."""
    import pyarrow as pa
    from pyspark import TaskContext

    first = TaskContext.get().attemptNumber() == 0
    for batch in batches:
        bucket = pa.array([i % 3 if first else 0 for i in batch.column(0).to_pylist()], pa.int64())
        yield pa.RecordBatch.from_arrays([*batch.columns, bucket], names=[*batch.schema.names, "bucket"])


def main() -> int:
    config = json.loads(Path(sys.argv[1]).read_text())
    # Before the JVM starts: the JVM and its Python workers inherit this, so a kill from inside an
    # executor task takes the whole driver down too.
    os.environ["PARQUET_SINK_KILL_PGID"] = str(os.getpgid(0))
    os.environ["PYSPARK_PYTHON"] = sys.executable
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))

    from pyspark.sql import SparkSession

    from tests.helpers.jvm_archive import driver_java_options

    builder = (
        SparkSession.builder.master(config.get("master", "local[2]"))
        .appName("parquet-sink-crash-child")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        # A short-lived driver: C1-only JIT and the serial GC start it markedly faster.
        # (and the run's class archive, once it exists: tests/helpers/jvm_archive.py)
        .config("spark.driver.extraJavaOptions", driver_java_options("-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"))
    )
    for key, value in config.get("conf", {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if config.get("connect"):  # the query goes through a Spark Connect client of this driver
        from tests.helpers.connect_util import connect_client, server_port

        spark = connect_client(server_port(spark))

    try:
        code = run_query(spark, config)
        read = config.get("spark_read")
        if code == 0 and read:
            _write_json(read["result"], [list(r) for r in spark.read.parquet(read["path"]).select("id", "name").collect()])
        return code
    finally:
        spark.stop()


def run_query(spark, config: dict) -> int:
    """Run the query of ``config`` on ``spark`` until its input is drained; 0 when it drained, 3 when it
    failed (``result`` names the error). The child's ``main`` calls it on a fresh driver; a crash test
    restarts a killed query with it on the test session's driver (``crash_util.run_in_process``)."""
    import functools

    from parquet_sink import ParquetSink

    began = time.time()
    stream = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", config.get("max_files_per_trigger", 1))
        .json(config["input"])
    )
    slow = config.get("slow_attempt")
    if slow:
        stream = stream.mapInArrow(
            functools.partial(_slow_attempt, slow["partition"], slow["seconds"], slow["attempts_dir"]),
            stream.schema,
        )
    if config.get("task_failpoint"):
        stream = stream.mapInArrow(_task_failpoint, stream.schema)
    if config.get("attempt_bucket"):
        stream = stream.mapInArrow(_attempt_bucket, f"{SCHEMA}, bucket LONG")
    sink = ParquetSink(config["out"], **config.get("sink", {}))

    def write_batch(df, batch_id: int) -> None:
        try:
            sink(df, batch_id)
        except Exception as exc:
            _write_json(
                config.get("result"),
                {"status": "error", "type": type(exc).__name__, "message": str(exc), "batch_id": batch_id},
            )
            raise
        p = sink.last_progress
        _append_line(
            config.get("progress"),
            {"batch_id": p.batch_id, "log_batch_id": p.log_batch_id, "skipped": p.skipped, "rows": p.rows,
             "files": p.files, "query_id": p.query_id, "conflicts": p.conflicts, "time": time.time()},
        )

    Path(config["started"]).touch()
    writer = stream.writeStream.foreachBatch(write_batch).option("checkpointLocation", config["checkpoint"])
    interruptible = config.get("interruptible")
    writer = writer.trigger(processingTime="200 milliseconds") if interruptible else writer.trigger(availableNow=True)
    query = writer.start()
    try:
        if interruptible:
            from parquet_sink import await_termination

            await_termination(query)  # until Ctrl-C: QueryInterrupted, a SystemExit(130)
        else:
            query.awaitTermination()
    except Exception as exc:
        if not Path(config["result"]).exists():
            _write_json(config.get("result"), {"status": "error", "type": type(exc).__name__, "message": str(exc)})
        traceback.print_exc()
        return 3
    _write_json(config.get("result"), {"status": "ok", "began": began, "ended": time.time()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
