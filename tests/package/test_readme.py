"""The README's Python examples run as written (no Spark needed for them) against a real output: every code
block that does not start a streaming query is executed, with its example paths pointed at outputs made here."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from parquet_sink import write_batch

README = Path(__file__).resolve().parents[2] / "README.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_python_examples_run(tmp_path):
    events, daily = tmp_path / "events", tmp_path / "daily"
    for version in range(6):
        write_batch(str(events), pa.table({"id": [2 * version, 2 * version + 1]}), app_id="ingest", version=version)
    pq.write_table(pa.table({"id": [-1]}), events / "part-00000-orphan.c000.snappy.parquet")  # a failed batch's
    runnable = [b for b in _blocks() if "readStream" not in b and "builder.remote" not in b and "ckpt" not in b]
    assert len(runnable) >= 3, "the README's reader, write_batch and maintenance examples"
    for block in runnable:
        code = block.replace('"/data/events"', repr(str(events))).replace('"/data/daily"', repr(str(daily)))
        scope: dict = {}
        exec(compile(code, str(README), "exec"), scope)  # noqa: S102 - the README's own examples
        if "recent" in scope:  # the SinkOutput block
            assert sorted(scope["recent"].column("id").to_pylist()) == list(range(6, 12))
            assert scope["events"].latest_batch() == 5 and scope["plan"].files_removed == 6
        if "tbl" in scope:
            assert sorted(scope["tbl"].column("id").to_pylist()) == list(range(12)), "the orphan is never read"
            assert sorted(scope["new"].column("id").to_pylist()) == list(range(6, 12))
            assert sorted(scope["old"].column("id").to_pylist()) == list(range(6))
            assert len(scope["paths"]) == 6 and scope["frame"].height == 12 and len(scope["df"]) == 12
            assert scope["then"].num_rows == 12 and scope["log"].column("rows").to_pylist() == [2] * 6
    assert (events / "part-00000-orphan.c000.snappy.parquet").exists(), "the README's vacuum is a dry run"


def test_the_demo_says_where_it_left_its_files_and_its_command_removes_them(tmp_path: Path) -> None:
    """The demo's last lines name its directory and a command that removes it: run literally by a shell (the
    directory's name has a space and a quote, as a user's --workdir may)."""
    from examples.demo import where_left

    workdir = tmp_path / "my demo's files"
    (workdir / "out" / "_spark_metadata").mkdir(parents=True)
    (workdir / "out" / "_spark_metadata" / "0").write_text("v1\n")
    lines = where_left(workdir)
    assert str(workdir) in lines[0]
    command = lines[-1].strip()
    assert command.startswith("rm -rf ")
    subprocess.run(["sh", "-c", command], check=True, timeout=30)
    assert not workdir.exists() and tmp_path.exists()
