"""Helpers of the crash, race and bad-input suites: input files, the crash-test child process, and the
checks that prove exactly-once (every input row committed once, the checkpoint and the log agree).

The child (``tests/helpers/crash_child.py``) runs one real streaming query (JSON file source, ``maxFilesPerTrigger``,
``ParquetSink``, ``trigger(availableNow=True)``) in its own session (process group), so a failpoint
``kill`` or the parent's ``killpg`` SIGKILLs the driver, its JVM and its Python workers at once.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
import pyarrow.parquet as pq

from parquet_sink.log.files import parse_batch_name
from parquet_sink import MetadataLog, read_committed
from parquet_sink.log.entry import CommitRecord, attribute

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("crash_child.py")
SCHEMA = "id LONG, file LONG, name STRING"
BASE_MTIME = 1_700_000_000  # input file f gets mtime BASE_MTIME + f: the file source takes them in order
CHILD_TIMEOUT = float(os.environ.get("CRASH_CHILD_TIMEOUT", "240"))


# -- input -------------------------------------------------------------------------------------------


def file_ids(f: int, rows: int) -> list[int]:
    """The ids of input file ``f`` (``rows`` rows): f * 1000 + r, so a row names its file."""
    return [f * 1000 + r for r in range(rows)]


def write_inputs(directory: str | Path, files: Iterable[int], rows: int) -> list[int]:
    """JSON-lines input files ``in-<f>.json`` (``{"id", "file", "name"}``) with increasing mtimes;
    returns the ids written. Each file appears atomically (written hidden, then renamed)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ids = []
    for f in files:
        lines = [json.dumps({"id": i, "file": f, "name": f"row-{i}"}) for i in file_ids(f, rows)]
        tmp = directory / f".in-{f:04d}.json.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        os.utime(tmp, (BASE_MTIME + f, BASE_MTIME + f))
        os.rename(tmp, directory / f"in-{f:04d}.json")
        ids += file_ids(f, rows)
    return ids


def input_file_index(path: str) -> int:
    """``file:///.../in-0007.json`` -> 7."""
    return int(path.rsplit("/", 1)[-1][3:7])


# -- the child process -------------------------------------------------------------------------------


@dataclass
class Run:
    """One run of the crash-test query: its files in ``workdir`` are named after ``name``."""

    workdir: Path
    name: str
    returncode: int | None = None

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    @property
    def started_path(self) -> Path:
        return self.workdir / f"{self.name}.started"

    def log_tail(self, chars: int = 6000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return "<no log>"

    def result(self) -> dict[str, Any] | None:
        path = self.workdir / f"{self.name}.result.json"
        return json.loads(path.read_text()) if path.exists() else None

    def progress(self) -> list[dict[str, Any]]:
        path = self.workdir / f"{self.name}.progress.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass
class Child(Run):
    """One run of ``crash_child.py`` (or another child script) in a process group of its own."""

    proc: subprocess.Popen | None = None

    @property
    def pgid(self) -> int:
        return self.proc.pid  # started with start_new_session=True: its own session and group

    def wait(self, timeout: float = CHILD_TIMEOUT) -> int:
        try:
            self.returncode = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_group(self.pgid)
            self.proc.wait(30)
            raise AssertionError(f"child {self.name} hung for {timeout}s; log tail:\n{self.log_tail()}") from None
        return self.returncode

    def kill(self) -> None:
        kill_group(self.pgid)


_counter = 0


def _new_run(workdir: str | Path, config: dict[str, Any], kind: str) -> tuple[Path, str, dict[str, Any]]:
    """A fresh run name in ``workdir`` and ``config`` with the run's own progress, result and started files."""
    global _counter
    _counter += 1
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    name = f"{kind}-{_counter:03d}"
    config = dict(config)
    config.setdefault("progress", str(workdir / f"{name}.progress.jsonl"))
    config.setdefault("result", str(workdir / f"{name}.result.json"))
    config.setdefault("started", str(workdir / f"{name}.started"))
    return workdir, name, config


def start_child(
    workdir: str | Path,
    config: dict[str, Any],
    *,
    failpoints: str | None = None,
    state_dir: str | Path | None = None,
    env: dict[str, str] | None = None,
    script: Path = CHILD,
) -> Child:
    """Start ``script`` (default ``crash_child.py``) in its own session with ``config`` (see the child's
    docstring)."""
    workdir, name, config = _new_run(workdir, config, "child")
    config_path = workdir / f"{name}.json"
    config_path.write_text(json.dumps(config))
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("PARQUET_SINK_")}
    child_env["PYSPARK_PYTHON"] = sys.executable
    child_env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    if failpoints:
        child_env["PARQUET_SINK_FAILPOINTS"] = failpoints
    if state_dir is not None:
        child_env["PARQUET_SINK_FAILPOINT_STATE"] = str(state_dir)
    child_env.update(env or {})
    with open(workdir / f"{name}.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, str(script), str(config_path)],
            cwd=str(ROOT),
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Child(workdir, name, proc=proc)


def run_child(workdir: str | Path, config: dict[str, Any], **kwargs: Any) -> Child:
    """Start the child, wait for it and make sure nothing of it is left running."""
    child = start_child(workdir, config, **kwargs)
    child.wait()
    assert_group_gone(child.pgid)
    return child


def run_in_process(spark: Any, workdir: str | Path, config: dict[str, Any]) -> Run:
    """Run the crash-test query of ``config`` to its end on the test session's driver: how a test restarts
    a killed query (the restart is never killed, so it needs no driver of its own: a JVM start saved).
    The run's log (this package's log records and a failed query's traceback) goes to ``<name>.log``."""
    from tests.helpers.crash_child import run_query

    workdir, name, config = _new_run(workdir, config, "run")
    (workdir / f"{name}.json").write_text(json.dumps(config))
    run = Run(workdir, name)
    handler = logging.FileHandler(run.log_path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    package_logger = logging.getLogger("parquet_sink")
    level = package_logger.level
    package_logger.addHandler(handler)
    package_logger.setLevel(logging.INFO)
    try:
        with open(run.log_path, "a") as errors, contextlib.redirect_stderr(errors):
            run.returncode = run_query(spark, config)
    finally:
        package_logger.removeHandler(handler)
        package_logger.setLevel(level)
        handler.close()
    return run


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def live_group_members(pgid: int) -> list[psutil.Process]:
    members = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(proc)
        except (ProcessLookupError, psutil.Error, OSError):
            continue
    return members


def assert_group_gone(pgid: int, timeout: float = 20) -> None:
    """Every process of the child's group (driver, JVM, Python workers) has exited."""
    deadline = time.monotonic() + timeout
    while True:
        left = live_group_members(pgid)
        if not left:
            return
        if time.monotonic() > deadline:
            kill_group(pgid)
            raise AssertionError(f"processes of group {pgid} still running: {[p.pid for p in left]}")
        time.sleep(0.2)


def assert_sigkilled(child: Child) -> None:
    assert child.returncode == -signal.SIGKILL, (
        f"child {child.name} should have died by SIGKILL, exit code {child.returncode}; result "
        f"{child.result()}; log tail:\n{child.log_tail()}"
    )
    assert_group_gone(child.pgid)


def assert_ok(child: Run) -> None:
    assert child.returncode == 0, (
        f"child {child.name} failed with exit code {child.returncode}; result {child.result()}; "
        f"log tail:\n{child.log_tail()}"
    )


# -- checkpoint --------------------------------------------------------------------------------------


def checkpoint_ids(checkpoint: str | Path, sub: str) -> list[int]:
    """Batch ids recorded in ``<checkpoint>/<sub>`` (``commits`` or ``offsets``)."""
    directory = Path(checkpoint) / sub
    if not directory.exists():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def latest_commit(checkpoint: str | Path) -> int:
    return max(checkpoint_ids(checkpoint, "commits"), default=-1)


def _source_log(checkpoint: str | Path) -> dict[int, set[int]]:
    """The file source's own log ``sources/0`` (compacted too): source batch id -> input file indexes."""
    directory = Path(checkpoint) / "sources" / "0"
    batches: dict[int, set[int]] = collections.defaultdict(set)
    if not directory.exists():
        return {}
    for path in directory.iterdir():
        if parse_batch_name(path.name) is None:
            continue
        for line in path.read_text().splitlines()[1:]:
            entry = json.loads(line)
            batches[int(entry["batchId"])].add(input_file_index(entry["path"]))
    return dict(batches)


def source_batches(checkpoint: str | Path) -> dict[int, set[int]]:
    """Query batch id -> input file indexes the file source gave that batch.

    The query's batch ids and the file source's log ids usually match, but not always: a kill after the
    source logged its next files and before the query logged the batch's offsets leaves the source one
    entry ahead, and the restarted batch then takes both (Spark's ``getBatch(prev, cur)`` reads source
    entries ``prev+1..cur``). So map through the offsets (``{"logOffset": n}``) each batch recorded."""
    source = _source_log(checkpoint)
    batches = {}
    previous = -1
    for batch in checkpoint_ids(checkpoint, "offsets"):
        lines = (Path(checkpoint) / "offsets" / str(batch)).read_text().splitlines()
        offset = int(json.loads(lines[-1])["logOffset"])
        batches[batch] = set().union(*(source.get(i, set()) for i in range(previous + 1, offset + 1)))
        previous = offset
    return batches


# -- output ------------------------------------------------------------------------------------------


def parquet_on_disk(out: str | Path) -> set[str]:
    """Every data file a directory reader would see under the output (outside hidden ``_x``/``.x``
    directories such as ``_spark_metadata`` and the sink's ``_parquet_sink`` staging), committed or not."""
    found = set()
    for dirpath, dirnames, filenames in os.walk(out):
        dirnames[:] = [d for d in dirnames if not d.startswith(("_", "."))]
        found.update(os.path.join(dirpath, name) for name in filenames if name.endswith(".parquet"))
    return found


def committed_paths(out: str | Path) -> set[str]:
    """The data files the log lists (read from the log itself, not through the reader under test)."""
    log = MetadataLog(str(out))
    return {log.storage.from_uri(e.path) for e in log.all_files() if not e.is_dir and e.size > 0}


def orphans(out: str | Path) -> set[str]:
    """Data files on disk that the log does not list (failed or killed attempts)."""
    return parquet_on_disk(out) - committed_paths(out)


def ids_of_files(paths: Iterable[str]) -> list[int]:
    """Ids in raw Parquet files (each read on its own; unreadable half-written files are skipped)."""
    ids: list[int] = []
    for path in paths:
        try:
            ids += pq.read_table(path, columns=["id"]).column("id").to_pylist()
        except (pa.ArrowInvalid, OSError):
            continue
    return ids


def log_files(out: str | Path) -> list[str]:
    directory = Path(out) / "_spark_metadata"
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def duplicates(ids: Iterable[int]) -> dict[int, int]:
    return {k: n for k, n in collections.Counter(ids).items() if n > 1}


def assert_same_ids(actual: list[int], expected: Iterable[int], what: str) -> None:
    expected = sorted(expected)
    dup = duplicates(actual)
    assert not dup, f"{what}: {len(dup)} duplicated ids, e.g. {dict(list(dup.items())[:5])}"
    missing = sorted(set(expected) - set(actual))
    extra = sorted(set(actual) - set(expected))
    assert not missing and not extra, (
        f"{what}: {len(missing)} ids missing (e.g. {missing[:5]}), {len(extra)} unexpected (e.g. {extra[:5]})"
    )
    assert sorted(actual) == expected, what


def committed_ids(out: str | Path, **kwargs: Any) -> list[int]:
    return read_committed(str(out), columns=["id"], **kwargs).column("id").to_pylist()


def spark_ids(spark: Any, out: str | Path) -> list[int]:
    return [r[0] for r in spark.read.parquet(str(out)).select("id").collect()]


@dataclass
class Agreement:
    latest: int
    commit_records: dict[int, dict[str, Any]] = field(default_factory=dict)


def assert_checkpoint_and_log_agree(out: str | Path, checkpoint: str | Path, rows: int) -> Agreement:
    """The checkpoint's newest committed batch is the log's newest batch; every batch of the checkpoint
    is in the log, committed by this query as that batch, with exactly the rows of the input files
    the file source assigned to that batch (so nothing moved between batches, nothing was lost)."""
    log = MetadataLog(str(out))
    latest = log.latest_batch_id()
    commits = checkpoint_ids(checkpoint, "commits")
    assert latest is not None, "the output log is empty"
    assert commits and commits[-1] == latest, f"checkpoint commits {commits[-3:]} vs log latest {latest}"
    assert checkpoint_ids(checkpoint, "offsets")[-1] == latest, "an offset batch after the last commit"
    logged = {}
    for entry in log.all_files():
        if "commitId" in entry.extra:
            assert entry.batch_id not in logged, f"two commit records for log batch {entry.batch_id}"
            logged[entry.batch_id] = CommitRecord.from_entry(entry)
    # Compaction keeps the first and last record of each run; the batches between are attributed from them.
    attributed = attribute(list(logged.values()), range(latest + 1))
    assert sorted(attributed) == list(range(latest + 1)), f"log batches attributed to a query: {sorted(attributed)}"
    records = {b: {"queryId": r.query_id, "queryBatchId": r.query_batch_id} for b, r in attributed.items()}
    query_ids = {r["queryId"] for r in records.values()}
    assert len(query_ids) == 1, f"log batches committed by several queries: {query_ids}"
    assert all(r["queryBatchId"] == b for b, r in records.items()), "query batch id != log batch id"
    sources = source_batches(checkpoint)
    assert sorted(sources) == list(range(latest + 1)), f"source batches {sorted(sources)} vs log 0..{latest}"
    for batch, files in sorted(sources.items()):
        expected = [i for f in sorted(files) for i in file_ids(f, rows)]
        got = committed_ids(out, batches=(batch, batch))
        assert_same_ids(got, expected, f"log batch {batch} (input files {sorted(files)})")
    return Agreement(latest, records)


def assert_parquet_sink(
    spark: Any, out: str | Path, checkpoint: str | Path, expected: Iterable[int], rows: int
) -> Agreement:
    """Every expected row exactly once through read_committed and spark.read.parquet, and the checkpoint
    and the log agree batch by batch."""
    expected = list(expected)
    assert_same_ids(committed_ids(out), expected, "read_committed")
    assert_same_ids(spark_ids(spark, out), expected, "spark.read.parquet")
    return assert_checkpoint_and_log_agree(out, checkpoint, rows)


def assert_committed_prefix(out: str | Path, checkpoint: str | Path, rows: int) -> int:
    """After a kill: what the readers see is exactly the whole batches 0..latest of the log (and the
    input files the source gave those batches), whatever half-done work lies on disk. Returns latest."""
    latest = MetadataLog(str(out)).latest_batch_id()
    if latest is None:
        return -1
    sources = source_batches(checkpoint)
    expected = [i for b in range(latest + 1) for f in sorted(sources[b]) for i in file_ids(f, rows)]
    assert_same_ids(committed_ids(out), expected, f"read_committed after the kill (log latest {latest})")
    return latest


def staged_files(out: str | Path) -> list[str]:
    """Data files in the sink's hidden staging directories (Spark writer path), of any attempt."""
    staging = Path(out) / "_exactly_once" / "staging"
    return sorted(str(p) for p in staging.rglob("*.parquet")) if staging.exists() else []


def vacuum(out: str | Path) -> dict[str, Any]:
    """Run ``parquet-sink vacuum OUT --older-than 0s --json`` in-process; its JSON answer."""
    import contextlib
    import io

    from parquet_sink.cli.main import main

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["vacuum", str(out), "--older-than", "0s", "--allow-short-retention", "--json"]) == 0
    return json.loads(buffer.getvalue())
