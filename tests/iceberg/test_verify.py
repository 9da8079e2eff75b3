"""verify and doctor know the Iceberg table as they know the Delta log: the table without catalog always, a
catalog's table when given as the writers take it (``iceberg=``, the CLI's --catalog-uri/--catalog-prop/--table).
A table in step is clean; a table behind is a warning whose command (run literally, as doctor says it) makes
verify clean; a file deleted under the table, a foreign snapshot (a pyiceberg append by hand) and a table that lists
another file set than the log are problems naming the table, the file and the remedy (``iceberg-sync --recreate``,
run literally, makes verify clean; another output's catalog table is never dropped)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import StaticTable

from parquet_sink import SinkOutput, committed_files, doctor, sync_iceberg, verify, write_batch
from parquet_sink.cli.main import main
from parquet_sink.errors import ParameterError
from parquet_sink.iceberg import current_metadata
from parquet_sink.iceberg.sync import ICEBERG_DIR, METADATA_DIR
from parquet_sink.storage.filesystem import Storage
from tests.iceberg.readers import assert_mirrors
from tests.iceberg.test_sync import _catalog_properties, _table


@pytest.fixture(autouse=True)
def _polars_plans_through_pyiceberg(monkeypatch):
    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")  # no polars_iceberg plugin here


def _target(kind: str, tmp_path: Path) -> bool | dict:
    return True if kind == "metadata" else {"catalog": _catalog_properties(tmp_path), "table": "db.events"}


def _cli_table(kind: str, tmp_path: Path) -> list[str]:
    """The CLI's options naming the table ``_target`` names (none for the table without catalog)."""
    if kind == "metadata":
        return []
    properties = _catalog_properties(tmp_path)
    return ["--catalog-uri", properties["uri"], "--catalog-prop", "name=c", "--catalog-prop", "type=sql",
            "--catalog-prop", f"warehouse={properties['warehouse']}", "--table", "db.events"]


def _write(root: Path, versions: range, iceberg) -> None:
    for version in versions:
        write_batch(str(root), _table(version), app_id="a", version=version, partition_by=["k"], iceberg=iceberg)


def _iceberg_said(report_lines: list[str]) -> list[str]:
    return [line for line in report_lines if "Iceberg table" in line]


def _load(kind: str, tmp_path: Path, root: Path):
    if kind == "metadata":
        return StaticTable.from_metadata(current_metadata(Storage(str(root))))
    properties = _catalog_properties(tmp_path)
    return SqlCatalog("c", uri=properties["uri"], warehouse=properties["warehouse"]).load_table("db.events")


@pytest.mark.parametrize("kind", ["metadata", "catalog"])
def test_a_table_in_step_is_clean_and_one_behind_is_a_warning_whose_command_works(tmp_path, kind, capsys):
    """In step: verify (library and CLI) is clean. Two batches written without iceberg=: verify warns (ok all the
    same) that the table mirrors batch 2 while the log is at 4, naming `parquet-sink iceberg-sync ...`; doctor says
    the same command; run literally through the CLI, it brings the table in step and verify is clean again."""
    root = tmp_path / "out"
    target = _target(kind, tmp_path)
    _write(root, range(3), target)
    clean = verify(str(root), iceberg=target)
    assert clean.ok and not clean.warnings, clean
    assert main(["verify", str(root), *_cli_table(kind, tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["warnings"] == []

    _write(root, range(3, 5), None)  # the table is left at batch 2
    behind = verify(str(root), iceberg=target)
    assert behind.ok and not behind.problems
    (warning,) = _iceberg_said(behind.warnings)
    assert "is behind: it mirrors log batch 2, the log is at 4" in warning

    diagnosis = doctor(str(root), app_id="a", version=5, iceberg=target)
    assert diagnosis.plan.ok and not diagnosis.mirror_problems
    assert [w for w in diagnosis.mirror_warnings if "parquet-sink iceberg-sync" in w] == [warning]
    restart = doctor(str(root), checkpoint=str(tmp_path / "ckpt"), iceberg=target)  # a query's restart: the same
    assert restart.mirror_warnings == diagnosis.mirror_warnings
    ckpt = ["--checkpoint", str(tmp_path / "ckpt")]
    assert main(["doctor", str(root), *ckpt, *_cli_table(kind, tmp_path), "--json"]) in (0, 1)  # the plan's own
    assert json.loads(capsys.readouterr().out)["mirror_warnings"] and not restart.mirror_problems
    assert main(["doctor", str(root), "--app-id", "a", "--version", "5", *_cli_table(kind, tmp_path)]) == 0
    (advice,) = [line for line in capsys.readouterr().out.splitlines() if "is behind" in line]
    command = re.search(r"`(parquet-sink iceberg-sync [^`]*)`", advice).group(1)

    argv = shlex.split(command)
    assert argv[:3] == ["parquet-sink", "iceberg-sync", str(root)]
    assert main(argv[1:]) == 0  # the advice, literally
    capsys.readouterr()
    after = SinkOutput(str(root)).verify(iceberg=target)
    assert after.ok and not after.warnings, after
    assert int(_load(kind, tmp_path, root).current_snapshot().summary["parquet-sink.log-batch-id"]) == 4


@pytest.mark.parametrize("kind", ["metadata", "catalog"])
def test_a_file_deleted_under_the_table_is_a_problem_naming_it(tmp_path, kind, capsys):
    """A data file the current snapshot references, deleted: verify's problems name it as the Iceberg table's (and
    the log's), the CLI exits 1."""
    root = tmp_path / "out"
    target = _target(kind, tmp_path)
    _write(root, range(2), target)
    gone = committed_files(str(root))[0].path
    Path(gone).unlink()
    report = verify(str(root), iceberg=target)
    (problem,) = _iceberg_said(report.problems)
    assert gone in problem and "which is missing" in problem
    assert main(["verify", str(root), *_cli_table(kind, tmp_path)]) == 1
    assert gone in capsys.readouterr().out


def test_a_file_of_another_size_than_the_table_records_is_a_problem(tmp_path):
    """A file rewritten in place with other bytes: Iceberg readers find the footer by the recorded size."""
    root = tmp_path / "out"
    _write(root, range(1), True)
    path = committed_files(str(root))[0].path
    pq.write_table(pq.read_table(path).slice(0, 1), path)
    problems = _iceberg_said(verify(str(root)).problems)
    assert any(path in p and "Iceberg readers cannot find its footer" in p for p in problems), problems


@pytest.mark.parametrize("kind", ["metadata", "catalog"])
def test_a_foreign_snapshot_is_a_problem_naming_the_remedy(tmp_path, kind, capsys):
    """Rows appended through pyiceberg by hand (a snapshot without the log batch marker): verify's problem names
    the foreign snapshot and the remedy; doctor reports it too, its plan unchanged."""
    root = tmp_path / "out"
    target = _target(kind, tmp_path)
    _write(root, range(2), target)
    table = _load(kind, tmp_path, root)
    if kind == "metadata":  # the table without catalog, reached through a catalog of its own to append to
        catalog = SqlCatalog("x", uri=f"sqlite:///{tmp_path / 'x.db'}", warehouse=f"file://{tmp_path / 'x'}")
        catalog.create_namespace("ns")
        table = catalog.register_table("ns.t", table.metadata_location)
    table.append(table.scan().to_arrow().slice(0, 1))
    report = verify(str(root), iceberg=target)
    (problem,) = _iceberg_said(report.problems)
    assert "committed by another Iceberg writer" in problem
    assert str(root / ICEBERG_DIR) in problem and "sync" in problem  # the remedy: drop or delete it, sync again
    diagnosis = doctor(str(root), app_id="a", version=2, iceberg=target)
    assert diagnosis.mirror_problems == [problem] and diagnosis.plan.ok
    assert main(["verify", str(root), *_cli_table(kind, tmp_path)]) == 1
    assert "another Iceberg writer" in capsys.readouterr().out
    _run_the_remedy(problem, root)
    assert verify(str(root), iceberg=target).ok
    assert sorted(assert_mirrors(_load(kind, tmp_path, root), root, latest=1)) == [0, 1]  # made again, no foreign row


def _run_the_remedy(problem: str, root: Path) -> None:
    """The `parquet-sink iceberg-sync ... --recreate` command ``problem`` names, run as written."""
    command = re.search(r"`(parquet-sink iceberg-sync [^`]* --recreate)`", problem).group(1)
    argv = shlex.split(command)
    assert argv[:3] == ["parquet-sink", "iceberg-sync", str(root)]
    assert main(argv[1:]) == 0


def test_a_table_listing_another_file_set_than_the_log_is_a_problem(tmp_path):
    """The output's log written again (reset) to the same batch with other files: the table's current snapshot
    lists files the log does not commit as of its batch and misses the log's, each a problem naming a file and
    the remedy."""
    root = tmp_path / "out"
    _write(root, range(1), True)
    listed = {f.path for f in committed_files(str(root))}
    shutil.rmtree(root / "_spark_metadata")
    shutil.rmtree(root / "_exactly_once" / "leases", ignore_errors=True)
    write_batch(str(root), _table(7), app_id="b", version=0, partition_by=["k"])
    committed = {f.path for f in committed_files(str(root))}
    extra, missing = _iceberg_said(verify(str(root)).problems)
    assert re.search(r"lists \d+ file\(s\) that the log does not commit", extra) and any(p in extra for p in listed)
    assert re.search(r"misses \d+ file\(s\) that the log commits", missing) and any(p in missing for p in committed)
    _run_the_remedy(missing, root)
    assert verify(str(root)).ok
    assert sorted(assert_mirrors(_load("metadata", tmp_path, root), root, latest=0)) == [0]


def test_another_outputs_table_is_a_problem(tmp_path):
    """A table without catalog whose metadata came from another output of the same layout: located elsewhere,
    refused as the sync refuses it; a catalog's table not given is named as not checked (a warning)."""
    other, root = tmp_path / "other", tmp_path / "out"
    _write(other, range(1), True)
    _write(root, range(1), {"catalog": _catalog_properties(tmp_path), "table": "db.events"})
    (root / ICEBERG_DIR / ".metadata").mkdir()
    source = Path(current_metadata(Storage(str(other))))
    (root / ICEBERG_DIR / ".metadata" / source.name).write_bytes(source.read_bytes())
    report = verify(str(root))
    (problem,) = _iceberg_said(report.problems)
    assert "not at this output" in problem
    (unchecked,) = _iceberg_said(report.warnings)
    assert "db.events" in unchecked and "was not checked" in unchecked
    _run_the_remedy(problem, root)  # the copied metadata deleted, the table made again as this output's
    assert verify(str(root), iceberg={"catalog": _catalog_properties(tmp_path), "table": "db.events"}).ok
    assert (other / METADATA_DIR).is_dir()  # the other output's table untouched


def test_recreate_never_drops_another_outputs_catalog_table(tmp_path, capsys):
    """A catalog table of another output named for this one: verify names no --recreate, and --recreate refuses,
    dropping nothing."""
    target = {"catalog": _catalog_properties(tmp_path), "table": "db.events"}
    other, root = tmp_path / "other", tmp_path / "out"
    _write(other, range(1), target)
    _write(root, range(1), None)
    (problem,) = _iceberg_said(verify(str(root), iceberg=target).problems)
    assert "not at this output" in problem and "--recreate" not in problem
    assert main(["iceberg-sync", str(root), *_cli_table("catalog", tmp_path), "--recreate"]) == 1
    assert "nothing was dropped" in capsys.readouterr().err
    assert verify(str(other), iceberg=target).ok


def test_a_catalog_table_not_made_yet_is_a_warning_naming_the_command(tmp_path):
    root = tmp_path / "out"
    _write(root, range(1), None)
    target = {"catalog": _catalog_properties(tmp_path), "table": "db.events"}
    report = verify(str(root), iceberg=target)
    (warning,) = report.warnings
    assert report.ok and "holds no Iceberg table db.events" in warning and "parquet-sink iceberg-sync" in warning
    sync_iceberg(str(root), **target)
    assert not verify(str(root), iceberg=target).warnings


def test_verify_takes_iceberg_as_the_writers_do(tmp_path, capsys):
    root = tmp_path / "out"
    _write(root, range(1), None)
    with pytest.raises(ParameterError, match=r"verify\(.*namespace.name.*Nothing was done") as refused:
        verify(str(root), iceberg={"catalog": _catalog_properties(tmp_path), "table": "events"})
    assert "written" not in str(refused.value)  # verify writes nothing either way
    assert main(["verify", str(root), "--table", "db.events"]) == 2
    assert "--catalog-uri" in capsys.readouterr().err
