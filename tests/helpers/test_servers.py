"""Exclusive-create behaviour of adlfs on Azurite and s3fs on moto, against real loopback servers.

These tests pin down what the commit protocol relies on:

* ``pipe_file(path, data, mode="create")`` creates an object, and a second create of the
  same path raises ``FileExistsError`` and leaves the first content intact;
* of 8 threads racing that call on one key exactly one wins and its bytes stay;
* ``info()`` gives the size and a modification time (``last_modified`` on adlfs,
  ``LastModified`` on s3fs, aware UTC datetimes) that converts to epoch milliseconds,
  and ``modified()`` returns the same instant;
* the filesystems pickle (as Spark does to ship them to executors) and work in another process.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import pickle
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from tests.helpers import servers

RACERS = 8
RACE_ROUNDS = int(os.environ.get("RACE_ROUNDS", "3"))


@dataclasses.dataclass(frozen=True)
class Store:
    """One backend under test: how to make a fresh filesystem, where to write, the mtime key."""

    name: str
    make_fs: Callable[[], Any]
    root: str  # "container" or "bucket", without protocol
    mtime_key: str
    storage_options: dict[str, Any]
    protocol: str

    def key(self, stem: str) -> str:
        """A fresh path under the root, unique per call."""
        return f"{self.root}/{stem}-{uuid.uuid4().hex}.bin"


@pytest.fixture(scope="module")
def azurite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.AzuriteServer]:
    with servers.azurite(tmp_path_factory.mktemp("azurite")) as server:
        yield server


@pytest.fixture(scope="module")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.MotoServer]:
    with servers.moto_s3(tmp_path_factory.mktemp("moto")) as server:
        yield server


@pytest.fixture(scope="module")
def azurite_store(azurite_server: servers.AzuriteServer) -> Store:
    azurite_server.make_container("commits")
    return Store(
        name="adlfs-azurite",
        make_fs=azurite_server.filesystem,
        root="commits",
        mtime_key="last_modified",
        storage_options=azurite_server.storage_options,
        protocol="abfs",
    )


@pytest.fixture(scope="module")
def moto_store(moto_server: servers.MotoServer) -> Store:
    moto_server.make_bucket("commits")
    return Store(
        name="s3fs-moto",
        make_fs=moto_server.filesystem,
        root="commits",
        mtime_key="LastModified",
        storage_options=moto_server.storage_options,
        protocol="s3",
    )


@pytest.fixture(params=["azurite", "moto"])
def store(request: pytest.FixtureRequest) -> Store:
    return request.getfixturevalue(f"{request.param}_store")


# --------------------------------------------------------------------------- exclusive create


def test_create_then_second_create_raises_and_keeps_first(store: Store) -> None:
    fs = store.make_fs()
    path = store.key("once")
    first = b"first writer " + uuid.uuid4().bytes

    fs.pipe_file(path, first, mode="create")
    assert fs.cat_file(path) == first

    with pytest.raises(FileExistsError):
        fs.pipe_file(path, b"second writer", mode="create")
    # A different filesystem instance sees the same: nothing was overwritten.
    assert store.make_fs().cat_file(path) == first
    assert fs.cat_file(path) == first


def test_overwrite_mode_still_overwrites(store: Store) -> None:
    """Sanity check that the conflict above comes from mode="create", not from the store."""
    fs = store.make_fs()
    path = store.key("overwrite")
    fs.pipe_file(path, b"one", mode="create")
    fs.pipe_file(path, b"two")
    assert fs.cat_file(path) == b"two"


def test_racing_creates_have_exactly_one_winner(store: Store) -> None:
    # One independent filesystem per writer, connected before the race so that the
    # racing requests are the PUTs themselves and not client set-up.
    filesystems = [store.make_fs() for _ in range(RACERS)]
    for fs in filesystems:
        fs.ls(store.root)
    reader = store.make_fs()
    for _ in range(RACE_ROUNDS):
        path = store.key("race")
        payloads = [f"writer-{i}-{uuid.uuid4().hex}".encode() for i in range(RACERS)]
        barrier = threading.Barrier(RACERS)
        outcomes: dict[int, str] = {}
        errors: dict[int, BaseException] = {}

        def race(i: int) -> None:
            barrier.wait(timeout=30)
            try:
                filesystems[i].pipe_file(path, payloads[i], mode="create")
                outcomes[i] = "won"
            except FileExistsError:
                outcomes[i] = "exists"
            except BaseException as exc:  # noqa: BLE001 (reported below)
                errors[i] = exc

        threads = [threading.Thread(target=race, args=(i,)) for i in range(RACERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads)

        assert errors == {}, f"{store.name}: unexpected errors {errors!r}"
        winners = [i for i, outcome in outcomes.items() if outcome == "won"]
        assert len(outcomes) == RACERS
        assert len(winners) == 1, f"{store.name}: winners {winners}"
        assert reader.cat_file(path) == payloads[winners[0]]


# --------------------------------------------------------------------------- size and mtime


def _epoch_ms(value: dt.datetime) -> int:
    assert isinstance(value, dt.datetime)
    assert value.tzinfo is not None and value.utcoffset() == dt.timedelta(0)
    return int(value.timestamp() * 1000)


def test_info_has_size_and_mtime_in_epoch_ms(store: Store) -> None:
    fs = store.make_fs()
    path = store.key("mtime")
    data = os.urandom(1234)

    before_ms = int(time.time() * 1000)
    fs.pipe_file(path, data, mode="create")
    after_ms = int(time.time() * 1000)

    info = fs.info(path)
    assert info["size"] == len(data)
    assert info["type"] == "file"
    mtime_ms = _epoch_ms(info[store.mtime_key])
    # Both servers report whole seconds (HTTP Last-Modified); allow that plus clock slack.
    assert before_ms - 2000 <= mtime_ms <= after_ms + 2000
    assert mtime_ms % 1000 == 0

    modified = fs.modified(path)
    assert _epoch_ms(modified) == mtime_ms

    listed = {entry["name"]: entry for entry in fs.ls(store.root, detail=True)}
    assert _epoch_ms(listed[path][store.mtime_key]) == mtime_ms
    assert listed[path]["size"] == len(data)


# --------------------------------------------------------------------------- URLs and pickling


def test_url_forms_reach_the_same_object(store: Store) -> None:
    import fsspec

    fs = store.make_fs()
    path = store.key("url")
    fs.pipe_file(path, b"via url", mode="create")
    protocols = ["abfs", "az", "abfss"] if store.protocol == "abfs" else ["s3", "s3a"]
    for protocol in protocols:
        url_fs, url_path = fsspec.core.url_to_fs(
            f"{protocol}://{path}", skip_instance_cache=True, **store.storage_options
        )
        assert url_path == path
        assert url_fs.cat_file(url_path) == b"via url"


def test_filesystem_pickles_and_works_in_another_process(store: Store) -> None:
    fs = store.make_fs()
    path = store.key("pickle")
    fs.pipe_file(path, b"from parent", mode="create")

    clone = pickle.loads(pickle.dumps(fs))
    assert clone.cat_file(path) == b"from parent"

    child = (
        "import pickle, sys\n"
        "fs = pickle.loads(sys.stdin.buffer.read())\n"
        "path = sys.argv[1]\n"
        "assert fs.cat_file(path) == b'from parent'\n"
        "try:\n"
        "    fs.pipe_file(path, b'from child', mode='create')\n"
        "except FileExistsError:\n"
        "    sys.stdout.write('conflict')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", child, path],
        input=pickle.dumps(fs),
        capture_output=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert result.stdout == b"conflict"
    assert fs.cat_file(path) == b"from parent"


# --------------------------------------------------------------------------- server lifecycle


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_azurite_stops_its_process_on_exit(tmp_path: Path) -> None:
    with servers.azurite(tmp_path) as server:
        assert _pid_alive(server.pid)
        pid = server.pid
    assert not _pid_alive(pid)


def test_moto_stops_its_process_on_exit() -> None:
    with servers.moto_s3() as server:
        assert _pid_alive(server.pid)
        pid = server.pid
    assert not _pid_alive(pid)


def test_missing_azurite_install_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(servers, "AZURITE_BLOB_BIN", tmp_path / "node_modules" / ".bin" / "azurite-blob")
    with pytest.raises(RuntimeError, match="npm ci"):
        with servers.azurite(tmp_path):
            pass  # pragma: no cover
