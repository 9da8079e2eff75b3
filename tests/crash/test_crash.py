"""Crash and race suite: prove exactly-once by breaking things.

* The driver is SIGKILLed (with its JVM and Python workers) at every failpoint of the write path, then
  restarted from the same checkpoint: every input row is committed exactly once, the checkpoint and
  the log agree batch by batch, and what a reader sees at the kill point is whole batches only. The
  log's own work after a commit (a compact file's columnar copy, the cleanup) is killed in a plain-Python
  ``write_batch`` writer (``tests/helpers/chain_child.py``): the same log code, without a JVM.
* A soak kills the driver at random moments during a partitioned stream, on each writer path (2 kills
  each; 10 with ``--soak``), and Spark's own reader checks every row is there once.
* An executor task attempt writes its files and then fails; Spark retries it.
* Two queries race for one output; a reader reads in a loop while batches, compactions and log
  cleanups happen.
* The fault-tolerance example of the seeds: a record fails on the first run, the query dies, the
  restart from the checkpoint outputs every record exactly once.

Each killed query runs in a child process (``tests/helpers/crash_child.py``); the rest runs on the shared
session. See ``tests/helpers/crash_util.py`` for the checks.
"""

from __future__ import annotations

import logging
import os
import random
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyspark
import pytest

from parquet_sink.log.files import parse_batch_name
from parquet_sink import MetadataLog, ParquetSink, read_committed, write_batch
from parquet_sink.log.entry import CommitRecord, attribute
from tests.helpers.chain_child import writer_rows
from tests.helpers.jvm_archive import driver_java_options
from tests.helpers.spark_util import spark_home_for_local_cluster
from tests.helpers.crash_util import (
    SCHEMA,
    assert_committed_prefix,
    assert_parquet_sink,
    assert_group_gone,
    assert_ok,
    assert_same_ids,
    assert_sigkilled,
    committed_ids,
    committed_paths,
    file_ids,
    ids_of_files,
    latest_commit,
    log_files,
    orphans,
    parquet_on_disk,
    run_child,
    run_in_process,
    spark_ids,
    staged_files,
    start_child,
    vacuum,
    write_inputs,
)

ROWS = 30  # rows per input file; one input file per micro-batch
CHAIN_CHILD = Path(__file__).resolve().parents[1] / "helpers" / "chain_child.py"
SINK = {"compact_interval": 3, "min_batches_to_retain": 2, "cleanup_delay": "0s"}  # compacts 2, 5, 8


def child_config(tmp_path: Path, **overrides) -> dict:
    config = {
        "input": str(tmp_path / "in"),
        "out": str(tmp_path / "out"),
        "checkpoint": str(tmp_path / "ckpt"),
        "max_files_per_trigger": 1,
        "sink": dict(SINK),
    }
    config.update(overrides)
    return config


# -- driver kills at every failpoint ---------------------------------------------------------------


@dataclass(frozen=True)
class KillCase:
    files: int  # input files = batches of the whole run
    nth: int  # the failpoint kills on its nth hit
    log_latest: int  # newest log batch left by the kill
    commit_latest: int  # newest batch in the checkpoint's commits/ left by the kill
    orphan_batch: int | None  # the batch whose data files the kill leaves on disk, uncommitted
    temp: str | None = None  # regex of the unpublished log temp file the kill leaves behind
    replay_skipped: bool = False  # the restart replays a batch the log already has: the sink skips it
    orphan_rows: int | None = None  # only this many of orphan_batch's rows were published (None: all)
    staged_batch: int | None = None  # Spark path: the batch whose complete files wait in staging
    sink: dict = field(default_factory=dict)  # extra ParquetSink options
    task_failpoint: bool = False  # the child passes rows through a mapInArrow hitting task_write


# With compact_interval=3 and one input file (one task) per batch, the hits are:
#   before_write / task_write / before_commit / commit_publish / after_commit / before_publish: one per
#     batch, @4 = batch 3; publish_rename: one per published file (3 per batch with max_records_per_file=10:
#     @11 = batch 3 after its second file);
#   compaction: one per source log file of a compaction: batch 2 reads 0, 1; batch 5 reads 2.compact, 3, 4
#     (@4 = batch 5, after copying 2.compact and 3);
#   sidecar: one per compaction, after the compact file is committed (@2 = batch 5);
#   cleanup (min_batches_to_retain=2, cleanup_delay=0s): one per deleted log file: batch 4 deletes 0, 1;
#     batch 7 deletes 2.compact, 3, 4 (Spark's rule; @4 = batch 7, after two of those three).
# Both writer paths run the kill that leaves the writer's files behind (before_commit): each path places its files
# its own way. On the Arrow path a task's task_write fires once its files are closed (one file per task here): the
# state before_commit leaves, the kill sent from a Python worker instead of the driver (as [spark-task_write]'s); the
# Arrow writer's task_write with some files done is the chain's (test_chain_crash.py: the same write_rows), and a
# failed Arrow task's files are test_task_attempt_fails_after_writing_files'. The kills before any writing
# (before_write: the writer path is not chosen yet) and in or after the log commit (commit_publish, after_commit: the
# files are placed, only the log and the sink's replay check run) are the same code on both paths and run on the
# Spark path here; the Arrow path's commit_publish and after_commit kills run on the object stores
# (test_backend_crash.py, where the default writer is the Arrow path). The log's own failpoints do not depend on the
# writer: a kill in a compaction leaves the sink's batch uncommitted and runs on the Spark path; the kills after the
# commit (sidecar, cleanup) leave the sink nothing to recover but the replay after_commit shows, and run in a
# plain-Python write_batch writer (test_writer_killed_in_the_logs_own_work_after_its_commit: no JVM). On the Spark
# path a task dies inside Spark's writer (its files stay in the hidden staging directory), files wait in staging after
# the job, and a kill half-way through the renames leaves part of the batch published, uncommitted.
_BEFORE_COMMIT = KillCase(files=6, nth=4, log_latest=2, commit_latest=2, orphan_batch=3)
KILL_CASES = {
    ("arrow", "before_commit"): _BEFORE_COMMIT,
    ("spark", "before_write"): KillCase(files=6, nth=4, log_latest=2, commit_latest=2, orphan_batch=None),
    ("spark", "before_commit"): _BEFORE_COMMIT,
    ("spark", "commit_publish"): KillCase(
        files=6, nth=4, log_latest=2, commit_latest=2, orphan_batch=3, temp=r"\.3\.[0-9a-f]+\.tmp"
    ),
    ("spark", "after_commit"): KillCase(
        files=6, nth=4, log_latest=3, commit_latest=2, orphan_batch=None, replay_skipped=True
    ),
    ("spark", "task_write"): KillCase(
        files=6, nth=4, log_latest=2, commit_latest=2, orphan_batch=None, task_failpoint=True
    ),
    ("spark", "before_publish"): KillCase(
        files=6, nth=4, log_latest=2, commit_latest=2, orphan_batch=None, staged_batch=3
    ),
    ("spark", "publish_rename"): KillCase(
        files=6, nth=11, log_latest=2, commit_latest=2, orphan_batch=3, orphan_rows=20,
        sink={"max_records_per_file": 10},
    ),
    ("spark", "compaction"): KillCase(
        files=7, nth=4, log_latest=4, commit_latest=4, orphan_batch=5, temp=r"\.5\.compact\.[0-9a-f]+\.tmp"
    ),
}


@pytest.mark.parametrize(("writer", "failpoint"), list(KILL_CASES), ids=[f"{w}-{f}" for w, f in KILL_CASES])
def test_driver_killed_at_failpoint(spark, tmp_path: Path, writer: str, failpoint: str) -> None:
    case = KILL_CASES[writer, failpoint]
    ids = write_inputs(tmp_path / "in", range(case.files), ROWS)
    config = child_config(tmp_path, sink=dict(SINK, writer=writer, **case.sink), task_failpoint=case.task_failpoint)
    out, ckpt, state = tmp_path / "out", tmp_path / "ckpt", tmp_path / "failpoints"

    killed = run_child(tmp_path, config, failpoints=f"{failpoint}=kill@{case.nth}", state_dir=state)

    # It died by SIGKILL, at the failpoint's nth hit, with the log and checkpoint where that point is.
    assert_sigkilled(killed)
    tickets = sorted(p.name for p in state.iterdir() if p.name.startswith(failpoint + "."))
    assert len(tickets) == case.nth, f"{failpoint} was hit {len(tickets)} times, expected death at hit {case.nth}"
    assert MetadataLog(str(out)).latest_batch_id() == case.log_latest
    assert latest_commit(ckpt) == case.commit_latest
    assert [p["batch_id"] for p in killed.progress()] == list(range(case.commit_latest + 1))
    left = orphans(out)
    if case.orphan_batch is None:
        assert not left, f"unexpected uncommitted data files: {left}"
    else:
        # The killed batch's files are on disk, complete, and not in the log.
        assert left, f"the kill at {failpoint} should leave uncommitted data files of batch {case.orphan_batch}"
        orphan_ids = ids_of_files(left)
        if case.orphan_rows is None:
            assert_same_ids(orphan_ids, file_ids(case.orphan_batch, ROWS), "rows of the uncommitted files")
        else:
            assert len(orphan_ids) == case.orphan_rows and set(orphan_ids) < set(file_ids(case.orphan_batch, ROWS))
    if case.staged_batch is not None:
        assert_same_ids(ids_of_files(staged_files(out)), file_ids(case.staged_batch, ROWS), "rows left in staging")
        # staged through Hadoop's raw local filesystem: no .crc files (each would cost a chmod process)
        assert not list((Path(out) / "_exactly_once" / "staging").rglob("*.parquet.crc"))
    names = log_files(out)
    if case.temp:
        assert any(re.fullmatch(case.temp, n) for n in names), f"no unpublished log temp file in {names}"
    # What readers see at the kill point: exactly the whole committed batches, never the orphans.
    assert assert_committed_prefix(out, ckpt, ROWS) == case.log_latest
    prefix = [i for f in range(case.log_latest + 1) for i in file_ids(f, ROWS)]
    assert_same_ids(spark_ids(spark, out), prefix, "spark.read.parquet at the kill point")

    restarted = run_in_process(spark, tmp_path, dict(config, task_failpoint=False))

    assert_ok(restarted)
    first = restarted.progress()[0]
    assert first["batch_id"] == case.commit_latest + 1, restarted.progress()
    assert first["skipped"] is case.replay_skipped, f"replayed batch {first}"
    assert_parquet_sink(spark, out, ckpt, ids, ROWS)
    assert left <= parquet_on_disk(out), "uncommitted files are left for vacuum, not deleted or committed"
    assert not (left & committed_paths(out)), "an uncommitted file of the killed attempt got committed"

    # vacuum removes what the dead attempt left (published orphans, staging, its lease), nothing else.
    _assert_vacuum_deletes_exactly(out, left)
    assert_parquet_sink(spark, out, ckpt, ids, ROWS)


def _assert_vacuum_deletes_exactly(out: Path, left: set[str]) -> None:
    """vacuum deletes the data files ``left`` (a dead attempt's), nothing else: what stays on disk is what the log
    commits, and no staged file, lease or staging directory entry is left."""
    cleaned = vacuum(out)
    assert {f["path"] for f in cleaned["files"]} == left
    assert parquet_on_disk(out) == committed_paths(out) and not staged_files(out)
    for hidden in ("leases", "staging"):
        directory = out / "_exactly_once" / hidden
        assert not directory.exists() or not any(directory.iterdir()), f"{hidden}: {list(directory.iterdir())}"


# the log's own work after a commit, killed: failpoint -> (its hit killed, the log batch (version) just committed)
LOG_KILLS = {"sidecar": (2, 5), "cleanup": (4, 7)}


@pytest.mark.parametrize("failpoint", list(LOG_KILLS))
def test_writer_killed_in_the_logs_own_work_after_its_commit(spark, tmp_path: Path, failpoint: str) -> None:
    """A ``write_batch`` writer (the log's rules of SINK) SIGKILLed after committing a batch, in the log's own work:
    the columnar copy of the compact file 5.compact (sidecar), or half-way through deleting the old log files
    (cleanup). Readers see exactly the committed batches; the rerun of the same versions skips the killed one and
    commits the rest (the next compaction, 8, reads 5.compact as JSON and writes its own copy); vacuum then finds
    no data file to delete and leaves no lease."""
    nth, killed_at = LOG_KILLS[failpoint]
    out, state, rows = tmp_path / "out", tmp_path / "failpoints", 10
    versions = range(9)
    config = {"mode": "writer", "out": str(out), "app_id": "w", "app_index": 1, "versions": list(versions),
              "rows": rows, "log": SINK}

    killed = run_child(tmp_path / "children", config, failpoints=f"{failpoint}=kill@{nth}", state_dir=state,
                       script=CHAIN_CHILD)

    assert_sigkilled(killed)
    tickets = sorted(p.name for p in state.iterdir() if p.name.startswith(failpoint + "."))
    assert len(tickets) == nth, f"{failpoint} was hit {len(tickets)} times, expected death at hit {nth}"
    assert MetadataLog(str(out)).latest_batch_id() == killed_at
    assert [p["version"] for p in killed.progress()] == list(range(killed_at)), "the killed call never returned"
    names = log_files(out)
    if failpoint == "sidecar":  # batch 5 committed, its columnar copy never written: readers use the JSON
        assert "5.compact" in names and "5.compact.columnar" not in names and "2.compact.columnar" in names
    if failpoint == "cleanup":
        assert "0" not in names and "1" not in names, names
        assert len({"2.compact", "3", "4"} & set(names)) == 1, f"the kill should interrupt cleanup: {names}"
    assert not orphans(out), "a kill after the commit leaves no uncommitted data file"

    def ids_of(written: range) -> list[int]:
        return [i for v in written for i in writer_rows(1, v, rows).column("id").to_pylist()]

    prefix = ids_of(range(killed_at + 1))
    assert_same_ids(committed_ids(out), prefix, "read_committed at the kill point")
    assert_same_ids(spark_ids(spark, out), prefix, "spark.read.parquet at the kill point")

    # The rerun (never killed: in this process) of every version: the ones committed, the killed one included, skip.
    results = [write_batch(str(out), writer_rows(1, v, rows), app_id="w", version=v, **SINK) for v in versions]

    assert [r.committed for r in results] == [v > killed_at for v in versions]
    assert [r.log_batch_id for r in results if r.committed] == list(range(killed_at + 1, len(versions)))
    assert "8.compact.columnar" in log_files(out) and MetadataLog(str(out)).check() == []
    everything = ids_of(versions)
    assert_same_ids(committed_ids(out), everything, "read_committed after the rerun")
    assert_same_ids(spark_ids(spark, out), everything, "spark.read.parquet after the rerun")
    _assert_vacuum_deletes_exactly(out, set())


# -- random kills ----------------------------------------------------------------------------------


@pytest.mark.soak
@pytest.mark.parametrize("writer", ["spark", "arrow"])
def test_random_kill_soak(spark, tmp_path: Path, request: pytest.FixtureRequest, writer: str) -> None:
    """Kill the child's process group after a random delay, again and again, then let it finish: a long
    partitioned stream on each writer path, checked at the end by Spark's own reader (every row once)."""
    kills_wanted = 10 if request.config.getoption("--soak") else 2
    seed = int(os.environ.get("CRASH_SOAK_SEED") or random.SystemRandom().randrange(2**32))
    rng = random.Random(seed)
    rows, per_round = 20, 4
    config = child_config(tmp_path, sink=dict(SINK, writer=writer, partition_by=["file"], max_records_per_file=7))
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    ids: list[int] = []
    history: list[str] = []
    next_file = 0
    kills = 0
    for _ in range(3 * kills_wanted):
        if kills == kills_wanted:
            break
        ids += write_inputs(tmp_path / "in", range(next_file, next_file + per_round), rows)
        next_file += per_round
        child = start_child(tmp_path, config)
        # Mostly kill while batches run (a random delay after the run's first batch); sometimes while
        # the query is still starting up and replaying (a random delay after the session is up).
        early = rng.random() < 0.2
        deadline = time.monotonic() + 180
        while child.proc.poll() is None and time.monotonic() < deadline:
            if child.started_path.exists() and (early or child.progress()):
                break
            time.sleep(0.02)
        delay = rng.uniform(0.0, 4.0 if early else 2.0)
        moment = f"+{delay:.2f}s after {'the session started' if early else 'the first batch'}"
        try:
            child.returncode = child.proc.wait(delay)
            assert_ok(child)
            history.append(f"finished before the kill at {moment}")
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            assert_sigkilled(child)
            kills += 1
            history.append(
                f"killed at {moment}: log latest {MetadataLog(str(out)).latest_batch_id()}, "
                f"checkpoint commit {latest_commit(ckpt)}, log {log_files(out)}"
                + (" (first offset write interrupted: its temp file deleted)" if _clear_first_offset(ckpt) else "")
            )
        assert_group_gone(child.pgid)
        if (out / "_spark_metadata").exists():
            assert_committed_prefix(out, ckpt, rows)
    assert kills == kills_wanted, f"seed {seed}: only {kills} kills: {history}"
    print(f"soak seed {seed}:", *history, sep="\n  ")

    final = run_in_process(spark, tmp_path, config)  # the last restart is never killed: the test's driver runs it
    assert_ok(final)
    try:
        assert_parquet_sink(spark, out, ckpt, ids, rows)
    except AssertionError as exc:
        raise AssertionError(f"seed {seed} (CRASH_SOAK_SEED), kills: {history}: {exc}") from exc


def _clear_first_offset(ckpt: Path) -> bool:
    """Spark's trap, not the sink's: a driver killed while writing the query's very first offset file leaves only
    that write's temp file in ``offsets/``, and Spark 4 then refuses to start the query from the checkpoint
    (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY: "offsets should be empty on batch 0"). Delete the temp file, as a
    user must; True if there was one."""
    offsets = ckpt / "offsets"
    names = [p.name for p in offsets.iterdir()] if offsets.is_dir() else []
    if any(n.isdigit() for n in names) or not names:
        return False
    for name in names:
        (offsets / name).unlink()
    return True


# -- executor faults -------------------------------------------------------------------------------


def _retry_config(tmp_path: Path, writer: str, **overrides) -> dict:
    """Two input files per batch, one per task, up to 3 attempts per task (``local[2,3]``), 3 files per task."""
    return child_config(
        tmp_path,
        master="local[2,3]",
        max_files_per_trigger=2,
        sink=dict(SINK, max_records_per_file=7, writer=writer),  # Arrow path: task_write fires after the first
        conf={"spark.sql.files.maxPartitionBytes": "1048576"},  # one input file per task
        **overrides,
    )


def test_task_attempt_fails_after_writing_files(spark, tmp_path: Path) -> None:
    """Arrow writer path: the first task attempt (anywhere) writes a file and then fails; Spark retries the
    task (``local[2,3]``), the retry writes the rows again under new names. Only the accepted attempt's
    files are committed: no duplicates, the failed attempt's file stays on disk outside the log.

    This is also the duplicate-attempt (speculation) case: Spark never launches a speculative copy on
    a host that already runs an attempt of the task, and every executor of ``local-cluster[...]`` is
    on one host, so speculation cannot happen locally; an attempt that writes and then loses is what a
    speculative loser looks like on storage."""
    rows = 20
    ids = write_inputs(tmp_path / "in", range(6), rows)
    config = _retry_config(tmp_path, "arrow")
    out, state = tmp_path / "out", tmp_path / "failpoints"

    child = run_child(tmp_path, config, failpoints="task_write=raise@1", state_dir=state)

    assert_ok(child)
    # Every task attempt hits task_write once: one more hit than the tasks committed (3 files each).
    attempts = len(list(state.glob("task_write.*")))
    assert attempts == len(committed_paths(out)) // 3 + 1, f"{attempts} attempts, expected one retry"
    # The failed attempt's files (one task attempt: one uuid) stay on disk, outside the log: complete
    # files of 7 rows and the file it had open when it failed.
    left = orphans(out)
    assert left, "the failed attempt left no files"
    assert len({Path(p).name.split("-")[2].split(".")[0] for p in left}) == 1, left
    orphan_ids = ids_of_files(left)
    assert orphan_ids and len(orphan_ids) % 7 == 0 and set(orphan_ids) <= set(ids), orphan_ids
    # A reader listing the directory would see these rows twice; the log-based readers do not.
    assert len(ids_of_files(parquet_on_disk(out))) == len(ids) + len(orphan_ids)
    assert_parquet_sink(spark, out, tmp_path / "ckpt", ids, rows)
    assert sum(p["rows"] for p in child.progress()) == len(ids)


def test_task_attempt_fails_inside_spark_writer(spark, tmp_path: Path) -> None:
    """Spark writer path: the first task attempt fails while Spark's writer has its rows (the rows pass
    through a mapInArrow that raises after handing on its first batch); Spark retries the task. The failed
    attempt's output never leaves the hidden staging directory: nothing of it is published or committed,
    and the output holds every row exactly once."""
    rows = 20
    ids = write_inputs(tmp_path / "in", range(6), rows)
    config = _retry_config(tmp_path, "spark", task_failpoint=True)
    out, state = tmp_path / "out", tmp_path / "failpoints"

    child = run_child(tmp_path, config, failpoints="task_write=raise@1", state_dir=state)

    assert_ok(child)
    batches = len(child.progress())
    assert len(list(state.glob("task_write.*"))) == 2 * batches + 1, "every task once, plus one retried attempt"
    assert not orphans(out), "a failed attempt's files were published"
    assert parquet_on_disk(out) == committed_paths(out)
    assert_parquet_sink(spark, out, tmp_path / "ckpt", ids, rows)
    assert sum(p["rows"] for p in child.progress()) == len(ids)


def test_executor_dies_during_task_commit_on_local_cluster(spark, tmp_path: Path) -> None:
    """Spark writer path on ``local-cluster[2,1,1024]`` (executors are JVMs of their own): the first task
    attempt to commit halts its executor right after its task commit, before reporting success
    (``tests/helpers/java/HaltAfterTaskCommit.java``, Spark's sink's manifest commit protocol otherwise). Spark
    retries the task on a live executor, and the retry writes other files: its ``bucket`` partition value is not
    deterministic. The dead attempt's committed files stay in staging, but only the files of the attempts Spark
    accepted (their commit messages) are published: every row exactly once in both readers. (With ``df.write``
    and algorithm 2 the dead attempt's files, moved into staging at its task commit, were published too.)"""
    classes = tmp_path / "classes"
    jars = Path(pyspark.__file__).parent / "jars"
    java = Path(__file__).resolve().parents[1] / "helpers" / "java" / "HaltAfterTaskCommit.java"
    subprocess.run(["javac", "-nowarn", "-cp", f"{jars}/*", "-d", str(classes), str(java)], check=True)
    rows = 12
    ids = write_inputs(tmp_path / "in", range(2), rows)
    state, out = tmp_path / "failpoints", tmp_path / "out"
    config = child_config(
        tmp_path,
        master="local-cluster[2,1,1024]",
        max_files_per_trigger=2,
        attempt_bucket=True,
        sink=dict(SINK, writer="spark", partition_by=["bucket"]),
        conf={
            "spark.sql.files.maxPartitionBytes": "1048576",  # one input file per task
            "spark.sql.streaming.commitProtocolClass": "HaltAfterTaskCommit",
            "spark.driver.extraClassPath": str(classes),
            "spark.executor.extraClassPath": str(classes),
            "spark.executorEnv.PARQUET_SINK_FAILPOINT_STATE": str(state),
            # short-lived JVMs (with the run's class archive once it exists: tests/helpers/jvm_archive.py)
            "spark.executor.extraJavaOptions": driver_java_options("-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"),
        },
    )

    spark_home = spark_home_for_local_cluster(tmp_path)
    child = run_child(tmp_path, config, state_dir=state, env={"SPARK_HOME": str(spark_home)})

    assert_ok(child)
    assert (state / "task_commit.1").exists(), "no task commit halted its executor"
    buckets = {Path(p).parent.name for p in committed_paths(out)}
    assert "bucket=0" in buckets and buckets <= {"bucket=0", "bucket=1", "bucket=2"}, buckets
    assert_parquet_sink(spark, out, tmp_path / "ckpt", ids, rows)
    assert [p["rows"] for p in child.progress()] == [len(ids)]


# -- races -----------------------------------------------------------------------------------------


def _start_query(spark, input_dir: Path, checkpoint: Path, fn, max_files: int = 1):
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", max_files).json(str(input_dir))
    return (
        stream.writeStream.foreachBatch(fn)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def _await(query, timeout: float = 240) -> Exception | None:
    try:
        finished = query.awaitTermination(timeout)
    except Exception as exc:  # StreamingQueryException: the foreachBatch function raised
        return exc
    if not finished:
        query.stop()
        raise AssertionError(f"query {query.id} did not finish in {timeout}s")
    return None


def _recording(sink: ParquetSink, errors: list[Exception]):
    def fn(df, batch_id: int) -> None:
        try:
            sink(df, batch_id)
        except Exception as exc:
            errors.append(exc)
            raise

    return fn


def test_two_queries_race_for_one_output(spark, tmp_path: Path) -> None:
    """Two queries (two checkpoints) write one output at once. Both reach the commit of log batch 0
    together (a barrier holds the first commit of each): one wins, the loser re-reads the log, finds only
    the winner's append (no conflict) and commits its batch 0 as log batch 1, as Delta's optimistic
    transactions do; from then on both keep appending, each batch at the next free log batch. Neither query
    dies, nothing is duplicated or lost, and each query's records map its batches 0..4 once, in order.
    Restarted on its checkpoint, a query skips nothing new and commits nothing twice."""
    rows = 10
    inputs = {
        "a": write_inputs(tmp_path / "in-a", range(0, 5), rows),
        "b": write_inputs(tmp_path / "in-b", range(100, 105), rows),
    }
    out = tmp_path / "out"
    barrier = threading.Barrier(2, timeout=120)
    errors: dict[str, list[Exception]] = {"a": [], "b": []}
    queries = {}
    sinks = {}
    for name in ("a", "b"):
        sink = sinks[name] = ParquetSink(str(out), compact_interval=3)
        log = sink.log
        commit = log.add
        first = [True]

        def gated_add(batch_id, entries, commit=commit, first=first):
            if first[0]:
                first[0] = False
                barrier.wait()  # both queries have written batch 0 and computed log batch 0 as target
            return commit(batch_id, entries)

        log.add = gated_add
        fn = _recording(sink, errors[name])
        queries[name] = _start_query(spark, tmp_path / f"in-{name}", tmp_path / f"ckpt-{name}", fn)
    outcome = {name: _await(q) for name, q in queries.items()}

    assert errors == {"a": [], "b": []} and outcome == {"a": None, "b": None}, (errors, outcome)
    everything = inputs["a"] + inputs["b"]
    assert_same_ids(committed_ids(out), everything, "read_committed after the race")
    assert_same_ids(spark_ids(spark, out), everything, "spark.read.parquet after the race")
    lost = {name: sum(p.conflicts for p in sink.recent_progress) for name, sink in sinks.items()}
    assert sum(lost.values()) >= 1, f"the loser of log batch 0 (and later races) moved on: {lost}"
    log = MetadataLog(str(out))
    assert log.latest_batch_id() == 9 and log.check() == []
    kept = [r for r in map(CommitRecord.from_entry, log.all_files()) if r is not None]
    records = [r for _, r in sorted(attribute(kept, range(10)).items())]
    assert len(records) == 10, "every log batch attributed to its query"
    by_query: dict[str, list[int]] = {}
    for record in records:
        by_query.setdefault(record.query_id, []).append(record.query_batch_id)
    assert sorted(by_query.values()) == [list(range(5))] * 2, by_query
    assert not orphans(out), "every file written was committed"

    # Restarted on its checkpoint with nothing new: no batch runs, nothing is committed twice.
    for name in ("a", "b"):
        sink = ParquetSink(str(out), compact_interval=3)
        assert _await(_start_query(spark, tmp_path / f"in-{name}", tmp_path / f"ckpt-{name}", sink)) is None
    assert_same_ids(committed_ids(out), everything, "read_committed after the restarts")
    assert MetadataLog(str(out)).latest_batch_id() == 9


def _latest_in(out: Path) -> int:
    names = os.listdir(out / "_spark_metadata") if (out / "_spark_metadata").exists() else []
    return max((p[0] for p in map(parse_batch_name, names) if p), default=-1)


def test_reader_in_a_loop_sees_only_whole_batches(spark, tmp_path: Path, monkeypatch, caplog) -> None:
    """read_committed in a loop while a query commits batches, compacts every 3 and deletes old log
    files at once (cleanup_delay=0s): every read is whole batches 0..k (one input file each, in order),
    never a partial batch, never a duplicate, never an error, and k never goes back.

    Every 4th read (the first one included, which starts before the first compaction) pauses after
    listing the log, before opening its first log file, until the writer is 7 batches further: by then
    cleanup has deleted the files that read listed, so the reader must notice and re-read a newer
    snapshot (the race the cleanup delay usually hides)."""
    from parquet_sink.storage.filesystem import Storage

    rows, files = 10, 24
    ids = write_inputs(tmp_path / "in", range(files), rows)
    out = tmp_path / "out"
    stop, writer_done = threading.Event(), threading.Event()
    seen: list[int] = []
    failures: list[BaseException] = []
    pause = {"armed": False, "paused": 0}
    original_open = Storage.open

    def open_maybe_paused(self, path, mode="rb", **kwargs):
        if threading.current_thread() is thread and pause["armed"] and "/_spark_metadata/" in path:
            pause["armed"] = False
            target = _latest_in(out) + 7
            deadline = time.monotonic() + 60
            while _latest_in(out) < target and not writer_done.is_set() and time.monotonic() < deadline:
                time.sleep(0.02)
            pause["paused"] += 1
        return original_open(self, path, mode, **kwargs)

    def reader() -> None:
        last = 0
        while not stop.is_set():
            if _latest_in(out) < 0:  # nothing committed yet (see test_bad_input's empty-log test)
                time.sleep(0.01)
                continue
            try:
                pause["armed"] = len(seen) % 4 == 0  # the first read is before the first compaction
                table = read_committed(str(out), columns=["id", "file"])
                got = table.column("id").to_pylist()
                whole = len(got) // rows
                assert_same_ids(got, [i for f in range(whole) for i in file_ids(f, rows)], f"read {len(seen)}")
                assert whole >= last, f"read {len(seen)} went back from {last} to {whole} batches"
                last = whole
                seen.append(whole)
            except BaseException as exc:  # noqa: BLE001 - every failure is a finding
                failures.append(exc)
                return

    monkeypatch.setattr(Storage, "open", open_maybe_paused)
    caplog.set_level(logging.DEBUG, logger="parquet_sink.log.snapshot")  # the snapshot reader retries
    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    sink = ParquetSink(str(out), compact_interval=3, min_batches_to_retain=2, cleanup_delay="0s")
    try:
        error = _await(_start_query(spark, tmp_path / "in", tmp_path / "ckpt", sink))
    finally:
        writer_done.set()
        time.sleep(0.2)
        stop.set()
        thread.join(60)
    assert error is None, error
    assert not failures, f"reader failed after {len(seen)} reads: {failures[0]!r}"
    assert len(set(seen)) >= 4, f"the reads did not interleave with the writes: {sorted(set(seen))}"
    retries = [r for r in caplog.records if "log moved" in r.getMessage()]
    assert pause["paused"] >= 1 and retries, "no read raced a cleanup: the retry path was not exercised"
    names = log_files(out)
    assert "0" not in names and "2.compact" not in names and "23.compact" in names, names  # cleanup ran
    assert_parquet_sink(spark, out, tmp_path / "ckpt", ids, rows)


def test_log_reader_opened_before_the_first_compaction(tmp_path: Path) -> None:
    """A MetadataLog (a reader's, default compact_interval 10) first used while the log has no compact
    file yet must still read the log after the writer (compact_interval 3) compacted and cleaned up.
    This is what a read_committed that retries after a cleanup race does with its MetadataLog."""
    from parquet_sink import LogEntry

    out = tmp_path / "out"
    writer = MetadataLog(str(out), compact_interval=3, min_batches_to_retain=2, cleanup_delay="0s")

    def commit(batch: int) -> None:
        assert writer.add(batch, [LogEntry(f"file://{out}/part-{batch}.parquet", 10, False, 1)])

    for batch in range(2):
        commit(batch)
    reader = MetadataLog(str(out))
    assert [e.path.rsplit("-", 1)[-1] for e in reader.all_files()] == ["0.parquet", "1.parquet"]
    for batch in range(2, 9):
        commit(batch)
    assert "0" not in log_files(out), "cleanup should have run"
    assert len(MetadataLog(str(out)).all_files()) == 9  # a fresh reader is fine
    assert len(reader.all_files()) == 9, "the reader kept the interval it guessed before any compact file"


# -- the seeds' fault-tolerance example ------------------------------------------------------------


def test_seed_fault_tolerance_example(spark, tmp_path: Path) -> None:
    """waitingforcode's example: ten files of two records ({"id": 1, "name": "content1=<i>"} and
    {"id": 2, ...}), one file per trigger; the record "content1=7" fails on the first run only (a flag
    file), the query dies; the restart from the checkpoint outputs all 20 records exactly once."""
    import json

    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    source = tmp_path / "in"
    source.mkdir()
    for i in range(1, 11):
        path = source / f"file{i}"
        records = [{"id": 1, "name": f"content1={i}"}, {"id": 2, "name": f"content2={i}"}]
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
    flag = str(tmp_path / "already-failed")

    def fail_once(name: str) -> str:
        if name == "content1=7" and not os.path.exists(flag):
            open(flag, "w").close()
            raise RuntimeError("Something went wrong")
        return name

    fail_once_udf = F.udf(fail_once, StringType())
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def run():
        stream = (
            spark.readStream.format("json").schema("id LONG, name STRING").option("maxFilesPerTrigger", 1)
            .load(str(source))
            .select("id", fail_once_udf("name").alias("name"))
        )
        query = (
            stream.writeStream.foreachBatch(ParquetSink(str(out), compact_interval=3))
            .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start()
        )
        return _await(query)

    first = run()
    assert first is not None and "Something went wrong" in str(first), first
    assert os.path.exists(flag)
    # Files 1..6 were committed as batches 0..5, file 7's batch failed before its commit.
    assert MetadataLog(str(out)).latest_batch_id() == 5
    assert latest_commit(ckpt) == 5
    names = read_committed(str(out)).column("name").to_pylist()
    assert sorted(names) == sorted(f"content{k}={i}" for k in (1, 2) for i in range(1, 7))

    assert run() is None
    expected = sorted(f"content{k}={i}" for k in (1, 2) for i in range(1, 11))
    assert sorted(read_committed(str(out)).column("name").to_pylist()) == expected
    assert sorted(r.name for r in spark.read.parquet(str(out)).select("name").collect()) == expected
    assert MetadataLog(str(out)).latest_batch_id() == latest_commit(ckpt) == 9
