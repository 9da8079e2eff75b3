"""Early writeback (storage/writeback.py): files growing in a staging directory are flushed while the Spark job
writes them; it never fails the batch and has stopped when its block exits."""

from __future__ import annotations

import os
import threading
import time
import uuid

from parquet_sink.storage.filesystem import Storage
from parquet_sink.storage.writeback import EarlyWriteback, next_pause


def _write(path: str, data: bytes, mode: str = "wb") -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, mode) as fh:
        fh.write(data)


def test_flushes_each_grown_file_once_per_growth_in_every_directory(tmp_path):
    staging = str(tmp_path / "staging")
    a, b = os.path.join(staging, "part-0.parquet"), os.path.join(staging, "k=1", "part-1.parquet")
    _write(a, b"x" * 1000)
    _write(b, b"y" * 10)
    writeback = EarlyWriteback(Storage(str(tmp_path)), staging)
    assert writeback.flush_grown() == 2
    assert writeback.flush_grown() == 0  # nothing grew
    _write(b, b"more", "ab")
    assert writeback.flush_grown() == 1
    assert writeback._flushed == {a: 1000, b: 14}


def test_a_directory_that_is_gone_or_not_yet_there_is_no_error(tmp_path):
    writeback = EarlyWriteback(Storage(str(tmp_path)), str(tmp_path / "not-yet"))
    assert writeback.flush_grown() == 0


def test_the_thread_flushes_files_written_during_the_block_and_stops_with_it(tmp_path):
    staging = str(tmp_path / "staging")
    path = os.path.join(staging, "part-0.parquet")
    with EarlyWriteback(Storage(str(tmp_path)), staging, interval=0.005) as writeback:
        _write(path, b"z" * 4096)
        deadline = time.monotonic() + 10
        while writeback._flushed.get(path) != 4096 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert writeback._flushed.get(path) == 4096
        assert any(t.name == "parquet-sink-writeback" for t in threading.enumerate())
    assert not writeback._thread.is_alive()


def test_an_error_in_the_block_still_stops_the_thread(tmp_path):
    try:
        with EarlyWriteback(Storage(str(tmp_path)), str(tmp_path)) as writeback:
            raise KeyError("job failed")
    except KeyError:
        pass
    assert not writeback._thread.is_alive()


def test_nothing_runs_on_an_object_store():
    with EarlyWriteback(Storage(f"memory://out-{uuid.uuid4().hex}"), "/staging") as writeback:
        assert not writeback.enabled
        assert writeback._thread is None


def test_a_slow_look_is_followed_by_a_longer_pause():
    assert next_pause(0.02, 0.001) == 0.02
    assert next_pause(0.02, 0.01) == 0.09
    assert next_pause(0.02, 0.5) == 4.5
