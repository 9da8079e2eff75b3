"""Maintenance from Python (no Spark): verify, vacuum and doctor return typed results, the same the CLI prints;
and the command line starts without loading the library's heavy dependencies."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import parquet_sink
from parquet_sink import MetadataLog, doctor, read_committed, vacuum, verify, write_batch
from parquet_sink.cli.main import main as cli_main
from parquet_sink.errors import ParameterError

ROOT = Path(__file__).resolve().parents[2]


def _output(tmp_path: Path) -> tuple[str, Path]:
    out = tmp_path / "out"
    for version in range(3):
        write_batch(str(out), pa.table({"id": [version * 10, version * 10 + 1]}), app_id="app", version=version)
    orphan = out / "part-00000-orphan.c000.snappy.parquet"  # what a failed batch leaves
    pq.write_table(pa.table({"id": [-1]}), orphan)
    return str(out), orphan


def test_verify_vacuum_and_doctor_from_python(tmp_path):
    out, orphan = _output(tmp_path)
    report = verify(out)
    assert report.ok and report.latest_batch == 2 and report.files == 3 and report.problems == []

    planned = vacuum(out, "0s", dry_run=True, allow_short_retention=True)
    assert [f.path for f in planned.plan.orphans] == [str(orphan)] and planned.bytes == orphan.stat().st_size
    assert orphan.exists(), "a dry run deletes nothing"
    young = vacuum(out, "1h", allow_short_retention=True)
    assert young.plan.orphans == [] and [f.path for f in young.plan.young] == [str(orphan)] and orphan.exists()
    done = vacuum(out, "0s", allow_short_retention=True)
    assert [f.path for f in done.plan.orphans] == [str(orphan)] and not orphan.exists()
    assert sorted(read_committed(out).column("id").to_pylist()) == [0, 1, 10, 11, 20, 21]

    rerun = doctor(out, app_id="app", version=1).plan
    assert (rerun.action, rerun.ok) == ("skip", True) and "version 1 writes nothing" in rerun.message
    nxt = doctor(out, app_id="app", version=3).plan
    assert (nxt.action, nxt.log_batch) == ("commit", 3)
    with pytest.raises(ValueError, match="not both"):
        doctor(out, checkpoint=str(tmp_path / "ckpt"), app_id="app", version=1)

    os.remove(next(Path(out).glob("part-*.parquet")))
    broken = verify(out)
    assert not broken.ok and len(broken.problems) == 1 and "is missing" in broken.problems[0]
    (Path(out) / "_spark_metadata" / "1").write_text("v1\n{not json")  # no snapshot can be read
    corrupt = verify(out)
    assert not corrupt.ok and corrupt.latest_batch == 2, corrupt  # the log's files still go up to batch 2
    assert any("not checked" in p for p in corrupt.problems)


@pytest.mark.parametrize("age", ["soon", "7", 7, "0", 7.5, "-1d", "d"])
def test_vacuum_refuses_a_duration_without_its_unit(tmp_path, age):
    """``--older-than 7`` was read as 7 milliseconds: a bare number is refused, with the accepted forms."""
    out, orphan = _output(tmp_path)
    os.utime(orphan, (time.time() - 30 * 86400,) * 2)  # old enough for any reading of the number
    refused = r"(is not a duration: give a whole number with its unit, |a duration must not be negative \()e\.g\. '7d'"
    with pytest.raises(ParameterError, match=r"^vacuum\('[^']*'\): older_than=.* " + refused):
        vacuum(out, age, allow_short_retention=True)
    assert orphan.exists()
    assert cli_main(["vacuum", out, "--older-than", str(age), "--allow-short-retention"]) == 2  # a usage error
    assert orphan.exists()


def test_vacuum_keeps_files_younger_than_the_safe_minimum_unless_told(tmp_path, capsys):
    out, orphan = _output(tmp_path)
    os.utime(orphan, (time.time() - 2 * 86400,) * 2)  # an orphan two days old (older than the log: named below)
    for short in ("1h", "6d", dt.timedelta(days=2)):
        with pytest.raises(ParameterError, match="shorter than the safe minimum of 7d.*allow_short_retention=True"):
            vacuum(out, short)
    assert cli_main(["vacuum", out, "--older-than", "1d"]) == 2  # an input error
    assert "--allow-short-retention" in capsys.readouterr().err and orphan.exists()
    default = vacuum(out, include_files_before_log=True)  # 7 days by default: the two-day-old orphan stays
    assert default.older_than == "7d" and default.plan.orphans == [] and orphan.exists()
    assert [f.path for f in default.plan.young] == [str(orphan)]
    told = vacuum(out, dt.timedelta(days=1), allow_short_retention=True, include_files_before_log=True)
    assert [f.path for f in told.plan.orphans] == [str(orphan)] and not orphan.exists()
    assert sorted(read_committed(out).column("id").to_pylist()) == [0, 1, 10, 11, 20, 21]


def test_vacuum_deletes_the_copies_of_compact_files_spark_deleted(tmp_path, capsys):
    """Spark's log cleanup deletes old compact files, never their columnar copies: ``vacuum`` deletes a copy whose
    compact file is gone once it is older than ``older_than`` and the readers' ten minutes; a copy younger than
    that, and the copy of a compact file still there, stay; the output reads the same."""
    out = tmp_path / "out"
    for version in range(10):  # compact files 4 and 9
        write_batch(str(out), pa.table({"id": [version]}), app_id="app", version=version, compact_interval=5)
    meta = out / "_spark_metadata"
    log = MetadataLog(str(out))
    for batch in (4, 9):
        log.write_columnar_copy(batch)  # 9's stays: its compact file is there
    (meta / "3.compact.columnar").write_bytes((meta / "4.compact.columnar").read_bytes())  # as if 3 had been one
    for name in ("0", "1", "2", "3", "4.compact"):  # what Spark's log cleanup deletes, never the copies
        (meta / name).unlink()
    for name, days in (("4.compact.columnar", 2), ("3.compact.columnar", 0)):
        os.utime(meta / name, (time.time() - days * 86400,) * 2)
    before = sorted(p.name for p in meta.iterdir())
    planned = vacuum(str(out), "1d", allow_short_retention=True, dry_run=True)
    assert [Path(i.path).name for i in planned.plan.orphaned_copies] == ["4.compact.columnar"]
    assert sorted(p.name for p in meta.iterdir()) == before, "a dry run deletes nothing"
    assert cli_main(["vacuum", str(out), "--older-than", "1d", "--allow-short-retention"]) == 0
    assert "deleted 1 columnar cop(y/ies) of compact files Spark's log cleanup deleted" in capsys.readouterr().out
    assert sorted(set(before) - {p.name for p in meta.iterdir()}) == ["4.compact.columnar"]
    assert vacuum(str(out), "0s", allow_short_retention=True).plan.orphaned_copies == []  # 3's is 0 days old
    assert (meta / "3.compact.columnar").exists() and (meta / "9.compact.columnar").exists()
    assert sorted(read_committed(str(out)).column("id").to_pylist()) == list(range(10))


def test_cli_help_does_not_import_pyarrow_fsspec_or_spark():
    """``parquet-sink --help`` and a command's ``--help`` (``delta-sync`` too: no deltalake) load only the argument parser (measured: 0.15 s, was 2.6 s with
    every command importing pyarrow, fsspec and pandas); a command imports the library when it runs."""
    probe = (
        "import sys\n"
        "from parquet_sink.cli.main import build_parser\n"
        "for argv in (['--help'], ['ls', '--help'], ['vacuum', '--help'], ['delta-sync', '--help']):\n"
        "    try:\n"
        "        build_parser().parse_args(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = [m for m in ('pyarrow', 'fsspec', 'pyspark', 'numpy', 'pandas', 'deltalake') if m in sys.modules]\n"
        "print('imported:', ','.join(heavy) or '-', file=sys.stderr)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert done.stderr.strip().splitlines()[-1] == "imported: -", done.stderr
    assert "usage: parquet-sink" in done.stdout


def test_top_level_names_load_on_first_use():
    assert set(parquet_sink.__all__) <= set(dir(parquet_sink))
    for name in parquet_sink.__all__:
        assert getattr(parquet_sink, name) is not None
    with pytest.raises(AttributeError):
        parquet_sink.not_a_name  # noqa: B018


def test_maintenance_given_a_file_or_the_log_directory_names_the_output_to_give(tmp_path, capsys):
    """vacuum and sync_delta_log pointed at a file of the output, or at its log directory, raise NotAnOutputError
    saying which path to give (as the readers and optimize do), and delete nothing. Before, vacuum on a file
    raised a bare FileNotFoundError ("a parent of it is a file") and sync_delta_log a DeltaLogError about reading
    `<file>/_delta_log`."""
    from parquet_sink import sync_delta_log
    from parquet_sink.errors import NotAnOutputError
    from parquet_sink.maintenance import optimize

    out, orphan = _output(tmp_path)
    on_disk = sorted(p for p in Path(out).rglob("*") if p.is_file())
    for path, hint in ((str(orphan), "is a file: give the output directory"),
                       (f"{out}/_spark_metadata/0", "is a file: give the output directory"),
                       (f"{out}/_spark_metadata", "is a log directory: give its parent")):
        for call in (lambda: vacuum(path, "0s", allow_short_retention=True), lambda: sync_delta_log(path),
                     lambda: optimize(path)):
            with pytest.raises(NotAnOutputError, match=hint):
                call()
        for command in (["vacuum", path, "--older-than", "0s", "--allow-short-retention"], ["delta-sync", path]):
            assert cli_main(command) == 1
            assert hint in capsys.readouterr().err
    assert sorted(p for p in Path(out).rglob("*") if p.is_file()) == on_disk


def test_vacuum_deletes_the_temporary_file_of_a_log_commit_killed_before_it_was_published(tmp_path, capsys):
    """A writer SIGKILLed at ``commit_publish`` (its log file's temporary copy written, not published) leaves the
    temporary file in ``_spark_metadata``, which only that writer's cleanup after a compaction deleted, never if it
    did not run again: vacuum deletes it once older than the threshold (at least ORPHANED_COPY_AGE_MS: a younger one
    may be a commit in flight), and the rerun commits the batch once."""
    import signal

    out = tmp_path / "out"
    write_batch(str(out), pa.table({"id": [0]}), app_id="app", version=0)
    child = (
        "import pyarrow as pa, sys; from parquet_sink import write_batch; "
        "write_batch(sys.argv[1], pa.table({'id': [1]}), app_id='app', version=1)"
    )
    env = dict(os.environ, PARQUET_SINK_FAILPOINTS="commit_publish=kill")
    killed = subprocess.run([sys.executable, "-c", child, str(out)], env=env, start_new_session=True, check=False)
    assert killed.returncode == -signal.SIGKILL
    meta = out / "_spark_metadata"
    (temp,) = [p for p in meta.iterdir() if p.name.endswith(".tmp")]
    assert vacuum(str(out), "0s", allow_short_retention=True).plan.log_temps == []  # young: may be in flight
    hour_ago = time.time() - 3600
    os.utime(temp, (hour_ago, hour_ago))
    assert [Path(i.path).name for i in vacuum(str(out), "1h", allow_short_retention=True, dry_run=True).plan.log_temps] == [temp.name]
    assert temp.exists(), "a dry run deletes nothing"
    assert cli_main(["vacuum", str(out), "--older-than", "1h", "--allow-short-retention"]) == 0
    assert "deleted 1 temporary file(s) of log commits that never finished" in capsys.readouterr().out
    assert not temp.exists()
    assert write_batch(str(out), pa.table({"id": [1]}), app_id="app", version=1).committed
    assert sorted(read_committed(str(out)).column("id").to_pylist()) == [0, 1]


def test_doctor_given_a_directory_that_is_no_checkpoint_says_so(tmp_path: Path, capsys) -> None:
    """Issue 56, item 4: the output itself (or any directory holding other things) given as the checkpoint is a
    usage error naming it, not "checkpoint: none yet" (a new query's); a missing or empty directory is a new query's."""
    out = str(tmp_path / "out")
    write_batch(out, pa.table({"id": [1]}), app_id="a", version=0)
    with pytest.raises(ParameterError, match="is an output .* not a Spark streaming checkpoint"):
        doctor(out, checkpoint=out)
    (tmp_path / "typo").mkdir()
    (tmp_path / "typo" / "notes.txt").write_text("x")
    assert cli_main(["doctor", out, "--checkpoint", str(tmp_path / "typo")]) == 2
    assert "typo holds no Spark streaming checkpoint (no metadata, offsets/ or commits/; it holds notes.txt)" in \
        capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    for new in (tmp_path / "missing", tmp_path / "empty"):
        assert doctor(out, checkpoint=str(new)).checkpoint.query_id is None  # a new query's


def test_vacuum_decodes_no_log_entry_one_by_one(tmp_path, monkeypatch):
    """Issue 58 item 3: vacuum reads the log as columns (the reader's snapshot), never one Python object per entry,
    and finds the same orphans. Before, every live entry was decoded from its JSON line a second time (after the
    snapshot), with its URI parsed: a dry run over 20,000 files cost 3.8x delta-rs's, +378 MB at 100,000."""
    from parquet_sink.log.entry import LogEntry

    out = tmp_path / "out"
    for version, ids in enumerate([range(60), range(60, 62)]):
        table = pa.table({"id": list(ids), "k": [f"k{i % 3}" for i in ids]})
        write_batch(str(out), table, app_id="app", version=version, partition_by=["k"], max_records_per_file=1)
    orphans = [out / "k=k1" / "part-00000-orphan.c000.snappy.parquet", out / "part-00001-orphan.c000.snappy.parquet"]
    for orphan in orphans:
        pq.write_table(pa.table({"id": [-1]}), orphan)
    decoded = []
    from_json = LogEntry.from_json.__func__

    def counted(cls, line, batch_id=None):
        decoded.append(line)
        return from_json(cls, line, batch_id)

    monkeypatch.setattr(LogEntry, "from_json", classmethod(counted))
    plan = vacuum(str(out), "0s", allow_short_retention=True, dry_run=True).plan
    assert [i.path for i in plan.orphans] == sorted(str(o) for o in orphans)
    # only the lines of batch 1's small log file, its record's entry and two files (a block of at most 32 lines is
    # parsed line by line, once: by the snapshot, which the check does not repeat); none of batch 0's 60
    assert len(decoded) <= 3
    entries = [json.loads(line) for line in decoded]
    assert all(json.loads(e["stats"])["minValues"]["id"] >= 60 for e in entries if not e["isDir"])
    assert all("/_spark_metadata/.commit.1." in e["path"] for e in entries if e["isDir"])
    assert read_committed(str(out)).num_rows == 62


def test_vacuum_follows_a_moved_output_past_its_records_entries(tmp_path):
    """A record's entry is named after the record under the log directory (no file has that name): in an output moved
    elsewhere, vacuum resolves data entries to the new root and leaves the records' entries alone (resolved, such a
    name is no file under the new root, and was taken for a file outside it: OutsideRootError)."""
    before, out = tmp_path / "before", tmp_path / "after"
    write_batch(str(before), pa.table({"id": [0, 1]}), app_id="load job", version=0)
    write_batch(str(before), pa.table({"id": pa.array([], pa.int64())}), app_id="load job", version=1)
    before.rename(out)
    orphan = out / "part-00001-orphan.c000.snappy.parquet"
    pq.write_table(pa.table({"id": [-1]}), orphan)
    plan = vacuum(str(out), "0s", allow_short_retention=True, dry_run=True).plan
    assert [i.path for i in plan.orphans] == [str(orphan)]
    assert read_committed(str(out)).column("id").to_pylist() == [0, 1]
