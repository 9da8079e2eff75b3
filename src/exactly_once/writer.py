"""The executor side of the sink: one Spark task writes its rows as Parquet files, straight to their
final names through the storage layer, and returns one status row per file.

Runs inside ``DataFrame.mapInArrow``: no rows go through the driver. File names follow Spark
(``part-<task:05d>-<uuid>.c<nnn>.<codec>.parquet``, under the root or Hive ``k=v/`` directories); the
uuid is per task attempt, so a retried or speculative attempt never overwrites another attempt's file.
Only the statuses of the attempt Spark accepted reach the driver, so a failed attempt's files are never
committed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .failpoints import failpoint
from .partitioning import partition_dir
from .storage import Storage

STATUS_SCHEMA = "path string, size long, modification_time long, num_rows long"
# Spark's Parquet codec names (ParquetOptions) that pyarrow can write, with the file-name extension
# parquet-mr gives each (CompressionCodecName.getExtension). Every key is also a pyarrow codec name.
_CODEC_EXT = {"none": "", "snappy": ".snappy", "gzip": ".gz", "brotli": ".br", "lz4_raw": ".lz4raw", "zstd": ".zstd"}
_CODEC_ALIASES = {"uncompressed": "none"}
_CODEC_REFUSED = {
    "lzo": "pyarrow cannot write LZO",
    "lz4": "Spark's 'lz4' is the Hadoop-framed LZ4 codec (.lz4hadoop files), which pyarrow cannot write; "
    "use 'lz4_raw' (the same LZ4 compression without Hadoop framing, read by Spark 3.4 and later)",
}
_FLUSH_BYTES = 64 * 1024 * 1024


def parquet_codec(compression: str) -> str:
    """The canonical name of a Parquet codec Spark accepts (case-insensitive, ``uncompressed`` is
    ``none``), which pyarrow writes too: ``"SNAPPY"`` -> ``"snappy"``. ValueError for a name Spark does
    not know or a codec pyarrow cannot write.

    Example: ``parquet_codec("uncompressed") == "none"``; ``parquet_codec("lzo")`` raises ValueError.
    """
    key = str(compression).lower()
    key = _CODEC_ALIASES.get(key, key)
    if key in _CODEC_REFUSED:
        raise ValueError(f"compression {compression!r} is not supported: {_CODEC_REFUSED[key]}.")
    if key not in _CODEC_EXT:
        names = sorted([*_CODEC_EXT, *_CODEC_ALIASES])
        raise ValueError(f"unknown Parquet compression {compression!r}; use one of {names}")
    return key


def codec_extension(compression: str) -> str:
    """Spark's file-name extension for a Parquet codec: ``snappy`` -> ``.snappy``, ``none`` -> ``""``;
    ValueError as :func:`parquet_codec`.

    Example: ``codec_extension("lz4_raw") == ".lz4raw"``.
    """
    return _CODEC_EXT[parquet_codec(compression)]


@dataclass(frozen=True)
class WriteSpec:
    """Everything a task needs to write its part of one batch (pickled to the executors)."""

    storage: Storage
    partition_by: tuple[str, ...]
    compression: str
    max_records_per_file: int | None


class _FileWriter:
    """Writes one partition directory's files for one task, rolling over at max_records_per_file."""

    def __init__(self, spec: WriteSpec, directory: str, task: int, token: str) -> None:
        self.spec, self.directory, self.task, self.token = spec, directory, task, token
        self.counter = 0
        self.writer: pq.ParquetWriter | None = None
        self.handle = None
        self.path = ""
        self.rows_in_file = 0
        self.pending: list[pa.RecordBatch] = []
        self.pending_bytes = 0
        self.finished: list[tuple[str, int]] = []  # (path, rows)

    def write(self, table: pa.Table) -> None:
        limit = self.spec.max_records_per_file
        offset = 0
        while offset < table.num_rows:
            if self.writer is None:
                self._open(table.schema)
            room = table.num_rows - offset if not limit else min(limit - self.rows_in_file, table.num_rows - offset)
            piece = table.slice(offset, room)
            self.pending.extend(piece.to_batches())
            self.pending_bytes += piece.nbytes
            self.rows_in_file += room
            offset += room
            if self.pending_bytes >= _FLUSH_BYTES:
                self._flush()
            if limit and self.rows_in_file >= limit:
                self.close()

    def _open(self, schema: pa.Schema) -> None:
        name = f"part-{self.task:05d}-{self.token}.c{self.counter:03d}{codec_extension(self.spec.compression)}.parquet"
        self.counter += 1
        self.path = self.spec.storage.join(self.directory, name) if self.directory else self.spec.storage.join(name)
        self.handle = self.spec.storage.open(self.path, "wb")
        self.writer = pq.ParquetWriter(self.handle, schema, compression=self.spec.compression)
        self.rows_in_file = 0

    def _flush(self) -> None:
        if self.pending and self.writer is not None:
            self.writer.write_table(pa.Table.from_batches(self.pending), row_group_size=1 << 30)
        self.pending, self.pending_bytes = [], 0

    def close(self) -> None:
        if self.writer is None:
            return
        self._flush()
        self.writer.close()
        self.handle.close()
        self.finished.append((self.path, self.rows_in_file))
        self.writer = self.handle = None


def _split(table: pa.Table, columns: tuple[str, ...]) -> Iterator[tuple[str, pa.Table]]:
    """(relative ``k=v`` directory, rows without the partition columns) per distinct partition value."""
    if not columns:
        yield "", table
        return
    ordered = table.take(pc.sort_indices(table, [(c, "ascending") for c in columns]))
    groups = ordered.group_by(list(columns), use_threads=False).aggregate([([], "count_all")])
    data = ordered.drop_columns(list(columns))
    keys = groups.select(list(columns)).to_pylist()
    offset = 0
    for key, count in zip(keys, groups.column("count_all").to_pylist()):
        yield partition_dir((c, key[c]) for c in columns), data.slice(offset, count)
        offset += count


def write_task(spec: WriteSpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function: write this task's rows, yield one status row per file written."""
    from pyspark import TaskContext

    context = TaskContext.get()
    task = context.partitionId() if context else 0
    token = str(uuid.uuid4())  # Spark's form: dashed uuid
    writers: dict[str, _FileWriter] = {}
    failpoint_armed = True
    for batch in batches:
        if batch.num_rows == 0:
            continue
        for directory, rows in _split(pa.Table.from_batches([batch]), spec.partition_by):
            writer = writers.get(directory)
            if writer is None:
                writer = writers[directory] = _FileWriter(spec, directory, task, token)
            writer.write(rows)
            if failpoint_armed and writer.finished:
                failpoint("task_write")
                failpoint_armed = False
    for writer in writers.values():
        writer.close()
    if failpoint_armed and writers:
        failpoint("task_write")
    statuses = {"path": [], "size": [], "modification_time": [], "num_rows": []}
    for writer in writers.values():
        for path, rows in writer.finished:
            info = spec.storage.info(path)
            statuses["path"].append(path)
            statuses["size"].append(info.size)
            statuses["modification_time"].append(info.mtime_ms)
            statuses["num_rows"].append(rows)
    yield pa.RecordBatch.from_pydict(
        statuses,
        schema=pa.schema(
            [("path", pa.string()), ("size", pa.int64()), ("modification_time", pa.int64()), ("num_rows", pa.int64())]
        ),
    )
