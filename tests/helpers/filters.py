"""Hypothesis strategies of the filtered-read differential: an output written in several files (random
schema, values at their edges, partition columns) and random ``pyarrow.dataset`` filters over its columns
(comparisons with literals of the column's type and of other types, ``isin``, ``is_null``/``is_valid``,
casts, ``&``/``|``/``~``), the literals drawn from the column's values and from the data itself."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from tests.helpers.strategies import ATOMIC, DATA_ONLY, Kind, partition_values

_NAIVE = st.one_of(
    st.sampled_from([dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999), dt.datetime(1970, 1, 1)]),
    st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)),
)
_NS_TZ = st.datetimes(
    min_value=dt.datetime(1678, 1, 1), max_value=dt.datetime(2261, 12, 31), timezones=st.just(dt.timezone.utc)
)
# Alaska's local date stepped back a day on 1867-10-18 (LMT +14:58 -> -9:01): a zoned timestamp's date is not ordered
_SITKA = st.sampled_from([dt.datetime(1867, 10, 19, h, tzinfo=dt.timezone.utc) for h in (0, 1, 9, 10)]) | _NS_TZ
# Besides Spark's types: a timestamp without time zone, zoned ones in ns and around a zone's step back, a large
# string, an unsigned int.
FILTER_KINDS = [k for k in ATOMIC + DATA_ONLY if k.name not in ("binary", "any binary")] + [
    Kind("timestamp_ntz", pa.timestamp("us"), _NAIVE, partitionable=False),
    Kind("timestamp_ns_ny", pa.timestamp("ns", "America/New_York"), _NS_TZ, partitionable=False),
    Kind("timestamp_sitka", pa.timestamp("us", "America/Sitka"), _SITKA, partitionable=False),
    Kind("large string", pa.large_string(), st.text(max_size=80), partitionable=False),
    Kind("uint32", pa.uint32(), st.sampled_from([0, 2**32 - 1]) | st.integers(0, 2**32 - 1), partitionable=False),
]
# Partition columns as users pass them too: dictionary-encoded (a pandas categorical, a polars Enum)
_PARTITION_KINDS = [k for k in ATOMIC if k.partitionable and k.name not in ("binary", "float", "double")] + [
    Kind(f"categorical {k.name}", pa.dictionary(pa.int32(), k.arrow), k.values)
    for k in ATOMIC if k.name in ("string", "long")
]
_CASTS = {  # column type family -> targets of a cast in a filter
    "int": [pa.float64(), pa.int64(), pa.decimal128(38, 2), pa.string()],  # to string: out of order
    "float": [pa.float64(), pa.float32()],
    "decimal": [pa.float64()],
    "date": [pa.timestamp("s"), pa.string()],
    "timestamp": [pa.date32(), pa.timestamp("ms", "UTC"), (pa.timestamp("ns"), "allow_time_overflow")],  # (type, an unsafe option)
    "string": [pa.large_string()],
}


def _family(typ: pa.DataType) -> str:
    for name, check in (("int", pa.types.is_integer), ("float", pa.types.is_floating), ("decimal", pa.types.is_decimal),
                        ("date", pa.types.is_date), ("timestamp", pa.types.is_timestamp),
                        ("string", lambda t: pa.types.is_string(t) or pa.types.is_large_string(t))):
        if check(typ):
            return name
    return "other"


@dataclass(frozen=True)
class FilterCase:
    """An output's batches (each a table written by one ``write_batch``), its partition columns, and how
    many rows a file holds at most."""

    kinds: dict[str, Kind]
    partitions: list[str]
    batches: list[list[dict]] = field(repr=False)
    max_records_per_file: int

    @property
    def schema(self) -> pa.Schema:
        return pa.schema({"id": pa.int64()} | {c: k.arrow for c, k in self.kinds.items()})

    def tables(self) -> list[pa.Table]:
        return [pa.Table.from_pylist(rows, schema=self.schema) for rows in self.batches]

    def __repr__(self) -> str:
        return (f"FilterCase(kinds={ {c: k.name for c, k in self.kinds.items()} }, partitions={self.partitions}, "
                f"max_records_per_file={self.max_records_per_file}, batches={self.batches!r})")


def _edges(kind: Kind) -> st.SearchStrategy:
    """The values at the edges of a column's type: NaN and signed zeros, the smallest and largest integers."""
    typ = kind.arrow
    if pa.types.is_floating(typ):
        return st.sampled_from([float("nan"), -0.0, 0.0, float("inf"), float("-inf")])
    if pa.types.is_integer(typ):
        info = (typ.bit_width, pa.types.is_signed_integer(typ))
        low, high = (-(2 ** (info[0] - 1)), 2 ** (info[0] - 1) - 1) if info[1] else (0, 2 ** info[0] - 1)
        return st.sampled_from([low, high, 0])
    return kind.values


@st.composite
def filter_cases(draw: st.DrawFn) -> FilterCase:
    """2-5 batches of 0-6 rows over 1-4 columns (0-1 of them a partition column)."""
    floats = [k for k in FILTER_KINDS if pa.types.is_floating(k.arrow)]  # NaN and signed zeros: drawn more often
    data_kinds = draw(st.lists(st.sampled_from(FILTER_KINDS) | st.sampled_from(floats), min_size=1, max_size=3))
    kinds = {f"c{i}": k for i, k in enumerate(data_kinds)}
    partitions = []
    if draw(st.booleans()):
        kinds["p"] = draw(st.sampled_from(_PARTITION_KINDS))
        partitions = ["p"]
    values = {c: _edges(k) | k.values for c, k in kinds.items()}
    values = {c: partition_values(v) if c in partitions else v for c, v in values.items()}
    pools = {c: draw(st.lists(st.none() | v, min_size=1, max_size=4)) for c, v in values.items()}
    batches = draw_batches(draw, pools, st.lists(st.integers(0, 6), min_size=2, max_size=5))
    return FilterCase(kinds, partitions, batches, draw(st.sampled_from([1, 2, 3])))


def fixed_or_fuzzed(fuzz_minutes: float, examples: int, fuzz_examples: int) -> settings:
    """A differential's settings: ``examples`` from a fixed seed in the normal run, or (``--fuzz-minutes``) a
    random search of ``fuzz_examples`` a round."""
    if fuzz_minutes:
        return settings(max_examples=fuzz_examples, derandomize=False, deadline=None, database=None,
                        suppress_health_check=list(HealthCheck), print_blob=True)
    return settings(max_examples=examples, derandomize=True, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])


def run_model(machine: type, fuzz_minutes: float, examples: int, steps: int, fuzz_examples: int, fuzz_steps: int) -> None:
    """Run a Hypothesis state machine: ``examples`` runs of ``steps`` from a fixed seed in the normal run, or
    (``--fuzz-minutes``) rounds of ``fuzz_examples`` random runs of ``fuzz_steps`` until the minutes are spent."""
    from hypothesis.stateful import run_state_machine_as_test

    common = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck))
    if fuzz_minutes:
        config = settings(max_examples=fuzz_examples, stateful_step_count=fuzz_steps, derandomize=False, **common)
    else:
        config = settings(max_examples=examples, stateful_step_count=steps, derandomize=True,
                          phases=[Phase.explicit, Phase.generate], **common)
    deadline = time.monotonic() + 60 * fuzz_minutes
    run_state_machine_as_test(machine, settings=config)
    while time.monotonic() < deadline:
        run_state_machine_as_test(machine, settings=config)


def draw_batches(draw, pools: dict[str, list[Any]], sizes: st.SearchStrategy[list[int]]) -> list[list[dict[str, Any]]]:
    """Batches of rows (one of ``sizes`` each; at least one row in all) whose columns take values of their
    ``pools``, each row with a unique ``id`` in order."""
    batches, next_id = [], 0
    for size in draw(sizes):
        rows = draw(st.lists(st.fixed_dictionaries({c: st.sampled_from(pool) for c, pool in pools.items()}),
                             min_size=size, max_size=size))
        batches.append([{"id": next_id + i} | r for i, r in enumerate(rows)])
        next_id += size
    if not next_id:
        batches[-1] = [{"id": 0} | {c: pool[0] for c, pool in pools.items()}]
    return batches


def _literal(draw: st.DrawFn, kind: Kind, seen: list) -> pa.Scalar:
    """A literal for a comparison with a column of ``kind``: a value of its type (drawn or seen in the data),
    null, or a value of another type Arrow compares it with."""
    value = draw(st.sampled_from(seen) | kind.values if seen else kind.values)
    family = _family(kind.arrow)
    choice = draw(st.integers(0, 9))
    if choice == 0:
        return pa.scalar(None, kind.arrow)
    if choice == 1 and value is not None:
        if family in ("int", "decimal"):
            return pa.scalar(float(value) + draw(st.sampled_from([0.0, 0.5, -0.5])))
        if family == "float":
            return pa.scalar(value, pa.float32() if kind.arrow == pa.float64() else pa.float64())
        if family == "string":
            return pa.scalar(value + draw(st.sampled_from(["", "\x00", "a", "\U0010ffff"])), pa.string())
        if family == "timestamp" and kind.arrow.tz is not None:
            return pa.scalar(value, pa.timestamp("ns", "UTC")) if value.year > 1677 and value.year < 2262 else pa.scalar(value, kind.arrow)
    return pa.scalar(value, kind.arrow)


def _value_set(draw: st.DrawFn, kind: Kind, values: list) -> pa.Array:
    """``isin``'s value set: of the column's type, or of a type ``is_in`` casts to it, losing what it cannot hold
    (Python floats on a float32 column, datetimes on a date column, floats on a decimal or integer column)."""
    family = _family(kind.arrow)
    if draw(st.booleans()) or None in values or family not in ("float", "date", "decimal", "int"):
        return pa.array(values, kind.arrow)
    if family == "date":
        return pa.array([dt.datetime.combine(v, dt.time(draw(st.sampled_from([0, 5])))) for v in values], pa.timestamp("us"))
    return pa.array([float(v) + draw(st.sampled_from([0.0, 1e-10, 0.5])) for v in values], pa.float64())


@st.composite
def filters(draw: st.DrawFn, case: FilterCase, depth: int = 2) -> ds.Expression:
    """A random filter over ``case``'s columns."""
    if depth > 0 and draw(st.integers(0, 1)) == 0:
        shape = draw(st.sampled_from(["and", "or", "not", "not"]))
        left = draw(filters(case, depth - 1))
        if shape == "not":
            return ~left
        right = draw(filters(case, depth - 1))
        return (left & right) if shape == "and" else (left | right)
    column = draw(st.sampled_from(list(case.kinds)))
    kind = case.kinds[column]
    seen = [row[column] for rows in case.batches for row in rows]
    target = ds.field(column)
    casts = _CASTS.get(_family(kind.arrow), [])
    shape = draw(st.sampled_from(["compare", "compare", "compare", "isin", "null", "valid", "cast"]))
    if shape == "null":
        return target.is_null(nan_is_null=draw(st.booleans()))
    if shape == "valid":
        return target.is_valid()
    if shape == "isin":
        values = draw(st.lists(st.sampled_from(seen) | kind.values, min_size=1, max_size=4))
        return target.isin(_value_set(draw, kind, values))
    literal = _literal(draw, kind, seen)
    if shape == "cast" and casts:
        cast = draw(st.sampled_from(casts))
        to_type, unsafe = cast if isinstance(cast, tuple) else (cast, None)
        target = target.cast(options=pc.CastOptions(to_type, **{unsafe: True})) if unsafe else target.cast(to_type)
        try:
            literal = literal.cast(to_type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    op = draw(st.sampled_from(["==", "!=", "<", "<=", ">", ">="]))
    flipped = draw(st.booleans())
    ops = {
        "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
    }
    if flipped:  # the literal on the left
        return ops[op](ds.scalar(literal), target)
    return ops[op](target, ds.scalar(literal))


def sorted_rows(table: pa.Table) -> list[str]:
    """The rows as a multiset, NaN equal to NaN and -0.0 apart from 0.0 (as repr tells them), dates and timestamps
    as their integers (a date Spark stored in the Julian calendar reads as one before year 1, which Python lacks)."""
    columns = []
    for name in sorted(table.column_names):
        column = table.column(name)
        if pa.types.is_date32(column.type) or pa.types.is_timestamp(column.type):
            column = column.cast(pa.int32() if pa.types.is_date32(column.type) else pa.int64())
        columns.append(column.to_pylist())
    return sorted(repr(row) for row in zip(*columns))


def assert_filters_agree(out: str, full: pa.Table, chosen: list[ds.Expression], columns: list[str] | None) -> None:
    """Each filter of ``chosen`` read from ``out`` (``columns``) returns what pyarrow's filter over ``full`` (the
    unfiltered ``read_committed``) returns, with its types, and ``count_committed`` counts its rows; a filter
    pyarrow refuses for the data's types is a ParameterError saying so."""
    import pytest

    from parquet_sink import count_committed, errors, read_committed

    for expression in chosen:
        try:
            expected = full.filter(expression)
        except pa.ArrowInvalid:  # a value the filter cannot cast: the file holding it may be skipped
            continue
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError):  # a filter Arrow refuses for its types: ours says so
            with pytest.raises(errors.ParameterError, match="pyarrow cannot evaluate filter"):
                read_committed(out, filter=expression)
            continue
        expected = expected.select(columns) if columns else expected
        got = read_committed(out, filter=expression, columns=columns)
        assert got.schema == expected.schema, expression
        assert sorted_rows(got) == sorted_rows(expected), expression
        assert count_committed(out, filter=expression) == expected.num_rows, expression


__all__ = ["FILTER_KINDS", "FilterCase", "assert_filters_agree", "filter_cases", "filters", "sorted_rows"]
