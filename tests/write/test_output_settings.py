"""Settings that belong to the output (issue 54, items 4 and 5): the compact interval, ``retention``,
``min_batches_to_retain`` and ``cleanup_delay`` are recorded with the output by its first commit, and every writer
(the sink, its ``optimize_every`` optimize, ``write_batch``) and ``optimize`` applies the recorded ones; an argument
that contradicts them is refused (``OutputSettingsError``). The sink follows the session's compact interval and
Parquet codec where it is given none, as Spark's own sink does; Spark's reader in that session is the oracle.

Before: the sink's background optimize cleaned the log up with Spark's defaults (deleting log files the sink's
``min_batches_to_retain=1000`` keeps: time travel raised SnapshotExpiredError), compacted without the sink's
``retention`` and logged its new files with the rewrite's time (rows outlived the retention), and its batches made
a batch-id-only sink's next batch fail with ForeignQueryError; a session with ``compactInterval=3`` could not read
what the sink wrote in it, and the session's codec was ignored.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parquet_sink import MetadataLog, ParquetSink, committed_files, committed_version, read_committed, write_batch
from parquet_sink.errors import OutputSettingsError, ParameterError
from parquet_sink.log.entry import CommitRecord
from parquet_sink.log.files import SETTINGS_RECORD, parse_batch_name
from parquet_sink.cli.main import main as cli_main
from parquet_sink.maintenance import doctor, optimize
from parquet_sink.read.history import OPTIMIZE_APP_ID
from parquet_sink.write.sink import decide_batch
from tests.helpers.spark_util import spark_sink_batch

SESSION_INTERVAL = "spark.sql.streaming.fileSink.log.compactInterval"
SESSION_CODEC = "spark.sql.parquet.compression.codec"
HOUR_MS = 3_600_000


def _checkpoint(tmp_path: Path) -> str:
    """A checkpoint location whose ``metadata`` names a query: the sink called directly then has a query id, and
    continues after other writers' appends as a running query does."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "metadata").write_text('{"id":"query-54"}')
    return str(ckpt)


def _ids(out: str, **options) -> list[int]:
    return sorted(read_committed(out, columns=["id"], **options).column("id").to_pylist())


def test_the_sinks_optimize_keeps_the_log_files_its_min_batches_to_retain_keeps(spark, tmp_path: Path) -> None:
    """``min_batches_to_retain=1000``: the background optimize's commits clean the log up by it, as the sink's
    own do, so the log file of batch 0 stays and time travel to batch 1 reads what it read before the optimize."""
    out = str(tmp_path / "out")
    sink = ParquetSink(out, min_batches_to_retain=1000, optimize_every=3, checkpoint_location=_checkpoint(tmp_path))
    sink(spark.createDataFrame([(0,)], "id long"), 0)
    sink(spark.createDataFrame([(1,)], "id long"), 1)
    log = MetadataLog(out)  # another writer's empty commits, as an app's: past Spark's default of 100 batches
    for batch in range(2, 105):
        record = CommitRecord.new(batch, "other", batch)
        assert log.add(batch, record.log_entries(log.storage, int(time.time() * 1000), []))
    assert _ids(out, as_of_batch=1) == [0, 1]
    old = time.time() - 3600  # older than every cleanup delay
    for path in (Path(out) / "_spark_metadata").iterdir():
        os.utime(path, (old, old))
    sink(spark.createDataFrame([(2,)], "id long"), 2)  # its 3rd batch (log batch 105): the optimize runs
    assert sink.optimizer.wait(120) and sink.optimizer.error is None
    assert sink.optimizer.last is not None and sink.optimizer.last.log_batch_id == 109
    assert (Path(out) / "_spark_metadata" / "0").exists()
    assert _ids(out, as_of_batch=1) == [0, 1]
    assert _ids(out) == [0, 1, 2]


def test_the_sinks_optimize_never_makes_rows_outlive_its_retention(spark, tmp_path: Path) -> None:
    """``retention="1h"``: files logged two hours ago (expired, awaiting the next compaction) that the background
    optimize rewrites stay expired: its swap applies the retention and its new file carries their time, so their
    rows are gone (the optimize used to stamp the new file with its own time: rows lived a retention more)."""
    out = str(tmp_path / "out")
    sink = ParquetSink(out, compact_interval=5, retention="1h", optimize_every=3, target_file_size=2000,
                       checkpoint_location=_checkpoint(tmp_path))
    sink(spark.createDataFrame([(0,)], "id long"), 0)
    sink(spark.createDataFrame([(1,)], "id long"), 1)
    old = int(time.time() * 1000) - 2 * HOUR_MS
    for name in ("0", "1"):  # as if written two hours ago: their log lines say when
        path = Path(out) / "_spark_metadata" / name
        path.write_text(re.sub(r'"modificationTime":\d+', f'"modificationTime":{old}', path.read_text()))
    # its 3rd batch, a file above the target size (left as it is): the optimize rewrites batches 0 and 1
    sink(spark.range(2, 1002).coalesce(1), 2)
    assert sink.optimizer.wait(120) and sink.optimizer.error is None
    assert sink.optimizer.last is not None and sink.optimizer.last.files_removed == 2
    assert _ids(out) == list(range(2, 1002))
    assert sorted(r.id for r in spark.read.parquet(out).select("id").collect()) == list(range(2, 1002))


def test_a_batch_id_only_sink_continues_after_its_optimize(spark, tmp_path: Path) -> None:
    """``allow_batch_id_only=True`` (no query id): the optimize's batches add no row and replay none, so the next
    batch commits after them (it used to fail with ForeignQueryError), its batch ids and log batch ids apart from
    then on, and a replay is still skipped."""
    out = str(tmp_path / "out")
    sink = ParquetSink(out, compact_interval=5, optimize_every=2, allow_batch_id_only=True)
    for batch in range(3):
        sink(spark.createDataFrame([(batch,)], "id long"), batch)
        assert sink.optimizer.wait(120) and sink.optimizer.error is None
    assert sink.optimizer.last is not None and sink.optimizer.last.log_batch_id == 4
    assert sink.last_progress is not None and sink.last_progress.log_batch_id == 5
    sink(spark.createDataFrame([(99,)], "id long"), 2)  # a replay: skipped
    assert _ids(out) == [0, 1, 2]
    # the batch after it (log batch 6, no optimize since), and one after a neighbour's commit (refused), decided
    own = CommitRecord(5, None, 2, "c")
    assert decide_batch(5, {None: own, OPTIMIZE_APP_ID: CommitRecord(4, OPTIMIZE_APP_ID, 4, "o")}, None, 3) == ("commit", 6)
    neighbour = {None: own, OPTIMIZE_APP_ID: CommitRecord(7, OPTIMIZE_APP_ID, 7, "o"), "app": CommitRecord(6, "app", 0, "a")}
    assert decide_batch(7, neighbour, None, 3) == ("foreign", None)


def test_a_contradicting_argument_is_refused_and_the_remedy_changes_the_settings(tmp_path: Path, capsys) -> None:
    out = str(tmp_path / "out")
    write_batch(out, pa.table({"id": [0]}), app_id="a", version=0, min_batches_to_retain=1000, retention="7d")
    log_dir = Path(out) / "_spark_metadata"
    before = sorted(os.listdir(log_dir))
    with pytest.raises(OutputSettingsError) as refused:
        optimize(out, min_batches_to_retain=10)
    message = str(refused.value)
    assert out in message and "min_batches_to_retain=10" in message
    assert "min_batches_to_retain=1000" in message and "retention='7d'" in message and "compact_interval=10" in message
    assert "Omit the argument" in message and SETTINGS_RECORD in message
    # doctor predicts it for a query's restart, in the same words; its advice taken literally (omit it): a go
    ckpt = str(tmp_path / "ckpt")
    command = ["doctor", out, "--checkpoint", ckpt, "--on-foreign-query", "append"]
    assert cli_main([*command, "--min-batches-to-retain", "10"]) == 1
    printed = capsys.readouterr().out
    assert "OutputSettingsError" in printed and message in printed.replace("\n", " ")
    assert cli_main(command) == 0
    capsys.readouterr()
    with pytest.raises(OutputSettingsError, match="compact_interval=3"):
        write_batch(out, pa.table({"id": [1]}), app_id="a", version=1, compact_interval=3)
    assert sorted(os.listdir(log_dir)) == before and committed_version(out, "a") == 0
    assert len(committed_files(out)) == len(list(Path(out).glob("*.parquet")))  # nothing written
    # the same settings spelled otherwise, or none: applied
    write_batch(out, pa.table({"id": [1]}), app_id="a", version=1, retention="168h", compact_interval=10)
    write_batch(out, pa.table({"id": [2]}), app_id="a", version=2)
    # the remedy the message gives, literally: stop the writers, delete the record, one writer records new ones
    match = re.search(r"delete (\S+) and start one writer", message)
    assert match is not None
    Path(match.group(1)).unlink()
    write_batch(out, pa.table({"id": [3]}), app_id="a", version=3, min_batches_to_retain=10, retention="7d")
    recorded = json.loads((Path(out) / SETTINGS_RECORD).read_text())
    assert recorded == {"retention_ms": 7 * 24 * HOUR_MS, "min_batches_to_retain": 10, "cleanup_delay_ms": 600_000}
    optimize(out, min_batches_to_retain=10)
    assert _ids(out) == [0, 1, 2, 3]


def test_optimizes_new_files_carry_the_time_of_their_oldest_input(tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    for version in range(3):
        write_batch(out, pa.table({"id": [version]}), app_id="a", version=version)
    times = committed_files(out).table.column("modification_time").to_pylist()
    result = optimize(out)
    assert result.committed and result.files_added == 1
    assert committed_files(out).table.column("modification_time").to_pylist() == [min(times)]


_DURATION_MS = {"1h": HOUR_MS, "60m": HOUR_MS, "7d": 168 * HOUR_MS, "168h": 168 * HOUR_MS, "10m": 600_000, "0s": 0}


def _options(intervals, durations, counts):
    return st.fixed_dictionaries({
        "compact_interval": st.none() | st.sampled_from(intervals),
        "retention": st.none() | st.sampled_from(["1h", "60m", "7d", "168h"]),
        "min_batches_to_retain": st.none() | st.sampled_from(counts),
        "cleanup_delay": st.none() | st.sampled_from(durations),
    })


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=_options([2, 10], ["10m", "0s"], [1, 100]), second=_options([2, 10], ["10m", "0s"], [1, 100]),
       later=st.sampled_from(["write_batch", "optimize", "cli optimize"]))
def test_every_writer_applies_the_recorded_settings_and_refuses_only_a_contradiction(
    tmp_path_factory, first: dict, second: dict, later: str
) -> None:
    """A first writer's settings (given or Spark's defaults) are recorded; a later writer or optimize (the
    function or the CLI) given ``second`` is refused exactly when a setting it gives differs from the recorded one
    (durations by length), with nothing committed, and otherwise commits under the recorded settings, which stay as
    they were. ``doctor`` given the same options predicts the refusal in the writer's words."""
    out = str(tmp_path_factory.mktemp("settings") / "out")
    write_batch(out, pa.table({"id": [0]}), app_id="a", version=0, **first)
    write_batch(out, pa.table({"id": [1]}), app_id="a", version=1)
    recorded = {
        "compact_interval": first["compact_interval"] or 10,
        "retention": None if first["retention"] is None else _DURATION_MS[first["retention"]],
        "min_batches_to_retain": first["min_batches_to_retain"] or 100,
        "cleanup_delay": _DURATION_MS[first["cleanup_delay"] or "10m"],
    }
    asked = {k: _DURATION_MS.get(v, v) if k in ("retention", "cleanup_delay") else v for k, v in second.items()}
    contradicts = any(value is not None and value != recorded[name] for name, value in asked.items())
    record = (Path(out) / SETTINGS_RECORD).read_text()
    latest = max(int(n.split(".")[0]) for n in os.listdir(Path(out) / "_spark_metadata") if n[0].isdigit())

    def run() -> None:
        if later == "write_batch":
            write_batch(out, pa.table({"id": [2]}), app_id="a", version=2, **second)
        elif later == "optimize":
            optimize(out, **second)
        else:
            flags = [f"--{k.replace('_', '-')}={v}" for k, v in second.items() if v is not None]
            if cli_main(["optimize", out, *flags]) == 1:
                raise OutputSettingsError("the CLI exited 1")

    plan = doctor(out, app_id="a", version=2, **second).plan
    assert (plan.action == "settings") == contradicts, plan
    if contradicts:
        with pytest.raises(OutputSettingsError) as refused:
            run()
        if later == "write_batch":
            assert str(refused.value) in plan.message
        names = [n for n in os.listdir(Path(out) / "_spark_metadata") if n[0].isdigit()]
        assert max(int(n.split(".")[0]) for n in names) == latest
    else:
        run()
        assert committed_version(out, "a") == (2 if later == "write_batch" else 1)
    assert (Path(out) / SETTINGS_RECORD).read_text() == record
    assert json.loads(record) == {
        "retention_ms": recorded["retention"], "min_batches_to_retain": recorded["min_batches_to_retain"],
        "cleanup_delay_ms": recorded["cleanup_delay"],
    }
    assert _ids(out) == ([0, 1, 2] if later == "write_batch" and not contradicts else [0, 1])


def test_the_sink_follows_the_sessions_compact_interval_and_codec(spark, tmp_path: Path) -> None:
    """A session with ``compactInterval=2`` and the zstd codec: the sink given neither writes ``1.compact`` and zstd
    files, as Spark's own sink does, so Spark's reader in that very session reads the output (``compression=``
    given wins: tests/write/test_sink.py); a session codec the sink cannot write is refused before anything is
    written."""
    out, refused = str(tmp_path / "out"), str(tmp_path / "refused")
    spark.conf.set(SESSION_INTERVAL, "2")
    spark.conf.set(SESSION_CODEC, "zstd")
    try:
        sink = ParquetSink(out)
        for batch in range(2):
            sink(spark.createDataFrame([(batch,)], "id long"), batch)
        assert sorted(r.id for r in spark.read.parquet(out).select("id").collect()) == [0, 1]
        assert (Path(out) / "_spark_metadata" / "1.compact").exists()
        codecs = {pq.ParquetFile(f.path).metadata.row_group(0).column(0).compression for f in committed_files(out)}
        assert codecs == {"ZSTD"}
        spark.conf.set(SESSION_CODEC, "lzo")
        with pytest.raises(ParameterError, match=f"{SESSION_CODEC} is 'lzo'"):
            ParquetSink(refused)(spark.createDataFrame([(0,)], "id long"), 0)
        assert not list(Path(refused).glob("**/*.parquet"))
    finally:
        spark.conf.unset(SESSION_INTERVAL)
        spark.conf.unset(SESSION_CODEC)


def test_the_sink_follows_the_sessions_log_cleanup_as_sparks_sink_does(spark, tmp_path: Path) -> None:
    """A session with minBatchesToRetain=2 and cleanupDelay=0 (and compactInterval=3): the sink given none of them
    records and applies the session's, so its log keeps exactly the log files Spark's own sink keeps in that session
    for the same batches; fileSink.log.deletion=false keeps every log file, as it does for Spark's sink; a setting
    Spark refuses is refused before anything is written."""
    confs = {SESSION_INTERVAL: "3", "spark.sql.streaming.minBatchesToRetain": "2",
             "spark.sql.streaming.fileSink.log.cleanupDelay": "0"}
    for key, value in confs.items():
        spark.conf.set(key, value)
    try:
        ours, theirs, kept = (str(tmp_path / n) for n in ("ours", "theirs", "kept"))
        sink = ParquetSink(ours)
        for batch in range(6):
            frame = spark.createDataFrame([(batch,)], "id long")
            sink(frame, batch)
            spark_sink_batch(spark, frame, theirs, batch)
        names = [sorted(p.name for p in (Path(o) / "_spark_metadata").iterdir() if parse_batch_name(p.name))
                 for o in (ours, theirs)]
        assert names[0] == names[1] and "0" not in names[0] and "5.compact" in names[0], names  # Spark's defaults keep all
        recorded = MetadataLog(ours).recorded_settings()
        assert (recorded.min_batches_to_retain, recorded.cleanup_delay_ms) == (2, 0)
        spark.conf.set("spark.sql.streaming.fileSink.log.deletion", "false")
        keeper = ParquetSink(kept)
        for batch in range(4):
            keeper(spark.createDataFrame([(batch,)], "id long"), batch)
        assert len([p for p in (Path(kept) / "_spark_metadata").iterdir() if parse_batch_name(p.name)]) == 4
    finally:
        for key in [*confs, "spark.sql.streaming.fileSink.log.deletion"]:
            spark.conf.unset(key)
