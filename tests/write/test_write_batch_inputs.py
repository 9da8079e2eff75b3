"""``write_batch`` with the data users really pass (pandas categoricals, polars Enum and Null columns, pyarrow
dictionaries, nested nanosecond timestamps, ``date64``, slices of bigger tables), with pyarrow and Spark as the
oracles: what ``spark.read.parquet`` and ``read_committed`` read back equals what was passed, and what Spark
cannot read or Parquet cannot hold is a typed error naming the column, the write and the output, with nothing
written."""

from __future__ import annotations

import datetime as dt
import decimal
import re
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parquet_sink import committed_files, errors, read_committed, write_batch
from parquet_sink.write import appends
from parquet_sink.write.appends import data_fingerprint
from tests.helpers.strategies import ATOMIC, nested_kinds

UTC = dt.timezone.utc


def _directories(out: str) -> list[str]:
    return sorted(p.rsplit("/", 1)[0] for p in committed_files(out).table.column("relative_path").to_pylist())


def _rows(table: pa.Table) -> list[str]:
    names = sorted(table.column_names)
    return sorted(repr(tuple(row[c] for c in names)) for row in table.to_pylist())


@pytest.mark.parametrize(
    "encoded",
    [
        pd.DataFrame({"p": pd.Categorical(["b", "a", "b", None]), "v": [1, 2, 3, 4]}),
        pl.DataFrame({"p": ["x", "y", "x", None], "v": [1, 2, 3, 4]}, schema={"p": pl.Enum(["y", "x"]), "v": pl.Int64}),
        pl.DataFrame({"p": ["x", "y", "x", None], "v": [1, 2, 3, 4]}, schema={"p": pl.Categorical, "v": pl.Int64}),
        pa.table({"p": pa.array([-0.0, 0.0, 1e20, None]).dictionary_encode(), "v": [1, 2, 3, 4]}),
        pa.table({"p": pa.array([True, False, None, True]).dictionary_encode(), "v": [1, 2, 3, 4]}),
        pa.table({"p": pa.nulls(3), "v": [1, 2, 3]}),
        pl.DataFrame({"p": [None, None], "v": [1, 2]}),
    ],
    ids=["pandas-categorical", "polars-enum", "polars-categorical", "dictionary-double", "dictionary-bool",
         "arrow-null", "polars-null"],
)
def test_an_encoded_or_all_null_partition_column_is_partitioned_by_its_values(tmp_path, encoded):
    """A dictionary-encoded partition column (a pandas categorical, a polars Enum) and a column of Arrow's null type
    (polars' Null: a column with no value yet) failed with pyarrow's ArrowNotImplementedError. The oracle: the same
    rows with the column decoded, whose directories the differential tests hold to Spark's."""
    table = pa.Table.from_pandas(encoded, preserve_index=False) if isinstance(encoded, pd.DataFrame) else (
        encoded.to_arrow() if isinstance(encoded, pl.DataFrame) else encoded)
    typ = table.schema.field("p").type
    plain = table.set_column(0, "p", table.column("p").cast(typ.value_type if pa.types.is_dictionary(typ) else pa.string()))
    out, oracle = str(tmp_path / "out"), str(tmp_path / "oracle")
    write_batch(out, encoded, app_id="a", version=0, partition_by=["p"])
    write_batch(oracle, plain, app_id="a", version=0, partition_by=["p"])
    assert _directories(out) == _directories(oracle)
    assert _rows(read_committed(out)) == _rows(read_committed(oracle))
    assert sorted(read_committed(out).column("v").to_pylist()) == sorted(table.column("v").to_pylist())


def test_nested_nanosecond_timestamps_are_stored_as_microseconds(spark, tmp_path):
    """Top-level nanosecond timestamps were stored as microseconds, nested ones (a struct field, a list element, a
    map value) as nanoseconds, which `spark.read.parquet` refuses for the whole output ("Illegal Parquet type: INT64
    (TIMESTAMP(NANOS,false))"). One rule at every depth now: stored as microseconds, refused when that loses data."""
    out = str(tmp_path / "out")
    when = dt.datetime(2026, 11, 27, 9, 30, 0, 123456)
    ns = pa.timestamp("ns")
    table = pa.table({
        "id": [1, 2],
        "s": pa.array([{"t": when}, {"t": None}], pa.struct([("t", ns)])),
        "l": pa.array([[when], []], pa.list_(ns)),
        "m": pa.array([[("k", when)], None], pa.map_(pa.string(), ns)),
    })
    write_batch(out, table, app_id="a", version=0)
    got = read_committed(out)
    assert got.schema.field("s").type == pa.struct([("t", pa.timestamp("us"))])
    assert got.schema.field("l").type.value_type == pa.timestamp("us")
    assert got.schema.field("m").type.item_type == pa.timestamp("us")
    assert got.sort_by("id").to_pylist() == [
        {"id": 1, "s": {"t": when}, "l": [when], "m": [("k", when)]}, {"id": 2, "s": {"t": None}, "l": [], "m": None}
    ]
    rows = sorted(spark.read.parquet(out).collect(), key=lambda r: r.id)
    assert [(r.id, r.s.t, r.l, r.m) for r in rows] == [(1, when, [when], {"k": when}), (2, None, [], None)]

    exact = pa.table({"id": [3], "s": pa.array([{"t": 1}], pa.struct([("t", ns)]))})
    with pytest.raises(errors.SchemaMismatchError, match=(
        rf"version 1 of app 'a' to {re.escape(out)}: column 's' holds timestamps with nanoseconds.*Nothing was written"
    )):
        write_batch(out, exact, app_id="a", version=1)
    assert read_committed(out).num_rows == 2


def test_columns_spark_cannot_read_are_refused_before_anything_is_written(spark, tmp_path):
    """float16, time-of-day, UUID and decimals over 38 digits were written as given: one such batch made
    `spark.read.parquet` fail on the whole output ("Illegal Parquet type", "The data type TIME is not supported",
    "Decimal precision 40 exceeds max precision 38"). Each is now a SchemaMismatchError naming the column (nested
    ones by their path), the write and the output, with what to cast it to; nothing is written."""
    unreadable = {
        "f16": pa.array(np.array([1.5], np.float16)),
        "t": pa.array([dt.time(1, 2, 3)], pa.time64("us")),
        "t32": pa.array([dt.time(1)], pa.time32("ms")),
        "u": pa.array([b"0" * 16], pa.uuid()),
        "d": pa.array([decimal.Decimal("1.5")], pa.decimal256(40, 1)),
        "s": pa.array([{"x": dt.time(1)}], pa.struct([("x", pa.time64("ns"))])),
    }
    for name, values in unreadable.items():  # the oracle: Spark refuses a file pyarrow writes with the column
        alone = tmp_path / f"oracle-{name}"
        alone.mkdir()
        pq.write_table(pa.table({name: values}), alone / "part.parquet")
        with pytest.raises(Exception, match="Illegal Parquet type|TIME is not supported|exceeds max precision"):
            spark.read.parquet(str(alone)).collect()
    out = str(tmp_path / "out")
    write_batch(out, pa.table({"id": [0]}), app_id="a", version=0)
    for name, values in unreadable.items():
        table = pa.table({"id": [1], name: values})
        with pytest.raises(errors.SchemaMismatchError, match=(
            rf"^version 1 of app 'a' to {re.escape(out)}: Spark cannot read column {name + '.x' if name == 's' else name!r} "
            r"\(.*cast it to .*Nothing was written"
        )):
            write_batch(out, table, app_id="a", version=1)
    assert len(list(Path(out).glob("*.parquet"))) == 1
    assert [r.id for r in spark.read.parquet(out).collect()] == [0]
    assert write_batch(out, pl.DataFrame({"id": [1], "t": [dt.time(1)]}).with_columns(pl.col("t").cast(pl.String)),
                       app_id="a", version=1).committed


@pytest.mark.parametrize("column", [
    pa.UnionArray.from_sparse(pa.array([0, 1], pa.int8()), [pa.array([1, 2]), pa.array(["a", "b"])]),
    pa.RunEndEncodedArray.from_arrays([2], ["x"]),
    pa.array([pa.MonthDayNano([1, 2, 3]), None], pa.month_day_nano_interval()),
], ids=["union", "run-end-encoded", "interval"])
def test_columns_parquet_cannot_hold_are_a_typed_error_and_nothing_is_written(tmp_path, column):
    """pyarrow's Parquet writer has no type for these: its ArrowNotImplementedError came out of write_batch after
    the output's directories (and a half-written file) were created."""
    out = tmp_path / "out"
    with pytest.raises(errors.SchemaMismatchError, match=(
        rf"^version 0 of app 'a' to {re.escape(str(out))}: Parquet cannot hold column 'c' \({re.escape(str(column.type))}"
    )):
        write_batch(str(out), pa.table({"id": [1, 2], "c": column}), app_id="a", version=0)
    assert not out.exists()


def test_date64_is_stored_as_a_date(tmp_path):
    """A ``date64`` column was stored with its Arrow type, so the next write of the same column was refused
    ("changed type from date32[day] to date64[ms]": the footer reads back as date32) and polars read the files as
    datetimes. Stored as ``date32``, Spark's date; a date64 that is not a whole day is refused."""
    out = str(tmp_path / "out")
    day = 86_400_000
    for version in range(2):
        write_batch(out, pa.table({"d": pa.array([day * (version + 1), None], pa.date64())}), app_id="a", version=version)
    assert read_committed(out).column("d").to_pylist() == [dt.date(1970, 1, 2), None, dt.date(1970, 1, 3), None]
    assert pl.read_parquet(committed_files(out).paths().to_pylist()).schema["d"] == pl.Date
    with pytest.raises(errors.SchemaMismatchError, match="column 'd' holds date64 values that are not whole days"):
        write_batch(out, pa.table({"d": pa.array([day + 1], pa.date64())}), app_id="a", version=2)


def test_a_series_is_a_typed_error(tmp_path):
    """A pandas Series (``df["col"]`` where ``df[["col"]]`` was meant) raised AttributeError from pyarrow."""
    out = str(tmp_path / "out")
    for series in (pd.Series([1, 2], name="x"), pl.Series("x", [1, 2])):
        with pytest.raises(errors.ParameterError, match=r"cannot write a Series \(one column .*pass a pyarrow Table"):
            write_batch(out, series, app_id="a", version=0)


def test_a_retry_of_the_same_rows_is_one_however_they_are_sliced(tmp_path):
    """The fingerprint hashed the Arrow IPC encoding of each window as it lay in memory, and a slice's encoding
    holds the buffers of the table it was cut from: a retry of the same ten rows cut from a source that had grown
    meanwhile (or built anew instead of cut) was refused as other data (StaleVersionError), and so was a retry of
    a string column over 65,536 rows chunked otherwise (a window cut from one chunk kept its string offsets into
    the whole chunk). Fingerprints of tables of one window without slices are unchanged, so versions committed
    before still compare."""
    fresh = pa.table({"n": [1, 2], "s": ["a", None], "b": [True, False]})
    assert data_fingerprint(fresh) == "acd03fd1eaa2908ee139a07aa4ac52a7"  # as every earlier release computed it
    source = pa.table({"id": pa.array(range(16), pa.int64()), "ok": [i % 3 == 0 for i in range(16)],
                       "v": [None if i % 4 == 0 else str(i) for i in range(16)]})
    grown = pa.concat_tables([source, source]).combine_chunks()
    out = str(tmp_path / "out")
    assert write_batch(out, source.slice(0, 10), app_id="a", version=0).committed
    for retry in (grown.slice(0, 10), pa.Table.from_pylist(source.slice(0, 10).to_pylist(), schema=source.schema),
                  pa.concat_tables([source.slice(0, 3), grown.slice(3, 7)])):
        assert write_batch(out, retry, app_id="a", version=0).committed is False
    assert write_batch(out, grown.slice(3, 10), app_id="a", version=1).committed
    assert write_batch(out, pa.concat_tables([grown.slice(3, 5), source.slice(8, 5)]), app_id="a", version=1).committed is False
    assert sorted(read_committed(out).column("id").to_pylist()) == sorted([*range(10), *range(3, 13)])

    many = pa.table({"id": pa.array(range(70_000), pa.int64()), "ok": [i % 2 == 0 for i in range(70_000)],
                     "v": [str(i) for i in range(70_000)]})
    assert write_batch(out, many, app_id="a", version=2).committed
    assert write_batch(out, pa.Table.from_batches(many.to_batches(max_chunksize=50_000)), app_id="a", version=2).committed is False
    assert read_committed(out).num_rows == 20 + 70_000


@st.composite
def _laid_out(draw: st.DrawFn) -> tuple[pa.Table, pa.Table]:
    """A table of values at their edges (atomic and nested kinds, nulls), and the same rows laid out otherwise:
    cut from a bigger table (rows before and after them), in chunks of drawn sizes."""
    kinds = draw(st.lists(st.sampled_from(ATOMIC) | nested_kinds(), min_size=1, max_size=3))
    schema = pa.schema([(f"c{i}", k.arrow) for i, k in enumerate(kinds)])
    row = st.fixed_dictionaries({f"c{i}": st.none() | k.values for i, k in enumerate(kinds)})
    before, rows, after = (draw(st.lists(row, min_size=low, max_size=12)) for low in (0, 1, 0))
    fresh = pa.Table.from_pylist(rows, schema=schema)
    parent = pa.Table.from_pylist(before + rows + after, schema=schema)
    cuts = sorted(draw(st.lists(st.integers(0, len(rows)), max_size=3)))
    pieces = [parent.slice(len(before) + a, b - a) for a, b in zip([0, *cuts], [*cuts, len(rows)])]
    return fresh, pa.concat_tables(pieces)


@settings(max_examples=150, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(_laid_out(), st.sampled_from([1, 3, 8, 65536]))
def test_the_fingerprint_is_the_rows_however_they_lie_in_memory(case, window):
    """The property behind the retry above, over every kind of value, with windows of a few rows (so that cuts
    fall inside and across them, as they do at 65,536 rows)."""
    fresh, laid_out = case
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(appends, "_FINGERPRINT_ROWS", window)
        assert data_fingerprint(laid_out) == data_fingerprint(fresh)


def test_a_polars_object_column_is_a_typed_error(tmp_path):
    """A polars Object column reaches Arrow as each object's memory address (``fixed_size_binary[8]``): written and
    committed as such, where polars' own ``write_parquet`` refuses it."""
    out = tmp_path / "out"
    frame = pl.DataFrame({"id": [1], "o": [object()]}, schema={"id": pl.Int64, "o": pl.Object})
    with pytest.raises(errors.ParameterError, match=r"columns \['o'\] hold Python objects \(polars' Object\)"):
        write_batch(str(out), frame, app_id="a", version=0)
    assert not out.exists()


_ZONES = st.sampled_from([None, None, "UTC", "Europe/Paris", "America/New_York"])  # None: a naive batch
_PLACES = st.sampled_from(["top", "struct", "list"])


def _timestamps(moments: list[dt.datetime], zone: str | None, place: str) -> pa.Table:
    """``moments`` (UTC instants) as a batch's column ``ts``: naive (their UTC wall clock) or zoned, at the top, in
    a struct or in a list."""
    typ = pa.timestamp("us", zone)
    values = pa.array([m.replace(tzinfo=None) for m in moments], pa.timestamp("us")).cast(typ)
    column = {"top": values, "struct": pa.StructArray.from_arrays([values], ["t"]),
              "list": pa.array([[m] for m in values.to_pylist()], pa.list_(typ))}[place]
    return pa.table({"id": pa.array(range(len(moments)), pa.int64()), "ts": column})


def _leaf_instants(values: list) -> list[dt.datetime]:
    """The instants of ``ts`` values (a timestamp, a struct's ``t`` as a Row or dict, a list's elements), in UTC; a
    naive value is its UTC wall clock (Spark hands instants back naive, in the session's zone: UTC in the tests)."""
    leaves = []
    for value in values:
        leaves += value if isinstance(value, list) else [value["t"] if isinstance(value, dict) else getattr(value, "t", value)]
    return sorted(v.replace(tzinfo=UTC) if v.tzinfo is None else v.astimezone(UTC) for v in leaves)


def _leaf_type(typ):
    """The timestamp type inside a ``ts`` column's type (Spark's or Arrow's): itself, a struct's field, a list's element."""
    if isinstance(typ, pa.DataType):
        return _leaf_type(typ.field(0).type if pa.types.is_struct(typ) else typ.value_type) if typ.num_fields else typ
    fields = getattr(typ, "fields", None)  # a Spark struct
    return _leaf_type(fields[0].dataType if fields else getattr(typ, "elementType", typ)) if fields or hasattr(
        typ, "elementType") else typ


@settings(max_examples=16, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(zones=st.lists(_ZONES, min_size=2, max_size=4), place=_PLACES, spark_first=st.booleans())
def test_naive_and_zoned_timestamps_keep_the_outputs_spark_type(spark, tmp_path_factory, zones, place, spark_first):
    """Spark reads a zoned timestamp as an instant (TIMESTAMP, as its INT96) and a naive one as TIMESTAMP_NTZ, and
    takes an output's type from one of its files: write_batch let naive and zoned batches into one output, which
    Spark then read as either type by the order of its files, and read_committed in another. The first batch decides:
    after instants, a naive batch's values are those instants in UTC (as read_committed reads Spark's INT96) and are
    stored zoned, or as INT96 after a file of Spark's writer (``spark_first``: so that read_committed, which takes a
    column's type from the first and the newest file, reads one type); after naive ones, a zoned batch is a
    SchemaMismatchError naming the column, nothing committed. Oracle: spark.read.parquet, one type for every row, the
    instants written."""
    from parquet_sink.log.metadata_log import LogEntry, MetadataLog

    out = str(tmp_path_factory.mktemp("zones") / "out")
    moment = dt.datetime(2024, 3, 31, 1, 30, tzinfo=UTC)
    written: list[dt.datetime] = []
    if spark_first:  # a batch of Spark's writer: its instants as INT96, committed without a record (Spark's sink)
        moments = [moment - dt.timedelta(hours=1)]
        spark_file = Path(out) / "part-00000-spark.c000.snappy.parquet"
        spark_file.parent.mkdir(parents=True)
        pq.write_table(_timestamps(moments, None, place).replace_schema_metadata({b"org.apache.spark.version": b"4.0.0"}),
                       spark_file, use_deprecated_int96_timestamps=True)
        assert MetadataLog(out).add(0, [LogEntry(spark_file.as_uri(), spark_file.stat().st_size, False, 1)])
        written += moments
    naive_kind = not spark_first and zones[0] is None
    for version, zone in enumerate(zones):
        moments = [moment + dt.timedelta(hours=version, microseconds=k) for k in range(2)]
        batch = _timestamps(moments, zone, place)
        if naive_kind and zone is not None:
            with pytest.raises(errors.SchemaMismatchError, match="'ts'.*TIMESTAMP_NTZ.*naive"):
                write_batch(out, batch, app_id="a", version=version, spark_sink_stopped=True)
            continue
        # after a batch as Spark's sink commits it, whose query (there is none) is stopped for good
        assert write_batch(out, batch, app_id="a", version=version, spark_sink_stopped=True).committed
        written += moments
    read = spark.read.parquet(out)
    assert type(_leaf_type(read.schema["ts"].dataType)).__name__ == ("TimestampNTZType" if naive_kind else "TimestampType")
    assert _leaf_instants([row.ts for row in read.collect()]) == sorted(written)
    ours = read_committed(out)
    assert _leaf_instants(ours.column("ts").to_pylist()) == sorted(written)
    assert (_leaf_type(ours.schema.field("ts").type).tz is None) == (naive_kind or spark_first)
    if spark_first:  # every file as Spark's writer stores instants
        physical = {pq.ParquetFile(f.path).schema.column(1).physical_type for f in committed_files(out)}
        assert physical == {"INT96"}, physical


@pytest.mark.parametrize("place", ["top", "struct", "list"])
@pytest.mark.parametrize("zone", ["UTC", "America/New_York"])
def test_a_naive_batch_that_loses_a_race_to_instants_is_stored_as_instants(spark, tmp_path, monkeypatch, place, zone):
    """Two writers start on an empty output, one with a naive batch, one zoned; the zoned one commits first. The
    naive one, appended after it, would have been stored as those instants in UTC: losing the race, it was a
    SchemaMismatchError instead (its files, written naive, did not fit the winner's). It is now written again as
    instants and committed. Oracle: spark.read.parquet reads one TimestampType column with every instant."""
    from parquet_sink.log.metadata_log import MetadataLog

    out = str(tmp_path / "out")
    moment = dt.datetime(2024, 3, 31, 1, 30, tzinfo=UTC)
    first, second = [moment + dt.timedelta(hours=1)], [moment]
    real_add, raced = MetadataLog.add, []

    def add(self, batch_id, entries):
        if not raced:  # the winner commits log batch 0 between the loser's write and its commit
            raced.append(None)
            raced[0] = write_batch(out, _timestamps(first, zone, place), app_id="winner", version=0)
        return real_add(self, batch_id, entries)

    monkeypatch.setattr(MetadataLog, "add", add)
    result = write_batch(out, _timestamps(second, None, place), app_id="loser", version=0)
    assert raced[0].log_batch_id == 0 and result.committed and result.log_batch_id == 1 and result.conflicts == 1
    read = spark.read.parquet(out)
    assert type(_leaf_type(read.schema["ts"].dataType)).__name__ == "TimestampType"
    assert _leaf_instants([row.ts for row in read.collect()]) == sorted(first + second)
    assert _leaf_instants(read_committed(out).column("ts").to_pylist()) == sorted(first + second)
