"""Bounded, ordered pipelines on threads, so that the log's CPU work (Arrow kernels, numpy, CRC-32 and file
I/O all release the GIL) runs on both cores while the next block is read or the previous one written.

Both helpers keep results in input order and hold at most a few items ahead of the consumer (bounded
memory); an error surfaces at the item that raised it, in order; a consumer that stops early cancels what
has not started (what runs finishes before the generator closes).

Example::

    >>> list(mapped_ahead(len, iter([b"ab", b"c"]), threads=2))
    [2, 1]
    >>> list(ahead(iter(range(3))))
    [0, 1, 2]
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

_END = object()
SMALL_BYTES = 1 << 20  # work on this many bytes runs on the caller's thread: a thread's start and hand-offs cost more


def _small_part(items: Iterator[T], size: Callable[[T], int]) -> Generator[T, None, bool]:
    """The first items of ``items`` (taken from it) until their ``size`` adds up to :data:`SMALL_BYTES`, for the
    caller's thread; returns whether ``items`` ran out."""
    taken = 0
    while taken < SMALL_BYTES:
        item = next(items, _END)
        if item is _END:
            return True
        taken += size(item)  # type: ignore[arg-type]
        yield item  # type: ignore[misc]
    return False


def mapped_ahead(
    function: Callable[[T], R], items: Iterable[T], threads: int = 2, queued: int = 2,
    inline: Callable[[T], int] | None = None,
) -> Iterator[R]:
    """``function(item)`` for each item, computed on ``threads`` threads while the caller's thread draws
    the next items from ``items``: up to ``threads + queued`` items are submitted and not yet returned, so
    that a thread that finishes finds the next item waiting even while the caller is busy with a result.
    With ``inline`` (an item's size in bytes), items are mapped on the caller's thread until their sizes add
    up to :data:`SMALL_BYTES` (a small log's compaction starts no thread)."""
    iterator = iter(items)
    if inline is not None:
        for item in _small_part(iterator, inline):
            yield function(item)
    first = next(iterator, _END)
    if first is _END:
        return
    second = next(iterator, _END)
    if second is _END:  # one item (a small log file): no thread
        yield function(first)  # type: ignore[arg-type]
        return
    with ThreadPoolExecutor(threads, thread_name_prefix="log-work") as pool:
        pending: deque[Future[R]] = deque([pool.submit(function, first), pool.submit(function, second)])  # type: ignore[arg-type]
        try:
            for item in iterator:
                if len(pending) >= threads + queued:
                    result = pending.popleft().result()
                    pending.append(pool.submit(function, item))
                    yield result
                else:
                    pending.append(pool.submit(function, item))
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()


def ahead(items: Iterator[T], depth: int = 2, inline: bool = False) -> Iterator[T]:
    """The items of ``items``, produced on a thread of their own up to ``depth`` items ahead of the
    consumer (a producer that computes while the consumer writes). With ``inline`` (items are bytes-like),
    produced on the consumer's thread until they add up to :data:`SMALL_BYTES` (a small log's compact file
    starts no thread)."""
    if inline and (yield from _small_part(items, len)):  # type: ignore[arg-type]
        return
    with ThreadPoolExecutor(1, thread_name_prefix="log-ahead") as pool:
        pending: deque[Future[object]] = deque(pool.submit(next, items, _END) for _ in range(depth))
        try:
            while True:
                item = pending.popleft().result()
                if item is _END:
                    return
                pending.append(pool.submit(next, items, _END))
                yield item  # type: ignore[misc]
        finally:
            for future in pending:
                future.cancel()


__all__ = ["SMALL_BYTES", "ahead", "mapped_ahead"]
