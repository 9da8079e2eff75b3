"""``verify``'s and ``doctor``'s side of the Iceberg mirror: what disagrees between the output's Iceberg tables and
``_spark_metadata`` (:func:`compare_iceberg`), as :func:`parquet_sink.delta.compare_logs` tells it of the Delta
log. The counterpart of Iceberg's own table checks (a snapshot's files against storage, as Spark's
``RemoveOrphanFiles`` and ``expire_snapshots`` read them) joined with the mirror's rule: the current snapshot lists
exactly the files the log commits as of the batch its summary records (:data:`~.sync.MARKER`). The remedy of a
table that cannot follow the log any more is :func:`recreate_iceberg` (``parquet-sink iceberg-sync --recreate``),
as ``delta-sync --recreate`` is the Delta log's.

Example::

    >>> compare_iceberg("/data/events")
    ([], ['/data/events: the Iceberg table without catalog is behind: it mirrors log batch 55, the log is at 57; ...'])
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from typing import Any

from ..errors import ParameterError, SnapshotExpiredError, names_output
from ..log.files import require_output
from ..read.reader import Snapshot, snapshot
from ..storage.filesystem import Storage
from .errors import IcebergSyncError
from .follow import IcebergTarget
from .sync import (
    _KNOWN, _METADATA_FILE, _OPENED, ICEBERG_DIR, METADATA_DIR, IcebergSyncResult, _check_ours, _data_files,
    _io_properties, _location, _marker, _open_catalog, _path, _sync_lock, current_metadata, is_table_identifier,
    metadata_dir, require_pyiceberg, sync_iceberg, whole_newest,
)

_REREADS = 3  # a disagreement is read again this many times before it is reported (a sync may be running beside)


def compare_iceberg(
    path: str | os.PathLike[str], *, catalog: Any = None, table: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> tuple[list[str], list[str]]:
    """What disagrees between the output's Iceberg tables and ``_spark_metadata`` at ``path``: (problems,
    warnings), each sentence naming the table and the command that fixes it. The tables: the one kept without a
    catalog when the output holds it, and with ``catalog`` (a pyiceberg ``Catalog`` or its properties) the table
    ``table`` there. Problems: a snapshot another Iceberg writer committed, a table located elsewhere, a current
    snapshot that lists a file the log does not commit as of the batch it mirrors or misses one it does, a table
    ahead of the log (an output reset), a file a snapshot references that is missing or of another size than the
    table records, two metadata files of the newest version. Warnings: a table behind the log (the
    ``parquet-sink iceberg-sync`` command that catches up), a catalog's table whose metadata is with the output but
    that was not given. Both empty when the output keeps no Iceberg table and none is given (pyiceberg not even
    imported). The table is read first, then the log (a batch and its sync beside can only leave the table behind);
    a disagreement is read again before it is reported. IcebergDependencyError without pyiceberg.

    Example: ``compare_iceberg("/data/events", catalog={"type": "sql", "uri": "sqlite:///c.db"}, table="db.events")``
    -> ``([], [])``.
    """
    storage = Storage(os.fspath(path), dict(storage_options or {}))
    targets = [IcebergTarget()] if storage.exists(storage.join(METADATA_DIR)) else []
    if catalog is not None:
        targets.append(IcebergTarget(catalog, table))
    problems: list[str] = []
    warnings = _unchecked(storage, table)
    if targets:
        require_pyiceberg(f"verify({storage.display(storage.root)!r}) of its Iceberg table")
    for target in targets:
        found, said = _compare_table(storage, target)
        problems += found
        warnings += said
    return problems, warnings


def _unchecked(storage: Storage, given: str | None) -> list[str]:
    """A warning for each catalog table whose metadata directory is with the output (``.<ns.name>``) but that
    was not given (``given``): without its catalog, which metadata file is current cannot be told."""
    directory = storage.join(ICEBERG_DIR)
    if not storage.exists(directory):
        return []
    where = storage.display(storage.root)
    names = sorted(posixpath.basename(p) for p in storage.ls_names(directory))
    tables = [n[1:] for n in names if n.startswith(".") and storage.join(ICEBERG_DIR, n) != storage.join(METADATA_DIR)]
    return [
        f"{where}: the Iceberg table {name} of a catalog keeps its metadata in "
        f"{storage.display(storage.join(metadata_dir(name)))} and was not checked: give its catalog "
        f"(iceberg={{'catalog': ..., 'table': '{name}'}}; the command line's --catalog-uri URI --table {name})"
        for name in tables if name != given
    ]


def _named(storage: Storage, target: IcebergTarget) -> str:
    """The table as a sentence names it."""
    if target.table is not None:
        return target.table
    return f"without catalog ({storage.display(storage.join(METADATA_DIR))})"


def _open(storage: Storage, target: IcebergTarget) -> Any:
    """The table ``target`` names, as its catalog (or, without one, its current metadata file) holds it now;
    None when there is none."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
    from pyiceberg.table import StaticTable

    if target.catalog is None:
        location = current_metadata(storage)
        return None if location is None else StaticTable.from_metadata(location, properties=_io_properties(storage))
    try:
        return _open_catalog(target.catalog, storage.display(storage.root)).load_table(target.table)
    except (NoSuchTableError, NoSuchNamespaceError):
        return None


def _compare_table(storage: Storage, target: IcebergTarget) -> tuple[list[str], list[str]]:
    """(problems, warnings) of one table (see :func:`compare_iceberg`)."""
    where = storage.display(storage.root)
    name = _named(storage, target)
    sync = target.cli(where)
    recreate = f"{sync} --recreate"
    remedy = (
        f"Run `{recreate}`: it drops the table from its catalog (its data files stay: they are the output's) and "
        f"deletes its metadata with the output ({storage.display(storage.join(metadata_dir(target.table)))}), then "
        "makes it again from _spark_metadata (Iceberg readers lose its history)."
    )
    problems: list[str] = []
    warnings: list[str] = []
    root = _location(storage, storage.root).rstrip("/")
    for _ in range(_REREADS):
        iceberg = None
        try:
            iceberg = _open(storage, target)
            if iceberg is None:
                snap = snapshot(storage.url, storage_options=storage.storage_options)
                if target.catalog is None or not len(snap.files):
                    return [], []
                return [], [f"{where}: the catalog holds no Iceberg table {name}: `{sync}` creates it"]
            _check_ours(iceberg, storage, name)
            if target.catalog is None:
                _check_beside(storage, name, iceberg.metadata_location, remedy)
            current = iceberg.current_snapshot()
            mirrored = -1 if current is None else _marker(current)
            files = _data_files(iceberg, (storage.root, target.table))
            snap = snapshot(storage.url, storage_options=storage.storage_options)
        except IcebergSyncError as exc:  # another writer's snapshot, another output's table, two current files
            elsewhere = target.catalog is not None and iceberg is not None and iceberg.location().rstrip("/") != root
            problems = [str(exc) if elsewhere else f"{exc} {remedy}"]  # another output's table is never dropped
            continue
        latest = -1 if snap.latest_batch_id is None else snap.latest_batch_id
        warnings = []
        if mirrored > latest:
            problems = [
                f"{where}: the Iceberg table {name} mirrors log batch {mirrored} but the log holds batches up to "
                f"{latest}: the output was reset or its log replaced. {remedy}"
            ]
            continue
        problems, warnings = _file_set(storage, name, iceberg, files, snap, mirrored, remedy)
        problems += _missing(storage, name, iceberg)
        if mirrored < latest:
            warnings.append(
                f"{where}: the Iceberg table {name} is behind: it mirrors log batch {mirrored}, the log is at "
                f"{latest}; Iceberg readers miss the later batches' files until `{sync}` or the next batch written "
                "with iceberg=."
            )
        if not problems:
            break
    return problems, warnings


def _check_beside(storage: Storage, name: str, current: str, remedy: str) -> None:
    """IcebergSyncError when the metadata directory of the table without catalog holds a metadata file of the
    current version (``current``'s) or a later one other than ``current``: another Iceberg writer's commit (a
    pyiceberg catalog the table was registered in names its files at random), which no sync of the output sees as
    the table's, and which a reader that lists the directory may take for the current version."""
    directory = storage.join(METADATA_DIR)
    version = int(_METADATA_FILE.match(posixpath.basename(current)).group(1))
    beside = sorted(n for n in map(posixpath.basename, storage.ls_names(directory))
                    if (m := _METADATA_FILE.match(n)) and int(m.group(1)) >= version
                    and posixpath.join(directory, n) != _path(storage, current)
                    and whole_newest(storage, directory, [n]))  # not a torn file a killed sync left: no commit
    if beside:
        raise IcebergSyncError(
            f"{storage.display(storage.root)}: the Iceberg table {name} holds {len(beside)} metadata file(s) of its "
            f"current version {version} or later beside its current one ({posixpath.basename(current)}), first "
            f"{beside[0]}: committed by another Iceberg writer, not part of the table the log's syncs keep."
        )


def _file_set(
    storage: Storage, name: str, iceberg: Any, files: Mapping[str, Any], latest: Snapshot, mirrored: int, remedy: str
) -> tuple[list[str], list[str]]:
    """(problems, warnings) of the current snapshot's ``files`` (by location) against the files the log commits as
    of the batch ``mirrored`` it records (``latest``: the log's latest snapshot, read after the table)."""
    where = storage.display(storage.root)
    if mirrored < 0:
        return [], []
    try:
        snap = latest if latest.latest_batch_id == mirrored else snapshot(
            storage.url, as_of_batch=mirrored, storage_options=storage.storage_options)
    except SnapshotExpiredError as exc:
        return [], [f"{where}: the Iceberg table {name} was not compared file by file with the log as of batch "
                    f"{mirrored}: {exc}"]
    committed = {_location(storage, p) for p in snap.files.paths().to_pylist()}
    problems = []
    for paths, says in ((sorted(set(files) - committed), "lists {n} file(s) that the log does not commit as of that "
                         "batch (first: {first}): Iceberg readers read them."),
                        (sorted(committed - set(files)), "misses {n} file(s) that the log commits as of that batch "
                         "(first: {first}): Iceberg readers miss their rows.")):
        if paths:
            problems.append(
                f"{where}: the Iceberg table {name} (snapshot {iceberg.current_snapshot().snapshot_id}, mirroring "
                f"log batch {mirrored}) {says.format(n=len(paths), first=storage.display(_path(storage, paths[0])))} "
                f"{remedy}"
            )
    return problems, []


def _missing(storage: Storage, name: str, iceberg: Any) -> list[str]:
    """A problem for each data file a snapshot of the table references that storage lacks or holds at another
    size than the table records (Iceberg readers find the footer by it): each manifest read once."""
    where = storage.display(storage.root)
    recorded: dict[str, tuple[int, int]] = {}  # location -> (size, the first snapshot referencing it)
    read: set[str] = set()
    for snap in iceberg.metadata.snapshots:
        for manifest in snap.manifests(iceberg.io):
            if manifest.manifest_path in read:
                continue
            read.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(iceberg.io, discard_deleted=True):
                recorded.setdefault(entry.data_file.file_path, (entry.data_file.file_size_in_bytes, snap.snapshot_id))
    problems = []
    for location, (size, snapshot_id) in sorted(recorded.items()):
        shown = storage.display(_path(storage, location))
        what = f"{where}: the Iceberg table {name} references {shown} (snapshot {snapshot_id})"
        try:
            found = storage.info(_path(storage, location)).size
        except FileNotFoundError:
            problems.append(
                f"{what}, which is missing: Iceberg readers of that snapshot fail on it. Restore the file (a snapshot "
                "no longer current needs it until `parquet-sink vacuum` expires that snapshot past its retention)."
            )
            continue
        if found != size:
            problems.append(f"{what} with {size} bytes, but it has {found}: Iceberg readers cannot find its footer.")
    return problems


@names_output
def recreate_iceberg(
    path: str | os.PathLike[str], *, catalog: Any = None, table: str | None = None,
    storage_options: dict[str, Any] | None = None, time_zone: str = "UTC",
) -> IcebergSyncResult:
    """Make the output's Iceberg table again from ``_spark_metadata``: the remedy of a table another Iceberg writer
    committed to, or that lists other files than the log (what :func:`compare_iceberg` names), as
    ``sync_delta_log(recreate=True)`` is the Delta log's. The table ``catalog`` and ``table`` name (as
    :func:`~parquet_sink.sync_iceberg` takes them) is dropped from its catalog (``drop_table``, never a purge: the
    data files are the output's) and its metadata directory with the output deleted (the table kept without a
    catalog: :data:`~.sync.METADATA_DIR`), then synced anew: one snapshot per log batch the log still holds. Iceberg
    readers lose the table's history (its snapshots, time travel). IcebergSyncError, nothing dropped, when the
    catalog holds the table at another location (another output's table); ParameterError as the sync's.

    Example: ``recreate_iceberg("/data/events").created`` -> ``True``.
    """
    path = os.fspath(path)
    require_pyiceberg(f"recreate_iceberg({path!r})")
    storage = Storage(path, dict(storage_options or {}))
    require_output(storage)
    where = storage.display(storage.root)
    if (catalog is None) != (table is None) or (table is not None and not is_table_identifier(table)):
        raise ParameterError(
            f"recreate_iceberg({where!r}): give catalog= and table= ('namespace.name') together, or neither (the "
            f"table kept without a catalog), not table={table!r}. Nothing was dropped."
        )
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    key = (storage.root, table)
    with _sync_lock(key):
        if catalog is not None:
            opened = _open_catalog(catalog, where)
            try:
                existing = opened.load_table(table)
            except (NoSuchTableError, NoSuchNamespaceError):
                existing = None
            if existing is not None and existing.location().rstrip("/") != _location(storage, storage.root).rstrip("/"):
                raise IcebergSyncError(
                    f"{where}: the Iceberg table {table} is located at {existing.location()}, not at this output: "
                    "nothing was dropped; give this output's table name."
                )
            if existing is not None:
                opened.drop_table(table)
        storage.remove_tree(storage.join(metadata_dir(table)))
        _KNOWN.pop(key, None)
        if table is None:
            _OPENED.pop(storage.root, None)
    return sync_iceberg(path, catalog=catalog, table=table, storage_options=storage_options, time_zone=time_zone)


__all__ = ["compare_iceberg", "recreate_iceberg"]
