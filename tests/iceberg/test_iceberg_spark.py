"""The issue's "done when", with Spark: a foreachBatch stream with ``ParquetSink(..., iceberg={catalog, table})``
is SIGKILLed inside the sync after a commit (its driver, JVM and workers), restarted from its checkpoint, run to
its end, optimized (which syncs the table) and vacuumed past the retention (without iceberg=: the catalog's
snapshots and their files kept; with it: expired, the files only they read deleted); the table reads, through
pyiceberg (the catalog's table and its metadata file) and polars, the rows read_committed reads, at every
snapshot, each input row once; a table kept without a catalog (the metadata alone, with the output) reads the
same, its snapshots before the vacuum's retention expired; Spark's own reader ignores the Iceberg metadata."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import StaticTable

from parquet_sink import MetadataLog, committed_files, optimize, sync_iceberg, vacuum
from tests.helpers.crash_util import (
    assert_ok, assert_same_ids, assert_sigkilled, committed_ids, run_child, run_in_process, spark_ids, write_inputs,
)
from tests.iceberg.readers import assert_mirrors
from tests.iceberg.test_sync import _catalog_properties


def test_stream_killed_in_its_sync_restarted_optimized_and_vacuumed(spark, tmp_path, monkeypatch):
    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")
    properties = _catalog_properties(tmp_path)
    out = tmp_path / "out"
    ids = write_inputs(tmp_path / "in", range(6), 10)
    config = {
        "input": str(tmp_path / "in"), "out": str(out), "checkpoint": str(tmp_path / "ckpt"),
        "max_files_per_trigger": 1,
        "sink": {"compact_interval": 3,
                 "iceberg": {"catalog": properties, "table": "db.events"}},
    }
    # the third batch's sync dies before its catalog commit: log batch 2 committed, the table at batch 1
    child = run_child(tmp_path, config, failpoints="iceberg_commit=kill@3")
    assert_sigkilled(child)
    catalog = SqlCatalog("c", uri=properties["uri"], warehouse=properties["warehouse"])
    assert MetadataLog(str(out)).latest_batch_id() == 2
    assert_mirrors(catalog.load_table("db.events"), out, latest=1)

    assert_ok(run_in_process(spark, tmp_path, config))  # the restart: batch 3's sync catches batch 2 up
    streamed = {f.path for f in committed_files(str(out))}
    optimized = optimize(str(out), target_file_size="1MB", iceberg=config["sink"]["iceberg"])  # syncs the table
    assert optimized.committed
    result = optimized.iceberg
    latest = MetadataLog(str(out)).latest_batch_id()  # the optimize's swap, after its empty padding batches
    assert (result.snapshots, result.files_removed, result.files_added) == (latest - 5, 6, 1)
    table = catalog.load_table("db.events")
    by_batch = assert_mirrors(table, out, latest=latest)
    assert sorted(by_batch) == list(range(latest + 1))  # one per log batch: the stream's and the optimize's
    assert_mirrors(StaticTable.from_metadata(table.metadata_location), out, latest=latest)
    assert_same_ids(table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist(), ids, "pyiceberg")
    assert_same_ids(committed_ids(out), ids, "read_committed")

    alone = StaticTable.from_metadata(sync_iceberg(str(out)).metadata_location)  # the metadata with the output
    assert sorted(assert_mirrors(alone, out, latest=latest)) == sorted(by_batch)

    # past the retention, without iceberg=: the table without catalog keeps its current snapshot only, the
    # catalog's table (which vacuum cannot expire without its catalog) every snapshot, so the files the optimize
    # replaced stay for it
    vacuumed = vacuum(str(out), _dt.timedelta(0), allow_short_retention=True)
    assert {i.path for i in vacuumed.plan.iceberg_kept} == streamed and not vacuumed.plan.orphans
    assert all(Path(path).exists() for path in streamed)
    table = catalog.load_table("db.events")
    assert sorted(assert_mirrors(table, out, latest=latest)) == sorted(by_batch)
    assert sorted(assert_mirrors(StaticTable.from_metadata(table.metadata_location), out, latest=latest)) == \
        sorted(by_batch)
    alone = StaticTable.from_metadata(sync_iceberg(str(out)).metadata_location)
    assert list(assert_mirrors(alone, out, latest=latest)) == [latest]
    assert_same_ids(alone.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist(), ids, "pyiceberg")

    # with iceberg= the catalog's table is expired too: the files the optimize replaced are deleted, every
    # snapshot left (the current one) reads the same rows through the catalog, its metadata file and polars
    vacuumed = vacuum(str(out), _dt.timedelta(0), allow_short_retention=True, iceberg=config["sink"]["iceberg"])
    assert {i.path for i in vacuumed.plan.orphans} == streamed and not any(Path(p).exists() for p in streamed)
    table = catalog.load_table("db.events")
    assert list(assert_mirrors(table, out, latest=latest)) == [latest]
    assert list(assert_mirrors(StaticTable.from_metadata(table.metadata_location), out, latest=latest)) == [latest]
    assert_same_ids(table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist(), ids, "pyiceberg")
    assert_same_ids(committed_ids(out), ids, "read_committed")
    assert_same_ids(spark_ids(spark, out), ids, "spark.read.parquet")  # the Iceberg metadata is hidden from Spark
