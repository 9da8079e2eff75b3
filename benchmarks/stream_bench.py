"""Section 4c: a stream continuing on a big log, batch by batch: ours against Spark's own file sink.

Both continue the same Spark-written log (a compact file of ``entries`` entries at batch 9, no columnar copy:
an output Spark's sink wrote), each on its own copy, with a new query streaming one small input file per
micro-batch. Spark's sink skips the query's batches up to the log's latest (its batch ids are the log's) and
then appends; ours is told to append after the latest batch (``on_foreign_query="append"``). Each batch's
``addBatch`` time comes from the query's own progress reports; compaction batches (every 10th log batch) are
where Spark's sink reads and rewrites the whole log: the stall its users complain about. As the baseline of
"a batch costs the same on a big log as on an empty output", both also run the same stream into an empty output
(ours against Spark's there: the cost of a tiny batch, issue 38)."""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, field

from parquet_sink import ParquetSink

from .common import percentile
from .compaction_bench import _spark_log_file
from .data import generate_input

logger = logging.getLogger("benchmarks.stream")

LATEST = 9  # the synthesized log: 9.compact
EMPTY = "ours-empty"  # ours, the same stream into an empty output (the baseline of a batch's cost)
SPARK_EMPTY = "spark-empty"  # Spark's sink, the same stream into an empty output (tiny batches, no log to carry)
ROWS = 1_000


@dataclass
class StreamResults:
    """Per-batch ``addBatch`` milliseconds of each sink, split into compaction batches and the others."""

    entries: int
    batches: int
    ms: dict[str, list[float]] = field(default_factory=dict)  # kind -> per appended batch, in order
    compaction: dict[str, list[bool]] = field(default_factory=dict)  # kind -> whether that batch compacted

    def split(self, kind: str, compacting: bool) -> list[float]:
        return [ms for ms, c in zip(self.ms[kind], self.compaction[kind]) if c is compacting]

    def p(self, kind: str, q: float, compacting: bool | None = None) -> float:
        values = self.ms[kind] if compacting is None else self.split(kind, compacting)
        return percentile(values, q) if values else float("nan")


def _synth(root: str, entries: int) -> None:
    meta = os.path.join(root, "_spark_metadata")
    os.makedirs(meta)
    _spark_log_file(os.path.join(meta, f"{LATEST}.compact"), root, LATEST, entries)


def _run(spark, kind: str, input_dir: str, out: str, checkpoint: str) -> list[tuple[int, float]]:
    """(query batch id, addBatch ms) of every batch of one availableNow query."""
    stream = spark.readStream.schema(spark.read.parquet(input_dir).schema).option("maxFilesPerTrigger", 1).parquet(input_dir)
    writer = stream.writeStream.option("checkpointLocation", checkpoint).trigger(availableNow=True)
    if kind in ("spark", SPARK_EMPTY):
        writer = writer.format("parquet").option("path", out)
    elif kind == EMPTY:
        writer = writer.foreachBatch(ParquetSink(out))
    else:
        writer = writer.foreachBatch(ParquetSink(out, on_foreign_query="append"))
    query = writer.start()
    query.awaitTermination()
    return [(int(p["batchId"]), float(p["durationMs"].get("addBatch", 0))) for p in query.recentProgress]


def run(spark, work: str, entries: int, batches: int) -> StreamResults:
    """Both sinks continue a copy of one ``entries``-entry Spark-written log for ``batches`` appended batches;
    then both write the same batches into an empty output."""
    base = os.path.join(work, "stream-log")
    _synth(base, entries)
    input_dir = os.path.join(work, "stream-input")
    generate_input(input_dir, LATEST + 1 + batches, ROWS, row_groups=1)
    results = StreamResults(entries, batches)
    warm = os.path.join(work, "stream-warm")  # an untimed query first: the first query of a session runs slower
    generate_input(warm + "-input", 3, ROWS, row_groups=1)
    _run(spark, EMPTY, warm + "-input", warm, warm + "-ckpt")
    # the big log: each sink once; an empty output: each sink twice, in alternating order, the first batch of each
    # query left out (a query's start: both sinks pay it, ours also reads the log once), the batches pooled
    runs = [("ours", 0), ("spark", 0)]
    runs += [(kind, rep) for rep in range(2) for kind in ((EMPTY, SPARK_EMPTY), (SPARK_EMPTY, EMPTY))[rep]]
    for kind, rep in runs:
        out = os.path.join(work, f"stream-{kind}-{rep}")
        empty = kind in (EMPTY, SPARK_EMPTY)
        if empty:
            os.makedirs(out)
        else:
            shutil.copytree(base, out)
        os.sync()
        timings = _run(spark, kind, input_dir, out, os.path.join(work, f"stream-ckpt-{kind}-{rep}"))
        # Spark's sink skips query batches up to the log's latest: keep the batches that appended
        appended = [(b, ms) for b, ms in timings if kind != "spark" or b > LATEST][:batches]
        first = 0 if kind == EMPTY else LATEST + 1
        log_batches = [first + i if kind not in ("spark", SPARK_EMPTY) else b for i, (b, _) in enumerate(appended)]
        kept = slice(1, None) if empty else slice(None)
        results.ms.setdefault(kind, []).extend([ms for _, ms in appended][kept])
        results.compaction.setdefault(kind, []).extend([(b + 1) % 10 == 0 for b in log_batches][kept])
        logger.info("stream %s: p50 %.0f ms, p99 %.0f ms over %d batches", kind, results.p(kind, 50),
                    results.p(kind, 99), len(results.ms[kind]))
        shutil.rmtree(out, ignore_errors=True)
    for scratch in (base, input_dir, warm, warm + "-input", warm + "-ckpt"):
        shutil.rmtree(scratch, ignore_errors=True)
    return results
