"""Commit-window crashes on the object stores: the driver SIGKILLed around the commit of a batch whose
output lives on Azurite (adlfs) or moto (s3fs); the restart from the checkpoint still leaves every row
exactly once. (Local disk runs every failpoint in test_crash.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from parquet_sink import MetadataLog, committed_files
from tests.conftest import make_backend
from tests.helpers.crash_util import (
    assert_ok,
    assert_same_ids,
    assert_sigkilled,
    committed_ids,
    latest_commit,
    run_child,
    run_in_process,
    write_inputs,
)

ROWS, FILES = 20, 4  # the kill in batch 3 (@4), the restart runs batch 3: nothing asserted needs a batch after it
# failpoint -> (log batches after the kill, the restart's first batch is a skipped replay)
COMMIT_WINDOW = {"before_commit": (2, False), "commit_publish": (2, False), "after_commit": (3, True)}


# The kill in the commit itself (the log file's conditional create: one PUT, commit_publish fires just before it) on
# Azurite. On moto it leaves the store as the kill before the commit does (the data files placed, no log object): the
# sink's restart from that state is [before_commit-moto], and the log's commit on moto is also killed in a
# plain-Python write_batch writer (test_chain_crash.py::test_job_killed_in_the_commit_window_on_moto: the same log
# code, no JVM). The kills before and after the commit (uncommitted data files; a commit Spark's checkpoint has not
# recorded) are the same on both stores, one store each: the suite's time
KILLS = [("commit_publish", "azurite"), ("before_commit", "moto"), ("after_commit", "azurite")]


@pytest.mark.parametrize(("failpoint", "backend_name"), KILLS)
def test_commit_window_kill_on_object_store(spark, request, tmp_path: Path, backend_name: str, failpoint: str) -> None:
    backend = make_backend(backend_name, request, tmp_path)
    ids = write_inputs(tmp_path / "in", range(FILES), ROWS)
    config = {
        "input": str(tmp_path / "in"),
        "out": backend.url,
        "checkpoint": str(tmp_path / "ckpt"),
        "max_files_per_trigger": 1,
        "sink": {"compact_interval": 3, "storage_options": backend.storage_options},
    }
    log_latest, replay_skipped = COMMIT_WINDOW[failpoint]

    killed = run_child(tmp_path, config, failpoints=f"{failpoint}=kill@4", state_dir=tmp_path / "fp")

    assert_sigkilled(killed)
    log = MetadataLog(backend.url, storage_options=backend.storage_options)
    assert log.latest_batch_id() == log_latest
    assert latest_commit(tmp_path / "ckpt") == 2
    on_store = {i.path for i in log.storage.find(log.storage.root) if i.path.endswith(".parquet")}
    committed = {f.path for f in committed_files(backend.url, storage_options=backend.storage_options)}
    assert committed <= on_store
    if failpoint != "after_commit":
        assert on_store - committed, "the killed batch's data files should be on the store, uncommitted"
    prefix = [i for i in ids if i // 1000 <= log_latest]
    assert_same_ids(committed_ids(backend.url, storage_options=backend.storage_options), prefix, "at the kill")

    restarted = run_in_process(spark, tmp_path, config)

    assert_ok(restarted)
    assert restarted.progress()[0]["skipped"] is replay_skipped
    assert_same_ids(committed_ids(backend.url, storage_options=backend.storage_options), ids, "after restart")
    assert MetadataLog(backend.url, storage_options=backend.storage_options).latest_batch_id() == latest_commit(tmp_path / "ckpt")
    if backend.secret:
        assert backend.secret not in killed.log_tail(10**7) + restarted.log_tail(10**7)
