"""Child process of the chain tests: a plain-Python job using ``write_batch``, killed and rerun by the parent.

Usage: ``python tests/helpers/chain_child.py CONFIG.json`` (started by ``crash_util.start_child(..., script=...)`` in
its own session, so a failpoint ``kill`` or the parent's ``killpg`` SIGKILLs it like a machine dying).

Modes (``config["mode"]``):

* ``job``: the downstream job of a chain: ``for batch_id, table in iter_batches(source, after=
  committed_version(out, app_id))``: :func:`transform`, then ``write_batch(out, ..., version=batch_id)``.
  ``pause``: seconds to sleep after each batch (widens the window for random kills).
* ``writer``: ``write_batch(out, rows(app_id, v), app_id=..., version=v)`` for ``v`` in ``versions``;
  ``go``: a file to wait for before the first write (so two writers start together); ``pause``: seconds
  between writes; ``crash_columns``: the
  rows have the crash query's columns (``id, file, name``; ``file`` is minus the app index), so the writer
  appends beside a ``crash_child.py`` query.

Common keys: ``out``, ``app_id``, ``storage_options``, ``partition_by``, ``max_records_per_file``, ``log`` (more
``write_batch`` keyword arguments: the log's ``compact_interval``, ``min_batches_to_retain``, ``cleanup_delay``),
``clock_offset_s`` (this process's clock runs that many seconds off: ``time.time`` shifted before the package
is imported, a writer on a machine whose clock disagrees);
``progress`` (one JSON line per write_batch result) and ``result`` (how the run ended), ``started``.
Exit codes: 0 done; 3 an error (``result`` names it); killed children die by SIGKILL.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import traceback
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.helpers.crash_child import _append_line, _write_json

ROWS_PER_VERSION_BASE = 1_000_000  # writer ids: app index * 10^9 + version * 10^6 + row


def transform(table: pa.Table) -> pa.Table:
    """The chain job's transformation: keep ``id``, add ``double`` and the partition column ``bucket``."""
    ids = table.column("id")
    return pa.table({"id": ids, "double": pc.multiply(ids, 2), "bucket": pc.bit_wise_and(ids, 3)})


def writer_rows(app_index: int, version: int, rows: int) -> pa.Table:
    """The rows a ``writer`` child writes as ``version``: ids that name the app and the version."""
    base = app_index * 1_000_000_000 + version * ROWS_PER_VERSION_BASE
    ids = pa.array(range(base, base + rows), pa.int64())
    return pa.table({"id": ids, "app": pa.array([app_index] * rows, pa.int64())})


def _write(config: dict, data: pa.Table, version: int) -> None:
    from parquet_sink import write_batch

    result = write_batch(
        config["out"],
        data,
        app_id=config["app_id"],
        version=version,
        partition_by=config.get("partition_by"),
        storage_options=config.get("storage_options"),
        max_records_per_file=config.get("max_records_per_file"),
        **config.get("log", {}),
    )
    _append_line(config.get("progress"), dataclasses.asdict(result))


def main() -> int:
    config = json.loads(Path(sys.argv[1]).read_text())
    os.environ["PARQUET_SINK_KILL_PGID"] = str(os.getpgid(0))
    offset = config.get("clock_offset_s")
    if offset:
        real_time = time.time
        time.time = lambda: real_time() + offset
    from parquet_sink import committed_version, iter_batches

    Path(config["started"]).touch()
    try:
        if config["mode"] == "job":
            out, app_id, options = config["out"], config["app_id"], config.get("storage_options")
            done = committed_version(out, app_id, storage_options=options)
            for batch_id, table in iter_batches(config["source"], after=done, storage_options=options):
                _write(config, transform(table), batch_id)
                time.sleep(config.get("pause", 0))
        else:
            go = config.get("go")
            while go and not os.path.exists(go):
                time.sleep(0.005)
            for version in config["versions"]:
                table = writer_rows(config["app_index"], version, config["rows"])
                if config.get("crash_columns"):
                    ids = table.column("id")
                    table = pa.table({"id": ids, "file": pc.negate(table.column("app")),
                                      "name": pa.array([f"w{i}" for i in ids.to_pylist()])})
                _write(config, table, version)
                time.sleep(config.get("pause", 0))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the test with it
        _write_json(config.get("result"), {"status": "error", "error": repr(exc), "trace": traceback.format_exc()})
        return 3
    _write_json(config.get("result"), {"status": "ok"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
