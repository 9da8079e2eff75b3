"""Section 4: one compaction of a log whose previous compact file holds ~1M entries.

The largest planning history (newest compact ``C.compact``) gets nine more delta batches; then batch
``C + 10``, a compaction batch, is committed with 10 data files plus a commit record:

* ours: ``MetadataLog(root).add(C + 10, entries)`` in a fresh subprocess (default settings, as the sink
  uses it), timed there; peak memory is the process's peak RSS (``VmHWM``, reset before the add) minus
  its RSS before the add (the growth the compaction causes), and the absolute peak;
* Spark: ``FileStreamSinkLog(1, session, "<root>/_spark_metadata", None).add(C + 10, Array[SinkFileStatus])``
  through py4j in the run's JVM, timed around the call; memory is the sum of the heap pools' peak
  usage after a full GC and a peak reset (an upper bound: pools can peak at different moments),
  minus the heap in use before the call.

The compact file is deleted between repeats; ours and Spark alternate.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field

from .common import Stat, jvm_heap_used_mb, jvm_peak_heap_mb, jvm_reset_peaks

logger = logging.getLogger("benchmarks.compaction")

NEW_FILES = 10


@dataclass
class CompactionResults:
    entries_before: int = 0  # lines of the previous compact file plus the deltas
    compact_bytes: int = 0
    batch: int = 0
    ours_seconds: Stat = field(default_factory=Stat)
    ours_peak_growth_mb: Stat = field(default_factory=Stat)
    ours_peak_mb: Stat = field(default_factory=Stat)
    ours_json_seconds: Stat = field(default_factory=Stat)  # once, with no columnar copy of the previous compact file
    floor_seconds: Stat = field(default_factory=Stat)  # byte copy of the files the compaction reads
    spark_seconds: Stat = field(default_factory=Stat)
    spark_heap_mb: Stat = field(default_factory=Stat)
    spark_available: bool = True
    spark_note: str = ""


def _entries(root: str, batch: int):
    from parquet_sink.log.metadata_log import CommitRecord, LogEntry
    from parquet_sink.storage.filesystem import Storage

    storage = Storage(root)
    now = int(time.time() * 1000)
    record = CommitRecord.new(batch, "00000000-0000-4000-8000-000000000001", batch)
    data = [
        LogEntry(storage.to_uri(storage.join(f"part-{k:05d}-{batch:032x}.c000.snappy.parquet")), 4096, False, now)
        for k in range(NEW_FILES)
    ]
    return record.log_entries(storage, now, data)


def child(root: str, batch: int) -> None:
    """Runs in the subprocess: one timed MetadataLog.add of a compaction batch; prints JSON."""
    import gc
    import resource

    import parquet_sink
    from parquet_sink import MetadataLog

    entries = _entries(root, batch)
    log = MetadataLog(root)
    gc.collect()
    reset_peak()
    before = status_kb("VmRSS")
    hwm_before = status_kb("VmHWM")
    cpu_before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    ok = log.add(batch, entries)
    seconds = time.perf_counter() - started
    cpu_after = resource.getrusage(resource.RUSAGE_SELF)
    after = status_kb("VmHWM")
    cpu = cpu_after.ru_utime - cpu_before.ru_utime + cpu_after.ru_stime - cpu_before.ru_stime
    print(json.dumps({"ok": ok, "seconds": seconds, "cpu_seconds": cpu, "module": parquet_sink.__file__,
                      "rss_before_kb": before, "hwm_before_kb": hwm_before,
                      "hwm_after_kb": after, "ru_maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


def reset_peak() -> None:
    """Reset this process's peak RSS (/proc's VmHWM, through clear_refs where the kernel allows it).
    ru_maxrss is not used: Linux carries it over from the parent across fork+exec."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def subprocess_env() -> tuple[str, dict[str, str]]:
    """(repository root, environment) for a benchmark child process importing this checkout."""
    env = dict(os.environ)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join([repo, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return repo, env


def checkout_child(args: list[str], src: str | None, what: str) -> dict:
    """``python -m *args`` in a fresh process importing the package of the checkout ``src`` (None: this one's):
    the JSON of its last line of output (with ``module``: the package file it imported, checked against ``src``).
    RuntimeError naming ``what`` when it fails."""
    repo, env = subprocess_env()
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(os.path.abspath(src), "src"), env["PYTHONPATH"]])
    proc = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, env=env, cwd=repo)
    if proc.returncode:
        raise RuntimeError(f"{what} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if src is not None and not result["module"].startswith(os.path.abspath(src)):
        raise RuntimeError(f"the child imported parquet_sink from {result['module']}, not from {src}")
    return result


def status_kb(key: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def _cleanup(root: str, batch: int) -> None:
    meta = os.path.join(root, "_spark_metadata")
    for name in (f"{batch}.compact", f".{batch}.compact.crc", f"{batch}.compact.columnar", f"{batch}.compact.parquet"):
        try:
            os.remove(os.path.join(meta, name))
        except FileNotFoundError:
            pass


def _data_line_count(path: str) -> int:
    """Entries of data files (compaction keeps every one; ours keeps fewer commit records than Spark)."""
    count = 0
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.readline(), b""):
            count += b'"isDir":false' in chunk
    return count


def _line_count(path: str) -> int:
    count = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 24):
            count += chunk.count(b"\n")
    return count  # entries: newlines (each entry is preceded by one)


def _spark_log_class(spark):
    from py4j.java_gateway import JavaClass

    jvm = spark._jvm
    for name in (
        "org.apache.spark.sql.execution.streaming.sinks.FileStreamSinkLog",  # Spark 4.1+
        "org.apache.spark.sql.execution.streaming.FileStreamSinkLog",  # Spark 3.x, 4.0
    ):
        cls = jvm
        for part in name.split("."):
            cls = getattr(cls, part)
        if isinstance(cls, JavaClass):
            status = name.rsplit(".", 1)[0] + ".SinkFileStatus"
            scls = jvm
            for part in status.split("."):
                scls = getattr(scls, part)
            return cls, scls
    return None, None


def spark_add(spark, log_cls, status_cls, root: str, batch: int) -> tuple[float, float, bool]:
    jvm = spark._jvm
    entries = _entries(root, batch)
    array = spark.sparkContext._gateway.new_array(status_cls, len(entries))
    for i, e in enumerate(entries):
        array[i] = status_cls(
            e.path, e.size, e.is_dir, e.modification_time, e.block_replication, e.block_size, e.action
        )
    jvm_reset_peaks(spark)
    base = jvm_heap_used_mb(spark)
    started = time.perf_counter()
    log = log_cls(1, spark._jsparkSession, os.path.join(root, "_spark_metadata"), jvm.scala.Option.empty())
    ok = log.add(batch, array)
    seconds = time.perf_counter() - started
    return seconds, jvm_peak_heap_mb(spark) - base, ok


def _ours(root: str, batch: int, src: str | None = None) -> dict:
    """One compaction by ours in a fresh subprocess (see :func:`child`); ``src``: import the package from
    this ``src`` directory (another checkout's) instead of this one's."""
    repo, env = subprocess_env()
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([src, env["PYTHONPATH"]])
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.compaction_bench", root, str(batch)],
        capture_output=True, text=True, env=env, cwd=repo, check=True,
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if not out["ok"]:
        raise RuntimeError(f"our compaction of batch {batch} was refused")
    if src is not None and not out["module"].startswith(src + os.sep):
        raise RuntimeError(f"the child imported parquet_sink from {out['module']}, not from {src}")
    return out


def run(spark, root: str, repeats: int) -> CompactionResults:
    from parquet_sink import MetadataLog

    log = MetadataLog(root, cleanup=False)
    latest = log.latest_batch_id()
    if not log.is_compaction_batch(latest):
        raise RuntimeError(f"{root}: the newest batch {latest} should be a compaction batch")
    for batch in range(latest + 1, latest + log.compact_interval):
        log.add(batch, _entries(root, batch))
    batch = latest + log.compact_interval
    results = CompactionResults(batch=batch)
    meta = os.path.join(root, "_spark_metadata")
    results.entries_before = _line_count(os.path.join(meta, f"{latest}.compact")) + (log.compact_interval - 1) * (
        NEW_FILES + 1
    )
    log_cls, status_cls = _spark_log_class(spark)
    if log_cls is None:
        results.spark_available = False
        results.spark_note = "FileStreamSinkLog not found in this Spark: Spark's compaction not measured"
    counts = {}
    for rep in range(repeats):
        _cleanup(root, batch)
        results.floor_seconds.add(byte_copy_floor(root, batch))
        order = ["ours", "spark"] if rep % 2 == 0 else ["spark", "ours"]
        for who in order:
            _cleanup(root, batch)
            if who == "ours":
                out = _ours(root, batch)
                results.ours_seconds.add(out["seconds"])
                results.ours_peak_growth_mb.add(max(0, out["hwm_after_kb"] - out["rss_before_kb"]) / 1024)
                results.ours_peak_mb.add(out["hwm_after_kb"] / 1024)
                logger.info("compaction ours : %.2fs, peak RSS +%.0f MB (peak %.0f MB)", out["seconds"],
                            results.ours_peak_growth_mb.values[-1], results.ours_peak_mb.values[-1])
            elif log_cls is not None:
                seconds, heap, ok = spark_add(spark, log_cls, status_cls, root, batch)
                if not ok:
                    raise RuntimeError(f"Spark's compaction of batch {batch} was refused")
                results.spark_seconds.add(seconds)
                results.spark_heap_mb.add(heap)
                logger.info("compaction spark: %.2fs, peak heap +%.0f MB", seconds, heap)
            else:
                continue
            compact = os.path.join(meta, f"{batch}.compact")
            results.compact_bytes = os.path.getsize(compact)
            if who not in counts:
                counts[who] = _data_line_count(compact)
    # The first compaction after an upgrade, or over a compact file Spark wrote: no columnar copy to plan from.
    _cleanup(root, batch)
    copy = os.path.join(meta, f"{latest}.compact.columnar")
    os.rename(copy, copy + ".away")
    try:
        results.ours_json_seconds.add(_ours(root, batch)["seconds"])
        logger.info("compaction ours without a columnar copy: %.2fs", results.ours_json_seconds.values[-1])
    finally:
        os.rename(copy + ".away", copy)
    _cleanup(root, batch)
    if len(set(counts.values())) > 1:
        raise RuntimeError(f"compact files differ in data file entries: {counts}")
    return results


if __name__ == "__main__":
    child(sys.argv[1], int(sys.argv[2]))


# -- log shapes: compaction and planning of logs this package did not write ----------------------------

SHAPES = {
    "deltas": "nine delta files (Spark's sink), no compact file yet",
    "spark_compact": "Spark's compact file without a columnar copy, then nine small deltas",
}


@dataclass
class ShapeResults:
    """One log shape of ``entries`` entries, all in the layout Spark's sink writes: our compaction and
    Spark's of the same log, against the byte-copy floor (read the files the compaction reads, write
    them as one file, fsync) measured in the same run; for ``spark_compact`` also planning."""

    shape: str
    entries: int = 0
    batch: int = 0
    floor_seconds: Stat = field(default_factory=Stat)
    ours_seconds: Stat = field(default_factory=Stat)
    spark_seconds: Stat = field(default_factory=Stat)
    plan_first_seconds: Stat = field(default_factory=Stat)  # no columnar copy: parses the JSON, stores one
    plan_copy_seconds: Stat = field(default_factory=Stat)  # later plans, from the copy the first one stored
    # after Spark's own compaction of the next batch: the first plan of its compact file, from the older copy
    plan_follow_seconds: Stat = field(default_factory=Stat)


def _spark_log_file(path: str, root: str, batch: int, count: int) -> None:
    """A log file of ``count`` entries, byte for byte as Spark's ``FileStreamSinkLog`` writes them."""
    prefix = f"file://{root}/part-"
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("v1")
        for start in range(0, count, 100_000):
            fh.write("".join(
                f'\n{{"path":"{prefix}{k:05d}-{batch:08d}-5f2c1a9e-7c4b-4d0e-9a61-{k:012d}.c000.snappy.parquet",'
                f'"size":{4096 + k % 997},"isDir":false,"modificationTime":{1_700_000_000_000 + k},'
                '"blockReplication":1,"blockSize":134217728,"action":"add"}'
                for k in range(start, min(count, start + 100_000))
            ))


def synth_shape(root: str, shape: str, entries: int) -> int:
    """Write the log of ``shape`` under ``root``; returns the compaction batch that comes next."""
    meta = os.path.join(root, "_spark_metadata")
    os.makedirs(meta)
    if shape == "deltas":
        for batch in range(9):
            _spark_log_file(os.path.join(meta, str(batch)), root, batch, entries // 9)
        return 9
    _spark_log_file(os.path.join(meta, "9.compact"), root, 9, entries)
    for batch in range(10, 19):
        _spark_log_file(os.path.join(meta, str(batch)), root, batch, NEW_FILES)
    return 19


def byte_copy_floor(root: str, batch: int) -> float:
    """Seconds to read the log files compaction ``batch`` reads (the newest compact file before it and the
    deltas after that) and write them as one file, fsync'd like a commit."""
    meta = os.path.join(root, "_spark_metadata")
    ids = {n: int(n.split(".")[0]) for n in os.listdir(meta) if n.split(".")[0].isdigit() and not n.endswith(".parquet")}
    start = max((b for n, b in ids.items() if n.endswith(".compact") and b < batch), default=0)
    names = [n for n, b in ids.items() if start <= b < batch]
    target = os.path.join(meta, "floor.tmp")
    started = time.perf_counter()
    with open(target, "wb") as out:
        for name in names:
            with open(os.path.join(meta, name), "rb") as fh:
                while chunk := fh.read(1 << 24):
                    out.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    seconds = time.perf_counter() - started
    os.remove(target)
    return seconds


def run_shapes(spark, work: str, entries: int, repeats: int) -> list[ShapeResults]:
    """Each shape: floor, ours (fresh subprocess) and Spark's compaction, interleaved; then, on the
    Spark-written compact file, planning without a copy and with the copy the first reader stores."""
    from parquet_sink import committed_files

    from .common import timed

    log_cls, status_cls = _spark_log_class(spark)
    results = []
    for shape in SHAPES:
        root = os.path.join(work, f"shape-{shape}")
        batch = synth_shape(root, shape, entries)
        result = ShapeResults(shape, entries + (9 * NEW_FILES if shape == "spark_compact" else 0), batch)
        for rep in range(repeats):
            order = ["floor", "ours", "spark"] if rep % 2 == 0 else ["spark", "ours", "floor"]
            for who in order:
                _cleanup(root, batch)
                if who == "floor":
                    result.floor_seconds.add(byte_copy_floor(root, batch))
                elif who == "ours":
                    result.ours_seconds.add(_ours(root, batch)["seconds"])
                elif log_cls is not None:
                    seconds, _, ok = spark_add(spark, log_cls, status_cls, root, batch)
                    if not ok:
                        raise RuntimeError(f"Spark's compaction of batch {batch} was refused")
                    result.spark_seconds.add(seconds)
            logger.info("shape %s: floor %.2fs, ours %.2fs, spark %s", shape, result.floor_seconds.values[-1],
                        result.ours_seconds.values[-1], result.spark_seconds.values[-1:] or "n/a")
        _cleanup(root, batch)
        if shape == "spark_compact":
            copy = os.path.join(root, "_spark_metadata", "9.compact.columnar")
            for rep in range(repeats):
                if os.path.exists(copy):
                    os.remove(copy)
                seconds, count = timed(lambda: len(committed_files(root)))
                result.plan_first_seconds.add(seconds)
                if not os.path.exists(copy) or count != entries + 9 * NEW_FILES:
                    raise RuntimeError(f"planning {root}: {count} files, copy stored: {os.path.exists(copy)}")
                result.plan_copy_seconds.add(timed(lambda: len(committed_files(root)))[0])
            logger.info("shape %s planning: first (no copy) %.2fs, with the stored copy %.2fs", shape,
                        result.plan_first_seconds.median, result.plan_copy_seconds.median)
            if log_cls is not None:  # Spark compacts the next batch: its compact file starts with 9.compact's bytes
                spark_add(spark, log_cls, status_cls, root, batch)
                follow = os.path.join(root, "_spark_metadata", f"{batch}.compact.columnar")
                for rep in range(repeats):
                    if os.path.exists(follow):
                        os.remove(follow)
                    seconds, count = timed(lambda: len(committed_files(root)))
                    result.plan_follow_seconds.add(seconds)
                    if not os.path.exists(follow) or count != result.entries + len(_entries(root, batch)):
                        raise RuntimeError(f"planning {root} after Spark's compaction: {count} files")
                logger.info("shape %s planning after Spark's next compaction: first %.2fs", shape,
                            result.plan_follow_seconds.median)
        shutil.rmtree(root, ignore_errors=True)
        results.append(result)
    return results
