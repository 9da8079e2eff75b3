"""Races between processes (issue 35, item 4): a sync or a verify running beside a writer that commits batches
and syncs them (another process) never raises "the output was reset" nor reports a false problem. The Delta
log is read before ``_spark_metadata``, so it can only be found behind the log; the compared snapshot is the
log's as of the batch the Delta log mirrors. One test runs real concurrent processes freely; the others stop a
process (failpoint ``delta_read=stop``) between its two reads while another process commits, which is the
interleaving that produced the false answers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from parquet_sink import MetadataLog, sync_delta_log
from parquet_sink.delta import compare_logs
from parquet_sink.delta.sync import DeltaLogError
from tests.delta.readers import assert_delta_matches, spark_style_batch
from tests.delta.test_sync import _table

ROOT = Path(__file__).resolve().parents[2]

# A writer the way Spark's sink with retention writes (every other batch logged 30 days ago, so each
# compaction drops entries), each batch followed by its Delta sync.
WRITER = """
import sys
from parquet_sink import MetadataLog, sync_delta_log
from tests.delta.readers import spark_style_batch
from tests.delta.test_sync import _table
out, first, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for batch in range(first, first + count):
    log = MetadataLog(out, compact_interval=3, retention="7d", cleanup=False)
    spark_style_batch(log, _table(batch, rows=2), ("cat",), old=batch % 2 == 0)
    sync_delta_log(out, check_files=False)
"""

# Runs one sync or one compare_logs and prints what it found.
PROBE = """
import json, sys
from parquet_sink.delta import compare_logs, sync_delta_log
out, what = sys.argv[1], sys.argv[2]
try:
    if what == "sync":
        found = {"result": sync_delta_log(out).log_batch_id}
    else:
        found = dict(zip(("problems", "warnings"), compare_logs(out)))
except Exception as exc:
    found = {"error": f"{type(exc).__name__}: {exc}"}
print(json.dumps(found))
"""


def _env(failpoints: str = "") -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH")])))
    env.pop("PARQUET_SINK_FAILPOINTS", None)
    if failpoints:
        env["PARQUET_SINK_FAILPOINTS"] = failpoints
    return env


def _writer(out: str, first: int, count: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WRITER, out, str(first), str(count)], env=_env(), cwd=ROOT)


def _seed(out: str, batches: int) -> None:
    log = MetadataLog(out, compact_interval=3, retention="7d", cleanup=False)
    for batch in range(batches):
        spark_style_batch(log, _table(batch, rows=2), ("cat",), old=batch % 2 == 0)
    sync_delta_log(out)


def test_sync_and_verify_beside_a_writer_process_find_nothing_wrong(out):
    _seed(out, 2)
    writer = _writer(out, 2, 12)
    seen: list[str] = []
    rounds = 0
    while writer.poll() is None or rounds < 2:
        rounds += 1
        try:
            sync_delta_log(out)
        except DeltaLogError as exc:
            seen.append(f"sync: {exc}")
        problems, _ = compare_logs(out)
        seen += [f"verify: {p}" for p in problems]
    assert writer.wait() == 0
    assert not seen, seen[:3]
    assert rounds > 2
    sync_delta_log(out)
    assert_delta_matches(out)


def _stopped(process: subprocess.Popen) -> bool:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        if Path(f"/proc/{process.pid}/stat").read_text().split(") ")[1].startswith("T"):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("what", ["sync", "verify"])
def test_a_batch_and_its_sync_between_the_two_reads(out, what):
    _seed(out, 4)  # batches 0-3: the next one (4) is not a compaction, the one after (5) is one with retention
    probe = subprocess.Popen([sys.executable, "-c", PROBE, out, what], env=_env("delta_read=stop"), cwd=ROOT,
                             stdout=subprocess.PIPE, text=True)
    assert _stopped(probe), "the probe did not stop between its two reads"
    try:
        assert _writer(out, 4, 2).wait() == 0  # batches 4 and 5 (a compaction dropping batch 4's entries), synced
    finally:
        os.kill(probe.pid, signal.SIGCONT)
    found = json.loads(probe.communicate(timeout=120)[0])
    assert "error" not in found and not found.get("problems"), found
    assert found.get("result", 5) == 5
    assert not compare_logs(out)[0]
    assert_delta_matches(out)
