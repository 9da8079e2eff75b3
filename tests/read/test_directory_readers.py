"""Readers users point at an output directory by a glob (issue 54, item 6): duckdb's ``read_parquet``, polars'
``scan_parquet`` and Spark's ``spark.read.parquet`` with ``basePath`` (Spark's ``FileStreamSinkSuite``). The globs
docs/design.md calls safe read the data files and nothing of ours (the hidden area, the log and its copies, the Delta
log, the Iceberg tables' metadata), also beside a Spark-path batch killed in staging and its lease; the documented caveats hold as documented: a
``**`` glob also reads the Delta log's checkpoints (names fixed by the protocol) and a killed batch's staged files,
and Spark's globs meet the Delta log's commit files."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pytest

from parquet_sink import committed_files, read_committed, sync_delta_log, sync_iceberg, write_batch
from parquet_sink.storage.filesystem import Storage
from parquet_sink.write.inflight import InFlightBatch


def _output(root: Path, partition_by: list[str], delta: bool, iceberg: bool = True) -> None:
    """Five write_batch commits (compacting every 2: a columnar copy), with a Delta log checkpointed every 2
    versions when ``delta``, and Iceberg tables (kept without a catalog, and in a SQLite catalog beside the
    output: their metadata under the output's hidden area) when ``iceberg``; then a Spark-path batch killed after
    its job: its lease, and a data file in its staging directory where Spark's writer puts it (under the
    partition directories)."""
    catalog = {"type": "sql", "uri": f"sqlite:///{root}.catalog.db", "warehouse": f"file://{root}.warehouse"}
    for version in range(5):
        ids = list(range(10 * version, 10 * version + 3))
        table = pa.table({"id": ids, "id1": [i % 2 for i in ids], "id2": [-(i % 3) for i in ids]})
        write_batch(str(root), table, app_id="a", version=version, partition_by=partition_by, compact_interval=2)
        if delta:
            sync_delta_log(str(root), checkpoint_interval=2)
        if iceberg:
            sync_iceberg(str(root))
            sync_iceberg(str(root), catalog=catalog, table="db.out")
    killed = InFlightBatch.begin(Storage(str(root)), 5, "killed", "q", 5)
    committed = committed_files(str(root))[0]
    staged = Path(killed.staging, committed.relative_path)
    staged.parent.mkdir(parents=True)
    shutil.copyfile(committed.path, staged)


def _committed_ids(root: Path) -> list[int]:
    return sorted(read_committed(str(root)).column("id").to_pylist())


@pytest.mark.parametrize("partition_by", [[], ["id1", "id2"]], ids=["flat", "partitioned"])
def test_duckdb_and_polars_globs(tmp_path, partition_by):
    """The safe globs (``out/*.parquet`` flat, ``out/*=*/**/*.parquet`` partitioned) read exactly the committed
    rows; ``out/**/*.parquet`` reads exactly the caveats besides: the Delta checkpoints and the killed batch's
    staged file."""
    root = tmp_path / "out"
    _output(root, partition_by, delta=True)
    checkpoints = sorted(str(p) for p in (root / "_delta_log").glob("*.checkpoint.parquet"))
    assert checkpoints, "the Delta log was checkpointed"
    safe = f"{root}/*=*/**/*.parquet" if partition_by else f"{root}/*.parquet"
    expected = _committed_ids(root)
    assert sorted(r[0] for r in duckdb.sql(f"select id from read_parquet('{safe}')").fetchall()) == expected
    assert sorted(pl.scan_parquet(safe, hive_partitioning=False).select("id").collect()["id"].to_list()) == expected

    everything = f"{root}/**/*.parquet"
    files = {r[0] for r in duckdb.sql(f"select distinct filename from read_parquet('{everything}', filename=true, union_by_name=true)").fetchall()}
    staged = {str(p) for p in (root / "_exactly_once" / "staging").rglob("*.parquet")}
    assert len(staged) == 1
    assert files == {f.path for f in committed_files(str(root))} | set(checkpoints) | staged


def test_spark_globs_with_base_path(spark, tmp_path):
    """``spark.read.option("basePath", out).parquet(out + "/*/*")`` on an output partitioned by two columns
    (``FileStreamSinkSuite``), and ``out + "/*"`` on a flat one, beside a killed batch's lease and staged file:
    the committed rows. They failed on every output: Spark read the compact interval's record as a Parquet file
    (CANNOT_READ_FILE_FOOTER), and it, a lease or a staging directory made CONFLICTING_DIRECTORY_STRUCTURES (files in
    directories that are not partitions). With a Delta log both globs meet its commit files (the documented
    caveat), and the partition-directory glob ``out/*=*/*=*`` is still safe."""
    flat, partitioned = tmp_path / "flat", tmp_path / "partitioned"
    _output(flat, [], delta=False)
    _output(partitioned, ["id1", "id2"], delta=False)
    for root, glob in ((flat, "/*"), (partitioned, "/*/*")):
        rows = spark.read.option("basePath", str(root)).parquet(str(root) + glob).collect()
        assert sorted(r.id for r in rows) == _committed_ids(root), glob

    sync_delta_log(str(partitioned))
    with pytest.raises(Exception, match="CONFLICTING_DIRECTORY_STRUCTURES"):
        spark.read.option("basePath", str(partitioned)).parquet(str(partitioned) + "/*/*").collect()
    rows = spark.read.option("basePath", str(partitioned)).parquet(str(partitioned) + "/*=*/*=*").collect()
    assert sorted(r.id for r in rows) == _committed_ids(partitioned)
