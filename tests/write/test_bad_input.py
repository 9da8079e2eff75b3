"""Bad input: damaged `_spark_metadata` logs, missing files, and bad data in the stream.

Every damaged log gives a typed error from :mod:`parquet_sink.errors` that names the file and the batch,
through ``MetadataLog.all_files``, ``MetadataLog.check``, ``read_committed`` and the sink, never a hang,
and the writer never compacts a damaged log into a new commit. Bad data (a column changing type, a new
column, null and odd partition values) either fails the batch with nothing committed or round-trips
exactly as Spark's own reader sees it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import json
import os
import re
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from parquet_sink import (
    LogEntry, MetadataLog, ParquetSink, committed_files, doctor, read_committed, snapshot, sync_delta_log, vacuum, write_batch,
)
from parquet_sink.cli.main import main
from parquet_sink.write.rewrite import optimize
from parquet_sink.errors import (
    CorruptLogError,
    original_error,
    ParquetSinkError,
    LogPathError,
    MissingDataFileError,
    MissingLogFileError,
    NotAnOutputError,
    ParameterError,
    SchemaMismatchError,
    UnsupportedLogVersionError,
)
from tests.helpers.crash_util import (
    SCHEMA,
    assert_same_ids,
    committed_ids,
    committed_paths,
    file_ids,
    latest_commit,
    parquet_on_disk,
    spark_ids,
    write_inputs,
)

TIMEOUT = 60  # seconds; anything slower counts as a hang


def bounded(fn: Callable[[], Any], timeout: float = TIMEOUT) -> Any:
    """Run ``fn`` and fail the test if it does not return (or raise) within ``timeout``."""
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        return pool.submit(fn).result(timeout)
    except concurrent.futures.TimeoutError:
        pytest.fail(f"{fn} hung for {timeout}s")
    finally:
        pool.shutdown(wait=False)


def raises(fn: Callable[[], Any], expected: type[Exception]) -> Exception:
    """The exception ``fn`` raises, which must be ``expected`` (checked within the hang timeout)."""

    def call() -> Exception | None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001
            return exc
        return None

    exc = bounded(call)
    assert exc is not None, f"no error, expected {expected.__name__}"
    assert isinstance(exc, expected), f"expected {expected.__name__}, got {type(exc).__name__}: {exc}"
    return exc


# -- a small committed output built without Spark -----------------------------------------------------

BATCHES = 8  # batches 0..7 with compact_interval 3: 2.compact, 5.compact; a reader needs 5.compact, 6, 7
ROWS = 5


def build_output(out: Path) -> dict[int, Path]:
    """Batches 0..7, one Parquet file of ``ROWS`` ids each; returns batch -> data file."""
    log = MetadataLog(str(out), compact_interval=3, cleanup=False)
    files = {}
    for batch in range(BATCHES):
        path = out / f"part-00000-{uuid.uuid4()}.c000.snappy.parquet"
        out.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"id": pa.array(file_ids(batch, ROWS), pa.int64())}), path)
        st = path.stat()
        assert log.add(batch, [LogEntry(log.storage.to_uri(str(path)), st.st_size, False, int(st.st_mtime * 1000))])
        files[batch] = path
    assert sorted(os.listdir(out / "_spark_metadata")) == [
        "0", "1", "2.compact", "2.compact.columnar", "3", "4", "5.compact", "5.compact.columnar", "6", "7"
    ]
    return files


ALL_IDS = [i for b in range(BATCHES) for i in file_ids(b, ROWS)]
_REST = b'"isDir":false,"modificationTime":1,"blockReplication":1,"blockSize":1,"action":"add"}'
NOT_A_SIZE = b'\n{"path":"file:///tmp/x.parquet",' + _REST  # "size" missing
WRONG_TYPE = b'\n{"path":"file:///tmp/x.parquet","size":"12",' + _REST  # "size" is a string

# kind -> (damage the file's bytes, the error it must give)
CORRUPTIONS: dict[str, tuple[Callable[[bytes], bytes], type[Exception]]] = {
    "empty": (lambda data: b"", CorruptLogError),
    "truncated": (lambda data: data[: len(data) - 30], CorruptLogError),  # cut inside the last entry
    "truncated_header": (lambda data: data[:1], CorruptLogError),  # just "v"
    "bad_header": (lambda data: b"x1" + data[2:], CorruptLogError),
    "v2": (lambda data: b"v2" + data[2:], UnsupportedLogVersionError),
    "bad_json": (lambda data: data + b"\n{not json", CorruptLogError),
    "not_an_object": (lambda data: data + b"\n[1, 2]", CorruptLogError),
    "missing_key": (lambda data: data + NOT_A_SIZE, CorruptLogError),
    "wrong_type": (lambda data: data + WRONG_TYPE, CorruptLogError),
    "not_utf8": (lambda data: data.replace(b".parquet", b"\xff\xfe.parquet", 1), CorruptLogError),
}
TARGETS = {"delta": ("6", 6), "compact": ("5.compact", 5)}


def assert_names(exc: Exception, path: Path, batch: int) -> None:
    message = str(exc)
    assert str(path) in message, f"the error does not name {path}: {message}"
    assert f"batch {batch}" in message, f"the error does not name batch {batch}: {message}"


@pytest.mark.parametrize("kind", list(CORRUPTIONS))
@pytest.mark.parametrize("target", list(TARGETS))
def test_damaged_log_file_gives_typed_error(tmp_path: Path, target: str, kind: str) -> None:
    out = tmp_path / "out"
    build_output(out)
    name, batch = TARGETS[target]
    damage, expected = CORRUPTIONS[kind]
    path = out / "_spark_metadata" / name
    path.write_bytes(damage(path.read_bytes()))

    assert_names(raises(lambda: MetadataLog(str(out)).all_files(), expected), path, batch)
    assert_names(raises(lambda: read_committed(str(out)), expected), path, batch)
    problems = bounded(lambda: MetadataLog(str(out)).check())
    assert any(isinstance(p, expected) and str(path) in str(p) for p in problems), problems


@pytest.mark.parametrize("kind", list(CORRUPTIONS))
@pytest.mark.parametrize("target", list(TARGETS))
def test_writer_does_not_compact_a_damaged_log(tmp_path: Path, target: str, kind: str) -> None:
    """Batch 8 is a compaction batch: it reads 5.compact, 6 and 7. A damaged source must stop the
    commit with a typed error; copying the damage into 8.compact would spread it to every later
    compact file, where restoring the damaged file from backup no longer repairs the log."""
    out = tmp_path / "out"
    build_output(out)
    name, batch = TARGETS[target]
    damage, _ = CORRUPTIONS[kind]
    path = out / "_spark_metadata" / name
    path.write_bytes(damage(path.read_bytes()))
    log = MetadataLog(str(out), compact_interval=3, cleanup=False)

    entry = LogEntry(log.storage.to_uri(str(out / "part-new.parquet")), 10)
    exc = raises(lambda: log.add(8, [entry]), ParquetSinkError)
    assert_names(exc, path, batch)
    assert not (out / "_spark_metadata" / "8.compact").exists(), "a damaged log was compacted into batch 8"


@pytest.mark.parametrize("kind", ["empty", "bad_json", "v2", "not_utf8"])
def test_sink_refuses_a_damaged_log(spark, tmp_path: Path, kind: str) -> None:
    out = tmp_path / "out"
    build_output(out)
    damage, expected = CORRUPTIONS[kind]
    path = out / "_spark_metadata" / "6"
    path.write_bytes(damage(path.read_bytes()))
    before = parquet_on_disk(out)
    df = spark.createDataFrame([(1000,)], "id LONG")

    assert_names(raises(lambda: ParquetSink(str(out), compact_interval=3)(df, 8), expected), path, 6)
    assert sorted(os.listdir(out / "_spark_metadata"))[-1] == "7"
    assert parquet_on_disk(out) == before, "the sink wrote data for a log it cannot read"


@pytest.mark.parametrize("name,batch", [("6", 6), ("5.compact", 5), ("7", None)])
def test_missing_log_file(tmp_path: Path, name: str, batch: int | None) -> None:
    out = tmp_path / "out"
    build_output(out)
    path = out / "_spark_metadata" / name
    path.unlink()
    if batch is None:
        # The newest batch file gone is not a gap: the log simply ends at batch 6 (as Spark sees it).
        assert MetadataLog(str(out)).latest_batch_id() == 6
        assert_same_ids(committed_ids(out), ALL_IDS[: 7 * ROWS], "read_committed without batch 7")
        return
    assert_names(raises(lambda: MetadataLog(str(out)).all_files(), MissingLogFileError), path, batch)
    assert_names(raises(lambda: read_committed(str(out)), MissingLogFileError), path, batch)
    problems = bounded(lambda: MetadataLog(str(out)).check())
    assert any(isinstance(p, MissingLogFileError) and str(path) in str(p) for p in problems), problems


def test_missing_data_file(spark, tmp_path: Path) -> None:
    out = tmp_path / "out"
    files = build_output(out)
    files[4].unlink()

    # The log still lists it (as Spark's log does: files are only checked when read) ...
    assert any(e.path.endswith(files[4].name) for e in MetadataLog(str(out)).all_files())
    # ... and reading it gives a typed error naming the file and its batch.
    assert_names(raises(lambda: read_committed(str(out)), MissingDataFileError), files[4], 4)
    assert_names(raises(lambda: read_committed(str(out), spark=spark).collect(), MissingDataFileError), files[4], 4)
    rest = [i for i in ALL_IDS if i not in file_ids(4, ROWS)]
    assert_same_ids(committed_ids(out, ignore_missing_files=True), rest, "ignore_missing_files=True")


def test_empty_log_reads_as_no_rows(tmp_path: Path) -> None:
    """An output whose log has no batch yet (the sink creates `_spark_metadata/` when it probes the
    store, just before the first commit; a first commit that crashes leaves it so) reads as no rows,
    also when columns are asked for, or gives a typed error; never a raw pyarrow error."""
    out = tmp_path / "out"
    (out / "_spark_metadata").mkdir(parents=True)
    assert bounded(lambda: read_committed(str(out))).num_rows == 0
    try:
        table = bounded(lambda: read_committed(str(out), columns=["id"]))
    except ParquetSinkError:
        return
    assert table.num_rows == 0


def test_log_path_that_is_a_file_is_a_typed_error_everywhere(spark, tmp_path: Path) -> None:
    """`_spark_metadata` replaced by a file: every reader, the sink, write_batch, `verify` and `vacuum`
    raise LogPathError naming it. Before, `verify` said "OK, no batches committed yet", `vacuum` deleted
    every data file as an orphan and write_batch raised a bare FileExistsError."""
    out = tmp_path / "out"
    write_batch(str(out), pa.table({"id": [1, 2]}), app_id="a", version=0)
    data = parquet_on_disk(out)
    shutil.rmtree(out / "_spark_metadata")
    (out / "_spark_metadata").write_bytes(b"v1\n")
    for fn in (
        lambda: read_committed(str(out)),
        lambda: read_committed(str(out), spark=spark),
        lambda: committed_files(str(out)),
        lambda: write_batch(str(out), pa.table({"id": [3]}), app_id="a", version=1),
        lambda: ParquetSink(str(out))(spark.range(3), 0),
    ):
        assert str(out / "_spark_metadata") in str(raises(fn, LogPathError))
    for command in (["verify", str(out)], ["vacuum", str(out), "--older-than", "0s", "--allow-short-retention"]):
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()) as stdout:
            assert main(command) == 1
        assert stdout.getvalue() == "" and f"{out / '_spark_metadata'} is a file" in stderr.getvalue()
    assert parquet_on_disk(out) == data  # nothing deleted, nothing written
    assert (out / "_spark_metadata").read_bytes() == b"v1\n"


def test_not_an_output(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    pq.write_table(pa.table({"id": [1]}), plain / "part-0.parquet")
    exc = raises(lambda: read_committed(str(plain)), NotAnOutputError)
    assert str(plain) in str(exc)
    file = str(plain / "part-0.parquet")  # a file's path: not a storage failure under it
    exc = raises(lambda: read_committed(file), NotAnOutputError)
    assert f"{file} is a file: give the output directory" in str(exc)


def test_a_committed_file_damaged_in_place_is_named(tmp_path: Path) -> None:
    """A committed file overwritten with bytes of its own size (the log cannot tell by size) raised pyarrow's
    ArrowInvalid; every reader now names the file and its batch."""
    import pyarrow.dataset as ds

    from parquet_sink import count_committed
    from parquet_sink.errors import DamagedDataFileError

    out = str(tmp_path / "out")
    for version in range(2):
        write_batch(out, pa.table({"x": list(range(version * 100, version * 100 + 100))}), app_id="a", version=version)
    damaged = committed_files(out)[1]
    Path(damaged.path).write_bytes(b"x" * damaged.size)
    for call in (lambda: read_committed(out), lambda: read_committed(out, filter=ds.field("x") > 150),
                 lambda: count_committed(out, filter=ds.field("x") > 150)):
        with pytest.raises(DamagedDataFileError, match=f"{re.escape(damaged.path)} of batch 1 cannot be read although it has its logged size"):
            call()


def test_writers_refuse_paths_and_switches_that_are_not_what_they_look_like(tmp_path: Path) -> None:
    """A writer given an output's own log, Delta log or hidden area as its path (it would nest another output there,
    which no reader of the output sees), an empty path (the working directory), a string where a switch is meant
    (``"false"`` is true: ``allow_existing_files="false"`` hid an existing dataset), or a set of partition columns
    (no order: the directory order changed with the process's hash seed), or a number or name out of range gets a
    ParameterError naming the call and its output, and writes nothing;
    an iterator of partition columns is read once (the sink once became unpartitioned)."""
    out = str(tmp_path / "out")
    write_batch(out, pa.table({"x": [1]}), app_id="a", version=0)
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    table = pa.table({"x": [2]})
    refused = {
        "is the _spark_metadata directory of the output": [
            lambda: write_batch(out + "/_spark_metadata", table, app_id="a", version=1),
            lambda: ParquetSink(out + "/_spark_metadata/")],
        "is the _delta_log directory": [lambda: write_batch(out + "/_delta_log", table, app_id="a", version=1)],
        "is the _exactly_once directory": [lambda: ParquetSink(out + "/_exactly_once")],
        "the path is empty": [lambda: write_batch("", table, app_id="a", version=1), lambda: ParquetSink("")],
        "is a file, not an output directory": [
            lambda: write_batch(committed_files(out)[0].path, table, app_id="a", version=1),
            lambda: ParquetSink(committed_files(out)[0].path)],
        "must be True or False, got 'false'": [
            lambda: write_batch(out, table, app_id="a", version=1, allow_existing_files="false"),
            lambda: ParquetSink(out, allow_existing_files="false")],
        "must be True or False, got 'no'": [
            lambda: ParquetSink(out, allow_batch_id_only="no"),
            lambda: write_batch(out, table, app_id="a", version=1, delta_log="no")],
        "a set has no order": [lambda: ParquetSink(out, partition_by={"a", "b"}),
                               lambda: write_batch(out, table, app_id="a", version=1, partition_by={"x"})],
        "compact_interval": [lambda: ParquetSink(out, compact_interval=0),
                             lambda: write_batch(out, table, app_id="a", version=1, compact_interval=0)],
        "max_records_per_file": [lambda: ParquetSink(out, max_records_per_file=0),
                                 lambda: write_batch(out, table, app_id="a", version=1, max_records_per_file=-1)],
        "retention": [lambda: ParquetSink(out, retention="soon")],
        "writer must be": [lambda: ParquetSink(out, writer="pandas")],
        "version": [lambda: write_batch(out, table, app_id="a", version=-1)],
        "time zone": [lambda: write_batch(out, table, app_id="a", version=1, time_zone="Mars/Olympus")],
    }
    for message, calls in refused.items():
        for call in calls:
            with pytest.raises(ParameterError, match=message) as raised:
                call()
            # every refusal names the call and its output, whichever shared check raised it, once
            assert re.match(rf"(ParquetSink|write_batch)\({re.escape(repr(out))}", str(raised.value)) or (
                "the path is empty" in message or "is a file" in message or "directory" in message
            ), str(raised.value)
            assert str(raised.value).count(f"({out!r})") <= 1, str(raised.value)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    assert ParquetSink(out, partition_by=map(str, ["day", "hour"])).partition_by == ("day", "hour")
    assert read_committed(out).column("x").to_pylist() == [1]


# Every switch of every entry point taking an output: (the call's name, a call of it with the switch set to a value).
_SWITCHES: dict[str, Callable[[str, Any], Any]] = {
    "vacuum/dry_run": lambda out, v: vacuum(out, "7d", dry_run=v),
    "vacuum/allow_short_retention": lambda out, v: vacuum(out, "7d", allow_short_retention=v),
    "vacuum/include_files_before_log": lambda out, v: vacuum(out, "7d", include_files_before_log=v),
    "read_committed/ignore_missing_files": lambda out, v: read_committed(out, ignore_missing_files=v),
    "committed_files/allow_outside_root": lambda out, v: committed_files(out, allow_outside_root=v),
    "snapshot/statistics": lambda out, v: snapshot(out, statistics=v),
    "sync_delta_log/recreate": lambda out, v: sync_delta_log(out, recreate=v),
    "sync_delta_log/check_files": lambda out, v: sync_delta_log(out, check_files=v),
    "optimize/dry_run": lambda out, v: optimize(out, dry_run=v),
    "doctor/batch_id_only": lambda out, v: doctor(out, app_id="a", version=1, batch_id_only=v),
    "write_batch/ignore_changed_data": lambda out, v: write_batch(out, pa.table({"x": [2]}), app_id="a", version=1, ignore_changed_data=v),
    "ParquetSink/check_storage": lambda out, v: ParquetSink(out, check_storage=v),
    "MetadataLog/cleanup": lambda out, v: MetadataLog(out, cleanup=v),
}


@settings(max_examples=40, derandomize=True, deadline=None, database=None)
@given(
    switch=st.sampled_from(sorted(_SWITCHES)),
    value=st.one_of(st.sampled_from(["false", "False", "no", "0", "", "true"]), st.integers(-1, 2), st.none(),
                    st.floats(allow_nan=False), st.text(max_size=4)),
)
def test_every_switch_of_every_entry_point_takes_only_a_bool(tmp_path_factory, switch: str, value: Any) -> None:
    """A switch given anything but True or False (a string such as ``"false"`` is true in Python:
    ``vacuum(allow_short_retention="false")`` would have deleted what time travel reads, ``sync_delta_log(
    recreate="false")`` rebuilt the Delta log, ``ignore_missing_files="false"`` hidden missing files) is a
    ParameterError naming the call, its output and the switch, and the output is left as it was."""
    out = str(tmp_path_factory.mktemp("switch") / "out")
    write_batch(out, pa.table({"x": [1]}), app_id="a", version=0)
    before = sorted((str(p), p.stat().st_mtime_ns) for p in Path(out).rglob("*"))
    function, name = switch.split("/")
    with pytest.raises(ParameterError, match=rf"^{re.escape(function)}\({re.escape(repr(out))}\): {name} must be True or False"):
        _SWITCHES[switch](out, value)
    assert sorted((str(p), p.stat().st_mtime_ns) for p in Path(out).rglob("*")) == before
    assert read_committed(out).column("x").to_pylist() == [1]


# -- bad data in the stream ------------------------------------------------------------------------


def _run(spark, input_dir: Path, checkpoint: Path, fn, schema: str = SCHEMA) -> Exception | None:
    query = (
        spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(input_dir))
        .writeStream.foreachBatch(fn).option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True).start()
    )
    try:
        if not query.awaitTermination(240):
            query.stop()
            pytest.fail("query did not finish")
    except Exception as exc:  # noqa: BLE001 - StreamingQueryException
        return exc
    return None


def test_column_type_change_mid_stream(spark, tmp_path: Path) -> None:
    """From batch 2 on the query emits ``file`` as a string instead of a long: the batch fails with
    SchemaMismatchError before writing anything, and batches 0 and 1 still read fine."""
    from pyspark.sql import functions as F

    rows = 10
    write_inputs(tmp_path / "in", range(4), rows)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    sink = ParquetSink(str(out), compact_interval=3)
    errors: list[Exception] = []

    def fn(df, batch_id: int) -> None:
        if batch_id >= 2:
            df = df.withColumn("file", F.col("file").cast("string"))
        try:
            sink(df, batch_id)
        except Exception as exc:
            errors.append(exc)
            raise

    failure = _run(spark, tmp_path / "in", ckpt, fn)
    assert failure is not None and len(errors) == 1, (failure, errors)
    assert isinstance(errors[0], SchemaMismatchError), errors[0]
    message = str(errors[0])
    assert "'file'" in message and "log batch 2" in message and str(out) in message, message
    assert MetadataLog(str(out)).latest_batch_id() == 1 and latest_commit(ckpt) == 1
    assert parquet_on_disk(out) == committed_paths(out), "the failed batch wrote data files"
    committed = file_ids(0, rows) + file_ids(1, rows)
    assert_same_ids(committed_ids(out), committed, "read_committed after the failed batch")
    assert_same_ids(spark_ids(spark, out), committed, "spark.read.parquet after the failed batch")
    assert read_committed(str(out)).schema.field("file").type == pa.int64()


@pytest.fixture(scope="module")
def evolved_output(spark, tmp_path_factory) -> tuple[Path, dict[int, str | None]]:
    """A query that adds a nullable column from batch 2 on (allowed): output and expected id -> extra.
    Batches 0-1 go to partition p=a, the later ones to p=b."""
    from pyspark.sql import functions as F

    tmp_path = tmp_path_factory.mktemp("evolved")
    ids = write_inputs(tmp_path / "in", range(4), 10)
    out = tmp_path / "out"
    # Partitioned so the old files sort first by path (p=a/ before p=b/): deterministic for Spark's reader.
    sink = ParquetSink(str(out), compact_interval=3, partition_by=["p"])

    def fn(df, batch_id: int) -> None:
        df = df.withColumn("p", F.lit("a" if batch_id < 2 else "b"))
        if batch_id >= 2:
            df = df.withColumn("extra", F.concat(F.lit("x-"), F.col("name")))  # nullable: name is
        sink(df, batch_id)

    assert _run(spark, tmp_path / "in", tmp_path / "ckpt", fn) is None
    return out, {i: (f"x-row-{i}" if i // 1000 >= 2 else None) for i in ids}


def test_new_nullable_column(spark, evolved_output) -> None:
    """A new nullable column is allowed; read_committed returns it, null for the rows before it."""
    out, expected = evolved_output
    table = read_committed(str(out))
    assert table.schema.field("extra").type == pa.string()
    assert table.num_rows == len(expected)
    assert dict(zip(table.column("id").to_pylist(), table.column("extra").to_pylist())) == expected
    merged = spark.read.option("mergeSchema", "true").parquet(str(out))
    assert {r.id: r.extra for r in merged.select("id", "extra").collect()} == expected


def test_new_nullable_column_through_spark_reader(spark, evolved_output) -> None:
    """read_committed(spark=...) must show the same columns as read_committed. Spark's Parquet reader,
    without mergeSchema, takes the schema of one file, the first by path (here p=a/..., without the
    column; unpartitioned, it depends on the uuids in the file names)."""
    out, expected = evolved_output
    via_spark = read_committed(str(out), spark=spark)
    assert "extra" in via_spark.columns, f"read_committed(spark=...) dropped the new column: {via_spark.columns}"
    assert {r.id: r.extra for r in via_spark.select("id", "extra").collect()} == expected


PARTITION_VALUES = [
    "a/b", "c:d", "50%", "%2F", "x=y", "with space", "ünïcödé", "日本語", "#?*[]^{}", "back\\slash",
    "quote'\"", "tab\tnew\nline", "..", "-", None, "",
]


def test_partition_values_round_trip(spark, tmp_path: Path) -> None:
    """Null and every character Spark escapes in a partition value round-trip through read_committed
    and spark.read.parquet (null and "" read back as null, Spark's __HIVE_DEFAULT_PARTITION__), in the
    same directories Spark's own file sink makes."""
    source = tmp_path / "in"
    source.mkdir()
    expected = {}
    for f in range(2):
        lines = []
        for k, value in enumerate(PARTITION_VALUES):
            row_id = f * 1000 + k
            lines.append(json.dumps({"id": row_id, "cat": value}))
            expected[row_id] = value or None
        (source / f"in-{f}.json").write_text("\n".join(lines) + "\n")
        os.utime(source / f"in-{f}.json", (1_700_000_000 + f,) * 2)
    out = tmp_path / "out"
    sink = ParquetSink(str(out), partition_by=["cat"], compact_interval=3)
    assert _run(spark, source, tmp_path / "ckpt", sink, schema="id LONG, cat STRING") is None

    assert (out / "cat=__HIVE_DEFAULT_PARTITION__").is_dir()
    table = read_committed(str(out))
    assert table.schema.field("cat").type == pa.string()
    assert dict(zip(table.column("id").to_pylist(), table.column("cat").to_pylist())) == expected
    assert {r.id: r.cat for r in spark.read.parquet(str(out)).collect()} == expected
    assert {r.id: r.cat for r in read_committed(str(out), spark=spark).collect()} == expected

    # Spark's own file sink puts the same values in the same directories.
    spark_out = tmp_path / "spark-out"
    query = (
        spark.readStream.schema("id LONG, cat STRING").json(str(source)).writeStream.format("parquet")
        .partitionBy("cat").option("checkpointLocation", str(tmp_path / "ckpt-spark"))
        .trigger(availableNow=True).start(str(spark_out))
    )
    query.awaitTermination(240)
    ours = {p.name for p in out.iterdir() if p.name.startswith("cat=")}
    theirs = {p.name for p in spark_out.iterdir() if p.name.startswith("cat=")}
    assert ours == theirs


@pytest.mark.parametrize("value", ["false", 0, 1, "no"])
def test_optimize_delta_log_takes_only_a_bool_or_none(tmp_path: Path, value: Any) -> None:
    """optimize's ``delta_log`` (None: as the output has one) was the one switch left unchecked: ``delta_log="false"``
    is true in Python, and a committed swap then wrote a Delta log the output never had. Refused before anything is
    rewritten, naming the call and its output."""
    out = str(tmp_path / "out")
    for version in range(2):
        write_batch(out, pa.table({"x": [version]}), app_id="a", version=version)
    before = sorted((str(p), p.stat().st_mtime_ns) for p in Path(out).rglob("*"))
    with pytest.raises(ParameterError, match=rf"^optimize\({re.escape(repr(out))}\): delta_log must be True or False"):
        optimize(out, delta_log=value)
    assert sorted((str(p), p.stat().st_mtime_ns) for p in Path(out).rglob("*")) == before


def test_write_batch_names_itself_in_a_refusal_of_its_data(tmp_path: Path) -> None:
    """Every ParameterError of write_batch names the call and its output (errors.names_output), also those its data
    gets after the argument checks: a value no partition directory can hold (NUL), data that is no table. Once."""
    out = str(tmp_path / "out")
    with pytest.raises(ParameterError, match=rf"^write_batch\({re.escape(repr(out))}\): partition column 'p' .* NUL") as nul:
        write_batch(out, pa.table({"id": [1], "p": ["a\x00b"]}), app_id="a", version=0, partition_by=["p"])
    with pytest.raises(ParameterError, match=rf"^write_batch\({re.escape(repr(out))}\): ") as no_table:
        write_batch(out, 42, app_id="a", version=0)
    for refused in (nul, no_table):
        assert str(refused.value).count(f"({out!r})") == 1, str(refused.value)


def test_every_reader_takes_the_same_compact_interval_and_app_id(tmp_path: Path) -> None:
    """``compact_interval`` (the writer's, for a log that cannot tell it) is one rule in every reader: 0 read as 10
    and a negative number taken by ``history`` and ``verify``, refused by ``read_committed``; now refused by all, named.
    ``committed_version`` with an app id that is no string answered None ("never committed"): refused, as
    ``write_batch`` and ``doctor`` refuse it."""
    from parquet_sink import committed_version, history, verify

    out = str(tmp_path / "out")
    write_batch(out, pa.table({"x": [1]}), app_id="a", version=0)
    for call in (history, verify, read_committed, committed_files):
        for value in (0, -1, "10", 1.5):
            with pytest.raises(ParameterError, match=rf"^{call.__name__}\('.*'\): compact_interval must be a positive"):
                call(out, compact_interval=value)
        assert call(out, compact_interval=10) is not None
    for app_id in (5, "", None):
        with pytest.raises(ParameterError, match=r"^committed_version\('.*'\): app_id must be a non-empty string"):
            committed_version(out, app_id)
    assert committed_version(out, "a") == 0 and committed_version(out, "b") is None


def _log_batches(out: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (out / "_spark_metadata").iterdir() if p.name[:1].isdigit())


@pytest.mark.parametrize("writer", ["spark", "arrow"])
def test_a_nul_partition_value_is_a_typed_error_and_the_query_goes_on_once_filtered(spark, tmp_path: Path, writer: str) -> None:
    """A partition value holding NUL, which no directory name can hold: on Spark's writer path it was py4j's
    Py4JJavaError (Hadoop's ``Mkdirs failed``), on the Arrow path PySpark's PythonException from the executor. Now
    both are the ParameterError ``write_batch`` raises, naming the column, the value, the output and the batch;
    nothing of the batch is committed, and the query restarted with the row filtered out commits it."""
    from pyspark.sql import functions as F

    source = tmp_path / "in"
    source.mkdir()
    batches = [[{"id": 0, "p": "a"}, {"id": 1, "p": "b"}], [{"id": 2, "p": "a"}, {"id": 3, "p": "x\u0000y"}]]
    for i, rows in enumerate(batches):
        (source / f"{i}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.utime(source / f"{i}.json", (1_700_000_000 + i,) * 2)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    sink = ParquetSink(str(out), partition_by=["p"], writer=writer)
    failure = _run(spark, source, ckpt, sink, schema="id LONG, p STRING")
    error = original_error(failure)
    assert isinstance(error, ParameterError), failure
    for part in (f"ParquetSink({str(out)!r}", "batch 1", "partition column 'p'", repr("x\x00y"), "Replace or strip"):
        assert part in str(error), (part, str(error))
    assert _log_batches(out) == [0]
    assert sorted(read_committed(str(out)).column("id").to_pylist()) == [0, 1]

    def filtered(df, batch_id):
        sink(df.where(~F.col("p").contains("\x00")), batch_id)

    assert _run(spark, source, ckpt, filtered, schema="id LONG, p STRING") is None
    assert _log_batches(out) == [0, 1]
    assert sorted(read_committed(str(out)).column("id").to_pylist()) == [0, 1, 2]


COMMIT_PROTOCOL = "spark.sql.streaming.commitProtocolClass"


def test_a_commit_protocol_class_that_does_not_exist_is_a_typed_error(spark, tmp_path: Path) -> None:
    """``spark.sql.streaming.commitProtocolClass`` naming a class that does not exist (Spark's own sink fails on it
    too) was py4j's ClassNotFoundException: now a ParameterError naming the setting, the class, the output, the batch
    and what to do; nothing committed, and with the setting unset the same sink commits the batch."""
    session = spark.newSession()  # a session conf of its own: the shared session keeps Spark's default
    assert session.conf.get(COMMIT_PROTOCOL) == "org.apache.spark.sql.execution.streaming.ManifestFileCommitProtocol"
    out = tmp_path / "out"
    sink = ParquetSink(str(out), writer="spark")
    df = session.sql("select id from range(3)")
    sink(df, 0)
    session.conf.set(COMMIT_PROTOCOL, "com.example.NoSuchProtocol")
    error = raises(lambda: sink(session.sql("select id from range(3, 5)"), 1), ParameterError)
    for part in (f"ParquetSink({str(out)!r}", "batch 1", COMMIT_PROTOCOL, "'com.example.NoSuchProtocol'", "unset"):
        assert part in str(error), (part, str(error))
    assert _log_batches(out) == [0]
    assert sorted(read_committed(str(out)).column("id").to_pylist()) == [0, 1, 2]
    session.conf.unset(COMMIT_PROTOCOL)
    sink(session.sql("select id from range(3, 5)"), 1)
    assert sorted(read_committed(str(out)).column("id").to_pylist()) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("depth", [1, 2])
def test_a_partition_directory_of_an_output_is_refused_by_writers_and_named_by_readers(tmp_path: Path, capsys, depth: int) -> None:
    """``<out>/day=.../`` holds committed data of ``<out>``: write_batch and ParquetSink refuse it when built, as they
    refuse ``_spark_metadata`` (they asked to delete its files before: the output's committed data), naming the
    output, ``filter=`` and ``partition_by=``; read_committed, history, ``ls`` and sync_delta_log name the output
    too. The advice followed literally reads that partition's rows. At any depth of partition directories."""
    import pyarrow.dataset as ds

    from parquet_sink import history
    from parquet_sink.errors import NotAnOutputError, ParameterError

    out = tmp_path / "out"
    table = pa.table({"id": [1, 2, 3], "day": ["mon", "mon", "tue"], "h": ["x", "y", "x"]})  # (read back as strings)
    write_batch(str(out), table, app_id="a", version=0, partition_by=["day", "h"][:depth])
    part = out / "day=mon" if depth == 1 else out / "day=mon" / "h=x"
    before = sorted(p.name for p in part.rglob("*"))
    for build in (lambda: write_batch(str(part), table.select(["id"]), app_id="b", version=0), lambda: ParquetSink(str(part))):
        with pytest.raises(ParameterError) as refused:
            build()
        message = str(refused.value)
        for said in ("partition directory inside the output", str(out), "filter=", "partition_by=", "Nothing was written"):
            assert said in message, (said, message)
    for read in (lambda: read_committed(str(part)), lambda: history(str(part)), lambda: sync_delta_log(str(part))):
        with pytest.raises(NotAnOutputError) as named:
            read()
        assert f"inside the output {out}" in str(named.value) and "filter=" in str(named.value), str(named.value)
    assert main(["ls", str(part)]) != 0
    printed = capsys.readouterr()
    assert f"inside the output {out}" in printed.out + printed.err
    assert sorted(p.name for p in part.rglob("*")) == before and not (part / "_spark_metadata").exists()
    wanted = (ds.field("day") == "mon") if depth == 1 else (ds.field("day") == "mon") & (ds.field("h") == "x")
    assert sorted(read_committed(str(out), filter=wanted).column("id").to_pylist()) == ([1, 2] if depth == 1 else [1])
