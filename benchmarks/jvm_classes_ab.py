"""A/B of the Spark writer path's JVM classes (``src/parquet_sink/write/parquet-sink-jvm.jar``, built from
``jvm/src``): Spark's file sink, ours, ours without ``BatchRowsExec`` (Spark's writer gets ``foreachBatch``'s copy
of each row) and ours without ``NioLocalFileSystem`` (a ``chmod`` process per file and directory Hadoop creates),
the same stream in one SparkSession, paired repeats whose order reverses every other repeat. What
docs/performance.md "The JVM classes" reports.

``python -m benchmarks.jvm_classes_ab [--repeats 6] [--partitioned] [--batches 6] [--rows 1000000]``
(``--rows 1000 --batches 30``: tiny batches; per-batch ``addBatch`` p50 / p99 are printed too)
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile

from parquet_sink.write import manifest_write

from . import sink_bench
from .common import ab_arguments, make_session, percentile
from .data import generate_input

VARIANTS = ("spark", "ours", "no-batch-rows", "no-nio-fs")


def main(argv: list[str] | None = None) -> None:
    args = ab_arguments("benchmarks.jvm_classes_ab", __doc__, argv)
    suffix = "-part" if args.partitioned else ""
    work = tempfile.mkdtemp(prefix="eo-bench-jvm-")
    spark = make_session()
    java = manifest_write._jvm_of(spark.range(1))
    if java is None or java.batch_rows is None or java.local_fs != manifest_write._NIO_LOCAL_FS:
        raise SystemExit("this session does not load the package's JVM classes: nothing to compare")
    loaded = (java.local_fs, java.batch_rows)

    def use(variant: str) -> None:
        java.local_fs = manifest_write._RAW_LOCAL_FS if variant == "no-nio-fs" else loaded[0]
        java.batch_rows = None if variant == "no-batch-rows" else loaded[1]
        java._log_session = None  # the manifest's session, made again with this local filesystem

    runs: dict[str, list[sink_bench.QueryRun]] = {v: [] for v in VARIANTS}
    try:
        inputs, warm = os.path.join(work, "input"), os.path.join(work, "warm")
        generate_input(inputs, args.batches, args.rows)
        generate_input(warm, 2, max(10_000, args.rows // 10))
        schema = spark.read.parquet(inputs).schema
        for variant in VARIANTS:
            use(variant)
            kind = "spark" if variant == "spark" else "ours"
            sink_bench.run_query(spark, kind + suffix, warm, schema, work, f"warmup-{variant}")
        for rep in range(args.repeats):
            for variant in VARIANTS if rep % 2 == 0 else VARIANTS[::-1]:
                use(variant)
                os.sync()
                kind = "spark" if variant == "spark" else "ours"
                runs[variant].append(sink_bench.run_query(spark, kind + suffix, inputs, schema, work, f"{variant}{rep}"))
                shutil.rmtree(os.path.join(work, f"out-{kind}{suffix}-{variant}{rep}"), ignore_errors=True)
    finally:
        use("ours")
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    def median_ratio(a: str, b: str, attribute: str) -> float:
        return statistics.median(getattr(x, attribute) / getattr(y, attribute) for x, y in zip(runs[a], runs[b]))

    print(f"{'partitioned' if args.partitioned else 'unpartitioned'}, {args.batches} x {args.rows:,} rows, "
          f"{args.repeats} paired repeats")
    for variant in VARIANTS[1:]:
        print(f"  {variant}: sink time / Spark's {median_ratio(variant, 'spark', 'wall'):.3f}x, "
              f"CPU {median_ratio(variant, 'spark', 'cpu'):.3f}x; ours / this, per repeat (median) "
              f"{median_ratio('ours', variant, 'wall'):.3f}")
    for variant in VARIANTS:
        ms = [b["addBatch"] * 1000 for r in runs[variant] for b in r.batches if b["batch"] > 0]
        print(f"  {variant}: addBatch p50 {percentile(ms, 50):.0f} ms, p99 {percentile(ms, 99):.0f} ms")


if __name__ == "__main__":
    main()
