"""Cost follows the work (issue 58): an append after a big first batch, ``history(limit=)`` and the Delta sync
after an append decode the same log entries whether the output holds 200 or 2,000 files. Work is counted (log
entries decoded from JSON, by line or by block), never timed."""

from __future__ import annotations

import pyarrow as pa
import pytest

from parquet_sink import history, read_committed, write_batch
from parquet_sink.log import entry as log_entry
from parquet_sink.log import files as log_files


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that gets the number of log entries each JSON decode of the log handles: a block of lines
    (``parse_block_layout``) or one line (``LogEntry.from_json``)."""
    counts: list[int] = []
    parse = log_files.LogFiles.parse_block_layout
    from_json = log_entry.LogEntry.from_json.__func__

    def counted_block(self, block, *args):
        counts.append(block.lines)
        return parse(self, block, *args)

    def counted_line(cls, *args, **kwargs):
        counts.append(1)
        return from_json(cls, *args, **kwargs)

    monkeypatch.setattr(log_files.LogFiles, "parse_block_layout", counted_block)
    monkeypatch.setattr(log_entry.LogEntry, "from_json", classmethod(counted_line))
    monkeypatch.setattr(log_files, "END_BYTES", 4096, raising=False)  # the small outputs' first batch is read at its ends too
    return counts


def _rows(start: int, count: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + count), pa.int64()), "v": [float(i) for i in range(count)]})


def _first_batch(path: str, files: int, **kw) -> None:
    """An output whose first batch holds ``files`` files (one row each), as a user's big first batch does."""
    assert write_batch(path, _rows(0, files), app_id="backfill", version=0, max_records_per_file=1, **kw).committed


def test_an_append_after_a_big_first_batch_decodes_what_it_needs_not_every_file(tmp_path, decoded):
    """One small ``write_batch`` after a first batch of 200 or 2,000 files decodes the same few log entries (the
    first batch's commit record and newest data entry, read at its two ends), and still commits exactly once:
    a retry of the same version is skipped, one of the first batch's app is refused as stale."""
    work = {}
    for files in (200, 2000):
        out = str(tmp_path / f"out-{files}")
        _first_batch(out, files)
        decoded.clear()
        result = write_batch(out, _rows(10**6, 10), app_id="small", version=0)
        work[files] = sum(decoded)
        assert result.committed and result.log_batch_id == 1 and len(result.files) == 1
        assert read_committed(out).num_rows == files + 10
        again = write_batch(out, _rows(10**6, 10), app_id="small", version=0)  # a retry: found, skipped
        assert not again.committed and again.log_batch_id == 1 and again.committed_version == 0
        with pytest.raises(Exception, match="StaleVersion|never committed|other data"):
            write_batch(out, _rows(5, 3), app_id="backfill", version=0)  # the first batch's record is found
        assert read_committed(out).num_rows == files + 10
    assert work[2000] == work[200] <= 10, work


def test_history_with_a_limit_reads_the_newest_batches_not_the_first_big_one(tmp_path, decoded):
    """``history(limit=10)`` over a first batch of 200 or 2,000 files and ten appends after it decodes the same
    entries (the ten batches whole, the first at its ends), and its rows are those of the full history."""
    work = {}
    for files in (200, 2000):
        out = str(tmp_path / f"out-{files}")
        _first_batch(out, files, compact_interval=100)  # no compaction yet: the first batch is a delta file
        for version in range(10):
            assert write_batch(out, _rows(10**6 + 10 * version, 10), app_id="small", version=version).committed
        decoded.clear()
        newest = history(out, limit=10)
        work[files] = sum(decoded)
        assert newest.column("log_batch_id").to_pylist() == list(range(10, 0, -1))
        assert newest.column("files").to_pylist() == [1] * 10 and newest.column("rows").to_pylist() == [10] * 10
        assert newest.column("query_batch_id").to_pylist() == list(range(9, -1, -1))
        assert newest.to_pylist() == history(out).slice(0, 10).to_pylist()
        assert history(out, limit=11).column("files").to_pylist()[-1] == files  # a limit taking it in counts it
    # the same at both sizes: ten batches of two entries (the record's own, the file), the first batch's ends
    assert work[2000] == work[200] <= 50, work


def test_history_with_a_limit_after_a_compaction_decodes_the_copy_s_key_columns_only(tmp_path, monkeypatch):
    """After a compaction put a first batch of 200 files into a compact file, ``history(limit=10)`` decodes only
    the columns it counts of the file's columnar copy (not each entry's path and statistics, most of its bytes),
    and its rows are those of the full history."""
    from parquet_sink.log import sidecar

    decoded: list[list[str] | None] = []
    table = sidecar.Sidecar.table

    def counted(self, columns=None):
        decoded.append(columns)
        return table(self, columns)

    out = str(tmp_path / "out")
    _first_batch(out, 200, compact_interval=10)
    for version in range(10):  # log batch 9 is a compaction: batch 0's entries move into 9.compact and its copy
        assert write_batch(out, _rows(10**6 + 10 * version, 10), app_id="small", version=version).committed
    monkeypatch.setattr(sidecar.Sidecar, "table", counted)
    newest = history(out, limit=10)
    assert decoded and all(c is not None and "path" not in c and "stats" not in c for c in decoded), decoded
    assert newest.to_pylist() == history(out).slice(0, 10).to_pylist()
    assert history(out, limit=11).column("files").to_pylist()[-1] == 200
