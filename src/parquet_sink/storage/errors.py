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
from dataclasses import dataclass
from typing import IO, Any, TypeVar

from ..errors import ParquetSinkError, RetryableStorageError, StorageError
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
_CUT_SHORT = {  # an answer whose body ended early (a truncated read)
    "IncompleteRead",  # http.client, urllib3
    "IncompleteReadError",  # azure-core, botocore
    "ResponseStreamingError",  # botocore
    "ClientPayloadError",  # aiohttp
    "ProtocolError",  # urllib3
}
_MISSING_CREDENTIALS = {  # botocore, azure-identity: nothing to authenticate with
    "NoCredentialsError",
    "PartialCredentialsError",
    "CredentialRetrievalError",
    "CredentialUnavailableError",
}
_AUTH_ERRORS = {"ClientAuthenticationError"}  # azure-core (botocore's are HTTP 403 answers)
_FAILING_STATUS = {408, 429, 500, 502, 503, 504}  # the store throttles, times out or fails: retry
_FAILING_CODES = {  # the same said by an S3 or Azure error code, whatever the status
    "SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling", "ServerBusy", "OperationTimedOut",
}
# What s3fs makes of an S3 error code: SlowDown, ServiceUnavailable (EBUSY), InternalError (EREMOTEIO).
_FAILING_ERRNO = {errno.EBUSY, errno.EREMOTEIO, errno.ETIMEDOUT, errno.ECONNRESET, errno.ECONNABORTED, errno.EPIPE}
RETRY_ADVICE = "the same call again (the same batch, read or vacuum) is safe: a batch is committed once"


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _error_code(exc: BaseException) -> str:
    """The store's error code: botocore's ``Error.Code``, azure-core's ``error_code`` (azure-storage's a
    ``StorageErrorCode`` enum, whose ``str`` is its name: its value is the code); "" when none."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code") or "")
    code = getattr(exc, "error_code", None)
    return str(getattr(code, "value", code) or "")


def _http_status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)  # azure-core's HttpResponseError
    response = getattr(exc, "response", None)
    if status is None and isinstance(response, dict):  # botocore's ClientError
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status if isinstance(status, int) else None


@dataclass(frozen=True)
class Diagnosis:
    """What failed, in plain words, and what to do; ``retryable`` when the same call again may succeed."""

    text: str
    retryable: bool = False


def explain(exc: BaseException, is_local: bool) -> Diagnosis:
    """What failed and what to do, from the exception's type, errno or HTTP status, looking through the chain of
    causes (backends wrap the operating system's and the SDKs' errors). An HTTP status anywhere in the chain
    outranks what a wrapper made of it: s3fs turns a "SlowDown" code into EBUSY whatever the status was."""
    answered = next(filter(None, map(_http_status, _causes(exc))), None)
    for cause in _causes(exc):
        names = {klass.__name__ for klass in type(cause).__mro__}
        code = cause.errno if isinstance(cause, OSError) else None
        status = _http_status(cause)
        if code in (errno.ENOSPC, errno.EDQUOT):
            return Diagnosis("no space left on the storage (disk full or quota exceeded); free space or raise the quota, retry")
        if code in (errno.EMFILE, errno.ENFILE):
            return Diagnosis(
                "too many open files (the process's or the system's limit); raise the limit (`ulimit -n`, the "
                "executors' nofile limit) or run fewer tasks per executor, then retry"
            )
        if code == errno.EROFS:
            return Diagnosis("the file system is read-only; write the output to a writable location")
        if names & _MISSING_CREDENTIALS:
            return Diagnosis(
                "no credentials for the store were found; pass them in storage_options (S3: key and secret; Azure: "
                "account_key, sas_token or a connection_string) or set them in the environment"
            )
        if names & _AUTH_ERRORS or answered in (401, 403) or isinstance(cause, PermissionError):
            if is_local:
                return Diagnosis("permission denied; check the permissions of the directory for the user running the job")
            return Diagnosis(
                "access denied by the store; check that the credentials in storage_options (or the environment) "
                "are valid, not expired, and allowed to read and write this location"
            )
        if status in _FAILING_STATUS or _error_code(cause) in _FAILING_CODES or (not is_local and code in _FAILING_ERRNO):
            answer = f" (HTTP {answered})" if answered else ""
            return Diagnosis(f"the store is throttling or failing{answer}: retry; {RETRY_ADVICE}", retryable=True)
        if names & _CUT_SHORT:
            return Diagnosis(f"the store's answer was cut short: retry; {RETRY_ADVICE}", retryable=True)
        if names & _NETWORK_ERRORS or isinstance(cause, (ConnectionError, TimeoutError)):
            timed_out = any(isinstance(c, TimeoutError) or "Timeout" in type(c).__name__ for c in _causes(exc))
            refused = any(isinstance(c, ConnectionRefusedError) for c in _causes(exc))
            kind = "timed out" if timed_out else "was refused" if refused else "failed"
            return Diagnosis(
                f"the connection to the store {kind}; check the endpoint or account name, the network (proxy, "
                "firewall, DNS) and that the store is up, then retry",
                retryable=not refused,
            )
        if _error_code(cause) in ("InvalidResourceName", "InvalidBucketName"):
            return Diagnosis(
                "the store refuses a name in the path; check the URL (a bucket or container name is 3-63 lowercase "
                "letters, digits and hyphens)"
            )
        if isinstance(cause, ValueError) and str(cause).startswith("Invalid endpoint"):  # botocore
            return Diagnosis(
                "the store's endpoint is not a URL; give endpoint_url in storage_options with its scheme, as "
                "http://host:port or https://host"
            )
        if isinstance(cause, TypeError) and "unexpected keyword argument" in str(cause):
            return Diagnosis(
                "the storage backend does not accept an option of storage_options; check their names against "
                "the backend's documentation (s3fs, adlfs, gcsfs)"
            )
    return Diagnosis("check that the location exists and is reachable")


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

    def error(self, what: str, shown: str, exc: BaseException) -> StorageError:
        """The StorageError (a :class:`RetryableStorageError` where retrying is right) saying ``what`` failed on
        ``shown`` (the path as the user writes it) because of ``exc``, and what to do."""
        first_line = next(iter(str(exc).strip().splitlines()), "")  # Azure appends the whole XML answer
        detail = self.redact(f"{type(exc).__name__}: {first_line}")[:300]
        diagnosis = explain(exc, self.is_local)
        kind = RetryableStorageError if diagnosis.retryable else StorageError
        return kind(f"{what} of {shown} failed: {diagnosis.text} ({detail})")

    @contextlib.contextmanager
    def translating(self, what: str, shown: str) -> Iterator[None]:
        """A backend failure inside the block becomes :meth:`error`; :data:`PASS_THROUGH` errors pass unchanged, and a
        path whose parent is a file does not exist (FileNotFoundError, as ``os.path.exists`` answers)."""
        try:
            yield
        except PASS_THROUGH:
            raise
        except NotADirectoryError as exc:  # a path under a file (an output path given as a file's): it does not exist
            raise FileNotFoundError(f"{shown}: a parent of it is a file") from exc
        except Exception as exc:
            raise self.error(what, shown, exc) from exc


class TranslatedFile:
    """A file object a backend opened, whose reads, writes, seeks and close (an object store's upload happens
    there) raise translated errors (:meth:`ErrorTranslator.error`) instead of the backend's own.

    Example: ``with TranslatedFile(fs.open(path), translator, "s3://b/x") as fh: fh.read()``.
    """

    def __init__(self, handle: IO[bytes], translator: ErrorTranslator, shown: str) -> None:
        self.handle = handle
        self.translator = translator
        self.shown = shown

    def _call(self, what: str, method: Callable[..., Any], *args: Any) -> Any:
        try:
            return method(*args)
        except PASS_THROUGH:
            raise
        except Exception as exc:
            raise self.translator.error(what, self.shown, exc) from exc

    def read(self, *size: int) -> bytes:
        return self._call("reading", self.handle.read, *size)

    def readinto(self, buffer: Any) -> int:
        return self._call("reading", self.handle.readinto, buffer)

    def readline(self, *size: int) -> bytes:
        return self._call("reading", self.handle.readline, *size)

    def seek(self, *where: int) -> int:
        return self._call("reading", self.handle.seek, *where)

    def tell(self) -> int:
        return self.handle.tell()

    def write(self, data: Any) -> int:
        return self._call("writing", self.handle.write, data)

    def flush(self) -> None:
        self._call("writing", self.handle.flush)

    def close(self) -> None:
        self._call("writing" if "w" in getattr(self.handle, "mode", "") else "closing", self.handle.close)

    @property
    def closed(self) -> bool:
        return bool(self.handle.closed)

    def __getattr__(self, name: str) -> Any:  # mode, size, readable(), seekable(), ...
        return getattr(self.handle, name)

    def __enter__(self) -> TranslatedFile:
        return self

    def __exit__(self, kind: Any, *rest: Any) -> None:
        if kind is None:
            self.close()
            return
        try:  # the block failed: close as the backend's own file would, without masking the failure
            self.handle.close()
        except Exception:
            pass


def backend_errors(method: F) -> F:
    """A :class:`~parquet_sink.storage.filesystem.Storage` method whose backend failures on its first
    argument (a path) are translated (:meth:`Storage.translating`)."""

    @functools.wraps(method)
    def wrapper(self: Any, path: str, *args: Any, **kwargs: Any) -> Any:
        with self.translating(method.__name__, path):
            return method(self, path, *args, **kwargs)

    return wrapper  # type: ignore[return-value]
