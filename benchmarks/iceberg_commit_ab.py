"""A/B of the per-batch sync of the Iceberg table kept without a catalog at a thousand snapshots kept, two checkouts
in the same run: each builds its own output (one ``write_batch(..., iceberg=True)`` per batch, so each keeps the
metadata files its own commits keep), then rounds alternate between them, each round a fresh process of the
checkout that opens the table once and times the in-step sync after each of ``--per-round`` more batches (as the
writers' hook runs it). Prints per checkout the median wall and CPU time of a sync, the listings of the metadata
directory made, and the metadata files the directory holds; then the per-round ratios change/base.

Usage (the base in a git worktree, this tree as the change)::

    git worktree add /tmp/base HEAD~1
    .venv/bin/python -m benchmarks.iceberg_commit_ab /tmp/base . --snapshots 1000 --rounds 6 --per-round 10
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, sys, time
import pyarrow as pa
from parquet_sink import sync_iceberg, write_batch
from parquet_sink.storage.filesystem import Storage

mode, out, first, last = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def write(version, iceberg):
    table = pa.table({"i": [version, version + 1], "s": ["x", "y"], "k": ["a", "b"]})
    write_batch(out, table, app_id="a", version=version, partition_by=["k"], iceberg=iceberg)

if mode == "build":
    for version in range(first, last):
        write(version, True)
    print(json.dumps({}))
    sys.exit()
listings = [0]
ls_names = Storage.ls_names
def counted(self, path, *args, **kwargs):
    listings[0] += ".iceberg" in path
    return ls_names(self, path, *args, **kwargs)
Storage.ls_names = counted
write(first, None)
sync_iceberg(out)  # this process opens the table, as the writers' hook has it open
listings[0] = 0
walls, cpus = [], []
for version in range(first + 1, last):
    write(version, None)
    wall, cpu = time.perf_counter(), time.process_time()
    result = sync_iceberg(out)
    walls.append(time.perf_counter() - wall)
    cpus.append(time.process_time() - cpu)
names = os.listdir(os.path.join(out, "_exactly_once", ".iceberg", ".metadata"))
print(json.dumps({"walls": walls, "cpus": cpus, "listings": listings[0], "snapshots": result.log_batch + 1,
                  "metadata_files": sum(n.endswith(".metadata.json") for n in names), "files": len(names)}))
"""


def _child(checkout: str, *args: object, wait: bool = True) -> subprocess.Popen | dict:
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.abspath(checkout), "src"))
    child = subprocess.Popen([sys.executable, "-c", CHILD, *map(str, args)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    if not wait:
        return child
    return _result(child)


def _result(child: subprocess.Popen) -> dict:
    stdout, stderr = child.communicate()
    if child.returncode:
        raise SystemExit(stderr[-3000:])
    return json.loads(stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.iceberg_commit_ab", description=__doc__.split("\n\n")[0])
    p.add_argument("base", help="the checkout to compare against (e.g. a git worktree of HEAD~1)")
    p.add_argument("change", help="the checkout with the change (e.g. .)")
    p.add_argument("--snapshots", type=int, default=1000, help="batches written, each synced, before the rounds")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--per-round", type=int, default=10, help="syncs timed per round")
    args = p.parse_args(argv)
    checkouts = {"base": args.base, "change": args.change}
    work = tempfile.mkdtemp(prefix="parquet_sink_iceberg_ab_")
    try:
        outs = {who: os.path.join(work, who) for who in checkouts}
        builds = [_child(checkouts[who], "build", outs[who], 0, args.snapshots, wait=False) for who in checkouts]
        for build in builds:
            _result(build)
        runs: dict[str, list[dict]] = {"base": [], "change": []}
        version = args.snapshots
        for rnd in range(args.rounds):
            for who in ("base", "change") if rnd % 2 == 0 else ("change", "base"):
                runs[who].append(_child(checkouts[who], "measure", outs[who], version, version + args.per_round + 1))
            version += args.per_round + 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for who, rounds in runs.items():
        walls = [w * 1000 for r in rounds for w in r["walls"]]
        cpus = [c * 1000 for r in rounds for c in r["cpus"]]
        last = rounds[-1]
        print(f"{who:6}: sync median {statistics.median(walls):.1f} ms wall (min {min(walls):.1f}), "
              f"{statistics.median(cpus):.1f} ms CPU; {sum(r['listings'] for r in rounds)} listings of the metadata "
              f"directory in {len(walls)} syncs; at {last['snapshots']} snapshots it holds {last['metadata_files']} "
              f"metadata files ({last['files']} files)")
    ratios = [statistics.median(c["walls"]) / statistics.median(b["walls"])
              for b, c in zip(runs["base"], runs["change"])]
    print(f"per-round wall ratio change/base: {[round(r, 2) for r in ratios]}, median {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
