"""Columnar copies of compact files: ``N.compact.parquet`` next to ``N.compact``.

A compact file holds every live entry of the log, so on a big output reading it is most of a reader's
planning time, and most of the next compaction's. When the log writes a compact file it also writes the
same entries, in the same order, as a small zstd Parquet file (the *side-car*; ~4 bytes per entry
against ~240 for the JSON line). Spark's log ignores it (``N.compact.parquet`` is not a batch file name)
and the JSON stays the source of truth:

* readers use the side-car only when its footer names the compact file and the compact file has the
  byte size it records; anything else (no side-car, damaged, stale) falls back to parsing the JSON;
* compaction plans from the side-car, then checks it against the CRC-32 of the compact file's bytes as it
  copies them: a mismatch aborts that attempt (nothing published) and the compaction runs from the JSON;
* ``exactly-once verify`` compares every side-car with its compact file entry by entry.

Example::

    >>> writer = SidecarWriter()
    >>> writer.write(entries_table([LogEntry("file:///o/part-0.parquet", 10, batch_id=9)]))
    >>> data = writer.finish("9.compact", size=120, crc=0x1234)
    >>> decode_sidecar(data, "9.compact").table.num_rows
    1
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from .sink_log import ENTRY_SCHEMA

logger = logging.getLogger(__name__)

SIDECAR_SUFFIX = ".parquet"
_SOURCE = "exactly_once.source"
_SIZE = "exactly_once.source_size"
_CRC = "exactly_once.source_crc32"
_ROW_GROUP = 1 << 17  # rows: readers decode a row group at a time, which bounds their transient memory


def sidecar_path(compact_path: str) -> str:
    """The side-car of a compact file. Example: ``sidecar_path("/o/_spark_metadata/9.compact")`` ->
    ``'/o/_spark_metadata/9.compact.parquet'``."""
    return compact_path + SIDECAR_SUFFIX


@dataclass(frozen=True)
class Sidecar:
    """A decoded side-car: the entries of ``source`` (a compact file name) and that file's size and CRC-32."""

    table: pa.Table
    source: str
    size: int
    crc: int


def decode_sidecar(data: bytes, source: str, columns: list[str] | None = None) -> Sidecar:
    """Decode side-car bytes (only ``columns`` of the entry columns, if given); ValueError if they are not
    a side-car of ``source`` (another compact file, another schema) and ``pa.ArrowException`` if they are
    not Parquet.

    Example: ``decode_sidecar(storage.read_bytes(path), "9.compact").size``.
    """
    parquet = pq.ParquetFile(pa.BufferReader(data))
    meta = {k.decode(): v.decode() for k, v in (parquet.metadata.metadata or {}).items()}
    if meta.get(_SOURCE) != source:
        raise ValueError(f"it describes {meta.get(_SOURCE)!r}, not {source!r}")
    if not parquet.schema_arrow.remove_metadata().equals(ENTRY_SCHEMA):
        raise ValueError("its columns are not the log's entry columns")
    return Sidecar(parquet.read(columns, use_threads=False), source, int(meta[_SIZE]), int(meta[_CRC]))


class SidecarWriter:
    """Streams entry tables (in log order) into the bytes of a side-car, encoding on a background thread
    (Parquet encoding releases the GIL, so it overlaps the compact file's copy); the output is compressed
    as it grows."""

    def __init__(self) -> None:
        self._sink = pa.BufferOutputStream()
        self._writer = pq.ParquetWriter(self._sink, ENTRY_SCHEMA, compression="zstd", use_dictionary=["action"])
        self._encoder = ThreadPoolExecutor(1, thread_name_prefix="sidecar")
        self._pending: list[Future[None]] = []

    def write(self, table: pa.Table) -> None:
        if table.num_rows:
            self._pending.append(self._encoder.submit(self._writer.write_table, table, _ROW_GROUP))

    def finish(self, source: str, size: int, crc: int) -> bytes:
        """The side-car's bytes, recording the compact file it copies (name, byte size, CRC-32)."""
        try:
            for future in self._pending:
                future.result()
        finally:
            self._encoder.shutdown()
        self._writer.add_key_value_metadata({_SOURCE: source, _SIZE: str(size), _CRC: str(crc)})
        self._writer.close()
        return self._sink.getvalue().to_pybytes()

    def discard(self) -> None:
        """Stop encoding (the compact file was not written)."""
        self._encoder.shutdown(cancel_futures=True)


class Checksum:
    """Size and CRC-32 of the chunks passed through :meth:`wrap`."""

    def __init__(self) -> None:
        self.size = 0
        self.crc = 0

    def update(self, chunk: bytes | memoryview) -> None:
        self.size += len(chunk)
        self.crc = zlib.crc32(chunk, self.crc)

    def wrap(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        for chunk in chunks:
            self.update(chunk)
            yield chunk


__all__ = ["SIDECAR_SUFFIX", "Checksum", "Sidecar", "SidecarWriter", "decode_sidecar", "sidecar_path"]
