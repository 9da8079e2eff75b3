"""A model of the log: a Hypothesis state machine drives ``write_batch`` and ``MetadataLog`` (no Spark) through
appends of two writers, replays, compaction at any interval, retention (the output's, recorded with it: a writer
given other settings is refused), cleanup, racing writers, crashes at
the failpoints of the write and commit path (raised in-process; the next call is the restart) against a
plain in-memory model of what is committed. After every step every reader agrees with the model:
``read_committed``, ``committed_files`` with ``as_of_batch`` and ``batches``, and ``parquet-sink verify``;
and Spark's ``FileStreamSinkLog`` rules hold: a batch is ``N.compact`` exactly when ``(N + 1) % interval ==
0``, a compact file holds every live file as of its batch, cleanup deletes only what Spark's rule allows
and never breaks the chain of the newest batch.

Runs on local disk and on S3 (moto); ``--fuzz-minutes`` runs many more and longer sequences.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from unittest import mock

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from parquet_sink import LogEntry, MetadataLog, committed_files, read_committed, write_batch
from parquet_sink import failpoints
from parquet_sink.cli.options import OPTIONS_ENV
from parquet_sink.errors import MissingLogFileError, OutputSettingsError, SnapshotExpiredError, StaleVersionError
from parquet_sink.log import files as log_files
from parquet_sink.log.files import is_compact_path
from parquet_sink.storage.filesystem import Storage
from parquet_sink.write.parquet_files import WriteSpec, write_rows
from tests.conftest import make_backend
from tests.helpers.cli_util import run_cli
from tests.helpers.filters import run_model

APPS = ["app-a", "app-b"]
DAY_MS = 24 * 3600 * 1000
# failpoint -> committed when it fires? (None: the point is not on this call's path, the call commits)
CRASHES = ["before_write", "before_commit", "commit_publish", "after_commit", "compaction", "sidecar"]


@contextlib.contextmanager
def crash_at(name: str | None) -> Iterator[None]:
    """Make failpoint ``name`` raise on its first hit in this process (the model's crash), then disarm it."""
    if name is None:
        yield
        return
    saved = failpoints._ACTIVE, dict(failpoints._HITS)
    failpoints._ACTIVE = {name: ("raise", 1)}
    failpoints._HITS.clear()
    try:
        yield
    finally:
        failpoints._ACTIVE = saved[0]
        failpoints._HITS.clear()
        failpoints._HITS.update(saved[1])


def verify(url: str, storage_options: dict) -> dict:
    """``parquet-sink verify URL --json`` in-process (storage options through the environment)."""
    done = run_cli("verify", url, "--json", env={OPTIONS_ENV: json.dumps(storage_options)})
    result = json.loads(done.stdout)
    assert (done.returncode == 0) == result["ok"], result
    return result


def spark_derived_interval(default: int, compact_batch: int) -> int:
    """The interval a writer infers when a single compact file is left (after a cleanup with
    ``min_batches_to_retain`` below the interval): ``default`` when that file is a compaction batch under it (a
    writer keeps its own interval), else Spark's ``CompactibleFileStreamLog.deriveCompactInterval``: the first
    divisor of ``compact_batch + 1`` from ``default`` up to half of it, else ``compact_batch + 1``."""
    n = compact_batch + 1
    if n % default == 0:
        return default
    if n <= default:
        return n
    if default < n // 2:
        return next((i for i in range(default, n // 2 + 1) if n % i == 0), n)
    return n


class LogModel(RuleBasedStateMachine):
    """Subclassed per backend with ``new_root`` (a fresh, empty output URL and its storage options)."""

    new_root = None  # set by make_machine

    def __init__(self) -> None:
        super().__init__()
        self.url, self.options = type(self).new_root()
        self.storage = Storage(self.url, self.options)
        self.interval = 10  # the writers' compact_interval (Spark's default for inferring it)
        self.current = 10  # the interval in effect: what a writer infers from the compact files left
        self.compacts: set[int] = set()  # batches written as compact files, not cleaned up
        self.partitioned = False
        self.history: list[frozenset[str]] = []  # live relative paths as of each log batch
        self.added: dict[str, int] = {}  # relative path -> the log batch that committed it
        self.rows: dict[str, list[int]] = {}  # relative path -> its row ids
        self.versions: dict[str, int] = {}  # app -> newest committed version
        self.data: dict[tuple[str, int], pa.Table] = {}  # (app, committed version) -> the rows it wrote
        self.next_id = 0
        self.cleaned = False  # log files were deleted: older snapshots may be gone
        self.retained_upto = -1  # newest compaction batch that applied retention
        self.old: set[str] = set()  # files logged 30 days ago (retention drops them)
        self.retention: str | None = None  # the output's retention, which every writer's compaction applies

    # -- helpers -----------------------------------------------------------------------------------

    @property
    def latest(self) -> int:
        return len(self.history) - 1

    def live(self) -> frozenset[str]:
        return self.history[-1] if self.history else frozenset()

    def table(self, n: int) -> pa.Table:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        return pa.table({"id": pa.array(ids, pa.int64()), "k": pa.array([f"v{i % 2}/{i % 3}" for i in ids], pa.string())})

    def relative(self, path: str) -> str:
        return path[len(self.storage.root) + 1:] if path.startswith(self.storage.root + "/") else path

    def ids_in(self, relative: str) -> list[int]:
        """The row ids of a data file, from the file itself."""
        path = self.storage.join(relative)
        return pq.read_table(path, columns=["id"], filesystem=self.storage.arrow_filesystem()).column("id").to_pylist()

    def commit(self, files: dict[str, list[int]]) -> None:
        """The model's commit of the next log batch adding ``files``; at a compaction batch the output's retention
        drops the old entries, whichever writer compacts."""
        batch = len(self.history)
        for path, ids in files.items():
            self.added[path] = batch
            self.rows[path] = ids
        dropped = frozenset()
        if self.retention and self.is_compaction(batch):
            dropped = frozenset(self.old & (self.live() | set(files)))
            if dropped:
                self.retained_upto = batch
        self.history.append((self.live() | frozenset(files)) - dropped)
        if self.is_compaction(batch):
            self.compacts.add(batch)

    def is_compaction(self, batch: int) -> bool:
        return (batch + 1) % self.current == 0

    # -- rules -------------------------------------------------------------------------------------

    @initialize(interval=st.integers(1, 5), partitioned=st.booleans(), retention=st.booleans())
    def setup(self, interval: int, partitioned: bool, retention: bool) -> None:
        self.interval = self.current = interval
        self.partitioned = partitioned
        self.retention = "7d" if retention else None

    @rule(app=st.sampled_from(APPS), rows=st.integers(0, 3), step=st.integers(0, 2),
          crash=st.none() | st.sampled_from(CRASHES), changed=st.booleans())
    def append(self, app: str, rows: int, step: int, crash: str | None, changed: bool) -> None:
        """write_batch of the app's next version (step 1, 2), or a replay of its last one (step 0): with the
        rows that version wrote (a retry, skipped), or ``changed`` rows (StaleVersionError, nothing written)."""
        version = self.versions.get(app, -1) + step
        if version < 0:
            version = 0
        replay = version <= self.versions.get(app, -1)
        if replay and changed:
            with pytest.raises(StaleVersionError, match=f"version {version}"):
                write_batch(self.url, self.table(max(rows, 1)), app_id=app, version=version,
                            partition_by=["k"] if self.partitioned else None, storage_options=self.options,
                            compact_interval=self.interval, retention=self.retention, spark_sink_stopped=True)
            return
        table = self.data[app, version] if replay else self.table(rows)
        batch = len(self.history)
        compaction = self.is_compaction(batch)
        fires = not replay and (
            crash in ("before_write", "before_commit", "commit_publish", "after_commit")
            or (crash == "compaction" and compaction and batch > 0)
            or (crash == "sidecar" and compaction)
        )
        commits = not replay and (not fires or crash in ("after_commit", "sidecar"))
        before = {self.relative(i.path) for i in self.storage.find(self.url)} if fires else set()
        with crash_at(crash):
            try:
                result = write_batch(self.url, table, app_id=app, version=version,
                                     partition_by=["k"] if self.partitioned else None,
                                     storage_options=self.options, compact_interval=self.interval,
                                     retention=self.retention, max_records_per_file=2, spark_sink_stopped=True)
            except failpoints.FailpointError:
                assert fires, f"failpoint {crash} fired where the model says it is not on the path"
                result = None
        if not fires:
            assert result is not None and result.committed == commits, result
            assert result.committed or result.log_batch_id is not None
        if commits:
            if result is not None:
                assert result.log_batch_id == batch
                files = {self.relative(p): [] for p in result.files}
            else:  # crashed after the commit: the files are the ones new on storage since the call began
                files = {p: [] for p in {self.relative(i.path) for i in self.storage.find(self.url)} - before
                         if p.endswith(".parquet") and "/_" not in "/" + p}
            self.commit({path: self.ids_in(path) for path in files})
            self.versions[app] = version
            self.data[app, version] = table

    @rule(old=st.booleans())
    def raw_add(self, old: bool) -> None:
        """MetadataLog.add of one file without a commit record (as Spark's sink writes), logged ``old`` (30
        days ago) or now; a compaction under the output's retention ("7d", recorded with it, which every writer
        applies) drops the old entries, its own included. No Spark
        query runs here: the apps' write_batch calls say so (spark_sink_stopped=True), else they refuse to commit
        after such a batch (issue 53)."""
        spec = WriteSpec(self.storage, ("k",) if self.partitioned else (), "snappy", None)
        statuses = write_rows(spec, [self.table(1)])
        now = int(time.time() * 1000)
        mtime = now - 30 * DAY_MS if old else now
        entries = [LogEntry(self.storage.to_uri(s.path), s.size, False, mtime) for s in statuses]
        batch = len(self.history)
        log = MetadataLog(self.url, storage_options=self.options, compact_interval=self.interval,
                          retention=self.retention, cleanup=False)
        assert log.add(batch, entries)
        files = {self.relative(s.path): [self.next_id - 1] for s in statuses}
        if old:
            self.old |= set(files)
        self.commit(files)

    @rule()
    def race(self) -> None:
        """Both apps append at once from two threads: each commits once, as two consecutive batches."""
        tables = {app: self.table(1) for app in APPS}
        results = {}

        def run(app: str) -> None:
            results[app] = write_batch(self.url, tables[app], app_id=app,
                                       version=self.versions.get(app, -1) + 1,
                                       partition_by=["k"] if self.partitioned else None,
                                       storage_options=self.options, compact_interval=self.interval,
                                       retention=self.retention, spark_sink_stopped=True)

        threads = [threading.Thread(target=run, args=(app,)) for app in APPS]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(r.log_batch_id for r in results.values()) == [len(self.history), len(self.history) + 1]
        for app, result in sorted(results.items(), key=lambda item: item[1].log_batch_id):
            assert result.committed
            self.commit({self.relative(p): self.ids_in(self.relative(p)) for p in result.files})
            self.versions[app] = result.version
            self.data[app, result.version] = tables[app]

    @precondition(lambda self: self.history)
    @rule(setting=st.sampled_from(["compact_interval", "retention", "min_batches_to_retain", "cleanup_delay"]))
    def contradicting_writer(self, setting: str) -> None:
        """A writer given a setting other than the one recorded with the output is refused before it writes:
        nothing committed, no file left (issue 54)."""
        value = {"compact_interval": self.interval + 1, "retention": "1d", "min_batches_to_retain": 7,
                 "cleanup_delay": "1h"}[setting]
        app = APPS[0]
        before = {i.path for i in self.storage.find(self.url)}
        with pytest.raises(OutputSettingsError, match=f"{setting}="):
            write_batch(self.url, self.table(1), app_id=app, version=self.versions.get(app, -1) + 1,
                        partition_by=["k"] if self.partitioned else None, storage_options=self.options,
                        spark_sink_stopped=True, **{setting: value})
        assert {i.path for i in self.storage.find(self.url)} == before

    @precondition(lambda self: self.history)
    @rule(retain=st.integers(1, 4))
    def cleanup(self, retain: int) -> None:
        """Spark's cleanup after the newest batch (no delay): only files Spark's rule lets go are deleted."""
        log = MetadataLog(self.url, storage_options=self.options, compact_interval=self.interval,
                          min_batches_to_retain=retain, cleanup_delay="0s")
        min_batch = self.latest + 1 - retain
        spark_threshold = min_batch - (min_batch % self.current) - 1
        names = log.list_names()
        deleted = log.cleanup(self.latest)
        gone = [b for b, p in names.items() if p in deleted]
        assert all(b < spark_threshold for b in gone), (gone, spark_threshold)
        if gone:
            self.cleaned = True
        self.compacts -= set(gone)
        if len(self.compacts) == 1:  # as in Spark, the next writer derives the interval from the one left
            self.current = spark_derived_interval(self.interval, min(self.compacts))

    @rule(retain=st.integers(1, 4), lose_copy=st.booleans())
    def spark_cleanup(self, retain: int, lose_copy: bool) -> None:
        """Spark's own cleanup (``deleteExpiredLog``, no delay) deletes the log files below its threshold
        and never a columnar copy (not a batch file name to it); with ``lose_copy`` the newest compact file
        has no copy either (as one Spark's sink wrote). The next read stores the copy of a compact file
        without one (any size here) and deletes the copies whose compact file is gone (any age here)."""
        if not self.history:
            return
        min_batch = self.latest + 1 - retain
        threshold = min_batch - (min_batch % self.current) - 1
        log = MetadataLog(self.url, storage_options=self.options, cleanup=False)
        names = log.list_names()
        gone = [b for b in names if b < threshold]
        for batch in gone:
            self.storage.delete(names[batch])
        if gone:
            self.cleaned = True
        self.compacts -= set(gone)
        if len(self.compacts) == 1:
            self.current = spark_derived_interval(self.interval, min(self.compacts))
        newest = max(self.compacts, default=None)
        if lose_copy and newest is not None and newest in names.sidecars:
            self.storage.delete(names.sidecars[newest])
        with mock.patch.object(log_files, "COPY_MIN_BYTES", 0), mock.patch.object(log_files, "ORPHANED_COPY_AGE_MS", 0):
            files = committed_files(self.url, storage_options=self.options)
        assert {f.relative_path for f in files} == self.live()
        if newest is not None and (lose_copy or newest not in names.sidecars):  # the read stored its copy
            after = log.list_names()
            assert newest in after.sidecars and set(after.sidecars) <= set(after), (sorted(after.sidecars), sorted(after))

    # -- what every reader must agree on -----------------------------------------------------------

    @invariant()
    def readers_agree(self) -> None:
        if not self.history and not self.storage.exists(f"{self.url}/_spark_metadata"):
            return
        live = self.live()
        expected_ids = sorted(i for p in live for i in self.rows[p])
        table = read_committed(self.url, storage_options=self.options)
        got = sorted(table.column("id").to_pylist()) if table.num_rows else []
        assert got == expected_ids
        files = committed_files(self.url, storage_options=self.options)
        assert {f.relative_path for f in files} == live
        assert {f.relative_path: f.batch_id for f in files} == {p: self.added[p] for p in live} or any(
            f.batch_id is None for f in files
        )
        result = verify(self.url, storage_options=self.options)
        assert result["ok"] and result["files"] == len(live) and result["latest_batch"] == (
            self.latest if self.history else None
        ), result

    @invariant()
    def older_snapshots(self) -> None:
        """as_of_batch and batches= give the model's answer, or a typed error once log files are gone."""
        if len(self.history) < 2:
            return
        for batch in sorted({0, self.latest // 2, self.latest - 1}):
            try:
                files = committed_files(self.url, storage_options=self.options, as_of_batch=batch)
            except (SnapshotExpiredError, MissingLogFileError):
                assert self.cleaned, f"as_of_batch={batch} refused although no log file was deleted"
                continue
            assert {f.relative_path for f in files} == self.history[batch], f"as_of_batch={batch}"
        low, high = self.latest // 2, self.latest
        try:
            files = committed_files(self.url, storage_options=self.options, batches=(low, high))
        except (SnapshotExpiredError, MissingLogFileError):
            assert self.cleaned or self.retained_upto >= low
        else:
            assert {f.relative_path for f in files} == {p for p in self.live() if self.added[p] >= low}

    @invariant()
    def spark_log_rules(self) -> None:
        """Names follow the interval; the newest compact file holds exactly the live files as of its batch."""
        if not self.history:
            return
        log = MetadataLog(self.url, storage_options=self.options, compact_interval=self.interval, cleanup=False)
        names = log.list_names()
        assert max(names) == self.latest
        for batch, path in names.items():
            assert is_compact_path(path) == (batch in self.compacts), path
        compacts = [b for b, p in names.items() if is_compact_path(p)]
        if compacts:
            newest = max(compacts)
            held = {e.path for e in log.get(newest) if not e.is_dir}
            assert held == {self.storage.to_uri(self.storage.join(p)) for p in self.history[newest]}, newest
        assert log.check() == []


@pytest.mark.parametrize("backend_name", ["local", "moto"])
def test_log_model(request: pytest.FixtureRequest, tmp_path, backend_name: str, fuzz_minutes: float) -> None:
    """The state machine on one backend: a fixed seed and few short runs, unless ``--fuzz-minutes``."""

    def new_root() -> tuple[str, dict]:
        backend = make_backend(backend_name, request, tmp_path / uuid.uuid4().hex[:8])
        return backend.url, backend.storage_options

    machine = type(f"LogModel_{backend_name}", (LogModel,), {"new_root": staticmethod(new_root)})
    examples, steps = (8, 15) if backend_name == "local" else (2, 10)
    run_model(machine, fuzz_minutes, examples=examples, steps=steps, fuzz_examples=50, fuzz_steps=40)
