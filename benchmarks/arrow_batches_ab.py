"""A/B of the Arrow writer path's batches to Python (``parquet_sink.write.parquet_files``): Spark's file sink,
ours with ``writer="arrow"`` as shipped (Arrow batches bounded by rows alone) and the same with Spark 4's byte
bound (``spark.sql.execution.arrow.maxBytesPerBatch`` set to its default, 64 MiB, in the session: a value the
user set is kept, and Spark sizes the batch after every row), the same stream in one SparkSession, paired
repeats whose order reverses every other repeat. What docs/performance.md "The Arrow path's batches" reports.

``python -m benchmarks.arrow_batches_ab [--repeats 6] [--partitioned] [--batches 6] [--rows 1000000]``
"""

from __future__ import annotations

import shutil
import tempfile

from . import sink_bench
from .common import ab_arguments, make_session, percentile
from .sink_bench import Variant, ab_ratio

_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"


def main(argv: list[str] | None = None) -> None:
    args = ab_arguments("benchmarks.arrow_batches_ab", __doc__, argv)
    work = tempfile.mkdtemp(prefix="eo-bench-arrow-")
    spark = make_session()
    variants = {
        "spark": Variant("spark", lambda: spark.conf.unset(_BYTES)),
        "rows-bound": Variant("ours-arrow", lambda: spark.conf.unset(_BYTES)),
        "byte-bound": Variant("ours-arrow", lambda: spark.conf.set(_BYTES, "64m")),
    }
    try:
        runs = sink_bench.paired_repeats(spark, variants, args, work)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    print(f"{'partitioned' if args.partitioned else 'unpartitioned'}, {args.batches} x {args.rows:,} rows, "
          f"{args.repeats} paired repeats")
    for variant in list(variants)[1:]:
        print(f"  {variant}: sink time / Spark's {ab_ratio(runs, variant, 'spark'):.3f}x, "
              f"CPU {ab_ratio(runs, variant, 'spark', 'cpu'):.3f}x")
    print(f"  rows-bound / byte-bound, per repeat (median): {ab_ratio(runs, 'rows-bound', 'byte-bound'):.3f}")
    for variant in variants:
        ms = [b["addBatch"] * 1000 for r in runs[variant] for b in r.batches if b["batch"] > 0]
        print(f"  {variant}: addBatch p50 {percentile(ms, 50):.0f} ms, p99 {percentile(ms, 99):.0f} ms")


if __name__ == "__main__":
    main()
