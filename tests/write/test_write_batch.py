"""write_batch (exactly-once appends from plain Python), the chain read helpers and the CLI's app view:
Delta's txnAppId/txnVersion rule, the sink's file layout, one commit record format with the sink, and
optimistic concurrency between real processes."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pandas as pd
import polars as pl
import psutil
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.errors import StreamingQueryException

from parquet_sink import (
    MetadataLog,
    ParquetSink,
    committed_version,
    errors,
    iter_batches,
    read_committed,
    write_batch,
)
from parquet_sink.errors import original_error
from parquet_sink.read.chain import decide_write
from parquet_sink.cli.main import main as cli_main
from parquet_sink.write.inflight import HIDDEN_DIR, LEASES
from parquet_sink.write.sink import decide_batch
from parquet_sink.log.entry import CommitRecord, attribute
from tests.helpers.chain_child import writer_rows
from tests.helpers.crash_util import (
    assert_ok,
    assert_same_ids,
    committed_paths,
    parquet_on_disk,
    start_child,
    vacuum,
)
from tests.helpers.spark_util import run_available_now, write_input_files

CHAIN_CHILD = Path(__file__).resolve().parents[1] / "helpers" / "chain_child.py"
NAME = re.compile(r"part-00000-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.c\d{3}\.snappy\.parquet")


def _records(out: str) -> list[CommitRecord]:
    """Every commit record of the log, in log order (read from the log files themselves)."""
    records = (CommitRecord.from_entry(e) for e in MetadataLog(out).all_files())
    return sorted((r for r in records if r is not None), key=lambda r: r.log_batch_id)


def test_write_batch_layout_matches_the_sink_and_spark_reads_it(spark, tmp_path):
    out = str(tmp_path / "out")
    table = pa.table(
        {"id": pa.array(range(6), pa.int64()), "cat": ["a b", "c:d", "x/y", None, "", "plain"], "v": [0.5] * 6}
    )
    result = write_batch(out, table, app_id="job", version=0, partition_by=["cat"], max_records_per_file=1)

    assert result.committed and result.log_batch_id == 0 and result.rows == 6 and len(result.files) == 6
    assert result.bytes == sum(os.path.getsize(f) for f in result.files)
    relative = sorted(os.path.relpath(f, out) for f in result.files)
    directories = sorted(os.path.dirname(r) for r in relative)
    # Spark's escaping: ':' and '/' escaped, ' ' kept, null and "" both the default partition.
    assert directories == sorted(
        ["cat=a b", "cat=c%3Ad", "cat=x%2Fy", "cat=__HIVE_DEFAULT_PARTITION__", "cat=__HIVE_DEFAULT_PARTITION__", "cat=plain"]
    )
    assert all(NAME.fullmatch(os.path.basename(r)) for r in relative), relative
    assert [(r.query_id, r.query_batch_id) for r in _records(out)] == [("job", 0)]

    expected = sorted((i, c if c else None) for i, c in zip(range(6), table.column("cat").to_pylist()))
    ours = read_committed(out)
    assert sorted(zip(ours.column("id").to_pylist(), ours.column("cat").to_pylist())) == expected
    theirs = spark.read.parquet(out).collect()
    assert sorted((r.id, r.cat) for r in theirs) == expected


def test_stale_retry_is_skipped_and_writes_nothing(tmp_path):
    out = str(tmp_path / "out")
    assert write_batch(out, pa.table({"id": [1, 2]}), app_id="job", version=3).committed
    files_before, log_before = parquet_on_disk(out), MetadataLog(out).latest_batch_id()

    retry = write_batch(out, pa.table({"id": [1, 2]}), app_id="job", version=3)  # the same data: a retry
    assert not retry.committed and retry.committed_version == 3 and retry.log_batch_id == 0
    for stale in (3, 2, 0):  # other data under a committed or passed version: refused, or skipped on request
        with pytest.raises(errors.StaleVersionError, match=rf"app 'job' wrote version {stale} to .*, but its newest committed version is 3"):
            write_batch(out, pa.table({"id": [100 + stale]}), app_id="job", version=stale)
        result = write_batch(out, pa.table({"id": [100 + stale]}), app_id="job", version=stale, ignore_changed_data=True)
        assert not result.committed and result.committed_version == 3 and result.log_batch_id == 0
        assert result.files == [] and result.rows == 0

    assert parquet_on_disk(out) == files_before, "a skipped write must not write files"
    assert MetadataLog(out).latest_batch_id() == log_before
    assert sorted(read_committed(out).column("id").to_pylist()) == [1, 2]
    # Another app's versions are its own: version 0 of app "other" commits.
    assert write_batch(out, pa.table({"id": [7]}), app_id="other", version=0).log_batch_id == 1
    assert committed_version(out, "job") == 3 and committed_version(out, "other") == 0
    assert committed_version(out, "nobody") is None
    assert committed_version(str(tmp_path / "no-output-yet"), "job") is None


def test_pandas_polars_and_record_batches(tmp_path):
    out = str(tmp_path / "out")
    stamps = pd.to_datetime(["2024-01-01 10:00:00.123456", "2024-01-02 00:00:00.000000"])
    write_batch(out, pd.DataFrame({"id": [1, 2], "ts": stamps}), app_id="pd", version=0)
    write_batch(out, pl.DataFrame({"id": [3], "ts": [stamps[0].to_pydatetime()]}), app_id="pl", version=0)
    batch = pa.record_batch({"id": pa.array([4], pa.int64()), "ts": pa.array([stamps[1].value // 1000], pa.timestamp("us"))})
    write_batch(out, [batch], app_id="rb", version=0)
    table = read_committed(out)
    assert sorted(table.column("id").to_pylist()) == [1, 2, 3, 4]
    assert table.schema.field("ts").type == pa.timestamp("us")  # Spark's precision, not pandas' ns
    by_id = dict(zip(table.column("id").to_pylist(), table.column("ts").to_pylist()))
    assert by_id[1] == by_id[3] == stamps[0].to_pydatetime()

    with pytest.raises(errors.SchemaMismatchError, match="nanoseconds"):
        write_batch(out, pd.DataFrame({"id": [5], "ts": pd.to_datetime(["2024-01-01 00:00:00.000000001"])}),
                    app_id="pd", version=1)
    for bad in (42, None, {"id": [5]}, [], pd.DataFrame({"id": [5, "x"]}), pl.LazyFrame({"id": [5]})):
        with pytest.raises(errors.ParameterError, match=r"write_batch, version 1 of app 'pd': cannot write a .*pyarrow Table"):
            write_batch(out, bad, app_id="pd", version=1)
    for names in (["id", "id"], ["id", "ID"]):
        with pytest.raises(errors.SchemaMismatchError, match="more than once"):
            write_batch(out, pa.Table.from_arrays([pa.array([5]), pa.array([6])], names=names), app_id="pd", version=1)
    for version in (2**63, int("20261127014517755000"), -1):
        with pytest.raises(errors.ParameterError, match="version must be an integer from 0 to 2"):
            write_batch(out, pa.table({"id": [5]}), app_id="pd", version=version)
    assert sorted(read_committed(out).column("id").to_pylist()) == [1, 2, 3, 4]  # nothing of those committed


def test_a_pandas_index_with_a_name_is_a_column(tmp_path):
    """A ``groupby`` result's keys are its index: kept as columns (as ``DataFrame.to_parquet`` keeps them; they
    were silently dropped), a MultiIndex's named levels too; positions (an unnamed index) are not data."""
    out = str(tmp_path / "out")
    orders = pd.DataFrame({"region": ["eu", "us", "eu"], "kind": ["a", "a", "b"], "amount": [1, 2, 3]})
    write_batch(out, orders.groupby("region")[["amount"]].sum(), app_id="job", version=0)
    write_batch(out, orders.groupby(["region", "kind"])[["amount"]].sum(), app_id="job", version=1)
    write_batch(out, orders[orders.amount > 1][["region", "amount", "kind"]], app_id="job", version=2)  # index 1, 2: positions
    table = read_committed(out)
    assert table.column_names == ["region", "amount", "kind"]
    rows = sorted(zip(*(table.column(c).to_pylist() for c in table.column_names)), key=repr)
    assert rows == sorted([("eu", 4, None), ("us", 2, None), ("eu", 1, "a"), ("us", 2, "a"), ("eu", 3, "b"),
                           ("us", 2, "a"), ("eu", 3, "b")], key=repr)


def test_schema_mismatch_refused_before_anything_is_written(tmp_path):
    out = str(tmp_path / "out")
    write_batch(out, pa.table({"id": [1], "day": ["a"]}), app_id="job", version=0, partition_by=["day"])
    files = parquet_on_disk(out)
    with pytest.raises(errors.SchemaMismatchError, match="changed type") as info:
        write_batch(out, pa.table({"id": ["x"], "day": ["a"]}), app_id="job", version=1, partition_by=["day"])
    assert "version 1 of app 'job'" in str(info.value) and out in str(info.value)
    with pytest.raises(errors.SchemaMismatchError, match="partition columns"):
        write_batch(out, pa.table({"id": [2], "day": ["a"]}), app_id="job", version=1)
    with pytest.raises(errors.SchemaMismatchError, match="not in the data"):
        write_batch(out, pa.table({"id": [2]}), app_id="job", version=1, partition_by=["day"])
    assert parquet_on_disk(out) == files and MetadataLog(out).latest_batch_id() == 0
    # A new nullable column is allowed (as in the sink); an empty batch commits the version alone.
    write_batch(out, pa.table({"id": [2], "extra": ["e"], "day": ["b"]}), app_id="job", version=1, partition_by=["day"])
    empty = write_batch(out, pa.table({"id": pa.array([], pa.int64())}), app_id="job", version=2)
    assert empty.committed and empty.files == [] and committed_version(out, "job") == 2
    with pytest.raises(ValueError, match="app_id"):
        write_batch(out, pa.table({"id": [1]}), app_id="", version=0)
    with pytest.raises(ValueError, match="version"):
        write_batch(out, pa.table({"id": [1]}), app_id="job", version=-1)


def test_iter_batches_reads_each_committed_batch_after_a_given_id(tmp_path):
    src = str(tmp_path / "src")
    for b in range(4):
        write_batch(src, pa.table({"id": pa.array([b * 10 + i for i in range(b + 1)], pa.int64())}), app_id="up", version=b)
    write_batch(src, pa.table({"id": pa.array([], pa.int64())}), app_id="up", version=4)  # no data
    seen = [(b, sorted(t.column("id").to_pylist()) if t.num_rows else []) for b, t in iter_batches(src)]
    assert seen == [(0, [0]), (1, [10, 11]), (2, [20, 21, 22]), (3, [30, 31, 32, 33]), (4, [])]
    assert [b for b, _ in iter_batches(src, after=2)] == [3, 4]
    assert list(iter_batches(src, after=4)) == []
    with pytest.raises(errors.NotAnOutputError):
        list(iter_batches(str(tmp_path / "missing")))


def test_a_chain_downstream_of_an_optimized_source_gets_every_row_once(tmp_path):
    """iter_batches yields an optimize's swap (and its empty batches) empty: its files hold rows earlier batches
    delivered. Before, the swap's batch yielded every rewritten row again, and the chain appended them twice."""
    from parquet_sink.maintenance import optimize

    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")

    def produce(versions):
        for v in versions:
            write_batch(src, pa.table({"id": pa.array([v * 10, v * 10 + 1], pa.int64())}), app_id="p", version=v)

    def consume():
        for batch_id, table in iter_batches(src, after=committed_version(dst, "c")):
            write_batch(dst, table, app_id="c", version=batch_id)

    produce(range(5))
    consume()
    assert optimize(src).log_batch_id == 9  # empty batches 5..8, the swap at 9
    produce(range(5, 7))
    consume()
    assert sorted(read_committed(dst).column("id").to_pylist()) == sorted(read_committed(src).column("id").to_pylist())
    assert [(b, t.num_rows, t.column_names) for b, t in iter_batches(src, after=7, columns=["id"])] == [
        (8, 0, ["id"]), (9, 0, ["id"]), (10, 2, ["id"]), (11, 2, ["id"])
    ]


def test_chain_loop_is_idempotent(tmp_path):
    """The README loop run twice: the second run finds nothing new and writes nothing."""
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    for b in range(3):
        write_batch(src, pa.table({"id": pa.array(range(b * 5, b * 5 + 5), pa.int64())}), app_id="up", version=b)

    def run(after: int | None) -> list[bool]:
        return [
            write_batch(out, t.append_column("sq", pa.compute.multiply(t["id"], t["id"])), app_id="down", version=b).committed
            for b, t in iter_batches(src, after=after)
        ]

    assert run(committed_version(out, "down")) == [True] * 3
    assert run(committed_version(out, "down")) == []
    # A rerun from scratch (the job lost its state) is skipped version by version, never appended: the same
    # data as committed (the fingerprints match).
    assert run(None) == [False] * 3
    assert sorted(read_committed(out).column("id").to_pylist()) == list(range(15))


def test_sink_and_write_batch_share_one_record_format(spark, tmp_path):
    """A streaming query's commits read as (app_id, version) pairs; a Python app's commits on an output are
    a foreign writer to a sink: refused unless on_foreign_query='append'."""
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    write_input_files(src, [[{"id": b * 10 + i} for i in range(3)] for b in range(2)])
    stream = spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).json(src)
    query = run_available_now(stream, str(tmp_path / "ckpt"), ParquetSink(out))
    assert committed_version(out, str(query.id)) == 1

    write_batch(out, pa.table({"id": pa.array([1000], pa.int64())}), app_id="py-app", version=0)
    assert [(r.query_id, r.query_batch_id) for r in _records(out)][-1] == ("py-app", 0)

    src2 = str(tmp_path / "in2")
    write_input_files(src2, [[{"id": 2000}]])
    stream2 = spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).json(src2)
    with pytest.raises(StreamingQueryException, match="ForeignQueryError"):
        run_available_now(stream2, str(tmp_path / "ckpt2"), ParquetSink(out))
    run_available_now(stream2, str(tmp_path / "ckpt3"), ParquetSink(out, on_foreign_query="append"))
    expected = [0, 1, 2, 10, 11, 12, 1000, 2000]
    assert sorted(read_committed(out).column("id").to_pylist()) == expected
    assert sorted(r.id for r in spark.read.parquet(out).collect()) == expected

    # An output an app wrote first: the refusal names the app as what it is, not as "a new checkpoint"
    app_first = str(tmp_path / "app-first")
    write_batch(app_first, pa.table({"id": pa.array([7], pa.int64())}), app_id="py-app", version=0)
    with pytest.raises(StreamingQueryException) as refused:
        run_available_now(stream2, str(tmp_path / "ckpt4"), ParquetSink(app_first))
    message = str(original_error(refused.value))
    assert "up to 0 were committed by write_batch's app 'py-app'. This query's first batch meets an output" in message
    assert read_committed(app_first).column("id").to_pylist() == [7]
    from parquet_sink import doctor

    plan = doctor(app_first, checkpoint=str(tmp_path / "ckpt4")).plan  # doctor names it alike
    assert plan.action == "foreign" and "taken by write_batch's app 'py-app'" in plan.message

    # The pure rules: a sink query meeting a Python app's commits, and a Python app meeting a query's.
    app = {"py-app": CommitRecord(2, "py-app", 0, "c")}
    assert decide_batch(2, app, "q", 0) == ("foreign", None)
    assert decide_batch(2, app, "q", 0, append=True) == ("commit", 3)
    assert decide_write(2, {"q": CommitRecord(2, "q", 2, "c")}, "py-app", 0) == ("commit", 3)


def _wait_stopped(pid: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while psutil.Process(pid).status() != psutil.STATUS_STOPPED:
        assert time.monotonic() < deadline, "the writer never reached its failpoint"
        time.sleep(0.01)


def _writer(tmp_path: Path, out: str, app_id: str, app_index: int, versions: list[int], failpoints=None, **extra):
    config = {"mode": "writer", "out": out, "app_id": app_id, "app_index": app_index, "versions": versions, "rows": 50}
    return start_child(tmp_path / "children", {**config, **extra}, script=CHAIN_CHILD, failpoints=failpoints)


@pytest.mark.parametrize("same_app", [False, True], ids=["other-app-wins", "same-app-wins"])
def test_lost_commit_race_retries_as_the_next_batch_or_skips(tmp_path, same_app):
    """A writer stopped between writing its files and committing them; meanwhile another writer commits
    log batch 0. Resumed, it loses the exclusive create, re-reads the log and commits its files as batch 1
    (another app won) or stops, skipped (the same app and version won): nothing lost, nothing doubled."""
    out = str(tmp_path / "out")
    child = _writer(tmp_path, out, "a", 1, [0], failpoints="before_commit=stop")
    _wait_stopped(child.proc.pid)
    winner_app, winner_index = ("a", 1) if same_app else ("b", 2)
    assert write_batch(out, writer_rows(winner_index, 0, 50), app_id=winner_app, version=0).log_batch_id == 0
    os.kill(child.proc.pid, signal.SIGCONT)
    child.wait()
    assert_ok(child)
    result = child.progress()[-1]
    assert result["conflicts"] == 1
    a_ids = writer_rows(1, 0, 50).column("id").to_pylist()
    if same_app:
        assert not result["committed"] and result["committed_version"] == 0 and result["log_batch_id"] == 0
        expected = a_ids
        assert len(parquet_on_disk(out)) == 2, "the loser's files stay on disk, uncommitted"
    else:
        assert result["committed"] and result["log_batch_id"] == 1
        expected = a_ids + writer_rows(2, 0, 50).column("id").to_pylist()
        assert {r.query_id: r.log_batch_id for r in _records(out)} == {"b": 0, "a": 1}
        # The retry committed the files it had written (no rewrite): every file on disk is committed.
        assert committed_paths(out) == parquet_on_disk(out) == {os.path.normpath(f) for f in result["files"]} | committed_paths(out)
    assert_same_ids(read_committed(out).column("id").to_pylist(), expected, "after the race")


def test_files_deleted_before_the_commit_are_never_committed(tmp_path):
    """Files of a write_batch deleted between the write and the commit (a vacuum with a short --older-than, a
    manual clean-up): the writer raises MissingDataFileError and commits nothing, so the log never points at
    missing data; a rerun writes the version again."""
    out = str(tmp_path / "out")
    child = _writer(tmp_path, out, "a", 1, [0], failpoints="before_commit=stop")
    _wait_stopped(child.proc.pid)
    written = parquet_on_disk(out)
    assert written, "the writer wrote its files before stopping"
    for path in written:
        os.unlink(path)
    os.kill(child.proc.pid, signal.SIGCONT)
    assert child.wait() == 3
    error = child.result()["error"]
    assert "MissingDataFileError" in error and "vanished before its commit" in error
    assert not os.path.exists(os.path.join(out, "_spark_metadata", "0")), "nothing may be committed"
    assert write_batch(out, writer_rows(1, 0, 50), app_id="a", version=0).committed
    assert_same_ids(read_committed(out).column("id").to_pylist(), writer_rows(1, 0, 50).column("id").to_pylist(), "rerun")


def test_vacuum_between_the_presence_check_and_the_commit_keeps_the_files(tmp_path, monkeypatch):
    """A vacuum with --older-than 0s between write_batch's check that its files are there and its commit:
    the call's lease keeps them. Without one, vacuum deleted them and the call still committed
    (committed=True, then MissingDataFileError on every read)."""
    out = str(tmp_path / "out")
    write_batch(out, pa.table({"id": [0]}), app_id="a", version=0)
    reports = []
    real_add = MetadataLog.add

    def add(self, batch_id, entries):
        reports.append(vacuum(out))
        return real_add(self, batch_id, entries)

    monkeypatch.setattr(MetadataLog, "add", add)
    result = write_batch(out, pa.table({"id": [1, 2]}), app_id="a", version=1)
    assert result.committed and reports[0]["files"] == [] and reports[0]["in_flight_kept"] == len(result.files) == 1
    assert sorted(read_committed(out).column("id").to_pylist()) == [0, 1, 2]
    assert not list((Path(out) / HIDDEN_DIR / LEASES).iterdir()), "the lease ends with the call"


def test_write_batch_lease_outlives_a_lost_commit_race(tmp_path):
    """write_batch stopped between writing and committing; another app commits the log batch it aimed at,
    then a vacuum runs: the stopped call's files stay (its lease lives until its app commits its version, not
    until another writer takes its first target batch), and resumed it commits them as the next batch."""
    out = str(tmp_path / "out")
    child = _writer(tmp_path, out, "a", 1, [0], failpoints="before_commit=stop")
    _wait_stopped(child.proc.pid)
    written = parquet_on_disk(out)
    assert write_batch(out, writer_rows(2, 0, 50), app_id="b", version=0).log_batch_id == 0
    report = vacuum(out)
    assert report["files"] == [] and report["in_flight_kept"] == len(written) > 0 and report["dead_leases"] == []
    os.kill(child.proc.pid, signal.SIGCONT)
    child.wait()
    assert_ok(child)
    assert child.progress()[-1]["log_batch_id"] == 1
    expected = writer_rows(1, 0, 50).column("id").to_pylist() + writer_rows(2, 0, 50).column("id").to_pylist()
    assert_same_ids(read_committed(out).column("id").to_pylist(), expected, "after the race and the vacuum")
    assert vacuum(out)["files"] == [] and not list((Path(out) / HIDDEN_DIR / LEASES).iterdir())


@pytest.mark.parametrize("backend_name", ["local", "moto"])
def test_two_apps_appending_concurrently_lose_and_double_nothing(request, tmp_path, backend_name):
    from tests.conftest import make_backend

    backend = make_backend(backend_name, request, tmp_path)
    go = tmp_path / "go"
    versions = list(range(12))
    children = [
        _writer(tmp_path, backend.url, app, index, versions, go=str(go), storage_options=backend.storage_options)
        for app, index in (("a", 1), ("b", 2))
    ]
    for child in children:
        while not child.started_path.exists():
            time.sleep(0.01)
    go.touch()
    for child in children:
        child.wait()
        assert_ok(child)
    expected = [i for index in (1, 2) for v in versions for i in writer_rows(index, v, 50).column("id").to_pylist()]
    got = read_committed(backend.url, storage_options=backend.storage_options).column("id").to_pylist()
    assert_same_ids(got, expected, f"two apps on {backend_name}")
    log = MetadataLog(backend.url, storage_options=backend.storage_options)
    kept = [r for r in (CommitRecord.from_entry(e) for e in log.all_files()) if r is not None]
    assert log.latest_batch_id() == 23, "24 writes, 24 log batches"
    # Compaction keeps the first and last record of each run; the others are inferred inside the runs.
    records = [r for _, r in sorted(attribute(kept, range(24)).items())]
    assert [r.log_batch_id for r in records] == list(range(24)), "one commit record per log batch, no gap"
    for app in ("a", "b"):
        assert [r.query_batch_id for r in records if r.query_id == app] == versions, f"app {app}: each version once"
    results = [line for child in children for line in child.progress()]
    assert all(r["committed"] for r in results) and len(results) == 24
    print("lost races:", sum(r["conflicts"] for r in results))


def test_cli_ls_and_doctor_show_apps(tmp_path, capsys):
    out = str(tmp_path / "out")
    write_batch(out, pa.table({"id": [1]}), app_id="daily-job", version=7)
    write_batch(out, pa.table({"id": [2]}), app_id="other", version=0)

    assert cli_main(["ls", out, "--json"]) == 0
    batches = json.loads(capsys.readouterr().out)["batches"]
    assert [(b["query_id"], b["query_batch"]) for b in batches] == [("daily-job", 7), ("other", 0)]
    assert cli_main(["ls", out]) == 0
    text = capsys.readouterr().out
    assert "query / app" in text and re.search(r"daily-job\s+7", text)

    assert cli_main(["doctor", out, "--app-id", "daily-job", "--version", "7", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["action"], plan["log_batch"], plan["committed_version"]) == ("skip", 0, 7)
    assert cli_main(["doctor", out, "--app-id", "daily-job", "--version", "8"]) == 0
    assert "commits it as log batch 2" in capsys.readouterr().out
    assert cli_main(["doctor", out, "--app-id", "new", "--version", "0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["action"] == "commit"
    assert cli_main(["doctor", out, "--app-id", "daily-job"]) == 2
    assert cli_main(["doctor", out]) == 2


def test_example_chain_runs(tmp_path, capsys):
    from examples.chain import main as example

    example(["--workdir", str(tmp_path)])
    printed = capsys.readouterr().out
    assert "first run committed source batches [0, 1, 2]" in printed
    assert "second run committed source batches []" in printed
    assert "every order counted once: 500 orders over 5 source batches" in printed


def test_an_apps_identity_has_one_rule_in_write_batch_and_doctor(tmp_path):
    """doctor answered for versions write_batch refuses (-1, beyond a Spark long) and for an empty app id; numpy's
    integers (a version taken from a pandas column) are integers to both."""
    import numpy as np

    from parquet_sink import doctor

    out = str(tmp_path / "out")
    assert write_batch(out, pa.table({"id": [1]}), app_id="job", version=np.int64(3)).committed
    assert doctor(out, app_id="job", version=np.int64(3)).plan.action == "skip"
    for app_id, version in (("job", -1), ("job", 2**63), ("", 4), ("job", 4.0), ("job", True)):
        for call in (lambda: write_batch(out, pa.table({"id": [2]}), app_id=app_id, version=version),
                     lambda: doctor(out, app_id=app_id, version=version)):
            with pytest.raises(errors.ParameterError, match="app_id must be|version must be"):
                call()
    assert read_committed(out).column("id").to_pylist() == [1]


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 2)), min_size=1, max_size=8),
    st.sampled_from(["a", "b"]),
    st.integers(0, 6),
)
def test_doctor_says_ok_exactly_when_write_batch_goes_through(tmp_path_factory, steps, app, version):
    """Two apps writing versions with gaps (an app may skip versions: a chained job whose source skipped some): for
    each (app, version) rerun, doctor's plan is safe (exit 0) exactly when write_batch with the data it committed
    then goes through, and says skip exactly when that writes nothing. Before, doctor called a rerun of a version
    the app went past without committing safe ("writes nothing"): write_batch refuses it with StaleVersionError."""
    from parquet_sink import doctor

    out = str(tmp_path_factory.mktemp("gaps") / "out")
    newest: dict[str, int] = {}
    for name, gap in steps:
        newest[name] = newest.get(name, -1) + 1 + gap
        write_batch(out, pa.table({"v": [newest[name]], "app": [name]}), app_id=name, version=newest[name])
    plan = doctor(out, app_id=app, version=version).plan
    before = read_committed(out).sort_by("v").to_pylist()
    try:
        committed = write_batch(out, pa.table({"v": [version], "app": [app]}), app_id=app, version=version).committed
    except errors.StaleVersionError:
        assert not plan.ok and "StaleVersionError" in plan.message and plan.warnings
        assert read_committed(out).sort_by("v").to_pylist() == before
        return
    assert plan.ok and plan.action == ("commit" if committed else "skip")
    rows = read_committed(out).to_pylist()
    assert rows.count({"v": version, "app": app}) == 1 and len(rows) == len(before) + committed


def test_inputs_that_once_did_something_else_silently_are_refused(tmp_path):
    """``iter_batches(after=5)`` on a source whose newest batch is 2 (reset or replaced) yielded nothing, as if
    caught up; ``compact_interval=0`` was read as "infer"; a target size ParquetSink took unchecked until an optimize;
    partition columns equal but for case (one column to Spark). Sizes read as Spark's settings do ("128m")."""
    from parquet_sink import ParquetSink, iter_batches
    from parquet_sink.maintenance.optimize import parse_file_size

    out = str(tmp_path / "out")
    for version in range(3):
        write_batch(out, pa.table({"x": [version]}), app_id="a", version=version)
    with pytest.raises(errors.OutputResetError, match=r"after=5\): the source's newest committed batch is 2"):
        list(iter_batches(out, after=5))
    assert list(iter_batches(out, after=2)) == []
    with pytest.raises(errors.ParameterError, match="compact_interval must be a positive integer, got 0"):
        read_committed(out, compact_interval=0)
    with pytest.raises(errors.ParameterError, match="target_file_size='abc' is not a size"):
        ParquetSink(out, target_file_size="abc")
    with pytest.raises(errors.ParameterError, match="case-insensitively"):
        ParquetSink(out, partition_by=["day", "Day"])
    assert [parse_file_size(s) for s in ("128m", "64k", "1g", "1TB", "2TiB")] == [2**27, 2**16, 2**30, 10**12, 2**41]
    from parquet_sink import history

    assert history(out, limit=10**30).num_rows == 3  # a limit beyond a C long once raised OverflowError


def test_a_partition_column_named_in_another_case_gets_its_name_suggested(tmp_path):
    with pytest.raises(errors.SchemaMismatchError, match="Did you mean 'p' for 'P'"):
        write_batch(str(tmp_path / "out"), pa.table({"id": [1], "p": ["a"]}), app_id="a", version=0, partition_by=["P"])
