"""read_committed / committed_files: only committed data, Spark's columns and values, snapshots."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from parquet_sink import (
    MetadataLog,
    committed_dataset,
    committed_files,
    committed_version,
    errors,
    iter_batches,
    read_committed,
    write_batch,
)
from parquet_sink.log.metadata_log import LogEntry
from parquet_sink.read.reader import _unreadable, snapshot
from parquet_sink.storage.filesystem import Storage
from parquet_sink.write.inflight import InFlightBatch
from tests.helpers.spark_util import run_available_now, write_input_files

CATS = ["a b", "c:d", "x%y", "é/ü"]


def _spark_sorted(df) -> list[tuple]:
    cols = sorted(df.columns)
    return sorted(tuple(str(r[c]) for c in cols) for r in df.collect())


def _arrow_sorted(table: pa.Table) -> list[tuple]:
    cols = sorted(table.column_names)
    return sorted(tuple(str(r[c]) for c in cols) for r in table.to_pylist())


@pytest.fixture(scope="module")
def spark_sink_output(spark, tmp_path_factory) -> tuple[str, str]:
    """Spark's own file sink, partitioned by an escaped string and an int, compact interval 3, 8 batches."""
    base = tmp_path_factory.mktemp("spark_out")
    batches = [[{"id": b * 10 + i, "cat": CATS[(b + i) % 4], "n": (b + i) % 3} for i in range(10)] for b in range(8)]
    write_input_files(str(base / "in"), batches)
    spark.conf.set("spark.sql.streaming.fileSink.log.compactInterval", "3")
    try:
        stream = spark.readStream.schema("id long, cat string, n int").option("maxFilesPerTrigger", 1)
        run_available_now(stream.json(str(base / "in")), str(base / "ckpt"), path=str(base / "out"), partitionBy=["cat", "n"])
    finally:
        spark.conf.unset("spark.sql.streaming.fileSink.log.compactInterval")
    return str(base / "out"), str(base / "in")


def test_reads_sparks_own_sink_exactly_like_spark(spark, spark_sink_output):
    out, _ = spark_sink_output
    table = read_committed(out)
    spark_df = spark.read.parquet(out)
    assert table.num_rows == 80
    assert _arrow_sorted(table) == _spark_sorted(spark_df)
    types = {f.name: f.dataType.simpleString() for f in spark_df.schema}
    assert types == {"id": "bigint", "cat": "string", "n": "int"}
    assert table.schema.field("n").type == pa.int32() and table.schema.field("cat").type == pa.string()
    assert table.column_names[-2:] == ["cat", "n"]  # partition columns last, as Spark
    assert set(table.column("cat").to_pylist()) == set(CATS)
    assert _spark_sorted(read_committed(out, spark=spark)) == _spark_sorted(spark_df)


def test_stray_files_from_failed_batches_are_not_returned(spark_sink_output, tmp_path):
    out, _ = spark_sink_output
    copy = str(tmp_path / "copy")
    shutil.copytree(out, copy)
    stray = Path(copy, "cat=a b", "n=1", "part-00000-failed.c000.snappy.parquet")
    pq.write_table(pa.table({"id": [-1, -2]}), stray)
    plain = pq.read_table(copy)  # a plain directory read picks the stray file up...
    assert -1 in plain.column("id").to_pylist()
    committed = read_committed(copy)  # ...the committed read does not
    assert -1 not in committed.column("id").to_pylist() and committed.num_rows == 80
    assert sorted(pl.from_arrow(committed)["id"].to_list()) == sorted(committed.column("id").to_pylist())
    assert duckdb.sql("select count(*) from committed where id < 0").fetchall() == [(0,)]
    assert committed.to_pandas()["id"].min() == 0


def test_as_of_and_batches_on_sparks_log(spark_sink_output):
    out, _ = spark_sink_output
    # Spark's compact files carry no batch ids: earlier snapshots come from the older log files.
    assert read_committed(out, as_of_batch=0).num_rows == 10
    assert read_committed(out, as_of_batch=4).num_rows == 50
    assert sorted(read_committed(out, batches=(3, 4)).column("id").to_pylist()) == list(range(30, 50))
    assert sorted(read_committed(out, batches=(7, 7)).column("id").to_pylist()) == list(range(70, 80))


def _write_batch(root: str, log: MetadataLog, batch: int, rows: int) -> None:
    name = f"part-00000-b{batch}.c000.snappy.parquet"
    path = f"{root}/{name}"
    pq.write_table(pa.table({"id": list(range(batch * rows, (batch + 1) * rows)), "batch": [batch] * rows}), path)
    info = log.storage.info(path)
    assert log.add(batch, [LogEntry(log.storage.to_uri(path), info.size, modification_time=info.mtime_ms)])


def test_as_of_and_batches_before_and_after_compaction_with_cleanup(tmp_path):
    root = str(tmp_path)
    log = MetadataLog(root, compact_interval=3, min_batches_to_retain=1, cleanup_delay="0s")
    for batch in range(8):
        _write_batch(root, log, batch, 5)
        if batch == 1:
            assert read_committed(root, batches=(1, 1)).column("batch").to_pylist() == [1] * 5
    assert not (tmp_path / "_spark_metadata" / "0").exists()  # cleaned up: only compact files tell
    assert set(read_committed(root, as_of_batch=1).column("batch").to_pylist()) == {0, 1}
    assert set(read_committed(root, batches=(2, 4)).column("batch").to_pylist()) == {2, 3, 4}
    assert read_committed(root).num_rows == 40
    with pytest.raises(errors.LogError, match="as_of_batch=9"):
        read_committed(root, as_of_batch=9)


def test_lazy_dataset_with_filter_and_columns(spark_sink_output):
    out, _ = spark_sink_output
    dataset = committed_dataset(out)
    assert isinstance(dataset, ds.Dataset)
    subset = dataset.to_table(filter=(ds.field("cat") == "c:d") & (ds.field("n") == 2), columns=["id"])
    expected = read_committed(out).filter((pa.compute.field("cat") == "c:d") & (pa.compute.field("n") == 2))
    assert sorted(subset.column("id").to_pylist()) == sorted(expected.column("id").to_pylist())
    assert subset.num_rows > 0
    narrowed = read_committed(out, columns=["id", "n"], filter=ds.field("n") == 0)
    assert narrowed.column_names == ["id", "n"] and set(narrowed.column("n").to_pylist()) == {0}


def test_relocated_output_and_outside_root(tmp_path, spark_sink_output):
    out, _ = spark_sink_output
    moved = str(tmp_path / "elsewhere" / "out")
    shutil.copytree(out, moved)
    files = committed_files(moved)
    assert files and all(f.path.startswith(moved + "/") for f in files)
    assert read_committed(moved).num_rows == 80

    root = str(tmp_path / "outside")
    log = MetadataLog(root)
    foreign = tmp_path / "foreign.parquet"
    pq.write_table(pa.table({"id": [1]}), foreign)
    log.add(0, [LogEntry(f"file://{foreign}", foreign.stat().st_size, modification_time=1)])
    with pytest.raises(errors.OutsideRootError, match="batch 0.*allow_outside_root"):
        read_committed(root)
    assert read_committed(root, allow_outside_root=True).column("id").to_pylist() == [1]


def test_missing_file_zero_size_and_dirs(tmp_path):
    root = str(tmp_path)
    log = MetadataLog(root)
    _write_batch(root, log, 0, 3)
    empty = tmp_path / "part-00001-empty.parquet"
    empty.write_bytes(b"")
    log.add(1, [LogEntry(f"file://{empty}", 0), LogEntry(f"file://{tmp_path}/sub", 0, is_dir=True)])
    _write_batch(root, log, 2, 3)
    assert len(committed_files(root)) == 2  # zero-size entries and directories skipped like Spark
    Path(root, "part-00000-b2.c000.snappy.parquet").unlink()
    with pytest.raises(errors.MissingDataFileError) as info:
        read_committed(root)
    assert "batch 2" in str(info.value) and "part-00000-b2" in str(info.value)
    assert read_committed(root, ignore_missing_files=True).num_rows == 3


def test_spark_reader_takes_committed_paths_literally(spark, tmp_path):
    """A root whose name holds glob characters, next to a directory named `col:on`: the committed paths
    reached spark.read.parquet as glob patterns (MissingDataFileError naming a file that exists, or an
    untyped URISyntaxException from listing the sibling)."""
    (tmp_path / "col:on").mkdir()
    for name in ("out[1]", "out{a,b}"):
        root = str(tmp_path / name)
        write_batch(root, pa.table({"id": [1, 2], "k": ["x", "y"]}), app_id="a", version=0, partition_by=["k"])
        rows = sorted((r.id, r.k) for r in read_committed(root, spark=spark).collect())
        assert rows == [(1, "x"), (2, "y")], name


def test_a_read_failure_names_a_missing_file_only_when_one_is_missing(tmp_path):
    """A failure whose message names a committed file that exists (as Spark's did for glob characters) is
    reported as it is, not as MissingDataFileError; a file really gone is."""
    root = str(tmp_path / "out")
    write_batch(root, pa.table({"id": [1]}), app_id="a", version=0)
    snap = snapshot(root)
    failure = RuntimeError(f"[PATH_NOT_FOUND] Path does not exist: file:{snap.files[0].path}")
    assert _unreadable(snap, failure) is failure
    Path(snap.files[0].path).unlink()
    assert isinstance(_unreadable(snap, failure), errors.MissingDataFileError)


def test_not_an_output(tmp_path):
    pq.write_table(pa.table({"id": [1]}), tmp_path / "x.parquet")
    with pytest.raises(errors.NotAnOutputError, match="_spark_metadata"):
        read_committed(str(tmp_path))


def test_output_whose_first_batch_is_in_flight_has_no_committed_batch(tmp_path):
    """A writer killed before its first commit leaves its lease and files, no log. Readers polling the output
    (a chained job, a dashboard) see no committed batch, not NotAnOutputError (the chain crash test hit it when a
    random kill came before the first commit); a path with no writer's trace stays NotAnOutputError."""
    out = tmp_path / "out"
    InFlightBatch.begin(Storage(str(out)), 0, "ab12", "q", 0)
    pq.write_table(pa.table({"id": [1]}), out / "part-00000-ab12.c000.snappy.parquet")
    assert read_committed(str(out)).num_rows == 0
    assert len(committed_files(str(out))) == 0 and list(iter_batches(str(out))) == []
    assert committed_version(str(out), "a") is None
    write_batch(str(out), pa.table({"id": [2]}), app_id="a", version=0)
    assert read_committed(str(out)).column("id").to_pylist() == [2]


def test_reader_loop_during_commits_compactions_cleanups(tmp_path):
    """Readers never see a partial batch or an error while a writer commits, compacts and cleans up."""
    root, rows = str(tmp_path), 7
    log = MetadataLog(root, compact_interval=3, min_batches_to_retain=1, cleanup_delay="0s")
    _write_batch(root, log, 0, rows)
    done = threading.Event()
    seen: dict[int, list[int]] = {0: [], 1: []}
    failures: list[BaseException] = []

    def read_loop(reader: int) -> None:
        while not done.is_set():
            try:
                table = read_committed(root)
                ids = sorted(table.column("id").to_pylist())
                assert len(ids) % rows == 0 and ids == list(range(len(ids))), ids
                seen[reader].append(len(ids) // rows)
            except BaseException as exc:  # noqa: BLE001 - collected and re-raised below
                failures.append(exc)
                return

    readers = [threading.Thread(target=read_loop, args=(r,)) for r in seen]
    for r in readers:
        r.start()
    for batch in range(1, 40):
        _write_batch(root, log, batch, rows)
        time.sleep(0.005)
    done.set()
    for r in readers:
        r.join()
    assert not failures, failures[0]
    for batches_seen in seen.values():
        assert batches_seen == sorted(batches_seen), "a reader went back in time"
        assert len(set(batches_seen)) >= 2, "the reader did not read while the writer moved on"
    assert read_committed(root).num_rows == 40 * rows


def test_reader_on_every_backend(backend):
    storage = Storage(backend.url, backend.storage_options)
    log = MetadataLog(backend.url, storage=storage, compact_interval=2)
    for batch in range(3):
        path = storage.join("k=a b", f"part-00000-{batch}.c000.snappy.parquet")
        with storage.open(path, "wb") as fh:
            pq.write_table(pa.table({"id": [batch]}), fh)
        info = storage.info(path)
        assert log.add(batch, [LogEntry(storage.to_uri(path), info.size, modification_time=info.mtime_ms)])
    stray = storage.join("k=a b", "part-00009-stray.parquet")
    with storage.open(stray, "wb") as fh:
        pq.write_table(pa.table({"id": [99]}), fh)
    table = read_committed(backend.url, storage_options=backend.storage_options)
    assert sorted(table.to_pylist(), key=lambda r: r["id"]) == [{"id": b, "k": "a b"} for b in range(3)]
    assert read_committed(backend.url, storage_options=backend.storage_options, batches=(2, 2)).num_rows == 1
    raw = json.loads(storage.read_bytes(log.batch_path(2)).decode().split("\n")[1])
    assert storage.from_uri(raw["path"]) == storage.join("k=a b", "part-00000-2.c000.snappy.parquet")
