"""The demo: a real streaming job into ParquetSink, SIGKILLed mid-way, restarted from its checkpoint,
then the proof that every input row is committed exactly once.

Run: ``./dev.sh demo`` (or ``python -m examples.demo [--workdir DIR]``).

The kill uses the ``after_commit`` failpoint: the driver dies right after the sink committed a batch
and before Spark recorded it in its checkpoint -- the moment where a naive sink duplicates data. Spark
replays that batch on restart; the sink recognises it and skips it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

FILES, ROWS_PER_FILE, KILL_AT_BATCH = 12, 500, 5


def run_query(workdir: Path) -> None:
    """The streaming job (runs in a child process): JSON files -> ParquetSink, one file per batch."""
    from parquet_sink import ParquetSink
    from tests.helpers.spark_util import make_session, run_available_now

    logging.basicConfig(level=logging.INFO, format="  [job] %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    spark = make_session(app="parquet-sink-demo")
    stream = spark.readStream.schema("id long, region string, amount double").option("maxFilesPerTrigger", 1)
    sink = ParquetSink(str(workdir / "out"), partition_by=["region"], compact_interval=4)
    run_available_now(stream.json(str(workdir / "in")), str(workdir / "checkpoint"), sink)


def _child(workdir: Path, failpoints: str) -> int:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PARQUET_SINK_FAILPOINTS=failpoints)
    cmd = [sys.executable, "-m", "examples.demo", "--workdir", str(workdir), "--child"]
    return subprocess.run(cmd, env=env, start_new_session=True, cwd=Path(__file__).parent.parent).returncode


def where_left(workdir: Path) -> list[str]:
    """The demo's last words: where its files are and the command that removes them (quoted for a shell)."""
    return [
        f"5. the demo's files (input, output, checkpoint) are in {workdir}; remove them with:",
        f"   rm -rf {shlex.quote(str(workdir))}",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="parquet-sink-demo-"))
    if args.child:
        run_query(workdir)
        return 0

    from tests.helpers.spark_util import write_input_files

    regions = ["north", "south", "east west", "a:b"]
    batches = [
        [{"id": f * ROWS_PER_FILE + i, "region": regions[i % 4], "amount": i * 0.5} for i in range(ROWS_PER_FILE)]
        for f in range(FILES)
    ]
    write_input_files(str(workdir / "in"), batches)
    print(f"1. {FILES} input files, {FILES * ROWS_PER_FILE} rows, in {workdir / 'in'}")

    print(f"2. starting the streaming job; it will be SIGKILLed right after committing batch {KILL_AT_BATCH - 1}")
    code = _child(workdir, f"after_commit=kill@{KILL_AT_BATCH}")
    print(f"   job exited with {code} ({'SIGKILL' if code == -signal.SIGKILL else 'not killed!'})")
    from parquet_sink import MetadataLog, read_committed

    out = str(workdir / "out")
    committed = MetadataLog(out).latest_batch_id()
    recorded = sorted(int(p.name) for p in (workdir / "checkpoint" / "commits").iterdir() if p.name.isdigit())
    print(f"   sink log has batches 0..{committed}; Spark's checkpoint recorded 0..{recorded[-1] if recorded else None}")
    on_disk = sum(1 for _ in Path(out).rglob("*.parquet"))
    print(f"   rows visible to read_committed now: {read_committed(out).num_rows} ({on_disk} parquet files on disk)")

    print("3. restarting the job from its checkpoint")
    code = _child(workdir, "")
    print(f"   job exited with {code}")

    table = read_committed(out)
    ids = Counter(table.column("id").to_pylist())
    expected = set(range(FILES * ROWS_PER_FILE))
    duplicated = sorted(i for i, n in ids.items() if n > 1)
    missing = sorted(expected - set(ids))
    unexpected = sorted(set(ids) - expected)
    from tests.helpers.spark_util import make_session

    spark = make_session(app="parquet-sink-demo-check")
    spark_rows = spark.read.parquet(out).count()
    spark.stop()
    print("4. proof")
    print(f"   input rows:                     {len(expected)}")
    print(f"   rows in read_committed:         {table.num_rows}")
    print(f"   rows in spark.read.parquet:     {spark_rows}")
    print(f"   duplicated / missing / unknown: {len(duplicated)} / {len(missing)} / {len(unexpected)}")
    ok = code == 0 and table.num_rows == len(expected) == spark_rows and not (duplicated or missing or unexpected)
    print("\n".join(where_left(workdir)))
    print(json.dumps({"parquet_sink": ok, "workdir": str(workdir)}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
