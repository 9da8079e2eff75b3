"""Section 6: the Delta log kept in step with ``_spark_metadata`` (``parquet_sink.delta``).

* Delta commit cost per batch: ``write_batch`` appends of ``rows`` rows over 4 partitions (4 files a batch),
  each followed by ``sync_delta_log`` (what ``delta_log=True`` runs after the commit), timed alone: p50 and p99
  in ms over all batches, with delta-rs's checkpoint every 10 versions included; ``write_batch`` itself is
  timed too, for scale.
* Reading the output back whole: ``DeltaTable(out).to_pyarrow_table()`` (delta-rs, from ``_delta_log``) against
  ``read_committed(out)`` (from ``_spark_metadata``), interleaved repeats.

No Spark: the output is built with ``write_batch``.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field

import pyarrow as pa

from parquet_sink import read_committed, sync_delta_log, write_batch

from .common import Stat, percentile, timed

logger = logging.getLogger("benchmarks.delta")

PARTITIONS = 4


@dataclass
class DeltaResults:
    batches: int
    rows_per_batch: int
    commit_ms: list[float] = field(default_factory=list)  # sync_delta_log per batch
    write_ms: list[float] = field(default_factory=list)  # write_batch per batch, for scale
    read: dict[str, Stat] = field(default_factory=dict)  # "delta-rs" / "ours": whole-table read
    rows: int = 0
    delta_log_files: int = 0


def _batch(version: int, rows: int) -> pa.Table:
    ids = pa.array(range(version * rows, (version + 1) * rows), pa.int64())
    return pa.table({"id": ids, "v": pa.array([i * 0.5 for i in range(rows)]), "k": [f"p{i % PARTITIONS}" for i in range(rows)]})


def run(work_dir: str, batches: int, rows: int, repeats: int) -> DeltaResults:
    out = os.path.join(work_dir, "delta-out")
    results = DeltaResults(batches, rows)
    for version in range(batches):
        started = time.perf_counter()
        write_batch(out, _batch(version, rows), app_id="bench", version=version, partition_by=["k"])
        results.write_ms.append((time.perf_counter() - started) * 1000)
        seconds, result = timed(lambda: sync_delta_log(out))
        assert result.committed and result.added == PARTITIONS, result
        results.commit_ms.append(seconds * 1000)
    results.rows = batches * rows
    results.delta_log_files = len(os.listdir(os.path.join(out, "_delta_log")))
    from deltalake import DeltaTable

    readers = {"delta-rs": lambda: DeltaTable(out).to_pyarrow_table().num_rows, "ours": lambda: read_committed(out).num_rows}
    for reader in readers.values():
        reader()  # warm-up
    for rep in range(repeats):
        for name in (list(readers) if rep % 2 == 0 else list(readers)[::-1]):
            seconds, found = timed(readers[name])
            if found != results.rows:
                raise RuntimeError(f"{name} read {found} rows, expected {results.rows}")
            results.read.setdefault(name, Stat()).add(seconds)
    logger.info(
        "delta: commit p50 %.1f ms p99 %.1f ms over %d batches; read delta-rs %s, ours %s",
        percentile(results.commit_ms, 50), percentile(results.commit_ms, 99), batches,
        results.read["delta-rs"].fmt(), results.read["ours"].fmt(),
    )
    return results
