"""SIGKILL between the _spark_metadata commit and the Delta commit (failpoint ``delta_commit``), in a child
process running write_batch(..., delta_log=True), no Spark: the Delta log is one batch behind, never ahead;
the next call catches up and every row is read once through delta-rs and polars."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import deltalake
import polars as pl

from parquet_sink import read_committed, write_batch
from parquet_sink.delta import APP_ID
from parquet_sink.maintenance import verify
from tests.delta.readers import assert_delta_matches, data_commits, delta_files

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import sys
import pyarrow as pa
from parquet_sink import write_batch
out, version = sys.argv[1], int(sys.argv[2])
table = pa.table({"id": [version * 10 + i for i in range(5)], "k": [f"k{i % 2}" for i in range(5)]})
write_batch(out, table, app_id="job", version=version, partition_by=["k"], delta_log=True)
print("done")
"""


def _child(out: str, version: int, failpoints: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ, PARQUET_SINK_FAILPOINTS=failpoints)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", CHILD, out, str(version)], capture_output=True, text=True, env=env,
        start_new_session=True, timeout=120,
    )


def test_kill_between_the_two_commits_leaves_delta_one_batch_behind(out):
    assert _child(out, 0).returncode == 0
    killed = _child(out, 1, "delta_commit=kill")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert "done" not in killed.stdout
    # the batch is committed in _spark_metadata; the Delta log still mirrors batch 0 exactly
    assert sorted(read_committed(out).column("id").to_pylist()) == list(range(5)) + list(range(10, 15))
    table = deltalake.DeltaTable(out)
    assert table.transaction_version(APP_ID) == 0
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == list(range(5))
    assert sorted(pl.read_delta(out)["id"].to_list()) == list(range(5))
    report = verify(out)
    assert report.ok and any("behind" in w and "delta-sync" in w for w in report.warnings)
    behind = set(delta_files(out))

    # a rerun of the killed version is a skip for the log, and the Delta log catches up
    assert _child(out, 1).returncode == 0
    assert deltalake.DeltaTable(out).transaction_version(APP_ID) == 1
    assert behind < delta_files(out)
    assert _child(out, 2).returncode == 0
    table = assert_delta_matches(out)
    assert sorted(table.column("id").to_pylist()) == [v * 10 + i for v in range(3) for i in range(5)]
    assert len(data_commits(out)) == 3  # batch 0, the catch-up of batch 1, batch 2: none committed twice
    assert verify(out).ok and not verify(out).warnings
    assert write_batch(out, __import__("pyarrow").table({"id": [20], "k": ["k0"]}), app_id="job", version=2,
                       ignore_changed_data=True, delta_log=True).committed is False
