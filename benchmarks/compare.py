"""Compare the log compaction of two checkouts: alternating fresh-process compactions of the same Spark-written
log (a shape of section 4b); with ``--growth``, every operation of the growth section (9) instead. A process here runs in one of two speeds ~1.35x apart, for minutes at a time, so
medians from separate runs mislead; even alternating in the same minutes, two identical trees measured a wall-time
ratio of 0.88 over 8 rounds: run 16 rounds or more and trust CPU time (both are printed) over wall time.

Usage (the base in a git worktree, this tree as the change)::

    git worktree add /tmp/base HEAD~1
    .venv/bin/python -m benchmarks.compare /tmp/base . --shape deltas --rounds 16

With ``--growth`` (``--growth-sizes``, ``--shapes``, ``--ops``, ``--rounds`` as the section's repeats), the growth
section's table with a column of the base's cold times beside the change's (each operation in fresh processes of
each checkout, interleaved with delta-rs's on the same outputs)::

    .venv/bin/python -m benchmarks.compare /tmp/base . --growth --growth-sizes 1000,10000 --rounds 3

With ``--iceberg`` (``--iceberg-sizes``, ``--iceberg-snapshots``, ``--shapes``), the iceberg section's table (10) with
rows of the base (``before``) beside the change's (``after``): each checkout's first sync and syncs per batch in a
fresh process of its own, on a copy of the same output, beside pyiceberg's on its twin::

    .venv/bin/python -m benchmarks.compare /tmp/base . --iceberg --iceberg-sizes 1000,10000 --shapes batches,snapshots

Each round runs the base and the change once each, in alternating order, on the same log (each compaction in a
fresh subprocess of its checkout, as section 4b times ours); prints per checkout the median and min wall and CPU
time and the median peak RSS growth, and the medians of the per-round ratios change/base.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile

from . import growth_bench, iceberg_bench
from .compaction_bench import SHAPES, _cleanup, _ours, synth_shape


def compact_once(checkout: str, root: str, batch: int) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS growth in MB) of one compaction of ``batch`` under ``root`` by the
    package of ``checkout``."""
    _cleanup(root, batch)
    meta = os.path.join(root, "_spark_metadata")
    for name in os.listdir(meta):  # the log stays as Spark's sink wrote it: no columnar copy
        if name.endswith((".compact.columnar", ".compact.parquet")):  # the copy, new name or old
            os.remove(os.path.join(meta, name))
    out = _ours(root, batch, os.path.join(os.path.abspath(checkout), "src"))  # this tree's timing code
    return out["seconds"], out["cpu_seconds"], (out["hwm_after_kb"] - out["rss_before_kb"]) / 1024


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.compare", description=__doc__.split("\n\n")[0])
    p.add_argument("base", help="the checkout to compare against (e.g. a git worktree of HEAD~1)")
    p.add_argument("change", help="the checkout with the change (e.g. .)")
    p.add_argument("--shape", choices=sorted(SHAPES), default="deltas")
    p.add_argument("--entries", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, help="rounds (default 16; with --growth: the repeats, default 3)")
    p.add_argument("--meta-tmpdir", default="/dev/shm" if os.path.isdir("/dev/shm") else None,
                   help="where the log is synthesized (default /dev/shm: tmpfs)")
    p.add_argument("--growth", action="store_true", help="compare the growth section's operations instead")
    p.add_argument("--growth-sizes", default="1000,10000")
    p.add_argument("--shapes", default=",".join(growth_bench.SHAPES))
    p.add_argument("--ops", default=",".join(growth_bench.OURS))
    p.add_argument("--iceberg", action="store_true", help="compare the iceberg section's syncs instead")
    p.add_argument("--iceberg-sizes", default="1000,10000")
    p.add_argument("--iceberg-snapshots", default="100,1000")
    args = p.parse_args(argv)
    if args.rounds is None:
        args.rounds = growth_bench.REPEATS if args.growth else 16
    if args.iceberg:
        shapes = args.shapes if args.shapes != ",".join(growth_bench.SHAPES) else ",".join(iceberg_bench.ICEBERG_SHAPES)
        with tempfile.TemporaryDirectory(prefix="parquet_sink_compare_") as work:
            results = iceberg_bench.run(work, growth_bench.parse_sizes(args.iceberg_sizes), shapes.split(","),
                                        iceberg_bench.parse_snapshots(args.iceberg_snapshots), args.base, args.change)
        print(iceberg_bench.section(results))
        return
    if args.growth:
        work = tempfile.mkdtemp(prefix="parquet_sink_compare_")
        try:
            results = growth_bench.run(work, growth_bench.parse_sizes(args.growth_sizes), args.shapes.split(","),
                                       args.ops.split(","), args.rounds, base=args.base, change=args.change)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(growth_bench.section(results))
        return
    work = tempfile.mkdtemp(prefix="parquet_sink_compare_", dir=args.meta_tmpdir)
    try:
        root = os.path.join(work, args.shape)
        batch = synth_shape(root, args.shape, args.entries)
        runs: dict[str, list[tuple[float, float, float]]] = {"base": [], "change": []}
        for rnd in range(args.rounds):
            order = [("base", args.base), ("change", args.change)]
            for who, checkout in order if rnd % 2 == 0 else reversed(order):
                runs[who].append(compact_once(checkout, root, batch))
        for who, values in runs.items():
            wall, cpu, memory = zip(*values)
            print(f"{who:6s} wall median {statistics.median(wall):.3f} s (min {min(wall):.3f}), CPU median "
                  f"{statistics.median(cpu):.3f} s (min {min(cpu):.3f}), peak RSS growth median {statistics.median(memory):.0f} MB")
        for name, column in (("wall", 0), ("CPU", 1)):
            ratios = [c[column] / b[column] for b, c in zip(runs["base"], runs["change"])]
            print(f"change/base {name} per round: median {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")
        print(f"{args.rounds} rounds of {args.shape}, {args.entries:,} entries")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
