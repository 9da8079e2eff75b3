"""vacuum and an output's Iceberg table: a file a snapshot within the retention references is kept (time travel to
each such snapshot reads its batch's rows after the vacuum), the snapshots past it are expired from the table's
metadata first, and no snapshot left names a file vacuum deleted."""

from __future__ import annotations

import datetime as _dt
import os
import time
from pathlib import Path

import pyarrow as pa
from pyiceberg.table import StaticTable

from parquet_sink import MetadataLog, committed_files, optimize, read_committed, sync_iceberg, vacuum
from parquet_sink.iceberg import expiry, sync as iceberg_sync
from parquet_sink.iceberg.sync import MARKER
from tests.delta.readers import spark_style_batch

DAY_S = 86_400


def _rows(table: pa.Table) -> list[dict]:
    return sorted(table.select(["i"]).to_pylist(), key=repr)


def _batch(version: int) -> pa.Table:
    return pa.table({"i": pa.array([version * 10 + i for i in range(3)], pa.int64()), "k": ["a", "b", "a"]})


def _age(root: Path, days: int) -> None:
    """Every data file of the output as written ``days`` ago (time on storage)."""
    then = time.time() - days * DAY_S
    for path in root.rglob("*.parquet"):
        if not any(part.startswith(("_", ".")) for part in path.relative_to(root).parts):
            os.utime(path, (then, then))


def _check_every_snapshot(root: Path, location: str) -> dict[int, int]:
    """Each snapshot of the table reads its batch's rows and every file it names exists: {batch: snapshot id}."""
    table = StaticTable.from_metadata(location)
    snapshots = {int(s.summary[MARKER]): s.snapshot_id for s in table.metadata.snapshots}
    for batch, snapshot_id in snapshots.items():
        files = table.scan(snapshot_id=snapshot_id).plan_files()
        assert all(Path(task.file.file_path).exists() for task in files), batch
        assert _rows(table.scan(snapshot_id=snapshot_id).to_arrow()) == _rows(read_committed(str(root), as_of_batch=batch))
    return snapshots


def test_vacuum_keeps_what_snapshots_within_retention_read_and_expires_the_rest(tmp_path):
    root = tmp_path / "out"
    log = MetadataLog(str(root), compact_interval=3, retention="7d", cleanup=False)
    spark_style_batch(log, _batch(0), ("k",), old=True)  # retention drops it at the compaction (batch 2)
    spark_style_batch(log, _batch(1), ("k",), old=False)
    sync_iceberg(str(root))
    spark_style_batch(log, _batch(2), ("k",), old=False)  # the compaction: batch 0's files leave the log
    spark_style_batch(log, _batch(3), ("k",), old=False)
    sync_iceberg(str(root))
    optimize(str(root), spark_sink_stopped=True)
    result = sync_iceberg(str(root))
    _age(root, 30)  # every file old on storage: only the Iceberg snapshots within the retention protect them
    dropped = {f.path for f in committed_files(str(root), as_of_batch=1)} - {f.path for f in committed_files(str(root))}
    assert dropped

    # within the retention (7 days): the snapshots before the drop and the optimize still read their rows
    dry = vacuum(str(root), "7d", dry_run=True)
    assert {i.path for i in dry.plan.iceberg_kept} >= {p for p in dropped if p not in {i.path for i in dry.plan.replaced_kept}}
    kept = vacuum(str(root), "7d")
    assert not ({i.path for i in kept.plan.orphans} & dropped)
    assert sorted(_check_every_snapshot(root, iceberg_sync.current_metadata(iceberg_sync.Storage(str(root))))) == \
        list(range(result.log_batch + 1))

    # past the retention: every snapshot but the current one is expired first, then their files go
    gone = vacuum(str(root), _dt.timedelta(0), allow_short_retention=True)
    assert dropped <= {i.path for i in gone.plan.orphans} and not gone.plan.iceberg_kept
    location = iceberg_sync.current_metadata(iceberg_sync.Storage(str(root)))
    assert location != result.metadata_location
    assert list(_check_every_snapshot(root, location)) == [result.log_batch]
    assert _rows(StaticTable.from_metadata(location).scan().to_arrow()) == _rows(read_committed(str(root)))
    assert sync_iceberg(str(root)).snapshots == 0  # the sync goes on from the expired table


def test_expired_snapshots_decides():
    """A snapshot expires once the one after it is older than the cutoff; the current one never does."""
    assert expiry.expired_snapshots([(1, 100), (2, 200), (3, 300)], 3, 250) == {1}
    assert expiry.expired_snapshots([(1, 100), (2, 200), (3, 300)], 3, 301) == {1, 2}
    assert expiry.expired_snapshots([(1, 100)], 1, 10**9) == set()
    assert expiry.expired_snapshots([], None, 10**9) == set()
