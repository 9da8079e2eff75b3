"""Waiting for a streaming query that writes through the sink: ``query.awaitTermination`` with the sink's own typed
errors, and Ctrl-C as a clean stop (the counterpart of ``StreamingQuery.awaitTermination`` / ``stop``).

Ctrl-C while the main thread waits inside a py4j call is PySpark's SIGINT handler's: it calls ``cancelAllJobs``
over the very connection that is waiting (py4j logs "reentrant call" and a chain of tracebacks, ~100 lines) and
leaves the query running until the interpreter exits. Here a SIGINT only raises a flag; the wait is a loop of
short ``awaitTermination(timeout)`` calls that never get interrupted, so the connection stays usable, the query is
stopped with ``query.stop()`` (Spark interrupts a batch in progress: the sink commits a batch whole or not at all,
and the same checkpoint redoes it) and one line says so. A second Ctrl-C while the query stops interrupts at once.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from ..errors import ParameterError, QueryInterrupted, original_error

_POLL_SECONDS = 0.5  # how soon a Ctrl-C is acted on: one short awaitTermination call at most
_SHORTEST_WAIT = 0.01  # awaitTermination refuses a timeout of 0 (it takes whole milliseconds, > 0)


def await_termination(query: Any, timeout: float | None = None) -> bool | None:
    """``query.awaitTermination(timeout)``, raising the sink's own typed error (same class and message, the
    ``StreamingQueryException`` as its cause) when the query died of one; other failures pass unchanged.
    Classic PySpark and Spark Connect alike. Returns what ``awaitTermination`` returns (None without a timeout,
    else whether the query terminated in time).

    Ctrl-C (SIGINT, in the main thread) stops the query cleanly, prints one line on stderr naming it and its last
    batch, and raises :class:`~parquet_sink.errors.QueryInterrupted`: a ``KeyboardInterrupt`` that an uncaught
    ends the program with status 130 and no traceback. Start the query again with the same checkpoint to go on.

    Example::

        >>> query = df.writeStream.foreachBatch(ParquetSink("/data/events")).option(
        ...     "checkpointLocation", "/data/_checkpoints/events").start()
        >>> try:
        ...     await_termination(query)
        ... except ForeignQueryError as exc:
        ...     print("a new checkpoint on an old output:", exc)
    """
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0):
        raise ParameterError(
            f"await_termination(query, timeout={timeout!r}): timeout is a number of seconds > 0, or None to wait until "
            "the query ends (as query.awaitTermination takes it)"
        )
    try:
        with _ctrl_c_flag() as pressed:
            if pressed is None:  # not the main thread: no signal reaches this wait, wait as Spark does
                return query.awaitTermination() if timeout is None else query.awaitTermination(timeout)
            deadline = None if timeout is None else time.monotonic() + timeout
            while not pressed.is_set():
                left = _POLL_SECONDS if deadline is None else min(_POLL_SECONDS, deadline - time.monotonic())
                if left <= 0:
                    return False
                if query.awaitTermination(max(left, _SHORTEST_WAIT)):
                    return None if timeout is None else True
            _stop(query)
    except Exception as exc:
        typed = original_error(exc)
        if typed is None:
            raise
        raise typed from exc
    raise QueryInterrupted(130)


@contextlib.contextmanager
def _ctrl_c_flag() -> Iterator[threading.Event | None]:
    """While the block runs, the first SIGINT sets the yielded event (a second raises KeyboardInterrupt as
    Python's default does); the previous handler (PySpark's) is back after. None outside the main thread, where
    Python cannot install a handler."""
    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    pressed = threading.Event()

    def on_sigint(signum: int, frame: Any) -> None:
        if pressed.is_set():
            raise KeyboardInterrupt
        pressed.set()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, previous)


def _stop(query: Any) -> None:
    """Stop ``query`` and say so in one line: its name or id and the last batch it finished."""
    label = f"query {query.name!r}" if query.name else f"query {query.id}"
    query.stop()
    progress = query.lastProgress  # after the stop: a batch may have finished meanwhile
    batch = None if not progress else progress.get("batchId")
    after = "" if batch is None else f" after batch {batch}"
    sys.stderr.write(
        f"parquet-sink: interrupted (Ctrl-C): stopped {label}{after}; every batch it committed stays, "
        f"and starting it again with the same checkpoint goes on from there\n")
    sys.stderr.flush()
