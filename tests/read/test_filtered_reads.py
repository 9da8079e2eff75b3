"""Filtered reads and counts (issue 38 item 3): ``read_committed(filter=...)`` skips files by the log's
statistics and partition values before opening them and returns what pyarrow's filter over the unfiltered
read returns; ``count_committed`` counts from the log's row counts."""

from __future__ import annotations

import datetime as dt
import os
import re
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from hypothesis import given
from hypothesis import strategies as st

from parquet_sink import committed_files, count_committed, errors, read_committed, write_batch
from tests.helpers.filters import FilterCase, assert_filters_agree, filter_cases, filters, fixed_or_fuzzed
from tests.helpers.strategies import ATOMIC


def _rows(table: pa.Table) -> list[str]:
    """The rows as a multiset, NaN equal to NaN and -0.0 apart from 0.0 (as repr tells them)."""
    names = sorted(table.column_names)
    return sorted(repr(tuple(row[c] for c in names)) for row in table.to_pylist())


def _written(case: FilterCase, root: Path) -> str:
    out = str(root / "out")
    for version, table in enumerate(case.tables()):
        write_batch(out, table, app_id="job", version=version, partition_by=case.partitions,
                    max_records_per_file=case.max_records_per_file, compact_interval=3)
    return out


def check_filters(case: FilterCase, root: Path, chosen: list[ds.Expression], columns: list[str] | None) -> None:
    out = _written(case, root)
    full = read_committed(out)
    assert count_committed(out) == full.num_rows
    assert_filters_agree(out, full, chosen, columns)


def test_filtered_reads_equal_pyarrows_filter(tmp_path_factory, fuzz_minutes: float) -> None:
    """Random outputs and filters (fixed seed, a few examples; ``--fuzz-minutes`` for a long random search)."""
    config = fixed_or_fuzzed(fuzz_minutes, 40, 200)

    @config
    @given(st.data())
    def run(data: st.DataObject) -> None:
        case = data.draw(filter_cases())
        chosen = data.draw(st.lists(filters(case), min_size=4, max_size=12))
        columns = data.draw(st.none() | st.just(["id"]))
        check_filters(case, tmp_path_factory.mktemp("filters"), chosen, columns)

    deadline = time.monotonic() + 60 * fuzz_minutes
    run()
    while time.monotonic() < deadline:
        run()


def _files_output(tmp_path: Path, files: int = 12) -> str:
    out = str(tmp_path / "out")
    for version in range(files):
        table = pa.table({"n": pa.array(range(version * 10, version * 10 + 10), pa.int64()),
                          "f": [float("nan")] + [version + 0.5] * 9,
                          "day": [dt.date(2024, 1, 1 + version % 3)] * 10})
        write_batch(out, table, app_id="job", version=version, partition_by=["day"], compact_interval=5)
    return out


def test_filtered_read_opens_only_the_files_that_may_match(tmp_path):
    """Every file the statistics rule out is deleted: the filtered read and the count still answer (a read
    that opened one of them would fail with MissingDataFileError)."""
    out = _files_output(tmp_path)
    full = read_committed(out)
    files = committed_files(out)
    keep = {files[0].path, files[len(files) - 1].path}  # the reader takes the schema from the first and last file
    for f in files:
        if f.path not in keep and f.batch_id != 4:  # batch 4 holds n 40..49 and f 4.5
            os.remove(f.path)
    for expression in [(ds.field("n") >= 40) & (ds.field("n") < 50), ds.field("n") == 45,
                       ds.field("n").isin([41, 49]), (ds.field("f") > 4.0) & (ds.field("f") < 5.0)]:
        assert _rows(read_committed(out, filter=expression)) == _rows(full.filter(expression))
        assert count_committed(out, filter=expression) == full.filter(expression).num_rows
    # NaN is in no bound: a negated comparison keeps every file's NaN row, so it must open them all
    with pytest.raises(Exception, match="missing"):
        read_committed(out, filter=~(ds.field("f") < 100.0))


def test_count_needs_no_footer(tmp_path):
    out = _files_output(tmp_path)
    rows = read_committed(out).num_rows
    files = committed_files(out)
    first, last = files[0].path, files[len(files) - 1].path
    originals = {p: Path(p).read_bytes() for p in (first, last)}
    for f in files:
        Path(f.path).write_bytes(b"not parquet")  # any footer read would fail
    assert count_committed(out) == rows == 120
    for path, data in originals.items():  # a filter's types come from the first and the last file's schema
        Path(path).write_bytes(data)
    assert count_committed(out, filter=ds.field("n") >= 0) == 120  # every row matches: from the stats alone
    assert count_committed(out, filter=ds.field("day") == dt.date(2024, 1, 2)) == 40  # partition values decide
    assert count_committed(out, as_of_batch=3) == 40


def test_regression_filters(tmp_path):
    """Shapes the evaluator must not prune: NaN against negations, null literals, is_null on values, -0.0."""
    double = next(kind for kind in ATOMIC if kind.name == "double")
    case = FilterCase(
        {"c0": double},
        [], [[{"id": 0, "c0": float("nan")}, {"id": 1, "c0": -0.0}], [{"id": 2, "c0": None}, {"id": 3, "c0": 0.0}]], 2,
    )
    chosen = [~(ds.field("c0") < 1.0), ds.field("c0") != 0.0, ds.field("c0").is_null(nan_is_null=True),
              ds.field("c0") == -0.0, ~(ds.field("c0") == pa.scalar(None, pa.float64())),
              (ds.field("c0") > 0.0).is_null(), ds.field("c0").is_valid()]
    check_filters(case, tmp_path, chosen, None)


def test_filter_of_another_kind_is_a_parameter_error(tmp_path):
    out = _files_output(tmp_path, files=1)
    for call in (read_committed, count_committed):
        with pytest.raises(errors.ParameterError, match="not a pyarrow.dataset expression"):
            call(out, filter="n > 3")


def test_regression_casts_and_value_sets(tmp_path):
    """Shapes that once skipped files holding matching rows: ``isin`` with a value set ``is_in`` casts to the column's
    type, losing what that type cannot hold (0.1 on a float32 column, a datetime on a date column, a float on a
    decimal); a zoned timestamp cast to its local date (America/Sitka stepped back a day in 1867); a cast that wraps
    out-of-range times around (``allow_time_overflow``). One row per file, so a wrong skip loses the row."""
    import decimal

    import pyarrow.compute as pc

    from tests.helpers.filters import FILTER_KINDS

    kinds = {k.name: k for k in FILTER_KINDS}
    utc = dt.timezone.utc
    case = FilterCase(
        {"f": kinds["float"], "d": kinds["date"], "n": kinds["decimal(5,0)"], "t": kinds["timestamp_sitka"],
         "u": kinds["timestamp_ntz"]},
        [],
        [[{"id": 0, "f": 0.1, "d": dt.date(2000, 1, 1), "n": decimal.Decimal(1), "t": dt.datetime(1867, 10, 19, 0, tzinfo=utc),
           "u": dt.datetime(1970, 1, 1)}],
         [{"id": 1, "f": 5.0, "d": dt.date(2001, 1, 1), "n": decimal.Decimal(7), "t": dt.datetime(1867, 10, 19, 1, tzinfo=utc),
           "u": dt.datetime(9999, 1, 1)}]],
        1,
    )
    wrapping = pc.CastOptions(pa.timestamp("ns"), allow_time_overflow=True)
    chosen = [
        ds.field("f").isin([0.1]),
        ds.field("d").isin(pa.array([dt.datetime(2000, 1, 1, 5)], pa.timestamp("us"))),
        ds.field("n").isin([1.0000000001]),
        ds.field("n").isin([7]),  # an exact cast: still skips the other file
        ds.field("t").cast(pa.date32()) == dt.date(1867, 10, 19),
        ds.field("t").cast(pa.date32()) == dt.date(1867, 10, 18),
        ds.field("u").cast(options=wrapping) == pa.scalar(0, pa.timestamp("ns")),
    ]
    check_filters(case, tmp_path, chosen + [~f for f in chosen], None)


def test_a_filter_names_columns_the_data_read_has(tmp_path):
    """A filter on a column the output lacks (or lacked as of the batch read), or naming a column by its position,
    is a ParameterError saying so, not pyarrow's; columns asked for twice come back twice, filtered or not."""
    import pyarrow.compute as pc

    out = str(tmp_path / "out")
    write_batch(out, pa.table({"n": [1, 5], "st": [{"a": 1}, {"a": 2}]}), app_id="job", version=0)
    write_batch(out, pa.table({"n": [7], "st": [{"a": 3}], "late": [1]}), app_id="job", version=1)
    for read in (read_committed, count_committed):
        with pytest.raises(errors.ParameterError, match=r"reads \['nope'\], which .* columns are \['n', 'st', 'late'\]"):
            read(out, filter=ds.field("nope") == 1)
        with pytest.raises(errors.ParameterError, match=r"reads \['nope'\]"):
            read(out, filter=ds.field("nope", "a") == 1)
        with pytest.raises(errors.ParameterError, match=r"reads \['late'\], which .* columns are \['n', 'st'\]"):
            read(out, filter=ds.field("late") == 1, as_of_batch=0)
        for positional in (pc.field(0) == 1, pc.field(("st", 0)) == 2):
            with pytest.raises(errors.ParameterError, match="by its position"):
                read(out, filter=positional)
    assert count_committed(out, filter=ds.field("late") == 1) == 1
    nested = read_committed(out, filter=ds.field("st", "a") >= 2, columns=["n", "n"])
    assert nested.column_names == ["n", "n"] and sorted(nested.column(1).to_pylist()) == [5, 7]
    twice = read_committed(out, filter=ds.field("n") > 1, columns=["n", "st", "n"])
    assert twice.column_names == ["n", "st", "n"] and sorted(twice.column(0).to_pylist()) == [5, 7]


def test_regression_timestamps_of_two_units(tmp_path):
    """An output whose timestamp column is milliseconds in its first and last files and microseconds in another
    (Spark's TIMESTAMP_MILLIS setting changed between batches: the schema rule takes them as one type) reads in
    microseconds, Spark's precision, and the millisecond files' bounds still skip them (the file of 2000 is
    deleted: a read that opened it would fail). Before, every read raised pyarrow's ArrowInvalid ("Casting from
    timestamp[us, tz=UTC] to timestamp[ms, tz=UTC] would lose data")."""
    utc = dt.timezone.utc
    out = str(tmp_path / "out")
    values = [(dt.datetime(1990, 1, 1, tzinfo=utc), "ms"), (dt.datetime(2000, 1, 1, tzinfo=utc), "ms"),
              (dt.datetime(2020, 1, 1, 0, 0, 0, 1, tzinfo=utc), "us"), (None, "ms"),
              (dt.datetime(2030, 1, 1, tzinfo=utc), "s")]
    for version, (value, unit) in enumerate(values):
        table = pa.table({"id": [version], "t": pa.array([value], pa.timestamp(unit, "UTC"))})
        write_batch(out, table, app_id="job", version=version, compact_interval=3)
    full = read_committed(out)
    assert full.schema.field("t").type == pa.timestamp("us", "UTC")
    assert full.sort_by("id").column("t").to_pylist() == [v for v, _ in values]
    later = pa.scalar(dt.datetime(2010, 1, 1, tzinfo=utc), pa.timestamp("us", "UTC"))
    chosen = [ds.field("t") > later, ds.field("t") <= later, ds.field("t") == pa.scalar(values[2][0]),
              ds.field("t").is_null(), ~(ds.field("t") < later), ds.field("t").cast(pa.timestamp("ms", "UTC")) > later]
    assert_filters_agree(out, full, chosen, None)
    os.remove(next(f.path for f in committed_files(out) if f.batch_id == 1))
    for expression in (ds.field("t") > later, ds.field("t") < pa.scalar(dt.datetime(1995, 1, 1, tzinfo=utc))):
        assert _rows(read_committed(out, filter=expression)) == _rows(full.filter(expression))
        assert count_committed(out, filter=expression) == full.filter(expression).num_rows


def test_a_refused_filter_names_the_call_and_its_output_once(tmp_path):
    """A filter's refusal is named by the call and its output (errors.names_output); the checks also began with
    ``reading <output>:``, so the output was named twice (``read_committed('/o'): reading /o: filter=...``)."""
    out = _files_output(tmp_path, files=1)
    refused = {
        "filter='n > 3' is a str": "n > 3",
        "filter .* reads \\['nope'\\]": ds.field("nope") > 3,
        "cannot evaluate filter": ds.field("n") > "x",
    }
    for call in (read_committed, count_committed):
        for message, filter in refused.items():
            with pytest.raises(errors.ParameterError, match=rf"^{call.__name__}\({re.escape(repr(out))}\): .*{message}") as raised:
                call(out, filter=filter)
            assert str(raised.value).count(out) == 1, str(raised.value)


def test_partition_filters_are_decided_per_directory_not_per_file(tmp_path, monkeypatch) -> None:
    """Issue 58 item 4: a filter on a partition column is decided once per distinct partition directory (8 here),
    and only the files of the directories it keeps have their statistics decoded (5 of 40). Before, the filter was
    evaluated over every file's partition values and every file's statistics were decoded: planning 1 file among
    10,000 one-file partitions took 4x as long as picking 1,000 files among 10."""
    from parquet_sink.read import reader

    out = str(tmp_path / "out")
    ids = pa.array(range(80), pa.int64())
    table = pa.table({"id": ids, "p": pa.compute.divide(ids, 10)})  # 8 directories of 10 rows
    write_batch(out, table, app_id="job", version=0, partition_by=["p"], max_records_per_file=2)
    assert len(committed_files(out)) == 40
    evaluated, decoded = [], []

    def counted_verdicts(filter, stats, partitions):
        evaluated.append(len(stats.rows))
        return file_verdicts(filter, stats, partitions)

    def counted_decode(stats, schema):
        decoded.append(len(stats))
        return decode_stats(stats, schema)

    file_verdicts, decode_stats = reader.file_verdicts, reader.decode_stats
    monkeypatch.setattr(reader, "file_verdicts", counted_verdicts)
    monkeypatch.setattr(reader, "decode_stats", counted_decode)
    chosen = (ds.field("p") == 3) & (ds.field("id") >= 32)
    assert sorted(read_committed(out, filter=chosen).column("id").to_pylist()) == list(range(32, 40))
    assert evaluated == [8, 5] and decoded == [5]  # the directories, then the files of the one kept
    evaluated.clear(), decoded.clear()
    assert count_committed(out, filter=ds.field("p") == 3) == 10
    assert evaluated == [8, 5] and decoded == [5]
