"""Hypothesis strategies of the differential tests: a stream (schema, partition columns, values, batches) and
how it is written (session time zone, compression, ``max_records_per_file``, writer path).

Values stress Spark's rules for partition directories and Parquet: null, empty, ``/ = % : #``, newline,
unicode, long strings, ``-0.0`` next to ``0.0``, ``NaN``, infinities, the first and last dates and timestamps
Spark stores, decimals at their precision. Partition column names start with ``_``, hold ``.``, spaces,
upper case and unicode.
"""

from __future__ import annotations

import datetime as dt
import decimal
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

UTC = dt.timezone.utc
MIN_TS = dt.datetime(1, 1, 1, tzinfo=UTC)
MAX_TS = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
MIN_DATE, MAX_DATE = dt.date(1, 1, 1), dt.date(9999, 12, 31)

TIME_ZONES = ["UTC", "America/New_York", "Asia/Kolkata", "Pacific/Chatham", "America/St_Johns", "Pacific/Kiritimati"]
COMPRESSIONS = ["snappy", "zstd", "gzip", "none", "lz4_raw"]
WRITERS = ["spark", "arrow"]
# Partition column names that stress Spark's rules (a `_` name is a partition directory, not a hidden one).
PARTITION_NAMES = ["_k", "a.b", "Up", "ünï", "s p", "_2", "p"]

STRESS_STRINGS = [
    "", "/", "=", "%", ":", "#", "\n", "a/b=c", "%3A", "50%", "c:d", "#x", "ü", "日本", "😀", " ", "a b", ".",
    "..", "-0.0", "NaN", "1", "01", "1.0", "x" * 120,
]


@dataclass(frozen=True)
class Kind:
    """One column type: its Arrow type (the input files) and a strategy of its Python values."""

    name: str
    arrow: pa.DataType
    values: st.SearchStrategy = field(repr=False)
    partitionable: bool = True  # Spark can partition by it


_WIDE = decimal.Context(prec=80)


def _decimal(precision: int, scale: int) -> Kind:
    step = decimal.Decimal(1).scaleb(-scale)
    top = _WIDE.subtract(_WIDE.power(10, precision - scale), step)  # all nines: the precision in full
    edges = [top, _WIDE.minus(top), decimal.Decimal(0), step]
    values = st.one_of(
        st.sampled_from(edges),
        st.decimals(min_value=_WIDE.minus(top), max_value=top, places=scale, allow_nan=False, allow_infinity=False),
    ).map(lambda d: d.quantize(step, context=_WIDE))
    return Kind(f"decimal({precision},{scale})", pa.decimal128(precision, scale), values)


def _floats(width: int) -> st.SearchStrategy:
    special = [0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1e20, 1e-5, 2.5]
    return st.one_of(st.sampled_from(special), st.floats(width=width, allow_subnormal=False))


_TIMESTAMPS = st.one_of(
    st.sampled_from([MIN_TS, MAX_TS, dt.datetime(1970, 1, 1, tzinfo=UTC), dt.datetime(1582, 10, 10, tzinfo=UTC),
                     dt.datetime(2026, 3, 8, 7, 30, 0, 500000, tzinfo=UTC)]),
    st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30), timezones=st.just(UTC)),
)
_DATES = st.one_of(st.sampled_from([MIN_DATE, MAX_DATE, dt.date(1582, 10, 4), dt.date(1970, 1, 1)]),
                   st.dates(MIN_DATE, MAX_DATE))
_TEXT = st.one_of(st.sampled_from(STRESS_STRINGS), st.text(max_size=8))
_LONG_TEXT = st.one_of(_TEXT, st.just("λ" * 3000))

ATOMIC = [
    Kind("bool", pa.bool_(), st.booleans()),
    Kind("byte", pa.int8(), st.integers(-(2**7), 2**7 - 1)),
    Kind("short", pa.int16(), st.integers(-(2**15), 2**15 - 1)),
    Kind("int", pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    Kind("long", pa.int64(), st.one_of(st.sampled_from([-(2**63), 2**63 - 1, 0]), st.integers(-(2**63), 2**63 - 1))),
    Kind("float", pa.float32(), _floats(32)),
    Kind("double", pa.float64(), _floats(64)),
    Kind("string", pa.string(), _TEXT),
    # A partition value is a directory name: at most 255 bytes, and Spark casts binary to string as UTF-8.
    Kind("binary", pa.binary(), _TEXT.map(lambda s: s.encode())),
    Kind("date", pa.date32(), _DATES),
    Kind("timestamp", pa.timestamp("us", tz="UTC"), _TIMESTAMPS),
    _decimal(38, 10),
    _decimal(9, 2),
    _decimal(5, 0),
]
DATA_ONLY = [
    Kind("long string", pa.string(), _LONG_TEXT, partitionable=False),
    Kind("any binary", pa.binary(), st.binary(max_size=20), partitionable=False),
]


@st.composite
def nested_kinds(draw: st.DrawFn, depth: int = 2) -> Kind:
    """struct, array and map types over atomic (and, ``depth`` allowing, nested) types."""
    inner = st.sampled_from(ATOMIC) if depth <= 1 else st.one_of(st.sampled_from(ATOMIC), nested_kinds(depth - 1))
    shape = draw(st.sampled_from(["struct", "array", "map"]))
    if shape == "array":
        element = draw(inner)
        return Kind(f"array<{element.name}>", pa.list_(element.arrow),
                    st.lists(st.none() | element.values, max_size=3), partitionable=False)
    if shape == "map":
        value = draw(inner)
        values = st.dictionaries(st.sampled_from(STRESS_STRINGS), st.none() | value.values, max_size=3)
        return Kind(f"map<string,{value.name}>", pa.map_(pa.string(), value.arrow),
                    values.map(lambda d: list(d.items())), partitionable=False)
    fields = draw(st.lists(inner, min_size=1, max_size=3))
    names = [f"f{i}" for i in range(len(fields))]
    arrow = pa.struct([pa.field(n, k.arrow) for n, k in zip(names, fields)])
    values = st.fixed_dictionaries({n: st.none() | k.values for n, k in zip(names, fields)})
    return Kind(f"struct<{','.join(k.name for k in fields)}>", arrow, values, partitionable=False)


@dataclass(frozen=True)
class StreamCase:
    """A stream and how both sinks write it."""

    data: dict[str, Kind]  # data column -> type (besides the row id ``id``)
    partitions: dict[str, Kind]  # partition column -> type, in partitionBy order
    batches: list[list[dict]] = field(repr=False)  # rows of each micro-batch (one input file each)
    time_zone: str = "UTC"
    compression: str = "snappy"
    max_records_per_file: int | None = None
    writer: str = "arrow"
    root: str = "ours"  # our output's directory name

    @property
    def schema(self) -> pa.Schema:
        columns = {"id": pa.int64()} | {c: k.arrow for c, k in (self.data | self.partitions).items()}
        return pa.schema(columns)

    def tables(self) -> list[pa.Table]:
        return [pa.Table.from_pylist(rows, schema=self.schema) for rows in self.batches]

    def __repr__(self) -> str:
        kinds = {c: k.name for c, k in (self.data | self.partitions).items()}
        return (
            f"StreamCase(columns={kinds}, partitions={list(self.partitions)}, time_zone={self.time_zone!r}, "
            f"compression={self.compression!r}, max_records_per_file={self.max_records_per_file}, "
            f"writer={self.writer!r}, root={self.root!r}, batches={self.batches!r})"
        )


ROOT_NAMES = ["ours", "out put", "o[1]", "o{a,b}", "ü-out", "o%41", "o#1"]


def partition_values(values: st.SearchStrategy) -> st.SearchStrategy:
    """``values`` as a partition column takes them: no text holding NUL, which no directory name can (a write
    refuses it: tests/read/test_partitioning.py)."""

    def named(value: Any) -> bool:
        return not isinstance(value, (str, bytes)) or (value.encode() if isinstance(value, str) else value).find(0) < 0

    return values.filter(named)


@st.composite
def stream_cases(draw: st.DrawFn) -> StreamCase:
    """A small stream: 1-3 micro-batches (some empty), 0-3 partition columns, a few data columns."""
    n_partitions = draw(st.integers(0, 3))
    partition_names = draw(st.lists(st.sampled_from(PARTITION_NAMES), min_size=n_partitions,
                                    max_size=n_partitions, unique_by=str.lower))
    partitionable = [k for k in ATOMIC if k.partitionable]
    partitions = {name: draw(st.sampled_from(partitionable)) for name in partition_names}
    data_kinds = draw(st.lists(st.one_of(st.sampled_from(ATOMIC + DATA_ONLY), nested_kinds()), max_size=3))
    data = {f"c{i}": kind for i, kind in enumerate(data_kinds)}
    columns = data | partitions
    # A small pool of partition values per column, so batches share directories, unless the shape is "many".
    many = draw(st.booleans()) and n_partitions > 0
    pools = {c: draw(st.lists(st.none() | partition_values(k.values), min_size=1, max_size=3))
             for c, k in partitions.items()}

    def row_values() -> st.SearchStrategy:
        return st.fixed_dictionaries({
            c: (st.none() | (partition_values(k.values) if c in partitions else k.values)) if many or c not in pools
            else st.sampled_from(pools[c])
            for c, k in columns.items()
        })

    sizes = draw(st.lists(st.sampled_from([0, 1, 2, 5] + ([25] if many else [])), min_size=1, max_size=3))
    if not any(sizes) and n_partitions:
        # at least one row: a partitioned empty batch has no file (Spark's sink writes none either), and Spark's
        # reader cannot infer a schema from no file at all. Unpartitioned, both sinks commit a schema-only file.
        sizes[-1] = 1
    batches, next_id = [], 0
    for size in sizes:
        rows = draw(st.lists(row_values(), min_size=size, max_size=size))
        batches.append([{"id": next_id + i} | r for i, r in enumerate(rows)])
        next_id += size
    return StreamCase(
        data=data,
        partitions=partitions,
        batches=batches,
        time_zone=draw(st.sampled_from(TIME_ZONES)),
        compression=draw(st.sampled_from(COMPRESSIONS)),
        max_records_per_file=draw(st.sampled_from([None, None, 1, 2])),
        writer=draw(st.sampled_from(WRITERS)),
        root=draw(st.sampled_from(ROOT_NAMES)),
    )


# -- the Delta log's differential (tests/delta/test_delta_differential.py) ------------------------------

_MS = dt.timedelta(milliseconds=1)
_EDGE_TIMESTAMPS = st.one_of(
    _TIMESTAMPS,
    st.sampled_from([dt.datetime(999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), dt.datetime(1000, 1, 1, tzinfo=UTC),
                     dt.datetime(2024, 1, 1, 0, 0, 0, 999, tzinfo=UTC), dt.datetime(2024, 1, 1, 0, 0, 0, 1000, tzinfo=UTC)]),
    st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31), timezones=st.just(UTC)).map(
        lambda t: t.replace(microsecond=t.microsecond - t.microsecond % 1000 + 999)),  # a max just under a ms
)
_EDGE_DATES = st.one_of(_DATES, st.sampled_from([dt.date(999, 12, 31), dt.date(1000, 1, 1), dt.date(9, 9, 9)]))
# Every Delta type at its edges, as the writers take it (large and view variants, naive and zoned timestamps).
DELTA_ATOMIC = [
    *[k for k in ATOMIC if k.name not in ("timestamp", "date")],
    Kind("timestamp", pa.timestamp("us", tz="UTC"), _EDGE_TIMESTAMPS),
    Kind("naive timestamp", pa.timestamp("us"), _EDGE_TIMESTAMPS.map(lambda t: t.replace(tzinfo=None)), partitionable=False),
    Kind("ms timestamp", pa.timestamp("ms", tz="America/New_York"),
         _EDGE_TIMESTAMPS.map(lambda t: t.replace(microsecond=t.microsecond - t.microsecond % 1000)), partitionable=False),
    Kind("date", pa.date32(), _EDGE_DATES),
    _decimal(38, 0), _decimal(38, 38), _decimal(38, 19), _decimal(18, 2), _decimal(1, 1),
    Kind("large string", pa.large_string(), _LONG_TEXT, partitionable=False),
    Kind("string view", pa.string_view(), _TEXT, partitionable=False),
    Kind("large binary", pa.large_binary(), st.binary(max_size=40), partitionable=False),
    Kind("binary view", pa.binary_view(), st.binary(max_size=40), partitionable=False),
    Kind("long prefix", pa.string(), st.sampled_from(["a" * 31, "a" * 32, "a" * 33, "a" * 32 + "b", "\U0001f600" * 33,
                                                       "\uffff" * 40, "\U00010000" * 40, "a" * 32 + "\x00",
                                                       "\U0010ffff", "\U0010ffff" * 33, "\u2028"]),
         partitionable=False),
]
# Names at their edges: dots (``x.y`` is also drawn beside a struct ``x`` with a field ``y``; a leading dot for
# data columns), spaces, unicode, a leading underscore, upper case.
DELTA_NAMES = ["x.y", "s p", "ünï", "_u", "Up", "a,b", "日本", "n", ".h"]


@st.composite
def _delta_struct(draw: st.DrawFn) -> Kind:
    """struct<y, ...> of atomic Delta kinds (named ``y`` first: the shape ``x.y`` beside ``x``), or nested."""
    inner = st.sampled_from(DELTA_ATOMIC)
    kinds = draw(st.lists(st.one_of(inner, nested_kinds(1)), min_size=1, max_size=2))
    names = ["y", "z.w"][: len(kinds)]
    arrow = pa.struct([pa.field(n, k.arrow) for n, k in zip(names, kinds)])
    values = st.fixed_dictionaries({n: st.none() | k.values for n, k in zip(names, kinds)})
    return Kind(f"struct<{','.join(k.name for k in kinds)}>", arrow, values, partitionable=False)


@dataclass(frozen=True)
class DeltaCase:
    """An output written batch after batch with its Delta log kept in step: its columns, partition columns,
    and the steps (``("write", app, rows)`` through ``write_batch(..., delta_log=True)``, ``("spark", old,
    rows)`` a batch logged as Spark's sink logs it, dropped at the next compaction when ``old``)."""

    columns: dict[str, Kind]  # besides the row id ``id``
    partitions: list[str]
    steps: list[tuple[str, object, list[dict]]] = field(repr=False)
    time_zone: str = "UTC"
    late: dict[str, int] = field(default_factory=dict)  # a data column first written by this step (evolution)
    # a data column of the null type (its values all null: Parquet's null type, a Delta string) before this step, a
    # Spark-style one (Spark's own sink, which changes the type; our writers refuse it) kept by retention
    nulls: dict[str, int] = field(default_factory=dict)

    @property
    def schema(self) -> pa.Schema:
        return pa.schema({"id": pa.int64()} | {c: k.arrow for c, k in self.columns.items()})

    def schema_at(self, step: int) -> pa.Schema:
        """The columns the batch of ``step`` is written with: the late ones from their step on, those of
        :attr:`nulls` of the null type before their step."""
        fields = [f for f in self.schema if self.late.get(f.name, 0) <= step]
        return pa.schema([f.with_type(pa.null()) if step < self.nulls.get(f.name, 0) else f for f in fields])

    def __repr__(self) -> str:
        kinds = {c: k.name for c, k in self.columns.items()}
        return (f"DeltaCase(columns={kinds}, partitions={self.partitions}, time_zone={self.time_zone!r}, "
                f"late={self.late}, nulls={self.nulls}, steps={self.steps!r})")


@st.composite
def delta_cases(draw: st.DrawFn) -> DeltaCase:
    """1-3 data columns of every Delta type (atomic, struct, array, map), 0-2 partition columns, 2-4 steps of
    0-6 rows each by two apps and Spark-style batches (old ones dropped by retention at compaction); sometimes
    a data column first written by a later step."""
    names = draw(st.lists(st.sampled_from(DELTA_NAMES), min_size=1, max_size=4, unique_by=str.lower))
    columns: dict[str, Kind] = {}
    for name in names:
        columns[name] = draw(st.one_of(st.sampled_from(DELTA_ATOMIC), _delta_struct(), nested_kinds(1)))
    if "x.y" in columns and draw(st.booleans()):
        columns["x"] = draw(_delta_struct())
    partitionable = [c for c, k in columns.items() if k.partitionable and not c.startswith(".")]  # a hidden directory
    partitions = draw(st.lists(st.sampled_from(partitionable), max_size=2, unique=True)) if partitionable else []
    if len(partitions) == len(columns):
        partitions = partitions[:-1]  # at least one data column
    pools = {c: draw(st.lists(st.none() | columns[c].values, min_size=1, max_size=3)) for c in partitions}
    row = st.fixed_dictionaries({
        c: st.sampled_from(pools[c]) if c in pools else st.none() | k.values for c, k in columns.items()
    })
    steps, next_id = [], 0
    for _ in range(draw(st.integers(2, 4))):
        views = any("_view" in str(k.arrow) for k in columns.values())  # Spark's sink never writes views
        kind = draw(st.sampled_from(["write", "write"] + ([] if views else ["spark"])))
        rows = draw(st.lists(row, min_size=0 if kind == "write" else 1, max_size=6))
        rows = [{"id": next_id + i} | r for i, r in enumerate(rows)]
        next_id += len(rows)
        steps.append((kind, draw(st.sampled_from(["a", "b"])) if kind == "write" else draw(st.booleans()), rows))
    data = [c for c in columns if c not in partitions]
    # a data column the first batches lack (a later batch adds it: the Delta table's schema evolves)
    late = {draw(st.sampled_from(data)): draw(st.integers(1, len(steps) - 1))} if len(data) > 1 and draw(st.booleans()) else {}
    # a data column all null (of the null type) in the first batches, then typed by a batch of Spark's own sink
    nulls, typed = {}, [c for c in data if c not in late and not pa.types.is_nested(columns[c].arrow)]
    if typed and not any("_view" in str(k.arrow) for k in columns.values()) and draw(st.booleans()):
        column, at = draw(st.sampled_from(typed)), draw(st.integers(1, len(steps) - 1))
        if steps[at][2]:
            steps[at] = ("spark", False, steps[at][2])  # not dropped by retention: the newest typed file stays
            for _, _, rows in steps[:at]:
                for r in rows:
                    r[column] = None
            nulls = {column: at}
    zone = draw(st.sampled_from(["UTC", "UTC", "Asia/Kolkata"]))
    return DeltaCase(columns, partitions, steps, zone, late, nulls)
