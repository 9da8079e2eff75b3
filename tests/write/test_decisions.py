"""The writers' pure decision rules, searched with Hypothesis (no Spark, no storage): the invariants that make
the sink exactly-once, whatever history of queries and apps the log holds, the restart plans ``doctor``
builds from them, and the liveness of an optimize's lease (what keeps ``vacuum`` off its files)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from parquet_sink.log.entry import CommitRecord
from parquet_sink.maintenance.doctor import Checkpoint, plan_restart
from parquet_sink.maintenance.inspect import Batch, Output
from parquet_sink.read.chain import decide_write
from parquet_sink.read.history import OPTIMIZE_APP_ID
from parquet_sink.storage.filesystem import Storage
from parquet_sink.write.sink import decide_batch

QUERIES = ["q0", "q1", "q2", None]  # None: a writer without a query id (Spark's own sink, batch-id-only)
WRITERS = [*QUERIES, OPTIMIZE_APP_ID]  # and optimize's batches (no row added, no batch replayed)


@st.composite
def histories(draw) -> tuple[int, dict[str | None, CommitRecord]]:
    """A log written by up to three queries and optimizes taking turns (each query's batch ids count up from 0 as
    it commits; a query may start on a non-empty log, as with on_foreign_query="append"): its newest batch and the
    newest commit record of each writer."""
    newest: dict[str | None, CommitRecord] = {}
    latest = -1
    for query in draw(st.lists(st.sampled_from(WRITERS), max_size=12)):
        latest += 1
        own = newest.get(query)
        newest[query] = CommitRecord(latest, query, 0 if own is None else own.query_batch_id + 1, "c")
    return latest, newest


@settings(max_examples=400, deadline=None)
@given(histories(), st.sampled_from(QUERIES + ["new"]), st.integers(0, 15), st.booleans())
def test_decide_batch_never_commits_twice_nor_out_of_order(history, query, batch, append):
    latest, queries = history
    action, log_batch = decide_batch(latest, queries, query, batch, append)
    own = queries.get(query)
    since = [r for r in queries.values() if own is not None and r.log_batch_id > own.log_batch_id]
    after_optimize = own is not None and all(r.query_id == OPTIMIZE_APP_ID for r in since)
    if query is None and after_optimize and batch == own.query_batch_id + 1:
        assert action == "commit", "an optimize's batches never stop a query without id (they replay none)"
    if own is not None and batch <= own.query_batch_id:
        assert (action, log_batch) == ("skip", own.log_batch_id), "a replay of a committed batch is skipped"
    elif action == "commit":
        assert log_batch == latest + 1, "a commit is always the next log batch"
        continuing = own is not None and query is not None
        if continuing and not append:  # other writers may have appended since: the next batch id, any log batch
            assert batch == own.query_batch_id + 1, "a query commits its batches in order, none skipped"
        else:
            assert append or batch == latest + 1 or (after_optimize and batch == own.query_batch_id + 1), (
                "a query's first batch id is its log batch id; one without id goes on only after an optimize's"
            )
        assert append or own is not None or latest < 0, "a new query on a used log never commits silently"
    else:
        assert log_batch is None and action in ("foreign", "reset")
        assert not (append and latest >= 0), "with append every new batch is committed"
        if action == "reset":  # the checkpoint is ahead of the log
            assert batch > (own.query_batch_id if own is not None and query is not None else latest) + 1
        else:
            assert own is None or query is None, "a query that committed before is never foreign"


@settings(max_examples=300, deadline=None)
@given(histories(), st.sampled_from(QUERIES + ["new"]), st.integers(0, 15))
def test_decide_write_skips_every_committed_version_and_appends_the_rest(history, app, version):
    latest, commits = history
    action, log_batch = decide_write(latest, commits, app, version)
    own = commits.get(app)
    if own is not None and version <= own.query_batch_id:
        assert action == "skip"
    else:
        assert (action, log_batch) == ("commit", latest + 1)


def _output(tmp_path, records: list[CommitRecord]) -> Output:
    batches = {r.log_batch_id: Batch(r.log_batch_id, record=r) for r in records}
    latest = max(batches, default=None)
    return Output(Storage(str(tmp_path)), None, {}, latest, batches)  # type: ignore[arg-type]


def test_restart_plans(tmp_path):
    own = [CommitRecord(b, "q", b, "c") for b in range(4)]  # log batches 0..3 by query q
    replay = plan_restart(Checkpoint("q", 4, 3), _output(tmp_path, own + [CommitRecord(4, "q", 4, "c")]))
    assert (replay.batch, replay.replay, replay.action, replay.log_batch, replay.ok) == (4, True, "skip", 4, True)
    nxt = plan_restart(Checkpoint("q", 3, 3), _output(tmp_path, own))
    assert (nxt.batch, nxt.replay, nxt.action, nxt.log_batch, nxt.ok) == (4, False, "commit", 4, True)
    fresh = plan_restart(Checkpoint(None, None, None), _output(tmp_path, own))
    assert (fresh.action, fresh.ok) == ("foreign", False) and "ForeignQueryError" in fresh.message
    appended = plan_restart(Checkpoint(None, None, None), _output(tmp_path, own), append=True)
    assert (appended.action, appended.log_batch, appended.ok) == ("commit", 4, True)
    reset = plan_restart(Checkpoint("q", 9, 9), _output(tmp_path, own))
    assert (reset.action, reset.ok) == ("reset", False) and "OutputResetError" in reset.message
    restored = plan_restart(Checkpoint("q", 1, 1), _output(tmp_path, own))
    assert restored.action == "skip" and not restored.ok, "an older checkpoint copy would lose data"
    assert "restored from an older copy" in restored.warnings[0]
    blind = plan_restart(Checkpoint("q", 3, 3), _output(tmp_path, own), batch_id_only=True)
    assert not blind.ok and "batch-id-only" in blind.warnings[0]


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([1, 2, 3, 10]),
    st.lists(st.sampled_from(["a", "b"]), max_size=12),
    st.lists(st.sampled_from(["a", "b", "optimize"]), max_size=30),
)
def test_an_optimize_lease_lives_until_its_own_swap_whatever_commits_first(interval, before, steps):
    """The lease an optimize holds protects its new files until its swap commits, whatever other writers commit
    meanwhile (its compaction batch included: then it moves to the next one before its empty batches), and dies
    with the swap. Before, a writer taking the compaction batch ended it while the optimize still held its files."""
    from parquet_sink.read.chain import app_commits
    from parquet_sink.read.history import OPTIMIZE_APP_ID
    from parquet_sink.write.inflight import Lease
    from parquet_sink.write.rewrite import _next_compaction

    records: list[CommitRecord] = []
    versions: dict[str, int] = {}

    def commit(app: str, version: int | None = None) -> None:
        versions[app] = versions.get(app, -1) + 1 if version is None else version
        records.append(CommitRecord(len(records), app, versions[app], "c"))

    for app in before:
        commit(app)
    target = _next_compaction(len(records) - 1, interval)
    lease = Lease("lease", target, "id", 0, (OPTIMIZE_APP_ID, target))
    swapped = False
    for step in steps + ["optimize"] * (2 * interval + 2):
        newest = {app: r.query_batch_id for app, r in app_commits(records).items()}
        assert lease.is_live(len(records) - 1, newest) != swapped, (records, lease)
        if swapped:
            break
        if step != "optimize":
            commit(step)
            continue
        target = _next_compaction(len(records) - 1, interval)
        if target != lease.log_batch_id:  # a writer took its compaction batch: the lease moves first
            lease = Lease("lease", target, "id", 0, (OPTIMIZE_APP_ID, target))
        swapped = len(records) == target
        commit(OPTIMIZE_APP_ID, len(records))  # an empty batch, or the swap: version = log batch
    assert swapped


@st.composite
def spark_sink_restarts(draw) -> tuple[Output, Checkpoint]:
    """An output only Spark's own file sink wrote (log batches 0..latest, no commit record: it records no query
    id) and a checkpoint that has run, up to any batch around the log's newest, committed or not: the checkpoint
    Spark's sink wrote the output with (it commits to the log before the checkpoint), an older copy of it, or
    another query's."""
    latest = draw(st.integers(0, 12))
    offsets = draw(st.integers(0, latest + 2))
    commits = draw(st.sampled_from([offsets, offsets - 1])) if offsets > 0 else draw(st.sampled_from([0, None]))
    batches = {b: Batch(b) for b in range(latest + 1)}
    return Output(Storage("/tmp/spark-sink-output"), None, {}, latest, batches), Checkpoint("q", offsets, commits)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(spark_sink_restarts(), st.booleans(), st.booleans())
def test_doctor_never_calls_a_restart_safe_that_may_commit_sparks_batches_again(restart, append, stopped):
    """A restart whose first batch the log of Spark's own sink already holds may be that sink's own replay: a
    plan that commits it (on_foreign_query="append") is not safe, and no plan offers on_foreign_query="append"
    without saying it writes those rows a second time. Before, doctor called the append safe (exit 0) and offered
    it as the fix for a Spark sink that crashed between its log commit and its checkpoint commit: the rows of the
    re-run batch were in the output twice. A batch after the log's next one commits after Spark's newest batch
    (which that sink's query would then skip) only once its query is said to be stopped for good (issue 53)."""
    output, ckpt = restart
    plan = plan_restart(ckpt, output, append=append, spark_sink_stopped=stopped)
    held = plan.batch <= output.latest
    if held:
        assert not plan.ok
        text = " ".join([plan.message, *plan.warnings])
        assert "run the query once more with Spark's own sink" in text and "a second time" in text
    else:  # a batch after the log's newest: Spark's sink never committed it
        assert plan.ok == (plan.action == "commit") and not plan.warnings
        assert plan.ok == (plan.batch == output.latest + 1 or (append and stopped))
        if not plan.ok and append:
            assert plan.action == "spark" and "spark_sink_stopped=True" in plan.message
