"""Commits beside other writers: the conflict check of a lost commit race (the counterpart of Delta's
``OptimisticTransaction`` / ``ConflictChecker``).

A writer reads the log, decides its log batch (the next one), writes its files, then commits them with an
exclusive create of that batch's log file. When another writer created it first, the commit is not lost: like
Delta, the writer reads the batches committed since its read (the *winning commits*) and asks
:func:`check_commit` whether any of them changed what its commit depends on. If none did (another app's
``write_batch``, another query's batch: blind appends), it commits the same files at the next log batch (which
may be a compaction batch: :meth:`~parquet_sink.log.metadata_log.MetadataLog.add` then writes the compact file).
Only real conflicts are refused:

* ``"replay"``: a winner is this query (or app) committing this batch (version) or a later one: another run of
  the same checkpoint, Delta's ``ConcurrentTransactionException``. The batch is committed once, by the winner.
* ``"identity"``: this writer has no query id (batch-id-only mode), so it cannot tell a winner that replays its
  batch from a neighbour (but for an optimize's batches, which replay none).
* ``"partitioning"`` / ``"schema"``: a winner wrote other partition columns, or a schema this batch does not
  fit by the output's schema rule (:func:`~parquet_sink.write.schema.schema_problems`): Delta's
  ``MetadataChangedException``.

:func:`check_commit` is pure (what changed since the read against what the commit depends on), so it is tested
on drawn interleavings and reusable by any writer that commits beside others; :func:`winning_commits` reads
what it needs from the log entries of the winning batches (one Parquet footer per winning batch with files).

Spark's own file sink is a neighbour no commit may follow: it skips every batch id the log already holds, so a
batch of ours committed after its newest one makes its query skip its next batch (rows lost, no error). Every
writer (the sink, ``write_batch``, ``optimize``) and ``doctor`` decide that with
:func:`~parquet_sink.log.entry.committed_by_spark_sink` and refuse with :func:`spark_sink_refusal`; the advice
for a batch Spark's sink may be re-running is :func:`spark_sink_window`. Going back from ``ParquetSink`` to
Spark's own sink with the same checkpoint is safe only while nothing of ours committed a batch after the query's:
:func:`spark_sink_resume` says what that sink would do (``doctor``), :func:`spark_sink_behind` flags an output whose
log ran ahead of Spark's sink's newest batch (``verify``).

Example::

    >>> txn = Transaction("q1", 7, pa.schema([("id", pa.int64())]), ())
    >>> check_commit(txn, [WinningCommit(12, CommitRecord(12, "daily-job", 3, "c"), txn.data_schema, ())])
    >>> check_commit(txn, [WinningCommit(12, CommitRecord(12, "q1", 7, "c"), None, None)]).kind
    'replay'
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import SparkSinkBatchError
from ..log.entry import BATCH_KEY, CommitRecord, attribute, records_of
from ..log.snapshot import data_files
from ..read.history import OPTIMIZE_APP_ID
from ..storage.filesystem import Storage
from .schema import read_committed_schema, schema_problems

ConflictKind = Literal["replay", "identity", "partitioning", "schema"]


@dataclass(frozen=True)
class Transaction:
    """What a commit depends on: who commits (the query or app id, None for a writer without one; its batch id
    or version) and the data schema (partition columns apart; None for a batch without rows, which depends on
    none) and partition columns its batch was checked against."""

    query_id: str | None
    query_batch_id: int
    data_schema: pa.Schema | None
    partition_by: tuple[str, ...]


@dataclass(frozen=True)
class WinningCommit:
    """A log batch committed after the writer's read: its commit record (None for a writer that leaves none,
    such as Spark's own sink) and the data schema and partition columns of its first data file (None when it
    wrote none)."""

    log_batch_id: int
    record: CommitRecord | None
    data_schema: pa.Schema | None
    partition_columns: tuple[str, ...] | None


@dataclass(frozen=True)
class Conflict:
    """Why a commit cannot move to the next log batch: the kind (see the module docstring), the winning log
    batch and what it changed, in words."""

    kind: ConflictKind
    log_batch_id: int
    detail: str


def check_commit(txn: Transaction, winners: Sequence[WinningCommit]) -> Conflict | None:
    """The first winning commit (in log order) that conflicts with ``txn``, or None when ``txn`` may be
    committed at the log batch after the last winner. Pure.

    Example: ``check_commit(Transaction("q", 3, schema, ()), [WinningCommit(5, None, schema, ())])`` -> ``None``.
    """
    for winner in winners:
        record = winner.record
        if txn.query_id is None and (record is None or record.query_id != OPTIMIZE_APP_ID):  # an optimize replays none
            return Conflict(
                "identity", winner.log_batch_id, "this writer has no query id to tell a replay of its batch apart"
            )
        if record is not None and record.query_id == txn.query_id and record.query_batch_id >= txn.query_batch_id:
            return Conflict(
                "replay", winner.log_batch_id,
                f"{txn.query_id} committed its batch {record.query_batch_id} there (this one is {txn.query_batch_id})",
            )
        if winner.partition_columns is not None and winner.partition_columns != txn.partition_by:
            return Conflict(
                "partitioning", winner.log_batch_id,
                f"it is partitioned by {list(winner.partition_columns)}, this batch by {list(txn.partition_by)}",
            )
        if winner.data_schema is not None and txn.data_schema is not None:
            problems = schema_problems(winner.data_schema, None, txn.data_schema, txn.partition_by)
            if problems:
                return Conflict("schema", winner.log_batch_id, "; ".join(problems))
    return None


def winning_commits(storage: Storage, table: pa.Table, after: int, latest: int) -> list[WinningCommit]:
    """The commits of log batches ``after + 1 .. latest`` from ``table``, log entries holding theirs (read
    since a snapshot at ``after``; a compact file's older entries may be there too), oldest first.

    Example: ``[w.log_batch_id for w in winning_commits(storage, new_entries, 6, 8)]`` -> ``[7, 8]``.
    """
    records = attribute(records_of(table), range(after + 1, latest + 1))  # a compact file keeps runs' ends
    data = data_files(table, ["path", BATCH_KEY])
    winners = []
    for batch in range(after + 1, latest + 1):
        mine = data.filter(pc.equal(data.column(BATCH_KEY), batch))
        found = None if not mine.num_rows else read_committed_schema(
            storage, mine.slice(0, 1).column("path"), mine.slice(0, 1).column(BATCH_KEY)
        )
        schema, partitions = found if found is not None else (None, None)
        winners.append(WinningCommit(batch, records.get(batch), schema, partitions))
    return winners


def spark_sink_refusal(where: str, latest: int, what: str, written: str = "Nothing was written.") -> SparkSinkBatchError:
    """The refusal to commit ``what`` (a ``write_batch`` version, a streaming batch, an optimize) to the output
    ``where`` whose newest log batch ``latest`` Spark's own file sink committed
    (:func:`~parquet_sink.log.entry.committed_by_spark_sink`), unless its query is stopped for good
    (``spark_sink_stopped=True``, the one override of every writer). ``written``: what the refusal left behind.

    Example::

        >>> str(spark_sink_refusal("/data/events", 4, "version 0 of app 'backfill'"))
        "version 0 of app 'backfill' cannot be committed to /data/events: its newest log batch 4 was committed by ..."
    """
    return SparkSinkBatchError(
        f"{what} cannot be committed to {where}: its newest log batch {latest} was committed by Spark's own file sink "
        "(writeStream.format('parquet'); the batch carries no commit record of parquet-sink's), which skips every "
        f"batch id the log already holds: a commit now would take log batch {latest + 1}, and that query would skip "
        f"its batch {latest + 1}, losing its rows without an error. {written} While that query may run again with "
        "format('parquet'), write to another output path (or move that query itself to ParquetSink with its "
        "checkpoint: it then continues this log). If it is stopped for good, pass spark_sink_stopped=True."
    )


def spark_sink_window(latest: int, batch_id: int, spark_newest: bool) -> str | None:
    """The advice when batch ``batch_id`` of a query may be Spark's own file sink's re-run of a batch it committed
    to the log but not to its checkpoint (killed between its log commit and ``commits/<id>``: the log's newest batch
    ``latest`` is Spark's, ``spark_newest``, and holds batch ids ``batch_id..latest``), else None. Committing that
    batch (``on_foreign_query='append'``) would write its rows a second time; Spark's sink run once more skips the
    batches its log holds and commits them to the checkpoint. The sink's refusal and ``doctor`` both say it. Pure.

    Example::

        >>> spark_sink_window(4, 4, True)
        "If this is the checkpoint Spark's own sink (writeStream.format('parquet')) wrote the output with, ..."
    """
    if not spark_newest or not 0 <= batch_id <= latest:
        return None
    held = f"log batch {batch_id} already holds" if batch_id == latest else f"log batches {batch_id}..{latest} already hold"
    return (
        f"If this is the checkpoint Spark's own sink (writeStream.format('parquet')) wrote the output with, {held} "
        "what Spark re-runs (it was stopped between its log commit and its checkpoint commit): finish that batch with "
        "Spark's own sink first: run the query once more with Spark's own sink (it skips the batches it committed) "
        f"until the checkpoint commits batch {latest}, then restart it with ParquetSink; on_foreign_query='append' "
        "would write those rows a second time. Otherwise (another query's checkpoint): while the query of Spark's "
        f"own sink may run again, a commit after its log batch {latest} would make it skip its next batch, losing its "
        "rows, so write to a new output path; once that query is stopped for good (it never runs again with "
        "format('parquet')), pass ParquetSink(..., on_foreign_query='append', spark_sink_stopped=True) to append "
        f"after log batch {latest}."
    )


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}..{last}"


@dataclass(frozen=True)
class SparkSinkResume:
    """What Spark's own file sink (``writeStream.format('parquet')``) would do with batch ``batch`` of a query
    resumed on an output whose newest log batch is ``latest``: it skips every batch id the log holds, so its
    batches ``batch..latest`` are skipped and marked done; ``lost``: those of them whose log batch holds other
    data (their rows would be in no reader). ``message`` says it in words (``doctor``)."""

    batch: int
    latest: int
    lost: tuple[int, ...]

    @property
    def message(self) -> str:
        sink = "Spark's own file sink (writeStream.format('parquet')) with this checkpoint"
        if self.batch > self.latest:
            return (
                f"{sink} would commit its batch {self.batch} after the log's newest batch {self.latest}: going back to "
                "it loses nothing now, but once anything of parquet-sink commits a batch here first (write_batch, "
                "optimize, another query), it would skip batches."
            )
        skipped = _span(self.batch, self.latest)
        if not self.lost:
            return (
                f"{sink} would skip its batches {skipped}, which the log already holds as those very batches "
                "(committed before the checkpoint recorded them): nothing lost."
            )
        return (
            f"{sink} would skip its batches {skipped} (it skips every batch id the log already holds) although log "
            f"batch(es) {', '.join(map(str, self.lost[:5]))}{', ...' if len(self.lost) > 5 else ''} hold other data "
            "(parquet-sink's write_batch, optimize, or another query): those batches' rows would be lost without an "
            "error. Going back to Spark's own sink is one-way once parquet-sink committed a batch after the query's: "
            "stay on ParquetSink with this checkpoint, or give the query of Spark's own sink a new output path (and a "
            "new checkpoint)."
        )


def spark_sink_resume(latest: int, batch: int, held: Collection[int]) -> SparkSinkResume:
    """:class:`SparkSinkResume` of batch ``batch`` on a log whose newest batch is ``latest``; ``held``: the log
    batches from ``batch`` on that already hold that very batch (Spark's sink's own commit, or this query's, not
    yet in the checkpoint). Pure: ``doctor`` says it for every checkpoint on an output Spark's sink wrote.

    Example: ``spark_sink_resume(9, 3, {3}).lost`` -> ``(4, 5, 6, 7, 8, 9)``.
    """
    return SparkSinkResume(batch, latest, tuple(b for b in range(batch, latest + 1) if b not in held))


def _continues(record: CommitRecord) -> bool:
    """Whether ``record`` may be a query of Spark's own sink gone on under ParquetSink with its checkpoint: a
    streaming query's batch committed as the log batch of the same id."""
    return not record.is_app and record.query_id != OPTIMIZE_APP_ID and record.query_batch_id == record.log_batch_id


def spark_sink_behind(records: Sequence[CommitRecord], first: int, latest: int | None) -> str | None:
    """A warning when Spark's own file sink committed a log batch (no commit record of ours, as
    :func:`~parquet_sink.log.entry.committed_by_spark_sink` decides) and parquet-sink's writers committed batches after its
    newest one: a query of Spark's own sink resumed on the output would skip its batches up to ``latest``. Not when
    every batch after it is one query's, each as the log batch of its own batch id: the migration (that query,
    resumed with its checkpoint, goes on after them). ``first``:
    the oldest log batch the snapshot reads (a compact file's). None otherwise. Pure: ``verify`` reports it.

    Example: ``spark_sink_behind([CommitRecord(3, "q", 3, "a")], 0, 3)`` -> ``'log batches 3..3 were committed ...'``.
    """
    if latest is None or not records:
        return None
    ours = attribute(records, range(first, latest + 1))
    newest = next((b for b in range(latest, first - 1, -1) if b not in ours), None)
    if newest is None or newest == latest:
        return None
    after = [ours[b] for b in range(newest + 1, latest + 1)]
    if len({r.query_id for r in after}) == 1 and all(_continues(r) for r in after):
        return None  # the migration: that very query (its checkpoint) went on as log batch = its batch id
    return (
        f"log batches {_span(newest + 1, latest)} were committed by parquet-sink after log batch {newest} of Spark's own "
        "file sink: a query of Spark's own sink (writeStream.format('parquet')) resumed on this output would skip its "
        f"batches up to {latest}, losing their rows. Keep that query on ParquetSink (with its checkpoint it continues "
        "this log), or give it a new output path; `doctor --checkpoint` tells for a given checkpoint."
    )
