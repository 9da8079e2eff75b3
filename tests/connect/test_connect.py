"""Spark Connect, first class: the sink's query identity and the same guarantees as on classic PySpark.

Under Spark Connect the ``foreachBatch`` function runs on the server with only the batch DataFrame and
its id: no ``sql.streaming.queryId``. The sink takes the query id from ``<checkpoint>/metadata``
(``checkpoint_location=``); without it, it refuses unless ``allow_batch_id_only=True``. On classic
PySpark the checkpoint's id is checked against the running query's.

The Connect tests use the suite's ``connect_spark`` (a client of pyspark's bundled Connect server,
see ``tests/helpers/connect_util.py``) and run last; the kill tests run the server inside the crash child.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

from parquet_sink import MetadataLog, ParquetSink, read_committed
from parquet_sink.cli.main import main as cli_main
from parquet_sink.errors import ForeignQueryError, QueryIdentityError, SinkUsageError, original_error
from parquet_sink.write.sink import CommitRecord, checkpoint_query_id
from parquet_sink.log.entry import attribute
from tests.helpers.connect_util import SERVER_CONF
from tests.helpers.crash_util import (
    assert_parquet_sink,
    assert_ok,
    assert_sigkilled,
    committed_paths,
    file_ids,
    latest_commit,
    log_files,
    orphans,
    run_child,
    write_inputs,
)
from tests.helpers.spark_util import run_available_now, write_input_files
from tests.crash.test_crash import KILL_CASES, ROWS, child_config

SCHEMA = "id long, cat string"


def _batches(n: int, per: int, offset: int = 0) -> list[list[dict]]:
    return [[{"id": offset + b * per + i, "cat": "abc"[(b + i) % 3]} for i in range(per)] for b in range(n)]


def _stream(session, src: str):
    return session.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(src)


def _records(out: str) -> list[CommitRecord]:
    """The commit record of every batch in the log (compaction keeps the first and last of each run: the
    batches between are attributed from them)."""
    log = MetadataLog(out)
    kept = [r for r in map(CommitRecord.from_entry, log.all_files()) if r is not None]
    latest = log.latest_batch_id()
    return [record for _, record in sorted(attribute(kept, range(latest + 1)).items())] if kept else []


def _ids(session, out: str) -> list[int]:
    return sorted(r.id for r in session.read.parquet(out).select("id").collect())


def _run_available_now(stream, checkpoint: str, sink: ParquetSink):
    """``run_available_now`` on the Connect server, starting the query again (nothing of it ran) when the
    server's foreachBatch Python worker did not connect back within Spark's fixed 10 s
    (``PythonWorkerFactory.createSimpleWorker``): its imports alone can take that long on a loaded machine."""
    for attempt in range(3):
        try:
            return run_available_now(stream, checkpoint, sink)
        except Exception as exc:
            if "Python worker failed to connect back" not in str(exc) or attempt == 2:
                raise


def _forget_commit(checkpoint: str, batch: int) -> None:
    """Make Spark's checkpoint look as if the driver died after the sink committed ``batch``."""
    for name in (str(batch), f".{batch}.crc"):
        Path(checkpoint, "commits", name).unlink(missing_ok=True)


# -- the identity rule on classic PySpark ------------------------------------------------------------


def test_classic_checkpoint_identity_matches_the_running_query(spark, tmp_path: Path) -> None:
    src, out, ckpt = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    write_input_files(src, _batches(2, 5))
    query = run_available_now(_stream(spark, src), ckpt, ParquetSink(out, checkpoint_location=f"file:{ckpt}"))
    assert checkpoint_query_id(ckpt) == query.id
    assert [(r.query_id, r.query_batch_id) for r in _records(out)] == [(query.id, 0), (query.id, 1)]


def test_classic_checkpoint_of_another_query_is_refused(spark, tmp_path: Path) -> None:
    """checkpoint_location naming another query's checkpoint: QueryIdentityError before anything is written."""
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    write_input_files(src, _batches(2, 5))
    other = run_available_now(_stream(spark, src), str(tmp_path / "other"), ParquetSink(str(tmp_path / "out0")))
    sink = ParquetSink(out, checkpoint_location=str(tmp_path / "other"))
    with pytest.raises(StreamingQueryException) as info:
        run_available_now(_stream(spark, src), str(tmp_path / "ckpt"), sink)
    message = str(info.value)
    assert "QueryIdentityError" in message and other.id in message and "checkpointLocation" in message
    assert MetadataLog(out).latest_batch_id() is None


def test_checkpoint_metadata_missing_or_damaged(tmp_path: Path) -> None:
    assert checkpoint_query_id(str(tmp_path / "none-yet")) is None
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "metadata").write_text('{"runId": "x"}')
    with pytest.raises(QueryIdentityError, match=re.escape(f"{tmp_path / 'bad' / 'metadata'} is not Spark's JSON")):
        checkpoint_query_id(str(tmp_path / "bad"))


def test_checkpoint_query_id_from_hadoop_urls(spark, tmp_path: Path, backend) -> None:
    """Spark's own checkpoint metadata, copied to each backend, read through the URL form Spark is given
    (``file:/``, ``abfss://container@account.dfs.core.windows.net/``, ``s3a://``) and the fsspec form."""
    src, ckpt = str(tmp_path / "in"), tmp_path / "ckpt"
    write_input_files(src, _batches(1, 3))
    query = run_available_now(_stream(spark, src), str(ckpt), ParquetSink(str(tmp_path / "out0")))
    storage = MetadataLog(backend.url, storage_options=backend.storage_options).storage
    with storage.open(storage.join("ckpt", "metadata"), "wb") as fh:
        fh.write((ckpt / "metadata").read_bytes())
    fsspec_url = f"{backend.url}/ckpt"
    hadoop_url = storage.to_hadoop_path(storage.join("ckpt"))
    if backend.name == "local":
        hadoop_url = "file:" + storage.join("ckpt")
    assert hadoop_url.split(":", 1)[0] == {"local": "file", "azurite": "abfss", "moto": "s3a"}[backend.name]
    for url in (fsspec_url, hadoop_url):
        assert checkpoint_query_id(url, backend.storage_options) == query.id, url


# -- Spark Connect ------------------------------------------------------------------------------------


def test_connect_partitioned_stream_readers_agree(connect_spark, tmp_path: Path) -> None:
    src, out, ckpt = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    # Three batches, the middle one a compaction (interval 2): batches before, in and after a compact file.
    write_input_files(src, _batches(3, 12))
    sink = ParquetSink(out, partition_by=["cat"], compact_interval=2, checkpoint_location=ckpt)
    query = _run_available_now(_stream(connect_spark, src), ckpt, sink)

    records = _records(out)
    assert [(r.log_batch_id, r.query_id, r.query_batch_id) for r in records] == [
        (b, query.id, b) for b in range(3)
    ]
    assert "1.compact" in log_files(out) and sorted(os.listdir(out)) == [
        "_exactly_once", "_spark_metadata", "cat=a", "cat=b", "cat=c"
    ]
    expected = sorted((r["id"], r["cat"]) for batch in _batches(3, 12) for r in batch)
    ours = read_committed(out)
    assert sorted(zip(ours.column("id").to_pylist(), ours.column("cat").to_pylist())) == expected
    theirs = connect_spark.read.parquet(out)
    assert sorted((r.id, r.cat) for r in theirs.collect()) == expected
    through_connect = read_committed(out, spark=connect_spark)
    assert sorted((r.id, r.cat) for r in through_connect.collect()) == expected


@pytest.mark.parametrize("writer", ["spark", "auto"])
def test_connect_on_an_object_store_writes_with_arrow(connect_spark, tmp_path: Path, moto_server, writer: str) -> None:
    """Spark Connect has no JVM for Spark's writer to write in place: ``writer="spark"`` on S3 fails the first
    batch with the remedy and writes nothing; ``"auto"`` writes with the Arrow path."""
    src, ckpt = str(tmp_path / "in"), str(tmp_path / "ckpt")
    bucket = f"c{uuid.uuid4().hex[:12]}"
    moto_server.make_bucket(bucket)
    options, out = moto_server.storage_options, f"s3://{bucket}/out"
    write_input_files(src, _batches(2, 5))
    sink = ParquetSink(out, writer=writer, checkpoint_location=ckpt, storage_options=options)
    if writer == "spark":
        with pytest.raises(Exception) as info:
            _run_available_now(_stream(connect_spark, src), ckpt, sink)
        error = original_error(info.value)
        assert isinstance(error, SinkUsageError), info.value
        assert out in str(error) and "Spark Connect" in str(error) and "Use writer='auto' or 'arrow'" in str(error)
        assert MetadataLog(out, storage_options=options).latest_batch_id() is None
        return
    _run_available_now(_stream(connect_spark, src), ckpt, sink)
    ids = sorted(r["id"] for batch in _batches(2, 5) for r in batch)
    assert sorted(read_committed(out, storage_options=options).column("id").to_pylist()) == ids


def _doctor(capsys, *args: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = cli_main(["doctor", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_connect_without_identity_is_refused_unless_accepted(connect_spark, tmp_path: Path, capsys) -> None:
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    write_input_files(src, _batches(2, 5))
    with pytest.raises(Exception) as info:
        _run_available_now(_stream(connect_spark, src), str(tmp_path / "ckpt"), ParquetSink(out))
    message = str(info.value)
    assert "QueryIdentityError" in message and "checkpoint_location=" in message and "allow_batch_id_only" in message
    assert isinstance(original_error(info.value), QueryIdentityError)
    assert MetadataLog(out).latest_batch_id() is None and not os.path.exists(os.path.join(out, "_spark_metadata", "0"))

    # A checkpoint_location that is not the query's (no metadata there): refused too.
    wrong = ParquetSink(out, checkpoint_location=str(tmp_path / "elsewhere"))
    with pytest.raises(Exception) as info:
        _run_available_now(_stream(connect_spark, src), str(tmp_path / "ckpt"), wrong)
    assert "QueryIdentityError" in str(info.value) and "elsewhere/metadata does not exist" in str(info.value)
    assert MetadataLog(out).latest_batch_id() is None

    # Accepted explicitly: batch-id-only commits, as the user asked.
    ckpt = tmp_path / "ckpt"
    _run_available_now(_stream(connect_spark, src), str(ckpt), ParquetSink(out, allow_batch_id_only=True))
    assert [(r.query_id, r.query_batch_id) for r in _records(out)] == [(None, 0), (None, 1)]
    assert _ids(connect_spark, out) == list(range(10))

    # `doctor` applies the same rule: batch-id-only is a warning (exit 1); with the checkpoint's identity
    # (read from the Hadoop form Spark is given) the log's batches are another query's.
    code, plan = _doctor(capsys, out, "--checkpoint", f"file:{ckpt}", "--batch-id-only")
    assert code == 1 and plan["action"] == "commit" and plan["log_batch"] == 2
    assert plan["checkpoint"]["query_id"] == checkpoint_query_id(str(ckpt))
    assert "batch-id-only" in plan["warnings"][0] and "checkpoint_location" in plan["warnings"][0]
    code, plan = _doctor(capsys, out, "--checkpoint", f"file:{ckpt}")
    assert code == 1 and plan["action"] == "foreign" and "not recorded" in plan["message"]


def test_connect_replayed_batch_is_skipped(connect_spark, tmp_path: Path) -> None:
    src, out, ckpt = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    write_input_files(src, _batches(2, 10))
    _run_available_now(_stream(connect_spark, src), ckpt, ParquetSink(out, checkpoint_location=ckpt))
    before = log_files(out)
    _forget_commit(ckpt, 1)  # the driver died after the sink committed batch 1: Spark re-runs it
    _run_available_now(_stream(connect_spark, src), ckpt, ParquetSink(out, checkpoint_location=ckpt))
    assert latest_commit(ckpt) == 1 and log_files(out) == before
    assert sorted(read_committed(out).column("id").to_pylist()) == list(range(20))
    assert _ids(connect_spark, out) == list(range(20))


def test_connect_fresh_checkpoint_on_old_output_refused_then_appended(connect_spark, tmp_path: Path) -> None:
    """The issue's data loss: a new checkpoint with new input on an old output. Refused with
    ForeignQueryError (nothing skipped silently); with on_foreign_query='append' every new row lands."""
    out = str(tmp_path / "out")
    write_input_files(str(tmp_path / "in1"), _batches(3, 10))
    first = _run_available_now(
        _stream(connect_spark, str(tmp_path / "in1")), str(tmp_path / "ckpt1"),
        ParquetSink(out, checkpoint_location=str(tmp_path / "ckpt1")),
    )
    write_input_files(str(tmp_path / "in2"), _batches(2, 10, offset=1000))
    ckpt2 = str(tmp_path / "ckpt2")
    with pytest.raises(Exception) as info:
        sink = ParquetSink(out, checkpoint_location=ckpt2)
        _run_available_now(_stream(connect_spark, str(tmp_path / "in2")), ckpt2, sink)
    message = str(info.value)
    assert "ForeignQueryError" in message and first.id in message and "on_foreign_query='append'" in message
    typed = original_error(info.value)  # the typed error back from Spark Connect's exception
    assert isinstance(typed, ForeignQueryError) and first.id in str(typed) and typed.__cause__ is info.value
    assert MetadataLog(out).latest_batch_id() == 2

    shutil.rmtree(ckpt2)
    second = _run_available_now(
        _stream(connect_spark, str(tmp_path / "in2")), ckpt2,
        ParquetSink(out, checkpoint_location=ckpt2, on_foreign_query="append"),
    )
    expected = list(range(30)) + list(range(1000, 1020))
    assert sorted(read_committed(out).column("id").to_pylist()) == expected
    assert _ids(connect_spark, out) == expected
    assert [(r.query_id, r.query_batch_id) for r in _records(out)] == [(first.id, b) for b in range(3)] + [
        (second.id, b) for b in range(2)
    ]


def test_connect_driver_killed_in_commit_window(connect_spark, tmp_path: Path, monkeypatch) -> None:
    """The crash child runs the Connect server and the query through a Connect client; the failpoint
    after the log commit (before Spark records the batch done) fires in the server's foreachBatch worker
    and SIGKILLs the whole process group (driver JVM, workers, client). The restart (new server, same
    checkpoint) re-runs that batch: the sink must recognise its own query through the checkpoint and skip
    it; every row ends up exactly once."""
    failpoint = "after_commit"
    case = KILL_CASES["spark", failpoint]  # local disk: the Spark writer path
    monkeypatch.delenv("SPARK_CONNECT_MODE_ENABLED")  # the child starts its driver as classic first
    ids = write_inputs(tmp_path / "in", range(case.files), ROWS)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    config = child_config(tmp_path, connect=True, conf=SERVER_CONF)
    config["sink"]["checkpoint_location"] = str(ckpt)

    killed = run_child(tmp_path, config, failpoints=f"{failpoint}=kill@{case.nth}", state_dir=tmp_path / "fp")
    assert_sigkilled(killed)
    assert MetadataLog(str(out)).latest_batch_id() == case.log_latest
    assert latest_commit(ckpt) == case.commit_latest
    left = orphans(out)
    assert (case.orphan_batch is not None) == bool(left), left

    restarted = run_child(tmp_path, config)
    assert_ok(restarted)
    first = restarted.progress()[0]
    assert first["batch_id"] == case.commit_latest + 1 and first["skipped"] is case.replay_skipped, first
    agreement = assert_parquet_sink(connect_spark, out, ckpt, ids, ROWS)
    query_id = json.loads((ckpt / "metadata").read_text())["id"]
    assert {r["queryId"] for r in agreement.commit_records.values()} == {query_id}
    assert not (left & committed_paths(out)), "an uncommitted file of the killed attempt got committed"
    assert sorted(read_committed(str(out), columns=["id"]).column("id").to_pylist()) == sorted(
        i for f in range(case.files) for i in file_ids(f, ROWS)
    )


def test_connect_seed_fault_tolerance_example(connect_spark, tmp_path: Path) -> None:
    """waitingforcode's example under Connect (shortened from ten files to six, failing on the fourth instead of
    the seventh: a compaction still falls in each run): files of two records, one file per trigger; the record
    "content1=4" fails on the first run only (a flag file); the restart outputs all 12 records once."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    source = str(tmp_path / "in")
    write_input_files(source, [[{"id": k, "name": f"content{k}={i}"} for k in (1, 2)] for i in range(1, 7)])
    flag = tmp_path / "already-failed"

    def fail_once(name):  # no type hints: Connect would take them for a pandas UDF's
        if name == "content1=4" and not flag.exists():
            flag.touch()
            raise RuntimeError("Something went wrong")
        return name

    fail_once_udf = F.udf(fail_once, StringType())
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")

    def run() -> None:
        stream = (
            connect_spark.readStream.format("json").schema("id LONG, name STRING").option("maxFilesPerTrigger", 1)
            .load(source)
            .select("id", fail_once_udf("name").alias("name"))
        )
        _run_available_now(stream, ckpt, ParquetSink(out, compact_interval=3, checkpoint_location=ckpt))

    with pytest.raises(Exception, match="Something went wrong"):
        run()
    assert flag.exists()
    assert MetadataLog(out).latest_batch_id() == latest_commit(ckpt) == 2  # files 1..3 (2.compact); file 4 failed
    assert sorted(read_committed(out).column("name").to_pylist()) == sorted(
        f"content{k}={i}" for k in (1, 2) for i in range(1, 4)
    )

    run()
    expected = sorted(f"content{k}={i}" for k in (1, 2) for i in range(1, 7))
    assert sorted(read_committed(out).column("name").to_pylist()) == expected
    assert sorted(r.name for r in connect_spark.read.parquet(out).select("name").collect()) == expected
    assert MetadataLog(out).latest_batch_id() == latest_commit(ckpt) == 5  # 5.compact, written by the restart
    assert len({r.query_id for r in _records(out)}) == 1


def test_optimize_while_a_connect_stream_writes(connect_spark, tmp_path: Path) -> None:
    """Issue 37: optimizes loop on the client while a Spark Connect stream (its foreachBatch on the server)
    commits to the same output: the query never fails, and every reader reads every row once after."""
    from parquet_sink import history
    from parquet_sink.maintenance import optimize

    src, out, ckpt = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    batches = _batches(10, 6)
    write_input_files(src, batches)
    sink = ParquetSink(out, partition_by=["cat"], compact_interval=3, checkpoint_location=ckpt)
    for attempt in range(3):  # the server's Python worker may miss its 10 s connect-back on a loaded machine
        query = (
            _stream(connect_spark, src).writeStream.option("checkpointLocation", ckpt).trigger(availableNow=True)
            .foreachBatch(sink).start()
        )
        swaps = 0
        while query.isActive:
            if MetadataLog(out).latest_batch_id() is not None:
                swaps += optimize(out, target_file_size="1MB").committed
        try:
            query.awaitTermination()
            break
        except Exception as exc:
            if "Python worker failed to connect back" not in str(exc) or attempt == 2:
                raise
    assert query.exception() is None
    swaps += optimize(out, target_file_size="1MB").committed
    assert swaps >= 1
    operations = history(out).column("operation").to_pylist()
    assert operations.count("append") == 10 and "optimize" in operations
    expected = sorted((r["id"], r["cat"]) for batch in batches for r in batch)
    ours = read_committed(out)
    assert sorted(zip(ours.column("id").to_pylist(), ours.column("cat").to_pylist())) == expected
    assert sorted((r.id, r.cat) for r in connect_spark.read.parquet(out).collect()) == expected
    assert MetadataLog(out).check() == []
