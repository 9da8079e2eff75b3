"""Vacuum never breaks Delta time travel within the retention the table sets (issue 35, item 5): a file a
``remove`` action names is kept while its commit file is in the Delta log (time travel reaches the version
before it), and while its tombstone is younger than ``delta.deletedFileRetentionDuration`` (set at creation to
at least the log retention), whatever ``older_than`` says; a tombstone stamped in the future (the syncing
machine's clock ahead) protects its file too. The syncing process's clock is skewed for real: the sync module
reads a clock an hour or a week off."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace

import deltalake
import pytest

from parquet_sink import MetadataLog, committed_files, sync_delta_log
from parquet_sink.delta import sync as sync_module
from parquet_sink.maintenance import vacuum
from tests.delta.readers import DAY_MS, assert_delta_matches, spark_style_batch
from tests.delta.test_sync import _table

HOUR_MS = 3_600_000


@pytest.fixture
def skewed_clock(monkeypatch):
    """Set the clock the sync stamps deletion times with to ``offset_ms`` off this machine's."""

    def skew(offset_ms: int, at_ms: int | None = None) -> None:
        """``at_ms``: the clock stands still there (a tombstone exactly at the retention's boundary)."""
        now = (lambda: at_ms / 1000) if at_ms is not None else (lambda: time.time() + offset_ms / 1000)
        clock = SimpleNamespace(time=now, monotonic=time.monotonic, sleep=time.sleep)
        monkeypatch.setattr(sync_module, "time", clock)

    return skew




def test_tombstones_protect_files_within_the_tables_retention_and_from_the_future(out, skewed_clock):
    log = MetadataLog(out, compact_interval=2, retention="7d", cleanup=False)
    files = {}
    for batch in range(2):  # batch 1 is the first compaction (interval 2): each old batch below is one before one
        spark_style_batch(log, _table(batch, rows=1), (), old=False)
    sync_delta_log(out, checkpoint_interval=2, log_retention="1s")
    # stamped exactly at the cutoff vacuum uses below, a minute ahead of now so the checkpoints written before it
    # (by the real clock) still carry it
    at_boundary = int(time.time() * 1000) + 60_000 - 7 * DAY_MS
    for name, offset, at_ms in (
        ("under", -(7 * DAY_MS - HOUR_MS), None), ("over", -(7 * DAY_MS + HOUR_MS), None), ("future", HOUR_MS, None),
        ("at", 0, at_boundary),
    ):
        old = spark_style_batch(log, _table(len(files) + 2, rows=1), (), old=True)
        (files[name],) = {f.relative_path for f in committed_files(out, batches=(old, old))}
        sync_delta_log(out)
        spark_style_batch(log, _table(10 + len(files), rows=1), (), old=False)  # a compaction: drops the old one
        assert files[name] not in {f.relative_path for f in committed_files(out)}
        skewed_clock(offset, at_ms)
        assert sync_delta_log(out).removed == 1  # the remove action stamped by a clock `offset` off (or at `at_ms`)
        skewed_clock(0)
    for version in range(6):  # the commit files expire (log retention 1s); the next checkpoints clean them up
        time.sleep(0.6)
        spark_style_batch(log, _table(20 + version, rows=1), (), old=False)
        sync_delta_log(out)
    delta_log = Path(out) / "_delta_log"
    assert any(p.name.endswith(".checkpoint.parquet") for p in delta_log.iterdir())
    assert not any('"remove"' in p.read_text() for p in delta_log.glob("*.json")), "commit files with removes left"
    week_ago = time.time() - 8 * 86400
    for relative in files.values():
        os.utime(Path(out) / relative, (week_ago, week_ago))  # old enough for older_than by their own age
    skewed_clock(0, at_boundary + 7 * DAY_MS)  # a tombstone exactly as old as the retention is kept, as Delta keeps it
    result = vacuum(out, "1h", allow_short_retention=True, include_files_before_log=True)
    kept = {os.path.relpath(i.path, out) for i in result.plan.delta_kept}
    gone = {os.path.relpath(i.path, out) for i in result.plan.orphans}
    assert kept == {files["under"], files["future"], files["at"]} and gone == {files["over"]}, (kept, gone, files)
    assert (Path(out) / files["under"]).exists() and (Path(out) / files["future"]).exists()
    assert not (Path(out) / files["over"]).exists()
    assert_delta_matches(out)
    config = deltalake.DeltaTable(out).metadata().configuration  # at least the log retention, 7 days at least
    assert config["delta.deletedFileRetentionDuration"] == f"interval {7 * 86400} seconds"


def test_a_removed_file_stays_while_its_commit_file_keeps_the_version_before_it(out, skewed_clock):
    log = MetadataLog(out, compact_interval=2, retention="7d", cleanup=False)
    old = spark_style_batch(log, _table(0, rows=1), (), old=True)
    (dropped,) = {f.relative_path for f in committed_files(out, batches=(old, old))}
    sync_delta_log(out, log_retention="30d")
    spark_style_batch(log, _table(1, rows=1), (), old=False)
    skewed_clock(-8 * DAY_MS)  # the tombstone looks older than older_than below; its commit file is still there
    assert sync_delta_log(out).removed == 1
    month_ago = time.time() - 40 * 86400
    os.utime(Path(out) / dropped, (month_ago, month_ago))
    result = vacuum(out, "7d", include_files_before_log=True)
    assert {os.path.relpath(i.path, out) for i in result.plan.delta_kept} == {dropped} and not result.plan.orphans
    version_before = deltalake.DeltaTable(out, version=0).to_pyarrow_table()  # time travel still reads it
    assert version_before.num_rows == 1
    config = deltalake.DeltaTable(out).metadata().configuration
    assert config["delta.deletedFileRetentionDuration"] == config["delta.logRetentionDuration"] == f"interval {30 * 86400} seconds"
