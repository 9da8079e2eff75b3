"""Spark's writer in place on an object store (:mod:`parquet_sink.write.spark_in_place`): moto S3 reached through
Hadoop's S3A by child drivers whose sessions carry the S3A jars (``tests/helpers/s3a.py``), the log and the
readers through s3fs. The files are Spark's (``parquet-mr`` footers, Spark's names), every row is committed once,
Spark's own reader on ``s3a://`` returns the rows ``read_committed`` does, a failed task attempt's files and a
killed batch's files are never committed, and a session whose S3A cannot reach the bucket is refused.
``writer="auto"`` takes the Arrow path on object stores, S3A or not."""

from __future__ import annotations

import json
import socket
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from parquet_sink import MetadataLog, committed_files, read_committed
from parquet_sink.storage.filesystem import Storage
from tests.helpers.crash_util import (
    assert_ok,
    assert_same_ids,
    assert_sigkilled,
    committed_ids,
    run_child,
    write_inputs,
)
from tests.helpers.s3a import s3a_conf

ROWS = 20


@pytest.fixture
def bucket(moto_server) -> str:
    name = f"ip{uuid.uuid4().hex[:12]}"
    moto_server.make_bucket(name)
    return name


def _config(moto_server, tmp_path: Path, out: str, endpoint: str | None = None, **extra) -> dict:
    options = moto_server.storage_options
    conf = s3a_conf(endpoint or moto_server.endpoint_url, options["key"], options["secret"], moto_server.region_name)
    sink = {"storage_options": options, "compact_interval": 3, **extra.pop("sink", {})}
    return {
        "input": str(tmp_path / "in"), "out": out, "checkpoint": str(tmp_path / "ckpt"), "max_files_per_trigger": 1,
        "conf": {**conf, **extra.pop("conf", {})}, "sink": sink, **extra,
    }


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _store_files(moto_server, out: str) -> tuple[set[str], set[str]]:
    """(every Parquet file under ``out``, the committed ones), as fsspec paths."""
    options = moto_server.storage_options
    storage = Storage(out, options)
    on_store = {i.path for i in storage.find(storage.root) if i.path.endswith(".parquet")}
    return on_store, {f.path for f in committed_files(out, storage_options=options)}


def _writers(moto_server, out: str) -> set[str]:
    """The ``created_by`` programs of the committed files' footers."""
    options = moto_server.storage_options
    storage = Storage(out, options)
    return {pq.ParquetFile(storage.open(f.path)).metadata.created_by.split()[0] for f in committed_files(out, storage_options=options)}


def test_stream_written_in_place_through_s3a(moto_server, bucket, tmp_path: Path) -> None:
    """``writer="spark"`` writes an unpartitioned output in place where S3A reaches the bucket (partitioned outputs:
    the tests below)."""
    ids = write_inputs(tmp_path / "in", range(4), ROWS)
    out = f"s3://{bucket}/out"
    spark_read = tmp_path / "spark-read.json"
    config = _config(
        moto_server, tmp_path, out, sink={"writer": "spark"},
        spark_read={"path": f"s3a://{bucket}/out", "result": str(spark_read)},
    )

    child = run_child(tmp_path, config)

    assert_ok(child)
    options = moto_server.storage_options
    assert_same_ids(committed_ids(out, storage_options=options), ids, "read_committed")
    assert_same_ids([row[0] for row in json.loads(spark_read.read_text())], ids, "Spark's reader through S3A")
    assert _writers(moto_server, out) == {"parquet-mr"}  # Spark's writer, not the Arrow path
    on_store, committed = _store_files(moto_server, out)
    assert on_store == committed  # no staging, no empty file, nothing uncommitted
    log = Storage(out, options)
    lines = log.read_bytes(log.join("_spark_metadata", "1")).decode().splitlines()[1:]
    entry = next(e for e in map(json.loads, lines) if not e["isDir"])  # the data entry, after the record's own
    stats = json.loads(entry["stats"])
    assert stats["numRecords"] > 0 and stats["minValues"]["id"] >= 1000 and stats["maxValues"]["id"] < 2000
    assert [p["rows"] for p in child.progress()] == [ROWS] * 4
    assert MetadataLog(out, storage_options=options).latest_batch_id() == 3


NAMES = ["a:b", "c%d", "e/f", "sp ace", "\u00fc\u00df", "x=y", "#?&", "", None, "__HIVE_DEFAULT_PARTITION__", "a,b"]


def test_partition_values_at_their_edges_in_place(moto_server, bucket, tmp_path: Path) -> None:
    """Partition values Spark escapes in directory names (``%``, ``/``, ``:``, ``=``), spaces, unicode, empty
    and null: the manifest's URIs map back to the files, and ``read_committed`` returns what Spark's reader
    through S3A returns."""
    src = tmp_path / "in"
    src.mkdir()
    rows = [{"id": i, "file": 0, "name": name} for i, name in enumerate(NAMES * 2)]
    (src / "in-0000.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = f"s3://{bucket}/out"
    spark_read = tmp_path / "spark-read.json"
    config = _config(
        moto_server, tmp_path, out, sink={"partition_by": ["name"], "writer": "spark"},
        spark_read={"path": f"s3a://{bucket}/out", "result": str(spark_read)},
    )

    child = run_child(tmp_path, config)

    assert_ok(child)
    ours = read_committed(out, storage_options=moto_server.storage_options)
    ours_rows = sorted(zip(ours.column("id").to_pylist(), ours.column("name").to_pylist()))
    theirs = sorted(tuple(row) for row in json.loads(spark_read.read_text()))
    assert ours_rows == theirs and [i for i, _ in ours_rows] == list(range(len(rows)))
    on_store, committed = _store_files(moto_server, out)
    assert on_store == committed and len({Path(p).parent.name for p in committed}) >= len(NAMES) - 3
    assert _writers(moto_server, out) == {"parquet-mr"}


def test_failed_task_attempt_in_place_is_never_committed(moto_server, bucket, tmp_path: Path) -> None:
    """The first task attempt dies after its first rows went into Spark's writer, in ``bucket=1`` and ``bucket=2``
    too; its retry writes only ``bucket=0``: only the retry's files are committed, every row once."""
    ids = write_inputs(tmp_path / "in", range(2), ROWS)
    out = f"s3://{bucket}/out"
    config = _config(
        moto_server, tmp_path, out, sink={"partition_by": ["bucket"], "writer": "spark"}, master="local[2,2]",
        task_failpoint=True, attempt_bucket=True,
    )

    child = run_child(tmp_path, config, failpoints="task_write=raise@1", state_dir=tmp_path / "fp")

    assert_ok(child)
    assert (tmp_path / "fp" / "task_write.1").exists(), "no task attempt failed"
    assert_same_ids(committed_ids(out, storage_options=moto_server.storage_options), ids, "after the retry")
    batch0 = [f for f in committed_files(out, storage_options=moto_server.storage_options) if f.batch_id == 0]
    assert {f.relative_path.split("/")[0] for f in batch0} == {"bucket=0"}


def test_driver_killed_before_commit_in_place_then_restarted(moto_server, bucket, tmp_path: Path) -> None:
    ids = write_inputs(tmp_path / "in", range(4), ROWS)
    out = f"s3://{bucket}/out"
    config = _config(moto_server, tmp_path, out, sink={"writer": "spark"})

    killed = run_child(tmp_path, config, failpoints="before_commit=kill@3", state_dir=tmp_path / "fp")

    assert_sigkilled(killed)
    on_store, committed = _store_files(moto_server, out)
    assert on_store - committed, "the killed batch's files should be on the store, uncommitted"
    assert_same_ids(committed_ids(out, storage_options=moto_server.storage_options), [i for i in ids if i < 2000], "at the kill")

    restarted = run_child(tmp_path, config)

    assert_ok(restarted)
    assert_same_ids(committed_ids(out, storage_options=moto_server.storage_options), ids, "after the restart")
    assert _writers(moto_server, out) == {"parquet-mr"}


def test_s3a_that_cannot_reach_the_bucket(moto_server, bucket, tmp_path: Path) -> None:
    """S3A pointed at a port nothing listens on: ``writer="spark"`` fails the first batch naming the output, the
    reason and the remedy, with nothing written or committed."""
    write_inputs(tmp_path / "in", range(2), ROWS)
    out = f"s3://{bucket}/out"
    config = _config(moto_server, tmp_path, out, endpoint=f"http://127.0.0.1:{_closed_port()}", sink={"writer": "spark"})

    child = run_child(tmp_path, config)

    assert child.returncode == 3
    result = child.result()
    assert result["type"] == "SinkUsageError", result
    assert f"s3://{bucket}/out" in result["message"] and "writer='auto' or 'arrow'" in result["message"]
    assert _store_files(moto_server, out) == (set(), set())
    assert MetadataLog(out, storage_options=moto_server.storage_options).latest_batch_id() is None


def test_auto_takes_the_arrow_path_where_s3a_reaches_the_bucket(moto_server, bucket, tmp_path: Path) -> None:
    """``writer="auto"`` in a session whose S3A reaches the bucket still writes with the Arrow path (faster on
    object stores: docs/performance.md); Spark's reader through S3A returns every row once."""
    ids = write_inputs(tmp_path / "in", range(2), ROWS)
    out = f"s3://{bucket}/out"
    spark_read = tmp_path / "spark-read.json"
    config = _config(moto_server, tmp_path, out, spark_read={"path": f"s3a://{bucket}/out", "result": str(spark_read)})

    child = run_child(tmp_path, config)

    assert_ok(child)
    assert_same_ids(committed_ids(out, storage_options=moto_server.storage_options), ids, "the Arrow path")
    assert_same_ids([row[0] for row in json.loads(spark_read.read_text())], ids, "Spark's reader through S3A")
    assert _writers(moto_server, out) == {"parquet-cpp-arrow"}
