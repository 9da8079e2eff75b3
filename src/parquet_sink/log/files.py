"""The versioned log files under ``_spark_metadata`` (Spark's ``HDFSMetadataLog``): naming, listing,
reading one file (as Arrow columns, or as entries) and atomic creation.

File format: ``v1`` then one ``\\n{json}`` line per entry, no trailing newline. Batch ``N`` is the file
``N``, or ``N.compact`` for a compaction batch. Every I/O goes through
:class:`~parquet_sink.storage.filesystem.Storage`.

Example::

    >>> files = LogFiles(Storage("/tmp/out"))
    >>> files.list_names()
    {0: '/tmp/out/_spark_metadata/0', 9: '/tmp/out/_spark_metadata/9.compact'}
    >>> files.read_table(files.list_names()[9], 9).num_rows
    20
"""

from __future__ import annotations

import logging
import os
import posixpath
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import IO
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from ..failpoints import failpoint
from ..errors import (
    CorruptLogError, LogPathError, NotAnOutputError, ParameterError, ParquetSinkError, UnsupportedLogVersionError,
)
from .lines import framed_lines, newline_positions, parse_lines
from .threads import mapped_ahead
from .sidecar import (
    OLD_SIDECAR_SUFFIX,
    SIDECAR_SUFFIX,
    Checksum,
    Sidecar,
    SidecarWriter,
    decode_sidecar,
    log_memory_pool,
    sidecar_path,
)
from .entry import BATCH_KEY, COMMIT_ID_KEY, ENTRY_SCHEMA, REQUIRED_KEYS, LogEntry, entries_table, with_marker_records
from ..storage.filesystem import FileInfo, Storage

logger = logging.getLogger(__name__)

VERSION = 1
METADATA_DIR = "_spark_metadata"
# the writers' hidden area under an output root (leases, staging: parquet_sink.write.inflight); named before the
# package's rename, kept so outputs written before it read the same
HIDDEN_DIR = "_exactly_once"
# in the hidden area: the compact interval every writer of the log names batches by, as digits (written once, by
# the log's first writer: CompactibleLog.recorded_interval). A hidden name (read_record), as every file in the area:
# Spark lists what a glob such as out/*/* matches whatever its name, and reads each file in it not hidden as data
INTERVAL_RECORD = f"{HIDDEN_DIR}/.compact_interval"
# in the hidden area, hidden as the interval's: the log's other settings every writer applies (retention, batches to
# retain, cleanup delay), as JSON, written once beside the interval (CompactibleLog.recorded_settings)
SETTINGS_RECORD = f"{HIDDEN_DIR}/.log_settings"
DELTA_DIR = "_delta_log"  # the Delta log a sync keeps beside the log (parquet_sink.delta.sync)
COMPACT_SUFFIX = ".compact"
_BLOCK = 1 << 22  # bytes parsed at once: bounds the memory next to the columns themselves
_PREFIX_CHUNK = 1 << 24  # bytes read at once to checksum the start of a compact file (see LogFiles._older_copy)
_CARRY_ROOM = 1 << 16  # room in a block's buffer for the start of a line the previous block cut
_NEWLINE = 10
# A compact file without a columnar copy this big (~20k entries) gets one the first time it is read.
COPY_MIN_BYTES = 1 << 22
# A reader that stores a copy deletes the copies whose compact file is gone once they are this old (Spark's
# spark.sql.streaming.fileSink.log.cleanupDelay default, the sink's cleanup_delay default).
ORPHANED_COPY_AGE_MS = 10 * 60 * 1000
_PARSE = pa_json.ParseOptions(explicit_schema=ENTRY_SCHEMA, unexpected_field_behavior="ignore")
# Arrow's JSON parser costs ~0.4 ms a block whatever its size; up to this many lines are parsed one by one, cheaper (a
# delta of the sink's: a few data entries with their statistics, which the line scanners leave to a JSON parser)
_FEW_LINES = 32
# A delta file bigger than twice this is read at its two ends only where its first and last entries suffice
# (LogFiles.read_ends): an append after a batch of 100,000 files reads 128 KiB of its log file, not 40 MB.
END_BYTES = 1 << 16


def parse_batch_name(name: str) -> tuple[int, bool] | None:
    """``"12"`` -> (12, False), ``"19.compact"`` -> (19, True); anything else (temp, crc) -> None.

    Example: ``parse_batch_name("/o/_spark_metadata/19.compact") == (19, True)``.
    """
    base = name.rsplit("/", 1)[-1]
    compact = base.endswith(COMPACT_SUFFIX)
    digits = base[: -len(COMPACT_SUFFIX)] if compact else base
    if not digits.isdigit() or not digits.isascii():
        return None
    return int(digits), compact


def read_record(storage: Storage, record: str) -> bytes:
    """The bytes of a record of the hidden area (:data:`INTERVAL_RECORD`), or of the one an older release wrote
    under the name without the leading dot; FileNotFoundError when there is neither.

    Example: ``read_record(Storage("/data/events"), INTERVAL_RECORD)`` -> ``b"10"``.
    """
    directory, _, name = record.rpartition("/")
    try:
        return storage.read_bytes(storage.join(record))
    except FileNotFoundError:
        return storage.read_bytes(storage.join(f"{directory}/{name.removeprefix('.')}"))


def output_started(storage: Storage) -> bool:
    """Whether ``storage``'s root is the output of a streaming file sink, committed or not yet: it holds the log
    directory, or the hidden area where a writer of this package keeps a first batch in flight (or one that
    failed). Readers answer "no committed batch" for those, and :class:`~parquet_sink.errors.NotAnOutputError` for
    any other path (most likely a typo).

    Example: ``output_started(Storage("/data/events"))`` -> ``True``.
    """
    return storage.exists(storage.join(METADATA_DIR)) or storage.exists(storage.join(HIDDEN_DIR))


def require_output(storage: Storage) -> None:
    """NotAnOutputError unless :func:`output_started` (the path is not the output of a streaming file sink).

    Example: ``require_output(Storage("/data/evnets"))`` raises NotAnOutputError.
    """
    if not output_started(storage):
        where = storage.display(storage.root)
        in_log = where.rstrip("/").endswith(f"/{METADATA_DIR}")
        hint = f" ({where} is a log directory: give its parent, the output)" if in_log else ""
        if not in_log and _is_file(storage, anywhere=True):
            hint = f" ({where} is a file: give the output directory that holds it)"
        inside = "" if in_log else inside_output_hint(storage)
        if inside:
            hint = f" ({inside})"
        raise NotAnOutputError(
            f"{where} has no {METADATA_DIR} log, so committed data cannot be told apart "
            "from files of failed batches: it is not the output of a streaming file sink (ParquetSink, write_batch "
            f"or Spark's writeStream.format('parquet')). Check the path{hint}."
        )


def enclosing_output(storage: Storage) -> str | None:
    """The output ``storage``'s root lies inside as one of its partition directories (``<out>/day=2026-11-20``, at
    any depth: an ancestor reached through ``name=value`` directories holds a ``_spark_metadata`` log), as the user
    writes it; None otherwise. Those files are committed data of that output: a path that is not a partition
    directory costs no request. Writers refuse such a path and readers name the output (and ``filter=``).

    Example: ``enclosing_output(Storage("/data/events/day=2026-11-20"))`` -> ``'/data/events'``.
    """
    path = storage.root.rstrip("/")
    while "=" in posixpath.basename(path):
        path = posixpath.dirname(path)
        if path and storage.exists(posixpath.join(path, METADATA_DIR)):
            return storage.display(path)
    return None


def inside_output_hint(storage: Storage) -> str:
    """What to give instead of a partition directory of an output (:func:`enclosing_output`), or ``""``."""
    output = enclosing_output(storage)
    if output is None:
        return ""
    where = storage.display(storage.root)
    return (f"{where} is a partition directory inside the output {output} (its files are that output's committed "
            f"data): give {output}, with filter= to read only this partition (e.g. read_committed({output!r}, "
            "filter=...)), or partition_by= to write into it")


def _is_file(storage: Storage, anywhere: bool = False) -> bool:
    """Whether ``storage``'s root is a file: on local disk (a stat), or with ``anywhere`` on an object store too (a
    request or two), where a key and a prefix may share a name."""
    try:
        return (storage.is_local or anywhere) and not storage.info(storage.root).is_dir
    except FileNotFoundError:
        return False


def check_output_root(path: str | os.PathLike[str], storage: Storage, what: str | None = None, anywhere: bool = False) -> None:
    """ParameterError, before a writer writes anything, when ``path`` is empty (it would write into the working
    directory), is a file, names a directory an output's writers own (its log, its Delta log, the hidden area of
    writes in flight) rather than an output, or is a partition directory of an output (:func:`enclosing_output`):
    another output would be nested inside it, which readers of it never see.
    ``anywhere``: look for a file on object stores too (where a write would nest the output under the object's key),
    which costs a request or two: for a new output. ``what`` (the call, :func:`~parquet_sink.errors.call_text`)
    starts the message; without it a :func:`~parquet_sink.errors.names_output` caller names itself.

    Example: ``check_output_root("/data/out/_spark_metadata", storage, "write_batch")`` raises ParameterError.
    """
    name = posixpath.basename(storage.root)
    call = f"{what}: " if what else ""
    if not os.fspath(path):
        raise ParameterError(f"{call}the path is empty (it would write into the working directory): give the "
                             "output's path. Nothing was written.")
    if name in (METADATA_DIR, DELTA_DIR, HIDDEN_DIR):
        parent = storage.display(posixpath.dirname(storage.root))
        raise ParameterError(f"{call}{os.fspath(path)!r} is the {name} directory of the output {parent}, not an "
                             f"output: give {parent}. Nothing was written.")
    if _is_file(storage, anywhere):
        raise ParameterError(f"{call}{os.fspath(path)!r} is a file, not an output directory: give the directory "
                             "to write the output in. Nothing was written.")
    inside = inside_output_hint(storage)
    if inside:
        raise ParameterError(f"{call}{inside}. Nothing was written.")


def nested_roots(relative_paths: Iterable[str]) -> set[str]:
    """The directories (relative to an output root, with a trailing ``/``) below the root that hold a log of their
    own: another output (``_spark_metadata``, ``_exactly_once``) or a Delta table (``_delta_log``) nested in it, whose
    files that log commits, not the root's.

    Example: ``nested_roots(["sub/_spark_metadata/0", "sub/part-0.parquet"])`` -> ``{'sub/'}``.
    """
    roots = set()
    for relative in relative_paths:
        segments = relative.split("/")
        for depth, segment in enumerate(segments[1:-1], start=1):
            if segment in (METADATA_DIR, HIDDEN_DIR, DELTA_DIR):
                roots.add("/".join(segments[:depth]) + "/")
                break
    return roots


def is_compact_path(path: str) -> bool:
    return path.endswith(COMPACT_SUFFIX)


def stamp_batch_id(table: pa.Table, batch_id: int) -> pa.Table:
    """A delta file's entries with their ``batchId`` (the file's name says it; its lines may not).

    Example: ``stamp_batch_id(files.read_table(path, 7), 7).column("batchId")`` -> ``[7, 7]``.
    """
    if not table.column(BATCH_KEY).null_count:
        return table
    index = table.schema.get_field_index(BATCH_KEY)
    return table.set_column(index, BATCH_KEY, pc.fill_null(table.column(BATCH_KEY), batch_id))


def _read_into(fh: IO[bytes], view: memoryview) -> int:
    """Fill ``view`` from ``fh`` (short reads repeated); the bytes read, fewer only at the end of the file."""
    filled = 0
    while filled < len(view):
        got = fh.readinto(view[filled:])  # type: ignore[attr-defined]
        if not got:
            break
        filled += got
    return filled


def _last_newline(data: np.ndarray) -> int:
    """Where the last newline of ``data`` is, -1 if it has none (its tail searched first: lines are short)."""
    start = max(0, len(data) - (1 << 16))
    found = np.flatnonzero(data[start:] == _NEWLINE)
    if not len(found) and start:
        start, found = 0, np.flatnonzero(data[:start] == _NEWLINE)
    return start + int(found[-1]) if len(found) else -1


def _expired(infos: list[FileInfo], candidates: set[str], older_than_ms: int) -> list[FileInfo]:
    """Those of ``candidates`` that ``infos`` says were last modified more than ``older_than_ms`` ago."""
    expired_before = int(time.time() * 1000) - older_than_ms
    return [info for info in infos if info.path in candidates and info.mtime_ms <= expired_before]


class _Buffers:
    """The buffers log blocks are read into, each reused once nothing refers to it any more (a block being
    parsed, or anything made over its bytes without a copy, holds a reference to its buffer): reading into
    fresh memory costs a page fault per 4 KiB, measured at 0.12 of the 0.14 s it takes to read the blocks of
    a 240 MB log file. Thread-safe."""

    _KEEP = 8  # buffers kept for reuse (more blocks alive at once get fresh memory)

    def __init__(self) -> None:
        self._kept: list[np.ndarray] = []
        self._lock = threading.Lock()

    def get(self, size: int) -> np.ndarray:
        """A buffer of ``size`` bytes, over memory nothing else uses."""
        with self._lock:
            for kept in self._kept:
                if len(kept) >= size and sys.getrefcount(kept) == 3:  # only this list, ``kept`` and the call
                    return kept[:size]
            fresh = np.empty(size + _CARRY_ROOM, np.uint8)
            if len(self._kept) < self._KEEP:
                self._kept.append(fresh)
            return fresh[:size]


class _CopyNotStored(Exception):
    """Storing a columnar copy failed (the cause says why); ``sidecar`` is the copy."""

    def __init__(self, sidecar: Sidecar) -> None:
        super().__init__("the columnar copy could not be stored")
        self.sidecar = sidecar


class Listing(dict[int, str]):
    """Batch id -> log file path, from one listing; ``temps`` are the temporary files it saw,
    ``sidecars`` the columnar copies of compact files (batch id -> path, see :mod:`.sidecar`; a copy under
    the old name ``N.compact.parquet`` when it has no other), ``superseded`` old-named copies beside a copy
    under the new name, ``infos`` each batch file's size and modification time (only from a listing that
    stats files)."""

    def __init__(
        self,
        files: dict[int, str] | None = None,
        temps: list[str] | None = None,
        sidecars: dict[int, str] | None = None,
    ) -> None:
        super().__init__(files or {})
        self.temps = temps or []
        self.sidecars = sidecars or {}
        self.superseded: list[str] = []
        self.infos: dict[int, FileInfo] = {}

    def add(self, path: str) -> int | None:
        """File ``path`` of the log directory under what it is; returns its batch id if it is a batch file."""
        parsed = parse_batch_name(path)
        if parsed:
            self[parsed[0]] = path
            return parsed[0]
        if path.endswith(".tmp"):
            self.temps.append(path)
        else:
            suffix = SIDECAR_SUFFIX if path.endswith(SIDECAR_SUFFIX) else OLD_SIDECAR_SUFFIX
            if path.endswith(COMPACT_SUFFIX + suffix) and (parsed := parse_batch_name(path[: -len(suffix)])):
                self._add_copy(parsed[0], path, suffix == SIDECAR_SUFFIX)
        return None

    def _add_copy(self, batch_id: int, path: str, new_name: bool) -> None:
        """A columnar copy: one under the new name wins over one under the old name, which is superseded."""
        other = self.sidecars.get(batch_id)
        if other is not None and not new_name:
            self.superseded.append(path)
            return
        if other is not None:
            self.superseded.append(other)
        self.sidecars[batch_id] = path


@dataclass(frozen=True)
class Block:
    """Whole lines of one log file: ``framed`` (each line after its ``\\n``, as the file holds it), the
    number of the first line (the header is line 1), how many lines it holds and where each starts in
    ``framed`` (at its ``\\n``: the scan that counted the lines found them)."""

    framed: memoryview
    first_line: int
    lines: int
    starts: np.ndarray

    def framed_lines(self) -> pa.BinaryArray:
        """The lines, each ``"\\n"`` first, as a binary array over ``framed`` (no copy)."""
        return framed_lines(self.framed, self.starts)

    @property
    def data(self) -> memoryview:
        """The lines joined by ``\\n`` (no copy)."""
        return self.framed[1:]

    def split(self) -> list[bytes]:
        """The lines, as bytes."""
        return bytes(self.data).split(b"\n")


class LogFiles:
    """The log directory of one output: one file per batch.

    Example::

        >>> LogFiles(Storage("s3://bucket/out")).log_dir
        'bucket/out/_spark_metadata'
    """

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.log_dir = storage.join(METADATA_DIR)
        self._buffers = _Buffers()

    def display(self, path: str) -> str:
        return self.storage.display(path)

    def path_of(self, batch_id: int, compact: bool) -> str:
        """The file of batch ``batch_id`` (``N`` or ``N.compact``)."""
        return self.storage.join(METADATA_DIR, f"{batch_id}{COMPACT_SUFFIX if compact else ''}")

    # -- listing ---------------------------------------------------------------------------------

    def list_names(self) -> Listing:
        """Batch id -> log file path, from one fresh names-only listing (no per-file stat)."""
        found = Listing()
        names = self.storage.ls_names(self.log_dir)
        if not names or names == [self.log_dir]:
            self._require_directory()
        for path in names:
            found.add(path)
        return found

    def list_details(self) -> Listing:
        """As :meth:`list_names`, from one listing that also stats every file (``Listing.infos``)."""
        found = Listing()
        infos = self.storage.ls(self.log_dir)
        if not infos or [i.path for i in infos] == [self.log_dir]:
            self._require_directory()
        for info in infos:
            batch_id = None if info.is_dir else found.add(info.path)
            if batch_id is not None:
                found.infos[batch_id] = info
        return found

    def _require_directory(self) -> None:
        """LogPathError if the log path exists but is not a directory (an empty listing is then no log at
        all, not an empty one: readers would show nothing and ``vacuum`` would take every file for an orphan).
        Called only when a listing came back empty (or named the log path itself, as object stores do for a
        file): one stat for a new output."""
        try:
            info = self.storage.info(self.log_dir)
        except FileNotFoundError:
            return
        if not info.is_dir:
            raise LogPathError(
                f"{self.display(self.log_dir)} is a file, not the log directory: the committed batches of "
                f"{self.display(self.storage.root)} cannot be read. Something overwrote the log; restore the "
                f"{METADATA_DIR} directory from backup (or move the file away if this is not a streaming sink's output)."
            )

    # -- reading ---------------------------------------------------------------------------------

    def _corrupt(self, path: str, batch_id: int, number: int | str, exc: Exception) -> CorruptLogError:
        return CorruptLogError(
            f"corrupt log file {self.display(path)} (batch {batch_id}), line {number}: {exc}. The file was "
            "truncated or damaged; restore it from backup, or run `parquet-sink verify` to see every problem."
        )

    def check_header(self, header: bytes, path: str, batch_id: int) -> None:
        """Raise CorruptLogError for an empty file or a header that is not ``v<n>``, and
        UnsupportedLogVersionError for a newer version."""
        if not header:
            raise CorruptLogError(
                f"Incomplete log file {self.display(path)} (batch {batch_id}): the file is empty. It was "
                "truncated or written by a writer that crashed; restore it from backup. If it is the log's newest "
                f"file, deleting it un-commits batch {batch_id}, which its writer then writes again (`parquet-sink "
                "doctor` says what a restart or rerun will do); an older one cannot be deleted: the batches after "
                "it need it."
            )
        text = header.rstrip(b"\n")
        version = text[1:].decode("ascii", "replace")
        if not text.startswith(b"v") or not version.isdigit() or int(version) == 0:  # Spark: v0 is malformed
            raise CorruptLogError(
                f"malformed log file {self.display(path)} (batch {batch_id}): header {text[:20]!r} is not "
                "'v<version>' with a version >= 1. The file is not a Spark metadata log file or is damaged; "
                "restore it from backup."
            )
        if int(version) > VERSION:
            raise UnsupportedLogVersionError(
                f"unsupported log version v{version} in {self.display(path)} (batch {batch_id}): this "
                f"parquet_sink supports up to v{VERSION}. The log was written by a newer Spark or tool; upgrade "
                "parquet_sink to read it."
            )

    def blocks(
        self, path: str, batch_id: int, checksum: Checksum | None = None, start: tuple[int, int] = (0, 2)
    ) -> Iterator[Block]:
        """The body of one log file (after the header) in blocks of whole lines. FileNotFoundError if the
        file does not exist. ``checksum`` sees every byte of the file as it is read. Each block is read into
        a buffer of its own (callers parse blocks on threads; buffers are reused once free) and scanned without
        holding the GIL. ``start``: (offset of a line break, number of the line after it) to read the lines
        from there on instead (``checksum`` then sees the bytes from that line break on)."""
        with self.storage.open(path, "rb") as fh:
            header = fh.readline()
            self.check_header(header, path, batch_id)
            offset, number = start
            if offset:  # the line break at offset stands where the header's does
                fh.seek(offset + 1)
                header = b"\n"
            if checksum:
                checksum.update(header)
            carry = b""
            while True:
                buffer = self._buffers.get(1 + len(carry) + _BLOCK)  # the newline before the first line, then
                buffer[0] = _NEWLINE  # the lines: the block as the file holds it
                buffer[1 : 1 + len(carry)] = np.frombuffer(carry, np.uint8)
                got = _read_into(fh, memoryview(buffer)[1 + len(carry) :])
                if checksum:
                    checksum.update(memoryview(buffer)[1 + len(carry) : 1 + len(carry) + got])
                body, last = buffer[1 : 1 + len(carry) + got], got < _BLOCK
                if not len(body):
                    return
                # a block ends before the last newline read, the last block with the file (less a trailing newline)
                cut = len(body) if last and body[-1] != _NEWLINE else _last_newline(body)
                if cut < 0:  # a line longer than a block
                    carry = body.tobytes()
                    continue
                newlines = newline_positions(body[:cut])
                lines = len(newlines) + 1
                starts = np.empty(lines, np.int32)  # in the block as framed: each line's newline
                starts[0], starts[1:] = 0, newlines + 1
                yield Block(memoryview(buffer)[: 1 + cut], number, lines, starts)  # no copy of the block
                if last:
                    return
                number += lines
                carry = body[cut + 1 :].tobytes()

    def parsed_blocks(
        self, path: str, batch_id: int, checksum: Checksum | None = None, start: tuple[int, int] = (0, 2)
    ) -> Iterator[tuple[Block, pa.Table, pa.BooleanArray | None]]:
        """(block, entries, layout) for each block of one log file (:meth:`blocks`, from ``start``;
        :meth:`parse_block_layout`), in file order: blocks are parsed two at a time on threads while the
        next one is read (a file of one block is parsed here)."""

        def parse(block: Block) -> tuple[Block, pa.Table, pa.BooleanArray | None]:
            return (block, *self.parse_block_layout(block, path, batch_id))

        return mapped_ahead(parse, self.blocks(path, batch_id, checksum, start))

    def parse_block(self, block: Block, path: str, batch_id: int) -> pa.Table:
        """The entries of one block of lines, validated (see :meth:`parse_block_layout`)."""
        return self.parse_block_layout(block, path, batch_id)[0]

    def parse_block_layout(self, block: Block, path: str, batch_id: int) -> tuple[pa.Table, pa.BooleanArray | None]:
        """Validate and parse one block of lines column-wise: lines in the writer's layout as fields
        (:func:`~parquet_sink.log.lines.parse_lines`), else with ``pyarrow.json`` (a line pyarrow skips, a
        missing key or a wrong type fails a check on the whole block); a block that fails, or of at most
        :data:`_FEW_LINES` lines, is parsed line by line, which raises CorruptLogError naming the exact line.
        A record entry whose keys Spark's compaction dropped is read from its path
        (:func:`~parquet_sink.log.entry.with_marker_records`).
        Returns (entries, which lines are in the layout, or None when a JSON parser read the block)."""
        table, layout = self._parse_block_layout(block, path, batch_id)
        return with_marker_records(table), layout

    def _parse_block_layout(self, block: Block, path: str, batch_id: int) -> tuple[pa.Table, pa.BooleanArray | None]:
        parsed = parse_lines(block.data, block.lines)
        if parsed is not None:
            return parsed
        if block.lines <= _FEW_LINES:
            return self._parse_lines(block, path, batch_id), None
        try:
            table = pa_json.read_json(pa.BufferReader(pa.py_buffer(block.data)), parse_options=_PARSE)
            table.validate(full=True)  # pyarrow.json does not check the encoding of strings
        except pa.ArrowInvalid:
            table = None
        if (
            table is None
            or table.num_rows != block.lines
            or any(table.column(key).null_count for key in REQUIRED_KEYS)
        ):
            return self._parse_lines(block, path, batch_id), None
        return table, None

    def _parse_lines(self, block: Block, path: str, batch_id: int) -> pa.Table:
        entries = []
        first_line = block.first_line
        for number, raw in enumerate(block.split(), start=first_line):
            try:
                entries.append(LogEntry.from_json(raw.decode("utf-8")))
            except (UnicodeDecodeError, ValueError) as exc:
                raise self._corrupt(path, batch_id, number, exc) from exc
        try:
            return entries_table(entries)
        except ValueError as exc:
            raise self._corrupt(path, batch_id, first_line, exc) from exc

    def read_sidecar(self, sidecar: str, path: str, batch_id: int) -> Sidecar | None:
        """The side-car ``sidecar`` of compact file ``path``, or None (logged) when it cannot be used:
        unreadable, damaged, or describing another file. Sizes and checksums are the caller's to check."""
        try:
            return decode_sidecar(self.storage.read_bytes(sidecar), path.rsplit("/", 1)[-1])
        except FileNotFoundError:
            return None
        except (pa.ArrowException, ValueError, KeyError, OSError) as exc:
            logger.warning(
                "ignoring the columnar copy %s of log batch %d (%s): reading %s instead",
                self.display(sidecar), batch_id, exc, self.display(path),
            )
            return None

    def read_table(
        self, path: str, batch_id: int, copies: dict[int, str] | None = None, columns: list[str] | None = None
    ) -> pa.Table:
        """Every entry of one log file as columns of :data:`~parquet_sink.log.entry.ENTRY_SCHEMA` (only
        ``columns``, if given), validated. Entries of a delta file without ``batchId`` get the file's batch
        id. ``copies``: the columnar copies a listing found (``Listing.sidecars``); a compact file's own is
        used instead of parsing the JSON when it matches the file's size. A big compact file without one gets
        one, from the JSON or, when the file starts with the bytes an older copy holds, from that copy and
        the lines after them (:meth:`_older_copy`)."""
        copies = copies or {}
        sidecar = copies.get(batch_id) if is_compact_path(path) else None
        if sidecar is not None:
            copy = self.read_sidecar(sidecar, path, batch_id)
            if copy is not None and copy.size == self.storage.info(path).size:
                self.check_header(self.storage.read_bytes(path, 0, 16).split(b"\n", 1)[0], path, batch_id)
                try:
                    return copy.table(columns)
                except (pa.ArrowException, OSError) as exc:  # damaged inside: a page CRC-32 failed
                    logger.warning("ignoring the damaged columnar copy of log batch %d (%s)", batch_id, exc)
            if copy is not None:
                logger.warning("the columnar copy of log batch %d is stale: reading %s", batch_id, self.display(path))
        with log_memory_pool():
            table = self._parse_table(path, batch_id, copies if sidecar is None else None)
        if not is_compact_path(path):
            table = stamp_batch_id(table, batch_id)
        return table if columns is None else table.select(columns)

    def _parse_table(self, path: str, batch_id: int, copies: dict[int, str] | None) -> pa.Table:
        """Every entry of one log file, parsed from its JSON. ``copies``: the listing's columnar copies, when
        a big compact file is to get a copy of its own (None: parse only, store nothing); when the file
        starts with the bytes the newest older one was made from (:meth:`_older_copy`), only the lines after
        them are parsed."""
        checksum, tables, start = Checksum(), [], (0, 2)
        made = None  # a large compact file without a copy: its copy, encoded on a thread as blocks are parsed
        store = copies is not None and is_compact_path(path)
        base = self._older_copy(batch_id, copies) if store and copies else None
        if base is not None:
            copy, entries = base
            made = SidecarWriter()
            made.write(entries)  # encoded on a thread while this one checks the file's first bytes
            if self._starts_with(path, copy.size, copy.crc):
                checksum.size, checksum.crc = copy.size, copy.crc
                tables, start = [entries], (copy.size, entries.num_rows + 2)
            else:
                made.discard()
                made = None
        try:
            for _, table, _ in self.parsed_blocks(path, batch_id, checksum, start):
                tables.append(table)
                if made is None and store and checksum.size >= COPY_MIN_BYTES:
                    made = SidecarWriter()
                    for table in tables:
                        made.write(table)
                elif made is not None:
                    made.write(tables[-1])
        except BaseException:
            if made is not None:
                made.discard()
            raise
        if made is not None and self.keep_copy(path, batch_id, made, checksum):
            self.delete_orphaned_copies()
        return pa.concat_tables(tables) if tables else ENTRY_SCHEMA.empty_table()

    def _older_copy(self, batch_id: int, copies: dict[int, str]) -> tuple[Sidecar, pa.Table] | None:
        """(the newest of ``copies`` of a compact file older than batch ``batch_id``, its entries), if it is
        big enough to be worth starting from and readable. Spark's sink writes each compact file as the
        previous one's lines, then the newer batches' (``compactLogs`` keeps every entry when none is a
        delete, which its sink never writes): when a compact file starts with the bytes the copy was made
        from (:meth:`_starts_with`, never assumed), a reader following an output Spark writes parses only
        the lines after them."""
        older = [b for b in copies if b < batch_id]
        if not older:
            return None
        base_id = max(older)
        copy = self.read_sidecar(copies[base_id], self.path_of(base_id, True), base_id)
        if copy is None or copy.size < COPY_MIN_BYTES:
            return None
        try:
            return copy, copy.table()
        except (pa.ArrowException, OSError) as exc:  # damaged inside: a page CRC-32 failed
            logger.warning("ignoring the damaged columnar copy of log batch %d (%s)", base_id, exc)
            return None

    def _starts_with(self, path: str, size: int, crc: int) -> bool:
        """Whether file ``path``'s first ``size`` bytes have CRC-32 ``crc`` and a line break follows them."""
        seen = Checksum()
        with self.storage.open(path, "rb") as fh:
            while seen.size < size:
                chunk = fh.read(min(_PREFIX_CHUNK, size - seen.size))
                if not chunk:
                    return False
                seen.update(chunk)
            return seen.crc == crc and fh.read(1) == b"\n"

    def put_copy(self, path: str, copy: SidecarWriter, checksum: Checksum) -> Sidecar:
        """Store the columnar copy of compact file ``path`` (whose bytes ``checksum`` saw) from the
        entries written to ``copy``, atomically (a concurrent reader sees no copy or all of it); returns it."""
        sidecar = copy.finish_copy(path.rsplit("/", 1)[-1], checksum)
        try:
            self.storage.put(sidecar_path(path), memoryview(sidecar.data))
        except (OSError, ParquetSinkError) as exc:
            raise _CopyNotStored(sidecar) from exc
        return sidecar

    def keep_copy(self, path: str, batch_id: int, copy: SidecarWriter, checksum: Checksum) -> bool:
        """As :meth:`put_copy`, where a copy is a help, not a duty: after a compaction, or for a compact file
        that has none (written by Spark's sink or an older version), so that readers and the next
        compaction read it instead of the JSON. Whether it was stored: a failure to store it (a read-only
        reader, say) is logged."""
        try:
            self.put_copy(path, copy, checksum)
        except _CopyNotStored as exc:
            logger.warning(
                "could not store a columnar copy of log batch %d (%s): readers parse the JSON", batch_id, exc.__cause__
            )
            return False
        logger.info("wrote the columnar copy of log batch %d (%d bytes of JSON)", batch_id, checksum.size)
        return True

    def delete_orphaned_copies(self, older_than_ms: int | None = None) -> list[str]:
        """Delete the columnar copies whose compact file is gone, last modified more than ``older_than_ms``
        (default :data:`ORPHANED_COPY_AGE_MS`) ago; returns their paths. Spark's log cleanup deletes old compact files and never sees their copies
        (not batch file names): a reader that stores copies in an output Spark's sink writes calls this after
        each, so copies never outlive Spark's log (the sink's own cleanup deletes them with its log files).
        A copy is only ever read beside its compact file, so deleting one can cost a reader time, never an
        answer. A failure to delete (a reader allowed to create files, not to delete them) is logged.

        Example: ``MetadataLog("/data/events").delete_orphaned_copies()`` -> ``['/data/events/_spark_metadata/9.compact.columnar']``.
        """
        try:
            found = self.orphaned_copies(older_than_ms)
            return self.delete_older(found, {info.path for info in found}, 0)
        except (OSError, ParquetSinkError) as exc:
            logger.warning("could not delete the orphaned columnar copies in %s (%s)", self.display(self.log_dir), exc)
            return []

    def orphaned_copies(self, older_than_ms: int | None = None) -> list[FileInfo]:
        """The columnar copies whose compact file is gone (Spark's log cleanup deleted it), or that a copy under
        the new name supersedes (``N.compact.parquet`` beside ``N.compact.columnar``), last modified more
        than ``older_than_ms`` (default :data:`ORPHANED_COPY_AGE_MS`) ago: what :meth:`delete_orphaned_copies`
        and ``vacuum`` delete.

        Example: ``[i.path for i in MetadataLog("/data/events").orphaned_copies()]`` -> ``['/data/events/_spark_metadata/9.compact.columnar']``.
        """
        return self.leftovers(ORPHANED_COPY_AGE_MS if older_than_ms is None else older_than_ms)[0]

    def leftovers(self, older_than_ms: int) -> tuple[list[FileInfo], list[FileInfo]]:
        """From one listing of the log directory, last modified more than ``older_than_ms`` ago: the
        :meth:`orphaned_copies`, and the temporary files of log commits that never finished (a writer killed between
        writing a log file's temporary copy and publishing it), which a writer's own cleanup deletes only after a
        compaction, and never if it does not run again. What ``vacuum`` deletes.

        Example: ``[i.path for i in MetadataLog("/data/events").leftovers(3_600_000)[1]]`` -> ``['/data/events/_spark_metadata/.7.1f0c....tmp']``.
        """
        infos = self.storage.ls(self.log_dir)
        listing = Listing()
        for info in infos:
            listing.add(info.path)
        orphans = {path for batch_id, path in listing.sidecars.items() if batch_id not in listing}
        orphans |= set(listing.superseded)
        return _expired(infos, orphans, older_than_ms), _expired(infos, set(listing.temps), older_than_ms)

    def delete_older(self, infos: list[FileInfo], candidates: set[str], older_than_ms: int) -> list[str]:
        """Delete those of ``candidates`` that ``infos`` (a listing of the log directory) says were last
        modified more than ``older_than_ms`` ago; returns their paths."""
        deleted = []
        for info in _expired(infos, candidates, older_than_ms):
            self.storage.delete(info.path)
            deleted.append(info.path)
            failpoint("cleanup")
        return deleted

    def read_ends(self, path: str, batch_id: int) -> pa.Table | None:
        """The first entry and the last data entry (neither a directory nor empty: what readers read) of the delta
        file ``path`` as rows of :data:`~parquet_sink.log.entry.ENTRY_SCHEMA` stamped with ``batch_id``, from a stat
        and its first and last :data:`END_BYTES` bytes (ranged reads): what a writer deciding its commit needs of a
        batch before the ones it reads whole, whatever that batch's size. Every writer of this package puts the
        batch's commit record on its first entry (:meth:`~parquet_sink.log.entry.CommitRecord.log_entries`) and
        none elsewhere. None, to read the file whole (:meth:`read_table`), when it is small, when its first entry
        carries no commit record (a batch of Spark's own sink, or another writer's) or when its last bytes hold no
        data entry. The lines read are validated as :meth:`iter_entries` does (CorruptLogError); the others are
        left to compaction, ``verify`` and the readers. FileNotFoundError if the file is gone.

        Example: ``log.read_ends(log.path_of(0, False), 0).column("commitId")`` -> ``['9f1c...', None]``.
        """
        size = self.storage.info(path).size
        if size <= 2 * END_BYTES:
            return None
        header, _, body = self.storage.read_bytes(path, 0, END_BYTES).partition(b"\n")
        self.check_header(header, path, batch_id)
        first, complete, _ = body.partition(b"\n")
        if not complete:  # a first line longer than the bytes read
            return None
        entries = [self._entry(first, path, batch_id, 2, batch_id)]
        if COMMIT_ID_KEY not in entries[0].extra:
            return None
        lines = self.storage.read_bytes(path, size - END_BYTES, size).rstrip(b"\n").split(b"\n")[1:]  # 1st: cut
        for back, raw in enumerate(reversed(lines)):
            entry = self._entry(raw, path, batch_id, f"{back + 1} from the end", batch_id)
            if not entry.is_dir and entry.size > 0:
                try:
                    return entries_table([entries[0], entry])
                except ValueError as exc:  # a commit record key of a wrong type
                    raise self._corrupt(path, batch_id, 2, exc) from exc
        return None

    def _entry(self, raw: bytes, path: str, batch_id: int, number: int | str, owner: int | None) -> LogEntry:
        """The entry of line ``number`` of log file ``path`` (batch ``batch_id``; ``owner``: the batch id of an entry
        without one), CorruptLogError when it is none."""
        try:
            return LogEntry.from_json(raw.decode("utf-8"), owner)
        except (UnicodeDecodeError, ValueError) as exc:
            raise self._corrupt(path, batch_id, number, exc) from exc

    def iter_entries(self, path: str, batch_id: int) -> Iterator[LogEntry]:
        """Stream the entries of one log file as :class:`LogEntry` objects (every extra key kept)."""
        owner = None if is_compact_path(path) else batch_id
        for block in self.blocks(path, batch_id):
            for number, raw in enumerate(block.split(), start=block.first_line):
                yield self._entry(raw, path, batch_id, number, owner)
