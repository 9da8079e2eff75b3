"""The storage layer: the only module that knows how fsspec backends differ.

Everything above it (the log, the sink, the reader) talks to a :class:`Storage` and never asks which
backend it is. A backend contributes three things:

* exclusive create (``put_if_absent``): local disk uses temp file + ``os.link``; object stores use
  ``pipe_file(mode="create")`` (a conditional PUT) with a read-back for lost acknowledgements;
* the modification time, normalised to epoch milliseconds;
* the Hadoop URI Spark writes into ``_spark_metadata`` for the same file, and back.

Example::

    >>> st = Storage("/tmp/out")
    >>> st.put_if_absent(st.join("_spark_metadata", "0"), b"v1")
    True
    >>> st.to_uri(st.join("a b", "x.parquet"))
    'file:///tmp/out/a%20b/x.parquet'
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import functools
import logging
import os
import posixpath
import re
import socket
import sys
import threading
import time
import unicodedata
import uuid
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any, TypeVar
from urllib.parse import quote, unquote, urlsplit

import fsspec
import pyarrow
import pyarrow.fs
from fsspec.implementations.local import LocalFileSystem

from ..errors import ParquetSinkError, StorageError, UnsafeStorageError
from ..failpoints import FailpointError, failpoint

logger = logging.getLogger(__name__)

# Characters java.net.URI leaves unquoted in a path (unreserved, punct, '/', '@'); Hadoop's
# Path.toUri quotes everything else that is ASCII. Non-ASCII printable characters stay as they are.
_URI_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-!.~'()*,;:$&+=/@")
_HADOOP_SCHEMES = {"s3": "s3a", "abfs": "abfss", "az": "abfss", "gs": "gs", "gcs": "gs"}
_FSSPEC_SCHEMES = {"s3a": "s3", "s3n": "s3", "abfss": "abfs", "wasbs": "abfs", "wasb": "abfs", "gcs": "gs"}
_MTIME_KEYS = ("mtime", "LastModified", "last_modified", "updated", "created", "timeCreated")
_PROBED: dict[tuple[str, ...], bool] = {}  # by _store_key()
# The environment variables botocore reads an S3 endpoint from (part of what selects the store).
_ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
# s3fs's pipe_file switches to a multipart upload, whose completion carries no If-None-Match, from twice
# its chunk size on: a log file is written with a chunk size above its own size, as one PutObject (the
# request the probe proved exclusive), which S3 allows up to 5 GiB.
_S3_MIN_CHUNK = 50 * 2**20
_S3_MAX_PUT = 5 * 2**30
# The first release of each package whose pipe_file(mode="create") really is exclusive (the floors in
# pyproject.toml); older ones overwrite (fsspec's memory/base, adlfs) or reject the argument (s3fs).
_EXCLUSIVE_CREATE_SINCE = {"fsspec": "2024.12.0", "adlfs": "2024.12.0", "s3fs": "2024.12.0"}
_SECRET_KEYS = re.compile(r"(?i)key|secret|token|password|credential|connection_string|signature")
_SECRET_PARAMS = re.compile(  # in URLs and connection strings
    r"(?i)\b(sig|signature|accountkey|sharedaccesssignature|x-amz-signature|x-amz-credential)=[^&;\s\"']+"
)
_PROBE_LOCK = threading.Lock()
_REACHED: set[tuple[str, ...]] = set()  # by _store_key(): stores this process has reached
TIMEOUT_ENV = "PARQUET_SINK_CONNECT_TIMEOUT"
DEFAULT_CONNECT_TIMEOUT = 10.0  # seconds: adlfs retries a wrong account name for ~85 s before failing


_PASS_THROUGH = (FileNotFoundError, FileExistsError, ParquetSinkError, FailpointError)
F = TypeVar("F", bound=Callable[..., Any])


def _backend_errors(method: F) -> F:
    """Turn a backend's own failures (full disk, file limits, permissions, network, authentication) into a
    StorageError naming the path, what failed and what to do; FileNotFoundError/FileExistsError pass
    through, callers rely on them."""

    @functools.wraps(method)
    def wrapper(self: Storage, path: str, *args: Any, **kwargs: Any) -> Any:
        with self.translating(method.__name__, path):
            return method(self, path, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


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


def _explain(exc: BaseException, is_local: bool) -> str:
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


_S3_KEYS = {"key": "aws_access_key_id", "secret": "aws_secret_access_key", "token": "aws_session_token"}
_AZURE_KEYS = {"account_name": "azure_storage_account_name", "account_key": "azure_storage_account_key",
               "sas_token": "azure_storage_sas_token"}
# connection string fields -> adlfs's option names
_CONNECTION_FIELDS = {"accountname": "account_name", "accountkey": "account_key",
                      "sharedaccesssignature": "sas_token", "blobendpoint": "blob_endpoint"}


def _object_store_azure_options(given: Mapping[str, Any]) -> dict[str, str]:
    """adlfs's options (``account_name``, ``account_key``, ``sas_token``, a ``connection_string`` naming them and
    a ``BlobEndpoint``, ``anon``) as delta-rs's ``azure_*`` options."""
    fields = dict(given)
    for part in str(given.get("connection_string") or "").split(";"):
        key, _, value = part.partition("=")
        if key.strip().lower() in _CONNECTION_FIELDS:
            fields.setdefault(_CONNECTION_FIELDS[key.strip().lower()], value.strip())
    options = {_AZURE_KEYS[k]: str(v) for k, v in fields.items() if k in _AZURE_KEYS and v}
    if fields.get("blob_endpoint"):  # an emulator or a private endpoint
        options["azure_storage_endpoint"] = str(fields["blob_endpoint"])
        if str(fields["blob_endpoint"]).startswith("http://"):
            options["azure_allow_http"] = "true"
    if fields.get("anon"):
        options["azure_skip_signature"] = "true"
    return options


@dataclass(frozen=True)
class FileInfo:
    """What the log needs to know about one stored object."""

    path: str  # fsspec path, without protocol
    size: int
    is_dir: bool
    mtime_ms: int


def _release(version: str) -> tuple[int, ...]:
    """The leading numbers of a version string: ``"2024.12.0"`` -> ``(2024, 12, 0)``."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


def _java_uri_other(c: str) -> bool:
    """A non-ASCII character ``java.net.URI`` leaves as it is: neither ``Character.isSpaceChar`` (Unicode
    categories Zs, Zl, Zp) nor ``Character.isISOControl`` (U+0080-U+009F); unassigned, format and
    private-use characters included."""
    return ord(c) > 0x9F and unicodedata.category(c) not in ("Zs", "Zl", "Zp")


def _quote_path(path: str) -> str:
    """Percent-encode a path the way Hadoop's ``Path.toUri().toString()`` does."""
    return "".join(c if c in _URI_SAFE or _java_uri_other(c) else quote(c, safe="") for c in path)


def _to_epoch_ms(value: Any) -> int:
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        return int(value.timestamp() * 1000)
    if isinstance(value, (int, float)):
        return int(float(value) * 1000)
    if isinstance(value, str):
        return _to_epoch_ms(_dt.datetime.fromisoformat(value.replace("Z", "+00:00")))
    raise TypeError(f"unrecognised modification time {value!r}")


@contextlib.contextmanager
def _local_temp(path: str, data: bytes | memoryview | Iterable[bytes], durable: bool) -> Iterator[str]:
    """A temporary file next to ``path`` holding ``data`` (fsynced if ``durable``), removed on the way
    out: the caller links or renames it into place. Its name (``.<name>.<uuid>.tmp``) is one Spark's log
    ignores and log cleanup removes."""
    directory, name = os.path.split(path)
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as fh:
            for chunk in [data] if isinstance(data, (bytes, memoryview)) else data:
                fh.write(chunk)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        yield tmp
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


class _FetchedFiles(pyarrow.fs.FileSystemHandler):
    """A read-only pyarrow filesystem over files already fetched into memory (:meth:`Storage.fetched`)."""

    def __init__(self, contents: dict[str, bytes]) -> None:
        self.contents = contents

    def get_type_name(self) -> str:
        return "parquet-sink-fetched"

    def normalize_path(self, path: str) -> str:
        return path

    def _info(self, path: str) -> pyarrow.fs.FileInfo:
        if path in self.contents:
            return pyarrow.fs.FileInfo(path, pyarrow.fs.FileType.File, size=len(self.contents[path]))
        return pyarrow.fs.FileInfo(path, pyarrow.fs.FileType.NotFound)

    def get_file_info(self, paths: list[str]) -> list[pyarrow.fs.FileInfo]:
        return [self._info(p) for p in paths]

    def get_file_info_selector(self, selector: pyarrow.fs.FileSelector) -> list[pyarrow.fs.FileInfo]:
        prefix = selector.base_dir.rstrip("/") + "/"
        return [self._info(p) for p in self.contents if p.startswith(prefix)]

    def open_input_file(self, path: str) -> pyarrow.NativeFile:
        if path not in self.contents:
            raise FileNotFoundError(path)
        return pyarrow.BufferReader(self.contents[path])

    def open_input_stream(self, path: str) -> pyarrow.NativeFile:
        return self.open_input_file(path)

    def _read_only(self, *args: Any) -> None:
        raise OSError("fetched files are read-only")

    create_dir = delete_dir = delete_dir_contents = delete_root_dir_contents = delete_file = _read_only
    move = copy_file = open_output_stream = open_append_stream = _read_only


class Storage:
    """A filesystem rooted at one fsspec URL (local path, ``file://``, ``memory://``, ``abfs://``,
    ``az://``, ``s3://``, ``gs://``, ...), with the few operations exactly-once needs.

    Picklable: executors rebuild the filesystem from the URL and ``storage_options``. The options (which
    hold credentials) never appear in ``repr``, logs or errors.

    Example::

        >>> st = Storage("s3://bucket/out", {"key": "...", "secret": "..."})
        >>> st.root, st.protocol
        ('bucket/out', 's3')
    """

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        self.url = str(url)
        self.storage_options = dict(storage_options or {})
        try:
            # No listings cache: a listing cached by this process (or by the user's filesystem with the same
            # options, which fsspec would share with us) would hide files other processes committed since.
            fs, root = fsspec.core.url_to_fs(self.url, **{**self.storage_options, "use_listings_cache": False})
        except (ImportError, ValueError) as exc:
            raise StorageError(
                f"cannot open storage for {self.url}: {exc}. Install the fsspec backend for this scheme "
                "(e.g. `pip install parquet-sink[azure]` or `[s3]`) and check storage_options."
            ) from exc
        self.fs: fsspec.AbstractFileSystem = fs
        self.is_local = isinstance(fs, LocalFileSystem)
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        self.protocol = "file" if self.is_local else protocol
        self.root = fs._strip_protocol(root).rstrip("/") or "/"
        if self.is_local:
            # Resolved here, on the driver: executors rebuild the storage from the URL, and a relative
            # path would land in each executor's own working directory.
            self.url = self.root

    def __reduce__(self) -> tuple[Any, ...]:
        return (Storage, (self.url, self.storage_options))

    def __repr__(self) -> str:
        return f"Storage({self.url!r})"

    @contextlib.contextmanager
    def translating(self, what: str, path: str) -> Iterator[None]:
        """Turn a backend failure inside the block (full disk, permissions, network...) into a StorageError
        naming ``what`` failed on ``path`` and what to do; FileNotFoundError/FileExistsError pass through.
        Every storage method runs in one; callers wrap what they do with a file object the storage opened
        (its writes and its close).

        Example::

            >>> with st.translating("writing", path):
            ...     fh.write(data); fh.close()
        """
        try:
            yield
        except _PASS_THROUGH:
            raise
        except Exception as exc:
            first_line = next(iter(str(exc).strip().splitlines()), "")  # Azure appends the whole XML answer
            detail = self.redact(f"{type(exc).__name__}: {first_line}")[:300]
            raise StorageError(
                f"{what} of {self.display(path)} failed: {_explain(exc, self.is_local)} ({detail})"
            ) from exc

    # -- paths ---------------------------------------------------------------------------------

    def join(self, *parts: str) -> str:
        """Join path segments under the root: ``st.join("_spark_metadata", "3")``."""
        return posixpath.join(self.root, *parts)

    def redact(self, text: str) -> str:
        """``text`` without the secrets of ``storage_options`` (keys, tokens, passwords, connection
        strings and the account keys inside them) nor any URL signature."""
        pairs: list[tuple[str, Any]] = list(self.storage_options.items())
        while pairs:
            key, value = pairs.pop()
            if isinstance(value, dict):
                pairs.extend(value.items())
            elif isinstance(value, str) and len(value) >= 4 and _SECRET_KEYS.search(key):
                text = text.replace(value, "***")
                pairs.extend(part.partition("=")[::2] for part in value.split(";") if "=" in part)
        return _SECRET_PARAMS.sub(r"\1=***", text)

    def display(self, path: str) -> str:
        """A path as the user would write it (with protocol), for messages."""
        return path if self.is_local else f"{self.protocol}://{path}"

    def object_store_location(self) -> tuple[str, dict[str, str] | None]:
        """The URI and options a Rust ``object_store`` client (delta-rs) opens this storage with: s3fs's options
        (``key``, ``secret``, ``token``, ``endpoint_url`` and ``region_name``, also under ``client_kwargs``, ``anon``)
        become delta-rs's
        ``aws_*`` options, with conditional put (``If-None-Match``, which the sink's storage probe requires) for
        its commits; adlfs's (``account_name``, ``account_key``, ``sas_token``, ``connection_string``) its
        ``azure_*`` options; other stores get their string options as they are.

        Example: ``Storage("s3://bucket/out", {"key": "K", "secret": "S"}).object_store_location()`` ->
        ``('s3://bucket/out', {'aws_access_key_id': 'K', 'aws_secret_access_key': 'S', 'aws_conditional_put': 'etag'})``.
        """
        if self.is_local:
            return self.root, None
        given = self.storage_options
        if self.protocol in ("s3", "s3a"):
            options = {_S3_KEYS[k]: str(v) for k, v in given.items() if k in _S3_KEYS}
            client = {**given.get("client_kwargs", {}), **{k: given[k] for k in ("endpoint_url", "region_name") if k in given}}
            if client.get("endpoint_url"):
                options["aws_endpoint_url"] = client["endpoint_url"]
                if client["endpoint_url"].startswith("http://"):
                    options["aws_allow_http"] = "true"
            if client.get("region_name"):
                options["aws_region"] = client["region_name"]
            if given.get("anon"):
                options["aws_skip_signature"] = "true"
            options["aws_conditional_put"] = "etag"
            return f"s3://{self.root}", options
        if self.protocol in ("abfs", "abfss", "az"):
            return f"az://{self.root}", _object_store_azure_options(given)
        options = {k: str(v) for k, v in given.items() if isinstance(v, (str, int, bool))}
        return self.url, options or None

    def _account_name(self) -> str:
        name = self.storage_options.get("account_name") or getattr(self.fs, "account_name", None)
        if not name:
            for part in str(self.storage_options.get("connection_string", "")).split(";"):
                key, _, value = part.partition("=")
                if key.strip().lower() == "accountname":
                    name = value.strip()
        if not name:
            raise StorageError(
                f"cannot build the abfss:// URI for {self.url}: no account name. Pass "
                "storage_options={'account_name': ...} (or a connection string that names the account)."
            )
        return name

    def to_uri(self, path: str) -> str:
        """The fully qualified Hadoop URI Spark writes into the log for ``path`` (percent-encoded).

        Example: ``/tmp/out/k=c%3Ad/f.parquet`` -> ``file:///tmp/out/k=c%253Ad/f.parquet``.
        """
        return self.to_hadoop_path(path, encode=True)

    def to_hadoop_path(self, path: str, encode: bool = False) -> str:
        """The Hadoop path string for ``path`` as Spark's readers take it (``spark.read.parquet``):
        the same as :meth:`to_uri` but not percent-encoded, unless ``encode``."""
        quoted = _quote_path if encode else str
        if self.is_local:
            return "file://" + quoted(path)
        scheme = _HADOOP_SCHEMES.get(self.protocol, self.protocol)
        if scheme == "abfss":
            container, _, key = path.partition("/")
            return f"abfss://{container}@{self._account_name()}.dfs.core.windows.net/{quoted(key)}"
        if self.protocol == "memory":
            return "memory://" + quoted(path)
        return f"{scheme}://{quoted(path)}"

    def from_uri(self, uri: str) -> str:
        """The fsspec path (no protocol) for a Hadoop URI found in a log; inverse of :meth:`to_uri`.

        A URI of another scheme than this storage's is returned with its scheme, so the caller can see
        it is outside the root.
        """
        parts = urlsplit(uri)
        scheme = _FSSPEC_SCHEMES.get(parts.scheme, parts.scheme)
        path = unquote(parts.path)
        if scheme in ("", "file"):
            return path if self.is_local else uri
        if scheme != self.protocol and not (scheme == "abfs" and self.protocol in ("abfs", "az")):
            return uri
        if scheme == "abfs":
            container = parts.netloc.split("@", 1)[0]
            return f"{container}{path}"
        if scheme == "memory":
            return path
        return f"{parts.netloc}{path}"

    # -- reads ---------------------------------------------------------------------------------

    def _file_info(self, raw: dict[str, Any]) -> FileInfo:
        is_dir = raw.get("type") == "directory"
        mtime = next((raw[k] for k in _MTIME_KEYS if raw.get(k) is not None), None)
        if mtime is None:
            mtime_ms = 0 if is_dir else _to_epoch_ms(self.fs.modified(raw["name"]))
        else:
            mtime_ms = _to_epoch_ms(mtime)
        return FileInfo(self.fs._strip_protocol(raw["name"]), int(raw.get("size") or 0), is_dir, mtime_ms)

    @_backend_errors
    def info(self, path: str) -> FileInfo:
        """Size, kind and modification time (epoch ms) of ``path``; FileNotFoundError if absent."""
        self.fs.invalidate_cache(path)
        return self._file_info(self.fs.info(path))

    @_backend_errors
    def exists(self, path: str) -> bool:
        self.fs.invalidate_cache(path)
        return bool(self.fs.exists(path))

    @_backend_errors
    def ls(self, path: str) -> list[FileInfo]:
        """Direct children of ``path`` (fresh, never from a listing cache); empty if it does not exist."""
        self.fs.invalidate_cache(path)
        try:
            return [self._file_info(raw) for raw in self.fs.ls(path, detail=True)]
        except FileNotFoundError:
            return []

    @_backend_errors
    def ls_names(self, path: str) -> list[str]:
        """Paths (no protocol) of the direct children of ``path``, fresh, without a per-file stat (local
        ``ls(detail=True)`` stats every file); empty if ``path`` does not exist.

        Example: ``st.ls_names(st.join("_spark_metadata"))`` -> ``['/tmp/out/_spark_metadata/0', ...]``.
        """
        self.fs.invalidate_cache(path)
        if self.is_local:
            try:
                return [posixpath.join(path, name) for name in os.listdir(path)]
            except (FileNotFoundError, NotADirectoryError):
                return []
        try:
            return [self.fs._strip_protocol(name).rstrip("/") for name in self.fs.ls(path, detail=False)]
        except FileNotFoundError:
            return []

    @_backend_errors
    def find(self, path: str) -> list[FileInfo]:
        """Every file below ``path`` (recursive), fresh."""
        self.fs.invalidate_cache(path)
        return [self._file_info(raw) for raw in self.fs.find(path, detail=True).values()]

    def missing(self, paths: list[str]) -> list[str]:
        """Those of ``paths`` that do not exist (checked in parallel: one request each on object stores).

        Example: ``st.missing(["/tmp/out/part-0.parquet"])`` -> ``[]``.
        """
        if self.is_local:  # a stat each: threads would cost more than they save
            return [p for p in paths if not os.path.exists(p)]
        with ThreadPoolExecutor(16) as pool:
            return [p for p, present in zip(paths, pool.map(self.exists, paths)) if not present]

    @_backend_errors
    def read_bytes(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        """The bytes of ``path`` (``start``/``end``: only that range, one ranged request on object stores)."""
        self.fs.invalidate_cache(path)
        return self.fs.cat_file(path, start=start, end=end)

    @_backend_errors
    def open(self, path: str, mode: str = "rb", **kwargs: Any) -> IO[bytes]:
        """Open for reading, or for writing a data file (parent directories created where needed)."""
        if "w" in mode and self.is_local:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        return self.fs.open(path, mode, **kwargs)

    @_backend_errors
    def delete(self, path: str) -> None:
        """Delete one file; a file already gone is not an error."""
        try:
            self.fs.rm_file(path)
        except FileNotFoundError:
            pass

    def sync_files(self, paths: list[str]) -> None:
        """Make written data files durable before they are committed: on local disk, fsync each file, then
        each directory between them and the root (so new ``k=v`` directories are durable too). On object
        stores a completed upload is already durable: nothing to do.

        Example::

            >>> st.sync_files(["/tmp/out/k=1/part-00000-....snappy.parquet"])
        """
        if not self.is_local:
            return
        directories = set()
        for path in paths:
            self.fsync(path)
            directory = os.path.dirname(path)
            while directory.startswith(self.root) and directory not in directories:
                directories.add(directory)
                directory = os.path.dirname(directory)
        for directory in sorted(directories, key=len, reverse=True):
            self.fsync(directory)

    def arrow_filesystem(self) -> pyarrow.fs.FileSystem:
        """A pyarrow filesystem reading this storage's paths (native for local disk, else via fsspec)."""
        if self.is_local:
            return pyarrow.fs.LocalFileSystem()
        return pyarrow.fs.PyFileSystem(pyarrow.fs.FSSpecHandler(self.fs))

    def fetched(self, paths: list[str]) -> pyarrow.fs.FileSystem:
        """A pyarrow filesystem holding ``paths`` read whole, concurrently: one GET per file on an object
        store (through pyarrow's fsspec bridge a Parquet read is a HEAD and two ranged GETs, one file after
        another), for a caller about to read every one of them. Memory: the files' bytes.

        Example: ``pq.read_table(path, filesystem=st.fetched([path]))``.
        """
        with self.translating("reading", paths[0] if paths else self.root):
            contents = self.fs.cat(paths, on_error="raise") if len(paths) > 1 else {p: self.fs.cat_file(p) for p in paths}
        return pyarrow.fs.PyFileSystem(_FetchedFiles({self.fs._strip_protocol(k): v for k, v in contents.items()}))

    @_backend_errors
    def put(self, path: str, data: bytes | memoryview) -> None:
        """Create or replace ``path`` atomically (readers see the old bytes or the new, never a part). For
        files derived from committed ones, such as a compact file's columnar copy; commits use
        :meth:`put_if_absent`. ``data``: bytes, or any contiguous buffer (written without a copy on local disk).

        Example: ``st.put("/tmp/out/_spark_metadata/9.compact.parquet", data)``.
        """
        if not self.is_local:
            self.fs.pipe_file(path, bytes(data))
            return
        with _local_temp(path, memoryview(data), durable=False) as tmp:
            os.replace(tmp, path)

    # -- exclusive create ------------------------------------------------------------------------

    @_backend_errors
    def put_if_absent(self, path: str, data: bytes | Iterable[bytes]) -> bool:
        """Atomically create ``path`` with ``data``; False (and nothing changed) if it already exists.

        ``data`` may be an iterable of chunks, which local disk streams to the temp file (bounded memory).
        The object is never visible half-written and is never overwritten.

        Example::

            >>> st.put_if_absent("/tmp/out/_spark_metadata/0", b"v1")
            True
            >>> st.put_if_absent("/tmp/out/_spark_metadata/0", b"v1\\n{...}")
            False
        """
        self._probe()
        return self._create_exclusive(path, data, publish_failpoint=True)

    def _create_exclusive(self, path: str, data: bytes | Iterable[bytes], publish_failpoint: bool = False) -> bool:
        if self.is_local:
            return self._create_local(path, data, publish_failpoint)
        payload = data if isinstance(data, bytes) else b"".join(data)
        options: dict[str, Any] = {}
        if self.protocol == "s3":
            if len(payload) >= _S3_MAX_PUT:
                raise StorageError(
                    f"cannot create {self.display(path)} exclusively: {len(payload)} bytes exceed S3's largest "
                    "single PUT (5 GiB), and a multipart upload is not exclusive. Compact the log more often "
                    "(a smaller compact_interval) or write fewer, larger files per batch."
                )
            options["chunksize"] = max(_S3_MIN_CHUNK, len(payload))
        if publish_failpoint:
            failpoint("commit_publish")
        for attempt in range(5):
            try:
                self.fs.pipe_file(path, payload, mode="create", **options)
                return True
            except FileExistsError:
                # The answer to a PUT that succeeded may have been lost and retried: identical bytes
                # (payloads carry a unique token) mean this writer is the one that created it.
                try:
                    return self.read_bytes(path) == payload
                except FileNotFoundError:
                    continue
            except OSError as exc:
                # s3fs: a 409 ConditionalRequestConflict (EIO) or a bare 412 (EINVAL) is a race with
                # another writer; re-check and retry.
                if exc.errno not in (errno.EIO, errno.EINVAL) or attempt == 4:
                    raise
                if self.exists(path):
                    return self.read_bytes(path) == payload
                time.sleep(0.05 * (attempt + 1))
        raise StorageError(f"exclusive create of {self.display(path)} kept racing with deletes; retry later")

    @staticmethod
    def _create_local(path: str, data: bytes | Iterable[bytes], publish_failpoint: bool) -> bool:
        with _local_temp(path, data, durable=True) as tmp:
            if publish_failpoint:
                failpoint("commit_publish")
            try:
                os.link(tmp, path)  # atomic, never overwrites
            except FileExistsError:
                return False
            dir_fd = os.open(os.path.dirname(path), os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            return True

    def _endpoint(self) -> str:
        """The store's endpoint URL as the backend was configured (empty when the backend picks it)."""
        fs = self.fs
        client_kwargs = getattr(fs, "client_kwargs", None) or {}
        return str(
            getattr(getattr(fs, "service_client", None), "url", None)  # adlfs: the account's blob endpoint
            or getattr(fs, "endpoint_url", None)  # s3fs
            or client_kwargs.get("endpoint_url")
            or ""
        )

    def check_reachable(self, timeout: float | None = None) -> None:
        """Fail fast when the store cannot be reached: StorageError within ``timeout`` seconds (default
        ``$PARQUET_SINK_CONNECT_TIMEOUT`` or 10) naming the URL and what failed, instead of the backend's own
        retries (a wrong Azure account name retries for ~85 s). An endpoint whose host name does not resolve
        fails at once (a retry cannot help). Once per store and process; nothing to do on local disk.

        Example: ``Storage("abfs://c/out", {"account_name": "typo"}).check_reachable()`` raises StorageError.
        """
        if self.is_local:
            return
        key = self._store_key()
        if key in _REACHED:
            return
        limit = timeout if timeout is not None else float(os.environ.get(TIMEOUT_ENV) or DEFAULT_CONNECT_TIMEOUT)
        outcome: list[BaseException | None] = []

        def reach() -> None:
            try:
                host = urlsplit(self._endpoint()).hostname
                if host:
                    socket.getaddrinfo(host, None)
                self.fs.exists(self.root)
                outcome.append(None)
            except BaseException as exc:  # handed to the caller's thread
                outcome.append(exc)

        worker = threading.Thread(target=reach, name=f"parquet-sink-reach-{self.protocol}", daemon=True)
        worker.start()
        worker.join(limit)
        where = self.display(self.root)
        if not outcome:
            raise StorageError(
                f"cannot reach {where}: no answer from the store within {limit:g} s. Check the account name or "
                f"endpoint{' (' + self.redact(self._endpoint()) + ')' if self._endpoint() else ''}, the "
                f"credentials in storage_options, the network (proxy, firewall, DNS) and that the store is up; "
                f"${TIMEOUT_ENV} sets the wait."
            )
        failure = outcome[0]
        if failure is not None:
            if isinstance(failure, socket.gaierror):
                raise StorageError(
                    f"cannot reach {where}: the store's host name {urlsplit(self._endpoint()).hostname!r} does not "
                    f"resolve ({failure}). Check the account name or endpoint in the URL and storage_options."
                ) from failure
            with self.translating("reaching the store at", self.root):
                raise failure
        _REACHED.add(key)

    def _store_key(self) -> tuple[str, ...]:
        """Everything that selects the store a write goes to: the scheme, the endpoint, the account, the
        bucket (container) and the options (credentials) that reach it. Two outputs share a probe only
        when all of them are the same."""
        if self.is_local:
            return ("file",)
        fs = self.fs
        endpoint = self._endpoint() or "|".join(os.environ.get(name, "") for name in _ENDPOINT_VARIABLES)
        account = getattr(fs, "account_name", None) or ""
        options = fsspec.utils.tokenize(self.storage_options)
        return (self.protocol, str(endpoint), str(account), self.root.split("/", 1)[0], options)

    def _probe(self) -> None:
        """Once per store (:meth:`_store_key`) and process: check that a second exclusive create really
        fails. When it does not (or the create itself fails) and an fsspec package older than exclusive
        create is installed, the error says to upgrade it rather than blaming the store."""
        key = self._store_key()
        if _PROBED.get(key):
            return
        with _PROBE_LOCK:
            if _PROBED.get(key):
                return
            probe = self.join("_spark_metadata", f".parquet-sink-probe.{uuid.uuid4().hex}.tmp")
            try:
                first = self._create_exclusive(probe, b"probe-1")
                try:
                    second = self._create_exclusive(probe, b"probe-2")
                finally:
                    self.delete(probe)
            except Exception as exc:
                if outdated := self._outdated_packages():
                    raise UnsafeStorageError(self._upgrade_advice(outdated, f"the create failed: {exc!r}")) from exc
                raise
            if not first or second:
                what = "a second create of the same object succeeded"
                if outdated := self._outdated_packages():
                    raise UnsafeStorageError(self._upgrade_advice(outdated, what))
                raise UnsafeStorageError(
                    f"{self.protocol}:// storage at {self.url} does not honour exclusive create "
                    f"({what}), so two writers could both commit one batch. Use a store with conditional "
                    "writes (local disk, Azure Blob/ADLS, S3, GCS)."
                )
            _PROBED[key] = True

    def _outdated_packages(self) -> list[str]:
        """The installed packages behind this filesystem that predate exclusive create, as
        ``"adlfs 2024.7.0"``."""
        names = {"fsspec", type(self.fs).__module__.split(".", 1)[0]}
        outdated = []
        for name in sorted(names & _EXCLUSIVE_CREATE_SINCE.keys()):
            installed = str(getattr(sys.modules.get(name), "__version__", ""))  # the code actually running
            if installed and _release(installed) < _release(_EXCLUSIVE_CREATE_SINCE[name]):
                outdated.append(f"{name} {installed}")
        return outdated

    def _upgrade_advice(self, outdated: list[str], what: str) -> str:
        names = [package.split()[0] for package in outdated]
        return self.redact(
            f"exclusive create on {self.protocol}:// storage at {self.url} does not work ({what}): the installed "
            f"{', '.join(outdated)} predate{'s' if len(outdated) == 1 else ''} exclusive create "
            f"(pipe_file(mode='create')). Upgrade {' and '.join(names)}: pip install --upgrade "
            + " ".join(f'"{name}>={_EXCLUSIVE_CREATE_SINCE[name]}"' for name in names)
        )

    # -- publishing by rename ----------------------------------------------------------------------

    @property
    def renames_atomically(self) -> bool:
        """Whether a rename here is one atomic, cheap metadata operation that Spark's Hadoop writer can
        also target (local disk). On flat object stores a "rename" is a copy plus a delete.

        Example: ``Storage("/tmp/out").renames_atomically is True``.
        """
        return self.is_local

    @_backend_errors
    def rename_no_overwrite(self, source: str, target: str) -> bool:
        """Move ``source`` to ``target`` atomically, never replacing an existing ``target``; parent
        directories are created. Returns True if it created a directory on the way (to be fsynced).
        FileExistsError if ``target`` exists. Only where :attr:`renames_atomically`.

        Example::

            >>> st.rename_no_overwrite("/tmp/out/_x/part-0.parquet", "/tmp/out/part-0.parquet")
            False
        """
        if not self.renames_atomically:
            raise StorageError(f"{self.display(target)}: {self.protocol}:// has no atomic rename; use the Arrow writer")
        directory = os.path.dirname(target)
        created = not os.path.isdir(directory)
        for _ in range(3):  # a concurrent vacuum may remove an empty directory between makedirs and link
            if created:
                os.makedirs(directory, exist_ok=True)
            try:
                os.link(source, target)  # atomic and never overwrites, unlike rename(2)
                break
            except FileNotFoundError:
                if not os.path.exists(source):
                    raise
                created = True
        else:
            raise StorageError(f"cannot create {self.display(directory)}: it keeps disappearing")
        os.unlink(source)
        return created

    @_backend_errors
    def fsync(self, path: str) -> None:
        """Make a file's or a directory's content (for a directory: its entries) durable on local disk.
        A no-op on object stores, whose writes are durable once acknowledged.

        Example: ``st.fsync("/tmp/out/part-0.parquet"); st.fsync("/tmp/out")``.
        """
        if not self.is_local:
            return
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    @_backend_errors
    def remove_tree(self, path: str) -> None:
        """Delete a directory and everything below it; already gone is not an error.

        Example: ``st.remove_tree(st.join("_exactly_once", "staging", "abc"))``.
        """
        try:
            self.fs.rm(path, recursive=True)
        except FileNotFoundError:
            pass

    @_backend_errors
    def remove_empty_dir(self, path: str) -> bool:
        """Remove ``path`` if it is an empty directory (atomically: never one that just got a file);
        True if removed. Object stores have no directories to remove: False.

        Example: ``st.remove_empty_dir("/tmp/out/k=a")``.
        """
        if not self.is_local:
            return False
        try:
            os.rmdir(path)
            return True
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
                return False
            raise
