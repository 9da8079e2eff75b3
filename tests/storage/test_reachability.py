"""A store that cannot be reached fails in seconds with a StorageError naming the URL, at the sink's
construction, in readers, write_batch and every CLI command (no Spark session: the sink fails before one is
needed). Before, a wrong Azure account name took ~85 s of the backend's retries, and the sink failed at batch 0."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pyarrow as pa
import pytest

from parquet_sink import ParquetSink, history, read_committed, sync_delta_log, vacuum, verify, write_batch
from parquet_sink.cli.main import main as cli_main
from parquet_sink.errors import StorageError
from parquet_sink.storage.filesystem import Storage
from parquet_sink.storage.reachability import TIMEOUT_ENV

from ..helpers.servers import AZURITE_ACCOUNT_KEY

BAD_ACCOUNT = {"account_name": "nosuchaccount7x3q", "account_key": AZURITE_ACCOUNT_KEY}


def _calls(url: str, options: dict) -> dict:
    return {
        "ParquetSink": lambda: ParquetSink(url, storage_options=options),
        "read_committed": lambda: read_committed(url, storage_options=options),
        "history": lambda: history(url, storage_options=options),
        "write_batch": lambda: write_batch(url, pa.table({"x": [1]}), app_id="a", version=0, storage_options=options),
        "verify": lambda: verify(url, storage_options=options),
        "vacuum": lambda: vacuum(url, storage_options=options),
    }


@pytest.mark.parametrize("call", ["ParquetSink", "read_committed", "history", "write_batch", "verify", "vacuum"])
def test_a_wrong_azure_account_name_fails_fast_with_a_typed_error(call):
    started = time.monotonic()
    with pytest.raises(StorageError) as caught:
        _calls("abfs://container/out", BAD_ACCOUNT)[call]()
    assert time.monotonic() - started < 20
    message = str(caught.value)
    assert "abfs://container/out" in message and "nosuchaccount7x3q" in message and "account name" in message
    assert AZURITE_ACCOUNT_KEY not in message


@pytest.mark.parametrize("command", ["ls", "verify", "vacuum", "doctor"])
def test_cli_commands_fail_fast_on_a_wrong_account_name(command, capsys):
    started = time.monotonic()
    args = [command, "abfs://container/out", "--storage-option", "account_name=nosuchaccount7x3q",
            "--storage-option", f"account_key={AZURITE_ACCOUNT_KEY}"]
    args += ["--app-id", "a", "--version", "0"] if command == "doctor" else []
    assert cli_main(args) == 1
    assert time.monotonic() - started < 20
    err = capsys.readouterr().err
    assert "cannot reach abfs://container/out" in err and AZURITE_ACCOUNT_KEY not in err


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """An HTTP endpoint that accepts connections and never answers (a store that hangs)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_a_store_that_never_answers_fails_after_the_connect_timeout(silent_endpoint, monkeypatch):
    monkeypatch.setenv(TIMEOUT_ENV, "1.5")
    options = {"key": "k", "secret": "s", "client_kwargs": {"endpoint_url": silent_endpoint}}
    started = time.monotonic()
    with pytest.raises(StorageError, match=r"cannot reach s3://bucket/out: no answer from the store within 1\.5 s"):
        read_committed("s3://bucket/out", storage_options=options)
    assert time.monotonic() - started < 10


def test_a_client_that_cannot_reach_the_store_may_leave_the_check_to_the_driver():
    """A Spark Connect client on another network: check_storage=False builds the sink without a request; the
    driver's first batch checks (its MetadataLog does)."""
    started = time.monotonic()
    sink = ParquetSink("abfs://container/out", storage_options=BAD_ACCOUNT, check_storage=False)
    assert time.monotonic() - started < 5
    with pytest.raises(StorageError, match="cannot reach abfs://container/out"):
        sink.log  # what the first batch opens on the driver


@pytest.mark.parametrize("name", ["moto", "azurite"])
def test_a_bucket_or_container_that_does_not_exist_is_named(request, tmp_path, name):
    """Before, write_batch and vacuum on S3 raised s3fs's FileNotFoundError ("The specified bucket does not
    exist", no path), readers said the path is not an output, and sync_delta_log delta-rs's "Generic S3 error"
    (with a missing credential or a store that is down too). Nothing is created."""
    from tests.conftest import make_backend

    backend = make_backend(name, request, tmp_path)
    missing = "nosuch" + backend.url.split("://")[1].split("/")[0]
    url = f"{backend.url.split('://')[0]}://{missing}/out"
    options = backend.storage_options
    calls = {**_calls(url, options), "sync_delta_log": lambda: sync_delta_log(url, storage_options=options)}
    del calls["ParquetSink"]
    kind = "bucket" if name == "moto" else "container"
    for call in calls.values():
        with pytest.raises(StorageError, match=rf"cannot reach {url}: its {kind} '{missing}' does not exist .* Create"):
            call()
    assert not Storage(backend.url, backend.storage_options).fs.exists(missing)


def test_sync_delta_log_names_an_endpoint_that_is_down(monkeypatch):
    monkeypatch.setenv(TIMEOUT_ENV, "2")
    options = {"key": "k", "secret": "s", "client_kwargs": {"endpoint_url": "http://127.0.0.1:1"}}
    with pytest.raises(StorageError, match=r"s3://bucket/out.* (was refused|no answer from the store).* endpoint"):
        sync_delta_log("s3://bucket/out", storage_options=options)


def test_a_credential_that_may_not_ask_about_the_bucket_still_starts_an_output(request, tmp_path, moto_server):
    """A policy scoped to a prefix denies HeadBucket and GetBucketLocation (s3fs's exists(bucket) is then False):
    the check for a missing bucket must not refuse a new output there, only a bucket the store says is missing."""
    from tests.conftest import make_backend
    from tests.helpers.servers import DENIED, FaultPlan, faulty_proxy, proxied_options

    backend = make_backend("moto", request, tmp_path)
    bucket = backend.url.split("/")[2]

    def about_the_bucket(method: str, path: str) -> bool:
        return (method == "HEAD" and path.rstrip("/") == f"/{bucket}") or "location" in path

    plan = FaultPlan(rate=1.0, faults=[DENIED], only=about_the_bucket)
    with faulty_proxy(moto_server.port, plan) as port:
        options = proxied_options("moto", moto_server, port)
        write_batch(backend.url, pa.table({"x": [1]}), app_id="a", version=0, storage_options=options)
        assert read_committed(backend.url, storage_options=options).column("x").to_pylist() == [1]


def test_an_https_endpoint_that_speaks_http_is_named_not_retried(moto_server, monkeypatch):
    """https:// to a store that speaks http (an emulator, MinIO): the SDKs retry the failing handshake until the
    wait ends, and the error was a RetryableStorageError "the store is slow or overloaded. Retry"."""
    monkeypatch.setenv(TIMEOUT_ENV, "2")
    endpoint = moto_server.endpoint_url.replace("http://", "https://")
    options = {**moto_server.storage_options, "client_kwargs": {"endpoint_url": endpoint}}
    with pytest.raises(StorageError, match=r"a TLS handshake with its endpoint .* the endpoint speaks https") as caught:
        read_committed("s3://bucket/out", storage_options=options)
    assert not caught.value.retryable
