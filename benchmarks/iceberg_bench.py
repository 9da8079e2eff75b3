"""Section 10 ("iceberg"): the Iceberg table kept in step with ``_spark_metadata`` (``sync_iceberg``) as an output
grows 10x at a time, beside pyiceberg's own ``append`` and ``add_files`` on a table of the same files (issue 55
item 5). The three shapes of section 9 (:func:`benchmarks.growth_bench.build`: one big batch, batches of 100
files, one-file partitions), at each size of ``--iceberg-sizes`` (files; default 1,000 and 10,000):

* **first sync**: ``sync_iceberg`` of the whole output (every footer read once), beside pyiceberg's
  ``add_files`` of the same files to a new table (its twin, unpartitioned: pyiceberg reads partition values from
  a file's statistics, and our files do not hold their partition column);
* **sync per batch**: a 10-row ``write_batch`` (untimed), then ``sync_iceberg`` (timed), :data:`BATCHES` times in
  the process that synced before (a sink's in-step sync), medians; beside pyiceberg's ``append`` of the same 10
  rows and ``add_files`` of one 10-row file to the twin;
* the manifests in the current snapshot's list after it, ours and the twin's.

Standalone: ``python -m benchmarks.iceberg_bench [--iceberg-sizes 1000,10000] [--shapes big,partitions]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field

from .common import Stat
from .growth_bench import ROWS_PER_FILE, SHAPES, _table, build, parse_sizes

BATCHES = 12  # syncs per batch timed (after the first sync)


@dataclass
class IcebergResults:
    sizes: list[int]
    shapes: list[str]
    first: dict[tuple[str, str, int], float] = field(default_factory=dict)  # (who, shape, files) -> s
    per_batch: dict[tuple[str, str, int], Stat] = field(default_factory=dict)  # (who, shape, files) -> s each
    manifests: dict[tuple[str, str, int], int] = field(default_factory=dict)


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


def run(work_dir: str, sizes: list[int], shapes: list[str] | None = None) -> IcebergResults:
    import pyarrow.parquet as pq
    from pyiceberg.table import StaticTable

    from parquet_sink import sync_iceberg, write_batch

    results = IcebergResults(sizes, list(shapes or SHAPES))
    for files in sizes:
        for shape in results.shapes:
            work = tempfile.mkdtemp(prefix=f"iceberg-{shape}-{files}-", dir=work_dir)
            out = os.path.join(work, "out")
            build(shape, out, files, delta=False)
            started = time.perf_counter()
            result = sync_iceberg(out)
            results.first[("ours", shape, files)] = time.perf_counter() - started
            twin, seconds = _twin(work, out)
            results.first[("pyiceberg", shape, files)] = seconds
            ours, append, add = Stat(), Stat(), Stat()
            version = result.log_batch + 1
            for step in range(BATCHES):
                rows = _table(10**9 + step * ROWS_PER_FILE, ROWS_PER_FILE, shape == "partitions")
                write_batch(out, rows, app_id="iceberg-bench", version=version + step,
                            partition_by=["p"] if shape == "partitions" else None)
                started = time.perf_counter()
                result = sync_iceberg(out)
                ours.add(time.perf_counter() - started)
                plain = rows.drop_columns(["p"]) if shape == "partitions" else rows
                started = time.perf_counter()
                twin.append(plain)
                append.add(time.perf_counter() - started)
                single = os.path.join(work, f"single-{step}.parquet")
                pq.write_table(plain, single)
                started = time.perf_counter()
                twin.add_files([single])
                add.add(time.perf_counter() - started)
            results.per_batch[("ours", shape, files)] = ours
            results.per_batch[("pyiceberg append", shape, files)] = append
            results.per_batch[("pyiceberg add_files", shape, files)] = add
            table = StaticTable.from_metadata(result.metadata_location)
            results.manifests[("ours", shape, files)] = len(table.current_snapshot().manifests(table.io))
            results.manifests[("pyiceberg", shape, files)] = len(twin.current_snapshot().manifests(twin.io))
            shutil.rmtree(work, ignore_errors=True)
    return results


def section(results: IcebergResults) -> str:
    lines = [
        "## 10. The Iceberg table kept in step (`sync_iceberg`) vs pyiceberg's own writes",
        "",
        "First sync of an output of N files (every footer read) beside pyiceberg's `add_files` of the same files; "
        f"then {BATCHES} batches of 10 rows, each followed by `sync_iceberg` (median ms, min-max) beside pyiceberg's "
        "`append` of the same rows and `add_files` of one 10-row file on the twin table; manifests in the current "
        "snapshot's list at the end (ours merged in tiers).",
        "",
        "| shape | files | first sync ours / add_files | sync per batch | pyiceberg append | pyiceberg add_files | "
        "manifests ours / pyiceberg |",
        "|---|---:|---|---|---|---|---|",
    ]
    for shape in results.shapes:
        for files in results.sizes:
            lines.append(
                f"| {shape} | {files:,} | {results.first[('ours', shape, files)]:.2f} s / "
                f"{results.first[('pyiceberg', shape, files)]:.2f} s | "
                f"{results.per_batch[('ours', shape, files)].fmt('ms', 3, 1000)} | "
                f"{results.per_batch[('pyiceberg append', shape, files)].fmt('ms', 3, 1000)} | "
                f"{results.per_batch[('pyiceberg add_files', shape, files)].fmt('ms', 3, 1000)} | "
                f"{results.manifests[('ours', shape, files)]} / {results.manifests[('pyiceberg', shape, files)]} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.iceberg_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--iceberg-sizes", default="1000,10000", help="output sizes in files (comma-separated)")
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"subset of {','.join(SHAPES)}")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="iceberg-bench-") as work:
        print(section(run(work, parse_sizes(args.iceberg_sizes), args.shapes.split(","))))


if __name__ == "__main__":
    main()
