"""Child-process driver of the optimize crash and race tests: one :func:`parquet_sink.maintenance.optimize` call.

Usage: ``python tests/helpers/optimize_child.py CONFIG.json`` (started by ``crash_util.start_child(...,
script=OPTIMIZE_CHILD)``). Config keys: ``out``, optional ``kwargs`` (optimize's keyword arguments), ``result``
(written at the end: ``{"status": "ok", "committed", "log_batch_id", "abandoned", "files"}`` or the error),
``started`` (touched before the call). Failpoints come from the environment (``optimize_write``,
``optimize_padding``, ``optimize_commit``, ``compaction``, ``sidecar``, ``optimize_after_commit``, ...).
Exit codes: 0 done, 3 an error (named in ``result``); killed children exit by SIGKILL.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> int:
    config = json.loads(Path(sys.argv[1]).read_text())
    from parquet_sink.maintenance import optimize

    Path(config["started"]).touch()
    try:
        result = optimize(config["out"], **config.get("kwargs", {}))
    except Exception as exc:  # the parent reads what happened
        Path(config["result"]).write_text(json.dumps({"status": "error", "type": type(exc).__name__, "message": str(exc)}))
        return 3
    Path(config["result"]).write_text(json.dumps({
        "status": "ok", "committed": result.committed, "log_batch_id": result.log_batch_id,
        "abandoned": len(result.abandoned), "files": result.files, "padding": result.padding_batches,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
