"""Spark Connect for the tests, offline: pyspark's bundled Connect server and a client of it.

``SparkSession.builder.remote("local[2]")`` starts a local driver with the Connect plugin
(``spark-connect_2.13-*.jar``, shipped in pyspark) inside the calling process, on port 15002, and refuses
to when that process already has a classic session. The tests need both (the suite's classic ``spark``
and a Connect client) and must not collide with other runs on port 15002, so they start the same
server the same way (:data:`SERVER_CONF` on a local driver) but on a free port: in a child process for
the suite's ``connect_spark`` fixture (``python -m tests.helpers.connect_util PORT_FILE``), in the crash child
itself for the kill tests. The client is pyspark's own Connect session, ``sc://127.0.0.1:<port>``.

``foreachBatch`` functions run on the server side, in a Python worker the driver starts with
``PYSPARK_PYTHON`` (the venv's interpreter) and the driver's environment (``PYTHONPATH``, failpoints).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

#: What ``remote("local[...]")`` sets on its local driver, plus an ephemeral loopback port.
SERVER_CONF = {
    "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
    "spark.connect.grpc.binding.address": "127.0.0.1",
    "spark.connect.grpc.binding.port": "0",
}


def server_port(server: Any) -> int:
    """The port the Connect plugin of the classic session ``server`` listens on."""
    service = getattr(server._jvm, "org.apache.spark.sql.connect.service.SparkConnectService$")
    return int(getattr(service, "MODULE$").localPort())


def connect_client(port: int) -> Any:
    """A Spark Connect session on ``sc://127.0.0.1:<port>``. Sets ``SPARK_CONNECT_MODE_ENABLED`` so that
    ``pyspark.sql.functions`` build Connect columns (the caller unsets it when done)."""
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    return ConnectSession.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate()


def serve(port_file: str) -> None:
    """Run the server until stdin closes; its port goes to ``port_file`` once it accepts clients."""
    from tests.helpers.spark_util import make_session

    server = make_session(app="parquet-sink-connect-server", **SERVER_CONF)
    tmp = f"{port_file}.tmp"
    Path(tmp).write_text(str(server_port(server)))
    os.replace(tmp, port_file)
    sys.stdin.read()
    server.stop()


if __name__ == "__main__":
    serve(sys.argv[1])
