"""What the table-format mirrors (:mod:`parquet_sink.delta`, :mod:`parquet_sink.iceberg`) share, below both (the
seam issue 55 item 6 asks for, begun): one lock per mirrored table in a process, as delta-rs and pyiceberg leave a
table's in-process state to their caller. The counterpart of Apache XTable's per-table sync lock."""

from __future__ import annotations

import threading
from collections.abc import Hashable


class TableLocks:
    """One ``threading.Lock`` per table key (a mirror's own: a Delta log's URI and options, an Iceberg table's
    output and identifier), created on first use: syncs of one table in threads of one process take turns.

    Example::

        >>> locks = TableLocks()
        >>> with locks(("/data/events", None)):
        ...     pass
    """

    def __init__(self) -> None:
        self._locks: dict[Hashable, threading.Lock] = {}
        self._guard = threading.Lock()

    def __call__(self, key: Hashable) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())


__all__ = ["TableLocks"]
