"""A/B of the Spark writer path's early writeback (``parquet_sink.storage.writeback``): Spark's file sink, ours
with it and ours without it (a no-op in its place), the same stream in one SparkSession, paired repeats whose
order reverses every other repeat. What docs/performance.md "Early writeback" reports.

``python -m benchmarks.writeback_ab [--repeats 6] [--partitioned] [--batches 6] [--rows 1000000]``
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile

import parquet_sink.write.spark_staging as spark_staging

from . import sink_bench
from .common import ab_arguments, make_session
from .data import generate_input


class _NoWriteback:
    def __init__(self, *args, **kwargs) -> None:
        pass

    def __enter__(self) -> _NoWriteback:
        return self

    def __exit__(self, *exc) -> None:
        pass


def main(argv: list[str] | None = None) -> None:
    args = ab_arguments("benchmarks.writeback_ab", __doc__, argv)
    real = spark_staging.EarlyWriteback
    suffix = "-part" if args.partitioned else ""
    work = tempfile.mkdtemp(prefix="eo-bench-wb-")
    spark = make_session()
    try:
        inputs, warm = os.path.join(work, "input"), os.path.join(work, "warm")
        generate_input(inputs, args.batches, args.rows)
        generate_input(warm, 2, max(10_000, args.rows // 10))
        schema = spark.read.parquet(inputs).schema
        for kind in ("spark", "ours"):
            sink_bench.run_query(spark, kind + suffix, warm, schema, work, "warmup")
        runs: dict[str, list[sink_bench.QueryRun]] = {"spark": [], "with": [], "without": []}
        for rep in range(args.repeats):
            for variant in ("spark", "with", "without") if rep % 2 == 0 else ("without", "with", "spark"):
                spark_staging.EarlyWriteback = real if variant == "with" else _NoWriteback
                os.sync()
                kind = "spark" if variant == "spark" else "ours"
                runs[variant].append(sink_bench.run_query(spark, kind + suffix, inputs, schema, work, f"{variant}{rep}"))
                shutil.rmtree(os.path.join(work, f"out-{kind}{suffix}-{variant}{rep}"), ignore_errors=True)
    finally:
        spark_staging.EarlyWriteback = real
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    def median_ratio(a: str, b: str, attribute: str) -> float:
        return statistics.median(getattr(x, attribute) / getattr(y, attribute) for x, y in zip(runs[a], runs[b]))

    def publish_ms(variant: str) -> float:
        return 1000 * statistics.median(b["publish"] for r in runs[variant] for b in r.batches if "publish" in b)

    print(f"{'partitioned' if args.partitioned else 'unpartitioned'}, {args.repeats} paired repeats")
    for variant in ("with", "without"):
        print(f"  ours {variant} early writeback: sink time / Spark's {median_ratio(variant, 'spark', 'wall'):.3f}x, "
              f"CPU {median_ratio(variant, 'spark', 'cpu'):.3f}x, publish {publish_ms(variant):.1f} ms a batch")
    print(f"  with / without, per repeat (median): {median_ratio('with', 'without', 'wall'):.3f}")


if __name__ == "__main__":
    main()
