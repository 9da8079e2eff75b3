"""``optimize`` (issue 37): committed small files of each partition rewritten into files near a target size and
swapped in with one compact file, so every reader (``spark.read.parquet``, ``read_committed``, the Delta log
after a sync) reads the same rows, with the same types, before and after; dry run, history, time travel,
vacuum, sort order, partitions filter, refusals. The crash and race tests are in tests/crash/test_optimize_crash.py.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import random
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parquet_sink import (
    MetadataLog, ParquetSink, committed_files, count_committed, history, read_committed, snapshot, write_batch,
)
from parquet_sink.errors import (
    CommitConflictError, LogError, MissingDataFileError, ParameterError, SnapshotExpiredError,
)
from parquet_sink.log.entry import CommitRecord, LogEntry
from parquet_sink.log.file_stats import encode_stats
from parquet_sink.statistics import footer_rule, nan_column_statistics
from parquet_sink.maintenance import optimize, vacuum
from parquet_sink.maintenance.optimize import parse_file_size
from parquet_sink.read.history import OPTIMIZE_APP_ID
from parquet_sink.write.rewrite import BackgroundOptimizer

DAYS = ["a b", "c:d", None, "x"]


def _version(v: int, rows: int = 6) -> pa.Table:
    ids = list(range(v * 100, v * 100 + rows))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "day": pa.array([DAYS[i % len(DAYS)] for i in ids], pa.string()),
            "name": pa.array([None if i % 5 == 0 else f"n{i}%/,\"" for i in ids], pa.string()),
            "amount": pa.array([decimal.Decimal(i) / 100 for i in ids], pa.decimal128(18, 2)),
            "ts": pa.array([dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=7 * i) for i in ids],
                           pa.timestamp("us", tz="UTC")),
            "f": pa.array([float("nan") if i % 7 == 0 else -0.0 if i % 3 == 0 else i / 3 for i in ids], pa.float64()),
        }
    )


def _write_versions(out: str, versions: range, rows: int = 6) -> pa.Table:
    for v in versions:
        write_batch(out, _version(v, rows), app_id="app", version=v, partition_by=["day"])
    return pa.concat_tables(_version(v, rows) for v in versions)


def _rows(table: pa.Table) -> list[tuple]:
    """Rows as comparable tuples, columns by name (NaN made comparable), sorted by id."""
    columns = sorted(table.column_names)
    out = []
    for row in table.select(columns).to_pylist():
        out.append(tuple("NaN" if isinstance(v, float) and v != v else v for v in row.values()))
    return sorted(out, key=lambda r: r[columns.index("id")])


def _logged_stats(out: str) -> dict[str, dict | None]:
    """Each committed file's ``stats`` as its log entry records them (parsed; None for none), by path."""
    files = snapshot(out, statistics=True).files
    return {path: None if stats is None else json.loads(stats)
            for path, stats in zip(files.paths().to_pylist(), files.table.column("stats").to_pylist())}


def _assert_statistics_of_every_file(out: str) -> None:
    """Every committed file's log entry has the statistics every writer of ours gives it (``encode_stats`` of its
    footer, a NaN-holding float column's from its rows), and they are right: its row count, and each integer and string column's null count and min/max as
    pyarrow computes them over the file's rows."""
    for path, stats in _logged_stats(out).items():
        assert stats is not None, f"{path}: no statistics in the log"
        table = pq.ParquetFile(path).read()
        from_rows = nan_column_statistics(table, footer_rule(table))  # a float column holding NaN: footer has none
        assert stats == json.loads(encode_stats(pq.read_metadata(path), from_rows))
        assert stats["numRecords"] == table.num_rows
        for name, column in zip(table.column_names, table.columns):
            if not table.num_rows or not (pa.types.is_integer(column.type) or pa.types.is_string(column.type)):
                continue  # a file of no rows has no row group to take counts from
            assert stats["nullCount"][name] == column.null_count
            if column.null_count < len(column):
                bounds = pc.min_max(column)
                assert (stats["minValues"][name], stats["maxValues"][name]) == (bounds["min"].as_py(), bounds["max"].as_py())


def _spark_rows(spark, out: str) -> tuple[list[tuple], str]:
    df = spark.read.parquet(out)
    cols = sorted(df.columns)
    rows = [tuple("NaN" if isinstance(v, float) and v != v else v for v in (r[c] for c in cols)) for r in df.collect()]
    return sorted(rows, key=lambda r: r[cols.index("id")]), df.select(*cols).schema.simpleString()


def test_optimize_swaps_small_files_and_every_reader_reads_the_same_rows(spark, out: str) -> None:
    expected = _write_versions(out, range(13))
    before_files = {f.path for f in committed_files(out)}
    spark_before, spark_schema = _spark_rows(spark, out)
    assert len(spark_before) == expected.num_rows

    result = optimize(out, target_file_size="1MB")

    assert result.committed and result.log_batch_id == 19 and result.padding_batches == list(range(13, 19))
    assert result.files_removed == len(before_files)
    assert result.files_added == len(DAYS) and result.rows == expected.num_rows
    after_files = {f.path for f in committed_files(out)}
    assert after_files == set(result.files) and not after_files & before_files
    assert _rows(read_committed(out)) == _rows(expected)
    spark_after, spark_schema_after = _spark_rows(spark, out)
    assert spark_after == spark_before and spark_schema_after == spark_schema
    log = MetadataLog(out)
    assert log.check() == []
    compact = (Path(out) / "_spark_metadata" / "19.compact").read_text()
    assert not any(Path(p).name in compact for p in before_files)  # the swap lives in the compact file
    # time travel: the snapshot before the swap still reads the old files, with the same rows
    assert {f.path for f in committed_files(out, as_of_batch=18)} == before_files
    assert _rows(read_committed(out, as_of_batch=12)) == _rows(expected)


def test_spark_writer_files_keep_their_types(spark, out: str) -> None:
    """Files of the Spark writer path (INT96 timestamps, Spark's footer metadata) rewritten: Spark reads the same
    schema and rows, and the new file keeps INT96. Timestamps outside pyarrow's nanosecond range (years 1000 and
    9999) keep their values: an INT96 read as nanoseconds wraps, and the rewrite would have made that permanent."""
    sink = ParquetSink(out, writer="spark", partition_by=["day"])
    schema = "id long, day string, ts timestamp, amount decimal(10,2), d date, b binary, n struct<t: timestamp>"
    far = [dt.datetime(1000, 1, 1, 0, 0, 0, 1), dt.datetime(9999, 12, 30, 23, 59, 59, 999999)]
    for batch in range(3):
        rows = [
            (batch * 10 + i, ["p", "q:r"][i % 2], [dt.datetime(2026, 3, 1, 12, 0, i, 123456), *far][i % 3],
             decimal.Decimal(f"{i}.25"), dt.date(999, 1, 1 + i), bytes([i, 0, 255]), (far[i % 2],))
            for i in range(4)
        ]
        sink(spark.createDataFrame(rows, schema).coalesce(1), batch)
    spark_before, schema_before = _spark_rows(spark, out)
    ours_before = _rows(read_committed(out))

    result = optimize(out)

    assert result.committed and result.files_added == 2
    _assert_statistics_of_every_file(out)  # INT96, binary, a struct, dates of year 999: as the writers record them
    spark_after, schema_after = _spark_rows(spark, out)
    assert schema_after == schema_before and spark_after == spark_before
    assert _rows(read_committed(out)) == ours_before
    assert set(far) <= {t.replace(tzinfo=None) for t in read_committed(out).column("ts").to_pylist()}
    for path in result.files:
        parquet = pq.ParquetFile(path)
        physical = {parquet.schema.column(i).path: parquet.schema.column(i).physical_type for i in range(len(parquet.schema))}
        assert physical["ts"] == physical["n.t"] == "INT96", physical  # a nested timestamp too
        assert "day" not in parquet.schema.names  # partition values stay in the directory


def test_spark_writer_files_with_only_a_nested_timestamp_keep_int96(spark, out: str) -> None:
    """A timestamp only inside a struct (Spark stores it INT96 too): the rewritten file keeps INT96 there, so
    Spark reads the same type (an INT64 without UTC adjustment would read as TIMESTAMP_NTZ)."""
    sink = ParquetSink(out, writer="spark")
    for batch in range(2):
        sink(spark.createDataFrame([(batch, (dt.datetime(1000, 1, 1, 0, 0, batch),))], "id long, n struct<t: timestamp>"), batch)
    spark_before, schema_before = _spark_rows(spark, out)
    result = optimize(out)
    assert result.committed
    assert _spark_rows(spark, out) == (spark_before, schema_before)
    (path,) = result.files
    parquet = pq.ParquetFile(path)
    assert [parquet.schema.column(i).physical_type for i in range(len(parquet.schema)) if parquet.schema.column(i).path == "n.t"] == ["INT96"]


def test_dry_run_writes_nothing(out: str) -> None:
    _write_versions(out, range(5))

    def state() -> dict[str, bytes]:
        return {str(p): p.read_bytes() for p in Path(out).rglob("*") if p.is_file()}

    before = state()
    result = optimize(out, dry_run=True)
    assert state() == before
    assert not result.committed and result.plan.files_removed == len(committed_files(out))
    assert sorted(b.directory for b in result.plan.bins) == ["day=__HIVE_DEFAULT_PARTITION__", "day=a b", "day=c%3Ad", "day=x"]


def test_history_shows_the_optimize_as_its_own_entry(out: str) -> None:
    _write_versions(out, range(3))
    removed_bytes = sum(f.size for f in committed_files(out))
    result = optimize(out)
    rows = {r["log_batch_id"]: r for r in history(out).to_pylist()}
    swap = rows[9]
    assert swap["operation"] == "optimize" and swap["query_id"] == OPTIMIZE_APP_ID
    assert swap["rows"] == 0 and swap["files"] == result.files_added and swap["bytes"] == result.bytes_added
    assert swap["files_removed"] == 3 * 4 and swap["bytes_removed"] == removed_bytes
    assert [rows[b]["operation"] for b in range(3, 9)] == ["optimize-wait"] * 6
    assert [rows[b]["operation"] for b in range(3)] == ["append"] * 3 and rows[0]["files_removed"] is None
    # as_of_time just before the swap reads the old state
    before_swap = rows[8]["commit_time"]
    assert read_committed(out, as_of_time=before_swap).num_rows == 18


def test_a_second_optimize_finds_nothing_to_rewrite(out: str) -> None:
    _write_versions(out, range(4))
    assert optimize(out).committed
    latest = MetadataLog(out).latest_batch_id()
    again = optimize(out)
    assert not again.committed and again.plan.bins == []
    assert MetadataLog(out).latest_batch_id() == latest  # no empty batch, no rewrite


def _corrupt_all_but_the_ends(out: str, keep: Sequence[str] = ()) -> None:
    """Overwrite every committed data file but the first, the last (the readers' schema comes from their footers)
    and those in ``keep`` with bytes that are not Parquet: a read or count that opens one of them fails."""
    for f in list(committed_files(out))[1:-1]:
        if f.path not in keep:
            Path(f.path).write_bytes(b"not parquet")


@pytest.mark.parametrize("how", ["z_order", "optimize_every"])
def test_the_new_files_carry_the_statistics_every_writer_gives(out: str, how: str) -> None:
    """Issue 54, item 2: the files an optimize writes (here a z-order, and the compaction the sink's background
    optimize runs; the drawn test below covers the others) are committed with their statistics, as the sink's and
    ``write_batch``'s are: right row counts and bounds, so a count opens no data file and a filtered read or count
    opens none the bounds rule out. Before, their log entries had no ``stats``: every count and filtered read after
    an optimize opened every file."""
    expected = _write_versions(out, range(4), rows=20)
    if how == "optimize_every":  # what ParquetSink(optimize_every=N) runs after every N-th batch
        optimizer = BackgroundOptimizer(out, None, every=1)
        assert optimizer.after_batch(0) and optimizer.wait(60) and optimizer.error is None
        result = optimizer.last
    else:  # cut into files of a few rows each
        result = optimize(out, z_order=["id", "ts"], target_file_size=2000)
    assert result is not None and result.committed and result.files_removed == 16
    assert len(committed_files(out)) == result.files_added >= 4
    _assert_statistics_of_every_file(out)
    _corrupt_all_but_the_ends(out)
    assert count_committed(out) == expected.num_rows
    assert count_committed(out, filter=ds.field("id") >= 0) == expected.num_rows  # every file matches whole
    outside = ds.field("id") > 10**6
    assert count_committed(out, filter=outside) == 0 and read_committed(out, filter=outside).num_rows == 0


def test_partitions_and_sort_by(out: str) -> None:
    for v in range(4):
        table = pa.table({"k": ["a", "b"] * 5, "v": pa.array([(v * 37 + i * 13) % 50 for i in range(10)], pa.int64())})
        write_batch(out, table, app_id="app", version=v, partition_by=["k"])
    result = optimize(out, partitions={"k": "a"}, sort_by=["v"])
    assert result.committed and [b.directory for b in result.plan.bins] == ["k=a"]
    (new,) = result.files
    values = pq.read_table(new).column("v").to_pylist()
    assert values == sorted(values) and len(values) == 20
    assert len([f for f in committed_files(out) if f.relative_path.startswith("k=b/")]) == 4
    with pytest.raises(ParameterError, match="partition columns"):
        optimize(out, sort_by=["k"])


@pytest.mark.parametrize("size", ["abc", 0, "-1MB", True, "1.5", "0.0001KB", 1.5])
def test_bad_target_size_is_refused(out: str, size) -> None:
    _write_versions(out, range(2))
    with pytest.raises(ParameterError, match="size"):
        optimize(out, target_file_size=size)


@pytest.mark.parametrize(("size", "expected"), [("1.5GB", 1_500_000_000), (" 64 mib ", 64 << 20), ("2.0", 2), (7, 7)])
def test_target_sizes_as_users_type_them(size, expected) -> None:
    assert parse_file_size(size) == expected


def test_add_refuses_removal_outside_a_compaction_batch(out: str) -> None:
    _write_versions(out, range(2))
    log = MetadataLog(out)
    with pytest.raises(LogError, match="not a compaction batch"):
        log.add(2, [], removed=frozenset({"file:///x.parquet"}))


def _spark_sink_like_batch(out: str, batch: int, record: CommitRecord | None) -> None:
    """A batch as Spark's own sink (no record) or a streaming query of ours (a record without fingerprint) commits."""
    path = Path(out) / f"part-00000-{uuid.uuid4()}.c000.snappy.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": [batch]}), path)
    log = MetadataLog(out)
    entries = [LogEntry(log.storage.to_uri(str(path)), path.stat().st_size, False, int(time.time() * 1000))]
    if record is not None:
        entries = record.log_entries(log.storage, int(time.time() * 1000) + batch, entries, 1)
    assert log.add(batch, entries)


def test_refuses_an_output_spark_s_own_sink_writes(out: str) -> None:
    for batch in range(3):
        _spark_sink_like_batch(out, batch, None)
    with pytest.raises(CommitConflictError, match="Spark's own file sink"):
        optimize(out)
    assert MetadataLog(out).latest_batch_id() == 2


def test_commit_times_of_a_streaming_run_survive_the_swap(out: str) -> None:
    """A streaming query's records inside a run are not kept by compaction: the figures (commit time, rows) of
    the batches whose files the swap removes must stay, or as_of_time and history lose them."""
    for batch in range(13):
        _spark_sink_like_batch(out, batch, CommitRecord.new(batch, "query-1", batch))
    before = history(out).to_pylist()
    assert optimize(out).committed
    after = {r["log_batch_id"]: r for r in history(out).to_pylist()}
    for row in before:
        assert after[row["log_batch_id"]]["commit_time"] == row["commit_time"]
        assert after[row["log_batch_id"]]["rows"] == row["rows"]
    assert sorted(read_committed(out).column("id").to_pylist()) == list(range(13))
    assert read_committed(out, as_of_time=before[0]["commit_time"]).num_rows == 13


def test_vacuum_keeps_replaced_files_while_the_snapshot_before_can_be_read(out: str) -> None:
    _write_versions(out, range(3))
    old = {f.path for f in committed_files(out)}
    two_days_ago = time.time() - 2 * 86400
    for path in old:
        os.utime(path, (two_days_ago, two_days_ago))
    optimize(out)

    # (include_files_before_log: the files were backdated to before the log's first commit)
    kept = vacuum(out, "1h", allow_short_retention=True, include_files_before_log=True)
    assert {i.path for i in kept.plan.replaced_kept} == old and kept.plan.orphans == []
    assert read_committed(out, as_of_batch=2).num_rows == 18  # time travel before the swap still works

    time.sleep(0.01)
    gone = vacuum(out, "1ms", allow_short_retention=True, include_files_before_log=True)  # the swap is now older than the retention
    assert {i.path for i in gone.plan.orphans} == old
    assert not any(os.path.exists(p) for p in old)
    assert read_committed(out).num_rows == 18
    # time travel before the swap now fails saying why (before: MissingDataFileError "deleted outside the sink;
    # restore it from backup"), by batch and by time, through every reader of the snapshot
    log = history(out)
    before_swap = log.filter(pc.equal(log.column("log_batch_id"), 2)).column("commit_time")[0].as_py()
    for travel in ({"as_of_batch": 2}, {"as_of_batch": 0}, {"as_of_time": before_swap}, {"batches": (0, 1)}):
        for how in ({}, {"filter": pc.field("id") >= 100}):  # a filtered read prunes files first (batch 0's)
            expired = r"(as of batch \d|batches 0..1) of .* cannot be read any more"
            with pytest.raises(SnapshotExpiredError, match=expired):
                read_committed(out, **travel, **how)


@pytest.mark.parametrize("cause", ["optimize", "retention"])
def test_an_expired_snapshot_names_its_real_cause_and_its_advice_reads(tmp_path: Path, cause: str) -> None:
    """Time travel past what the log keeps: the SnapshotExpiredError names what removed the files (an optimize, by
    its log batch, on an output without retention; before, it blamed "retention" either way), that the log files
    were cleaned up (not "restore it from backup"), and the batches that can still be read, which are then read as
    the message says."""
    out = str(tmp_path / "out")
    settings = dict(compact_interval=3, min_batches_to_retain=2, cleanup_delay="0s")
    if cause == "retention":
        settings["retention"] = "1s"
    for v in range(4):
        write_batch(out, pa.table({"x": [v]}), app_id="a", version=v, **(settings if v == 0 else {}))
    if cause == "optimize":
        optimize(out)
    else:
        time.sleep(1.2)  # batches 0..3 are older than the retention when the next compaction runs
    for v in range(4, 12):
        write_batch(out, pa.table({"x": [v]}), app_id="a", version=v)
    optimized = [b for b, op in zip(*history(out).select(["log_batch_id", "operation"]).to_pydict().values())
                 if op == "optimize"]
    with pytest.raises(SnapshotExpiredError) as raised:
        read_committed(out, as_of_batch=1)
    message = str(raised.value)
    assert "before batch" in message and "cleaned up after compaction" in message and "backup" not in message
    if cause == "optimize":
        assert f"replaced by optimize (log batch {optimized[0]})" in message and "retention" not in message.split(
            "To keep")[0], message
    else:
        assert not optimized and "expired by retention='1s'" in message and "optimize" not in message, message
    first = int(re.search(r"as_of_batch=(\d+) or later", message).group(1))
    low = int(re.search(r"batches=\((\d+), \.\.\.\)", message).group(1))
    assert read_committed(out, as_of_batch=first).num_rows >= 1  # the advice, run literally
    rows = sorted(read_committed(out, batches=(low, snapshot(out).latest_batch_id)).column("x").to_pylist())
    # batches 4.. hold 4..11 and, after an optimize, its file (rows 0..3 rewritten at its batch)
    assert (low, rows) == (4, list(range(4 - 4 * (cause == "optimize"), 12))), (low, optimized)
    with pytest.raises(SnapshotExpiredError):
        read_committed(out, as_of_batch=first - 1)  # and it is the oldest


def test_a_file_of_an_old_snapshot_deleted_by_hand_is_still_a_missing_file(out: str) -> None:
    """A file that the latest snapshot still commits, deleted outside the sink: time travel to a snapshot naming
    it says the file is missing (restore it), not that the snapshot expired."""
    _write_versions(out, range(3))
    first = next(f.path for f in committed_files(out) if f.batch_id == 0)
    os.remove(first)
    for travel in ({"as_of_batch": 1}, {"batches": (0, 0)}, {}):
        with pytest.raises(MissingDataFileError, match="deleted outside the sink"):
            read_committed(out, **travel)


def test_delta_log_after_a_sync_removes_and_adds(out: str) -> None:
    deltalake = pytest.importorskip("deltalake")
    from parquet_sink import sync_delta_log

    expected = _write_versions(out, range(4))
    sync_delta_log(out)
    result = optimize(out, delta_log=False)
    synced = sync_delta_log(out)
    assert synced.added == result.files_added and synced.removed == result.files_removed
    table = deltalake.DeltaTable(out)
    assert sorted(Path(u).name for u in table.file_uris()) == sorted(Path(p).name for p in result.files)
    delta_rows = table.to_pyarrow_table()
    assert sorted(delta_rows.column("id").to_pylist()) == sorted(expected.column("id").to_pylist())


@settings(max_examples=15, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 20), min_size=1, max_size=8),
    target=st.integers(500, 6000),
    values=st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), min_size=1, max_size=5),
    order=st.sampled_from([{}, {"sort_by": ["x"]}, {"z_order": ["x", "id"]}]),
)
def test_rows_preserved_for_drawn_files_and_targets(tmp_path_factory, sizes, target, values, order) -> None:
    """Whatever the file sizes, the target and the order asked for (none, ``sort_by``, ``z_order``: partitions of
    one file, files larger than the target), the rows read after equal the rows before, every file committed has
    its right statistics (the count needs no data file), and a compaction leaves no partition with more files than
    before."""
    out = str(tmp_path_factory.mktemp("drawn") / "out")
    expected = []
    for v, n in enumerate(sizes):
        table = pa.table({
            "k": pa.array([("u" if i % 2 else "w") for i in range(n)], pa.string()),
            "x": pa.array([values[i % len(values)] for i in range(n)], pa.int64()),
            "id": pa.array([v * 100 + i for i in range(n)], pa.int64()),
        })
        write_batch(out, table, app_id="a", version=v, partition_by=["k"])
        expected.append(table)
    before = len(committed_files(out))
    optimize(out, target_file_size=target, **order)
    assert _rows(read_committed(out)) == _rows(pa.concat_tables(expected))
    assert len(committed_files(out)) <= before or order
    assert MetadataLog(out).check() == []
    _assert_statistics_of_every_file(out)
    _corrupt_all_but_the_ends(out)
    assert count_committed(out) == sum(sizes)


def test_optimize_on_every_store(backend) -> None:
    """Local disk, moto (S3) and Azurite: the swap, the rows, time travel, the Delta log's OPTIMIZE commit (read by
    delta-rs through the store) and a second run with nothing to do."""
    import deltalake

    from parquet_sink.storage.filesystem import Storage

    url, options = backend.url, backend.storage_options
    expected = []
    for v in range(4):
        rows = pa.table({"id": pa.array([10 * v + i for i in range(4)], pa.int64()), "k": ["a", "b", "a", "c"]})
        write_batch(url, rows, app_id="a", version=v, partition_by=["k"], storage_options=options, delta_log=True)
        expected += rows.column("id").to_pylist()
    before = {f.path for f in committed_files(url, storage_options=options)}
    result = optimize(url, storage_options=options)
    assert result.committed and result.files_added == 3 and result.files_removed == len(before) == 12
    assert result.delta is not None and result.delta.optimizes == 1
    delta_url, delta_options = Storage(url, options).object_store_location()
    table = deltalake.DeltaTable(delta_url, storage_options=delta_options)
    assert table.history(1)[0]["operation"] == "OPTIMIZE"
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == sorted(expected)
    assert sorted(read_committed(url, storage_options=options).column("id").to_pylist()) == sorted(expected)
    assert {f.path for f in committed_files(url, storage_options=options, as_of_batch=3)} == before
    assert not optimize(url, storage_options=options).committed
    assert MetadataLog(url, storage_options=options).check() == []


def test_an_old_snapshot_whose_log_files_are_gone_is_refused_not_answered_wrong(out: str) -> None:
    """Once cleanup deleted the log files before the swap, the snapshot before it cannot be answered from the newest
    compact file (its rows moved to the swap's batch): SnapshotExpiredError, not 0 rows."""
    _write_versions(out, range(13))
    optimize(out)
    log_dir = Path(out) / "_spark_metadata"
    for name in ["9.compact", *map(str, range(10, 19))]:
        (log_dir / name).unlink()
    with pytest.raises(SnapshotExpiredError):
        read_committed(out, as_of_batch=12)
    assert read_committed(out).num_rows == 13 * 6


def test_cli_optimize_dry_run_then_summary(out: str, capsys) -> None:
    import json

    from parquet_sink.cli.main import main

    _write_versions(out, range(3))
    assert main(["optimize", out, "--dry-run", "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["dry_run"] and not planned["committed"] and planned["files_removed"] == 12
    assert MetadataLog(out).latest_batch_id() == 2  # the dry run committed nothing
    assert main(["optimize", out, "--partition", "day=x", "--sort-by", "id"]) == 0
    text = capsys.readouterr().out
    assert "3 file(s)" in text and "-> 1 file(s)" in text and "committed files: 12 before, 10 after" in text
    assert main(["optimize", out, "--partition", "day"]) == 2  # an input error
    assert "use COLUMN=VALUE" in capsys.readouterr().err
    assert _rows(read_committed(out)) == _rows(pa.concat_tables(_version(v) for v in range(3)))


_Z_TYPES = {
    "int": (pa.int64(), lambda r: r.randrange(-(10**6), 10**6)),
    "float": (pa.float64(), lambda r: r.uniform(-1e3, 1e3)),
    "string": (pa.string(), lambda r: f"s{r.randrange(10**6):07d}"),
    "date": (pa.date32(), lambda r: dt.date(2000, 1, 1) + dt.timedelta(days=r.randrange(20000))),
    "timestamp": (pa.timestamp("us", tz="UTC"),
                  lambda r: dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=r.randrange(10**12))),
    "decimal": (pa.decimal128(20, 3), lambda r: decimal.Decimal(r.randrange(-(10**9), 10**9)) / 1000),
}


def _overlapping(bounds: list[tuple], value) -> int:
    return sum(1 for low, high in bounds if low is not None and low <= value <= high)


@settings(max_examples=6, deadline=None)
@given(
    types=st.lists(st.sampled_from(sorted(_Z_TYPES)), min_size=2, max_size=3),
    seed=st.integers(0, 2**32),
)
def test_z_order_preserves_rows_and_lets_statistics_skip_files_on_each_column(tmp_path_factory, types, seed) -> None:
    """Rows preserved; for a point filter on each z-order column, fewer files' footer min/max bounds overlap the
    value than when the same rows are cut into as many files in arrival order (each spans nearly everything)."""
    rng = random.Random(seed)
    names = [f"c{i}" for i in range(len(types))]
    out = str(tmp_path_factory.mktemp("zorder") / "out")
    batches = []
    for v in range(16):
        columns = {"id": pa.array(range(v * 100, v * 100 + 100), pa.int64())}
        for name, kind in zip(names, types):
            typ, draw = _Z_TYPES[kind]
            columns[name] = pa.array([None if rng.random() < 0.03 else draw(rng) for _ in range(100)], typ)
        batch = pa.table(columns)
        write_batch(out, batch, app_id="z", version=v, partition_by=[])
        batches.append(batch)
    expected = pa.concat_tables(batches)
    input_bytes = sum(f.size for f in committed_files(out))
    files = 4 ** len(names)  # each column's range cut in four at least (a point hits a quarter to a half)
    result = optimize(out, z_order=names, target_file_size=input_bytes // files + 1)
    assert result.committed and result.files_added == files
    assert _rows(read_committed(out)) == _rows(expected)
    probes = expected.slice(0, 400).take(list(range(0, 400, 13)))
    for column in names:
        index = pq.ParquetFile(result.files[0]).schema_arrow.get_field_index(column)
        clustered = []
        for path in result.files:
            stats = pq.ParquetFile(path).metadata.row_group(0).column(index).statistics
            clustered.append((stats.min, stats.max) if stats is not None and stats.has_min_max else (None, None))
        arrival = []
        for start in range(0, expected.num_rows, expected.num_rows // files):
            piece = expected.column(column).slice(start, expected.num_rows // files)
            arrival.append((pc.min(piece).as_py(), pc.max(piece).as_py()))
        values = [v for v in probes.column(column).to_pylist() if v is not None]
        hit_clustered = sum(_overlapping(clustered, v) for v in values)
        hit_arrival = sum(_overlapping(arrival, v) for v in values)
        assert hit_clustered < hit_arrival * 0.6, (column, types, hit_clustered, hit_arrival)


def test_z_order_refusals(out: str) -> None:
    _write_versions(out, range(3))
    with pytest.raises(ParameterError, match="not both"):
        optimize(out, z_order=["id"], sort_by=["id"])
    with pytest.raises(ParameterError, match="list of column names"):
        optimize(out, z_order="id")
    with pytest.raises(ParameterError, match="not data columns"):
        optimize(out, z_order=["day", "id"])
    assert len(committed_files(out)) == 12  # nothing swapped
    lists = out + "-lists"
    for v in range(2):
        write_batch(lists, pa.table({"id": [v], "tags": [[v, 1]]}), app_id="l", version=v)
    with pytest.raises(ParameterError, match="'tags' of the files in .*-lists is list<.*>, which has no order"):
        optimize(lists, z_order=["id", "tags"])


def _large_and_small_partition(out: str, rows: int = 4000) -> pa.Table:
    """An output of two partitions of one file each: ``k=a`` holds ``rows`` random rows, ``k=b`` three."""
    rng = random.Random(54)
    table = pa.table({
        "id": pa.array(range(rows), pa.int64()),
        "x": pa.array([rng.randrange(10**6) for _ in range(rows)], pa.int64()),
        "y": pa.array([f"s{rng.randrange(10**6):07d}" for _ in range(rows)], pa.string()),
        "k": ["a"] * rows,
    })
    small = pa.table({"id": pa.array([rows, rows + 1, rows + 2], pa.int64()), "x": pa.array([5, 1, 3], pa.int64()),
                      "y": ["c", "b", "a"], "k": ["b"] * 3})
    write_batch(out, table, app_id="big", version=0, partition_by=["k"])
    write_batch(out, small, app_id="big", version=1, partition_by=["k"])
    return pa.concat_tables([table, small])


@pytest.mark.parametrize("order", ["z_order", "sort_by"])
def test_an_ordered_optimize_cuts_a_partition_of_one_large_file(out: str, order: str) -> None:
    """Issue 54, item 3: a partition of one file of 8 targets, z-ordered or sorted, is cut into files near the target
    (as delta-rs's ``z_order()`` cuts it), each covering a narrow range of ``x``: a filtered read opens
    only the files whose logged bounds hold the value (the others are corrupted here, so opening one fails). Before,
    the planner left every one-file partition alone and nothing could skip. A plain compaction still leaves a lone
    file; ``sort_by`` leaves a lone small file (``k=b``), ``z_order`` rewrites every file of each partition."""
    expected = _large_and_small_partition(out)
    big, small = sorted(committed_files(out), key=lambda f: f.relative_path)
    target = big.size // 8 + 1
    assert not optimize(out, target_file_size=target).committed  # compaction: one file alone is left
    result = optimize(out, target_file_size=target, **{order: ["x", "y"] if order == "z_order" else ["x"]})
    assert result.committed and result.files_removed == (2 if order == "z_order" else 1)
    cut = [p for p in result.files if "/k=a/" in p]
    assert len(cut) == 8 and sum(f.size for f in committed_files(out) if f.path in cut) < 2 * big.size
    assert (small.path in {f.path for f in committed_files(out)}) == (order == "sort_by")
    assert _rows(read_committed(out)) == _rows(expected)
    _assert_statistics_of_every_file(out)
    if order == "sort_by":  # the cut's files, a little over the target, are not cut again (z_order always rewrites)
        assert not optimize(out, target_file_size=target, sort_by=["x"]).committed
    stats = _logged_stats(out)
    probe = expected.column("x")[17].as_py()
    holding = [p for p in cut if stats[p]["minValues"]["x"] <= probe <= stats[p]["maxValues"]["x"]]
    assert 1 <= len(holding) <= (4 if order == "z_order" else 2), holding
    _corrupt_all_but_the_ends(out, keep=holding)
    where = ds.field("x") == probe
    assert _rows(read_committed(out, filter=where)) == _rows(expected.filter(where))
    assert count_committed(out, filter=where) == expected.filter(where).num_rows


def test_schema_evolution_across_the_files_of_one_bin(out: str) -> None:
    """A column added in later batches (null in the older files of the same bin), columns written in another
    order: the rewritten file holds the widest schema, rows equal ``read_committed``'s before (which unifies as
    the readers do), and the Delta log after the sync reads the same rows (delta-rs)."""
    deltalake = pytest.importorskip("deltalake")

    write_batch(out, pa.table({"id": [1, 2], "k": ["a", None]}), app_id="e", version=0, partition_by=["k"],
                delta_log=True)
    write_batch(out, pa.table({"k": ["a", None], "id": [3, 4], "extra": ["x", None]}), app_id="e", version=1,
                partition_by=["k"], delta_log=True)
    write_batch(out, pa.table({"id": [5], "k": ["a"], "extra": ["%/="]}), app_id="e", version=2,
                partition_by=["k"], delta_log=True)
    before = read_committed(out)
    result = optimize(out)
    assert result.committed and result.files_removed == 5 and result.files_added == 2
    assert {pq.read_schema(p).names.__len__() for p in result.files} == {2}  # id, extra (k in the directory)
    assert _rows(read_committed(out)) == _rows(before)
    assert _rows(deltalake.DeltaTable(out).to_pyarrow_table()) == _rows(before)


def test_only_the_null_partition(out: str) -> None:
    expected = _write_versions(out, range(3))
    result = optimize(out, partitions={"day": None})
    assert result.committed and [b.directory for b in result.plan.bins] == ["day=__HIVE_DEFAULT_PARTITION__"]
    assert result.files_removed == 3 and result.files_added == 1
    assert _rows(read_committed(out)) == _rows(expected)


def test_partitions_that_match_no_column_or_are_not_written_values_are_refused(tmp_path: Path, capsys) -> None:
    """``partitions={"hour": 5}`` (an int where the directory holds "5") or a mistyped column rewrote nothing and
    said all was well; both are refused, as is a CLI ``--partition`` given twice; "5" rewrites the hour's files."""
    from parquet_sink.cli.main import main

    out = str(tmp_path / "out")
    for version in range(3):
        write_batch(out, pa.table({"id": [version], "hour": [5]}), app_id="a", version=version, partition_by=["hour"])
    for partitions, message in (({"hour": 5}, "as written in the directory names"),
                                ({"huor": "5"}, r"names \['huor'\], but the output's partition columns are \['hour'\]"),
                                ([("hour", "5")], "must map columns")):
        with pytest.raises(ParameterError, match=message):
            optimize(out, partitions=partitions)
    assert main(["optimize", out, "--dry-run", "--partition", "hour=4", "--partition", "hour=5"]) == 2
    assert "given twice" in capsys.readouterr().err
    assert main(["optimize", out, "--dry-run", "--partition", "nope=x"]) == 2
    assert "partition columns are ['hour']" in capsys.readouterr().err
    result = optimize(out, partitions={"hour": "5"})
    assert result.committed and result.files_removed == 3
    assert sorted(read_committed(out).column("id").to_pylist()) == [0, 1, 2]


def test_empty_outputs(tmp_path: Path) -> None:
    """Not an output: a typed refusal. An output with only empty batches, or one file: nothing to rewrite, no
    batch committed. A zero-row file in a bin: rows preserved."""
    from parquet_sink.errors import NotAnOutputError

    with pytest.raises(NotAnOutputError):
        optimize(str(tmp_path / "nothing"))
    empty = str(tmp_path / "empty")
    schema = pa.schema([("id", pa.int64()), ("k", pa.string())])
    for v in range(3):
        write_batch(empty, schema.empty_table(), app_id="e", version=v)
    latest = MetadataLog(empty).latest_batch_id()
    assert not optimize(empty).committed and MetadataLog(empty).latest_batch_id() == latest
    mixed = str(tmp_path / "mixed")
    write_batch(mixed, schema.empty_table(), app_id="e", version=0)
    write_batch(mixed, pa.table({"id": [1, 2], "k": ["a", "b"]}), app_id="e", version=1)
    write_batch(mixed, pa.table({"id": [3], "k": ["c"]}), app_id="e", version=2)
    files = len(committed_files(mixed))
    result = optimize(mixed)
    assert result.committed and result.files_removed == files and result.rows == 3
    assert sorted(read_committed(mixed).column("id").to_pylist()) == [1, 2, 3]


def _run_with_clock(offset_s: int, code: str) -> str:
    """Run ``code`` in a process whose clock (``time.time``) is ``offset_s`` seconds off this machine's."""
    program = f"import time\n_real = time.time\ntime.time = lambda: _real() + {offset_s}\n{code}"
    source = str(Path(__file__).resolve().parents[2] / "src")  # this tree's package, not an installed one
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True, env=env).stdout


def test_vacuum_keeps_the_files_of_a_swap_whose_clock_is_behind(out: str) -> None:
    """Batches written two hours ago and an optimize now, by a machine whose clock is an hour behind: the swap's
    logged commit time is an hour back, its log file's time on storage is now. A vacuum (--older-than 30m) right
    after keeps the replaced files (the swap is seconds old) and time travel before it still reads them. Before,
    the swap was judged by its logged time alone: the vacuum deleted them and batch 2 could no longer be read."""
    _run_with_clock(-3 * 3600, f"""
import glob, os
import pyarrow as pa
from parquet_sink import write_batch
for v in range(3):
    write_batch({out!r}, pa.table({{"id": [v, v + 100]}}), app_id="late", version=v)
for path in glob.glob({out!r} + "/*.parquet") + glob.glob({out!r} + "/_spark_metadata/*"):
    os.utime(path, (_real() - 7200, _real() - 7200))  # on storage: two hours ago
""")
    replaced = {f.path for f in committed_files(out)}
    _run_with_clock(-3600, f"from parquet_sink.maintenance import optimize\noptimize({out!r})")

    plan = vacuum(out, "30m", allow_short_retention=True).plan
    assert {i.path for i in plan.replaced_kept} == replaced and plan.orphans == []
    assert sorted(read_committed(out, as_of_batch=2).column("id").to_pylist()) == [0, 1, 2, 100, 101, 102]


@pytest.mark.parametrize("damage", ["truncated", "emptied", "rewritten in place", "deleted"])
def test_a_damaged_or_lost_input_is_a_typed_error_naming_file_and_batch(out: str, damage: str) -> None:
    """A committed input the optimize cannot read: DamagedDataFileError (or MissingDataFileError) naming the file
    and its batch, as the readers say it, and nothing swapped. Before, a damaged one was a StorageError saying
    to check that the location exists and is reachable."""
    from parquet_sink.errors import DamagedDataFileError

    _write_versions(out, range(3))
    victim = next(f for f in committed_files(out) if f.batch_id == 1)
    data = Path(victim.path).read_bytes()
    body = {"truncated": data[: len(data) // 2], "emptied": b"", "rewritten in place": b"x" * len(data)}.get(damage)
    if body is None:
        os.remove(victim.path)
    else:
        Path(victim.path).write_bytes(body)
    before = {f.path for f in committed_files(out)}
    error = MissingDataFileError if damage == "deleted" else DamagedDataFileError
    with pytest.raises(error, match=f"committed file {victim.path} of batch 1 .*"):
        optimize(out)
    assert {f.path for f in committed_files(out)} == before and MetadataLog(out).latest_batch_id() == 2


def test_int96_files_next_to_micros_files_are_compacted(tmp_path) -> None:
    """An output whose timestamp column is INT96 in one batch's file (Spark's writer: read naive) and
    TIMESTAMP_MICROS in another's (an app's or the Arrow path's: read zoned UTC), as ``read_committed`` reads them
    (one type, instants in UTC): before, optimize failed every such bin with pyarrow's ArrowTypeError ("Cannot
    merge timestamp with timezone and timestamp without timezone"); now one file holds the same instants."""
    out = str(tmp_path / "out")
    log = MetadataLog(out)
    spark_file = Path(out) / "part-00000-0000.c000.snappy.parquet"
    spark_file.parent.mkdir(parents=True)
    instant = dt.datetime(1999, 12, 31, 23, 59, 59, 999999)
    pq.write_table(pa.table({"id": [1], "t": pa.array([instant], pa.timestamp("us"))}).replace_schema_metadata(
        {b"org.apache.spark.version": b"3.5.0"}), spark_file, use_deprecated_int96_timestamps=True)
    assert log.add(0, [LogEntry(spark_file.as_uri(), spark_file.stat().st_size, False, int(time.time() * 1000))])
    utc = dt.timezone.utc
    app_file = Path(out) / "part-00000-0001.c000.snappy.parquet"  # an app's (write_batch now writes INT96 here)
    pq.write_table(pa.table({"id": [2], "t": pa.array([dt.datetime(2020, 1, 1, tzinfo=utc)], pa.timestamp("us", "UTC"))}),
                   app_file)
    assert log.add(1, [LogEntry(app_file.as_uri(), app_file.stat().st_size, False, int(time.time() * 1000))])
    empty = pa.table({"id": pa.array([], pa.int64()), "t": pa.array([], pa.timestamp("us", "UTC"))})
    # the newest batch an app's: no Spark sink appends here (its query is stopped for good, which write_batch is told)
    write_batch(out, empty, app_id="app", version=0, spark_sink_stopped=True)
    before = read_committed(out).sort_by("id")
    assert before.schema.field("t").type == pa.timestamp("us", "UTC")
    result = optimize(out, target_file_size="1GB")
    assert result.files_added == 1 and len(committed_files(out)) == 1
    after = read_committed(out).sort_by("id")
    # the same instants; the one file is INT96 (an input was), which reads naive, as Spark's INT96 files do
    assert after.column("t").cast(pa.timestamp("us", "UTC")).to_pylist() == before.column("t").to_pylist() == [
        instant.replace(tzinfo=utc), dt.datetime(2020, 1, 1, tzinfo=utc)]


def test_a_mistyped_partition_names_the_call_once(tmp_path: Path) -> None:
    """optimize names the call and its output in front of a refused argument (errors.names_output): the partitions
    check named the output again in its own form (``optimize('/o'): optimize /o: partitions names ...``)."""
    out = str(tmp_path / "out")
    write_batch(out, pa.table({"id": [0], "hour": [5]}), app_id="a", version=0, partition_by=["hour"])
    with pytest.raises(ParameterError) as refused:
        optimize(out, partitions={"huor": "5"})
    assert str(refused.value).startswith(f"optimize({out!r}): partitions names ['huor']"), str(refused.value)


_ENCODINGS = {  # how a drawn batch's file is written: by an app (TIMESTAMP_MICROS), or as Spark's writer (INT96)
    "app": None,
    "spark": {b"org.apache.spark.version": b"3.5.0"},
    "spark 2.4 (hybrid calendar)": {b"org.apache.spark.version": b"2.4.8"},
}


@settings(max_examples=8, derandomize=True, deadline=None, database=None)
@given(
    encodings=st.lists(st.sampled_from(sorted(_ENCODINGS)), min_size=2, max_size=5),
    # days before 1582-10-15 (day -141427), where the calendars differ, as often as later ones
    days=st.lists(st.integers(-719_000, -141_428) | st.integers(-141_427, 20_000), min_size=1, max_size=4),
)
def test_rows_preserved_for_drawn_timestamp_encodings_and_calendars(tmp_path_factory, encodings, days) -> None:
    """The shapes of two defects, drawn: files whose timestamps are INT96 next to TIMESTAMP_MICROS ones (optimize
    failed with ArrowTypeError) and files in Spark's hybrid Julian calendar next to proleptic ones (optimize kept one
    file's calendar markers for all rows: days before 1582 moved). After optimize every row reads as before, as
    instants (read_committed reads the hybrid files as Spark does: tests/read/test_hybrid_calendar.py)."""
    out = str(tmp_path_factory.mktemp("encodings") / "out")
    log = MetadataLog(out)
    utc = pa.timestamp("us", "UTC")
    for batch, encoding in enumerate([*encodings, "app"]):  # the newest an app's: optimize refuses Spark's sink's
        table = pa.table({
            "id": pa.array([batch * 10 + i for i in range(len(days))], pa.int64()),
            "d": pa.array(days, pa.int32()).cast(pa.date32()),
            "t": pa.array([d * 86_400_000_000 + 1 for d in days], pa.int64()).cast(utc),
        })
        if _ENCODINGS[encoding] is None:
            write_batch(out, table, app_id="app", version=batch, spark_sink_stopped=True)  # no Spark query runs here
            continue
        path = Path(out) / f"part-{batch:05d}-{uuid.uuid4()}.c000.snappy.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table.replace_schema_metadata(_ENCODINGS[encoding]), path, use_deprecated_int96_timestamps=True)
        assert log.add(batch, [LogEntry(path.as_uri(), path.stat().st_size, False, int(time.time() * 1000))])
    def instants(table: pa.Table) -> list[tuple]:
        return sorted(zip(table.column("id").to_pylist(), table.column("d").to_pylist(),
                          table.column("t").cast(utc).to_pylist()))

    before = instants(read_committed(out))
    assert optimize(out, target_file_size="1GB").files_added == 1
    assert instants(read_committed(out)) == before
