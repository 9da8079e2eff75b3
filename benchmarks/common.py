"""Shared helpers: timing statistics, machine/version facts, the one SparkSession of a run."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger("benchmarks")


@dataclass
class Stat:
    """Repeated measurements of one figure: median with min-max spread."""

    values: list[float] = field(default_factory=list)

    def add(self, value: float) -> None:
        self.values.append(float(value))

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    @property
    def low(self) -> float:
        return min(self.values) if self.values else float("nan")

    @property
    def high(self) -> float:
        return max(self.values) if self.values else float("nan")

    def fmt(self, unit: str = "s", digits: int = 3, scale: float = 1.0) -> str:
        """``1.234 s (1.200-1.300)``."""
        if not self.values:
            return "n/a"
        m, lo, hi = self.median * scale, self.low * scale, self.high * scale
        return f"{_num(m, digits)} {unit} ({_num(lo, digits)}-{_num(hi, digits)})".replace(" ()", "")


def _num(value: float, digits: int) -> str:
    if value != value:  # nan
        return "n/a"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.{digits}g}" if abs(value) < 1 else f"{value:.{max(digits - 1, 1)}f}"


def ratio_stat(ours: Stat, theirs: Stat, higher_is_better: bool) -> Stat:
    """Per-repeat ratios (repeats were interleaved, so pairing repeat i with repeat i cancels drift).
    Expressed so that > 1.0 means ours is better: theirs/ours for times, ours/theirs for rates."""
    out = Stat()
    for a, b in zip(ours.values, theirs.values):
        if a > 0 and b > 0:
            out.add(a / b if higher_is_better else b / a)
    return out


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Wall-clock seconds of ``fn()`` (after a gc, so garbage of earlier runs is not charged to it)."""
    gc.collect()
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); with few samples p99 is the maximum."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil
    return ordered[min(int(rank), len(ordered)) - 1]


def machine_info() -> dict[str, str]:
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = "unknown"
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal"):
                    mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                    break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    return {
        "cpu": model,
        "cores": f"{usable} usable ({os.cpu_count()} online)",
        "ram": mem,
        "os": f"{platform.system()} {platform.release()}",
    }


def versions() -> dict[str, str]:
    import pyarrow
    import pyspark

    import parquet_sink

    out = {
        "python": sys.version.split()[0],
        "pyspark": pyspark.__version__,
        "pyarrow": pyarrow.__version__,
        "parquet_sink": parquet_sink.__version__,
    }
    try:
        import deltalake

        out["deltalake"] = deltalake.__version__
    except ImportError:
        out["deltalake"] = "not installed"
    import subprocess

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True,
                              timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=repo, capture_output=True,
                               text=True, timeout=30).stdout.strip()
        out["parquet_sink"] += f" (git {head}{', src/ modified' if dirty else ''})" if head else ""
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30).stderr
        out["java"] = java.splitlines()[0] if java else "unknown"
    except (OSError, subprocess.SubprocessError):
        out["java"] = "unknown"
    return out


def default_driver_memory() -> str:
    """A third of RAM, between 2 and 8 GiB: Spark's reader of a 1M-entry log needs several GiB of heap."""
    try:
        with open("/proc/meminfo") as fh:
            kib = next(int(line.split()[1]) for line in fh if line.startswith("MemTotal"))
        return f"{max(2, min(8, kib // 1024 // 1024 // 3))}g"
    except (OSError, StopIteration):
        return "4g"


def ab_arguments(prog: str, doc: str | None, argv: list[str] | None) -> argparse.Namespace:
    """The options of a same-session sink A/B (``--repeats``, ``--partitioned``, ``--batches``, ``--rows``), parsed,
    with logging set up (py4j and the package quiet)."""
    parser = argparse.ArgumentParser(prog=f"python -m {prog}", description=(doc or "").split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--partitioned", action="store_true")
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-5s %(name)s: %(message)s")
    for noisy in ("py4j", "parquet_sink"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return args


def make_session(driver_memory: str = "4g", extra: dict[str, str] | None = None):
    """The run's single SparkSession: local[2], no UI, 2 shuffle partitions, workers on this interpreter; ``extra``:
    more settings (an A/B's event log)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # Python workers import benchmark helpers (the no-op mapInArrow function) from this checkout.
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if repo not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([repo, *paths])
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for name, value in (extra or {}).items():
        builder = builder.config(name, value)
    session = (
        builder.master("local[2]")
        .appName("parquet-sink-benchmarks")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .config("spark.python.worker.reuse", "true")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def jvm_heap_used_mb(spark) -> float:
    rt = spark._jvm.java.lang.Runtime.getRuntime()
    return (rt.totalMemory() - rt.freeMemory()) / 1024 / 1024


def jvm_reset_peaks(spark) -> None:
    """A full GC, then reset every heap pool's peak usage."""
    jvm = spark._jvm
    jvm.java.lang.System.gc()
    for pool in jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans():
        if str(pool.getType().toString()) == "Heap memory":
            pool.resetPeakUsage()


def jvm_peak_heap_mb(spark) -> float:
    """Sum of the heap pools' peak usage since :func:`jvm_reset_peaks` (an upper bound of the peak:
    the pools may peak at different moments)."""
    jvm = spark._jvm
    total = 0
    for pool in jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans():
        if str(pool.getType().toString()) == "Heap memory":
            total += pool.getPeakUsage().getUsed()
    return total / 1024 / 1024
