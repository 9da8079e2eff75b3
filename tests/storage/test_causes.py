"""Causes named right (issue 36, item 8): each store a user can mistype or misconfigure gets a typed error
naming its real cause. Before: memory:// was accepted by the sink (and failed on executors), missing
credentials read "access denied", an abfs:// URL without an account asked to install a package, gs:// asked
to install gcsfs for a store the package never tested, an option the backend rejects read "check that the
location exists", and the reachability check said "reaching the store at of"."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from parquet_sink import ParquetSink, read_committed, write_batch
from parquet_sink.errors import ParameterError, StorageError, UnsupportedStorageError
from parquet_sink.storage.filesystem import Storage
from tests.conftest import make_backend


def test_the_sink_refuses_memory_when_built():
    with pytest.raises(UnsupportedStorageError, match=r"memory:// lives in this process only.*executors"):
        ParquetSink("memory://sink-out", check_storage=False)


@pytest.mark.parametrize("url", ["gs://bucket/out", "gcs://bucket/out"])
@pytest.mark.parametrize("call", ["Storage", "read_committed", "write_batch", "ParquetSink"])
def test_google_cloud_storage_is_refused_as_unsupported(url, call):
    calls = {
        "Storage": lambda: Storage(url),
        "read_committed": lambda: read_committed(url),
        "write_batch": lambda: write_batch(url, pa.table({"x": [1]}), app_id="a", version=0),
        "ParquetSink": lambda: ParquetSink(url),
    }
    with pytest.raises(UnsupportedStorageError) as caught:
        calls[call]()
    message = str(caught.value)
    assert url in message and "not supported" in message and "install" not in message.lower(), message


@pytest.mark.parametrize("url", ["abfs://container/out", "az://container/out"])
def test_an_azure_url_without_an_account_asks_for_the_account(url, monkeypatch):
    for name in ("AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_CONNECTION_STRING"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(StorageError) as caught:
        Storage(url, {"account_key": "c2VjcmV0LWtleS1zZWNyZXQ="})
    message = str(caught.value)
    assert "account_name" in message and "install" not in message.lower(), message
    assert "c2VjcmV0LWtleS1zZWNyZXQ=" not in message


def test_missing_credentials_are_not_access_denied(request, tmp_path, monkeypatch):
    backend = make_backend("moto", request, tmp_path)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    options = {"client_kwargs": dict(backend.storage_options["client_kwargs"])}
    storage = Storage(backend.url, options)
    with pytest.raises(StorageError) as caught:
        storage.read_bytes(storage.join("_spark_metadata", "0"))
    message = str(caught.value)
    assert "no credentials" in message and "access denied" not in message, message
    assert "storage_options" in message


def test_an_option_the_backend_rejects_is_named(request, tmp_path):
    backend = make_backend("moto", request, tmp_path)
    storage = Storage(backend.url, {**backend.storage_options, "retries": 1})  # not an s3fs option
    with pytest.raises(StorageError) as caught:
        storage.read_bytes(storage.join("_spark_metadata", "0"))
    message = str(caught.value)
    assert "does not accept an option of storage_options" in message, message
    assert backend.secret not in message


@pytest.mark.parametrize("given", ["key=AKIA,secret=s3cr3t", [("key", "AKIA")]])
def test_storage_options_not_a_dict_are_refused_typed(given):
    with pytest.raises(ParameterError, match="storage_options for s3://bucket/out must be a dict") as caught:
        read_committed("s3://bucket/out", storage_options=given)
    assert "s3cr3t" not in str(caught.value)


def _backend_failure(status: int, code: str, wrapped: bool) -> BaseException:
    """What botocore raises for an HTTP ``status`` answer with error ``code``, as it is or as s3fs re-raises it."""
    from botocore.exceptions import ClientError

    error = ClientError({"Error": {"Code": code, "Message": "drawn"}, "ResponseMetadata": {"HTTPStatusCode": status}},
                        "GetObject")
    if not wrapped:
        return error
    from s3fs.errors import translate_boto_error

    return translate_boto_error(error)


@settings(max_examples=60, deadline=None)
@given(status=st.integers(400, 599), code=st.sampled_from(["SlowDown", "InternalError", "ServiceUnavailable", "X"]),
       wrapped=st.booleans(), kind=st.sampled_from(["reset", "cut", "refused", "answer"]))
@example(status=401, code="SlowDown", wrapped=True, kind="answer")  # CI found: s3fs made it EBUSY, the 401 was lost
def test_what_is_retryable_is_decided_by_the_answer(status, code, wrapped, kind):
    """Drawn failures (HTTP answers as botocore and s3fs raise them, resets, bodies cut short, refused
    connections): RetryableStorageError exactly for 408/429/5xx answers, resets and cut-short bodies."""
    import http.client

    from parquet_sink.errors import RetryableStorageError
    from parquet_sink.storage.errors import ErrorTranslator

    failure = {
        "reset": ConnectionResetError(104, "Connection reset by peer"),
        "cut": http.client.IncompleteRead(b"half", 10),
        "refused": ConnectionRefusedError(111, "Connection refused"),
        "answer": _backend_failure(status, code, wrapped),
    }[kind]
    error = ErrorTranslator({}, is_local=False).error("reading", "s3://b/out/x", failure)
    failing = status in (408, 429, 500, 502, 503, 504) or code in ("SlowDown", "InternalError", "ServiceUnavailable")
    expected = kind in ("reset", "cut") or (kind == "answer" and failing and status not in (401, 403))
    assert isinstance(error, RetryableStorageError) == expected == error.retryable, str(error)
    assert ("retry" in str(error)) or not expected
    assert "check that the location exists" not in str(error) or not expected
