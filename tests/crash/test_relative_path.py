"""A relative local output path is resolved on the driver: on ``local-cluster`` (executor JVMs of their own,
each with its own working directory) every data file lands under the driver's ``./out``, the log points
there, and both readers see every row."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from parquet_sink import MetadataLog
from parquet_sink.storage.filesystem import Storage
from tests.helpers.spark_util import spark_home_for_local_cluster

REPO = Path(__file__).resolve().parents[2]
FILES, ROWS = 2, 40

# The streaming job, run with the driver's working directory = the test's directory.
_CHILD = textwrap.dedent(
    f"""
    import json
    from parquet_sink import ParquetSink, read_committed
    from tests.helpers.spark_util import make_session, run_available_now, write_input_files

    spark = make_session(master="local-cluster[2,1,1024]")
    write_input_files("in", [[{{"id": f * {ROWS} + i, "k": i % 3}} for i in range({ROWS})] for f in range({FILES})])
    stream = spark.readStream.schema("id long, k long").option("maxFilesPerTrigger", 1).json("in")
    run_available_now(stream.repartition(2), "checkpoint", ParquetSink("out", partition_by=["k"]))
    ids = sorted(read_committed("out").column("id").to_pylist())
    spark_ids = sorted(r.id for r in spark.read.parquet("out").select("id").collect())
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    spark.stop()
    print(json.dumps({{"ids": ids, "spark_ids": spark_ids, "executors": executors}}))
    """
)


def test_relative_output_path_on_local_cluster(tmp_path):
    driver_dir = tmp_path / "driver"
    driver_dir.mkdir()
    spark_home = spark_home_for_local_cluster(tmp_path)
    env = dict(
        os.environ,
        SPARK_HOME=str(spark_home),
        PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(REPO)]),
        PYSPARK_PYTHON=sys.executable,
    )
    result = subprocess.run(
        [sys.executable, "-c", _CHILD], cwd=driver_dir, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-5000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["executors"] == 2
    expected = list(range(FILES * ROWS))
    assert seen["ids"] == expected and seen["spark_ids"] == expected

    out = driver_dir / "out"
    on_disk = sorted(str(p) for p in out.rglob("*.parquet"))
    stray = sorted(str(p) for p in (spark_home / "work").rglob("*.parquet")) if (spark_home / "work").exists() else []
    assert on_disk and not stray, stray
    storage = Storage(str(out))
    committed = sorted(storage.from_uri(f.path) for f in MetadataLog(str(out)).all_files() if not f.is_dir)
    assert committed == on_disk
