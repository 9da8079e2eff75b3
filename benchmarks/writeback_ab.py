"""A/B of the Spark writer path's early writeback (``parquet_sink.storage.writeback``): Spark's file sink, ours
with it and ours without it (a no-op in its place), the same stream in one SparkSession, paired repeats whose
order reverses every other repeat. What docs/performance.md "Early writeback" reports.

``python -m benchmarks.writeback_ab [--repeats 6] [--partitioned] [--batches 6] [--rows 1000000]``
"""

from __future__ import annotations

import shutil
import statistics
import tempfile

import parquet_sink.write.spark_staging as spark_staging

from . import sink_bench
from .common import ab_arguments, make_session
from .sink_bench import Variant, ab_ratio


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
    work = tempfile.mkdtemp(prefix="eo-bench-wb-")
    spark = make_session()

    def use(writeback: type) -> None:
        spark_staging.EarlyWriteback = writeback

    variants = {
        "spark": Variant("spark"),
        "with": Variant("ours", lambda: use(real)),
        "without": Variant("ours", lambda: use(_NoWriteback)),
    }
    try:
        runs = sink_bench.paired_repeats(spark, variants, args, work)
    finally:
        use(real)
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    def publish_ms(variant: str) -> float:
        return 1000 * statistics.median(b["publish"] for r in runs[variant] for b in r.batches if "publish" in b)

    print(f"{'partitioned' if args.partitioned else 'unpartitioned'}, {args.repeats} paired repeats")
    for variant in ("with", "without"):
        print(f"  ours {variant} early writeback: sink time / Spark's {ab_ratio(runs, variant, 'spark'):.3f}x, "
              f"CPU {ab_ratio(runs, variant, 'spark', 'cpu'):.3f}x, publish {publish_ms(variant):.1f} ms a batch")
    print(f"  with / without, per repeat (median): {ab_ratio(runs, 'with', 'without'):.3f}")


if __name__ == "__main__":
    main()
