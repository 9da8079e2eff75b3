"""sync_iceberg on outputs Spark's own file sink wrote (its delta and compact log files, without commit records or
batch ids in the compact files): each Iceberg snapshot reads what read_committed reads as of its batch, and the
current one what spark.read.parquet reads."""

from __future__ import annotations

from pathlib import Path

from pyiceberg.table import StaticTable

from parquet_sink import read_committed, sync_iceberg
from parquet_sink.iceberg.sync import MARKER
from tests.helpers.spark_util import spark_sink_batch

SESSION_INTERVAL = "spark.sql.streaming.fileSink.log.compactInterval"


def _ids(table) -> list[tuple]:
    return sorted(zip(table.column("id").to_pylist(), table.column("k").to_pylist()), key=repr)


def test_spark_sink_outputs_sync_and_read_the_same_rows(spark, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    spark.conf.set(SESSION_INTERVAL, "2")
    try:
        for batch in range(4):
            rows = [(batch * 10 + i, ["a", "b c", None][i % 3]) for i in range(3)]
            spark_sink_batch(spark, spark.createDataFrame(rows, "id long, k string"), out, batch, partition_by=["k"])
            if batch == 0:  # a sync before the first compaction (batch 1), then one catching up across two
                sync_iceberg(out)
    finally:
        spark.conf.unset(SESSION_INTERVAL)
    assert (Path(out) / "_spark_metadata" / "3.compact").exists()
    result = sync_iceberg(out)
    assert result.log_batch == 3 and result.previous_log_batch == 0
    table = StaticTable.from_metadata(result.metadata_location)
    snapshots = {int(s.summary[MARKER]): s.snapshot_id for s in table.metadata.snapshots}
    assert sorted(snapshots) == list(range(4))
    for batch, snapshot_id in snapshots.items():
        expected = read_committed(out, as_of_batch=batch)
        assert expected.num_rows == 3 * (batch + 1)
        assert _ids(table.scan(snapshot_id=snapshot_id).to_arrow()) == _ids(expected)
    spark_rows = [(r["id"], r["k"]) for r in spark.read.parquet(out).collect()]
    assert _ids(table.scan().to_arrow()) == sorted(spark_rows, key=repr)
    assert sync_iceberg(out).snapshots == 0
