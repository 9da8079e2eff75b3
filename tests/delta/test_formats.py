"""Partition values, statistics and types of our add actions against what delta-rs's own write_deltalake
writes for the same data and partition columns."""

from __future__ import annotations

import datetime as _dt
import decimal
import json
from pathlib import Path

import deltalake
import pyarrow as pa

from parquet_sink import sync_delta_log, write_batch
from parquet_sink.delta.actions import STRING_PREFIX, delta_partition_value


def _data() -> pa.Table:
    at = [_dt.datetime(2024, 1, 1, 1, 2, 3, 456789, tzinfo=_dt.UTC), _dt.datetime(2025, 6, 1, tzinfo=_dt.UTC), None]
    return pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "small": pa.array([-5, 7, None], pa.int32()),
            "v": [1.5, -2.25, None],
            "price": pa.array([decimal.Decimal("1.25"), decimal.Decimal("-3.50"), None], pa.decimal128(9, 2)),
            "name": ["b", "a", None],
            "long": ["z" * 40, "y" * 40, None],
            "flag": [True, False, None],
            "day": [_dt.date(2024, 1, 1), _dt.date(2024, 2, 29), None],
            "at": pa.array(at, pa.timestamp("us", "UTC")),
            "s": pa.array([{"a": 1}, {"a": 4}, None], pa.struct([("a", pa.int64())])),
            "pk": ["x y", "c:d", None],
            "pd": [_dt.date(2024, 1, 1), _dt.date(2024, 1, 1), None],
            "pn": pa.array([1, 2, None], pa.int32()),
        }
    )


def _adds(root: Path) -> dict[tuple, dict]:
    """The add actions of every commit, keyed by their partition values."""
    adds = {}
    for log in sorted((root / "_delta_log").glob("*.json")):
        for line in log.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                add = action["add"]
                adds[tuple(sorted(add["partitionValues"].items(), key=lambda kv: kv[0]))] = add
    return adds


def test_partition_values_stats_and_types_match_write_deltalake(tmp_path):
    data = _data()
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    partition_by = ["pk", "pd", "pn"]
    for row in range(3):  # one row per file, as delta-rs writes one file per partition
        write_batch(str(ours), data.slice(row, 1), app_id="a", version=row, partition_by=partition_by)
    sync_delta_log(str(ours))
    deltalake.write_deltalake(str(theirs), data, partition_by=partition_by)

    ours_adds, their_adds = _adds(ours), _adds(theirs)
    assert set(ours_adds) == set(their_adds)
    assert ("pk", None) in next(k for k in ours_adds if ("pn", None) in k)  # nulls as None
    for key, their in their_adds.items():
        mine = ours_adds[key]
        assert mine["partitionValues"] == their["partitionValues"]
        ours_stats, their_stats = json.loads(mine["stats"]), json.loads(their["stats"])
        assert ours_stats["numRecords"] == their_stats["numRecords"] == 1
        assert ours_stats["nullCount"] == their_stats["nullCount"]
        for bound in ("minValues", "maxValues"):
            # delta-rs keeps whole long strings; we keep a 32-character prefix as min and no max (Delta on
            # Spark's rule: a cut max would be no upper bound)
            theirs_cut = {k: v for k, v in their_stats[bound].items() if k != "long"}
            assert {k: v for k, v in ours_stats[bound].items() if k != "long"} == theirs_cut
        if their_stats["minValues"].get("long"):
            assert ours_stats["minValues"]["long"] == their_stats["minValues"]["long"][:STRING_PREFIX]
            assert "long" not in ours_stats["maxValues"]
    assert deltalake.DeltaTable(str(ours)).schema() == deltalake.DeltaTable(str(theirs)).schema()
    mine = deltalake.DeltaTable(str(ours)).to_pyarrow_table().sort_by("id")
    assert mine.equals(deltalake.DeltaTable(str(theirs)).to_pyarrow_table().sort_by("id").select(mine.column_names))


def test_delta_partition_value_rules():
    utc = _dt.UTC
    assert delta_partition_value(_dt.datetime(2024, 1, 1, tzinfo=utc), pa.timestamp("us", "UTC")) == "2024-01-01 00:00:00"
    new_york = _dt.datetime(2024, 1, 1, 7, tzinfo=_dt.timezone(_dt.timedelta(hours=-5)))
    assert delta_partition_value(new_york, pa.timestamp("us", "America/New_York")) == "2024-01-01 12:00:00"
    assert delta_partition_value(float("nan"), pa.float64()) == "NaN"
    assert delta_partition_value(-0.0, pa.float64()) == "-0.0"
    assert delta_partition_value(decimal.Decimal(10**20), pa.decimal128(21, 0)) == "100000000000000000000"
    assert delta_partition_value(None, pa.string()) is None
