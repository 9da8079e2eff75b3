"""docs/migration.md ("Coming from writeStream.format('parquet')"), run step by step with the commands it names,
Spark's own file sink as the oracle: moving a query to ParquetSink with its checkpoint, what ``doctor`` and ``ls``
say at each step, and why going back is one-way once anything of ours committed a batch (issue 53, items 3 and 6).
The commit-window case and the refusals beside a running Spark sink: tests/write/test_beside_spark_sink.py."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from parquet_sink import ParquetSink, doctor, write_batch
from parquet_sink.cli.main import main as cli_main
from tests.helpers.spark_util import run_available_now
from tests.write.test_beside_spark_sink import _add_input, _ids_once, _spark_sink, _stream


def _cli(capsys, *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = cli_main(list(args))
    return code, capsys.readouterr().out


def test_the_migration_guide_and_going_back(spark, tmp_path: Path, capsys) -> None:
    src, ckpt, out = tmp_path / "src", tmp_path / "ckpt", tmp_path / "out"
    _add_input(src, 0, [0, 1])
    _spark_sink(spark, src, ckpt, out)  # 1. the query ran with Spark's own sink, and stopped

    code, said = _cli(capsys, "doctor", str(out), "--checkpoint", str(ckpt))  # 2. ask doctor
    assert code == 0, said
    assert "Nothing to replay: batch 0 is done in the checkpoint; the next batch is 1, and the sink will commit it " \
        "as log batch 1." in said
    assert "instead of ParquetSink: Spark's own file sink" in said and "loses nothing now" in said

    _add_input(src, 1, [10, 11])  # 3. the same query, the same checkpoint, ParquetSink
    run_available_now(_stream(spark, src), str(ckpt), ParquetSink(str(out)))
    _ids_once(spark, out, [0, 1, 10, 11])
    code, listed = _cli(capsys, "ls", str(out), "--json")
    assert code == 0
    rows = {b["batch"]: b for b in json.loads(listed)["batches"]}
    assert rows[0]["rows"] is None and rows[1]["rows"] == 2, rows  # Spark's batch: rows unknown ("-")
    assert json.loads(listed)["warnings"] == []  # the migration itself: going back loses nothing

    # going back now loses nothing: nothing of ours committed after the query's batch
    assert "loses nothing now" in doctor(str(out), checkpoint=str(ckpt)).spark_sink.message
    code, verified = _cli(capsys, "verify", str(out))
    assert code == 0 and "warning" not in verified, verified

    # a backfill commits log batch 2: going back would skip batch 2
    write_batch(str(out), pa.table({"id": [900], "k": ["b"]}), app_id="backfill", version=0)
    code, said = _cli(capsys, "doctor", str(out), "--checkpoint", str(ckpt))
    assert code == 0, said  # staying on ParquetSink is fine
    assert "would skip its batches 2 (it skips every batch id the log already holds) although log batch(es) 2 hold " \
        "other data" in said and "rows would be lost" in said and "stay on ParquetSink" in said, said
    code, verified = _cli(capsys, "verify", str(out))
    warning = "warning: log batches 1..2 were committed by parquet-sink after log batch 0 of Spark's own file sink"
    assert code == 0 and warning in verified, verified
    code, listed = _cli(capsys, "ls", str(out))
    assert code == 0 and warning in listed, listed

    _add_input(src, 2, [20, 21])
    _add_input(src, 3, [30, 31])
    _spark_sink(spark, src, ckpt, out)  # going back anyway: batch 2 is skipped, as predicted; batch 3 committed
    _ids_once(spark, out, [0, 1, 10, 11, 900, 30, 31])
