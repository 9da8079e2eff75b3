"""write_batch(..., iceberg=...) without Spark: the Iceberg table follows every commit (metadata with the output
or a SQLite catalog), a failed sync is logged and caught up by the next call, bad values of ``iceberg=`` are
ParameterErrors, and what Iceberg cannot hold is refused before the commit (nothing written), by the rule the
Delta mirror's refusal shares (parquet_sink.table_formats)."""

from __future__ import annotations

import datetime as _dt
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import UnsupportedPyArrowTypeException, _pyarrow_to_schema_without_ids
from pyiceberg.table import StaticTable

from parquet_sink import MetadataLog, ParquetSink, committed_files, read_committed, sync_iceberg, write_batch
from parquet_sink import failpoints
from parquet_sink.delta import DeltaRangeError
from parquet_sink.errors import ParameterError
from parquet_sink.iceberg import IcebergRefusalError
from parquet_sink.iceberg.follow import type_problems
from parquet_sink.iceberg.sync import ICEBERG_DIR
from parquet_sink.log.entry import LogEntry
from parquet_sink.table_formats import TableFormatRefusal
from tests.iceberg.readers import assert_mirrors
from tests.iceberg.test_sync import _catalog_properties, _table


@pytest.fixture(autouse=True)
def _polars_plans_through_pyiceberg(monkeypatch):
    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")  # no polars_iceberg plugin here


def _target(kind: str, tmp_path: Path):
    return True if kind == "metadata" else {"catalog": _catalog_properties(tmp_path), "table": "db.events"}


def _load(kind: str, tmp_path: Path, root: Path):
    if kind == "metadata":
        return StaticTable.from_metadata(sync_iceberg(str(root)).metadata_location)
    properties = _catalog_properties(tmp_path)
    return SqlCatalog("c", uri=properties["uri"], warehouse=properties["warehouse"]).load_table("db.events")


@pytest.mark.parametrize("kind", ["metadata", "catalog"])
def test_every_write_batch_keeps_the_table_in_step(tmp_path, kind):
    """After every call (a partitioned output, a column added by a later batch, a replay that commits nothing)
    the table mirrors the latest log batch, one snapshot per batch, each read by pyiceberg and polars as
    read_committed reads it."""
    root = tmp_path / "out"
    for version in range(3):
        result = write_batch(str(root), _table(version, extra=version == 2), app_id="a", version=version,
                             partition_by=["k"], iceberg=_target(kind, tmp_path))
        table = _load(kind, tmp_path, root)
        assert int(table.current_snapshot().summary["parquet-sink.log-batch-id"]) == result.log_batch_id == version
    assert sorted(assert_mirrors(table, root, latest=2)) == [0, 1, 2]
    assert not write_batch(str(root), _table(2, extra=True), app_id="a", version=2, partition_by=["k"],
                           iceberg=_target(kind, tmp_path)).committed
    assert _load(kind, tmp_path, root).metadata_location == table.metadata_location  # in step: nothing committed


def test_a_failed_sync_is_logged_and_the_next_call_catches_up(tmp_path, monkeypatch, caplog):
    """The sync after a commit fails (failpoint iceberg_commit raising): the batch stays committed, a WARNING
    names the command that catches up, and the next write_batch's sync adds the missed batch's snapshot too."""
    root = tmp_path / "out"
    target = _target("catalog", tmp_path)
    target["catalog"]["s3.secret-access-key"] = "hunter2"  # unused by a local table; never logged
    write_batch(str(root), _table(0), app_id="a", version=0, iceberg=target)
    monkeypatch.setattr(failpoints, "_ACTIVE", {"iceberg_commit": ("raise", 1)})
    monkeypatch.setattr(failpoints, "_HITS", {})
    with caplog.at_level(logging.WARNING, "parquet_sink.iceberg.follow"):
        assert write_batch(str(root), _table(1), app_id="a", version=1, iceberg=target).committed
    assert "could not follow" in caplog.text and "parquet-sink iceberg-sync" in caplog.text
    assert "--table db.events" in caplog.text and "s3.secret-access-key=..." in caplog.text
    assert "hunter2" not in caplog.text
    assert read_committed(str(root)).num_rows == 10
    table = _load("catalog", tmp_path, root)
    assert int(table.current_snapshot().summary["parquet-sink.log-batch-id"]) == 0  # behind, never ahead
    write_batch(str(root), _table(2), app_id="a", version=2, iceberg=target)
    assert sorted(assert_mirrors(_load("catalog", tmp_path, root), root, latest=2)) == [0, 1, 2]


@pytest.mark.parametrize("value", [
    "yes", 1, {"catalog": {"type": "sql"}}, {"table": "db.events"}, {"catalog": {}, "table": "db.events"},
    {"catalog": {"type": "sql"}, "table": "events"}, {"catalog": "sqlite:///c.db", "table": "db.events"},
    {"catalog": {"type": "sql"}, "table": "db.events", "other": 1},
])
def test_bad_iceberg_values_are_parameter_errors(tmp_path, value):
    root = tmp_path / "out"
    with pytest.raises(ParameterError, match=r"iceberg"):
        write_batch(str(root), _table(0), app_id="a", version=0, iceberg=value)
    with pytest.raises(ParameterError, match=r"ParquetSink\(.*iceberg"):
        ParquetSink(str(root), iceberg=value)
    assert not root.exists()  # nothing written


# a value of year 10000 (Spark holds it; Iceberg's statistics, as pyiceberg reads them, cannot)
_BEYOND = pa.array([253402300800000000 + 5], pa.timestamp("us", "UTC"))


@pytest.mark.parametrize(("column", "problem"), [
    (pa.array([5], pa.duration("us")), "duration"),
    (pa.array([2**32 - 1], pa.uint32()), "unsigned"),
    (pa.array([{"t": 253402300800000000 + 5}], pa.struct([("t", pa.timestamp("us", "UTC"))])), "0001-01-01"),
    (_BEYOND, "0001-01-01"),
    (pa.nulls(1), "null"),  # committed before, and pyiceberg's reader refused every file of it (format 2)
    (pa.array([{"n": None}], pa.struct([("n", pa.null())])), "null"),
])
def test_what_iceberg_cannot_hold_is_refused_before_the_commit(tmp_path, column, problem):
    """A column Iceberg has no type for, or a date/timestamp outside 0001..9999, to an output that keeps an
    Iceberg table (the writer's iceberg=, or a table a sync made): IcebergRefusalError naming the column, nothing
    committed, no data file left. Before, the batch was committed and every later sync failed on it (an
    OverflowError or pyiceberg's UnsupportedPyArrowTypeException), the table behind for good."""
    root = tmp_path / "out"
    write_batch(str(root), pa.table({"i": [1]}), app_id="a", version=0, iceberg=True)
    before = sorted(p for p in root.rglob("*") if p.is_file() and ICEBERG_DIR not in str(p))
    batch = pa.table({"i": [2], "x": column})
    with pytest.raises(IcebergRefusalError, match=rf"column 'x(\.[tn])?' .*{problem}") as raised:
        write_batch(str(root), batch, app_id="a", version=1, iceberg=True)
    assert isinstance(raised.value, TableFormatRefusal) and raised.value.column in ("x", "x.t", "x.n")
    with pytest.raises(IcebergRefusalError):  # an output that keeps a table: refused without iceberg= too
        write_batch(str(root), batch, app_id="a", version=1)
    assert sorted(p for p in root.rglob("*") if p.is_file() and ICEBERG_DIR not in str(p)) == before
    assert read_committed(str(root)).num_rows == 1
    if problem == "0001-01-01":  # the column itself is Iceberg's: without such a value the batch goes on
        assert write_batch(str(root), pa.table({"i": [3], "x": pa.nulls(1, column.type)}), app_id="a", version=1,
                           iceberg=True).committed
    assert_mirrors(StaticTable.from_metadata(sync_iceberg(str(root)).metadata_location), root)


def test_one_decision_for_both_mirrors(tmp_path):
    """The refusal is the table formats' shared one: an output keeping a Delta log refuses the value as Delta's
    (DeltaRangeError), one keeping both refuses it once, before anything is committed, as either's
    TableFormatRefusal; an output keeping neither commits it."""
    table = pa.table({"i": [1], "t": _BEYOND})
    both = tmp_path / "both"
    with pytest.raises(DeltaRangeError):
        write_batch(str(both), table, app_id="a", version=0, delta_log=True, iceberg=True)
    assert not committed_files(str(both)) and not list(both.rglob("*.parquet"))
    assert write_batch(str(tmp_path / "plain"), table, app_id="a", version=0).committed


def test_the_type_rule_agrees_with_pyiceberg():
    """type_problems needs no pyiceberg import (a writer without it checks too): it refuses what pyiceberg's own
    conversion refuses, and the unsigned 32- and 64-bit integers pyiceberg declares as the signed type of their
    width (values past it unreadable: polars refuses the column)."""
    types = [pa.int8(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64(), pa.float16(), pa.float32(), pa.date32(),
             pa.date64(), pa.time64("us"), pa.time64("ns"), pa.time32("ms"), pa.duration("s"),
             pa.month_day_nano_interval(), pa.decimal128(38, 2), pa.decimal256(20, 2), pa.decimal256(50, 2),
             pa.timestamp("s"), pa.timestamp("us", "UTC"), pa.timestamp("ns"), pa.string(), pa.large_string(),
             pa.string_view(), pa.binary(), pa.binary(3), pa.large_binary(), pa.list_(pa.int8()),
             pa.large_list(pa.int8()), pa.list_(pa.int8(), 3), pa.list_view(pa.int8()),
             pa.map_(pa.string(), pa.int64()), pa.dictionary(pa.int32(), pa.string()),
             pa.dense_union([pa.field("a", pa.int8())]), pa.struct([("a", pa.bool_())]), pa.null()]
    for typ in types:
        try:
            _pyarrow_to_schema_without_ids(pa.schema([("x", typ)]))
            pyiceberg_refuses = False
        except (UnsupportedPyArrowTypeException, ValueError):  # ValueError: null (format 2, as our tables)
            pyiceberg_refuses = True
        lossy = pa.types.is_unsigned_integer(typ) and typ.bit_width > 16
        assert bool(type_problems([pa.field("x", typ)])) == (pyiceberg_refuses or lossy), typ
    nested = pa.struct([("m", pa.map_(pa.string(), pa.list_(pa.duration("s"))))])
    assert [c for c, _ in type_problems([pa.field("s", nested)])] == ["s.m.value.element"]


def test_int96_timestamps_pyiceberg_would_read_wrong_are_refused(tmp_path):
    """pyiceberg reads INT96 timestamps as nanoseconds: a value outside 1677-09-21..2262-04-11 came back as
    another instant (year 1 as 1754), silently. A batch of an output whose files store INT96 (as Spark's
    outputTimestampType=INT96 writes; write_batch then writes INT96 too) holding such a value is refused before
    its commit when the output keeps an Iceberg table; one within the range is committed and read right."""
    root = tmp_path / "out"

    def batch(year: int) -> pa.Table:
        return pa.table({"i": [year], "t": pa.array([_dt.datetime(year, 1, 1, tzinfo=_dt.UTC)], pa.timestamp("us", "UTC"))})

    write_batch(str(root), batch(2000), app_id="a", version=0)
    spark = root / "part-spark-int96.parquet"  # as Spark's writer with outputTimestampType=INT96 writes it
    pq.write_table(batch(2001), spark, use_deprecated_int96_timestamps=True)
    assert MetadataLog(str(root)).add(1, [LogEntry(spark.as_uri(), spark.stat().st_size, False, 0)])
    options = {"app_id": "a", "iceberg": True, "spark_sink_stopped": True}
    write_batch(str(root), batch(2100), version=1, **options)
    with pytest.raises(IcebergRefusalError, match=r"column 't' holds an INT96 timestamp outside 1677-09-21\.\.2262"):
        write_batch(str(root), batch(1600), version=2, **options)
    assert pq.ParquetFile(committed_files(str(root))[-1].path).schema.column(1).physical_type == "INT96"
    assert sorted(read_committed(str(root))["i"].to_pylist()) == [2000, 2001, 2100]
    table = StaticTable.from_metadata(sync_iceberg(str(root)).metadata_location)
    assert sorted(assert_mirrors(table, root, latest=2)) == [0, 1, 2]


def test_a_batch_no_mirror_could_refuse_costs_no_request(tmp_path, monkeypatch):
    """The check before a commit looks for the mirrors' directories only when a batch has a date or timestamp
    column, or a type a mirror lacks: a plain batch to an output without mirrors asks nothing more than before
    (each looked-for directory is one more request per batch on an object store)."""
    from parquet_sink.storage.filesystem import Storage

    root = tmp_path / "out"
    write_batch(str(root), pa.table({"i": [0]}), app_id="a", version=0)
    asked: list[str] = []
    exists = Storage.exists
    monkeypatch.setattr(Storage, "exists", lambda self, path: asked.append(path) or exists(self, path))
    write_batch(str(root), pa.table({"i": [1]}), app_id="a", version=1)
    assert not [p for p in asked if "_delta_log" in p or ".iceberg" in p]
    write_batch(str(root), pa.table({"i": [2], "d": [_dt.date(2024, 1, 1)]}), app_id="a", version=2)
    assert sorted(p.rsplit("/", 1)[-1] for p in asked if "_delta_log" in p or ".iceberg" in p) == [".iceberg", "_delta_log"]


def test_the_command_syncs_into_a_catalog(tmp_path, capsys):
    """`parquet-sink iceberg-sync PATH --catalog-uri ... --catalog-prop ... --table ns.name --json`: the table is
    created in that catalog, the JSON says what the sync did (no property value printed), a second run commits
    nothing."""
    import json

    from parquet_sink.cli.main import main

    root = tmp_path / "out"
    for version in range(2):
        write_batch(str(root), _table(version), app_id="a", version=version, partition_by=["k"])
    properties = _catalog_properties(tmp_path)
    argv = ["iceberg-sync", str(root), "--catalog-uri", properties["uri"], "--catalog-prop", "name=c",
            "--catalog-prop", f"warehouse={properties['warehouse']}", "--table", "db.events", "--json"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    data = json.loads(out)
    assert (data["created"], data["snapshots"], data["log_batch"], data["table"]) == (True, 2, 1, "db.events")
    assert properties["uri"] not in out
    table = _load("catalog", tmp_path, root)
    assert table.metadata_location == data["metadata_location"]
    assert sorted(assert_mirrors(table, root, latest=1)) == [0, 1]
    assert main(argv) == 0 and json.loads(capsys.readouterr().out)["snapshots"] == 0


@pytest.mark.parametrize("kind", ["metadata", "catalog"])
def test_optimize_syncs_the_iceberg_table(tmp_path, kind):
    """optimize brings the Iceberg table in step after its swap (a replace snapshot): the table without catalog
    as the output keeps one (iceberg=None), a catalog's table when named (iceberg=); so does the sink's
    optimize_every thread (BackgroundOptimizer, given the sink's iceberg=). Every snapshot reads read_committed's
    rows. Before, the table stayed at the batch before the swap until the next write's sync."""
    from parquet_sink.iceberg.sync import MARKER
    from parquet_sink.write.rewrite import BackgroundOptimizer, optimize

    root = tmp_path / "out"
    target = _target(kind, tmp_path)
    for version in range(4):
        write_batch(str(root), _table(version), app_id="a", version=version, partition_by=["k"], iceberg=target)
    result = optimize(str(root), iceberg=None if kind == "metadata" else target)
    latest = MetadataLog(str(root)).latest_batch_id()
    assert result.committed and result.iceberg is not None and result.iceberg.log_batch == latest
    table = _load(kind, tmp_path, root)
    assert table.current_snapshot().summary.operation.value == "replace"
    assert int(table.current_snapshot().summary[MARKER]) == latest
    assert sorted(assert_mirrors(table, root, latest=latest)) == list(range(latest + 1))

    for version in range(4, 8):
        write_batch(str(root), _table(version), app_id="a", version=version, partition_by=["k"])
    sink = ParquetSink(str(root), iceberg=target, optimize_every=1)
    assert sink.optimizer._options["iceberg"] == target
    optimizer = BackgroundOptimizer(str(root), None, every=1, iceberg=target)
    assert optimizer.after_batch(0) and optimizer.wait(120) and optimizer.error is None
    assert optimizer.last.committed and optimizer.last.iceberg.log_batch == MetadataLog(str(root)).latest_batch_id()
    assert sorted(assert_mirrors(_load(kind, tmp_path, root), root)) == list(range(optimizer.last.log_batch_id + 1))


def test_optimize_leaves_a_catalog_table_it_is_not_given(tmp_path):
    """Without iceberg=, optimize syncs no catalog table (it has no catalog: the next write's sync catches up),
    nor, with iceberg=False, the table without catalog."""
    from parquet_sink.write.rewrite import optimize

    root = tmp_path / "out"
    for version in range(4):
        write_batch(str(root), _table(version), app_id="a", version=version, partition_by=["k"],
                    iceberg=_target("catalog", tmp_path))
    sync_iceberg(str(root))  # the table without catalog too
    result = optimize(str(root), iceberg=False)
    assert result.committed and result.iceberg is None
    assert _load("catalog", tmp_path, root).current_snapshot().summary["parquet-sink.log-batch-id"] == "3"
    from parquet_sink.iceberg import current_metadata
    from parquet_sink.storage.filesystem import Storage

    metadata = StaticTable.from_metadata(current_metadata(Storage(str(root))))
    assert metadata.current_snapshot().summary["parquet-sink.log-batch-id"] == "3"


def test_the_commands_reach_a_catalog_table(tmp_path, capsys):
    """`parquet-sink optimize` and `vacuum` take the catalog table as `iceberg-sync` does: optimize syncs it after
    the swap, vacuum past the retention expires its snapshots (JSON: the metadata files deleted); one of
    --table and --catalog-uri without the other is a usage error naming both."""
    import json

    from parquet_sink.cli.main import main

    root = tmp_path / "out"
    target = _target("catalog", tmp_path)
    for version in range(4):
        write_batch(str(root), _table(version), app_id="a", version=version, partition_by=["k"], iceberg=target)
    properties = _catalog_properties(tmp_path)
    catalog = ["--catalog-uri", properties["uri"], "--catalog-prop", "name=c",
               "--catalog-prop", f"warehouse={properties['warehouse']}", "--table", "db.events"]
    assert main(["optimize", str(root), *catalog, "--json"]) == 0
    latest = MetadataLog(str(root)).latest_batch_id()
    assert json.loads(capsys.readouterr().out)["iceberg_log_batch"] == latest
    assert main(["vacuum", str(root), "--older-than", "0s", "--allow-short-retention", *catalog, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["files"] and properties["uri"] not in json.dumps(data)
    assert list(assert_mirrors(_load("catalog", tmp_path, root), root, latest=latest)) == [latest]
    assert main(["vacuum", str(root), "--table", "db.events"]) == 2
    assert "--catalog-uri" in capsys.readouterr().err
