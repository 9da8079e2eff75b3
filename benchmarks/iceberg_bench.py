"""Section 10 ("iceberg"): the Iceberg table kept in step with ``_spark_metadata`` (``sync_iceberg``) as an output
grows 10x at a time, beside pyiceberg's own ``append`` and ``add_files`` on a table of the same files (issue 55
item 5). The three shapes of section 9 (:func:`benchmarks.growth_bench.build`: one big batch, batches of 100
files, one-file partitions), at each size of ``--iceberg-sizes`` (files; default 1,000 and 10,000), and the
``snapshots`` shape at each size of ``--iceberg-snapshots`` (batches of one 10-row file each: the table keeps one
snapshot per batch, the dimension a batch's sync may grow with; default 100 and 1,000):

* **first sync**: ``sync_iceberg`` of the whole output (every footer read once), beside pyiceberg's
  ``add_files`` of the same files to a new table (its twin, unpartitioned: pyiceberg reads partition values from
  a file's statistics, and our files do not hold their partition column);
* **sync per batch**: a 10-row ``write_batch`` (untimed), then ``sync_iceberg`` (timed), :data:`BATCHES` times in
  the process that synced first (a sink's in-step sync), medians; beside pyiceberg's ``append`` of the same 10
  rows and ``add_files`` of one 10-row file to the twin;
* the manifests in the current snapshot's list after it, ours and the twin's.

Ours runs in a child process of the checkout measured (each on a copy of the same output, data files
hard-linked); with ``base`` (``python -m benchmarks.compare BASE CHANGE --iceberg``) the checkout before a change
runs beside it on the same output in the same run, the two alternating per output.

Standalone: ``python -m benchmarks.iceberg_bench [--iceberg-sizes 1000,10000] [--iceberg-snapshots 100,1000]
[--shapes big,partitions,snapshots] [--base CHECKOUT]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field

from .common import Stat
from .compaction_bench import checkout_child
from .growth_bench import ROWS_PER_FILE, SHAPES, _table, build, parse_sizes, twin

BATCHES = 12  # syncs per batch timed (after the first sync)
ICEBERG_SHAPES = (*SHAPES, "snapshots")


@dataclass
class IcebergResults:
    sizes: dict[str, list[int]]  # shape -> its sizes (files; batches for the snapshots shape)
    shapes: list[str]
    who: list[str] = field(default_factory=lambda: ["ours"])  # and "before" with a base checkout
    first: dict[tuple[str, str, int], float] = field(default_factory=dict)  # (who, shape, files) -> s
    per_batch: dict[tuple[str, str, int], Stat] = field(default_factory=dict)  # (who, shape, files) -> s each
    manifests: dict[tuple[str, str, int], int] = field(default_factory=dict)


def build_shape(shape: str, out: str, files: int) -> None:
    """The output of ``shape`` with ``files`` data files (the snapshots shape: as many one-file batches)."""
    from parquet_sink import write_batch

    if shape != "snapshots":
        return build(shape, out, files, delta=False)
    for version in range(files):
        write_batch(out, _table(version * ROWS_PER_FILE, ROWS_PER_FILE, False), app_id="growth", version=version)


def parse_snapshots(text: str) -> list[int]:
    """The sizes of the snapshots shape (batches, at least 1 each) from ``"100,1000"``."""
    sizes = sorted(int(x) for x in text.split(",") if x.strip())
    if not sizes or sizes[0] < 1:
        raise ValueError(f"snapshots sizes must be batches >= 1, got {text!r}")
    return sizes


def _step_rows(shape: str, step: int):
    """The 10 rows of the ``step``-th batch after the first sync."""
    return _table(10**9 + step * ROWS_PER_FILE, ROWS_PER_FILE, shape == "partitions")


def child(out: str, shape: str) -> None:
    """The first sync of ``out`` then :data:`BATCHES` batches each followed by a sync, in this process (the
    package its path imports); prints a JSON line: the seconds of the first sync and of each sync per batch,
    the manifests in the current snapshot's list at the end, the package's file."""
    import pyiceberg.catalog.sql  # noqa: F401  imported before the first sync, as pyiceberg's add_files runs in a
    import pyiceberg.io.pyarrow  # noqa: F401  process that has them (the package's lazy imports do not grow)
    from pyiceberg.table import StaticTable

    import parquet_sink
    from parquet_sink import sync_iceberg, write_batch

    started = time.perf_counter()
    result = sync_iceberg(out)
    first = time.perf_counter() - started
    version, syncs = result.log_batch + 1, []
    for step in range(BATCHES):
        write_batch(out, _step_rows(shape, step), app_id="iceberg-bench", version=version + step,
                    partition_by=["p"] if shape == "partitions" else None)
        started = time.perf_counter()
        result = sync_iceberg(out)
        syncs.append(time.perf_counter() - started)
    table = StaticTable.from_metadata(result.metadata_location)
    print(json.dumps({"first": first, "syncs": syncs, "manifests": len(table.current_snapshot().manifests(table.io)),
                      "module": parquet_sink.__file__}))


def _ours(out: str, shape: str, src: str | None) -> dict:
    """:func:`child` in a fresh process importing the package of the checkout ``src`` (None: this one's)."""
    return checkout_child(["benchmarks.iceberg_bench", "--child", out, shape], src, f"sync_iceberg of {out} ({shape})")


def _twin(work: str, out: str):
    """A pyiceberg table (SQLite catalog) of the output's committed files, by ``add_files``: (table, seconds)."""
    import pyarrow.parquet as pq
    from pyiceberg.catalog.sql import SqlCatalog

    from parquet_sink import committed_files

    catalog = SqlCatalog("twin", uri=f"sqlite:///{work}/twin.db", warehouse=f"file://{work}/twin-warehouse")
    catalog.create_namespace_if_not_exists("bench")
    paths = [f.path for f in committed_files(out)]
    table = catalog.create_table(f"bench.t{len(os.listdir(work))}", pq.read_schema(paths[0]))
    started = time.perf_counter()
    table.add_files(paths)
    return table, time.perf_counter() - started


def _pyiceberg(work: str, out: str, shape: str, files: int, results: IcebergResults) -> None:
    """pyiceberg's figures on the twin of ``out``: ``add_files`` of its files, then per batch ``append`` of the
    batch's rows and ``add_files`` of one file of them."""
    import pyarrow.parquet as pq

    twin_table, seconds = _twin(work, out)
    results.first[("pyiceberg", shape, files)] = seconds
    append, add = Stat(), Stat()
    for step in range(BATCHES):
        rows = _step_rows(shape, step)
        plain = rows.drop_columns(["p"]) if shape == "partitions" else rows
        started = time.perf_counter()
        twin_table.append(plain)
        append.add(time.perf_counter() - started)
        single = os.path.join(work, f"single-{step}.parquet")
        pq.write_table(plain, single)
        started = time.perf_counter()
        twin_table.add_files([single])
        add.add(time.perf_counter() - started)
    results.per_batch[("pyiceberg append", shape, files)] = append
    results.per_batch[("pyiceberg add_files", shape, files)] = add
    results.manifests[("pyiceberg", shape, files)] = len(twin_table.current_snapshot().manifests(twin_table.io))


def run(work_dir: str, sizes: list[int], shapes: list[str] | None = None, snapshots: list[int] | None = None,
        base: str | None = None, change: str | None = None) -> IcebergResults:
    """The section's figures; ``snapshots``: the sizes of the snapshots shape (default 100 and 1,000); ``base``:
    a checkout whose package also syncs each output (before/after); ``change``: the checkout whose package is
    ours (default: the one the environment imports)."""
    shapes = list(shapes or ICEBERG_SHAPES)
    per_shape = {s: list(snapshots or [100, 1000]) if s == "snapshots" else list(sizes) for s in shapes}
    results = IcebergResults(per_shape, shapes, ["ours", "before"] if base else ["ours"])
    sources = {"ours": change, "before": base}
    for shape in shapes:
        for files in per_shape[shape]:
            work = tempfile.mkdtemp(prefix=f"iceberg-{shape}-{files}-", dir=work_dir)
            out = os.path.join(work, "out")
            build_shape(shape, out, files)
            order = results.who if (files + len(shape)) % 2 else results.who[::-1]
            for who in order:  # each on its copy of the output, the two alternating from one output to the next
                copy = twin(out, os.path.join(work, f"out-{who}"))
                found = _ours(copy, shape, sources[who])
                results.first[(who, shape, files)] = found["first"]
                results.per_batch[(who, shape, files)] = Stat(found["syncs"])
                results.manifests[(who, shape, files)] = found["manifests"]
            _pyiceberg(work, out, shape, files, results)
            shutil.rmtree(work, ignore_errors=True)
    return results


def section(results: IcebergResults) -> str:
    compared = "before" in results.who
    lines = [
        "## 10. The Iceberg table kept in step (`sync_iceberg`) vs pyiceberg's own writes",
        "",
        "First sync of an output of N files (every footer read) beside pyiceberg's `add_files` of the same files; "
        f"then {BATCHES} batches of 10 rows, each followed by `sync_iceberg` (median ms, min-max) beside pyiceberg's "
        "`append` of the same rows and `add_files` of one 10-row file on the twin table; manifests in the current "
        "snapshot's list at the end (ours merged in tiers). `snapshots`: N batches of one file (N snapshots kept)."
        + (" `before`: the base checkout, on a copy of the same output in the same run." if compared else ""),
        "",
        "| shape | files | code | first sync ours / add_files | sync per batch | pyiceberg append | "
        "pyiceberg add_files | manifests ours / pyiceberg |",
        "|---|---:|---|---|---|---|---|---|",
    ]
    for shape in results.shapes:
        for files in results.sizes[shape]:
            for who in results.who[::-1]:
                lines.append(
                    f"| {shape} | {files:,} | {'after' if compared and who == 'ours' else who} | "
                    f"{results.first[(who, shape, files)]:.2f} s / {results.first[('pyiceberg', shape, files)]:.2f} s | "
                    f"{results.per_batch[(who, shape, files)].fmt('ms', 3, 1000)} | "
                    f"{results.per_batch[('pyiceberg append', shape, files)].fmt('ms', 3, 1000)} | "
                    f"{results.per_batch[('pyiceberg add_files', shape, files)].fmt('ms', 3, 1000)} | "
                    f"{results.manifests[(who, shape, files)]} / {results.manifests[('pyiceberg', shape, files)]} |"
                )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.iceberg_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--iceberg-sizes", default="1000,10000", help="output sizes in files (comma-separated)")
    parser.add_argument("--iceberg-snapshots", default="100,1000", help="sizes of the snapshots shape (batches)")
    parser.add_argument("--shapes", default=",".join(ICEBERG_SHAPES), help=f"subset of {','.join(ICEBERG_SHAPES)}")
    parser.add_argument("--base", help="another checkout whose package also syncs each output (before/after)")
    parser.add_argument("--child", nargs=2, metavar=("OUT", "SHAPE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(*args.child)
    with tempfile.TemporaryDirectory(prefix="iceberg-bench-") as work:
        print(section(run(work, parse_sizes(args.iceberg_sizes), args.shapes.split(","),
                          parse_snapshots(args.iceberg_snapshots), args.base)))


if __name__ == "__main__":
    main()
