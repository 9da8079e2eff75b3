"""A first batch that fails after placing its files (issue 36 item 2).

Spark's own file sink creates ``_spark_metadata/`` when its query starts, so Spark's readers take the output for a
sink output from the first moment. The writers here create it before they place the first data file: a first batch
that dies (SIGKILL) or fails (an error) after placing its files leaves files no reader reads (``spark.read.parquet``,
Spark's streaming file source started on the output, ``read_committed``), and the restart on the same checkpoint (or
the same ``write_batch`` call again) takes over its own failed attempt instead of refusing it as an existing dataset.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from parquet_sink import read_committed, vacuum, write_batch
from parquet_sink.log.metadata_log import STARTED_MARKER
from parquet_sink.storage.filesystem import Storage
from tests.helpers.chain_child import writer_rows
from tests.helpers.crash_util import (
    SCHEMA,
    assert_ok,
    assert_parquet_sink,
    assert_same_ids,
    assert_sigkilled,
    orphans,
    parquet_on_disk,
    run_child,
    run_in_process,
    write_inputs,
)

ROWS = 20
CHAIN_CHILD = Path(__file__).resolve().parents[1] / "helpers" / "chain_child.py"


def _file_source_ids(spark, out: Path, checkpoint: Path) -> list[int]:
    """The ids a Spark streaming file source on ``out`` (Parquet, the crash query's schema) reads in one
    availableNow run from ``checkpoint``: a source that takes ``out`` for a sink output reads its log only."""
    seen: list[int] = []

    def collect(df, batch_id: int) -> None:
        seen.extend(r[0] for r in df.select("id").collect())

    query = (
        spark.readStream.schema(SCHEMA).parquet(str(out)).writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    )
    assert query.awaitTermination(120), "the file source query did not finish"
    return seen


@pytest.mark.parametrize(("writer", "action"), [("spark", "kill"), ("arrow", "raise")])
def test_failed_first_batch_is_invisible_and_its_restart_takes_over(spark, tmp_path: Path, writer, action) -> None:
    """The first batch places its files (both writer paths), then the driver is SIGKILLed (or the batch fails
    with an error) before the commit. Spark's reader reads 0 rows, not the leftovers; a Spark file source
    started on the output then reads it through the log (0 rows now, every row once after the restart, never a
    leftover); the restart on the same checkpoint succeeds with every row once. Before, the log directory
    appeared at the first commit: Spark read the leftovers, the file source took the output for a plain
    directory for good (and read the leftovers too), and the restart after an error failed with
    ExistingDataError about its own files."""
    ids = write_inputs(tmp_path / "in", range(3), ROWS)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    config = {
        "input": str(tmp_path / "in"), "out": str(out), "checkpoint": str(ckpt), "max_files_per_trigger": 1,
        "sink": {"writer": writer, "compact_interval": 2},
    }
    failed = run_child(tmp_path, config, failpoints=f"before_commit={action}@1")
    if action == "kill":
        assert_sigkilled(failed)
    else:
        assert failed.returncode == 3 and failed.result()["type"] in ("FailpointError", "StreamingQueryException")
    left = orphans(out)
    assert left, "the first batch placed its files"
    assert sorted(r[0] for r in spark.read.schema(SCHEMA).parquet(str(out)).select("id").collect()) == []
    assert read_committed(str(out)).num_rows == 0
    source_ckpt = tmp_path / "source-ckpt"
    assert _file_source_ids(spark, out, source_ckpt) == [], "a file source must read the log, not the directory"
    assert (out / "_spark_metadata").is_dir()

    restarted = run_in_process(spark, tmp_path, config)

    assert_ok(restarted)
    assert [p["skipped"] for p in restarted.progress()] == [False, False, False]
    assert_parquet_sink(spark, out, ckpt, ids, ROWS)
    assert left <= parquet_on_disk(out) and not left & (parquet_on_disk(out) - orphans(out))
    assert_same_ids(_file_source_ids(spark, out, source_ckpt), ids, "the file source after the restart")


@pytest.mark.parametrize("backend_name", ["local", "moto", "azurite"])
@pytest.mark.parametrize("action", ["kill", "raise"])
def test_failed_first_write_batch_is_invisible_and_its_rerun_commits(request, spark, tmp_path, backend_name, action):
    """write_batch's first call dies (or fails) after placing its files. The log directory exists (on object
    stores: the empty marker object under it, so Hadoop's S3A/ABFS and fsspec see the directory), readers see
    no committed batch, and the same call again commits every row once (before, after an error: ExistingDataError
    about the call's own files; after a kill on an object store, Spark's reader would read the leftovers)."""
    from tests.conftest import make_backend

    backend = make_backend(backend_name, request, tmp_path)
    url, options = backend.url, backend.storage_options
    config = {"mode": "writer", "out": url, "app_id": "a", "app_index": 1, "versions": [0], "rows": 30,
              "storage_options": options}
    child = run_child(tmp_path / "children", config, script=CHAIN_CHILD, failpoints=f"before_commit={action}")
    if action == "kill":
        assert_sigkilled(child)
    else:
        assert child.returncode == 3 and "FailpointError" in child.result()["error"]
    storage = Storage(url, options)
    prefix = storage.root.rstrip("/") + "/"
    placed = [
        i.path for i in storage.find(storage.root) if i.path.endswith(".parquet") and "/_" not in i.path[len(prefix) :]
    ]
    assert placed, "the call placed its files before failing"
    if backend_name == "local":
        assert spark.read.schema("id long, app long").parquet(url).count() == 0
    assert read_committed(url, storage_options=options).num_rows == 0
    assert storage.exists(storage.join("_spark_metadata"))
    if backend_name != "local":
        assert storage.exists(storage.join("_spark_metadata", STARTED_MARKER))

    result = write_batch(url, writer_rows(1, 0, 30), app_id="a", version=0, storage_options=options)

    assert result.committed and result.log_batch_id == 0
    got = read_committed(url, storage_options=options).column("id").to_pylist()
    assert_same_ids(got, writer_rows(1, 0, 30).column("id").to_pylist(), "after the rerun")
    if backend_name == "local":
        assert_same_ids([r[0] for r in spark.read.parquet(url).select("id").collect()], got, "spark.read.parquet")


def test_existing_dataset_is_still_refused_and_gets_no_log_directory(tmp_path: Path) -> None:
    """The check that an output is not created over a dataset still runs before the log directory is made: a
    refused first write leaves no log directory, so its retry is refused again (not taken for a started output)."""
    out = tmp_path / "out"
    out.mkdir()
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": [1]}), out / "part-00000-existing.snappy.parquet")
    from parquet_sink.errors import ExistingDataError

    for _ in range(2):
        with pytest.raises(ExistingDataError):
            write_batch(str(out), pa.table({"id": [2]}), app_id="a", version=0)
        assert not (out / "_spark_metadata").exists()
    assert write_batch(str(out), pa.table({"id": [2]}), app_id="a", version=0, allow_existing_files=True).committed
    assert read_committed(str(out)).column("id").to_pylist() == [2]


def test_a_writer_killed_mid_file_leaves_no_partial_file_under_a_data_files_name(tmp_path: Path) -> None:
    """write_batch SIGKILLed with a data file begun (failpoint ``file_open``, a second batch of an output): before,
    the file stood under its final name with 0 bytes, and a glob over the output (duckdb's ``**/*.parquet``)
    failed on it ("too small to be a Parquet file"). Now it is written under a hidden in-progress name beside it
    and renamed once whole: globs read exactly the committed rows, ``vacuum`` deletes the leftover, the rerun
    commits once."""
    import duckdb

    out = str(tmp_path / "out")
    first = writer_rows(1, 0, 30)
    write_batch(out, first, app_id="a", version=0, partition_by=["app"])
    config = {"mode": "writer", "out": out, "app_id": "a", "app_index": 1, "versions": [1], "rows": 30,
              "partition_by": ["app"]}
    assert_sigkilled(run_child(tmp_path / "children", config, script=CHAIN_CHILD, failpoints="file_open=kill"))
    left = [p for p in Path(out).rglob("*") if p.name.endswith(".inprogress")]
    assert len(left) == 1 and left[0].name.startswith("."), left
    glob = f"{out}/**/*.parquet"
    assert sorted(duckdb.sql(f"select id from read_parquet('{glob}')").fetchall()) == sorted(
        (i,) for i in first.column("id").to_pylist())

    result = write_batch(out, writer_rows(1, 1, 30), app_id="a", version=1, partition_by=["app"])
    assert result.committed and result.log_batch_id == 1
    expected = first.column("id").to_pylist() + writer_rows(1, 1, 30).column("id").to_pylist()
    assert_same_ids(read_committed(out).column("id").to_pylist(), expected, "after the rerun")
    assert sorted(duckdb.sql(f"select id from read_parquet('{glob}')").fetchall()) == sorted((i,) for i in expected)
    # the killed call's lease ended with the rerun's commit: its leftover is an orphan like any uncommitted file
    removed = vacuum(out, older_than="0s", allow_short_retention=True)
    assert [Path(f.path).name for f in removed.plan.orphans] == [left[0].name] and not left[0].exists()
