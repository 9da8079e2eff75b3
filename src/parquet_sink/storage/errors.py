"""Error translation: a backend's own failures (full disk, file limits, permissions, network, authentication)
become a :class:`~parquet_sink.errors.StorageError` that names the path, what failed and what to do, without
the credentials of ``storage_options``.

The counterpart of the ``IOException`` translation in Hadoop's S3A (``S3AUtils.translateException``) and ABFS
connectors, which Spark's ``CheckpointFileManager`` sees instead of the SDKs' own exceptions.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from ..errors import ParquetSinkError, StorageError
from ..failpoints import FailpointError

# Callers rely on these: a missing file, an existing one, the package's own errors, an injected crash.
PASS_THROUGH = (FileNotFoundError, FileExistsError, ParquetSinkError, FailpointError)
F = TypeVar("F", bound=Callable[..., Any])

_SECRET_KEYS = re.compile(r"(?i)key|secret|token|password|credential|connection_string|signature")
_SECRET_PARAMS = re.compile(  # in URLs and connection strings
    r"(?i)\b(sig|signature|accountkey|sharedaccesssignature|x-amz-signature|x-amz-credential)=[^&;\s\"']+"
)
_NETWORK_ERRORS = {  # by class name, so that no optional backend package must be imported to recognise them
    "ServiceRequestError",  # azure-core: the request never got an answer (refused, DNS, TLS, timeout)
    "ServiceResponseError",  # azure-core: the connection broke while reading the answer
    "EndpointConnectionError",  # botocore
    "ConnectTimeoutError",  # botocore
    "ReadTimeoutError",  # botocore
    "ClientConnectionError",  # aiohttp
    "ServerTimeoutError",  # aiohttp
}
_AUTH_ERRORS = {  # azure-core, botocore
    "ClientAuthenticationError",
    "NoCredentialsError",
    "PartialCredentialsError",
    "CredentialRetrievalError",
}


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _http_status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)  # azure-core's HttpResponseError
    response = getattr(exc, "response", None)
    if status is None and isinstance(response, dict):  # botocore's ClientError
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status if isinstance(status, int) else None


def explain(exc: BaseException, is_local: bool) -> str:
    """What failed, in plain words, and what to do: from the exception's type, errno or HTTP status,
    looking through the chain of causes (backends wrap the operating system's errors)."""
    for cause in _causes(exc):
        names = {klass.__name__ for klass in type(cause).__mro__}
        code = cause.errno if isinstance(cause, OSError) else None
        status = _http_status(cause)
        if code in (errno.ENOSPC, errno.EDQUOT):
            return "no space left on the storage (disk full or quota exceeded); free space or raise the quota, retry"
        if code in (errno.EMFILE, errno.ENFILE):
            return (
                "too many open files (the process's or the system's limit); raise the limit (`ulimit -n`, the "
                "executors' nofile limit) or run fewer tasks per executor, then retry"
            )
        if code == errno.EROFS:
            return "the file system is read-only; write the output to a writable location"
        if names & _AUTH_ERRORS or status in (401, 403) or isinstance(cause, PermissionError):
            if is_local:
                return "permission denied; check the permissions of the directory for the user running the job"
            return (
                "access denied by the store; check that the credentials in storage_options (or the environment) "
                "are valid, not expired, and allowed to read and write this location"
            )
        if names & _NETWORK_ERRORS or isinstance(cause, (ConnectionError, TimeoutError)):
            timed_out = any(isinstance(c, TimeoutError) or "Timeout" in type(c).__name__ for c in _causes(exc))
            kind = "timed out" if timed_out else "failed"
            return (
                f"the connection to the store {kind}; check the endpoint or account name, the network (proxy, "
                "firewall, DNS) and that the store is up, then retry"
            )
    return "check that the location exists and is reachable"


class ErrorTranslator:
    """Turns backend failures on one store into StorageErrors whose messages hold no secret of its
    ``storage_options`` (keys, tokens, passwords, connection strings and the account keys inside them) nor
    any URL signature.

    Example::

        >>> with ErrorTranslator({"secret": "s3cr3t"}, is_local=False).translating("reading", "s3://b/x"):
        ...     raise OSError("denied with s3cr3t")
        StorageError: reading of s3://b/x failed: ... (OSError: denied with ***)
    """

    def __init__(self, storage_options: Mapping[str, Any], is_local: bool) -> None:
        self.storage_options = storage_options
        self.is_local = is_local

    def redact(self, text: str) -> str:
        """``text`` without the secrets of ``storage_options`` nor any URL signature."""
        pairs: list[tuple[str, Any]] = list(self.storage_options.items())
        while pairs:
            key, value = pairs.pop()
            if isinstance(value, dict):
                pairs.extend(value.items())
            elif isinstance(value, str) and len(value) >= 4 and _SECRET_KEYS.search(key):
                text = text.replace(value, "***")
                pairs.extend(part.partition("=")[::2] for part in value.split(";") if "=" in part)
        return _SECRET_PARAMS.sub(r"\1=***", text)

    @contextlib.contextmanager
    def translating(self, what: str, shown: str) -> Iterator[None]:
        """A backend failure inside the block becomes a StorageError saying ``what`` failed on ``shown`` (the
        path as the user writes it) and what to do; :data:`PASS_THROUGH` errors pass unchanged."""
        try:
            yield
        except PASS_THROUGH:
            raise
        except Exception as exc:
            first_line = next(iter(str(exc).strip().splitlines()), "")  # Azure appends the whole XML answer
            detail = self.redact(f"{type(exc).__name__}: {first_line}")[:300]
            raise StorageError(f"{what} of {shown} failed: {explain(exc, self.is_local)} ({detail})") from exc


def backend_errors(method: F) -> F:
    """A :class:`~parquet_sink.storage.filesystem.Storage` method whose backend failures on its first
    argument (a path) are translated (:meth:`Storage.translating`)."""

    @functools.wraps(method)
    def wrapper(self: Any, path: str, *args: Any, **kwargs: Any) -> Any:
        with self.translating(method.__name__, path):
            return method(self, path, *args, **kwargs)

    return wrapper  # type: ignore[return-value]
