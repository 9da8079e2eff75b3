"""Per-file statistics in the log (issue 38 item 2): recorded on both writer paths and by write_batch, exact
against the data, carried by compaction into the compact file and its columnar copy, ignored by Spark."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from parquet_sink import MetadataLog, ParquetSink, read_committed, write_batch
from parquet_sink.log.file_stats import MAX_TEXT, decode_stats, encode_stats
from parquet_sink.log.sidecar import decode_sidecar
from tests.helpers.spark_util import run_available_now, write_input_files

UTC = dt.timezone.utc


def _edge_table(offset: int) -> pa.Table:
    return pa.table({
        "i": pa.array([-(2**63), None, 2**63 - 1 - offset], pa.int64()),
        "f": pa.array([float("nan"), -0.0, 0.0], pa.float64()),
        "g": pa.array([float("-inf"), 1.5, None], pa.float32()),
        "s": pa.array(["λ" * (MAX_TEXT + 5), "μ" * (MAX_TEXT + 1), None]),
        "t": pa.array([dt.datetime(1, 1, 1, tzinfo=UTC), None, dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)],
                      pa.timestamp("us", "UTC")),
        "n": pa.array([dt.datetime(2020, 1, 1, 12), dt.datetime(1970, 1, 1), None], pa.timestamp("ms")),
        "d": pa.array([dt.date(1, 1, 1), dt.date(9999, 12, 31), None]),
        "m": pa.array([decimal.Decimal("-999.99"), decimal.Decimal("0.01"), None], pa.decimal128(5, 2)),
        "b": pa.array([True, None, True]),
        "x": pa.array([b"\xff", b"a", None]),
    })


def _entries(out: str) -> list[dict]:
    log = MetadataLog(out, cleanup=False)
    return [json.loads(e.to_json()) for e in log.all_files() if not e.is_dir]  # not the commit records' entries


def _check_exact(out: str, entries: list[dict]) -> None:
    """Every entry's stats against its file's data: the row count, null counts, bounds that are true bounds
    of the non-NaN values (equal to them unless the module docstring says a bound is left out or cut)."""
    for entry in entries:
        path = entry["path"].removeprefix("file://")
        data = pq.read_table(path)
        stats = decode_stats(pa.array([entry["stats"]]), data.schema)
        assert stats.rows.to_pylist() == [data.num_rows]
        for name, bounds in stats.bounds.items():
            column = data.column(name)
            assert bounds.nulls.to_pylist() == [column.null_count], name
            values = pc.drop_null(column)
            if pa.types.is_floating(column.type):
                values = values.filter(pc.invert(pc.is_nan(values)))
            low, high = bounds.low[0], bounds.high[0]
            if len(values) == 0:
                assert not low.is_valid and not high.is_valid
                continue
            true_low, true_high = pc.min(values), pc.max(values)
            if low.is_valid:
                assert pc.less_equal(low, true_low).as_py(), name
                if pa.types.is_string(column.type) and len(true_low.as_py()) > MAX_TEXT:
                    assert low.as_py() == true_low.as_py()[:MAX_TEXT]
                elif not pa.types.is_floating(column.type) or true_low.as_py() != 0:
                    assert low.equals(true_low), name
            if high.is_valid:
                assert pc.greater_equal(high, true_high).as_py(), name
                if not pa.types.is_floating(column.type) or true_high.as_py() != 0:
                    assert high.equals(true_high), name
            if pa.types.is_floating(column.type) and not all(math.isfinite(v) for v in values.to_pylist()):
                continue  # an infinite bound is left out: nothing more to say
            if not (pa.types.is_string(column.type) and len(true_high.as_py()) > MAX_TEXT):
                assert low.is_valid and high.is_valid, name


def test_write_batch_records_exact_stats_that_compaction_carries_into_the_copy(tmp_path):
    out = str(tmp_path / "out")
    for version in range(4):
        write_batch(out, _edge_table(version), app_id="job", version=version, compact_interval=3)
    entries = _entries(out)
    assert len(entries) == 4 and all("stats" in e for e in entries)
    _check_exact(out, entries)
    first = json.loads(entries[0]["stats"])
    assert first["minValues"]["f"] == -0.0 and first["maxValues"]["f"] == 0.0 and "g" not in first["minValues"]
    assert first["minValues"]["s"] == "λ" * MAX_TEXT and "s" not in first["maxValues"]
    assert "x" not in first["minValues"] and first["nullCount"]["x"] == 1
    # batch 2 was compacted: the compact file keeps each entry's stats, and so does its columnar copy
    compact = tmp_path / "out" / "_spark_metadata" / "2.compact"
    lines = [json.loads(line) for line in compact.read_text().splitlines()[1:]]
    assert [line["stats"] for line in lines if not line["isDir"]] == [e["stats"] for e in entries[:3]]
    copy = decode_sidecar((tmp_path / "out" / "_spark_metadata" / "2.compact.columnar").read_bytes(), "2.compact")
    files = copy.table(["stats", "isDir"]).filter(pc.invert(pc.field("isDir")))
    assert files.column("stats").to_pylist() == [e["stats"] for e in entries[:3]]
    assert read_committed(out).num_rows == 12


def test_copy_written_before_stats_is_still_read(tmp_path):
    """A columnar copy without the stats column (an older release) is used, its stats read as null."""
    out = str(tmp_path / "out")
    for version in range(3):
        write_batch(out, _edge_table(version), app_id="job", version=version, compact_interval=3)
    path = tmp_path / "out" / "_spark_metadata" / "2.compact.columnar"
    meta = pq.read_metadata(path).metadata
    older = pq.read_table(path).drop_columns(["stats"]).replace_schema_metadata(meta)
    pq.write_table(older, path, compression="lz4", write_page_checksum=True)
    copy = decode_sidecar(path.read_bytes(), "2.compact")
    files = copy.table(["path", "stats", "isDir"]).filter(pc.invert(pc.field("isDir")))
    assert files.num_rows == 3 and files.column("stats").null_count == 3
    assert read_committed(out).num_rows == 9


@pytest.mark.parametrize("writer", ["spark", "arrow"])
def test_both_writer_paths_record_stats_spark_reads_past(spark, tmp_path, writer):
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    batches = [[{"id": b * 10 + i, "cat": "ab"[i % 2], "v": None if i == 3 else i / 2} for i in range(10)] for b in range(4)]
    write_input_files(src, batches)
    stream = spark.readStream.schema("id long, cat string, v double").option("maxFilesPerTrigger", 1).json(src)
    run_available_now(stream, str(tmp_path / "ckpt"), ParquetSink(out, partition_by=["cat"], compact_interval=3, writer=writer))
    entries = [e for e in _entries(out) if not e["isDir"]]
    assert len(entries) == 8 and all("stats" in e for e in entries)
    _check_exact(out, entries)
    assert sum(json.loads(e["stats"])["numRecords"] for e in entries) == 40
    assert spark.read.parquet(out).count() == 40  # Spark's log reader ignores the key
    assert Path(out, "_spark_metadata", "2.compact.columnar").exists()


def test_compaction_stamps_lines_with_stats_as_to_json_writes_them(tmp_path):
    """A delta's lines with the stats key get batchId column-wise (not re-serialised one by one): each line of
    the compact file is what parsing the delta's line and writing it back gives, whatever follows the key
    (a commit record, a quote or backslash in the stats text, a batchId of the line's own)."""
    from parquet_sink.log.metadata_log import LogEntry

    stats = '{"numRecords":2,"minValues":{"s":"x\\"y\\\\z é"},"maxValues":{"s":"😀"}}'
    log = MetadataLog(str(tmp_path), compact_interval=3)
    for batch in range(2):
        log.add(batch, [
            LogEntry(f"file://{tmp_path}/part-{batch}-0.parquet", 10, False, 1, extra={"stats": stats, "queryId": "q", "commitId": "c"}),
            LogEntry(f"file://{tmp_path}/part-{batch}-1.parquet", 11, False, 2, extra={"stats": stats}),
            LogEntry(f"file://{tmp_path}/part-{batch}-2.parquet", 12, False, 3),
        ])
    delta = tmp_path / "_spark_metadata" / "1"
    delta.write_text(delta.read_text() + '\n{"path":"file:///o/p.parquet","size":1,"isDir":false,"modificationTime":1,'
                     '"blockReplication":1,"blockSize":1,"action":"add","stats":"{}","batchId":1}')
    expected = [
        LogEntry.from_json(line, batch).to_json()
        for batch in range(2)
        for line in (tmp_path / "_spark_metadata" / str(batch)).read_text().splitlines()[1:]
    ]
    log.add(2, [])
    lines = (tmp_path / "_spark_metadata" / "2.compact").read_text().splitlines()[1:]
    assert lines[: len(expected)] == expected and len(expected) == 7
    assert all(',"action":"add","batchId":' in line for line in lines[: len(expected)])


def test_stats_of_many_files_decode_across_parser_blocks():
    """Statistics of 20,000 files (~3 MB of JSON, parsed in blocks on two threads) decode to each file's own
    values, in order; a null and a foreign-typed entry among them stay unknown, never a neighbour's value."""
    n = 20_000
    texts = [
        json.dumps({"numRecords": i, "nullCount": {"v": i % 3}, "minValues": {"v": -i, "s": f"a{i:06d}"},
                    "maxValues": {"v": i, "s": f"z{i:06d}"}, "types": {"v": "int", "s": "string"}})
        for i in range(n)
    ]
    texts[7] = None
    texts[n - 3] = json.dumps({"numRecords": 1, "minValues": {"v": 1}, "maxValues": {"v": 2}, "types": {"v": "float"}})
    decoded = decode_stats(pa.chunked_array([pa.array(texts[:9000]), pa.array(texts[9000:])]),
                           pa.schema([("v", pa.int64()), ("s", pa.string())]))
    expected_rows = [None if i == 7 else 1 if i == n - 3 else i for i in range(n)]
    assert decoded.rows.to_pylist() == expected_rows
    low = decoded.bounds["v"].low.to_pylist()
    assert low == [None if i in (7, n - 3) else -i for i in range(n)]
    assert decoded.bounds["s"].high.to_pylist()[n - 1] == f"z{n - 1:06d}"
    assert decoded.bounds["v"].nulls.to_pylist()[:4] == [0, 1, 2, 0]


def test_dates_spark_stored_in_the_julian_calendar_have_no_bounds(tmp_path):
    """A footer with Spark's LEGACY rebase keys holds dates and timestamps in the hybrid Julian calendar: 1000-01-01
    stored as the day pyarrow reads as 1000-01-06, which Spark reads back as 1000-01-01. The stored value is no
    bound of what Spark reads, so the log's statistics give none (before, the footer's 1000-01-06 was a min above
    every value Spark reads); the data's statistics are of the stored values, and the Delta sync's bound what Spark
    reads (1000-01-01: ``rebase.hybrid_leaf_statistics``; a TimestampNTZ, which Spark never rebases, as stored). A
    file without the keys (CORRECTED, or not Spark's) keeps its bounds; INT96 is rebased only under its own key (or
    Spark before 3.1)."""
    from parquet_sink.delta.actions import file_stats
    from parquet_sink.parquet_read import open_parquet
    from parquet_sink.statistics import data_statistics, file_statistics, hybrid_calendar

    table = pa.table({"d": pa.array([dt.date(1000, 1, 6), None], pa.date32()),
                      "t": pa.array([dt.datetime(1000, 1, 6), None], pa.timestamp("us")),
                      "n": pa.array([3, None], pa.int32())})
    spark_keys = {"org.apache.spark.version": "4.3.0"}
    for keys, hybrid in (({}, (False, False)), (spark_keys, (False, False)),
                         (spark_keys | {"org.apache.spark.legacyDateTime": ""}, (True, False)),
                         (spark_keys | {"org.apache.spark.legacyINT96": ""}, (False, True)),
                         ({"org.apache.spark.version": "2.4.8"}, (True, True))):
        path = tmp_path / f"{len(keys)}-{hybrid}.parquet"
        pq.write_table(table.replace_schema_metadata(keys), path)
        metadata = pq.read_metadata(path)
        assert hybrid_calendar(metadata) == hybrid
        leaves = file_statistics(metadata)
        assert (leaves[("d",)].min is None) == hybrid[0] and (leaves[("t",)].min is None) == hybrid[0]
        assert leaves[("n",)].min.as_py() == 3 and leaves[("d",)].null_count == 1
        with open_parquet(path) as parquet:
            computed = data_statistics(parquet, [("d",), ("t",)])
            assert computed[("d",)].min.as_py() == dt.date(1000, 1, 6) and computed[("t",)].min is not None
            assert computed[("d",)].null_count == 1
            delta = json.loads(file_stats(parquet, table.schema))
        assert delta["minValues"]["d"] == ("1000-01-01" if hybrid[0] else "1000-01-06") and delta["minValues"]["n"] == 3
        assert delta["maxValues"]["t"] == "1000-01-06T00:00:00Z"  # naive: TimestampNTZ, never rebased
        assert ("d" in json.loads(encode_stats(metadata))["minValues"]) != hybrid[0]
