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
from .common import ab_arguments, make_session
from .sink_bench import Variant

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

    sink_bench.print_ab(runs, args, "rows-bound")


if __name__ == "__main__":
    main()
