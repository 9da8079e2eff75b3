"""Property-based: a compact file without a columnar copy, read through the copy of an older compact file
whose bytes it starts with (``LogFiles._older_copy``: how a reader follows an output Spark's sink keeps
compacting), against the JSON parser reading the whole file, the oracle.

Older compact files and the lines after them come from the line generator of ``test_lines_property`` (Spark's
layout, this package's, commit records, other layouts, escapes). The newer file follows the older one byte for
byte, or nearly: two of its lines swapped (same size, other bytes), its last line gone, a space before the
line break, nothing after it. Whatever the file, the reader answers what its JSON says and the copy it stores
holds the same entries; only a file that does follow the older one is read from its copy, parsing just the
new lines (a derivation gone dead fails too).
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from parquet_sink.errors import CorruptLogError
from parquet_sink.log import files as log_files
from parquet_sink.log.metadata_log import MetadataLog
from parquet_sink.log.sidecar import sidecar_path

from .test_lines_property import _config, blocks

HOW = ["follows", "swapped", "shorter", "spaced", "same"]


def _newer(older: bytes, base: list[str], tail: list[str], how: str) -> bytes:
    """The newer compact file's bytes, from the older one's (``base``: its lines) and new lines ``tail``."""
    new = "".join("\n" + line for line in tail).encode()
    if how == "follows":
        return older + new
    if how == "swapped" and len(base) > 1:
        lines = [base[-1], *base[1:-1], base[0]]
        return ("v1\n" + "\n".join(lines)).encode() + new
    if how == "shorter" and len(base) > 1:
        return ("v1\n" + "\n".join(base[:-1])).encode() + new
    if how == "spaced":
        return older + b" " + new
    return older


def test_a_compact_file_read_from_an_older_copy_is_its_json(tmp_path, monkeypatch, fuzz_minutes: float) -> None:
    monkeypatch.setattr(log_files, "COPY_MIN_BYTES", 1)  # every compact file gets a copy, and serves as a base

    line = '{"path":"file:///out/0","size":0,"isDir":%s,"modificationTime":0,"blockReplication":%d,"blockSize":0,"action":"add"}'
    first, second = line % ("false", 0), line % ("true", 2)

    @given(base=blocks(), tail=blocks(), how=st.sampled_from(HOW))
    @example(base=([first, second], 0), tail=([second, first], 0), how="shorter")
    @_config(fuzz_minutes, 150)
    def check(base: tuple[list[str], int], tail: tuple[list[str], int], how: str) -> None:
        root = tmp_path / uuid.uuid4().hex
        meta = root / "_spark_metadata"
        meta.mkdir(parents=True)
        older = ("v1\n" + "\n".join(base[0])).encode()
        (meta / "9.compact").write_bytes(older)
        log = MetadataLog(str(root), cleanup=False)
        log.write_columnar_copy(9)
        newer = _newer(older, base[0], tail[0], how)
        path = str(meta / "19.compact")
        (meta / "19.compact").write_bytes(newer)
        try:
            expected = log._parse_table(path, 19, None).to_pylist()  # the whole JSON, no copy used or stored
        except CorruptLogError:
            with pytest.raises(CorruptLogError):
                log.read_table(path, 19, log.list_names().sidecars)
            return
        parsed = []
        parse = log.parse_block_layout

        def counted(block: log_files.Block, *args: object) -> object:
            parsed.append(block.lines)
            return parse(block, *args)

        log.parse_block_layout = counted  # type: ignore[method-assign]
        assert log.read_table(path, 19, log.list_names().sidecars).to_pylist() == expected
        follows = newer.startswith(older + b"\n")  # by design, or by chance (a file "shorter" by its last line
        # that the new lines give back: found by the fuzzer)
        new_lines = newer[len(older) + 1 :].count(b"\n") + 1
        assert sum(parsed) == (new_lines if follows else newer.count(b"\n")), how  # only the new lines, or all
        stored = log.read_sidecar(sidecar_path(path), path, 19)
        assert stored is not None and stored.size == len(newer) and stored.table().to_pylist() == expected

    check()
