"""Section 7 ("optimize"): compaction of small data files, ours (``parquet_sink.maintenance.optimize``) against
delta-rs's ``DeltaTable.optimize.compact()`` on the same small files, and reads before and after.

The output: ``write_batch`` appends of ``files / batches`` small files each (``max_records_per_file`` rows per file,
4 partitions), then ``sync_delta_log`` so a Delta log lists exactly the same files. Two copies of that directory
(same bytes): ours optimizes one, delta-rs compacts the other (same target size). Timed once each per repeat, on
fresh copies: rows/s and input bytes/s. Reads of all rows before and after: ``read_committed``, Spark
(``spark.read.parquet(out)`` summing a column, through ``_spark_metadata``) and delta-rs
(``DeltaTable(out).to_pyarrow_table()``, through ``_delta_log``, on delta-rs's own compacted copy).

Alone: ``python -m benchmarks.optimize_bench --files 10000 --repeats 3`` (``--reads`` adds the reads, with Spark);
prints each repeat's paired figures (ours and delta-rs on copies of the same files, the order alternating).
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, field

import pyarrow as pa

from parquet_sink import committed_files, read_committed, sync_delta_log, write_batch
from parquet_sink.maintenance import optimize

from .common import Stat, timed

logger = logging.getLogger("benchmarks.optimize")

PARTITIONS = 4
TARGET = 64 * 1024 * 1024


@dataclass
class OptimizeResults:
    files: int
    rows: int
    bytes: int = 0
    files_after: dict[str, int] = field(default_factory=dict)  # "ours" / "delta-rs"
    seconds: dict[str, Stat] = field(default_factory=dict)  # "ours" / "delta-rs": the compaction
    read: dict[str, Stat] = field(default_factory=dict)  # "<reader> before" / "<reader> after"

    def rate(self, name: str, per: str) -> float:
        """Rows (``per="rows"``) or input bytes per second of a compaction, at its median."""
        return (self.rows if per == "rows" else self.bytes) / self.seconds[name].median


def _batch(version: int, rows: int) -> pa.Table:
    ids = pa.array(range(version * rows, (version + 1) * rows), pa.int64())
    return pa.table({
        "id": ids, "v": pa.array([i * 0.5 for i in range(rows)]), "s": [f"name-{i}" for i in range(rows)],
        "k": [f"p{i % PARTITIONS}" for i in range(rows)],
    })


def _build(out: str, files: int, batches: int, rows_per_file: int) -> int:
    per_batch = files // batches * rows_per_file
    for version in range(batches):
        write_batch(out, _batch(version, per_batch), app_id="bench", version=version, partition_by=["k"],
                    max_records_per_file=rows_per_file)
    sync_delta_log(out)
    return batches * per_batch


def _reads(spark, out: str, rows: int) -> dict:
    from deltalake import DeltaTable

    def spark_read() -> int:
        return spark.read.parquet(out).selectExpr("count(*)", "sum(v)").collect()[0][0]

    return {
        "read_committed": lambda: read_committed(out).num_rows,
        "spark": spark_read,
        "delta-rs": lambda: DeltaTable(out).to_pyarrow_table().num_rows,
    }


def _time_reads(results: OptimizeResults, spark, outs: dict[str, str], when: str, repeats: int) -> None:
    for name, out in outs.items():
        reader = _reads(spark, out, results.rows)[name]
        reader()  # warm-up (JVM, caches)
        for _ in range(repeats):
            seconds, found = timed(reader)
            if found != results.rows:
                raise RuntimeError(f"{name} read {found} rows {when} optimize, expected {results.rows}")
            results.read.setdefault(f"{name} {when}", Stat()).add(seconds)


def run(spark, work_dir: str, files: int, rows_per_file: int, repeats: int) -> OptimizeResults:
    """The section's figures (``spark`` None: the compaction only, no reads)."""
    from deltalake import DeltaTable

    base = os.path.join(work_dir, "optimize-base")
    batches = max(1, files // 500)
    rows = _build(base, files, batches, rows_per_file)
    results = OptimizeResults(files, rows)
    results.bytes = sum(
        os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(base) if "_" not in os.path.basename(d)[:1]
        for f in fs if f.endswith(".parquet")
    )
    before = {"read_committed": base, "spark": base, "delta-rs": base}
    if spark is not None:
        _time_reads(results, spark, before, "before", repeats)
    ours_out = theirs_out = ""
    for rep in range(repeats):
        ours_out, theirs_out = os.path.join(work_dir, f"optimize-ours-{rep}"), os.path.join(work_dir, f"optimize-delta-{rep}")
        shutil.copytree(base, ours_out)
        shutil.copytree(base, theirs_out)
        contenders = {
            "ours": lambda: optimize(ours_out, target_file_size=TARGET),
            "delta-rs": lambda: DeltaTable(theirs_out).optimize.compact(target_size=TARGET),
        }
        for name in (list(contenders) if rep % 2 == 0 else list(contenders)[::-1]):
            seconds, _ = timed(contenders[name])
            results.seconds.setdefault(name, Stat()).add(seconds)
        logger.info("repeat %d: ours %.2f s, delta-rs %.2f s", rep, results.seconds["ours"].values[-1],
                    results.seconds["delta-rs"].values[-1])
        if rep < repeats - 1:
            shutil.rmtree(ours_out)
            shutil.rmtree(theirs_out)
    results.files_after = {
        "ours": len(committed_files(ours_out)),
        "delta-rs": len(DeltaTable(theirs_out).file_uris()),
    }
    after = {"read_committed": ours_out, "spark": ours_out, "delta-rs": theirs_out}
    if spark is not None:
        _time_reads(results, spark, after, "after", repeats)
    logger.info(
        "optimize: %d files, %d rows: ours %s (%.0f rows/s), delta-rs %s (%.0f rows/s); files after %s",
        files, rows, results.seconds["ours"].fmt(), results.rate("ours", "rows"), results.seconds["delta-rs"].fmt(),
        results.rate("delta-rs", "rows"), results.files_after,
    )
    return results


def main() -> None:
    import argparse
    import tempfile

    p = argparse.ArgumentParser(prog="python -m benchmarks.optimize_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--files", type=int, default=10_000, help="small files to compact (default 10,000)")
    p.add_argument("--rows-per-file", type=int, default=100, help="rows per small file (default 100)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs of each contender, on fresh copies (default 3)")
    p.add_argument("--work-dir", help="where to build the files (default: a temporary directory)")
    p.add_argument("--reads", action="store_true", help="also time reads before and after (starts Spark)")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    spark = None
    if args.reads:
        from .common import make_session

        spark = make_session()
    with tempfile.TemporaryDirectory(dir=args.work_dir) as work:
        results = run(spark, work, args.files, args.rows_per_file, args.repeats)
    mb = results.bytes / 1e6
    for name in ("ours", "delta-rs"):
        stat = results.seconds[name]
        print(f"{name:9} {stat.fmt():>22}  {results.rate(name, 'rows'):>12,.0f} rows/s  "
              f"{results.rate(name, 'bytes') / 1e6:6.1f} MB/s  ({results.files} files, {mb:.1f} MB, "
              f"{results.files_after[name]} after)")


if __name__ == "__main__":
    main()
