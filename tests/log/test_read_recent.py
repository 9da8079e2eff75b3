"""``read_recent``: the log as a writer deciding its commit and ``history(limit=)`` need it, read at the cost of the
batches they look at (issue 58). What it answers must be what the whole snapshot answers: the commit records, the
newest commit time, the newest data file, and every entry of the batches asked for whole."""

from __future__ import annotations

import pyarrow.compute as pc
import pytest

from parquet_sink import MetadataLog, history
from parquet_sink.errors import CorruptLogError
from parquet_sink.log import files as log_files
from parquet_sink.log.entry import BATCH_KEY, CommitRecord, LogEntry, records_of
from parquet_sink.log.snapshot import data_files, read_recent, read_snapshot
from parquet_sink.read.history import newest_commit_time


def _entries(log: MetadataLog, batch: int, kind: str, files: int) -> list[LogEntry]:
    """The entries of one batch: ``"app"`` (a commit record with a fingerprint on the first data entry, as
    write_batch writes), ``"query"`` (the sink's record), ``"spark"`` (Spark's own sink: no record), ``"empty"``
    (a record on an entry of its own)."""
    data = [
        LogEntry(log.storage.to_uri(f"{log.storage.root}/b{batch}-{n:05d}.parquet"), 100 + n, False, 1000 + batch)
        for n in range(files)
    ]
    if kind == "spark":
        return data
    record = CommitRecord.new(batch, "app" if kind == "app" else "query", batch, "f" * 32 if kind == "app" else None)
    return record.log_entries(log.storage, 10_000 + 7 * batch, [] if kind == "empty" else data, rows=files)


SHAPES = {  # the kinds of batches 0, 1, ... (big batches first: the case the ends reader is for)
    "big first batch, then appends": [("app", 400), ("app", 1), ("app", 1), ("app", 1)],
    "appends past a compaction": [("app", 300), ("query", 2), ("empty", 0), ("app", 3), ("query", 1), ("spark", 2), ("app", 1)],
    "a big batch of Spark's sink among them": [("query", 1), ("spark", 400), ("app", 1), ("empty", 0), ("empty", 0)],
    "newest batches without files": [("app", 400), ("empty", 0), ("empty", 0)],
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_read_recent_answers_what_the_whole_snapshot_answers(tmp_path, monkeypatch, shape):
    monkeypatch.setattr(log_files, "END_BYTES", 512)  # every batch of more than a few entries is read at its ends
    monkeypatch.setattr(log_files, "COPY_MIN_BYTES", 1)  # compact files get their columnar copy
    log = MetadataLog(str(tmp_path / "out"), compact_interval=5, cleanup=False)
    for batch, (kind, files) in enumerate(SHAPES[shape]):
        assert log.add(batch, _entries(log, batch, kind, files))
        full = read_snapshot(log).table
        for whole_after in (None, batch - 1, batch - 3):
            recent = read_recent(log, whole_after=whole_after)
            assert recent.latest == batch and recent.table.num_rows <= full.num_rows
            assert records_of(recent.table) == records_of(full)
            assert newest_commit_time(recent.table) == newest_commit_time(full)
            newest = data_files(full).slice(data_files(full).num_rows - 1).select(["path", BATCH_KEY])
            assert data_files(recent.table).slice(data_files(recent.table).num_rows - 1).select(["path", BATCH_KEY]) == newest
            if whole_after is not None:
                after = (pc.greater(t.column(BATCH_KEY), whole_after) for t in (recent.table, full))
                assert recent.table.filter(next(after)) == full.filter(next(after))
        for limit in (0, 1, 2, 3, 10):
            assert history(log.storage.root, limit=limit) == history(log.storage.root).slice(0, limit)


def test_a_damaged_end_line_is_named(tmp_path, monkeypatch):
    """A line read at a delta file's end that is no entry is a CorruptLogError naming the file, as a whole read
    names it: the two ends are validated as every line a reader parses."""
    monkeypatch.setattr(log_files, "END_BYTES", 512)
    log = MetadataLog(str(tmp_path / "out"), cleanup=False)
    assert log.add(0, _entries(log, 0, "app", 100))
    assert log.add(1, _entries(log, 1, "app", 1))
    path = tmp_path / "out" / "_spark_metadata" / "0"
    path.write_bytes(path.read_bytes()[:-30] + b"not json at all" + b"}" * 15)
    with pytest.raises(CorruptLogError, match=r"_spark_metadata/0 \(batch 0\), line 1 from the end"):
        read_recent(log)
    with pytest.raises(CorruptLogError, match=r"_spark_metadata/0 \(batch 0\), line 102"):  # as the whole read
        read_snapshot(log)


def test_ends_are_not_taken_from_a_batch_without_a_first_record(tmp_path, monkeypatch):
    """A delta file whose first entry carries no commit record (Spark's own sink: it may write its entries in any
    order, and others may hold a record elsewhere) is read whole: its records are never guessed from its ends."""
    monkeypatch.setattr(log_files, "END_BYTES", 512)
    log = MetadataLog(str(tmp_path / "out"), cleanup=False)
    entries = _entries(log, 0, "app", 100)
    assert log.add(0, entries[1:50] + entries[:1] + entries[50:])  # the record's entry in the middle
    assert log.add(1, _entries(log, 1, "spark", 100))
    recent = read_recent(log)
    assert [r.log_batch_id for r in records_of(recent.table)] == [0] == [r.log_batch_id for r in records_of(read_snapshot(log).table)]
    paths = [p.rsplit("/", 1)[-1] for p in recent.table.column("path").to_pylist()]
    # the batch's figures (on its first data entry), the record, each newest file
    assert paths == ["b0-00000.parquet", CommitRecord.from_entry(entries[0]).marker_name, "b0-00099.parquet", "b1-00099.parquet"]
