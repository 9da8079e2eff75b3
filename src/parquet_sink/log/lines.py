"""Log lines in the one layout Spark's ``FileStreamSinkLog`` (json4s) and this package write, read and
written column-wise: ``{"path":"P","size":S,"isDir":B,"modificationTime":M,"blockReplication":R,
"blockSize":Z,"action":"A"}`` (this package adds ``batchId`` and, on a commit record, its keys).

A log of a million files is a quarter of a gigabyte of such lines. Arrow's JSON parser reads them at ~210 MB/s
on one core here, and says nothing of how each line is laid out. A block whose every line is in the exact layout
is read by a compiled scanner (``_layout.c``, ~4 GB/s, without the GIL), which answers for nothing else; the
column-wise reader below (~300-400 MB/s, and all a build without a C compiler has) reads lines as seven
comma-separated fields (Arrow's CSV reader, quoting off), or eight in a compact file this package wrote
(``,"batchId":N`` after the action), checks each field is written as the writer writes it, and leaves every
other line (other spacing or key order, escapes, other keys, a comma in a path) to the JSON parser. At compaction, a delta file's lines in
the layout get ``batchId`` before their closing brace, column-wise over the file's bytes
(:func:`stamped_lines`). Both give exactly what parsing and :meth:`~parquet_sink.log.entry.LogEntry.to_json`
give, line for line.

Example::

    >>> parse_lines(b'{"path":"file:///o/a","size":1,"isDir":false,"modificationTime":1,'
    ...             b'"blockReplication":1,"blockSize":1,"action":"add"}', 1).column("size")
    [[1]]
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json

from ..arrow_versions import nonzero
from .entry import BATCH_KEY, ENTRY_SCHEMA, REQUIRED_KEYS, STATS_KEY

try:  # the compiled line scanner (_layout.c); a build without a C compiler reads lines column-wise only
    from . import _layout
except ImportError:  # pragma: no cover - exercised by the tests with the scanner switched off
    _layout = None

EMPTY = pa.scalar(b"", pa.binary())
_NAMES = [f"f{i}" for i in range(8)]  # the comma-separated fields of a line in the layout (and its batchId)
_CONVERT = pa_csv.ConvertOptions(column_types={name: pa.binary() for name in _NAMES}, strings_can_be_null=False)
_JSON = pa_json.ParseOptions(explicit_schema=ENTRY_SCHEMA, unexpected_field_behavior="ignore")
_MAX_OTHERS = 8  # past one line in this many in another layout, the JSON parser reads the whole block
_BACKSLASH = 92
_ZERO = pa.scalar(b"0", pa.binary())
_TRUE = pa.scalar(b'"isDir":true', pa.binary())
_FALSE = pa.scalar(b'"isDir":false', pa.binary())
_POWERS = 10 ** np.arange(19, dtype=np.int64)  # a non-negative int64 of d > 0 digits is below _POWERS[d]
_QUOTE = 34
_NEWLINE = 10
_LAYOUT_QUOTES = 18  # the quotes of a line in the layout: its seven keys, the path and the action
_STAMPED = re.compile(rb',"batchId":\d+}$')  # how a line of a compact file this package wrote ends
_PEEK = 1 << 12  # bytes of a block whose lines show whether its lines carry batchId
_LAYOUT_START = b'{"path":"'
_STATS_HEAD = b',"stats":"'  # what follows the action on a data entry the sink wrote with its file's statistics


def _array(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return column


def _text(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    return pc.cast(_array(column), pa.string())


def entry_prefixes(table: pa.Table) -> pa.BinaryArray:
    """Each entry's line up to and including its action (no ``batchId``, no other key, no closing brace),
    as :meth:`~parquet_sink.log.entry.LogEntry.to_json` writes it when the path needs no escape and the
    action is ASCII: a caller compares the result with the line itself before relying on it.

    Example: ``entry_prefixes(entries_table([LogEntry("p", 1)]))`` -> ``[b'{"path":"p","size":1,...,"action":"add"']``.
    """
    return pc.binary_join_element_wise(
        '{"path":"', _text(table.column("path")),
        '","size":', _text(table.column("size")),
        ',"isDir":', pc.if_else(_array(table.column("isDir")), "true", "false"),
        ',"modificationTime":', _text(table.column("modificationTime")),
        ',"blockReplication":', _text(table.column("blockReplication")),
        ',"blockSize":', _text(table.column("blockSize")),
        ',"action":"', _text(table.column("action")), '"',
        "",
    ).view(pa.binary())


def _in_layout(lines: pa.BinaryArray, prefixes: pa.BinaryArray, table: pa.Table) -> pa.BooleanArray:
    """Whether each line is exactly its entry written back. A path or an action holding a quote could
    make a broken line look rebuilt, so they must hold none; a path holding a backslash (an escape) or a
    control character never equals its JSON; an action must be ASCII (the writer escapes the rest)."""
    same = pc.equal(lines, pc.binary_join_element_wise(prefixes, pa.scalar(b"}", pa.binary()), EMPTY))
    path, action = _array(table.column("path")), _array(table.column("action"))
    clean = pc.and_(pc.invert(pc.match_substring(path, '"')), pc.invert(pc.match_substring(action, '"')))
    return pc.fill_null(pc.and_(pc.and_(same, clean), pc.string_is_ascii(action)), False)


def stamped_lines(
    lines: pa.BinaryArray, table: pa.Table | None, batch_id: int, layout: pa.BooleanArray | None = None
) -> tuple[pa.BinaryArray, pa.BooleanArray]:
    """(each line of a delta file as a compact file holds it, ``"\\n"`` first; which rows the caller must
    re-serialise one by one). ``lines``: the delta's lines, ``"\\n"`` first (:func:`framed_lines`);
    ``layout``: which are in the layout (from :func:`parse_lines`); when not given it is checked here
    against ``table``, the lines' parsed entries. A line in the layout gets ``,"batchId":N`` before its
    closing brace, column-wise; one in the layout followed by the sink's ``stats`` key, after its action
    (:func:`_stamped_keyed`); any other line (a commit record without stats, a ``batchId`` of its own,
    another layout) is marked.

    Example: ``stamped_lines(framed_lines(block.framed), *parse_lines(block.data, n), 7)[0]``
    -> ``[b'\\n{"path":...,"action":"add","batchId":7}', ...]``.
    """
    text = f',"batchId":{batch_id}'.encode()
    keyed = None
    if layout is None:
        assert table is not None
        bare = pc.binary_slice(lines, 1, 2**31 - 1)
        prefixes = entry_prefixes(table)
        layout = _in_layout(bare, prefixes, table)
        keyed = _stamped_keyed(lines, prefixes, table, text)
    compiled = _layout is not None and not lines.null_count
    out = _stamped(lines, text) if compiled else pc.binary_replace_slice(lines, -1, -1, text)
    if keyed is None:
        return out, pc.invert(layout)
    return pc.if_else(keyed[0], keyed[1], out), pc.invert(pc.or_(layout, keyed[0]))


def _stamped_keyed(
    lines: pa.BinaryArray, prefixes: pa.BinaryArray, table: pa.Table, text: bytes
) -> tuple[pa.BooleanArray, pa.BinaryArray] | None:
    """(which of a delta's ``lines`` (each ``"\\n"`` first) are their entry's layout followed by the ``stats``
    key the sink writes on every data entry, each such line as a compact file holds it): ``text``
    (``,"batchId":N``) after the action, where :meth:`~parquet_sink.log.entry.LogEntry.to_json` puts it, the
    keys after it as they are (the sink wrote them with ``to_json``), ~1 us a line where re-serialising costs
    ~20 us. None when no entry has stats. A line holding a ``batchId`` of its own is left to the caller."""
    if table.column(STATS_KEY).null_count == len(table):
        return None
    path, action = _array(table.column("path")), _array(table.column("action"))
    clean = pc.and_(pc.and_(pc.invert(pc.match_substring(path, '"')), pc.invert(pc.match_substring(action, '"'))),
                    pc.string_is_ascii(action))
    keyed, out = [], []
    for line, prefix, ok in zip(lines.to_pylist(), prefixes.to_pylist(), pc.fill_null(clean, False).to_pylist()):
        at = len(prefix) + 1
        if ok and line is not None and line[1:at] == prefix and line.startswith(_STATS_HEAD, at) and b'"batchId":' not in line[at:]:
            keyed.append(True)
            out.append(line[:at] + text + line[at:])
        else:
            keyed.append(False)
            out.append(None)
    return pa.array(keyed, pa.bool_()), pa.array(out, pa.binary())


def _stamped(lines: pa.BinaryArray, text: bytes) -> pa.BinaryArray:
    """``text`` before the last byte of each of ``lines`` (no nulls), by the compiled scanner into one buffer of
    the exact size: what ``binary_replace_slice(lines, -1, -1, text)`` gives, without its growing buffer."""
    _, offsets, data = lines.buffers()
    bounds = np.frombuffer(offsets, np.int32, len(lines) + 1, lines.offset * 4)
    out = pa.allocate_buffer(int(bounds[-1] - bounds[0]) + len(lines) * len(text))
    _layout.stamp(data[int(bounds[0]) : int(bounds[-1])], bounds[:-1] - bounds[0], text, out)
    stamped = bounds - bounds[0] + np.arange(len(lines) + 1, dtype=np.int32) * len(text)
    return pa.Array.from_buffers(pa.binary(), len(lines), [None, pa.py_buffer(stamped), out])


def framed_lines(framed: bytes | memoryview, starts: np.ndarray | None = None) -> pa.BinaryArray:
    """The lines of a block each after its ``"\\n"`` (``framed``: lines each after a newline) as a binary
    array over the block's bytes (no copy); ``starts``: where each line's newline is, if known.

    Example: ``framed_lines(b'\\n{"a":1}\\n{"b":2}').to_pylist()`` -> ``[b'\\n{"a":1}', b'\\n{"b":2}']``.
    """
    data = np.frombuffer(framed, np.uint8)
    if starts is None:
        starts = newline_positions(data)
    offsets = np.empty(len(starts) + 1, np.int32)
    offsets[:-1], offsets[-1] = starts, len(data)
    return pa.Array.from_buffers(pa.binary(), len(starts), [None, pa.py_buffer(offsets), pa.py_buffer(framed)])


def _whole(data: bytes | memoryview) -> pa.BinaryArray:
    """The block as one binary value, without a copy."""
    return pa.Array.from_buffers(pa.binary(), 1, [None, pa.py_buffer(np.array([0, len(data)], np.int32)), pa.py_buffer(data)])


def _is_utf8(data: bytes | memoryview) -> bool:
    try:
        _whole(data).cast(pa.string())  # validates, without a copy
    except pa.ArrowInvalid:
        return False
    return True


def split_lines(data: bytes | memoryview) -> pa.BinaryArray:
    """The lines of a block (joined by ``\\n``), as a binary array."""
    return pc.split_pattern(_whole(data), "\n").values


def joined(values: pa.BinaryArray) -> pa.Buffer:
    """The bytes of every value of ``values``, concatenated (no copy)."""
    _, offsets, data = values.buffers()
    bounds = memoryview(offsets).cast("i")  # the int32 offsets of a binary array
    return data[bounds[values.offset] : bounds[values.offset + len(values)]]


def _fields(data: bytes | memoryview, lines: int, count: int) -> tuple[list[pa.Array], list[int]] | None:
    """The ``count`` comma-separated fields of every line that has that many, and the (0-based) lines that
    do not."""
    others: list[int] = []

    def other(row: pa_csv.InvalidRow) -> str:
        others.append(-1 if row.number is None else row.number - 1)
        return "skip"

    table = pa_csv.read_csv(
        pa.BufferReader(pa.py_buffer(data)),
        read_options=pa_csv.ReadOptions(column_names=_NAMES[:count], use_threads=False, block_size=max(len(data) + 1, 1 << 20)),
        parse_options=pa_csv.ParseOptions(
            delimiter=",", quote_char=False, escape_char=False, double_quote=False, invalid_row_handler=other
        ),
        convert_options=_CONVERT,
    )
    if -1 in others or table.num_rows + len(others) != lines:  # empty lines are skipped silently
        return None
    return [_array(column) for column in table.columns], others


def _entries(fields: list[pa.Array], quotes: int | None, ascii: bool = False) -> tuple[pa.Table, pa.BooleanArray]:
    """(entries of :data:`ENTRY_SCHEMA` from the seven fields of each line, or eight with ``batchId`` last,
    whether each line is exactly its entry written back, i.e. in the layout). Every field must be its key
    and a value written as the writer writes it: numbers without a sign or a leading zero, a path and an
    action without a quote (the block has no backslash: no escapes), an ASCII action. ``quotes``: the
    quotes in the block, when these are all its lines; if every line has the layout's and no more, no path
    or action holds one. ``ascii``: the block is ASCII text, so its fields are valid UTF-8 as they are.
    ArrowInvalid for a number that does not parse (or does not fit 64 bits) and a field that is not valid
    UTF-8."""
    checks = []
    text = (lambda column: column.view(pa.string())) if ascii else _text
    stamped = len(fields) == 8

    def value(field: pa.Array, prefix: bytes, suffix: bytes = b"") -> pa.Array:
        checks.append(pc.starts_with(field, prefix.decode()))
        if suffix:  # and the two do not overlap
            ends = pc.and_(pc.ends_with(field, suffix.decode()), pc.greater_equal(pc.binary_length(field), len(prefix) + len(suffix)))
            checks[-1] = pc.and_(checks[-1], ends)
        return pc.binary_slice(field, len(prefix), -len(suffix) if suffix else 2**31 - 1)

    def number(field: pa.Array, key: str, suffix: bytes = b"") -> pa.Array:
        digits = value(field, f'"{key}":'.encode(), suffix)
        if checks[-1].false_count:  # another key here: not in the layout, parsed as 0
            digits = pc.if_else(checks[-1], digits, _ZERO)
        digits = text(digits)
        # the cast refuses anything but an optional sign and digits (the block then goes to the JSON parser);
        # a sign or a leading zero is not how the writer writes a size or a time: the digits must be as many
        # as the number's
        parsed = pc.cast(digits, pa.int64())
        shortest = np.maximum(np.searchsorted(_POWERS, parsed.to_numpy(), "right"), 1)
        checks.append(pa.array(pc.binary_length(digits).to_numpy() == shortest))
        return parsed

    n = len(fields[0])

    def once(field: pa.Array, read: Callable[[pa.Array], pa.Array]) -> pa.Array:
        """``read(field)``, which adds the field's checks; when every line holds the same bytes there (Spark's
        sink writes one blockReplication, blockSize and action), read on the first line and repeated."""
        if n < 2 or not _same_everywhere(field):
            return read(field)
        first = len(checks)
        result = read(field.slice(0, 1))
        held = all(check[0].as_py() for check in checks[first:])  # a null (not in the layout) counts as false
        checks[first:] = [] if held else [pa.repeat(False, n)]
        return _repeated(result, n)

    def action_field(field: pa.Array) -> pa.Array:
        action = text(value(field, b'"action":"', b'"' if stamped else b'"}'))
        checks.append(pc.string_is_ascii(action))
        return action

    path = text(value(fields[0], b'{"path":"', b'"'))
    action = once(fields[6], action_field)
    is_dir = pc.equal(fields[2], _TRUE)
    checks.append(pc.or_(is_dir, pc.equal(fields[2], _FALSE)))
    columns = {
        "path": path,
        "size": number(fields[1], "size"),
        "isDir": is_dir,
        "modificationTime": number(fields[3], "modificationTime"),
        "blockReplication": once(fields[4], lambda field: number(field, "blockReplication")),
        "blockSize": once(fields[5], lambda field: number(field, "blockSize")),
        "action": action,
    }
    if stamped:
        columns[BATCH_KEY] = once(fields[7], lambda field: number(field, BATCH_KEY, b"}"))
    layout = checks[0]
    for check in checks[1:]:
        layout = pc.and_(layout, check)
    if quotes != (_LAYOUT_QUOTES + 2 * stamped) * n or layout.false_count:
        layout = pc.and_(layout, pc.invert(pc.or_(pc.match_substring(path, '"'), pc.match_substring(action, '"'))))
    arrays = [columns[f.name] if f.name in columns else pa.nulls(n, f.type) for f in ENTRY_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=ENTRY_SCHEMA), pc.fill_null(layout, False)


def _same_everywhere(field: pa.BinaryArray) -> bool:
    """Whether every value of ``field`` (no nulls) holds the same bytes, compared as one block of rows."""
    _, offsets, data = field.buffers()
    bounds = np.frombuffer(offsets, np.int32, len(field) + 1, field.offset * 4)
    lengths = np.diff(bounds)
    if np.any(lengths != lengths[0]):
        return False
    if not lengths[0]:
        return True
    first = data[int(bounds[0]) : int(bounds[1])].to_pybytes()
    return data[int(bounds[0]) : int(bounds[-1])].equals(pa.py_buffer(first * len(field)))  # a memcmp


def _repeated(value: pa.Array, n: int) -> pa.Array:
    """The one value of ``value`` (an int64 or a string) ``n`` times."""
    if pa.types.is_integer(value.type):
        return pa.array(np.full(n, value[0].as_py(), np.int64), value.type)
    text = value[0].as_py().encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(text)
    return pa.Array.from_buffers(value.type, n, [None, pa.py_buffer(offsets), pa.py_buffer(text * n)])


_PIECE = 1 << 18  # bytes of a block scanned at once, into scratch memory that stays in the cache (256 KiB:
# a 64 KiB piece costs twice the time in per-call overhead; a whole 4 MiB block at once made compaction no faster)


def scan_pieces(buffer: np.ndarray, overlap: int = 0) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(start, piece, a scratch boolean array as long) for each piece of ``buffer``, each piece running
    ``overlap`` bytes into the next (to see a pair of bytes across two): a numpy temporary as big as a block
    would be fresh pages on every call (a page fault per 4 KiB costs more than the scan here).

    Example: ``[start for start, _, _ in scan_pieces(np.zeros(3 * _PIECE, np.uint8))] == [0, _PIECE, 2 * _PIECE]``.
    """
    found = np.empty(min(len(buffer), _PIECE + overlap), np.bool_)
    for start in range(0, len(buffer), _PIECE):
        piece = buffer[start : start + _PIECE + overlap]
        yield start, piece, found[: len(piece)]


def byte_positions(buffer: np.ndarray, byte: int) -> np.ndarray:
    """Where ``byte`` is in ``buffer``. Example: ``byte_positions(np.frombuffer(b"a\\nb", np.uint8), 10)`` -> ``[1]``."""
    hits = [np.flatnonzero(np.equal(piece, byte, out=found)) + start for start, piece, found in scan_pieces(buffer)]
    return np.concatenate(hits) if hits else np.empty(0, np.intp)


def newline_positions(buffer: np.ndarray) -> np.ndarray:
    """Where the newlines of ``buffer`` are: the compiled scanner's ``memchr`` (~3x numpy's scan), else
    :func:`byte_positions`. Example: ``newline_positions(np.frombuffer(b"a\\nb", np.uint8))`` -> ``[1]``."""
    if _layout is not None:
        return np.frombuffer(_layout.newlines(buffer), np.int32)
    return byte_positions(buffer, _NEWLINE)


def _byte_counts(buffer: np.ndarray) -> tuple[int, int, int]:
    """(bytes that are not ASCII text: control characters, newlines included, and bytes above 127; backslashes;
    quotes) in ``buffer``, in one pass."""
    codes = np.empty(min(len(buffer), _PIECE), np.uint8)
    odd = escapes = quotes = 0
    for _, piece, found in scan_pieces(buffer):
        np.subtract(piece, np.uint8(32), out=codes[: len(piece)])  # bytes below 32 and above 127 both wrap to >= 96
        odd += np.count_nonzero(np.greater_equal(codes[: len(piece)], 96, out=found))
        escapes += np.count_nonzero(np.equal(piece, _BACKSLASH, out=found))
        quotes += np.count_nonzero(np.equal(piece, _QUOTE, out=found))
    return odd, escapes, quotes


def parse_lines(data: bytes | memoryview, lines: int) -> tuple[pa.Table, pa.BooleanArray | None] | None:
    """(the entries of ``lines`` log lines (``data``, joined by ``\n``) as :data:`ENTRY_SCHEMA`, the
    same table a JSON parser gives; whether each line is in the layout, None for a block of a compact file
    this package wrote, whose lines carry ``batchId``), or None when this block is for the JSON parser and
    its line-by-line errors (an escape or a control character in it, many lines in another layout, a line
    that does not parse). Lines in the layout are read as fields; the few others by the JSON parser.

    Example: ``parse_lines(block.data, block.lines)[0].num_rows == block.lines``.
    """
    count = 8 if _stamped_block(data) else 7
    if _layout is not None and lines > 0:
        scanned = _scanned(data, lines, count == 8)
        if scanned is not None:
            return scanned
    buffer = np.frombuffer(data, np.uint8)
    odd, escapes, quotes = _byte_counts(buffer)
    if odd != lines - 1:  # more than the newlines is not ASCII text
        if np.count_nonzero(buffer < 32) != lines - 1 or not _is_utf8(data):
            return None  # a control character (corrupt) or invalid UTF-8: the JSON parser reports the line
    if escapes:
        return None  # an escape: the JSON parser reads those
    try:
        found = _fields(data, lines, count)
        if found is None:
            return None
        fields, others = found
        table, good = _entries(fields, None if others else quotes, odd == lines - 1)
    except pa.ArrowInvalid:
        return None
    if not others and good.false_count == 0:
        return table, good if count == 7 else None
    skipped = set(others)
    csv_lines = [row for row in range(lines) if row not in skipped] if others else range(lines)
    bad = sorted({*others, *(csv_lines[i] for i in nonzero(pc.invert(good)))})
    if len(bad) * _MAX_OTHERS > lines:
        return None
    merged = _merged(table.filter(good), bad, split_lines(data))
    if merged is None:
        return None
    layout = bytearray(b"\x01") * lines
    for line in bad:
        layout[line] = 0
    return merged, pa.Array.from_buffers(pa.uint8(), lines, [None, pa.py_buffer(layout)]).cast(pa.bool_()) if count == 7 else None


def _stamped_block(data: bytes | memoryview) -> bool:
    """Whether the block's lines carry ``batchId`` (a compact file this package wrote): most of the whole lines
    in its first bytes that start as the layout does end with it. Not the first line alone: a line in another
    layout there (a spaced one) would send every other line of the block to the JSON parser."""
    peeked = bytes(data[:_PEEK]).split(b"\n")
    if len(data) > _PEEK and len(peeked) > 1:
        peeked.pop()  # cut by the peek
    marks = [bool(_STAMPED.search(line)) for line in peeked if line.startswith(_LAYOUT_START)]
    return 2 * sum(marks) > len(marks)


def _scanned(data: bytes | memoryview, n: int, stamped: bool) -> tuple[pa.Table, pa.BooleanArray | None] | None:
    """:func:`parse_lines`'s answer from the compiled scanner, or None unless every line is in the layout. Its
    columns go into buffers of pyarrow's memory pool, which reuses them from block to block."""
    offsets = 4 * (n + 1)
    buffers = [pa.allocate_buffer(size) for size in (offsets, len(data), 8 * n, (n + 7) // 8, 8 * n, 8 * n, 8 * n, offsets, 8 * n)]
    batch = pa.allocate_buffer(8 * n) if stamped else None
    used = _layout.parse(data, n, stamped, *buffers, batch)
    if used is None:
        return None
    path_offsets, paths, size, is_dir, mtime, replication, block_size, action_offsets, actions = buffers

    def column(kind: pa.DataType, *values: pa.Buffer) -> pa.Array:
        return pa.Array.from_buffers(kind, n, [None, *values])

    found = {
        "path": column(pa.string(), path_offsets, paths.slice(0, used[0])),
        "size": column(pa.int64(), size),
        "isDir": column(pa.bool_(), is_dir),
        "modificationTime": column(pa.int64(), mtime),
        "blockReplication": column(pa.int64(), replication),
        "blockSize": column(pa.int64(), block_size),
        "action": column(pa.string(), action_offsets, actions.slice(0, used[1])),
    }
    if batch is not None:
        found[BATCH_KEY] = column(pa.int64(), batch)
    arrays = [found[f.name] if f.name in found else pa.nulls(n, f.type) for f in ENTRY_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=ENTRY_SCHEMA), None if stamped else pa.repeat(True, n)


def _merged(good: pa.Table, bad: list[int], lines: pa.BinaryArray) -> pa.Table | None:
    """The block's entries: ``good`` (lines in the layout, in order) with the ``bad`` lines parsed by the
    JSON parser in their places; None if one of those does not parse (the caller reports it)."""
    subset = b"\n".join(lines.take(bad).to_pylist())
    try:
        parsed = pa_json.read_json(pa.BufferReader(subset), parse_options=_JSON)
        parsed.validate(full=True)
    except pa.ArrowInvalid:
        return None
    if parsed.num_rows != len(bad) or any(parsed.column(key).null_count for key in REQUIRED_KEYS):
        return None
    pieces, taken, previous = [], 0, 0
    for index, line in enumerate(bad):
        pieces += [good.slice(taken, line - previous), parsed.slice(index, 1)]
        taken += line - previous
        previous = line + 1
    pieces.append(good.slice(taken))
    return pa.concat_tables(pieces)
