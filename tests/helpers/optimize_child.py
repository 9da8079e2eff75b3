"""Child-process driver of the optimize crash and race tests and of the output model's kills: one
:func:`parquet_sink.maintenance.optimize` call, one :func:`parquet_sink.write_batch` call, or one micro-batch of a
:class:`parquet_sink.ParquetSink` on a Spark driver of its own.

Usage: ``python tests/helpers/optimize_child.py CONFIG.json`` (started by ``crash_util.start_child(...,
script=OPTIMIZE_CHILD)``). Config keys: ``out``, optional ``kwargs`` (the call's keyword arguments), optional
``table`` (an Arrow IPC file: then the call is ``write_batch(out, table, **kwargs)``, or with ``batch_id`` and
``spark_schema`` ``ParquetSink(out, **kwargs)(DataFrame of the table, batch_id)``), ``result`` (written at the
end: ``{"status": "ok", "committed", "log_batch_id", ...}`` or the error), ``started`` (touched before the call).
Failpoints come from the environment (``optimize_write``, ``optimize_padding``, ``optimize_commit``, ``compaction``,
``sidecar``, ``optimize_after_commit``, ``before_write``, ``before_commit``, ``commit_publish``, ...).
Exit codes: 0 done, 3 an error (named in ``result``); killed children exit by SIGKILL.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def _call(config: dict) -> dict:
    """The call of ``config`` and the figures the parent reads."""
    import pyarrow as pa

    from parquet_sink import write_batch
    from parquet_sink.maintenance import optimize

    kwargs = config.get("kwargs", {})
    if "table" in config:
        with pa.memory_map(config["table"]) as source:
            table = pa.ipc.open_file(source).read_all()
        if "batch_id" in config:
            return _sink_batch(config, table)
        written = write_batch(config["out"], table, **kwargs)
        return {"committed": written.committed, "log_batch_id": written.log_batch_id, "files": written.files}
    result = optimize(config["out"], **kwargs)
    return {"committed": result.committed, "log_batch_id": result.log_batch_id, "abandoned": len(result.abandoned),
            "files": result.files, "padding": result.padding_batches}


def _sink_batch(config: dict, table) -> dict:
    """One micro-batch of a ParquetSink, on a driver whose JVM and Python workers a failpoint kill takes down too."""
    from parquet_sink import ParquetSink

    os.environ["PARQUET_SINK_KILL_PGID"] = str(os.getpgid(0))  # before the JVM starts: its workers inherit it
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.helpers.spark_util import make_session

    spark = make_session("local[1]", "parquet-sink-model-child",
                         **{"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"})
    rows = [tuple(row.values()) for row in table.to_pylist()]
    sink = ParquetSink(config["out"], **config.get("kwargs", {}))
    sink(spark.createDataFrame(rows, config["spark_schema"]), config["batch_id"])
    progress = sink.last_progress
    return {"committed": not progress.skipped, "log_batch_id": progress.log_batch_id}


def main() -> int:
    config = json.loads(Path(sys.argv[1]).read_text())
    import parquet_sink.maintenance  # noqa: F401  (imported before ``started``: a kill at a random time hits the call)

    Path(config["started"]).touch()
    try:
        figures = _call(config)
    except Exception as exc:  # the parent reads what happened
        Path(config["result"]).write_text(json.dumps({"status": "error", "type": type(exc).__name__, "message": str(exc)}))
        return 3
    Path(config["result"]).write_text(json.dumps({"status": "ok", **figures}))
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # no interpreter teardown: a native library's threads ended the process by SIGABRT there once ("terminate called
    # without an active exception"), after the call's result was written
    os._exit(code)
