"""The check every Iceberg test of a writer ends with: the table lists each committed file exactly once, has one
snapshot per log batch it mirrors, and pyiceberg and polars read read_committed's rows at every snapshot."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from parquet_sink import committed_files
from parquet_sink.iceberg.sync import MARKER
from tests.iceberg.test_sync import _assert_same


def assert_mirrors(table, root: Path, latest: int | None = None) -> dict[int, int]:
    """``table`` (a pyiceberg Table: a catalog's or ``StaticTable.from_metadata``) mirrors the output ``root``
    (at its log batch ``latest`` when given): snapshots in log batch order, one per batch; the current one lists
    each committed file once; pyiceberg's scans of every snapshot and polars' of the oldest and the current read
    read_committed(as_of_batch)'s rows. Returns {log batch: snapshot id}. Polars plans through pyiceberg
    (POLARS_ICEBERG_PLANNER, set by the caller's environment or the default)."""
    markers = [int(s.summary[MARKER]) for s in table.metadata.snapshots]
    assert markers == sorted(set(markers)), f"snapshots not one per log batch: {markers}"
    current = int(table.current_snapshot().summary[MARKER])
    if latest is not None:
        assert current == latest
    listed = table.inspect.files().column("file_path").to_pylist()  # a scan's plan leaves out files of no rows
    assert len(listed) == len(set(listed)), "a file listed twice"
    assert sorted(listed) == sorted(f.path for f in committed_files(str(root), as_of_batch=current))
    by_batch = {int(s.summary[MARKER]): s.snapshot_id for s in table.metadata.snapshots}
    for batch, snapshot_id in by_batch.items():
        _assert_same(table.scan(snapshot_id=snapshot_id).to_arrow(), root, as_of_batch=batch)
    # polars plans through pyiceberg (its scan above): the oldest and the current snapshot (a third of the suite's
    # Iceberg time went to polars reading every snapshot again)
    for batch in {min(by_batch), max(by_batch)}:
        scanned = pl.scan_iceberg(table, snapshot_id=by_batch[batch]).collect().to_arrow()
        _assert_same(scanned, root, as_of_batch=batch)
    return by_batch
