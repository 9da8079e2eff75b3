"""A class-data-sharing (CDS) archive of the Spark driver's classes, for the test run's short-lived drivers.

The crash tests start a driver (a JVM) of their own for every kill, and most of such a driver's life is spent
loading and verifying Spark's classes: a fresh local session takes ~9 s on the 2-core CI machine and its first
query ~5 s more, with the archive ~4 s and ~2 s. The JVM (JDK 13+) writes the archive at exit
(``-XX:ArchiveClassesAtExit``) of a driver that ran a representative query; a driver given it
(``-XX:SharedArchiveFile``) maps those classes instead of loading them from the jars. Nothing else changes: the
same jars, the same bytecode, the same Spark and the same product code (all of it Python) run. A JVM that cannot
use the archive (another classpath, a damaged file) silently loads the classes as usual, so a driver is never
worse off than without it.

``tests/conftest.py`` starts the dump in the background (once per test run, shared by the xdist workers) and
names the archive in :data:`ENV`; a driver started after it exists uses it (:func:`driver_java_options`), those
started before do without.

Usage (the dump): ``python -m tests.helpers.jvm_archive ARCHIVE WORKDIR``: writes ``ARCHIVE`` (atomically).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ENV = "TESTS_SPARK_CLASS_ARCHIVE"  # not PARQUET_SINK_*: crash_util.start_child drops those from a child's env
_QUIET = "-Xlog:cds=off,cds+dynamic=off"  # a JVM that cannot use the archive says nothing on stdout


def driver_java_options(base: str = "") -> str:
    """``base`` (``spark.driver.extraJavaOptions``) plus the archive, once the run's archive exists."""
    path = os.environ.get(ENV)
    if not path or not os.path.isfile(path):
        return base
    return " ".join(filter(None, [base, f"-XX:SharedArchiveFile={path}", _QUIET]))


def main(archive: str, workdir: str) -> int:
    """Run a driver that loads what the tests' drivers load (a streaming query on both writer paths, with
    compaction, a ``mapInArrow``, the readers), stop it, let its JVM exit and write the archive, then publish it."""
    from pyspark.sql import SparkSession

    from tests.helpers.crash_child import run_query
    from tests.helpers.crash_util import write_inputs

    partial = f"{archive}.{os.getpid()}.partial"
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("parquet-sink-class-archive")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .config("spark.driver.extraJavaOptions", f"-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ArchiveClassesAtExit={partial}")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(workdir)
    write_inputs(work / "in", range(2), 10)
    for writer in ("arrow", "spark"):
        config = {
            "input": str(work / "in"), "out": str(work / f"out-{writer}"), "checkpoint": str(work / f"ckpt-{writer}"),
            "max_files_per_trigger": 1, "task_failpoint": writer == "spark",
            "sink": {"writer": writer, "compact_interval": 3, "partition_by": ["file"]},
            "progress": str(work / f"{writer}.progress"), "result": str(work / f"{writer}.result"),
            "started": str(work / f"{writer}.started"),
        }
        if run_query(spark, config) != 0:
            return 3
        assert spark.read.parquet(config["out"]).count() == 20
    gateway = spark.sparkContext._gateway
    spark.stop()
    # The JVM exits when its stdin closes; it writes the archive on its way out.
    gateway.proc.stdin.close()
    gateway.proc.wait(300)
    if not os.path.isfile(partial):
        return 4
    os.replace(partial, archive)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
