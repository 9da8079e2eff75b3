"""The Iceberg differential with kills: Hypothesis draws batches of random rows and the steps of an output's life
(``write_batch(..., iceberg=...)``, syncs of the table without catalog and of a SQLite catalog's table, ``optimize``,
``vacuum`` within and past the retention), each killed or not: SIGKILL at a drawn hit of a failpoint of its path (the
write's, the commit's, the compaction's, the optimize's, ``iceberg_commit``, ``iceberg_metadata_write``,
``iceberg_version_hint``, ``iceberg_after_commit``) or at a random moment within it. The steps run in children forked
from one interpreter that imported everything once (a fork costs milliseconds, a new interpreter seconds); a killed
child's step is run again by the next child, as a restarted job does. After each kill, every snapshot each table was
left with reads read_committed(as_of_batch=b)'s rows through pyiceberg (the catalog's table and its metadata file, the
table without catalog) and polars; at the end, after a last sync of each, too, and read_committed holds every row
written exactly once."""

from __future__ import annotations

import base64
import datetime as _dt
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table import StaticTable

from parquet_sink import MetadataLog, committed_files, optimize, read_committed, sync_iceberg, vacuum, write_batch
from parquet_sink.errors import MissingDataFileError
from parquet_sink.iceberg import current_metadata
from parquet_sink.storage.filesystem import Storage
from tests.helpers.filters import fixed_or_fuzzed
from tests.iceberg.readers import assert_mirrors
from tests.iceberg.test_sync import _AT, _DAY, _DECIMAL, _FLOAT, _INT, _TEXT, _catalog_properties, _rows

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = pa.schema([("id", pa.int64()), ("i", pa.int64()), ("s", pa.string()), ("f", pa.float64()),
                    ("d", pa.date32()), ("t", pa.timestamp("us", "UTC")), ("dec", pa.decimal128(38, 10)),
                    ("p", pa.string())])
TABLE = "db.events"
INTERVAL = 3  # a compaction every third log batch

# Reads pickled requests {"out", "steps"} from stdin, one a line (base64), and runs each in a child forked from
# it (its own process group, so that a failpoint's killpg kills the child only): "start i" and "done i" on
# stdout around each step, then the child's exit code ("exit -9": SIGKILLed).
ZYGOTE = r"""
import base64, os, pickle, signal, sys, threading, traceback
import pyarrow, pyarrow.dataset, pyarrow.parquet
import pyiceberg.avro.decoder_fast, pyiceberg.catalog.noop, pyiceberg.catalog.sql, pyiceberg.io.pyarrow
import pyiceberg.manifest, pyiceberg.table, sqlalchemy.dialects.sqlite, sqlite3
try:  # what newer fsspec releases import lazily (absent from the floors' 2024.12)
    import fsspec.implementations.chained
except ModuleNotFoundError:
    pass
from parquet_sink import failpoints, optimize, sync_iceberg, vacuum, write_batch

def step(out, s):
    if s["kind"] == "write":
        write_batch(out, s["table"], app_id="a", version=s["version"], partition_by=s["partition_by"],
                    compact_interval=s["interval"], iceberg=s["iceberg"])
    elif s["kind"] == "sync":
        sync_iceberg(out, **s["target"])
    elif s["kind"] == "optimize":
        optimize(out, iceberg=s["iceberg"])
    else:
        vacuum(out, s["retention"], allow_short_retention=True, iceberg=s["iceberg"])

def life(out, steps):
    os.setpgid(0, 0)
    for index, s in enumerate(steps):
        failpoints._ACTIVE.clear()
        failpoints._HITS.clear()
        kill, timer = s.get("kill"), None
        if kill and kill[0] == "at":
            failpoints._ACTIVE[kill[1]] = ("kill", kill[2])
        elif kill:
            timer = threading.Timer(kill[1], os.kill, (os.getpid(), signal.SIGKILL))
            timer.start()
        os.write(1, b"start %d\n" % index)
        step(out, s)
        if timer is not None:
            timer.cancel()
        os.write(1, b"done %d\n" % index)

for line in sys.stdin:
    request = pickle.loads(base64.b64decode(line))
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            life(**request)
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    os.write(1, b"exit %d\n" % os.waitstatus_to_exitcode(status))
"""


class Zygote:
    """The interpreter the steps' children are forked from (one per test)."""

    def __init__(self, directory: Path) -> None:
        env = dict(os.environ, PARQUET_SINK_FAILPOINTS="")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH")]))
        self.stderr_path = directory / "zygote.err"
        self.stderr = self.stderr_path.open("wb")
        self.process = subprocess.Popen([sys.executable, "-c", ZYGOTE], env=env, cwd=ROOT, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self.stderr, start_new_session=True)

    def life(self, out: Path, steps: list[dict]) -> tuple[int, int]:
        """Run ``steps`` in a new child: (steps done, its exit code)."""
        offset = self.stderr_path.stat().st_size
        self.process.stdin.write(base64.b64encode(pickle.dumps({"out": str(out), "steps": steps})) + b"\n")
        self.process.stdin.flush()
        done = 0
        for line in self.process.stdout:
            word, number = line.split()
            if word == b"done":
                done += 1
            elif word == b"exit":
                code = int(number)
                if code not in (0, -9):
                    stderr = self.stderr_path.read_bytes()[offset:]
                    raise AssertionError(f"{steps[done]['kind']} failed: {stderr[-3000:]!r}")
                return done, code
        raise AssertionError(f"the zygote died: {self.stderr_path.read_bytes()[-3000:]!r}")

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)
        self.stderr.close()


_ROW = st.tuples(st.none() | _INT, st.none() | _TEXT, st.none() | _FLOAT, st.none() | _DAY, st.none() | _AT,
                 st.none() | _DECIMAL, st.sampled_from(["a", "b", None]))
# rows of a batch: one in ten empty (a partitioned output's empty batch commits no file: no snapshot to kill in)
_ROWS = st.integers(0, 9).flatmap(lambda n: st.lists(_ROW, min_size=1, max_size=4) if n else st.just([]))
# where each step can be killed: the failpoints its path passes
FAILPOINTS = {
    "write": ["before_write", "file_open", "before_commit", "commit_publish", "after_commit", "compaction", "cleanup",
              "iceberg_commit", "iceberg_metadata_write", "iceberg_version_hint", "iceberg_after_commit"],
    "sync": ["iceberg_commit", "iceberg_metadata_write", "iceberg_version_hint", "iceberg_after_commit"],
    "optimize": ["optimize_write", "optimize_padding", "optimize_commit", "commit_publish", "optimize_after_commit",
                 "compaction"],
    "vacuum": [],
}


@st.composite
def _kill(draw, kind: str):
    """None (no kill), ("at", failpoint, nth hit, then) or ("after", seconds into the step, then); ``then``: what
    the restart does, "again" (the killed step) or "on" (the next step: a killed write's rows are lost unless
    its batch was committed)."""
    choice = draw(st.sampled_from(["none", "at", "after"] if FAILPOINTS[kind] else ["none", "after"]))
    if choice == "none":
        return None
    then = draw(st.sampled_from(["again", "on"]))
    if choice == "at":
        return ("at", draw(st.sampled_from(FAILPOINTS[kind])), draw(st.integers(1, 2)), then)
    # most steps take 10 to 100 ms (a sync in step less): more draws early in the step
    return ("after", draw(st.floats(0, 1).map(lambda x: round(0.12 * x * x, 4))), then)


@st.composite
def _lives(draw):
    """(partitioned, the steps: each ("write", (rows, table)), ("sync", "metadata" | "catalog"), ("optimize",
    table), ("vacuum", ("7d" | "0s", table)), with its kill; ``table``: the one the step is given as
    ``iceberg=``, "metadata", "catalog" or None)."""
    partitioned = draw(st.booleans())
    steps = []
    for index in range(draw(st.integers(1, 7))):
        kind = draw(st.sampled_from(["write", "write", "write", "sync", "optimize", "vacuum"])) if index else "write"
        table = st.sampled_from(["metadata", "catalog", None])  # the table the step is given as iceberg=
        arg = {"write": st.tuples(_ROWS, table), "sync": st.sampled_from(["metadata", "catalog"]),
               "optimize": table, "vacuum": st.tuples(st.sampled_from(["7d", "0s"]), table)}[kind]
        steps.append((kind, draw(arg), draw(_kill(kind))))
    return partitioned, steps


def _targets(tmp: Path) -> dict[str, dict]:
    return {"metadata": {}, "catalog": {"catalog": _catalog_properties(tmp), "table": TABLE}}


def _requests(partitioned: bool, steps: list, targets: dict[str, dict]) -> tuple[list[dict], list]:
    """The children's steps and every row the writes write."""
    requests, written = [], []
    for kind, arg, kill in steps:
        if kind == "write":
            version = sum(r["kind"] == "write" for r in requests)
            rows = [(version * 100 + n, *row) for n, row in enumerate(arg[0])]
            written += rows
            table = pa.Table.from_pylist([dict(zip(SCHEMA.names, row)) for row in rows], schema=SCHEMA)
            request = {"table": table, "version": version, "partition_by": ["p"] if partitioned else None,
                       "interval": INTERVAL, "iceberg": arg[1] and (targets[arg[1]] or True)}
        elif kind == "sync":
            request = {"target": targets[arg]}
        elif kind == "vacuum":
            # past the retention, with tables behind the log (or made later): test_a_table_behind_an_optimize_...
            request = {"retention": _dt.timedelta(0) if arg[0] == "0s" else arg[0],
                       "iceberg": arg[1] and (targets[arg[1]] or True)}
        else:
            request = {"iceberg": arg and (targets[arg] or True)}
        requests.append({"kind": kind, "kill": kill, **request})
    return requests, written


def _tables(out: Path, target: dict) -> list:
    """The tables to read, as they are: the table without catalog, or the catalog's table and the same table
    opened from its metadata file; none while there is none."""
    if not target:
        location = current_metadata(Storage(str(out)))
        return [] if location is None else [StaticTable.from_metadata(location)]
    properties = target["catalog"]
    try:
        table = SqlCatalog("c", uri=properties["uri"], warehouse=properties["warehouse"]).load_table(TABLE)
    except (NoSuchTableError, NoSuchNamespaceError):
        return []
    return [table, StaticTable.from_metadata(table.metadata_location)]


def _check_tables(out: Path, targets: dict[str, dict], latest: int | None = None) -> None:
    for name, target in targets.items():
        for table in _tables(out, target):
            try:
                assert_mirrors(table, out, latest=latest)
            except AssertionError as exc:
                raise AssertionError(f"the table {name} ({table.metadata_location}): {exc}") from exc


def _check_lives(zygote: Zygote, tmp: Path, partitioned: bool, steps: list) -> None:
    kills: list[tuple[int, tuple]] = []  # (step, kill) of each kill made
    try:
        _run_lives(zygote, tmp, partitioned, steps, kills)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nsteps {[(kind, kill) for kind, _, kill in steps]}, kills made {kills}, "
                             f"output {tmp / 'out'}") from exc


def _run_lives(zygote: Zygote, tmp: Path, partitioned: bool, steps: list, kills: list) -> None:
    out, targets = tmp / "out", _targets(tmp)
    requests, written = _requests(partitioned, steps, targets)
    while requests:
        done, code = zygote.life(out, requests)
        if not code:
            break
        killed, started = requests[done], MetadataLog(str(out)).latest_batch_id() is not None
        kills.append((len(steps) - len(requests) + done, killed["kill"]))
        if started:
            _check_tables(out, targets)  # every snapshot a kill left reads its batch's rows
        # the restart: the killed step again, or the next one (not before the output's first batch)
        if killed["kill"][-1] == "again" or not started:
            requests = [dict(killed, kill=None)] + requests[done + 1:]
            continue
        requests = requests[done + 1:]
        if killed["kind"] == "write" and killed["table"].num_rows:  # its rows are there, all or none
            ids = set(killed["table"].column("id").to_pylist())
            there = ids & set(read_committed(str(out), columns=["id"]).column("id").to_pylist())
            assert there in (ids, set()), (ids, there)
            written = written if there else [row for row in written if row[0] not in ids]
    syncs = [{"kind": "sync", "target": target} for target in targets.values()]
    assert zygote.life(out, syncs) == (2, 0)
    expected = pa.Table.from_pylist([dict(zip(SCHEMA.names, row)) for row in written], schema=SCHEMA)
    committed = read_committed(str(out))
    assert committed.num_rows == len(written)
    assert not written or _rows(committed, expected) == _rows(expected, expected)  # each row once
    _check_tables(out, targets, latest=MetadataLog(str(out)).latest_batch_id())
    # a table from the first batch that commits a file (none without one)
    assert all(_tables(out, t) for t in targets.values()) == bool(len(committed_files(str(out))))


_A = [(1, "x", 1.5, _dt.date(1, 1, 1), None, None, "a")]


def test_killed_steps_restarted_match_read_committed(tmp_path_factory, fuzz_minutes: float, monkeypatch) -> None:
    """Random lives of an output with both tables, their steps SIGKILLed at failpoints and at random moments,
    each killed step run again (a fixed seed and a few examples; ``--fuzz-minutes`` for a long random search):
    after each kill and at the end every snapshot left in each table reads read_committed(as_of_batch=b)'s
    rows through pyiceberg (catalog, metadata file) and polars; the rows written are committed exactly once."""
    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")  # no polars_iceberg plugin: pyiceberg plans
    zygote = Zygote(tmp_path_factory.mktemp("zygote"))

    @fixed_or_fuzzed(fuzz_minutes, 3, 10)
    @given(_lives())
    # the writes' syncs killed before (the write run again) and after their catalog commit (the next step), then
    # the table without catalog synced
    @example((True, [("write", (_A, "catalog"), ("at", "iceberg_commit", 1, "again")),
                     ("write", (_A, "catalog"), ("at", "iceberg_after_commit", 1, "on")), ("sync", "metadata", None)]))
    # an optimize killed after its swap (its sync of the catalog's table not made), that table synced, a vacuum
    # past the retention killed at once, then a write at its compaction batch
    @example((False, [("write", (_A, "metadata"), None), ("write", (_A, None), None),
                      ("optimize", "catalog", ("at", "optimize_after_commit", 1, "on")), ("sync", "catalog", None),
                      ("vacuum", ("0s", "catalog"), ("after", 0.0, "again")),
                      ("write", (_A, "metadata"), ("at", "compaction", 1, "again"))]))
    # found by the search: a batch of no rows (an unpartitioned output's empty file, listed by the table, which
    # a scan's plan leaves out: listed by the manifests), its write killed at once
    @example((False, [("write", ([], "metadata"), None), ("write", ([], "metadata"), ("after", 0.0, "again"))]))
    def run(lives) -> None:
        _check_lives(zygote, tmp_path_factory.mktemp("iceberg-kills"), *lives)

    try:
        deadline = time.monotonic() + 60 * fuzz_minutes
        run()
        while time.monotonic() < deadline:
            run()
    finally:
        zygote.close()


@pytest.mark.parametrize("table", ["behind", "made after"])
def test_a_table_behind_an_optimize_and_a_vacuum_past_it_syncs(tmp_path, table) -> None:
    """Found by the search: a batch the Iceberg table does not mirror yet (written without iceberg=, or by any batch
    before a table made later), its files replaced by an optimize that did not sync this table and deleted by a
    vacuum past the retention. Every later sync failed (MissingDataFileError: a snapshot per log batch, the batch's
    footers read) and the table stayed behind for good. Such a batch is now mirrored by the next one whose files
    exist (the optimize's), as a batch whose snapshot the log no longer holds; a missing file still committed is
    still the MissingDataFileError."""
    out = str(tmp_path / "out")
    target = {"catalog": _catalog_properties(tmp_path), "table": TABLE}
    row = pa.Table.from_pylist([dict(zip(SCHEMA.names, (0, *_A[0])))], schema=SCHEMA)
    write_batch(out, row, app_id="a", version=0, iceberg=target if table == "behind" else None)
    write_batch(out, row, app_id="a", version=1)
    optimize(out)
    assert vacuum(out, _dt.timedelta(0), allow_short_retention=True).plan.orphans
    result = sync_iceberg(out, **target)
    latest = MetadataLog(out).latest_batch_id()
    assert result.log_batch == latest
    for mirror in _tables(Path(out), target):
        by_batch = assert_mirrors(mirror, Path(out), latest=latest)
        assert sorted(by_batch) == ([0] if table == "behind" else []) + [latest]  # batch 1: by the optimize's
    os.remove(committed_files(out)[0].path)  # a file the latest batch commits, missing: still refused
    with pytest.raises(MissingDataFileError, match="missing from storage"):
        sync_iceberg(out)  # a table made now: every batch from the first
