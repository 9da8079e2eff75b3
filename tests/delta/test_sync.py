"""sync_delta_log and write_batch(..., delta_log=True) without Spark: the Delta log lists exactly the committed
files through compaction, retention, a second writer app, failed batches that left files behind, schema
evolution; readers (delta-rs, polars, duckdb) return read_committed's rows; checkpoints keep the log bounded;
verify and vacuum know the Delta log."""

from __future__ import annotations

import datetime as _dt
import decimal
import json
import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote

import deltalake
import polars as pl
import pyarrow as pa
import pytest

from parquet_sink import (
    MetadataLog, committed_dataset, committed_files, count_committed, read_committed, sync_delta_log, write_batch,
)
from parquet_sink import failpoints
from parquet_sink.cli.main import main as cli_main
from parquet_sink.delta import APP_ID, DeltaDependencyError, DeltaLogError, sync
from parquet_sink.errors import ParameterError
from parquet_sink.maintenance import vacuum, verify
from parquet_sink.storage.filesystem import Storage
from tests.delta.readers import assert_delta_matches, data_commits, delta_files, spark_style_batch

ROOT = Path(__file__).resolve().parents[2]
CATS = ["a b", "c:d", "x/y=1%", None, ""]


def _table(version: int, rows: int = 6) -> pa.Table:
    ids = [version * 100 + i for i in range(rows)]
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [f"n{i}" if i % 5 else None for i in ids],
            "price": pa.array([decimal.Decimal(i) / 4 for i in ids], pa.decimal128(12, 2)),
            "at": pa.array([_dt.datetime(2024, 1, 1, tzinfo=_dt.UTC) + _dt.timedelta(seconds=i, microseconds=7)
                            for i in ids], pa.timestamp("us", "UTC")),
            "day": pa.array([_dt.date(2024, 1, 1 + i % 3) for i in ids]),
            "ok": [i % 2 == 0 for i in ids],
            "cat": [CATS[i % len(CATS)] for i in ids],
            "n": pa.array([i % 3 for i in ids], pa.int32()),
        }
    )


@pytest.fixture
def clean_failpoints(monkeypatch):
    """Failpoints switched on for one test (the module reads the environment at import)."""
    monkeypatch.setattr(failpoints, "_HITS", {})
    return lambda name, action: monkeypatch.setitem(failpoints._ACTIVE, name, (action, 1))


def test_write_batch_delta_log_every_reader(out):
    for version in range(4):
        write_batch(out, _table(version), app_id="app", version=version, partition_by=["cat", "n"],
                    compact_interval=3, delta_log=True)
    assert "2.compact" in os.listdir(Path(out) / "_spark_metadata")
    table = deltalake.DeltaTable(out)
    assert table.transaction_version(APP_ID) == 3
    assert table.metadata().partition_columns == ["cat", "n"]
    expected = assert_delta_matches(out)
    assert expected.num_rows == 24
    # add paths in the log are relative and URL-encoded (the directory cat=c%3Ad is logged as cat=c%253Ad)
    logged = [json.loads(line)["add"]["path"] for f in sorted((Path(out) / "_delta_log").glob("*.json"))
              for line in f.read_text().splitlines() if line.startswith('{"add"')]
    assert {unquote(p) for p in logged} == {f.relative_path for f in committed_files(out)}
    assert any(p.startswith("cat=c%253Ad/") for p in logged) and any(p.startswith("cat=a%20b/") for p in logged)
    assert sorted(expected.column("id").to_pylist()) == [v * 100 + i for v in range(4) for i in range(6)]
    # a sync in step commits nothing
    again = sync_delta_log(out)
    assert (again.committed, again.delta_version, again.log_batch_id) == (False, table.version(), 3)
    assert verify(out).ok and not verify(out).warnings


def test_second_writer_app_and_empty_batches(out):
    write_batch(out, _table(0), app_id="a", version=0, delta_log=True)
    write_batch(out, _table(1).slice(0, 0), app_id="b", version=0, delta_log=True)  # a batch without files
    write_batch(out, _table(2), app_id="b", version=1, delta_log=True)
    write_batch(out, _table(0), app_id="a", version=0, delta_log=True)  # a retry: skipped
    assert deltalake.DeltaTable(out).transaction_version(APP_ID) == 2
    assert sorted(assert_delta_matches(out).column("id").to_pylist()) == [v * 100 + i for v in (0, 2) for i in range(6)]


def test_failed_batch_files_never_reach_delta(out, clean_failpoints):
    write_batch(out, _table(0), app_id="app", version=0, partition_by=["cat"], delta_log=True)
    clean_failpoints("before_commit", "raise")
    with pytest.raises(failpoints.FailpointError):
        write_batch(out, _table(1), app_id="app", version=1, partition_by=["cat"], delta_log=True)
    on_disk = {str(p.relative_to(out)) for p in Path(out).rglob("*.parquet") if "_" != p.relative_to(out).parts[0][0]}
    committed = {f.relative_path for f in committed_files(out)}
    assert on_disk - committed, "the failed batch left files behind"
    failpoints._ACTIVE.pop("before_commit")
    write_batch(out, _table(2), app_id="app", version=2, partition_by=["cat"], delta_log=True)
    assert not (on_disk - committed) & delta_files(out)
    assert sorted(assert_delta_matches(out).column("id").to_pylist()) == [v * 100 + i for v in (0, 2) for i in range(6)]


def _raw_batch(out: str, batch: int, old: bool, retention: str | None) -> None:
    """Batch ``batch`` the way Spark's sink logs it, its entries logged 30 days ago when ``old``."""
    log = MetadataLog(out, compact_interval=3, retention=retention)
    assert spark_style_batch(log, _table(50 + batch), ("cat",), old) == batch


def test_retention_drops_become_remove_actions_and_vacuum_keeps_them(out):
    _raw_batch(out, 0, old=True, retention="7d")  # no compaction yet: nothing dropped
    _raw_batch(out, 1, old=False, retention="7d")
    first = sync_delta_log(out)
    assert (first.created, first.added) == (True, len(committed_files(out)))
    old_files = {f.relative_path for f in committed_files(out) if f.batch_id == 0}
    _raw_batch(out, 2, old=False, retention="7d")  # compaction: retention drops batch 0's entries
    assert not old_files & {f.relative_path for f in committed_files(out)}
    second = sync_delta_log(out)
    assert second.removed == len(old_files) and second.added > 0
    assert not old_files & delta_files(out)
    assert_delta_matches(out)
    # time travel to version 0 still reads the dropped files: vacuum keeps them while within older_than
    assert deltalake.DeltaTable(out, version=0).to_pyarrow_table().num_rows == 12
    kept = vacuum(out, "1h", allow_short_retention=True, include_files_before_log=True)
    assert {os.path.relpath(i.path, out) for i in kept.plan.delta_kept} == old_files
    assert not kept.plan.orphans and all((Path(out) / f).exists() for f in old_files)
    # a shorter older_than does not shorten the table's own retention: its commit file still reaches version 0
    again = vacuum(out, "0s", allow_short_retention=True, include_files_before_log=True)
    assert {os.path.relpath(i.path, out) for i in again.plan.delta_kept} == old_files and not again.plan.orphans
    assert deltalake.DeltaTable(out, version=0).to_pyarrow_table().num_rows == 12
    assert_delta_matches(out)


def test_schema_evolution_adds_a_delta_column(out):
    write_batch(out, pa.table({"id": [1, 2]}), app_id="app", version=0, delta_log=True)
    write_batch(out, pa.table({"id": [3], "extra": ["x"]}), app_id="app", version=1, delta_log=True)
    assert "extra" in pa.schema(deltalake.DeltaTable(out).schema()).names
    table = assert_delta_matches(out)
    assert sorted(zip(table.column("id").to_pylist(), table.column("extra").to_pylist())) == [
        (1, None), (2, None), (3, "x")
    ]


def test_a_column_added_to_a_partitioned_output_comes_before_the_partition_columns_in_one_commit(out):
    """A later batch of a partitioned output brings a column: Delta readers give the columns in the order
    read_committed (and spark.read.parquet) gives them, partition columns last (delta-rs's add_columns put it
    after them), and the new column arrives in the same Delta commit as the files that bring it."""
    write_batch(out, pa.table({"id": [1, 2], "p": ["a", "b"]}), app_id="app", version=0, partition_by=["p"], delta_log=True)
    before = deltalake.DeltaTable(out).version()
    write_batch(out, pa.table({"id": [3], "extra": ["x"], "p": ["a"]}), app_id="app", version=1, partition_by=["p"],
                delta_log=True)
    table = deltalake.DeltaTable(out)
    assert table.version() == before + 1
    assert table.to_pyarrow_table().column_names == read_committed(out).column_names == ["id", "extra", "p"]
    assert table.metadata().partition_columns == ["p"]
    assert sorted(assert_delta_matches(out).column("id").to_pylist()) == [1, 2, 3]
    assert sync_delta_log(out).committed is False and verify(out).ok


def test_checkpoints_and_log_cleanup_keep_the_delta_log_bounded(out):
    write_batch(out, pa.table({"id": [0]}), app_id="app", version=0)
    sync_delta_log(out, checkpoint_interval=3, log_retention="1s")
    for version in range(1, 4):
        write_batch(out, pa.table({"id": [version]}), app_id="app", version=version, delta_log=True)
    time.sleep(1.2)
    for version in range(4, 7):
        write_batch(out, pa.table({"id": [version]}), app_id="app", version=version, delta_log=True)
    names = sorted(os.listdir(Path(out) / "_delta_log"))
    assert any(n.endswith(".checkpoint.parquet") for n in names), names
    assert "00000000000000000000.json" not in names, names  # expired and behind a checkpoint: deleted
    assert deltalake.DeltaTable(out).version() == 7  # the creation, its time zone property, six appends
    assert sorted(assert_delta_matches(out).column("id").to_pylist()) == list(range(7))


@pytest.mark.parametrize("interval", [True, 2.0, 0, -1, "10"])
def test_a_checkpoint_interval_that_is_not_a_positive_integer_is_refused(out, interval):
    """``True`` once passed the integer check and became the table property ``'True'``, which failed every later
    sync after its commit (a table created so checkpoints at Delta's default now)."""
    write_batch(out, pa.table({"id": [0]}), app_id="app", version=0)
    with pytest.raises(ParameterError, match=f"checkpoint_interval must be a positive integer, got {interval!r}"):
        sync_delta_log(out, checkpoint_interval=interval)
    assert not (Path(out) / "_delta_log").exists()
    assert [sync._checkpoint_interval({"delta.checkpointInterval": text}) for text in ("True", "", "-3", "٣", "7")] == [
        100, 100, 100, 100, 7]


@pytest.mark.parametrize("zone", ["utc", "Mars/Phobos", "", "../etc/passwd", 5])
def test_a_time_zone_that_is_not_one_is_refused_wherever_it_enters(out, zone, capsys):
    """``--recreate --time-zone utc`` (the case the refusal of another zone once suggested) deleted the Delta log,
    then failed with zoneinfo's own error: every entry point now refuses a zone it cannot read before doing
    anything, with the same error."""
    t = pa.table({"id": [1], "t": pa.array([_dt.datetime(2024, 1, 1, 5)], pa.timestamp("us", "UTC"))})
    write_batch(out, t, app_id="app", version=0, partition_by=["t"], delta_log=True)
    calls = {
        "sync_delta_log": lambda: sync_delta_log(out, time_zone=zone, recreate=True),
        "write_batch": lambda: write_batch(out, t, app_id="app", version=1, time_zone=zone),
        "read_committed": lambda: read_committed(out, time_zone=zone),
        "count_committed": lambda: count_committed(out, time_zone=zone),
        "committed_dataset": lambda: committed_dataset(out, time_zone=zone),
    }
    for name, call in calls.items():
        with pytest.raises(ParameterError, match=rf"^{name}\('.*out'\): time_zone={re.escape(repr(zone))} is not a time zone"):
            call()
    if isinstance(zone, str):
        assert cli_main(["delta-sync", out, "--recreate", "--time-zone", zone]) == 2
        assert "is not a time zone" in capsys.readouterr().err
    assert deltalake.DeltaTable(out).version() == 1 and read_committed(out).num_rows == 1
    assert sorted(assert_delta_matches(out).column("id").to_pylist()) == [1]


def test_a_failed_delta_commit_never_fails_the_batch(out, caplog):
    write_batch(out, _table(0), app_id="app", version=0, delta_log=True)
    delta_dir = Path(out) / "_delta_log"
    moved = Path(out).with_name("moved_delta_log")
    delta_dir.rename(moved)
    delta_dir.write_text("not a directory")  # the Delta commit fails for real
    with caplog.at_level(logging.WARNING, logger="parquet_sink.delta.sync"):
        result = write_batch(out, _table(1), app_id="app", version=1, delta_log=True)
    assert result.committed and result.log_batch_id == 1
    assert "parquet-sink delta-sync" in caplog.text and "log batch 1" in caplog.text
    with pytest.raises(DeltaLogError, match="_delta_log failed.*not affected.*delta-sync"):
        sync_delta_log(out)  # a typed error naming the remedy, not delta-rs's own
    assert sorted(read_committed(out).column("id").to_pylist()) == [v * 100 + i for v in (0, 1) for i in range(6)]
    delta_dir.unlink()
    moved.rename(delta_dir)
    assert deltalake.DeltaTable(out).transaction_version(APP_ID) == 0  # one batch behind
    report = verify(out)
    assert report.ok and any("behind" in w for w in report.warnings)
    write_batch(out, _table(2), app_id="app", version=2, delta_log=True)  # the next batch catches up
    assert deltalake.DeltaTable(out).transaction_version(APP_ID) == 2
    assert sorted(assert_delta_matches(out).column("id").to_pylist()) == [v * 100 + i for v in range(3) for i in range(6)]


def test_verify_reports_files_the_delta_log_lists_and_the_log_does_not(out, tmp_path):
    write_batch(out, _table(0), app_id="app", version=0, delta_log=True)
    stray = tmp_path / "stray"
    deltalake.write_deltalake(str(stray), _table(9).select(["id"]))
    name = next(p.name for p in stray.glob("*.parquet"))
    os.link(stray / name, Path(out) / name)
    table = deltalake.DeltaTable(out)
    from deltalake.transaction import AddAction

    table.create_write_transaction(
        [AddAction(name, (stray / name).stat().st_size, {}, 0, True, '{"numRecords":6}')], mode="append",
        schema=table.schema(),
    )
    report = verify(out)
    assert not report.ok and any(name in p and "does not commit" in p for p in report.problems)
    assert name not in {os.path.relpath(i.path, out) for i in vacuum(out, "0s", allow_short_retention=True, dry_run=True).plan.orphans}


def test_delta_log_ahead_of_the_log_is_refused(out, tmp_path):
    write_batch(out, _table(0), app_id="app", version=0)
    write_batch(out, _table(1), app_id="app", version=1, delta_log=True)
    other = str(tmp_path / "other")
    write_batch(other, _table(5), app_id="app", version=0)
    os.rename(Path(out) / "_delta_log", Path(other) / "_delta_log")
    with pytest.raises(DeltaLogError, match="mirrors log batch 1.*read 3 times.*delta-sync --recreate"):
        sync_delta_log(other)
    assert any("reset" in p for p in verify(other).problems)
    assert cli_main(["delta-sync", "--recreate", other]) == 0  # the remedy named
    assert verify(other).ok and sorted(assert_delta_matches(other).column("id").to_pylist()) == list(range(500, 506))


def test_an_output_written_before_syncs_once(out):
    for version in range(3):
        write_batch(out, _table(version), app_id="app", version=version, partition_by=["day"])
    assert not (Path(out) / "_delta_log").exists()
    result = sync_delta_log(out)
    assert (result.created, result.committed, result.log_batch_id, result.previous_log_batch_id) == (True, True, 2, None)
    table = assert_delta_matches(out)
    assert table.schema.field("day").type == pa.date32()


def test_cli_delta_sync(out, capsys):
    write_batch(out, _table(0), app_id="app", version=0)
    assert cli_main(["delta-sync", out]) == 0
    assert "created at version 1: mirrors log batch 0" in capsys.readouterr().out
    assert cli_main(["delta-sync", out, "--json"]) == 0
    assert '"committed": false' in capsys.readouterr().out
    assert_delta_matches(out)


def test_missing_deltalake_is_a_typed_error(out):
    """(``delta-sync --help`` importing nothing heavy, deltalake included, is in tests/maintenance.)"""
    write_batch(out, _table(0), app_id="app", version=0)
    probe = (
        "import sys\n"
        "sys.modules['deltalake'] = None  # as if not installed\n"
        "from parquet_sink import ParquetSink, sync_delta_log, write_batch\n"
        "from parquet_sink.errors import ParquetSinkError\n"
        "import pyarrow as pa\n"
        f"for call in (lambda: sync_delta_log({out!r}),\n"
        f"             lambda: write_batch({out!r}, pa.table({{'id': [1]}}), app_id='x', version=0, delta_log=True),\n"
        f"             lambda: ParquetSink({out!r}, delta_log=True)):\n"
        "    try:\n"
        "        call()\n"
        "    except ParquetSinkError as exc:\n"
        "        print(type(exc).__name__, exc)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("Delta")]
    assert len(lines) == 3 and all(line.startswith("DeltaDependencyError") for line in lines), done.stdout
    assert all('pip install "parquet-sink[delta]"' in line for line in lines)
    assert not (Path(out) / "_delta_log").exists()
    assert MetadataLog(out).latest_batch_id() == 0  # write_batch refused before writing
    assert issubclass(DeltaDependencyError, ImportError)


def test_timestamp_partitions_written_in_a_session_time_zone_are_utc_in_delta(out):
    # one fraction digit at most: Spark infers a longer fraction as a string partition, and so do we
    at = [_dt.datetime(2024, 3, 10, 6, 30, tzinfo=_dt.UTC), _dt.datetime(2024, 3, 10, 7, 30, 0, 200000, tzinfo=_dt.UTC)]
    table = pa.table({"id": [1, 2], "at": pa.array(at, pa.timestamp("us", "UTC"))})
    write_batch(out, table, app_id="app", version=0, partition_by=["at"], time_zone="America/New_York", delta_log=True)
    assert {p.name for p in Path(out).glob("at=*")} == {"at=2024-03-10 01%3A30%3A00", "at=2024-03-10 03%3A30%3A00.2"}
    values = pa.table(deltalake.DeltaTable(out).get_add_actions(flatten=True)).column("partition.at").to_pylist()
    assert sorted(values) == at  # the instants, not the New York wall times of the directory names
    expected = assert_delta_matches(out, time_zone="America/New_York")
    assert expected.schema.field("at").type == pa.timestamp("us", "America/New_York")
    # polars' own Delta reader (not use_pyarrow) takes partition values from the directory names, not from the
    # Delta log's partitionValues, and reads the New York wall times as UTC. If this fails, polars fixed it:
    # update docs/delta.md.
    native = pl.read_delta(out).sort("id")["at"].to_list()
    assert [v.replace(tzinfo=None) for v in native] == [_dt.datetime(2024, 3, 10, 1, 30), _dt.datetime(2024, 3, 10, 3, 30, 0, 200000)]


def test_concurrent_syncs_commit_once(out):
    import threading

    for version in range(3):
        write_batch(out, _table(version), app_id="app", version=version, partition_by=["cat"])
    results, errors = [], []

    def run() -> None:
        try:
            results.append(sync_delta_log(out))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    for _ in range(2):  # a race to create the table, then a race to append to it
        threads = [threading.Thread(target=run) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        write_batch(out, _table(9 + len(results)), app_id="app", version=9 + len(results), partition_by=["cat"])
    sync_delta_log(out)
    assert not errors
    assert sum(r.committed for r in results) == 2
    assert len(data_commits(out)) == 3
    assert_delta_matches(out)


@pytest.mark.parametrize("store", ["moto", "azurite"])
def test_on_object_stores(request, tmp_path, store):
    """On moto and Azurite (s3fs's and adlfs's options translated to delta-rs's): write_batch with delta_log, the
    Delta commits, delta-rs and polars through the translated options, verify."""
    from tests.conftest import make_backend

    backend = make_backend(store, request, tmp_path)
    url, options = backend.url, backend.storage_options
    for version in range(3):
        write_batch(url, _table(version), app_id="app", version=version, partition_by=["cat"], compact_interval=2,
                    storage_options=options, delta_log=True)
    delta_url, delta_options = Storage(url, options).object_store_location()
    assert backend.secret not in repr(sync_delta_log(url, storage_options=options))
    table = deltalake.DeltaTable(delta_url, storage_options=delta_options)
    assert table.transaction_version(APP_ID) == 2
    expected = read_committed(url, storage_options=options)
    want = sorted(expected.column("id").to_pylist())
    assert want == [v * 100 + i for v in range(3) for i in range(6)]
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == want
    # polars' own reader asks S3 for a space in a directory name percent-encoded (a polars limit, docs/delta.md)
    assert sorted(pl.read_delta(delta_url, storage_options=delta_options, use_pyarrow=True)["id"].to_list()) == want
    assert verify(url, storage_options=options).ok


def _damage(commit: Path, how: str) -> None:
    raw = commit.read_bytes()
    lines = raw.split(b"\n")
    damaged = {
        "cut mid-line": raw[: len(raw) // 2],
        "cut before the txn": b"\n".join(lines[:-2]) + b"\n",  # a line boundary: every line left is JSON
        "emptied": b"",
        "overwritten": b"\x00" * len(raw),
    }[how]
    commit.write_bytes(damaged)


@pytest.mark.parametrize(("how", "same_process"), [("cut mid-line", False), ("cut before the txn", True),
                                                   ("emptied", False), ("overwritten", True)])
def test_a_damaged_newest_delta_commit_is_named_with_its_remedy(out, how, same_process):
    """Issue 54, item 8: the newest Delta commit file truncated or overwritten (a disk, a copy, a hand edit):
    the sync reported "in step" (or a failure whose remedy, delta-sync, failed again) and every later batch went
    on, while Delta readers failed or missed its files. Now every sync names the damaged file and the remedy,
    --recreate, which followed literally gives Delta readers every committed row again."""
    for version in range(3):
        write_batch(out, _table(version, rows=2), app_id="a", version=version, delta_log=True)
    newest = sorted(Path(out, "_delta_log").glob("*.json"))[-1]
    _damage(newest, how)
    if not same_process:
        sync._STATES.clear()  # as a new process finds it: no Delta state cached
    write_batch(out, _table(3, rows=2), app_id="a", version=3)
    with pytest.raises(DeltaLogError, match=re.escape(str(newest)) + r", the commit of Delta version \d+, is damaged") as raised:
        sync_delta_log(out)
    assert f"parquet-sink delta-sync --recreate {out}" in str(raised.value)
    assert sync_delta_log(out, recreate=True).committed
    expected = sorted(read_committed(out).column("id").to_pylist())
    assert len(expected) == 8
    assert sorted(deltalake.DeltaTable(out).to_pyarrow_table().column("id").to_pylist()) == expected
    assert sorted(pl.read_delta(out)["id"].to_list()) == expected
