"""The compiled scanner trusts no caller (issue 36, item 12): sizes that would overflow, negative line counts,
starts that are not whole int32 values and buffers not aligned for the int32/int64 values written into or
read from them are a ValueError, never a crash or a write out of bounds. Each bad call runs in a child process,
so that a crash (the old scanner's answer to some of them) fails the test instead of the run."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

_layout = pytest.importorskip("parquet_sink.log._layout")

LINE = b'{"path":"file:///o/a.parquet","size":1,"isDir":false,"modificationTime":2,"blockReplication":1,"blockSize":3,"action":"add"}'

_CHILD = textwrap.dedent(
    """
    import sys
    import numpy as np
    from parquet_sink.log import _layout

    LINE = %r
    def buffers(lines, shift=0):
        sizes = [(lines + 1) * 4, len(LINE), lines * 8, (lines + 7) // 8, lines * 8, lines * 8, lines * 8,
                 (lines + 1) * 4, lines * 8]
        return [memoryview(np.zeros(size + 16, np.uint8))[shift : shift + size] for size in sizes]

    def bad_lines(lines):
        return _layout.parse(LINE, lines, False, *buffers(1), None)

    CALLS = {
        "parse-negative-lines": lambda: bad_lines(-1),
        "parse-overflowing-lines": lambda: bad_lines(2**61),
        "parse-huge-lines": lambda: bad_lines(2**62 + 1),
        "parse-unaligned-columns": lambda: _layout.parse(LINE, 1, False, *buffers(1, shift=1), None),
        "parse-unaligned-batch": lambda: _layout.parse(
            LINE, 1, True, *buffers(1), memoryview(np.zeros(24, np.uint8))[3:11]),
        "stamp-partial-start": lambda: _layout.stamp(LINE, b"\\0\\0\\0\\0\\1", b"x", bytearray(len(LINE) + 1)),
        "stamp-unaligned-starts": lambda: _layout.stamp(
            LINE, memoryview(np.zeros(12, np.uint8))[1:5], b"x", bytearray(len(LINE) + 1)),
    }
    try:
        CALLS[sys.argv[1]]()
    except ValueError as exc:
        print("ValueError", exc)
    else:
        print("accepted")
    """
) % (LINE,)


def test_a_good_call_still_parses():
    import numpy as np

    lines = 1
    sizes = [(lines + 1) * 4, len(LINE), 8, 1, 8, 8, 8, (lines + 1) * 4, 8]
    out = [np.zeros(size, np.uint8) for size in sizes]
    assert _layout.parse(LINE, lines, False, *out, None) is not None
    assert np.frombuffer(out[2], np.int64)[0] == 1 and np.frombuffer(out[4], np.int64)[0] == 2


@pytest.mark.parametrize("call", [
    "parse-negative-lines", "parse-overflowing-lines", "parse-huge-lines", "parse-unaligned-columns",
    "parse-unaligned-batch", "stamp-partial-start", "stamp-unaligned-starts",
])
def test_bad_arguments_are_a_value_error_not_a_crash(call):
    result = subprocess.run([sys.executable, "-c", _CHILD, call], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"the scanner crashed (exit {result.returncode}): {result.stderr[-2000:]}"
    assert result.stdout.startswith("ValueError"), result.stdout
