"""The compact interval a log implies, as Spark derives it (``CompactibleFileStreamLog.deriveCompactInterval``
and the two-compact-files rule), searched with Hypothesis: no Spark needed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from parquet_sink.log.compaction import chain_as_written, derive_compact_interval, expired_below, infer_interval


@given(st.integers(1, 200), st.integers(0, 5000))
def test_derived_interval_makes_the_compact_file_a_compaction_batch(default, latest_compact):
    interval = derive_compact_interval(default, latest_compact)
    n = latest_compact + 1
    assert n % interval == 0, "the only compact file left is a compaction batch under the derived interval"
    if n <= default:
        assert interval == n
    elif default < n // 2:  # the first divisor of n from the default up to n / 2, else n itself
        assert interval >= default and all(n % i for i in range(default, min(interval, n // 2 + 1)))
    else:  # no divisor search (Spark's rule): the whole run of batches is one interval
        assert interval == n


def test_derived_interval_examples_from_spark():
    assert derive_compact_interval(5, 9) == 10  # only 9.compact left: Spark continues with 10 (5 < 10 / 2 fails)
    assert derive_compact_interval(5, 11) == 6  # 12 batches: 6 is the first divisor from 5
    assert derive_compact_interval(10, 4) == 5  # fewer batches than the default
    assert derive_compact_interval(3, 12) == 13  # 13 is prime


@given(st.integers(1, 50), st.integers(1, 40), st.integers(1, 6), st.integers(0, 3))
def test_two_compact_files_give_their_distance(default, interval, count, deltas):
    compacts = [interval * (k + 1) - 1 for k in range(count)]
    listing = {b: f"/o/_spark_metadata/{b}.compact" for b in compacts}
    listing |= {compacts[-1] + d: f"/o/_spark_metadata/{compacts[-1] + d}" for d in range(1, deltas + 1)}
    inferred = infer_interval(default, listing)
    if count >= 2:
        assert inferred == interval
    elif (compacts[0] + 1) % default == 0:  # the interval asked for fits the only compact file: kept
        assert inferred == default
    else:
        assert inferred == derive_compact_interval(default, compacts[0])
    assert infer_interval(default, {b: p for b, p in listing.items() if not p.endswith(".compact")}) is None


def test_a_writer_restarted_after_cleanup_keeps_its_interval():
    """Interval 3, cleanup left one compact file: a restarted writer keeps 3 (Spark's rule derives 6 from 5.compact
    and 3 from 11.compact: a writer restarted at each wrote 8 as a delta, the next looked for 14.compact; seen in
    the random-kill soak)."""
    for compact, deltas in ((5, (6, 7)), (11, (12, 13, 14, 15))):
        listing = {compact: f"/o/_spark_metadata/{compact}.compact"} | {d: f"/o/_spark_metadata/{d}" for d in deltas}
        assert infer_interval(3, listing) == 3
    assert derive_compact_interval(3, 5) == 6  # Spark's own rule, unchanged
    assert infer_interval(10, {5: "/o/_spark_metadata/5.compact"}) == 6  # another interval asked for: Spark's rule


@given(st.lists(st.sampled_from([2, 3, 5, 10]), min_size=1, max_size=4), st.lists(st.integers(1, 8), min_size=1,
       max_size=4), st.integers(1, 12), st.sampled_from([2, 3, 10]))
def test_cleanup_never_breaks_a_chain_a_reader_may_take(intervals, runs, retain, interval):
    """A log written by writers at drawn intervals in turn (ours at the recorded one, Spark's own sink at one it
    derived or its session's), each naming its compaction batches by its own: cleanup after the newest batch under
    the recorded ``interval`` deletes no log file a snapshot from ``current + 1 - retain`` on reads (Spark's rule
    alone deleted below the batch the interval names, a delta where another writer wrote one), and where every
    writer kept the recorded interval it is Spark's rule."""
    listing, batch = {}, 0
    for writer_interval, run in zip(intervals, runs):
        for _ in range(run):
            name = f"{batch}.compact" if batch and (batch + 1) % writer_interval == 0 else f"{batch}"
            listing[batch] = f"/o/_spark_metadata/{name}"
            batch += 1
    current = batch - 1
    below = expired_below(current, interval, retain, listing)
    if below is None:
        assert interval > current + 1 - retain
        return
    kept = {b: p for b, p in listing.items() if b >= below}
    for b in range(max(current + 1 - retain, 0), current + 1):
        assert chain_as_written(b, kept) == chain_as_written(b, listing), b
    if set(intervals) == {interval}:
        min_batch_id = current + 1 - retain
        assert below == min_batch_id - min_batch_id % interval - 1


def test_cleanup_after_spark_sink_wrote_a_delta_where_the_interval_names_a_compact_file():
    """Interval 3, cleanup had left 5.compact alone; Spark's own sink derived 6 from it and wrote 8 as a delta: after
    batch 9, Spark's rule (8) deleted 5.compact, 6 and 7, which the chain up to 9 reads (the output model's find)."""
    listing = {5: "/o/_spark_metadata/5.compact"} | {b: f"/o/_spark_metadata/{b}" for b in (6, 7, 8, 9)}
    assert expired_below(9, 3, 1, listing) == 5
    assert expired_below(9, 3, 1, listing | {8: "/o/_spark_metadata/8.compact"}) == 8
