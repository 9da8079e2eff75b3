"""Spark's Parquet filter pushdown over files our pyarrow writers wrote (``write_batch``, the sink's Arrow path,
``optimize``) and the sink's Spark writer path wrote: parquet-mr's ``StatisticsFilter`` and ``DictionaryFilter`` skip row groups by their footers, in
Spark SQL's float order (NaN greater than every number, equal to itself; -0.0 equal to 0.0). pyarrow leaves NaN
out of a float column's min/max, so a footer that says ``max 1.0`` over [NaN, 1.0] made ``x > 5`` skip the NaN
row (issue 54, item 1), and parquet-mr's dictionary filter tells -0.0 from 0.0 (``x = -0.0`` skipped a row group
of 0.0, found by the generator here; the sink's Spark writer path, parquet-mr's own files, did so too: found by
the output model, tests/maintenance/test_output_model.py). The oracle is Spark itself with pushdown off, over the same files: with it on, every
predicate returns exactly the same rows, and ``read_committed`` reads the same rows as ``spark.read.parquet``.
"""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given
from hypothesis import strategies as st

from parquet_sink import ParquetSink, committed_files, optimize, read_committed, write_batch
from tests.helpers.filters import fixed_or_fuzzed

NAN = float("nan")
_VALUES = [NAN, 0.0, -0.0, 1.0, -1.0, 5.0, math.inf, -math.inf, None]
_LITERALS = ["double('NaN')", "0.0D", "-0.0D", "1.0D", "5.0D", "double('inf')", "double('-inf')"]
_OPS = [">", ">=", "<", "<=", "=", "!=", "<=>"]
_PUSHDOWN = "spark.sql.parquet.filterPushdown"


def _predicates(draw: st.DrawFn, column: str, typ: str) -> list[str]:
    chosen = []
    for _ in range(draw(st.integers(2, 5))):
        literal = draw(st.sampled_from(_LITERALS))
        atom = draw(st.sampled_from([f"{column} {op} CAST({literal} AS {typ})" for op in _OPS]
                                    + [f"isnan({column})", f"{column} IS NULL"]))
        chosen.append(f"NOT ({atom})" if draw(st.booleans()) else atom)
    return chosen


def _rows(spark, out: str, predicate: str | None, pushdown: bool) -> list[tuple]:
    spark.conf.set(_PUSHDOWN, str(pushdown).lower())
    try:
        frame = spark.read.parquet(out)
        if predicate is not None:
            frame = frame.where(predicate)
        return sorted(tuple(r) for r in frame.select("id").collect())
    finally:
        spark.conf.unset(_PUSHDOWN)


def _check(spark, out: str, predicates: list[str]) -> None:
    for predicate in predicates:
        expected = _rows(spark, out, predicate, pushdown=False)
        assert _rows(spark, out, predicate, pushdown=True) == expected, predicate
    ours = read_committed(out)
    assert sorted(ours.column("id").to_pylist()) == [r[0] for r in _rows(spark, out, None, pushdown=True)]


def test_nan_is_never_pruned_away_from_spark(spark, tmp_path):
    """The issue's shape: [NaN, 1.0] by ``write_batch``, then ``optimize`` of it: ``x > 5``, ``x != 1.0`` and
    ``x = NaN`` each find the NaN row with pushdown on (0 rows before: the footer's max was 1.0)."""
    out = str(tmp_path / "out")
    for version, values in enumerate([[NAN, 1.0], [1.0, 1.0]]):
        write_batch(out, pa.table({"id": [2 * version, 2 * version + 1], "x": values}), app_id="a", version=version)
    # Spark SQL's answers (NaN above every number, equal to itself), as Spark without pushdown gives them (the
    # generator below checks that oracle itself): the NaN row is id 0
    expected = {"x > 5": [(0,)], "x != 1.0": [(0,)], "x = double('NaN')": [(0,)], "NOT (x <= 1.0)": [(0,)]}
    for state in ("written", "optimized"):
        if state == "optimized":
            optimize(out)
        assert {p: _rows(spark, out, p, pushdown=True) for p in expected} == expected, state
        assert sorted(read_committed(out).column("id").to_pylist()) == [0, 1, 2, 3]


def test_the_spark_writer_path_writes_no_float_dictionary_for_the_zero_filter_to_misread(spark, tmp_path):
    """The output model's shape: a sink batch on Spark's writer path (parquet-mr) with [0.0, inf, 0.0] in a double
    column was dictionary-encoded, and ``x = -0.0D`` with pushdown on skipped its row group (parquet-mr's
    ``DictionaryFilter`` compares by ``Double.equals``; Spark SQL's 0.0 = -0.0 is true): 0 rows instead of 2. The
    writer path now writes float columns without a dictionary, as the Arrow path writes a column holding a zero."""
    out = str(tmp_path / "out")
    frame = spark.createDataFrame([(19, 0.0, 0.0, "a"), (20, math.inf, 0.0, "a"), (21, 0.0, 0.0, "a")],
                                  "id long, x double, y float, s string")
    ParquetSink(out, writer="spark")(frame.coalesce(1), 0)
    (file,) = committed_files(out)
    footer = pq.read_metadata(file.path).row_group(0)
    assert [footer.column(i).has_dictionary_page for i in range(1, 4)] == [False, False, True]  # s keeps its own
    for predicate, expected in {"x = -0.0D": [(19,), (21,)], "x = 0.0D": [(19,), (21,)], "y = CAST(-0.0 AS FLOAT)": [(19,), (20,), (21,)]}.items():
        assert _rows(spark, out, predicate, pushdown=True) == expected == _rows(spark, out, predicate, pushdown=False)


def test_pushdown_over_our_float_files_matches_spark_without_it(spark, tmp_path_factory, fuzz_minutes):
    """A generator: float and double columns of NaN, +-0.0, +-inf, nulls and numbers in files written by
    ``write_batch`` (one or several batches, partitioned or not), optionally ``optimize``-d; comparisons with
    each of those literals, their negations, ``isnan`` and ``IS NULL``: Spark with pushdown finds the rows Spark
    without it finds."""

    @given(st.data())
    @fixed_or_fuzzed(fuzz_minutes, examples=3, fuzz_examples=60)
    def run(data: st.DataObject) -> None:
        typ = data.draw(st.sampled_from(["DOUBLE", "FLOAT"]))
        arrow = pa.float64() if typ == "DOUBLE" else pa.float32()
        batches = data.draw(st.lists(st.lists(st.sampled_from(_VALUES), min_size=1, max_size=6), min_size=1,
                                     max_size=3))
        partitioned = data.draw(st.booleans())
        out = str(tmp_path_factory.mktemp("pushdown") / "out")
        ids = 0
        for version, values in enumerate(batches):
            table = pa.table({"id": pa.array(range(ids, ids + len(values)), pa.int64()), "x": pa.array(values, arrow),
                              "p": pa.array([i % 2 for i in range(len(values))], pa.int32())})
            ids += len(values)
            write_batch(out, table, app_id="a", version=version, partition_by=["p"] if partitioned else None)
        predicates = _predicates(data.draw, "x", typ)
        _check(spark, out, predicates)
        if data.draw(st.booleans()):
            optimize(out)
            _check(spark, out, predicates)

    run()


def test_a_nan_or_a_zero_arriving_into_an_open_file_starts_a_file_of_its_own(tmp_path):
    """One task's rows for one file arriving in three tables, NaN only in the second, a zero in the third: the file
    open with float statistics is closed, the NaN rows go into a file whose footer has no bounds for ``x``, the
    zero's into one without a dictionary for ``x`` (whose statistics bound the zero as -0.0 and 0.0 do)."""
    from parquet_sink.storage.filesystem import Storage
    from parquet_sink.write.parquet_files import WriteSpec, write_rows

    spec = WriteSpec(Storage(str(tmp_path / "out")), (), "snappy", None)
    tables = [pa.table({"x": [1.0, 2.0]}), pa.table({"x": [NAN, 3.0]}), pa.table({"x": [-0.0, 4.0]})]
    statuses = write_rows(spec, tables)
    assert [s.num_rows for s in statuses] == [2, 2, 2]
    bounds, dictionary = [], []
    for status in statuses:
        column = pq.read_metadata(status.path).row_group(0).column(0)
        stats = column.statistics
        bounds.append((stats.min, stats.max) if stats is not None and stats.has_min_max else None)
        dictionary.append(column.has_dictionary_page)
    assert bounds == [(1.0, 2.0), None, (-0.0, 4.0)]
    assert dictionary == [True, True, False]  # a zero: no dictionary for parquet-mr's DictionaryFilter to misread
    assert [pq.read_table(s.path).column("x").to_pylist()[1] for s in statuses] == [2.0, 3.0, 4.0]
