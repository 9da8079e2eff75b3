"""Growth of the per-batch log operations (issue 58 items 1, 2, 5): what one small batch costs as the output grows.

The shape users have: an output whose *first batch* holds N files, written by ``write_batch`` (one file per row,
``max_records_per_file=1``; ``"partitions"``: one file in each of N partitions), with its Delta log made by a first
``sync_delta_log``. Then, each measured in a fresh process on a fresh copy of that output (data hard-linked, logs
copied), medians of ``repeats``:

* ``append``: ``write_batch`` of one 10-row batch (ms; ``append_mb``: the process's peak RSS above its RSS before it);
* ``sync``: ``sync_delta_log`` after that append, cold (the process's first), and warm (the second and third
  append-then-sync in the same process);
* ``append+delta``: ``write_batch(..., delta_log=True)`` of one 10-row batch (the writer keeps the Delta log);
* ``history10``: ``history(path, limit=10)`` after eleven more one-file batches (so the first batch is not among
  the ten; the tenth compacts the log, as the sink's default interval does).

Usage (from the repository root)::

    python -m benchmarks.growth_log --sizes 1000,10000,100000 --repeats 3

:func:`measure` is the entry point other benchmarks call: it returns ``{(shape, files, operation): Stat}`` (seconds;
``append_mb`` in MB).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pyarrow as pa

from .common import Stat

SHAPES = ("big", "partitions")
OPERATIONS = ("append", "append_mb", "sync_cold", "sync_warm", "append_delta", "history10")


def _rows(start: int, count: int, partitioned: bool) -> pa.Table:
    ids = pa.array(range(start, start + count), pa.int64())
    columns = {"id": ids, "v": pa.array([float(i) for i in range(start, start + count)])}
    if partitioned:
        columns["k"] = pa.array([f"p{i}" for i in range(start, start + count)])
    return pa.table(columns)


def build(root: str, shape: str, files: int) -> str:
    """The output of ``shape`` with a first batch of ``files`` files and its Delta log (see the module docstring)."""
    from parquet_sink import sync_delta_log, write_batch

    out = os.path.join(root, f"{shape}-{files}")
    partitioned = shape == "partitions"
    write_batch(
        out, _rows(0, files, partitioned), app_id="first", version=0, max_records_per_file=1,
        partition_by=["k"] if partitioned else None,
    )
    sync_delta_log(out)
    return out


def _copy(base: str, target: str) -> str:
    """A copy of ``base`` an append may change: data files hard-linked, the logs copied."""
    logs = ("_spark_metadata", "_delta_log")
    shutil.copytree(base, target, copy_function=os.link, ignore=lambda d, names: logs if d == base else ())
    for name in logs:
        shutil.copytree(os.path.join(base, name), os.path.join(target, name))
    return target


def _small(version: int, partitioned: bool) -> pa.Table:
    """The appended batch: 10 rows, one file (in one partition of its own when ``partitioned``)."""
    rows = _rows(10**9 + 10 * version, 10, False)
    return rows.append_column("k", pa.array(["new"] * 10)) if partitioned else rows


def _memory_kb() -> tuple[int, int]:
    """This process's resident set now and its peak (``VmRSS``, ``VmHWM``), in KiB. Not ``ru_maxrss``: a child
    process starts with its parent's (the builder's) peak."""
    with open("/proc/self/status", encoding="ascii") as fh:
        fields = dict(line.split(":", 1) for line in fh)
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def _child(operation: str, out: str, partitioned: bool) -> dict[str, float]:
    """One measurement, in this (fresh) process: seconds (and MB for the append)."""
    from parquet_sink import history, sync_delta_log, write_batch

    kw = {"partition_by": ["k"]} if partitioned else {}
    if operation == "setup_history":
        for version in range(11):
            assert write_batch(out, _small(version, partitioned), app_id="later", version=version, **kw).committed
        return {}
    if operation == "history10":
        started = time.perf_counter()
        assert history(out, limit=10).num_rows == 10
        return {"history10": time.perf_counter() - started}
    if operation == "append_delta":
        started = time.perf_counter()
        assert write_batch(out, _small(0, partitioned), app_id="small", version=0, delta_log=True, **kw).committed
        return {"append_delta": time.perf_counter() - started}
    result: dict[str, float] = {}
    warm: list[float] = []
    for version in range(3):
        rss = _memory_kb()[0]
        started = time.perf_counter()
        assert write_batch(out, _small(version, partitioned), app_id="small", version=version, **kw).committed
        if version == 0:
            result["append"] = time.perf_counter() - started
            result["append_mb"] = (_memory_kb()[1] - rss) / 1024
        started = time.perf_counter()
        synced = sync_delta_log(out, check_files=False)
        seconds = time.perf_counter() - started
        assert synced.committed and synced.added == 1, synced
        if version == 0:
            result["sync_cold"] = seconds
        else:
            warm.append(seconds)
    result["sync_warm"] = max(warm)
    return result


def _run_child(operation: str, out: str, partitioned: bool, src: str | None) -> dict[str, float]:
    """:func:`_child` in a fresh process, importing parquet_sink from ``src`` (default: as this process does)."""
    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH"), here) if p)
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.growth_log", "--child", operation, out, str(int(partitioned))],
        check=True, capture_output=True, text=True, env=env,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(
    root: str, sizes: list[int], repeats: int = 3, shapes: tuple[str, ...] = SHAPES,
    sources: dict[str, str | None] | None = None,
) -> dict[tuple[str, str, int, str], Stat]:
    """``{(code, shape, files, operation): Stat}`` for each shape and size (see the module docstring), each figure
    in a fresh process on a fresh copy of the output, for each ``sources`` entry (label -> the ``src`` directory
    parquet_sink is imported from; default ``{"ours": None}``: as this process imports it), interleaved repeat by
    repeat; the outputs are removed at the end."""
    sources = sources or {"ours": None}
    results: dict[tuple[str, str, int, str], Stat] = {}
    for shape in shapes:
        partitioned = shape == "partitions"
        for files in sizes:
            base = build(root, shape, files)
            later = _copy(base, f"{base}-later")  # ten more batches: history(limit=10) leaves the first one out
            _run_child("setup_history", later, partitioned, None)
            for rep in range(repeats):
                for label, src in (sources.items() if rep % 2 == 0 else reversed(sources.items())):
                    for operation in ("append", "append_delta", "history10"):
                        target = later if operation == "history10" else _copy(base, f"{base}-{operation}-{rep}")
                        for name, value in _run_child(operation, target, partitioned, src).items():
                            results.setdefault((label, shape, files, name), Stat()).add(value)
                        if target != later:
                            shutil.rmtree(target)
            shutil.rmtree(base)
            shutil.rmtree(later)
    return results


def table(results: dict[tuple[str, str, int, str], Stat]) -> str:
    """A markdown table: one row per (shape, operation, code), one column per size."""
    sizes = sorted({files for _, _, files, _ in results})
    labels = list(dict.fromkeys(label for label, _, _, _ in results))
    lines = ["| shape | operation | code | " + " | ".join(f"{n:,} files" for n in sizes) + " |",
             "|---|---|---|" + "---:|" * len(sizes)]
    for shape in SHAPES:
        for operation in OPERATIONS:
            for label in labels:
                cells = []
                for files in sizes:
                    stat = results.get((label, shape, files, operation))
                    if stat is None:
                        cells.append("")
                    elif operation == "append_mb":
                        cells.append(f"{stat.median:+.0f} MB")
                    else:
                        cells.append(f"{stat.median * 1000:.1f} ms")
                if any(cells):
                    lines.append(f"| {shape} | {operation} | {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        print(json.dumps(_child(argv[1], argv[2], argv[3] == "1")))
        return 0
    p = argparse.ArgumentParser(prog="python -m benchmarks.growth_log", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1000,10000,100000")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--tmpdir")
    p.add_argument("--json", help="also write the figures here")
    p.add_argument("--before", help="also measure parquet_sink imported from this src directory (an older checkout)")
    args = p.parse_args(argv)
    root = tempfile.mkdtemp(prefix="growth-log-", dir=args.tmpdir)
    try:
        sources = {"before": args.before, "after": None} if args.before else None
        results = measure(
            root, [int(n) for n in args.sizes.split(",")], args.repeats, tuple(args.shapes.split(",")), sources
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(table(results))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"|".join(map(str, k)): v.values for k, v in results.items()}, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
