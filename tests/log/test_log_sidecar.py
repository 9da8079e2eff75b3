"""Columnar copies of compact files (``N.compact.columnar``): written by compaction, used by readers and by
the next compaction only while they match their compact file, ignored by Spark's log."""

from __future__ import annotations

import logging
import os
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parquet_sink import committed_files, errors
from parquet_sink.maintenance import read_output
from parquet_sink.log.metadata_log import LogEntry, MetadataLog
from parquet_sink.log import files as log_files
from parquet_sink.log.entry import entries_table
from parquet_sink.log.sidecar import _INLINE_ROWS, Checksum, SidecarWriter, decode_sidecar

LOG = "_spark_metadata"


def _log(root: Path, batches: int, interval: int = 3, files: int = 2) -> MetadataLog:
    """``batches`` batches of ``files`` entries each (size = 1000 * batch + k), compacting every ``interval``."""
    log = MetadataLog(str(root), compact_interval=interval, cleanup=False)
    for b in range(batches):
        assert log.add(b, [LogEntry(f"file://{root}/b{b}-{k}.parquet", 1000 * b + k + 1, modification_time=b) for k in range(files)])
    return log


def _sizes(root: Path) -> dict[str, int]:
    return {f.relative_path: f.size for f in committed_files(str(root))}


def _expected(batches: int, files: int = 2) -> dict[str, int]:
    return {f"b{b}-{k}.parquet": 1000 * b + k + 1 for b in range(batches) for k in range(files)}


def test_compaction_writes_a_copy_equal_to_the_json(tmp_path):
    log = _log(tmp_path, 9)
    listing = log.list_names()
    assert sorted(listing.sidecars) == [2, 5, 8]
    for batch in (2, 5, 8):
        compact = listing[batch]
        copy = log.read_sidecar(listing.sidecars[batch], compact, batch)
        assert copy is not None and copy.size == os.path.getsize(compact)
        assert copy.table().equals(log.read_table(compact, batch))  # same entries, same order
        assert copy.table().num_rows == 2 * (batch + 1)  # every live entry
    assert log.check() == []
    assert _sizes(tmp_path) == _expected(9)


def test_readers_use_the_copy_and_verify_reports_a_mismatch(tmp_path):
    log = _log(tmp_path, 6)
    compact = tmp_path / LOG / "5.compact"
    # Change one size in the JSON without changing the file's length: readers still answer from the copy
    # (proof that they read it), and `verify` reports that the two disagree.
    raw = compact.read_bytes()
    assert b'"size":5001,' in raw
    compact.write_bytes(raw.replace(b'"size":5001,', b'"size":5009,'))
    assert _sizes(tmp_path)["b5-0.parquet"] == 5001
    shown = read_output(str(tmp_path), storage_options={})  # what `parquet-sink ls` / `show` print
    assert {e.path.rsplit("/", 1)[-1]: e.size for b in shown.batches.values() for e in b.data_files} == _expected(6)
    problems = [str(p) for p in log.check()]
    assert len(problems) == 1 and "5.compact.columnar" in problems[0] and "write_columnar_copy(5)" in problems[0]
    # The next compaction checks the copy against the bytes it copies, and goes back to the JSON.
    for b in range(6, 9):
        log.add(b, [LogEntry(f"file://{tmp_path}/b{b}-0.parquet", 1000 * b + 1)])
    sizes8 = pq.read_table(tmp_path / LOG / "8.compact.columnar").column("size").to_pylist()
    assert 5009 in sizes8 and 5001 not in sizes8
    assert [p for p in log.check() if "8.compact" in str(p)] == []
    log.write_columnar_copy(5)
    assert log.check() == []


def test_stale_damaged_or_missing_copies_fall_back_to_the_json(tmp_path, caplog):
    log = _log(tmp_path, 9)
    meta = tmp_path / LOG
    expected = _expected(9)
    # stale: the copy of another compact file
    (meta / "8.compact.columnar").write_bytes((meta / "5.compact.columnar").read_bytes())
    with caplog.at_level(logging.WARNING, logger="parquet_sink.log.files"):
        assert _sizes(tmp_path) == expected
    assert "8.compact.columnar" in caplog.text and "reading" in caplog.text
    assert any("8.compact.columnar" in str(p) for p in log.check())
    # stale: same name, another size (the compact file was rewritten)
    log.write_columnar_copy(8)
    raw = (meta / "8.compact").read_bytes()
    extra = LogEntry(f"file://{tmp_path}/extra.parquet", 7, batch_id=8).to_json().encode()
    (meta / "8.compact").write_bytes(raw + b"\n" + extra)
    assert _sizes(tmp_path) == {**expected, "extra.parquet": 7}
    (meta / "8.compact").write_bytes(raw)
    assert _sizes(tmp_path) == expected
    # damaged: garbage bytes; one byte flipped inside a data page (its CRC-32 no longer verifies)
    (meta / "8.compact.columnar").write_bytes(b"PAR1 not really")
    assert _sizes(tmp_path) == expected
    log.write_columnar_copy(8)
    good = (meta / "8.compact.columnar").read_bytes()
    flipped = bytearray(good)
    flipped[len(good) // 3] ^= 0xFF  # inside the first row group's pages, far from the footer
    (meta / "8.compact.columnar").write_bytes(bytes(flipped))
    assert _sizes(tmp_path) == expected
    assert any("8.compact.columnar" in str(p) for p in log.check())
    # missing: the next compaction builds one from the JSON
    (meta / "8.compact.columnar").unlink()
    assert _sizes(tmp_path) == expected
    for b in range(9, 12):
        log.add(b, [LogEntry(f"file://{tmp_path}/b{b}-0.parquet", 1000 * b + 1)])
    assert (meta / "11.compact.columnar").exists() and log.check() == []
    assert len(_sizes(tmp_path)) == len(expected) + 3


def test_corrupt_json_under_a_copy_is_never_carried_forward(tmp_path):
    """A compact file damaged after its copy was written: the next compaction notices (CRC-32), goes back
    to the JSON and fails with CorruptLogError naming the line, instead of compacting the copy's entries
    over a damaged source."""
    log = _log(tmp_path, 6)
    compact = tmp_path / LOG / "5.compact"
    raw = compact.read_bytes()
    compact.write_bytes(raw.replace(b'"isDir":false', b'"isDir":fals!', 1))
    for b in range(6, 8):
        log.add(b, [])
    try:
        log.add(8, [])
    except errors.CorruptLogError as exc:
        assert "5.compact" in str(exc) and "line 2" in str(exc)
    else:
        raise AssertionError("compaction over a damaged compact file must fail")
    assert not (tmp_path / LOG / "8.compact").exists() and not (tmp_path / LOG / "8.compact.columnar").exists()


def _spark_sink_log_classes(spark):
    jvm = spark._jvm
    for package in ("org.apache.spark.sql.execution.streaming.sinks", "org.apache.spark.sql.execution.streaming"):
        try:  # Spark 4.1 moved the sink classes into .sinks
            return jvm.java.lang.Class.forName(f"{package}.FileStreamSinkLog") and (
                getattr(jvm, f"{package}.FileStreamSinkLog"), getattr(jvm, f"{package}.SinkFileStatus")
            )
        except Exception:  # noqa: BLE001 - py4j raises a generic error for a missing class
            continue
    raise AssertionError("Spark's FileStreamSinkLog not found")


def test_spark_log_ignores_copies_and_compacts_over_them(spark, tmp_path):
    """Spark's own FileStreamSinkLog continues a log holding our columnar copies: it lists, reads and
    compacts it (the copies are not batch files to it), and we read what it wrote."""
    _log(tmp_path, 6)
    log_cls, status_cls = _spark_sink_log_classes(spark)
    spark_log = log_cls(1, spark._jsparkSession, str(tmp_path / LOG), spark._jvm.scala.Option.empty())
    # Spark derives its interval from the newest compact file alone (5 -> 6): batch 11 is its compaction.
    for b in range(6, 12):
        statuses = spark.sparkContext._gateway.new_array(status_cls, 1)
        statuses[0] = status_cls(f"file://{tmp_path}/b{b}-0.parquet", 1000 * b + 1, False, b, 1, 1, "add")
        assert spark_log.add(b, statuses)
    assert (tmp_path / LOG / "11.compact").exists() and not (tmp_path / LOG / "11.compact.columnar").exists()
    assert len(spark_log.allFiles()) == 12 + 6
    assert _sizes(tmp_path) == {**_expected(6), **{f"b{b}-0.parquet": 1000 * b + 1 for b in range(6, 12)}}


def test_a_reader_following_spark_parses_only_its_new_lines(spark, tmp_path, monkeypatch):
    """Spark's own FileStreamSinkLog writes each compact file as the previous one's lines then the newer
    batches': a reader that stored the copy of compact file 9 reads compact file 19 from that copy and
    parses only the lines Spark added (the bytes before them checked against the copy's CRC-32), and the
    copy it stores for 19 holds 19's entries."""
    monkeypatch.setattr(log_files, "COPY_MIN_BYTES", 1)  # any compact file gets a copy
    parsed = []
    parse = log_files.LogFiles.parse_block_layout

    def counted(self, block, *args):
        parsed.append(block.lines)
        return parse(self, block, *args)

    monkeypatch.setattr(log_files.LogFiles, "parse_block_layout", counted)
    log_cls, status_cls = _spark_sink_log_classes(spark)
    spark_log = log_cls(1, spark._jsparkSession, str(tmp_path / LOG), spark._jvm.scala.Option.empty())
    expected = {}
    for b in range(20):
        statuses = spark.sparkContext._gateway.new_array(status_cls, 3)
        for k in range(3):
            statuses[k] = status_cls(f"file://{tmp_path}/b{b}-{k}.parquet", 1000 * b + k + 1, False, b, 1, 1, "add")
            expected[f"b{b}-{k}.parquet"] = 1000 * b + k + 1
        assert spark_log.add(b, statuses)
        if b in (9, 19):
            parsed.clear()
            assert _sizes(tmp_path) == expected
            assert (tmp_path / LOG / f"{b}.compact.columnar").exists()
            assert sum(parsed) == (30 if b == 9 else 10 * 3), b  # 19: only the lines of batches 10-19
    assert MetadataLog(str(tmp_path), cleanup=False).check() == []  # each copy holds its compact file's entries


def test_compaction_over_a_damaged_copy_uses_the_json(tmp_path, caplog):
    log = _log(tmp_path, 6)
    copy = tmp_path / LOG / "5.compact.columnar"
    flipped = bytearray(copy.read_bytes())
    chunk = pq.ParquetFile(copy).metadata.row_group(0).column(0)  # the paths: damage inside their data page
    flipped[chunk.data_page_offset + chunk.total_compressed_size - 2] ^= 0xFF
    copy.write_bytes(bytes(flipped))
    with caplog.at_level(logging.WARNING, logger="parquet_sink.log.compaction"):
        for b in range(6, 9):
            log.add(b, [LogEntry(f"file://{tmp_path}/b{b}-0.parquet", 1000 * b + 1)])
    assert "compacting batch 8 from the JSON" in caplog.text
    expected = {**_expected(6), **{f"b{b}-0.parquet": 1000 * b + 1 for b in range(6, 9)}}
    assert _sizes(tmp_path) == expected
    listing = log.list_names()
    assert log.read_sidecar(listing.sidecars[8], listing[8], 8).table().equals(log.read_table(listing[8], 8))


def test_a_reader_stores_a_copy_of_a_large_compact_file_without_one(tmp_path):
    """A compact file Spark's sink wrote has no columnar copy: the first reader that parses a large one
    stores a copy (equal to the JSON), and the next readers answer from it."""
    meta = tmp_path / LOG
    meta.mkdir()
    line = ('{{"path":"file://{root}/s-{k}.parquet","size":{size},"isDir":false,"modificationTime":1,'
            '"blockReplication":1,"blockSize":33554432,"action":"add"}}')
    lines = [line.format(root=tmp_path, k=k, size=100_000 + k) for k in range(25_000)]
    (meta / "9.compact").write_text("v1\n" + "\n".join(lines))  # 5 MB, in the layout Spark writes
    (meta / "10").write_text("v1\n" + line.format(root=tmp_path, k="new", size=7))
    expected = {**{f"s-{k}.parquet": 100_000 + k for k in range(25_000)}, "s-new.parquet": 7}
    assert _sizes(tmp_path) == expected
    assert (meta / "9.compact.columnar").exists()
    log = MetadataLog(str(tmp_path), cleanup=False)
    assert log.check() == []  # the copy holds the JSON's entries
    raw = (meta / "9.compact").read_bytes()
    (meta / "9.compact").write_bytes(raw.replace(b'"size":100005,', b'"size":100009,'))  # same length
    assert _sizes(tmp_path)["s-5.parquet"] == 100_005  # answered from the copy
    copy = (meta / "9.compact.columnar").read_bytes()
    problems = log.check()  # verify reports the stale copy; it never writes one over it
    assert [type(p) for p in problems] == [errors.CorruptLogError] and "9.compact.columnar" in str(problems[0])
    assert (meta / "9.compact.columnar").read_bytes() == copy


def test_a_reader_following_spark_deletes_the_copies_spark_orphaned(tmp_path):
    """Spark's log cleanup deletes old compact files, never their copies (not batch file names to it): a
    reader that stores the copy of a new compact file deletes the copies whose compact file is gone once
    they are older than Spark's cleanup delay (10 minutes), so copies never outlive Spark's log; the copy of
    a compact file that is still there stays, and every read answers what the JSON says."""
    meta = tmp_path / LOG
    meta.mkdir()
    line = ('{{"path":"file://{root}/s-{k}.parquet","size":{size},"isDir":false,"modificationTime":1,'
            '"blockReplication":1,"blockSize":33554432,"action":"add"}}')

    def spark_compacts(batch: int, files: int) -> dict[str, int]:
        lines = [line.format(root=tmp_path, k=k, size=100_000 + k) for k in range(files)]
        (meta / f"{batch}.compact").write_text("v1\n" + "\n".join(lines))  # > 4 MB: readers store a copy
        return {f"s-{k}.parquet": 100_000 + k for k in range(files)}

    def age(path: Path, minutes: int) -> None:
        old = path.stat().st_mtime - minutes * 60
        os.utime(path, (old, old))

    expected = spark_compacts(9, 25_000)
    assert _sizes(tmp_path) == expected
    expected = spark_compacts(19, 25_001)
    assert _sizes(tmp_path) == expected  # 9.compact is still there: its copy stays
    assert sorted(p.name for p in meta.iterdir()) == ["19.compact", "19.compact.columnar", "9.compact", "9.compact.columnar"]
    (meta / "9.compact").unlink()  # Spark's cleanup
    age(meta / "9.compact.columnar", 11)
    expected = spark_compacts(29, 25_002)
    (meta / "19.compact").unlink()  # a copy orphaned less than 10 minutes ago stays (a writer may be at work)
    assert _sizes(tmp_path) == expected
    assert sorted(p.name for p in meta.iterdir()) == ["19.compact.columnar", "29.compact", "29.compact.columnar"]
    age(meta / "19.compact.columnar", 11)
    (meta / "29.compact.columnar").unlink()
    assert _sizes(tmp_path) == expected
    assert sorted(p.name for p in meta.iterdir()) == ["29.compact", "29.compact.columnar"]
    assert MetadataLog(str(tmp_path), cleanup=False).check() == []


def test_checksum_is_zlibs_crc32():
    """The CRC-32 recorded in copies is zlib's (computed by zlib-ng), over chunks of any kind: copies written
    by earlier versions, with zlib itself, stay valid."""
    data = bytes(range(256)) * 4099
    checksum = Checksum()
    for chunk in (data[:1], memoryview(data)[1:70_000], np.frombuffer(data, np.uint8)[70_000:].data):
        checksum.update(chunk)
    assert (checksum.size, checksum.crc) == (len(data), zlib.crc32(data))


@pytest.mark.parametrize("rows", [1, 3 * _INLINE_ROWS])
def test_a_copy_is_the_same_and_fails_in_finish_on_the_callers_thread_or_the_encoders(tmp_path, rows):
    """A small copy is encoded on the caller's thread, a larger one moves to the encoder thread part way: the
    bytes decode to every table written, in order; an error while encoding surfaces in finish either way (the
    compact file is written first, its copy then given up)."""
    tables = [
        entries_table([LogEntry(f"file:///o/t{t}-{k}.parquet", k + 1) for k in range(n)])
        for t, n in enumerate([min(rows, 7), rows, 1])
    ]
    writer = SidecarWriter()
    for table in tables[:2]:
        writer.write(table)
    writer.write_all(lambda: iter(tables[2:]), tables[2].num_rows)
    copy = decode_sidecar(writer.finish("9.compact", 1, 2), "9.compact")
    assert copy.rows == sum(t.num_rows for t in tables)
    assert copy.table().equals(pa.concat_tables(tables))

    def failing():
        yield tables[0]
        raise OSError("the source vanished")

    writer = SidecarWriter()
    writer.write(tables[1])
    writer.write_all(failing, rows)  # raises nothing yet
    with pytest.raises(OSError, match="vanished"):
        writer.finish("9.compact", 1, 2)
