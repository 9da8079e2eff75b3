"""Writers beside each other (issue 36 item 5): a commit race lost to another writer's append moves the commit to
the next log batch, as Delta's optimistic transactions do; only real conflicts are refused (the same query's batch
committed by another run of its checkpoint, other partition columns, a schema the batch does not fit).

Races are staged at the commit moment: other writers commit right before the writer under test creates its log file
(its ``MetadataLog.add``), so it loses the exclusive create for real, on real storage. Two real processes appending
at once (a Spark streaming query and a ``write_batch`` loop) are in ``tests/crash/test_neighbour_processes.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parquet_sink import MetadataLog, ParquetSink, errors, history, read_committed, write_batch
from parquet_sink.log.entry import CommitRecord, attribute
from parquet_sink.write.conflicts import Conflict, Transaction, WinningCommit, check_commit
from tests.helpers.crash_util import assert_same_ids

SCHEMA = "id long, name string"
QUERY = "6abb5a0d-3f4e-4a43-9c55-0b8f3c1e2d11"


def _checkpoint(tmp_path: Path, query_id: str = QUERY) -> str:
    """A checkpoint directory whose ``metadata`` names ``query_id`` (what Spark writes before batch 0)."""
    ckpt = tmp_path / f"ckpt-{query_id[:8]}"
    ckpt.mkdir(exist_ok=True)
    (ckpt / "metadata").write_text(json.dumps({"id": query_id}))
    return str(ckpt)


def _rows(ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids]})


def _staged(sink: ParquetSink, before_create: dict[int, Callable[[], None]]) -> ParquetSink:
    """``sink`` whose commit to log batch ``b`` first runs ``before_create[b]`` (other writers committing), right
    before its exclusive create of the log file: a race it loses."""
    real_add = sink.log.add

    def add(batch_id, entries):
        if batch_id in before_create:
            before_create.pop(batch_id)()
        return real_add(batch_id, entries)

    sink.log.add = add
    return sink


def _records(out: str) -> dict[int, CommitRecord]:
    log = MetadataLog(out)
    kept = [r for r in map(CommitRecord.from_entry, log.all_files()) if r is not None]
    return attribute(kept, range(log.latest_batch_id() + 1))


def test_sink_losing_races_to_appends_commits_at_the_next_batches_compact_ones_too(spark, tmp_path):
    """Query q commits batch 0; at batch 1's commit another app appends one batch, at batch 2's two more: q
    moves batch 1 to log batch 2 and batch 2 to log batch 5, both compaction batches (interval 3), which it
    writes as compact files. Every row once in read_committed and spark.read.parquet; the records map q's
    batches 0,1,2 to log batches 0,2,5; the next call (a replay of batch 2) is skipped. Before, the first lost
    race failed the query with CommitConflictError."""
    out = str(tmp_path / "out")
    neighbour = iter(range(3))

    def append(n: int) -> Callable[[], None]:
        def run() -> None:
            for _ in range(n):
                version = next(neighbour)
                table = _rows([1000 + version])
                assert write_batch(out, table, app_id="n", version=version, compact_interval=3).committed

        return run

    sink = _staged(ParquetSink(out, compact_interval=3, checkpoint_location=_checkpoint(tmp_path)),
                   {1: append(1), 3: append(2)})
    for batch in range(3):
        sink(spark.createDataFrame([(batch, f"n{batch}")], SCHEMA), batch)
    assert [p.log_batch_id for p in sink.recent_progress] == [0, 2, 5]
    assert [p.conflicts for p in sink.recent_progress] == [0, 1, 1]
    names = sorted(p.name for p in (Path(out) / "_spark_metadata").iterdir())
    assert {"2.compact", "5.compact"} <= set(names) and "2" not in names and "5" not in names, names
    assert MetadataLog(out).check() == []
    expected = [0, 1, 2, 1000, 1001, 1002]
    assert_same_ids(read_committed(out).column("id").to_pylist(), expected, "read_committed")
    assert_same_ids([r[0] for r in spark.read.parquet(out).select("id").collect()], expected, "spark.read.parquet")
    records = _records(out)
    assert [(b, r.query_id, r.query_batch_id) for b, r in sorted(records.items())] == [
        (0, QUERY, 0), (1, "n", 0), (2, QUERY, 1), (3, "n", 1), (4, "n", 2), (5, QUERY, 2)]
    times = [r["commit_time"] for r in history(out).to_pylist()[::-1]]
    assert all(a < b for a, b in zip(times, times[1:]))
    sink(spark.createDataFrame([(2, "n2")], SCHEMA), 2)  # a replay after the restart: skipped
    assert sink.last_progress.skipped and MetadataLog(out).latest_batch_id() == 5
    sink(spark.createDataFrame([(3, "n3")], SCHEMA), 3)  # continues after the neighbours
    assert sink.last_progress.log_batch_id == 6 and sink.last_progress.conflicts == 0


def test_query_continues_after_neighbours_appended_between_its_batches(spark, tmp_path):
    """Another app appends between two batches of a query (no race): the query's next batch goes to the next
    log batch. Before, it was refused with ForeignQueryError (its batch id was not past the log's latest)."""
    out = str(tmp_path / "out")
    sink = ParquetSink(out, checkpoint_location=_checkpoint(tmp_path))
    sink(spark.createDataFrame([(0, "n0")], SCHEMA), 0)
    write_batch(out, _rows([1000]), app_id="n", version=0)
    write_batch(out, _rows([1001]), app_id="n", version=1)
    sink(spark.createDataFrame([(1, "n1")], SCHEMA), 1)
    assert sink.last_progress.log_batch_id == 3
    assert_same_ids(read_committed(out).column("id").to_pylist(), [0, 1, 1000, 1001], "read_committed")
    with pytest.raises(errors.OutputResetError, match=r"newest batch in it is 1 \(log batch 3\), so batches 2\.\.2"):
        ParquetSink(out, checkpoint_location=_checkpoint(tmp_path))(spark.createDataFrame([(3, "n3")], SCHEMA), 3)


@pytest.mark.parametrize("change", ["schema", "partitioning", "replay"])
def test_sink_refuses_real_conflicts(spark, tmp_path, change):
    """What the winner changed conflicts: a new column this batch lacks, other partition columns
    (SchemaMismatchError), or another run of the same checkpoint committing this very batch (CommitConflictError:
    two runs of one checkpoint). Nothing of this batch is committed; the output reads the winner's rows once."""
    out = str(tmp_path / "out")
    ckpt = _checkpoint(tmp_path)
    winner_ids = [100]

    def winner() -> None:
        if change == "schema":
            table = _rows(winner_ids).append_column("extra", pa.array([1.5], pa.float64()))
            write_batch(out, table, app_id="n", version=0)
        elif change == "partitioning":
            write_batch(out, _rows(winner_ids), app_id="n", version=0, partition_by=["name"])
        else:
            ParquetSink(out, checkpoint_location=ckpt)(spark.createDataFrame([(100, "n100")], SCHEMA), 0)

    sink = _staged(ParquetSink(out, checkpoint_location=ckpt), {0: winner})
    error = errors.CommitConflictError if change == "replay" else errors.SchemaMismatchError
    with pytest.raises(error, match="log batch 0") as info:
        sink(spark.createDataFrame([(0, "n0")], SCHEMA), 0)
    if change == "replay":
        assert "two runs of one checkpoint" in str(info.value)
    assert MetadataLog(out).latest_batch_id() == 0
    assert_same_ids(read_committed(out).column("id").to_pylist(), winner_ids, "the winner's rows only")


def test_vacuum_while_the_sink_retries_keeps_its_files(spark, tmp_path):
    """Another app takes the log batch the query aimed at, then a vacuum runs (--older-than 0s) before the query
    retries: the query's lease lives until the query commits its batch, not only while its first log batch is
    free, so the vacuum keeps the files and the retry commits them. With the old lease rule the vacuum deleted
    them (the lease's log batch was committed by the other app)."""
    from tests.helpers.crash_util import vacuum

    out = str(tmp_path / "out")
    reports = []

    def winner() -> None:
        write_batch(out, _rows([100]), app_id="n", version=0)
        reports.append(vacuum(out))

    sink = _staged(ParquetSink(out, checkpoint_location=_checkpoint(tmp_path)), {1: winner})
    sink(spark.createDataFrame([(0, "n0")], SCHEMA), 0)
    sink(spark.createDataFrame([(1, "n1"), (2, "n2")], SCHEMA), 1)
    assert reports[0]["files"] == [] and reports[0]["in_flight_kept"] >= 1, reports
    assert sink.last_progress.log_batch_id == 2 and sink.last_progress.conflicts == 1
    assert_same_ids(read_committed(out).column("id").to_pylist(), [0, 1, 2, 100], "after the race and the vacuum")
    assert_same_ids([r[0] for r in spark.read.parquet(out).select("id").collect()], [0, 1, 2, 100], "spark")


# -- the decision, drawn ------------------------------------------------------------------------------------

ID = pa.schema([("id", pa.int64()), ("name", pa.string())])
EVOLVED = ID.append(pa.field("extra", pa.float64()))
RETYPED = pa.schema([("id", pa.string()), ("name", pa.string())])


@st.composite
def winners(draw) -> list[WinningCommit]:
    out = []
    for batch in range(draw(st.integers(0, 5))):
        who = draw(st.sampled_from(["q", "n", "spark"]))
        record = None if who == "spark" else CommitRecord(batch, who, draw(st.integers(0, 9)), "c")
        empty = draw(st.booleans())
        schema = None if empty else draw(st.sampled_from([ID, EVOLVED, RETYPED, ID.remove(1)]))
        parts = None if empty else draw(st.sampled_from([(), ("day",)]))
        out.append(WinningCommit(batch, record, schema, parts))
    return out


@settings(max_examples=300, deadline=None)
@given(winners(), st.sampled_from(["q", None]), st.integers(0, 9), st.sampled_from([ID, EVOLVED, None]), st.booleans())
def test_check_commit_refuses_exactly_the_real_conflicts(winners_, query, batch, schema, partitioned):
    """The conflict rule against its definition, on drawn winners: a blind append of another writer (any record
    or none, the same partitioning, a schema this batch fits) never conflicts; the same query at this batch or
    later, other partition columns, a column this batch lacks or retypes, or no query id to tell, always do; the
    first such winner in log order is named."""
    txn = Transaction(query, batch, schema, ("day",) if partitioned else ())
    conflict = check_commit(txn, winners_)

    def real(w: WinningCommit) -> str | None:
        if query is None:
            return "identity"
        if w.record is not None and w.record.query_id == query and w.record.query_batch_id >= batch:
            return "replay"
        if w.partition_columns is not None and w.partition_columns != txn.partition_by:
            return "partitioning"
        if w.data_schema is not None and schema is not None:
            fits = all(f.name in schema.names and schema.field(f.name).type == f.type for f in w.data_schema)
            if not fits:
                return "schema"
        return None

    expected = next(((w.log_batch_id, real(w)) for w in winners_ if real(w)), None)
    assert (None if conflict is None else (conflict.log_batch_id, conflict.kind)) == expected
    assert conflict is None or isinstance(conflict, Conflict) and conflict.detail


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    bursts=st.lists(st.lists(st.sampled_from(["n", "n", "m", "same", "evolve"]), max_size=3), min_size=1, max_size=5),
    interval=st.integers(1, 4),
)
def test_write_batch_interleavings_commit_each_version_once(tmp_path_factory, bursts, interval):
    """App a writes one version per burst; right before each of its log creates, a burst of other commits lands
    (apps n and m appending, a retry of a's own version, or a's own version written with a new nullable column).
    Each version ends up committed exactly once (by a or its retry), at a log batch after every burst commit,
    compact files where the interval says, readers see every row once, commit times increase; a burst that adds a
    column a's data lacks refuses a's commit with SchemaMismatchError, and nothing of it is committed."""
    out = str(tmp_path_factory.mktemp("n") / "out")
    versions = {"n": 0, "m": 0}
    expected: list[int] = []
    real_add = MetadataLog.add
    pending: list[list[str]] = []
    evolved = [False]

    def burst(kind: str, version: int) -> None:
        if kind in versions:
            ids = [10_000 * (1 + ord(kind)) + versions[kind]]
            table = _rows(ids) if not evolved[0] else _rows(ids).append_column("extra", pa.array([None], pa.float64()))
            write_batch(out, table, app_id=kind, version=versions[kind], compact_interval=interval)
            versions[kind] += 1
            expected.extend(ids)
        elif kind == "same":  # a retry of a's version (a second one is skipped)
            if write_batch(out, _rows([version]), app_id="a", version=version, compact_interval=interval).committed:
                expected.append(version)
        else:  # a neighbour adds a nullable column: a's batch no longer fits
            table = _rows([20_000 + version]).append_column("extra", pa.array([2.5], pa.float64()))
            if write_batch(out, table, app_id="e", version=version, compact_interval=interval).committed:
                expected.append(20_000 + version)
            evolved[0] = True

    def add(self, batch_id, entries):
        if pending and pending[0] is not None:
            kinds, pending[0] = pending[0], None
            for kind in kinds:
                burst(kind, current[0])
        return real_add(self, batch_id, entries)

    current = [0]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(MetadataLog, "add", add)
        for version, kinds in enumerate(bursts):
            current[0] = version
            if "evolve" in kinds:  # a's own retry would not fit the evolved schema either
                kinds = [k for k in kinds if k != "same"]
            pending[:] = [list(kinds)]
            same = "same" in kinds
            try:
                result = write_batch(out, _rows([version]), app_id="a", version=version, compact_interval=interval)
            except errors.SchemaMismatchError:
                assert evolved[0] and "evolve" in kinds and not same
                break
            if same:
                assert not result.committed, "a's version was committed by its retry: skipped"
            else:
                assert result.committed
                expected.append(version)
    log = MetadataLog(out)
    assert log.check() == []
    latest = log.latest_batch_id()
    names = {p.name for p in (Path(out) / "_spark_metadata").iterdir()}
    assert all(f"{b}.compact" in names for b in range(latest + 1) if (b + 1) % interval == 0), names
    assert_same_ids(read_committed(out).column("id").to_pylist(), expected, "read_committed")
    records = _records(out)
    a_versions = [r.query_batch_id for _, r in sorted(records.items()) if r.query_id == "a"]
    assert a_versions == sorted(set(a_versions)), "each version of a once, in order"
    times = [r["commit_time"] for r in history(out).to_pylist()[::-1]]
    assert all(x < y for x, y in zip(times, times[1:]))
