"""The `_spark_metadata` log: Spark byte-compatibility both ways, atomic add, compaction, cleanup, validation."""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import time
import uuid
from pathlib import Path

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fsspec.implementations.memory import MemoryFileSystem

from parquet_sink.log.files import INTERVAL_RECORD, parse_batch_name
from parquet_sink import errors
from parquet_sink.log.snapshot import read_snapshot
from parquet_sink.log.metadata_log import LogEntry, MetadataLog, derive_compact_interval, parse_duration_ms
from tests.helpers.spark_util import run_available_now

SPARK_KEYS = ["path", "size", "isDir", "modificationTime", "blockReplication", "blockSize", "action"]


def _entry(root: str, name: str, size: int = 10, mtime: int = 1) -> LogEntry:
    return LogEntry(f"file://{root}/{name}", size, modification_time=mtime)


# -- Spark writes, we read ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spark_output(spark, tmp_path_factory) -> str:
    """Spark's own file sink: partitioned by values needing escaping, compact interval 3, 7 batches."""
    base = tmp_path_factory.mktemp("spark_sink")
    src = base / "in"
    src.mkdir()
    cats = ["a b", "c:d", "plain", "x%y"]
    for i in range(7):
        rows = [{"id": i * 10 + j, "cat": cats[(i + j) % 4]} for j in range(10)]
        (src / f"{i:03d}.json").write_text("\n".join(json.dumps(r) for r in rows))
    spark.conf.set("spark.sql.streaming.fileSink.log.compactInterval", "3")
    try:
        stream = spark.readStream.schema("id long, cat string").option("maxFilesPerTrigger", 1).json(str(src))
        run_available_now(stream, str(base / "ckpt"), path=str(base / "out"), partitionBy=["cat"])
    finally:
        spark.conf.unset("spark.sql.streaming.fileSink.log.compactInterval")
    return str(base / "out")


def test_reads_spark_written_log_exactly(spark, spark_output):
    log = MetadataLog(spark_output)
    names = sorted(os.listdir(Path(spark_output) / "_spark_metadata"))
    assert "2.compact" in names and "5.compact" in names and "6" in names
    assert log.latest_batch_id() == 6
    assert log.compact_interval == 3
    ours = {e.path for e in log.all_files()}
    theirs = set(spark.read.parquet(spark_output).inputFiles())
    assert ours == theirs
    assert len(ours) >= 7 * 2
    assert any("cat=c%253Ad" in p for p in ours) and any("cat=a%20b" in p for p in ours)
    # Spark's deltas are attributed to their batch; its compact entries are not (it writes no batchId).
    assert all(e.batch_id == 6 for e in log.get(6))


def test_spark_log_snapshot_as_of_earlier_batch(spark_output):
    log = MetadataLog(spark_output)
    upto_3 = log.all_files(3)
    assert {e.path for e in upto_3} < {e.path for e in log.all_files()}
    assert len(log.all_files(1)) < len(upto_3)


# -- we write, Spark reads ------------------------------------------------------------------------


def test_written_layout_is_sparks(tmp_path):
    root = str(tmp_path)
    log = MetadataLog(root, compact_interval=3)
    assert log.add(0, [_entry(root, "a.parquet", 392, 1795254838176), _entry(root, "b c.parquet", 5, 7)])
    assert log.add(1, [])
    raw = (tmp_path / "_spark_metadata" / "0").read_bytes()
    assert raw.startswith(b"v1\n{") and not raw.endswith(b"\n")
    lines = raw.decode().split("\n")
    assert lines[0] == "v1" and len(lines) == 3
    # a delta file holds exactly Spark's lines: its name says the batch
    assert lines[1] == (
        '{"path":"file://' + root + '/a.parquet","size":392,"isDir":false,"modificationTime":1795254838176,'
        '"blockReplication":1,"blockSize":33554432,"action":"add"}'
    )
    for line in lines[1:]:
        assert [k for k, _ in json.loads(line, object_pairs_hook=list)] == SPARK_KEYS
    assert (tmp_path / "_spark_metadata" / "1").read_bytes() == b"v1"
    # a compact file stamps each entry with the batch that added it
    assert log.add(2, [_entry(root, "c.parquet", 9, 9)])
    compact = (tmp_path / "_spark_metadata" / "2.compact").read_bytes().decode().split("\n")
    assert [json.loads(line)["batchId"] for line in compact[1:]] == [0, 0, 2]
    for line in compact[1:]:
        keys = [k for k, _ in json.loads(line, object_pairs_hook=list)]
        assert keys[:7] == SPARK_KEYS and keys[7:] == ["batchId"]


def test_spark_reads_log_we_wrote_and_ignores_unlisted_files(spark, tmp_path):
    root = str(tmp_path)
    log = MetadataLog(root, compact_interval=2)
    for batch in range(3):
        name = f"part-{batch:05d}-x.c000.snappy.parquet"
        pq.write_table(pa.table({"id": [batch * 2, batch * 2 + 1]}), f"{root}/{name}")
        size = os.path.getsize(f"{root}/{name}")
        assert log.add(batch, [_entry(root, name, size, int(time.time() * 1000))])
    pq.write_table(pa.table({"id": [999]}), f"{root}/part-00009-stray.c000.snappy.parquet")
    assert os.listdir(tmp_path / "_spark_metadata").count("1.compact") == 1
    rows = sorted(r.id for r in spark.read.parquet(root).collect())
    assert rows == [0, 1, 2, 3, 4, 5]


# -- atomic add -----------------------------------------------------------------------------------


def _race_threads(url: str, n: int) -> list[bool]:
    log = MetadataLog(url)
    log.add(0, [])
    barrier = threading.Barrier(n)
    results: list[bool] = []

    def attempt(i: int) -> None:
        barrier.wait()
        results.append(log.add(1, [LogEntry(f"file:///w{i}.parquet", i + 1)]))

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


@pytest.mark.parametrize("trial", range(5))
def test_sixteen_threads_one_winner_local(tmp_path, trial):
    results = _race_threads(str(tmp_path), 16)
    assert results.count(True) == 1
    winner = results.index(True)
    entries = MetadataLog(str(tmp_path)).get(1)
    assert len(entries) == 1 and entries[0].size >= 1
    assert not [n for n in os.listdir(tmp_path / "_spark_metadata") if n.endswith(".tmp")]
    assert winner >= 0


@pytest.mark.parametrize("trial", range(5))
def test_sixteen_threads_one_winner_memory(trial):
    url = f"memory://race-{uuid.uuid4().hex}"
    results = _race_threads(url, 16)
    assert results.count(True) == 1
    assert len(MetadataLog(url).get(1)) == 1


def _process_add(root: str, i: int, start_at: float, queue) -> None:
    log = MetadataLog(root)
    while time.time() < start_at:
        pass
    queue.put((i, log.add(1, [LogEntry(f"file:///p{i}.parquet", i + 1)])))


def test_four_processes_one_winner_local(tmp_path):
    root = str(tmp_path)
    MetadataLog(root).add(0, [])
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    for trial in range(3):
        batch_file = tmp_path / "_spark_metadata" / "1"
        if batch_file.exists():
            batch_file.unlink()
        start_at = time.time() + 2.0
        procs = [ctx.Process(target=_process_add, args=(root, i, start_at, queue)) for i in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        results = dict(queue.get(timeout=10) for _ in procs)
        assert sorted(results.values()).count(True) == 1, results
        winner = next(i for i, ok in results.items() if ok)
        assert MetadataLog(root).get(1)[0].size == winner + 1


def test_add_never_overwrites_and_keeps_chain(tmp_path):
    log = MetadataLog(str(tmp_path))
    assert log.add(0, [_entry(str(tmp_path), "a")])
    assert not log.add(0, [_entry(str(tmp_path), "b")])
    assert [e.path.rsplit("/", 1)[1] for e in log.get(0)] == ["a"]
    with pytest.raises(errors.LogError, match="next batch must be 1"):
        log.add(5, [])


# -- compaction, retention, cleanup -----------------------------------------------------------------


def test_compaction_every_interval_holds_everything(tmp_path):
    root = str(tmp_path)
    log = MetadataLog(root, compact_interval=4, cleanup=False)
    for b in range(10):
        log.add(b, [_entry(root, f"f{b}-{k}") for k in range(3)])
    names = set(os.listdir(tmp_path / "_spark_metadata"))
    assert {"3.compact", "7.compact"} <= names and "3" not in names and "9" in names
    seven = log.get(7)
    assert [e.path.rsplit("/", 1)[1] for e in seven] == [f"f{b}-{k}" for b in range(8) for k in range(3)]
    assert [e.batch_id for e in seven] == [b for b in range(8) for _ in range(3)]
    assert len(log.all_files()) == 30


def test_interval_inference_matches_spark():
    assert derive_compact_interval(10, 9) == 10
    assert derive_compact_interval(5, 11) == 6
    assert derive_compact_interval(10, 4) == 5
    assert derive_compact_interval(4, 6) == 7
    assert derive_compact_interval(3, 29) == 3


def test_interval_inferred_from_existing_compacts(tmp_path):
    root = str(tmp_path)
    writer = MetadataLog(root, compact_interval=3, cleanup=False)
    for b in range(8):
        writer.add(b, [])
    assert MetadataLog(root, compact_interval=10).compact_interval == 3
    (tmp_path / "_spark_metadata" / "2.compact").unlink()
    assert MetadataLog(root, compact_interval=10).compact_interval == 3  # only 5.compact left: the log's record
    (tmp_path / INTERVAL_RECORD).unlink()  # a log without the record (Spark's sink, an older release)
    assert MetadataLog(root, compact_interval=10).compact_interval == 6  # Spark's rule: the divisor of 6 from 10
    assert MetadataLog(root, compact_interval=2).compact_interval == 2


def test_retention_drops_old_entries_at_compaction(tmp_path):
    root = str(tmp_path)
    log = MetadataLog(root, compact_interval=2, retention="1h", cleanup=False)
    now = int(time.time() * 1000)
    log.add(0, [_entry(root, "old", mtime=now - 2 * 3_600_000), _entry(root, "new", mtime=now)])
    log.add(1, [_entry(root, "newer", mtime=now)])
    assert [e.path.rsplit("/", 1)[1] for e in log.all_files() if not e.is_dir] == ["new", "newer"]
    # a retention marker (an entry Spark skips, like a commit record) says which batches lost entries
    assert [e.extra for e in log.all_files() if e.is_dir] == [{"expiredUpTo": 0}]
    assert parse_duration_ms("7d") == 7 * 86_400_000 and parse_duration_ms("500ms") == 500


def test_cleanup_spark_rule_delay_and_two_compacts(tmp_path):
    root = str(tmp_path)
    log = MetadataLog(root, compact_interval=3, min_batches_to_retain=2, cleanup_delay="1h")
    for b in range(12):
        log.add(b, [_entry(root, f"f{b}")])
    names = os.listdir(tmp_path / "_spark_metadata")
    # nothing older than the delay: 12 log files, and the columnar copy of each compact file
    assert sorted(n for n in names if n.endswith(".columnar")) == [f"{b}.compact.columnar" for b in (11, 2, 5, 8)]
    assert len(names) == 16
    aged = time.time() - 2 * 3600  # now older than the delay (the output's, which every writer of it applies)
    for name in names:
        os.utime(tmp_path / "_spark_metadata" / name, (aged, aged))
    assert log.add(12, [_entry(root, "f12")])
    names = os.listdir(tmp_path / "_spark_metadata")
    remaining = sorted(parse_batch_name(n) for n in names if not n.endswith(".columnar"))
    assert remaining == [(8, True), (9, False), (10, False), (11, True), (12, False)]
    assert sorted(n for n in names if n.endswith(".columnar")) == ["11.compact.columnar", "8.compact.columnar"]
    assert len(log.all_files()) == 13


def _spark_keeps(latest: int, interval: int, retain: int) -> list[int]:
    """The batch files Spark's CompactibleFileStreamLog.deleteExpiredLog leaves after batches 0..latest
    (cleanup delay 0): every file below minCompactionBatchId of the newest batch goes."""
    min_batch_id = latest + 1 - retain
    if interval > min_batch_id:
        return list(range(latest + 1))
    return list(range(min_batch_id - min_batch_id % interval - 1, latest + 1))


@pytest.mark.parametrize(("interval", "retain"), [(3, 1), (3, 2), (2, 3), (4, 4), (5, 7)])
def test_cleanup_leaves_exactly_what_spark_leaves(tmp_path, interval, retain):
    """After every batch, the log holds exactly the files Spark's rule keeps, also where that leaves a single
    compact file (retain < interval); readers still read every batch."""
    root = str(tmp_path)
    log = MetadataLog(root, compact_interval=interval, min_batches_to_retain=retain, cleanup_delay="0s")
    for b in range(13):
        log.add(b, [_entry(root, f"f{b}")])
        names = os.listdir(tmp_path / "_spark_metadata")
        kept = sorted(parsed for parsed in map(parse_batch_name, names) if parsed)
        assert kept == [(k, (k + 1) % interval == 0) for k in _spark_keeps(b, interval, retain)], b
        assert len(MetadataLog(root).all_files()) == b + 1


def test_reader_reinfers_the_interval_when_cleanup_left_one_compact_file(tmp_path):
    """With one compact file left, the interval a reader infers (Spark's deriveCompactInterval) holds for
    that listing only: a reader that reads again after the writer moved on must not reuse it."""
    root = str(tmp_path)
    writer = MetadataLog(root, compact_interval=3, min_batches_to_retain=1, cleanup_delay="0s")
    reader = MetadataLog(root, cleanup=False)
    for b in range(8):
        writer.add(b, [_entry(root, f"f{b}")])
    assert sorted(os.listdir(tmp_path / "_spark_metadata"))[:3] == ["5.compact", "5.compact.columnar", "6"]
    assert read_snapshot(reader).table.num_rows == 8  # one compact file: interval 6 fits this listing
    for b in (8, 9):
        writer.add(b, [_entry(root, f"f{b}")])
    assert read_snapshot(reader).table.num_rows == 10  # 8.compact, 9: interval 9 now, 6 would need 5.compact


def test_compaction_of_large_log_streams(tmp_path):
    root = str(tmp_path)
    log = MetadataLog(root, compact_interval=2, cleanup=False)
    log.add(0, [_entry(root, f"bulk-{i}", i + 1) for i in range(200_000)])
    log.add(1, [_entry(root, "last")])
    files = log.all_files()
    assert len(files) == 200_001 and files[-1].path.endswith("/last") and files[123].size == 124
    raw = (tmp_path / "_spark_metadata" / "1.compact").read_bytes()
    assert raw.count(b"\n") == 200_001 and not raw.endswith(b"\n")


# -- validation ---------------------------------------------------------------------------------------

GOOD = b'{"path":"file:///o/a.parquet","size":1,"isDir":false,"modificationTime":1,"blockReplication":1,"blockSize":1,"action":"add"}'
CORRUPT = {
    "empty": (b"", errors.CorruptLogError, "empty"),
    "bad_header": (b"x1\n" + GOOD, errors.CorruptLogError, "header"),
    "v_not_int": (b"vX\n" + GOOD, errors.CorruptLogError, "header"),
    "v2": (b"v2\n" + GOOD, errors.UnsupportedLogVersionError, "v2"),
    "v0": (b"v0\n" + GOOD, errors.CorruptLogError, "malformed"),  # Spark: versions start at 1
    "truncated": (b"v1\n" + GOOD[:40], errors.CorruptLogError, "line 2"),
    "bad_json": (b"v1\n{not json}", errors.CorruptLogError, "line 2"),
    "not_object": (b"v1\n[1,2]", errors.CorruptLogError, "not a JSON object"),
    "missing_key": (b'v1\n{"path":"file:///o/a","size":1,"isDir":false}', errors.CorruptLogError, "modificationTime"),
    "wrong_type": (GOOD.replace(b'"size":1', b'"size":"1"').join([b"v1\n", b""]), errors.CorruptLogError, "size"),
    "non_utf8": (b"v1\n" + GOOD.replace(b"a.parquet", b"\xff\xfe.parquet"), errors.CorruptLogError, "line 2"),
    "blank_line": (b"v1\n\n" + GOOD, errors.CorruptLogError, "line 2"),
}


@pytest.mark.parametrize("kind", sorted(CORRUPT))
def test_corrupt_log_files_raise_typed_errors(tmp_path, kind):
    content, error, needle = CORRUPT[kind]
    log_dir = tmp_path / "_spark_metadata"
    log_dir.mkdir()
    (log_dir / "0").write_bytes(b"v1\n" + GOOD)
    (log_dir / "1").write_bytes(content)
    log = MetadataLog(str(tmp_path))
    with pytest.raises(error) as info:
        log.all_files()
    assert isinstance(info.value, errors.ParquetSinkError)
    assert str(log_dir / "1") in str(info.value) and "batch 1" in str(info.value) and needle in str(info.value)
    assert [type(p) for p in log.check()] == [error]
    assert log.all_files(0)[0].path == "file:///o/a.parquet"  # the good batch before it still reads


def test_gap_and_missing_compact_are_typed(tmp_path):
    root = str(tmp_path)
    log = MetadataLog(root, compact_interval=3, cleanup=False)
    for b in range(8):
        log.add(b, [_entry(root, f"f{b}")])
    (tmp_path / "_spark_metadata" / "6").unlink()
    with pytest.raises(errors.MissingLogFileError, match=r"batch 6\)"):
        MetadataLog(root, compact_interval=3).all_files()
    (tmp_path / "_spark_metadata" / "5.compact").unlink()
    (tmp_path / "_spark_metadata" / "6").write_bytes(b"v1")
    (tmp_path / "_spark_metadata" / "5").write_bytes(b"v1")  # a plain file where a compact file belongs, and
    (tmp_path / "_spark_metadata" / "4").unlink()  # no chain as written either (from 2.compact: 4 is missing)
    with pytest.raises(errors.MissingLogFileError, match=r"5\.compact"):
        MetadataLog(root, compact_interval=3).all_files()


def test_temp_and_crc_files_are_ignored(tmp_path):
    root = str(tmp_path)
    log = MetadataLog(root)
    log.add(0, [_entry(root, "a")])
    (tmp_path / "_spark_metadata" / ".1.abc.tmp").write_bytes(b"v1\n{partial")
    (tmp_path / "_spark_metadata" / ".0.crc").write_bytes(b"junk")
    assert log.latest_batch_id() == 0 and len(log.all_files()) == 1


class _OverwritingMemory(MemoryFileSystem):
    """A store that ignores the exclusive-create condition (like a plain overwrite PUT)."""

    protocol = "laxmemory"

    def pipe_file(self, path, value, mode="overwrite", **kwargs):
        return super().pipe_file(path, value, mode="overwrite", **kwargs)


def test_store_ignoring_exclusive_create_is_refused():
    fsspec.register_implementation("laxmemory", _OverwritingMemory, clobber=True)
    log = MetadataLog(f"laxmemory://out-{uuid.uuid4().hex}")
    with pytest.raises(errors.UnsafeStorageError, match="does not honour exclusive create"):
        log.add(0, [])
    assert log.latest_batch_id() is None


def test_wrong_credentials_give_a_typed_error(request, tmp_path):
    from tests.conftest import make_backend

    backend = make_backend("azurite", request, tmp_path)  # Azurite checks the shared-key signature
    bogus = "bm90LXRoZS1rZXktbm90LXRoZS1rZXktbm90LXRoZS1rZXk="
    wrong = dict(backend.storage_options)
    wrong["connection_string"] = wrong["connection_string"].replace(backend.secret, bogus)
    with pytest.raises(errors.StorageError) as info:
        MetadataLog(backend.url, storage_options=wrong).add(0, [])
    message = str(info.value)
    assert backend.url.split("//")[1].split("/")[0] in message and "credentials" in message
    assert bogus not in message and backend.secret not in message


@pytest.mark.parametrize("backend_name", ["azurite", "moto"])
def test_concurrent_add_one_winner_on_object_stores(request, tmp_path, backend_name):
    from tests.conftest import make_backend

    backend = make_backend(backend_name, request, tmp_path)
    log = MetadataLog(backend.url, storage_options=backend.storage_options)
    log.add(0, [])
    for batch in (1, 2):
        barrier = threading.Barrier(8)
        results: list[bool] = []

        def attempt(i: int, batch: int = batch) -> None:
            mine = MetadataLog(backend.url, storage_options=backend.storage_options)
            barrier.wait()
            results.append(mine.add(batch, [LogEntry(f"s3a://x/w{i}.parquet", i + 1)]))

        threads = [threading.Thread(target=attempt, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results.count(True) == 1, results
        assert len(log.get(batch)) == 1
    assert log.latest_batch_id() == 2
