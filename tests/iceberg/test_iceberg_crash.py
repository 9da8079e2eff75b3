"""Kills and races of the Iceberg mirror, in child processes, no Spark. A child running write_batch(...,
iceberg=...) is SIGKILLed inside sync_iceberg (failpoints ``iceberg_commit``: snapshots staged, nothing
committed; ``iceberg_after_commit``: the catalog commit made) and at random hits of them; after the restart the
table lists each committed file once, one snapshot per log batch, every snapshot reading read_committed's rows.
Two processes syncing one table at once both finish: the catalog's atomic swap (without a catalog, the exclusive
create of the version's metadata file) lets one commit, the loser reads the table again and goes on from the
winner's batch (never appending a file twice); so does a vacuum expiring snapshots. A sync killed after its
commit, before its version hint (``iceberg_version_hint``), is found by probing past the hint."""

from __future__ import annotations

import datetime as _dt
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import StaticTable

from parquet_sink import MetadataLog, optimize, read_committed, vacuum, write_batch
from parquet_sink.iceberg import current_metadata
from parquet_sink.iceberg.sync import HINT, METADATA_DIR, RETRIES
from parquet_sink.storage.filesystem import Storage
from parquet_sink.storage.paths import is_partial
from tests.iceberg.readers import assert_mirrors
from tests.iceberg.test_sync import _catalog_properties, _table
from tests.iceberg.test_vacuum import _age, _age_all

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import datetime, json, sys
import pyarrow as pa
from parquet_sink import sync_iceberg, vacuum, write_batch
out, target, app, first, last = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
if app == "-":  # a sync only
    print(json.dumps({"log_batch": sync_iceberg(out, **target).log_batch}))
elif app == "vacuum":  # past the retention
    vacuum(out, datetime.timedelta(0), allow_short_retention=True, iceberg=target or None)
    print(json.dumps({"done": True}))
else:
    for version in range(first, last):
        ids = [version * 10 + i + (1000 if app == "b" else 0) for i in range(5)]
        table = pa.table({"i": ids, "s": [f"s{i}" for i in ids], "k": [["a", "b c", None][i % 3] for i in ids]})
        write_batch(out, table, app_id=app, version=version, partition_by=["k"], iceberg=target or True)
    print(json.dumps({"done": True}))
"""


@pytest.fixture(autouse=True)
def _polars_plans_through_pyiceberg(monkeypatch):
    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")


def _start(out: Path, target: dict, app: str, versions: range, failpoints: str = "") -> subprocess.Popen:
    env = dict(os.environ, PARQUET_SINK_FAILPOINTS=failpoints)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(out), json.dumps(target), app, str(versions.start), str(versions.stop)],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )


def _run(out: Path, target: dict, app: str, versions: range, failpoints: str = "") -> tuple[int, str, str]:
    child = _start(out, target, app, versions, failpoints)
    stdout, stderr = child.communicate(timeout=180)
    return child.returncode, stdout, stderr


def _catalog_target(tmp_path: Path) -> dict:
    return {"catalog": _catalog_properties(tmp_path), "table": "db.events"}


def _table_of(tmp_path: Path, out: Path, target: dict):
    """The table as it is (read, not synced)."""
    if not target:
        return StaticTable.from_metadata(current_metadata(Storage(str(out))))
    properties = target["catalog"]
    return SqlCatalog("c", uri=properties["uri"], warehouse=properties["warehouse"]).load_table(target["table"])


def _marker(tmp_path: Path, out: Path, target: dict) -> int:
    return int(_table_of(tmp_path, out, target).current_snapshot().summary["parquet-sink.log-batch-id"])


@pytest.mark.parametrize("kind", ["metadata", "catalog"])
def test_killed_inside_the_sync_then_restarted(tmp_path, kind):
    """The write_batch of version 1 is SIGKILLed inside its sync before the catalog commit (iceberg_commit): the
    batch is committed, the table still mirrors batch 0, never a half. Rerunning version 1 (a skip for the log,
    whose sync catches up) and version 2, killed after its sync's commit (iceberg_after_commit, its second hit):
    the table mirrors batch 2. Version 3 then leaves one snapshot per batch, each file once."""
    out = tmp_path / "out"
    target = {} if kind == "metadata" else _catalog_target(tmp_path)
    assert _run(out, target, "a", range(1))[0] == 0
    code, stdout, _ = _run(out, target, "a", range(1, 2), "iceberg_commit=kill")
    assert code == -signal.SIGKILL and "done" not in stdout
    assert MetadataLog(str(out)).latest_batch_id() == 1 and _marker(tmp_path, out, target) == 0
    code, stdout, _ = _run(out, target, "a", range(1, 3), "iceberg_after_commit=kill@2")
    assert code == -signal.SIGKILL and "done" not in stdout
    assert MetadataLog(str(out)).latest_batch_id() == 2 and _marker(tmp_path, out, target) == 2
    assert _run(out, target, "a", range(3, 4))[0] == 0
    assert sorted(assert_mirrors(_table_of(tmp_path, out, target), out, latest=3)) == [0, 1, 2, 3]


def test_killed_at_random_hits_then_restarted(tmp_path):
    """Rounds of a child writing versions 0..7 with a catalog table, each killed at a random hit of a sync
    failpoint, or at a random moment, then restarted from version 0 (the committed ones are skips whose sync
    catches up): at the end every log batch has one snapshot and every file is listed once."""
    seed = int(os.environ.get("ICEBERG_KILL_SEED") or random.SystemRandom().randrange(2**32))
    rng = random.Random(seed)
    out = tmp_path / "out"
    target = _catalog_target(tmp_path)
    history = []
    for failpoints in (f"iceberg_commit=kill@{rng.randint(1, 6)}", f"iceberg_after_commit=kill@{rng.randint(1, 6)}",
                       ""):
        child = _start(out, target, "a", range(8), failpoints)
        try:
            child.communicate(timeout=rng.uniform(0.5, 4.0) if not failpoints else 180)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
        history.append((failpoints or "timer", child.returncode, MetadataLog(str(out)).latest_batch_id()))
    code, _, stderr = _run(out, target, "a", range(8))
    assert code == 0, (seed, history, stderr[-2000:])
    try:
        assert sorted(assert_mirrors(_table_of(tmp_path, out, target), out, latest=7)) == list(range(8))
    except AssertionError as exc:
        raise AssertionError(f"seed {seed} (ICEBERG_KILL_SEED): {history}: {exc}") from exc


def _wait_stopped(process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if Path(f"/proc/{process.pid}/stat").read_text().split(") ")[1].startswith("T"):
            return
        time.sleep(0.05)
    raise AssertionError(f"the child did not stop at its failpoint: {process.communicate()}")


@pytest.mark.parametrize("kind", ["catalog", "metadata"])
def test_two_syncs_race(tmp_path, kind):
    """The table mirrors batch 0; sync A stops with batches 1..3 staged (failpoint iceberg_commit=stop); two more
    batches are written and sync B commits 1..5; A goes on: its commit loses (the catalog's swap; without a
    catalog, the exclusive create of the version's metadata file B made), it reads the table again, finds it at
    batch 5 and commits nothing. Both exit 0; one snapshot per batch, no file twice, one metadata file a version.
    Before, pyiceberg's own retry of the lost commit applied A's snapshots again on top of B's: batches 1..3
    twice, their files listed twice; without a catalog A wrote a second file of B's version, and every later
    sync refused the table."""
    out = tmp_path / "out"
    target = {} if kind == "metadata" else _catalog_target(tmp_path)
    for version in range(4):
        write_batch(str(out), _table(version), app_id="a", version=version, partition_by=["k"],
                    iceberg=(target or True) if version == 0 else None)
    stopped = _start(out, target, "-", range(0), "iceberg_commit=stop")
    _wait_stopped(stopped)
    try:
        for version in range(4, 6):
            write_batch(str(out), _table(version), app_id="a", version=version, partition_by=["k"])
        code, stdout, stderr = _run(out, target, "-", range(0))
        assert code == 0 and json.loads(stdout) == {"log_batch": 5}, stderr[-2000:]
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
    stdout, stderr = stopped.communicate(timeout=180)
    assert stopped.returncode == 0 and json.loads(stdout) == {"log_batch": 5}, stderr[-2000:]
    assert sorted(assert_mirrors(_table_of(tmp_path, out, target), out, latest=5)) == list(range(6))
    directory = out / (METADATA_DIR if not target else "_exactly_once/.iceberg/.db.events")
    versions = [p.name.split("-", 1)[0] for p in directory.glob("*.metadata.json")]
    assert len(versions) == len(set(versions)) == 2  # created, then B's


@pytest.mark.parametrize("kind", ["catalog", "metadata"])
def test_two_writers_keep_one_table(tmp_path, kind):
    """Two processes append to a new output at once (apps a and b, each with iceberg= the same table: a catalog's,
    or the one without catalog, many rounds): their log commits, their syncs and the table's creation race; both
    finish (without a catalog every sync succeeded: none lost 10 races in a row, no warning), and the table
    mirrors the log: one snapshot per log batch, each file once, every snapshot reading read_committed's rows
    through pyiceberg and polars. Before, without a catalog, two syncs at once wrote two metadata files of one
    version and every later sync refused the table."""
    out = tmp_path / "out"
    target = {} if kind == "metadata" else _catalog_target(tmp_path)
    rounds = 6 if target else 12
    children = [_start(out, target, app, range(rounds)) for app in ("a", "b")]
    for child in children:
        _, stderr = child.communicate(timeout=300)
        assert child.returncode == 0 and (target or "could not follow" not in stderr), stderr[-2000:]
    assert read_committed(str(out)).num_rows == 5 * 2 * rounds
    latest = 2 * rounds - 1
    assert sorted(assert_mirrors(_table_of(tmp_path, out, target), out, latest=latest)) == list(range(latest + 1))


def test_a_vacuum_expiring_snapshots_races_a_sync(tmp_path):
    """The table without catalog: a vacuum past the retention stops in its expiry's commit (failpoint
    iceberg_metadata_write=stop: its metadata file half written); a sync commits that version meanwhile; the vacuum goes
    on: its create of the version fails, it reads the table again and expires that one's snapshots instead (batch 0's;
    batch 1's was current at the vacuum's cutoff). Both exit 0, one metadata file a version; the next write's sync goes
    on, and every snapshot reads read_committed's rows. Before, the vacuum wrote a second file of the sync's version and
    every later sync refused the table."""
    out = tmp_path / "out"
    for version in range(3):
        write_batch(str(out), _table(version), app_id="a", version=version, partition_by=["k"],
                    iceberg=True if version < 2 else None)
    _age(out, 30)
    stopped = _start(out, {}, "vacuum", range(0), "iceberg_metadata_write=stop")
    _wait_stopped(stopped)
    try:
        code, stdout, stderr = _run(out, {}, "-", range(0))
        assert code == 0 and json.loads(stdout) == {"log_batch": 2}, stderr[-2000:]
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
    stdout, stderr = stopped.communicate(timeout=180)
    assert stopped.returncode == 0 and json.loads(stdout) == {"done": True}, stderr[-2000:]
    assert list(assert_mirrors(_table_of(tmp_path, out, {}), out, latest=2)) == [1, 2]
    assert sorted(p.name.split("-", 1)[0] for p in (out / METADATA_DIR).glob("*.metadata.json")) == \
        ["00000", "00001", "00002", "00003"]  # the writes', the sync's, the vacuum's
    write_batch(str(out), _table(3), app_id="a", version=3, partition_by=["k"], iceberg=True)
    assert list(assert_mirrors(_table_of(tmp_path, out, {}), out, latest=3)) == [1, 2, 3]


def test_sync_killed_after_its_commit_before_its_version_hint(tmp_path):
    """The table without catalog: a sync SIGKILLed after its metadata file is created, before the version hint is
    written (failpoint iceberg_version_hint): the table is at the new batch (its file found by probing past the
    stale hint), and the next sync, in another process, goes on from it and writes the hint."""
    out = tmp_path / "out"
    for version in range(2):
        write_batch(str(out), _table(version), app_id="a", version=version, partition_by=["k"],
                    iceberg=True if version == 0 else None)
    hint = out / METADATA_DIR / HINT
    assert hint.read_text() == "0"
    code, stdout, stderr = _run(out, {}, "-", range(0), "iceberg_version_hint=kill")
    assert code == -signal.SIGKILL and not stdout, stderr[-2000:]
    assert hint.read_text() == "0" and _marker(tmp_path, out, {}) == 1
    write_batch(str(out), _table(2), app_id="a", version=2, partition_by=["k"])
    code, stdout, stderr = _run(out, {}, "-", range(0))
    assert code == 0 and json.loads(stdout) == {"log_batch": 2}, stderr[-2000:]
    assert hint.read_text() == "2"
    assert sorted(assert_mirrors(_table_of(tmp_path, out, {}), out, latest=2)) == [0, 1, 2]


def test_a_table_without_the_retry_property_gets_it(tmp_path):
    """A table whose properties let pyiceberg retry a lost commit by applying it again (one made before the
    property, or changed by hand) gets commit.retry.num-retries=0 back with the next sync's commit."""
    out = tmp_path / "out"
    target = _catalog_target(tmp_path)
    write_batch(str(out), _table(0), app_id="a", version=0, iceberg=target)
    table = _table_of(tmp_path, out, target)
    assert table.properties[RETRIES] == "0"
    with table.transaction() as transaction:
        transaction.remove_properties(RETRIES)
    assert RETRIES not in _table_of(tmp_path, out, target).properties
    write_batch(str(out), _table(1), app_id="a", version=1, iceberg=target)
    assert _table_of(tmp_path, out, target).properties[RETRIES] == "0"


@pytest.mark.parametrize("kind", ["metadata", "catalog"])
def test_vacuum_killed_deleting_metadata_then_rerun(tmp_path, kind):
    """A vacuum past the retention SIGKILLed at its third metadata deletion (failpoint iceberg_vacuum): the table
    (its current metadata file; the catalog's table) still reads read_committed's rows at every snapshot left;
    the vacuum run again deletes the rest (a third finds nothing stale) and the table reads the same."""
    out = tmp_path / "out"
    target = {} if kind == "metadata" else _catalog_target(tmp_path)
    for version in range(4):
        write_batch(str(out), _table(version), app_id="a", version=version, iceberg=target or True)
    assert optimize(str(out)).committed
    write_batch(str(out), _table(4), app_id="a", version=4, iceberg=target or True)
    latest = MetadataLog(str(out)).latest_batch_id()
    _age(out, 30)
    directory = out / METADATA_DIR if not target else out / "_exactly_once" / ".iceberg" / ".db.events"
    _age_all(directory, 30)
    files = set(directory.iterdir())
    code, stdout, _ = _run(out, target, "vacuum", range(0), "iceberg_vacuum=kill@3")
    assert code == -signal.SIGKILL and "done" not in stdout
    assert len(files - set(directory.iterdir())) == 2  # two deleted, the third not
    assert list(assert_mirrors(_table_of(tmp_path, out, target), out, latest=latest)) == [latest]
    assert vacuum(str(out), _dt.timedelta(0), allow_short_retention=True, iceberg=target or None).plan.iceberg_stale
    assert not vacuum(str(out), _dt.timedelta(0), allow_short_retention=True, iceberg=target or None).plan.iceberg_stale
    assert list(assert_mirrors(_table_of(tmp_path, out, target), out, latest=latest)) == [latest]


def test_sync_killed_writing_its_metadata_file(tmp_path):
    """The table without catalog: a sync SIGKILLed halfway through writing its metadata file (failpoint
    iceberg_metadata_write) leaves no torn metadata file (only a hidden one, which vacuum deletes once old), the
    table at the batch before; the next write's sync catches up. Before, the half file kept its name and every
    later sync failed on it until deleted by hand."""
    out = tmp_path / "out"
    for version in range(2):
        write_batch(str(out), _table(version), app_id="a", version=version, partition_by=["k"],
                    iceberg=True if version == 0 else None)
    code, stdout, stderr = _run(out, {}, "-", range(0), "iceberg_metadata_write=kill")
    assert code == -signal.SIGKILL and not stdout, stderr[-2000:]
    assert MetadataLog(str(out)).latest_batch_id() == 1 and _marker(tmp_path, out, {}) == 0
    for path in (out / METADATA_DIR).glob("*.metadata.json"):
        json.loads(path.read_text())
    assert [p.name for p in (out / METADATA_DIR).iterdir() if is_partial(p.name)]
    write_batch(str(out), _table(2), app_id="a", version=2, partition_by=["k"], iceberg=True)
    assert sorted(assert_mirrors(_table_of(tmp_path, out, {}), out, latest=2)) == [0, 1, 2]


def test_a_torn_newest_metadata_file_is_passed_over(tmp_path):
    """A torn newest metadata file (a sync of an earlier version killed while writing it in place): readers
    finding the table by current_metadata and the next sync use the version before, the sync commits the next
    version over it, and every snapshot reads read_committed's rows. Before, every sync failed on it."""
    out = tmp_path / "out"
    for version in range(2):
        write_batch(str(out), _table(version), app_id="a", version=version, partition_by=["k"], iceberg=True)
    whole = Path(current_metadata(Storage(str(out))))
    version = int(whole.name.split("-", 1)[0])
    torn = whole.with_name(f"{version + 1:05d}-0000-torn.metadata.json")
    torn.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    assert current_metadata(Storage(str(out))) == str(whole)
    write_batch(str(out), _table(2), app_id="a", version=2, partition_by=["k"], iceberg=True)
    location = current_metadata(Storage(str(out)))
    assert location not in (str(whole), str(torn)) and Path(location).name.startswith(f"{version + 1:05d}-")
    assert sorted(assert_mirrors(StaticTable.from_metadata(location), out, latest=2)) == [0, 1, 2]
