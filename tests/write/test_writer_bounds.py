"""The Arrow writer stays bounded with many partition values: one batch with more values than its processes may
open files (a 1,024 open-file limit), commits every row exactly once, one file per value (Spark's sorted write:
one file open at a time), on local disk and on an object store."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from parquet_sink import committed_files, read_committed
from tests.conftest import make_backend

ROOT = Path(__file__).resolve().parents[2]
OPEN_FILE_LIMIT = 640
VALUES = 700  # partition values in the one batch, more than the limit (each value a file: time grows with it)
ROWS = 2 * VALUES


def _limit_open_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILE_LIMIT, OPEN_FILE_LIMIT))


BACKENDS = ["local", "moto"]


def test_more_partition_values_than_the_open_file_limit(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """On each backend in turn, in one child: one driver (one JVM start for both) and its Python workers, all under
    the limit; the object store's query runs in processes the local one used, so nothing it leaked is forgiven. Each
    backend's run is checked on its own (a failed run does not stop the next one)."""
    backends = {name: make_backend(name, request, tmp_path / name) for name in BACKENDS}
    source = tmp_path / "in"
    source.mkdir()
    # One input file, so one task; values interleaved (k = id % VALUES), so the input is not sorted.
    (source / "in.json").write_text("".join(json.dumps({"id": i, "k": i % VALUES}) + "\n" for i in range(ROWS)))
    result = tmp_path / "result.json"
    config = {
        "input": str(source),
        "result": str(result),
        "runs": {
            name: {"checkpoint": str(tmp_path / f"ckpt-{name}"), "url": b.url, "storage_options": b.storage_options}
            for name, b in backends.items()
        },
    }
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    child = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "helpers" / "bounds_child.py"), json.dumps(config)],
        check=False,
        cwd=str(ROOT),
        env=env,
        preexec_fn=_limit_open_files,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=900,
    )
    outcome = json.loads(result.read_text()) if result.exists() else {}
    assert child.returncode == 0 and outcome == dict.fromkeys(BACKENDS, "ok"), (
        f"{outcome}\n" + child.stdout[-3000:] + child.stderr[-6000:]
    )

    for name, backend in backends.items():
        table = read_committed(backend.url, storage_options=backend.storage_options)
        ids = table.column("id").to_pylist()
        assert Counter(ids) == Counter(range(ROWS)), f"{name}: every row exactly once"
        assert all(k == i % VALUES for i, k in zip(ids, table.column("k").to_pylist())), f"{name}: rows in their directory"
        files = committed_files(backend.url, storage_options=backend.storage_options)
        directories = Counter(os.path.dirname(f.relative_path) for f in files)
        assert len(directories) == VALUES, name
        assert set(directories.values()) == {1}, f"{name}: one file per directory: the task wrote them one after the other"


def test_local_data_files_and_new_directories_are_fsynced_before_statuses(tmp_path: Path, monkeypatch) -> None:
    """On local disk a task fsyncs every file it wrote and every directory from the file up to the root
    before it reports the files, so a committed file is never empty after a power loss. (os.fsync is
    observed, not replaced: each call still reaches the disk.)"""
    import pyarrow as pa

    from parquet_sink.storage.filesystem import Storage
    from parquet_sink.write.parquet_files import WriteSpec, write_task

    synced: list[str] = []
    real_fsync = os.fsync

    def observed_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", observed_fsync)
    root = tmp_path / "out"
    spec = WriteSpec(Storage(str(root)), ("a", "b"), "snappy", 2)
    table = pa.table({"id": list(range(6)), "a": ["x", "x", "x", "y", "y", "y"], "b": [1, 1, 1, 2, 2, None]})
    statuses = next(write_task(spec, table.column_names, iter(table.to_batches())))
    synced_when_reported = set(synced)
    paths = statuses.column("path").to_pylist()
    assert len(paths) == 4  # a=x/b=1 rolls over at 2 rows, a=y/b=2, a=y/b=null
    assert set(paths) <= synced_when_reported
    directories = {str(root), str(root / "a=x"), str(root / "a=x" / "b=1"), str(root / "a=y"), str(root / "a=y" / "b=2")}
    directories.add(str(root / "a=y" / "b=__HIVE_DEFAULT_PARTITION__"))
    assert directories <= synced_when_reported
