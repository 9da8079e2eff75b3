"""``optimize`` beside other writers and under SIGKILL (issue 37 item 3), with real processes:

* a SIGKILL at each step of the swap (new files written, empty batches, before the commit, the compact file's
  publish and compaction, its columnar copy, after the commit) leaves the old or the new files committed and
  nothing else visible to ``read_committed`` and ``spark.read.parquet``; a rerun completes, and ``vacuum`` then
  removes the leftovers;
* two optimizes of the same files at once: one wins, the other gives its bins up and deletes its files;
* a ``write_batch`` writer losing the race to an optimize commits at the next log batch, and an optimize losing
  to a writer (which wrote the compaction batch itself) moves to the next compaction batch;
* a streaming query (a real Spark query with the sink) runs while optimizes run in a loop: no lost or doubled row;
* the same with both killed at random moments, again and again, and restarted: every reader (``read_committed``,
  ``spark.read.parquet``, the Delta log through delta-rs) holds every input row once.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from parquet_sink import MetadataLog, history, read_committed, write_batch
from parquet_sink.maintenance import optimize, vacuum
from tests.helpers.chain_child import writer_rows
from tests.helpers.crash_util import (
    assert_group_gone,
    assert_ok,
    assert_same_ids,
    assert_sigkilled,
    committed_ids,
    committed_paths,
    orphans,
    run_child,
    run_in_process,
    spark_ids,
    start_child,
    write_inputs,
)

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
OPTIMIZE_CHILD = HELPERS / "optimize_child.py"
CHAIN_CHILD = HELPERS / "chain_child.py"
ROWS = 5


def _append(out: Path, versions: range, compact_interval: int = 10) -> list[int]:
    ids = []
    for v in versions:
        table = writer_rows(v % 3, v, ROWS)  # app = v % 3: three partitions
        write_batch(str(out), table, app_id="loop", version=v, partition_by=["app"], compact_interval=compact_interval)
        ids += table.column("id").to_pylist()
    return ids


def _wait_stopped(child) -> None:
    process = psutil.Process(child.proc.pid)
    while process.status() != psutil.STATUS_STOPPED:
        assert child.proc.poll() is None, child.log_tail()
        time.sleep(0.02)


def _assert_readers(spark, out: Path, expected: list[int]) -> None:
    assert_same_ids(committed_ids(out), expected, "read_committed")
    assert_same_ids(spark_ids(spark, out), expected, "spark.read.parquet")
    assert MetadataLog(str(out)).check() == []


@pytest.mark.parametrize(
    "failpoint",
    [
        "optimize_write=kill",
        "optimize_padding=kill@3",
        "optimize_commit=kill",
        "commit_publish=kill@7",  # six empty batches (13..18) published, then the compact file 19.compact
        "compaction=kill",
        "sidecar=kill",
        "optimize_after_commit=kill",
    ],
)
def test_sigkill_at_each_step_of_the_swap(spark, tmp_path: Path, failpoint: str) -> None:
    out = tmp_path / "out"
    expected = _append(out, range(13))
    before = committed_paths(out)

    child = run_child(tmp_path / "children", {"out": str(out)}, failpoints=failpoint, script=OPTIMIZE_CHILD)

    assert_sigkilled(child)
    _assert_readers(spark, out, expected)
    swapped = (out / "_spark_metadata" / "19.compact").exists()
    now = committed_paths(out)
    assert (now.isdisjoint(before) and len(now) == 3) if swapped else now == before  # old or new, never both

    rerun = optimize(str(out))  # completes the work (or finds it done)
    assert rerun.committed == (failpoint not in ("sidecar=kill", "optimize_after_commit=kill"))
    _assert_readers(spark, out, expected)
    assert len(read_committed(str(out)).column("id")) == len(expected)
    time.sleep(0.01)
    vacuum(str(out), "1ms", allow_short_retention=True, include_files_before_log=True)
    assert orphans(out) == set()
    _assert_readers(spark, out, expected)


def test_two_optimizes_at_once_do_not_both_win(spark, tmp_path: Path) -> None:
    out = tmp_path / "out"
    expected = _append(out, range(13))
    first = start_child(tmp_path / "children", {"out": str(out)}, failpoints="optimize_commit=stop", script=OPTIMIZE_CHILD)
    _wait_stopped(first)  # its new files are written, its commit not begun

    second = optimize(str(out))
    os.kill(first.proc.pid, signal.SIGCONT)
    first.wait()

    assert_ok(first)
    assert second.committed and second.log_batch_id == 19
    outcome = first.result()
    assert outcome["committed"] is False and outcome["abandoned"] == len(second.plan.bins)
    assert not any(os.path.exists(p) for p in outcome["files"])  # the loser deleted its uncommitted files
    _assert_readers(spark, out, expected)
    operations = [r["operation"] for r in history(str(out)).to_pylist()]
    assert operations.count("optimize") == 1


def test_a_writer_losing_to_an_optimize_commits_at_the_next_batch(spark, tmp_path: Path) -> None:
    out = tmp_path / "out"
    expected = _append(out, range(13))
    writer = start_child(
        tmp_path / "children",
        {"mode": "writer", "out": str(out), "app_id": "loop", "app_index": 1, "versions": [13], "rows": ROWS,
         "partition_by": ["app"]},
        failpoints="before_commit=stop", script=CHAIN_CHILD,
    )
    _wait_stopped(writer)  # it read the log at batch 12 and will try to commit batch 13

    swap = optimize(str(out))
    os.kill(writer.proc.pid, signal.SIGCONT)
    writer.wait()

    assert_ok(writer)
    assert swap.committed and swap.log_batch_id == 19 and swap.padding_batches == list(range(13, 19))
    (written,) = writer.progress()
    assert written["committed"] and written["log_batch_id"] == 20 and written["conflicts"] >= 1
    _assert_readers(spark, out, expected + writer_rows(1, 13, ROWS).column("id").to_pylist())


def test_an_optimize_losing_to_a_writer_moves_to_the_next_compaction_batch(spark, tmp_path: Path) -> None:
    out = tmp_path / "out"
    expected = _append(out, range(13))
    child = start_child(tmp_path / "children", {"out": str(out)}, failpoints="optimize_commit=stop", script=OPTIMIZE_CHILD)
    _wait_stopped(child)  # planned against batch 12, aiming at 19

    expected += _append(out, range(13, 21))  # log batches 13..20: the writer compacts 19 itself
    os.kill(child.proc.pid, signal.SIGCONT)
    child.wait()

    assert_ok(child)
    outcome = child.result()
    assert outcome["committed"] and outcome["log_batch_id"] == 29 and outcome["padding"] == list(range(21, 29))
    _assert_readers(spark, out, expected)


def test_an_optimize_planned_before_the_first_compact_file_takes_the_interval_a_writer_shows(spark, tmp_path: Path) -> None:
    """An optimize planned while the log had no compact file (so its interval was the default, 10) stops before
    its commit; a writer with compact_interval=3 meanwhile commits batches 2..8 and compacts at 2, 5 and 8. The
    optimize then commits its swap at a compaction batch of that interval, 11 after empty batches 9 and 10 (before:
    it tried 9, which the log refused: "not a compaction batch")."""
    out = tmp_path / "out"
    expected = _append(out, range(0, 6, 3), compact_interval=3)  # log batches 0, 1 (app=0 twice): no compact file
    child = start_child(tmp_path / "children", {"out": str(out)}, failpoints="optimize_commit=stop", script=OPTIMIZE_CHILD)
    _wait_stopped(child)

    expected += _append(out, range(6, 13), compact_interval=3)  # log batches 2..8
    assert {p.name for p in (out / "_spark_metadata").glob("*.compact")} == {"2.compact", "5.compact", "8.compact"}
    os.kill(child.proc.pid, signal.SIGCONT)
    child.wait()

    assert_ok(child)
    outcome = child.result()
    assert outcome["committed"] and outcome["log_batch_id"] == 11 and outcome["padding"] == [9, 10], outcome
    _assert_readers(spark, out, expected)


@pytest.mark.parametrize("partition_by", [None, ["bucket"]])  # bucket: id % 3 (crash_child's attempt_bucket)
def test_a_streaming_query_runs_while_optimizes_run(spark, tmp_path: Path, partition_by) -> None:
    inputs = write_inputs(tmp_path / "in", range(12), 10)
    out = tmp_path / "out"
    query = start_child(tmp_path, {
        "input": str(tmp_path / "in"), "out": str(out), "checkpoint": str(tmp_path / "ckpt"),
        "max_files_per_trigger": 1, "sink": {"partition_by": partition_by} if partition_by else {},
        "attempt_bucket": bool(partition_by),
    })
    swaps = 0
    while query.proc.poll() is None:
        if query.progress():  # the query committed its first batch
            swaps += optimize(str(out), target_file_size="1MB").committed
        time.sleep(0.2)
    query.wait()
    assert_ok(query)
    swaps += optimize(str(out), target_file_size="1MB").committed
    assert swaps >= 1
    _assert_readers(spark, out, inputs)
    assert len(query.progress()) == 12  # every batch of the query ran once and none failed


@pytest.mark.soak
def test_stream_and_optimizes_killed_at_random(spark, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A partitioned stream with a Delta log runs while optimizes run one after the other; the optimizes and
    the stream are SIGKILLed at random moments (or finish first) and the stream restarted, round after round.
    Then the stream runs to its end and a last optimize: every input row once in every reader."""
    import deltalake

    from parquet_sink import sync_delta_log

    seed = int(os.environ.get("CRASH_SOAK_SEED") or random.SystemRandom().randrange(2**32))
    rng = random.Random(seed)
    writer = rng.choice(["spark", "arrow"])
    out = tmp_path / "out"
    config = {
        "input": str(tmp_path / "in"), "out": str(out), "checkpoint": str(tmp_path / "ckpt"), "max_files_per_trigger": 1,
        "sink": {"partition_by": ["bucket"], "writer": writer, "compact_interval": 3, "delta_log": True},
        "attempt_bucket": True,
    }
    ids: list[int] = []
    history_: list[str] = [f"writer {writer}"]
    for round_ in range(6 if request.config.getoption("--soak") else 2):
        ids += write_inputs(tmp_path / "in", range(8 * round_, 8 * round_ + 8), 10)
        stream = start_child(tmp_path, config)
        deadline = time.monotonic() + 180
        while stream.proc.poll() is None and not stream.progress() and time.monotonic() < deadline:
            time.sleep(0.05)
        stop_at = time.monotonic() + rng.uniform(0.3, 3.0)
        while stream.proc.poll() is None and time.monotonic() < stop_at:
            # the stream's interval: before the first compact file the log cannot tell it, and an optimize assuming
            # another commits its empty batches as deltas where the stream commits compact files (N beside N.compact)
            optimizer = start_child(tmp_path / "optimizes", {
                "out": str(out), "kwargs": {"target_file_size": "1MB", "compact_interval": 3},
            }, script=OPTIMIZE_CHILD)
            delay = rng.uniform(0.2, 2.5)
            try:
                optimizer.returncode = optimizer.proc.wait(delay)
                assert optimizer.returncode == 0, f"seed {seed}: {optimizer.result()} {optimizer.log_tail()}"
                history_.append(f"optimize finished: {optimizer.result()['log_batch_id']}")
            except subprocess.TimeoutExpired:
                optimizer.kill()
                optimizer.wait()
                history_.append(f"optimize killed after {delay:.2f}s")
            assert_group_gone(optimizer.pgid)
        if stream.proc.poll() is None:
            stream.kill()
            stream.wait()
            history_.append(f"stream killed at log batch {MetadataLog(str(out)).latest_batch_id()}")
        else:
            stream.wait()
            assert_ok(stream)
            history_.append("stream finished")
        assert_group_gone(stream.pgid)
    print(f"soak seed {seed}:", *history_, sep="\n  ")

    try:
        assert_ok(run_in_process(spark, tmp_path, config))  # on the test's driver: no JVM start
        optimize(str(out), target_file_size="1MB")
        _assert_readers(spark, out, ids)
        sync_delta_log(str(out))  # a stream killed between a commit and its Delta commit: the next one catches up
        assert_same_ids(deltalake.DeltaTable(str(out)).to_pyarrow_table(columns=["id"]).column("id").to_pylist(), ids,
                        "delta-rs")
    except AssertionError as exc:
        raise AssertionError(f"seed {seed} (CRASH_SOAK_SEED): {history_}: {exc}") from exc


def _stopped_optimize_overtaken(tmp_path: Path, failpoints: str) -> tuple[Path, list[int], object, set[str]]:
    """An optimize planned at log batch 12 (aiming at 19), stopped once its new files are written; then a writer
    commits log batches 13..20, the compaction batch 19 included. Returns the output, its rows, the stopped child
    and the optimize's new (uncommitted) files."""
    out = tmp_path / "out"
    expected = _append(out, range(13))
    child = start_child(tmp_path / "children", {"out": str(out)}, failpoints=failpoints, script=OPTIMIZE_CHILD)
    _wait_stopped(child)
    new_files = orphans(out)
    assert len(new_files) == 3  # one per partition
    expected += _append(out, range(13, 21))
    return out, expected, child, new_files


def test_vacuum_keeps_the_files_of_an_optimize_whose_compaction_batch_a_writer_took(tmp_path: Path) -> None:
    """The optimize's lease lives until an optimize commits at its batch, not only while that batch is free: a
    vacuum (--older-than 1ms) run after a writer took batch 19 keeps the optimize's files, and the optimize then
    commits them at 29. Before, the lease was dead once batch 19 existed, the vacuum deleted the three files, and
    the optimize committed them anyway: every row of the output unreadable (MissingDataFileError)."""
    out, expected, child, new_files = _stopped_optimize_overtaken(tmp_path, "optimize_commit=stop")
    plan = vacuum(str(out), "1ms", allow_short_retention=True).plan

    assert {info.path for info in plan.in_flight} == new_files and plan.orphans == []
    os.kill(child.proc.pid, signal.SIGCONT)
    child.wait()
    assert_ok(child)
    assert child.result()["committed"] and child.result()["log_batch_id"] == 29
    assert_same_ids(committed_ids(out), expected, "read_committed")
    assert new_files <= committed_paths(out)
    vacuum(str(out), "1ms", allow_short_retention=True)  # the lease is dead now: the replaced files go
    assert orphans(out) == set() and not list((out / "_exactly_once" / "leases").iterdir())
    assert_same_ids(committed_ids(out), expected, "read_committed")


def test_a_moved_optimize_lease_still_protects_the_files_written_before_it(tmp_path: Path) -> None:
    """Overtaken at its compaction batch, the optimize moves its lease to the next one (29) before its empty
    batches; the moved lease protects from the first one's time, so the files written before the move are kept by
    a vacuum that runs while it commits its empty batches, however long after their writing the move came (the
    moved lease's time set an hour ahead, as after an hour-long rewrite)."""
    stops = "optimize_commit=stop,optimize_padding=stop"
    out, expected, child, new_files = _stopped_optimize_overtaken(tmp_path, stops)
    leases_dir = out / "_exactly_once" / "leases"
    first_lease = {p.name for p in leases_dir.iterdir()}
    os.kill(child.proc.pid, signal.SIGCONT)
    _wait_stopped(child)  # before its first empty batch (21), its lease moved to 29
    (moved,) = leases_dir.iterdir()
    assert moved.name not in first_lease and moved.name.startswith(".29-")
    hour_later = time.time() + 3600
    os.utime(moved, (hour_later, hour_later))

    plan = vacuum(str(out), "1ms", allow_short_retention=True).plan
    assert {info.path for info in plan.in_flight} == new_files and plan.orphans == []
    os.kill(child.proc.pid, signal.SIGCONT)
    child.wait()
    assert_ok(child)
    assert child.result()["log_batch_id"] == 29
    assert_same_ids(committed_ids(out), expected, "read_committed")


def _assert_gave_one_bin_up(child, out: Path, expected) -> None:
    """Resume the stopped optimize ``child``: it commits, having given up one of its three bins, and the output
    holds every row of ``expected`` once."""
    os.kill(child.proc.pid, signal.SIGCONT)
    child.wait()
    assert_ok(child)
    outcome = child.result()
    assert outcome["committed"] and outcome["abandoned"] == 1 and len(outcome["files"]) == 2
    assert_same_ids(committed_ids(out), expected, "read_committed")
    assert MetadataLog(str(out)).check() == []


def test_an_optimize_whose_new_file_vanished_gives_that_bin_up(tmp_path: Path) -> None:
    """A new file deleted while the optimize waits (a vacuum ignoring its lease, a hand clean-up): after its lost
    race the optimize checks its files and gives that bin up (the old files stay committed) instead of naming a
    missing file in the log; the other bins are swapped."""
    out, expected, child, new_files = _stopped_optimize_overtaken(tmp_path, "optimize_commit=stop")
    gone = sorted(new_files)[0]
    os.remove(gone)
    _assert_gave_one_bin_up(child, out, expected)


def test_an_optimize_whose_inputs_another_optimize_replaced_and_a_vacuum_deleted_gives_those_bins_up(
    tmp_path: Path,
) -> None:
    """An optimize stopped after its plan (its lease taken, nothing read yet); another optimize rewrites the
    partition app=0 and a vacuum (--older-than 1ms) deletes the files it replaced. The first then gives up its
    bin of app=0 (its inputs are no longer committed) and swaps the other two. Before, it failed with a bare
    FileNotFoundError from pyarrow."""
    out = tmp_path / "out"
    expected = _append(out, range(13))
    child = start_child(
        tmp_path / "children", {"out": str(out)}, failpoints="optimize_write=stop", script=OPTIMIZE_CHILD
    )
    _wait_stopped(child)
    assert optimize(str(out), partitions={"app": "0"}).log_batch_id == 19
    time.sleep(0.01)
    assert len(vacuum(str(out), "1ms", allow_short_retention=True).plan.orphans) == 5  # app=0's five small files

    _assert_gave_one_bin_up(child, out, expected)


def test_an_optimize_whose_committed_input_was_deleted_by_hand_raises_a_typed_error(tmp_path: Path) -> None:
    """A committed input deleted outside the sink while the optimize runs: MissingDataFileError naming the file
    and its batch, nothing swapped (before: a bare FileNotFoundError)."""
    out = tmp_path / "out"
    _append(out, range(13))
    child = start_child(
        tmp_path / "children", {"out": str(out)}, failpoints="optimize_write=stop", script=OPTIMIZE_CHILD
    )
    _wait_stopped(child)
    lost = min(committed_paths(out))
    os.remove(lost)
    before = committed_paths(out)

    os.kill(child.proc.pid, signal.SIGCONT)
    child.wait()
    outcome = child.result()
    assert child.returncode == 3 and outcome["type"] == "MissingDataFileError", outcome
    assert f"committed file {lost} of batch" in outcome["message"] and "Nothing was swapped" in outcome["message"]
    assert committed_paths(out) == before
