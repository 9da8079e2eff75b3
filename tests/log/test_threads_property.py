"""The log's thread pipelines (:mod:`parquet_sink.log.threads`): whatever the items, the functions' timing and
where one raises, results come back in input order, no more than the bound is drawn ahead of the consumer, an
error surfaces at the item that raised it (never before the results ahead of it) and a consumer that stops
early leaves nothing running."""

from __future__ import annotations

import threading
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parquet_sink.log.threads import SMALL_BYTES, ahead, mapped_ahead

# an item's size: inline pipelines run on the caller's thread until the sizes add up to SMALL_BYTES, then on threads
_SIZES = st.sampled_from([0, 1, SMALL_BYTES // 3, SMALL_BYTES])


class _Boom(Exception):
    pass


@settings(max_examples=150, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(st.tuples(st.integers(0, 100), st.sampled_from([0, 0, 0.001, 0.003]), _SIZES), max_size=12),
    st.integers(1, 3),
    st.integers(0, 3),
    st.none() | st.integers(0, 11),
    st.none() | st.integers(0, 11),
    st.booleans(),
)
def test_mapped_ahead_keeps_order_bounds_and_errors(items, threads, queued, fails_at, stop_after, inline) -> None:
    drawn: list[int] = []
    returned: list[int] = []
    running = [0]
    lock = threading.Lock()

    def source():
        for index, item in enumerate(items):
            # drawn items not yet returned: at most threads + queued (the first two are always submitted)
            assert len(drawn) - len(returned) <= max(2, threads + queued)
            drawn.append(index)
            yield index, item

    def work(pair):
        index, (value, pause, _) = pair
        with lock:
            running[0] += 1
        try:
            time.sleep(pause)
            if index == fails_at:
                raise _Boom(index)
            return index, value * 2
        finally:
            with lock:
                running[0] -= 1

    size = (lambda pair: pair[1][2]) if inline else None
    results = mapped_ahead(work, source(), threads=threads, queued=queued, inline=size)
    try:
        for index, doubled in results:
            assert index == len(returned) and doubled == items[index][0] * 2
            returned.append(index)
            if stop_after is not None and len(returned) > stop_after:
                break
    except _Boom as exc:
        assert exc.args[0] == fails_at == len(returned)  # every item before it came back first
    else:
        if stop_after is None or stop_after >= len(items) - 1:
            assert fails_at is None or fails_at >= len(items)
            assert returned == list(range(len(items)))
    results.close()
    assert running[0] == 0  # nothing left running once the generator is closed


@settings(max_examples=60, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.lists(_SIZES.map(lambda n: b"x" * n), max_size=10), st.integers(1, 3), st.none() | st.integers(0, 9), st.booleans())
def test_ahead_keeps_order_and_errors(values, depth, fails_at, inline) -> None:
    def produce():
        for index, value in enumerate(values):
            if index == fails_at:
                raise _Boom(index)
            yield value

    got = []
    try:
        for value in ahead(produce(), depth, inline):
            got.append(value)
    except _Boom as exc:
        assert exc.args[0] == fails_at == len(got)
    assert got == values[: len(got)]
    if fails_at is None or fails_at >= len(values):
        assert got == values
