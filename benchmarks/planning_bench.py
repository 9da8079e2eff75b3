"""Section 3: reader planning, i.e. building the committed file list, as the history grows.

On one synthesized history per size (see :mod:`benchmarks.synth`), with every data file present:

* ours: ``len(parquet_sink.committed_files(root))``;
* Spark: ``spark.read.parquet(root)`` (log read, file index, partition and schema inference from one
  footer) and the length of ``_jdf.inputFiles()`` (kept in the JVM: a Python list of a million paths
  would be built one py4j call at a time and measure py4j, not Spark);
* delta-rs: ``len(DeltaTable(root).file_uris())`` (newest checkpoint plus the JSON commits after it).

Repeats are interleaved with a rotating order. A cProfile of ours on the largest one-file-per-batch
history shows where the time goes. Peak memory: ours and delta-rs each plan once more in a fresh
subprocess, whose peak RSS growth over the call (``VmHWM`` after minus ``VmRSS`` before, as in the
compaction section) is reported; for ours that is the columnar snapshot (``committed_files`` builds no
per-file Python object until one is accessed).
"""

from __future__ import annotations

import cProfile
import importlib
import io
import json
import logging
import os
import pstats
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

from parquet_sink import committed_files

from .common import Stat, timed
from .synth import History, Template, build_history

logger = logging.getLogger("benchmarks.planning")

READERS = ("ours", "spark", "delta-rs")


@dataclass
class PlanningResults:
    histories: list[History] = field(default_factory=list)
    times: dict[tuple[str, int], Stat] = field(default_factory=dict)  # (reader, history index)
    peak_mb: dict[tuple[str, int], float] = field(default_factory=dict)  # peak RSS growth, ours and delta-rs
    profile: str = ""
    profile_seconds: float = 0.0
    profile_history: int = 0


def plan(reader: str, root: str, spark) -> int:
    if reader == "ours":
        return len(committed_files(root))
    if reader == "spark":
        return len(spark.read.parquet(root)._jdf.inputFiles())
    from deltalake import DeltaTable

    return len(DeltaTable(root).file_uris())


def peak_growth_mb(reader: str, root: str) -> float:
    """Peak RSS growth (MB) of one planning call by ``reader`` in a fresh subprocess."""
    from .compaction_bench import subprocess_env

    repo, env = subprocess_env()
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.planning_bench", reader, root],
        capture_output=True, text=True, env=env, cwd=repo, check=True,
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return max(0, out["hwm_after_kb"] - out["rss_before_kb"]) / 1024


def child(reader: str, root: str) -> None:
    """Runs in the subprocess: one planning call; prints JSON with the RSS figures."""
    from .compaction_bench import reset_peak, status_kb

    if reader == "delta-rs":
        importlib.import_module("deltalake")  # the import's memory is not the planning's
    reset_peak()
    before = status_kb("VmRSS")
    count = plan(reader, root, None)
    print(json.dumps({"count": count, "rss_before_kb": before, "hwm_after_kb": status_kb("VmHWM")}))


def profile_ours(root: str, top: int = 12) -> tuple[str, float]:
    profiler = cProfile.Profile()
    seconds, _ = timed(lambda: profiler.runcall(committed_files, root))
    buf = io.StringIO()
    stats = pstats.Stats(profiler, stream=buf)
    stats.sort_stats("tottime").print_stats(top)
    lines = buf.getvalue().splitlines()
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + "/"
    stdlib = os.path.dirname(os.__file__) + "/"
    table = "\n".join(
        line.replace(repo, "").replace(stdlib, "").rstrip() for line in lines[start:] if line.strip()
    )
    return table, seconds


def run(spark, work: str, template: Template, sizes: list[tuple[int, int]], repeats: int, keep_last: bool) -> PlanningResults:
    """``sizes``: (batches, files per batch). The last history is kept for the compaction section when
    ``keep_last``; the others are deleted after they are measured."""
    results = PlanningResults()
    for index, (batches, files) in enumerate(sizes):
        history = build_history(f"{work}/history-{batches}x{files}", batches, files, template, seed=index + 1)
        results.histories.append(history)
        if index == 0:
            for reader in READERS:  # warm-up: JIT, imports, py4j
                plan(reader, history.root, spark)
        for rep in range(repeats):
            order = list(READERS[rep % 3 :] + READERS[: rep % 3])
            for reader in order:
                seconds, count = timed(lambda: plan(reader, history.root, spark))
                if count != history.entries:
                    raise RuntimeError(f"{reader} found {count} files in {history.root}, expected {history.entries}")
                results.times.setdefault((reader, index), Stat()).add(seconds)
                logger.info("planning %-8s %7d batches x %2d files: %.3fs", reader, batches, files, seconds)
        for reader in ("ours", "delta-rs"):
            results.peak_mb[(reader, index)] = peak_growth_mb(reader, history.root)
            logger.info("planning %-8s peak RSS growth %.0f MB", reader, results.peak_mb[(reader, index)])
        if index == max(0, len(sizes) - 2):  # the largest one-file-per-batch history (cProfile doubles the time)
            results.profile, results.profile_seconds = profile_ours(history.root)
            results.profile_history = index
            logger.info("profile of committed_files on %s (%.1fs under cProfile):\n%s",
                        history.root, results.profile_seconds, results.profile)
        if not (keep_last and index == len(sizes) - 1):
            shutil.rmtree(history.root, ignore_errors=True)
    return results


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2])
