"""The log's columnar copies are named so that globs over an output miss them (``N.compact.columnar``, not
``N.compact.parquet``): duckdb's ``read_parquet('out/**/*.parquet')`` and polars' ``scan_parquet`` read the data
files only, as over Spark's own sink output. Copies written under the old name are still read, and deleted
(``vacuum``, the writer's cleanup) once their compact file is gone or a copy under the new name supersedes
them (issue 36, item 11)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pytest

from parquet_sink import MetadataLog, committed_files, read_committed, vacuum, write_batch

LOG = "_spark_metadata"


def _output(
    root: Path, versions: int = 7, interval: int = 3, partition_by: tuple[str, ...] = (), min_batches_to_retain: int = 100
) -> int:
    """An output of ``versions`` write_batch commits (version v: v + 1 rows), compacting every ``interval``;
    returns its row count."""
    for v in range(versions):
        table = pa.table({"id": list(range(10 * v, 10 * v + v + 1)), "k": ["ab"[v % 2]] * (v + 1)})
        write_batch(str(root), table, app_id="app", version=v, compact_interval=interval, partition_by=partition_by,
                    min_batches_to_retain=min_batches_to_retain)
    return sum(v + 1 for v in range(versions))


@pytest.mark.parametrize("partition_by", [(), ("k",)], ids=["flat", "partitioned"])
def test_duckdb_and_polars_globs_read_only_data_files(tmp_path, partition_by):
    rows = _output(tmp_path, partition_by=partition_by)
    meta = tmp_path / LOG
    assert (meta / "5.compact.columnar").exists(), "compaction wrote its copy"
    assert not list(meta.glob("*.parquet")), "no .parquet file in the log, as in Spark's sink output"
    glob = f"{tmp_path}/**/*.parquet"
    expected = sorted(read_committed(str(tmp_path)).column("id").to_pylist())
    assert len(expected) == rows
    got = duckdb.sql(f"SELECT id FROM read_parquet('{glob}', hive_partitioning = true) ORDER BY id").fetchall()
    assert [r[0] for r in got] == expected
    frame = pl.scan_parquet(glob, hive_partitioning=bool(partition_by)).select("id").collect()
    assert sorted(frame["id"].to_list()) == expected


def _old_named(root: Path, batch: int) -> Path:
    """Rename batch ``batch``'s copy to the name older versions gave it."""
    new = root / LOG / f"{batch}.compact.columnar"
    old = root / LOG / f"{batch}.compact.parquet"
    new.rename(old)
    return old


def _age(path: Path, minutes: int) -> None:
    then = time.time() - minutes * 60
    os.utime(path, (then, then))


def test_copies_under_the_old_name_are_still_read(tmp_path):
    _output(tmp_path)
    old = _old_named(tmp_path, 5)
    compact = tmp_path / LOG / "5.compact"
    # one size changed in the JSON, same length: a reader answering from the copy still sees the logged size
    raw = compact.read_bytes()
    sizes = {f.relative_path: f.size for f in committed_files(str(tmp_path))}
    logged = next(iter(sorted(sizes.values())))
    assert raw.count(f'"size":{logged},'.encode()) == 1
    compact.write_bytes(raw.replace(f'"size":{logged},'.encode(), f'"size":{logged + 1:0{len(str(logged))}d},'.encode()))
    listing = MetadataLog(str(tmp_path), cleanup=False).list_names()
    assert listing.sidecars[5] == str(old) and listing.superseded == []
    assert {f.relative_path: f.size for f in committed_files(str(tmp_path))} == sizes, "read from the old copy"
    assert any("5.compact.parquet" in str(p) for p in MetadataLog(str(tmp_path), cleanup=False).check())


def test_a_copy_under_the_new_name_supersedes_the_old_and_vacuum_deletes_both_kinds(tmp_path):
    rows = _output(tmp_path, versions=9)
    meta = tmp_path / LOG
    old5 = _old_named(tmp_path, 5)
    log = MetadataLog(str(tmp_path), cleanup=False)
    assert log.write_columnar_copy(5) == str(meta / "5.compact.columnar")
    listing = log.list_names()
    assert listing.sidecars[5] == str(meta / "5.compact.columnar") and listing.superseded == [str(old5)]
    old8 = _old_named(tmp_path, 8)
    (meta / "2.compact.parquet").write_bytes((meta / "2.compact.columnar").read_bytes())
    (meta / "2.compact.columnar").unlink()
    (meta / "2.compact").unlink()  # as Spark's log cleanup deletes an old compact file: its old-named copy is orphaned
    for path in (old5, meta / "2.compact.parquet"):
        _age(path, 120)
    planned = vacuum(str(tmp_path), "1h", allow_short_retention=True, dry_run=True)
    assert sorted(Path(i.path).name for i in planned.plan.orphaned_copies) == ["2.compact.parquet", "5.compact.parquet"]
    vacuum(str(tmp_path), "1h", allow_short_retention=True)
    assert not old5.exists() and not (meta / "2.compact.parquet").exists() and old8.exists()
    assert read_committed(str(tmp_path)).num_rows == rows


def test_writer_cleanup_deletes_superseded_old_copies(tmp_path):
    _output(tmp_path, versions=6, min_batches_to_retain=1)  # the output's settings, which every writer applies
    old5 = _old_named(tmp_path, 5)
    MetadataLog(str(tmp_path), cleanup=False).write_columnar_copy(5)
    _age(old5, 20)
    log = MetadataLog(str(tmp_path), compact_interval=3, min_batches_to_retain=1, cleanup_delay="10m")
    assert log.add(6, [])
    assert not old5.exists() and (tmp_path / LOG / "5.compact.columnar").exists()
