"""Sections 1 and 2: sink throughput, per-batch latency and cost split; the no-Spark ceilings.

Every contender streams the same pre-generated input files, one file per micro-batch
(``readStream.parquet(dir)`` with ``maxFilesPerTrigger=1``, ``trigger(availableNow=True)``):

* ``spark``: Spark's own file sink, ``writeStream.format("parquet")``;
* ``ours``: ``foreachBatch(ParquetSink(out))`` (``writer="auto"``: Spark's writer + rename on local disk),
  wrapped to record ``last_progress`` per batch;
* ``ours-arrow``: the same with ``writer="arrow"`` (pyarrow in ``mapInArrow`` tasks, the object-store path);
* ``noop-sink``: ``format("noop")``: Spark reading the input and discarding it (the scan alone);
* ``noop-arrow``: ``foreachBatch`` running ``mapInArrow`` with a function that only drains its input
  (the scan plus the JVM -> Arrow -> Python transfer the sink pays, without writing Parquet);
* ``spark-writer``: ``foreachBatch`` calling Spark's own batch writer, ``df.write.parquet(out/batch-N)``,
  with no log: what a sink that let Spark write the files and only committed the log could reach.

Each of ``spark``, ``ours``, ``ours-arrow`` and ``spark-writer`` also runs partitioned by ``country``
(16 values), as ``<kind>-part``.

The noop runs split the sink's cost: scan | transfer to Python | Parquet encode+write | log commit.
Dirty pages are flushed (``os.sync()``) before every timed run so one run's writeback does not land
in the next one's time.
Without Spark: ``pyarrow`` reading each input file and writing it (2 threads, half the row groups
each, like the 2 Spark tasks) is the ceiling; ``delta-rs`` appends of the same tables are shown too.
Repeats are interleaved (the order rotates every repeat) and the per-repeat ratios are reported.
"""

from __future__ import annotations

import logging
import os
import shutil
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from parquet_sink import ParquetSink
from parquet_sink.write import parquet_files

from .common import Stat, percentile

logger = logging.getLogger("benchmarks.sink")

WRITING_KINDS = ("spark", "ours", "ours-arrow", "spark-writer")
PARTITION_BY = ("country",)
SPARK_KINDS = WRITING_KINDS + ("noop-sink", "noop-arrow") + tuple(f"{k}-part" for k in WRITING_KINDS)


def drain(batches):
    """mapInArrow function that reads every row and writes nothing."""
    rows = 0
    for batch in batches:
        rows += batch.num_rows
    yield pa.RecordBatch.from_pydict({"rows": [rows]}, schema=pa.schema([("rows", pa.int64())]))


class RecordingSink:
    """``foreachBatch`` wrapper: calls the ParquetSink and keeps its ``last_progress`` of every batch."""

    def __init__(self, sink: ParquetSink) -> None:
        self.sink = sink
        self.batches: list[dict[str, float]] = []

    def __call__(self, df, batch_id: int) -> None:
        started = time.perf_counter()
        self.sink(df, batch_id)
        total = time.perf_counter() - started
        p = self.sink.last_progress
        self.batches.append(
            {
                "batch": batch_id,
                "call": total,
                "write": p.write_seconds,
                "publish": p.publish_seconds,
                "commit": p.commit_seconds,
                "other": total - p.write_seconds - p.commit_seconds,
                "rows": p.rows,
                "files": p.files,
            }
        )


class DrainSink:
    """``foreachBatch`` function running the same mapInArrow job shape as the sink, writing nothing."""

    def __init__(self) -> None:
        self.batches: list[dict[str, float]] = []

    def __call__(self, df, batch_id: int) -> None:
        started = time.perf_counter()
        with parquet_files._row_bounded_arrow_batches(df.sparkSession):  # as the sink's own job
            rows = sum(r[0] for r in df.mapInArrow(drain, "rows long").collect())
        self.batches.append({"batch": batch_id, "call": time.perf_counter() - started, "rows": rows})


class SparkWriterSink:
    """``foreachBatch`` function letting Spark's batch writer write each micro-batch (no log, no commit)."""

    def __init__(self, out: str, partition_by: tuple[str, ...] = ()) -> None:
        self.out = out
        self.partition_by = partition_by
        self.batches: list[dict[str, float]] = []

    def __call__(self, df, batch_id: int) -> None:
        started = time.perf_counter()
        df.write.mode("errorifexists").partitionBy(*self.partition_by).parquet(
            os.path.join(self.out, f"batch-{batch_id:05d}")
        )
        self.batches.append({"batch": batch_id, "call": time.perf_counter() - started})


@dataclass
class QueryRun:
    kind: str
    wall: float
    rows: int
    batches: list[dict[str, Any]]  # per batch: Spark's durationMs (s) plus what the wrapper recorded
    files_per_batch: float
    cpu: float = 0.0  # CPU seconds of the JVM, its Python workers and this process (children it reaped included)


def _cpu_seconds(pids: list[int]) -> float:
    """utime + stime + cutime + cstime of ``pids`` (gone ones count 0): a load-robust cost next to wall time,
    since other work on the host stretches the wall time of a run far more than its CPU time."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15])
    return total / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    """The children of every thread of ``pid`` (``/proc/<pid>/task/<tid>/children`` lists those one thread forked:
    the JVM starts its Python daemon from a task thread, not its main thread)."""
    children = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/children") as fh:
                children += [int(c) for c in fh.read().split()]
        except OSError:
            continue
    return children


def _processes(spark) -> list[int]:
    """The JVM, this process, and the JVM's Python daemon and workers (its children and theirs) running now."""
    jvm = spark._jvm.java.lang.ProcessHandle.current().pid()
    children = _children(jvm)
    return [jvm, os.getpid(), *children, *(g for c in children for g in _children(c))]


def timed_query(spark, writer) -> tuple[Any, float, float]:
    """Start the streaming ``writer`` and wait for it: (query, wall seconds, CPU seconds of the JVM, its Python
    workers and this process)."""
    cpu_before = _cpu_seconds(processes := _processes(spark))
    started = time.perf_counter()
    query = writer.start()
    query.awaitTermination()
    wall = time.perf_counter() - started
    processes += [p for p in _processes(spark) if p not in processes]
    return query, wall, _cpu_seconds(processes) - cpu_before


@dataclass
class SinkResults:
    batches: int
    rows_per_batch: int
    input_bytes: int
    runs: dict[str, list[QueryRun]] = field(default_factory=dict)
    ceiling: Stat = field(default_factory=Stat)  # pyarrow seconds
    delta: Stat = field(default_factory=Stat)  # delta-rs seconds
    outputs: dict[str, str] = field(default_factory=dict)  # kind -> output of the last repeat

    def wall(self, kind: str) -> Stat:
        return Stat([r.wall for r in self.runs.get(kind, [])])

    def rate(self, kind: str) -> Stat:
        if kind == "pyarrow":
            return Stat([self.total_rows / s for s in self.ceiling.values])
        if kind == "delta-rs":
            return Stat([self.total_rows / s for s in self.delta.values])
        return Stat([r.rows / r.wall for r in self.runs.get(kind, [])])

    @property
    def total_rows(self) -> int:
        return self.batches * self.rows_per_batch

    def per_batch(self, kind: str, key: str) -> list[float]:
        """One figure of every batch of every repeat (pooled for percentiles)."""
        return [b[key] for r in self.runs.get(kind, []) for b in r.batches if key in b]

    def per_batch_median(self, kind: str, key: str) -> Stat:
        """Median per batch within each repeat, as a Stat over repeats."""
        out = Stat()
        for r in self.runs.get(kind, []):
            values = [b[key] for b in r.batches if key in b]
            if values:
                out.add(percentile(values, 50))
        return out


def run_query(spark, kind: str, input_dir: str, schema, work: str, tag: str) -> QueryRun:
    out = os.path.join(work, f"out-{kind}-{tag}")
    checkpoint = os.path.join(work, f"ckpt-{kind}-{tag}")
    stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(input_dir)
    writer = stream.writeStream.option("checkpointLocation", checkpoint).trigger(availableNow=True)
    recorder = None
    base, partitioned = kind.removesuffix("-part"), kind.endswith("-part")
    partition_by = PARTITION_BY if partitioned else ()
    if base == "spark":
        writer = writer.format("parquet").option("path", out).partitionBy(*partition_by)
    elif base == "noop-sink":
        writer = writer.format("noop")
    elif base in ("ours", "ours-arrow"):
        choice = "arrow" if base == "ours-arrow" else "auto"
        recorder = RecordingSink(ParquetSink(out, partition_by=partition_by, writer=choice))
        writer = writer.foreachBatch(recorder)
    elif base == "noop-arrow":
        recorder = DrainSink()
        writer = writer.foreachBatch(recorder)
    elif base == "spark-writer":
        recorder = SparkWriterSink(out, partition_by)
        writer = writer.foreachBatch(recorder)
    else:
        raise ValueError(kind)
    query, wall, cpu = timed_query(spark, writer)
    progress = list(query.recentProgress)
    batches = []
    for p in progress:
        d = p["durationMs"]
        batches.append(
            {
                "batch": p["batchId"],
                "rows_in": p["numInputRows"],
                "trigger": d.get("triggerExecution", 0) / 1000,
                "addBatch": d.get("addBatch", 0) / 1000,
                "overhead": (d.get("triggerExecution", 0) - d.get("addBatch", 0)) / 1000,
            }
        )
    if recorder is not None:
        by_id = {b["batch"]: b for b in recorder.batches}
        for b in batches:
            b.update(by_id.get(b["batch"], {}))
    rows = sum(b["rows_in"] for b in batches)
    files = 0.0
    if base in ("ours", "ours-arrow"):
        files = sum(b["files"] for b in batches) / max(1, len(batches))
    elif base == "spark":
        files = sum(n.endswith(".parquet") for _, _, names in os.walk(out) for n in names) / max(1, len(batches))
    shutil.rmtree(checkpoint, ignore_errors=True)
    logger.info("%-10s %s: %d rows in %d batches, %.2fs wall (%.0f rows/s)", kind, tag, rows, len(batches), wall, rows / wall)
    return QueryRun(kind, wall, rows, batches, files, cpu)


@dataclass(frozen=True)
class Variant:
    """One contender of a same-session A/B: the :func:`run_query` kind it runs (without ``-part``) and what to set
    up before each of its runs (a module attribute swapped in, a session setting)."""

    kind: str
    setup: Callable[[], None] = lambda: None


def paired_repeats(spark, variants: dict[str, Variant], args, work: str) -> dict[str, list[QueryRun]]:
    """Every variant streams the same input (``args.batches`` x ``args.rows``, partitioned if ``args.partitioned``)
    in one session: one warm-up each, then ``args.repeats`` repeats in an order that reverses every other repeat;
    each run's output removed after it. The runs by variant name, repeat by repeat (pairs: :func:`ab_ratio`)."""
    from .data import generate_input

    suffix = "-part" if args.partitioned else ""
    inputs, warm = os.path.join(work, "input"), os.path.join(work, "warm")
    generate_input(inputs, args.batches, args.rows)
    generate_input(warm, 2, max(10_000, args.rows // 10))
    schema = spark.read.parquet(inputs).schema
    for name, variant in variants.items():
        variant.setup()
        run_query(spark, variant.kind + suffix, warm, schema, work, f"warmup-{name}")
    runs: dict[str, list[QueryRun]] = {name: [] for name in variants}
    order = list(variants)
    for rep in range(args.repeats):
        for name in order if rep % 2 == 0 else order[::-1]:
            variant = variants[name]
            variant.setup()
            os.sync()
            runs[name].append(run_query(spark, variant.kind + suffix, inputs, schema, work, f"{name}{rep}"))
            shutil.rmtree(os.path.join(work, f"out-{variant.kind}{suffix}-{name}{rep}"), ignore_errors=True)
    return runs


def ab_ratio(runs: dict[str, list[QueryRun]], a: str, b: str, attribute: str = "wall") -> float:
    """The median over repeats of ``a``'s ``attribute`` (wall or CPU seconds) over ``b``'s in the same repeat."""
    return statistics.median(getattr(x, attribute) / getattr(y, attribute) for x, y in zip(runs[a], runs[b]))


def print_ab(runs: dict[str, list[QueryRun]], args, reference: str) -> None:
    """What a same-session A/B prints: each variant's sink time and CPU over Spark's sink's (the variant
    ``"spark"``), ``reference``'s time over each other variant's, per repeat, and every variant's ``addBatch`` p50 / p99
    (each query's first batch left out)."""
    print(f"{'partitioned' if args.partitioned else 'unpartitioned'}, {args.batches} x {args.rows:,} rows, "
          f"{args.repeats} paired repeats")
    for variant in runs:
        if variant != "spark":
            against = "" if variant == reference else f"; {reference} / this, per repeat (median) {ab_ratio(runs, reference, variant):.3f}"
            print(f"  {variant}: sink time / Spark's {ab_ratio(runs, variant, 'spark'):.3f}x, "
                  f"CPU {ab_ratio(runs, variant, 'spark', 'cpu'):.3f}x{against}")
    for variant, variant_runs in runs.items():
        ms = [b["addBatch"] * 1000 for r in variant_runs for b in r.batches if b["batch"] > 0]
        print(f"  {variant}: addBatch p50 {percentile(ms, 50):.0f} ms, p99 {percentile(ms, 99):.0f} ms")


def _write_half(path: str, groups: list[int], out: str) -> None:
    table = pq.ParquetFile(path).read_row_groups(groups, use_threads=False)
    pq.write_table(table, out, compression="snappy", row_group_size=1 << 30)


def pyarrow_ceiling(inputs: list[str], out: str) -> float:
    """Read every input file and write it as Parquet with pyarrow, 2 threads (no Spark, no log)."""
    os.makedirs(out, exist_ok=True)
    started = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        for i, path in enumerate(inputs):
            n = pq.ParquetFile(path).num_row_groups
            halves = [list(range(0, n // 2 or 1)), list(range(n // 2 or 1, n))]
            futures = [
                pool.submit(_write_half, path, groups, os.path.join(out, f"part-{t:05d}-{i:05d}.snappy.parquet"))
                for t, groups in enumerate(halves)
                if groups
            ]
            for f in futures:
                f.result()
    return time.perf_counter() - started


def delta_appends(inputs: list[str], out: str) -> float:
    """One delta-rs append per input file (no Spark)."""
    from deltalake import write_deltalake

    started = time.perf_counter()
    for path in inputs:
        write_deltalake(out, pq.read_table(path), mode="append")
    return time.perf_counter() - started


def run_order(contenders: list[str], rep: int) -> list[str]:
    """The order of repeat ``rep``: Spark's file sink and ``ours`` of the same layout run back to back (which
    one first alternates), so their ratio compares runs seconds apart on this noisy host; the blocks rotate
    every repeat and their order reverses every other repeat.

    >>> run_order(["spark", "ours", "noop-sink", "spark-part", "ours-part"], 1)
    ['ours', 'spark', 'ours-part', 'spark-part', 'noop-sink']
    """
    pairs = {"spark": "ours", "spark-part": "ours-part"}
    paired = {pairs[k] for k in contenders if pairs.get(k) in contenders}
    blocks = [[k, pairs[k]] if pairs.get(k) in paired else [k] for k in contenders if k not in paired]
    shift = rep % len(blocks)
    blocks = blocks[shift:] + blocks[:shift]
    if rep % 2:
        blocks = [b[::-1] for b in reversed(blocks)]
    return [kind for block in blocks for kind in block]


def run(
    spark, input_dir: str, inputs: list[str], warm_dir: str, work: str, repeats: int, rows_per_batch: int,
    kinds: tuple[str, ...] = SPARK_KINDS, ceilings: bool = True,
) -> SinkResults:
    schema = spark.read.parquet(input_dir).schema
    results = SinkResults(len(inputs), rows_per_batch, sum(os.path.getsize(p) for p in inputs))
    os.sync()
    logger.info("warming up (JIT, Python workers): every kind once on the small warm-up input")
    for kind in kinds:
        run_query(spark, kind, warm_dir, schema, work, "warmup")
        shutil.rmtree(os.path.join(work, f"out-{kind}-warmup"), ignore_errors=True)
    pyarrow_ceiling([os.path.join(warm_dir, n) for n in sorted(os.listdir(warm_dir))], os.path.join(work, "ceiling-warmup"))
    shutil.rmtree(os.path.join(work, "ceiling-warmup"), ignore_errors=True)
    contenders = list(kinds) + (["pyarrow", "delta-rs"] if ceilings else [])
    for rep in range(repeats):
        order = run_order(contenders, rep)
        logger.info("sink repeat %d/%d, order %s", rep + 1, repeats, order)
        for kind in order:
            tag = f"r{rep}"
            os.sync()
            if kind == "pyarrow":
                out = os.path.join(work, f"out-pyarrow-{tag}")
                results.ceiling.add(pyarrow_ceiling(inputs, out))
                logger.info("%-10s %s: %.2fs", kind, tag, results.ceiling.values[-1])
            elif kind == "delta-rs":
                out = os.path.join(work, f"out-delta-{tag}")
                results.delta.add(delta_appends(inputs, out))
                logger.info("%-10s %s: %.2fs", kind, tag, results.delta.values[-1])
            else:
                out = os.path.join(work, f"out-{kind}-{tag}")
                results.runs.setdefault(kind, []).append(run_query(spark, kind, input_dir, schema, work, tag))
            previous = results.outputs.get(kind)
            if previous and previous != out:
                shutil.rmtree(previous, ignore_errors=True)
            results.outputs[kind] = out
    for kind in ("spark", "ours", "ours-arrow", "spark-part", "ours-part", "ours-arrow-part"):
        bad = [r for r in results.runs.get(kind, []) if r.rows != results.total_rows]
        if bad:
            raise RuntimeError(f"{kind} wrote {bad[0].rows} rows, expected {results.total_rows}")
    return results
