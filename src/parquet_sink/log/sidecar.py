"""Columnar copies of compact files: ``N.compact.columnar`` (a Parquet file) next to ``N.compact``.

A compact file holds every live entry of the log, so on a big output reading it is most of a reader's
planning time, and most of the next compaction's. When the log writes a compact file it also writes the
same entries, in the same order, as a small LZ4 Parquet file (the *side-car*; ~10 bytes per entry
against ~240 for the JSON line). Spark's log ignores it (``N.compact.columnar`` is not a batch file name)
and the JSON stays the source of truth:

* readers use the side-car only when its footer names the compact file and the compact file has the
  byte size it records (and a ``v1`` header), and every data page's CRC-32 verifies; anything else (no
  side-car, damaged, stale) falls back to parsing the JSON;
* compaction plans from the side-car, then checks it against the CRC-32 of the compact file's bytes as it
  copies them: a mismatch aborts that attempt (nothing published) and the compaction runs from the JSON;
* ``parquet-sink verify`` compares every side-car with its compact file entry by entry.

Example::

    >>> writer = SidecarWriter()
    >>> writer.write(entries_table([LogEntry("file:///o/part-0.parquet", 10, batch_id=9)]))
    >>> data = writer.finish("9.compact", size=120, crc=0x1234)
    >>> decode_sidecar(data, "9.compact").table().num_rows
    1
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from zlib_ng import zlib_ng

from .entry import BATCH_ROWS_KEY, COMMIT_TIME_KEY, ENTRY_SCHEMA, STATS_KEY

logger = logging.getLogger(__name__)

# Not ".parquet": a glob over the output (duckdb's read_parquet('out/**/*.parquet'), polars' scan_parquet) would
# read the copies as data. Copies written under the old suffix are still read, and deleted with their compact file.
SIDECAR_SUFFIX = ".columnar"
OLD_SIDECAR_SUFFIX = ".parquet"
_SOURCE = "exactly_once.source"
_SIZE = "exactly_once.source_size"
_CRC = "exactly_once.source_crc32"
_DELTA_ENCODED = {"size": "DELTA_BINARY_PACKED", "modificationTime": "DELTA_BINARY_PACKED"}
_ROW_GROUP = 1 << 17  # rows: readers decode a row group at a time, which bounds their transient memory
_INLINE_ROWS = 1 << 14  # rows a copy encodes on the caller's thread before it starts its encoder thread (~2 ms)
# Every data page carries a CRC-32 that readers verify: a damaged copy fails to decode, it never decodes wrong.
_FORMAT = ds.ParquetFileFormat(
    default_fragment_scan_options=ds.ParquetFragmentScanOptions(page_checksum_verification=True)
)


# The entry columns of a copy written before entries carried their file's statistics, and before commit records
# carried the batch's figures (commit time, rows): read with those columns null.
_BEFORE_STATS = pa.schema([f for f in ENTRY_SCHEMA if f.name != STATS_KEY])
_BEFORE_FIGURES = pa.schema([f for f in _BEFORE_STATS if f.name not in (COMMIT_TIME_KEY, BATCH_ROWS_KEY)])


def sidecar_path(compact_path: str) -> str:
    """The side-car of a compact file. Example: ``sidecar_path("/o/_spark_metadata/9.compact")`` ->
    ``'/o/_spark_metadata/9.compact.columnar'``."""
    return compact_path + SIDECAR_SUFFIX


@dataclass(frozen=True)
class Sidecar:
    """A side-car's bytes, checked to describe ``source`` (a compact file name) with the log's entry
    columns, and that file's size and CRC-32; decoded on demand."""

    data: bytes | pa.Buffer  # a copy just encoded stays in Arrow's buffer (tens of MB: not copied to write it)
    source: str
    size: int
    crc: int
    stored: tuple[str, ...] = tuple(ENTRY_SCHEMA.names)  # a copy written before the figures or stats lacks them

    @functools.cached_property
    def rows(self) -> int:
        """How many entries the copy holds (from its footer)."""
        return pq.read_metadata(pa.BufferReader(self.data)).num_rows

    def table(self, columns: list[str] | None = None) -> pa.Table:
        """Every entry (only ``columns``, if given), decoded one row group at a time into
        :func:`columns_pool`."""
        fragment = _FORMAT.make_fragment(pa.BufferReader(self.data))
        wanted = columns or ENTRY_SCHEMA.names
        table = fragment.to_table(columns=self._stored(wanted), use_threads=False, memory_pool=columns_pool())
        return self._completed(table.replace_schema_metadata(None), wanted)

    def _stored(self, columns: list[str]) -> list[str]:
        return [c for c in columns if c in self.stored]

    def _completed(self, table: pa.Table, columns: list[str]) -> pa.Table:
        """``table`` with the ``columns`` this copy does not store, as nulls, in the order asked."""
        if table.num_columns == len(columns):
            return table
        arrays = [table.column(c) if c in self.stored else pa.nulls(table.num_rows, ENTRY_SCHEMA.field(c).type) for c in columns]
        return pa.table(arrays, schema=pa.schema([ENTRY_SCHEMA.field(c) for c in columns]))

    def groups(self, columns: list[str] | None = None) -> Iterator[tuple[int, pa.Table]]:
        """(row of the first entry, entries) of each row group (only ``columns``, if given): bounded memory
        for a caller that streams."""
        parquet = pq.ParquetFile(pa.BufferReader(self.data), page_checksum_verification=True)
        offset = 0
        wanted = columns or ENTRY_SCHEMA.names
        for index in range(parquet.num_row_groups):
            group = parquet.read_row_group(index, self._stored(wanted), use_threads=False).replace_schema_metadata(None)
            yield offset, self._completed(group, wanted)
            offset += group.num_rows


def decode_sidecar(data: bytes | pa.Buffer, source: str) -> Sidecar:
    """Check side-car bytes: ValueError if they are not a side-car of ``source`` (another compact file,
    another schema), ``pa.ArrowException`` if they are not Parquet.

    Example: ``decode_sidecar(storage.read_bytes(path), "9.compact").table().num_rows``.
    """
    meta_data = pq.ParquetFile(pa.BufferReader(data)).metadata
    meta = {k.decode(): v.decode() for k, v in (meta_data.metadata or {}).items()}
    if meta.get(_SOURCE) != source:
        raise ValueError(f"it describes {meta.get(_SOURCE)!r}, not {source!r}")
    schema = meta_data.schema.to_arrow_schema().remove_metadata()
    if not any(schema.equals(known) for known in (ENTRY_SCHEMA, _BEFORE_STATS, _BEFORE_FIGURES)):
        raise ValueError("its columns are not the log's entry columns")
    return Sidecar(data, source, int(meta[_SIZE]), int(meta[_CRC]), tuple(schema.names))


@functools.cache
def columns_pool() -> pa.MemoryPool:
    """The memory pool for the big columns of a snapshot (a decoded copy, resolved paths): jemalloc where
    pyarrow has it. With pyarrow's default mimalloc pool, decoding 1M entries leaves ~70 MB more resident
    memory behind than the table holds (measured: 219 vs 146 MB of RSS for a 128 MB table)."""
    try:
        return pa.jemalloc_memory_pool()
    except NotImplementedError:  # a pyarrow built without jemalloc
        return pa.system_memory_pool()


_POOL_LOCK = threading.Lock()
_POOL_USERS = 0
_POOL_BEFORE: pa.MemoryPool | None = None


@contextlib.contextmanager
def log_memory_pool() -> Iterator[None]:
    """:func:`columns_pool` as pyarrow's default pool while the log parses or compacts a big file (uses on
    several threads share one switch: the previous default comes back when the last one ends). Compacting
    1M entries with mimalloc's pool spends ~0.9 s in the kernel zeroing fresh pages for every block, ~0.35 s
    with jemalloc's, which reuses them (1.25 s -> 0.9 s in all, and ~40% less peak memory).

    Example: ``with log_memory_pool(): table = files.read_table(path, 99)``.
    """
    global _POOL_USERS, _POOL_BEFORE
    with _POOL_LOCK:
        if _POOL_USERS == 0:
            _POOL_BEFORE = pa.default_memory_pool()
            pa.set_memory_pool(columns_pool())
        _POOL_USERS += 1
    try:
        yield
    finally:
        with _POOL_LOCK:
            _POOL_USERS -= 1
            if _POOL_USERS == 0 and _POOL_BEFORE is not None:
                pa.set_memory_pool(_POOL_BEFORE)
                _POOL_BEFORE = None


class SidecarWriter:
    """Streams entry tables (in log order) into the bytes of a side-car, encoding on a background thread
    (Parquet encoding releases the GIL, so it overlaps the compact file's copy); the output is compressed
    as it grows. The first :data:`_INLINE_ROWS` rows are encoded on the caller's thread: a small log's
    compaction (a stream's every tenth batch) starts no thread, whose start and hand-offs cost more than
    the encoding. Encoding errors surface in :meth:`finish` either way."""

    def __init__(self) -> None:
        self._sink = pa.BufferOutputStream()
        # no statistics: nothing filters a copy by them, and a path column's min and max cost ~15% of the encoding.
        # LZ4, with sizes and times delta-encoded: 1M entries encode in ~0.12 s of CPU and decode in ~0.05 s into
        # ~10 MB, against zstd's 0.21 s, 0.12 s and 5 MB (the encoding runs beside the parse, on two cores).
        self._writer = pq.ParquetWriter(
            self._sink, ENTRY_SCHEMA, compression="lz4", use_dictionary=["action"], write_page_checksum=True,
            write_statistics=False, column_encoding=_DELTA_ENCODED,
        )
        self._encoder: ThreadPoolExecutor | None = None  # started once the copy outgrows _INLINE_ROWS
        self._inline_rows = 0  # rows encoded on the caller's thread
        self._pending: list[Future[None]] = []
        self._buffered: list[pa.Table] = []  # the encoder's tables not yet in a row group
        self._rows = 0

    def _submit(self, rows: int, work: Callable[..., None], *args: object) -> Future[None]:
        """Run ``work(*args)`` (``rows`` more rows) on the caller's thread while the copy is small, else on the
        encoder thread; its outcome as a future."""
        if self._encoder is None and self._inline_rows + rows <= _INLINE_ROWS:
            self._inline_rows += rows
            done: Future[None] = Future()
            try:
                work(*args)
                done.set_result(None)
            except Exception as exc:  # kept for finish, as the encoder thread keeps it
                done.set_exception(exc)
            return done
        if self._encoder is None:
            self._encoder = ThreadPoolExecutor(1, thread_name_prefix="sidecar")
        return self._encoder.submit(work, *args)

    def write(self, table: pa.Table) -> None:
        if table.num_rows:
            if len(self._pending) >= 2:  # bounded: at most two tables wait for the encoder
                self._pending.pop(0).result()
            self._pending.append(self._submit(table.num_rows, self._append, table))

    def write_all(self, tables: Callable[[], Iterable[pa.Table]], rows: int) -> None:
        """Write every table ``tables()`` yields (``rows`` rows in all), produced on the encoder thread too (so
        decoding a big source overlaps the caller's work); its errors surface in :meth:`finish`."""
        def produce() -> None:
            for table in tables():
                self._append(table)

        self._pending.append(self._submit(rows, produce))

    def _append(self, table: pa.Table) -> None:
        """On the encoder thread: tables gathered into row groups of :data:`_ROW_GROUP` rows, whatever
        the size of the tables written (blocks of a few thousand lines, a source of millions)."""
        self._buffered.append(table)
        self._rows += table.num_rows
        if self._rows >= _ROW_GROUP:
            whole = pa.concat_tables(self._buffered)
            full = self._rows - self._rows % _ROW_GROUP
            self._writer.write_table(whole.slice(0, full), _ROW_GROUP)
            rest = whole.slice(full)
            self._buffered, self._rows = [rest], rest.num_rows

    def _flush(self) -> None:
        if self._rows:
            self._writer.write_table(pa.concat_tables(self._buffered), _ROW_GROUP)
        self._buffered, self._rows = [], 0

    def finish(self, source: str, size: int, crc: int) -> pa.Buffer:
        """The side-car's bytes, recording the compact file it copies (name, byte size, CRC-32)."""
        try:
            for future in self._pending:
                future.result()
            if self._encoder is None:
                self._flush()
            else:
                self._encoder.submit(self._flush).result()
        finally:
            self.discard()
        self._writer.add_key_value_metadata({_SOURCE: source, _SIZE: str(size), _CRC: str(crc)})
        self._writer.close()
        return self._sink.getvalue()

    def finish_copy(self, source: str, checksum: Checksum) -> Sidecar:
        """:meth:`finish`, as the side-car of ``source`` whose bytes ``checksum`` saw."""
        return Sidecar(self.finish(source, checksum.size, checksum.crc), source, checksum.size, checksum.crc)

    def discard(self) -> None:
        """Stop encoding (the compact file was not written, or the copy is finished)."""
        if self._encoder is not None:
            self._encoder.shutdown(cancel_futures=True)


class Checksum:
    """Size and CRC-32 (zlib's) of the chunks passed through :meth:`wrap`, computed by zlib-ng: the log's
    compaction checksums every byte it reads and writes, at ~3 GB/s with zlib, ~30 GB/s with zlib-ng."""

    def __init__(self) -> None:
        self.size = 0
        self.crc = 0

    def update(self, chunk: bytes | memoryview) -> None:
        self.size += len(chunk)
        self.crc = zlib_ng.crc32(chunk, self.crc)

    def wrap(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        for chunk in chunks:
            self.update(chunk)
            yield chunk


__all__ = [
    "OLD_SIDECAR_SUFFIX",
    "SIDECAR_SUFFIX",
    "Checksum",
    "Sidecar",
    "SidecarWriter",
    "decode_sidecar",
    "sidecar_path",
    "columns_pool",
    "log_memory_pool",
]
