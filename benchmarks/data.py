"""The benchmark input: N Parquet files of R rows and 10 columns, one file per micro-batch.

Both sinks read the very same files through ``spark.readStream.parquet(dir)`` with
``maxFilesPerTrigger=1``, so every micro-batch is one input file. Columns mix the usual event-table
types: 64-bit ids, a timestamp, doubles, a 32-bit int, a boolean and two strings (one low-cardinality).
"""

from __future__ import annotations

import logging
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

logger = logging.getLogger("benchmarks.data")

COUNTRIES = np.array(
    ["US", "DE", "FR", "GB", "JP", "BR", "IN", "CN", "CA", "AU", "ES", "IT", "NL", "SE", "PL", "MX"], dtype=object
)
BASE_TS_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z


def make_batch(batch: int, rows: int, seed: int = 7) -> pa.Table:
    """Deterministic rows of batch ``batch`` (ids continue across batches)."""
    rng = np.random.default_rng(seed + batch)
    first = batch * rows
    ids = np.arange(first, first + rows, dtype=np.int64)
    sessions = rng.integers(0, 2**48, rows, dtype=np.int64)
    table = pa.table(
        {
            "id": ids,
            "event_time": pa.array(BASE_TS_US + ids * 1000, pa.timestamp("us")),
            "user_id": rng.integers(0, 5_000_000, rows, dtype=np.int64),
            "amount": rng.random(rows) * 1000.0,
            "price": np.round(rng.random(rows) * 100.0, 2),
            "quantity": rng.integers(1, 100, rows, dtype=np.int32),
            "score": rng.standard_normal(rows),
            "is_mobile": rng.random(rows) < 0.4,
            "country": pa.array(COUNTRIES[rng.integers(0, len(COUNTRIES), rows)], pa.string()),
            "session": pc.cast(pa.array(sessions), pa.string()),
        }
    )
    return table


def generate_input(directory: str, batches: int, rows: int, row_groups: int = 4) -> list[str]:
    """Write ``batches`` input files (``row_groups`` row groups each so Spark splits a file into tasks).

    File names sort in batch order; modification times increase so the file source takes them in order.
    """
    os.makedirs(directory, exist_ok=True)
    paths = []
    for batch in range(batches):
        path = os.path.join(directory, f"input-{batch:05d}.parquet")
        pq.write_table(make_batch(batch, rows), path, row_group_size=max(1, -(-rows // row_groups)))
        stamp = 1_700_000_000 + batch
        os.utime(path, (stamp, stamp))
        paths.append(path)
    total = sum(os.path.getsize(p) for p in paths)
    logger.info("input: %d files x %d rows, %.1f MB", batches, rows, total / 1e6)
    return paths
