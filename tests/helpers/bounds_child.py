"""Child process of ``test_writer_bounds``: one streaming query with ParquetSink, run under the open-file
limit its parent set (inherited by the JVM and the Python workers).

Usage: ``python tests/helpers/bounds_child.py '{"input": ..., "checkpoint": ..., "url": ..., "storage_options": {...}}'``
"""

from __future__ import annotations

import json
import sys

from parquet_sink import ParquetSink
from tests.helpers.spark_util import make_session, run_available_now


def main(config: dict) -> None:
    spark = make_session(app="parquet-sink-bounds")
    try:
        stream = spark.readStream.schema("id LONG, k LONG").json(config["input"])
        sink = ParquetSink(config["url"], partition_by=["k"], storage_options=config["storage_options"])
        run_available_now(stream, config["checkpoint"], sink)
    finally:
        spark.stop()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
