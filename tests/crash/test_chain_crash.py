"""Crash tests of a chain: source output -> plain-Python job (iter_batches, transform, write_batch) -> output.

The job (``tests/helpers/chain_child.py``, mode ``job``) is SIGKILLed at the write path's failpoints (before the
write, after its first file, between the files and the commit, while publishing the log file, after the
commit) and at random moments, then rerun: every source row is in the output exactly once, through
``read_committed`` and Spark's ``spark.read.parquet``, and each source batch is committed once as the job's
version.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pyarrow as pa
import pytest

from parquet_sink import MetadataLog, Storage, committed_files, committed_version, read_committed, write_batch
from parquet_sink.log.entry import CommitRecord, attribute
from tests.helpers.crash_util import (
    assert_group_gone,
    assert_ok,
    assert_same_ids,
    assert_sigkilled,
    ids_of_files,
    orphans,
    run_child,
    start_child,
)

CHAIN_CHILD = Path(__file__).resolve().parents[1] / "helpers" / "chain_child.py"
ROWS = 40


def _make_source(src: str, batches: int, storage_options: dict | None = None) -> dict[int, list[int]]:
    """An upstream output written by app ``up``: batch b holds ids b * 1000 + r."""
    ids = {}
    for b in range(batches):
        ids[b] = [b * 1000 + r for r in range(ROWS)]
        table = pa.table({"id": pa.array(ids[b], pa.int64()), "name": [f"row-{i}" for i in ids[b]]})
        assert write_batch(src, table, app_id="up", version=b, storage_options=storage_options).log_batch_id == b
    return ids


def _config(src: str, out: str, storage_options: dict | None = None, **extra) -> dict:
    return {"mode": "job", "source": src, "out": out, "app_id": "job", "partition_by": ["bucket"],
            "storage_options": storage_options, **extra}


def _assert_output(out: str, source: dict[int, list[int]], upto: int, storage_options: dict | None = None) -> None:
    """The output holds exactly the transformed rows of source batches 0..upto, each batch committed once
    as the job's version. Killed before it created the output (``upto`` -1), the job leaves no directory."""
    storage = Storage(out, storage_options)
    if upto < 0 and not storage.exists(storage.root):
        return
    table = read_committed(out, columns=["id", "double"], storage_options=storage_options)
    ids = table.column("id").to_pylist()
    assert_same_ids(ids, [i for b in range(upto + 1) for i in source[b]], f"output (source batches 0..{upto})")
    assert table.column("double").to_pylist() == [2 * i for i in ids]
    assert committed_version(out, "job", storage_options=storage_options) == (upto if upto >= 0 else None)
    log = MetadataLog(out, storage_options=storage_options)
    latest = log.latest_batch_id()
    if latest is None:
        return
    kept = [r for r in (CommitRecord.from_entry(e) for e in log.all_files()) if r is not None]
    versions = [r.query_batch_id for _, r in sorted(attribute(kept, range(latest + 1)).items()) if r.query_id == "job"]
    assert versions == list(range(upto + 1)), f"job versions in the log: {versions}"


def _assert_spark_agrees(spark, out: str) -> None:
    ours = read_committed(out, columns=["id", "double", "bucket"]).to_pylist()
    theirs = [r.asDict() for r in spark.read.parquet(out).select("id", "double", "bucket").collect()]
    assert sorted(theirs, key=lambda r: r["id"]) == sorted(ours, key=lambda r: r["id"])


@pytest.mark.parametrize(
    ("failpoint", "committed_before_kill"),
    [("before_write", 0), ("task_write", 0), ("before_commit", 0), ("commit_publish", 0), ("after_commit", 1)],
)
def test_job_killed_at_each_point_then_rerun_is_parquet_sink(spark, tmp_path, failpoint, committed_before_kill):
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    source = _make_source(src, 4)
    work = tmp_path / "children"

    config = _config(src, out, max_records_per_file=4)  # files roll over: a kill mid-write finds some done
    killed = run_child(work, config, failpoints=f"{failpoint}=kill@2", script=CHAIN_CHILD)
    assert_sigkilled(killed)
    _assert_output(out, source, committed_before_kill)
    left = orphans(out)
    if failpoint == "task_write":
        written = ids_of_files(left)
        assert written and set(written) < set(source[1]), f"complete files of part of batch 1 stay uncommitted: {left}"
    if failpoint in ("before_commit", "commit_publish"):
        assert sorted(ids_of_files(left)) == source[1], f"batch 1's files stay uncommitted: {left}"

    rerun = run_child(work, config, script=CHAIN_CHILD)
    assert_ok(rerun)
    results = rerun.progress()
    assert [r["version"] for r in results] == list(range(committed_before_kill + 1, 4)), "the rerun resumes after"
    assert all(r["committed"] for r in results)
    _assert_output(out, source, 3)
    _assert_spark_agrees(spark, out)
    assert orphans(out) == left, "the rerun never commits the killed attempt's files"


def test_job_killed_at_random_moments_over_a_chain(spark, tmp_path):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"seed {seed}")  # shown with a failure
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    source = _make_source(src, 8)
    work = tmp_path / "children"
    config = _config(src, out, pause=0.1, max_records_per_file=7)
    kills = 0
    for _ in range(4):
        child = start_child(work, config, script=CHAIN_CHILD)
        while not child.started_path.exists() and child.proc.poll() is None:
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.8))
        child.kill()
        child.wait()
        assert_group_gone(child.pgid)
        kills += child.returncode == -9
        done = committed_version(out, "job")
        _assert_output(out, source, -1 if done is None else done)  # only whole batches are visible
    final = run_child(work, config, script=CHAIN_CHILD)
    assert_ok(final)
    _assert_output(out, source, 7)
    _assert_spark_agrees(spark, out)
    print(f"{kills} kills landed while the job ran")


@pytest.mark.parametrize("failpoint", ["commit_publish", "after_commit"])
def test_job_killed_in_the_commit_window_on_moto(request, tmp_path, failpoint):
    from tests.conftest import make_backend

    backend = make_backend("moto", request, tmp_path)
    src, out, options = f"{backend.url}-src", backend.url, backend.storage_options
    source = _make_source(src, 3, options)
    work = tmp_path / "children"
    killed = run_child(work, _config(src, out, options), failpoints=f"{failpoint}=kill@2", script=CHAIN_CHILD)
    assert_sigkilled(killed)
    _assert_output(out, source, 1 if failpoint == "after_commit" else 0, options)
    storage = Storage(out, options)
    prefix = storage.root.rstrip("/") + "/"  # not the source's objects beside it
    on_store = {i.path for i in storage.find(storage.root) if i.path.startswith(prefix) and i.path.endswith(".parquet")}
    committed = {f.path for f in committed_files(out, storage_options=options)}
    assert committed <= on_store
    if failpoint == "commit_publish":
        assert on_store - committed, "the killed batch's data files should be on the store, uncommitted"
    rerun = run_child(work, _config(src, out, options), script=CHAIN_CHILD)
    assert_ok(rerun)
    _assert_output(out, source, 2, options)
    assert backend.secret not in killed.log_tail(10**7) + rerun.log_tail(10**7)
