"""The ``parquet-sink`` command line: see, check and clean a streaming file sink's output directory.

Works on any fsspec URL; storage options (credentials) come from the ``PARQUET_SINK_STORAGE_OPTIONS``
environment variable (JSON), ``--storage-options-file PATH`` (JSON) and ``--storage-option key=value``
(repeatable), later ones winning key by key, and are never printed. Commands:

* ``ls PATH``: committed batches (files, rows with ``--rows``, bytes, commit time, query or app id and its
  batch id or version) and the log's compaction state.
* ``show PATH BATCH``: the log entries of one batch.
* ``verify PATH``: every committed file exists with its logged size, and the log chain is intact.
* ``vacuum PATH --older-than 1h [--dry-run] [--include-files-before-log]``: delete Parquet data files no
  committed batch references (files older than the log's first commit only when asked).
* ``doctor PATH --checkpoint CKPT``: what restarting the query from ``CKPT`` will do to the output;
  ``doctor PATH --app-id X --version V``: what rerunning ``write_batch`` of app X at version V will do.

Every command takes ``--json`` for scripts. Errors are one line on stderr with exit code 1 (2 for usage).

Example::

    $ parquet-sink ls s3://bucket/events --storage-option anon=false --json
    $ parquet-sink vacuum /data/events --older-than 7d --dry-run
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import logging
import os
import posixpath
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from .. import __version__
from ..errors import ParquetSinkError, LogError, NotAnOutputError
from ..write.inflight import CLOCK_SLACK_MS, HIDDEN_DIR, Lease, leases, staging_dirs
from ..log.files import output_started
from ..log.metadata_log import COMPACT_SUFFIX, METADATA_DIR, LogEntry, MetadataLog, parse_duration_ms
from ..partitioning import is_data_file
from ..read.reader import CommittedFile, snapshot
from ..log.snapshot import read_chain
from ..read.chain import app_commits, decide_write
from ..write.sink import Action, checkpoint_query_id, decide_batch
from ..log.entry import BATCH_KEY, COMMIT_ID_KEY, CommitRecord, attribute, records_of
from ..storage.filesystem import FileInfo, Storage

logger = logging.getLogger(__name__)

PROG = "parquet-sink"
OPTIONS_ENV = "PARQUET_SINK_STORAGE_OPTIONS"
OPTIONS_HELP = (
    f"Storage options (fsspec, e.g. credentials) come from three places, merged key by key; later ones win: "
    f"the environment variable {OPTIONS_ENV} (a JSON object), then --storage-options-file PATH (a JSON "
    "object), then each --storage-option KEY=VALUE. Pass secrets by the first two: a command line is visible "
    "to other users (ps) and lands in shell history. Options are never printed."
)
T = TypeVar("T")


# -- reading an output ---------------------------------------------------------------------------


@dataclass
class Batch:
    """One log batch as the CLI shows it: its entries (commit record apart) and who committed it."""

    batch_id: int
    entries: list[LogEntry] = field(default_factory=list)
    record: CommitRecord | None = None
    # the commit record's time, else the batch's log file's mtime, else its newest data file's mtime
    committed_ms: int | None = None

    @property
    def data_files(self) -> list[LogEntry]:
        """The entries a reader reads (Spark skips directories and empty files).

        Example: ``sum(e.size for e in batch.data_files)`` is the batch's size.
        """
        return [e for e in self.entries if not e.is_dir and e.size > 0]


@dataclass
class Output:
    """The state of an output's log: the listing and the latest snapshot, attributed to batches."""

    storage: Storage
    log: MetadataLog
    listing: dict[int, FileInfo]
    latest: int | None
    batches: dict[int, Batch]
    compact_interval: int | None = None  # given explicitly, else inferred from the log
    first_batch: int = 0  # the oldest log file the snapshot reads (a compact file, or batch 0)

    def owner_batch(self, batch_id: int | None) -> int:
        """The batch an entry belongs to: its ``batchId``, or the compact batch for an entry of a
        compact file Spark wrote (which records no batch ids).

        Example: with ``5.compact`` and ``6`` in the log, ``owner_batch(None) == 5``, ``owner_batch(3) == 3``.
        """
        return self.first_batch if batch_id is None else batch_id

    def queries(self) -> dict[str | None, CommitRecord]:
        """The newest commit record of each query id, as the sink keeps them.

        Example: ``{"6abb5a0d-...": CommitRecord(log_batch_id=6, query_id="6abb5a0d-...", query_batch_id=6, ...)}``.
        """
        return {b.record.query_id: b.record for b in self.batches.values() if b.record is not None}


def read_output(
    url: str, storage_options: Mapping[str, Any], must_exist: bool = True, compact_interval: int | None = None
) -> Output:
    """Read the latest snapshot of the log at ``url`` and attribute its entries to batches.
    ``compact_interval``: the writer's, when the log cannot tell it (normally inferred).

    Example::

        >>> out = read_output("/data/events", {})
        >>> sorted(out.batches), out.latest
        ([0, 1, 2], 2)
    """
    storage = Storage(url, dict(storage_options))
    log = MetadataLog(url, storage=storage, cleanup=False, compact_interval=compact_interval or 10)
    names = log.list_details()
    listing = names.infos
    if must_exist and not listing and not output_started(storage):
        raise NotAnOutputError(
            f"{storage.display(storage.root)} has no {METADATA_DIR} log: it is not the output of a streaming "
            "file sink (ParquetSink or Spark's writeStream.format('parquet')). Check the path."
        )
    latest = max(listing, default=None)
    output = Output(storage, log, listing, latest, {}, compact_interval)
    if latest is None:
        return output
    table = read_chain(log, latest, names, compact_interval)
    chain = log.chain(latest, names, compact_interval)
    output.first_batch = chain[0][0]
    batches = {b: Batch(b) for b, _ in chain}  # empty batches too
    records = records_of(table)
    for row in table.to_pylist():
        batch_id = output.owner_batch(row[BATCH_KEY])
        batch = batches.setdefault(batch_id, Batch(batch_id))
        if row[COMMIT_ID_KEY] is not None and row["isDir"]:
            batch.committed_ms = row["modificationTime"]
        else:
            batch.entries.append(_entry(row))
    # A compact file keeps only the first and last commit record of each run: infer the others.
    for batch_id, record in attribute(records, batches).items():
        batches[batch_id].record = record
    for batch in batches.values():
        if batch.committed_ms is None and batch.batch_id in listing:
            batch.committed_ms = listing[batch.batch_id].mtime_ms
        elif batch.committed_ms is None and batch.data_files:  # compacted away: when its files were written
            batch.committed_ms = max(e.modification_time for e in batch.data_files)
    output.batches = dict(sorted(batches.items()))
    return output


def _entry(row: dict[str, Any]) -> LogEntry:
    """A row of the columnar snapshot as the entry ``show`` prints."""
    return LogEntry(
        row["path"], row["size"], row["isDir"], row["modificationTime"], row["blockReplication"],
        row["blockSize"], row["action"], row[BATCH_KEY],
    )


def count_rows(output: Output) -> dict[int, int | None]:
    """Rows per batch from the Parquet footers (None for a batch with a file that cannot be read).

    Example::

        >>> count_rows(read_output("/data/events", {}))
        {0: 10, 1: 20}
    """
    storage = output.storage
    snap = snapshot(  # resolves paths of a moved output
        storage.url, storage_options=storage.storage_options, compact_interval=output.compact_interval
    )
    filesystem = storage.arrow_filesystem()
    rows: dict[int, int | None] = {b: 0 for b in output.batches}
    unreadable = set()
    for f in progress(snap.files, "reading footers"):
        batch_id = output.owner_batch(f.batch_id)
        try:
            rows[batch_id] = (rows.get(batch_id) or 0) + pq.read_metadata(f.path, filesystem=filesystem).num_rows
        except (OSError, pa.ArrowInvalid) as exc:  # ArrowInvalid: not Parquet (truncated, empty)
            logger.warning(
                "cannot read the footer of %s (batch %s, %d bytes in the log): %s; run `%s verify`",
                storage.display(f.path), batch_id, f.size, exc, PROG,
            )
            unreadable.add(batch_id)
    return rows | dict.fromkeys(unreadable)


# -- decisions mirrored from the sink ------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    """What a restart reads from a Spark checkpoint: the query id and the newest offsets and commits."""

    query_id: str | None  # None: no ``metadata`` yet, Spark gives the query a new id when it starts
    offsets: int | None
    commits: int | None

    @classmethod
    def read(cls, url: str, storage_options: Mapping[str, Any]) -> Checkpoint:
        """Read ``metadata`` (as the sink's ``checkpoint_location`` does), ``offsets/`` and ``commits/``
        (files named by batch id). ``url`` is any fsspec or Hadoop URL (``file:/``, ``s3a://``, ``abfss://``).

        Example::

            >>> Checkpoint.read("/data/_checkpoints/events", {})
            Checkpoint(query_id='6abb5a0d-...', offsets=6, commits=5)
        """
        storage = Storage(url, dict(storage_options))

        def newest(directory: str) -> int | None:
            names = (info.path.rsplit("/", 1)[-1] for info in storage.ls(storage.join(directory)))
            return max((int(n) for n in names if n.isdigit() and n.isascii()), default=None)

        return cls(checkpoint_query_id(url, storage_options), newest("offsets"), newest("commits"))


@dataclass
class RestartPlan:
    """What a restart from a checkpoint will do to an output, in plain words."""

    batch: int  # the first batch the sink will be called with
    replay: bool  # Spark re-runs a batch it had started
    action: Action
    log_batch: int | None
    message: str
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """The restart will go through and keep the output exactly-once (``doctor`` exits 0).

        Example: ``RestartPlan(7, False, "commit", 7, "...").ok is True``.
        """
        return self.action in ("commit", "skip") and not self.warnings


def plan_restart(ckpt: Checkpoint, output: Output, append: bool = False, batch_id_only: bool = False) -> RestartPlan:
    """Predict a restart: Spark re-runs its newest batch when the checkpoint has offsets but no commit for
    it, else starts the next one; the sink then decides as :func:`parquet_sink.write.sink.decide_batch` says,
    with the sink's identity rule: the query is the one in the checkpoint's ``metadata`` (a new query
    when there is none yet), or nobody with ``batch_id_only`` (the sink's ``allow_batch_id_only`` under
    Spark Connect without ``checkpoint_location``), which is reported as a warning.

    Example::

        >>> plan_restart(Checkpoint("q1", 6, 5), read_output("/data/events", {})).message
        'Spark will re-run batch 6 ... the sink will skip it: already committed by this query as log batch 6. ...'
    """
    latest = -1 if output.latest is None else output.latest
    queries = output.queries()
    query_id = None if batch_id_only else ckpt.query_id or "<new query id>"  # Spark makes one at start
    if ckpt.offsets is None:
        batch, replay = 0, False
        start = "Nothing to replay: there is no checkpoint yet, a new query starts at batch 0"
    elif ckpt.offsets != ckpt.commits:
        batch, replay = ckpt.offsets, True
        start = f"Spark will re-run batch {batch} (the checkpoint has its offsets but no commit)"
    else:
        batch, replay = ckpt.offsets + 1, False
        start = f"Nothing to replay: batch {ckpt.offsets} is done in the checkpoint; the next batch is {batch}"
    action, log_batch = decide_batch(latest, queries, query_id, batch, append)
    if action == "commit":
        message = f"{start}, and the sink will commit it as log batch {log_batch}."
    elif action == "skip":
        message = (
            f"{start}, and the sink will skip it: already committed by this query as log batch {log_batch}. "
            f"Spark then marks it done and continues with batch {batch + 1}."
        )
    elif action == "foreign":
        taken = min(batch, latest)  # the batch the sink names as taken
        owner = output.batches.get(taken)
        by = "another writer (e.g. Spark's own file sink)"
        if owner is not None and owner.record is not None:
            by = f"query {owner.record.query_id or '(not recorded: written with allow_batch_id_only)'}"
        message = (
            f"{start}, but the sink will refuse it with ForeignQueryError: log batch {taken} is already taken "
            f"by {by}, not by this checkpoint's query. Fix: restart from the original checkpoint of that query, "
            "write to a new output path, or use ParquetSink(..., on_foreign_query='append') to append after "
            f"log batch {latest}."
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


def plan_app_write(output: Output, app_id: str, version: int) -> RestartPlan:
    """Predict ``write_batch(..., app_id=app_id, version=version)`` on the output, as
    :func:`parquet_sink.read.chain.decide_write` decides it: skip (the app committed this version or a newer
    one) or commit as the next log batch.

    Example::

        >>> plan_app_write(read_output("/data/daily", {}), "daily-job", 41).message
        'app daily-job committed up to version 41 (log batch 12): rerunning it at version 41 writes nothing ...'
    """
    latest = -1 if output.latest is None else output.latest
    commits = output.queries()
    action, log_batch = decide_write(latest, commits, app_id, version)
    own = commits.get(app_id)
    done = "has committed nothing here" if own is None else (
        f"committed up to version {own.query_batch_id} (log batch {own.log_batch_id})"
    )
    if action == "skip":
        message = (
            f"app {app_id} {done}: rerunning it at version {version} writes nothing (write_batch returns "
            "committed=False). Its next version to write is "
            f"{own.query_batch_id + 1 if own is not None else 0} or later."
        )
    else:
        message = (
            f"app {app_id} {done}: rerunning it at version {version} writes its data and commits it as log "
            f"batch {log_batch} (the following one if another writer commits first)."
        )
    return RestartPlan(version, False, action, log_batch, message)


# -- vacuum ----------------------------------------------------------------------------------------


@dataclass
class VacuumPlan:
    """What ``vacuum`` found: orphans old enough to delete, unreferenced files it keeps (younger than the
    threshold, not older than a live lease: a batch in flight, or older than the log's first commit: data
    the output may have been created over), and the hidden leftovers of dead attempts (leases of batches
    the log has moved past, staging directories without a live lease)."""

    storage: Storage
    orphans: list[FileInfo]
    young: list[FileInfo]
    in_flight: list[FileInfo]
    live_leases: list[Lease]
    dead_leases: list[Lease]
    dead_staging: list[str]
    before_log: list[FileInfo] = field(default_factory=list)


def find_orphans(
    url: str, storage_options: Mapping[str, Any], older_than_ms: int, include_before_log: bool = False
) -> VacuumPlan:
    """Data files (:func:`~parquet_sink.partitioning.is_data_file`) under ``url`` that no entry of the latest
    snapshot references. Refuses (raises) if any log file is unreadable. Files older than the log's first
    commit (older than every committed file and log file, by logged time and time on storage), or every
    unreferenced file of a log without batches, are kept unless ``include_before_log``: they may be a dataset
    the output was created over (``ParquetSink(allow_existing_files=True)``).

    Order matters against a sink writing at the same time: the files are listed first, then the leases
    (:mod:`parquet_sink.write.inflight`), then the log. A listed file is then either committed in the log read
    last, or written by a batch whose lease existed when the leases were read, and is kept.

    Example::

        >>> plan = find_orphans("/data/events", {}, parse_duration_ms("1h"))
        >>> [plan.storage.display(f.path) for f in plan.orphans]
        ['/data/events/part-00003-....c000.snappy.parquet']
    """
    storage = Storage(url, dict(storage_options))
    listed = sorted(storage.find(storage.root), key=lambda i: i.path)
    staging = staging_dirs(storage)
    found_leases = leases(storage)
    log = MetadataLog(url, storage=storage, cleanup=False)
    problems = log.check()
    if problems:
        raise LogError(
            f"refusing to vacuum {storage.display(storage.root)}: its log cannot be read, so committed files "
            f"cannot be told apart from orphans ({len(problems)} problem(s); run `{PROG} verify`). "
            f"First: {problems[0]}"
        )
    snap = snapshot(url, storage_options=dict(storage_options))  # resolves paths of a moved output
    committed = {f.path for f in snap.files}
    records = []
    log_files = log.log_dir + "/"  # and the log files themselves (a log of empty batches has no entries)
    times = [
        i.mtime_ms for i in listed if i.path in committed or (i.path.startswith(log_files) and log.parse_batch_name(i.path))
    ]
    if snap.latest_batch_id is not None:  # also directories and empty files, which the reader skips
        for entry in log.iter_snapshot(snap.latest_batch_id):
            committed.add(storage.from_uri(entry.path))
            records.append(CommitRecord.from_entry(entry))
            times.append(entry.modification_time)
    first_commit_ms = min(times, default=None) if snap.latest_batch_id is not None else None
    latest = -1 if snap.latest_batch_id is None else snap.latest_batch_id
    versions = {app: r.query_batch_id for app, r in app_commits([r for r in records if r is not None]).items()}
    live = [lease for lease in found_leases if lease.is_live(latest, versions)]
    dead = [lease for lease in found_leases if not lease.is_live(latest, versions)]
    protected_from = min((lease.started_ms for lease in live), default=None)
    live_staging = {lease.staging for lease in live}
    cutoff = int(time.time() * 1000) - older_than_ms
    prefix = storage.root.rstrip("/") + "/"
    plan = VacuumPlan(storage, [], [], [], live, dead, [d.path for d in staging if d.path not in live_staging])
    for info in listed:
        relative = info.path[len(prefix) :] if info.path.startswith(prefix) else info.path
        if not is_data_file(relative) or info.path in committed:
            continue
        if protected_from is not None and info.mtime_ms >= protected_from - CLOCK_SLACK_MS:
            plan.in_flight.append(info)
        elif not include_before_log and (first_commit_ms is None or info.mtime_ms < first_commit_ms):
            plan.before_log.append(info)
        else:
            (plan.orphans if info.mtime_ms < cutoff else plan.young).append(info)
    return plan


def remove_emptied_dirs(storage: Storage, deleted: Sequence[str]) -> list[str]:
    """Remove the directories under the root that deleting ``deleted`` left empty, deepest first, up to
    (not including) the root. A directory that still holds anything is kept (``rmdir`` is atomic).

    Example: ``remove_emptied_dirs(storage, ["/data/events/k=a/part-0.parquet"])`` -> ``["/data/events/k=a"]``.
    """
    prefix = storage.root.rstrip("/") + "/"
    candidates = set()
    for path in deleted:
        parent = posixpath.dirname(path)
        while parent.startswith(prefix):
            candidates.add(parent)
            parent = posixpath.dirname(parent)
    return [d for d in sorted(candidates, key=len, reverse=True) if storage.remove_empty_dir(d)]


# -- output helpers ------------------------------------------------------------------------------


def progress(items: Sequence[T], label: str, stream: TextIO | None = None) -> Iterator[T]:
    """Yield ``items`` while drawing a ``label 12/345`` counter on ``stream`` (stderr) if it is a terminal;
    silent otherwise, so scripts and pipes see nothing.

    Example::

        >>> for f in progress(files, "checking"):
        ...     check(f)
    """
    stream = stream or sys.stderr
    if not items or not stream.isatty():
        yield from items
        return
    total, drawn = len(items), 0.0
    try:
        for done, item in enumerate(items, start=1):
            if time.monotonic() - drawn >= 0.1 or done == total:
                stream.write(f"\r{label} {done}/{total}")
                stream.flush()
                drawn = time.monotonic()
            yield item
    finally:
        stream.write("\r" + " " * (len(label) + 2 * len(str(total)) + 2) + "\r")
        stream.flush()


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    value, unit = float(n), 0
    while value >= 1024 and unit < len(units) - 1:
        value, unit = value / 1024, unit + 1
    return f"{n} B" if unit == 0 else f"{value:.1f} {units[unit]}"


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [list(headers)] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    print(json.dumps(data, indent=2) if args.json else text)


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The storage options of a command, key by key from lowest to highest precedence: the
    ``PARQUET_SINK_STORAGE_OPTIONS`` environment variable, ``--storage-options-file``, ``--storage-option``.

    Example: with ``PARQUET_SINK_STORAGE_OPTIONS='{"account_name": "a", "anon": false}'`` and
    ``--storage-option account_name=b``, the options are ``{"account_name": "b", "anon": False}``.
    """
    from_env: dict[str, Any] = {}
    if os.environ.get(OPTIONS_ENV, "").strip():
        try:
            from_env = json.loads(os.environ[OPTIONS_ENV])
        except ValueError as exc:  # the message names a position, never the (secret) text
            raise ParquetSinkError(
                f"{OPTIONS_ENV} is not valid JSON ({exc}); set it to an object like "
                '\'{"account_name": "acct", "account_key": "..."}\''
            ) from None
        if not isinstance(from_env, dict):
            raise ParquetSinkError(
                f"{OPTIONS_ENV} must hold a JSON object of storage options, not a {type(from_env).__name__}"
            )
    return {**from_env, **(args.storage_options_file or {}), **dict(args.storage_option)}


# -- commands ------------------------------------------------------------------------------------


def _cmd_ls(args: argparse.Namespace) -> int:
    """``ls PATH``: batches and the compaction and retention state."""
    output = read_output(args.path, _options(args), compact_interval=args.compact_interval)
    rows = count_rows(output) if args.rows else {}
    compacts = sorted(b for b, info in output.listing.items() if info.path.endswith(COMPACT_SUFFIX))
    batches = [
        {
            "batch": b.batch_id,
            "files": len(b.data_files),
            "rows": rows.get(b.batch_id),
            "bytes": sum(e.size for e in b.data_files),
            "commit_time_ms": b.committed_ms,
            "query_id": b.record.query_id if b.record else None,
            "query_batch": b.record.query_batch_id if b.record else None,
        }
        for b in output.batches.values()
    ]
    data = {
        "path": output.storage.display(output.storage.root),
        "latest_batch": output.latest,
        "compact_interval": output.log.compact_interval,
        "compact_batches": compacts,
        "oldest_batch": min(output.batches, default=None),
        "oldest_log_file": min(output.listing, default=None),
        "batches": batches,
    }
    headers = ["batch", "files"] + (["rows"] if args.rows else []) + ["bytes", "committed (UTC)", "query / app", "version"]
    table = _table(
        headers,
        [
            [b["batch"], b["files"]] + ([b["rows"]] if args.rows else [])
            + [_size(b["bytes"]), _when(b["commit_time_ms"]), b["query_id"], b["query_batch"]]
            for b in batches
        ],
    )
    if output.latest is None:
        summary = f"{data['path']}: no batches committed yet"
    else:
        summary = (
            f"{data['path']}: {len(batches)} batches, latest {output.latest}; compact interval "
            f"{data['compact_interval']}; compact files: {', '.join(map(str, compacts)) or 'none'}; oldest batch "
            f"in log: {data['oldest_batch']}; oldest log file: {data['oldest_log_file']}"
        )
    _emit(args, data, f"{table}\n{summary}" if batches else summary)
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    """``show PATH BATCH``: the entries of one batch."""
    output = read_output(args.path, _options(args), compact_interval=args.compact_interval)
    batch = output.batches.get(args.batch)
    if batch is None:
        present = f"{min(output.batches)}..{max(output.batches)}" if output.batches else "none"
        raise LogError(
            f"batch {args.batch} is not in the log of {output.storage.display(output.storage.root)} (batches "
            f"present: {present}). Older batches written by Spark's own sink are part of their compact batch."
        )
    entries = [
        {
            "path": e.path,
            "size": e.size,
            "isDir": e.is_dir,
            "modificationTime": e.modification_time,
            "batchId": e.batch_id,
        }
        for e in batch.entries
    ]
    record = batch.record
    data = {
        "batch": batch.batch_id,
        "query_id": record.query_id if record else None,
        "query_batch": record.query_batch_id if record else None,
        "commit_time_ms": batch.committed_ms,
        "entries": entries,
    }
    header = (
        f"batch {batch.batch_id}: {len(batch.data_files)} files, {_size(sum(e.size for e in batch.data_files))}, "
        f"committed {_when(batch.committed_ms)} UTC"
        + (f" by query {record.query_id} (its batch {record.query_batch_id})" if record else "")
    )
    table = _table(
        ["path", "size", "modificationTime", "batchId"],
        [[e["path"], e["size"], e["modificationTime"], e["batchId"]] for e in entries],
    )
    _emit(args, data, f"{header}\n{table}")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    """``verify PATH``: committed files exist with their logged size; the log chain is intact."""
    storage = Storage(args.path, _options(args))
    log = MetadataLog(args.path, storage=storage, cleanup=False, compact_interval=args.compact_interval or 10)
    problems = [str(p) for p in log.check(args.compact_interval)]
    files: list[CommittedFile] = []
    latest = None
    try:
        snap = snapshot(args.path, storage_options=_options(args), compact_interval=args.compact_interval)
        files, latest = list(snap.files), snap.latest_batch_id
    except ParquetSinkError as exc:
        if str(exc) not in problems:
            problems.append(str(exc))
        problems.append("the committed data files were not checked: no snapshot of the log could be read")
    for f in progress(files, "verifying"):
        where = f"committed file {storage.display(f.path)} (batch {f.batch_id})"
        try:
            size = storage.info(f.path).size
        except FileNotFoundError:
            problems.append(f"{where} is missing")
            continue
        if size != f.size:
            problems.append(f"{where} has {size} bytes but the log says {f.size}")
    data = {
        "path": storage.display(storage.root),
        "ok": not problems,
        "latest_batch": latest,
        "files": len(files),
        "bytes": sum(f.size for f in files),
        "problems": problems,
    }
    if problems:
        text = f"{len(problems)} problem(s) in {data['path']}:\n" + "\n".join(f"  - {p}" for p in problems)
    elif latest is None:
        text = f"OK: {data['path']}: no batches committed yet"
    else:
        text = (
            f"OK: {data['path']}: log intact up to batch {latest}, {len(files)} committed files "
            f"({_size(data['bytes'])}) present with their logged sizes"
        )
    _emit(args, data, text)
    return 0 if not problems else 1


def _cmd_vacuum(args: argparse.Namespace) -> int:
    """``vacuum PATH --older-than DURATION [--dry-run] [--include-files-before-log]``: delete orphan data
    files, the empty directories that leaves, and the staging directories and leases of dead attempts."""
    plan = find_orphans(args.path, _options(args), parse_duration_ms(args.older_than), args.include_before_log)
    storage, orphans = plan.storage, plan.orphans
    removed_dirs: list[str] = []
    if not args.dry_run:
        for info in progress(orphans, "deleting"):
            storage.delete(info.path)
            logger.info("deleted orphan %s", storage.display(info.path))
        for path in plan.dead_staging:
            storage.remove_tree(path)
        for lease in plan.dead_leases:
            storage.delete(lease.path)
        if not plan.live_leases:  # an in-flight batch may be about to write into an empty directory
            removed_dirs = remove_emptied_dirs(storage, [i.path for i in orphans])
    total = sum(i.size for i in orphans)
    data = {
        "path": storage.display(storage.root),
        "dry_run": args.dry_run,
        "older_than": args.older_than,
        "files": [{"path": storage.display(i.path), "size": i.size, "modified_ms": i.mtime_ms} for i in orphans],
        "bytes": total,
        "younger_kept": len(plan.young),
        "in_flight_kept": len(plan.in_flight),
        "before_log_kept": len(plan.before_log),
        "removed_dirs": [storage.display(d) for d in removed_dirs],
        "dead_staging": [storage.display(d) for d in plan.dead_staging],
        "dead_leases": [storage.display(lease.path) for lease in plan.dead_leases],
    }
    verb = "would delete" if args.dry_run else "deleted"
    lines = [f"{verb} {len(orphans)} orphan file(s), {_size(total)}, older than {args.older_than}"]
    lines += [f"  {storage.display(i.path)}  {_size(i.size)}" for i in orphans]
    if removed_dirs:
        lines.append(f"removed {len(removed_dirs)} emptied director(y/ies)")
    if plan.dead_staging or plan.dead_leases:
        lines.append(
            f"{verb} {len(plan.dead_staging)} staging director(y/ies) and {len(plan.dead_leases)} lease(s) of dead "
            "attempts"
        )
    if plan.young:
        lines.append(
            f"kept {len(plan.young)} unreferenced file(s) younger than {args.older_than}: they may belong to a "
            "batch being written now"
        )
    if plan.before_log:
        lines.append(
            f"kept {len(plan.before_log)} unreferenced file(s) older than the log's first commit: they may be data "
            "the output was created over; --include-files-before-log deletes them too"
        )
    if plan.in_flight:
        lines.append(
            f"kept {len(plan.in_flight)} unreferenced file(s) of batches in flight ({len(plan.live_leases)} lease(s) "
            f"under {HIDDEN_DIR}/leases; a lease ends with its batch's commit, or when a restarted query commits "
            "that batch)"
        )
    _emit(args, data, "\n".join(lines))
    return 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    """``doctor PATH --checkpoint CKPT``: what a restart from the checkpoint will do to the output;
    ``doctor PATH --app-id X --version V``: what rerunning ``write_batch`` of app X at version V will do."""
    if (args.checkpoint is None) == (args.app_id is None) or (args.app_id is None) != (args.app_version is None):
        print(
            f"{PROG} doctor: error: give --checkpoint CKPT (a streaming query) or --app-id ID --version V "
            "(a write_batch app), not both",
            file=sys.stderr,
        )
        return 2
    output = read_output(args.path, _options(args), must_exist=False)
    if args.app_id is not None:
        return _doctor_app(args, output)
    ckpt = Checkpoint.read(args.checkpoint, _options(args))
    plan = plan_restart(ckpt, output, append=args.on_foreign_query == "append", batch_id_only=args.batch_id_only)
    queries = output.queries()
    data = {
        "path": output.storage.display(output.storage.root),
        "checkpoint": {"query_id": ckpt.query_id, "offsets": ckpt.offsets, "commits": ckpt.commits},
        "log": {
            "latest_batch": output.latest,
            "queries": [
                {"query_id": q, "log_batch": r.log_batch_id, "query_batch": r.query_batch_id}
                for q, r in queries.items()
            ],
        },
        "next_batch": plan.batch,
        "replay": plan.replay,
        "action": plan.action,
        "log_batch": plan.log_batch,
        "ok": plan.ok,
        "message": plan.message,
        "warnings": plan.warnings,
    }
    committers = "; ".join(
        f"query {q} up to its batch {r.query_batch_id} (log batch {r.log_batch_id})" for q, r in queries.items()
    )
    if ckpt.query_id is None:
        checkpoint = "checkpoint: none yet (a new query)"
    else:
        checkpoint = (
            f"checkpoint: query {ckpt.query_id}, offsets up to batch {ckpt.offsets}, "
            f"commits up to batch {ckpt.commits}"
        )
    if output.latest is None:
        log = "output log: empty"
    else:
        committers = committers or "Spark's own file sink (no query ids)"
        log = f"output log: newest batch {output.latest}, committed by {committers}"
    lines = [checkpoint, log, plan.message] + [f"warning: {w}" for w in plan.warnings]
    _emit(args, data, "\n".join(lines))
    return 0 if plan.ok else 1


def _doctor_app(args: argparse.Namespace, output: Output) -> int:
    plan = plan_app_write(output, args.app_id, args.app_version)
    own = output.queries().get(args.app_id)
    data = {
        "path": output.storage.display(output.storage.root),
        "app_id": args.app_id,
        "version": args.app_version,
        "committed_version": None if own is None else own.query_batch_id,
        "committed_log_batch": None if own is None else own.log_batch_id,
        "latest_batch": output.latest,
        "action": plan.action,
        "log_batch": plan.log_batch,
        "ok": plan.ok,
        "message": plan.message,
        "warnings": plan.warnings,
    }
    log = "output log: empty" if output.latest is None else f"output log: newest batch {output.latest}"
    _emit(args, data, "\n".join([log, plan.message] + [f"warning: {w}" for w in plan.warnings]))
    return 0 if plan.ok else 1


# -- argument parsing ----------------------------------------------------------------------------


def _storage_option(text: str) -> tuple[str, Any]:
    """``key=value`` -> (key, value): ``true``/``false`` and integers are converted, a value starting with
    ``{`` or ``[`` is JSON (``client_kwargs={"endpoint_url": "http://minio:9000"}``). Errors never echo the
    value: it may be a secret."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise argparse.ArgumentTypeError("expected key=value")
    if value.lower() in ("true", "false"):
        return key, value.lower() == "true"
    if value.isdigit() and value.isascii():
        return key, int(value)
    if value.startswith(("{", "[")):
        try:
            return key, json.loads(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"the value of {key!r} starts like JSON but is not valid JSON") from None
    return key, value


def _options_file(path: str) -> dict[str, Any]:
    """The storage options in a JSON file (an object); errors name the file, never its content."""
    try:
        with open(path, encoding="utf-8") as fh:
            options = json.load(fh)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(options, dict):
        raise argparse.ArgumentTypeError(f"{path} must hold a JSON object of storage options")
    return options


def _duration(text: str) -> str:
    try:
        parse_duration_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return text.strip()


def build_parser() -> argparse.ArgumentParser:
    """The ``parquet-sink`` argument parser (one sub-command per operation).

    Example::

        >>> build_parser().parse_args(["ls", "/data/events", "--json"]).json
        True
    """
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--storage-option",
        metavar="KEY=VALUE",
        type=_storage_option,
        action="append",
        default=[],
        help="fsspec storage option, repeatable; 'true'/'false', integers and JSON values ({...} or [...]) "
        "are converted. Not for secrets: the command line is visible to other users and kept in shell "
        f"history; use --storage-options-file or {OPTIONS_ENV}",
    )
    common.add_argument(
        "--storage-options-file",
        metavar="PATH",
        type=_options_file,
        help='storage options as a JSON object in a file (e.g. {"account_name": "acct", "account_key": "..."}); '
        "keep it readable by you only",
    )
    common.add_argument(
        "--compact-interval",
        metavar="N",
        type=int,
        help="the writer's log compaction interval, for an output whose log cannot tell it (normally inferred "
        "from the log's files)",
    )
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("-v", "--verbose", action="store_true", help="log progress details to stderr")

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="See, check and clean the output directory of an exactly-once (or Spark) streaming file sink.",
        epilog=OPTIONS_HELP,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, run: Callable[[argparse.Namespace], int], summary: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=[common], help=summary, description=summary, epilog=OPTIONS_HELP)
        sub.add_argument("path", metavar="PATH", help="output directory (local path or fsspec URL)")
        sub.set_defaults(run=run)
        return sub

    ls = command("ls", _cmd_ls, "list committed batches and the log's compaction state")
    ls.add_argument("--rows", action="store_true", help="count rows from the Parquet footers (reads every file)")
    show = command("show", _cmd_show, "show the log entries of one batch")
    show.add_argument("batch", metavar="BATCH", type=int, help="batch id")
    command("verify", _cmd_verify, "check that committed files exist with their logged sizes and the log is intact")
    vacuum = command(
        "vacuum",
        _cmd_vacuum,
        "delete Parquet data files no committed batch references (orphans of failed batches); hidden paths "
        "(_x, .x, as Spark hides them: _x=1/ is a partition directory) and other files are never touched",
    )
    vacuum.add_argument(
        "--older-than",
        metavar="DURATION",
        required=True,
        type=_duration,
        help="only files older than this (1h, 30m, 7d): younger ones may belong to a batch being written now",
    )
    vacuum.add_argument("--dry-run", action="store_true", help="list the files and their sizes, delete nothing")
    vacuum.add_argument(
        "--include-files-before-log",
        dest="include_before_log",
        action="store_true",
        help="also delete unreferenced files older than the log's first commit (kept by default: they may be a "
        "dataset the output was created over)",
    )
    doctor = command(
        "doctor",
        _cmd_doctor,
        "explain what restarting a ParquetSink query from its checkpoint (or rerunning a write_batch app) will do",
    )
    doctor.add_argument("--checkpoint", metavar="CKPT", help="the query's checkpoint location")
    doctor.add_argument("--app-id", metavar="ID", help="a write_batch app id (with --version)")
    doctor.add_argument("--version", dest="app_version", metavar="V", type=int, help="the app version to rerun")
    doctor.add_argument(
        "--on-foreign-query",
        choices=("error", "append"),
        default="error",
        help="the sink's on_foreign_query setting (default: error)",
    )
    doctor.add_argument(
        "--batch-id-only",
        action="store_true",
        help="the sink runs with allow_batch_id_only=True and no checkpoint_location (Spark Connect): replays "
        "are told apart by batch id only",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 ok, 1 error or problems found, 2 usage).

    Example::

        >>> main(["verify", "/data/events"])
        OK: /data/events: log intact up to batch 57, 120 committed files (1.2 MiB) present with their logged sizes
        0
    """
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if args.verbose:
        logging.getLogger("parquet_sink").setLevel(logging.DEBUG)
    try:
        code = args.run(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:  # `parquet-sink ls ... | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (ParquetSinkError, OSError) as exc:
        logger.debug("details", exc_info=True)
        print(f"{PROG}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
