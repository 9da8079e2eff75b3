"""Synthesized commit histories: one output directory holding both logs over the same data files.

``build_history(root, batches, files_per_batch)`` makes, under ``root``:

* data files ``part-<k>-<hex>.c000.snappy.parquet`` straight under the root (real, tiny Parquet files:
  hard links to a few pooled copies of one small file, so a million of them cost no data blocks);
* ``_spark_metadata/`` as ParquetSink leaves it after ``batches`` commits: each delta is one commit
  record (the ``isDir`` entry Spark skips) plus its data files; a compact file keeps the data entries
  and, as compaction does (``records_to_keep``: one query, one run), only the first and the newest
  commit record; lines are made by the core's own ``LogEntry.to_json`` / ``CommitRecord.to_entry``. Written directly (not by ``MetadataLog.add``, which
  would take minutes for 100k batches): the two newest compact files (every 10 batches, like Spark;
  readers infer the interval from the two), the deltas between them and after the newest. Older files,
  which log cleanup keeps for up to 100 batches but no reader opens, are left out;
* ``_delta_log/`` as delta-rs leaves it after ``batches`` appends of the same files: one JSON commit per
  batch (delta keeps 30 days of them, so all are there), a checkpoint every 100 commits (delta-rs's
  default ``delta.checkpointInterval``; only the newest, the one readers use, is written) and
  ``_last_checkpoint``. The checkpoint schema and protocol/metadata rows are copied from a checkpoint
  delta-rs itself wrote for a tiny table, so the format is delta-rs's own.

Spark's ``spark.read.parquet(root)`` reads ``_spark_metadata`` (it ignores ``_delta_log``), ``DeltaTable``
reads ``_delta_log``, ``committed_files`` reads ``_spark_metadata``: three readers, one history.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
import shutil
import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from parquet_sink.log.metadata_log import METADATA_DIR, CommitRecord, LogEntry, MetadataLog
from parquet_sink.storage.filesystem import Storage

logger = logging.getLogger("benchmarks.synth")

LOG_INTERVAL = 10
DELTA_CHECKPOINT_INTERVAL = 100
_LINKS_PER_SOURCE = 60_000  # ext4 allows 65,000 hard links per inode
_BASE_MS = 1_767_225_600_000


@dataclass
class Template:
    """A small data file and what delta-rs writes for it."""

    pool_dir: str
    sources: list[str]
    size: int
    schema_string_rows: pa.Table  # protocol + metaData rows of a delta-rs checkpoint
    checkpoint_schema: pa.Schema
    commit0_header: list[str]  # protocol and metaData lines of delta-rs's first commit
    stats: str  # the add action's stats for the small file
    rows_per_file: int
    _next: int = 0

    def source(self) -> str:
        index = self._next // _LINKS_PER_SOURCE
        self._next += 1
        while index >= len(self.sources):
            extra = os.path.join(self.pool_dir, f"small-{len(self.sources)}.parquet")
            shutil.copyfile(self.sources[0], extra)
            self.sources.append(extra)
        return self.sources[index]


def make_template(work: str, small: pa.Table) -> Template:
    """Write the small data file and let delta-rs write a table (and a checkpoint) for it."""
    from deltalake import DeltaTable, write_deltalake

    pool = os.path.join(work, "pool")
    os.makedirs(pool, exist_ok=True)
    source = os.path.join(pool, "small-0.parquet")
    pq.write_table(small, source)
    table_dir = os.path.join(work, "delta-template")
    write_deltalake(table_dir, small, mode="append")
    write_deltalake(table_dir, small, mode="append")
    DeltaTable(table_dir).create_checkpoint()
    log_dir = os.path.join(table_dir, "_delta_log")
    lines = open(os.path.join(log_dir, f"{0:020d}.json")).read().splitlines()
    header = [line for line in lines if line.startswith(('{"protocol"', '{"metaData"'))]
    add = next(json.loads(line)["add"] for line in lines if line.startswith('{"add"'))
    checkpoint = pq.read_table(os.path.join(log_dir, f"{1:020d}.checkpoint.parquet"))
    non_add = checkpoint.filter(pa.compute.is_null(checkpoint.column("add")))
    shutil.rmtree(table_dir)
    return Template(
        pool,
        [source],
        os.path.getsize(source),
        non_add,
        checkpoint.schema,
        header,
        add["stats"],
        small.num_rows,
    )


@dataclass
class History:
    root: str
    batches: int
    files_per_batch: int
    entries: int  # data file entries
    log_bytes: int  # bytes of the _spark_metadata JSON files a reader of the latest snapshot needs
    sidecar_bytes: int  # bytes of the newest compact file's columnar copy, which readers open instead of its JSON
    spark_log_bytes: int  # the same for Spark's own sink on the same stream (its seven keys, no records)
    delta_log_files: int
    build_seconds: float


def _names(batch: int, files: int, rng: random.Random) -> list[str]:
    token = f"{rng.getrandbits(128):032x}"
    return [f"part-{k:05d}-{token}.c000.snappy.parquet" for k in range(files)]


def build_history(root: str, batches: int, files_per_batch: int, template: Template, seed: int = 1) -> History:
    started = time.monotonic()
    rng = random.Random(seed)
    os.makedirs(os.path.join(root, METADATA_DIR), exist_ok=True)
    os.makedirs(os.path.join(root, "_delta_log"), exist_ok=True)
    storage = Storage(root)
    uri_prefix = storage.to_uri(storage.join("x"))[: -len("x")]
    latest = batches - 1
    newest_compact = (latest + 1) // LOG_INTERVAL * LOG_INTERVAL - 1
    checkpoint_version = latest // DELTA_CHECKPOINT_INTERVAL * DELTA_CHECKPOINT_INTERVAL
    meta_dir = os.path.join(root, METADATA_DIR)
    delta_dir = os.path.join(root, "_delta_log")
    previous_compact = newest_compact - LOG_INTERVAL
    compacts = {
        c: open(os.path.join(meta_dir, f"{c}.compact"), "w", encoding="utf-8")
        for c in (previous_compact, newest_compact)
        if c >= 0
    }
    for fh in compacts.values():
        fh.write("v1")
    checkpoint_paths: list[str] = []
    checkpoint_mtimes: list[int] = []
    log_bytes = spark_log_bytes = 0
    size = template.size
    query_id = "00000000-0000-4000-8000-000000000001"
    stats = json.dumps(template.stats)
    for batch in range(batches):
        names = _names(batch, files_per_batch, rng)
        mtime = _BASE_MS + batch * 1000
        for name in names:
            os.link(template.source(), os.path.join(root, name))
        # _spark_metadata lines, exactly as ParquetSink commits them: the commit record on the first data
        # entry; deltas without batchId (the file name says it), compact files with it
        record = CommitRecord(batch, query_id, batch, f"{rng.getrandbits(64):016x}")
        data = [LogEntry(uri_prefix + n, size, False, mtime, batch_id=batch) for n in names]
        recorded = record.log_entries(storage, mtime, data)
        data_text = "".join("\n" + e.to_json() for e in data)
        compact_text = "".join("\n" + e.to_json() for e in recorded)
        text = "".join("\n" + dataclasses.replace(e, batch_id=None).to_json() for e in recorded)
        spark_text = "".join("\n" + LogEntry(e.path, size, False, mtime).to_json() for e in data)
        for compact_id, fh in compacts.items():
            if batch <= compact_id:
                fh.write(compact_text if batch in (0, compact_id) else data_text)
                if batch == compact_id:
                    fh.close()
        if batch <= newest_compact:
            spark_log_bytes += len(spark_text.encode()) + (2 if batch == 0 else 0)
        else:
            spark_log_bytes += len(spark_text.encode()) + 2
        if batch == newest_compact:
            log_bytes += os.path.getsize(os.path.join(meta_dir, f"{batch}.compact"))
        elif batch > previous_compact and batch % LOG_INTERVAL != LOG_INTERVAL - 1:
            # deltas after the second newest compact (log cleanup keeps more; no reader opens them)
            with open(os.path.join(meta_dir, str(batch)), "w", encoding="utf-8") as fh:
                fh.write("v1" + text)
            if batch > newest_compact:
                log_bytes += len(text.encode()) + 2
        # _delta_log commit, as delta-rs writes an append
        lines = [
            '{"commitInfo":{"timestamp":%d,"operation":"WRITE","operationParameters":{"mode":"Append"},'
            '"engineInfo":"delta-rs:py-1.6.6","clientVersion":"delta-rs.py-1.6.6","operationMetrics":'
            '{"num_added_files":%d,"num_removed_files":0,"num_partitions":0,"num_added_rows":%d,'
            '"execution_time_ms":1,"num_retries":0}}}' % (mtime, len(names), len(names) * template.rows_per_file)
        ]
        if batch == 0:
            lines += template.commit0_header
        lines += [
            '{"add":{"path":"%s","partitionValues":{},"size":%d,"modificationTime":%d,"dataChange":true,'
            '"stats":%s,"tags":null,"baseRowId":null,"defaultRowCommitVersion":null,"clusteringProvider":null}}'
            % (n, size, mtime, stats)
            for n in names
        ]
        with open(os.path.join(delta_dir, f"{batch:020d}.json"), "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
        if batch <= checkpoint_version:
            checkpoint_paths += names
            checkpoint_mtimes += [mtime] * len(names)
    for fh in compacts.values():
        fh.close()
    sidecar_bytes = 0
    for compact_id in compacts:  # the columnar copies compaction writes next to each compact file
        copy = MetadataLog(root, cleanup=False).write_columnar_copy(compact_id)
        if compact_id == newest_compact:
            sidecar_bytes = os.path.getsize(copy)
    if checkpoint_version > 0:
        _write_checkpoint(delta_dir, checkpoint_version, checkpoint_paths, checkpoint_mtimes, template)
    history = History(
        root,
        batches,
        files_per_batch,
        batches * files_per_batch,
        log_bytes,
        sidecar_bytes,
        spark_log_bytes,
        batches + (1 if checkpoint_version > 0 else 0),
        time.monotonic() - started,
    )
    logger.info(
        "history %s: %d batches x %d files (%d entries), %.1f MB of log to read, built in %.1fs",
        root, batches, files_per_batch, history.entries, log_bytes / 1e6, history.build_seconds,
    )
    return history


def _filled(n: int, typ: pa.DataType) -> pa.Array:
    """A non-null array of placeholder values (children of a null struct must still be valid)."""
    if pa.types.is_struct(typ):
        return _null_struct(n, typ, null=False)
    if pa.types.is_map(typ) or pa.types.is_list(typ):
        return pa.array([[]] * n, typ)
    if pa.types.is_string(typ):
        return pa.array([""] * n, typ)
    if pa.types.is_boolean(typ):
        return pa.array([False] * n, typ)
    return pa.array([0] * n, typ)


def _null_struct(n: int, typ: pa.DataType, null: bool = True) -> pa.Array:
    """n struct values, all null (or all present with placeholder children), valid for Parquet."""
    children = [pa.nulls(n, f.type) if f.nullable and not pa.types.is_struct(f.type) else _filled(n, f.type) for f in typ]
    mask = pa.array([True] * n) if null else None
    return pa.StructArray.from_arrays(children, fields=list(typ), mask=mask)


def _write_checkpoint(delta_dir: str, version: int, paths: list[str], mtimes: list[int], template: Template) -> None:
    schema = template.checkpoint_schema
    add_type = schema.field("add").type
    n = len(paths)
    children = []
    for child in add_type:
        name = child.name
        if name == "path":
            arr = pa.array(paths, child.type)
        elif name == "partitionValues":
            arr = pa.array([[]] * n, child.type)
        elif name == "size":
            arr = pa.array([template.size] * n, child.type)
        elif name == "modificationTime":
            arr = pa.array(mtimes, child.type)
        elif name == "dataChange":
            arr = pa.array([True] * n, child.type)
        elif name == "stats":
            arr = pa.array([template.stats] * n, child.type)
        elif pa.types.is_struct(child.type):
            arr = _null_struct(n, child.type)
        else:
            arr = pa.nulls(n, child.type)
        children.append(arr)
    adds = pa.StructArray.from_arrays(children, fields=list(add_type))
    columns = [adds if f.name == "add" else _null_struct(n, f.type) for f in schema]
    table = pa.concat_tables([template.schema_string_rows, pa.Table.from_arrays(columns, schema=schema)])
    path = os.path.join(delta_dir, f"{version:020d}.checkpoint.parquet")
    pq.write_table(table, path)
    with open(os.path.join(delta_dir, "_last_checkpoint"), "w") as fh:
        json.dump(
            {"version": version, "size": table.num_rows, "sizeInBytes": os.path.getsize(path), "numOfAddFiles": n},
            fh,
            separators=(",", ":"),
        )
