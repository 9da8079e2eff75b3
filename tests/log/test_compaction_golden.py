"""Compact files stay byte-identical: each shape of log below is compacted and the compact file compared,
byte for byte, with the output recorded (``tests/log/golden/``) from the per-line implementation that
parsed and re-serialised every delta line. Shapes: deltas written by Spark (lean lines, no ``batchId``),
by older versions of this package (``batchId`` in the delta), lines Spark or a hand edit may lay out
differently (spaces, key order, escapes), commit records of several queries (kept, stripped, dropped),
retention (dropped entries, records kept as entries of their own, a marker), and a compact file Spark
wrote (no copy), one of ours with its copy and one of ours whose copy was deleted.

Regenerate a golden file only for a deliberate format change: ``PARQUET_SINK_GOLDEN=write pytest ...``.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from parquet_sink.log import compaction as log_compaction
from parquet_sink.log import files as log_files
from parquet_sink.log.metadata_log import CommitRecord, LogEntry, MetadataLog
from parquet_sink.storage.filesystem import Storage

GOLDEN = Path(__file__).parent / "golden"
ROOT = "@ROOT@"  # the output root in the recorded files
NOW_MS = 1_700_000_000_000
DAY_MS = 86_400_000


def _spark_line(root: Path, name: str, size: int, mtime: int) -> str:
    return (
        f'{{"path":"file://{root}/{name}","size":{size},"isDir":false,"modificationTime":{mtime},'
        '"blockReplication":1,"blockSize":33554432,"action":"add"}'
    )


def _odd_lines(root: Path, batch: int) -> list[str]:
    """Lines that parse to valid entries but that the writer would lay out differently."""
    uri = f"file://{root}"
    return [
        f'{{"path": "{uri}/spaced-{batch}.parquet", "size": 7, "isDir": false, "modificationTime": {NOW_MS}, '
        '"blockReplication": 1, "blockSize": 33554432, "action": "add"}',
        f'{{"size":8,"path":"{uri}/reordered-{batch}.parquet","isDir":false,"modificationTime":{NOW_MS},'
        '"blockReplication":1,"blockSize":33554432,"action":"add"}',
        f'{{"path":"{uri}/caf\\u00e9-{batch}.parquet","size":9,"isDir":false,"modificationTime":{NOW_MS},'
        '"blockReplication":1,"blockSize":33554432,"action":"add"}',
        f'{{"path":"{uri}/café-{batch}.parquet","size":10,"isDir":false,"modificationTime":{NOW_MS},'
        '"blockReplication":1,"blockSize":33554432,"action":"add"}',
        f'{{"path":"{uri}/quote\\"back\\\\slash\\/tab\\t-{batch}.parquet","size":11,"isDir":false,'
        f'"modificationTime":{NOW_MS},"blockReplication":1,"blockSize":33554432,"action":"add"}}',
        f'{{"path":"{uri}/extra-{batch}.parquet","size":12,"isDir":false,"modificationTime":{NOW_MS},'
        '"blockReplication":1,"blockSize":33554432,"action":"add","unknown":{"nested":[1,2]},"flag":true}',
        f'{{"path":"{uri}/neg-{batch}.parquet","size":-0,"isDir":false,"modificationTime":{NOW_MS},'
        '"blockReplication":1,"blockSize":33554432,"action":"delete"}',
        f'{{"path":"{uri}/stamped-{batch}.parquet","size":13,"isDir":false,"modificationTime":{NOW_MS},'
        f'"blockReplication":1,"blockSize":33554432,"action":"add","batchId":{batch}}}',
        f'{{"path":"{uri}/dir-{batch}","size":0,"isDir":true,"modificationTime":{NOW_MS},'
        '"blockReplication":0,"blockSize":0,"action":"add"}',
    ]


def _write(root: Path, name: str, lines: list[str]) -> None:
    meta = root / "_spark_metadata"
    meta.mkdir(parents=True, exist_ok=True)
    (meta / name).write_bytes(("v1" + "".join("\n" + line for line in lines)).encode())


def _ours(
    root: Path, batch: int, query: str, query_batch: int, files: int, mtime: int, n: int, figures: bool = False
) -> list[LogEntry]:
    """A batch's entries as the sink writes them (``figures``: with its commit time and rows), or as
    versions before the batch figures wrote them (the recorded outputs of those shapes)."""
    storage = Storage(str(root))
    record = CommitRecord(batch, query, query_batch, f"c{batch:04d}{query[:2]}")
    data = [LogEntry(f"file://{root}/q-{batch}-{k}.parquet", 100 + k, False, mtime) for k in range(files)]
    data = data[:n] if n >= 0 else data
    if figures:
        return record.log_entries(storage, mtime if files else NOW_MS, data, rows=10 * batch + len(data))
    if not data:
        return [record.to_entry(storage, NOW_MS)]
    return [dataclasses.replace(data[0], extra=record.keys), *data[1:]]


def _build(root: Path, shape: str) -> tuple[MetadataLog, int]:
    """The log of ``shape`` up to the batch before a compaction; returns the log and that batch."""
    retention = "1d" if shape.endswith("retention") else None
    log = MetadataLog(str(root), compact_interval=5, cleanup=False, retention=retention)
    if shape == "spark_deltas":  # nine Spark deltas of lean lines, no compact file yet (interval 10)
        log = MetadataLog(str(root), compact_interval=10, cleanup=False)
        for b in range(9):
            _write(root, str(b), [_spark_line(root, f"s-{b}-{k}.parquet", 1000 + k, NOW_MS + b) for k in range(40)])
        return log, 9
    if shape == "odd_lines":
        log = MetadataLog(str(root), compact_interval=10, cleanup=False)
        for b in range(9):
            _write(root, str(b), [_spark_line(root, f"s-{b}-0.parquet", 1, NOW_MS), *_odd_lines(root, b)])
        return log, 9
    if shape == "old_entries":  # deltas an older version wrote: batchId and records on the entries
        log = MetadataLog(str(root), compact_interval=10, cleanup=False)
        for b in range(9):
            entries = _ours(root, b, "q1", b, 3, NOW_MS, -1)
            _write(root, str(b), [e.to_json() for e in entries])
        return log, 9
    if shape in ("records", "retention", "figures", "figures_retention"):
        # batches 0-8: query q1 (0-3), an empty batch of q1 (4), query q2 restarting its batch ids (5-7),
        # q1 again (8); with retention, half the entries are older than a day
        plan = [("q1", 0, 3), ("q1", 1, 2), ("q1", 2, 1), ("q1", 3, 2), ("q1", 4, 0), ("q2", 0, 2),
                ("q2", 1, 1), ("q2", 2, 0), ("q1", 5, 2)]
        for b, (query, query_batch, files) in enumerate(plan):
            old = shape.endswith("retention") and b % 2 == 0
            mtime = NOW_MS - 3 * DAY_MS if old else NOW_MS - b
            assert log.add(b, _ours(root, b, query, query_batch, files, mtime, -1, shape.startswith("figures")))
        return log, 9
    # a compact file at batch 4 (Spark's, ours with a copy, ours whose copy is gone), then deltas 5-8
    if shape.startswith("spark_compact"):
        # with retention, every third entry of Spark's compact file is older than a day; "then_ours": our sink
        # continues Spark's output (deltas with commit records)
        old = [NOW_MS - 3 * DAY_MS if shape.endswith("retention") and k % 3 == 0 else NOW_MS for k in range(60)]
        _write(root, "4.compact", [_spark_line(root, f"s-{k}.parquet", 500 + k, old[k]) for k in range(60)])
        for b in range(5, 9):
            if shape.endswith("then_ours"):
                assert log.add(b, _ours(root, b, "q1", b - 5, 2, NOW_MS - b, -1, figures=True))
            else:
                _write(root, str(b), [_spark_line(root, f"s-{b}-{k}.parquet", 1000 + k, NOW_MS) for k in range(5)])
        return log, 9
    for b in range(9):
        assert log.add(b, _ours(root, b, "q1", b, 2, NOW_MS - b, -1))
    if shape == "ours_compact_no_copy":
        os.remove(root / "_spark_metadata" / "4.compact.columnar")
    return log, 9


SHAPES = ["spark_deltas", "odd_lines", "old_entries", "records", "retention", "spark_compact", "ours_compact",
          "ours_compact_no_copy", "figures", "figures_retention", "spark_compact_retention", "spark_compact_then_ours"]


@pytest.mark.parametrize("block", [None, 300], ids=["blocks of 4 MiB", "blocks of 300 bytes"])
@pytest.mark.parametrize("shape", SHAPES)
def test_compact_file_is_byte_identical_to_the_recorded_output(tmp_path, monkeypatch, shape, block):
    """Blocks of 300 bytes (a line or two) split every file into many blocks, parsed on threads: some go
    straight into the new columnar copy and are stamped in pass one, the rest (from the first commit record
    or line for the JSON parser on) wait for pass two; the bytes must not depend on where blocks end."""
    root = tmp_path / "out"
    monkeypatch.setattr(log_compaction.time, "time", lambda: NOW_MS / 1000)  # the retention marker's time
    if block:
        monkeypatch.setattr(log_files, "_BLOCK", block)
    log, batch = _build(root, shape)
    assert log.add(batch, _ours(root, batch, "q1", 20, 2, NOW_MS, -1, shape.startswith("figures")))
    written = (root / "_spark_metadata" / f"{batch}.compact").read_bytes().replace(f"file://{root}".encode(), ROOT.encode())
    golden = GOLDEN / f"{shape}.compact"
    if os.environ.get("PARQUET_SINK_GOLDEN") == "write":
        GOLDEN.mkdir(exist_ok=True)
        golden.write_bytes(written)
    expected = golden.read_bytes()
    assert written.split(b"\n") == expected.split(b"\n")  # line by line first: a readable diff
    assert written == expected
    assert log.check() == []  # the columnar copy holds the same entries as the JSON


def _json_table(data: bytes):
    import pyarrow as pa
    import pyarrow.json as pa_json

    from parquet_sink.log.entry import ENTRY_SCHEMA

    options = pa_json.ParseOptions(explicit_schema=ENTRY_SCHEMA, unexpected_field_behavior="ignore")
    return pa_json.read_json(pa.BufferReader(data), parse_options=options)


def test_lines_read_as_fields_give_the_json_parsers_entries(tmp_path):
    """Lines in the writer's layout are read as fields, the others (a few in a block) by the JSON parser:
    the entries are the JSON parser's, row for row, and only lines in the layout are marked so."""
    from parquet_sink.log.lines import parse_lines

    root = tmp_path / "out"
    spark = [_spark_line(root, f"s-{k},comma.parquet" if k == 5 else f"s-{k}.parquet", k, NOW_MS + k) for k in range(60)]
    odd = [line for line in _odd_lines(root, 3) if "\\" not in line]  # a block with an escape goes to the JSON parser
    records = [e.to_json() for e in _ours(root, 3, "q1", 3, 2, NOW_MS, -1)]
    lines = spark[:20] + odd + spark[20:40] + records + spark[40:] + [_spark_line(root, "big.parquet", 10**17, 0)]
    data = "\n".join(lines).encode()
    table, layout = parse_lines(data, len(lines))
    assert table.to_pylist() == _json_table(data).to_pylist()
    in_layout = [line.startswith('{"path":"') and line.endswith('"action":"add"}') and ",comma" not in line for line in lines]
    assert layout.to_pylist() == in_layout
    escaped = data + b"\n" + _odd_lines(root, 4)[4].encode()
    assert parse_lines(escaped, len(lines) + 1) is None  # the JSON parser reads a block with an escape


@pytest.mark.parametrize(
    "bad",
    [
        b'{"path":","size":1,"isDir":false,"modificationTime":1,"blockReplication":1,"blockSize":1,"action":"a"b"}',
        b'{"path":"file:///o/a","size":0x10,"isDir":false,"modificationTime":1,"blockReplication":1,"blockSize":1,"action":"add"}',
        b'{"path":"file:///o/a","size":01,"isDir":false,"modificationTime":1,"blockReplication":1,"blockSize":1,"action":"add"}',
        b'{"path":"file:///o/a","size":1,"isDir":nope,"modificationTime":1,"blockReplication":1,"blockSize":1,"action":"add"}',
        b'{"path":"file:///o/"a","size":1,"isDir":false,"modificationTime":1,"blockReplication":1,"blockSize":1,"action":"add"}',
        b'{"path":"file:///o/\x01a","size":1,"isDir":false,"modificationTime":1,"blockReplication":1,"blockSize":1,"action":"add"}',
        b'{"path":"file:///o/\xffa","size":1,"isDir":false,"modificationTime":1,"blockReplication":1,"blockSize":1,"action":"add"}',
        b'{"path":"file:///o/a","size":1,"isDir":false,"modificationTime":1,"blockReplication":1,"blockSize":1,"action":"add"',
        b'',
    ],
)
def test_a_corrupt_line_among_lines_in_the_layout_names_its_line(tmp_path, bad):
    from parquet_sink.errors import CorruptLogError

    root = tmp_path / "out"
    good = [_spark_line(root, f"s-{k}.parquet", k, NOW_MS) for k in range(50)]
    meta = root / "_spark_metadata"
    meta.mkdir(parents=True)
    (meta / "0").write_bytes(b"v1\n" + "\n".join(good[:30]).encode() + b"\n" + bad + b"\n" + "\n".join(good[30:]).encode())
    log = MetadataLog(str(root))
    with pytest.raises(CorruptLogError, match="line 32"):
        log.read_file(str(meta / "0"), 0)
    with pytest.raises(CorruptLogError, match="line 32"):
        log.read_table(str(meta / "0"), 0)
