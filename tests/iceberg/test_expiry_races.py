"""vacuum's snapshot expiry racing a sync of the same Iceberg table (issue 55, item 2): whichever commit lands
first, no snapshot is lost and the expiry is applied. Two real races: a sync in another process committing
while the expiry is stopped between its read of the table and its commit (failpoint ``iceberg_expire=stop``:
a catalog's table, whose commit applies the expiry to the table as it is then, and the table without catalog,
whose commit of that version loses and reads the table again), and a sync (another process) committing inside
the catalog's own commit, between its read of the current metadata and its swap (the catalog's
``CommitFailedException``: the expiry reads the table again, ``expire_snapshots``' retry)."""

from __future__ import annotations

import datetime as _dt
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import StaticTable

from parquet_sink import MetadataLog, sync_iceberg, vacuum, write_batch
from parquet_sink.iceberg import current_metadata
from parquet_sink.iceberg.sync import MARKER, METADATA_DIR
from parquet_sink.storage.filesystem import Storage
from tests.delta.test_races import ROOT, _env, _stopped
from tests.iceberg.readers import assert_mirrors
from tests.iceberg.test_sync import _catalog_properties, _table

# one vacuum past a zero retention, of the table without catalog (and of the catalog's table ARGV[2] names)
VACUUM = """
import datetime, json, sys
from parquet_sink import vacuum
iceberg = json.loads(sys.argv[2])
result = vacuum(sys.argv[1], datetime.timedelta(0), allow_short_retention=True, iceberg=iceberg)
print(json.dumps({"stale": len(result.plan.iceberg_stale)}))
"""

# one batch written and synced, as another writer's process does it
SYNC = """
import json, sys
from parquet_sink import sync_iceberg, write_batch
from tests.iceberg.test_sync import _table
out, version, target = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
write_batch(out, _table(version), app_id="a", version=version, partition_by=["k"])
print(sync_iceberg(out, **(target or {})).log_batch)
"""


@pytest.fixture(autouse=True)
def _polars_plans_through_pyiceberg(monkeypatch):
    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")  # no polars_iceberg plugin here


def _sync_process(out: Path, version: int, target: dict | None) -> int:
    """Write batch ``version`` and sync it in another process; the log batch the table then mirrors."""
    done = subprocess.run([sys.executable, "-c", SYNC, str(out), str(version), json.dumps(target)], env=_env(),
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


def _seeded(tmp_path: Path, kind: str) -> tuple[Path, dict | None]:
    """An output of 4 batches whose table (``kind``) mirrors each in a snapshot of its own."""
    root = tmp_path / "out"
    target = None if kind == "metadata" else {"catalog": _catalog_properties(tmp_path), "table": "db.events"}
    for version in range(4):
        write_batch(str(root), _table(version), app_id="a", version=version, partition_by=["k"],
                    iceberg=target or True)
    return root, target


def _table_of(root: Path, target: dict | None):
    if target is None:
        return StaticTable.from_metadata(current_metadata(Storage(str(root))))
    properties = target["catalog"]
    return SqlCatalog("c", uri=properties["uri"], warehouse=properties["warehouse"]).load_table(target["table"])


def _assert_expired_and_kept(root: Path, target: dict | None) -> None:
    """The expiry of the table as vacuum read it (batches 0-3, 3 current) applied, the racing sync's snapshot
    (batch 4) kept and current, and every snapshot left reading read_committed's rows as of its batch."""
    table = _table_of(root, target)
    assert [int(s.summary[MARKER]) for s in table.metadata.snapshots] == [3, 4]
    assert sorted(assert_mirrors(table, root, latest=4)) == [3, 4]
    assert sync_iceberg(str(root), **(target or {})).snapshots == 0  # in step: nothing lost, nothing to redo


@pytest.mark.parametrize("kind", ["catalog", "metadata"])
def test_a_sync_committing_between_the_expirys_read_and_its_commit(tmp_path, kind):
    """vacuum (another process) stopped after reading the table and choosing the snapshots to expire; this process
    writes batch 4 and syncs it; vacuum goes on. A catalog's commit applies the expiry to the table as the
    sync left it; the table without catalog's commit of the version the sync took loses, and the expiry reads
    the table again (on a table whose metadata files were named at random, both commits would have made that
    version: a table no later sync could tell the current version of)."""
    root, target = _seeded(tmp_path, kind)
    vacuuming = subprocess.Popen([sys.executable, "-c", VACUUM, str(root), json.dumps(target)],
                                 env=_env("iceberg_expire=stop"), cwd=ROOT, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
    assert _stopped(vacuuming), "vacuum did not stop before its expiry's commit"
    try:  # this process is the other writer
        write_batch(str(root), _table(4), app_id="a", version=4, partition_by=["k"])
        assert sync_iceberg(str(root), **(target or {})).log_batch == 4
    finally:
        os.kill(vacuuming.pid, signal.SIGCONT)
    out, err = vacuuming.communicate(timeout=300)
    assert vacuuming.returncode == 0, err
    if target is None:
        versions = [p.name.split("-", 1)[0] for p in (root / METADATA_DIR).glob("*.metadata.json")]
        assert len(versions) == len(set(versions)), sorted(versions)  # one metadata file per version
    _assert_expired_and_kept(root, target)


def test_a_sync_winning_the_catalogs_swap_makes_the_expiry_read_the_table_again(tmp_path):
    """A sync (another process) commits inside the expiry's catalog commit, after the catalog read the current
    metadata and wrote the expiry's new metadata file, before its swap: the swap fails (CommitFailedException),
    and the expiry reads the table again and commits a second time, now on top of the sync's snapshot."""
    root, target = _seeded(tmp_path, "catalog")
    properties = target["catalog"]
    writes: list[str] = []

    class RacedCatalog(SqlCatalog):
        def _write_metadata(self, metadata, io, metadata_path):  # every commit's, between its read and its swap
            writes.append(metadata_path)
            if len(writes) == 1:
                assert _sync_process(root, 4, target) == 4
            return SqlCatalog._write_metadata(metadata, io, metadata_path)

    catalog = RacedCatalog("c", uri=properties["uri"], warehouse=properties["warehouse"])
    assert MetadataLog(str(root)).latest_batch_id() == 3
    result = vacuum(str(root), _dt.timedelta(0), allow_short_retention=True,
                    iceberg={"catalog": catalog, "table": "db.events"})
    assert len(writes) == 2  # the expiry committed twice: once lost to the sync, once on top of it
    assert _table_of(root, target).metadata_location == writes[1]  # the second commit's swap is the one made
    _assert_expired_and_kept(root, target)
