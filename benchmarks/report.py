"""RESULTS.md, results.png and the stdout summary, from what the run measured."""

from __future__ import annotations

from typing import Any

from .common import Stat, percentile, ratio_stat
from .filter_bench import section as filter_section
from .growth_bench import section as growth_section
from .iceberg_bench import section as iceberg_section
from .object_store_bench import section as store_section
from .stream_bench import EMPTY, SPARK_EMPTY

NAMES = {
    "spark": "Spark file sink (`format(\"parquet\")`)",
    "ours": "ParquetSink (`foreachBatch`), `writer=\"auto\"` (Spark writer + rename on local disk)",
    "ours-arrow": "ParquetSink, `writer=\"arrow\"` (pyarrow in `mapInArrow`)",
    "noop-sink": "Spark `format(\"noop\")` (scan only)",
    "noop-arrow": "`foreachBatch` + `mapInArrow` that drains (scan + transfer)",
    "spark-writer": "`foreachBatch` + Spark's batch writer `df.write.parquet` (no log)",
    "pyarrow": "pyarrow alone, 2 threads (no Spark, no log)",
    "delta-rs": "delta-rs `write_deltalake` appends (no Spark)",
}


SHAPE_LABELS = {
    "deltas": "nine delta files, no compact file (Spark's sink)",
    "spark_compact": "Spark's compact file, no columnar copy, + nine deltas",
}


def _x(stat: Stat) -> str:
    """A ratio as ``0.42x (0.40-0.45)``."""
    if not stat.values:
        return "n/a"
    return f"{stat.median:.2f}x ({stat.low:.2f}-{stat.high:.2f})"


def _over(stat: Stat, reference: Stat) -> str:
    """``stat`` as a multiple of ``reference``, repeat by repeat (``1.9x (1.7-2.2)``; > 1 = slower)."""
    return _x(ratio_stat(reference, stat, False))


def _per_repeat(sink, kind: str, key: str) -> Stat:
    return sink.per_batch_median(kind, key)


def _best(sink, kind: str, key: str) -> Stat:
    """The fastest batch of each repeat (the least disturbed figure on a noisy host)."""
    return Stat([min(b[key] for b in r.batches if key in b) for r in sink.runs.get(kind, []) if r.batches])


def _diff(a: Stat, b: Stat) -> Stat:
    """Per-repeat a - b."""
    return Stat([x - y for x, y in zip(a.values, b.values)])


def _ms(stat: Stat) -> str:
    return stat.fmt("ms", 3, 1000.0)


def _pcts(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"{percentile(values, 50) * 1000:.0f} / {percentile(values, 99) * 1000:.0f} ms"


def headline(ctx: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(comparison, ours, theirs, ratio, meaning) rows."""
    rows = []
    sink = ctx.get("sink")
    if sink:
        ours, theirs = sink.rate("ours"), sink.rate("spark")
        rows.append(
            ("Sink throughput vs Spark file sink", ours.fmt("rows/s", 3), theirs.fmt("rows/s", 3),
             _x(ratio_stat(ours, theirs, True)), "ours/theirs rows/s; goal >= 1.0")
        )
        for kind in ("ours", "ours-arrow"):
            for suffix, layout in (("", "unpartitioned"), ("-part", "partitioned")):
                ratio = time_ratio(sink, kind + suffix, "spark" + suffix)
                gap = gap_per_batch(sink, kind + suffix, "spark" + suffix)
                if ratio.values:
                    rows.append(
                        (f"Sink time / Spark file-sink time, {kind}, {layout}", _ms(gap) + " per batch more",
                         "", _x(ratio), "ours/theirs wall time; goal <= 1.0")
                    )
                cpu = cpu_ratio(sink, kind + suffix, "spark" + suffix)
                if cpu.values:
                    rows.append(
                        (f"Sink CPU time / Spark file-sink CPU time, {kind}, {layout}", "", "", _x(cpu),
                         "ours/theirs CPU seconds; goal <= 1.0")
                    )
        best_ours, best_spark = _best(sink, "ours", "write"), _best(sink, "spark", "addBatch")
        rows.append(
            ("Sink, Spark job per batch (fastest batch of each repeat) vs Spark sink's addBatch", best_ours.fmt(),
             best_spark.fmt(), _x(ratio_stat(best_ours, best_spark, False)), "theirs/ours time")
        )
        ceiling = sink.rate("pyarrow")
        rows.append(
            ("Sink throughput vs pyarrow ceiling", ours.fmt("rows/s", 3), ceiling.fmt("rows/s", 3),
             _x(ratio_stat(ours, ceiling, True)), "share of the no-Spark limit")
        )
    store = ctx.get("store")
    if store:
        for kind, path in (("ours", "Spark's writer in place"), ("arrow", "Arrow path")):
            for suffix, layout in (("", "unpartitioned"), ("-part", "partitioned")):
                if store.runs.get(kind + suffix):
                    rows.append(
                        (f"Sink time / Spark file-sink time on moto S3 (Spark through S3A), ours ({path}), {layout}",
                         store.wall(kind + suffix).fmt(), store.wall("spark" + suffix).fmt(),
                         _x(store.ratio(kind + suffix)), "ours/theirs wall time; goal <= 1.0")
                    )
    planning = ctx.get("planning")
    if planning:
        for i, h in enumerate(planning.histories):
            ours = planning.times[("ours", i)]
            for other in ("spark", "delta-rs"):
                theirs = planning.times[(other, i)]
                rows.append(
                    (f"Planning, {h.batches:,} batches / {h.entries:,} files, vs {other}", ours.fmt(), theirs.fmt(),
                     _x(ratio_stat(ours, theirs, False)), "theirs/ours time; > 1 = ours faster")
                )
    comp = ctx.get("compaction")
    if comp:
        if comp.spark_seconds.values:
            rows.append(
                (f"Compaction of {comp.entries_before:,} entries, ours with its columnar copy, time vs Spark",
                 comp.ours_seconds.fmt(), comp.spark_seconds.fmt(),
                 _x(ratio_stat(comp.ours_seconds, comp.spark_seconds, False)), "theirs/ours time; goal >= 10x")
            )
            rows.append(
                ("Compaction, peak memory growth vs Spark heap", comp.ours_peak_growth_mb.fmt("MB", 3),
                 comp.spark_heap_mb.fmt("MB", 3), _x(ratio_stat(comp.ours_peak_growth_mb, comp.spark_heap_mb, False)),
                 "theirs/ours MB (RSS growth vs JVM heap peak)")
            )
        else:
            rows.append((f"Compaction of {comp.entries_before:,} entries", comp.ours_seconds.fmt(), "not measured", "n/a", comp.spark_note))
        if comp.floor_seconds.values:
            rows.append((f"Compaction of {comp.entries_before:,} entries, ours with its columnar copy, time vs byte-copy "
                         "floor", comp.ours_seconds.fmt(), comp.floor_seconds.fmt(),
                         _over(comp.ours_seconds, comp.floor_seconds), "ours/floor time; goal <= 4x"))
    for shape in ctx.get("shapes", []):
        label = f"Compaction of {shape.entries:,} entries, {shape.shape.replace('_', ' ')}"
        rows.append((f"{label}, time vs byte-copy floor", shape.ours_seconds.fmt(), shape.floor_seconds.fmt(),
                     _over(shape.ours_seconds, shape.floor_seconds), "ours/floor time; goal <= 4x"))
        if shape.spark_seconds.values:
            rows.append((f"{label}, time vs Spark", shape.ours_seconds.fmt(), shape.spark_seconds.fmt(),
                         _x(ratio_stat(shape.ours_seconds, shape.spark_seconds, False)), "theirs/ours time; goal >= 10x"))
        if shape.plan_first_seconds.values:
            rows.append((f"Planning {shape.entries:,} files of Spark's compact file: first (no copy) vs with the copy",
                         shape.plan_first_seconds.fmt(), shape.plan_copy_seconds.fmt(),
                         _over(shape.plan_first_seconds, shape.plan_copy_seconds), "first/later time; goal <= 1.5x"))
        if shape.plan_follow_seconds.values:
            rows.append(("Planning after Spark compacts again: first read of its new compact file (from the older "
                         "copy) vs a read with a copy", shape.plan_follow_seconds.fmt(), shape.plan_copy_seconds.fmt(),
                         _over(shape.plan_follow_seconds, shape.plan_copy_seconds), "first/later time"))
    stream = ctx.get("stream")
    if stream:
        rows.append((f"Stream continuing on a {stream.entries:,}-entry Spark-written log: p50 / p99 batch (addBatch)",
                     f"{stream.p('ours', 50):.0f} / {stream.p('ours', 99):.0f} ms",
                     f"{stream.p('spark', 50):.0f} / {stream.p('spark', 99):.0f} ms",
                     f"{stream.p('spark', 99) / stream.p('ours', 99):.2f}x", "theirs/ours p99 time"))
        if EMPTY in stream.ms and SPARK_EMPTY in stream.ms:
            rows.append((f"Tiny batches ({1000:,} rows) into an empty output: p50 / p99 batch (addBatch)",
                         f"{stream.p(EMPTY, 50):.0f} / {stream.p(EMPTY, 99):.0f} ms",
                         f"{stream.p(SPARK_EMPTY, 50):.0f} / {stream.p(SPARK_EMPTY, 99):.0f} ms",
                         f"{stream.p(SPARK_EMPTY, 50) / stream.p(EMPTY, 50):.2f}x / "
                         f"{stream.p(SPARK_EMPTY, 99) / stream.p(EMPTY, 99):.2f}x", "theirs/ours p50 / p99 time"))
    read = ctx.get("read")
    if read:
        for mode, label in (("table", "to a pyarrow Table"), ("count", "row count")):
            ours = read.times[("ours", mode)]
            for other in ("spark", "delta-rs"):
                theirs = read.times[(other, mode)]
                rows.append(
                    (f"End-to-end read {label}, vs {other}", ours.fmt(), theirs.fmt(),
                     _x(ratio_stat(ours, theirs, False)), "theirs/ours time")
                )
    return rows


def markdown(ctx: dict[str, Any], png_name: str) -> str:
    args = ctx["args"]
    m, v = ctx["machine"], ctx["versions"]
    out: list[str] = []
    w = out.append
    w("# Benchmarks: parquet_sink vs Spark's file sink and delta-rs\n")
    if args.quick:
        w("**QUICK RUN (`--quick`): tiny sizes for smoke testing; the figures mean nothing.**\n")
    w(
        f"Generated by `python -m benchmarks.run` (`./dev.sh bench`) on {ctx['date']}; the whole command took "
        f"**{ctx['runtime'] / 60:.1f} min**. Every figure is the median of {args.repeats} repeats "
        f"({args.sink_repeats} for the sink section, {getattr(args, 'shape_repeats', args.repeats)} for the log "
        "shapes) with the min-max spread in parentheses. Repeats are interleaved "
        "(ours and theirs alternate, the order rotates each repeat; in the sink section Spark's file sink and ours "
        "run back to back, which one first alternating) and each ratio is computed within a repeat, then "
        "summarized the same way. "
        "**Ratios are oriented so that > 1.0 means ours is better** (faster, more rows/s, less memory).\n"
    )
    w(f"![results]({png_name})\n")
    w("## Machine and versions\n")
    w("| | |\n|---|---|")
    w(f"| CPU | {m['cpu']} |")
    w(f"| cores | {m['cores']} |")
    w(f"| RAM | {m['ram']} |")
    w(f"| OS | {m['os']} |")
    for key in ("python", "pyspark", "pyarrow", "deltalake", "parquet_sink", "java"):
        w(f"| {key} | {v.get(key, 'n/a')} |")
    w(f"| Spark | local[2], driver heap {args.driver_memory}, UI off, 2 shuffle partitions, one session for the run |")
    w(
        f"| storage | sink input/output: `{ctx['work_dir'].rsplit('/', 1)[0]}` (local disk); synthesized histories: "
        f"`{ctx['meta_dir'].rsplit('/', 1)[0]}` (tmpfs when it is `/dev/shm`: a million tiny files are created in "
        "seconds there; all readers read the same files from memory) |\n"
    )

    w("## Headline ratios\n")
    w("| comparison | ours | theirs | ratio | meaning |\n|---|---|---|---|---|")
    for row in headline(ctx):
        w("| " + " | ".join(row) + " |")
    w("")

    sink = ctx.get("sink")
    if sink:
        _sink_section(w, sink)
    if ctx.get("store"):
        w(store_section(ctx["store"]))
    planning = ctx.get("planning")
    if planning:
        _planning_section(w, planning)
    comp = ctx.get("compaction")
    if comp:
        _compaction_section(w, comp)
    if ctx.get("shapes"):
        _shapes_section(w, ctx["shapes"])
    if ctx.get("stream"):
        _stream_section(w, ctx["stream"])
    read = ctx.get("read")
    if read:
        _read_section(w, read)
    if ctx.get("delta"):
        _delta_section(w, ctx["delta"])
    if ctx.get("delta_scaling"):
        _delta_scaling_section(w, ctx["delta_scaling"])
    if ctx.get("filter"):
        w(filter_section(ctx["filter"]))
    if ctx.get("optimize"):
        _optimize_section(w, ctx["optimize"])
    if ctx.get("growth"):
        w(growth_section(ctx["growth"]))
    if ctx.get("iceberg"):
        w(iceberg_section(ctx["iceberg"]))
    w("## Where we are behind, and why / what would close it\n")
    for para in analysis(ctx):
        w(para + "\n")
    w("## Method notes\n")
    w(
        "- Input: the same Parquet files for every contender, read with `spark.readStream.schema(...)"
        ".option(\"maxFilesPerTrigger\", 1).parquet(dir)` and `trigger(availableNow=True)`, one file per micro-batch; "
        "Spark splits each file into 2 tasks (one per core), so both sinks write 2 files per batch.\n"
        "- The timestamp column is `TIMESTAMP_NTZ`: until commit c40a8e3 `ParquetSink` failed on a `TimestampType` "
        "(timezone-aware) column (`to_arrow_schema(df.schema)` without `timezone=` in `ParquetSink._check_schema`, "
        "an `AssertionError` in pyspark 4.3), so the benchmark data avoids it.\n"
        "- Every contender ran once untimed on a small warm-up input first (JVM JIT, Python workers); dirty pages "
        "are flushed (`os.sync()`) before every timed sink run.\n"
        "- This host is noisy: within one run, per-batch times of every contender (Spark's noop sink included) "
        "switch between two speeds about 2x apart, and whole runs differ by up to ~1.5x. Compare the per-repeat "
        "ratios and the fastest-batch figures rather than absolute times; the raw numbers are in `results.json`.\n"
        "- Throughput is rows over the query's wall time (`start()` to `awaitTermination()`), so the query "
        "start-up and checkpoint writes count for both sinks. Latencies are pooled over all batches of all repeats.\n"
        "- Histories are synthesized (see `benchmarks/synth.py`): `_spark_metadata` lines are made by the core's "
        "`LogEntry.to_json`/`CommitRecord.to_entry` exactly as `ParquetSink` commits them (a delta holds one "
        "commit record plus the batch's data files; compact every 10, keeping the first and newest commit records "
        "as compaction does), and `_delta_log` as delta-rs appends leave it (all JSON "
        "commits, the newest checkpoint of every-100 with delta-rs's own checkpoint schema). Data files exist "
        "(hard links to one small Parquet file) so Spark's schema inference reads a real footer.\n"
        "- Log bytes per data file vs Spark: the bytes of the `_spark_metadata` files a reader opens, against the "
        "same files as Spark's own sink writes them for the same stream (its seven keys per data file, no commit "
        "records, no `batchId`).\n"
        "- Planning peak memory: a fresh subprocess per reader plans once; its peak RSS (`VmHWM`) minus its RSS "
        "before the call.\n"
        "- Peak memory of our compaction is the subprocess's peak RSS (`VmHWM`, reset just before) minus its RSS "
        "before `MetadataLog.add`; "
        "Spark's is the JVM heap pools' peak after a GC and peak reset, minus the heap in use before "
        "(sum of per-pool peaks: an upper bound). They are different measures (RSS vs heap) of the same work.\n"
    )
    return "\n".join(out) + "\n"


def _sink_section(w, sink) -> None:
    w("## 1. Sink throughput, latency and cost split\n")
    w(
        f"{sink.batches} micro-batches x {sink.rows_per_batch:,} rows x 10 columns (int64 x3, timestamp, double x3, "
        f"int32, boolean, string x2), {sink.input_bytes / 1e6:.0f} MB of snappy Parquet input, "
        f"{sink.total_rows:,} rows per run. Output: snappy Parquet, unpartitioned.\n"
    )
    w("| contender | wall time | rows/s | vs Spark file sink |\n|---|---|---|---|")
    spark_rate = sink.rate("spark")
    for kind in ("spark", "ours", "ours-arrow", "noop-sink", "noop-arrow", "spark-writer"):
        wall = sink.wall(kind)
        if not wall.values:
            continue
        rate = sink.rate(kind)
        w(f"| {NAMES[kind]} | {wall.fmt()} | {rate.fmt('rows/s', 3)} | {_x(ratio_stat(rate, spark_rate, True))} |")
    w("")
    w("**Sink time / Spark file-sink time** on the same stream (wall time of the query, per repeat, median "
      "(min-max); 1.00 = as fast, lower is better), unpartitioned and partitioned by `country` (16 values):\n")
    w("| contender | unpartitioned | partitioned | CPU time, unpartitioned | CPU time, partitioned |\n|---|---|---|---|---|")
    for kind in ("ours", "ours-arrow", "spark-writer"):
        cells = [
            _x(r) if (r := ratio(sink, kind + suffix, "spark" + suffix)).values else "n/a"
            for ratio in (time_ratio, cpu_ratio) for suffix in ("", "-part")
        ]
        w(f"| {NAMES[kind]} | {' | '.join(cells)} |")
    w("\nCPU time: the JVM's, its Python workers' and the driver process's (children they reaped included) during "
      "the query; other work on the host stretches wall time far more than CPU time.\n")
    files_ours = sum(r.files_per_batch for r in sink.runs["ours"]) / len(sink.runs["ours"])
    files_spark = sum(r.files_per_batch for r in sink.runs["spark"]) / len(sink.runs["spark"])
    w(f"Files per batch: ours {files_ours:.1f}, Spark {files_spark:.1f}.\n")
    w("**Per-batch latency** (p50 / p99 over every batch of every repeat):\n")
    w("| | ours | Spark file sink |\n|---|---|---|")
    w(f"| whole micro-batch (`triggerExecution`) | {_pcts(sink.per_batch('ours', 'trigger'))} | {_pcts(sink.per_batch('spark', 'trigger'))} |")
    w(f"| sink call (`addBatch`) | {_pcts(sink.per_batch('ours', 'addBatch'))} | {_pcts(sink.per_batch('spark', 'addBatch'))} |")
    w(f"| write (Spark job incl. Parquet), `last_progress.write_seconds` | {_pcts(sink.per_batch('ours', 'write'))} | (inside `addBatch`) |")
    w(f"| of which publishing (footers, fsync, renames), `last_progress.publish_seconds` | {_pcts(sink.per_batch('ours', 'publish'))} | - |")
    w(f"| log commit, `last_progress.commit_seconds` | {_pcts(sink.per_batch('ours', 'commit'))} | (inside `addBatch`) |")
    w("")
    split = cost_split(sink)
    w("**Cost split per batch** (median over repeats of each repeat's per-batch median; derived rows are "
      "differences of measured runs on the same input):\n")
    w("| part | ours | Spark file sink | how measured |\n|---|---|---|---|")
    for label, ours, theirs, how in split:
        w(f"| {label} | {_ms(ours) if ours else '-'} | {_ms(theirs) if theirs else '-'} | {how} |")
    w("")
    w("**Fastest batch of each repeat** (median over repeats, min-max): on this host per-batch times of every "
      "contender switch between two speeds about 2x apart during a run, so the fastest batches are the least "
      "disturbed view of the cost:\n")
    w("| | per batch | vs Spark file sink |\n|---|---|---|")
    best_spark = _best(sink, "spark", "addBatch")
    for label, kind, key in (
        ("Spark file sink, `addBatch`", "spark", "addBatch"),
        ("ParquetSink, `write_seconds` (its Spark job)", "ours", "write"),
        ("ParquetSink, whole `addBatch`", "ours", "addBatch"),
        ("`format(\"noop\")`, `addBatch` (scan)", "noop-sink", "addBatch"),
        ("draining `mapInArrow` (scan + transfer)", "noop-arrow", "call"),
        ("`df.write.parquet` from `foreachBatch`", "spark-writer", "call"),
    ):
        st = _best(sink, kind, key)
        if st.values:
            w(f"| {label} | {_ms(st)} | {_x(ratio_stat(st, best_spark, False))} |")
    w("")
    w("## 2. Raw ceiling: the same data written without Spark\n")
    w(
        "pyarrow reading each input file and writing it as snappy Parquet with 2 threads (half the row groups "
        "each, like the 2 Spark tasks), no streaming engine, no log; delta-rs appending the same tables "
        "(`write_deltalake(mode=\"append\")`, one commit per input file) for reference.\n"
    )
    ours_rate = sink.rate("ours")
    w("| | rows/s | ParquetSink as a share of it | Spark file sink as a share of it |\n|---|---|---|---|")
    for kind in ("pyarrow", "delta-rs"):
        rate = sink.rate(kind)
        if rate.values:
            w(f"| {NAMES[kind]} | {rate.fmt('rows/s', 3)} | {_x(ratio_stat(ours_rate, rate, True))} | "
              f"{_x(ratio_stat(spark_rate, rate, True))} |")
    w("")


def time_ratio(sink, kind: str, reference: str) -> Stat:
    """Per repeat: wall time of ``kind`` / wall time of ``reference`` (same repeat, same input)."""
    return Stat([a / b for a, b in zip(sink.wall(kind).values, sink.wall(reference).values)])


def cpu_ratio(sink, kind: str, reference: str) -> Stat:
    """Per repeat: CPU time of ``kind`` / CPU time of ``reference`` (same repeat, same input)."""
    cpu = {k: [r.cpu for r in sink.runs.get(k, [])] for k in (kind, reference)}
    return Stat([a / b for a, b in zip(cpu[kind], cpu[reference]) if a and b])


def gap_per_batch(sink, kind: str, reference: str) -> Stat:
    """Per repeat: median per-batch ``triggerExecution`` of ``kind`` minus that of ``reference`` (seconds)."""
    return _diff(_per_repeat(sink, kind, "trigger"), _per_repeat(sink, reference, "trigger"))


def cost_split(sink) -> list[tuple[str, Stat | None, Stat | None, str]]:
    """Per-batch parts of ours (the Spark writer path, `writer="auto"`) next to Spark's file sink, then the
    Arrow path's transfer and encode."""
    scan = _per_repeat(sink, "noop-sink", "addBatch")
    drain = _per_repeat(sink, "noop-arrow", "call")
    spark_add = _per_repeat(sink, "spark", "addBatch")
    publish = _per_repeat(sink, "ours", "publish")
    return [
        (JOB, _diff(_per_repeat(sink, "ours", "write"), publish), spark_add,
         "ours: write_seconds - publish_seconds; Spark: addBatch (includes its log commit)"),
        ("for comparison: `df.write.parquet` from `foreachBatch`, no log", _per_repeat(sink, "spark-writer", "call"), None,
         "the same kind of job outside ParquetSink"),
        (PUBLISH, publish, None, "ours: publish_seconds"),
        ("log commit", _per_repeat(sink, "ours", "commit"), None, "ours: commit_seconds (Spark's is inside addBatch)"),
        (OTHER, _per_repeat(sink, "ours", "other"), None, "log refresh, schema check, query id, lease"),
        (SETUP, _diff(_per_repeat(sink, "ours", "addBatch"), _per_repeat(sink, "ours", "call")), None,
         "addBatch - sink call"),
        (ENGINE, _per_repeat(sink, "ours", "overhead"), _per_repeat(sink, "spark", "overhead"),
         "triggerExecution - addBatch"),
        ("Arrow path: Spark scan of the input (read + decode)", scan, scan, "`format(\"noop\")` addBatch"),
        (TRANSFER, _diff(drain, scan), None, "draining mapInArrow - noop"),
        ("Arrow path: Parquet encode + write in pyarrow", _diff(_per_repeat(sink, "ours-arrow", "write"), drain), None,
         "ours-arrow write_seconds - draining mapInArrow"),
    ]


JOB = "Spark's job: scan, encode, write (ours: Spark's sink's own write, into staging)"
PUBLISH = "publish: footers, fsync of files and directories, renames"
OTHER = "driver work in the sink call outside write/commit"
SETUP = "foreachBatch + DataFrame setup around the call"
ENGINE = "streaming engine per batch (offsets, WAL, commit log)"
TRANSFER = "Arrow path: JVM rows -> Arrow -> Python worker"


def _planning_section(w, planning) -> None:
    w("## 3. Reader planning: building the committed file list\n")
    w(
        "Time to get the list of committed data files, on the same history for all three (one directory holding "
        "both `_spark_metadata` and `_delta_log` over the same data files). Ours: `len(committed_files(root))`; "
        "Spark: `spark.read.parquet(root)` + `_jdf.inputFiles().length`; delta-rs: `len(DeltaTable(root).file_uris())`.\n"
    )
    w(
        "| history | data files | log bytes, ours: JSON (per data file vs Spark's log) + columnar copy | ours | Spark | delta-rs | "
        "ours vs Spark | ours vs delta-rs | peak RSS growth ours / delta-rs |"
    )
    w("|---|---|---|---|---|---|---|---|---|")
    for i, h in enumerate(planning.histories):
        ours = planning.times[("ours", i)]
        spark = planning.times[("spark", i)]
        delta = planning.times[("delta-rs", i)]
        peaks = " / ".join(
            f"{planning.peak_mb[(r, i)]:.0f} MB" if (r, i) in planning.peak_mb else "-" for r in ("ours", "delta-rs")
        )
        w(
            f"| {h.batches:,} batches x {h.files_per_batch} | {h.entries:,} | {h.log_bytes / 1e6:.1f} MB "
            f"({h.log_bytes / h.spark_log_bytes:.2f}x) + {h.sidecar_bytes / 1e6:.1f} MB | {ours.fmt()} | "
            f"{spark.fmt()} | {delta.fmt()} | {_x(ratio_stat(ours, spark, False))} | {_x(ratio_stat(ours, delta, False))} | "
            f"{peaks} |"
        )
    w("")
    if planning.profile:
        h = planning.histories[planning.profile_history]
        w(
            f"Where ours spends its time: cProfile of `committed_files` on the {h.batches:,}-batch history "
            f"({planning.profile_seconds:.1f} s under the profiler), top functions by own time:\n"
        )
        w("```\n" + planning.profile + "\n```\n")


def _compaction_section(w, comp) -> None:
    w("## 4. Compaction\n")
    w(
        f"Committing compaction batch {comp.batch:,} on a log whose previous compact file plus deltas hold "
        f"{comp.entries_before:,} entries (every one of them is carried into the new compact file, "
        f"{comp.compact_bytes / 1e6:.0f} MB).\n"
    )
    w("| | ours (`MetadataLog.add`, subprocess) | Spark (`FileStreamSinkLog.add` via py4j) | ratio |\n|---|---|---|---|")
    if comp.spark_seconds.values:
        w(f"| time | {comp.ours_seconds.fmt()} | {comp.spark_seconds.fmt()} | {_x(ratio_stat(comp.ours_seconds, comp.spark_seconds, False))} |")
        w(f"| peak memory growth | {comp.ours_peak_growth_mb.fmt('MB', 3)} RSS | {comp.spark_heap_mb.fmt('MB', 3)} heap | "
          f"{_x(ratio_stat(comp.ours_peak_growth_mb, comp.spark_heap_mb, False))} |")
    else:
        w(f"| time | {comp.ours_seconds.fmt()} | not measured: {comp.spark_note} | n/a |")
    w(f"| absolute peak RSS of our process | {comp.ours_peak_mb.fmt('MB', 3)} | | |")
    if comp.floor_seconds.values:
        w(f"| byte-copy floor (read the files compaction reads, write them as one, fsync) | "
          f"{comp.floor_seconds.fmt()} | | ours {_over(comp.ours_seconds, comp.floor_seconds)} the floor |")
    if comp.ours_json_seconds.values:
        w(f"| time without the previous compact file's columnar copy (first compaction after an upgrade, or over "
          f"Spark's compact file; measured once) | {comp.ours_json_seconds.fmt()} | | |")
    if comp.floor_seconds.values:
        w("\nGoals (issue 22), medians of this run's per-repeat ratios: "
          + _compaction_goals("ours with its columnar copy", comp.ours_seconds, comp.floor_seconds, comp.spark_seconds) + ".")
    w("")


def _shapes_section(w, shapes) -> None:
    w("## 4b. Compaction and planning by log shape\n")
    w(
        "Logs in the exact layout Spark's file sink writes, which this package did not write (no columnar "
        "copy, no `batchId`): compaction by ours (`MetadataLog.add` in a fresh subprocess) and by Spark "
        "(`FileStreamSinkLog.add`) of the same log, and the byte-copy floor (read the files the compaction "
        "reads, write them as one file, fsync) measured in the same run, interleaved. Planning: "
        "`committed_files` on the Spark-written compact file without a copy (the first reader parses the "
        "JSON and stores a copy), then with the copy it stored.\n"
    )
    w("| shape | entries | floor | ours | ours / floor | Spark | Spark / ours |\n|---|---|---|---|---|---|---|")
    for shape in shapes:
        spark = shape.spark_seconds.fmt() if shape.spark_seconds.values else "not measured"
        vs = _x(ratio_stat(shape.ours_seconds, shape.spark_seconds, False)) if shape.spark_seconds.values else "n/a"
        w(f"| {SHAPE_LABELS.get(shape.shape, shape.shape)} | {shape.entries:,} | {shape.floor_seconds.fmt()} | "
          f"{shape.ours_seconds.fmt()} | {_over(shape.ours_seconds, shape.floor_seconds)} | {spark} | {vs} |")
    for shape in shapes:
        if shape.plan_first_seconds.values:
            w(f"\nPlanning {shape.entries:,} files: first read without a copy {shape.plan_first_seconds.fmt()}, "
              f"later reads from the stored copy {shape.plan_copy_seconds.fmt()} "
              f"({_over(shape.plan_first_seconds, shape.plan_copy_seconds)}).")
        if shape.plan_follow_seconds.values:
            w(f"After Spark's own compaction of the next batch (its compact file: the previous one's lines, then the "
              f"new ones), the first read of it {shape.plan_follow_seconds.fmt()} "
              f"({_over(shape.plan_follow_seconds, shape.plan_copy_seconds)} a read with a copy): it starts from "
              f"the older compact file's copy, checks the bytes it was made from by CRC-32 and parses the new lines.")
    goals = [_compaction_goals(SHAPE_LABELS.get(s.shape, s.shape), s.ours_seconds, s.floor_seconds, s.spark_seconds)
             for s in shapes]
    for shape in shapes:
        if shape.plan_first_seconds.values:
            first = ratio_stat(shape.plan_copy_seconds, shape.plan_first_seconds, False).median
            goals.append(
                f"planning a Spark-written log: every read after the first plans from the copy the first stored "
                f"({shape.plan_copy_seconds.median:.2f} s, the with-copy time itself: met); the first read, which "
                f"parses the JSON and stores the copy (the goal's own remedy, done once), takes {first:.2f}x a read "
                f"with the copy (<= 1.5x: {_met(first <= 1.5)} for that one read)"
            )
    w("\nGoals (issue 22), medians of this run's per-repeat ratios: " + "; ".join(goals) + ".")
    w("")


def _met(ok: bool) -> str:
    return "met" if ok else "not met"


def _compaction_goals(label: str, ours: Stat, floor: Stat, spark: Stat) -> str:
    """One log shape against issue 22's goals: at most 4x the byte-copy floor, at least 10x faster than Spark."""
    over_floor = ratio_stat(floor, ours, False).median
    text = f"{label}: {over_floor:.1f}x the floor ({_met(over_floor <= 4)}: <= 4x)"
    if spark.values:
        faster = ratio_stat(ours, spark, False).median
        text += f", {faster:.1f}x faster than Spark ({_met(faster >= 10)}: >= 10x)"
    return text


def _stream_section(w, stream) -> None:
    w("## 4c. A stream continuing on a big log\n")
    w(
        f"A new query appends {stream.batches} small batches ({1000:,} rows, one file each) to a copy of one "
        f"Spark-written log of {stream.entries:,} entries (a compact file, no columnar copy): Spark's own sink "
        "(`format(\"parquet\")`, after skipping the query's batches up to the log's latest) and ours "
        "(`on_foreign_query=\"append\"`). Time per batch: `addBatch` from the query's progress reports. Every 10th "
        "log batch compacts: Spark's sink reads and rewrites the whole log there; ours reads the compact file's "
        "columnar copy (the first compaction makes it from the JSON).\n"
    )
    w("| sink | p50 | p99 | max | p50 without compaction batches | compaction batches |\n|---|---|---|---|---|---|")
    kinds = [("ours", "ours"), ("spark", "Spark's file sink")]
    if EMPTY in stream.ms:
        kinds.append((EMPTY, "ours, the same stream into an empty output (baseline; two queries, each without its first batch)"))
    if SPARK_EMPTY in stream.ms:
        kinds.append((SPARK_EMPTY, "Spark's file sink, the same stream into an empty output (the same)"))
    for kind, label in kinds:
        compactions = ", ".join(f"{ms:.0f}" for ms in stream.split(kind, True)) or "none"
        w(f"| {label} | {stream.p(kind, 50):.0f} ms | {stream.p(kind, 99):.0f} ms | {max(stream.ms[kind]):.0f} ms | "
          f"{stream.p(kind, 50, False):.0f} ms | {compactions} ms |")
    ours = stream.ms["ours"]
    later = [ms for ms, compacting in zip(ours[1:], stream.compaction["ours"][1:]) if not compacting]
    if later:
        w(f"\nOurs: the query's first batch takes {ours[0]:.0f} ms (the sink reads the whole log once, here Spark's "
          f"JSON compact file, and stores its columnar copy); later batches other than compaction batches: p50 "
          f"{percentile(later, 50):.0f} ms, p99 {percentile(later, 99):.0f} ms (their commit reads nothing of the "
          "log; Spark's sink between its compactions: p50 "
          f"{stream.p('spark', 50, False):.0f} ms).")
    empty = stream.ms.get(EMPTY)
    if later and empty:
        base = [ms for ms, compacting in zip(empty, stream.compaction[EMPTY]) if not compacting]  # first batches left out
        ratio = percentile(later, 50) / percentile(base, 50)
        w(f" The same batches into an empty output: p50 {percentile(base, 50):.0f} ms, p99 {percentile(base, 99):.0f} ms: "
          f"on the {stream.entries:,}-file log a batch costs {ratio:.2f}x its time on an empty output (goal, issue 22: the same "
          f"within noise, compaction batches aside: {_met(abs(ratio - 1) <= 0.15)}, taking noise as 15%).")
    w("")


def _read_section(w, read) -> None:
    w("## 5. End-to-end read\n")
    w(
        f"The {read.rows:,} rows written in section 1 by each system (ours: ParquetSink output; Spark: its file "
        "sink's output; delta-rs: its appends), read back whole.\n"
    )
    w("| | ours | Spark | delta-rs | ours vs Spark | ours vs delta-rs |\n|---|---|---|---|---|---|")
    labels = {
        "table": "to a pyarrow Table: `read_committed` / `.toArrow()` / `to_pyarrow_table()`",
        "count": "row count: `committed_dataset().count_rows()` / `.count()` / `to_pyarrow_dataset().count_rows()`",
    }
    for mode, label in labels.items():
        ours, spark, delta = (read.times[(r, mode)] for r in ("ours", "spark", "delta-rs"))
        w(f"| {label} | {ours.fmt()} | {spark.fmt()} | {delta.fmt()} | {_x(ratio_stat(ours, spark, False))} | "
          f"{_x(ratio_stat(ours, delta, False))} |")
    w("")


def _delta_section(w, delta) -> None:
    w("## 6. Delta log kept in step with `_spark_metadata`\n")
    w(
        f"{delta.batches} `write_batch` appends of {delta.rows_per_batch:,} rows (4 files each), each followed by "
        "`sync_delta_log` (what `delta_log=True` runs after the commit: one Delta commit through delta-rs, a "
        f"checkpoint every 10 versions); `_delta_log` holds {delta.delta_log_files} files at the end.\n"
    )
    w("| | p50 | p99 |\n|---|---|---|")
    for label, values in (("Delta commit per batch (`sync_delta_log`)", delta.commit_ms),
                          ("`write_batch` per batch (for scale)", delta.write_ms)):
        w(f"| {label} | {percentile(values, 50):.1f} ms | {percentile(values, 99):.1f} ms |")
    w("")
    ours, theirs = delta.read["ours"], delta.read["delta-rs"]
    w(f"Reading the {delta.rows:,} rows back whole: delta-rs `DeltaTable(out).to_pyarrow_table()` "
      f"{theirs.fmt()}, `read_committed(out)` {ours.fmt()} (ours vs delta-rs {_x(ratio_stat(ours, theirs, False))}).\n")


def _delta_scaling_section(w, scaling) -> None:
    from statistics import mean

    w("### Per-batch Delta sync against the table's size (issue 35 item 7)\n")
    w(
        f"An output of N committed files (4 partitions), its Delta log created by a first sync; then {scaling.batches} "
        "batches of one file each, every one synced as `delta_log=True` does (`sync_delta_log(check_files=False)`; a "
        "compaction every 10 log batches, a Delta checkpoint every 10 versions), interleaved batch by batch with "
        "delta-rs's own one-row `write_deltalake(mode=\"append\")` to a copy of the same table (by URI, as a new "
        "writer; and to a `DeltaTable` kept open). Median (min-max) per batch, and the mean (with the compaction and "
        "checkpoint batches).\n"
    )
    w("| files | ours | delta-rs append (URI) | delta-rs append (open table) | ours mean | delta-rs mean | ours vs delta-rs (URI) |")
    w("|---|---|---|---|---|---|---|")
    for files in scaling.sizes:
        ours, uri, opened = (scaling.times[(who, files)] for who in ("ours", "delta-rs", "delta-rs open"))
        w(f"| {files:,} | {ours.fmt(unit='ms', scale=1000)} | {uri.fmt(unit='ms', scale=1000)} | "
          f"{opened.fmt(unit='ms', scale=1000)} | {mean(ours.values) * 1000:.1f} ms | {mean(uri.values) * 1000:.1f} ms | "
          f"{_x(ratio_stat(ours, uri, False))} |")
    first, last = scaling.sizes[0], scaling.sizes[-1]
    growth = scaling.times[("ours", last)].median / scaling.times[("ours", first)].median
    w(f"\nOurs from {first:,} to {last:,} files: {growth:.2f}x the median (goal <= 1.5x).\n")


def _optimize_section(w, opt) -> None:
    w("## 8. Compacting small data files: `optimize` vs delta-rs `optimize.compact()`\n")
    w(
        f"{opt.files:,} small files ({opt.rows:,} rows, {opt.bytes / 1e6:.1f} MB, 4 partitions) written by `write_batch`, "
        "with a Delta log listing the same files (`sync_delta_log`); each contender compacts its own copy of them "
        "(target 64 MiB). Files after: "
        + ", ".join(f"{k} {v}" for k, v in opt.files_after.items()) + ".\n"
    )
    w("| | time | rows/s | input MB/s |\n|---|---|---|---|")
    for name in ("ours", "delta-rs"):
        w(f"| {name} | {opt.seconds[name].fmt()} | {opt.rate(name, 'rows'):,.0f} | {opt.rate(name, 'bytes') / 1e6:.1f} |")
    w(f"\nours vs delta-rs (time): {_x(ratio_stat(opt.seconds['ours'], opt.seconds['delta-rs'], False))}.\n")
    w("| read of every row | before | after | speed-up |\n|---|---|---|---|")
    for reader in ("read_committed", "spark", "delta-rs"):
        before, after = opt.read[f"{reader} before"], opt.read[f"{reader} after"]
        w(f"| {reader} | {before.fmt()} | {after.fmt()} | {before.median / after.median:.1f}x |")
    w("")


def analysis(ctx: dict[str, Any]) -> list[str]:
    """The 'behind and why' paragraphs, phrased from the measured numbers."""
    out = []
    sink = ctx.get("sink")
    if sink:
        ratio = ratio_stat(sink.rate("ours"), sink.rate("spark"), True).median
        split = {label: (ours, theirs) for label, ours, theirs, _ in cost_split(sink)}

        def ms(label: str, which: int = 0) -> float:
            stat = split[label][which]
            return stat.median * 1000 if stat is not None and stat.values else float("nan")

        gaps = []
        for suffix, label in (("", "unpartitioned"), ("-part", "partitioned")):
            tr = time_ratio(sink, "ours" + suffix, "spark" + suffix)
            gp = gap_per_batch(sink, "ours" + suffix, "spark" + suffix)
            if tr.values and gp.values:
                gaps.append(f"{tr.median:.2f}x {label} ({gp.median * 1000:+.0f} ms per batch)")
        out.append(
            f"**Sink: {ratio:.2f}x Spark's file sink throughput; sink time / Spark's: {', '.join(gaps)}.** "
            f"Per median batch (unpartitioned), ours spends {ms(JOB):.0f} ms in Spark's own Parquet writer "
            f"(Spark's sink's own write into staging) against {ms(JOB, 1):.0f} ms for Spark's whole `addBatch`, then "
            f"{ms(PUBLISH):.0f} ms publishing (footer reads, fsync of every file and directory, renames: the fsync is "
            f"nearly all of it, and is durability Spark's sink does not give: it never fsyncs), "
            f"{ms('log commit'):.1f} ms committing the log, {ms(OTHER):.1f} ms of other driver work and "
            f"{ms(SETUP):.0f} ms of `foreachBatch` setup; the streaming engine adds {ms(ENGINE):.0f} ms per batch "
            f"for ours and {ms(ENGINE, 1):.0f} ms for Spark's sink. Two classes of ours in the JVM "
            "(`src/parquet_sink/write/parquet-sink-jvm.jar`, built from `jvm/src`) take out what Spark's sink pays "
            "and ours need not: Spark's writer gets the batch's rows without the copy `foreachBatch`'s scan makes of "
            "each (`BatchRowsExec`), and the local filesystem sets file and directory permissions without a `chmod` "
            "process each (`NioLocalFileSystem`: without Hadoop's native library Spark's sink spawns one for every "
            "data file, its `.crc` file, and its log files). "
            "The Arrow path (`writer=\"arrow\"`, the default on object "
            f"stores) pays for moving every row from the JVM to a Python worker: ~{ms(TRANSFER):.0f} ms per batch "
            "here, in Arrow batches bounded by their rows alone (Spark 4's byte bound sizes a batch after every "
            "row, about half the JVM's time in the job: docs/performance.md)."
        )
    planning = ctx.get("planning")
    if planning:
        last = len(planning.histories) - 1
        h = planning.histories[last]
        o = planning.times[("ours", last)].median
        s = planning.times[("spark", last)].median
        d = planning.times[("delta-rs", last)].median
        per_entry_us = o / max(1, h.entries) * 1e6
        faster = [name for name, t in (("Spark", s), ("delta-rs", d)) if t < o]
        slower = [name for name, t in (("Spark", s), ("delta-rs", d)) if t >= o]
        text = (
            f"**Planning grows linearly with the live entries for all three** (the compact file / checkpoint "
            f"holds every live file). At {h.entries:,} files ours takes {o:.1f} s (~{per_entry_us:.0f} µs per "
            f"entry), Spark {s:.1f} s, delta-rs {d:.1f} s"
        )
        if faster:
            text += f"; {' and '.join(faster)} {'is' if len(faster) == 1 else 'are'} faster"
        if slower:
            text += f"; ours beats {' and '.join(slower)}"
        text += (
            ". Ours reads the newest compact file's columnar copy (`N.compact.columnar`: the same entries as LZ4 "
            "Parquet, written by compaction, used while it matches the compact file's size; the JSON stays the "
            "source of truth and what Spark reads) and parses the few deltas after it (a compiled scanner for "
            "lines in the writer's exact layout, `pyarrow.json` for any other), "
            "resolves paths column-wise and keeps the snapshot as Arrow columns (only the columns a reader "
            "needs): `committed_files` builds a `CommittedFile` only for the files accessed. The profile above "
            "shows what is left: decoding the copy, then a few Arrow compute passes on the paths (prefix check, "
            "byte slice). delta-rs reads its checkpoint as Parquet too; Spark parses each JSON line on the JVM."
        )
        out.append(text)
    comp = ctx.get("compaction")
    if comp and comp.spark_seconds.values:
        r = ratio_stat(comp.ours_seconds, comp.spark_seconds, False).median
        mr = ratio_stat(comp.ours_peak_growth_mb, comp.spark_heap_mb, False).median
        out.append(
            f"**Compaction: ours is {r:.1f}x {'faster' if r >= 1 else 'slower'} than Spark's "
            f"({comp.ours_seconds.median:.1f} s vs {comp.spark_seconds.median:.1f} s for {comp.entries_before:,} "
            f"entries) with {comp.ours_peak_growth_mb.median:.0f} MB of RSS growth against "
            f"{comp.spark_heap_mb.median:.0f} MB of Spark heap ({mr:.0f}x less).** Ours plans from the previous "
            "compact file's columnar copy, copies the compact file's blocks (4 MiB) as raw bytes while checking "
            "them against the copy's CRC-32 (a mismatch goes back to validating the JSON), parses the deltas "
            "with a compiled line scanner on two threads, stamps their `batchId`, "
            "and encodes the new columnar copy on another thread meanwhile; only rewritten lines (commit "
            "records compaction no longer keeps) cost Python work. Spark parses every entry into a "
            "`SinkFileStatus`, holds them all, then serializes them back."
        )
    read = ctx.get("read")
    if read:
        ot, st, dt = (read.times[(r, "table")].median for r in ("ours", "spark", "delta-rs"))
        oc, sc, dc = (read.times[(r, "count")].median for r in ("ours", "spark", "delta-rs"))
        out.append(
            f"**End-to-end read: to a pyarrow Table ours takes {ot:.2f} s, Spark {st:.2f} s, delta-rs {dt:.2f} s; "
            f"a row count takes {oc:.3f} s / {sc:.3f} s / {dc:.3f} s.** Ours and delta-rs both hand a file list "
            "to pyarrow's multi-threaded Parquet reader, so they land close together; Spark's `toArrow()` decodes "
            "in the JVM and ships Arrow batches over a socket. For a count Spark answers from footers through a "
            "job, ours and delta-rs from footers in-process."
        )
    return out


def summary(ctx: dict[str, Any], md_path: str, png_path: str) -> str:
    lines = [f"parquet_sink benchmarks: {ctx['runtime'] / 60:.1f} min, results in {md_path} and {png_path}"]
    for comparison, ours, theirs, ratio, _ in headline(ctx):
        lines.append(f"  {comparison}: {ratio}   (ours {ours}; theirs {theirs})")
    return "\n".join(lines)


def write_chart(ctx: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(14, 10))
    colors = {"ours": "#1f77b4", "spark": "#ff7f0e", "delta-rs": "#2ca02c", "pyarrow": "#7f7f7f",
              "spark-writer": "#ffbb78"}

    def bars(ax, labels, stats, cols, scale=1.0, fmt="{:.2f}"):
        meds = [s.median * scale for s in stats]
        err = [[(s.median - s.low) * scale for s in stats], [(s.high - s.median) * scale for s in stats]]
        ax.bar(labels, meds, yerr=err, capsize=4, color=cols)
        for i, value in enumerate(meds):
            ax.annotate(fmt.format(value), (i, value), ha="center", va="bottom", fontsize=8,
                        xytext=(0, 3), textcoords="offset points")

    sink = ctx.get("sink")
    ax = axes[0][0]
    if sink:
        kinds = [k for k in ("spark", "ours", "spark-writer", "pyarrow", "delta-rs") if sink.rate(k).values]
        labels = {"spark": "Spark\nfile sink", "ours": "ParquetSink", "pyarrow": "pyarrow\nceiling (no Spark)",
                  "delta-rs": "delta-rs\nappends (no Spark)", "spark-writer": "foreachBatch +\ndf.write (no log)"}
        bars(ax, [labels[k] for k in kinds], [sink.rate(k) for k in kinds], [colors.get(k, "#999") for k in kinds],
             1e-6, "{:.2f}M")
        ax.set_ylabel("million rows/s (higher is better)")
        ax.set_title(f"1-2. Sink throughput, {sink.batches} x {sink.rows_per_batch:,} rows")
    planning = ctx.get("planning")
    ax = axes[0][1]
    if planning:
        xs = [h.entries for h in planning.histories]
        for reader in ("ours", "spark", "delta-rs"):
            stats = [planning.times[(reader, i)] for i in range(len(xs))]
            meds = [s.median for s in stats]
            err = [[s.median - s.low for s in stats], [s.high - s.median for s in stats]]
            ax.errorbar(xs, meds, yerr=err, marker="o", capsize=3, label=reader, color=colors[reader])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("committed data files in the history")
        ax.set_ylabel("seconds to list committed files (lower is better)")
        ax.set_title("3. Reader planning vs history size")
        ax.legend()
        ax.grid(True, which="both", alpha=0.3)
    comp = ctx.get("compaction")
    ax = axes[1][0]
    if comp:
        labels = ["ours", "Spark"] if comp.spark_seconds.values else ["ours"]
        stats = [comp.ours_seconds] + ([comp.spark_seconds] if comp.spark_seconds.values else [])
        bars(ax, labels, stats, [colors["ours"], colors["spark"]][: len(labels)], 1.0, "{:.1f}s")
        ax.set_ylabel("seconds (lower is better)")
        mem = f"memory: ours +{comp.ours_peak_growth_mb.median:.0f} MB RSS"
        if comp.spark_heap_mb.values:
            mem += f", Spark +{comp.spark_heap_mb.median:.0f} MB heap"
        ax.set_title(f"4. Compaction of {comp.entries_before:,} entries\n({mem})")
    read = ctx.get("read")
    ax = axes[1][1]
    if read:
        import numpy as np

        readers = ("ours", "spark", "delta-rs")
        x = np.arange(2)
        width = 0.27
        for j, reader in enumerate(readers):
            stats = [read.times[(reader, mode)] for mode in ("table", "count")]
            meds = [s.median for s in stats]
            err = [[s.median - s.low for s in stats], [s.high - s.median for s in stats]]
            ax.bar(x + (j - 1) * width, meds, width, yerr=err, capsize=3, label=reader, color=colors[reader])
            for i, value in enumerate(meds):
                ax.annotate(f"{value:.2f}s", (x[i] + (j - 1) * width, value), ha="center", va="bottom", fontsize=8,
                            xytext=(0, 3), textcoords="offset points")
        ax.set_xticks(x, ["to pyarrow Table", "row count"])
        ax.set_ylabel("seconds (lower is better)")
        ax.set_title(f"5. End-to-end read of {read.rows:,} rows")
        ax.legend()
    for row in axes:
        for ax in row:
            if not ax.has_data():
                ax.set_axis_off()
    quick = " (QUICK RUN: sizes too small to mean anything)" if ctx["args"].quick else ""
    fig.suptitle(f"parquet_sink vs Spark file sink and delta-rs - medians with min-max of {ctx['args'].repeats} repeats{quick}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def raw_json(ctx: dict[str, Any]) -> str:
    """Every raw measurement, for anyone who wants to recompute a figure."""
    import dataclasses
    import json

    def conv(obj):
        if isinstance(obj, Stat):
            return obj.values
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return {f.name: conv(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.name != "schema_string_rows"}
        if isinstance(obj, dict):
            return {("/".join(map(str, k)) if isinstance(k, tuple) else str(k)): conv(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [conv(v) for v in obj]
        if isinstance(obj, (int, float, str, bool)) or obj is None:
            return obj
        return str(obj)

    data = {k: conv(v) for k, v in ctx.items() if k != "args"}
    data["args"] = {k: conv(v) for k, v in vars(ctx["args"]).items()}
    return json.dumps(data, indent=1)
