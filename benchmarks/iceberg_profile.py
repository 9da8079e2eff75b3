"""Where a ``sync_iceberg`` in step spends its time as an output grows (issue 55 item 5): an output of BATCHES
batches of FILES files each (10 rows a file), synced once, then ``--syncs`` 10-row ``write_batch`` each followed by
``sync_iceberg`` in the same process (a sink's in-step sync), under cProfile; prints the per-sync wall time
(median) and the top cumulative entries per sync. Compare two shapes of the same files (e.g. ``300x100`` and
``30x1000``: files alike, snapshots 10x apart) to tell what grows with files from what grows with snapshots.

``python -m benchmarks.iceberg_profile 300x100 30x1000 [--syncs 20] [--top 40] [--work DIR]``
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import statistics
import tempfile
import time

from .growth_bench import ROWS_PER_FILE, _table, twin


def build(out: str, batches: int, files: int) -> None:
    """``batches`` batches of ``files`` 10-row files each under ``out`` (no table yet)."""
    from parquet_sink import write_batch

    per_batch = files * ROWS_PER_FILE
    for version in range(batches):
        write_batch(out, _table(version * per_batch, per_batch, False), app_id="growth", version=version,
                    max_records_per_file=ROWS_PER_FILE)


def profile(out: str, syncs: int) -> tuple[list[float], pstats.Stats, float]:
    """First sync (seconds), then ``syncs`` profiled in-step syncs: (their seconds each, their profile, first)."""
    from parquet_sink import sync_iceberg, write_batch

    started = time.perf_counter()
    version = sync_iceberg(out).log_batch + 1
    first = time.perf_counter() - started
    profiler, times = cProfile.Profile(), []
    for step in range(syncs):
        write_batch(out, _table(10**9 + step * ROWS_PER_FILE, ROWS_PER_FILE, False), app_id="profile",
                    version=version + step)
        started = time.perf_counter()
        profiler.enable()
        sync_iceberg(out)
        profiler.disable()
        times.append(time.perf_counter() - started)
    return times, pstats.Stats(profiler), first


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.iceberg_profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("shapes", nargs="+", help="BATCHESxFILES, e.g. 300x100")
    parser.add_argument("--syncs", type=int, default=20)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--work", help="directory to build the outputs in (the outputs as built are kept there and reused)")
    args = parser.parse_args(argv)
    work = args.work or tempfile.mkdtemp(prefix="iceberg-profile-")
    for shape in args.shapes:
        batches, files = (int(x) for x in shape.split("x"))
        built_out, out = os.path.join(work, f"built-{shape}"), os.path.join(work, f"out-{shape}")
        started = time.perf_counter()
        if not os.path.isdir(built_out):
            build(built_out, batches, files)
        built = time.perf_counter() - started
        shutil.rmtree(out, ignore_errors=True)
        twin(built_out, out)  # each run on a fresh copy (data files hard-linked) of the output as built
        times, stats, first = profile(out, args.syncs)
        print(f"\n=== {shape}: {batches * files:,} files, {batches} batches; built in {built:.1f} s, first sync "
              f"{first:.1f} s; per sync median {statistics.median(times) * 1000:.1f} ms "
              f"(min {min(times) * 1000:.1f}, max {max(times) * 1000:.1f}), profiled totals / {args.syncs} below")
        print("per sync ms:", " ".join(f"{t * 1000:.1f}" for t in times))
        stats.sort_stats("cumulative").print_stats(args.top)
        stats.sort_stats("tottime").print_stats(args.top // 2)


if __name__ == "__main__":
    main()
