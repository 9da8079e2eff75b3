"""Where a micro-batch's time goes, Spark's file sink against ours, from Spark's own event log: the same stream in
one SparkSession (``sink_bench.paired_repeats``: paired repeats, order reversed every other repeat) with
``spark.eventLog.enabled``, then, per batch (each query's first left out), medians of:

* ``addBatch``: the engine's figure for the sink's step;
* ``before job``: from the start of ``addBatch`` to the submission of the batch's write job (Spark's sink: planning
  the write; ours: ``foreachBatch``'s own wrapping and callback, then the sink's checks, lease and planning);
* ``foreachBatch``: of that, until the sink's Python function was entered (ours only);
* ``job``: the write job, submission to completion (``first task``: submission to the first task's launch);
* ``after job``: from the job's end to the end of ``addBatch`` (Spark's sink: its log commit; ours: publishing
  out of staging, fsync, the log commit, returning to the engine).

``addBatch``'s start is not in the event log: it is the batch's trigger start plus ``triggerExecution`` minus
``commitOffsets`` (its end) minus ``addBatch``, to the millisecond. What docs/performance.md "Where a batch's time
goes" reports.

``python -m benchmarks.batch_phases [--repeats 3] [--partitioned] [--batches 6] [--rows 1000000] [--arrow]``
"""

from __future__ import annotations

import datetime as dt
import glob
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict

from . import sink_bench
from .common import ab_arguments, make_session
from .sink_bench import Variant

_QUERY_ID = "sql.streaming.queryId"  # Spark's job properties naming the streaming query and its batch
_BATCH_ID = "streaming.sql.batchId"


class EnteredSink(sink_bench.RecordingSink):
    """The benchmark's recording sink, also noting (epoch ms) when the sink's function was entered and left."""

    stamps: dict[tuple[str, int], tuple[float, float]] = {}

    def __call__(self, df, batch_id: int) -> None:
        entered = time.time() * 1000
        super().__call__(df, batch_id)
        query = df.sparkSession.sparkContext.getLocalProperty(_QUERY_ID)
        self.stamps[(query, batch_id)] = (entered, time.time() * 1000)


def _events(directory: str) -> list[dict]:
    """Every event of the (uncompressed) event log(s) in ``directory``."""
    events = []
    for path in sorted(glob.glob(os.path.join(directory, "**", "events_*"), recursive=True)):
        with open(path, encoding="utf-8") as fh:
            events.extend(json.loads(line) for line in fh if line.strip())
    return events


def phases(
    events: list[dict], stamps: dict[tuple[str, int], tuple[float, float]], min_rows: int
) -> dict[str, dict[str, list[float]]]:
    """Per sink kind (``spark``: Spark's file sink; ``foreachBatch``: ours), each phase's milliseconds, batch by batch,
    over the queries that read at least ``min_rows`` rows."""
    jobs: dict[int, dict] = {}
    launches: dict[int, list[int]] = defaultdict(list)  # stage -> task launch times
    progress = []
    for e in events:
        kind = e["Event"]
        if kind == "SparkListenerJobStart":
            p = e.get("Properties", {})
            jobs[e["Job ID"]] = {
                "start": e["Submission Time"], "query": p.get(_QUERY_ID), "batch": p.get(_BATCH_ID),
                "stages": e["Stage IDs"],
            }
        elif kind == "SparkListenerJobEnd":
            jobs[e["Job ID"]]["end"] = e["Completion Time"]
        elif kind == "SparkListenerTaskEnd":
            launches[e["Stage ID"]].append(e["Task Info"]["Launch Time"])
        elif kind.endswith("QueryProgressEvent"):
            progress.append(e["progress"])
    by_query: dict[str, list[dict]] = defaultdict(list)
    for p in progress:
        by_query[p["id"]].append(p)
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for query, batches in by_query.items():
        if sum(p["sources"][0]["numInputRows"] for p in batches) < min_rows:
            continue  # a warm-up
        sink = "spark" if batches[0]["sink"]["description"].startswith("FileSink") else "foreachBatch"
        for p in batches:
            job = max(
                (j for j in jobs.values() if j["query"] == query and j["batch"] == str(p["batchId"]) and "end" in j),
                key=lambda j: j["end"] - j["start"], default=None,
            )
            if p["batchId"] == 0 or job is None:
                continue
            d = p["durationMs"]
            started = dt.datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp() * 1000
            ended = started + d["triggerExecution"] - d.get("commitOffsets", 0)  # addBatch's end
            figures = out[sink]
            figures["addBatch"].append(d["addBatch"])
            figures["before job"].append(job["start"] - (ended - d["addBatch"]))
            figures["job"].append(job["end"] - job["start"])
            first = [t for stage in job["stages"] for t in launches.get(stage, [])]
            if first:
                figures["first task"].append(min(first) - job["start"])
            figures["after job"].append(ended - job["end"])
            entered = stamps.get((query, p["batchId"]))
            if entered is not None:
                figures["foreachBatch"].append(entered[0] - (ended - d["addBatch"]))
                figures["sink after job"].append(entered[1] - job["end"])
    return out


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    arrow = "--arrow" in argv  # ours with writer="arrow"
    args = ab_arguments("benchmarks.batch_phases", __doc__, [a for a in argv if a != "--arrow"])
    work = tempfile.mkdtemp(prefix="eo-bench-phases-")
    log_dir = os.path.join(work, "events")
    os.makedirs(log_dir)
    events = {"spark.eventLog.enabled": "true", "spark.eventLog.compress": "false", "spark.eventLog.dir": f"file://{log_dir}"}
    spark = make_session(extra=events)
    recording = sink_bench.RecordingSink
    sink_bench.RecordingSink = EnteredSink  # run_query wraps our sink in it
    variants = {"spark": Variant("spark"), "ours": Variant("ours-arrow" if arrow else "ours")}
    try:
        runs = sink_bench.paired_repeats(spark, variants, args, work)
    finally:
        sink_bench.RecordingSink = recording
        spark.stop()
    try:
        figures = phases(_events(log_dir), EnteredSink.stamps, args.batches * args.rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sink_bench.print_ab(runs, args, "ours")
    print("per batch, median ms (each query's first batch left out):")
    for sink, named in figures.items():
        medians = (f"{name} {statistics.median(values):.1f}" for name, values in named.items())
        print(f"  {sink:13s} " + "  ".join(medians))


if __name__ == "__main__":
    main()
