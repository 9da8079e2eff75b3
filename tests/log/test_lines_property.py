"""Property-based: the column-wise line reader (``log/lines.py``) against the JSON parser, the oracle.

Blocks of log lines as Spark's sink writes them (seven keys), as this package's compact files hold them (eight,
``batchId`` last), with commit records, other spacing or key order, escapes, commas and quotes in paths,
numbers at the int64 edges: whenever :func:`parse_lines` answers, its entries are the JSON parser's row for
row, every line it says is in the layout is exactly its entry written back, and the ``batchId`` it stamps
into a delta's lines is what :meth:`LogEntry.to_json` writes. Only blocks with an escape or with many lines in
another layout may be left to the JSON parser (~4x slower): a fast path gone dead fails too. Each runs twice:
with the compiled scanner (``log/_layout.c``) and with the column-wise reader a build without a compiler uses;
a differential test holds the two to the same answers on lines bent just off the layout.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from parquet_sink.log.entry import ENTRY_SCHEMA, LogEntry, entry_from_row
from parquet_sink.log import files, lines as log_lines
from parquet_sink.log.lines import framed_lines, joined, parse_lines, stamped_lines
from parquet_sink.storage.filesystem import Storage

_JSON = pa_json.ParseOptions(explicit_schema=ENTRY_SCHEMA, unexpected_field_behavior="ignore")
_RECORD = {"commitId": "c0001", "queryId": "5f2c1a9e-7c4b-4d0e-9a61-000000000001", "queryBatchId": 3}

plain_paths = st.text("abz09-_./", min_size=1, max_size=30).map(lambda s: "file:///out/" + s)
# a comma splits a line into more fields; a quote or a tab is escaped (a backslash); é and ü are UTF-8 as they are
odd_paths = st.text("abz,\"\t\\é ü{}:", min_size=1, max_size=12).map(lambda s: "file:///out/" + s)
numbers = st.sampled_from([0, 1, 9, 10, 4096, 10**18, 2**63 - 1]) | st.integers(0, 2**63 - 1)


@st.composite
def entries(draw: st.DrawFn, stamped: bool, odd: bool, spark: bool = False) -> LogEntry:
    """An entry; ``spark``: with the replication, block size and action Spark's sink writes on every line."""
    return LogEntry(
        draw(odd_paths if odd else plain_paths),
        draw(numbers),
        draw(st.booleans()),
        draw(numbers),
        1 if spark else draw(st.integers(0, 3)),
        134217728 if spark else draw(numbers),
        "add" if spark else draw(st.sampled_from(["add", "delete", "ädd", "x\"y"] if odd else ["add", "delete"])),
        draw(st.sampled_from([0, 7]) if spark else st.integers(0, 10**6)) if stamped else None,
        _RECORD if odd and draw(st.booleans()) else {},
    )


def _other_layout(entry: LogEntry, how: str) -> str:
    """The entry as another writer might lay it out: spaced, keys reversed, non-ASCII escaped."""
    obj = json.loads(entry.to_json())
    if how == "spaced":
        return json.dumps(obj, ensure_ascii=False)
    if how == "reversed":
        return json.dumps(dict(reversed(list(obj.items()))), separators=(",", ":"), ensure_ascii=False)
    return json.dumps(obj, separators=(",", ":"))  # \u escapes


@st.composite
def blocks(draw: st.DrawFn, odd_lines: bool = True) -> tuple[list[str], int]:
    """(a block's lines: mostly one writer's layout (or all with the same action written another way), then a
    few odd ones at random places; how many are odd)."""
    stamped, spark = draw(st.booleans()), draw(st.booleans())
    lines = [e.to_json() for e in draw(st.lists(entries(stamped, False, spark), min_size=1, max_size=40))]
    unlike = 0  # lines not in the layout
    if spark and draw(st.booleans()):  # the same bytes on every line, not as the writer writes them (it escapes ä)
        lines = [line.replace('"action":"add"', '"action":"ädd"') for line in lines]
        unlike = len(lines)
    odd = draw(st.integers(0, 4)) if odd_lines else 0
    if odd:
        for _ in range(odd):
            entry = draw(entries(stamped, True))
            how = draw(st.sampled_from(["as written", "spaced", "reversed", "escaped"]))
            line = entry.to_json() if how == "as written" else _other_layout(entry, how)
            # first, half the time: a block once went to the JSON parser whole when its first line was spaced
            lines.insert(0 if draw(st.booleans()) else draw(st.integers(0, len(lines))), line)
    return lines, unlike + odd


def _check(lines: list[str], odd: int) -> None:
    """The properties of one block of ``lines``, ``odd`` of them perhaps not in the layout."""
    data = "\n".join(lines).encode()
    parsed = parse_lines(data, len(lines))
    if parsed is None:  # only a block with an escape, or with many lines in another layout, is the JSON parser's
        assert b"\\" in data or odd * 8 > len(lines), lines
        return
    table, layout = parsed
    assert table.to_pylist() == pa_json.read_json(pa.BufferReader(data), parse_options=_JSON).to_pylist()
    if layout is not None:  # lines of Spark's layout: those marked are their entries written back
        rows = table.to_pylist()
        for line, row, marked in zip(lines, rows, layout.to_pylist()):
            if marked:
                assert line == entry_from_row(row).to_json()
        framed = framed_lines(b"\n" + data)
        assert framed.to_pylist() == [b"\n" + line.encode() for line in lines]
        expected = [b"\n" + entry_from_row({**row, "batchId": 7}).to_json().encode() for row in rows]
        marks = layout.to_pylist()
        # with the parse's layout, exactly the lines it marked are stamped column-wise; checked against the
        # entries, those and perhaps more (a comma in a path splits a line's fields: the column-wise reader leaves
        # it to the JSON parser, yet it is its entry written back); every line stamped is its entry's
        assert stamped_lines(framed, None, 7, layout)[1].to_pylist() == [not marked for marked in marks]
        for out, redo in (stamped_lines(framed, None, 7, layout), stamped_lines(framed, table, 7)):
            stamped = [not again for again in redo.to_pylist()]
            assert all(done for done, marked in zip(stamped, marks) if marked)
            assert [v for v, done in zip(out.to_pylist(), stamped) if done] == [
                e for e, done in zip(expected, stamped) if done]
            assert joined(out).to_pybytes() == b"".join(out.to_pylist())


def _config(fuzz_minutes: float, examples: int) -> settings:
    if fuzz_minutes:
        return settings(max_examples=10_000, derandomize=False, deadline=None, database=None,
                        suppress_health_check=list(HealthCheck))
    return settings(max_examples=examples, derandomize=True, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


@pytest.fixture(params=["compiled", "column-wise"])
def scanner(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Lines read by the compiled scanner first, or by the column-wise reader alone (a build without a compiler)."""
    if request.param == "column-wise":
        monkeypatch.setattr(log_lines, "_layout", None)
    return request.param


def test_the_compiled_scanner_is_built() -> None:
    assert log_lines._layout is not None, "log/_layout.c is not built: reinstall with a C compiler (./dev.sh setup)"


def test_lines_read_as_fields_match_the_json_parser(scanner: str, fuzz_minutes: float) -> None:
    comma = LogEntry("file:///out/,", 0, False, 0, 0, 0, "add").to_json()  # found by the fuzzer: see _check
    plain = LogEntry("file:///out/0", 0, False, 0, 0, 0, "add").to_json()

    @_config(fuzz_minutes, 300)
    @given(blocks())
    @example(([comma] + [plain] * 8, 1))
    def run(block: tuple[list[str], int]) -> None:
        _check(*block)

    deadline = time.monotonic() + 60 * fuzz_minutes
    run()
    while time.monotonic() < deadline:
        run()


def test_blocks_with_invalid_utf8_go_to_the_json_parser(scanner: str, fuzz_minutes: float) -> None:
    """A byte that is not UTF-8 anywhere in a block (the shape of a defect: it once raised inside Arrow's CSV
    reader) sends the block to the JSON parser, which names the line, quietly."""

    @_config(fuzz_minutes, 100)
    @given(blocks(), st.data())
    def run(block: tuple[list[str], int], data: st.DataObject) -> None:
        lines = block[0]
        raw = bytearray("\n".join(lines).encode())
        at = data.draw(st.sampled_from([i for i, byte in enumerate(raw) if byte != 10]))
        raw[at] = data.draw(st.sampled_from([0x80, 0xC3, 0xFF]))
        try:
            bytes(raw).decode()
        except UnicodeDecodeError:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                assert parse_lines(bytes(raw), len(lines)) is None

    run()


# Ways to bend one line just off the layout, each a byte or a few from it: where the compiled scanner checks
# a byte, and the column-wise reader checks it another way (a number's digits, the text of a path, the ends).
_BENDS = [
    (rb'"size":(\d+)', rb'"size":0\1'),  # a leading zero (not JSON)
    (rb'"size":(\d+)', rb'"size":-\1'),  # a sign (JSON, not how the writer writes a size)
    (rb'"modificationTime":\d+', b'"modificationTime":9223372036854775808'),  # 2**63: does not fit an int64
    (rb'"modificationTime":\d+', b'"modificationTime":9999999999999999999'),  # 19 digits, out of range
    (rb'"modificationTime":\d+', b'"modificationTime":00'),
    (rb'"blockSize":\d+', b'"blockSize":'),  # no digits
    (rb'"blockSize":(\d+)', rb'"blockSize":\1.0'),  # a float
    (rb'"isDir":false', b'"isDir":False'),
    (rb'"path":"', b'"path":"\x7f'),  # DEL: ASCII text, written as it is
    (rb'"path":"', b'"path":"\x1f'),  # a control character (not JSON)
    (rb'"path":"', '"path":"\u00e9'.encode()),  # UTF-8, written as it is
    (rb'"path":"', b'"path":"\x80'),  # not UTF-8
    (rb'"path":"', b'"path":"\\\\'),  # an escaped backslash
    (rb'"path":"', b'"path":"\\"'),  # an escaped quote
    (rb'"action":"add"', b'"action":"addition"'),  # a longer action than the writer's
    (rb'"action":"add"', b'"action":""'),
    (rb'"path":"[^"]*"', b'"path":""'),  # an empty path
    (rb'}$', b'} '),  # after the closing brace
    (rb'}$', b'}\r'),  # a Windows line end
    (rb'}$', b''),  # no closing brace
    (rb'^{', b' {'),
    (rb'^.*$', b''),  # an empty line
    (rb',"batchId":\d+', b''),  # a compact file's line without its batchId
    (rb'"action":"(\w*)"}', rb'"action":"\1","batchId":3}'),  # a delta's line with one
]


@st.composite
def bent_blocks(draw: st.DrawFn) -> tuple[list[bytes], bool]:
    """(a block's lines in one layout, a few of them bent just off it; whether none was bent)."""
    stamped, spark = draw(st.booleans()), draw(st.booleans())
    lines = [e.to_json().encode() for e in draw(st.lists(entries(stamped, False, spark), min_size=1, max_size=30))]
    bends = draw(st.lists(st.tuples(st.integers(0, len(lines) - 1), st.sampled_from(_BENDS)), max_size=3))
    for at, (pattern, replacement) in bends:
        literal = b"\\1" not in replacement  # a backslash in a literal is a byte of the line
        lines[at] = re.sub(pattern, (lambda _, r=replacement: r) if literal else replacement, lines[at], count=1)
    return lines, not bends


def test_the_compiled_scanner_answers_as_the_column_wise_reader(monkeypatch, fuzz_minutes: float) -> None:
    """The compiled scanner (answering only for a block whose every line is in the layout) and the column-wise
    reader give the same answer for every block, lines bent just off the layout included: the same entries and
    layout, or both leave the block to the JSON parser. A block of lines as the writer writes them (ASCII
    paths) is the scanner's to answer: it must not fall back."""
    scan = log_lines._layout
    assert scan is not None

    @_config(fuzz_minutes, 400)
    @given(bent_blocks())
    def run(block: tuple[list[bytes], bool]) -> None:
        lines, as_written = block
        data = b"\n".join(lines)
        compiled = parse_lines(data, len(lines))
        monkeypatch.setattr(log_lines, "_layout", None)
        try:
            reference = parse_lines(data, len(lines))
        finally:
            monkeypatch.setattr(log_lines, "_layout", scan)
        assert (compiled is None) == (reference is None), lines
        if compiled is not None:
            assert compiled[0].equals(reference[0]), lines
            assert (compiled[1] is None) == (reference[1] is None) and (compiled[1] is None or compiled[1].equals(reference[1]))
        if as_written:
            assert log_lines._scanned(data, len(lines), b'"batchId"' in lines[0]) is not None, lines

    deadline = time.monotonic() + 60 * fuzz_minutes
    run()
    while time.monotonic() < deadline:
        run()


def test_blocks_read_into_reused_buffers_keep_their_bytes(tmp_path, monkeypatch, fuzz_minutes: float) -> None:
    """A log file read in blocks of a few lines, into buffers reused once free: lines taken without a copy
    from any blocks (kept by a parse thread, a compaction's output) still hold their bytes after every
    later block was read, and the blocks give back the file's lines, in order, numbered from 2."""
    from parquet_sink.log import files as log_files
    from parquet_sink.storage.filesystem import Storage

    storage = Storage(str(tmp_path))
    files = log_files.LogFiles(storage)
    path = storage.join("_spark_metadata/0")
    os.makedirs(os.path.dirname(path), exist_ok=True)

    @_config(fuzz_minutes, 60)
    @given(blocks(odd_lines=False), st.integers(1, 400), st.data())
    def run(block: tuple[list[str], int], size: int, data: st.DataObject) -> None:
        lines = [line.encode() for line in block[0]]
        with open(path, "wb") as fh:
            fh.write(b"v1\n" + b"\n".join(lines))
        monkeypatch.setattr(log_files, "_BLOCK", size)
        kept, seen, number = [], [], 2
        for read in files.blocks(path, 0):
            assert read.first_line == number and read.framed[:1] == b"\n"
            values = framed_lines(read.framed)
            assert len(values) == read.lines
            number += read.lines
            seen += values.to_pylist()
            if data.draw(st.booleans()):
                kept.append((len(seen) - len(values), values))
        assert seen == [b"\n" + line for line in lines]
        for start, values in kept:
            assert values.to_pylist() == seen[start : start + len(values)]

    run()


@pytest.mark.parametrize("piece", [None, 5], ids=["pieces of 256 KiB", "pieces of 5 bytes"])
def test_bytes_counted_piece_by_piece_match_numpy(monkeypatch, piece) -> None:
    """The scans a block gets (newlines, the bytes that send it to the JSON parser, quotes) run piece by
    piece in scratch memory: they must count and place what one numpy expression over the block does."""
    from parquet_sink.log import lines as log_lines

    if piece:
        monkeypatch.setattr(log_lines, "_PIECE", piece)

    @settings(max_examples=200, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.binary(max_size=64) | st.lists(st.sampled_from([b"\n", b'"', b"\\", b"a", b"\x01", b"\xc3\xa9", b"\xff"])).map(b"".join))
    def run(data: bytes) -> None:
        buffer = np.frombuffer(data, np.uint8)
        assert log_lines.byte_positions(buffer, 10).tolist() == np.flatnonzero(buffer == 10).tolist()
        odd = np.count_nonzero((buffer < 32) | (buffer > 127))
        assert log_lines._byte_counts(buffer) == (odd, np.count_nonzero(buffer == 92), np.count_nonzero(buffer == 34))

    run()


def test_the_compiled_scanner_refuses_buffers_too_small_for_the_lines() -> None:
    """The scanner writes into the caller's buffers: one too small for the lines is a ValueError, never a write
    past its end."""
    line = LogEntry("file:///out/a", 1, False, 1, 1, 1, "add").to_json().encode()
    sizes = [4 * 3, 2 * len(line) + 1, 16, 1, 16, 16, 16, 4 * 3, 16]
    assert log_lines._layout.parse(line + b"\n" + line, 2, False, *[bytearray(s) for s in sizes], None) == (26, 6)
    for short in range(len(sizes)):
        small = [bytearray(s - 1 if i == short else s) for i, s in enumerate(sizes)]
        with pytest.raises(ValueError):
            log_lines._layout.parse(line + b"\n" + line, 2, False, *small, None)
    with pytest.raises(ValueError):
        log_lines._layout.parse(line + b"\n" + line, 2, True, *[bytearray(s) for s in sizes], bytearray(15))


def test_the_compiled_newline_scan_and_stamp_match_numpy_and_arrow() -> None:
    """The compiled scanner's newline positions are numpy's, and the lines it stamps are Arrow's
    ``binary_replace_slice(lines, -1, -1, text)`` (text before each line's last byte), over a slice of an
    array too (an offset into the buffers)."""
    import pyarrow.compute as pc

    @settings(max_examples=300, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(
        st.lists(st.binary(max_size=12).map(lambda b: b"\n" + b), min_size=1, max_size=30),
        st.binary(max_size=16),
        st.data(),
    )
    def run(values: list[bytes], text: bytes, data: st.DataObject) -> None:
        framed = b"".join(values)
        buffer = np.frombuffer(framed, np.uint8)
        assert log_lines.newline_positions(buffer).tolist() == np.flatnonzero(buffer == 10).tolist()
        lines = pa.array(values, pa.binary())
        start = data.draw(st.integers(0, len(values) - 1))
        lines = lines.slice(start, data.draw(st.integers(1, len(values) - start)))
        stamped = log_lines._stamped(lines, text)
        stamped.validate(full=True)
        assert stamped.to_pylist() == pc.binary_replace_slice(lines, -1, -1, text).to_pylist()

    run()


@pytest.mark.parametrize("first", ["spaced", "reversed", "as written"])
def test_a_block_whose_first_line_is_in_another_layout_is_read_as_fields(scanner: str, first: str) -> None:
    """Found by the fuzzer: whether a block's lines carry ``batchId`` was judged on its first line alone, so a
    compact file's block starting with a spaced line (one another writer laid out) went to the JSON parser
    whole. Most of its first lines decide; the one odd line is the JSON parser's, the rest are read as fields."""
    lines = [LogEntry(f"file:///out/{i}", i, False, i, 1, 134217728, "add", 3).to_json() for i in range(20)]
    odd = LogEntry("file:///out/x", 1, False, 1, 1, 1, "add", 3)
    lines.insert(0, odd.to_json() if first == "as written" else _other_layout(odd, first))
    data = "\n".join(lines).encode()
    parsed = parse_lines(data, len(lines))
    assert parsed is not None
    assert parsed[0].to_pylist() == pa_json.read_json(pa.BufferReader(data), parse_options=_JSON).to_pylist()


@st.composite
def delta_blocks(draw: st.DrawFn) -> list[str]:
    """A delta's lines as the sink writes them: data entries carrying their file's statistics (JSON text inside
    the line, escaped: the line scanners leave such lines to a JSON parser), other entries, perhaps in another
    layout, and a commit record; a few lines or more than a JSON parser's fixed cost is worth."""
    values = st.integers(-(2**63), 2**63 - 1) | st.text(max_size=6) | st.floats(allow_nan=False) | st.none()
    lines = []
    for entry in draw(st.lists(entries(False, draw(st.booleans())), min_size=1, max_size=2 * files._FEW_LINES)):
        if draw(st.booleans()):
            stats = {"numRecords": draw(numbers), "minValues": {"c": draw(values)}, "nullCount": {"c": draw(numbers)}}
            entry = dataclasses.replace(entry, extra={**entry.extra, "stats": json.dumps(stats, ensure_ascii=draw(st.booleans()))})
        how = draw(st.sampled_from(["as written", "as written", "spaced", "escaped"]))
        lines.append(entry.to_json() if how == "as written" else _other_layout(entry, how))
    return lines


def test_a_deltas_entries_with_statistics_are_the_json_parsers(tmp_path, fuzz_minutes: float) -> None:
    """A block the line scanners leave to a JSON parser (every delta the sink writes: its entries carry statistics)
    is parsed line by line when it has a few lines (Arrow's JSON parser costs more than those lines), by Arrow's
    JSON parser otherwise: either way the entries are the JSON parser's, row for row."""
    path = tmp_path / "0"
    log = files.LogFiles(Storage(str(tmp_path)))

    @_config(fuzz_minutes, 200)
    @given(delta_blocks())
    def run(lines: list[str]) -> None:
        data = "\n".join(lines).encode()
        path.write_bytes(b"v1\n" + data)
        [block] = list(log.blocks(str(path), 0))
        expected = pa_json.read_json(pa.BufferReader(data), parse_options=_JSON)
        assert log.parse_block(block, str(path), 0).to_pylist() == expected.to_pylist(), lines

    deadline = time.monotonic() + 60 * fuzz_minutes
    run()
    while time.monotonic() < deadline:
        run()
