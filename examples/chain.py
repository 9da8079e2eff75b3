"""A chained pandas job, exactly once without Spark: read the new committed batches of an upstream output,
aggregate them with pandas, and append the result with ``write_batch(..., version=source_batch_id)``.

Run: ``python -m examples.chain [--workdir DIR]``. The upstream here is written by ``write_batch`` too; a
``ParquetSink`` streaming query's output works the same. The job runs three times: the first run takes
batches 0..2, the second finds nothing new, and after two more upstream batches the third takes 3..4. A job
killed anywhere in between and rerun does the same (``tests/crash/test_chain_crash.py`` proves it by SIGKILL).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

import pandas as pd

from parquet_sink import committed_version, iter_batches, read_committed, write_batch

APP_ID = "orders-by-region"


def upstream(source: str, batch: int) -> None:
    """The upstream producer: 100 orders per batch."""
    orders = pd.DataFrame(
        {
            "order_id": range(batch * 100, batch * 100 + 100),
            "region": [("north", "south", "east")[i % 3] for i in range(100)],
            "amount": [float(i % 17) for i in range(100)],
        }
    )
    write_batch(source, orders, app_id="orders-ingest", version=batch)


def run_job(source: str, output: str) -> list[int]:
    """The downstream job: the whole exactly-once logic is the version passed to write_batch. Returns the
    source batches it committed."""
    done = committed_version(output, APP_ID)  # None on the first run
    committed = []
    for batch_id, table in iter_batches(source, after=done):
        orders = table.to_pandas()
        totals = orders.groupby("region", as_index=False).agg(orders=("order_id", "count"), amount=("amount", "sum"))
        totals["source_batch"] = batch_id
        result = write_batch(output, totals, app_id=APP_ID, version=batch_id, partition_by=["region"])
        if result.committed:
            committed.append(batch_id)
    return committed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", help="where to put the two outputs (default: a temporary directory)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="parquet-sink-chain-"))
    source, output = str(workdir / "orders"), str(workdir / "orders_by_region")

    for batch in range(3):
        upstream(source, batch)
    print("first run committed source batches", run_job(source, output))
    print("second run committed source batches", run_job(source, output), "(nothing new)")
    for batch in range(3, 5):
        upstream(source, batch)
    print("third run committed source batches", run_job(source, output))

    totals = read_committed(output).to_pandas()
    per_batch = totals.groupby("source_batch")["orders"].sum()
    assert (per_batch == 100).all() and sorted(per_batch.index) == list(range(5)), per_batch
    print(f"every order counted once: {int(totals['orders'].sum())} orders over {len(per_batch)} source batches")
    print(f"committed version of {APP_ID}: {committed_version(output, APP_ID)}; see `parquet-sink ls {output}`")


if __name__ == "__main__":
    main()
