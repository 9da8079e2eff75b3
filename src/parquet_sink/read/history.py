"""``history``: one row per committed batch of an output, from its log alone (the counterpart of Delta's
``DESCRIBE HISTORY`` / delta-rs ``DeltaTable.history``; Spark's file sink has none).

Each commit record carries the batch's commit time and row count (``commitTime``, ``batchRows``: keys
Spark's reader ignores), and they stay in the log when compaction drops the record itself
(:func:`~parquet_sink.log.entry.figures_of`), so the history survives compaction and a copy of the output
(``cp -r`` keeps the log's text, not the files' times). Files and bytes are counted from the log's
entries. What the log cannot tell is null: batches Spark's own sink (or a version before these keys)
committed have no commit time or rows.

Commit times are monotonic, as Delta's in-commit timestamps are: a writer records
``max(its clock, the newest commit time in the log + 1 ms)`` (:func:`next_commit_time`), so a writer whose
clock is behind never records a time before an earlier batch's; and what the log holds is read through
Delta's ``monotonizeCommitTimestamps`` rule (:func:`monotonic_times`), for logs written before that rule.
So ``history`` is ordered in time and ``as_of_time`` never answers a snapshot holding a batch recorded as
committed after the time asked for. The ``_spark_metadata`` format is unchanged: the time rides in the
commit record's ``commitTime`` key, which Spark ignores.

Example::

    >>> history("/data/events", limit=2).to_pylist()[0]
    {'log_batch_id': 57, 'query_id': '6abb5a0d-...', 'query_batch_id': 57,
     'commit_time': datetime.datetime(2026, 11, 24, 6, 1, 2, 345000, tzinfo=<UTC>),
     'files': 4, 'bytes': 18230, 'rows': 1000}
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import logging
import os
import time
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ParameterError, SnapshotNotFoundError, names_output
from ..log.compaction import check_compact_interval
from ..log.entry import (
    BATCH_KEY, BATCH_ROWS_KEY, COMMIT_ID_KEY, COMMIT_TIME_KEY, QUERY_BATCH_KEY, QUERY_ID_KEY, CommitRecord, attribute,
    records_of,
)
from ..log.files import is_compact_path, require_output
from ..log.metadata_log import MetadataLog
from ..log.snapshot import LogSnapshot, data_files, read_recent, read_snapshot
from ..storage.filesystem import Storage

logger = logging.getLogger(__name__)
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)

HISTORY_SCHEMA = pa.schema(
    [
        ("log_batch_id", pa.int64()),
        ("query_id", pa.string()),  # the streaming query's id, or write_batch's app id
        ("query_batch_id", pa.int64()),  # the query's own batch id, or write_batch's version
        ("commit_time", pa.timestamp("ms", tz="UTC")),
        ("files", pa.int64()),
        ("bytes", pa.int64()),
        ("rows", pa.int64()),
        ("operation", pa.string()),  # "append", "optimize", or "optimize-wait" (an empty batch before one)
        ("files_removed", pa.int64()),  # an optimize's: the files it replaced (null for other operations)
        ("bytes_removed", pa.int64()),
    ]
)

# The entry columns batch_history reads: a history with a limit decodes only these of a compact file's copy.
_HISTORY_COLUMNS = ["size", "isDir", BATCH_KEY, QUERY_ID_KEY, QUERY_BATCH_KEY, COMMIT_ID_KEY, COMMIT_TIME_KEY, BATCH_ROWS_KEY]

# The commit record's query id of an optimize (parquet_sink.maintenance.optimize): its swap carries
# optimize_fingerprint() as its fingerprint; the empty batches it commits to reach a compaction batch none.
OPTIMIZE_APP_ID = "parquet-sink/optimize"
_OPTIMIZE_PREFIX = "optimize."


def optimize_key(relative_paths: Iterable[str]) -> str:
    """The idempotency key of an optimize: a hash of the root-relative paths of the files it replaces, so the
    Delta sync can tell the files an optimize's compact file left out from those retention dropped with it.

    Example: ``optimize_key(["k=a/part-0.parquet", "k=a/part-1.parquet"])`` -> ``'3b1d0c5f2a9e8d47'``.
    """
    return hashlib.sha256("\n".join(sorted(relative_paths)).encode()).hexdigest()[:16]


def optimize_fingerprint(key: str, files_removed: int, bytes_removed: int) -> str:
    """The fingerprint an optimize's commit record carries: its plan's idempotency ``key`` and what it removed
    (read back by :func:`optimize_figures`).

    Example: ``optimize_fingerprint("9f1c", 180, 270000)`` -> ``'optimize.9f1c.180.270000'``.
    """
    return f"{_OPTIMIZE_PREFIX}{key}.{files_removed}.{bytes_removed}"


def optimize_figures(record: CommitRecord) -> tuple[str, int, int] | None:
    """(key, files removed, bytes removed) of an optimize's swap record, None for any other record.

    Example: ``optimize_figures(CommitRecord(19, OPTIMIZE_APP_ID, 19, "ab-optimize.9f1c.180.270000"))`` ->
    ``('9f1c', 180, 270000)``.
    """
    fingerprint = record.fingerprint or ""
    if record.query_id != OPTIMIZE_APP_ID or not fingerprint.startswith(_OPTIMIZE_PREFIX):
        return None
    key, files, size = fingerprint[len(_OPTIMIZE_PREFIX):].split(".")
    return key, int(files), int(size)


def _operation(record: CommitRecord | None) -> tuple[str | None, int | None, int | None]:
    if record is None:
        return None, None, None
    if record.query_id != OPTIMIZE_APP_ID:
        return "append", None, None
    figures = optimize_figures(record)
    return ("optimize", figures[1], figures[2]) if figures else ("optimize-wait", None, None)


def monotonic_times(times: list[int | None]) -> list[int | None]:
    """Commit times (ms, oldest batch first; None where unknown) made strictly increasing as Delta's
    ``DeltaHistoryManager.monotonizeCommitTimestamps`` does: a time not after the previous known one becomes
    that one + 1 ms. Unknown times stay unknown. Pure.

    Example: ``monotonic_times([100, 50, None, 40])`` -> ``[100, 101, None, 102]``.
    """
    result: list[int | None] = []
    previous: int | None = None
    for time_ms in times:
        if time_ms is not None:
            time_ms = time_ms if previous is None or time_ms > previous else previous + 1
            previous = time_ms
        result.append(time_ms)
    return result


def newest_commit_time(table: pa.Table) -> int | None:
    """The newest commit time among log entries ``table`` (:data:`~parquet_sink.log.entry.ENTRY_SCHEMA`: a
    snapshot, or the batches read since one); None when none records one.

    Example: ``newest_commit_time(read_snapshot(log).table)`` -> ``1732430000000``.
    """
    return pc.max(table.column(COMMIT_TIME_KEY)).as_py() if table.num_rows else None


def next_commit_time(newest_ms: int | None, now_ms: int | None = None) -> int:
    """The commit time a writer records for its batch when the newest commit time in the log it read is
    ``newest_ms`` (:func:`newest_commit_time`): ``max(now, newest + 1 ms)``, Delta's in-commit timestamp
    rule, so commit times increase whatever the writers' clocks say. ``now_ms``: this writer's clock
    (default ``time.time()``). Pure but for the clock.

    Example: ``next_commit_time(1732430000000, now_ms=1732420000000)`` -> ``1732430000001``.
    """
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return now_ms if newest_ms is None or now_ms > newest_ms else newest_ms + 1


def batch_history(snap: LogSnapshot) -> pa.Table:
    """The history of every log batch ``0..snap.latest``, oldest first (:data:`HISTORY_SCHEMA`), from the
    entries of one snapshot (all of :data:`~parquet_sink.log.entry.ENTRY_SCHEMA`'s columns).

    Example: ``batch_history(read_snapshot(log)).column("rows")``.
    """
    if snap.latest is None:
        return HISTORY_SCHEMA.empty_table()
    table = snap.table
    n = snap.latest + 1
    ids = table.column(BATCH_KEY)
    unknown_upto = -1  # batches whose files cannot be told apart: those a compact file Spark wrote covers
    if ids.null_count:
        compacts = [b for b, path in snap.listing.items() if is_compact_path(path) and b <= snap.latest]
        unknown_upto = max(compacts, default=snap.latest)
    files = [0] * n
    sizes = [0] * n
    data = data_files(table, ["size", BATCH_KEY])
    if data.num_rows:
        grouped = data.filter(pc.is_valid(data.column(BATCH_KEY))).group_by(BATCH_KEY).aggregate(
            [("size", "count"), ("size", "sum")]
        )
        for batch, count, total in zip(*(grouped.column(c).to_pylist() for c in (BATCH_KEY, "size_count", "size_sum"))):
            if 0 <= batch < n:
                files[batch], sizes[batch] = count, total
    times: list[int | None] = [None] * n
    rows: list[int | None] = [None] * n
    figured = table.filter(pc.and_(pc.is_valid(table.column(COMMIT_TIME_KEY)), pc.is_valid(ids)))
    for batch, time_ms, count in zip(
        *(figured.column(c).to_pylist() for c in (BATCH_KEY, COMMIT_TIME_KEY, BATCH_ROWS_KEY))
    ):
        if 0 <= batch < n:
            times[batch], rows[batch] = time_ms, count
    owners = attribute(records_of(table), range(n))
    known = [b > unknown_upto for b in range(n)]
    operations = [_operation(owners.get(b)) for b in range(n)]
    return pa.table(
        {
            "log_batch_id": pa.array(range(n), pa.int64()),
            "query_id": [owners[b].query_id if b in owners else None for b in range(n)],
            "query_batch_id": [owners[b].query_batch_id if b in owners else None for b in range(n)],
            "commit_time": pa.array(monotonic_times(times), pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
            "files": [files[b] if known[b] else None for b in range(n)],
            "bytes": [sizes[b] if known[b] else None for b in range(n)],
            "rows": pa.array(rows, pa.int64()),
            "operation": [o[0] for o in operations],
            "files_removed": [o[1] for o in operations],
            "bytes_removed": [o[2] for o in operations],
        },
        schema=HISTORY_SCHEMA,
    )


@names_output
def history(
    path: str | os.PathLike[str],
    *,
    limit: int | None = None,
    storage_options: dict[str, Any] | None = None,
    compact_interval: int | None = None,
) -> pa.Table:
    """One row per committed batch of the output at ``path``, newest first, as an Arrow table: ``log_batch_id``,
    ``query_id`` (the streaming query, or ``write_batch``'s app id), ``query_batch_id`` (the query's batch id,
    or the app's version), ``commit_time`` (UTC), ``files`` and ``bytes`` (the batch's files still committed:
    0 once an optimize replaced them or retention expired them), ``rows`` (the rows it added), ``operation``
    (``append``, ``optimize``, ``optimize-wait``), ``files_removed``, ``bytes_removed`` (an optimize's). Null
    where the log cannot tell (see the module docstring). ``limit``: only the newest ``limit`` batches.

    Example::

        >>> history("/data/events", limit=1).select(["log_batch_id", "rows"]).to_pylist()
        [{'log_batch_id': 57, 'rows': 1000}]
        >>> history("/data/events").to_pandas()     # or polars.from_arrow(...)
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ParameterError(f"limit must be None or a non-negative integer, got {limit!r}")
    check_compact_interval(compact_interval)
    storage = Storage(path, storage_options)
    log = MetadataLog(path, storage=storage, cleanup=False, compact_interval=compact_interval or 10)
    # with a limit, only the newest batches are read whole: the rows cut off are not counted
    snap = (read_snapshot(log, compact_interval) if limit is None
            else read_recent(log, compact_interval, whole_newest=limit, columns=_HISTORY_COLUMNS))
    if snap.latest is None:
        require_output(storage)
    table = batch_history(snap)
    table = table.take(pa.array(range(table.num_rows - 1, -1, -1), pa.int64()))
    return table if limit is None or limit >= table.num_rows else table.slice(0, limit)


def batch_as_of_time(log: MetadataLog, history_table: pa.Table, when: _dt.datetime) -> int:
    """The newest log batch committed at or before ``when`` (Delta's ``timestampAsOf``), from
    :func:`batch_history`'s table (oldest first). SnapshotNotFoundError when ``when`` is before the first
    commit, or when the log does not record the commit time of a batch that decides it.

    Example: ``batch_as_of_time(log, batch_history(snap), datetime(2026, 11, 24, tzinfo=timezone.utc))`` -> ``41``.
    """
    if not isinstance(when, _dt.datetime):
        raise TypeError(f"as_of_time must be a datetime, got {type(when).__name__}")
    if when.tzinfo is None:
        raise ParameterError(
            f"as_of_time={when!r} has no time zone: pass an aware datetime, e.g. datetime(..., tzinfo=timezone.utc)"
        )
    target = (when - _EPOCH) // _dt.timedelta(milliseconds=1)  # exact: through a float it fell 1 ms short at times
    times = history_table.column("commit_time").cast(pa.int64()).to_pylist()
    where = log.display(log.log_dir)
    found: int | None = None
    for batch in range(len(times) - 1, -1, -1):  # newest first: the first batch at or before the time decides
        if times[batch] is None:
            raise SnapshotNotFoundError(
                f"as_of_time={when.isoformat()}: {where} does not record when batch {batch} was committed (Spark's "
                "own sink, or a version before commit times, wrote it), so the batch as of that time cannot be "
                "told. Use as_of_batch=, with `parquet-sink ls` to find the batch."
            )
        if times[batch] <= target:
            found = batch
            break
    if found is None:
        first = "no batch" if not times else f"its first batch at {_iso(times[0])}"
        raise SnapshotNotFoundError(
            f"as_of_time={when.isoformat()} is before the first commit of {where} ({first}): there is no snapshot "
            "then. Ask for a later time."
        )
    return found


def _iso(time_ms: int) -> str:
    return _dt.datetime.fromtimestamp(time_ms / 1000, _dt.timezone.utc).isoformat(timespec="milliseconds")
