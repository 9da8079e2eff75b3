"""Early writeback: while Spark's tasks write a batch's files into a staging directory on local disk, a
background thread flushes what they have written so far, so the fsync that must precede the batch's commit
(:func:`parquet_sink.write.spark_staging.publish`) finds little left to write and the batch waits less for the
disk. No Spark counterpart: Spark's file sink never fsyncs its files.

Contract: an optimization only. It makes nothing durable that the commit relies on (publish still fsyncs every
file and directory, and reports its errors); an error here (a file renamed or deleted under it, a full disk) is
ignored; the thread has stopped when the ``with`` block exits. A no-op on object stores.

Example::

    >>> with EarlyWriteback(storage, "/data/out/_exactly_once/staging/abc"):
    ...     df.write.parquet(...)  # files land in staging; their pages are written back while the job runs
"""

from __future__ import annotations

import os
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .filesystem import Storage

# How often the staging directory is looked at. A batch's Spark job takes ~100 ms to seconds; a look is a
# directory walk of a few entries and a fdatasync per grown file.
_INTERVAL_SECONDS = 0.02
# A look that takes longer (thousands of partition directories) is followed by a pause of this many times its
# duration: the thread keeps to about a tenth of a core whatever the layout.
_PAUSE_PER_LOOK = 9
# macOS has no fdatasync
_SYNC_DATA = getattr(os, "fdatasync", os.fsync)


class EarlyWriteback:
    """Flushes the files growing under ``directory`` to disk from a daemon thread while the ``with`` block runs
    (local disk only)."""

    def __init__(self, storage: Storage, directory: str, interval: float = _INTERVAL_SECONDS) -> None:
        self.directory = directory
        self.interval = interval
        self.enabled = storage.is_local
        self._flushed: dict[str, int] = {}  # path -> size at its last flush
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> EarlyWriteback:
        if self.enabled:
            self._thread = threading.Thread(target=self._run, name="parquet-sink-writeback", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        pause = self.interval
        while not self._stop.wait(pause):
            started = time.monotonic()
            self.flush_grown()
            pause = next_pause(self.interval, time.monotonic() - started)

    def flush_grown(self) -> int:
        """fdatasync every file under the directory that grew since its last flush; the number flushed."""
        flushed = 0
        for path, size in _files(self.directory):
            if size <= self._flushed.get(path, 0):
                continue
            try:
                fd = os.open(path, os.O_RDONLY)
                try:
                    _SYNC_DATA(fd)
                finally:
                    os.close(fd)
            except OSError:
                continue  # moved, deleted or failing: publish's own fsync decides
            self._flushed[path] = size
            flushed += 1
        return flushed


def next_pause(interval: float, look_seconds: float) -> float:
    """The pause before the next look: ``interval``, or ``_PAUSE_PER_LOOK`` times a look that took longer.

    Example: ``next_pause(0.02, 0.001) == 0.02``; ``next_pause(0.02, 0.01) == 0.09``.
    """
    return max(interval, _PAUSE_PER_LOOK * look_seconds)


def _files(directory: str) -> list[tuple[str, int]]:
    """(path, size) of the regular files under ``directory`` (none if it is gone)."""
    found, pending = [], [directory]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    found.append((entry.path, entry.stat(follow_symlinks=False).st_size))
            except OSError:
                continue
    return found
