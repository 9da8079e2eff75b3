"""The read side of a chain of jobs: which version an application has committed to an output, and the
committed batches of a source after a given batch id, each as Arrow with its batch id.

An application's commit is the sink's commit record read as an ``(app_id, version)`` pair: a streaming
query's records are ``(query id, query batch id)``, a :func:`parquet_sink.write_batch` call's are
``(app_id, version)``, one format for both. A downstream job is then a short loop::

    >>> done = committed_version("/data/daily", "daily-job")          # None: nothing committed yet
    >>> for batch_id, table in iter_batches("/data/events", after=done):
    ...     write_batch("/data/daily", transform(table), app_id="daily-job", version=batch_id)
"""

from __future__ import annotations

import logging
import numbers
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal, NamedTuple

import pyarrow as pa

from ..errors import OutputResetError, ParameterError, names_output
from ..log.snapshot import read_snapshot
from ..log.metadata_log import MetadataLog
from .history import history
from .reader import read_committed, snapshot
from ..log.entry import CommitRecord, attribute, records_of

logger = logging.getLogger(__name__)


class SourceBatch(NamedTuple):
    """One committed batch of a source: its log batch id and its rows (an empty table, possibly without
    columns, for a batch that committed no data)."""

    batch_id: int
    table: pa.Table


def check_app_version(app_id: object, version: object) -> int:
    """``version`` as an int, after the rule of a ``write_batch`` app's identity (``write_batch`` and ``doctor``
    alike): ``app_id`` a non-empty string, ``version`` an integer (numpy's too) from 0 to 2**63 - 1 (a Spark long:
    the log stores it as one); ParameterError otherwise.

    Example: ``check_app_version("daily-job", numpy.int64(41)) == 41``; ``check_app_version("", 0)`` raises.
    """
    check_app_id(app_id)
    if isinstance(version, bool) or not isinstance(version, numbers.Integral) or not 0 <= int(version) < 2**63:
        raise ParameterError(f"version must be an integer from 0 to 2**63 - 1 (a Spark long), got {version!r}")
    return int(version)


def check_app_id(app_id: object) -> None:
    """ParameterError unless ``app_id`` is a ``write_batch`` app's id (or a streaming query's): a non-empty string."""
    if not isinstance(app_id, str) or not app_id:
        raise ParameterError(f"app_id must be a non-empty string, got {app_id!r}")


def app_commits(records: Sequence[CommitRecord]) -> dict[str | None, CommitRecord]:
    """The newest commit record of each application (or streaming query) id, in log order, as the sink
    keeps them.

    Example: ``app_commits(records_of(table))["daily-job"].query_batch_id`` is the app's version.
    """
    return {record.query_id: record for record in records}


def decide_write(
    latest: int,
    commits: Mapping[str | None, CommitRecord],
    app_id: str,
    version: int,
    spark_newest: bool = False,
    spark_sink_stopped: bool = False,
) -> tuple[Literal["commit", "skip", "spark"], int]:
    """What :func:`parquet_sink.write_batch` does with ``(app_id, version)`` given the newest log batch
    ``latest`` (-1 when empty) and each app's newest commit: ``("skip", log batch holding the app's newest
    commit)`` when that commit's version is >= ``version`` (Delta's txnAppId/txnVersion rule), else
    ``("spark", latest)`` when Spark's own file sink committed the newest log batch (``spark_newest``:
    :func:`~parquet_sink.log.entry.committed_by_spark_sink`) and its query is not stopped for good
    (``spark_sink_stopped``): a commit after it would make that query skip its next batch (SparkSinkBatchError);
    else ``("commit", latest + 1)``. Pure, so ``parquet-sink doctor --app-id`` predicts with it.

    Example::

        >>> decide_write(4, {"job": CommitRecord(4, "job", 7, "c")}, "job", 7)
        ('skip', 4)
        >>> decide_write(4, {"job": CommitRecord(4, "job", 7, "c")}, "job", 8)
        ('commit', 5)
        >>> decide_write(4, {}, "job", 0, spark_newest=True)
        ('spark', 4)
    """
    own = commits.get(app_id)
    if own is not None and version <= own.query_batch_id:
        return "skip", own.log_batch_id
    if spark_newest and not spark_sink_stopped:
        return "spark", latest
    return "commit", latest + 1


def version_record(records: Sequence[CommitRecord], app_id: str, version: int) -> CommitRecord | None:
    """The commit record of ``(app_id, version)`` among ``records`` (those of a log snapshot): its own,
    or inferred inside a run (then without a fingerprint); None if the log shows no commit of it. Pure.

    Example::

        >>> version_record([CommitRecord(0, "job", 0, "a-f0"), CommitRecord(3, "job", 3, "b-f3")], "job", 1)
        CommitRecord(log_batch_id=1, query_id='job', query_batch_id=1, commit_id='')
    """
    own = [r for r in records if r.query_id == app_id]
    exact = [r for r in own if r.query_batch_id == version]
    if exact:
        return exact[-1]
    candidates = {r.log_batch_id - (r.query_batch_id - version) for r in own if r.query_batch_id > version}
    inferred = attribute(records, sorted(b for b in candidates if b >= 0))
    return next((r for r in inferred.values() if r.query_id == app_id and r.query_batch_id == version), None)


@names_output
def committed_version(
    path: str | os.PathLike[str], app_id: str, *, storage_options: dict[str, Any] | None = None
) -> int | None:
    """The newest version ``app_id`` has committed to the output at ``path`` (None if none, or no log yet).
    A streaming query id works too: the answer is its newest query batch id.

    Example::

        >>> committed_version("/data/daily", "daily-job")
        41
    """
    check_app_id(app_id)  # another type matches no commit: None would say "never committed"
    log = MetadataLog(path, storage_options=storage_options, cleanup=False)
    own = app_commits(records_of(read_snapshot(log).table)).get(app_id)
    return None if own is None else own.query_batch_id


@names_output
def iter_batches(
    path: str | os.PathLike[str],
    *,
    after: int | None = None,
    columns: Sequence[str] | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Iterator[SourceBatch]:
    """The committed batches of the source at ``path`` with an id greater than ``after`` (all when None),
    oldest first, each read with ``read_committed(path, batches=(b, b))``. Stops at the newest batch
    committed when the iteration started; a batch that committed no data is yielded too (an empty
    table), so a downstream job still records that it consumed it. So is an optimize's swap (``history``
    operation ``optimize``): its files hold rows earlier batches delivered (Delta's ``dataChange=false``), which a
    downstream would otherwise append twice.

    Example::

        >>> [(b, t.num_rows) for b, t in iter_batches("/data/events", after=40)]
        [(41, 1000), (42, 0)]
    """
    if after is not None and (isinstance(after, bool) or not isinstance(after, int) or after < 0):
        raise ParameterError(
            f"after={after!r}: give the last batch id already consumed (an integer >= 0), or None for all"
        )
    start = -1 if after is None else after
    latest = snapshot(path, storage_options=storage_options).latest_batch_id  # NotAnOutputError if no log
    if after is not None and (latest is None or latest < after):
        raise OutputResetError(
            f"iter_batches({os.fspath(path)!r}, after={after}): the source's newest committed batch is {latest}, "
            f"before batch {after} that was already consumed: the source was reset or replaced (a new output at the "
            "same path), so its batches are not those consumed. Nothing was read. Start the consumer again from "
            "after=None (or the batch to resume at) once the source is right."
        )
    if latest is None or latest <= start:
        return
    logger.info("reading batches %d..%d of %s", start + 1, latest, path)
    operations = history(path, storage_options=storage_options).select(["log_batch_id", "operation"]).to_pylist()
    swaps = {row["log_batch_id"] for row in operations if row["operation"] == "optimize"}
    for batch_id in range(start + 1, latest + 1):
        if batch_id in swaps:  # no new row: empty, as a batch that committed no data reads
            table = pa.table({name: pa.nulls(0) for name in columns or ()})
        else:
            table = read_committed(path, batches=(batch_id, batch_id), columns=columns, storage_options=storage_options)
        yield SourceBatch(batch_id, table)
