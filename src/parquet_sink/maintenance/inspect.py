"""Reading an output for inspection: its log attributed to batches (who committed what, when), row counts
from the footers, and :func:`verify`. What ``parquet-sink ls``, ``show`` and ``verify`` print, as a library.

Spark has no counterpart: its ``FileStreamSinkLog`` is read only by ``MetadataLogFileIndex`` (the read side,
:mod:`parquet_sink.read.reader`); this view adds who committed each batch (the sink's commit records) and checks
the files against the log.

Example::

    >>> from parquet_sink.maintenance import read_output, verify
    >>> out = read_output("/data/events")
    >>> [(b.batch_id, len(b.data_files)) for b in out.batches.values()][:2]
    [(0, 4), (1, 4)]
    >>> verify("/data/events").ok
    True
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa

from ..delta.sync import DELTA, DeltaDependencyError, compare_logs
from ..iceberg.compare import compare_iceberg
from ..iceberg.errors import IcebergDependencyError
from ..iceberg.follow import ICEBERG, IcebergTarget, iceberg_target
from ..errors import ParquetSinkError, names_output
from ..table_formats import kept_formats
from ..log.compaction import DEFAULT_COMPACT_INTERVAL, LogSettings, check_compact_interval, named_by_another_interval
from ..log.entry import BATCH_KEY, BATCH_ROWS_KEY, COMMIT_ID_KEY, COMMIT_TIME_KEY, CommitRecord, LogEntry, attribute, entry_from_row, records_of
from ..log.files import nested_roots, require_output
from ..log.metadata_log import MetadataLog
from ..log.snapshot import LogSnapshot, data_files, read_log_files, read_snapshot
from ..parquet_read import read_footer
from ..partitioning import is_data_file
from ..read.history import batch_history
from ..read.reader import CommittedFile, removal_cause, snapshot
from ..storage.filesystem import FileInfo, Storage
from ..write.conflicts import spark_sink_behind

logger = logging.getLogger(__name__)

T = TypeVar("T")
Progress = Callable[[Sequence[T], str], Iterable[T]]  # (items, label) -> the items, maybe drawing a counter


def _silent(items: Sequence[T], label: str) -> Iterable[T]:
    return items


@dataclass
class Batch:
    """One log batch as the CLI shows it: its entries (commit record apart) and who committed it."""

    batch_id: int
    entries: list[LogEntry] = field(default_factory=list)
    # the entries a reader reads (:func:`~parquet_sink.log.snapshot.data_files`: Spark skips directories and
    # empty files); ``sum(e.size for e in batch.data_files)`` is the batch's size
    data_files: list[LogEntry] = field(default_factory=list)
    record: CommitRecord | None = None
    # the commit time the log records (see :func:`parquet_sink.history`), else (a batch committed by Spark's sink
    # or an older version) the batch's log file's mtime, else its newest data file's mtime
    committed_ms: int | None = None
    rows: int | None = None  # as the log records it; None when it does not (count_rows reads the footers)


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
    log_snapshot: LogSnapshot | None = None  # the listing read and the latest snapshot's entries

    def story(self, rows: Mapping[int, int | None] | None = None) -> list[StoryRow]:
        """Every batch ``0..latest`` as :func:`~parquet_sink.history` tells it (the same rows, oldest first), with
        when each was committed where the log records no time (the batch's log file's or files' times) and a
        note where the figures need one: whose optimize replaced a batch's files, what an optimize rewrote, what
        an ``optimize-wait`` batch is. ``rows``: row counts for batches the log records none for
        (:func:`count_rows`). What ``parquet-sink ls`` prints.

        Example: ``[r.note for r in read_output("/data/events").story()][:1]`` -> ``['files replaced by optimize
        (batch 8)']``.
        """
        if self.log_snapshot is None:
            return []
        history = batch_history(self.log_snapshot).to_pylist()
        settings = self.log.recorded_settings()
        optimizes = [h["log_batch_id"] for h in history if h["operation"] == "optimize"]
        story = []
        for h in history:
            b = h["log_batch_id"]
            batch = self.batches.get(b)
            counted = h["rows"] if h["rows"] is not None else (rows or {}).get(b)
            committed = h["commit_time"]
            committed_ms = (
                int(committed.timestamp() * 1000) if committed is not None else batch.committed_ms if batch else None
            )
            files, size = h["files"], h["bytes"]
            note = _note(h, counted, [k for k in optimizes if k > b], settings)
            if files is None and batch is not None and b == self.first_batch:  # a compact file Spark wrote
                files, size = len(batch.data_files), sum(e.size for e in batch.data_files)
                note = f"the files of batches up to {b}: Spark's compact file does not say which batch added each"
            story.append(StoryRow(
                b, h["operation"], h["query_id"], h["query_batch_id"], committed_ms, counted, files, size, note
            ))
        return story

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

    def spark_sink_behind(self) -> str | None:
        """The warning when the log ran ahead of Spark's own sink's newest batch through anything but the query it
        moved to ParquetSink (:func:`~parquet_sink.write.conflicts.spark_sink_behind`), else None.

        Example: ``read_output("/data/events").spark_sink_behind()`` -> ``'log batches 1..2 were committed ...'``.
        """
        records = [b.record for b in self.batches.values() if b.record is not None]
        return spark_sink_behind(records, min(self.batches, default=0), self.latest)


@dataclass(frozen=True)
class StoryRow:
    """One batch as ``parquet-sink ls`` shows it (:meth:`Output.story`): ``files`` and ``bytes`` are its files
    still committed, ``rows`` the rows it added; ``note`` says why they differ, or what a maintenance batch did."""

    batch: int
    operation: str | None  # "append", "optimize", "optimize-wait"; None: the log does not say (Spark's own sink)
    query_id: str | None
    query_batch: int | None
    committed_ms: int | None
    rows: int | None
    files: int | None
    bytes: int | None
    note: str


def _note(history: Mapping[str, Any], rows: int | None, later_optimizes: list[int], settings: LogSettings | None) -> str:
    """Why a batch's figures read as they do (empty when they need no word): the cause of files gone is
    :func:`~parquet_sink.read.reader.removal_cause`'s, as the errors word it."""
    operation = history["operation"]
    if operation == "optimize-wait":
        return "empty: brings the optimize after it to a compaction batch"
    done = f"rewrote {history['files_removed']} files of earlier batches" if operation == "optimize" else ""
    if history["files"] != 0 or not (rows or done):
        return done
    gone = removal_cause(later_optimizes, settings)
    return f"{done}; its files {gone}" if done else f"files {gone}"


def read_output(
    url: str | os.PathLike[str],
    *,
    storage_options: Mapping[str, Any] | None = None,
    must_exist: bool = True,
    compact_interval: int | None = None,
) -> Output:
    """Read the latest snapshot of the log at ``url`` and attribute its entries to batches.
    ``compact_interval``: the writer's, when the log cannot tell it (normally inferred).

    Example::

        >>> out = read_output("/data/events")
        >>> sorted(out.batches), out.latest
        ([0, 1, 2], 2)
    """
    check_compact_interval(compact_interval)
    storage = Storage(url, dict(storage_options or {}))
    log = MetadataLog(url, storage=storage, cleanup=False, compact_interval=compact_interval or 10)
    names = log.list_details()
    listing = names.infos
    if must_exist and not listing:
        require_output(storage)
    latest = max(listing, default=None)
    output = Output(storage, log, listing, latest, {}, compact_interval)
    if latest is None:
        return output
    table = read_log_files(log, latest, names, compact_interval)
    files = log.files_for(latest, names, compact_interval)
    output.first_batch = files[0][0]
    batches = {b: Batch(b) for b, _ in files}  # empty batches too
    records = records_of(table)
    for row in table.to_pylist():
        batch_id = output.owner_batch(row[BATCH_KEY])
        batch = batches.setdefault(batch_id, Batch(batch_id))
        if row[COMMIT_TIME_KEY] is not None:
            batch.committed_ms, batch.rows = row[COMMIT_TIME_KEY], row[BATCH_ROWS_KEY]
        if row["isDir"] and (row[COMMIT_ID_KEY] is not None or row[COMMIT_TIME_KEY] is not None):
            if batch.committed_ms is None:  # a record without figures (an older version): its entry's time
                batch.committed_ms = row["modificationTime"]
        else:
            batch.entries.append(entry_from_row(row))
    for row in data_files(table).to_pylist():
        batches[output.owner_batch(row[BATCH_KEY])].data_files.append(entry_from_row(row))
    # A compact file keeps only the first and last commit record of each run: infer the others.
    for batch_id, record in attribute(records, batches).items():
        batches[batch_id].record = record
    for batch in batches.values():
        if batch.committed_ms is None and batch.batch_id in listing:
            batch.committed_ms = listing[batch.batch_id].mtime_ms
        elif batch.committed_ms is None and batch.data_files:  # compacted away: when its files were written
            batch.committed_ms = max(e.modification_time for e in batch.data_files)
    output.batches = dict(sorted(batches.items()))
    output.log_snapshot = LogSnapshot(names, latest, table)
    return output


def count_rows(output: Output, progress: Progress = _silent) -> dict[int, int | None]:
    """Rows per batch: as the log records them, else from the Parquet footers (None for a batch with a file
    that cannot be read). ``progress`` wraps the files as they are read (the CLI draws a counter with it).

    Example::

        >>> count_rows(read_output("/data/events"))
        {0: 10, 1: 20}
    """
    storage = output.storage
    snap = snapshot(  # resolves paths of a moved output
        storage.url, storage_options=storage.storage_options, compact_interval=output.compact_interval
    )
    recorded = {b: batch.rows for b, batch in output.batches.items() if batch.rows is not None}
    rows: dict[int, int | None] = {b: 0 for b in output.batches}
    unreadable = set()
    footers = [f for f in snap.files if output.owner_batch(f.batch_id) not in recorded]
    for f in progress(footers, "reading footers"):
        batch_id = output.owner_batch(f.batch_id)
        try:
            rows[batch_id] = (rows.get(batch_id) or 0) + read_footer(storage, f.path, f.size).num_rows
        except (OSError, pa.ArrowInvalid) as exc:  # ArrowInvalid: not Parquet (truncated, empty)
            logger.warning(
                "cannot read the footer of %s (batch %s, %d bytes in the log): %s; run `parquet-sink verify`",
                storage.display(f.path), batch_id, f.size, exc,
            )
            unreadable.add(batch_id)
    return rows | recorded | dict.fromkeys(unreadable)


@dataclass
class VerifyReport:
    """What :func:`verify` found: ``ok`` when the log is intact and every committed file is present with its
    logged size; ``problems`` says what is wrong otherwise, one sentence each; ``warnings`` what does not make
    the output wrong (a Delta log behind ``_spark_metadata``)."""

    path: str
    latest_batch: int | None
    files: int
    bytes: int
    problems: list[str]
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No problem found. Example: ``verify("/data/events").ok is True``."""
        return not self.problems


@names_output
def verify(
    path: str | os.PathLike[str],
    *,
    storage_options: Mapping[str, Any] | None = None,
    compact_interval: int | None = None,
    progress: Progress = _silent,
    iceberg: bool | Mapping[str, Any] | None = None,
) -> VerifyReport:
    """Check the output at ``path``: every log file readable and the chain of log files intact, every
    committed data file present with the size the log records, and the table formats kept in step with the log
    (:func:`compare_mirrors`): a Delta log (``_delta_log``), the Iceberg table kept without a catalog, if any, and
    with ``iceberg={"catalog": ..., "table": "ns.name"}`` (as the writers and ``vacuum`` take it) that catalog's
    table. Problems are reported, never raised (a malformed ``iceberg`` is the writers' ParameterError). A table
    behind the log is a warning naming the sync command that catches up.

    Example::

        >>> report = verify("s3://bucket/events", storage_options={"anon": False})
        >>> report.ok, report.latest_batch, report.files
        (True, 57, 120)
    """
    check_compact_interval(compact_interval)
    target = iceberg_target(iceberg, f"verify({os.fspath(path)!r})")
    storage = Storage(path, dict(storage_options or {}))
    log = MetadataLog(path, storage=storage, cleanup=False, compact_interval=compact_interval or 10)
    problems = [str(p) for p in log.check(compact_interval)]
    files: list[CommittedFile] = []
    latest = None
    try:
        snap = snapshot(path, storage_options=dict(storage_options or {}), compact_interval=compact_interval)
        files, latest = list(snap.files), snap.latest_batch_id
    except ParquetSinkError as exc:
        if str(exc) not in problems:
            problems.append(str(exc))
        problems.append("the committed data files were not checked: no snapshot of the log could be read")
        with contextlib.suppress(ParquetSinkError, OSError):  # the newest log file, as Spark lists it
            latest = log.latest_batch_id()
    for f in progress(files, "verifying"):
        where = f"committed file {storage.display(f.path)} (batch {f.batch_id})"
        try:
            size = storage.info(f.path).size
        except FileNotFoundError:
            problems.append(f"{where} is missing")
            continue
        if size != f.size:
            problems.append(f"{where} has {size} bytes but the log says {f.size}")
    warnings: list[str] = []
    if latest is not None and not files and not problems:
        warnings += _nothing_committed(storage, latest)
    with contextlib.suppress(ParquetSinkError, OSError):  # a log that cannot be read is a problem above already
        snap_log = read_snapshot(log, compact_interval)
        behind = spark_sink_behind(records_of(snap_log.table), min(snap_log.listing, default=0), snap_log.latest)
        other = other_interval_warning(snap_log.listing, log.recorded_interval(), storage.display)
        warnings += [w for w in (behind, other) if w]
    if latest is not None:
        mirror_problems, mirror_warnings = compare_mirrors(path, storage, target)
        problems += mirror_problems
        warnings += mirror_warnings
    return VerifyReport(storage.display(storage.root), latest, len(files), sum(f.size for f in files), problems, warnings)


def compare_mirrors(
    path: str | os.PathLike[str], storage: Storage, iceberg: IcebergTarget | None
) -> tuple[list[str], list[str]]:
    """(problems, warnings) of the table formats kept in step with the log of the output at ``path`` (opened as
    ``storage``): its Delta log (:func:`parquet_sink.delta.compare_logs`), its Iceberg table without catalog and
    the catalog table ``iceberg`` names (:func:`parquet_sink.iceberg.compare.compare_iceberg`); each sentence
    names the command that fixes it. A mirror whose package is missing is a warning, one that cannot be read a
    problem. What ``verify`` reports and ``doctor`` advises.

    Example: ``compare_mirrors("/data/events", Storage("/data/events"), None)`` -> ``([], [])``.
    """
    options = storage.storage_options
    catalog, table = (None, None) if iceberg is None else (iceberg.catalog, iceberg.table)
    checks: list[tuple[str, type[Exception], Callable[[], tuple[list[str], list[str]]]]] = []
    kept = kept_formats(storage, [(DELTA, None), (ICEBERG, catalog is not None or None)])
    if DELTA in kept:
        checks.append(("the Delta log", DeltaDependencyError, lambda: compare_logs(path, storage_options=options)))
    if ICEBERG in kept:
        checks.append(("the Iceberg table", IcebergDependencyError,
                       lambda: compare_iceberg(path, catalog=catalog, table=table, storage_options=options)))
    problems: list[str] = []
    warnings: list[str] = []
    for what, missing, compare in checks:
        try:
            found, said = compare()
            problems += found
            warnings += said
        except missing as exc:
            warnings.append(f"{what} was not compared with the log: {exc}")
        except Exception as exc:  # reported, never raised: a catalog that cannot be reached, a torn manifest
            problems.append(f"{what} could not be compared with the log: {type(exc).__name__}: {exc}")
    return problems, warnings


def other_interval_warning(listing: Mapping[int, str], recorded: int | None, display: Callable[[str], str]) -> str | None:
    """A warning when log batches after the newest compact file are named by another compact interval than the
    ``recorded`` one (:func:`~parquet_sink.log.compaction.named_by_another_interval`: Spark's own sink in a session
    at another interval): which batches, the interval their names imply, the recorded one and the remedy. None
    without a recorded interval or such a batch. ``display`` shows a log file's path. ``verify`` and ``doctor`` say it.

    Example: ``other_interval_warning({0: ".../0", 1: ".../1", 2: ".../2"}, 3, str)`` -> ``"log batch 2 (.../2) is a
    delta where the output's recorded compact interval 3 names 2.compact: ..."``.
    """
    if recorded is None:
        return None
    batches, implied = named_by_another_interval(listing, recorded)
    if not batches:
        return None
    them = "them" if len(batches) > 1 else "it"
    compaction = max(batches) + recorded  # the recorded interval's next compaction batch: the log holds none past it
    default = ", Spark's default" if implied == DEFAULT_COMPACT_INTERVAL else ""
    return (
        f"log batch{'es' if len(batches) > 1 else ''} {', '.join(map(str, batches))} "
        f"({', '.join(display(listing[b]) for b in batches)}) {'are deltas' if len(batches) > 1 else 'is a delta'} where the output's recorded compact interval {recorded} names {', '.join(f'{b}.compact' for b in batches)}: "
        f"another interval named {them} (e.g. {implied}{default}), as Spark's own file sink names batches by its "
        "session's spark.sql.streaming.fileSink.log.compactInterval until the log holds a compact file. parquet-sink "
        f"reads the log as written, but Spark's own sink stops on BATCH_METADATA_NOT_FOUND when it compacts across "
        f"{them}. Run Spark's sink with spark.sql.streaming.fileSink.log.compactInterval={recorded}, after log batch "
        f"{compaction} ({compaction}.compact, which a writer of parquet-sink writes from the log as written): up to it, "
        f"Spark's sink at interval {recorded} stops at its compaction too."
    )


def _nothing_committed(storage: Storage, latest: int) -> list[str]:
    """A warning when the log commits no file yet the output holds Parquet data files: retention (a duration
    too short) dropped every entry, or every batch was empty while others wrote files here."""
    prefix = storage.root.rstrip("/") + "/"
    relative = sorted(i.path[len(prefix) :] for i in storage.find(storage.root) if i.path.startswith(prefix))
    nested = nested_roots(relative)  # another output's or table's files: its own log commits them
    found = [p for p in relative if is_data_file(p) and not any(p.startswith(root) for root in nested)]
    if not found:
        return []
    return [
        f"the log (up to batch {latest}) commits no data file, yet {storage.display(storage.root)} holds "
        f"{len(found)} Parquet data file(s), e.g. {storage.display(prefix + found[0])}: every reader sees 0 rows. If "
        "the writer's retention is shorter than intended (retention drops entries older than it when compacting), "
        "the data is invisible, and `vacuum` would delete it as orphans: do not vacuum; restore the log or copy the "
        "files into a new output."
    ]


__all__ = [
    "Batch", "Output", "VerifyReport", "compare_mirrors", "count_rows", "other_interval_warning", "read_output",
    "verify",
]
