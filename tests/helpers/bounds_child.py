"""Child process of ``test_writer_bounds``: streaming queries with ParquetSink, run under the open-file limit its
parent set (inherited by the JVM and the Python workers), one after the other in one driver (one JVM start for
every backend; a later query also runs in processes the earlier ones used, so nothing they leaked is forgiven).

Usage: ``python tests/helpers/bounds_child.py '{"input": ..., "result": ..., "runs": {NAME: {"checkpoint": ...,
"url": ..., "storage_options": {...}}, ...}}'``: writes ``result``, ``{NAME: "ok" or the query's traceback}``.
"""

from __future__ import annotations

import json
import sys
import traceback

from parquet_sink import ParquetSink
from tests.helpers.spark_util import make_session, run_available_now


def main(config: dict) -> None:
    spark = make_session(app="parquet-sink-bounds")
    outcome = {}
    try:
        for name, run in config["runs"].items():
            try:
                stream = spark.readStream.schema("id LONG, k LONG").json(config["input"])
                sink = ParquetSink(run["url"], partition_by=["k"], storage_options=run["storage_options"])
                run_available_now(stream, run["checkpoint"], sink)
                outcome[name] = "ok"
            except Exception:  # the parent's test of this run reports it; the next run still runs
                outcome[name] = traceback.format_exc()
    finally:
        with open(config["result"], "w") as fh:
            json.dump(outcome, fh)
        spark.stop()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
