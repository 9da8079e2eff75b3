"""The JVM classes of the Spark writer path (``jvm/src``, shipped as ``src/parquet_sink/write/parquet-sink-jvm.jar``,
which must be what that source compiles to).

``NioLocalFileSystem``: Hadoop's raw local filesystem with permissions set through ``java.nio``; without Hadoop's
native library the raw filesystem runs a ``chmod`` process for every file and directory it creates (~7 ms each).
Proven on a real driver whose ``chmod`` logs its calls: none for the sink's files with the JAR, one per data file
without it (the JAR missing: the sink writes as before), the same file modes either way (Hadoop's umask applied),
every row committed once.

``SinkFileWrite``: Spark's file sink's write of a batch in one py4j call; without the JAR (or where it is not usable) a
batch goes through ``df.write``, every row still committed once (the child below).

``BatchRowsExec``: Spark's writer gets a ``foreachBatch`` batch's rows as the streaming plan produced them, without
the copy ``foreachBatch``'s scan makes of each; rows of another kind (an RDD of Python rows) still become
``UnsafeRow`` s, which the sort Spark adds for partition columns requires. The Arrow path's ``mapInArrow`` over a
batch gets its rows through it too. The streaming tests of every type (``test_differential.py`` against Spark's own
sink, on both writer paths, ``test_partition_columns.py``) run through it."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

import pyspark
import pytest

from parquet_sink import ParquetSink, committed_files, read_committed
from parquet_sink.write import jvm

ROOT = Path(__file__).resolve().parents[2]
RAW = "org.apache.hadoop.fs.RawLocalFileSystem"
NIO = "parquetsink.hadoop.NioLocalFileSystem"


def test_jar_holds_what_its_source_compiles_to(tmp_path: Path) -> None:
    """``jvm/build.sh`` was run after the last change of ``jvm/src`` (the same javac options)."""
    jars = Path(pyspark.__file__).parent / "jars"
    sources = sorted(str(p) for p in (ROOT / "jvm" / "src").rglob("*.java"))
    classes = tmp_path / "classes"
    subprocess.run(
        ["javac", "--release", "8", "-nowarn", "-Xlint:-options", "-cp", f"{jars}/*", "-d", str(classes), *sources],
        check=True, capture_output=True, timeout=120,
    )
    compiled = {str(p.relative_to(classes)): p.read_bytes() for p in classes.rglob("*.class")}
    with zipfile.ZipFile(jvm.JAR) as jar:
        shipped = {name: jar.read(name) for name in jar.namelist()}  # nothing but the classes
    assert compiled and shipped.keys() == compiled.keys(), (sorted(shipped), sorted(compiled))
    stale = [name for name in compiled if compiled[name] != shipped[name]]
    assert not stale, f"{stale}: run jvm/build.sh"


def test_spark_path_creates_files_without_chmod_processes(tmp_path: Path) -> None:
    source = tmp_path / "in"
    source.mkdir()
    values = ["a", "b", "c"]
    for batch in range(2):
        rows = [{"id": batch * 100 + i, "k": values[i % 3]} for i in range(30)]
        (source / f"{batch}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.utime(source / f"{batch}.json", (1_000 + batch, 1_000 + batch))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "chmod.log"
    (bin_dir / "chmod").write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec /bin/chmod "$@"\n')
    (bin_dir / "chmod").chmod(0o755)
    runs = {name: {"out": str(tmp_path / name), "checkpoint": str(tmp_path / f"ckpt-{name}"), "jar": jar}
            for name, jar in (("without_jar", False), ("with_jar", True))}
    result = tmp_path / "result.json"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    config = {"input": str(source), "runs": runs, "result": str(result)}
    child = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "helpers" / "chmod_child.py"), json.dumps(config)],
        cwd=str(ROOT), env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600,
    )
    used = json.loads(result.read_text()) if result.exists() else {}
    assert child.returncode == 0 and used == {"without_jar": [RAW, False, False], "with_jar": [NIO, True, True]}, (
        f"{used}\n{child.stdout[-3000:]}{child.stderr[-6000:]}"
    )
    calls = log.read_text().splitlines() if log.exists() else []
    for name, run in runs.items():
        table = read_committed(run["out"])
        assert Counter(table.column("id").to_pylist()) == Counter(b * 100 + i for b in range(2) for i in range(30))
        files = committed_files(run["out"])
        assert len(files) == 6  # 2 batches x 3 partition values, one task each
        # Hadoop's umask (077) applied to every data file, with or without the JAR
        assert {stat.S_IMODE(os.stat(f.path).st_mode) for f in files} == {0o600}, name
        mine = [c for c in calls if run["out"] + os.sep in c + os.sep]  # the output itself or a path under it
        if run["jar"]:
            assert mine == [], mine
        else:  # the raw filesystem: a chmod process for each data file it created
            assert len([c for c in mine if c.endswith(".parquet")]) >= len(files), mine


@pytest.mark.parametrize("writer", ["spark", "arrow"])
@pytest.mark.parametrize("partition_by", [(), ("b",)], ids=["unpartitioned", "partitioned"])
def test_batch_rows_of_another_kind_are_projected(spark, tmp_path: Path, partition_by: tuple[str, ...], writer: str) -> None:
    """A DataFrame over an RDD of Python rows (``GenericInternalRow`` s, not ``UnsafeRow`` s) plans as the same
    scan as a ``foreachBatch`` batch, so Spark's writer (and the Arrow path's ``mapInArrow``, unpartitioned) gets it
    through ``BatchRowsExec``: every row is written, and partitioned by an int column too (Spark's writer sorts the
    rows by ``b`` first, which requires ``UnsafeRow`` s; a string partition column would get them from the
    projection Spark adds for its empty strings)."""
    rows = [(i, None if i % 7 == 0 else f"k{i % 3}", i % 3, i / 3) for i in range(60)]
    df = spark.createDataFrame(spark.sparkContext.parallelize(rows, 3), "id long, k string, b int, x double")
    classes = jvm.jar_classes(df)
    assert classes is not None and classes.batch_rows is not None
    plan = classes.batch_rows.unwrap(df._jdf.queryExecution().executedPlan())
    assert plan.getClass().getName() == "parquetsink.spark.BatchRowsExec"
    out = str(tmp_path / "out")
    ParquetSink(out, partition_by=partition_by, writer=writer)(df, 0)
    table = read_committed(out)
    columns = ("id", "k", "b", "x")
    assert sorted(zip(*(table.column(c).to_pylist() for c in columns))) == rows
    assert sorted(tuple(r) for r in spark.read.parquet(out).select(*columns).collect()) == rows


def _as_foreach_batch(df):
    """``df`` as ``foreachBatch`` hands a batch to its function: a scan of ``df``'s rows (``LogicalRDD.fromDataset``
    over ``queryExecution.toRdd``, what Spark's ``ForeachBatchSink`` builds)."""
    from pyspark.sql import DataFrame

    jvm, jds = df.sparkSession._jvm, df._jdf
    logical_rdd = getattr(getattr(jvm, "org.apache.spark.sql.execution.LogicalRDD$"), "MODULE$")
    node = logical_rdd.fromDataset(jds.queryExecution().toRdd(), jds, False, getattr(logical_rdd, "fromDataset$default$4")())
    return DataFrame(getattr(getattr(jvm, "org.apache.spark.sql.classic.Dataset$"), "MODULE$").ofRows(jds.sparkSession(), node), df.sparkSession)


def test_arrow_path_gets_a_batch_without_its_scans_copy(spark, tmp_path: Path) -> None:
    """The Arrow path's ``mapInArrow`` over a ``foreachBatch`` batch runs over ``BatchRowsExec`` (no copy of each
    row), with the session's settings: 9,000 rows of 8 KB reach Python as one batch under the row bound, split by
    Spark's byte bound outside it; the rows are the batch's. A plan that is not one node over such a scan is
    left as it is, and so is a scan that shares its generated code with other nodes (the partitioned Arrow path's
    projection and sort). Through the sink, partitioned or not, every row is committed once."""
    from pyspark.sql import functions as F

    from parquet_sink.write.parquet_files import _row_bounded_arrow_batches

    def batch_rows(batches):
        import pyarrow as pa

        for batch in batches:
            yield pa.RecordBatch.from_pylist([{"rows": batch.num_rows, "chars": sum(len(s) for s in batch.column(1).to_pylist())}])

    wide = spark.range(9000, numPartitions=1).select("id", F.repeat(F.lit("x"), 8000).alias("s"))
    batch = _as_foreach_batch(wide)
    mapped = batch.mapInArrow(batch_rows, "rows long, chars long")
    with _row_bounded_arrow_batches(spark):
        uncopied = jvm.without_row_copy(mapped)
        assert uncopied is not mapped
        assert [(r.rows, r.chars) for r in uncopied.collect()] == [(9000, 9000 * 8000)]
    split = jvm.without_row_copy(mapped).collect()  # under Spark's byte bound
    assert sum(r.rows for r in split) == 9000 and sum(r.chars for r in split) == 9000 * 8000 and len(split) > 1

    plain = wide.mapInArrow(batch_rows, "rows long, chars long")
    assert jvm.without_row_copy(plain) is plain  # a range, not a batch's scan

    # the partitioned shape: the scan shares its generated code with a projection and a sort; BatchRowsExec entering
    # that stage through an InputAdapter measured no faster (docs/performance.md): left as it is
    def keys(batches):
        import pyarrow as pa

        for batch in batches:
            yield pa.RecordBatch.from_pylist([{"k": k, "id": i} for k, i in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist())])

    staged = _as_foreach_batch(spark.range(300, numPartitions=2).select((F.col("id") % 7).alias("k"), "id"))
    sorted_keys = staged.select(F.col("k").cast("string").alias("k"), "id").sortWithinPartitions("k").mapInArrow(keys, "k string, id long")
    assert jvm.without_row_copy(sorted_keys) is sorted_keys
    assert sorted((r.k, r.id) for r in sorted_keys.collect()) == sorted((str(i % 7), i) for i in range(300))

    for partition_by in ((), ("k",)):
        out = str(tmp_path / f"out{len(partition_by)}")
        rows = spark.range(1000, numPartitions=2).select("id", (F.col("id") * 2).alias("x"), (F.col("id") % 5).alias("k"))
        ParquetSink(out, writer="arrow", partition_by=partition_by)(_as_foreach_batch(rows), 0)
        table = read_committed(out)
        expected = [(i, 2 * i, i % 5) for i in range(1000)]
        assert sorted(zip(*(table.column(c).to_pylist() for c in ("id", "x", "k")))) == expected
        assert sorted(tuple(r) for r in spark.read.parquet(out).select("id", "x", "k").collect()) == expected


def test_a_batch_the_function_persisted_is_written_from_its_cache(spark, tmp_path: Path) -> None:
    """Spark's writer gets a ``foreachBatch`` batch straight from its ``LogicalRDD`` (``BatchRowsExec.ofBatch``: not
    planned again), unless the function persisted the batch: then from the cache, the rows it already computed, as
    planning would give them. The batch's input file is deleted once the batch is cached: computed again (what
    ``ofBatch`` did with a persisted batch), the write fails on the missing file; from the cache it commits every
    row. Unpersisted, the same batch is computed again and fails, committing nothing."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = tmp_path / "in"
    source.mkdir()
    pq.write_table(pa.table({"id": list(range(200)), "k": [f"k{i % 3}" for i in range(200)]}), source / "0.parquet")
    batch = _as_foreach_batch(spark.read.parquet(str(source))).persist()
    out = str(tmp_path / "out")
    try:
        assert batch.count() == 200
        (source / "0.parquet").unlink()
        ParquetSink(out)(batch, 0)
    finally:
        batch.unpersist(blocking=True)
    assert sorted(read_committed(out).column("id").to_pylist()) == list(range(200))
    assert sorted(r.id for r in spark.read.parquet(out).collect()) == list(range(200))
    with pytest.raises(Exception, match="0.parquet"):
        ParquetSink(str(tmp_path / "again"))(batch, 0)
    assert read_committed(str(tmp_path / "again")).num_rows == 0


def test_the_sessions_parquet_settings_reach_the_tasks_of_a_direct_call(spark, tmp_path: Path) -> None:
    """``SinkFileWrite`` calls Spark's writer outside any Dataset action, so nothing put the session's SQL settings
    where the tasks read them (``SQLConf.get`` on an executor: the local properties ``SQLExecution`` sets): a sink
    called with a DataFrame outside a stream wrote dates before 1582 without the rebase
    ``spark.sql.parquet.datetimeRebaseModeInWrite=LEGACY`` asks for, and ``EXCEPTION`` did not refuse them. Spark's
    own writer (``df.write``) is the oracle: the same footer key, the same refusal, nothing committed."""
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    old = spark.range(2).withColumn("d", F.lit("1500-01-01").cast("date"))
    key = "spark.sql.parquet.datetimeRebaseModeInWrite"
    try:
        spark.conf.set(key, "LEGACY")
        old.write.parquet(str(tmp_path / "spark"))
        ParquetSink(str(tmp_path / "ours"))(_as_foreach_batch(old), 0)
        ParquetSink(str(tmp_path / "planned"))(old, 0)

        def legacy_keys(root: Path) -> set[bytes]:
            footers = [pq.read_metadata(p).metadata for p in root.rglob("part-*.parquet") if p.stat().st_size]
            return {k for m in footers for k in m if b"legacy" in k.lower()}

        assert legacy_keys(tmp_path / "spark") == {b"org.apache.spark.legacyDateTime"}
        assert legacy_keys(tmp_path / "ours") == legacy_keys(tmp_path / "planned") == legacy_keys(tmp_path / "spark")
        spark.conf.set(key, "EXCEPTION")
        with pytest.raises(Exception, match="INCONSISTENT_BEHAVIOR_CROSS_VERSION|1582"):
            old.write.parquet(str(tmp_path / "spark_refused"))
        with pytest.raises(Exception, match="INCONSISTENT_BEHAVIOR_CROSS_VERSION|1582"):
            ParquetSink(str(tmp_path / "refused"))(_as_foreach_batch(old), 0)
        assert read_committed(str(tmp_path / "refused")).num_rows == 0
    finally:
        spark.conf.unset(key)


_COMPACT_EVERY_BATCH_CHILD = """
import json, sys
from pyspark.sql import functions as F
from tests.helpers.spark_util import make_session, run_available_now, write_input_files
from parquet_sink import ParquetSink, read_committed

base = sys.argv[1]
spark = make_session(master="local[1]", **{"spark.sql.streaming.fileSink.log.compactInterval": "1"})
write_input_files(base + "/in", [[{"id": i, "k": i % 2} for i in range(b * 10, b * 10 + 10)] for b in range(2)])
stream = spark.readStream.schema("id long, k long").option("maxFilesPerTrigger", 1).json(base + "/in")
run_available_now(stream, base + "/ck-spark", path=base + "/spark", partitionBy=["k"])
result = {"spark": sorted(r.id for r in spark.read.parquet(base + "/spark").collect())}
try:
    run_available_now(stream, base + "/ck-ours", ParquetSink(base + "/ours", partition_by=["k"]))
    result["ours"] = sorted(read_committed(base + "/ours").column("id").to_pylist())
except Exception as exc:
    result["ours"] = f"{type(exc).__name__}: {str(exc)[:400]}"
print("RESULT " + json.dumps(result))
"""


def test_a_compact_interval_of_one_in_the_spark_conf_leaves_the_manifest_readable(tmp_path: Path) -> None:
    """The write's manifest is a ``FileStreamSinkLog`` of a session made from the SparkContext's conf: with
    ``spark.sql.streaming.fileSink.log.compactInterval=1`` there (legal: Spark's own sink then compacts every batch)
    its batch 0 is ``0.compact``, and every batch of the sink failed, reading ``_manifest/0`` (FileNotFoundError).
    Spark's own file sink, in the same session, is the oracle: both land every row."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    child = subprocess.run(
        [sys.executable, "-c", _COMPACT_EVERY_BATCH_CHILD, str(tmp_path)],
        cwd=str(ROOT), env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600,
    )
    lines = [line for line in child.stdout.splitlines() if line.startswith("RESULT ")]
    assert child.returncode == 0 and lines, child.stdout[-3000:] + child.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert result["spark"] == list(range(20)), result
    assert result["ours"] == result["spark"], result


def test_an_observation_on_the_batch_gets_its_metrics(spark, tmp_path: Path) -> None:
    """A function that observes its batch (``batch.observe(Observation(...), ...)``) and hands that DataFrame to the
    sink: ``Observation.get`` waits for the query execution that ran the plan to end, and Spark's writer was called
    outside any (no Dataset action), so it waited for ever. ``df.write`` of the same DataFrame is the oracle: the
    metrics of the rows written."""
    import threading

    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    def observed(observation: Observation):
        return _as_foreach_batch(spark.range(0, 7, numPartitions=2)).observe(observation, F.count(F.lit(1)).alias("n"))

    def metrics(observation: Observation) -> dict:
        got: dict = {}
        waiting = threading.Thread(target=lambda: got.update(observation.get), daemon=True)
        waiting.start()
        waiting.join(60)
        return got

    spark_observation, ours = Observation("spark_write"), Observation("parquet_sink_write")
    observed(spark_observation).write.parquet(str(tmp_path / "spark"))
    ParquetSink(str(tmp_path / "out"))(observed(ours), 0)
    assert metrics(spark_observation) == {"n": 7}
    assert metrics(ours) == metrics(spark_observation)
    assert read_committed(str(tmp_path / "out")).num_rows == 7


class _StoppedContext:
    """What a SparkContext is once stopped, to the caches (PySpark's ``stop()`` sets ``_jsc`` to None)."""

    _jsc = None


def _cache_of(name: str):
    """(the per-SparkContext cache ``name``, the call that fills it for a batch DataFrame)."""
    from parquet_sink.write import manifest_write, spark_staging

    return {
        "jvm._LOADED": (jvm._LOADED, jvm.jar_classes),
        "manifest_write._JVM": (manifest_write._JVM, manifest_write._jvm_of),
        "spark_staging._ROWS_COUNTED": (spark_staging._ROWS_COUNTED, spark_staging._rows_counted),
    }[name]


@pytest.mark.parametrize("name", ["jvm._LOADED", "manifest_write._JVM", "spark_staging._ROWS_COUNTED"])
def test_a_stopped_contexts_entry_is_dropped_from_every_per_context_cache(spark, name: str) -> None:
    """Each cache of JVM objects per SparkContext kept an entry for every context of the process for ever: one
    stopped (a process that stops its session and builds another) kept its JVM objects alive in Python and, through
    py4j's references, in the JVM. Adding the running context's entry drops the entries of stopped ones; the
    running one stays and is used again."""
    cache, fill = _cache_of(name)
    df = spark.range(1)
    context = spark.sparkContext
    fill(df)
    kept = cache.pop(context)  # put back below: the other tests of this session reuse it
    stopped = _StoppedContext()
    cache[stopped] = kept
    try:
        fill(df)
        assert stopped not in cache and context in cache
        again = cache[context]
        fill(df)
        assert cache[context] is again  # made once for the running context
    finally:
        cache.pop(stopped, None)
        cache[context] = kept
