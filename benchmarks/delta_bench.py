"""Section 6: the Delta log kept in step with ``_spark_metadata`` (``parquet_sink.delta``).

* Delta commit cost per batch: ``write_batch`` appends of ``rows`` rows over 4 partitions (4 files a batch),
  each followed by ``sync_delta_log`` (what ``delta_log=True`` runs after the commit), timed alone: p50 and p99
  in ms over all batches, with delta-rs's checkpoint every 10 versions included; ``write_batch`` itself is
  timed too, for scale.
* Reading the output back whole: ``DeltaTable(out).to_pyarrow_table()`` (delta-rs, from ``_delta_log``) against
  ``read_committed(out)`` (from ``_spark_metadata``), interleaved repeats.

* Per-batch sync against the table's size (:func:`run_scaling`): at 1,000 / 10,000 / 100,000 committed files,
  our per-batch sync against delta-rs's own one-row append to a copy of the same table, in one process.

No Spark: the output is built with ``write_batch`` (the scaling outputs with hard links logged as one batch).
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
SCALING_BATCHES = 20  # batches synced per table size in run_scaling (two compactions, two checkpoints)


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
        seconds, result = timed(lambda: sync_delta_log(out, check_files=False))  # as the writers hook runs it
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


@dataclass
class SyncScaling:
    """Per-batch Delta sync against the table's size (issue 35 item 7): for each size, the seconds of our
    per-batch sync (what ``delta_log=True`` runs: ``sync_delta_log(check_files=False)``) and of delta-rs's own
    one-row append to a copy of the same table (``write_deltalake``, by URI as a new writer would, and to a
    ``DeltaTable`` kept open), interleaved batch by batch in one process."""

    batches: int
    sizes: list[int]
    times: dict[tuple[str, int], Stat] = field(default_factory=dict)  # (who, size) -> seconds per batch


def _scaled_output(root: str, files: int) -> str:
    """An output of ``files`` committed files in 4 partitions (hard links to one tiny Parquet file, logged as
    batch 0 the way the sink logs them), and its Delta log created by a first sync."""
    from parquet_sink import MetadataLog
    from parquet_sink.log.entry import LogEntry
    import pyarrow.parquet as pq

    out = os.path.join(root, f"scale-{files}")
    templates = [os.path.join(root, f"template-{files}-{n}.parquet") for n in range(files // 30_000 + 1)]
    for template in templates:  # a file takes at most 65,000 hard links (the twin doubles them)
        pq.write_table(_batch(0, 1).drop(["k"]), template)
    size, now_ms = os.path.getsize(templates[0]), int(time.time() * 1000)
    entries = []
    for i in range(files):
        template = templates[i // 30_000]
        directory = os.path.join(out, f"k=p{i % PARTITIONS}")
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"part-{i:07d}-0f0e0d0c-0b0a-0908-0706-050403020100.c000.snappy.parquet")
        os.link(template, path)
        entries.append(LogEntry("file://" + path, size, False, now_ms))
    assert MetadataLog(out, compact_interval=10).add(0, entries)
    sync_delta_log(out)
    return out


def _twin(out: str) -> str:
    """A copy of ``out`` (data hard-linked, ``_delta_log`` copied) that delta-rs appends to: our sync refuses
    a Delta log another writer committed to, so the two do not share one."""
    import shutil

    twin = out + "-delta-rs"
    shutil.copytree(out, twin, copy_function=os.link, ignore=shutil.ignore_patterns("_delta_log"))
    shutil.copytree(os.path.join(out, "_delta_log"), os.path.join(twin, "_delta_log"))
    return twin


def run_scaling(work_dir: str, sizes: list[int], batches: int) -> SyncScaling:
    """See :class:`SyncScaling`. Each batch of ours is one file (a one-row table) logged as the next batch
    (a compaction every 10 batches, as the sink's default), then synced."""
    from deltalake import DeltaTable, write_deltalake
    from parquet_sink import MetadataLog
    from parquet_sink.log.entry import LogEntry
    import pyarrow.parquet as pq

    results = SyncScaling(batches, list(sizes))
    for files in sizes:
        out = _scaled_output(work_dir, files)
        twin = _twin(out)
        opened = DeltaTable(twin)
        log = MetadataLog(out, compact_interval=10)
        for batch in range(1, batches + 1):
            path = os.path.join(out, "k=p0", f"part-{files + batch:07d}-1f0e0d0c-0b0a-0908-0706-050403020100.c000.snappy.parquet")
            pq.write_table(_batch(batch, 1).drop(["k"]), path)
            assert log.add(batch, [LogEntry("file://" + path, os.path.getsize(path), False, int(time.time() * 1000))])
            row = _batch(files + batch, 1)
            runs = {
                "ours": lambda: sync_delta_log(out, check_files=False),
                "delta-rs": lambda: write_deltalake(twin, row, mode="append", partition_by=["k"]),
                "delta-rs open": lambda: write_deltalake(opened, row, mode="append", partition_by=["k"]),
            }
            order = list(runs) if batch % 2 else list(runs)[::-1]
            for who in order:
                seconds, result = timed(runs[who])
                if who == "ours" and not (result.committed and result.added == 1):
                    raise RuntimeError(f"sync of batch {batch} at {files} files: {result}")
                results.times.setdefault((who, files), Stat()).add(seconds)
        logger.info(
            "delta sync at %d files: ours %s, delta-rs append %s, open table %s", files,
            results.times[("ours", files)].fmt(), results.times[("delta-rs", files)].fmt(),
            results.times[("delta-rs open", files)].fmt(),
        )
    return results
