"""Run every benchmark and write ``benchmarks/RESULTS.md``, ``benchmarks/results.png`` (and the raw
measurements, ``benchmarks/results.json``).

Usage (from the repository root)::

    python -m benchmarks.run            # full run, about 10-15 minutes on 2 cores
    python -m benchmarks.run --quick    # tiny sizes, under 2 minutes: a smoke test (writes to a temp dir)

Sections: 1 sink throughput/latency/cost split vs Spark's file sink; 2 the no-Spark ceilings (pyarrow,
delta-rs); 3 reader planning vs Spark and delta-rs as history grows; 4 compaction of ~1M entries vs
Spark's FileStreamSinkLog; 4b ("shapes") compaction and planning of Spark-written logs of 1M entries
against the byte-copy floor and Spark; 4c ("stream") per-batch time of a stream continuing on such a log, ours vs
Spark's sink (p50/p99, compaction batches apart); 5 end-to-end read vs Spark and delta-rs; 6 ("delta") the Delta
log kept in step with _spark_metadata: Delta commit cost per batch, reading through delta-rs vs read_committed; 7
("filter") row counts and a selective filtered read (1% of the files match) vs delta-rs on the same files; 8
("optimize") compaction of small data files, ours vs delta-rs's optimize.compact(), and reads before and after; 9
("growth") each operation (append, Delta sync, count, filtered read, time travel, history, verify, vacuum, optimize)
as an output grows 10x at a time, in three shapes, cold and warm, beside delta-rs (``--growth-sizes``); 10
("iceberg") the Iceberg table kept in step: first sync and sync per batch in the same three shapes, beside
pyiceberg's own ``append`` and ``add_files`` (``--iceberg-sizes``), and at many snapshots kept (``--iceberg-snapshots``).
One SparkSession (local[2]) for
the whole run; temporary data under a temp dir, removed at the end.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import logging
import os
import shutil
import sys
import tempfile
import time

from . import (
    compaction_bench,
    delta_bench,
    filter_bench,
    growth_bench,
    iceberg_bench,
    object_store_bench,
    optimize_bench,
    planning_bench,
    read_bench,
    report,
    sink_bench,
    stream_bench,
)
from .common import default_driver_memory, machine_info, make_session, versions
from .data import generate_input, make_batch
from .synth import make_template

logger = logging.getLogger("benchmarks")

HERE = os.path.dirname(os.path.abspath(__file__))
SECTIONS = ("sink", "store", "planning", "compaction", "shapes", "stream", "read", "delta", "filter", "optimize", "growth", "iceberg")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (smoke test, < 2 min); output to a temp dir")
    p.add_argument("--repeats", type=int, help="repeats per comparison (default 3, quick 2)")
    p.add_argument(
        "--sink-repeats", type=int,
        help="repeats of the sink section (default 5, quick 2): its ratios compare whole-query wall times on a noisy host",
    )
    p.add_argument("--batches", type=int, help="sink micro-batches (default 6, quick 3)")
    p.add_argument("--rows", type=int, help="rows per micro-batch (default 1,000,000, quick 50,000)")
    p.add_argument(
        "--history",
        help="planning histories as BATCHESxFILES,... (default 1000x1,10000x1,100000x1,100000x10); "
        "the last one is also compacted",
    )
    p.add_argument("--shape-entries", type=int, help="entries of each log shape (default 1,000,000, quick 100,000)")
    p.add_argument(
        "--shape-repeats", type=int,
        help="repeats per log shape (default 5, quick 2): this host runs a process at one of two speeds ~1.35x apart, "
        "so a median of 3 can land in either",
    )
    p.add_argument("--stream-batches", type=int, help="appended batches of the stream section (default 30, quick 10)")
    p.add_argument("--delta-batches", type=int, help="write_batch appends synced to Delta (default 200, quick 20)")
    p.add_argument("--delta-rows", type=int, help="rows per Delta-synced batch (default 10,000, quick 1,000)")
    p.add_argument(
        "--delta-sizes",
        help="table sizes (files) of the per-batch Delta sync vs delta-rs append (default 1000,10000,100000, quick 1000,10000)",
    )
    p.add_argument("--filter-files", help="output sizes in files of the filter section (default 10000,100000, quick 1000)")
    p.add_argument("--tmpdir", help="where sink input/output go (default: the system temp dir, on disk)")
    p.add_argument(
        "--meta-tmpdir",
        help="where the synthesized histories (millions of tiny files) go (default /dev/shm when it has room)",
    )
    p.add_argument("--driver-memory", default=default_driver_memory(), help="Spark driver heap (default: RAM/3, 2-8g)")
    p.add_argument("--out-dir", help="where RESULTS.md and results.png go (default benchmarks/, quick: a temp dir)")
    p.add_argument(
        "--sink-kinds",
        help=f"subset of the sink contenders (default all: {','.join(sink_bench.SPARK_KINDS)}); "
        "a subset skips the no-Spark ceilings",
    )
    p.add_argument("--optimize-files", type=int, help="small files to compact in the optimize section (default 10,000, quick 1,000)")
    p.add_argument("--optimize-rows", type=int, help="rows per small file in the optimize section (default 100)")
    p.add_argument(
        "--growth-sizes",
        help="output sizes (files) of the growth section (default 1000,10000: ~10 minutes; 1000,10000,100000 for the "
        "full picture, ~1 hour; quick 100,1000)",
    )
    p.add_argument("--iceberg-sizes", help="output sizes (files) of the iceberg section (default 1000,10000; quick 100,1000)")
    p.add_argument("--iceberg-snapshots", help="batches (snapshots kept) of the iceberg section's snapshots shape "
                   "(default 100,1000; quick 40,200)")
    p.add_argument("--sections", default=",".join(SECTIONS), help=f"subset of {','.join(SECTIONS)}")
    args = p.parse_args(argv)
    if args.quick:
        defaults = {"repeats": 2, "sink_repeats": 2, "batches": 3, "rows": 50_000, "history": "100x1,1000x1,1000x10",
                    "shape_entries": 100_000, "shape_repeats": 2, "stream_batches": 10, "delta_batches": 20, "delta_rows": 1_000,
                    "delta_sizes": "1000,10000", "filter_files": "1000", "growth_sizes": "100,1000", "iceberg_sizes": "100,1000",
                    "iceberg_snapshots": "40,200",
                    "optimize_files": 1_000, "optimize_rows": 100}
    else:
        defaults = {"repeats": 3, "sink_repeats": 5, "batches": 6, "rows": 1_000_000, "history": "1000x1,10000x1,100000x1,100000x10",
                    "shape_entries": 1_000_000, "shape_repeats": 5, "stream_batches": 30, "delta_batches": 200, "delta_rows": 10_000,
                    "delta_sizes": "1000,10000,100000", "filter_files": "10000,100000", "growth_sizes": "1000,10000", "iceberg_sizes": "1000,10000",
                    "iceberg_snapshots": "100,1000",
                    "optimize_files": 10_000, "optimize_rows": 100}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.sizes = [tuple(int(x) for x in item.lower().split("x")) for item in args.history.split(",")]
    for batches, _ in args.sizes:
        if batches % 10:
            p.error(f"--history: batch counts must be multiples of 10 (the compaction interval), got {batches}")
    args.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(args.sections) - set(SECTIONS)
    if unknown:
        p.error(f"unknown sections {sorted(unknown)}")
    if "read" in args.sections and "sink" not in args.sections:
        p.error("the read section reads what the sink section wrote: include 'sink'")
    if "compaction" in args.sections and "planning" not in args.sections:
        p.error("the compaction section compacts the largest planning history: include 'planning'")
    if args.out_dir is None:
        args.out_dir = os.path.join(tempfile.gettempdir(), "parquet_sink_bench_quick") if args.quick else HERE
    return args


def _meta_dir(args: argparse.Namespace) -> str:
    if args.meta_tmpdir:
        return args.meta_tmpdir
    shm = "/dev/shm"
    need = 8 * 1024**3 if not args.quick else 512 * 1024**2
    if os.path.isdir(shm) and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > need:
        return shm
    return args.tmpdir or tempfile.gettempdir()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-5s %(name)s: %(message)s")
    for noisy in ("py4j", "parquet_sink"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    started = time.monotonic()
    work = tempfile.mkdtemp(prefix="eo-bench-", dir=args.tmpdir)
    meta_parent = _meta_dir(args)
    meta = tempfile.mkdtemp(prefix="eo-bench-meta-", dir=meta_parent)
    logger.info("sink data under %s, synthesized histories under %s", work, meta)
    ctx: dict = {
        "args": args,
        "machine": machine_info(),
        "versions": versions(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "work_dir": work,
        "meta_dir": meta,
    }
    spark = None
    try:
        if "filter" in args.sections:  # no Spark: measured before the session and the other sections' leftovers
            os.sync()
            sizes = [int(n) for n in args.filter_files.split(",")]
            ctx["filter"] = filter_bench.run(work, sizes, args.repeats)
        if "growth" in args.sections:  # no Spark; each operation in a fresh process of its own
            os.sync()
            ctx["growth"] = growth_bench.run(work, growth_bench.parse_sizes(args.growth_sizes), repeats=args.repeats)
        if "iceberg" in args.sections:  # no Spark
            os.sync()
            ctx["iceberg"] = iceberg_bench.run(work, growth_bench.parse_sizes(args.iceberg_sizes),
                                               snapshots=iceberg_bench.parse_snapshots(args.iceberg_snapshots))
        if "store" in args.sections:  # a process and session of its own (S3A jars), before this one's
            os.sync()
            ctx["store"] = object_store_bench.run_isolated(args.batches, args.rows, args.sink_repeats, args.tmpdir)
        spark = make_session(args.driver_memory)
        logger.info("SparkSession up (driver memory %s) after %.1fs", args.driver_memory, time.monotonic() - started)
        if "sink" in args.sections:
            input_dir = os.path.join(work, "input")
            warm_dir = os.path.join(work, "warm-input")
            inputs = generate_input(input_dir, args.batches, args.rows)
            generate_input(warm_dir, 2 if not args.quick else 1, max(10_000, args.rows // 10))
            kinds = tuple(args.sink_kinds.split(",")) if args.sink_kinds else sink_bench.SPARK_KINDS
            ctx["sink"] = sink_bench.run(
                spark, input_dir, inputs, warm_dir, work, args.sink_repeats, args.rows, kinds, not args.sink_kinds
            )
            shutil.rmtree(input_dir, ignore_errors=True)
        if "planning" in args.sections:
            os.sync()
            template = make_template(meta, make_batch(0, 1))
            ctx["planning"] = planning_bench.run(
                spark, meta, template, args.sizes, args.repeats, keep_last="compaction" in args.sections
            )
        if "compaction" in args.sections:
            os.sync()
            ctx["compaction"] = compaction_bench.run(spark, ctx["planning"].histories[-1].root, args.repeats)
        if "shapes" in args.sections:
            os.sync()
            ctx["shapes"] = compaction_bench.run_shapes(spark, meta, args.shape_entries, args.shape_repeats)
        if "stream" in args.sections:
            os.sync()
            ctx["stream"] = stream_bench.run(spark, work, args.shape_entries, args.stream_batches)
        if "read" in args.sections:
            s = ctx["sink"]
            os.sync()
            ctx["read"] = read_bench.run(spark, s.outputs, s.total_rows, args.repeats)
        if "delta" in args.sections:
            os.sync()
            ctx["delta"] = delta_bench.run(work, args.delta_batches, args.delta_rows, args.repeats)
            sizes = [int(x) for x in args.delta_sizes.split(",")]
            ctx["delta_scaling"] = delta_bench.run_scaling(work, sizes, delta_bench.SCALING_BATCHES)
        if "optimize" in args.sections:
            os.sync()
            ctx["optimize"] = optimize_bench.run(spark, work, args.optimize_files, args.optimize_rows, args.repeats)
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(meta, ignore_errors=True)
    ctx["runtime"] = time.monotonic() - started
    os.makedirs(args.out_dir, exist_ok=True)
    md_path = os.path.join(args.out_dir, "RESULTS.md")
    png_path = os.path.join(args.out_dir, "results.png")
    report.write_chart(ctx, png_path)
    markdown = report.markdown(ctx, os.path.basename(png_path))
    with open(md_path, "w", encoding="utf-8") as fh:
        fh.write(markdown)
    with open(os.path.join(args.out_dir, "results.json"), "w", encoding="utf-8") as fh:
        fh.write(report.raw_json(ctx))
    logger.info("wrote %s, %s and results.json", md_path, png_path)
    print(report.summary(ctx, md_path, png_path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
