"""Child-process driver of the optimize crash and race tests and of the output model's kills: one
:func:`parquet_sink.maintenance.optimize` call, or one :func:`parquet_sink.write_batch` call.

Usage: ``python tests/helpers/optimize_child.py CONFIG.json`` (started by ``crash_util.start_child(...,
script=OPTIMIZE_CHILD)``). Config keys: ``out``, optional ``kwargs`` (the call's keyword arguments), optional
``table`` (an Arrow IPC file: then the call is ``write_batch(out, table, **kwargs)``), ``result`` (written at the
end: ``{"status": "ok", "committed", "log_batch_id", ...}`` or the error), ``started`` (touched before the call).
Failpoints come from the environment (``optimize_write``, ``optimize_padding``, ``optimize_commit``, ``compaction``,
``sidecar``, ``optimize_after_commit``, ``before_write``, ``before_commit``, ``commit_publish``, ...).
Exit codes: 0 done, 3 an error (named in ``result``); killed children exit by SIGKILL.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _call(config: dict) -> dict:
    """The call of ``config`` and the figures the parent reads."""
    import pyarrow as pa

    from parquet_sink import write_batch
    from parquet_sink.maintenance import optimize

    kwargs = config.get("kwargs", {})
    if "table" in config:
        with pa.memory_map(config["table"]) as source:
            table = pa.ipc.open_file(source).read_all()
        written = write_batch(config["out"], table, **kwargs)
        return {"committed": written.committed, "log_batch_id": written.log_batch_id, "files": written.files}
    result = optimize(config["out"], **kwargs)
    return {"committed": result.committed, "log_batch_id": result.log_batch_id, "abandoned": len(result.abandoned),
            "files": result.files, "padding": result.padding_batches}


def main() -> int:
    config = json.loads(Path(sys.argv[1]).read_text())
    import parquet_sink.maintenance  # noqa: F401  (imported before ``started``: a kill at a random time hits the call)

    Path(config["started"]).touch()
    try:
        figures = _call(config)
    except Exception as exc:  # the parent reads what happened
        Path(config["result"]).write_text(json.dumps({"status": "error", "type": type(exc).__name__, "message": str(exc)}))
        return 3
    Path(config["result"]).write_text(json.dumps({"status": "ok", **figures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
