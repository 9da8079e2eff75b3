"""A per-batch sync costs the batch, not the table (issue 35, item 7): after the first sync of a process, the
next one reads only the new batch's log file (no compact file, no older delta), the footers of the new files
only, and the Delta log's new commit files only (never its whole file list again); a compaction batch reads
the snapshot once and removes what retention dropped. The figures are in benchmarks (``run_scaling``)."""

from __future__ import annotations

import os
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parquet_sink import MetadataLog, committed_files, parquet_read, sync_delta_log, write_batch
from parquet_sink.delta import sync as sync_module
from parquet_sink.log.files import LogFiles
from tests.delta.readers import assert_delta_matches, delta_files, spark_style_batch
from tests.delta.test_sync import _table


@pytest.fixture
def reads(monkeypatch):
    """What a sync reads: log files (name), whole Delta states, footers (file name)."""
    seen: dict[str, list[str]] = {"log": [], "delta": [], "footers": []}
    log_read, delta_read, footer_read = LogFiles.read_table, sync_module.read_delta_state, pq.read_metadata
    sized_read = parquet_read.read_footer

    def read_table(self, path, *args, **kwargs):
        seen["log"].append(os.path.basename(path))
        return log_read(self, path, *args, **kwargs)

    def read_state(*args, **kwargs):
        seen["delta"].append("whole")
        return delta_read(*args, **kwargs)

    def read_metadata(where, *args, **kwargs):
        if not isinstance(where, pa.BufferReader):  # read_footer's bytes, counted below
            seen["footers"].append(os.path.basename(str(where)))
        return footer_read(where, *args, **kwargs)

    def read_footer(storage, path, size):
        seen["footers"].append(os.path.basename(path))
        return sized_read(storage, path, size)

    monkeypatch.setattr(LogFiles, "read_table", read_table)
    monkeypatch.setattr(sync_module, "read_delta_state", read_state)
    monkeypatch.setattr(sync_module.pq, "read_metadata", read_metadata)
    monkeypatch.setattr(parquet_read, "read_footer", read_footer)
    return seen


def test_a_batch_sync_reads_only_that_batch(out, reads):
    for version in range(11):  # batch 9 is a compaction (interval 10)
        write_batch(out, _table(version), app_id="app", version=version, partition_by=["cat"])
    sync_delta_log(out, check_files=False)  # creates the Delta log
    write_batch(out, _table(11), app_id="app", version=11, partition_by=["cat"])
    sync_delta_log(out, check_files=False)  # the process's first sync of an existing Delta log reads it whole
    write_batch(out, _table(12), app_id="app", version=12, partition_by=["cat"])
    new = {f.relative_path for f in committed_files(out, batches=(12, 12))}
    for seen in reads.values():
        seen.clear()
    result = sync_delta_log(out, check_files=False)
    assert result.committed and result.added == len(new) == 4
    assert reads["log"] == ["12"] and not reads["delta"], reads
    assert len(reads["footers"]) <= 2 * len(new) and set(reads["footers"]) <= {os.path.basename(p) for p in new}
    assert_delta_matches(out)


def test_a_compaction_batch_removes_what_retention_dropped(out, reads):
    log = MetadataLog(out, compact_interval=3, retention="7d")
    spark_style_batch(log, _table(0), ("cat",), old=True)
    sync_delta_log(out, check_files=False)  # creates the Delta log
    spark_style_batch(log, _table(1), ("cat",), old=False)
    sync_delta_log(out, check_files=False)  # the process's first sync of an existing Delta log reads it whole
    dropped = {f.relative_path for f in committed_files(out, batches=(0, 0))}
    spark_style_batch(log, _table(2), ("cat",), old=False)  # the compaction drops batch 0's entries
    for seen in reads.values():
        seen.clear()
    result = sync_delta_log(out, check_files=False)
    assert result.removed == len(dropped) > 0 and not dropped & delta_files(out)
    assert reads["log"] == ["2.compact"] and not reads["delta"], reads
    assert_delta_matches(out)


def test_a_delta_log_written_again_by_another_process_is_read_whole(out, reads):
    for version in range(2):
        write_batch(out, _table(version), app_id="app", version=version, delta_log=True)
    import shutil

    shutil.rmtree(Path(out) / "_delta_log")  # as `delta-sync --recreate` in another process
    sync_delta_log(out)
    write_batch(out, _table(2), app_id="app", version=2, delta_log=True)
    assert deltalake.DeltaTable(out).transaction_version("parquet-sink/_spark_metadata") == 2
    assert_delta_matches(out)


@pytest.fixture
def delta_work(monkeypatch):
    """The Delta-side work of a sync, counted: whole delta-rs loads of the table (``DeltaTable``), Delta actions
    decoded from commit files, checkpoint rows decoded."""
    seen = {"tables": 0, "actions": 0, "checkpoint_rows": 0}
    table_init, actions_of, iter_batches = deltalake.DeltaTable.__init__, sync_module._actions_of, pq.ParquetFile.iter_batches

    def counted_table(self, *args, **kwargs):
        seen["tables"] += 1
        return table_init(self, *args, **kwargs)

    def counted_actions(*args, **kwargs):
        found = actions_of(*args, **kwargs)
        seen["actions"] += len(found)
        return found

    def counted_rows(self, *args, **kwargs):
        for rows in iter_batches(self, *args, **kwargs):
            seen["checkpoint_rows"] += rows.num_rows
            yield rows

    monkeypatch.setattr(deltalake.DeltaTable, "__init__", counted_table)
    monkeypatch.setattr(sync_module, "_actions_of", counted_actions)
    monkeypatch.setattr(pq.ParquetFile, "iter_batches", counted_rows)
    return seen


def _small(version: int) -> pa.Table:
    return pa.table({"id": pa.array(range(10**6 + 10 * version, 10**6 + 10 * version + 10), pa.int64()),
                     "v": [float(i) for i in range(10)]})


def test_a_first_sync_after_a_one_file_append_costs_the_append_not_the_output(tmp_path, reads, delta_work):
    """Issue 58 item 1: a process's first sync after a one-file append to an output whose first batch holds 200 or
    2,000 files does the same work (no delta-rs load of the table, the same Delta actions and checkpoint rows
    decoded, the same log file and footer read), through ``sync_delta_log`` and through ``write_batch(...,
    delta_log=True)``: the newest commits, and the table's metaData from the first rows of its checkpoint."""
    work = {}
    for files in (200, 2000):
        out = str(tmp_path / f"out-{files}")
        assert write_batch(out, pa.table({"id": pa.array(range(files), pa.int64()), "v": [0.5] * files}),
                           app_id="backfill", version=0, max_records_per_file=1).committed
        sync_delta_log(out, checkpoint_interval=3)  # creates the Delta log (versions 0, 1)
        for version in (0, 1):  # Delta versions 2 and 3 (a checkpoint at 3)
            assert write_batch(out, _small(version), app_id="small", version=version, delta_log=True).committed
        assert "00000000000000000003.checkpoint.parquet" in os.listdir(Path(out) / "_delta_log")
        counts = []
        for version in (2, 3):  # Delta versions 4 and 5: no checkpoint written (that reads the table, by nature)
            sync_module._STATES.clear()  # a fresh process: nothing of the Delta log kept
            delta_work.update(dict.fromkeys(delta_work, 0))
            if version == 2:
                assert write_batch(out, _small(version), app_id="small", version=version).committed
                for seen in reads.values():
                    seen.clear()
                result = sync_delta_log(out, check_files=False)
                assert result.committed and result.added == 1 and result.removed == 0, result
                assert reads["log"] == ["3"] and len(reads["footers"]) <= 2, reads  # the new batch, its one file
            else:  # the writer's own reads of the log are the append's (tests/write/test_append_cost.py)
                assert write_batch(out, _small(version), app_id="small", version=version, delta_log=True).committed
            assert delta_work["tables"] == 0, delta_work
            counts.append(dict(delta_work))
            assert deltalake.DeltaTable(out).transaction_version("parquet-sink/_spark_metadata") == 1 + version
        work[files] = counts
        # delta-rs, the oracle, lists exactly the committed files
        assert delta_files(out) == {f.relative_path for f in committed_files(out)} and len(delta_files(out)) == files + 4
    assert work[200] == work[2000], work


def test_a_column_of_nulls_is_retyped_at_the_cost_of_the_listed_footers_once(out, reads):
    """A data column of the null type (a Delta string) given a type by a batch of Spark's own sink: the sync that
    retypes it reads the footer of each file the table lists once (whether one holds a value of it); the next
    per-batch sync reads the new batch's footers only, as before."""
    for version in range(3):
        write_batch(out, pa.table({"id": [version], "c": pa.nulls(1)}), app_id="app", version=version, delta_log=True)
    listed = {os.path.basename(p) for p in delta_files(out)}
    spark_style_batch(MetadataLog(out), pa.table({"id": [3], "c": pa.array([5], pa.int64())}), (), old=False)
    new = {os.path.basename(f.relative_path) for f in committed_files(out, batches=(3, 3))}
    for seen in reads.values():
        seen.clear()
    assert sync_delta_log(out, check_files=False).committed
    assert pa.schema(deltalake.DeltaTable(out).schema()).field("c").type == pa.int64()
    assert sorted(f for f in reads["footers"] if f in listed) == sorted(listed)  # each listed file's footer once
    assert set(reads["footers"]) <= listed | new
    write_batch(out, pa.table({"id": [4], "c": pa.array([6], pa.int64())}), app_id="app", version=3,
                spark_sink_stopped=True)
    newer = {os.path.basename(f.relative_path) for f in committed_files(out, batches=(4, 4))}
    for seen in reads.values():
        seen.clear()
    assert sync_delta_log(out, check_files=False).committed
    assert set(reads["footers"]) <= newer and not reads["delta"], reads
    assert_delta_matches(out)
