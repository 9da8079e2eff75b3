"""The ``parquet-sink`` command line, driven as a user would, on outputs written by a real streaming query with our
sink and with Spark's own parquet sink, intact and broken: its ``main`` in this process (tests/helpers/cli_util.py),
and real subprocesses where the process is the point (the installed console script, ``python -m parquet_sink``,
the progress counter on a terminal)."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from parquet_sink.log.files import parse_batch_name
from parquet_sink import ParquetSink, committed_files, read_committed
from parquet_sink.partitioning import is_data_file
from tests.helpers.cli_util import run_cli
from tests.helpers.spark_util import run_available_now

CLI = [sys.executable, "-m", "parquet_sink"]
SCRIPT = Path(sys.executable).with_name("parquet-sink")  # the installed console script
BATCHES = 7  # source file i holds i + 1 rows; one file per micro-batch
ROWS = sum(range(1, BATCHES + 1))
TWO_HOURS_AGO = time.time() - 2 * 3600


@dataclass(frozen=True)
class Outputs:
    """Outputs written once per module, and pristine copies to restore after destructive tests."""

    base: Path
    src: Path
    ours: Path
    ours_ckpt: Path
    spark_out: Path
    spark_ckpt: Path
    query_id: str


def cli(*args: object, script: bool = False, process: bool = False, stderr=subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    """The command in this process; in a real one with ``process`` (``python -m parquet_sink``), ``script`` (the
    installed console script) or another ``stderr`` (a terminal)."""
    if not (script or process or stderr is not subprocess.PIPE):
        return run_cli(*args)
    command = ([str(SCRIPT)] if script else CLI) + [str(a) for a in args]
    return subprocess.run(command, stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=120)


def cli_json(*args: object) -> tuple[int, dict]:
    result = cli(*args, "--json")
    return result.returncode, json.loads(result.stdout)


def stream(spark, src: Path):
    return spark.readStream.schema("id long, k string").option("maxFilesPerTrigger", 1).json(str(src))


def our_sink(out: Path) -> ParquetSink:
    # Small compact interval and immediate cleanup: after batch 6 only 5.compact and 6 stay, as with Spark's sink.
    return ParquetSink(str(out), partition_by=["k"], compact_interval=3, min_batches_to_retain=1, cleanup_delay="0ms")


def data_files(out: Path) -> set[str]:
    """The visible Parquet files under ``out`` (what vacuum may touch)."""
    return {str(p) for p in out.rglob("*.parquet") if is_data_file(p.relative_to(out).as_posix())}


def age(*paths: Path) -> None:
    for p in paths:
        os.utime(p, (TWO_HOURS_AGO, TWO_HOURS_AGO))


@pytest.fixture(scope="module")
def outputs(spark, tmp_path_factory) -> Outputs:
    base = tmp_path_factory.mktemp("cli")
    src = base / "src"
    src.mkdir()
    for i in range(BATCHES):
        path = src / f"f{i}.json"
        path.write_text("".join(json.dumps({"id": i * 100 + r, "k": "ab"[r % 2]}) + "\n" for r in range(i + 1)))
        os.utime(path, (TWO_HOURS_AGO + i, TWO_HOURS_AGO + i))  # the file source takes files oldest first
    run_available_now(stream(spark, src), str(base / "ours_ckpt"), our_sink(base / "ours"))
    conf = {
        "spark.sql.streaming.fileSink.log.compactInterval": "3",
        "spark.sql.streaming.fileSink.log.cleanupDelay": "0",
        "spark.sql.streaming.minBatchesToRetain": "1",
    }
    saved = {k: spark.conf.get(k, None) for k in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        run_available_now(stream(spark, src), str(base / "spark_ckpt"), path=str(base / "spark"))
    finally:
        for key, value in saved.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)
    for name in ("ours", "spark"):
        shutil.copytree(base / name, base / "pristine" / name)
    query_id = json.loads((base / "ours_ckpt" / "metadata").read_text())["id"]
    return Outputs(base, src, base / "ours", base / "ours_ckpt", base / "spark", base / "spark_ckpt", query_id)


@pytest.fixture
def ours(outputs: Outputs):
    """Our sink's output, restored (same path, same mtimes) after a test that breaks it."""
    yield outputs.ours
    shutil.rmtree(outputs.ours)
    shutil.copytree(outputs.base / "pristine" / "ours", outputs.ours)


@pytest.fixture
def ckpt_copy(outputs: Outputs, tmp_path: Path) -> Path:
    """A copy of our query's checkpoint (same query id) to break."""
    return Path(shutil.copytree(outputs.ours_ckpt, tmp_path / "ckpt"))


def uncommit(ckpt: Path, batch: int) -> None:
    """Simulate a crash between the sink's commit and Spark's: the checkpoint has no commit for ``batch``."""
    (ckpt / "commits" / str(batch)).unlink()
    (ckpt / "commits" / f".{batch}.crc").unlink(missing_ok=True)


# -- ls / show -----------------------------------------------------------------------------------


def test_ls_json_attributes_compacted_batches_of_our_sink(outputs: Outputs) -> None:
    code, data = cli_json("ls", outputs.ours, "--rows")
    assert code == 0
    assert not (outputs.ours / "_spark_metadata" / "0").exists()  # cleaned up: only batchId attributes batch 0
    assert [b["batch"] for b in data["batches"]] == list(range(BATCHES))
    assert [b["files"] for b in data["batches"]] == [1] + [2] * (BATCHES - 1)  # batch 0 has only k=a rows
    assert [b["rows"] for b in data["batches"]] == list(range(1, BATCHES + 1))
    assert sum(b["bytes"] for b in data["batches"]) == sum(os.path.getsize(p) for p in data_files(outputs.ours))
    assert {b["query_id"] for b in data["batches"]} == {outputs.query_id}
    assert [b["query_batch"] for b in data["batches"]] == list(range(BATCHES))
    times = [b["commit_time_ms"] for b in data["batches"]]
    assert times == sorted(times) and times[0] > (TWO_HOURS_AGO * 1000)
    # One compact file left (Spark's cleanup rule): the interval is the one the sink recorded for the log (3),
    # not the one Spark would infer from 5.compact alone (6); Spark's own output below has no record
    assert (data["latest_batch"], data["compact_interval"], data["compact_batches"]) == (6, 3, [5])
    code, theirs = cli_json("ls", outputs.spark_out)
    assert code == 0 and (theirs["latest_batch"], theirs["compact_interval"], theirs["compact_batches"]) == (6, 6, [5])
    assert (data["oldest_batch"], data["oldest_log_file"]) == (0, 5)


def test_log_cleanup_keeps_what_sparks_own_sink_keeps(outputs: Outputs) -> None:
    """The same stream with the same settings (compact interval 3, cleanup delay 0, minBatchesToRetain 1):
    our log keeps exactly the log files Spark's FileStreamSinkLog keeps (it kept five, never deleting the
    second newest compact file), and reads the same."""

    def batch_files(out: Path) -> list[str]:
        return sorted(n for n in os.listdir(out / "_spark_metadata") if parse_batch_name(n))

    assert batch_files(outputs.ours) == batch_files(outputs.spark_out) == ["5.compact", "6"]
    assert read_committed(str(outputs.ours)).num_rows == read_committed(str(outputs.spark_out)).num_rows == ROWS


def test_ls_table_of_spark_output_with_installed_script(outputs: Outputs) -> None:
    result = cli("ls", outputs.spark_out, "--rows", script=True)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["batch", "operation", "query", "/", "app", "version", "committed", "(UTC)", "rows",
                                "added", "files", "now", "bytes", "now", "note"]
    # Every batch, as history tells them; Spark's compact file records no batch ids: its entries belong to compact
    # batch 5 (said in the note), those of batches 0..4 are unknown ("-"); no query ids, no versions, no operations.
    rows = [line.split() for line in lines[1:8]]
    assert [r[:2] for r in rows] == [[str(b), "-"] for b in range(7)], lines
    assert [r[-2:] for r in rows[:5]] == [["-", "-"]] * 5, lines  # files now, bytes now: unknown
    assert [r[6:8] for r in rows[5:]] == [[str(ROWS - BATCHES), "6"], ["7", "1"]], lines  # rows added, files now
    assert "Spark's compact file does not say which batch added each" in lines[6]
    assert "compact files: 5" in lines[8] and "latest 6" in lines[8]
    code, data = cli_json("ls", outputs.spark_out)
    assert code == 0
    summary = [(b["batch"], b["files"], b["rows"], b["query_id"]) for b in data["batches"]]
    assert summary == [(b, None, None, None) for b in range(5)] + [(5, 6, None, None), (6, 1, None, None)]
    assert sum(b["bytes"] or 0 for b in data["batches"]) == sum(
        os.path.getsize(p) for p in data_files(outputs.spark_out))


@pytest.mark.parametrize("retention", [None, "1s"])
def test_ls_and_history_tell_one_story(tmp_path: Path, retention: str | None) -> None:
    """`ls` lists every batch `history` lists, with the same figures (before: `ls` started at the oldest batch
    still in the log and showed "files 0, rows 10" for batches an optimize had replaced, unexplained), names what
    its columns mean, says why a batch's rows have no files any more (the optimize by its batch, or retention), and
    folds a run of optimize-wait batches into one line."""
    import pyarrow as pa

    from parquet_sink import history, optimize, write_batch

    out = str(tmp_path / "out")
    settings = dict(compact_interval=3, min_batches_to_retain=1, cleanup_delay="0s")
    if retention:
        settings["retention"] = retention
    for v in range(3):
        write_batch(out, pa.table({"x": [v, v]}), app_id="app", version=v, **(settings if v == 0 else {}))
    if retention:
        time.sleep(1.2)  # batches 0..2 expire at the next compaction
    else:
        optimize(out)  # at batch 5, the next compaction batch: 3 and 4 are its optimize-wait batches
    for v in range(3, 9):
        write_batch(out, pa.table({"x": [v]}), app_id="app", version=v)
    told = history(out).to_pylist()[::-1]
    code, data = cli_json("ls", out)
    assert code == 0 and data["oldest_log_file"] > 0  # the log files of the first batches are cleaned up
    listed = data["batches"]
    keys = [("batch", "log_batch_id"), ("operation", "operation"), ("files", "files"), ("rows", "rows"),
            ("bytes", "bytes"), ("query_id", "query_id"), ("query_batch", "query_batch_id")]
    assert [[b[k] for k, _ in keys] for b in listed] == [[h[k] for _, k in keys] for h in told]
    assert [b["batch"] for b in listed] == list(range(len(told)))
    gone = [b for b in listed if b["operation"] == "append" and b["rows"] and b["files"] == 0]
    optimizes = [b["batch"] for b in listed if b["operation"] == "optimize"]
    if retention:
        assert [b["batch"] for b in gone] == list(range(3)) and not optimizes
        assert {b["note"] for b in gone} == {"files expired by retention='1s'"}  # as SnapshotExpiredError words it
    else:
        assert [b["batch"] for b in gone] == list(range(3)) and optimizes == [5]
        assert {b["note"] for b in gone} == {f"files replaced by optimize (log batch {optimizes[0]})"}
        waits = [b["batch"] for b in listed if b["operation"] == "optimize-wait"]
        lines = cli("ls", out).stdout.splitlines()
        assert lines[0].split()[:2] == ["batch", "operation"] and "rows added" in lines[0] and "files now" in lines[0]
        folded = [line for line in lines if "optimize-wait" in line]
        assert waits == [3, 4] and len(folded) == 1 and folded[0].startswith("3-4 "), lines  # one line for the run
        assert len(lines) == len(listed) - 1 + 2  # the header, the lines, the summary


def test_show_lists_the_entries_of_one_batch(outputs: Outputs) -> None:
    code, data = cli_json("show", outputs.ours, 3)
    assert code == 0
    assert (data["batch"], data["query_id"], data["query_batch"]) == (3, outputs.query_id, 3)
    assert [e["batchId"] for e in data["entries"]] == [3, 3]
    paths = [e["path"].removeprefix("file://") for e in data["entries"]]
    assert [Path(p).parent.name for p in paths] == ["k=a", "k=b"]
    assert [e["size"] for e in data["entries"]] == [os.path.getsize(p) for p in paths]
    text = cli("show", outputs.ours, 3).stdout
    assert text.startswith("batch 3: 2 files") and all(e["path"] in text for e in data["entries"])

    code, data = cli_json("show", outputs.spark_out, 5)
    assert code == 0 and len(data["entries"]) == 6 and data["query_id"] is None

    missing = cli("show", outputs.ours, 42)
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.startswith("parquet-sink: error: batch 42 is not in the log")
    assert missing.stderr.count("\n") == 1


# -- verify --------------------------------------------------------------------------------------


def test_verify_accepts_intact_outputs(outputs: Outputs) -> None:
    for out in (outputs.ours, outputs.spark_out):
        result = cli("verify", out)
        assert result.returncode == 0, result.stdout
        assert result.stdout.startswith(f"OK: {out}: log intact up to batch 6")
        assert result.stderr == ""  # no progress bar when stderr is not a terminal


def test_verify_reports_every_problem(ours: Path) -> None:
    gone = committed_files(str(ours), batches=(3, 3))[0].path
    grown = committed_files(str(ours), batches=(6, 6))[1].path
    os.remove(gone)
    with open(grown, "ab") as fh:
        fh.write(b"junk")
    log4 = ours / "_spark_metadata" / "4"  # superseded by 5.compact, left by a cleanup delay, truncated
    log4.write_bytes((ours / "_spark_metadata" / "6").read_bytes()[:60])

    code, data = cli_json("verify", ours)
    assert code == 1 and not data["ok"]
    problems = data["problems"]
    assert len(problems) == 3, problems
    assert problems[0].startswith(f"corrupt log file {log4} (batch 4)")
    assert problems[1] == f"committed file {gone} (batch 3) is missing"
    size = os.path.getsize(grown)
    assert problems[2] == f"committed file {grown} (batch 6) has {size} bytes but the log says {size - 4}"
    text = cli("verify", ours).stdout
    assert text.startswith(f"3 problem(s) in {ours}:") and all(f"  - {p}" in text for p in problems)


def test_truncated_log_is_a_clear_error_not_a_traceback(ours: Path) -> None:
    (ours / "_spark_metadata" / "6").write_bytes(b"")  # the newest batch, needed by every reader
    code, data = cli_json("verify", ours)
    assert code == 1
    assert data["problems"][0].startswith(f"Incomplete log file {ours}/_spark_metadata/6 (batch 6)")
    assert data["problems"][1:] == ["the committed data files were not checked: no snapshot of the log could be read"]
    for result in (cli("ls", ours), cli("show", ours, 5)):
        assert result.returncode == 1 and result.stdout == ""
        assert result.stderr.startswith("parquet-sink: error: Incomplete log file") and result.stderr.count("\n") == 1


# -- vacuum --------------------------------------------------------------------------------------


def test_vacuum_deletes_only_old_orphans(ours: Path) -> None:
    committed = data_files(ours)
    template = Path(sorted(committed)[0])
    orphans = [ours / "part-00000-0rphan.c000.snappy.parquet", ours / "k=b" / "part-00003-0rphan.c000.snappy.parquet"]
    hidden = [ours / "_tmp" / "part-0.parquet", ours / ".staging" / "part-0.parquet", ours / "k=a" / ".part-0.crc"]
    hidden += [ours / "_SUCCESS", ours / "checkpoint" / "offsets" / "0"]  # not Parquet: never vacuum's business
    young = ours / "part-00001-young.c000.snappy.parquet"
    for path in orphans + hidden + [young]:
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(template, path)
    age(*orphans, *hidden, *committed)

    code, data = cli_json("vacuum", ours, "--older-than", "1h", "--allow-short-retention", "--dry-run")
    assert code == 0
    expected = sorted(str(p) for p in orphans)
    assert [f["path"] for f in data["files"]] == expected
    assert [f["size"] for f in data["files"]] == [template.stat().st_size] * 2
    assert (data["dry_run"], data["younger_kept"], data["bytes"]) == (True, 1, 2 * template.stat().st_size)
    assert all(p.exists() for p in orphans)
    text = cli("vacuum", ours, "--older-than", "1h", "--allow-short-retention", "--dry-run").stdout.splitlines()
    assert text[0].startswith("would delete 2 orphan file(s)")
    assert [line.split()[0] for line in text[1:3]] == expected

    result = cli("vacuum", ours, "--older-than", "1h", "--allow-short-retention")
    assert result.returncode == 0 and result.stdout.startswith("deleted 2 orphan file(s)")
    assert not any(p.exists() for p in orphans)
    assert all(p.exists() for p in hidden + [young])
    assert data_files(ours) == committed | {str(young)}
    assert read_committed(str(ours)).num_rows == ROWS
    assert cli("verify", ours).returncode == 0


def test_vacuum_cleans_partition_directories_starting_with_underscore(spark, tmp_path: Path) -> None:
    """Delta's "partition column name starting with underscore" case: an orphan in ``_x=1/`` is deleted
    (Spark's rule: a name with ``=`` is a partition directory); files under hidden ``_x/``, ``_tmp/``, ``.t/`` stay."""
    out = tmp_path / "out"
    ParquetSink(str(out), partition_by=["_x"], writer="arrow")(spark.createDataFrame([(1, 1), (2, 2)], "id long, _x long"), 0)
    committed = data_files(out)
    assert {Path(p).parent.name for p in committed} == {"_x=1", "_x=2"}
    orphan = out / "_x=1" / "part-00007-0rphan.c000.snappy.parquet"
    hidden = [out / "_x" / "part-0.parquet", out / "_tmp" / "_x=1" / "part-0.parquet", out / ".t" / "part-0.parquet"]
    for path in [orphan, *hidden]:
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(sorted(committed)[0], path)
    age(orphan, *hidden, *map(Path, committed))

    code, data = cli_json("vacuum", out, "--older-than", "1h", "--allow-short-retention")
    assert code == 0
    assert [f["path"] for f in data["files"]] == [str(orphan)]
    assert not orphan.exists() and all(p.exists() for p in hidden)
    assert data_files(out) == committed
    assert sorted(read_committed(str(out)).column("id").to_pylist()) == [1, 2]


def test_vacuum_refuses_when_the_log_cannot_be_read(ours: Path) -> None:
    orphan = ours / "part-00000-0rphan.c000.snappy.parquet"
    shutil.copyfile(sorted(data_files(ours))[0], orphan)
    age(orphan)
    log4 = ours / "_spark_metadata" / "4"  # superseded by 5.compact, left by a cleanup delay, truncated
    log4.write_bytes((ours / "_spark_metadata" / "6").read_bytes()[:60])
    before = data_files(ours)
    result = cli("vacuum", ours, "--older-than", "0s", "--allow-short-retention")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith(f"parquet-sink: error: refusing to vacuum {ours}: its log cannot be read")
    assert data_files(ours) == before


def test_vacuum_follows_a_moved_spark_output(outputs: Outputs, tmp_path: Path) -> None:
    moved = Path(shutil.copytree(outputs.spark_out, tmp_path / "moved"))  # the log still names the old root
    orphan = moved / "part-00009-0rphan-c000.snappy.parquet"
    shutil.copyfile(sorted(data_files(moved))[0], orphan)
    age(orphan, *map(Path, data_files(moved)))
    url = f"file://{moved}"
    code, data = cli_json("vacuum", url, "--older-than", "30m", "--allow-short-retention", "--storage-option", "auto_mkdir=false")
    assert code == 0
    assert [f["path"] for f in data["files"]] == [str(orphan)]
    assert data_files(moved) == {str(moved / Path(p).name) for p in data_files(outputs.spark_out)}
    assert read_committed(str(moved)).num_rows == ROWS


def test_s3_output_with_storage_options(spark, outputs: Outputs, moto_server, tmp_path: Path) -> None:
    """ls, verify and vacuum on an S3 output (moto), credentials and endpoint given as storage options."""
    bucket = f"b{uuid.uuid4().hex[:12]}"
    moto_server.make_bucket(bucket)
    url = f"s3://{bucket}/out"
    sink = ParquetSink(url, storage_options=moto_server.storage_options)
    whole = spark.readStream.schema("id long, k string").json(str(outputs.src))  # one batch
    run_available_now(whole, str(tmp_path / "ckpt"), sink)
    orphan = f"{bucket}/out/part-00000-0rphan.c000.snappy.parquet"
    moto_server.filesystem().pipe(orphan, b"PAR1 left by a failed batch")
    secret = "cli-s3cr3t-" + uuid.uuid4().hex  # moto accepts any credentials
    options = [
        *("--storage-option", f"key={moto_server.access_key}"),
        *("--storage-option", f"secret={secret}"),
        *("--storage-option", "client_kwargs=" + json.dumps(moto_server.storage_options["client_kwargs"])),
    ]

    ls = cli("ls", url, "--rows", "--json", *options)
    verify = cli("verify", url, *options, "-v")
    vacuum = cli("vacuum", url, "--older-than", "0s", "--allow-short-retention", "--json", *options, "-v")
    assert [(b["batch"], b["rows"]) for b in json.loads(ls.stdout)["batches"]] == [(0, ROWS)]
    assert verify.returncode == 0 and verify.stdout.startswith(f"OK: s3://{bucket}/out: log intact up to batch 0")
    assert [f["path"] for f in json.loads(vacuum.stdout)["files"]] == [f"s3://{orphan}"]
    assert all(secret not in r.stdout + r.stderr for r in (ls, verify, vacuum))
    assert read_committed(url, storage_options=moto_server.storage_options).num_rows == ROWS


# -- doctor --------------------------------------------------------------------------------------


def test_doctor_on_a_finished_query(outputs: Outputs) -> None:
    result = cli("doctor", outputs.ours, "--checkpoint", outputs.ours_ckpt)
    assert result.returncode == 0
    assert result.stdout.splitlines() == [
        f"checkpoint: query {outputs.query_id}, offsets up to batch 6, commits up to batch 6",
        f"output log: newest batch 6, committed by query {outputs.query_id} up to its batch 6 (log batch 6)",
        "Nothing to replay: batch 6 is done in the checkpoint; the next batch is 7, and the sink will commit it "
        "as log batch 7.",
    ]


def test_doctor_crash_after_sink_commit_skips_and_restart_agrees(
    spark, outputs: Outputs, ours: Path, ckpt_copy: Path
) -> None:
    uncommit(ckpt_copy, 6)
    code, data = cli_json("doctor", ours, "--checkpoint", ckpt_copy)
    assert code == 0
    assert (data["next_batch"], data["replay"], data["action"], data["log_batch"]) == (6, True, "skip", 6)
    assert "Spark will re-run batch 6" in data["message"]
    assert "the sink will skip it: already committed" in data["message"]

    sink = our_sink(ours)
    run_available_now(stream(spark, outputs.src), str(ckpt_copy), sink)
    assert (sink.last_progress.batch_id, sink.last_progress.skipped) == (6, True)
    assert cli_json("ls", ours)[1]["latest_batch"] == 6
    assert read_committed(str(ours)).num_rows == ROWS


def test_doctor_crash_before_sink_commit_replays_then_vacuum_removes_the_orphans(
    spark, outputs: Outputs, ours: Path, ckpt_copy: Path
) -> None:
    first_attempt = sorted(f.path for f in committed_files(str(ours), batches=(6, 6)))
    uncommit(ckpt_copy, 6)
    (ours / "_spark_metadata" / "6").unlink()  # the sink never committed batch 6

    code, data = cli_json("doctor", ours, "--checkpoint", ckpt_copy)
    assert code == 0
    assert (data["next_batch"], data["replay"], data["action"], data["log_batch"]) == (6, True, "commit", 6)
    assert "Spark will re-run batch 6" in data["message"]
    assert "the sink will commit it as log batch 6" in data["message"]

    sink = our_sink(ours)
    run_available_now(stream(spark, outputs.src), str(ckpt_copy), sink)
    assert (sink.last_progress.batch_id, sink.last_progress.skipped, sink.last_progress.rows) == (6, False, 7)
    code, data = cli_json("vacuum", ours, "--older-than", "1h", "--allow-short-retention")
    assert (code, data["files"], data["younger_kept"]) == (0, [], 2)  # the first attempt's files are too young
    code, data = cli_json("vacuum", ours, "--older-than", "0s", "--allow-short-retention")
    assert [f["path"] for f in data["files"]] == first_attempt
    assert read_committed(str(ours)).num_rows == ROWS
    assert cli("verify", ours).returncode == 0


def test_doctor_explains_refusals(spark, outputs: Outputs, tmp_path: Path) -> None:
    # A new checkpoint pointed at the old output: its first batch fails, leaving offsets/0 and no commit.
    fresh = tmp_path / "fresh"
    with pytest.raises(Exception, match="ForeignQueryError"):
        run_available_now(stream(spark, outputs.src), str(fresh), our_sink(outputs.ours))
    code, data = cli_json("doctor", outputs.ours, "--checkpoint", fresh)
    assert (code, data["next_batch"], data["replay"], data["action"]) == (1, 0, True, "foreign")
    assert data["checkpoint"]["query_id"] != outputs.query_id
    refusal = f"refuse it with ForeignQueryError: log batch 0 is already taken by query {outputs.query_id}"
    assert refusal in data["message"]
    assert "restart from the original checkpoint" in data["message"]

    code, data = cli_json("doctor", outputs.ours, "--checkpoint", tmp_path / "never-started")
    assert (code, data["next_batch"], data["action"], data["checkpoint"]["query_id"]) == (1, 0, "foreign", None)
    typo = cli("doctor", outputs.ours, "--checkpoint", tmp_path / "never-started")  # a mistyped path looks so too
    assert f"checkpoint: none yet at {tmp_path / 'never-started'}" in typo.stdout

    empty = tmp_path / "reset-output"
    result = cli("doctor", empty, "--checkpoint", outputs.ours_ckpt)
    assert result.returncode == 1
    assert "refuse it with OutputResetError: the checkpoint is ahead of the log, which is empty" in result.stdout

    code, data = cli_json("doctor", outputs.ours, "--checkpoint", fresh, "--on-foreign-query", "append")
    assert (code, data["action"], data["log_batch"]) == (0, "commit", 7)


def test_doctor_on_a_spark_sink_that_crashed_before_its_checkpoint_commit(spark, outputs: Outputs, tmp_path: Path) -> None:
    """Spark's own sink committed batch 6 to its log, then died before the checkpoint's commits/6: restarted with
    ParquetSink, Spark re-runs batch 6, which the log already holds. doctor offered on_foreign_query='append' as the
    fix (and called that restart safe): it writes batch 6's rows a second time. Its fix now is to finish the batch
    with Spark's own sink first; followed literally, every row is there once."""
    ckpt = Path(shutil.copytree(outputs.spark_ckpt, tmp_path / "ckpt"))
    uncommit(ckpt, 6)
    (ckpt / "commits" / ".6.crc").unlink(missing_ok=True)
    try:
        code, data = cli_json("doctor", outputs.spark_out, "--checkpoint", ckpt)
        assert (code, data["next_batch"], data["replay"], data["action"]) == (1, 6, True, "foreign")
        assert "run the query once more with Spark's own sink" in data["message"]
        assert "on_foreign_query='append' would write those rows a second time" in data["message"]
        code, data = cli_json("doctor", outputs.spark_out, "--checkpoint", ckpt, "--on-foreign-query", "append")
        # refused (SparkSinkBatchError): Spark's sink committed the newest batch (issue 53), with the same advice
        assert (code, data["ok"], data["action"], data["log_batch"]) == (1, False, "spark", None)
        assert "run the query once more with Spark's own sink" in data["message"]
        assert "a second time" in data["message"]
        code, data = cli_json("doctor", outputs.spark_out, "--checkpoint", ckpt, "--on-foreign-query", "append",
                              "--spark-sink-stopped")
        assert (code, data["ok"], data["action"], data["log_batch"]) == (1, False, "commit", 7)
        assert "a second time" in data["warnings"][0]

        run_available_now(stream(spark, outputs.src), str(ckpt), path=str(outputs.spark_out))  # the fix, literally
        assert (ckpt / "commits" / "6").exists()
        code, data = cli_json("doctor", outputs.spark_out, "--checkpoint", ckpt)
        assert (code, data["action"], data["log_batch"]) == (0, "commit", 7)
        run_available_now(stream(spark, outputs.src), str(ckpt), ParquetSink(str(outputs.spark_out)))
        ids = sorted(read_committed(str(outputs.spark_out))["id"].to_pylist())
        assert ids == sorted(i * 100 + r for i in range(BATCHES) for r in range(i + 1))
        assert spark.read.parquet(str(outputs.spark_out)).count() == ROWS
    finally:
        shutil.rmtree(outputs.spark_out)
        shutil.copytree(outputs.base / "pristine" / "spark", outputs.spark_out)


# -- command line hygiene ------------------------------------------------------------------------


def test_usage_errors_and_secrets(outputs: Outputs, tmp_path: Path) -> None:
    assert cli().returncode == 2
    bad = cli("vacuum", outputs.ours, "--older-than", "soon")
    assert bad.returncode == 2 and "--older-than='soon' is not a duration: give a whole number with its unit" in bad.stderr
    leaked = cli("ls", outputs.ours, "--storage-option", "hunter2-no-equals")
    assert leaked.returncode == 2 and "expected key=value" in leaked.stderr and "hunter2" not in leaked.stderr
    not_output = cli("verify", tmp_path, "--storage-option", "password=hunter2", "-v", process=True)  # its stderr
    assert not_output.returncode == 1 and "hunter2" not in not_output.stdout + not_output.stderr
    result = cli("ls", tmp_path, "--storage-option", "password=hunter2")
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and "hunter2" not in result.stderr
    assert result.stderr.startswith(f"parquet-sink: error: {tmp_path} has no _spark_metadata log")


def test_progress_counter_only_on_a_terminal(outputs: Outputs) -> None:
    master, terminal = pty.openpty()
    try:
        result = cli("verify", outputs.ours, stderr=terminal)
    finally:
        os.close(terminal)
    drawn = b""
    try:
        while chunk := os.read(master, 4096):
            drawn += chunk
    except OSError:  # EIO: everything written was read and the terminal is closed
        pass
    finally:
        os.close(master)
    assert result.returncode == 0
    assert b"\rverifying 13/13" in drawn
