"""Two real processes appending to one output at once (issue 36 item 5): a Spark streaming query with the sink
and a plain-Python ``write_batch`` loop that starts once the query committed its first batch. Each loses commit
races to the other and moves on to the next log batch (compaction batches included); neither dies, and every row
of both is committed exactly once. Before, the query died at its first lost race (CommitConflictError) or at its
first batch after an append of the loop (ForeignQueryError)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pyarrow as pa

from parquet_sink import MetadataLog, write_batch
from parquet_sink.log.entry import CommitRecord, attribute
from tests.helpers.chain_child import writer_rows
from tests.helpers.crash_util import (
    assert_ok,
    assert_same_ids,
    assert_sigkilled,
    committed_ids,
    committed_paths,
    orphans,
    parquet_on_disk,
    run_in_process,
    spark_ids,
    start_child,
    vacuum,
    write_inputs,
)

CHAIN_CHILD = Path(__file__).resolve().parents[1] / "helpers" / "chain_child.py"
ROWS = 10


def test_streaming_query_and_write_batch_loop_append_together(spark, tmp_path: Path) -> None:
    inputs = write_inputs(tmp_path / "in", range(8), ROWS)
    out = tmp_path / "out"
    go = tmp_path / "go"
    versions = list(range(24))
    writer = start_child(
        tmp_path / "children",
        {"mode": "writer", "out": str(out), "app_id": "loop", "app_index": 1, "versions": versions, "rows": 5,
         "go": str(go), "crash_columns": True, "pause": 0.1},
        script=CHAIN_CHILD,
    )
    query = start_child(tmp_path, {
        "input": str(tmp_path / "in"), "out": str(out), "checkpoint": str(tmp_path / "ckpt"),
        "max_files_per_trigger": 1,
    })
    try:
        while not query.progress():  # the query committed its first batch: let the loop go while it runs the rest
            assert query.proc.poll() is None, query.log_tail()
            time.sleep(0.05)
        go.touch()
        for child in (writer, query):
            child.wait()
            assert_ok(child)
    finally:  # a failed query must not leave the loop waiting for its go
        for child in (writer, query):
            child.kill()

    loop_ids = [i for v in versions for i in writer_rows(1, v, 5).column("id").to_pylist()]
    everything = inputs + loop_ids
    assert_same_ids(committed_ids(out), everything, "read_committed")
    assert_same_ids(spark_ids(spark, out), everything, "spark.read.parquet")
    log = MetadataLog(str(out))
    latest = log.latest_batch_id()
    assert latest == len(versions) + 8 - 1 and log.check() == []
    names = {p.name for p in (out / "_spark_metadata").iterdir()}
    assert all(f"{b}.compact" in names for b in range(latest + 1) if (b + 1) % 10 == 0), names
    kept = [r for r in map(CommitRecord.from_entry, log.all_files()) if r is not None]
    records = [r for _, r in sorted(attribute(kept, range(latest + 1)).items())]
    assert len(records) == latest + 1, "every log batch attributed"
    by_writer: dict[str, list[int]] = {}
    for record in records:
        by_writer.setdefault("loop" if record.query_id == "loop" else "query", []).append(record.query_batch_id)
    assert by_writer == {"loop": versions, "query": list(range(8))}, by_writer
    assert not orphans(out), "every file of both writers was committed"
    lost = sum(p.get("conflicts", 0) for p in query.progress()) + sum(r["conflicts"] for r in writer.progress())
    print(f"commit races lost: {lost}; log batches of the query: "
          f"{[p['log_batch_id'] for p in query.progress()]}")


def test_query_killed_between_a_lost_race_and_its_retry(spark, tmp_path: Path) -> None:
    """The query's batch 1 has written its files (stopped at before_commit); another app commits the log batch it
    aimed at; resumed, the query loses the race, finds no conflict, and is SIGKILLed before it commits at the next
    log batch (commit_retry). The restart on the checkpoint commits batch 1 after the app's batch; every row once;
    vacuum then removes exactly what the killed attempt left (its lease died with the restart's commit)."""
    inputs = write_inputs(tmp_path / "in", range(3), ROWS)
    out = tmp_path / "out"
    config = {"input": str(tmp_path / "in"), "out": str(out), "checkpoint": str(tmp_path / "ckpt"),
              "max_files_per_trigger": 1}
    query = start_child(tmp_path, config, failpoints="before_commit=stop@2,commit_retry=kill")
    loop_table = writer_rows(1, 0, 5)
    loop_table = pa.table({"id": loop_table.column("id"), "file": pa.array([-1] * 5, pa.int64()),
                           "name": [f"w{i}" for i in loop_table.column("id").to_pylist()]})
    try:
        deadline = time.monotonic() + 240
        while psutil.Process(query.pgid).status() != psutil.STATUS_STOPPED:
            assert time.monotonic() < deadline and query.proc.poll() is None, query.log_tail()
            time.sleep(0.05)
        assert write_batch(str(out), loop_table, app_id="loop", version=0).log_batch_id == 1
        os.kill(query.pgid, signal.SIGCONT)
        query.wait()
    finally:  # never leave a stopped driver behind
        if query.proc.poll() is None:
            query.kill()
    assert_sigkilled(query)
    left = parquet_on_disk(out) - committed_paths(out)
    assert left, "the killed attempt's files are on disk, uncommitted"
    assert MetadataLog(str(out)).latest_batch_id() == 1

    restarted = run_in_process(spark, tmp_path, config)

    assert_ok(restarted)
    assert [(p["batch_id"], p["log_batch_id"]) for p in restarted.progress()] == [(1, 2), (2, 3)]
    everything = inputs + loop_table.column("id").to_pylist()
    assert_same_ids(committed_ids(out), everything, "read_committed after the restart")
    assert_same_ids(spark_ids(spark, out), everything, "spark.read.parquet after the restart")
    cleaned = vacuum(out)
    assert {f["path"] for f in cleaned["files"]} == left and not cleaned["in_flight_kept"], cleaned
    assert_same_ids(committed_ids(out), everything, "after vacuum")
