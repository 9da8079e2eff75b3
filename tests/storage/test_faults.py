"""Every storage error typed under faults (issue 36, item 7): a proxy between the client and real moto or Azurite
(tests/helpers/servers.py, ``faulty_proxy``) answers 503 and 500, drops answers after the store did the request,
resets connections, cuts bodies short and answers slowly. ``write_batch`` chains, readers and ``vacuum`` run
through it, retrying exactly what the package calls retryable: every error is a StorageError (a
RetryableStorageError saying to retry where retrying is right), and the output read without faults holds every
version once. Before, a reset while reading a log file (reads after ``Storage.open``) reached the caller as the
backend's own exception, and 503/500 answers said "check that the location exists"."""

from __future__ import annotations

import asyncio
import collections
import time
from urllib.parse import unquote

import pyarrow as pa
import pytest

from parquet_sink import read_committed, vacuum, write_batch
from parquet_sink.errors import RetryableStorageError, StorageError
from parquet_sink.storage.filesystem import Storage
from tests.conftest import make_backend
from tests.helpers.servers import FAULTS, FaultPlan, faulty_proxy, proxied_options

VERSIONS = 4
ROWS = 5


class _QuickAsyncio:
    """``asyncio`` as s3fs.core sees it, whose ``sleep`` (s3fs calls it only to back off between its retries)
    waits at most 10 ms."""

    def __getattr__(self, name: str):
        return getattr(asyncio, name)

    @staticmethod
    def sleep(delay: float, *args):
        return asyncio.sleep(min(delay, 0.01), *args)


@pytest.fixture
def quick_retries(monkeypatch):
    """azure-storage-blob waits 15 s, 18 s, 24 s between its own retries, s3fs 0.1 s growing 1.7-fold: waits of
    10 ms keep the faults within seconds (only the wait changes; the retries, and what they see, are the SDKs'
    own; 76 faults on moto cost ~10 s of s3fs's waits)."""
    import s3fs.core
    from azure.storage.blob._shared import policies, policies_async

    for klass in (policies.ExponentialRetry, policies_async.ExponentialRetry):
        monkeypatch.setattr(klass, "get_backoff_time", lambda self, settings: 0.01)
    monkeypatch.setattr(s3fs.core, "asyncio", _QuickAsyncio())


def _options(name: str, server, port: int) -> dict:
    options = proxied_options(name, server, port)
    if name == "moto":  # botocore's own retries would hide most faults: let s3fs's few retries face them
        options["config_kwargs"] = {"retries": {"max_attempts": 1}}
    return options


def _retrying(call, seen: collections.Counter, attempts: int = 60):
    """``call()`` until it succeeds, retrying only errors the package calls retryable; any other error fails."""
    for _ in range(attempts):
        try:
            return call()
        except StorageError as exc:
            assert exc.retryable and isinstance(exc, RetryableStorageError), str(exc)
            assert "retry" in str(exc).lower(), str(exc)  # "... Retry, or wait longer": a store too loaded to answer
            seen[str(exc).split(" failed: ", 1)[-1][:40]] += 1
    raise AssertionError(f"no success in {attempts} attempts: {seen}")


def _batch(version: int) -> pa.Table:
    return pa.table({"v": [version] * ROWS, "i": list(range(ROWS))})


@pytest.mark.parametrize("name", ["moto", "azurite"])
def test_write_batch_readers_and_vacuum_under_faults(request, tmp_path, quick_retries, name):
    backend = make_backend(name, request, tmp_path)
    server = request.getfixturevalue(f"{name}_server")
    # The SDKs retry a few times themselves: many faults, for some to reach the package (s3fs retries five times,
    # azure-storage-blob thrice; 0.3 on moto has faults still reaching the package: asserted below). Their waits
    # between retries are 10 ms (quick_retries) and a slow answer 20 ms: no timeout is near either.
    plan = FaultPlan(rate={"moto": 0.3, "azurite": 0.6}[name], faults=FAULTS, seed=36, slow_seconds=0.02)
    seen: collections.Counter = collections.Counter()
    with faulty_proxy(server.port, plan) as port:
        options = _options(name, server, port)
        for version in range(VERSIONS):
            _retrying(lambda: write_batch(backend.url, _batch(version), app_id="faults", version=version,
                                          storage_options=options, compact_interval=3), seen)
            if version % 2:
                table = _retrying(lambda: read_committed(backend.url, storage_options=options), seen)
                assert sorted(table.column("v").to_pylist()) == sorted(v for v in range(version + 1) for _ in range(ROWS))
        _retrying(lambda: vacuum(backend.url, storage_options=options), seen)
    assert sum(plan.injected.values()) > 0 and sum(seen.values()) > 0, (plan.injected, seen)  # faults reached us
    table = read_committed(backend.url, storage_options=backend.storage_options)  # no proxy: what the store holds
    assert sorted(zip(table.column("v").to_pylist(), table.column("i").to_pylist())) == [
        (v, i) for v in range(VERSIONS) for i in range(ROWS)
    ]


@pytest.mark.parametrize("name", ["moto", "azurite"])
@pytest.mark.parametrize("status", ["503", "500"])
def test_a_failing_store_says_retry_not_check_the_location(request, tmp_path, quick_retries, name, status):
    backend = make_backend(name, request, tmp_path)
    server = request.getfixturevalue(f"{name}_server")
    with faulty_proxy(server.port, FaultPlan(rate=1.0, faults=(status,))) as port:
        storage = Storage(backend.url, _options(name, server, port))
        with pytest.raises(RetryableStorageError) as caught:
            storage.read_bytes(storage.join("_spark_metadata", "0"))
    message = str(caught.value)
    assert f"the store is throttling or failing (HTTP {status}): retry" in message, message
    assert "check that the location exists" not in message and backend.secret not in message


def test_a_fresh_process_under_faults_is_told_to_retry_not_to_check_the_account(request, tmp_path):
    """The reachability check of a store that answers, slowly or with errors, is not a wrong account name."""
    backend = make_backend("moto", request, tmp_path)
    server = request.getfixturevalue("moto_server")
    with faulty_proxy(server.port, FaultPlan(rate=1.0, faults=("slow",), slow_seconds=3.0)) as port:
        with pytest.raises(RetryableStorageError) as caught:
            Storage(backend.url, _options("moto", server, port)).check_reachable(timeout=1.0)
    message = str(caught.value)
    assert "slow or overloaded" in message and "Retry" in message and "account name" not in message, message
    with faulty_proxy(server.port, FaultPlan(rate=1.0, faults=("503",))) as port:
        with pytest.raises(RetryableStorageError) as caught:
            Storage(backend.url, _options("moto", server, port)).check_reachable(timeout=20.0)
    message = str(caught.value)
    assert message.startswith(f"the reachability check of {backend.url} failed: the store is throttling"), message


def test_a_spark_stream_through_the_arrow_sink_under_faults(spark, request, tmp_path):
    """ParquetSink on s3:// writes with pyarrow on the executors (the Arrow path): a query that dies of a fault
    dies of a RetryableStorageError (recovered from Spark's StreamingQueryException), and restarting it on its
    checkpoint until the source is drained leaves every row once."""
    from parquet_sink import ParquetSink
    from parquet_sink.errors import original_error
    from tests.helpers.spark_util import run_available_now, write_input_files

    backend = make_backend("moto", request, tmp_path)
    server = request.getfixturevalue("moto_server")
    source = str(tmp_path / "source")
    write_input_files(source, [[{"v": v, "i": i} for i in range(ROWS)] for v in range(VERSIONS)])
    stream = spark.readStream.schema("v long, i long").option("maxFilesPerTrigger", 1).json(source)
    plan = FaultPlan(rate=0.2, faults=FAULTS, seed=7, slow_seconds=0.02)
    seen: collections.Counter = collections.Counter()
    with faulty_proxy(server.port, plan) as port:
        options = _options("moto", server, port)
        sink = _retrying(lambda: ParquetSink(backend.url, storage_options=options), seen)
        for _ in range(30):
            try:
                run_available_now(stream, str(tmp_path / "checkpoint"), sink)
                break
            except Exception as exc:  # the query died: of a typed, retryable error only
                error = original_error(exc)
                assert isinstance(error, RetryableStorageError), str(exc)[-3000:]
                seen[str(error).split(" failed: ", 1)[-1][:40]] += 1
        else:
            raise AssertionError(f"the query never finished: {seen}")
    assert sum(plan.injected.values()) > 0, plan.injected
    table = read_committed(backend.url, storage_options=backend.storage_options)
    assert sorted(zip(table.column("v").to_pylist(), table.column("i").to_pylist())) == [
        (v, i) for v in range(VERSIONS) for i in range(ROWS)
    ]


def _held_uploads(arrivals: dict[str, float]):
    """A ``FaultPlan.only`` selecting the uploads of data files (every PUT of a ``part-`` file), noting in
    ``arrivals`` when each file's first request reached the proxy."""

    def data_upload(method: str, path: str) -> bool:
        if method != "PUT" or "/part-" not in path:
            return False
        arrivals.setdefault(unquote(path.split("?")[0]), time.monotonic())
        return True

    return data_upload


@pytest.mark.parametrize("name", ["moto", "azurite"])
def test_files_upload_side_by_side_and_one_failing_upload_fails_the_write(request, tmp_path, quick_retries, name):
    """A partitioned write to a store uploads a task's files side by side (the Arrow writer path's uploads, in
    ``write_batch`` as in a Spark task): with every data-file request held 1 s by the proxy, a file's upload starts
    before the previous one is answered, which one upload after the other cannot do. When one file's upload keeps
    failing, the write fails with a retryable StorageError naming that file, nothing is committed, and the retry
    commits every row once."""
    backend = make_backend(name, request, tmp_path)
    server = request.getfixturevalue(f"{name}_server")
    table = pa.table({"k": [i % 6 for i in range(60)], "i": list(range(60))})
    arrivals: dict[str, float] = {}
    data_upload = _held_uploads(arrivals)
    plan = FaultPlan(rate=1.0, faults=("slow",), slow_seconds=1.0, only=data_upload)
    with faulty_proxy(server.port, plan) as port:
        write_batch(backend.url, table, app_id="up", version=0, partition_by=["k"], storage_options=_options(name, server, port))
    starts = sorted(arrivals.values())
    assert len(starts) == 6, arrivals  # one file per partition value
    assert min(b - a for a, b in zip(starts, starts[1:])) < 1.0, starts  # an upload began while another was held

    failing = FaultPlan(rate=1.0, faults=("503",), only=lambda method, path: method == "PUT" and "/k=3/" in unquote(path))
    with faulty_proxy(server.port, failing) as port:
        with pytest.raises(RetryableStorageError) as caught:
            write_batch(backend.url, table, app_id="up", version=1, partition_by=["k"],
                        storage_options=_options(name, server, port))
    assert "k=3/part-" in str(caught.value) and "retry" in str(caught.value), str(caught.value)
    rows = read_committed(backend.url, storage_options=backend.storage_options)
    assert sorted(rows.column("i").to_pylist()) == list(range(60))  # version 0 only: nothing of version 1

    write_batch(backend.url, table, app_id="up", version=1, partition_by=["k"], storage_options=backend.storage_options)
    rows = read_committed(backend.url, storage_options=backend.storage_options)
    assert sorted(zip(rows.column("k").to_pylist(), rows.column("i").to_pylist())) == sorted(
        (i % 6, i) for i in range(60) for _ in range(2)
    )


def test_uploads_wait_while_the_bytes_under_way_reach_the_bound(request, tmp_path, monkeypatch):
    """What waits for an upload is bounded by bytes too (each closed file holds its unuploaded bytes in memory): with
    the bound under one file's size, a task's uploads go one after the other (with every data-file request held 1 s,
    each begins at least 1 s after the previous one), and every row is committed once."""
    from parquet_sink.write import parquet_files

    monkeypatch.setattr(parquet_files, "_UPLOAD_BYTES", 1)
    backend = make_backend("moto", request, tmp_path)
    server = request.getfixturevalue("moto_server")
    arrivals: dict[str, float] = {}
    data_upload = _held_uploads(arrivals)
    table = pa.table({"k": [i % 3 for i in range(30)], "i": list(range(30))})
    with faulty_proxy(server.port, FaultPlan(rate=1.0, faults=("slow",), slow_seconds=1.0, only=data_upload)) as port:
        write_batch(backend.url, table, app_id="up", version=0, partition_by=["k"], storage_options=_options("moto", server, port))
    starts = sorted(arrivals.values())
    assert len(starts) == 3 and min(b - a for a, b in zip(starts, starts[1:])) >= 1.0, starts
    rows = read_committed(backend.url, storage_options=backend.storage_options)
    assert sorted(rows.column("i").to_pylist()) == list(range(30))


def test_a_failed_head_before_a_read_is_a_retryable_error_not_a_missing_file(request, tmp_path):
    """pyarrow asks the filesystem whether a file exists before opening it, and fsspec answers False to any error:
    two HEADs answered 500 (s3fs retries one) made a committed file read as missing, a raw FileNotFoundError, as
    the check that followed found it present. It is a retryable StorageError, and the retry reads every row."""
    backend = make_backend("moto", request, tmp_path)
    server = request.getfixturevalue("moto_server")
    write_batch(backend.url, _batch(0), app_id="head", version=0, storage_options=backend.storage_options)
    spoiled: list[str] = []

    def first_data_heads(method: str, path: str) -> bool:
        if method == "HEAD" and "/part-" in path and len(spoiled) < 2:
            spoiled.append(path)
            return True
        return False

    with faulty_proxy(server.port, FaultPlan(rate=1.0, faults=("500",), only=first_data_heads)) as port:
        options = _options("moto", server, port)
        with pytest.raises(RetryableStorageError) as caught:
            read_committed(backend.url, storage_options=options)
        assert "HTTP 500" in str(caught.value) and "part-" in str(caught.value), str(caught.value)
        assert sorted(read_committed(backend.url, storage_options=options).column("i").to_pylist()) == list(range(ROWS))
    assert len(spoiled) == 2
