"""history(), read_committed(as_of_time=...) and snapshots out of range, from the log alone (no Spark: the
commit records come from write_batch, which writes them as the sink does; Spark's reader ignoring the new keys
is proven by every Spark interop test, whose outputs now carry them)."""

from __future__ import annotations

import contextlib
import datetime as dt
import subprocess
import unittest.mock
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parquet_sink import MetadataLog, committed_files, history, read_committed, write_batch
from parquet_sink.errors import NotAnOutputError, SnapshotNotFoundError

UTC = dt.timezone.utc


def _now() -> dt.datetime:
    return dt.datetime.now(UTC)


def _write_versions(out: str, sizes: list[int], **options) -> list[tuple[dt.datetime, dt.datetime]]:
    """One write_batch version per size (rows 0..size-1 tagged with the version); returns each commit's
    (before, after) wall-clock window."""
    windows = []
    for version, size in enumerate(sizes):
        before = _now()
        write_batch(out, pa.table({"v": pa.array([version] * size, pa.int64())}), app_id="app", version=version, **options)
        windows.append((before, _now()))
        time.sleep(0.002)  # distinct commit times
    return windows


def test_history_has_one_row_per_batch_that_survives_compaction_and_a_copy(tmp_path):
    out = str(tmp_path / "out")
    sizes = [3, 0, 5, 1, 2, 7, 0, 4, 6, 2, 9]  # empty batches inside compacted runs too
    windows = _write_versions(out, sizes, compact_interval=3)
    copy = tmp_path / "copy"
    time.sleep(0.05)
    subprocess.run(["cp", "-r", out, str(copy)], check=True)  # no -p: every file gets the copy's time
    for path in (out, str(copy)):
        table = history(path)
        assert table.column("log_batch_id").to_pylist() == list(range(len(sizes) - 1, -1, -1))
        rows = table.to_pylist()[::-1]
        assert [r["rows"] for r in rows] == sizes
        assert [(r["query_id"], r["query_batch_id"]) for r in rows] == [("app", v) for v in range(len(sizes))]
        files = committed_files(path)
        for r, (before, after) in zip(rows, windows):
            mine = [f for f in files if f.batch_id == r["log_batch_id"]]
            assert r["files"] == len(mine) and r["bytes"] == sum(f.size for f in mine)
            assert before - dt.timedelta(milliseconds=1) <= r["commit_time"] <= after, r
    assert history(out, limit=2).column("log_batch_id").to_pylist() == [10, 9]
    assert history(out, limit=0).num_rows == 0


def test_as_of_time_reads_the_snapshot_of_the_last_batch_committed_by_then(tmp_path):
    out = str(tmp_path / "out")
    sizes = [2, 3, 0, 4, 1, 5]
    windows = _write_versions(out, sizes, compact_interval=4)
    for version, (_, after) in enumerate(windows):
        table = read_committed(out, as_of_time=after)
        assert sorted(table.column("v").to_pylist()) == sorted(v for v in range(version + 1) for _ in range(sizes[v]))
    with pytest.raises(SnapshotNotFoundError, match="before the first commit"):
        read_committed(out, as_of_time=windows[0][0] - dt.timedelta(seconds=1))
    with pytest.raises(ValueError, match="time zone"):
        read_committed(out, as_of_time=dt.datetime.now())
    with pytest.raises(ValueError, match="not both"):
        read_committed(out, as_of_time=windows[0][1], as_of_batch=0)


def test_snapshots_past_the_latest_batch_are_a_typed_error_naming_it(tmp_path):
    out = str(tmp_path / "out")
    _write_versions(out, [1, 2, 3, 4])
    for options in ({"as_of_batch": 99}, {"batches": (5, 9)}, {"batches": (2, 9)}):
        with pytest.raises(SnapshotNotFoundError, match="latest committed batch is 3"):
            read_committed(out, **options)
    assert read_committed(out, batches=(2, 3)).num_rows == 7
    with pytest.raises(NotAnOutputError):
        history(str(tmp_path / "typo"))


@contextlib.contextmanager
def _clock_off(seconds: float):
    """This process's clock runs ``seconds`` off while the block runs (``time.time`` shifted)."""
    real = time.time
    time.time = lambda: real() + seconds
    try:
        yield
    finally:
        time.time = real


def test_writer_an_hour_behind_never_records_a_commit_before_an_earlier_one(tmp_path):
    """Writer a (this process) commits log batch 0; writer b, a process whose clock is an hour behind, commits
    batch 1; a commits batch 2. Commit times increase (b's is at least a's batch 0's), so as_of_time half an hour
    before batch 0 finds no snapshot, and history is in time order. Before, b recorded its own clock: history
    went back an hour, and as_of_time(batch 0 - 30 min) answered the snapshot of batch 1, holding batch 0's
    rows, committed after the time asked for."""
    from tests.helpers.chain_child import writer_rows
    from tests.helpers.crash_util import assert_ok, run_child

    out = str(tmp_path / "out")
    before = _now()
    write_batch(out, writer_rows(1, 0, 1), app_id="a", version=0)
    config = {"mode": "writer", "out": out, "app_id": "b", "app_index": 2, "versions": [0], "rows": 1,
              "clock_offset_s": -3600}
    script = Path(__file__).resolve().parents[1] / "helpers" / "chain_child.py"
    child = run_child(tmp_path / "children", config, script=script)
    assert_ok(child)
    write_batch(out, writer_rows(1, 1, 1), app_id="a", version=1)
    rows = history(out).to_pylist()[::-1]
    assert [r["query_id"] for r in rows] == ["a", "b", "a"]
    times = [r["commit_time"] for r in rows]
    assert times[0] >= before - dt.timedelta(milliseconds=1) and times[0] < times[1] < times[2], times
    with pytest.raises(SnapshotNotFoundError, match="before the first commit"):
        read_committed(out, as_of_time=before - dt.timedelta(minutes=30))
    assert read_committed(out, as_of_time=times[0]).column("app").to_pylist() == [1]
    assert read_committed(out, as_of_time=times[1]).num_rows == 2
    assert [r["commit_time"] for r in history(out).to_pylist()[::-1]] == times


def test_history_reads_times_an_older_writer_recorded_out_of_order_as_increasing(tmp_path):
    """A log whose recorded commit times go back (written before times were monotonic: a writer an hour behind)
    reads as Delta reads file times that go back: each at least the previous + 1 ms, and as_of_time follows."""
    out = str(tmp_path / "out")
    for version, offset in enumerate([0, -3600, 0]):
        with _clock_off(offset), unittest.mock.patch("parquet_sink.write.appends.next_commit_time", _raw_clock):
            write_batch(out, pa.table({"v": [version]}), app_id="old", version=version)
    raw = [r.extra["commitTime"] for r in MetadataLog(out).all_files() if r.is_dir and "commitTime" in r.extra]
    assert raw[1] < raw[0] < raw[2], "the log holds times that go back"
    times = [int(r["commit_time"].timestamp() * 1000) for r in history(out).to_pylist()[::-1]]
    assert times == [raw[0], raw[0] + 1, raw[2]]
    with pytest.raises(SnapshotNotFoundError, match="before the first commit"):
        read_committed(out, as_of_time=dt.datetime.fromtimestamp((raw[0] - 1) / 1000, UTC))


def _raw_clock(newest_ms, now_ms=None):
    """The commit time rule before monotonic times: the writer's clock alone."""
    return int(time.time() * 1000)


def _spark_line(root: Path, name: str, size: int) -> str:
    return (
        f'{{"path":"file://{root}/{name}","size":{size},"isDir":false,"modificationTime":1700000000000,'
        '"blockReplication":1,"blockSize":33554432,"action":"add"}'
    )


def test_history_of_a_log_spark_wrote_is_null_where_it_cannot_tell(tmp_path):
    root = tmp_path / "out"
    meta = root / "_spark_metadata"
    meta.mkdir(parents=True)
    (meta / "1.compact").write_text("v1\n" + "\n".join(_spark_line(root, f"c{k}.parquet", 10) for k in range(3)))
    (meta / "2").write_text("v1\n" + _spark_line(root, "d.parquet", 7))
    rows = history(str(root)).to_pylist()[::-1]
    assert [r["log_batch_id"] for r in rows] == [0, 1, 2]
    assert [(r["files"], r["bytes"]) for r in rows] == [(None, None), (None, None), (1, 7)]
    assert all(r["commit_time"] is None and r["rows"] is None and r["query_id"] is None for r in rows)
    with pytest.raises(SnapshotNotFoundError, match="does not record when batch 2"):
        read_committed(str(root), as_of_time=_now())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    plan=st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 4), st.sampled_from([0, 0, -3600, 3600, -1, 0.5])),
        min_size=1,
        max_size=14,
    ),
    interval=st.integers(1, 5),
)
def test_history_matches_what_each_write_committed(tmp_path_factory, plan, interval):
    """A model: two apps append random batches (empty ones too), each write on a clock off by a drawn number
    of seconds (an hour either way: writers on machines whose clocks disagree); history says, batch by batch,
    who wrote it, which version, how many rows and files, whatever compaction kept of the commit records, and
    its commit times only increase."""
    out = str(tmp_path_factory.mktemp("h") / "out")
    versions = {"a": 0, "b": 0}
    expected = []
    for app, size, offset in plan:
        with _clock_off(offset):
            write_batch(out, pa.table({"x": pa.array(range(size), pa.int64())}), app_id=app, version=versions[app],
                        compact_interval=interval)
        expected.append((app, versions[app], size))
        versions[app] += 1
    rows = history(out).to_pylist()[::-1]
    assert [(r["query_id"], r["query_batch_id"], r["rows"]) for r in rows] == expected
    files = committed_files(out).table
    for r in rows:
        assert r["files"] == pc.sum(pc.equal(files.column("batch_id"), r["log_batch_id"])).as_py() or (
            r["files"] == 0 and r["rows"] == 0
        )
    times = [r["commit_time"] for r in rows]
    assert None not in times and all(a < b for a, b in zip(times, times[1:])), times


@pytest.mark.parametrize("commit_ms", [1_074_950_084_465, 2_186_764_535_607, 1_795_772_465_092])
def test_as_of_time_exactly_at_a_commit_reads_that_commit(tmp_path, commit_ms):
    """``as_of_time`` equal to a batch's commit time (as `history` shows it) reads that batch, at every millisecond:
    the time asked for went through a float (``timestamp() * 1000``, truncated), which for about one millisecond
    in 170 of the years 2000-2100 (2004-01-24T13:14:44.465Z, 2039-04-18T...) fell 1 ms short, so the snapshot
    answered was the one before (or none: SnapshotNotFoundError)."""
    out = str(tmp_path / "out")
    with unittest.mock.patch.object(time, "time", lambda: (commit_ms + 0.5) / 1000):  # a clock stopped then
        write_batch(out, pa.table({"v": [1]}), app_id="a", version=0)
    (committed,) = history(out).column("commit_time").to_pylist()
    assert committed == dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=commit_ms)
    assert read_committed(out, as_of_time=committed).column("v").to_pylist() == [1]
    with pytest.raises(SnapshotNotFoundError, match="before the first commit"):
        read_committed(out, as_of_time=committed - dt.timedelta(microseconds=1))
