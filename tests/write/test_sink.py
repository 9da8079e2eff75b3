"""ParquetSink with real streaming queries: exactly-once output that Spark and read_committed agree on."""

from __future__ import annotations

import os
import pickle
import re
import shutil
import uuid
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from parquet_sink import MetadataLog, ParquetSink, committed_files, errors, read_committed, write_batch
from parquet_sink.write.conflicts import Transaction
from parquet_sink.storage.filesystem import Storage
from parquet_sink.write.sink import CommitRecord, decide_batch
from tests.helpers.spark_util import run_available_now, write_input_files

SCHEMA = "id long, cat string, v double"
CATS = ["a b", "c:d", "plain", None]


def _batches(n: int, per: int, offset: int = 0) -> list[list[dict]]:
    return [
        [{"id": offset + b * per + i, "cat": CATS[(b + i) % 4], "v": (b * per + i) / 2} for i in range(per)]
        for b in range(n)
    ]


def _rows(table: pa.Table) -> list[tuple]:
    cols = sorted(table.column_names)
    return sorted(
        (tuple(r[c] for c in cols) for r in table.to_pylist()), key=lambda t: tuple((x is None, str(x)) for x in t)
    )


def _spark_rows(df) -> list[tuple]:
    cols = sorted(df.columns)
    return sorted(
        (tuple(r[c] for c in cols) for r in df.collect()), key=lambda t: tuple((x is None, str(x)) for x in t)
    )


def _forget_commit(checkpoint: str, batch: int) -> None:
    """Make Spark's checkpoint look as if the driver died after the sink committed ``batch``."""
    for name in (str(batch), f".{batch}.crc"):
        Path(checkpoint, "commits", name).unlink(missing_ok=True)


def _stream(spark, src: str, schema: str = SCHEMA):
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(src)


@pytest.mark.parametrize("writer", ["spark", "arrow"])
def test_partitioned_stream_spark_and_reader_agree(spark, tmp_path, writer):
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    write_input_files(src, _batches(7, 20))
    sink = ParquetSink(out, partition_by=["cat"], compact_interval=3, writer=writer)
    run_available_now(_stream(spark, src), str(tmp_path / "ckpt"), sink)

    log = MetadataLog(out)
    assert log.latest_batch_id() == 6
    # compact files with their columnar copies, which Spark's reader below must ignore
    assert {"2.compact", "2.compact.columnar", "5.compact", "5.compact.columnar", "6"} <= set(
        os.listdir(Path(out) / "_spark_metadata")
    )
    # A stray file of a failed attempt inside a partition directory must be invisible to both readers.
    stray_dir = Path(out) / "cat=plain"
    pq.write_table(pa.table({"id": [10**9], "v": [0.0]}), stray_dir / "part-00099-stray.c000.snappy.parquet")

    table = read_committed(out)
    ids = table.column("id").to_pylist()
    assert sorted(ids) == list(range(140))
    spark_df = spark.read.parquet(out)
    assert _spark_rows(spark_df) == _rows(table)
    assert dict(zip(spark_df.schema.names, [f.dataType.simpleString() for f in spark_df.schema])) == {
        "id": "bigint",
        "v": "double",
        "cat": "string",
    }
    assert set(spark_df.inputFiles()) == {log.storage.to_uri(f.path) for f in committed_files(out)}
    assert Counter(table.column("cat").to_pylist())[None] == 35
    assert any(Path(out, "cat=c%3Ad").iterdir()) and Path(out, "cat=__HIVE_DEFAULT_PARTITION__").is_dir()
    progress = sink.last_progress
    assert progress.batch_id == 6 and progress.rows == 20 and progress.files == 4 and progress.bytes > 0
    assert not progress.skipped and progress.write_seconds > 0
    # the Spark writer path reports its publishing (renames + fsync) as part of the write
    assert (progress.publish_seconds > 0) is (writer == "spark") and progress.publish_seconds < progress.write_seconds


def test_sink_on_every_backend(spark, tmp_path, backend):
    """The same query on local disk, Azurite (adlfs) and moto (s3fs): executors write through fsspec."""
    src = str(tmp_path / "in")
    write_input_files(src, _batches(4, 15))
    sink = ParquetSink(backend.url, partition_by=["cat"], compact_interval=2, storage_options=backend.storage_options)
    run_available_now(_stream(spark, src), str(tmp_path / "ckpt"), sink)

    table = read_committed(backend.url, storage_options=backend.storage_options)
    assert sorted(table.column("id").to_pylist()) == list(range(60))
    log = MetadataLog(backend.url, storage_options=backend.storage_options)
    assert log.latest_batch_id() == 3
    listing = log.list_names()
    assert sorted(listing.sidecars) == [1, 3]  # columnar copies of the compact files, read back below
    assert log.read_sidecar(listing.sidecars[3], listing[3], 3).table().equals(log.read_table(listing[3], 3))
    paths = [e.path for e in log.all_files() if not e.is_dir]
    scheme = {"local": "file:///", "azurite": "abfss://", "moto": "s3a://"}[backend.name]
    assert paths and all(p.startswith(scheme) for p in paths)
    if backend.name == "azurite":
        assert all("@devstoreaccount1.dfs.core.windows.net/out/cat=" in p for p in paths)
    if backend.secret:
        raw = b"".join(log.storage.read_bytes(i.path) for i in log.storage.ls(log.log_dir))
        assert backend.secret.encode() not in raw
        assert backend.secret not in repr(sink) and backend.secret not in repr(log.storage)


def test_replayed_batch_is_skipped(spark, tmp_path, caplog):
    src, out, ckpt = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    write_input_files(src, _batches(3, 10))
    run_available_now(_stream(spark, src), ckpt, ParquetSink(out))
    log_files_before = sorted(os.listdir(Path(out) / "_spark_metadata"))
    # Crash after the sink committed batch 2 but before Spark recorded it: Spark re-runs batch 2.
    _forget_commit(ckpt, 2)
    sink = ParquetSink(out)
    with caplog.at_level("INFO", logger="parquet_sink.write.sink"):
        run_available_now(_stream(spark, src), ckpt, sink)
    assert sink.last_progress.skipped and sink.last_progress.batch_id == 2
    assert "skipping batch 2" in caplog.text
    assert sorted(os.listdir(Path(out) / "_spark_metadata")) == log_files_before
    assert sorted(read_committed(out).column("id").to_pylist()) == list(range(30))
    assert sorted(r.id for r in spark.read.parquet(out).collect()) == list(range(30))


def test_a_running_sink_continues_after_other_writers_cleanup_deleted_log_files_it_had_not_read(spark, tmp_path):
    """The output model's shape: a sink object (a running query) commits, other writers then commit past its view
    and their cleanup (min_batches_to_retain=1, cleanup_delay="0s", recorded with the output) deletes log files of
    batches it never read. Its next batch failed with MissingLogFileError ("the log has a gap"); it reads the log
    from the compact file that holds them, as a new sink object does, and commits once."""
    out, checkpoint = str(tmp_path / "out"), tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "metadata").write_text('{"id": "q"}')
    sink = ParquetSink(out, compact_interval=2, min_batches_to_retain=1, cleanup_delay="0s",
                       checkpoint_location=str(checkpoint))
    sink(spark.createDataFrame([(0,)], "id long"), 0)
    for version in range(4):  # log batches 1..4: cleanup after 4 deletes every log file below 3.compact
        write_batch(out, pa.table({"id": [version + 1]}), app_id="a", version=version)
    assert 1 not in MetadataLog(out).list_names()
    sink(spark.createDataFrame([(5,)], "id long"), 1)
    assert sink.last_progress.log_batch_id == 5 and not sink.last_progress.skipped
    sink(spark.createDataFrame([(5,)], "id long"), 1)  # a replay: still told apart
    assert sink.last_progress.skipped
    assert sorted(read_committed(out).column("id").to_pylist()) == [0, 1, 2, 3, 4, 5]


def test_fresh_checkpoint_on_old_output_is_refused_then_appends(spark, tmp_path):
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    write_input_files(src, _batches(2, 10))
    run_available_now(_stream(spark, src), str(tmp_path / "ckpt1"), ParquetSink(out))
    first_query = CommitRecord.from_entry(MetadataLog(out).get(1)[0]).query_id

    src2 = str(tmp_path / "in2")
    write_input_files(src2, _batches(3, 10, offset=1000))
    with pytest.raises(StreamingQueryException) as info:
        run_available_now(_stream(spark, src2), str(tmp_path / "ckpt2"), ParquetSink(out))
    message = str(info.value)
    assert "ForeignQueryError" in message and first_query in message and "on_foreign_query='append'" in message
    assert MetadataLog(out).latest_batch_id() == 1

    appender = ParquetSink(out, on_foreign_query="append")
    run_available_now(_stream(spark, src2), str(tmp_path / "ckpt3"), appender)
    log = MetadataLog(out)
    assert log.latest_batch_id() == 4
    record = CommitRecord.from_entry(log.get(4)[0])
    assert record.query_batch_id == 2 and record.query_id != first_query
    # Restart of the appending query replays its last batch: still idempotent.
    _forget_commit(str(tmp_path / "ckpt3"), 2)
    run_available_now(_stream(spark, src2), str(tmp_path / "ckpt3"), ParquetSink(out, on_foreign_query="append"))
    assert MetadataLog(out).latest_batch_id() == 4
    expected = list(range(20)) + list(range(1000, 1030))
    assert sorted(read_committed(out).column("id").to_pylist()) == expected
    assert sorted(r.id for r in spark.read.parquet(out).collect()) == expected


def test_stateful_update_mode_counts_and_sums(spark, tmp_path):
    """The seeds' count/sum per id in update mode: each batch emits the updated groups."""
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    batches = [[{"id": (b * 3 + i) % 5, "cat": "x", "v": float(i)} for i in range(6)] for b in range(5)]
    write_input_files(src, batches)
    agg = _stream(spark, src).groupBy("id").agg({"*": "count", "v": "sum"}).withColumnRenamed("count(1)", "n")
    agg = agg.withColumnRenamed("sum(v)", "total")
    run_available_now(agg, str(tmp_path / "ckpt"), ParquetSink(out), outputMode="update")

    table = read_committed(out)
    assert table.num_rows == sum(len({r["id"] for r in rows}) for rows in batches)
    final = {}
    for batch in range(5):
        for row in read_committed(out, batches=(batch, batch)).to_pylist():
            final[row["id"]] = (row["n"], row["total"])
    expected_n = Counter(r["id"] for rows in batches for r in rows)
    expected_total = Counter()
    for rows in batches:
        for r in rows:
            expected_total[r["id"]] += r["v"]
    assert final == {k: (expected_n[k], expected_total[k]) for k in expected_n}
    assert _spark_rows(spark.read.parquet(out)) == _rows(table)


def test_empty_batches_commit_valid_entries(spark, tmp_path):
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    write_input_files(src, _batches(4, 5))
    stream = _stream(spark, src).where("id < 5 or id >= 15")  # batches 1 and 2 become empty
    sink = ParquetSink(out)
    run_available_now(stream, str(tmp_path / "ckpt"), sink)
    log = MetadataLog(out)
    assert log.latest_batch_id() == 3
    for batch in (1, 2):
        entries = log.get(batch)
        assert len(entries) == 1 and entries[0].is_dir and CommitRecord.from_entry(entries[0]).query_batch_id == batch
        assert committed_files(out, batches=(batch, batch)) == []
    expected = list(range(5)) + list(range(15, 20))
    assert sorted(read_committed(out).column("id").to_pylist()) == expected
    assert sorted(r.id for r in spark.read.parquet(out).collect()) == expected


def test_schema_change_refused_before_commit_and_evolution_allowed(spark, tmp_path):
    out = str(tmp_path / "out")
    sink = ParquetSink(out)
    sink(spark.createDataFrame([(1, "a")], "id long, name string"), 0)
    with pytest.raises(errors.SchemaMismatchError, match=r"column 'id' changed type from int64 to string"):
        sink(spark.createDataFrame([("x", "b")], "id string, name string"), 1)
    with pytest.raises(errors.SchemaMismatchError, match=r"column 'name' \(string\) is missing"):
        sink(spark.createDataFrame([(2,)], "id long"), 1)
    assert MetadataLog(out).latest_batch_id() == 0
    sink(spark.createDataFrame([(2, "b", 2.5)], "id long, name string, extra double"), 1)
    fresh = ParquetSink(out)  # a restarted driver reads the committed schema back from the files
    with pytest.raises(errors.SchemaMismatchError, match="extra"):
        fresh(spark.createDataFrame([(3, "c", "s")], "id long, name string, extra string"), 2)
    table = read_committed(out)
    assert sorted(table.to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "name": "a", "extra": None},
        {"id": 2, "name": "b", "extra": 2.5},
    ]
    merged = spark.read.option("mergeSchema", "true").parquet(out)
    assert sorted((r.id, r.extra) for r in merged.collect()) == [(1, None), (2, 2.5)]


@pytest.mark.parametrize("writer", ["spark", "arrow"])
def test_max_records_per_file_and_codec(spark, tmp_path, writer):
    out = str(tmp_path / "out")
    sink = ParquetSink(out, max_records_per_file=300, compression="zstd", writer=writer)
    sink(spark.range(1000).coalesce(1), 0)
    files = committed_files(out)
    names = sorted(Path(f.path).name for f in files)
    # each file a counter (Spark's sink's names also give each file a uuid of its own: sorted by counter)
    assert sorted(re.search(r"[.-](c\d{3})\.", n).group(1) for n in names) == ["c000", "c001", "c002", "c003"]
    assert all(n.endswith(".zstd.parquet") for n in names)
    assert sorted(pq.ParquetFile(f.path).metadata.num_rows for f in files) == [100, 300, 300, 300]
    assert sorted(read_committed(out).column("id").to_pylist()) == list(range(1000))


def test_sink_is_picklable_and_keeps_settings(spark, tmp_path):
    out = str(tmp_path / "out")
    sink = ParquetSink(out, partition_by=["k"], compact_interval=5, storage_options={"auto_mkdir": True})
    sink(spark.createDataFrame([(1, "a")], "id long, k string"), 0)
    clone = pickle.loads(pickle.dumps(sink))
    assert (clone.path, clone.partition_by, clone.compact_interval) == (out, ("k",), 5)
    clone(spark.createDataFrame([(2, "b")], "id long, k string"), 1)
    assert sorted(read_committed(out).column("id").to_pylist()) == [1, 2]


def test_two_writers_one_batch_loser_without_query_id_gets_conflict(spark, tmp_path):
    """A writer without a query id (batch-id-only) that loses a commit race cannot tell whether the winner
    replayed its batch: CommitConflictError, nothing committed (with a query id it moves to the next batch)."""
    out = str(tmp_path / "out")
    a, b = ParquetSink(out), ParquetSink(out)
    a(spark.createDataFrame([(1,)], "id long"), 0)
    b._refresh_state()  # b knows the log at batch 0
    a(spark.createDataFrame([(2,)], "id long"), 1)
    b._state.latest = 0  # b has not seen a's batch 1 yet: its commit of batch 1 must lose
    b._state.queries.clear()
    target = b._target_batch(b._state, None, 1)
    with pytest.raises(errors.CommitConflictError, match="without a query id"):
        b._commit(CommitRecord.new(target, None, 1), Transaction(None, 1, None, ()), [], [], 0)
    assert sorted(read_committed(out).column("id").to_pylist()) == [1, 2]


def test_relocated_output_still_reads(spark, tmp_path):
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    write_input_files(src, _batches(2, 10))
    run_available_now(_stream(spark, src), str(tmp_path / "ckpt"), ParquetSink(out, partition_by=["cat"]))
    moved = str(tmp_path / "moved")
    shutil.move(out, moved)
    assert sorted(read_committed(moved).column("id").to_pylist()) == list(range(20))
    assert all(f.path.startswith(moved + "/") for f in committed_files(moved))


def test_decide_batch_rules():
    record = CommitRecord(4, "q1", 4, "c")
    assert decide_batch(-1, {}, "q1", 0) == ("commit", 0)
    assert decide_batch(4, {"q1": record}, "q1", 5) == ("commit", 5)
    assert decide_batch(4, {"q1": record}, "q1", 3) == ("skip", 4)
    assert decide_batch(4, {"q1": record}, "q2", 0) == ("foreign", None)
    assert decide_batch(4, {"q1": record}, "q2", 5) == ("foreign", None)  # continuing the ids is not enough
    assert decide_batch(4, {"q1": record}, "q2", 0, append=True) == ("commit", 5)
    assert decide_batch(4, {}, "q1", 5) == ("commit", 5)  # a log written by Spark's own sink
    assert decide_batch(4, {"q1": record}, "q1", 7) == ("reset", None)
    assert decide_batch(6, {"q1": record}, "q1", 5) == ("commit", 7)  # other writers appended 5 and 6
    assert decide_batch(6, {"q1": record}, "q1", 6) == ("reset", None)  # its batch 5 is missing


def test_timestamp_and_date_columns_round_trip(spark, tmp_path):
    out = str(tmp_path / "out")
    df = spark.sql(
        "select id, timestamp'2026-11-21 10:00:00' + make_interval(0, 0, 0, 0, id) as ts, "
        "date'2026-11-21' as day from range(3)"
    )
    sink = ParquetSink(out)
    sink(df, 0)
    sink(df.withColumn("id", df.id + 3), 1)
    ours = sorted((r["id"], r["ts"].replace(tzinfo=None), r["day"]) for r in read_committed(out).to_pylist())
    theirs = sorted((r.id, r.ts, r.day) for r in spark.read.parquet(out).collect())
    assert ours == theirs and len(ours) == 6
    assert ours[1][1].hour == 11


@pytest.mark.parametrize("writer", ["spark", "arrow"])
def test_restarted_sink_accepts_its_own_timestamp_files(spark, tmp_path, writer):
    """A restarted driver reads the committed schema back from the files: timestamps written by either
    writer path (Spark's writer stores INT96 by default) must compare equal to the batch's timestamps."""
    out = str(tmp_path / "out")
    df = spark.sql("select id, timestamp'2026-11-21 10:00:00' + make_interval(0, 0, 0, 0, id) as ts from range(3)")
    ParquetSink(out, writer=writer)(df, 0)
    ParquetSink(out, writer=writer)(df.withColumn("id", df.id + 3), 1)
    assert sorted(read_committed(out).column("id").to_pylist()) == list(range(6))


def test_writer_option_picks_the_path_per_store(spark, tmp_path, moto_server):
    """``writer="auto"`` takes Spark's writer on local disk (staging) and the Arrow path on S3 (its footers say so),
    without asking whether the session's Hadoop filesystem reaches the bucket. ``"spark"`` there needs it: this
    session has no S3A, so the first batch fails with the reason and the remedy, before anything is written or
    committed. Unknown values are refused in the constructor."""
    with pytest.raises(ValueError, match="writer must be 'auto', 'spark' or 'arrow'"):
        ParquetSink(str(tmp_path / "out"), writer="jvm")
    bucket = f"w{uuid.uuid4().hex[:12]}"
    moto_server.make_bucket(bucket)
    options = moto_server.storage_options
    df = spark.range(5)

    def writers(url: str, **kw) -> set[str]:
        return {pq.ParquetFile(Storage(url, kw.get("storage_options")).open(f.path)).metadata.created_by.split()[0]
                for f in committed_files(url, **kw)}

    local = str(tmp_path / "out")
    ParquetSink(local)(df, 0)
    assert writers(local) == {"parquet-mr"}
    s3 = ParquetSink(f"s3://{bucket}/auto", storage_options=options)
    s3(df, 0)
    assert writers(f"s3://{bucket}/auto", storage_options=options) == {"parquet-cpp-arrow"}
    assert s3._in_place == {}
    refused = ParquetSink(f"s3://{bucket}/spark", writer="spark", storage_options=options)
    with pytest.raises(errors.SinkUsageError, match=rf"s3://{bucket}/spark.*log batch 0.*Hadoop filesystem.*Nothing was written.*writer='auto' or 'arrow'"):
        refused(df, 0)
    left = Storage(f"s3://{bucket}/spark", options).find(f"{bucket}/spark")
    assert [i.path for i in left if not i.path.endswith((".started", "compact_interval"))] == []
    assert read_committed(f"s3://{bucket}/spark", storage_options=options).num_rows == 0


@pytest.mark.parametrize("writer", ["spark", "arrow"])
def test_partition_column_starting_with_underscore_keeps_every_row(spark, tmp_path, writer):
    """``_k=a/`` is a partition directory, not a hidden one (Spark's rule: a name with ``=``): both writer
    paths publish and commit its files, both readers see every row, staging is left empty."""
    out = tmp_path / "out"
    df = spark.createDataFrame([(i, "ab"[i % 2]) for i in range(10)], "id long, _k string")
    ParquetSink(str(out), partition_by=["_k"], writer=writer)(df, 0)
    paths = [f.relative_path for f in committed_files(str(out))]
    assert paths and all(p.startswith(("_k=a/", "_k=b/")) for p in paths), paths
    table = read_committed(str(out))
    assert sorted(zip(table.column("id").to_pylist(), table.column("_k").to_pylist())) == [
        (i, "ab"[i % 2]) for i in range(10)
    ]
    assert sorted((r.id, r._k) for r in spark.read.parquet(str(out)).collect()) == [(i, "ab"[i % 2]) for i in range(10)]
    assert not list((out / "_exactly_once").rglob("*.parquet"))


def test_spark_writer_counts_each_batch_from_the_accepted_attempts(spark, tmp_path):
    """Spark writer path on classic PySpark: each batch is written as Spark's file sink writes it (its manifest
    commit protocol, in one py4j call to the JAR's ``SinkFileWrite``): the rows come from the job's write statistics
    and the files from the accepted attempts' commit messages, for different sizes, schemas and partitionings; no
    ``_temporary`` directory is made."""
    from parquet_sink.write import spark_staging
    from parquet_sink.write.inflight import InFlightBatch
    from parquet_sink.storage.filesystem import Storage

    storage = Storage(str(tmp_path / "out"))
    frames = [
        (spark.createDataFrame([(i, "ab"[i % 2]) for i in range(10)], "id long, k string"), ("k",)),
        (spark.range(7).selectExpr("id", "id * 0.5 AS x"), ()),
        (spark.range(0).selectExpr("id"), ()),
    ]
    counted = []
    for n, (df, partition_by) in enumerate(frames):
        batch = InFlightBatch.begin(storage, n, f"c{n}", None, n)
        staged = spark_staging.write_staged(
            df, batch, partition_by=partition_by, compression="snappy", max_records_per_file=None
        )
        on_disk = sorted(str(p.relative_to(batch.staging)) for p in Path(batch.staging).rglob("*.parquet"))
        assert staged.files == on_disk and not list(Path(batch.staging).rglob("_temporary"))
        assert {os.path.dirname(f) for f in staged.files} == ({"k=a", "k=b"} if partition_by else {""})
        counted.append(staged.rows)
        assert sum(pq.read_metadata(Path(batch.staging) / f).num_rows for f in staged.files) == staged.rows
    assert counted == [10, 7, 0]
    assert spark_staging._rows_counted(spark.range(3)) is spark_staging._rows_counted(spark.range(4))


@pytest.mark.parametrize(
    ("names", "plain"),
    [(["id", "s_1", "_x"], True), (["a.b"], False), (["a b"], False), (["c`d"], False), (["a", "A"], False), (["1x"], False)],
)
def test_arrow_path_renames_columns_only_when_mapinarrow_cannot_resolve_them(spark, tmp_path, names, plain):
    """Arrow path: only names mapInArrow would not resolve as themselves (a dot, a backtick, a space, case-only
    duplicates, ...) go through positional names; the files hold the real names and the rows either way."""
    from parquet_sink.write.parquet_files import _plain_names

    assert _plain_names(names) is plain
    if len({n.lower() for n in names}) < len(names):
        return  # Spark's writers refuse case-only duplicates in a file; the rule above is all there is to check
    out = tmp_path / "out"
    df = spark.range(3).select(*(F.col("id").alias(n) for n in names))
    ParquetSink(str(out), writer="arrow")(df, 0)
    table = read_committed(str(out))
    assert table.column_names == names
    assert all(sorted(table.column(n).to_pylist()) == [0, 1, 2] for n in names)


def test_arrow_path_batches_are_bounded_by_rows_unless_the_user_bounds_their_bytes(spark, tmp_path):
    """Spark 4 sizes an Arrow batch to Python after every row to close it at maxBytesPerBatch (64 MiB by default):
    the Arrow path's job runs with batches bounded by maxRecordsPerBatch rows alone and leaves the session as it
    found it (also when the block fails); a byte bound the user set is kept, and Spark closes batches at it."""
    from parquet_sink.write.parquet_files import _row_bounded_arrow_batches

    key = "spark.sql.execution.arrow.maxBytesPerBatch"

    def batch_rows(batches):
        for batch in batches:
            yield pa.RecordBatch.from_pylist([{"rows": batch.num_rows}])

    # 9,000 rows of 8,000 bytes in one task (72 MB): over the default byte bound, under maxRecordsPerBatch (10,000)
    wide = spark.range(9000, numPartitions=1).select(F.repeat(F.lit("x"), 8000).alias("s"))

    def sizes() -> list[int]:
        return [row.rows for row in wide.mapInArrow(batch_rows, "rows long").collect()]

    assert spark.conf.get(key, None) is None
    assert max(sizes()) < 9000  # Spark's own bound splits them
    with _row_bounded_arrow_batches(spark):
        assert sizes() == [9000]
    assert spark.conf.get(key, None) is None
    with pytest.raises(RuntimeError, match="inside"), _row_bounded_arrow_batches(spark):
        raise RuntimeError("inside")
    assert spark.conf.get(key, None) is None

    small = spark.range(5).select(F.col("id"), F.lit("v").alias("s"))
    ParquetSink(str(tmp_path / "out"), writer="arrow")(small, 0)
    assert spark.conf.get(key, None) is None
    spark.conf.set(key, "16m")
    try:
        with _row_bounded_arrow_batches(spark):
            assert sum(sizes()) == 9000 and max(sizes()) <= 16 * 2**20 // 8000 + 1
        ParquetSink(str(tmp_path / "out"), writer="arrow")(small, 1)
        assert spark.conf.get(key) == "16m"
    finally:
        spark.conf.unset(key)
    assert sorted(read_committed(str(tmp_path / "out")).column("id").to_pylist()) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]


def test_a_refused_arrow_batch_setting_leaves_the_job_as_it_is(spark, caplog):
    """A platform that refuses ``conf.set`` of keys it does not list (managed Spark Connect services do): the block
    runs the job with Spark's own bound, logs why, and sets nothing. (The session stands in for such a platform's;
    its conf reads are the real session's.)"""
    from types import SimpleNamespace

    from pyspark.errors import PySparkValueError

    from parquet_sink.write.parquet_files import _row_bounded_arrow_batches

    key = "spark.sql.execution.arrow.maxBytesPerBatch"

    def refuse(name: str, value: str) -> None:
        raise PySparkValueError(f"[CONFIG_NOT_AVAILABLE] Configuration {name} is not available.")

    managed = SimpleNamespace(conf=SimpleNamespace(get=spark.conf.get, set=refuse, unset=spark.conf.unset))
    with caplog.at_level("INFO", logger="parquet_sink.write.parquet_files"), _row_bounded_arrow_batches(managed):
        assert spark.range(3).mapInArrow(lambda batches: batches, "id long").count() == 3
    assert spark.conf.get(key, None) is None
    assert f"cannot set {key}" in caplog.text and "CONFIG_NOT_AVAILABLE" in caplog.text


def test_a_commit_protocol_other_than_spark_sinks_writes_through_df_write(spark, tmp_path):
    """A session whose ``spark.sql.streaming.commitProtocolClass`` is not a manifest protocol (its commit messages
    would not be the files' statuses): batches go through ``df.write`` (staging listed, rows observed), every row
    committed once, readable by Spark; with Spark's own protocol back, the next batch is written as its sink does."""
    from parquet_sink.write import spark_staging
    from parquet_sink.write.inflight import InFlightBatch
    from parquet_sink.storage.filesystem import Storage

    key = "spark.sql.streaming.commitProtocolClass"
    out = tmp_path / "out"
    df = spark.createDataFrame([(i, "ab"[i % 2]) for i in range(10)], "id long, k string")
    spark.conf.set(key, "org.apache.spark.sql.execution.datasources.SQLHadoopMapReduceCommitProtocol")
    try:
        batch = InFlightBatch.begin(Storage(str(tmp_path / "probe")), 0, "c0", None, 0)
        staged = spark_staging.write_staged(df, batch, partition_by=("k",), compression="snappy", max_records_per_file=None)
        assert (staged.rows, staged.files) == (10, None)
        ParquetSink(str(out), partition_by=["k"])(df, 0)
    finally:
        spark.conf.unset(key)
    ParquetSink(str(out), partition_by=["k"])(df.selectExpr("id + 10 AS id", "k"), 1)
    assert sorted(read_committed(str(out)).column("id").to_pylist()) == list(range(20))
    assert sorted(r.id for r in spark.read.parquet(str(out)).collect()) == list(range(20))


def test_publish_refuses_files_that_disagree_with_the_rows_written(spark, tmp_path):
    """Spark writer path: a file Spark's job did not write in staging is not published (the accepted attempts'
    commit messages list the files), and a listed file that holds other rows than the job wrote (here
    replaced by a copy of the other one) makes publishing refuse before renaming anything: the batch is not
    committed."""
    from parquet_sink.write.inflight import InFlightBatch
    from parquet_sink.write.spark_staging import publish, write_staged
    from parquet_sink.storage.filesystem import Storage

    out = tmp_path / "out"
    storage = Storage(str(out))
    df = spark.createDataFrame([(i, "ab"[i % 3 == 0]) for i in range(10)], "id long, k string").coalesce(1)
    batch = InFlightBatch.begin(storage, 0, "c0ffee", None, 0)
    staged = write_staged(df, batch, partition_by=("k",), compression="snappy", max_records_per_file=None)
    assert staged.rows == 10 and len(staged.files) == 2
    stray = Path(batch.staging) / "k=a" / "part-99999-stray.c000.snappy.parquet"
    shutil.copyfile(Path(batch.staging) / staged.files[0], stray)
    published = publish(batch, staged)
    assert sorted(Path(f.path).relative_to(out).as_posix() for f in published) == staged.files
    assert stray.exists() and sum(f.num_rows for f in published) == 10

    batch = InFlightBatch.begin(storage, 1, "c0ffee2", None, 1)
    staged = write_staged(df, batch, partition_by=("k",), compression="snappy", max_records_per_file=None)
    first, second = (Path(batch.staging) / f for f in staged.files)
    shutil.copyfile(second, first)  # 3 rows and 7 rows -> the 3 or 7 twice
    with pytest.raises(errors.RowCountMismatchError, match=r"log batch 1 of .*wrote 10 rows but the 2 data file\(s\)"):
        publish(batch, staged)
    assert not any(Path(f).name in {p.name for p in out.glob("k=*/*.parquet")} for f in staged.files)
