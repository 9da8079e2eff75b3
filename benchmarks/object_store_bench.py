"""The sink on an object store: the same stream into a moto S3 server through Spark's own file sink (Hadoop's
S3A, files written in place, its log committed through S3A) and through ``ParquetSink`` on both its writer paths
for stores: ``ours`` (``writer="spark"``: Spark's writer in place through S3A,
:mod:`parquet_sink.write.spark_in_place`) and ``arrow`` (``writer="arrow"``: pyarrow in ``mapInArrow`` tasks
writing through s3fs; what ``writer="auto"`` picks on an object store); both commit the log by a conditional PUT
through s3fs.

This is the comparison that counts for the Arrow path: on local disk it competes with Spark's writer writing to
local files; on a store both pay the uploads. Spark has no S3A of its own (``hadoop-aws`` and an AWS SDK are not
in PySpark): ``tests/helpers/s3a.py`` takes its jars from PyPI and points it at the moto server.

Standalone: ``python -m benchmarks.object_store_bench [--batches 6] [--rows 1000000] [--repeats 3]`` prints a
markdown section. Repeats run the contenders of a layout back to back, the order rotated by one each repeat.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

from parquet_sink import ParquetSink, read_committed

from .common import Stat
from .data import generate_input
from .sink_bench import RecordingSink, timed_query
from tests.helpers.s3a import s3a_conf

logger = logging.getLogger("benchmarks.object_store")

def s3a_session(endpoint: str, access_key: str, secret_key: str, region: str, driver_memory: str = "4g"):
    """A ``local[2]`` SparkSession (the benchmarks' settings) whose ``s3a://`` goes to ``endpoint``."""
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]").appName("parquet-sink-benchmarks-s3")
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
    )
    for name, value in s3a_conf(endpoint, access_key, secret_key, region).items():
        builder = builder.config(name, value)
    return builder.getOrCreate()


@dataclass
class StoreRun:
    kind: str
    wall: float
    cpu: float
    rows: int
    batch_seconds: list[float]  # addBatch of each micro-batch


@dataclass
class StoreResults:
    batches: int
    rows_per_batch: int
    runs: dict[str, list[StoreRun]] = field(default_factory=dict)

    def wall(self, kind: str) -> Stat:
        return Stat([r.wall for r in self.runs.get(kind, [])])

    def ratio(self, kind: str, attribute: str = "wall") -> Stat:
        """Per repeat: ``kind``'s figure over Spark's sink's of the same layout in the same repeat."""
        base = "spark-part" if kind.endswith("-part") else "spark"
        pairs = zip(self.runs.get(kind, []), self.runs.get(base, []))
        return Stat([getattr(a, attribute) / getattr(b, attribute) for a, b in pairs])


def _run(spark, kind: str, input_dir: str, schema, bucket: str, work: str, tag: str, storage_options: dict) -> StoreRun:
    base, partitioned = kind.removesuffix("-part"), kind.endswith("-part")
    partition_by = ("country",) if partitioned else ()
    checkpoint = os.path.join(work, f"ckpt-{kind}-{tag}")
    stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(input_dir)
    writer = stream.writeStream.option("checkpointLocation", checkpoint).trigger(availableNow=True)
    if base == "spark":
        out = f"s3a://{bucket}/spark-{kind}-{tag}"
        writer = writer.format("parquet").option("path", out).partitionBy(*partition_by)
    else:
        out = f"s3://{bucket}/ours-{kind}-{tag}"
        sink = ParquetSink(out, partition_by=partition_by, storage_options=storage_options,
                           writer="arrow" if base == "arrow" else "spark")
        writer = writer.foreachBatch(RecordingSink(sink))
    query, wall, cpu = timed_query(spark, writer)
    progress = list(query.recentProgress)
    rows = sum(p["numInputRows"] for p in progress)
    # every row once, read back the way each contender's readers read it
    if base == "spark":
        back = spark.read.parquet(out).count()
    else:
        back = read_committed(out, storage_options=storage_options, columns=["id"]).num_rows
    if back != rows:
        raise RuntimeError(f"{kind} {tag}: {rows} rows streamed, {back} read back from {out}")
    shutil.rmtree(checkpoint, ignore_errors=True)
    logger.info("%-10s %s: %d rows, %.2fs wall, %.1fs CPU", kind, tag, rows, wall, cpu)
    return StoreRun(kind, wall, cpu, rows, [p["durationMs"].get("addBatch", 0) / 1000 for p in progress])


def run(server, work: str, batches: int, rows: int, repeats: int, kinds: tuple[str, ...]) -> StoreResults:
    """``repeats`` paired runs of every kind (``spark``, ``ours``, ``arrow``, and each with ``-part``) on moto: a
    repeat runs the kinds of a layout back to back, in an order rotated by one each repeat."""
    bucket = "bench"
    server.make_bucket(bucket)
    options = server.storage_options
    spark = s3a_session(server.endpoint_url, options["key"], options["secret"], server.region_name)
    try:
        input_dir, warm_dir = os.path.join(work, "input"), os.path.join(work, "warm")
        generate_input(input_dir, batches, rows)
        generate_input(warm_dir, 2, max(10_000, rows // 10))
        schema = spark.read.parquet(input_dir).schema
        for kind in kinds:
            _run(spark, kind, warm_dir, schema, bucket, work, "warmup", options)
        results = StoreResults(batches, rows)
        for rep in range(repeats):
            for layout in ("", "-part"):
                group = [k + layout for k in ("spark", "ours", "arrow") if k + layout in kinds]
                shift = rep % max(1, len(group))
                for kind in group[shift:] + group[:shift]:
                    results.runs.setdefault(kind, []).append(
                        _run(spark, kind, input_dir, schema, bucket, work, f"r{rep}", options)
                    )
        return results
    finally:
        spark.stop()


def to_json(results: StoreResults) -> str:
    return json.dumps(dataclasses.asdict(results))


def from_json(text: str) -> StoreResults:
    data = json.loads(text)
    runs = {kind: [StoreRun(**r) for r in runs] for kind, runs in data.pop("runs").items()}
    return StoreResults(**data, runs=runs)


def run_isolated(batches: int, rows: int, repeats: int, tmpdir: str | None = None) -> StoreResults:
    """:func:`run` in a process of its own (its SparkSession carries the S3A jars and settings; the other sections'
    session stays as users have it), with a moto server of its own."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "store.json")
        command = [sys.executable, "-m", "benchmarks.object_store_bench", "--batches", str(batches), "--rows", str(rows),
                   "--repeats", str(repeats), "--json", out]
        if tmpdir:
            command += ["--tmpdir", tmpdir]
        subprocess.run(command, check=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        with open(out, encoding="utf-8") as fh:
            return from_json(fh.read())


def section(results: StoreResults) -> str:
    lines = [
        "## Sink on an object store (moto S3): Spark's file sink through S3A vs ParquetSink",
        "",
        f"{results.batches} micro-batches x {results.rows_per_batch:,} rows (the sink section's input), local "
        "input, one moto S3 server on this host. Spark's sink: `writeStream.format(\"parquet\")` to `s3a://` "
        "(hadoop-aws 3.3.1, files in place, its log through S3A). ParquetSink: `foreachBatch(ParquetSink(\"s3://...\"))`"
        " (`ours`: `writer=\"spark\"`, Spark's writer in place through S3A; "
        "`arrow`: `writer=\"arrow\"`, pyarrow through s3fs, what `writer=\"auto\"` picks on a store). Repeats run the contenders back to back (order rotated); every run's rows read back.",
        "",
        "| contender | wall time | sink time / Spark's sink | CPU time / Spark's sink (moto's excluded) |",
        "|---|---|---|---|",
    ]
    for kind in ("spark", "ours", "arrow", "spark-part", "ours-part", "arrow-part"):
        if kind not in results.runs:
            continue
        ratio = "1.00x" if kind.startswith("spark") else results.ratio(kind).fmt("x").replace(" x", "x")
        cpu = "1.00x" if kind.startswith("spark") else results.ratio(kind, "cpu").fmt("x").replace(" x", "x")
        lines.append(f"| `{kind}` | {results.wall(kind).fmt()} | {ratio} | {cpu} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.object_store_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kinds", default="spark,ours,arrow,spark-part,ours-part,arrow-part")
    parser.add_argument("--tmpdir", help="where the input and checkpoints go (default: the system temp dir)")
    parser.add_argument("--json", help="also write the raw results there (what `benchmarks.run` reads)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-5s %(name)s: %(message)s")
    for noisy in ("py4j", "parquet_sink"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from tests.helpers.servers import moto_s3

    work = tempfile.mkdtemp(prefix="eo-bench-s3-", dir=args.tmpdir)
    try:
        with moto_s3() as server:
            results = run(server, work, args.batches, args.rows, args.repeats, tuple(args.kinds.split(",")))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            fh.write(to_json(results))
    print(section(results))


if __name__ == "__main__":
    main()
