"""An optimize in the Delta log (issue 37, item 2): the swap mirrors as a Delta commit of its own whose
``remove`` and ``add`` actions carry ``dataChange=false`` and whose commitInfo operation is ``OPTIMIZE``, as
delta-rs's ``optimize.compact()`` writes it (the oracle: the same shape compacted by delta-rs), so a Delta
streaming reader, which reads the ``dataChange=true`` adds of each version, sees every row once; time travel
before the swap reads the old files; ``verify`` (compare_logs) stays clean.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from parquet_sink import committed_files, read_committed, sync_delta_log, write_batch
from parquet_sink.delta.sync import compare_logs
from parquet_sink.maintenance import optimize
from tests.delta.readers import assert_delta_matches
from tests.maintenance.test_optimize import _large_and_small_partition, _rows, _version

deltalake = pytest.importorskip("deltalake")


def _commit(root: str, version: int) -> list[dict[str, Any]]:
    text = Path(root, "_delta_log", f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.split("\n") if line]


def _actions(root: str, version: int, kind: str) -> list[dict[str, Any]]:
    return [a[kind] for a in _commit(root, version) if kind in a]


def _streamed_rows(root: str) -> pa.Table:
    """What a Delta streaming source started at version 0 emits: version 0's files, then each later version's
    ``add`` actions with ``dataChange=true``; a ``remove`` with ``dataChange=true`` would fail such a stream."""
    latest = deltalake.DeltaTable(root).version()
    tables = []
    for version in range(latest + 1):
        for remove in _actions(root, version, "remove"):
            assert remove["dataChange"] is False, (version, remove)
        for add in _actions(root, version, "add"):
            if add["dataChange"]:
                table = pq.read_table(Path(root, unquote(add["path"])))
                tables.append(table.select(sorted(c for c in table.column_names if c != "day")))
    return pa.concat_tables(tables)


def _without_day(table: pa.Table) -> pa.Table:
    return table.select(sorted(c for c in table.column_names if c != "day"))


def test_an_optimize_mirrors_as_a_delta_optimize_with_data_change_false(out: str) -> None:
    for v in range(4):
        write_batch(out, _version(v), app_id="app", version=v, partition_by=["day"], delta_log=True)
    expected = pa.concat_tables(_version(v) for v in range(4))
    before = deltalake.DeltaTable(out)
    version_before = before.version()
    files_before = set(map(unquote, pa.table(before.get_add_actions(flatten=False)).column("path").to_pylist()))

    result = optimize(out)  # the output has a Delta log: it follows the swap

    assert result.committed and result.delta is not None and result.delta.optimizes == 1
    table = deltalake.DeltaTable(out)
    assert table.history(1)[0]["operation"] == "OPTIMIZE"
    swap = table.version()
    adds, removes = _actions(out, swap, "add"), _actions(out, swap, "remove")
    assert {unquote(r["path"]) for r in removes} == files_before
    assert not any(a["dataChange"] for a in adds) and not any(r["dataChange"] for r in removes)
    root = Path(out)
    assert {str(root / unquote(a["path"])) for a in adds} == set(result.files)
    assert _rows(table.to_pyarrow_table()) == _rows(expected)
    old = deltalake.DeltaTable(out)
    old.load_as_version(version_before)  # time travel before the swap reads the old files
    assert set(map(unquote, pa.table(old.get_add_actions(flatten=False)).column("path").to_pylist())) == files_before
    assert _rows(old.to_pyarrow_table()) == _rows(expected)
    assert _rows(_streamed_rows(out)) == _rows(_without_day(expected))  # every row once
    assert compare_logs(out) == ([], [])
    assert_delta_matches(out)


def test_batches_around_an_optimize_get_delta_commits_of_their_own(out: str) -> None:
    """A sync that catches up appends, an optimize and more appends commits them apart (WRITE, OPTIMIZE, WRITE):
    an OPTIMIZE commit holds the swap's actions only, and a streaming reader sees every row once."""
    for v in range(4):
        write_batch(out, _version(v), app_id="app", version=v, partition_by=["day"], delta_log=True)
    write_batch(out, _version(4), app_id="app", version=4, partition_by=["day"])  # not mirrored yet
    swap = optimize(out, delta_log=False)
    for v in range(5, 7):
        write_batch(out, _version(v), app_id="app", version=v, partition_by=["day"])
    synced = sync_delta_log(out)
    assert synced.committed and synced.optimizes == 1 and synced.previous_log_batch_id == 3
    assert synced.log_batch_id == swap.log_batch_id + 2
    history = deltalake.DeltaTable(out).history(4)
    assert [h["operation"] for h in history] == ["WRITE", "OPTIMIZE", "WRITE", "WRITE"]
    assert int(history[2]["parquetSinkLogBatchId"]) == swap.log_batch_id - 1  # batch 4, the optimize's waits
    expected = pa.concat_tables(_version(v) for v in range(7))
    assert _rows(_streamed_rows(out)) == _rows(_without_day(expected))
    write_batch(out, _version(7), app_id="app", version=7, partition_by=["day"], delta_log=True)
    assert compare_logs(out) == ([], [])
    assert _rows(deltalake.DeltaTable(out).to_pyarrow_table()) == _rows(read_committed(out))


def _shape(root: str, version: int) -> dict[str, Any]:
    """What a Delta OPTIMIZE commit says, without names, sizes and times: its operation, the actions' kinds and
    keys, their dataChange, and the partitions and file counts removed and added."""
    commit = _commit(root, version)
    info = next(a["commitInfo"] for a in commit if "commitInfo" in a)
    adds, removes = [a["add"] for a in commit if "add" in a], [a["remove"] for a in commit if "remove" in a]
    metrics = info["operationMetrics"]
    return {
        "operation": info["operation"],
        "predicate": info["operationParameters"]["predicate"],
        "metrics": (metrics["numFilesAdded"], metrics["numFilesRemoved"], metrics["partitionsOptimized"]),
        "add_keys": {k for a in adds for k, v in a.items() if v is not None},
        "remove_keys": {k for r in removes for k in r},
        "data_change": {a["dataChange"] for a in adds + removes},
        "added": sorted(json.dumps(a["partitionValues"], sort_keys=True) for a in adds),
        "removed": sorted(json.dumps(r["partitionValues"], sort_keys=True) for r in removes),
        "rows": sorted(json.loads(a["stats"])["numRecords"] for a in adds),
    }


def test_the_commit_has_the_shape_delta_rs_optimize_compact_writes(tmp_path: Path) -> None:
    """The same appends compacted by delta-rs (``write_deltalake`` then ``optimize.compact()``) and by us (the
    sink's writer then ``optimize``): the same OPTIMIZE commit, action for action (names, sizes, times aside)."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    tables = [_version(v).drop_columns(["ts", "amount", "f"]) for v in range(4)]
    for v, table in enumerate(tables):
        write_batch(ours, table, app_id="app", version=v, partition_by=["day"], delta_log=True)
        deltalake.write_deltalake(theirs, table, partition_by=["day"], mode="append")
    optimize(ours)
    deltalake.DeltaTable(theirs).optimize.compact()
    mine, reference = _shape(ours, deltalake.DeltaTable(ours).version()), _shape(theirs, 4)
    assert mine == reference | {"add_keys": mine["add_keys"]}
    assert reference["add_keys"] <= mine["add_keys"]
    assert reference["data_change"] == {False}


def test_cli_optimize_syncs_the_delta_log(out: str, capsys) -> None:
    from parquet_sink.cli.main import main

    for v in range(3):
        write_batch(out, _version(v), app_id="app", version=v, partition_by=["day"], delta_log=True)
    assert main(["optimize", out]) == 0
    assert deltalake.DeltaTable(out).history(1)[0]["operation"] == "OPTIMIZE"
    assert main(["verify", out]) == 0
    assert_delta_matches(out)


def test_a_swap_whose_snapshot_before_is_gone_is_mirrored_as_a_data_change(out: str) -> None:
    """The log files before the swap cleaned up before any sync: the swap cannot get a Delta commit of its own, and
    its new files hold rows of batches Delta readers never saw; so it is mirrored in one WRITE whose actions are
    all data changes: no row is hidden from a Delta stream (it would see the removes as a change)."""
    for v in range(4):
        write_batch(out, _version(v), app_id="app", version=v, partition_by=["day"], delta_log=True)
    for v in range(4, 13):
        write_batch(out, _version(v), app_id="app", version=v, partition_by=["day"])
    swap = optimize(out, delta_log=False)
    log_dir = Path(out, "_spark_metadata")
    for name in ["9.compact", *map(str, range(10, swap.log_batch_id))]:
        (log_dir / name).unlink()
    synced = sync_delta_log(out)
    assert synced.committed and synced.optimizes == 0 and synced.log_batch_id == swap.log_batch_id
    table = deltalake.DeltaTable(out)
    assert table.history(1)[0]["operation"] == "WRITE"
    version = table.version()
    actions = _actions(out, version, "add") + _actions(out, version, "remove")
    assert actions and all(a["dataChange"] for a in actions)
    expected = pa.concat_tables(_version(v) for v in range(13))
    assert _rows(table.to_pyarrow_table()) == _rows(expected)
    assert compare_logs(out)[0] == []


def test_a_z_order_of_one_large_file_reaches_delta_readers_with_statistics(out: str) -> None:
    """Issue 54, items 2 and 3 through the Delta mirror: the z-order that cuts a partition of one large file commits
    an OPTIMIZE whose add actions carry each new file's row count and bounds (what pyarrow computes over the file),
    and delta-rs's filtered read prunes by them: the files whose bounds leave the value out are corrupted here, and
    the read still returns exactly the matching rows. Before, the lone file was left and no file could be skipped."""
    expected = _large_and_small_partition(out)
    sync_delta_log(out)
    big = max(committed_files(out), key=lambda f: f.size)
    result = optimize(out, z_order=["x", "y"], target_file_size=big.size // 8 + 1)
    assert result.committed and result.delta is not None and result.delta.optimizes == 1
    table = deltalake.DeltaTable(out)
    assert table.history(1)[0]["operation"] == "OPTIMIZE"
    adds = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    assert len(adds) == result.files_added == 9
    probe = expected.column("x")[17].as_py()
    for add in adds:
        rows = pq.read_table(Path(out, unquote(add["path"]))).select(["x", "y"])
        assert add["num_records"] == rows.num_rows
        assert (add["min.x"], add["max.x"]) == (pc.min(rows["x"]).as_py(), pc.max(rows["x"]).as_py())
        assert (add["min.y"], add["max.y"]) == (pc.min(rows["y"]).as_py(), pc.max(rows["y"]).as_py())
        if not add["min.x"] <= probe <= add["max.x"]:
            Path(out, unquote(add["path"])).write_bytes(b"not parquet")
    where = ds.field("x") == probe
    assert _rows(table.to_pyarrow_table(filters=where)) == _rows(expected.filter(where))
