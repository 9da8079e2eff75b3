"""``vacuum``'s side of the Iceberg mirror: expire the snapshots past the retention (Iceberg's ``ExpireSnapshots``,
pyiceberg's ``table.maintenance.expire_snapshots()``), keep the data files the others reference, and delete the
table's own metadata files that nothing kept needs any more (Iceberg's expire-snapshots file cleanup, with
``write.metadata.delete-after-commit.enabled`` and ``write.metadata.previous-versions-max`` for old metadata
files).

Which snapshots expire is :func:`expired_snapshots` (as Delta keeps a version while the next one is younger than
the retention); which metadata files go is :func:`stale_metadata` (the current metadata file and the
:data:`PREVIOUS_VERSIONS` before it stay, as each commit keeps them; a manifest list or manifest that no snapshot
left references goes once older than the retention and :data:`UNREFERENCED_AGE_MS`). Only the
directories this vacuum commits through are cleaned: the table kept without a catalog, and a catalog's table
when vacuum is given its catalog (``iceberg=``); another catalog's table keeps every file its newest metadata
lists.

Example::

    >>> refs = references(Storage("/data/events"), cutoff_ms, now_ms)
    >>> len(refs.data_files), [posixpath.basename(i.path) for i in refs.stale][:1]
    (12, ['00001-....metadata.json'])
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from ..failpoints import failpoint
from ..storage.filesystem import FileInfo, Storage
from ..storage.paths import is_partial
from .errors import IcebergSyncError
from .sync import (
    _ATTEMPTS, _KNOWN, _METADATA_FILE, ICEBERG_DIR, METADATA_DIR, PREVIOUS_VERSIONS, _check_ours, _io_properties,
    _load, _location, _open_catalog, _path, _sync_lock, current_metadata, metadata_dir, require_pyiceberg, whole_newest,
)

logger = logging.getLogger(__name__)

# a manifest list, manifest or half-written metadata file no kept snapshot references is deleted only once older
# than this too (and than the retention): a sync in flight has written it and not yet committed the metadata
# that names it
UNREFERENCED_AGE_MS = 60 * 60 * 1000


def expired_snapshots(snapshots: list[tuple[int, int]], current: int | None, cutoff_ms: int) -> set[int]:
    """The ids of the snapshots (``(id, timestamp_ms)``, oldest first: the table's linear history) that stopped
    being current before ``cutoff_ms``: each but ``current`` whose next snapshot was committed before it. A
    snapshot current at any moment within the retention stays (time travel to any time within it reads what an
    Iceberg reader read then), as Delta keeps a version while a newer one is younger than its retention. Pure.

    Example: ``expired_snapshots([(1, 100), (2, 200), (3, 300)], 3, 250)`` -> ``{1}``.
    """
    return {
        snapshot_id for (snapshot_id, _), (_, next_ms) in zip(snapshots, snapshots[1:])
        if next_ms < cutoff_ms and snapshot_id != current
    }


def _history(metadata: Any) -> list[tuple[int, int]]:
    return [(s.snapshot_id, s.timestamp_ms) for s in sorted(metadata.snapshots, key=lambda s: s.sequence_number or 0)]


def _expired_of(metadata: Any, cutoff_ms: int) -> set[int]:
    """:func:`expired_snapshots` of a table's metadata."""
    current = metadata.current_snapshot_id
    return expired_snapshots(_history(metadata), current, cutoff_ms)


def expire_snapshots(storage: Storage, cutoff_ms: int, catalog: Any = None, table: str | None = None) -> list[int]:
    """Expire the snapshots of the output's table that stopped being current before ``cutoff_ms``
    (:func:`expired_snapshots`), in one commit: the table kept without a catalog, or with ``catalog`` (a pyiceberg
    ``Catalog`` or its properties) the table ``table`` there, through the catalog's own commit (another commit
    winning its swap: read again, up to as many times as a sync). Its metadata then names no file those alone
    referenced, which ``vacuum`` may delete. The ids expired (none without such a table). IcebergSyncError when
    the catalog's table is another output's or another writer committed to it.

    Example: ``expire_snapshots(Storage("/data/events"), now_ms - parse_duration_ms("7d"))`` -> ``[4108..., 7730...]``.
    """
    if catalog is None and current_metadata(storage) is None:
        return []
    where = storage.display(storage.root)
    require_pyiceberg(f"vacuum({where!r})")
    from pyiceberg.exceptions import CommitFailedException

    key = (storage.root, None if catalog is None else table)
    with _sync_lock(key):
        for attempt in range(1, _ATTEMPTS + 1):
            _, name, existing = _load(storage, catalog, key[1])
            if existing is None:
                return []
            if catalog is not None:
                _check_ours(existing, storage, name)
            expired = sorted(_expired_of(existing.metadata, cutoff_ms))
            if not expired:
                return []
            before = existing.metadata_location
            failpoint("iceberg_expire")  # the table read, its expiry not committed: a sync may commit meanwhile
            try:
                existing.maintenance.expire_snapshots().by_ids(expired).commit()
            except CommitFailedException as exc:
                logger.info("%s: another commit to the Iceberg table %s won (%s; attempt %d of %d): reading it again",
                            where, name, exc, attempt, _ATTEMPTS)
                continue
            cached = _KNOWN.get(key)
            if cached is not None and cached[0] == before:  # the same files: the cache follows the new version
                _KNOWN[key] = (existing.metadata_location, cached[1])
            logger.info("%s: expired %d snapshot(s) of the Iceberg table %s older than the retention",
                        where, len(expired), name)
            return expired
    raise IcebergSyncError(
        f"{where}: the snapshots of the Iceberg table {table} could not be expired: another commit won the catalog's "
        f"swap {_ATTEMPTS} times in a row. Nothing was deleted; run vacuum again."
    )


def stale_metadata(
    files: Sequence[tuple[str, int]], current: str, needed: Collection[str], before_ms: int,
    keep: int = PREVIOUS_VERSIONS,
) -> list[str]:
    """The names to delete among ``files`` (``(name, mtime_ms)``: one table's metadata directory), ``current``
    its current metadata file and ``needed`` the manifest lists and manifests its snapshots left reference:

    * a metadata file (``NNNNN-*.metadata.json``, a torn one too) of a version more than ``keep`` before the
      current one, however old: the rule each commit applies (the table's ``write.metadata.previous-versions-max``
      is :data:`PREVIOUS_VERSIONS`, with ``write.metadata.delete-after-commit.enabled``), here for those a commit
      left (killed before its deletion, a table made before); never one of the current version or a later one (a
      sync's commit in flight);
    * a manifest list or manifest (``*.avro``) ``needed`` lacks, written before ``before_ms``;
    * the hidden file a writer killed while writing a metadata file (or the version hint) left
      (:func:`~parquet_sink.storage.paths.is_partial`), written before ``before_ms``.

    Anything else stays. Pure.

    Example: ``stale_metadata([("00001-a.metadata.json", 5), ("00002-b.metadata.json", 6), ("snap-1.avro", 5)],
    "00002-b.metadata.json", set(), 10, keep=0)`` -> ``['00001-a.metadata.json', 'snap-1.avro']``.
    """
    version = int(_METADATA_FILE.match(current).group(1))
    stale = []
    for name, mtime_ms in files:
        if match := _METADATA_FILE.match(name):
            if int(match.group(1)) < version - keep:
                stale.append(name)
        elif ((name.endswith(".avro") and name not in needed) or is_partial(name)) and mtime_ms < before_ms:
            stale.append(name)
    return sorted(stale)


@dataclass(frozen=True)
class IcebergReferences:
    """What ``vacuum`` keeps and deletes for the output's Iceberg tables: ``data_files``, the fsspec paths of
    the data files a snapshot left references; ``stale``, the metadata files, manifest lists and manifests of
    the tables vacuum commits through that nothing kept needs (:func:`stale_metadata`)."""

    data_files: set[str]
    stale: list[FileInfo]


def _catalog_current(storage: Storage, catalog: Any, table: str) -> str | None:
    """The fsspec path of the current metadata file of ``table`` in ``catalog``; None when it has no such table."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    try:
        return _path(storage, _open_catalog(catalog, storage.display(storage.root)).load_table(table).metadata_location)
    except (NoSuchTableError, NoSuchNamespaceError):
        return None


def references(
    storage: Storage, cutoff_ms: int, now_ms: int, catalog: Any = None, table: str | None = None
) -> IcebergReferences:
    """The data files an Iceberg table of the output may still read: those of every snapshot of the table without
    catalog, and with ``catalog`` of the table ``table`` there, that :func:`expire_snapshots` keeps at
    ``cutoff_ms``, and of every snapshot of each other catalog table whose metadata lives with the output (its
    newest metadata files: without its catalog vacuum expires nothing of it). With them, the stale metadata files
    of the tables vacuum commits through (:func:`stale_metadata`, deleted files older than ``cutoff_ms`` and
    than :data:`UNREFERENCED_AGE_MS` before ``now_ms``); none of a table whose current metadata file cannot be
    told (two of its newest version, or a catalog's current one not the newest in its directory). Empty when the
    output keeps no Iceberg table.

    Example: ``references(Storage("/data/events"), cutoff_ms, now_ms).data_files`` -> ``{'/data/events/k=a/part-0...parquet'}``.
    """
    directory = storage.join(ICEBERG_DIR)
    if not storage.exists(directory):
        return IcebergReferences(set(), [])
    require_pyiceberg(f"vacuum({storage.display(storage.root)!r})")
    from pyiceberg.table import StaticTable

    # the directories of the tables vacuum commits through: their snapshots expire, their stale files go (a
    # catalog's table only when the catalog holds it: a directory of that name may be another catalog's table)
    expiring: dict[str, str | None] = {storage.join(METADATA_DIR): None}
    if catalog is not None and (found := _catalog_current(storage, catalog, table)) is not None:
        expiring[storage.join(metadata_dir(table))] = found
    before_ms = min(cutoff_ms, now_ms - UNREFERENCED_AGE_MS)
    kept: set[str] = set()
    read: set[str] = set()  # manifests shared by snapshots are read once
    stale: list[FileInfo] = []
    for table_dir in storage.ls_names(directory):
        infos = storage.ls(table_dir)
        names = [posixpath.basename(i.path) for i in infos]
        newest = whole_newest(storage, table_dir, names)
        current = newest[0] if len(newest) == 1 and table_dir in expiring else None
        found = expiring.get(table_dir)
        if found is not None:  # a catalog's table: its current file, the newest here, or nothing deleted
            current = posixpath.basename(found) if posixpath.dirname(found) == table_dir else None
            current = current if current in newest else None
        needed: set[str] = set()
        for name in newest:
            metadata = StaticTable.from_metadata(_location(storage, posixpath.join(table_dir, name)), properties=_io_properties(storage))
            expired = _expired_of(metadata.metadata, cutoff_ms) if table_dir in expiring else set()
            for snap in metadata.metadata.snapshots:
                if snap.snapshot_id in expired:
                    continue
                needed.add(_path(storage, snap.manifest_list))
                for manifest in snap.manifests(metadata.io):
                    needed.add(_path(storage, manifest.manifest_path))
                    if manifest.manifest_path in read:
                        continue
                    read.add(manifest.manifest_path)
                    for entry in manifest.fetch_manifest_entry(metadata.io, discard_deleted=True):
                        kept.add(_path(storage, entry.data_file.file_path))
        if current is not None:
            own = {posixpath.basename(p) for p in needed if posixpath.dirname(p) == table_dir}
            gone = set(stale_metadata([(n, i.mtime_ms) for n, i in zip(names, infos)], current, own, before_ms))
            stale += [i for n, i in zip(names, infos) if n in gone]
    return IcebergReferences(kept, stale)


def delete_stale(storage: Storage, stale: Sequence[FileInfo]) -> None:
    """Delete the files :func:`references` found stale; the failpoint ``iceberg_vacuum`` before each (a vacuum
    killed there leaves the table readable, and the next vacuum deletes the rest)."""
    for info in stale:
        failpoint("iceberg_vacuum")
        storage.delete(info.path)
        logger.info("deleted the Iceberg metadata file %s (no snapshot left references it)", storage.display(info.path))


__all__ = [
    "PREVIOUS_VERSIONS",
    "UNREFERENCED_AGE_MS",
    "IcebergReferences",
    "delete_stale",
    "expire_snapshots",
    "expired_snapshots",
    "references",
    "stale_metadata",
]
