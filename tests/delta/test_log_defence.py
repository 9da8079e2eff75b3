"""The Delta log is ours to write, and it defends itself (issue 35, item 3): a commit of another Delta writer
(``write_deltalake`` append and overwrite, delta-rs's OPTIMIZE and VACUUM, a table another tool created, a
hand-written commit) is refused with a typed error naming ``--recreate``, never undone by the next sync, and the
remedy works end to end; ``delta-sync`` and ``verify`` compare file sets (a replaced Delta log whose batch ids
match is found); a file committed twice is reported; the session time zone is recorded and another one refused;
a partition column keeps the table's type when retention drops the values that made it a string, and one the
table was created with while all its values were null takes the type of its first values."""

from __future__ import annotations

import datetime as _dt
import logging
import os
import shutil
from pathlib import Path

import deltalake
import polars as pl
import pyarrow as pa
import pytest

from parquet_sink import MetadataLog, committed_files, read_committed, sync_delta_log, write_batch
from parquet_sink.cli.main import main as cli_main
from parquet_sink.delta import DeltaLogError
from parquet_sink.delta import sync as sync_module
from parquet_sink.delta.sync import MARKER, TIME_ZONE_PROPERTY
from parquet_sink.log.entry import LogEntry
from parquet_sink.maintenance import verify
from tests.delta.readers import assert_delta_matches, delta_files, spark_style_batch


def _batch(version: int, rows: int = 3) -> pa.Table:
    return pa.table({"id": pa.array([version * 100 + i for i in range(rows)], pa.int64()),
                     "name": [f"n{version}-{i}" for i in range(rows)]})


def _ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def _foreign(out: str, how: str) -> None:
    """Another Delta writer commits to the Delta log of ``out``."""
    if how == "optimize":
        deltalake.DeltaTable(out).optimize.compact()
    else:
        deltalake.write_deltalake(out, _batch(9, 1), mode=how)


@pytest.mark.parametrize("how", ["append", "overwrite", "optimize"])
def test_a_foreign_commit_is_refused_never_undone_and_recreate_mends_it(out, how, caplog):
    for version in range(2):
        write_batch(out, _batch(version), app_id="app", version=version, delta_log=True)
    _foreign(out, how)
    theirs = delta_files(out)
    # the next batch commits to _spark_metadata; its Delta sync refuses (a warning), the Delta log is left as it is
    with caplog.at_level(logging.WARNING, logger="parquet_sink.delta.sync"):
        assert write_batch(out, _batch(2), app_id="app", version=2, delta_log=True).committed
    assert "another Delta writer" in caplog.text and "--recreate" in caplog.text
    assert delta_files(out) == theirs  # not silently removed
    with pytest.raises(DeltaLogError, match=r"another Delta writer, first version \d+ \(\w+.*read-only view.*--recreate"):
        sync_delta_log(out)
    assert delta_files(out) == theirs
    report = verify(out)
    assert not report.ok and any("another Delta writer" in p for p in report.problems), report.problems
    # the remedy named works: the Delta log written again from _spark_metadata
    assert cli_main(["delta-sync", "--recreate", out]) == 0
    assert verify(out).ok and not verify(out).warnings
    assert _ids(assert_delta_matches(out)) == [v * 100 + i for v in range(3) for i in range(3)]
    write_batch(out, _batch(3), app_id="app", version=3, delta_log=True)  # and it follows again
    assert _ids(assert_delta_matches(out)) == [v * 100 + i for v in range(4) for i in range(3)]


def test_a_table_another_tool_created_is_refused(out):
    write_batch(out, _batch(0), app_id="app", version=0)
    deltalake.write_deltalake(out, _batch(9, 1))  # creates _delta_log in the output with its own file
    theirs = delta_files(out)
    with pytest.raises(DeltaLogError, match=r"another Delta writer, first version 0 \(WRITE.*--recreate"):
        sync_delta_log(out)
    assert delta_files(out) == theirs
    assert not verify(out).ok
    sync_delta_log(out, recreate=True)
    assert verify(out).ok and _ids(assert_delta_matches(out)) == [0, 1, 2]


def test_a_replaced_delta_log_with_matching_batch_ids_is_found_by_its_files(out, tmp_path):
    other = str(tmp_path / "other")
    for version in range(2):
        write_batch(out, _batch(version), app_id="app", version=version, delta_log=True)
        write_batch(other, _batch(5 + version), app_id="app", version=version, delta_log=True)
    shutil.rmtree(Path(out) / "_delta_log")
    shutil.copytree(Path(other) / "_delta_log", Path(out) / "_delta_log")  # same batch ids, other files
    assert deltalake.DeltaTable(out).transaction_version("parquet-sink/_spark_metadata") == 1
    with pytest.raises(DeltaLogError, match="lists 2 file.*does not commit.*--recreate"):
        sync_delta_log(out)
    problems = verify(out).problems
    assert any("does not commit" in p for p in problems) and any("misses 2 file" in p for p in problems), problems
    assert cli_main(["delta-sync", "--recreate", out]) == 0
    assert verify(out).ok and _ids(assert_delta_matches(out)) == [v * 100 + i for v in range(2) for i in range(3)]


def test_a_file_committed_twice_is_reported_not_collapsed(out, caplog):
    write_batch(out, _batch(0), app_id="app", version=0)
    log = MetadataLog(out)
    first = log.get(0)
    data = next(e for e in first if e.path.endswith(".parquet"))
    assert log.add(1, [LogEntry(data.path, data.size, False, data.modification_time)])  # the same file again
    assert _ids(read_committed(out)) == [0, 0, 1, 1, 2, 2]  # Spark's readers read it twice
    with caplog.at_level(logging.WARNING, logger="parquet_sink.delta.sync"):
        result = sync_delta_log(out)
    assert result.duplicates == 1 and "more than once" in caplog.text and "batches [0, 1]" in caplog.text
    assert _ids(deltalake.DeltaTable(out).to_pyarrow_table()) == [0, 1, 2]  # a Delta log keys files by path
    report = verify(out)
    assert not report.ok and any("more than once" in p and "[0, 1]" in p for p in report.problems), report.problems


def test_a_file_committed_again_after_the_mirrored_batch_is_listed_once(out, caplog):
    """A file the Delta log lists already, committed again in a later batch (an entry copied, with its logged
    time): a process's first sync (which does not read the Delta log's files) finds it among them, adds nothing
    and reports it."""
    write_batch(out, _batch(0), app_id="app", version=0, delta_log=True)
    log = MetadataLog(out)
    data = next(e for e in log.get(0) if e.path.endswith(".parquet"))
    assert log.add(1, [LogEntry(data.path, data.size, False, data.modification_time)])  # the same file again
    sync_module._STATES.clear()  # a fresh process
    with caplog.at_level(logging.WARNING, logger="parquet_sink.delta.sync"):
        result = sync_delta_log(out, check_files=False)
    assert result.committed and result.added == 0 and result.duplicates == 1 and "batches [0, 1]" in caplog.text
    assert _ids(deltalake.DeltaTable(out).to_pyarrow_table()) == [0, 1, 2]
    assert deltalake.DeltaTable(out).transaction_version("parquet-sink/_spark_metadata") == 1


def test_the_session_time_zone_is_recorded_and_another_is_refused(out, capsys):
    def batch(version: int) -> pa.Table:
        at = _dt.datetime(2024, 3, 10, 6 + version, 30, tzinfo=_dt.UTC)
        return pa.table({"id": [version], "at": pa.array([at], pa.timestamp("us", "UTC"))})

    write_batch(out, batch(0), app_id="app", version=0, partition_by=["at"], time_zone="America/New_York",
                delta_log=True)
    assert deltalake.DeltaTable(out).metadata().configuration[TIME_ZONE_PROPERTY] == "America/New_York"
    write_batch(out, batch(1), app_id="app", version=1, partition_by=["at"], time_zone="America/New_York")
    with pytest.raises(DeltaLogError, match="session time zone 'America/New_York'.*given 'UTC'.*--time-zone"):
        sync_delta_log(out, time_zone="UTC")
    assert cli_main(["delta-sync", out]) == 0  # no --time-zone: the recorded one
    values = pa.table(deltalake.DeltaTable(out).get_add_actions(flatten=True)).column("partition.at").to_pylist()
    assert sorted(values) == [_dt.datetime(2024, 3, 10, 6 + v, 30, tzinfo=_dt.UTC) for v in range(2)]
    assert_delta_matches(out, time_zone="America/New_York")
    # a table without a timestamp partition column takes any zone (it changes nothing)
    plain = out + "-plain"
    write_batch(plain, _batch(0), app_id="app", version=0, time_zone="Asia/Tokyo", delta_log=True)
    write_batch(plain, _batch(1), app_id="app", version=1)
    assert sync_delta_log(plain, time_zone="UTC").committed


def test_a_partition_column_keeps_the_tables_type_when_retention_drops_its_string_values(out):
    def batch(values: list[str]) -> pa.Table:
        return pa.table({"id": list(range(len(values))), "k": values})

    log = MetadataLog(out, compact_interval=3, retention="7d")  # the output's: no compaction yet, nothing dropped
    spark_style_batch(log, batch(["x"]), ("k",), old=True)  # makes k a string column
    spark_style_batch(log, batch(["1", "2"]), ("k",), old=False)
    sync_delta_log(out)
    assert pa.schema(deltalake.DeltaTable(out).schema()).field("k").type == pa.string()
    retaining = MetadataLog(out, compact_interval=3, retention="7d")
    spark_style_batch(retaining, batch(["3"]), ("k",), old=False)  # compaction: retention drops k=x
    assert read_committed(out).schema.field("k").type == pa.int32()  # the directories alone now say int
    result = sync_delta_log(out)
    assert result.committed and result.removed == 1
    table = deltalake.DeltaTable(out)
    assert pa.schema(table.schema()).field("k").type == pa.string()
    assert delta_files(out) == {f.relative_path for f in committed_files(out)}
    got = sorted(table.to_pyarrow_table().column("k").to_pylist())
    assert got == sorted(str(v) for v in read_committed(out).column("k").to_pylist()) == ["1", "2", "3"]
    assert verify(out).ok


def test_every_version_we_commit_carries_the_marker(out):
    for version in range(3):
        write_batch(out, _batch(version), app_id="app", version=version, delta_log=True)
    history = deltalake.DeltaTable(out).history()
    assert history and all(MARKER in h for h in history)
    assert not [h for h in history if "parquetSinkCheckedVersion" not in h]
    assert os.path.isdir(Path(out) / "_delta_log")


def test_a_hand_written_commit_without_commit_info_is_refused(out, tmp_path):
    for version in range(2):  # the second sync keeps the Delta state in this process, the third reads forward
        write_batch(out, _batch(version), app_id="app", version=version, delta_log=True)
    table = deltalake.DeltaTable(out)
    stray = tmp_path / "stray"
    deltalake.write_deltalake(str(stray), _batch(9, 1))
    name = next(p.name for p in stray.glob("*.parquet"))
    os.link(stray / name, Path(out) / name)
    commit = Path(out) / "_delta_log" / f"{table.version() + 1:020d}.json"
    commit.write_text('{"add":{"path":"%s","partitionValues":{},"size":%d,"modificationTime":0,"dataChange":true}}\n'
                      % (name, (stray / name).stat().st_size))
    write_batch(out, _batch(2), app_id="app", version=2)
    with pytest.raises(DeltaLogError, match="another Delta writer.*a commit without commitInfo"):
        sync_delta_log(out, check_files=False)
    assert name in delta_files(out)
    assert not verify(out).ok


def test_a_delta_side_vacuum_is_refused(out):
    log = MetadataLog(out, compact_interval=2, retention="7d")
    spark_style_batch(log, _batch(0), (), old=True)
    sync_delta_log(out)
    spark_style_batch(log, _batch(1), (), old=False)  # a compaction: retention drops batch 0's file
    assert sync_delta_log(out).removed == 1
    deleted = deltalake.DeltaTable(out).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert len(deleted) == 1  # delta-rs deleted the tombstoned file and committed VACUUM START / END
    spark_style_batch(log, _batch(2), (), old=False)
    with pytest.raises(DeltaLogError, match=r"another Delta writer, first version \d+ \(VACUUM START"):
        sync_delta_log(out)
    assert any("VACUUM" in p for p in verify(out).problems)
    sync_delta_log(out, recreate=True)
    assert verify(out).ok and _ids(assert_delta_matches(out)) == [100, 101, 102, 200, 201, 202]


def test_recreate_never_deletes_a_plain_delta_table(tmp_path):
    from parquet_sink.errors import NotAnOutputError

    table = str(tmp_path / "plain")
    deltalake.write_deltalake(table, _batch(0))
    with pytest.raises(NotAnOutputError, match="no _spark_metadata"):
        sync_delta_log(table, recreate=True)
    assert cli_main(["delta-sync", "--recreate", table]) == 1
    assert _ids(deltalake.DeltaTable(table).to_pyarrow_table()) == [0, 1, 2]


def test_a_partition_value_the_tables_type_cannot_hold_is_refused_and_recreate_mends_it(out):
    def batch(version: int, key: str) -> pa.Table:
        return pa.table({"id": [version], "k": [key]})

    write_batch(out, batch(0, "1"), app_id="app", version=0, partition_by=["k"], delta_log=True)
    assert pa.schema(deltalake.DeltaTable(out).schema()).field("k").type == pa.int32()
    write_batch(out, batch(1, "x"), app_id="app", version=1, partition_by=["k"])
    with pytest.raises(DeltaLogError, match="column 'k' is int32 in the Delta log but string.*--recreate"):
        sync_delta_log(out)
    sync_delta_log(out, recreate=True)
    assert pa.schema(deltalake.DeltaTable(out).schema()).field("k").type == pa.string()
    assert verify(out).ok and _ids(assert_delta_matches(out)) == [0, 1]


def _partitioned(version: int, values: list) -> pa.Table:
    return pa.table({"id": pa.array([version * 100 + i for i in range(len(values))], pa.int64()), "p": values})


@pytest.mark.parametrize("new_process", [False, True])
def test_a_partition_column_created_of_nulls_takes_the_type_of_its_first_values(out, new_process):
    """A table created while every directory of ``p`` is the null partition declares it a string (Delta has no
    null type); the first batch with a value (``p=0``) retypes it to the type read_committed and Spark's reader
    infer (a metaData action: no reader saw a value of the old type), so every Delta reader reads the integer 0,
    not "0". Time travel to the version before still reads it as that version declared it."""
    ints = pa.int64()
    write_batch(out, _partitioned(0, pa.array([None, None], ints)), app_id="app", version=0, partition_by=["p"],
                delta_log=True)
    before = deltalake.DeltaTable(out)
    assert pa.schema(before.schema()).field("p").type == pa.string()
    if new_process:  # a catch-up sync of a process that never read this Delta log: its state from the commits
        write_batch(out, _partitioned(1, pa.array([0, None], ints)), app_id="app", version=1, partition_by=["p"])
        sync_module._STATES.clear()
        assert sync_delta_log(out).committed
    else:
        write_batch(out, _partitioned(1, pa.array([0, None], ints)), app_id="app", version=1, partition_by=["p"],
                    delta_log=True)
    table = deltalake.DeltaTable(out)
    assert pa.schema(table.schema()).field("p").type == pa.int32() == read_committed(out).schema.field("p").type
    assert sorted(table.to_pyarrow_table().column("p").to_pylist(), key=str) == [0, None, None, None]
    assert_delta_matches(out)  # delta-rs (table, dataset), polars (both readers), duckdb: read_committed's types
    old = deltalake.DeltaTable(out, version=before.version())
    assert pa.schema(old.schema()).field("p").type == pa.string()
    assert old.to_pyarrow_table().column("p").to_pylist() == [None, None]
    assert pl.read_delta(out, version=before.version())["p"].to_list() == [None, None]
    write_batch(out, _partitioned(2, pa.array([5], ints)), app_id="app", version=2, partition_by=["p"], delta_log=True)
    deltalake.DeltaTable(out).create_checkpoint()  # delta-rs writes the retyped column's partition values there
    assert_delta_matches(out)
    assert deltalake.DeltaTable(out, version=before.version()).to_pyarrow_table().column("p").to_pylist() == [None] * 2
    assert verify(out).ok


def test_a_timestamp_partition_column_created_of_nulls_records_the_zone_it_is_retyped_in(out):
    """Retyped to a timestamp, the column's directories are read in the session time zone of the batch that
    brought them, which the table records (the zone of its creation read no value of it)."""
    stamps = pa.timestamp("us", "UTC")
    write_batch(out, _partitioned(0, pa.array([None], stamps)), app_id="app", version=0, partition_by=["p"],
                delta_log=True)
    at = _dt.datetime(2024, 3, 10, 12, 30, tzinfo=_dt.UTC)
    write_batch(out, _partitioned(1, pa.array([at], stamps)), app_id="app", version=1, partition_by=["p"],
                time_zone="America/New_York", delta_log=True)
    table = deltalake.DeltaTable(out)
    assert pa.types.is_timestamp(pa.schema(table.schema()).field("p").type)
    assert table.metadata().configuration[TIME_ZONE_PROPERTY] == "America/New_York"
    assert sorted(table.to_pyarrow_table().column("p").to_pylist(), key=str) == [at, None]
    assert_delta_matches(out, time_zone="America/New_York")


def test_a_partition_column_created_of_nulls_that_holds_a_string_keeps_its_type(out):
    """Once a file the table keeps holds a value of ``p`` (``x``), a later batch whose directories read as
    numbers (``p=1``) leaves the string column as it is: retyping it would make ``x`` unreadable."""
    for version, values in enumerate([[None], ["x"], ["1"]]):
        write_batch(out, _partitioned(version, pa.array(values, pa.string())), app_id="app", version=version,
                    partition_by=["p"], delta_log=True)
    table = deltalake.DeltaTable(out)
    assert pa.schema(table.schema()).field("p").type == pa.string()
    assert sorted(table.to_pyarrow_table().column("p").to_pylist(), key=str) == ["1", None, "x"]
    assert_delta_matches(out)


@pytest.mark.parametrize("typed", [False, True], ids=["null type", "typed nulls"])
def test_a_data_column_created_of_nulls_takes_the_type_of_its_first_values(out, typed):
    """A table created while ``c`` holds nulls only declares it a string when its files give it Parquet's null
    type (Delta has none; a typed column of nulls keeps its type). Our writers refuse a batch that gives it
    another type, but Spark's own sink (``spark_style_batch``: the output's writer before ``spark_sink_stopped``)
    does not: read_committed then reads ``c`` as int64, and the sync refused every batch from there on, the Delta
    log behind for good. While every file the table lists holds no value of ``c``, the sync retypes it (a metaData
    action): every Delta reader reads read_committed's rows and types at every version, the version before as it
    was declared."""
    first = pa.nulls(2, pa.int64()) if typed else pa.nulls(2)
    write_batch(out, pa.table({"id": pa.array([0, 1], pa.int64()), "c": first}), app_id="app", version=0,
                delta_log=True)
    before = deltalake.DeltaTable(out)
    assert pa.schema(before.schema()).field("c").type == (pa.int64() if typed else pa.string())
    spark_style_batch(MetadataLog(out), pa.table({"id": pa.array([10], pa.int64()), "c": pa.array([5], pa.int64())}),
                      (), old=False)
    write_batch(out, pa.table({"id": pa.array([20], pa.int64()), "c": pa.array([7], pa.int64())}), app_id="app",
                version=1, spark_sink_stopped=True, delta_log=True)
    committed = read_committed(out)
    assert committed.schema.field("c").type == pa.int64()
    assert sorted(committed.to_pylist(), key=lambda r: r["id"]) == [
        {"id": 0, "c": None}, {"id": 1, "c": None}, {"id": 10, "c": 5}, {"id": 20, "c": 7}]
    table = deltalake.DeltaTable(out)
    assert table.version() == before.version() + 1  # the write's sync mirrored both batches (it failed before)
    assert pa.schema(table.schema()).field("c").type == pa.int64()
    assert_delta_matches(out)  # delta-rs (table, dataset), polars (both readers), duckdb: read_committed's types
    old = deltalake.DeltaTable(out, version=before.version())
    assert old.to_pyarrow_table().column("c").to_pylist() == [None, None]
    assert pl.read_delta(out, version=before.version())["c"].to_list() == [None, None]
    table.create_checkpoint()
    assert_delta_matches(out)
    assert verify(out).ok


def test_a_data_column_of_nulls_with_a_string_in_a_listed_file_keeps_its_type(out):
    """Once a file the table lists holds a string of ``c``, a foreign batch of integers is refused by the sync
    (retyping would make the string unreadable), naming the column and the remedy; nothing is committed to the
    Delta log."""
    write_batch(out, pa.table({"id": [0], "c": pa.nulls(1)}), app_id="app", version=0, delta_log=True)
    spark_style_batch(MetadataLog(out), pa.table({"id": [1], "c": ["x"]}), (), old=False)
    assert sync_delta_log(out).committed
    version = deltalake.DeltaTable(out).version()
    spark_style_batch(MetadataLog(out), pa.table({"id": [2], "c": pa.nulls(1)}), (), old=False)
    spark_style_batch(MetadataLog(out), pa.table({"id": [3], "c": [5]}), (), old=False)
    with pytest.raises(DeltaLogError, match="column 'c' is string in the Delta log but int64"):
        sync_delta_log(out)
    assert deltalake.DeltaTable(out).version() == version
