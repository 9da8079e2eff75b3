"""Spark's own file sink as the oracle: random streams written by ``writeStream.format("parquet")`` and by
``ParquetSink`` (both writer paths) must land the same rows in the same partition directories, and every
reader of our output (``read_committed``, ``read_committed(spark=)``, ``spark.read.parquet`` and Spark's
streaming file source) must return what Spark's reader returns on Spark's output, with Spark's types.

The default run draws a fixed, small set of examples (``derandomize``); ``--fuzz-minutes N`` keeps drawing
new ones for N minutes. Shrunk failures are kept below as plain regression tests.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import re
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from pyspark.sql import functions as F

from parquet_sink import ParquetSink, Storage, committed_files, read_committed
from tests.helpers.spark_util import run_available_now, to_arrow
from tests.helpers.strategies import ATOMIC, MAX_TS, MIN_TS, StreamCase, stream_cases

DEFAULT_EXAMPLES = 3
KIND = {k.name: k for k in ATOMIC}


# -- the check -------------------------------------------------------------------------------------


def _write_inputs(case: StreamCase, directory: Path) -> None:
    """One Parquet file per micro-batch, mtimes increasing so ``maxFilesPerTrigger=1`` takes them in order."""
    directory.mkdir(parents=True)
    start = time.time() - 1000
    for i, table in enumerate(case.tables()):
        path = directory / f"{i:04d}.parquet"
        pq.write_table(table, path)
        os.utime(path, (start + i, start + i))


def _plain_type(t: pa.DataType) -> pa.DataType:
    """``t`` with every timestamp as int64 microseconds and large types as plain ones (for comparing values)."""
    if pa.types.is_timestamp(t):
        return pa.int64()
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_map(t):
        return pa.map_(_plain_type(t.key_type), _plain_type(t.item_type))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(_plain_type(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _plain_type(f.type)) for f in t])
    return t


def _type_name(t: pa.DataType) -> str:
    """A type as Spark sees it: a timestamp of any zone is one instant type; large and plain types are one."""
    return str(_plain_type(t)) if not pa.types.is_timestamp(t) else "timestamp"


def _canonical(value):
    """Comparable values: floats by repr (``-0.0`` and ``NaN`` kept apart), containers recursively."""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(value)
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def _rows(table: pa.Table) -> list[dict]:
    """The rows of ``table`` sorted by id, in canonical form."""
    table = table.cast(pa.schema([pa.field(f.name, _plain_type(f.type)) for f in table.schema]))
    return sorted((_canonical(r) for r in table.to_pylist()), key=lambda r: r["id"])


def _types(table: pa.Table) -> dict[str, str]:
    return {f.name: _type_name(f.type) for f in table.schema}


def _placement(spark, root: str, depth: int) -> dict[int, str]:
    """Row id -> the partition directories of its file, as Spark's own reader reports the file."""
    df = spark.read.parquet(root).select("id", F.input_file_name().alias("file"))
    placed = {}
    for row in df.collect():
        assert row.id not in placed, f"row {row.id} twice in {root}"
        placed[row.id] = "/".join(row.file.split("/")[-1 - depth:-1])
    return placed


def _streamed(spark, root: str, schema, checkpoint: str) -> pa.Table:
    """Everything Spark's streaming file source reads from ``root`` (which it reads through the log)."""
    tables = []
    stream = spark.readStream.schema(schema).parquet(root)
    run_available_now(stream, checkpoint, lambda df, _: tables.append(to_arrow(df)))
    return pa.concat_tables(tables) if tables else pa.table({})


def _failure(run) -> str | None:
    """None if ``run()`` succeeds, else the error: its first line and the root causes Spark or Python name."""
    try:
        run()
    except Exception as exc:  # noqa: BLE001 - any failure is compared below
        lines = str(exc).splitlines()
        causes = [line.strip() for line in lines if re.match(r"^(Caused by: )?[\w.]+(Error|Exception)\b", line)]
        return "\n".join([type(exc).__name__ + ": " + (lines[0] if lines else ""), *causes[-3:]])
    return None


def check_stream(spark, case: StreamCase, workdir: Path) -> None:
    """Write ``case`` with Spark's sink and with ParquetSink; assert every reader agrees with Spark's."""
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", case.time_zone)
    try:
        _check_stream(spark, case, workdir)
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)


def _check_stream(spark, case: StreamCase, workdir: Path) -> None:
    source = workdir / "in"
    _write_inputs(case, source)
    schema = spark.read.parquet(str(source)).schema
    # the same root name for both sinks: Spark's streaming file source globs its path ('[', '{' in it)
    theirs, ours = str(workdir / "spark" / case.root), str(workdir / case.root)
    partition_by = list(case.partitions)

    def stream():
        return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(source))

    options = {"compression": case.compression}
    if case.max_records_per_file:
        options["maxRecordsPerFile"] = str(case.max_records_per_file)
    spark_failure = _failure(lambda: run_available_now(
        stream(), str(workdir / "ck-spark"), path=theirs, partitionBy=partition_by, **options
    ))
    sink = ParquetSink(ours, partition_by=partition_by, compression=case.compression,
                       max_records_per_file=case.max_records_per_file, writer=case.writer)
    our_failure = _failure(lambda: run_available_now(stream(), str(workdir / "ck-ours"), sink))
    if spark_failure is not None:
        # Spark's sink refuses the stream: ours must refuse it too, with a typed error, after whole batches only.
        assert our_failure is not None, f"Spark's sink failed ({spark_failure}) but ParquetSink wrote the stream"
        assert "parquet_sink.errors." in our_failure or our_failure.split(":")[0] in spark_failure, our_failure
        committed = sorted(read_committed(ours, columns=["id"]).column("id").to_pylist()) if os.path.exists(
            os.path.join(ours, "_spark_metadata")) else []
        prefixes = [sorted(r["id"] for rows in case.batches[:n] for r in rows) for n in range(len(case.batches) + 1)]
        assert committed in prefixes, f"after the failure the committed rows {committed} are not whole batches"
        return
    assert our_failure is None, f"ParquetSink failed where Spark's sink wrote the stream: {our_failure}"

    input_ids = sorted(r["id"] for rows in case.batches for r in rows)
    committed_ids = sorted(read_committed(ours, columns=["id"]).column("id").to_pylist())
    assert committed_ids == input_ids, f"ParquetSink committed rows {committed_ids}, the input has {input_ids}"
    expected_df = spark.read.parquet(theirs)
    expected = to_arrow(expected_df)
    assert sorted(expected.column("id").to_pylist()) == input_ids, "Spark's sink lost rows: the oracle is broken"
    expected_rows, expected_types = _rows(expected), _types(expected)

    # Same rows in the same partition directories, as Spark's reader reports the files.
    assert _placement(spark, ours, len(partition_by)) == _placement(spark, theirs, len(partition_by))
    # Spark's batch reader on our output: Spark's types and values.
    spark_on_ours = spark.read.parquet(ours)
    assert [(f.name, f.dataType) for f in spark_on_ours.schema] == [(f.name, f.dataType) for f in expected_df.schema]
    assert _rows(to_arrow(spark_on_ours)) == expected_rows
    # Our readers.
    table = read_committed(ours, time_zone=case.time_zone)
    assert _types(table) == expected_types
    assert _rows(table) == expected_rows
    via_spark = to_arrow(read_committed(ours, spark=spark))
    assert _types(via_spark) == expected_types
    assert _rows(via_spark) == expected_rows
    assert sum(f.size > 0 for f in committed_files(ours)) == len(committed_files(ours))
    # Spark's streaming file source on our output reads what it reads on Spark's output.
    streamed_theirs = _streamed(spark, theirs, expected_df.schema, str(workdir / "ck-read-spark"))
    assert _rows(_streamed(spark, ours, expected_df.schema, str(workdir / "ck-read"))) == _rows(streamed_theirs)
    if not set("[]{}*?") & set(case.root):  # a root it does not glob: it reads every row (the oracle works)
        assert _rows(streamed_theirs) == expected_rows


# -- the generated examples --------------------------------------------------------------------------


def test_streams_match_spark_file_sink(spark, tmp_path_factory, fuzz_minutes: float) -> None:
    """Random streams (fixed seed, a few examples; ``--fuzz-minutes`` for a long random search)."""
    if fuzz_minutes:
        config = settings(max_examples=25, derandomize=False, deadline=None, database=None,
                          suppress_health_check=list(HealthCheck), print_blob=True)
    else:
        # No shrinking in the default run (each step is a Spark job): the first failing example is reported.
        config = settings(max_examples=DEFAULT_EXAMPLES, derandomize=True, deadline=None, database=None,
                          suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])

    @config
    @given(stream_cases())
    def run(case: StreamCase) -> None:
        check_stream(spark, case, tmp_path_factory.mktemp("diff"))

    deadline = time.monotonic() + 60 * fuzz_minutes
    run()
    while time.monotonic() < deadline:
        run()


# -- shrunk examples and the known hard shapes, as plain tests ----------------------------------------


def _case(partitions: dict[str, str], values: list[list[dict]], data: dict[str, str] | None = None, **how) -> StreamCase:
    """A hand-written case: ``partitions`` and ``data`` map column -> atomic kind name; rows get ids in order."""
    batches, next_id = [], 0
    for rows in values:
        batches.append([{"id": next_id + i} | r for i, r in enumerate(rows)])
        next_id += len(rows)
    return StreamCase(data={c: KIND[k] for c, k in (data or {}).items()},
                      partitions={c: KIND[k] for c, k in partitions.items()}, batches=batches, **how)


REGRESSIONS = {
    # issue 20 item 1: a partition column named with a leading `_` (Spark's rule: `_k=v` is not hidden)
    "underscore-partition-spark": _case({"_k": "string"}, [[{"_k": "a"}, {"_k": None}]], writer="spark"),
    # issue 20 item 7: 0.0 and -0.0 in one float partition column, one task
    "signed-zero-spark": _case({"p": "double"}, [[{"p": 0.0}, {"p": -0.0}, {"p": 0.0}]], writer="spark"),
    # found by the generator: a column named with a dot failed every batch on the Arrow writer path (pyspark's
    # mapInArrow resolves `a.b` as field b of a column a); Spark's sink writes it
    "dotted-name-arrow": _case({"a.b": "long"}, [[{"a.b": 1}, {"a.b": None}]], writer="arrow"),
    "dotted-name-spark": _case({"a.b": "long"}, [[{"a.b": 1}]], writer="spark"),
    # found by the generator: a timestamp partition value whose local time lies in year 0 (0001-01-01T00:00Z
    # in a zone west of UTC) failed the Arrow writer with OverflowError and read back as a string; Spark
    # writes `0000-12-31 19%3A03%3A58` and reads it as a timestamp. Year 10000 (+10000-01-01) east of UTC.
    "year-zero-timestamp-arrow": _case({"t": "timestamp"}, [[{"t": MIN_TS}, {"t": MAX_TS}]],
                                       time_zone="America/New_York", writer="arrow"),
    "year-10000-timestamp-arrow": _case({"t": "timestamp"}, [[{"t": MIN_TS}, {"t": MAX_TS}]],
                                        time_zone="Pacific/Kiritimati", writer="arrow"),
    "signed-zero-arrow": _case({"p": "float"}, [[{"p": -0.0}, {"p": 0.0}]], writer="arrow"),
    # Spark's writer stores timestamps as INT96, which pyarrow reads as nanoseconds unless told otherwise:
    # read_committed returned year 1000 as 2169-02-08 (and an optimize wrote that back); read as microseconds now
    "far-int96-timestamps-spark": _case({}, [[{"t": dt.datetime(1000, 1, 1, tzinfo=dt.UTC)}, {"t": MIN_TS},
                                              {"t": MAX_TS}, {"t": dt.datetime(2262, 4, 12, tzinfo=dt.UTC)}]],
                                        data={"t": "timestamp"}, writer="spark"),
    # issue 20 item 8: read_committed(spark=) on a root holding glob characters
    "glob-root": _case({"p": "string"}, [[{"p": "a"}]], root="o[1]{x}", writer="arrow"),
}


@pytest.mark.parametrize("name", list(REGRESSIONS))
def test_regression_streams(spark, tmp_path: Path, name: str) -> None:
    check_stream(spark, REGRESSIONS[name], tmp_path)


def test_float_partition_named_as_this_jdk_does(spark, tmp_path: Path) -> None:
    """Spark on JDK 17 names the float 33554472.0 ``3.3554472E7`` (not the shortest ``3.355447E7``): the
    Arrow path takes directory names from Spark's own cast, so the row lands where Spark's sink puts it."""
    check_stream(spark, _case({"Up": "float"}, [[{"Up": 33554472.0}]], writer="arrow"), tmp_path)


def test_log_uris_are_hadoop_uris(spark, tmp_path: Path) -> None:
    """The URI written into the log for a path is the one Hadoop's ``Path.toUri().toString()`` gives, for
    every class of character (the generator found unassigned code points encoded where Hadoop keeps them)."""
    names = ["\U0004bc9d", "\u200b", "\ue000", "\u00a0", "\u2028", "\x85", "\x7f", "ü", "😀", " ", "%", "#", "[", "\n"]
    storage = Storage(str(tmp_path))
    for name in names:
        path = storage.join(f"k={name}x", "part-0.parquet")
        assert storage.to_uri(path) == spark._jvm.org.apache.hadoop.fs.Path(f"file://{path}").toUri().toString(), name
