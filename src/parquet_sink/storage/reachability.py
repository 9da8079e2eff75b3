"""Reachability: which store a storage reaches (its endpoint, account, bucket and credentials) and a check,
within seconds, that the store answers at all, instead of the backends' own minutes of retries.

The counterpart of the ABFS and S3A connectors' initialisation (``AzureBlobFileSystem.initialize`` probes
the container, S3A's ``verifyBucketExists``), which fail a Spark job before its first task.
"""

from __future__ import annotations

import os
import socket
import ssl
import threading
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import fsspec

from ..errors import RetryableStorageError, StorageError
from .paths import ENDPOINT_VARIABLES

if TYPE_CHECKING:
    from .filesystem import Storage

TIMEOUT_ENV = "PARQUET_SINK_CONNECT_TIMEOUT"
DEFAULT_CONNECT_TIMEOUT = 10.0  # seconds: adlfs retries a wrong account name for ~85 s before failing
_REACHED: set[tuple[str, ...]] = set()  # by store_key(): stores this process has reached


def endpoint(fs: fsspec.AbstractFileSystem) -> str:
    """The store's endpoint URL as the backend was configured (empty when the backend picks it)."""
    client_kwargs = getattr(fs, "client_kwargs", None) or {}
    return str(
        getattr(getattr(fs, "service_client", None), "url", None)  # adlfs: the account's blob endpoint
        or getattr(fs, "endpoint_url", None)  # s3fs
        or client_kwargs.get("endpoint_url")
        or ""
    )


def _accepts_connections(url: str, timeout: float = 2.0) -> bool:
    """Whether a TCP connection to ``url``'s host and port opens within ``timeout`` seconds."""
    parts = urlsplit(url)
    if not parts.hostname:
        return False
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=timeout).close()
        return True
    except OSError:
        return False


def _container_missing(storage: Storage) -> bool:
    """Whether the store says the root's bucket (container) does not exist; False when it cannot tell: a
    credential scoped to a prefix may not ask about the bucket itself (s3fs's ``exists(bucket)`` is False then),
    so S3 is asked with the listing the readers make (``NoSuchBucket``), Azure for the container's properties
    (adlfs: False only when not found)."""
    container, _, key = storage.root.partition("/")
    try:
        if storage.protocol == "s3":
            storage.fs.call_s3("list_objects_v2", Bucket=container, Prefix=key, MaxKeys=1)
            return False
        return not storage.fs.exists(container)
    except FileNotFoundError:  # s3fs's NoSuchBucket
        return True
    except Exception:  # denied, or anything else: the calls that follow report it
        return False


def _tls_failure(url: str, timeout: float = 2.0) -> str:
    """Why a TLS handshake with an ``https`` endpoint fails with Python's default trust (an endpoint that speaks
    plain http, a certificate not trusted or for another host); "" when it succeeds, or for an ``http`` endpoint."""
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        return ""
    try:
        with socket.create_connection((parts.hostname, parts.port or 443), timeout=timeout) as connection:
            ssl.create_default_context().wrap_socket(connection, server_hostname=parts.hostname).close()
    except ssl.SSLError as exc:
        return str(exc)
    except OSError:
        return ""
    return ""


def store_key(storage: Storage) -> tuple[str, ...]:
    """Everything that selects the store a write goes to: the scheme, the endpoint, the account, the bucket
    (container) and the options (credentials) that reach it. Two outputs share a probe only when all of them
    are the same."""
    if storage.is_local:
        return ("file",)
    fs = storage.fs
    where = endpoint(fs) or "|".join(os.environ.get(name, "") for name in ENDPOINT_VARIABLES)
    account = getattr(fs, "account_name", None) or ""
    options = fsspec.utils.tokenize(storage.storage_options)
    return (storage.protocol, str(where), str(account), storage.root.split("/", 1)[0], options)


def check_reachable(storage: Storage, timeout: float | None = None) -> None:
    """See :meth:`Storage.check_reachable`."""
    if storage.is_local:
        return
    key = store_key(storage)
    if key in _REACHED:
        return
    limit = timeout if timeout is not None else float(os.environ.get(TIMEOUT_ENV) or DEFAULT_CONNECT_TIMEOUT)
    outcome: list[BaseException | None] = []
    url = endpoint(storage.fs)

    def reach() -> None:
        try:
            host = urlsplit(url).hostname
            if host:
                socket.getaddrinfo(host, None)
            found = storage.fs.exists(storage.root)
            if not found and storage.container and _container_missing(storage):  # not merely a new output
                outcome.append(FileNotFoundError(storage.container))
                return
            outcome.append(None)
        except BaseException as exc:  # handed to the caller's thread
            outcome.append(exc)

    worker = threading.Thread(target=reach, name=f"parquet-sink-reach-{storage.protocol}", daemon=True)
    worker.start()
    worker.join(limit)
    where = storage.display(storage.root)
    if not outcome:
        if _accepts_connections(url) and (tls := _tls_failure(url)):  # the SDKs retry it until the wait ends
            raise StorageError(
                f"cannot reach {where}: no answer from the store within {limit:g} s, and a TLS handshake with its "
                f"endpoint ({storage.redact(url)}) fails ({tls}): check that the endpoint speaks https (an emulator "
                "or MinIO often speaks http://), and its certificate (a CA bundle in storage_options)."
            )
        if _accepts_connections(url):
            raise RetryableStorageError(
                f"cannot reach {where}: no answer from the store within {limit:g} s, though its endpoint "
                f"({storage.redact(url)}) accepts connections: the store is slow or overloaded. Retry, or wait "
                f"longer with ${TIMEOUT_ENV}."
            )
        raise StorageError(
            f"cannot reach {where}: no answer from the store within {limit:g} s. Check the account name or "
            f"endpoint{' (' + storage.redact(url) + ')' if url else ''}, the "
            f"credentials in storage_options, the network (proxy, firewall, DNS) and that the store is up; "
            f"${TIMEOUT_ENV} sets the wait."
        )
    failure = outcome[0]
    if failure is not None:
        if isinstance(failure, socket.gaierror):
            raise StorageError(
                f"cannot reach {where}: the store's host name {urlsplit(url).hostname!r} does not "
                f"resolve ({failure}). Check the account name or endpoint in the URL and storage_options."
            ) from failure
        if isinstance(failure, FileNotFoundError):  # its bucket or container
            kind = "bucket" if storage.protocol == "s3" else "container"
            raise StorageError(
                f"cannot reach {where}: its {kind} {storage.container!r} does not exist (or these credentials cannot "
                f"see it). Create the {kind}, or check its name in the URL and the credentials in storage_options."
            )
        with storage.translating("the reachability check", storage.root):
            raise failure
    _REACHED.add(key)
