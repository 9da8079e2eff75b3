"""What every Delta test checks: the Delta log lists exactly the committed files, and each Delta reader
(delta-rs to Arrow and to a pyarrow dataset, polars ``read_delta``/``scan_delta``, duckdb over delta-rs's
dataset) returns exactly ``read_committed``'s rows with the same types, in its own type system."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import unquote

import deltalake
import duckdb
import polars as pl
import pyarrow as pa

from parquet_sink import MetadataLog, committed_files, read_committed
from parquet_sink.delta.actions import delta_schema
from parquet_sink.log.entry import LogEntry
from parquet_sink.storage.filesystem import Storage
from parquet_sink.write.parquet_files import WriteSpec, write_rows

DAY_MS = 86_400_000


def spark_style_batch(log: MetadataLog, table: pa.Table, partition_by: tuple[str, ...], old: bool) -> int:
    """Commit ``table`` as the next batch of ``log`` the way Spark's own sink logs one (no commit record),
    its entries logged 30 days ago when ``old`` (a compaction with retention then drops them); its batch id."""
    storage: Storage = log.storage
    latest = log.latest_batch_id() if storage.exists(storage.root) else None
    batch = 0 if latest is None else latest + 1
    statuses = write_rows(WriteSpec(storage, partition_by, "snappy", None), [table])
    mtime = int(time.time() * 1000) - (30 * DAY_MS if old else 0)
    assert log.add(batch, [LogEntry(storage.to_uri(s.path), s.size, False, mtime) for s in statuses])
    return batch


def _key(row: tuple) -> tuple:
    return tuple((v is None, str(v)) for v in row)


def rows(table: pa.Table, columns: list[str]) -> list[tuple]:
    """The rows of ``table`` as tuples in ``columns`` order, sorted (every reader orders files its own way)."""
    return sorted(zip(*(table.column(c).to_pylist() for c in columns)), key=_key) if table.num_rows else []


def delta_files(out: str) -> set[str]:
    """The files the latest Delta version lists, relative to the root and decoded."""
    actions = pa.table(deltalake.DeltaTable(out).get_add_actions(flatten=False))
    return set(map(unquote, actions.column("path").to_pylist()))


def assert_delta_matches(out: str, time_zone: str = "UTC", **options: Any) -> pa.Table:
    """Delta files == committed files; every Delta reader == ``read_committed`` (rows and types). Types: as
    read_committed's, but Delta's: timestamps are UTC (``timestamp``), an all-null partition column a string.
    ``time_zone``: the writer's, for timestamp partition directories (polars' own reader is then left out: it
    reads partition values from directory names, not from the Delta log)."""
    assert delta_files(out) == {f.relative_path for f in committed_files(out, **options)}
    expected = read_committed(out, time_zone=time_zone, **options)
    table = deltalake.DeltaTable(out)
    if not expected.num_columns:  # nothing committed (retention dropped every file): no schema to compare
        assert table.to_pyarrow_table().num_rows == 0 and pl.read_delta(out).height == 0
        return expected
    columns = expected.column_names
    want_types = [(f.name, f.type) for f in delta_schema(expected.schema)]
    want = rows(expected.cast(delta_schema(expected.schema)), columns)

    arrow = table.to_pyarrow_table()
    assert [(f.name, f.type) for f in arrow.schema] == want_types
    assert rows(arrow, columns) == want
    dataset = table.to_pyarrow_dataset()
    assert [(f.name, f.type) for f in dataset.schema] == want_types
    assert rows(dataset.to_table(), columns) == want

    expected_pl = pl.from_arrow(expected.cast(delta_schema(expected.schema)))
    frames = [pl.read_delta(out, use_pyarrow=True), pl.scan_delta(out, use_pyarrow=True).collect()]
    if time_zone == "UTC":  # polars' own reader takes partition values from the directory names (docs/delta.md)
        frames += [pl.read_delta(out), pl.scan_delta(out).collect()]
    for frame in frames:
        assert frame.schema == expected_pl.schema
        assert rows(frame.to_arrow(), columns) == rows(expected_pl.to_arrow(), columns)

    duck = duckdb.connect()
    duck.register("delta_dataset", dataset)
    duck.register("committed", expected.cast(delta_schema(expected.schema)))
    on_delta = duck.sql("select * from delta_dataset")
    on_committed = duck.sql("select * from committed")
    assert on_delta.types == on_committed.types
    assert sorted(on_delta.fetchall(), key=_key) == sorted(on_committed.fetchall(), key=_key)
    assert duck.execute("select count(*) from delta_dataset").fetchall()[0][0] == expected.num_rows
    return expected


def data_commits(out: str) -> list[dict[str, Any]]:
    """The Delta versions that add or remove files: the history without the creation's second version, which
    records the session time zone as a table property (delta-rs takes none at creation)."""
    return [h for h in deltalake.DeltaTable(out).history() if h["operation"] != "SET TBLPROPERTIES"]
