"""Paths: the Hadoop URI Spark writes into ``_spark_metadata`` for a stored file and back, and the location
a Rust ``object_store`` client (delta-rs) opens the same store with.

The counterpart of Hadoop's ``Path.toUri`` (the percent-encoding Spark's ``SinkFileStatus`` carries) and of
delta-rs's storage options.
"""

from __future__ import annotations

import os
import re
import unicodedata
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from ..errors import ParameterError, StorageError

# Characters java.net.URI leaves unquoted in a path (unreserved, punct, '/', '@'); Hadoop's
# Path.toUri quotes everything else that is ASCII. Non-ASCII printable characters stay as they are.
_URI_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-!.~'()*,;:$&+=/@")
_HADOOP_SCHEMES = {"s3": "s3a", "abfs": "abfss", "az": "abfss", "gs": "gs", "gcs": "gs"}
_FSSPEC_SCHEMES = {"s3a": "s3", "s3n": "s3", "abfss": "abfs", "wasbs": "abfs", "wasb": "abfs", "gcs": "gs"}
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")  # where botocore finds an S3 endpoint if not given
_ADLFS_RESOLVED = ("account_name", "account_key", "sas_token", "connection_string")  # from options or environment
_S3_KEYS = {"key": "aws_access_key_id", "secret": "aws_secret_access_key", "token": "aws_session_token"}
_AZURE_KEYS = {"account_name": "azure_storage_account_name", "account_key": "azure_storage_account_key",
               "sas_token": "azure_storage_sas_token"}
# connection string fields -> adlfs's option names
_CONNECTION_FIELDS = {"accountname": "account_name", "accountkey": "account_key",
                      "sharedaccesssignature": "sas_token", "blobendpoint": "blob_endpoint"}
_IN_PROGRESS = re.compile(r"(?P<head>(?:.*/)?)\.(?P<name>[^/]+)\.inprogress")  # in_progress_name's names
_TEMPORARY = re.compile(r"(?:.*/)?\.[^/]+\.[0-9a-f]{32}\.tmp")  # temporary_name's names


def in_progress_name(path: str) -> str:
    """Where a local data file ``path`` is written before it gets its name: hidden beside it (Spark's listings and
    globs such as ``**/*.parquet`` skip it), so a writer killed mid-file leaves no partial file under a data file's
    name; ``vacuum`` deletes the ones a dead writer left (:func:`published_name`).

    Example: ``in_progress_name("/o/k=1/part-0.parquet") == "/o/k=1/.part-0.parquet.inprogress"``.
    """
    head, _, name = path.rpartition("/")
    return f"{head}/.{name}.inprogress"


def temporary_name(path: str) -> str:
    """Where a file an exclusive create or an atomic replace publishes at ``path`` is written first, on local disk:
    hidden beside it under a name of its own (``.<name>.<uuid>.tmp``: two writers racing for ``path`` never share
    it), linked or renamed into place once whole. Spark's log ignores such names and log cleanup removes them.

    Example: ``temporary_name("/o/_spark_metadata/7")`` -> ``'/o/_spark_metadata/.7.1f0c....tmp'``.
    """
    head, _, name = path.rpartition("/")
    return f"{head}/.{name}.{uuid.uuid4().hex}.tmp"


def is_partial(path: str) -> bool:
    """Whether ``path`` is where a file is written before it is whole (:func:`in_progress_name`,
    :func:`temporary_name`): one a writer killed mid-file leaves behind.

    Example: ``is_partial("/o/.m/.00001-x.metadata.json.inprogress") and not is_partial("/o/.m/version-hint.text")``.
    """
    return _IN_PROGRESS.fullmatch(path) is not None or _TEMPORARY.fullmatch(path) is not None


def published_name(path: str) -> str:
    """The name the file at :func:`in_progress_name` ``path`` gets once whole (the data file, or the Iceberg metadata
    file, a dead writer left it for); any other path as it is.

    Example: ``published_name("k=1/.part-0.parquet.inprogress") == "k=1/part-0.parquet"``.
    """
    match = _IN_PROGRESS.fullmatch(path)
    return path if match is None else match["head"] + match["name"]


def _object_store_azure_options(given: Mapping[str, Any], fs: Any) -> dict[str, str]:
    """adlfs's options (``account_name``, ``account_key``, ``sas_token``, a ``connection_string`` naming them and
    a ``BlobEndpoint``, ``anon``) as delta-rs's ``azure_*`` options; those not given as adlfs took them from the
    environment (``$AZURE_STORAGE_CONNECTION_STRING``, ...), from the filesystem ``fs``."""
    fields = {**{k: getattr(fs, k, None) for k in _ADLFS_RESOLVED if getattr(fs, k, None)}, **given}
    for part in str(fields.get("connection_string") or "").split(";"):
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


def local_file_url(url: str) -> str:
    """``url`` (a ``file://`` URL) without a ``localhost`` host, as RFC 8089 reads ``file://localhost/p`` (fsspec
    would take the host for a directory under the working directory). ParameterError for any other host: a file
    URL of another machine names no disk this process writes (Hadoop's local filesystem refuses it too).

    Example: ``local_file_url("file://localhost/tmp/out")`` -> ``'file:///tmp/out'``.
    """
    host = urlsplit(url).netloc
    if not host:
        return url
    if host.lower() == "localhost":
        return "file://" + url[len("file://") + len(host) :]
    raise ParameterError(
        f"{url} names the host {host!r}: a file URL is this machine's disk. Write file:///path (three slashes) or "
        "the path itself; a shared disk is reached through its mount point."
    )


def key_root(url: str, root: str) -> str:
    """The root ``root`` (``bucket/key``, as fsspec parsed ``url``) of a bucket or container store with its key's
    empty and ``.`` segments dropped and each ``..`` resolved, as Hadoop's ``Path`` (so Spark's S3A and ABFS
    writers) and a local file system resolve them: an object store keeps ``//``, ``.`` and ``..`` as parts of key
    names, where readers of the same URL (and the Azure SDK's signature) would look elsewhere. ParameterError when
    ``url`` names no bucket or container, or a ``..`` climbs out of it.

    Example: ``key_root("s3://b/x/..//out/", "b/x/..//out")`` -> ``'b/out'``.
    """
    container, _, key = root.partition("/")
    if not urlsplit(url).netloc or not container:
        raise ParameterError(
            f"{url} names no bucket or container: give one, as in s3://bucket/path or abfs://container/path."
        )
    segments: list[str] = []
    for segment in key.split("/"):
        if segment == "..":
            if not segments:
                raise ParameterError(
                    f"{url}: its '..' climbs out of the bucket or container {container!r}: give the path within it."
                )
            segments.pop()
        elif segment not in ("", "."):
            segments.append(segment)
    return "/".join([container, *segments])


def _java_uri_other(c: str) -> bool:
    """A non-ASCII character ``java.net.URI`` leaves as it is: neither ``Character.isSpaceChar`` (Unicode
    categories Zs, Zl, Zp) nor ``Character.isISOControl`` (U+0080-U+009F); unassigned, format and
    private-use characters included."""
    return ord(c) > 0x9F and unicodedata.category(c) not in ("Zs", "Zl", "Zp")


def _quote_path(path: str) -> str:
    """Percent-encode a path the way Hadoop's ``Path.toUri().toString()`` does."""
    return "".join(c if c in _URI_SAFE or _java_uri_other(c) else quote(c, safe="") for c in path)


def azure_account_name(storage_options: Mapping[str, Any], fs: Any) -> str:
    """The Azure account ``storage_options`` (or the filesystem built from them) name: ``account_name``, or
    the ``AccountName`` of a connection string; "" when none does."""
    name = storage_options.get("account_name") or getattr(fs, "account_name", None)
    if not name:  # adlfs takes a connection string from the environment too
        connection_string = storage_options.get("connection_string") or getattr(fs, "connection_string", None)
        for part in str(connection_string or "").split(";"):
            key, _, value = part.partition("=")
            if key.strip().lower() == "accountname":
                name = value.strip()
    return str(name or "")


class HadoopPaths:
    """Converts one store's fsspec paths (no protocol) to the URIs Spark and delta-rs use, and back.

    Example::

        >>> HadoopPaths("/tmp/out", "file", True, {}, fs).to_hadoop_path("/tmp/out/a b/x.parquet", encode=True)
        'file:///tmp/out/a%20b/x.parquet'
    """

    def __init__(self, url: str, protocol: str, is_local: bool, storage_options: Mapping[str, Any], fs: Any) -> None:
        self.url = url
        self.protocol = protocol
        self.is_local = is_local
        self.storage_options = storage_options
        self.fs = fs

    def object_store_location(self, root: str) -> tuple[str, dict[str, str] | None]:
        """The URI and options a Rust ``object_store`` client opens the store rooted at ``root`` with (see
        :meth:`Storage.object_store_location`)."""
        if self.is_local:
            return root, None
        given = self.storage_options
        if self.protocol in ("s3", "s3a"):
            options = {_S3_KEYS[k]: str(v) for k, v in given.items() if k in _S3_KEYS}
            client = {**given.get("client_kwargs", {}), **{k: given[k] for k in ("endpoint_url", "region_name") if k in given}}
            from_environment = next(filter(None, map(os.getenv, ENDPOINT_VARIABLES)), "")
            client["endpoint_url"] = client.get("endpoint_url") or from_environment
            if client["endpoint_url"]:  # s3fs's, or botocore's from the environment: delta-rs must allow http too
                options["aws_endpoint_url"] = client["endpoint_url"]
                if client["endpoint_url"].startswith("http://"):
                    options["aws_allow_http"] = "true"
            if client.get("region_name"):
                options["aws_region"] = client["region_name"]
            if given.get("anon"):
                options["aws_skip_signature"] = "true"
            options["aws_conditional_put"] = "etag"
            return f"s3://{root}", options
        if self.protocol in ("abfs", "abfss", "az"):
            return f"az://{root}", _object_store_azure_options(given, self.fs)
        options = {k: str(v) for k, v in given.items() if isinstance(v, (str, int, bool))}
        return self.url, options or None

    def _account_name(self) -> str:
        name = azure_account_name(self.storage_options, self.fs)
        if not name:
            raise StorageError(
                f"cannot build the abfss:// URI for {self.url}: no account name. Pass "
                "storage_options={'account_name': ...} (or a connection string that names the account)."
            )
        return name

    def to_hadoop_path(self, path: str, encode: bool = False) -> str:
        """The Hadoop path string for ``path`` (percent-encoded if ``encode``)."""
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
        """The fsspec path (no protocol) for a Hadoop URI; a URI of another scheme is returned as it is."""
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
