"""Ctrl-C in ``await_termination(query)``: one line, a clean stop, status 130, and the same checkpoint goes on.

A terminal's Ctrl-C sends SIGINT to the whole foreground process group: the child (``crash_child.py`` with
``interruptible``: a ``processingTime`` query waited on with ``await_termination``) leads its own group and gets
it the same way, its JVM and Python workers too (PySpark starts them ignoring SIGINT). Before the fix PySpark's
own SIGINT handler called ``cancelAllJobs`` over the py4j connection that was waiting: ~100 lines of chained py4j
tracebacks, and the query was never stopped.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from parquet_sink import MetadataLog
from tests.crash.test_crash import ROWS, child_config
from tests.helpers.connect_util import SERVER_CONF
from tests.helpers.crash_util import (
    assert_group_gone, assert_ok, assert_parquet_sink, run_in_process, start_child, write_inputs,
)

FILES = 6  # input files, a batch each (maxFilesPerTrigger 1): the Ctrl-C comes after the first


@pytest.mark.parametrize("connect", [False, True], ids=["classic", "connect"])
def test_ctrl_c_stops_the_query_in_one_line_and_the_checkpoint_goes_on(
    spark, tmp_path: Path, monkeypatch, connect: bool
) -> None:
    ids = write_inputs(tmp_path / "in", range(FILES), ROWS)
    config = child_config(tmp_path, interruptible=True, **(dict(connect=True, conf=SERVER_CONF) if connect else {}))
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    if connect:
        monkeypatch.delenv("SPARK_CONNECT_MODE_ENABLED", raising=False)  # the child starts its driver as classic
        config["sink"]["checkpoint_location"] = str(ckpt)
    child = start_child(tmp_path, config)
    deadline = time.monotonic() + 180
    while not child.progress() and child.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert child.progress(), f"no batch before the Ctrl-C; log tail:\n{child.log_tail()}"

    os.killpg(child.pgid, signal.SIGINT)  # what a terminal's Ctrl-C does
    assert child.wait(120) == 130, child.log_tail()
    assert_group_gone(child.pgid)  # nothing left running: the query and its driver stopped

    log = child.log_path.read_text(errors="replace")
    said = [line for line in log.splitlines() if "parquet-sink: interrupted" in line]
    assert len(said) == 1 and "Traceback" not in log and "Py4J" not in log, log[-3000:]
    latest = MetadataLog(str(out)).latest_batch_id()
    assert latest is not None and said[0].endswith(
        "every batch it committed stays, and starting it again with the same checkpoint goes on from there")
    # its last finished batch: the log's newest, or the one before when the stop came in that batch's commit window
    # (committed to the log, not yet recorded by Spark: the restart replays it and the sink skips it)
    last = int(re.search(r"after batch (\d+);", said[0]).group(1))
    assert latest in (last, last + 1), (said, latest)

    # The same checkpoint goes on (run to the end of the input here): every row once, checkpoint and log agree.
    assert_ok(run_in_process(spark, tmp_path, dict(config, interruptible=False, connect=False)))
    assert_parquet_sink(spark, out, ckpt, ids, ROWS)
