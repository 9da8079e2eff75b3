"""Section 9 ("growth"): how each operation's cost grows as an output grows 10x at a time, beside delta-rs on the
same files (issue 58 item 6).

Three shapes users have, each at every size of ``--growth-sizes`` (files; default 1,000 and 10,000, the full run
adds 100,000):

* ``big``: one big batch of N files (``write_batch``), then a 10-row batch;
* ``batches``: N files over N/100 batches of 100 files (log compaction every 10 batches, log cleanup), as a
  stream of small batches leaves an output;
* ``partitions``: N one-file partitions (``partition_by=["p"]``) in one batch.

Each output gets its Delta log (``sync_delta_log``): delta-rs reads the same files through it. Each operation runs
in a fresh process (the package imported, nothing read: **cold**), then again in that process (**warm**), three
processes per operation (medians of 3; warm: of the second runs), ours and delta-rs interleaved:

=============  ===============================================================  =========================================
operation      ours (public API)                                                delta-rs
=============  ===============================================================  =========================================
append         ``write_batch`` of 10 rows (a new version each run)              ``write_deltalake(mode="append")`` (a twin
                                                                                of the table: our sync refuses a log
                                                                                another writer committed to)
sync           ``sync_delta_log`` after a 10-row ``write_batch`` (untimed)      (its append is its commit)
count          ``count_committed``                                              DataFusion ``SELECT count(*)``
filter         ``read_committed(filter=...)``: 1% of the ids (``big``,          DataFusion ``SELECT * WHERE`` the same
               ``batches``), one partition ``p == k`` (``partitions``)
time travel    ``count_committed(as_of_batch=0)``                               ``DeltaTable(version=0)`` + ``count(*)``
history        ``history()``, and ``history(limit=10)``                         ``DeltaTable.history()`` (and ``limit=10``)
verify         ``verify``                                                       (none)
vacuum         ``vacuum(dry_run=True)``                                         ``vacuum(dry_run=True, full=True)``
optimize       ``optimize`` (a hard-linked copy each run; cold only)            ``optimize.compact()`` (likewise)
=============  ===============================================================  =========================================

Standalone: ``python -m benchmarks.growth_bench [--growth-sizes 1000,10000,100000] [--shapes big,partitions]
[--ops count,vacuum] [--base ../base-checkout]`` prints the markdown section (``--base``: the same operations also
run by another checkout's package, interleaved, for a before/after of one run: ``benchmarks.compare --growth`` does
this); ``python -m benchmarks.run --sections growth`` puts it in RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field

from .common import Stat
from .compaction_bench import checkout_child, status_kb

logger = logging.getLogger("benchmarks.growth")

SHAPES = ("big", "batches", "partitions")
ROWS_PER_FILE = 10
FILES_PER_BATCH = 100  # the batches shape
REPEATS = 3
# (operation, whether a run changes the output: then each run gets a hard-linked copy, or a new version)
OURS = ("append", "sync", "count", "filter", "time_travel", "history", "history_10", "verify", "vacuum", "optimize")
DELTA = {"append": "append", "count": "count", "filter": "filter", "time_travel": "time_travel",
         "history": "history", "history_10": "history_10", "vacuum": "vacuum", "optimize": "optimize"}
COPIED = ("optimize",)  # each run on its own hard-linked copy, cold only
LINEAR = {
    "filter": "reads 1% of the files: its data grows with the output",
    "history": "one row per batch: grows with the batches, not the files",
    "verify": "checks every log file and every committed file's presence and size",
    "vacuum": "lists every file under the root to find the ones no entry names",
    "optimize": "rewrites the small files it finds (the partitions shape has none to merge)",
    "count": "sums the logged row count of every file",
    "time_travel": "reads the log as of the early batch: that snapshot's files",
}
LABELS = {"append": "append (10 rows)", "sync": "Delta sync after it", "count": "count", "filter": "filtered read",
          "time_travel": "time travel (count as of batch 0)", "history": "history()", "history_10": "history(limit=10)",
          "verify": "verify", "vacuum": "vacuum dry run", "optimize": "optimize"}


@dataclass
class GrowthResults:
    sizes: list[int]
    shapes: list[str]
    who: list[str]  # "ours", "delta-rs", and "base" with --base
    repeats: int = REPEATS
    # (who, shape, operation, files) -> {"cold": Stat, "warm": Stat, "mb": Stat (peak RSS growth of the cold run)}
    times: dict[tuple[str, str, str, int], dict[str, Stat]] = field(default_factory=dict)
    build_seconds: dict[tuple[str, int], float] = field(default_factory=dict)


def _table(start: int, rows: int, partitioned: bool):
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = pa.array(range(start, start + rows), pa.int64())
    columns = {"id": ids, "v": pc.multiply(ids, 0.5)}
    if partitioned:
        columns["p"] = pc.divide(ids, ROWS_PER_FILE)
    return pa.table(columns)


def build(shape: str, out: str, files: int, delta: bool = True) -> None:
    """The output of ``shape`` with ``files`` data files under ``out``, and its Delta log (``delta``)."""
    from parquet_sink import sync_delta_log, write_batch

    rows = files * ROWS_PER_FILE
    partitioned = shape == "partitions"
    per_file = ROWS_PER_FILE
    if shape == "batches":
        per_batch = FILES_PER_BATCH * ROWS_PER_FILE
        for version in range(max(1, files // FILES_PER_BATCH)):
            write_batch(out, _table(version * per_batch, per_batch, False), app_id="growth", version=version,
                        max_records_per_file=per_file)
    else:
        write_batch(out, _table(0, rows, partitioned), app_id="growth", version=0, max_records_per_file=per_file,
                    partition_by=["p"] if partitioned else None)
        if shape == "big":  # the small append after a big batch (issue 58 items 1 and 2)
            write_batch(out, _table(rows, ROWS_PER_FILE, False), app_id="growth", version=1)
    if delta:
        sync_delta_log(out)


def twin(out: str, target: str) -> str:
    """A copy of ``out``, its data files hard-linked, its logs copied: what a run that changes an output changes."""
    shutil.copytree(out, target, copy_function=os.link, ignore=shutil.ignore_patterns("_delta_log", "_spark_metadata"))
    for name in ("_delta_log", "_spark_metadata"):
        if os.path.isdir(os.path.join(out, name)):  # an output without a Delta log has none to copy
            shutil.copytree(os.path.join(out, name), os.path.join(target, name))
    return target


def _filter_bounds(shape: str, files: int) -> tuple[int, int]:
    """The ids [low, high) of 1% of the files (one file's for the partitions shape), from the middle."""
    low = files // 2 * ROWS_PER_FILE
    return low, low + (ROWS_PER_FILE if shape == "partitions" else max(1, files // 100) * ROWS_PER_FILE)


# -- the child: one operation in a fresh process ---------------------------------------------------


def _ours(op: str, out: str, shape: str, files: int, run: int, version: int):
    """A callable running ``op`` on ``out``, and the rows it must return (None: not checked)."""
    import pyarrow.dataset as ds

    from parquet_sink import count_committed, history, read_committed, sync_delta_log, vacuum, verify, write_batch
    from parquet_sink.maintenance import optimize

    low, high = _filter_bounds(shape, files)
    partition = shape == "partitions"
    if op == "append":
        table = _table(10**9 + version * 10, 10, partition)
        return lambda: write_batch(out, table, app_id="growth-append", version=version,
                                   partition_by=["p"] if partition else None), None
    if op == "sync":
        def sync() -> None:
            sync_delta_log(out)
        write_batch(out, _table(2 * 10**9 + version * 10, 10, partition), app_id="growth-sync", version=version,
                    partition_by=["p"] if partition else None)
        return sync, None
    if op == "count":
        return lambda: count_committed(out), None
    if op == "filter":
        chosen = ds.field("p") == low // ROWS_PER_FILE if partition else (ds.field("id") >= low) & (ds.field("id") < high)
        return lambda: read_committed(out, filter=chosen).num_rows, high - low
    if op == "time_travel":
        return lambda: count_committed(out, as_of_batch=0), None
    if op == "history":
        return lambda: history(out).num_rows, None
    if op == "history_10":
        return lambda: history(out, limit=10).num_rows, None
    if op == "verify":
        return lambda: verify(out), None
    if op == "vacuum":
        return lambda: vacuum(out, "7d", dry_run=True), None
    if op == "optimize":
        return lambda: optimize(out), None
    raise ValueError(op)


def _delta(op: str, out: str, shape: str, files: int, run: int, version: int):
    from deltalake import DeltaTable, QueryBuilder, write_deltalake

    from parquet_sink import Storage

    uri, options = Storage(out).object_store_location()
    low, high = _filter_bounds(shape, files)
    partition = shape == "partitions"

    def sql(query: str, table=None) -> int:
        table = table or DeltaTable(uri, storage_options=options)
        return QueryBuilder().register("t", table).execute(query).read_all().num_rows

    if op == "append":
        table = _table(10**9 + version * 10, 10, partition)
        return lambda: write_deltalake(uri, table, mode="append", partition_by=["p"] if partition else None), None
    if op == "count":
        return lambda: sql("SELECT count(*) AS n FROM t"), 1
    if op == "filter":
        where = f"p = {low // ROWS_PER_FILE}" if partition else f"id >= {low} AND id < {high}"
        return lambda: sql(f"SELECT * FROM t WHERE {where}"), high - low
    if op == "time_travel":
        return lambda: sql("SELECT count(*) AS n FROM t", DeltaTable(uri, version=0, storage_options=options)), 1
    if op == "history":
        return lambda: len(DeltaTable(uri, storage_options=options).history()), None
    if op == "history_10":
        return lambda: len(DeltaTable(uri, storage_options=options).history(limit=10)), None
    if op == "vacuum":
        return lambda: DeltaTable(uri, storage_options=options).vacuum(retention_hours=168, dry_run=True, full=True), None
    if op == "optimize":
        return lambda: DeltaTable(uri, storage_options=options).optimize.compact(), None
    raise ValueError(op)


def child(who: str, op: str, shape: str, files: int, outs: list[str], version: int) -> None:
    """Run ``op`` once per path of ``outs`` (the same path repeated, or copies), timing each; prints a JSON line:
    the times in seconds (the first is the cold one), the cold run's peak RSS growth in MB, the package's file."""
    import deltalake  # noqa: F401  imported before the cold run, as a user's process has them (the package's
    import pyarrow.dataset  # noqa: F401  lazy imports are not what grows with the output)
    import pyarrow.parquet  # noqa: F401

    import parquet_sink

    maker = _ours if who != "delta-rs" else _delta
    times, growth = [], 0.0
    for run, out in enumerate(outs):
        fn, expected = maker(op, out, shape, files, run, version + run)
        before = status_kb("VmRSS")
        started = time.perf_counter()
        found = fn()
        times.append(time.perf_counter() - started)
        if run == 0:
            growth = (status_kb("VmHWM") - before) / 1024
        if expected is not None and found != expected:
            raise RuntimeError(f"{who} {op} on {out}: {found}, expected {expected}")
    print(json.dumps({"times": times, "mb": growth, "module": parquet_sink.__file__}))


def _run_child(who: str, op: str, shape: str, files: int, outs: list[str], version: int, src: str | None) -> dict:
    args = ["benchmarks.growth_bench", "--child", who, op, shape, str(files), str(version), *outs]
    return checkout_child(args, src, f"{who} {op} ({shape}, {files} files)")


# -- the parent ------------------------------------------------------------------------------------


def run(work_dir: str, sizes: list[int], shapes: list[str] | None = None, ops: list[str] | None = None,
        repeats: int = REPEATS, base: str | None = None, change: str | None = None) -> GrowthResults:
    """The section's figures; ``base``: a checkout whose package also runs every operation of ours; ``change``: the
    checkout whose package is ours (default: the one the environment imports)."""
    shapes = list(shapes or SHAPES)
    ops = list(ops or OURS)
    who = ["ours", "delta-rs"] + (["base"] if base else [])
    results = GrowthResults(sizes, shapes, who, repeats)
    sources = {"base": base, "ours": change}
    version = 100  # the append and sync runs' versions: each run a new one
    for shape in shapes:
        for files in sizes:
            root = tempfile.mkdtemp(prefix=f"growth-{shape}-{files}-", dir=work_dir)
            out = os.path.join(root, "out")
            started = time.perf_counter()
            build(shape, out, files)
            results.build_seconds[(shape, files)] = time.perf_counter() - started
            delta_out = twin(out, os.path.join(root, "delta-rs"))  # delta-rs's appends and optimizes land here
            logger.info("growth %s %d files: built in %.1f s", shape, files, results.build_seconds[(shape, files)])
            for rep in range(repeats):
                contenders = who if rep % 2 == 0 else who[::-1]
                for op in ops:
                    for name in contenders:
                        if name == "delta-rs" and op not in DELTA:
                            continue
                        copied = op in COPIED
                        target = delta_out if name == "delta-rs" else out
                        outs = [twin(target, os.path.join(root, f"copy-{name}-{op}-{rep}"))] if copied else [target] * 3
                        result = _run_child(name, op, shape, files, outs, version, sources.get(name))
                        version += len(outs)
                        figures = results.times.setdefault((name, shape, op, files), {k: Stat() for k in ("cold", "warm", "mb")})
                        figures["cold"].add(result["times"][0])
                        figures["mb"].add(result["mb"])
                        if len(result["times"]) > 1:
                            figures["warm"].add(min(result["times"][1:]))
                        if copied:
                            shutil.rmtree(outs[0], ignore_errors=True)
            logger.info("growth %s %d files: %s", shape, files, "; ".join(
                f"{op} {results.times[('ours', shape, op, files)]['cold'].median * 1000:.0f} ms" for op in ops))
            shutil.rmtree(root, ignore_errors=True)
    return results


def _ms(value: float) -> str:
    if value != value:
        return "n/a"
    return f"{value * 1000:,.0f}" if value >= 0.1 else f"{value * 1000:.1f}"


def _growth(results: GrowthResults, who: str, shape: str, op: str) -> str:
    """The cold time's growth per 10x of files, each step (``x1.2, x3.4``)."""
    medians = [results.times.get((who, shape, op, n), {}).get("cold", Stat()).median for n in results.sizes]
    steps = []
    for (a, na), (b, nb) in zip(zip(medians, results.sizes), list(zip(medians, results.sizes))[1:]):
        if a == a and b == b and a > 0:
            steps.append(f"x{(b / a) ** (1 / math.log10(nb / na)):.1f}")
    return ", ".join(steps) or "n/a"


def section(results: GrowthResults) -> str:
    """The markdown of the section: per shape and operation, the cold (warm) time at each size, the growth per
    10x, delta-rs's at the largest size and the ratio (delta-rs time / ours: > 1 = ours faster)."""
    largest = results.sizes[-1]
    lines = [
        "## 9. Growth: each operation as the output grows 10x at a time (issue 58)\n",
        f"Sizes: {', '.join(f'{n:,}' for n in results.sizes)} files; shapes: `big` (one batch of N files, then a "
        f"10-row batch), `batches` (N/{FILES_PER_BATCH} batches of {FILES_PER_BATCH} files, log compaction and "
        "cleanup), `partitions` (N one-file partitions). Each operation in a fresh process (**cold**, the package "
        "imported, nothing read), then twice more in that process (**warm**, the faster), "
        f"{results.repeats} processes each: medians. Milliseconds. *growth/10x*: the cold time's factor per 10x of files "
        "(1.0 = flat, 10 = linear). *vs delta-rs*: delta-rs's cold time / ours at the largest size (> 1 = ours "
        "faster), delta-rs on the same files through the Delta log `sync_delta_log` wrote; its appends and "
        "optimizes on a twin of the table. Memory: the cold run's peak RSS growth at the largest size.\n",
    ]
    for shape in results.shapes:
        lines.append(f"### Shape `{shape}`\n")
        head = " | ".join(f"{n:,} files" for n in results.sizes)
        extra = " | before (base) |" if "base" in results.who else " |"
        lines.append(f"| operation | {head} | growth/10x | delta-rs at {largest:,} | vs delta-rs | memory{extra}")
        lines.append("|---" * (len(results.sizes) + 5 + ("base" in results.who)) + "|")
        for op in OURS:
            ours = [results.times.get(("ours", shape, op, n)) for n in results.sizes]
            if not any(ours):
                continue
            cells = [
                f"{_ms(f['cold'].median)} ({_ms(f['warm'].median)})" if f and f["warm"].values else
                (_ms(f["cold"].median) if f else "n/a")
                for f in ours
            ]
            theirs = results.times.get(("delta-rs", shape, op, largest))
            ratio = "n/a"
            if theirs and ours[-1]:
                ratio = f"{theirs['cold'].median / ours[-1]['cold'].median:.2f}x"
            row = [LABELS[op], *cells, _growth(results, "ours", shape, op),
                   _ms(theirs["cold"].median) if theirs else "(none)", ratio,
                   f"{ours[-1]['mb'].median:.0f} MB" if ours[-1] else "n/a"]
            if "base" in results.who:
                before = [results.times.get(("base", shape, op, n)) for n in results.sizes]
                row.append(" / ".join(_ms(f["cold"].median) if f else "n/a" for f in before) +
                           f" ({_growth(results, 'base', shape, op)})")
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    lines.append(
        "Linear by nature (they touch every file, or every batch, of what they are asked about): "
        + "; ".join(f"{LABELS[op]}: {why}" for op, why in LINEAR.items())
        + ". Per batch, flat at any size: append, the Delta sync after it, history(limit=10).\n"
    )
    build = ", ".join(f"{shape} {n:,}: {s:.0f} s" for (shape, n), s in results.build_seconds.items())
    lines.append(f"Build times (write_batch and sync_delta_log, untimed above): {build}.\n")
    return "\n".join(lines)


def parse_sizes(text: str) -> list[int]:
    sizes = sorted(int(x) for x in text.split(",") if x.strip())
    if not sizes or sizes[0] < 100:
        raise ValueError(f"growth sizes must be files >= 100, got {text!r}")
    return sizes


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        who, op, shape, files, version, *outs = argv[1:]
        child(who, op, shape, int(files), outs, int(version))
        return
    p = argparse.ArgumentParser(prog="python -m benchmarks.growth_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--growth-sizes", default="1000,10000", help="output sizes in files (default 1000,10000)")
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--ops", default=",".join(OURS))
    p.add_argument("--repeats", type=int, default=REPEATS)
    p.add_argument("--base", help="another checkout whose package also runs our operations (before/after)")
    p.add_argument("--tmpdir", help="where the outputs go (default: the system temp dir)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-5s %(name)s: %(message)s")
    logging.getLogger("parquet_sink").setLevel(logging.WARNING)
    work = tempfile.mkdtemp(prefix="growth-", dir=args.tmpdir)
    try:
        results = run(work, parse_sizes(args.growth_sizes), args.shapes.split(","), args.ops.split(","),
                      args.repeats, args.base)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(section(results))


if __name__ == "__main__":
    main()
