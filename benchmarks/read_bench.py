"""Section 5: end-to-end read of the same data, written in section 1 by each system.

* to a ``pyarrow.Table`` (the same form for all three):
  ``read_committed(ours_out)`` | ``spark.read.parquet(spark_out).toArrow()`` |
  ``DeltaTable(delta_out).to_pyarrow_table()``;
* row count only (Spark answers from Parquet footers, ours and delta-rs from the row counts their logs record):
  ``count_committed(ours_out)`` | ``spark.read.parquet(spark_out).count()`` |
  ``DeltaTable(delta_out).to_pyarrow_dataset().count_rows()``.

Each reader is warmed up on one file first; repeats are interleaved with a rotating order.
"""

from __future__ import annotations

import gc
import logging
import os
from dataclasses import dataclass, field

from parquet_sink import count_committed, read_committed

from .common import Stat, timed

logger = logging.getLogger("benchmarks.read")

READERS = ("ours", "spark", "delta-rs")
MODES = ("table", "count")


@dataclass
class ReadResults:
    rows: int = 0
    times: dict[tuple[str, str], Stat] = field(default_factory=dict)  # (reader, mode)


def read(reader: str, mode: str, path: str, spark) -> int:
    if reader == "ours":
        if mode == "table":
            return read_committed(path).num_rows
        return count_committed(path)
    if reader == "spark":
        df = spark.read.parquet(path)
        return df.toArrow().num_rows if mode == "table" else df.count()
    from deltalake import DeltaTable

    table = DeltaTable(path)
    return table.to_pyarrow_table().num_rows if mode == "table" else table.to_pyarrow_dataset().count_rows()


def run(spark, outputs: dict[str, str], expected_rows: int, repeats: int) -> ReadResults:
    paths = {"ours": outputs["ours"], "spark": outputs["spark"], "delta-rs": outputs["delta-rs"]}
    results = ReadResults(rows=expected_rows)
    # warm-up on one data file each (JIT, Arrow collection path), untimed
    one = next(os.path.join(paths["spark"], n) for n in sorted(os.listdir(paths["spark"])) if n.endswith(".parquet"))
    spark.read.parquet(one).toArrow()
    spark.read.parquet(one).count()
    read("ours", "count", paths["ours"], spark)
    read("delta-rs", "count", paths["delta-rs"], spark)
    for rep in range(repeats):
        order = list(READERS[rep % 3 :] + READERS[: rep % 3])
        for mode in MODES:
            for reader in order:
                seconds, rows = timed(lambda: read(reader, mode, paths[reader], spark))
                gc.collect()
                if rows != expected_rows:
                    raise RuntimeError(f"{reader} read {rows} rows ({mode}), expected {expected_rows}")
                results.times.setdefault((reader, mode), Stat()).add(seconds)
                logger.info("read %-8s %-5s %d rows: %.3fs", reader, mode, rows, seconds)
    return results
