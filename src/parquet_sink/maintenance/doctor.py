"""``doctor``: what restarting a query from its checkpoint, or rerunning a ``write_batch`` app, will do to an
output, predicted with the very decision functions the writers use (:func:`~parquet_sink.write.sink.decide_batch`,
:func:`~parquet_sink.read.chain.decide_write`), so the prediction cannot drift from what happens.

Spark's counterpart is the restart logic of ``MicroBatchExecution`` (re-run the newest batch whose offsets have no
commit) meeting ``FileStreamSink.addBatch``'s "batch already committed: skip".

Example::

    >>> from parquet_sink.maintenance import doctor
    >>> diagnosis = doctor("/data/events", checkpoint="/data/_checkpoints/events")
    >>> diagnosis.plan.ok, diagnosis.plan.message
    (True, 'Spark will re-run batch 6 ..., and the sink will skip it: already committed by this query as log batch 6. ...')
"""

from __future__ import annotations

import dataclasses
import datetime
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Union

from ..errors import OutputSettingsError, ParameterError, names_output
from ..iceberg.follow import iceberg_target
from ..log.compaction import check_flags
from ..log.metadata_log import MetadataLog
from ..log.entry import attribute, committed_by_spark_sink
from ..log.files import check_output_root
from ..read.chain import check_app_version, decide_write, version_record
from ..storage.filesystem import Storage
from ..write.conflicts import SparkSinkResume, spark_sink_refusal, spark_sink_resume, spark_sink_window
from ..write.sink import Action, checkpoint_query_id, decide_batch
from .inspect import Output, compare_mirrors, other_interval_warning, read_output


@dataclass(frozen=True)
class Checkpoint:
    """What a restart reads from a Spark checkpoint: the query id and the newest offsets and commits."""

    query_id: str | None  # None: no ``metadata`` yet, Spark gives the query a new id when it starts
    offsets: int | None
    commits: int | None

    @classmethod
    def read(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> Checkpoint:
        """Read ``metadata`` (as the sink's ``checkpoint_location`` does), ``offsets/`` and ``commits/``
        (files named by batch id). ``url`` is any fsspec or Hadoop URL (``file:/``, ``s3a://``, ``abfss://``).

        Example::

            >>> Checkpoint.read("/data/_checkpoints/events")
            Checkpoint(query_id='6abb5a0d-...', offsets=6, commits=5)
        """
        storage = Storage(url, dict(storage_options or {}))
        _require_checkpoint(storage)

        def newest(directory: str) -> int | None:
            names = (info.path.rsplit("/", 1)[-1] for info in storage.ls(storage.join(directory)))
            return max((int(n) for n in names if n.isdigit() and n.isascii()), default=None)

        return cls(checkpoint_query_id(url, dict(storage_options or {})), newest("offsets"), newest("commits"))


def _require_checkpoint(storage: Storage) -> None:
    """ParameterError when the checkpoint location is an existing directory that holds no checkpoint (neither
    Spark's ``metadata``, ``offsets/`` nor ``commits/``, but other things: the output itself, a typo): a missing or
    empty one is a new query's."""
    try:
        names = {info.path.rstrip("/").rsplit("/", 1)[-1] for info in storage.ls(storage.root)}
    except (FileNotFoundError, NotADirectoryError):
        return
    if not names or names & {"metadata", "offsets", "commits"}:
        return
    where = storage.display(storage.root)
    what = "is an output (it holds _spark_metadata), not a" if "_spark_metadata" in names else "holds no"
    raise ParameterError(
        f"checkpoint {where} {what} Spark streaming checkpoint (no metadata, offsets/ or commits/; it holds "
        f"{', '.join(sorted(names)[:5])}): give the query's checkpointLocation (a new query's may be missing or empty)"
    )


@dataclass
class RestartPlan:
    """What a restart from a checkpoint will do to an output, in plain words."""

    batch: int  # the first batch the sink will be called with
    replay: bool  # Spark re-runs a batch it had started
    action: Union[Action, Literal["settings"]]  # "settings": refused with OutputSettingsError, whatever else holds
    log_batch: int | None
    message: str
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """The restart will go through and keep the output exactly-once (``doctor`` exits 0).

        Example: ``RestartPlan(7, False, "commit", 7, "...").ok is True``.
        """
        return self.action in ("commit", "skip") and not self.warnings


def _spark_newest(output: Output) -> bool:
    """Whether Spark's own file sink committed the output's newest log batch, as every writer decides it
    (:func:`~parquet_sink.log.entry.committed_by_spark_sink`)."""
    records = [b.record for b in output.batches.values() if b.record is not None]
    return committed_by_spark_sink(records, output.latest)


def plan_restart(
    ckpt: Checkpoint, output: Output, append: bool = False, batch_id_only: bool = False,
    spark_sink_stopped: bool = False,
) -> RestartPlan:
    """Predict a restart: Spark re-runs its newest batch when the checkpoint has offsets but no commit for
    it, else starts the next one; the sink then decides as :func:`parquet_sink.write.sink.decide_batch` says,
    with the sink's identity rule: the query is the one in the checkpoint's ``metadata`` (a new query
    when there is none yet), or nobody with ``batch_id_only`` (the sink's ``allow_batch_id_only`` under
    Spark Connect without ``checkpoint_location``), which is reported as a warning. ``spark_sink_stopped`` as the
    sink's option.

    Example::

        >>> plan_restart(Checkpoint("q1", 6, 5), read_output("/data/events")).message
        'Spark will re-run batch 6 ... the sink will skip it: already committed by this query as log batch 6. ...'
    """
    latest = -1 if output.latest is None else output.latest
    queries = output.queries()
    query_id = None if batch_id_only else ckpt.query_id or "<new query id>"  # Spark makes one at start
    if ckpt.offsets is None:
        batch, replay = 0, False
        start = (
            "Nothing to replay: there is no checkpoint yet, a new query starts at batch 0"
            if ckpt.query_id is None
            else "Nothing to replay: the checkpoint has no offsets yet (the query started but planned no batch), "
            "so the query starts at batch 0"
        )
    elif ckpt.offsets != ckpt.commits:
        batch, replay = ckpt.offsets, True
        start = f"Spark will re-run batch {batch} (the checkpoint has its offsets but no commit)"
    else:
        batch, replay = ckpt.offsets + 1, False
        start = f"Nothing to replay: batch {ckpt.offsets} is done in the checkpoint; the next batch is {batch}"
    spark_newest = _spark_newest(output)
    action, log_batch = decide_batch(latest, queries, query_id, batch, append, spark_newest, spark_sink_stopped)
    # Spark's own sink committed the newest log batch (it records no query id), and this checkpoint has run up to a
    # batch the log holds: if it is the checkpoint Spark's sink wrote the output with, batches batch..latest are in it
    # already (its sink commits before the checkpoint does), and committing them again doubles their rows. The sink
    # refuses with the same words.
    spark_fix = None if ckpt.offsets is None else spark_sink_window(latest, batch, spark_newest)
    sparks = spark_fix is not None
    if action == "commit":
        message = f"{start}, and the sink will commit it as log batch {log_batch}."
    elif action == "skip":
        message = (
            f"{start}, and the sink will skip it: already committed by this query as log batch {log_batch}. "
            f"Spark then marks it done and continues with batch {batch + 1}."
        )
    elif action == "spark" or (sparks and action == "foreign"):
        error = "SparkSinkBatchError" if action == "spark" else "ForeignQueryError"
        where = output.storage.display(output.storage.root)
        refusal = str(spark_sink_refusal(where, latest, f"batch {batch}", "It writes nothing."))
        message = f"{start}, but the sink will refuse it with {error}: " + (
            f"log batch {latest}, the newest, was committed by Spark's own file sink. {spark_fix}" if sparks else refusal
        )
    elif action == "foreign":
        taken = min(batch, latest)  # the batch the sink names as taken
        owner = output.batches.get(taken)
        by = "another writer (e.g. Spark's own file sink)"
        if owner is not None and owner.record is not None:
            by = owner.record.writer
        refusal = (
            f"{start}, but the sink will refuse it with ForeignQueryError: log batch {taken} is already taken "
            f"by {by}, not by this checkpoint's query."
        )
        message = (
            f"{refusal} Fix: restart from the original checkpoint of that query, write to a new output path, "
            f"or use ParquetSink(..., on_foreign_query='append') to append after log batch {latest}."
        )
    else:
        log = f"whose newest batch is {latest}" if latest >= 0 else "which is empty"
        message = (
            f"{start}, but the sink will refuse it with OutputResetError: the checkpoint is ahead of the log, "
            f"{log}, so batches {latest + 1}..{batch - 1} that Spark considers done "
            "are missing (the output was deleted or reset). Fix: restore the output from backup, or start a "
            "new checkpoint, or use ParquetSink(..., on_foreign_query='append') to append anyway."
        )
    plan = RestartPlan(batch, replay, action, log_batch, message)
    if sparks and action == "commit":  # on_foreign_query="append"
        plan.warnings.append(
            f"log batches up to {latest} were committed by Spark's own file sink, which records no query id, and "
            f"the sink will commit batch {batch} again as log batch {log_batch}. {spark_fix}"
        )
    if batch_id_only and latest >= 0:
        plan.warnings.append(
            "batch-id-only: the sink cannot tell this query from another one, so a new checkpoint on this "
            f"output would have its batches up to {latest} skipped as replays (data loss). Pass "
            "ParquetSink(..., checkpoint_location=<the query's checkpointLocation>) instead."
        )
    own = queries.get(query_id)
    done = -1 if ckpt.offsets is None else ckpt.offsets
    if own is not None and own.query_batch_id > done:
        plan.warnings.append(
            f"the log holds batches of this query up to its batch {own.query_batch_id} but the checkpoint only "
            f"up to {done}: the checkpoint was restored from an older copy. Spark will plan new offsets for "
            f"batches {done + 1}..{own.query_batch_id} and the sink will skip them as already committed, "
            "which loses the data they now cover. Restore the newest checkpoint instead."
        )
    return plan


def plan_app_write(output: Output, app_id: str, version: int, spark_sink_stopped: bool = False) -> RestartPlan:
    """Predict ``write_batch(..., app_id=app_id, version=version)`` on the output, as
    :func:`parquet_sink.read.chain.decide_write` decides it: skip (the app committed this version or a newer
    one) or commit as the next log batch.

    Example::

        >>> plan_app_write(read_output("/data/daily"), "daily-job", 41).message
        'app daily-job committed up to version 41 (log batch 12): rerunning it at version 41 writes nothing ...'
    """
    latest = -1 if output.latest is None else output.latest
    commits = output.queries()
    action, log_batch = decide_write(latest, commits, app_id, version, _spark_newest(output), spark_sink_stopped)
    own = commits.get(app_id)
    done = "has committed nothing here" if own is None else (
        f"committed up to version {own.query_batch_id} (log batch {own.log_batch_id})"
    )
    records = [b.record for b in output.batches.values() if b.record is not None]
    if action == "skip" and version_record(records, app_id, version) is None:
        assert own is not None  # skipped: the app committed a newer version
        message = (
            f"app {app_id} {done}, but never version {version}: rerunning it at version {version} is refused with "
            "StaleVersionError, nothing committed (with ignore_changed_data=True it is skipped: its rows are never "
            f"written). If the app's state was reset, write its data as version {own.query_batch_id + 1} or later, "
            "or under a new app_id."
        )
        return RestartPlan(version, False, action, log_batch, message, [f"version {version} was never committed"])
    if action == "spark":
        where = output.storage.display(output.storage.root)
        refusal = spark_sink_refusal(where, latest, f"version {version} of app {app_id!r}", "It writes nothing.")
        return RestartPlan(version, False, action, None, f"app {app_id} {done}: SparkSinkBatchError: {refusal}")
    if action == "skip":
        message = (
            f"app {app_id} {done}: rerunning it at version {version} writes nothing (write_batch returns "
            "committed=False; other data than it committed then are refused with StaleVersionError). Its next "
            f"version to write is {own.query_batch_id + 1 if own is not None else 0} or later."
        )
    else:
        message = (
            f"app {app_id} {done}: rerunning it at version {version} writes its data and commits it as log "
            f"batch {log_batch} (the following one if another writer commits first)."
        )
    return RestartPlan(version, False, action, log_batch, message)


def spark_sink_plan(ckpt: Checkpoint, output: Output, batch: int) -> SparkSinkResume | None:
    """What Spark's own file sink would do with the checkpoint's next batch ``batch`` instead of ``ParquetSink``
    (:func:`~parquet_sink.write.conflicts.spark_sink_resume`), on an output Spark's own sink wrote (a batch without
    a commit record of ours); None on others. The log batches from ``batch`` on that already hold that very batch
    are Spark's own (its commit window) or this checkpoint's query's with the same batch id.

    Example: ``spark_sink_plan(Checkpoint("q1", 3, 3), read_output("/data/events"), 4).lost`` -> ``(4, 5)``.
    """
    if all(b.record is not None for b in output.batches.values()):
        return None
    latest = -1 if output.latest is None else output.latest
    records = [b.record for b in output.batches.values() if b.record is not None]
    ours = attribute(records, range(batch, latest + 1))
    held = {b for b in range(batch, latest + 1)
            if b not in ours or (ours[b].query_id == ckpt.query_id and ours[b].query_batch_id == b)}
    return spark_sink_resume(latest, batch, held)


@dataclass
class Diagnosis:
    """:func:`doctor`'s answer: the output's log as read, the checkpoint (None for a ``write_batch`` app), the
    plan and the log's own warnings; for a checkpoint on an output Spark's own file sink wrote, ``spark_sink`` says what that sink would do with it
    instead (going back from ``ParquetSink``: :func:`spark_sink_plan`)."""

    output: Output
    checkpoint: Checkpoint | None
    plan: RestartPlan
    spark_sink: SparkSinkResume | None = None
    # what the log says to every writer, whatever the plan (:func:`~.inspect.other_interval_warning`: log batches
    # Spark's own sink named by another compact interval than the output's); not the plan's: ``plan.ok`` stays
    log_warnings: list[str] = field(default_factory=list)
    # what ``verify`` finds of the Delta log and Iceberg tables kept in step (:func:`~.inspect.compare_mirrors`),
    # each naming the command that fixes it (a table behind: its sync); not the plan's either
    mirror_problems: list[str] = field(default_factory=list)
    mirror_warnings: list[str] = field(default_factory=list)


@names_output
def doctor(
    path: str | os.PathLike[str],
    *,
    checkpoint: str | None = None,
    app_id: str | None = None,
    version: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
    on_foreign_query: Literal["error", "append"] = "error",
    batch_id_only: bool = False,
    spark_sink_stopped: bool = False,
    compact_interval: int | None = None,
    retention: str | datetime.timedelta | None = None,
    min_batches_to_retain: int | None = None,
    cleanup_delay: str | datetime.timedelta | None = None,
    iceberg: bool | Mapping[str, Any] | None = None,
) -> Diagnosis:
    """Predict a restart of the query whose checkpoint is ``checkpoint`` (``on_foreign_query`` and
    ``batch_id_only`` as the sink is configured: ``allow_batch_id_only`` without ``checkpoint_location``), or a
    rerun of ``write_batch(path, ..., app_id=app_id, version=version)``. Give one of the two. Reads only.
    ``spark_sink_stopped``, ``compact_interval``, ``retention``, ``min_batches_to_retain``, ``cleanup_delay``: as
    the sink's and ``write_batch``'s options (one that contradicts the settings recorded with the output: the
    plan is the writer's OutputSettingsError, action ``"settings"``). The table formats kept in step are compared
    with the log as ``verify`` compares them (``iceberg``: the catalog table, as the writers take it):
    ``mirror_problems``/``mirror_warnings``, each naming the command that fixes it.

    Example::

        >>> doctor("/data/daily", app_id="daily-job", version=41).plan.action
        'skip'
    """
    check_flags(batch_id_only=batch_id_only, spark_sink_stopped=spark_sink_stopped)
    if (checkpoint is None) == (app_id is None) or (app_id is None) != (version is None):
        raise ParameterError("give checkpoint= (a streaming query) or app_id= and version= (a write_batch app), not both")
    checked_version = None if app_id is None else check_app_version(app_id, version)
    target = iceberg_target(iceberg, f"doctor({os.fspath(path)!r})")
    # as the writers refuse it: an output's log directory (or a file) is no output, and not an empty one
    check_output_root(path, Storage(path, dict(storage_options or {})))
    # as every writer checks its log settings before it writes: the same checks, the same words
    log = MetadataLog(
        path, storage_options=dict(storage_options or {}), compact_interval=compact_interval, retention=retention,
        min_batches_to_retain=min_batches_to_retain, cleanup_delay=cleanup_delay,
    )
    output = read_output(path, storage_options=storage_options, must_exist=False)
    names = {batch: info.path for batch, info in output.listing.items()}
    other = other_interval_warning(names, log.recorded_interval(), output.storage.display)
    log_warnings = [other] if other else []
    mirrors = ([], []) if output.latest is None else compare_mirrors(path, output.storage, target)
    if app_id is not None and checked_version is not None:
        plan = _refused_by_settings(log, plan_app_write(output, app_id, checked_version, spark_sink_stopped),
                                    f"write_batch of app {app_id} version {checked_version}")
        return Diagnosis(output, None, plan, log_warnings=log_warnings, mirror_problems=mirrors[0],
                         mirror_warnings=mirrors[1])
    assert checkpoint is not None
    ckpt = Checkpoint.read(checkpoint, storage_options)
    plan = plan_restart(
        ckpt, output, append=on_foreign_query == "append", batch_id_only=batch_id_only,
        spark_sink_stopped=spark_sink_stopped,
    )
    plan = _refused_by_settings(log, plan, f"the sink, at batch {plan.batch},")
    return Diagnosis(output, ckpt, plan, spark_sink_plan(ckpt, output, plan.batch), log_warnings, *mirrors)


def _refused_by_settings(log: MetadataLog, plan: RestartPlan, who: str) -> RestartPlan:
    """``plan``, or the refusal a writer configured as ``log`` meets first, before anything else it decides: an
    option contradicting the settings recorded with the output (:meth:`~parquet_sink.log.compaction.
    CompactibleLog.check_settings`)."""
    if not log.storage.exists(log.log_dir):
        return plan
    try:
        log.check_settings()
    except OutputSettingsError as exc:
        return dataclasses.replace(
            plan, action="settings", log_batch=None, warnings=[],
            message=f"{who} will refuse to write with OutputSettingsError: {exc}",
        )
    return plan


__all__ = ["Checkpoint", "Diagnosis", "RestartPlan", "doctor", "plan_app_write", "plan_restart", "spark_sink_plan"]
