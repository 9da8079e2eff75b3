"""``sync_iceberg``: keep an Apache Iceberg table listing exactly the files ``_spark_metadata`` commits, so every
Iceberg reader (pyiceberg, polars, duckdb, Trino, Snowflake, Athena) reads exactly-once data without a copy. The
counterpart of Apache XTable's Delta-to-Iceberg translation and of Delta UniForm (Iceberg metadata written beside
the data), built on pyiceberg's ``add_files`` path: data files written elsewhere, without Iceberg field ids, read
through the table's name mapping, their statistics from the footer by pyiceberg's own code
(``data_file_statistics_from_parquet_metadata``, as ``parquet_file_to_data_file`` uses it), string upper bounds
by :func:`string_upper_bound` (Iceberg's ``truncateStringMax``), INT96 columns' counts alone (:func:`statistics_plan`),
dates and timestamps Spark stored in the hybrid Julian calendar bounding what Spark reads
(:func:`~parquet_sink.rebase.hybrid_leaf_statistics`, the Delta mirror's rule).

One Iceberg snapshot per log batch: the files the batch added are appended; the files it dropped are deleted, in
a ``replace`` snapshot for an optimize's swap (rows unchanged: incremental readers skip it), a ``delete`` for
retention at a compaction (:func:`snapshot_operation`, the Delta mirror's ``dataChange=false`` rule); manifests
are merged in tiers (:func:`merge_tiers`) so the manifest list stays small; each snapshot's summary records the log batch
(:data:`MARKER`), so a sync resumes at the batch after the current snapshot's and never appends a file twice (a
sync in step does nothing; one a batch behind reads only that batch's log file). ``vacuum`` expires the snapshots
past its retention and deletes what they alone referenced (:mod:`.expiry`). The snapshots of one sync are one catalog commit (one metadata file), or one per
:func:`commit_size` batches (doubling) when it catches up more: a sync that fails leaves the table at the last batch
one of its commits mirrors, and the next resumes there. A snapshot without the marker is another Iceberg writer's:
the sync refuses (:class:`IcebergSyncError`), as the Delta mirror refuses a foreign commit.

Where the table lives: with ``catalog`` (a pyiceberg ``Catalog`` or its properties) and ``table`` (``"ns.name"``)
it is created or updated in that catalog; without, only its metadata exists, with the output, under
:data:`METADATA_DIR` (hidden from Spark's reader and the safe globs), and ``metadata_location`` opens it
(``pyiceberg.table.StaticTable.from_metadata``). Either way the table's location is the output root and its
metadata files are written under :func:`metadata_dir` (``write.metadata.path``): :data:`METADATA_DIR`, or a
directory of each catalog table's own beside it.

Example::

    >>> result = sync_iceberg("/data/events")
    >>> result.log_batch, result.files_added
    (57, 4)
    >>> from pyiceberg.table import StaticTable
    >>> StaticTable.from_metadata(result.metadata_location).scan().to_arrow().num_rows
    1000
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import os
import posixpath
import re
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from types import ModuleType
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from ..errors import MissingDataFileError, ParameterError, SnapshotExpiredError, StorageError, names_output
from ..failpoints import failpoint
from ..log.files import HIDDEN_DIR, require_output
from ..parquet_read import open_sized
from ..partitioning import unescape_path_name
from ..log.entry import records_of
from ..log.metadata_log import MetadataLog
from ..log.snapshot import last_drop, read_snapshot
from ..read.history import optimize_figures, optimize_key
from ..read.reader import (
    CommittedFile, CommittedFiles, Snapshot, dataset_of, snapshot_after, snapshot_of_log, unreadable_file,
)
from ..storage.filesystem import Storage
from ..storage.paths import azure_account_name
from ..table_formats import TableLocks
from .errors import IcebergDependencyError, IcebergSyncError

logger = logging.getLogger(__name__)

# the table's metadata (metadata files, manifest lists, manifests) under the output root: a hidden name at every
# depth a glob over the output can match (Spark reads every file not hidden below what a glob such as out/* or
# out/*/* matches, whatever that name is), so Spark's reader and the safe globs never meet it
ICEBERG_DIR = f"{HIDDEN_DIR}/.iceberg"
METADATA_DIR = f"{ICEBERG_DIR}/.metadata"  # of the table kept without a catalog; a catalog's: .<ns.name> beside it
MARKER = "parquet-sink.log-batch-id"  # snapshot summary key: the log batch the snapshot mirrors
INSTALL = 'pip install "parquet-sink[iceberg]"'
RETRIES = "commit.retry.num-retries"  # pyiceberg's TableProperties.COMMIT_NUM_RETRIES
# metadata files kept before the current one (Iceberg's write.metadata.previous-versions-max, 100 by default): a
# reader or sync that found the current file a moment ago opens it a moment later. One rule: each commit deletes
# the one that falls out (write.metadata.delete-after-commit.enabled, pyiceberg's own deletion) and vacuum deletes
# any older one a commit left (killed before its deletion; a table made before), :func:`.expiry.stale_metadata`
PREVIOUS_VERSIONS = 10
# the properties every table the sync commits to carries (a table that lacks one gets it with its next commit):
# pyiceberg (0.12 on) retries a commit another commit beat by applying the same snapshots again on top of the
# winner's, which for a mirror appends the winner's batches twice: a lost commit fails instead, and the sync reads
# the table again (_LostRace); and the metadata files kept are bounded (PREVIOUS_VERSIONS)
TABLE_PROPERTIES = {
    RETRIES: "0",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": str(PREVIOUS_VERSIONS),
}
# the table without catalog's version hint (Iceberg's Hadoop tables' version-hint.text): the version of the
# metadata file committed last, or one before it, written after each commit
HINT = "version-hint.text"
NAME_MAPPING = "schema.name-mapping.default"  # our files have no Iceberg field ids: columns are found by name
_NAMESPACE = "parquet_sink"  # of the in-memory catalog that commits a table without a catalog
_METADATA_FILE = re.compile(r"^(\d+)-[^/]*\.metadata\.json$")
_FOOTER_THREADS = 8
# snapshots staged in one catalog commit: a sync of many batches (the first of an output with a long log) commits
# them in turn, each commit a consistent prefix (a sync that fails resumes after its last commit), at least this many
# a commit and as many as the table holds already, up to _MAX_BATCHES_PER_COMMIT: each commit writes a metadata file
# listing every snapshot, so commits of a fixed size made a catch-up write batches^2 / size snapshots (1,000
# batches: 63 files, 31,000 snapshots); doubling, about twice the batches (a failure loses at most half the progress)
_BATCHES_PER_COMMIT = 16
_MAX_BATCHES_PER_COMMIT = 256
# manifests merged in tiers (an LSM's): a snapshot merges the manifests of one tier (live entries 1..7, 8..63,
# 64..511, ...) once it holds this many, so the manifest list holds at most about this many per tier (a few dozen
# at 100,000 files) and each entry is rewritten once per tier it climbs: O(log n), never the table per commit
# (pyiceberg's own merge packs bins of up to 8 MB and rewrites the newest bin every min-count commits)
MERGE_FANOUT = 8
_ATTEMPTS = 10  # syncs of one table racing through its catalog: the loser reads the table again, this many times


class _LostRace(IcebergSyncError):
    """Another commit to the table (another process's sync) won the catalog's swap: read the table again."""


def require_pyiceberg(what: str) -> ModuleType:
    """The ``pyiceberg`` module (0.12 or later), or IcebergDependencyError naming ``what`` needed it.

    Example: ``require_pyiceberg("sync_iceberg('/data/events')").__version__`` -> ``'0.12.0'``.
    """
    return IcebergDependencyError.require(
        what, ["pyiceberg", "pyiceberg.catalog.sql", "pyiceberg.io.pyarrow"], (0, 12),
        "the pyiceberg package >= 0.12 with its SQL catalog", INSTALL,
    )


@dataclass(frozen=True)
class IcebergSyncResult:
    """What :func:`sync_iceberg` did. ``metadata_location``: the table's current metadata file (None: no table,
    the output commits no file yet); ``snapshot_id``: its current snapshot; ``log_batch``: the log batch it
    mirrors after the sync; ``previous_log_batch``: before it (None: no table); ``snapshots``: Iceberg snapshots
    committed (one per log batch); ``files_added``/``files_removed``: over those snapshots; ``created``: the
    table was created."""

    path: str
    metadata_location: str | None
    snapshot_id: int | None
    log_batch: int | None
    previous_log_batch: int | None
    files_added: int = 0
    files_removed: int = 0
    snapshots: int = 0
    created: bool = False
    seconds: float = 0.0


def _location(storage: Storage, path: str) -> str:
    """The location pyiceberg's FileIO opens the fsspec ``path`` of ``storage`` by."""
    return path if storage.is_local else f"{storage.protocol}://{path}"


def _path(storage: Storage, location: str) -> str:
    """The fsspec path of the location :func:`_location` gave."""
    scheme = f"{storage.protocol}://"
    return location[len(scheme):] if not storage.is_local and location.startswith(scheme) else location


_S3_IO = {  # delta-rs's (object_store's) S3 options, as Storage gives them, to pyiceberg's FileIO properties
    "aws_access_key_id": "s3.access-key-id", "aws_secret_access_key": "s3.secret-access-key",
    "aws_session_token": "s3.session-token", "aws_endpoint_url": "s3.endpoint", "aws_region": "s3.region",
    "aws_skip_signature": "s3.anonymous",
}


_ADLS_IO = {  # adlfs's options, as Storage takes them, to pyiceberg's FileIO properties (its adlfs-based ADLS IO)
    "account_name": "adls.account-name", "account_key": "adls.account-key", "sas_token": "adls.sas-token",
    "connection_string": "adls.connection-string", "tenant_id": "adls.tenant-id", "client_id": "adls.client-id",
    "client_secret": "adls.client-secret", "account_host": "adls.account-host",
}


def _io_properties(storage: Storage) -> dict[str, str]:
    """The FileIO properties pyiceberg writes and reads the metadata of a table without catalog with: the
    output's S3 storage options translated (endpoint, credentials, region), or its Azure ones (adlfs's account,
    key, SAS token, connection string (an emulator's endpoint in it), service principal, ``anon``; the account
    name always, else pyiceberg takes the container for it); none for other stores (local). Options of no
    string value (an adlfs ``credential`` object) are not translated: adlfs then finds credentials as it does
    without them (its environment variables).

    Example: ``_io_properties(Storage("abfs://c/out", {"account_name": "a", "account_key": "K"}))`` ->
    ``{'adls.account-name': 'a', 'adls.account-key': 'K'}``.
    """
    if storage.protocol in ("s3", "s3a"):
        options = storage.object_store_location()[1] or {}
        return {_S3_IO[k]: v for k, v in options.items() if k in _S3_IO}
    if storage.protocol not in ("abfs", "abfss", "az"):
        return {}
    given = storage.storage_options
    properties = {_ADLS_IO[k]: v for k, v in given.items() if k in _ADLS_IO and isinstance(v, str) and v}
    if account := azure_account_name(given, storage.fs):
        properties["adls.account-name"] = account
    if given.get("anon"):  # pyiceberg passes the string on: only a true one may be given
        properties["adls.anon"] = "true"
    return properties


def _open_catalog(catalog: Any, where: str) -> Any:
    """``catalog`` as a pyiceberg Catalog: itself, or the catalog its properties describe (``type``, ``uri``,
    ``warehouse`` ...; ``name`` names it)."""
    from pyiceberg.catalog import Catalog, load_catalog

    if isinstance(catalog, Catalog):
        return catalog
    if isinstance(catalog, Mapping):
        properties = {str(k): str(v) for k, v in catalog.items()}
        return load_catalog(properties.pop("name", "parquet-sink"), **properties)
    raise ParameterError(
        f"sync_iceberg({where!r}): catalog must be a pyiceberg Catalog or its properties (a dict such as "
        f"{{'type': 'sql', 'uri': 'sqlite:///catalog.db', 'warehouse': 'file:///warehouse'}}), not "
        f"{type(catalog).__name__}. Nothing was committed."
    )


def metadata_name(version: int) -> str:
    """The name of the metadata file of version ``version`` of the table kept without a catalog: decided by its
    version alone, so two commits of one version race for one name and the exclusive create lets one win (as
    Iceberg's Hadoop tables name theirs ``v<N>.metadata.json``); in the ``NNNNN-<uuid>.metadata.json`` form every
    Iceberg tool and earlier releases (which drew the uuid at random) read. Pure.

    Example: ``metadata_name(3)`` -> ``'00003-00000000-0000-0000-0000-000000000003.metadata.json'``.
    """
    return f"{version:05d}-{uuid.UUID(int=version)}.metadata.json"


def _version(location: str) -> int:
    """The version of the metadata file at ``location`` (``NNNNN-*.metadata.json``)."""
    return int(_METADATA_FILE.match(posixpath.basename(location)).group(1))


def _named_version(location: str) -> int | None:
    """The version of the metadata file at ``location`` when it has :func:`metadata_name`'s name, else None
    (a file an earlier release named at random, or none)."""
    name = posixpath.basename(location)
    return _version(name) if _METADATA_FILE.match(name) and name == metadata_name(_version(name)) else None


def current_metadata(storage: Storage, known: str | None = None) -> str | None:
    """The current metadata file of the table kept without a catalog, under :data:`METADATA_DIR`, as a location
    pyiceberg opens; None when there is none. Found as Iceberg's Hadoop tables find it, without listing the
    directory: from ``known`` (a metadata file this process read or committed a moment ago) or the version hint
    (:data:`HINT`), the newest version from there whose file (:func:`metadata_name`) exists, probed one by one.
    Without a usable start (no hint: a table an earlier release made; a torn one; a version whose file is gone),
    the newest in a listing (:func:`whole_newest`: a torn file an earlier release left is passed over);
    IcebergSyncError when two whole files hold that version (two syncs of an earlier release committed at once:
    which one is current cannot be told).

    Example: ``current_metadata(Storage("/data/events"))`` -> ``'/data/events/_exactly_once/.iceberg/.metadata/00003-....metadata.json'``.
    """
    directory = storage.join(METADATA_DIR)
    version = None if known is None else _named_version(known)
    if version is None:
        version = _hinted_version(storage, directory)
    if version is not None and storage.exists(posixpath.join(directory, metadata_name(version))):
        while storage.exists(posixpath.join(directory, metadata_name(version + 1))):
            version += 1
        return _location(storage, posixpath.join(directory, metadata_name(version)))
    newest = whole_newest(storage, directory, list(map(posixpath.basename, storage.ls_names(directory))))
    if not newest:
        return None
    if len(newest) > 1:
        raise IcebergSyncError(
            f"{storage.display(directory)} holds {len(newest)} metadata files of version "
            f"{_METADATA_FILE.match(newest[0]).group(1)} ({newest}): two syncs committed at once, and which is current "
            f"cannot be told. Delete the directory {storage.display(storage.join(ICEBERG_DIR))} and sync again "
            "(Iceberg readers lose the table's history)."
        )
    return _location(storage, posixpath.join(directory, newest[0]))


def _hinted_version(storage: Storage, directory: str) -> int | None:
    """The version the hint in ``directory`` names; None when there is none or it holds no version."""
    try:
        text = storage.read_bytes(posixpath.join(directory, HINT)).decode("ascii", "replace").strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else None


def _write_hint(storage: Storage, directory: str, version: int) -> None:
    """Write the version hint of ``directory`` (atomically replaced); a failure is a WARNING, as Iceberg's Hadoop
    tables take it: the version is committed, and the next reader probes past a stale hint."""
    try:
        storage.put(posixpath.join(directory, HINT), str(version).encode())
    except StorageError as exc:
        logger.warning("%s: the Iceberg version hint was not updated to %d (%s); the next sync finds the version by "
                       "probing past it", storage.display(directory), version, exc)


def newest_metadata(names: list[str], torn: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """The metadata files (``NNNNN-<uuid>.metadata.json``) of the newest version among the file names
    ``names`` of a table's metadata directory, leaving out the ``torn`` ones (not whole JSON: a sync killed while
    writing it, before its commit, so never current); sorted, empty when there is none. Pure.

    Example: ``newest_metadata(["00001-a.metadata.json", "00002-b.metadata.json"], {"00002-b.metadata.json"})``
    -> ``['00001-a.metadata.json']``.
    """
    versions: dict[int, list[str]] = {}
    for name in names:
        match = _METADATA_FILE.match(name)
        if match and name not in torn:
            versions.setdefault(int(match.group(1)), []).append(name)
    return sorted(versions[max(versions)]) if versions else []


# metadata files known whole (written whole by this process, or read whole once): never read again to tell
_WHOLE: set[str] = set()


def whole_newest(storage: Storage, directory: str, names: list[str]) -> list[str]:
    """:func:`newest_metadata` of ``names`` (in ``directory``), passing over torn files: on local disk a
    metadata file not known whole is read and parsed once (on object stores an upload appears whole)."""
    torn: set[str] = set()
    while True:
        newest = newest_metadata(names, torn)
        found = set()
        for name in newest:
            path = posixpath.join(directory, name)
            if not storage.is_local or path in _WHOLE or _named_version(name) is not None:
                continue
            try:
                json.loads(storage.read_bytes(path))
                _WHOLE.add(path)
            except ValueError:
                found.add(name)
        if not found:
            return newest
        logger.warning("%s: passing over the torn metadata file(s) %s (a sync killed while writing them; never "
                       "committed): vacuum deletes them", storage.display(directory), sorted(found))
        torn |= found


class _PublishedOutput:
    """A pyiceberg ``OutputFile`` whose stream collects a metadata file and, once closed without an error, creates
    it by :meth:`Storage.put_if_absent` (on local disk a hidden temporary file linked into place once whole, on
    object stores a conditional put: never a torn file, never over another's), in two halves with the failpoint
    ``iceberg_metadata_write`` between them (a kill there is a sync killed mid-write), then writes the version
    hint (failpoint ``iceberg_version_hint`` before it). CommitFailedException when the file exists: another
    commit of the same version won."""

    def __init__(self, storage: Storage, location: str) -> None:
        self.storage, self.location = storage, location
        self._parts: list[bytes] = []

    def create(self, overwrite: bool = False) -> _PublishedOutput:
        return self

    def write(self, data: bytes) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def __enter__(self) -> _PublishedOutput:
        return self

    def __exit__(self, error: type[BaseException] | None, *_: Any) -> None:
        from pyiceberg.exceptions import CommitFailedException

        if error is not None:
            return
        data = b"".join(self._parts)

        def halves() -> Any:
            yield data[: len(data) // 2]
            failpoint("iceberg_metadata_write")
            yield data[len(data) // 2 :]

        path = _path(self.storage, self.location)
        if not self.storage.put_if_absent(path, halves(), commit=False):
            raise CommitFailedException(f"{self.storage.display(path)} exists: another commit made this version first")
        failpoint("iceberg_version_hint")
        _write_hint(self.storage, posixpath.dirname(path), _version(path))


@functools.cache
def _local_catalog() -> type:
    """pyiceberg's SQL catalog (in memory, for the table without catalog) creating its metadata files
    exclusively (:class:`_PublishedOutput`): pyiceberg's FileIO writes them in place, over any other."""
    from pyiceberg.catalog.sql import SqlCatalog
    from sqlalchemy import create_engine
    from sqlalchemy.pool import StaticPool

    class LocalCatalog(SqlCatalog):
        def __init__(self, storage: Storage, **properties: str) -> None:
            super().__init__("parquet-sink", **properties)
            self.storage = storage
            # one in-memory database for every thread (the table is kept open for the next sync, which may run in
            # another thread: an optimize's): SQLAlchemy gives each thread a database of its own otherwise
            self.engine = create_engine("sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False})
            self._init_catalog()

        def _write_metadata(self, metadata: Any, io: Any, metadata_path: str) -> None:  # type: ignore[override]
            with _PublishedOutput(self.storage, metadata_path).create() as output:
                output.write(metadata_json(metadata, metadata_path))

    return LocalCatalog


# per table location: the JSON of each snapshot of the metadata file written last, by snapshot id, with the
# snapshot it is of (a snapshot is immutable: its JSON holds while that object is the table's)
_SNAPSHOT_JSON: dict[str, dict[int, tuple[Any, str]]] = {}


def metadata_json(metadata: Any, location: str) -> bytes:
    """The metadata file (at ``location``) of the table metadata ``metadata``, the JSON pyiceberg's
    ``ToOutputFile.table_metadata`` writes, each snapshot serialized once per process (:data:`_SNAPSHOT_JSON`) and
    spliced in: a metadata file lists every snapshot the table keeps, and pyiceberg serializes them all on each
    commit (~10 us a snapshot; 1,200 snapshots: 12 ms a batch's sync).

    Example: ``json.loads(metadata_json(table.metadata, location)) == json.loads(table.metadata.model_dump_json())``.
    """
    from pyiceberg.serializers import Compressor
    from pyiceberg.utils.config import Config

    exclude_none = not Config().get_bool("legacy-current-snapshot-id")  # as ToOutputFile.table_metadata decides
    known, kept = _SNAPSHOT_JSON.get(metadata.location, {}), {}
    for snap in metadata.snapshots:
        cached = known.get(snap.snapshot_id)
        kept[snap.snapshot_id] = cached if cached is not None and cached[0] is snap else (
            snap, snap.model_dump_json(exclude_none=exclude_none))
    _SNAPSHOT_JSON[metadata.location] = kept
    head = metadata.model_dump_json(exclude_none=exclude_none, exclude={"snapshots"})
    snapshots = ",".join(text for _, text in kept.values())
    text = f'{head[:-1]}{"," if head != "{}" else ""}"snapshots":[{snapshots}]}}'
    return Compressor.get_compressor(location).bytes_compressor()(text.encode())


def is_table_identifier(value: object) -> bool:
    """Whether ``value`` names a catalog's table as ``"namespace.name"`` (the one rule of ``sync_iceberg``'s
    ``table=``, the writers' ``iceberg["table"]`` and the CLI's ``--table``).

    Example: ``is_table_identifier("db.events") and not is_table_identifier("events")``.
    """
    return isinstance(value, str) and "." in value.strip(".") and value == value.strip()


def _load(storage: Storage, catalog: Any, identifier: str | None) -> tuple[Any, str | tuple[str, str], Any]:
    """(the catalog to commit through, the table's identifier there, the table or None when it does not exist
    yet). Without a catalog: an in-memory SQL catalog holding the table of :func:`current_metadata`."""
    from pyiceberg.exceptions import NoSuchTableError

    where = storage.display(storage.root)
    if catalog is None:
        if identifier is not None:
            raise ParameterError(
                f"table={identifier!r} needs catalog= too (or neither: the metadata alone, with the output). "
                "Nothing was committed."
            )
        name = (_NAMESPACE, "output")
        opened = _OPENED.get(storage.root)
        metadata = current_metadata(storage, None if opened is None else opened.metadata_location)
        if opened is not None and metadata is not None and opened.metadata_location == metadata:
            return opened.catalog, name, opened  # what this process committed or opened last: still current
        local = _output_catalog(_local_catalog())(storage, uri="sqlite://",
                                                  warehouse=_location(storage, storage.join(METADATA_DIR)),
                                                  **_io_properties(storage))
        local.create_namespace(_NAMESPACE)
        return local, name, None if metadata is None else _opened(storage, None, local.register_table(name, metadata))
    if not is_table_identifier(identifier):
        raise ParameterError(
            f"with catalog=, table= is an identifier 'namespace.name', not {identifier!r}. Nothing was committed."
        )
    opened = _open_catalog(catalog, where)
    namespace = identifier.rpartition(".")[0]
    opened.create_namespace_if_not_exists(namespace)
    try:
        return opened, identifier, opened.load_table(identifier)
    except NoSuchTableError:
        return opened, identifier, None


@functools.cache
def _output_catalog(base: type) -> type:
    """``base`` (pyiceberg's SQL catalog, in memory: the one a table without catalog commits through) whose
    commit applies the updates by :func:`_applied` (pyiceberg's deep-copies the table's metadata, a cost of the
    snapshots kept) to the metadata it committed last (pyiceberg's reads it again from its file, parsing every
    snapshot), and names each version's metadata file by :func:`metadata_name` (pyiceberg's: a random uuid)."""
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import StagedTable, Table
    from pyiceberg.table.locations import load_location_provider

    class OutputCatalog(base):  # type: ignore[misc, valid-type]
        _committed: tuple[str, Any] | None = None  # (the metadata file it committed last, its metadata)

        def commit_table(self, table: Any, requirements: Any, updates: Any) -> Any:
            response = super().commit_table(table, requirements, updates)
            self._committed = (response.metadata_location, _indexed(response.metadata))
            return response

        def _convert_orm_to_iceberg(self, orm_table: Any) -> Any:
            if self._committed is None or orm_table.metadata_location != self._committed[0]:
                return super()._convert_orm_to_iceberg(orm_table)
            location, metadata = self._committed
            return Table(identifier=Catalog.identifier_to_tuple(orm_table.table_namespace) + (orm_table.table_name,),
                         metadata=metadata, metadata_location=location,
                         io=self._load_file_io(metadata.properties, location), catalog=self)

        def _update_and_stage_table(self, current: Any, identifier: Any, requirements: Any, updates: Any) -> Any:
            if current is None:
                metadata = super()._update_and_stage_table(current, identifier, requirements, updates).metadata
            else:
                for requirement in requirements:
                    requirement.validate(current.metadata)
                metadata = _applied(current.metadata, updates, metadata_location=current.metadata_location)[2]
            version = 0 if current is None else _version(current.metadata_location) + 1
            provider = load_location_provider(metadata.location, metadata.properties)
            location = posixpath.join(posixpath.dirname(provider.new_table_metadata_file_location(version)),
                                      metadata_name(version))
            return StagedTable(identifier=identifier, metadata=metadata, metadata_location=location,
                               io=self._load_file_io(properties=metadata.properties, location=location), catalog=self)

    return OutputCatalog


def _marker(snap: Any) -> int | None:
    """The log batch the Iceberg snapshot ``snap`` mirrors (its summary's :data:`MARKER`), None when it has none
    (pyiceberg's summary answers a missing key with None)."""
    value = snap.summary[MARKER]
    return None if value is None else int(value)


def _check_ours(table: Any, storage: Storage, name: Any, checked: bool = False) -> int | None:
    """The log batch the table mirrors (its current snapshot's :data:`MARKER`; None: no snapshot yet);
    IcebergSyncError when the table is another output's (its location) or another writer committed to it.
    ``checked``: this process committed or read this metadata file before (:data:`_KNOWN`), its snapshots all
    found ours then: they are not looked at again (a cost of the snapshots kept, per sync)."""
    where = storage.display(storage.root)
    remedy = (
        "The Iceberg table of a parquet-sink output is a read-only view of its _spark_metadata: write rows through "
        "parquet-sink (write_batch, ParquetSink). To start the table again from the log, drop it from the catalog "
        f"(or delete {storage.display(storage.join(ICEBERG_DIR))} for a table without catalog) and sync."
    )
    if table.location().rstrip("/") != _location(storage, storage.root).rstrip("/"):
        raise IcebergSyncError(
            f"{where}: the Iceberg table {name} is located at {table.location()}, not at this output. Nothing was "
            "committed; give another table name for this output."
        )
    foreign = [] if checked else [s for s in table.metadata.snapshots if _marker(s) is None]
    if foreign:
        first = foreign[0]
        raise IcebergSyncError(
            f"{where}: {len(foreign)} snapshot(s) of the Iceberg table {name} were committed by another Iceberg "
            f"writer, first snapshot {first.snapshot_id} ({first.summary.operation.value}). Nothing was committed. "
            f"{remedy}"
        )
    current = table.current_snapshot()
    return None if current is None else _marker(current)


# per process, per table (output root, catalog identifier or None): the metadata file a sync of this process
# committed last and the data files its current snapshot lists, so the next sync of the same table costs its
# batches, not the table's manifests; read whole when the table's metadata file is another (another process synced)
_KNOWN: dict[tuple[str, str | None], tuple[str, dict[str, Any]]] = {}
# per process, per table (its metadata directory): the entries of each manifest of the newest snapshot this process wrote, as
# written, so a merge of manifests reads them from memory (a first sync merges every entry once per tier it climbs,
# and read each back from its file: a third of its time); a manifest no longer listed is dropped
_WRITTEN: dict[str, dict[str, list[Any]]] = {}
# per process, per output root: the table without catalog (bound to its in-memory catalog) this process committed
# or opened last, used again while its metadata file is the newest (no new catalog, no metadata read)
_OPENED: dict[str, Any] = {}


def _opened(storage: Storage, identifier: str | None, table: Any) -> Any:
    """``table``, remembered in :data:`_OPENED` when it is the table without catalog (``identifier`` None)."""
    if identifier is None:
        _OPENED[storage.root] = table
    return table


# one lock per table in this process: syncs in threads of one process take turns (a table without a catalog
# commits through an in-process catalog, which would let both write the same version)
_sync_lock = TableLocks()


def _data_files(table: Any, key: tuple[str, str | None]) -> dict[str, Any]:
    """The data files of the table's current snapshot, by location: what this process's last sync of it committed
    when the table is still at that metadata file, else read from its manifests. The dict :data:`_KNOWN` holds (not
    a copy: one is O(files) a sync), read-only unless the caller takes it out of :data:`_KNOWN` first."""
    if table is None:
        return {}
    cached = _KNOWN.get(key)
    if cached is not None and cached[0] == table.metadata_location:
        return cached[1]
    current = table.current_snapshot()
    files = {} if current is None else {
        entry.data_file.file_path: entry.data_file
        for manifest in current.manifests(table.io)
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
    }
    _KNOWN[key] = (table.metadata_location, files)
    return files


def _nulls_as_strings(arrow: pa.Schema) -> pa.Schema:
    """``arrow`` with each column of nulls only (a partition column whose values are all null, a data column
    without a value) as a string, as the Delta mirror types it: Iceberg's format 2 has no null type."""
    return pa.schema([f.with_type(pa.string()) if pa.types.is_null(f.type) else f for f in arrow])


def _iceberg_schema(arrow: pa.Schema, where: str) -> Any:
    """The Iceberg schema (fresh field ids) of the Arrow schema ``arrow``; IcebergSyncError naming the column
    when a type has no Iceberg counterpart."""
    from pyiceberg.io.pyarrow import UnsupportedPyArrowTypeException, _pyarrow_to_schema_without_ids
    from pyiceberg.schema import assign_fresh_schema_ids

    try:
        return assign_fresh_schema_ids(_pyarrow_to_schema_without_ids(_nulls_as_strings(arrow)))
    except (TypeError, ValueError, UnsupportedPyArrowTypeException) as exc:
        raise IcebergSyncError(
            f"{where}: the committed files hold a column Iceberg has no type for ({exc}). Nothing was committed; "
            "write such columns with an Iceberg type (cast unsigned integers to a wider signed type, times and "
            "durations to int64 or string)."
        ) from exc


def _partition_columns(snap: Snapshot) -> list[str]:
    """The partition columns of the committed files, from one file's directories (Hive ``column=value``)."""
    relative = snap.files.table.column("relative_path")[0].as_py()
    return [unescape_path_name(segment.split("=", 1)[0]) for segment in relative.split("/")[:-1] if "=" in segment]


def metadata_dir(table: str | None) -> str:
    """The directory (relative to the output root) of the metadata of the table ``table`` of a catalog, or of
    the table kept without a catalog (None): each its own, so neither finds the other's metadata files."""
    return METADATA_DIR if table is None else f"{ICEBERG_DIR}/.{table}"


def _new_table(catalog: Any, name: Any, storage: Storage, arrow: pa.Schema, partition_columns: list[str]) -> Any:
    """A transaction creating the table (schema from ``arrow``, identity partitions of ``partition_columns``,
    the name mapping, location the output root, metadata under :func:`metadata_dir`). A partition column whose
    values are all null yet is a column (a ``string``: format 2 has no null type) without a partition field:
    Iceberg promotes no ``string`` to another type, so declared a partition of strings it would read its later
    values (``p=0``) as strings for good, where ``read_committed`` reads integers. Iceberg readers read it as null
    (no partition value, not in the data files); its first value gives it its type and partition field
    (:func:`_evolve`)."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.table.name_mapping import create_mapping_from_schema
    from pyiceberg.transforms import IdentityTransform

    schema = _iceberg_schema(arrow, storage.display(storage.root))
    # a partition column of nulls only gets its partition field with its first value (_evolve, which types it then)
    valued = [c for c in partition_columns if not pa.types.is_null(arrow.field(c).type)]
    spec = PartitionSpec(*(
        PartitionField(source_id=schema.find_field(c).field_id, field_id=1000 + i, transform=IdentityTransform(), name=c)
        for i, c in enumerate(valued)
    ))
    properties = {
        "write.metadata.path": _location(storage, storage.join(metadata_dir(name if isinstance(name, str) else None))),
        NAME_MAPPING: create_mapping_from_schema(schema).model_dump_json(),
        **TABLE_PROPERTIES,
    }
    return _staged(catalog.create_table_transaction(
        name, schema, location=_location(storage, storage.root), partition_spec=spec, properties=properties
    ))


def _applied(base: Any, updates: tuple[Any, ...], since: tuple[Any, ...] = (), metadata: Any = None,
             context: Any = None, metadata_location: str | None = None) -> tuple[Any, Any, Any]:
    """(the metadata, as it is kept, of ``updates`` applied to the metadata ``base``; their context; the metadata
    as pyiceberg's ``update_table_metadata`` returns it) without its deep copy of the result, which costs the
    snapshots the table keeps on every read of a transaction's metadata (several per snapshot) and every commit.
    pyiceberg's metadata models are frozen and its updates copy on write: the copy protects nothing here.
    ``since``, ``metadata``, ``context``: the updates applied already, their result and context (None: none);
    ``metadata_location``: the table's current metadata file, logged as ``update_table_metadata`` logs it."""
    from pyiceberg.table.update import _apply_table_update, _TableMetadataUpdateContext, _update_table_metadata_log
    from pyiceberg.utils.datetime import datetime_to_millis

    if context is None:
        metadata, context = base, _TableMetadataUpdateContext()
    for update in updates[len(since):]:
        metadata = _apply_table_update(update, metadata, context)
    result = metadata
    if context.has_changes():
        if metadata_location:
            result = _update_table_metadata_log(result, metadata_location, base.last_updated_ms)
        if result.last_updated_ms == base.last_updated_ms:
            result = result.model_copy(update={"last_updated_ms": datetime_to_millis(datetime.now().astimezone())})
    result.spec().check_compatible(result.schema())
    result.sort_order().check_compatible(result.schema())
    return metadata, context, _indexed(result)


def _indexed(metadata: Any) -> Any:
    """``metadata`` (pyiceberg's table metadata), its class made :func:`_indexed_class`'s of it (the same fields
    and layout: a frozen model's class is all that changes)."""
    if not getattr(type(metadata), "indexed", False):
        object.__setattr__(metadata, "__class__", _indexed_class(type(metadata)))
    return metadata


# snapshot id -> its position in the snapshot list it was last found in (:func:`_indexed_class`): a lookup checks
# the list holds that snapshot there, so a stale position (another table's, a list snapshots were expired from)
# is only a miss; pyiceberg's updates copy a list on write, appending, so a table's positions hold across versions
_POSITIONS: dict[int, int] = {}
_SCANNED: list[Any] | None = None  # the snapshot list scanned whole last: an id not at its position is not in it


@functools.cache
def _indexed_class(base: type) -> type:
    """``base`` (pyiceberg's table metadata model) whose ``snapshot_by_id`` finds the snapshot at its position
    (:data:`_POSITIONS`), else scans the list from its end (where new snapshots are), noting the positions it
    passes; pyiceberg's scans the list from its start, ~15 times a batch's sync (the producer finds the parent
    snapshot, the summary the previous one, the table its current)."""

    class Indexed(base):  # type: ignore[misc, valid-type]
        indexed: ClassVar[bool] = True

        def snapshot_by_id(self, snapshot_id: int) -> Any:
            snapshots = self.snapshots
            at = _POSITIONS.get(snapshot_id)
            if at is not None and at < len(snapshots) and snapshots[at].snapshot_id == snapshot_id:
                return snapshots[at]
            global _SCANNED
            if snapshots is _SCANNED:
                return None  # every position of this list noted: it lacks the snapshot
            for at in range(len(snapshots) - 1, -1, -1):
                _POSITIONS[snapshots[at].snapshot_id] = at
                if snapshots[at].snapshot_id == snapshot_id:
                    return snapshots[at]
            _SCANNED = snapshots
            return None

    Indexed.__name__ = Indexed.__qualname__ = f"Indexed{base.__name__}"
    return Indexed


@functools.cache
def _staged_class(base: type) -> type:
    """``base`` (pyiceberg's ``Transaction`` or ``CreateTableTransaction``) whose ``table_metadata`` applies
    (:func:`_applied`) only the updates staged since its last read, to the metadata that read made; pyiceberg's
    applies every staged update again and deep-copies the result on each read."""

    class Staged(base):  # type: ignore[misc, valid-type]
        # (the table's metadata, the updates applied to it, their result, their context): the last read
        _read: tuple[Any, tuple[Any, ...], Any, Any] | None = None

        @property
        def table_metadata(self) -> Any:
            base_metadata, updates, read = self._table.metadata, self._updates, self._read
            if (read is None or read[0] is not base_metadata or len(read[1]) > len(updates)
                    or any(a is not b for a, b in zip(read[1], updates))):
                read = (base_metadata, (), None, None)
            metadata, context, result = _applied(base_metadata, updates, *read[1:])
            self._read = (base_metadata, updates, metadata, context)
            return result

    Staged.__name__ = Staged.__qualname__ = f"Staged{base.__name__}"
    return Staged


def _staged(transaction: Any) -> Any:
    """``transaction``, its metadata read as :func:`_staged_class` reads it."""
    transaction.__class__ = _staged_class(type(transaction))
    return transaction


def _table_partition_types(transaction: Any, zone: str) -> dict[str, pa.DataType]:
    """The Arrow types of the table's partition columns, which the directories are read as (never flipped by
    a later batch's values)."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    metadata = transaction.table_metadata
    schema = metadata.schema()
    types = {}
    for field in metadata.spec().fields:
        source = schema.find_field(field.source_id)
        arrow = schema_to_pyarrow(source.field_type)
        types[source.name] = pa.timestamp("us", zone) if pa.types.is_timestamp(arrow) else arrow
    return types


def _unpartitioned(metadata: Any, arrow: pa.Schema, partition_columns: list[str]) -> list[str]:
    """The partition columns of the output (``partition_columns``) the table has no partition field for (their
    values were all null when it was created, :func:`_new_table`) that hold a value in the files of ``arrow``
    (their directories' types, as read_committed infers them)."""
    metadata_schema = metadata.schema()
    in_spec = {metadata_schema.find_field(f.source_id).name for f in metadata.spec().fields}
    return [c for c in partition_columns
            if c not in in_spec and c in arrow.names and not pa.types.is_null(arrow.field(c).type)]


def _evolve(transaction: Any, arrow: pa.Schema, where: str, partition_columns: list[str]) -> None:
    """Add the columns of ``arrow`` the table lacks (widening types Iceberg widens), with their name mapping;
    give each partition column of nulls only so far that holds a value in ``arrow`` (:func:`_unpartitioned`) its
    type and identity partition field: a column of another type than the ``string`` it was declared is replaced
    (dropped and added again: a new field id, which no data file and no partition value holds, so every snapshot
    before reads it as null with the schema it was committed with, as it did), and the name mapping names the
    new one. IcebergSyncError when a column's type cannot become the table's."""
    from pyiceberg.exceptions import ValidationError
    from pyiceberg.io.pyarrow import _pyarrow_to_schema_without_ids
    from pyiceberg.table.name_mapping import create_mapping_from_schema

    metadata = transaction.table_metadata
    pending = _unpartitioned(metadata, arrow, partition_columns)
    if set(arrow.names) <= set(metadata.schema().column_names) and not pending:
        return
    try:
        arrow_types = _pyarrow_to_schema_without_ids(pa.schema([arrow.field(c) for c in pending]))
        declared = metadata.schema()
        retyped = [c for c in pending if declared.find_field(c).field_type != arrow_types.find_field(c).field_type]
        if retyped:
            with transaction.update_schema() as update:
                for column in retyped:
                    update.delete_column(column)
        with transaction.update_schema() as update:
            update.union_by_name(_nulls_as_strings(arrow))
            for column in retyped:  # back where it was: before the column after it in read_committed's order
                after = next((c for c in arrow.names[arrow.names.index(column) + 1:] if c not in retyped), None)
                if after is not None:
                    update.move_before(column, after)
        if retyped:  # pyiceberg's mapping keeps the dropped field's name: one field a name
            transaction.set_properties({NAME_MAPPING: create_mapping_from_schema(
                transaction.table_metadata.schema()).model_dump_json()})
        if pending:
            with transaction.update_spec() as spec:
                for column in pending:
                    spec.add_identity(column)
    except (ValidationError, ValueError, TypeError) as exc:
        raise IcebergSyncError(
            f"{where}: the committed files' columns cannot be added to the Iceberg table ({exc}). Nothing was "
            "committed."
        ) from exc


def _data_file(
    storage: Storage, committed: CommittedFile, fragment: ds.Fragment, metadata: Any, types: dict[str, Any]
) -> Any:
    """The Iceberg DataFile of ``committed``: statistics from its footer by pyiceberg's own code, partition
    values from the reader's typed directory values (``fragment``) in Iceberg's representation."""
    from pyiceberg.conversions import to_bytes
    from pyiceberg.io.pyarrow import (
        MetricModeTypes,
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.partitioning import _to_partition_representation
    from pyiceberg.typedef import Record
    from pyiceberg.types import StringType

    from ..rebase import hybrid_leaf_statistics
    from ..table_formats import timestamp_micros

    what = f"committed file {storage.display(committed.path)} of batch {committed.batch_id}"
    schema = metadata.schema()
    try:
        with open_sized(storage, committed.path, committed.size) as parquet:
            footer = parquet.metadata
    except (OSError, pa.ArrowInvalid) as exc:
        raise unreadable_file(storage, committed, exc) or IcebergSyncError(
            f"reading {what} failed ({type(exc).__name__}: {exc}); nothing was committed to the Iceberg table."
        ) from exc
    ids = parquet_path_to_id_mapping(schema)
    columns = (footer.schema.column(i) for i in range(footer.num_columns))
    int96 = {ids[c.path] for c in columns if c.physical_type == "INT96" and c.path in ids}
    # dates and timestamps Spark stored in the hybrid calendar: bounds of what Spark reads, decided with the Delta
    # mirror's rule (the stored ones are days off before 1582, and year 1's is in year 0, which pyiceberg's
    # statistics cannot hold: every sync failed)
    hybrid = {ids[p]: s for path, s in hybrid_leaf_statistics(footer).items() if (p := ".".join(path)) in ids}
    full = compute_statistics_plan(schema, metadata.properties)
    plan = statistics_plan(full, int96 | set(hybrid))
    statistics = data_file_statistics_from_parquet_metadata(footer, plan, ids)
    for aggregate in statistics.column_aggregates.values():
        if isinstance(aggregate.primitive_type, StringType) and aggregate.current_max is not None:
            # pyiceberg's own increment can make a surrogate (U+D7FF + 1), which no UTF-8 holds: the sync failed;
            # the bound decided here is within the truncation length, so pyiceberg serializes it as it is
            aggregate.current_max = string_upper_bound(aggregate.current_max, aggregate.trunc_length)
    serialized = statistics.to_serialized_dict()
    for field_id, leaf in hybrid.items():
        if leaf.min is not None and full[field_id].mode.type not in (MetricModeTypes.NONE, MetricModeTypes.COUNTS):
            typ, date = full[field_id].iceberg_type, pa.types.is_date32(leaf.min.type)  # days, else microseconds
            low, high = (leaf.min.value, leaf.max.value) if date else (
                timestamp_micros(leaf.min, "min"), timestamp_micros(leaf.max, "max"))
            serialized["lower_bounds"][field_id] = to_bytes(typ, low)
            serialized["upper_bounds"][field_id] = to_bytes(typ, high)
    keys = ds.get_partition_keys(fragment.partition_expression)
    spec = metadata.spec()
    values = [
        _to_partition_representation(types[f.source_id], keys.get(schema.find_field(f.source_id).name))
        for f in spec.fields
    ]
    data_file = DataFile.from_args(
        content=DataFileContent.DATA, file_path=_location(storage, committed.path), file_format=FileFormat.PARQUET,
        partition=Record(*values), file_size_in_bytes=committed.size, sort_order_id=None,
        equality_ids=None, key_metadata=None, **serialized,
    )
    # not a field of the record (from_args drops it): an overwrite of the same sync deleting this file reads it,
    # as pyiceberg sets it on the files it reads from a manifest
    data_file.spec_id = spec.spec_id
    return data_file


def statistics_plan(plan: dict[int, Any], counted: set[int]) -> dict[int, Any]:
    """pyiceberg's statistics plan (``compute_statistics_plan``'s collector per field id) for a file whose leaves
    of field ids ``counted`` get no bounds from pyiceberg: theirs collect counts alone (a mode ``none`` stays).
    Those are its INT96 leaves and the dates and timestamps Spark stored in the hybrid calendar. Parquet leaves
    INT96's order undefined, so no footer holds a min or max of it, and pyiceberg's bounds code refused the
    physical type where a footer has its null count (Spark's does: every sync of an output Spark wrote with
    ``outputTimestampType=INT96`` failed); no bound is what Iceberg reads as unknown. The hybrid calendar's
    stored bounds are not those of what Spark reads: :func:`_data_file` writes those. Pure.

    Example: ``statistics_plan({1: <collector mode truncate(16)>}, {1})`` -> ``{1: <collector mode counts>}``.
    """
    from pyiceberg.io.pyarrow import MetricModeTypes, MetricsMode

    counts = MetricsMode(MetricModeTypes.COUNTS)
    return {
        field_id: dataclasses.replace(collector, mode=counts)
        if field_id in counted and collector.mode.type != MetricModeTypes.NONE else collector
        for field_id, collector in plan.items()
    }


def string_upper_bound(largest: str, length: int | None) -> str | None:
    """The Iceberg upper bound of a string column whose largest value is ``largest`` under the metrics mode
    ``truncate(length)`` (``None``: full), as Iceberg's ``UnicodeUtil.truncateStringMax``: ``largest`` itself
    when it has at most ``length`` code points; else its first ``length`` code points with the last one that can
    be incremented incremented and those after it dropped, the least string of at most ``length`` code points
    above every string with that prefix (Iceberg orders strings by UTF-8 bytes, that is by code points; U+D7FF
    goes to U+E000, as surrogates are not characters and UTF-8 cannot hold them); ``None`` (no upper bound,
    which Iceberg reads as unknown) when every one of them is U+10FFFF. Never a bound below a value. Pure.

    Example: ``string_upper_bound("ab\\U0010ffffz", 3)`` -> ``'ac'``; ``string_upper_bound("\\ud7ffab", 1)``
    -> ``'\\ue000'``.
    """
    if length is None or len(largest) <= length:
        return largest
    prefix = largest[:length]
    for end in range(length - 1, -1, -1):
        point = ord(prefix[end])
        if point < 0x10FFFF:
            return prefix[:end] + chr(0xE000 if point == 0xD7FF else point + 1)
    return None


def snapshot_operation(added: int, gone: list[str], swap_key: str | None, adds_are_the_swaps: bool) -> str:
    """The Iceberg operation of the snapshot mirroring one log batch that adds ``added`` files and drops the
    files of root-relative paths ``gone``: ``append`` (nothing dropped), ``delete`` (files dropped, none added:
    retention at a compaction), ``replace`` (an optimize's swap alone: the batch is an optimize whose commit
    record's key ``swap_key`` is :func:`~parquet_sink.read.history.optimize_key` of the dropped files, and the
    files added are the swap's own, ``adds_are_the_swaps``: the data is unchanged, incremental readers skip it),
    else ``overwrite`` (an optimize retention dropped files with, or one mirrored together with other batches).
    Pure. The Delta mirror's rule for ``dataChange=false``.

    Example: ``snapshot_operation(2, ["k=a/p-0.parquet", "k=a/p-1.parquet"], optimize_key([...]), True)`` -> ``'replace'``.
    """
    if not gone:
        return "append"
    if not added:
        return "delete"
    return "replace" if adds_are_the_swaps and swap_key == optimize_key(gone) else "overwrite"


def merge_tiers(live_entries: list[int], fanout: int = MERGE_FANOUT) -> list[int] | None:
    """The indexes of manifests (of ``live_entries`` live entries each) that a snapshot merges next: the
    manifests of the lowest tier (``floor(log_fanout(entries))``, an empty manifest tier 0) that holds
    ``fanout`` or more; None when no tier does. Pure; applied until None, it leaves fewer than ``fanout``
    manifests a tier.

    Example: ``merge_tiers([1, 1, 1, 200], fanout=3)`` -> ``[0, 1, 2]``; ``merge_tiers([3, 200], fanout=3)`` -> ``None``.
    """
    tiers: dict[int, list[int]] = {}
    for index, entries in enumerate(live_entries):
        tiers.setdefault(int(math.log(entries, fanout)) if entries > 1 else 0, []).append(index)
    full = [tier for tier, indexes in tiers.items() if len(indexes) >= fanout]
    return tiers[min(full)] if full else None


@functools.cache
def _mirror_producer() -> type:
    """pyiceberg's overwrite snapshot producer (its manifests that hold no dropped file kept, the others rewritten
    without them; none read when nothing is dropped) labelled with the operation the sync names (pyiceberg 0.12 has no producer of
    ``replace`` snapshots, and its summary code computes the totals of ``overwrite``, ``delete`` and ``append``
    only: the totals are computed as an overwrite's, then the label set), its manifests merged in tiers
    (:func:`merge_tiers`), a merge reading the entries of a manifest this process wrote from memory
    (:data:`_WRITTEN`)."""
    from pyiceberg.manifest import ManifestContent, ManifestEntry, ManifestEntryStatus, _inherit_from_manifest
    from pyiceberg.table.snapshots import Operation
    from pyiceberg.table.update.snapshot import _FastAppendFiles, _ManifestMergeManager, _OverwriteFiles

    class MirrorFiles(_OverwriteFiles):
        def __init__(self, transaction: Any, label: str, properties: dict[str, str]) -> None:
            super().__init__(Operation.OVERWRITE, transaction, transaction._table.io, snapshot_properties=properties)
            self._label = Operation(label)
            metadata = transaction.table_metadata  # the table's own metadata directory: an output may keep two tables
            self._written = _WRITTEN.setdefault(metadata.properties.get("write.metadata.path", metadata.location), {})

        def new_manifest_writer(self, spec: Any) -> Any:
            writer = super().new_manifest_writer(spec)
            entries: list[Any] = []
            add_entry, finish = writer.add_entry, writer.to_manifest_file

            def recorded(entry: Any) -> Any:  # every entry a writer writes goes through add_entry
                entries.append(entry)
                return add_entry(entry)

            def manifest() -> Any:
                made = finish()
                self._written[made.manifest_path] = entries
                return made

            writer.add_entry, writer.to_manifest_file = recorded, manifest
            return writer

        def fetch_manifest_entry(self, manifest: Any, discard_deleted: bool = True) -> list[Any]:
            entries = self._written.get(manifest.manifest_path)
            if entries is None:
                return super().fetch_manifest_entry(manifest, discard_deleted)
            # as the file reads: a copy of each entry as written, its sequence numbers inherited from the manifest
            return [
                _inherit_from_manifest(ManifestEntry.from_args(
                    status=e.status, snapshot_id=e.snapshot_id, sequence_number=e.sequence_number,
                    file_sequence_number=e.file_sequence_number, data_file=e.data_file,
                ), manifest)
                for e in entries if not discard_deleted or e.status != ManifestEntryStatus.DELETED
            ]

        # a snapshot that drops no file reads no manifest, as a fast append (the overwrite's partition filter
        # cannot rule out a manifest of an unpartitioned table: it would read every one)
        def _existing_manifests(self) -> list[Any]:
            return super()._existing_manifests() if self._deleted_data_files else _FastAppendFiles._existing_manifests(self)

        def _deleted_entries(self) -> list[Any]:
            return super()._deleted_entries() if self._deleted_data_files else []

        def _summary(self, snapshot_properties: Any = None) -> Any:
            from pyiceberg.table.snapshots import Summary

            summary = super()._summary(self.snapshot_properties)
            return Summary(self._label, **summary.additional_properties)

        def _process_manifests(self, manifests: list[Any]) -> list[Any]:
            # a manifest of an earlier snapshot listing no live file (only the files that snapshot deleted) is
            # left out, as pyiceberg's fast append leaves it out; the data manifests merged in tiers
            data = [m for m in manifests if m.content == ManifestContent.DATA
                    and (_live(m) or m.added_snapshot_id == self._snapshot_id)]
            merger = _ManifestMergeManager(0, 0, True, self)
            while (chosen := merge_tiers([_live(m) for m in data])) is not None:
                by_spec: dict[int, list[Any]] = {}
                for index in chosen:
                    by_spec.setdefault(data[index].partition_spec_id, []).append(data[index])
                if all(len(group) == 1 for group in by_spec.values()):
                    break  # one manifest per spec in this tier: nothing to merge
                merged = [merger._create_manifest(spec, group) for spec, group in by_spec.items()]
                data = merged + [m for i, m in enumerate(data) if i not in set(chosen)]
            listed = data + [m for m in manifests if m.content != ManifestContent.DATA]
            for path in set(self._written) - {m.manifest_path for m in listed}:
                del self._written[path]  # merged away or rewritten: no later snapshot of this table lists it
            return listed

        def _commit(self) -> Any:
            from pyiceberg.table.update import AddSnapshotUpdate

            updates, requirements = super()._commit()
            metadata = self._transaction.table_metadata
            return tuple(
                AddSnapshotUpdate(snapshot=u.snapshot.model_copy(
                    update={"timestamp_ms": commit_time_ms(metadata, u.snapshot.timestamp_ms)}))
                if isinstance(u, AddSnapshotUpdate) else u
                for u in updates
            ), requirements

    return MirrorFiles


def commit_time_ms(metadata: Any, now_ms: int) -> int:
    """The time a snapshot committed to the table of ``metadata`` at ``now_ms`` (this process's clock) records:
    never before the table's last update nor the last entry of its snapshot log or metadata log. Iceberg's readers
    refuse a table whose logs go back by more than a minute (Java's ``TableMetadata``: "Invalid update timestamp
    ...: before last snapshot log entry"; iceberg-rust and iceberg-go alike): a writer whose clock is behind
    another's (a backfill on another machine, a sink on another cluster) would make every such engine refuse the
    table. Pure.

    Example: a table last updated at 1,000,000 and a clock at 900,000 -> ``1_000_000``.
    """
    logged = [log[-1].timestamp_ms for log in (metadata.snapshot_log, metadata.metadata_log) if log]
    return max([now_ms, metadata.last_updated_ms, *logged])


def commit_size(kept: int) -> int:
    """The batches a sync stages in one catalog commit when the table holds ``kept`` snapshots: at least
    :data:`_BATCHES_PER_COMMIT`, as many as it holds (doubling), at most :data:`_MAX_BATCHES_PER_COMMIT`. Pure.

    Example: ``[commit_size(n) for n in (0, 16, 100, 10_000)]`` -> ``[16, 16, 100, 256]``.
    """
    return min(max(_BATCHES_PER_COMMIT, kept), _MAX_BATCHES_PER_COMMIT)


def _live(manifest: Any) -> int:
    """The entries of a manifest a scan reads (added and existing files)."""
    return (manifest.added_files_count or 0) + (manifest.existing_files_count or 0)


def _commit_batch(
    storage: Storage, transaction: Any, batch: int, files: CommittedFiles, whole: bool, known: dict[str, Any],
    zone: str, swap_key: str | None, footers: ThreadPoolExecutor,
) -> tuple[int, int]:
    """Stage the snapshot mirroring log batch ``batch`` in ``transaction``, ``known`` the table's files before
    it (updated): ``files`` are the batch's snapshot (``whole``: the files ``known`` lacks are dropped) or only
    the files the batch added; ``swap_key``: the key of the optimize committed as that batch, if it is one;
    ``footers``: the threads reading the new files' footers (the sync's, not a batch's: a first sync of many
    small batches started threads per batch). (files added, files removed)."""
    table = files.table
    outside = [p for p in table.column("outside_path").to_pylist() if p is not None]
    if outside:
        raise IcebergSyncError(
            f"{storage.display(storage.root)}: the log commits {len(outside)} file(s) outside the output root "
            f"(first: {outside[0]}); the Iceberg table lists files under its location only. Nothing was committed."
        )
    locations = [_location(storage, p) for p in files.paths().to_pylist()]  # one conversion, not a scalar a file
    live = set(locations)
    # a file the log commits twice (two entries, read twice by Spark's readers) is listed once, as Delta does
    first = {location: i for i, location in reversed(list(enumerate(locations)))}
    new = sorted(i for location, i in first.items() if location not in known)
    gone = [location for location in known if location not in live] if whole else []
    added = []
    if new:
        fresh = Snapshot(storage, batch, CommittedFiles(storage, table.take(new)))
        dataset = dataset_of(fresh, zone, partition_types=_table_partition_types(transaction, zone))
        _evolve(transaction, dataset.schema, storage.display(storage.root), _partition_columns(fresh))
        metadata = transaction.table_metadata
        schema = metadata.schema()
        types = {f.source_id: schema.find_field(f.source_id).field_type for f in metadata.spec().fields}
        fragments = {f.path: f for f in dataset.get_fragments()}
        added = list(footers.map(lambda f: _data_file(storage, f, fragments[f.path], metadata, types), fresh.files))
    root = _location(storage, storage.root).rstrip("/") + "/"
    swaps = bool(new) and set(table.column("batch_id").take(new).to_pylist()) == {batch}
    operation = snapshot_operation(len(added), [g[len(root):] for g in gone], swap_key, swaps)
    with _mirror_producer()(transaction, operation, {MARKER: str(batch)}) as producer:
        for location in gone:
            producer.delete_data_file(known.pop(location))
        for data_file in added:
            producer.append_data_file(data_file)
            known[data_file.file_path] = data_file
    return len(added), len(gone)


def _all_new(storage: Storage, since: Snapshot, known: dict[str, Any]) -> bool:
    """Whether the files the batches of ``since`` (:func:`~parquet_sink.read.reader.snapshot_after`) commit all
    carry their batch id and none is in the table yet: then each batch's snapshot is the table's files and its
    own, and the sync reads only those batches' log files."""
    table = since.files.table
    return table.column("batch_id").null_count == 0 and not any(
        _location(storage, p) in known for p in since.files.paths().to_pylist()
    )


def _new_batches(storage: Storage, since: Snapshot, first: int) -> Any:
    """(batch, the files it added, False, None) for each batch from ``first`` to ``since``'s latest: the steps
    of a sync whose batches only add files (:func:`_all_new`, or :func:`_log_batches` after the last batch that
    dropped any). The files are sorted by batch once and each batch's sliced: a batch costs its own files."""
    table = since.files.table
    table = table.take(pc.sort_indices(table, [("batch_id", "ascending")]))
    bounds = np.searchsorted(table.column("batch_id").to_numpy(), np.arange(first, since.latest_batch_id + 2))
    for batch, low, high in zip(range(first, since.latest_batch_id + 1), bounds, bounds[1:]):
        own = CommittedFiles(storage, table.slice(low, high - low))
        yield batch, Snapshot(storage, batch, own), False, None


def _log_batches(log: MetadataLog, log_snap: Any, first: int) -> Any:
    """The steps of a sync that reads the whole log: (batch, its snapshot, True, the key of the optimize committed
    as it or None) for each batch from ``first`` up to the last that dropped files (:func:`last_drop`) whose
    snapshot the log still holds (a batch before a compaction's retention is mirrored by the next one), then the
    batch after it, its snapshot the latest one's files up to it, and the batches after that as
    :func:`_new_batches` (each the files it added, sliced from the latest snapshot read once): a first sync of a
    log that never dropped a file costs its files and batches, not its batches times its files."""
    swaps = {r.log_batch_id: figures[0] for r in records_of(log_snap.table) if (figures := optimize_figures(r))}
    dropped = last_drop(log_snap.table)
    # the first batch whose snapshot is the latest one's files up to it, mirrored whole: it makes the table's files
    # those of its snapshot whatever they were before (the batch before it skipped: its log snapshot expired)
    exact = log_snap.latest + 1 if dropped is None else max(first, dropped + 1)
    for batch in range(first, min(exact, log_snap.latest + 1)):
        try:
            snap = snapshot_of_log(log, log_snap, None if batch == log_snap.latest else batch)
        except SnapshotExpiredError:
            continue
        yield batch, snap, True, swaps.get(batch)
    if exact <= log_snap.latest:
        latest = snapshot_of_log(log, log_snap)
        files = latest.files.table
        upto = CommittedFiles(log.storage, files.filter(pc.less_equal(files.column("batch_id"), exact)))
        yield exact, Snapshot(log.storage, exact, upto), True, swaps.get(exact)
        yield from _new_batches(log.storage, latest, exact + 1)


def _vacuumed_since(storage: Storage, latest: set[str], snap: Snapshot) -> bool:
    """Whether a file of the earlier batch snapshot ``snap`` that the latest batch (its files' paths ``latest``) no
    longer commits is missing from storage: an optimize replaced it (or retention dropped it) and ``vacuum`` deleted
    it past its retention, before this table mirrored that batch (a table behind, or made later). Such a batch cannot
    be mirrored (its footers are gone) and is mirrored by the next one, as a batch whose log snapshot expired; a
    missing file the latest batch still commits is the MissingDataFileError."""
    return any(not storage.exists(p) for p in snap.files.paths().to_pylist() if p not in latest)


@names_output
def sync_iceberg(
    path: str | os.PathLike[str],
    *,
    catalog: Any = None,
    table: str | None = None,
    storage_options: dict[str, Any] | None = None,
    time_zone: str = "UTC",
) -> IcebergSyncResult:
    """Create or bring up to date the Iceberg table of the output at ``path`` so that each of its snapshots
    lists exactly the files ``committed_files(path, as_of_batch=b)`` returns for the log batch ``b`` its summary
    records (see the module docstring), and the current one those of the latest batch.

    ``catalog``: a pyiceberg ``Catalog`` or its properties (``{"type": "sql", "uri": "sqlite:///...",
    "warehouse": "file:///..."}``), with ``table`` its identifier (``"ns.name"``): the table is created or updated
    there. Without both: the metadata alone, with the output (``metadata_location``). ``time_zone``: the zone
    timestamp partition directories were written in, as :func:`~parquet_sink.read_committed` takes it.

    Raises IcebergDependencyError (no pyiceberg), NotAnOutputError (no ``_spark_metadata``), IcebergSyncError.

    Example::

        >>> sync_iceberg("/data/events", catalog={"type": "sql", "uri": "sqlite:///c.db"}, table="db.events").snapshots
        3
    """
    path = os.fspath(path)
    require_pyiceberg(f"sync_iceberg({path!r})")
    started = time.monotonic()
    options = dict(storage_options or {})
    storage = Storage(path, options)
    require_output(storage)
    key = (storage.root, None if table is None else str(table))
    with _sync_lock(key):
        for attempt in range(1, _ATTEMPTS):
            try:
                return _sync(path, storage, options, catalog, table, time_zone, started, key)
            except _LostRace as lost:
                logger.info("%s (attempt %d of %d): reading the table again", lost, attempt, _ATTEMPTS)
        return _sync(path, storage, options, catalog, table, time_zone, started, key)


def _sync(
    path: str, storage: Storage, options: dict[str, Any], catalog: Any, table: str | None, time_zone: str,
    started: float, key: tuple[str, str | None],
) -> IcebergSyncResult:
    """:func:`sync_iceberg` under the table's lock (``key``: the table in this process)."""
    from pyiceberg.exceptions import CommitFailedException, TableAlreadyExistsError

    where = storage.display(storage.root)
    opened, name, existing = _load(storage, catalog, table)
    checked = existing is not None and _KNOWN.get(key, (None,))[0] == existing.metadata_location
    previous = None if existing is None else _check_ours(existing, storage, name, checked)
    log = MetadataLog(path, storage=storage, cleanup=False)
    since = None if previous is None else snapshot_after(path, previous, storage_options=options,
                                                         across_compactions=True)
    log_snap = None if since is not None else read_snapshot(log)
    latest = since.latest_batch_id if since is not None else log_snap.latest

    def result(current: Any, **kw: Any) -> IcebergSyncResult:
        snap = None if current is None else current.current_snapshot()
        return IcebergSyncResult(
            where, None if current is None else current.metadata_location, None if snap is None else snap.snapshot_id,
            None if snap is None else _marker(snap), previous, seconds=time.monotonic() - started, **kw,
        )

    if previous is not None and (latest is None or previous > latest):
        raise IcebergSyncError(
            f"{where}: the Iceberg table {name} mirrors log batch {previous} but the log holds batches up to "
            f"{latest}: the output was reset or its log replaced. Nothing was committed; drop the table (or delete "
            f"{storage.display(storage.join(ICEBERG_DIR))}) and sync again."
        )
    if latest is None or (previous is not None and previous >= latest):
        return result(existing)
    transaction = _staged(existing.transaction()) if existing is not None else None
    missing = {} if existing is None else {k: v for k, v in TABLE_PROPERTIES.items() if existing.properties.get(k) != v}
    if missing:  # a table made before: from its next commit
        transaction.set_properties(missing)
    known = _data_files(existing, key)
    _KNOWN.pop(key, None)  # changed in place below: cached again by each commit (a failed sync reads the manifests)
    if since is not None and not _all_new(storage, since, known):
        since, log_snap = None, read_snapshot(log)
    added = removed = snapshots = staged = 0
    committed = existing

    def commit(staging: Any) -> Any:
        failpoint("iceberg_commit")
        try:
            table = staging.commit_transaction()
        except (CommitFailedException, TableAlreadyExistsError) as exc:
            raise _LostRace(
                f"{where}: another commit to the Iceberg table {name} won ({exc}); this sync committed the log "
                f"batches up to {_marker(committed.current_snapshot()) if committed is not None else None}. Sync again."
            ) from exc
        _KNOWN[key] = (table.metadata_location, known)
        failpoint("iceberg_after_commit")
        return _opened(storage, key[1], table)

    first = 0 if previous is None else previous + 1
    latest_paths: set[str] | None = None  # the latest batch's files (whole mode), when a batch's file is missing
    steps = _new_batches(storage, since, first) if since is not None else _log_batches(log, log_snap, first)
    with ThreadPoolExecutor(_FOOTER_THREADS, thread_name_prefix="iceberg-footers") as footers:
        for batch, snap, whole, swap_key in steps:
            try:
                if transaction is None:
                    if not snap.files.table.num_rows:
                        continue  # no file committed yet: no schema to create the table with
                    transaction = _new_table(opened, name, storage, dataset_of(snap, time_zone).schema,
                                             _partition_columns(snap))
                more, fewer = _commit_batch(storage, transaction, batch, snap.files, whole, known, time_zone, swap_key,
                                             footers)
            except MissingDataFileError:
                if not whole or batch == latest:
                    raise
                if latest_paths is None:  # read once, only when a batch's file is missing
                    latest_paths = set(snapshot_of_log(log, log_snap, None).files.paths().to_pylist())
                if not _vacuumed_since(storage, latest_paths, snap):
                    raise
                continue  # mirrored by the next batch, as a batch whose log snapshot expired
            added, removed, snapshots, staged = added + more, removed + fewer, snapshots + 1, staged + 1
            if staged >= commit_size(len(transaction.table_metadata.snapshots) - staged) and batch < latest:
                committed, staged = commit(transaction), 0
                _KNOWN.pop(key)  # the next batches change ``known``: not this commit's files any more
                transaction = _staged(committed.transaction())
    if transaction is None:
        return result(existing)
    if staged:
        committed = commit(transaction)
    logger.info("%s: Iceberg table %s mirrors log batch %d (was %s): %d snapshots, %d files added, %d removed",
                where, name, latest, previous, snapshots, added, removed)
    return result(committed, files_added=added, files_removed=removed, snapshots=snapshots, created=existing is None)


__all__ = [
    "INSTALL",
    "MARKER",
    "ICEBERG_DIR",
    "METADATA_DIR",
    "IcebergSyncResult",
    "current_metadata",
    "is_table_identifier",
    "metadata_dir",
    "metadata_name",
    "newest_metadata",
    "require_pyiceberg",
    "sync_iceberg",
]
