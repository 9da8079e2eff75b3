"""StorageError messages say what actually failed (full disk, file limit, network, credentials, an fsspec
package too old for exclusive create), never leak a credential, and are provoked by real failures: a full
tmpfs, a real EMFILE, a closed or silent loopback port, wrong credentials against Azurite and moto, and
the real old releases of fsspec, adlfs and s3fs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from parquet_sink.errors import StorageError
from parquet_sink.storage.filesystem import Storage

REPO = Path(__file__).resolve().parents[2]
CREDENTIALS = "credentials"

# A child process: build Storage(url, options) and try one exclusive create; print the error's class and
# message as JSON (or "OK"). Runs with a chosen sys.path (old packages) and resource limits.
_CHILD = textwrap.dedent(
    """
    import json, sys
    from parquet_sink.errors import StorageError
    from parquet_sink.storage.filesystem import Storage
    url, options, payload_size = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    setup = sys.argv[4] if len(sys.argv) > 4 else ""
    storage = Storage(url, options)
    held = []
    if setup == "exhaust-file-descriptors":
        import resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        try:
            while True:
                held.append(open("/dev/null", "rb"))
        except OSError:
            pass  # every descriptor is taken, as in a process that leaks them
    try:
        storage.put_if_absent(storage.join("_spark_metadata", "0"), b"x" * payload_size)
        print(json.dumps(["OK", ""]))
    except StorageError as exc:
        print(json.dumps([type(exc).__name__, str(exc)]))
    """
)


def _run_child(
    url: str,
    options: dict,
    *,
    payload_size: int = 2,
    setup: str = "",
    prefix: list[str] | None = None,
    pythonpath: list[str] = (),
) -> tuple[str, str]:
    """Run _CHILD; its error class and message (or "OK")."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*pythonpath, str(REPO / "src"), str(REPO)]))
    cmd = [*(prefix or []), sys.executable, "-c", _CHILD, url, json.dumps(options), str(payload_size), setup]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    kind, message = json.loads(result.stdout.strip().splitlines()[-1])
    return kind, message


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- local disk: full, out of file descriptors ---------------------------------------------------------


def test_full_disk_says_no_space_left(tmp_path):
    """A 64 KiB tmpfs in a private mount namespace (nothing leaks to the host) and a 1 MiB commit."""
    mount = tmp_path / "small"
    mount.mkdir()
    prefix = ["unshare", "--map-root-user", "--mount", "sh", "-c",
              f'mount -t tmpfs -o size=64k tmpfs "{mount}" && exec "$0" "$@"']
    kind, message = _run_child(str(mount / "out"), {}, payload_size=1 << 20, prefix=prefix)
    assert kind == "StorageError", message
    assert "no space left" in message and str(mount / "out") in message
    assert CREDENTIALS not in message


# write_batch on a 1 MiB tmpfs: a batch that fits, then 2 MiB of incompressible rows; prints what the
# second call raised and what the log then holds.
_FULL_DISK_CHILD = textwrap.dedent(
    """
    import json, os, sys
    import pyarrow as pa
    from parquet_sink import MetadataLog, read_committed, write_batch
    out = sys.argv[1]
    write_batch(out, pa.table({"blob": [b"fits"]}), app_id="a", version=0)
    try:
        write_batch(out, pa.table({"blob": [os.urandom(1 << 16) for _ in range(32)]}), app_id="a", version=1)
        raised = ["nothing", ""]
    except Exception as exc:
        raised = [type(exc).__name__, str(exc)]
    rows = [len(blob) for blob in read_committed(out).column("blob").to_pylist()]
    print(json.dumps([*raised, MetadataLog(out).latest_batch_id(), rows]))
    """
)


def test_full_disk_during_write_batch_says_no_space_left_and_commits_nothing(tmp_path):
    """The disk fills while write_batch writes a data file (the file object's writes and close): a
    StorageError saying so, not a bare OSError, and the log still holds only the batch before."""
    mount = tmp_path / "small"
    mount.mkdir()
    out = mount / "out"
    command = ["unshare", "--map-root-user", "--mount", "sh", "-c",
               f'mount -t tmpfs -o size=1m tmpfs "{mount}" && exec "$0" "$@"', sys.executable, "-c",
               _FULL_DISK_CHILD, str(out)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(REPO)]))
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    kind, message, latest, rows = json.loads(result.stdout.strip().splitlines()[-1])
    assert kind == "StorageError", message
    assert "no space left" in message and str(out) in message and ".parquet" in message
    assert (latest, rows) == (0, [4])  # only batch 0's one row


def test_too_many_open_files_says_so(tmp_path):
    kind, message = _run_child(str(tmp_path / "out"), {}, setup="exhaust-file-descriptors")
    assert kind == "StorageError", message
    assert "too many open files" in message and "ulimit -n" in message and str(tmp_path / "out") in message
    assert CREDENTIALS not in message
    assert not (tmp_path / "out" / "_spark_metadata" / "0").exists()


# -- object stores: unreachable, silent, wrong credentials ----------------------------------------------


def test_connection_refused_says_the_store_cannot_be_reached():
    port = _closed_port()
    secret = "refused-s3cr3t-" + uuid.uuid4().hex
    options = {"key": "AKIAREFUSED", "secret": secret, "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}"},
               "config_kwargs": {"retries": {"total_max_attempts": 1}}}  # botocore's backoff only repeats the refusal
    with pytest.raises(StorageError) as info:
        Storage("s3://refused/out", options).read_bytes("refused/out/_spark_metadata/0")
    message = str(info.value)
    assert "connection to the store was refused" in message and f"127.0.0.1:{port}" in message
    assert not info.value.retryable  # a wrong endpoint: retrying the same call cannot help
    assert CREDENTIALS not in message and secret not in message


def test_network_timeout_says_timed_out(monkeypatch):
    """A loopback socket that accepts connections (kernel backlog) but never answers. One attempt of 0.2 s (botocore's
    and s3fs's retries, 5 by s3fs's class default, only repeat the same timeout: 1 s read timeouts took 14 s)."""
    import s3fs

    monkeypatch.setattr(s3fs.S3FileSystem, "retries", 1)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        port = silent.getsockname()[1]
        options = {
            "key": "AKIASILENT",
            "secret": "silent-s3cr3t",
            "config_kwargs": {"read_timeout": 0.2, "connect_timeout": 0.2, "retries": {"total_max_attempts": 1}},
            "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}"},
        }
        with pytest.raises(StorageError) as info:
            Storage("s3://silent/out", options).read_bytes("silent/out/_spark_metadata/0")
    message = str(info.value)
    assert "timed out" in message and CREDENTIALS not in message and "silent-s3cr3t" not in message


def test_wrong_account_key_on_azurite_says_access_denied(request, tmp_path):
    from tests.conftest import make_backend

    backend = make_backend("azurite", request, tmp_path)  # Azurite checks the shared-key signature
    bogus = "bm90LXRoZS1rZXktbm90LXRoZS1rZXktbm90LXRoZS1rZXk="
    options = dict(backend.storage_options)
    options["connection_string"] = options["connection_string"].replace(backend.secret, bogus)
    storage = Storage(backend.url, options)
    with pytest.raises(StorageError) as info:
        storage.put_if_absent(storage.join("_spark_metadata", "0"), b"v1")
    message = str(info.value)
    assert "access denied" in message and CREDENTIALS in message and backend.url in message
    assert bogus not in message and backend.secret not in message


def test_unknown_access_key_on_moto_says_access_denied(tmp_path, monkeypatch):
    """A moto server of its own with authentication switched on: no access key is known to it."""
    from tests.helpers.servers import moto_s3

    monkeypatch.setenv("INITIAL_NO_AUTH_ACTION_COUNT", "0")
    secret = "wrong-s3cr3t-" + uuid.uuid4().hex
    with moto_s3(tmp_path / "moto") as server:
        options = {"key": "AKIAUNKNOWN", "secret": secret, "client_kwargs": {"endpoint_url": server.endpoint_url}}
        storage = Storage("s3://nobody/out", options)
        with pytest.raises(StorageError) as info:
            storage.put_if_absent(storage.join("_spark_metadata", "0"), b"v1")
    message = str(info.value)
    assert "access denied" in message and CREDENTIALS in message and "s3://nobody/out" in message
    assert secret not in message


# -- fsspec packages older than exclusive create ---------------------------------------------------------


@pytest.fixture(scope="module")
def old_packages(tmp_path_factory) -> dict[str, str]:
    """The last releases before exclusive create, installed side by side (not into the venv)."""
    # adlfs 2024.7 still imports azure-datalake-store (Gen1), which today's adlfs no longer requires
    releases = {"fsspec": ["fsspec==2024.10.0"], "adlfs": ["adlfs==2024.7.0", "azure-datalake-store==0.0.53"],
                "s3fs": ["s3fs==2024.10.0"]}
    paths = {}
    for name, requirements in releases.items():
        target = tmp_path_factory.mktemp(f"old-{name}")
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target)]
        subprocess.run([*pip, *requirements], check=True, timeout=300)
        paths[name] = str(target)
    return paths


def test_old_fsspec_is_named_instead_of_the_store(old_packages):
    kind, message = _run_child(f"memory://out-{uuid.uuid4().hex}", {}, pythonpath=[old_packages["fsspec"]])
    assert kind == "UnsafeStorageError", message
    assert "upgrade fsspec" in message.lower() and "fsspec 2024.10.0" in message and '"fsspec>=2024.12.0"' in message


@pytest.mark.parametrize(
    "backend_name, package, version", [("azurite", "adlfs", "2024.7.0"), ("moto", "s3fs", "2024.10.0")]
)
def test_old_backend_is_named_instead_of_the_store(request, tmp_path, old_packages, backend_name, package, version):
    from tests.conftest import make_backend

    backend = make_backend(backend_name, request, tmp_path)
    kind, message = _run_child(backend.url, backend.storage_options, pythonpath=[old_packages[package]])
    assert kind == "UnsafeStorageError", message
    assert f"upgrade {package}" in message.lower() and f"{package} {version}" in message
    assert backend.secret not in message
    kind, message = _run_child(backend.url, backend.storage_options)  # today's releases: the same store works
    assert (kind, message) == ("OK", "")


def test_a_parent_a_vacuum_removed_before_the_open_is_made_again(tmp_path: Path, monkeypatch) -> None:
    """On local disk ``Storage.open`` makes a data file's directory, then opens the file: a vacuum that removes the
    (still empty) directory in between (``os.rmdir`` in the window, as vacuum's empty-directory sweep does) once
    made the writer's open fail with a StorageError; the directory is made again and the file written. Removed
    at every attempt, the open fails as before, a StorageError naming the file."""
    storage = Storage(str(tmp_path / "out"))
    target = storage.join("k=a", "part-0.parquet")
    opened = storage.fs.open
    removals = []

    def vacuum_in_the_window(path: str, *args, **kwargs):
        if len(removals) < budget:
            os.rmdir(os.path.dirname(path))  # what vacuum does to an empty directory
            removals.append(path)
        return opened(path, *args, **kwargs)

    monkeypatch.setattr(storage.fs, "open", vacuum_in_the_window)  # fsspec shares the instance: undone after
    budget = 2
    with storage.open(target, "wb") as fh:
        fh.write(b"rows")
    assert Path(target).read_bytes() == b"rows" and len(removals) == 2
    removals.clear()
    budget = 100
    with pytest.raises(StorageError, match="part-1.parquet"):
        storage.open(storage.join("k=a", "part-1.parquet"), "wb")
