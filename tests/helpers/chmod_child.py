"""Child process of ``tests/write/test_jvm_classes.py``: a driver whose ``PATH`` finds a ``chmod`` that logs
each call, and a Hadoop umask of 077 (``spark.hadoop.fs.permissions.umask-mode``), streaming two partitioned batches
through ``ParquetSink`` twice: first with this package's JAR missing (Hadoop's raw local filesystem), then with it.

Usage: ``python tests/helpers/chmod_child.py '{"input": ..., "runs": {NAME: {"out": ..., "checkpoint": ...,
"jar": true|false}}, "result": ...}'``: writes ``result``, ``{NAME: [the Hadoop filesystem class the sink staged
with, whether Spark's writer got the batch's rows through BatchRowsExec, whether it wrote them with SinkFileWrite]}``; the parent reads the chmod log and the
files.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from parquet_sink import ParquetSink
from parquet_sink.write import jvm, manifest_write
from tests.helpers.spark_util import make_session, run_available_now


def main(config: dict) -> None:
    spark = make_session(app="parquet-sink-chmod", **{"spark.hadoop.fs.permissions.umask-mode": "077"})
    jar = jvm.JAR
    used = {}
    for name, run in config["runs"].items():  # a failure ends the child: the parent shows its traceback
        jvm.JAR = jar if run["jar"] else Path(run["out"]) / "missing.jar"
        jvm._LOADED.clear()  # the JAR is looked for again (once per SparkContext otherwise)
        manifest_write._JVM.clear()  # (its objects hold the classes found before)
        stream = spark.readStream.schema("id LONG, k STRING").option("maxFilesPerTrigger", 1).json(config["input"])
        run_available_now(stream, run["checkpoint"], ParquetSink(run["out"], partition_by=["k"]))
        classes = jvm._LOADED[spark.sparkContext]
        used[name] = [classes.local_fs, classes.batch_rows is not None, classes.sink_write is not None]
    Path(config["result"]).write_text(json.dumps(used))
    spark.stop()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
