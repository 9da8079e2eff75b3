"""Named failpoints for crash tests: off by default, one dict lookup when off.

Switched on from the environment, so a child process (and its Spark Python workers, which inherit the
environment) can be told where to die::

    PARQUET_SINK_FAILPOINTS="before_commit=kill,task_write=raise@1"

``name=action[@N]``: trigger on the N-th hit (default 1). Actions:

* ``kill``: SIGKILL the process group in ``PARQUET_SINK_KILL_PGID`` (default: this process's group), i.e.
  the driver, its JVM and its workers, like a machine dying.
* ``raise``: raise :class:`FailpointError` (a task failure Spark retries, or a driver error).
* ``stop``: SIGSTOP this process (the parent test resumes it with SIGCONT), to stage a race at this point.

Hits are counted per process, or across processes when ``PARQUET_SINK_FAILPOINT_STATE`` names a
directory (each hit claims a ticket file there), so ``raise@1`` fails only the first task attempt of
all attempts, in whichever worker it runs.

``iceberg_expire``: ``vacuum`` read an Iceberg table and chose the snapshots to expire, that expiry not committed
(a sync may commit meanwhile: ``tests/iceberg/test_expiry_races.py``).

Failpoints in the write path (see docs/reliability.md): ``before_write``, ``task_write``
(inside a task, after its first file), ``before_publish`` (Spark writer path: the job wrote the batch
into staging, nothing renamed yet), ``publish_rename`` (Spark writer path: after each file renamed into
place), ``before_commit``, ``commit_publish`` (log temp file written, not yet published),
``after_commit``, ``commit_retry`` (the sink lost its log batch to another writer and checked the winners: before
it commits at the next log batch), ``compaction``, ``sidecar`` (a compact file committed, its columnar copy not yet
written), ``cleanup``, ``delta_commit`` (``delta_log=True`` or ``sync_delta_log``: the batch is committed to
``_spark_metadata``, its Delta commit not yet made), ``delta_read`` (``sync_delta_log``, ``verify``: the Delta log
read, ``_spark_metadata`` not yet), ``iceberg_commit`` (``iceberg=`` or ``sync_iceberg``: the snapshots of one
catalog commit staged, its metadata file not yet written), ``iceberg_metadata_write`` (half of the metadata file
of a table without catalog written, not yet created under its name: a sync's commit or a vacuum's expiry),
``iceberg_version_hint`` (that file created, the table's version hint not yet written), ``iceberg_after_commit``
(the sync's commit made) and ``iceberg_vacuum`` (``vacuum``: before each Iceberg metadata file it deletes). In
``optimize``: ``optimize_write`` (its lease taken, no new file yet), ``optimize_padding`` (before each empty batch),
``optimize_commit`` (every new file written, nothing committed), ``optimize_after_commit`` (the swap committed).
"""

from __future__ import annotations

import os
import signal

ENV = "PARQUET_SINK_FAILPOINTS"
STATE_ENV = "PARQUET_SINK_FAILPOINT_STATE"
KILL_PGID_ENV = "PARQUET_SINK_KILL_PGID"


class FailpointError(RuntimeError):
    """Raised by a failpoint whose action is ``raise``."""


def _parse(spec: str) -> dict[str, tuple[str, int]]:
    points = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, action = item.partition("=")
        action, _, nth = action.partition("@")
        if action not in ("kill", "raise", "stop"):
            raise ValueError(f"{ENV}: unknown action {action!r} in {item!r} (use kill, raise or stop)")
        points[name] = (action, int(nth or 1))
    return points


_ACTIVE = _parse(os.environ.get(ENV, ""))
_HITS: dict[str, int] = {}


def _hit_number(name: str) -> int:
    state = os.environ.get(STATE_ENV)
    if not state:
        _HITS[name] = _HITS.get(name, 0) + 1
        return _HITS[name]
    os.makedirs(state, exist_ok=True)
    ticket = 1
    while True:
        try:
            os.close(os.open(os.path.join(state, f"{name}.{ticket}"), os.O_CREAT | os.O_EXCL))
            return ticket
        except FileExistsError:
            ticket += 1


def failpoint(name: str) -> None:
    """Trigger the failpoint ``name`` if the environment switched it on."""
    if not _ACTIVE or name not in _ACTIVE:
        return
    action, nth = _ACTIVE[name]
    if _hit_number(name) != nth:
        return
    if action == "kill":
        os.killpg(int(os.environ.get(KILL_PGID_ENV) or os.getpgid(0)), signal.SIGKILL)
    if action == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
        return
    raise FailpointError(f"failpoint {name} triggered")
