"""The storage layer's seam: :class:`Storage`, the only class that knows how fsspec backends differ.

Everything above it (the log, the sink, the reader) talks to a :class:`Storage` and never asks which
backend it is. It delegates each concept to a module of its own, as Spark's ``CheckpointFileManager`` sits
apart from Hadoop's ``FileSystem``: error translation (:mod:`.errors`), Hadoop URIs and delta-rs locations
(:mod:`.paths`), exclusive create and its probe (:mod:`.commits`), which store it reaches and whether it
answers (:mod:`.reachability`). A backend contributes three things:

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
import os
import posixpath
import re
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import urlsplit

import fsspec
import pyarrow
import pyarrow.fs
from fsspec.implementations.local import LocalFileSystem

from ..errors import ParameterError, StorageError, UnsupportedStorageError
from . import commits, reachability
from .errors import ErrorTranslator, TranslatedFile, backend_errors
from .paths import HadoopPaths, azure_account_name, in_progress_name, key_root, local_file_url

_AZURE_SCHEMES = {"abfs", "abfss", "az", "wasb", "wasbs"}
_CONTAINER_STORES = {"s3", "abfs"}  # fsspec protocols whose paths start with a bucket or container
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# Schemes fsspec knows that the package refuses, and why (the tests run every claim on a real server).
_UNSUPPORTED = {
    scheme: "Google Cloud Storage is not supported: no GCS server runs in this package's tests, so exclusive create "
    "(its commits) is unproven there. Use local disk, s3:// (also S3-compatible stores with conditional writes) or "
    "abfs://."
    for scheme in ("gs", "gcs")
}
_MTIME_KEYS = ("mtime", "LastModified", "last_modified", "updated", "created", "timeCreated")
_OPEN_ATTEMPTS = 5  # local disk: opens for writing whose parent directory a vacuum removed in between, in a row


@dataclass(frozen=True)
class FileInfo:
    """What the log needs to know about one stored object."""

    path: str  # fsspec path, without protocol
    size: int
    is_dir: bool
    mtime_ms: int


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


def _azure_url(url: str, storage_options: Mapping[str, Any]) -> str:
    """``url`` with the account host of ``abfss://container@ACCOUNT.dfs.core.windows.net/...`` in lower case (host
    names are case-insensitive, Azure account names lower case: adlfs would see two account names); ParameterError
    when that account is not the one ``storage_options`` name (``account_name``, or a connection string's
    ``AccountName``): adlfs would take one of the two and the log would name the other."""
    container, at, host = urlsplit(url).netloc.rpartition("@")
    in_url = host.split(".", 1)[0].lower() if at else ""
    in_options = azure_account_name(storage_options, None).lower()
    if in_url and in_options and in_url != in_options:
        raise ParameterError(
            f"cannot open storage for {url}: the URL names the Azure account {in_url!r} but storage_options name "
            f"{in_options!r}. Make them the same account, or write the URL as abfs://{container}/path (the account "
            "then comes from storage_options)."
        )
    return url.replace(f"@{host}", f"@{host.lower()}", 1) if at else url


def _walk_local(top: str) -> list[FileInfo]:
    """Every file below the local directory ``top`` (symbolic links followed, as fsspec's local ``find`` follows
    them); a file or directory that vanishes during the walk is left out."""
    found: list[FileInfo] = []
    pending = [top]
    while pending:
        directory = pending.pop()
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir():
                            pending.append(entry.path)
                            continue
                        stat = entry.stat()
                    except FileNotFoundError:  # deleted since the directory was read
                        continue
                    found.append(FileInfo(entry.path, stat.st_size, False, int(stat.st_mtime * 1000)))
        except (FileNotFoundError, NotADirectoryError):
            continue
    return found


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


class _TranslatedFs:
    """A storage's fsspec filesystem as pyarrow's ``FSSpecHandler`` calls it, raising StorageErrors: its calls
    translated (:meth:`Storage.translating`) and the files it opens those of :meth:`Storage.open`."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    def open(self, path: str, mode: str = "rb", **kwargs: Any) -> IO[bytes]:
        return self._storage.open(path, mode, **kwargs)

    def isfile(self, path: str) -> bool:
        """Whether ``path`` is a file; a store that fails raises. (fsspec's ``isfile`` answers False to any error,
        and pyarrow, asking it before opening a file, reports a committed file as missing when a HEAD failed.)"""
        with self._storage.translating("reading", path):
            try:
                return bool(self._storage.fs.info(path)["type"] == "file")
            except FileNotFoundError:
                return False

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._storage.fs, name)
        if not callable(attribute):
            return attribute

        def translated(*args: Any, **kwargs: Any) -> Any:
            path = args[0] if args and isinstance(args[0], str) else self._storage.root
            with self._storage.translating(name, path):
                return attribute(*args, **kwargs)

        return translated


class _RenamedOnClose:
    """A local file written under ``temporary``, renamed to ``path`` once closed (and removed if its close fails)."""

    def __init__(self, opened: IO[bytes], temporary: str, path: str) -> None:
        self._opened, self._temporary, self._path = opened, temporary, path

    def close(self) -> None:
        if self._opened.closed:
            return
        try:
            self._opened.close()
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(self._temporary)
            raise
        os.replace(self._temporary, self._path)

    def __enter__(self) -> _RenamedOnClose:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._opened, name)


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
        if storage_options is not None and not isinstance(storage_options, Mapping):
            raise ParameterError(
                f"storage_options for {self.url} must be a dict of the backend's options (e.g. {{'key': ..., "
                f"'secret': ...}}), not {type(storage_options).__name__}"
            )
        self.storage_options = dict(storage_options or {})
        for key, value in self.storage_options.items():  # client_kwargs, config_kwargs, s3_additional_kwargs, ...
            if key.endswith("_kwargs") and not isinstance(value, Mapping):
                raise ParameterError(
                    f"storage_options[{key!r}] for {self.url} must be a dict, not {type(value).__name__}: e.g. "
                    f"{{'{key}': {{'endpoint_url': 'http://host:9000'}}}} (on the command line: --storage-option "
                    f"'{key}={{\"endpoint_url\": \"http://host:9000\"}}')"
                )
        scheme = urlsplit(self.url).scheme.lower()
        if _SCHEME.match(self.url):  # schemes are case-insensitive (RFC 3986): S3:// is s3://
            self.url = scheme + self.url[len(scheme) :]
        if scheme in _UNSUPPORTED:
            raise UnsupportedStorageError(f"cannot open storage for {self.url}: {_UNSUPPORTED[scheme]}")
        if scheme in _AZURE_SCHEMES:
            self.url = _azure_url(self.url, self.storage_options)
        if scheme == "file":
            self.url = local_file_url(self.url)
        try:
            # No listings cache: a listing cached by this process (or by the user's filesystem with the same
            # options, which fsspec would share with us) would hide files other processes committed since.
            fs, root = fsspec.core.url_to_fs(self.url, **{**self.storage_options, "use_listings_cache": False})
        except ImportError as exc:
            raise StorageError(
                f"cannot open storage for {self.url}: {exc}. Install the fsspec backend for this scheme "
                "(`pip install parquet-sink[azure]` or `parquet-sink[s3]`)."
            ) from exc
        except ValueError as exc:
            if scheme in _AZURE_SCHEMES and not azure_account_name(self.storage_options, None):
                raise StorageError(
                    f"cannot open storage for {self.url}: no Azure storage account is named. Pass "
                    "storage_options={'account_name': ..., 'account_key': ...} (or a sas_token, or a connection_string "
                    "that names the account), or set $AZURE_STORAGE_ACCOUNT_NAME."
                ) from exc
            if str(exc).startswith("Protocol not known"):
                raise UnsupportedStorageError(
                    f"cannot open storage for {self.url}: fsspec knows no filesystem for {scheme}://. Check the "
                    "URL's scheme: a local path, file://, s3:// (s3a://) or abfs:// (abfss://, az://)."
                ) from exc
            shown = ErrorTranslator(self.storage_options, is_local=False).redact(str(exc))
            raise StorageError(f"cannot open storage for {self.url}: {shown}. Check storage_options.") from exc
        self.fs: fsspec.AbstractFileSystem = fs
        self.is_local = isinstance(fs, LocalFileSystem)
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        self.protocol = "file" if self.is_local else protocol
        self.root = fs._strip_protocol(root).rstrip("/") or "/"
        if self.protocol in _CONTAINER_STORES:
            self.root = key_root(self.url, self.root)
        if self.is_local:
            # Resolved here, on the driver: executors rebuild the storage from the URL, and a relative
            # path would land in each executor's own working directory.
            self.url = self.root
        self.errors = ErrorTranslator(self.storage_options, self.is_local)
        self.paths = HadoopPaths(self.url, self.protocol, self.is_local, self.storage_options, fs)

    @property
    def container(self) -> str | None:
        """The bucket (S3) or container (Azure) the root is in; None on stores without one (local disk, memory://).

        Example: ``Storage("s3://bucket/out").container`` -> ``'bucket'``.
        """
        return self.root.split("/", 1)[0] if self.protocol in _CONTAINER_STORES else None

    def require_shared(self, user: str) -> None:
        """Refuse (:class:`~parquet_sink.errors.UnsupportedStorageError`, naming ``user``) a store that only this
        process sees (``memory://``): Spark's executors and Python workers are other processes.

        Example: ``Storage("memory://out").require_shared("ParquetSink")`` raises.
        """
        if self.protocol == "memory":
            raise UnsupportedStorageError(
                f"{user}({self.url!r}): memory:// lives in this process only, and Spark's executors and Python workers "
                "are other processes: they could not see the driver's files. Write to local disk (a path or "
                "file://), s3:// or abfs:// instead."
            )

    def __reduce__(self) -> tuple[Any, ...]:
        return (Storage, (self.url, self.storage_options))

    def __repr__(self) -> str:
        return f"Storage({self.url!r})"

    def translating(self, what: str, path: str) -> contextlib.AbstractContextManager[None]:
        """Turn a backend failure inside the block (full disk, permissions, network...) into a StorageError
        naming ``what`` failed on ``path`` and what to do; FileNotFoundError/FileExistsError pass through.
        Every storage method runs in one; callers wrap what they do with a file object the storage opened
        (its writes and its close).

        Example::

            >>> with st.translating("writing", path):
            ...     fh.write(data); fh.close()
        """
        return self.errors.translating(what, self.display(path))

    # -- paths ---------------------------------------------------------------------------------

    def join(self, *parts: str) -> str:
        """Join path segments under the root: ``st.join("_spark_metadata", "3")``."""
        return posixpath.join(self.root, *parts)

    def redact(self, text: str) -> str:
        """``text`` without the secrets of ``storage_options`` (keys, tokens, passwords, connection
        strings and the account keys inside them) nor any URL signature."""
        return self.errors.redact(text)

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
        return self.paths.object_store_location(self.root)

    def to_uri(self, path: str) -> str:
        """The fully qualified Hadoop URI Spark writes into the log for ``path`` (percent-encoded).

        Example: ``/tmp/out/k=c%3Ad/f.parquet`` -> ``file:///tmp/out/k=c%253Ad/f.parquet``.
        """
        return self.to_hadoop_path(path, encode=True)

    def to_hadoop_path(self, path: str, encode: bool = False) -> str:
        """The Hadoop path string for ``path`` as Spark's readers take it (``spark.read.parquet``):
        the same as :meth:`to_uri` but not percent-encoded, unless ``encode``."""
        return self.paths.to_hadoop_path(path, encode)

    def from_uri(self, uri: str) -> str:
        """The fsspec path (no protocol) for a Hadoop URI found in a log; inverse of :meth:`to_uri`.

        A URI of another scheme than this storage's is returned with its scheme, so the caller can see
        it is outside the root.
        """
        return self.paths.from_uri(uri)

    # -- reads ---------------------------------------------------------------------------------

    def _file_info(self, raw: dict[str, Any]) -> FileInfo:
        is_dir = raw.get("type") == "directory"
        mtime = next((raw[k] for k in _MTIME_KEYS if raw.get(k) is not None), None)
        if mtime is None:
            mtime_ms = 0 if is_dir else _to_epoch_ms(self.fs.modified(raw["name"]))
        else:
            mtime_ms = _to_epoch_ms(mtime)
        return FileInfo(self.fs._strip_protocol(raw["name"]), int(raw.get("size") or 0), is_dir, mtime_ms)

    @backend_errors
    def info(self, path: str) -> FileInfo:
        """Size, kind and modification time (epoch ms) of ``path``; FileNotFoundError if absent."""
        self.fs.invalidate_cache(path)
        return self._file_info(self.fs.info(path))

    @backend_errors
    def exists(self, path: str) -> bool:
        self.fs.invalidate_cache(path)
        return bool(self.fs.exists(path))

    @backend_errors
    def ls(self, path: str) -> list[FileInfo]:
        """Direct children of ``path`` (fresh, never from a listing cache); empty if it does not exist."""
        self.fs.invalidate_cache(path)
        try:
            return [self._file_info(raw) for raw in self.fs.ls(path, detail=True)]
        except FileNotFoundError:
            return []

    @backend_errors
    def ls_names(self, path: str) -> list[str]:
        """Paths (no protocol) of the direct children of ``path``, fresh, without a per-file stat (local
        ``ls(detail=True)`` stats every file); empty if ``path`` does not exist.

        Example: ``st.ls_names(st.join("_spark_metadata"))`` -> ``['/tmp/out/_spark_metadata/0', ...]``.
        """
        self.fs.invalidate_cache(path)
        if self.is_local:
            prefix = path.rstrip("/") + "/"  # posixpath.join a name: most of the listing's time at 1,000 names
            try:
                return [prefix + name for name in os.listdir(path)]
            except (FileNotFoundError, NotADirectoryError):
                return []
        try:
            return [self.fs._strip_protocol(name).rstrip("/") for name in self.fs.ls(path, detail=False)]
        except FileNotFoundError:
            return []

    @backend_errors
    def find(self, path: str) -> list[FileInfo]:
        """Every file below ``path`` (recursive), fresh, in no particular order: on an object store one listing
        (a request per page of 1,000 keys), on local disk a walk with one ``stat`` per file (fsspec's local
        ``find`` costs ~4x as much per file: a dict and a second path normalisation each)."""
        if self.is_local:
            return _walk_local(path)
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

    @backend_errors
    def read_bytes(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        """The bytes of ``path`` (``start``/``end``: only that range, one ranged request on object stores)."""
        self.fs.invalidate_cache(path)
        return self.fs.cat_file(path, start=start, end=end)

    @backend_errors
    def open(self, path: str, mode: str = "rb", *, publish: bool = False, **kwargs: Any) -> IO[bytes]:
        """Open for reading, or for writing a data file (parent directories created where needed). The file's
        reads, writes and close (an object store's upload) raise StorageErrors too. On local disk a parent a vacuum
        removed between its creation and the open (an empty directory to it) is made again, a few times.

        ``publish``: a data file that appears under its name only whole, when closed: on local disk it is written
        under :func:`~.paths.in_progress_name` and renamed (a writer killed mid-file leaves no partial file that a
        glob over the output would read); an object store's upload is whole already."""
        if "w" in mode and self.is_local:
            target = in_progress_name(path) if publish else path
            for attempt in range(_OPEN_ATTEMPTS):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                try:
                    opened = self.fs.open(target, mode, **kwargs)
                    break
                except FileNotFoundError:
                    if attempt == _OPEN_ATTEMPTS - 1:
                        raise
            if publish:
                opened = _RenamedOnClose(opened, target, path)
        else:
            opened = self.fs.open(path, mode, **kwargs)
        return TranslatedFile(opened, self.errors, self.display(path))  # type: ignore[return-value]

    @backend_errors
    def makedirs(self, path: str) -> None:
        """Create directory ``path`` and its parents (on object stores, where directories are prefixes: nothing)."""
        self.fs.makedirs(path, exist_ok=True)

    @backend_errors
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
        """A pyarrow filesystem reading this storage's paths (native for local disk, else via fsspec, its
        failures translated into StorageErrors)."""
        if self.is_local:
            return pyarrow.fs.LocalFileSystem()
        return pyarrow.fs.PyFileSystem(pyarrow.fs.FSSpecHandler(_TranslatedFs(self)))

    def fetched(self, paths: list[str]) -> pyarrow.fs.FileSystem:
        """A pyarrow filesystem holding ``paths`` read whole, concurrently: one GET per file on an object
        store (through pyarrow's fsspec bridge a Parquet read is a HEAD and two ranged GETs, one file after
        another), for a caller about to read every one of them. Memory: the files' bytes.

        Example: ``pq.read_table(path, filesystem=st.fetched([path]))``.
        """
        with self.translating("reading", paths[0] if paths else self.root):
            contents = self.fs.cat(paths, on_error="raise") if len(paths) > 1 else {p: self.fs.cat_file(p) for p in paths}
        return pyarrow.fs.PyFileSystem(_FetchedFiles({self.fs._strip_protocol(k): v for k, v in contents.items()}))

    @backend_errors
    def put(self, path: str, data: bytes | memoryview) -> None:
        """Create or replace ``path`` atomically (readers see the old bytes or the new, never a part). For
        files derived from committed ones, such as a compact file's columnar copy; commits use
        :meth:`put_if_absent`. ``data``: bytes, or any contiguous buffer (written without a copy on local disk).

        Example: ``st.put("/tmp/out/_spark_metadata/9.compact.parquet", data)``.
        """
        if not self.is_local:
            self.fs.pipe_file(path, bytes(data))
            return
        with commits.local_temp(path, memoryview(data), durable=False) as tmp:
            os.replace(tmp, path)

    # -- exclusive create ------------------------------------------------------------------------

    @backend_errors
    def put_if_absent(self, path: str, data: bytes | Iterable[bytes], *, commit: bool = True) -> bool:
        """Atomically create ``path`` with ``data``; False (and nothing changed) if it already exists.

        ``data`` may be an iterable of chunks, which local disk streams to the temp file (bounded memory).
        The object is never visible half-written and is never overwritten. ``commit``: a log commit (failpoint
        ``commit_publish`` fires before it), not a record beside the log.

        Example::

            >>> st.put_if_absent("/tmp/out/_spark_metadata/0", b"v1")
            True
            >>> st.put_if_absent("/tmp/out/_spark_metadata/0", b"v1\\n{...}")
            False
        """
        commits.probe(self)
        return commits.create_exclusive(self, path, data, publish_failpoint=commit)

    def check_reachable(self, timeout: float | None = None) -> None:
        """Fail fast when the store cannot be reached: StorageError within ``timeout`` seconds (default
        ``$PARQUET_SINK_CONNECT_TIMEOUT`` or 10) naming the URL and what failed, instead of the backend's own
        retries (a wrong Azure account name retries for ~85 s). An endpoint whose host name does not resolve
        fails at once (a retry cannot help). Once per store and process; nothing to do on local disk.

        Example: ``Storage("abfs://c/out", {"account_name": "typo"}).check_reachable()`` raises StorageError.
        """
        reachability.check_reachable(self, timeout)

    # -- publishing by rename ----------------------------------------------------------------------

    @property
    def renames_atomically(self) -> bool:
        """Whether a rename here is one atomic, cheap metadata operation that Spark's Hadoop writer can
        also target (local disk). On flat object stores a "rename" is a copy plus a delete.

        Example: ``Storage("/tmp/out").renames_atomically is True``.
        """
        return self.is_local

    @backend_errors
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

    @backend_errors
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

    @backend_errors
    def remove_tree(self, path: str) -> None:
        """Delete a directory and everything below it; already gone is not an error.

        Example: ``st.remove_tree(st.join("_exactly_once", "staging", "abc"))``.
        """
        try:
            self.fs.rm(path, recursive=True)
        except FileNotFoundError:
            pass

    @backend_errors
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
