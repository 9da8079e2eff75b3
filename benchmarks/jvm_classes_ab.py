"""A/B of the Spark writer path's JVM classes (``src/parquet_sink/write/parquet-sink-jvm.jar``, built from
``jvm/src``): Spark's file sink, ours, ours without ``BatchRowsExec`` (Spark's writer gets ``foreachBatch``'s copy
of each row) and ours without ``NioLocalFileSystem`` (a ``chmod`` process per file and directory Hadoop creates),
the same stream in one SparkSession, paired repeats whose order reverses every other repeat. What
docs/performance.md "The JVM classes" reports.

``python -m benchmarks.jvm_classes_ab [--repeats 6] [--partitioned] [--batches 6] [--rows 1000000]``
(``--rows 1000 --batches 30``: tiny batches; per-batch ``addBatch`` p50 / p99 are printed too)
"""

from __future__ import annotations

import shutil
import tempfile

from parquet_sink.write import jvm, manifest_write

from . import sink_bench
from .common import ab_arguments, make_session
from .sink_bench import Variant


def main(argv: list[str] | None = None) -> None:
    args = ab_arguments("benchmarks.jvm_classes_ab", __doc__, argv)
    work = tempfile.mkdtemp(prefix="eo-bench-jvm-")
    spark = make_session()
    java = manifest_write._jvm_of(spark.range(1))
    if java is None or java.jar.batch_rows is None or java.jar.local_fs != jvm.NIO_LOCAL_FS:
        raise SystemExit("this session does not load the package's JVM classes: nothing to compare")
    loaded = (java.jar.local_fs, java.jar.batch_rows)

    def use(local_fs: str, batch_rows: object) -> None:
        java.jar.local_fs, java.jar.batch_rows = local_fs, batch_rows
        java._log_session = None  # the manifest's session, made again with this local filesystem

    variants = {
        "spark": Variant("spark"),
        "ours": Variant("ours", lambda: use(*loaded)),
        "no-batch-rows": Variant("ours", lambda: use(loaded[0], None)),
        "no-nio-fs": Variant("ours", lambda: use(jvm.RAW_LOCAL_FS, loaded[1])),
    }
    try:
        runs = sink_bench.paired_repeats(spark, variants, args, work)
    finally:
        use(*loaded)
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    sink_bench.print_ab(runs, args, "ours")


if __name__ == "__main__":
    main()
