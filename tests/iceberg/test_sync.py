"""sync_iceberg without Spark: an Iceberg table (pyiceberg, real metadata files, a SQLite catalog or the metadata
alone with the output) holds one snapshot per log batch, each listing exactly the files the log commits as of that
batch; pyiceberg's scans (current, by snapshot, with row filters that prune by the manifests) return exactly
read_committed's rows, through schema evolution, partitions with nulls, optimize and a re-sync."""

from __future__ import annotations

import datetime as _dt
import json
import decimal
import math
import shutil
import time
import uuid
from collections import Counter
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import GreaterThanOrEqual, LessThan
from pyiceberg.table import StaticTable

from parquet_sink import MetadataLog, committed_files, optimize, read_committed, sync_iceberg, vacuum, write_batch
from parquet_sink.iceberg import METADATA_DIR, IcebergSyncError
from parquet_sink.iceberg import sync as iceberg_sync
from parquet_sink.iceberg.sync import HINT, MARKER
from parquet_sink.log.entry import LogEntry
from parquet_sink.log.snapshot import read_snapshot
from parquet_sink.storage.filesystem import Storage
from tests.delta.readers import spark_style_batch
from tests.helpers.filters import fixed_or_fuzzed


def _table(version: int, rows: int = 5, extra: bool = False) -> pa.Table:
    """Rows of every kind the sync must carry: ints, strings, floats, dates, UTC timestamps, decimals, nulls;
    ``k``/``n`` for partitions (a null ``k`` among them); ``extra`` adds a column (schema evolution)."""
    ids = [version * 10 + i for i in range(rows)]
    columns = {
        "i": pa.array(ids, pa.int64()),
        "s": [f"s{i}" if i % 4 else None for i in ids],
        "f": [i / 3 if i % 3 else None for i in ids],
        "day": pa.array([_dt.date(1999 + i % 3, 1, 1 + i % 28) for i in ids]),
        "at": pa.array([_dt.datetime(2024, 1, 1, tzinfo=_dt.UTC) + _dt.timedelta(seconds=i, microseconds=7) for i in ids],
                       pa.timestamp("us", "UTC")),
        "price": pa.array([decimal.Decimal(i) / 4 if i % 5 else None for i in ids], pa.decimal128(12, 2)),
        "k": [["a", "b c", None][i % 3] for i in ids],
        "n": pa.array([i % 2 for i in ids], pa.int32()),
    }
    if extra:
        columns["late"] = [f"l{i}" for i in ids]
    return pa.table(columns)


def _rows(table: pa.Table, like: pa.Table) -> list[dict]:
    """``table``'s rows as ``like``'s columns and types (Iceberg reads strings as large strings, a column of
    nulls only as a string, and orders a partition column where the table declares it), sorted."""
    if not like.num_columns:
        return []
    schema = pa.schema([f.with_type(pa.string()) if pa.types.is_null(f.type) else f for f in like.schema])
    table = table.select(like.column_names).cast(schema)
    return sorted(table.to_pylist(), key=repr)


def _assert_same(iceberg: pa.Table, root: Path, **options) -> None:
    expected = read_committed(str(root), **options)
    assert iceberg.num_rows == expected.num_rows
    assert _rows(iceberg, expected) == _rows(expected, expected)


def _write(root: Path, versions: range, partition_by: list[str], extra_from: int = 99) -> None:
    for version in versions:
        write_batch(str(root), _table(version, extra=version >= extra_from), app_id="a", version=version,
                    partition_by=partition_by)


def _catalog_properties(tmp_path: Path) -> dict[str, str]:
    """An embedded SQLite catalog's properties (``name``: the catalog's name its rows are kept under)."""
    return {"name": "c", "type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
            "warehouse": f"file://{tmp_path / 'wh'}"}


def _snapshots_by_batch(table) -> dict[int, int]:
    return {int(s.summary[MARKER]): s.snapshot_id for s in table.metadata.snapshots}


@pytest.mark.parametrize("partition_by", [[], ["k", "n"]], ids=["flat", "partitioned"])
def test_metadata_with_the_output_one_snapshot_per_batch(tmp_path, partition_by, monkeypatch):
    """Without a catalog: the metadata lives under the hidden directory, metadata_location opens it (pyiceberg,
    polars); one snapshot per log batch, each reading read_committed(as_of_batch=b)'s rows; a second sync is a
    no-op, a sync after more batches adds only theirs (a column added by a later batch included)."""
    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")  # no polars_iceberg plugin: pyiceberg plans
    root = tmp_path / "out"
    _write(root, range(3), partition_by)
    first = sync_iceberg(str(root))
    assert first.created and first.snapshots == 3 and first.log_batch == 2 and first.previous_log_batch is None
    assert first.files_added == len(committed_files(str(root))) and first.files_removed == 0
    assert first.metadata_location.startswith(str(root / METADATA_DIR) + "/")
    table = StaticTable.from_metadata(first.metadata_location)
    assert table.current_snapshot().snapshot_id == first.snapshot_id
    _assert_same(table.scan().to_arrow(), root)
    _assert_same(pl.scan_iceberg(first.metadata_location).collect().to_arrow(), root)  # polars' own Iceberg reader

    again = sync_iceberg(str(root))
    assert (again.snapshots, again.files_added, again.metadata_location) == (0, 0, first.metadata_location)

    before = len(committed_files(str(root)))
    _write(root, range(3, 5), partition_by, extra_from=4)
    later = sync_iceberg(str(root))
    assert (later.previous_log_batch, later.log_batch, later.snapshots) == (2, 4, 2)
    assert later.files_added == len(committed_files(str(root))) - before
    table = StaticTable.from_metadata(later.metadata_location)
    assert "late" in table.schema().column_names
    _assert_same(table.scan().to_arrow(), root)
    snapshots = _snapshots_by_batch(table)
    assert sorted(snapshots) == [0, 1, 2, 3, 4]
    for batch, snapshot_id in snapshots.items():
        _assert_same(table.scan(snapshot_id=snapshot_id).to_arrow(), root, as_of_batch=batch)
    # row filters: on a data column, and on partition columns the manifests prune by
    _assert_same(table.scan(row_filter="i >= 23").to_arrow(), root, filter=pc.field("i") >= 23)
    _assert_same(table.scan(row_filter="k == 'a' and n == 1").to_arrow(), root,
                 filter=(pc.field("k") == "a") & (pc.field("n") == 1))
    _assert_same(table.scan(row_filter="k is null").to_arrow(), root, filter=pc.field("k").is_null())
    if partition_by:
        pruned = table.scan(row_filter="k == 'a' and n == 1").plan_files()
        assert {t.file.partition[0] for t in pruned} == {"a"}
        assert len(pruned) < len(committed_files(str(root)))


def test_catalog_created_and_updated(tmp_path):
    """With a SQLite catalog (as properties, then as a Catalog): the table is created there at the output's
    location, its metadata with the output; a sync through either form is a no-op when in step; the catalog's
    table reads read_committed's rows after every batch."""
    root = tmp_path / "out"
    properties = _catalog_properties(tmp_path)
    _write(root, range(2), ["k"])
    result = sync_iceberg(str(root), catalog=properties, table="db.events")
    catalog = SqlCatalog("c", uri=properties["uri"], warehouse=properties["warehouse"])
    table = catalog.load_table("db.events")
    assert table.metadata_location == result.metadata_location and table.location() == str(root)
    _assert_same(table.scan().to_arrow(), root)
    assert sync_iceberg(str(root), catalog=catalog, table="db.events").snapshots == 0
    _write(root, range(2, 4), ["k"])
    assert sync_iceberg(str(root), catalog=catalog, table="db.events").snapshots == 2
    _assert_same(catalog.load_table("db.events").scan().to_arrow(), root)
    # the table without catalog is another table: it is created apart, the catalog's untouched
    assert sync_iceberg(str(root)).created


def test_optimize_then_sync(tmp_path):
    """An optimize's swap is one snapshot deleting the replaced files and adding the new ones: the rows are
    unchanged, the snapshots before it still read their batches' rows."""
    root = tmp_path / "out"
    _write(root, range(4), ["k"])
    sync_iceberg(str(root))
    replaced = len(committed_files(str(root)))
    result = optimize(str(root)).iceberg  # the table the output keeps follows the swap
    assert result.files_removed == replaced and 0 < result.files_added < replaced
    table = StaticTable.from_metadata(result.metadata_location)
    assert table.current_snapshot().summary.operation.value == "replace"
    _assert_same(table.scan().to_arrow(), root)
    for batch, snapshot_id in _snapshots_by_batch(table).items():
        _assert_same(table.scan(snapshot_id=snapshot_id).to_arrow(), root, as_of_batch=batch)


def test_another_writer_is_refused(tmp_path):
    """A snapshot pyiceberg's own append committed to the table is another writer's: the sync refuses it,
    naming it, and commits nothing."""
    root = tmp_path / "out"
    properties = _catalog_properties(tmp_path)
    _write(root, range(2), [])
    sync_iceberg(str(root), catalog=properties, table="db.events")
    catalog = SqlCatalog("c", uri=properties["uri"], warehouse=properties["warehouse"])
    table = catalog.load_table("db.events")
    table.append(read_committed(str(root)).slice(0, 1).cast(table.schema().as_arrow()))
    _write(root, range(2, 3), [])
    with pytest.raises(IcebergSyncError, match="another Iceberg writer"):
        sync_iceberg(str(root), catalog=properties, table="db.events")
    assert catalog.load_table("db.events").metadata_location == table.metadata_location


def test_a_reset_output_another_outputs_table_and_two_current_versions_are_refused(tmp_path):
    """Refused, naming the cause, nothing committed: a table mirroring a batch the log no longer holds (the
    output reset), a catalog table located at another output, and a table without catalog found by a listing
    whose newest version has two metadata files (two syncs of the release before at once)."""
    root, other = tmp_path / "out", tmp_path / "other"
    properties = _catalog_properties(tmp_path)
    _write(root, range(3), [])
    _write(other, range(1), [])
    first = sync_iceberg(str(root))
    sync_iceberg(str(root), catalog=properties, table="db.events")
    with pytest.raises(IcebergSyncError, match="located at"):
        sync_iceberg(str(other), catalog=properties, table="db.events")

    current = Path(first.metadata_location)
    twin = current.with_name(current.name.split("-", 1)[0] + "-twin.metadata.json")
    twin.write_bytes(current.read_bytes())
    (root / METADATA_DIR / HINT).unlink()  # found by a listing, as the release before found it (no hint), in a
    iceberg_sync._OPENED.clear()  # process that did not commit it
    with pytest.raises(IcebergSyncError, match="two syncs committed at once"):
        sync_iceberg(str(root))
    twin.unlink()

    shutil.rmtree(root / "_spark_metadata")
    shutil.rmtree(root / "_exactly_once" / "leases", ignore_errors=True)
    _write(root, range(1), [])
    with pytest.raises(IcebergSyncError, match="reset"):
        sync_iceberg(str(root))
    # the table is as it was: its only metadata file is still the first sync's
    assert sorted(p.name for p in (root / METADATA_DIR).glob("*.metadata.json")) == [current.name]


@pytest.mark.parametrize(("store", "documented"), [
    ("moto", lambda options: {"s3.endpoint": options["client_kwargs"]["endpoint_url"], "s3.access-key-id":
                              options["key"], "s3.secret-access-key": options["secret"],
                              "s3.region": options["client_kwargs"]["region_name"]}),
    ("azurite", lambda options: {"adls.connection-string": options["connection_string"],
                                 "adls.account-name": options["account_name"]}),
])
def test_on_object_stores(request, tmp_path, store, documented):
    """On S3 (moto) and Azure (Azurite) without a catalog: the output's storage options reach pyiceberg's FileIO
    (endpoint, credentials; Azure's connection string naming the emulator's endpoint, and the account, which
    pyiceberg otherwise takes from the container's name), the metadata is written under the output's hidden area,
    and pyiceberg, opened with the properties docs/iceberg.md names, reads the committed rows through it, after
    each of two syncs; verify compares the table with the log there too. Before, an output on Azure got no
    properties: pyiceberg took the container for the account and the sync failed."""
    from parquet_sink import verify
    from tests.conftest import make_backend

    backend = make_backend(store, request, tmp_path)
    url, options = backend.url, backend.storage_options
    properties = documented(options)
    assert iceberg_sync._io_properties(Storage(url, options)).items() >= properties.items()
    for version in range(2):
        write_batch(url, _table(version), app_id="a", version=version, partition_by=["k"], storage_options=options)
        result = sync_iceberg(url, storage_options=options)
        assert result.metadata_location.startswith(f"{url}/{METADATA_DIR}/")
        scanned = StaticTable.from_metadata(result.metadata_location, properties=properties).scan().to_arrow()
        expected = read_committed(url, storage_options=options)
        assert _rows(scanned, expected) == _rows(expected, expected) and expected.num_rows == 5 * (version + 1)
    report = verify(url, storage_options=options)
    assert report.ok and not report.warnings, report
    assert backend.secret not in repr(report) + repr(result)


def test_many_batches_are_committed_a_few_at_a_time(tmp_path, monkeypatch):
    """A sync catching up more batches than one commit holds commits them in turn (two a commit here): every
    batch still gets its snapshot, each reads its batch's rows, and the table ends at the latest batch."""
    monkeypatch.setattr(iceberg_sync, "_BATCHES_PER_COMMIT", 2)
    root = tmp_path / "out"
    _write(root, range(5), ["k"])
    result = sync_iceberg(str(root))
    assert (result.snapshots, result.log_batch) == (5, 4)
    assert len(list((root / METADATA_DIR).glob("*.metadata.json"))) == 3  # batches 0-1, 2-3, 4
    table = StaticTable.from_metadata(result.metadata_location)
    for batch, snapshot_id in _snapshots_by_batch(table).items():
        _assert_same(table.scan(snapshot_id=snapshot_id).to_arrow(), root, as_of_batch=batch)
    assert sorted(_snapshots_by_batch(table)) == list(range(5))


def test_a_file_committed_twice_is_listed_once(tmp_path):
    """A batch whose log lists one new file twice (Spark's readers read it twice): the Iceberg table lists it
    once (a manifest keys files by path; appending it twice would make Iceberg readers read it twice too, and
    a later delete remove one of the two)."""
    root = tmp_path / "out"
    _write(root, range(1), [])
    original = committed_files(str(root))[0]
    copy = Path(original.path).with_name("part-copy.parquet")
    copy.write_bytes(Path(original.path).read_bytes())
    entry = LogEntry(copy.as_uri(), original.size, False, original.modification_time)
    assert MetadataLog(str(root)).add(1, [entry, entry])
    rows = pq.ParquetFile(original.path).metadata.num_rows
    assert read_committed(str(root)).num_rows == 3 * rows
    table = StaticTable.from_metadata(sync_iceberg(str(root)).metadata_location)
    paths = table.inspect.files().column("file_path").to_pylist()
    assert sorted(paths) == sorted([original.path, str(copy)])
    assert table.scan().to_arrow().num_rows == 2 * rows


_INT = st.integers(-(2**63), 2**63 - 1)
_TEXT = st.text(st.characters(codec="utf-8"), max_size=20)  # beyond U+FFFF, and beyond the 16 characters bounds keep
_FLOAT = st.floats(allow_nan=False)  # NaN: no row equality to compare by
_DAY = st.dates(_dt.date(1, 1, 1), _dt.date(9999, 12, 31))
_AT = st.datetimes(_dt.datetime(1, 1, 2), _dt.datetime(9999, 12, 30), timezones=st.just(_dt.UTC))
_DECIMAL = st.decimals(-(10**28) + 1, 10**28 - 1, places=10, allow_nan=False, allow_infinity=False)


_ACTIONS = ("", "sync", "optimize", "vacuum", "expire")  # after a batch: nothing, sync, optimize, vacuum("7d"), vacuum(0)


@st.composite
def _histories(draw):
    """Batches of random rows (nullable ints at their limits, strings beyond U+FFFF and longer than the bounds
    Iceberg keeps, floats with infinities, dates and UTC timestamps of years 1..9999, decimals of 38 digits;
    partition values with the null partition), each followed by an action of :data:`_ACTIONS`: a sync, an
    optimize, a vacuum within the retention (keeps every snapshot) or past it (expires all but the current)."""
    partitioned = draw(st.booleans())
    batches = draw(st.lists(st.lists(st.tuples(st.none() | _INT, st.none() | _TEXT, st.none() | _FLOAT,
                                               st.none() | _DAY, st.none() | _AT, st.none() | _DECIMAL,
                                               st.sampled_from(["a", "b", None])),
                                     max_size=4), min_size=1, max_size=5))
    actions = draw(st.lists(st.sampled_from(_ACTIONS), min_size=len(batches), max_size=len(batches)))
    return partitioned, batches, actions


def _check_history(root: Path, partitioned: bool, batches: list, actions: list[str]) -> None:
    schema = pa.schema([("i", pa.int64()), ("s", pa.string()), ("f", pa.float64()), ("d", pa.date32()),
                        ("t", pa.timestamp("us", "UTC")), ("dec", pa.decimal128(38, 10)), ("p", pa.string())])
    for version, (rows, action) in enumerate(zip(batches, actions)):
        table = pa.Table.from_pylist([dict(zip(schema.names, row)) for row in rows], schema=schema)
        write_batch(str(root), table, app_id="a", version=version, partition_by=["p"] if partitioned else None)
        if action == "optimize":
            optimize(str(root))
        elif action in ("sync", "vacuum", "expire"):
            sync_iceberg(str(root))
        if action == "vacuum":
            vacuum(str(root), "7d")
        elif action == "expire":
            vacuum(str(root), _dt.timedelta(0), allow_short_retention=True)
    result = sync_iceberg(str(root))
    if result.metadata_location is None:  # no file committed: no table
        assert not len(committed_files(str(root)))
        return
    table = StaticTable.from_metadata(result.metadata_location)
    _assert_same(table.scan().to_arrow(), root)
    for batch, snapshot_id in _snapshots_by_batch(table).items():  # every snapshot within the retention
        _assert_same(table.scan(snapshot_id=snapshot_id).to_arrow(), root, as_of_batch=batch)
        _assert_same(pl.scan_iceberg(table, snapshot_id=snapshot_id).collect().to_arrow(), root, as_of_batch=batch)
    for index, column in enumerate(schema.names[:-1]):  # filters that prune by the manifests' bounds
        values = sorted({row[index] for rows in batches for row in rows if row[index] is not None})
        for value in values[:1] + values[-1:]:
            for iceberg, arrow in ((GreaterThanOrEqual, pc.greater_equal), (LessThan, pc.less)):
                _assert_same(table.scan(row_filter=iceberg(column, value)).to_arrow(), root,
                             filter=arrow(pc.field(column), pa.scalar(value, schema.field(column).type)))
    assert sync_iceberg(str(root)).snapshots == 0


def test_random_histories_match_read_committed(tmp_path_factory, fuzz_minutes: float, monkeypatch) -> None:
    """Random batches with syncs, optimizes and vacuums interleaved (a fixed seed and a few examples; ``--fuzz-minutes`` for a long
    random search): every snapshot left within the retention reads read_committed(as_of_batch=b)'s rows through
    pyiceberg and polars' scan_iceberg, the current one and its scans
    filtered on each data column (at its smallest and largest value: the manifests' bounds prune) read
    read_committed's with the same filter, and a last sync is a no-op."""

    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")  # no polars_iceberg plugin: pyiceberg plans

    @fixed_or_fuzzed(fuzz_minutes, 3, 10)
    @given(_histories())
    # found by the search: a file one sync appends and deletes (an optimize's swap after it, in the same sync)
    @example((False, [[], [(None, None, None, None, None, None, "a")]], ["", "optimize"]))
    # optimizes and vacuums interleaved: time travel to each snapshot left, the expired ones gone
    @example((True, [[(1, "x", 1.0, None, None, None, "a")], [(2, None, None, None, None, None, "b")],
                     [(3, None, None, None, None, None, "a")]], ["sync", "optimize", "expire"]))
    # every column all null when the table is created (typed: a null type is refused, test_null_columns.py), then values
    @example((True, [[(None,) * 7], [(-(2**63), "\U00020000", -1.5, _dt.date(1, 1, 1),
                                     _dt.datetime(9999, 1, 1, tzinfo=_dt.UTC), decimal.Decimal("1.5000000000"), "a")]],
              ["sync", ""]))
    def run(history) -> None:
        _check_history(tmp_path_factory.mktemp("iceberg-history") / "out", *history)

    deadline = time.monotonic() + 60 * fuzz_minutes
    run()
    while time.monotonic() < deadline:
        run()


def test_operations_say_what_each_batch_did(tmp_path):
    """Each snapshot's operation says what its log batch did, as the Delta mirror's dataChange says it: files
    added an append, retention dropping files at a compaction a delete, an optimize's swap a replace (the rows
    unchanged: incremental Iceberg readers skip it); every snapshot reads its batch's rows."""
    root = tmp_path / "out"
    log = MetadataLog(str(root), compact_interval=3, retention="7d", cleanup=False)
    spark_style_batch(log, _table(0), (), old=True)  # retention drops it at the compaction (batch 2)
    spark_style_batch(log, _table(1), (), old=False)
    sync_iceberg(str(root))
    spark_style_batch(log, _table(2).slice(0, 0), (), old=False)  # the compaction: drops batch 0's file only
    spark_style_batch(log, _table(3), (), old=False)
    spark_style_batch(log, _table(4), (), old=False)
    sync_iceberg(str(root))
    assert optimize(str(root), spark_sink_stopped=True, iceberg=False).files_removed == 3
    result = sync_iceberg(str(root))
    table = StaticTable.from_metadata(result.metadata_location)
    operations = {int(s.summary[MARKER]): s.summary.operation.value for s in table.metadata.snapshots}
    latest = result.log_batch
    assert operations[latest] == "replace" and result.files_removed == 3
    waits = [b for b in range(5, latest)]  # the optimize's empty batches up to its compaction batch
    assert operations == {0: "append", 1: "append", 2: "delete", 3: "append", 4: "append",
                          **{b: "append" for b in waits}, latest: "replace"}
    swap = table.current_snapshot()
    assert swap.summary["deleted-data-files"] == "3" and swap.summary["total-records"] == str(3 * 5)
    for batch, snapshot_id in _snapshots_by_batch(table).items():
        _assert_same(table.scan(snapshot_id=snapshot_id).to_arrow(), root, as_of_batch=batch)


def test_snapshot_operation_and_merge_tiers_decide():
    """The pure decisions: the operation of a batch's snapshot, and which manifests a snapshot merges."""
    from parquet_sink.read.history import optimize_key

    swapped = ["k=a/p-0.parquet", "k=a/p-1.parquet"]
    assert iceberg_sync.snapshot_operation(3, [], None, False) == "append"
    assert iceberg_sync.snapshot_operation(0, swapped, None, False) == "delete"
    assert iceberg_sync.snapshot_operation(1, swapped, optimize_key(swapped), True) == "replace"
    assert iceberg_sync.snapshot_operation(1, swapped + ["old.parquet"], optimize_key(swapped), True) == "overwrite"
    assert iceberg_sync.snapshot_operation(2, swapped, optimize_key(swapped), False) == "overwrite"
    assert iceberg_sync.merge_tiers([1, 1, 200], fanout=3) is None
    assert iceberg_sync.merge_tiers([1, 0, 1, 200], fanout=3) == [0, 1, 2]
    assert iceberg_sync.merge_tiers([3, 5, 4, 1, 1], fanout=3) == [0, 1, 2]  # tier 1 (3..8) is full
    assert iceberg_sync.merge_tiers([9, 9, 1, 1, 9], fanout=3) == [0, 1, 4]


def test_a_sync_per_batch_does_work_of_its_batch_not_of_the_table(tmp_path, monkeypatch):
    """The work of a sync after each batch does not grow with the batches before it: the manifest list stays
    within the merge tiers' bound, each manifest entry is rewritten once per tier it climbs (entries written in
    all stay within files x tiers), and an in-step sync reads only its batch's log file (the whole log only at a
    compaction batch: then the latest snapshot's log columns, not its every column)."""
    fanout, batches = 3, 25
    monkeypatch.setattr(iceberg_sync, "MERGE_FANOUT", fanout)
    whole_reads = []
    monkeypatch.setattr(iceberg_sync, "read_snapshot", lambda log: whole_reads.append(1) or read_snapshot(log))
    root = tmp_path / "out"
    written, lists = 0, []
    for version in range(batches):
        write_batch(str(root), _table(version, rows=2), app_id="a", version=version, compact_interval=10)
        result = sync_iceberg(str(root))
        table = StaticTable.from_metadata(result.metadata_location)
        manifests = table.current_snapshot().manifests(table.io)
        lists.append(len(manifests))
        written += sum(m.added_files_count + m.existing_files_count for m in manifests
                       if m.added_snapshot_id == result.snapshot_id)
    tiers = math.ceil(math.log(batches, fanout)) + 1
    assert max(lists) <= (fanout - 1) * tiers + 1, lists
    assert written <= batches * tiers, written
    assert len(whole_reads) == 1  # the first sync only (before: each compaction batch's too, 1 + batches // 10)
    _assert_same(table.scan().to_arrow(), root)
    for batch, snapshot_id in _snapshots_by_batch(table).items():
        _assert_same(table.scan(snapshot_id=snapshot_id).to_arrow(), root, as_of_batch=batch)


def test_a_sync_per_batch_does_not_copy_or_read_the_snapshots_kept(tmp_path, monkeypatch):
    """The work of an in-step sync does not grow with the snapshots the table keeps: at 3 and at 30 snapshots,
    the sync after one more batch deep-copies no snapshot (pyiceberg's transaction applied its staged updates
    again and deep-copied the table's metadata, every snapshot, on each read of it: ~17 times a batch, and its
    catalog's commit once more), parses no metadata file (pyiceberg's commit read the one it wrote last again)
    and reads the log-batch marker of as many snapshots (not every snapshot's, looking for another writer's);
    it finds no snapshot by id by scanning the snapshot list (pyiceberg's ``snapshot_by_id``: ~15 scans a batch;
    the sync's transactions find a snapshot at its noted position); the metadata file it writes, which lists every
    snapshot, serializes only the new one (pyiceberg's serialized them all), the JSON pyiceberg writes."""
    from pyiceberg.table.metadata import TableMetadataCommonFields, TableMetadataUtil
    from pyiceberg.table.snapshots import Snapshot

    work: Counter = Counter()
    copy, parse, marker = Snapshot.__deepcopy__, TableMetadataUtil.parse_raw, iceberg_sync._marker
    scan, dump = TableMetadataCommonFields.snapshot_by_id, Snapshot.model_dump_json
    monkeypatch.setattr(Snapshot, "model_dump_json", lambda self, **k: work.update(["serialized"]) or dump(self, **k))
    monkeypatch.setattr(TableMetadataCommonFields, "snapshot_by_id",
                        lambda self, snapshot_id: work.update(["scanned"]) or scan(self, snapshot_id))
    monkeypatch.setattr(Snapshot, "__deepcopy__", lambda self, memo=None: work.update(["copied"]) or copy(self, memo))
    monkeypatch.setattr(TableMetadataUtil, "parse_raw", staticmethod(lambda data: work.update(["parsed"]) or parse(data)))
    monkeypatch.setattr(iceberg_sync, "_marker", lambda snap: work.update(["marker"]) or marker(snap))

    def in_step(root: Path, batches: int) -> list[Counter]:
        for version in range(batches):
            write_batch(str(root), _table(version, rows=2), app_id="a", version=version)
        sync_iceberg(str(root))
        counts = []
        for version in range(batches, batches + 2):
            write_batch(str(root), _table(version, rows=2), app_id="a", version=version)
            work.clear()
            result = sync_iceberg(str(root))
            counts.append(Counter(work))
        table = StaticTable.from_metadata(result.metadata_location)
        assert len(table.metadata.snapshots) == batches + 2
        assert json.loads(Path(result.metadata_location).read_text()) == json.loads(table.metadata.model_dump_json())
        _assert_same(table.scan().to_arrow(), root)
        return counts

    small, large = in_step(tmp_path / "small", 3), in_step(tmp_path / "large", 30)
    assert small == large, (small, large)
    assert not any(count["copied"] or count["parsed"] or count["scanned"] for count in large), large
    assert all(count["serialized"] == 1 for count in large), large


def test_an_in_step_sync_changes_the_tables_file_list_in_place(tmp_path, monkeypatch):
    """The table's file list this process keeps (``_KNOWN``: what the next sync compares the new batches with) is
    changed in place by a sync in step, not copied: before, two copies a sync, each O(files) (~3 ms at 100,000
    files, issue 55 item 5). A sync that fails after changing it leaves none cached: the next reads the manifests
    and mirrors the log."""
    from pyiceberg.manifest import ManifestFile

    root = tmp_path / "out"
    for version in range(3):
        write_batch(str(root), _table(version, rows=2), app_id="a", version=version)
    sync_iceberg(str(root))
    key = (Storage(str(root)).root, None)
    files = iceberg_sync._KNOWN[key][1]
    for version in (3, 4):
        write_batch(str(root), _table(version, rows=2), app_id="a", version=version)
        result = sync_iceberg(str(root))
        assert iceberg_sync._KNOWN[key][0] == result.metadata_location
        assert iceberg_sync._KNOWN[key][1] is files  # the same dict, not a copy
    assert sorted(files) == sorted(f.path for f in committed_files(str(root)))

    def fail(name: str) -> None:
        if name == "iceberg_commit":
            raise OSError("the catalog is gone")

    write_batch(str(root), _table(5, rows=2), app_id="a", version=5)
    with monkeypatch.context() as failing:
        failing.setattr(iceberg_sync, "failpoint", fail)
        with pytest.raises(OSError, match="the catalog is gone"):
            sync_iceberg(str(root))
    assert key not in iceberg_sync._KNOWN  # the list changed for a commit that did not happen: not kept
    reads: Counter = Counter()
    fetch = ManifestFile.fetch_manifest_entry
    monkeypatch.setattr(ManifestFile, "fetch_manifest_entry",
                        lambda self, *a, **k: reads.update(["manifest"]) or fetch(self, *a, **k))
    result = sync_iceberg(str(root))
    assert reads["manifest"] >= 1 and result.log_batch == 5
    _assert_same(StaticTable.from_metadata(result.metadata_location).scan().to_arrow(), root)
    assert sorted(iceberg_sync._KNOWN[key][1]) == sorted(f.path for f in committed_files(str(root)))


def test_a_first_sync_does_work_of_its_files_and_batches_not_their_product(tmp_path, monkeypatch):
    """The first sync of a long log (33 one-file batches) costs its files and batches, not its batches times its
    files: the log's latest snapshot is read once and each batch's files sliced from it (before: each batch's
    snapshot read from the log, 33, and compared with the table's whole file list); commits double in size, so
    the metadata files written list about twice the snapshots, not batches^2 / commit size (before, 2 a commit
    here: 17 files, 305 snapshots); a merge of manifests reads none back from its file (before: every entry read
    back once per tier it climbed); each file's footer is read once."""
    from pyiceberg.manifest import ManifestFile

    monkeypatch.setattr(iceberg_sync, "_BATCHES_PER_COMMIT", 2)
    monkeypatch.setattr(iceberg_sync, "MERGE_FANOUT", 3)
    work: Counter = Counter()
    of_log, fetch, footer = iceberg_sync.snapshot_of_log, ManifestFile.fetch_manifest_entry, iceberg_sync.open_sized
    monkeypatch.setattr(iceberg_sync, "snapshot_of_log", lambda *a: work.update(["log snapshot"]) or of_log(*a))
    monkeypatch.setattr(ManifestFile, "fetch_manifest_entry",
                        lambda self, *a, **k: work.update(["manifest read"]) or fetch(self, *a, **k))
    monkeypatch.setattr(iceberg_sync, "open_sized", lambda *a: work.update(["footer"]) or footer(*a))
    root = tmp_path / "out"
    for version in range(33):
        write_batch(str(root), _table(version, rows=2), app_id="a", version=version)
    result = sync_iceberg(str(root))
    assert (result.log_batch, result.snapshots, result.files_added) == (32, 33, 33)
    metadata = [json.loads(p.read_text()) for p in (root / METADATA_DIR).glob("*.metadata.json")]
    assert sorted(len(m["snapshots"]) for m in metadata) == [2, 4, 8, 16, 32, 33]
    assert work == {"log snapshot": 1, "footer": 33}, work
    table = StaticTable.from_metadata(result.metadata_location)
    snapshots = _snapshots_by_batch(table)
    assert sorted(snapshots) == list(range(33))
    for batch in (0, 16, 32):
        _assert_same(table.scan(snapshot_id=snapshots[batch]).to_arrow(), root, as_of_batch=batch)


def test_a_first_sync_after_an_optimize_mirrors_every_batch(tmp_path):
    """The first sync of a log an optimize dropped files from reads each batch's snapshot from the log up to the
    compaction batch that carries the drop's marker (the optimize's, 9), the batch after it from the latest
    snapshot, and the batches after that as the files each added: every snapshot reads its batch's rows."""
    root = tmp_path / "out"
    _write(root, range(3), ["k"])
    assert optimize(str(root)).log_batch_id == 9  # empty batches 3-8 up to the compaction batch
    _write(root, range(3, 6), ["k"])
    result = sync_iceberg(str(root))
    assert (result.log_batch, result.snapshots) == (12, 13)
    table = StaticTable.from_metadata(result.metadata_location)
    assert [s.summary.operation.value for s in table.metadata.snapshots][8:11] == ["append", "replace", "append"]
    for batch, snapshot_id in _snapshots_by_batch(table).items():
        _assert_same(table.scan(snapshot_id=snapshot_id).to_arrow(), root, as_of_batch=batch)


def _assert_chronological(metadata) -> None:
    """What Iceberg's own readers check when they load a table (Java's ``TableMetadata``, iceberg-rust's and
    iceberg-go's ``validate_chronological_*``): the snapshot log and the metadata log never go back by more than a
    minute, and last-updated-ms is not before the last entry of either by more than that. pyiceberg checks none."""
    minute = 60_000
    for log in (metadata.snapshot_log, metadata.metadata_log):
        times = [entry.timestamp_ms for entry in log]
        assert all(b - a >= -minute for a, b in zip(times, times[1:])), times
        assert not times or metadata.last_updated_ms - times[-1] >= -minute, (metadata.last_updated_ms, times)


@pytest.mark.parametrize("kind", ["metadata", "catalog"])
def test_a_writer_whose_clock_is_an_hour_behind_keeps_the_table_loadable(tmp_path, monkeypatch, kind):
    """Two writers of one output on machines whose clocks differ by an hour (a sink, and a backfill behind it):
    the snapshots of the one behind are recorded at the table's last update, never before it, so Iceberg's
    readers that check the logs' order (Java, Rust, Go) load the table; the rows are read_committed's. Before, the
    snapshot log went back an hour: every such engine refused the table."""
    root = tmp_path / "out"
    target = {} if kind == "metadata" else {"catalog": _catalog_properties(tmp_path), "table": "db.events"}
    iceberg = True if kind == "metadata" else target
    for version in range(2):
        write_batch(str(root), _table(version), app_id="a", version=version, iceberg=iceberg)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 3600)  # this process's clock: an hour behind
    for version in range(2, 4):
        write_batch(str(root), _table(version), app_id="b", version=version, iceberg=iceberg)
    monkeypatch.undo()
    if kind == "metadata":
        table = StaticTable.from_metadata(iceberg_sync.current_metadata(Storage(str(root))))
    else:
        table = SqlCatalog(**target["catalog"]).load_table(target["table"])
    _assert_chronological(table.metadata)
    stamps = [s.timestamp_ms for s in table.metadata.snapshots]
    assert stamps == sorted(stamps) and len(stamps) == 4
    _assert_same(table.scan().to_arrow(), root)


def test_a_sync_in_step_across_a_compaction_batch_resolves_only_its_batchs_files(tmp_path, monkeypatch):
    """Compact interval 3, 30 files a batch: the sync after each batch resolves the paths of its batch's files
    only, at a compaction batch too (before: the latest snapshot's every file, then filtered to the new ones:
    O(files) a compaction batch, and its every column decoded); a compaction that dropped nothing since the
    table's batch is no reason to read the log whole. The table reads the log's rows."""
    from parquet_sink.read import reader
    from tests.iceberg.readers import assert_mirrors

    root, files = tmp_path / "out", 30
    for version in range(4):
        write_batch(str(root), _table(version, rows=files), app_id="a", version=version, compact_interval=3,
                    max_records_per_file=1)
    sync_iceberg(str(root))
    resolved: list[int] = []
    whole: list[int] = []
    real_resolve = reader.resolve_paths
    monkeypatch.setattr(reader, "resolve_paths", lambda storage, uris, *args: resolved.append(len(uris))
                        or real_resolve(storage, uris, *args))
    monkeypatch.setattr(iceberg_sync, "read_snapshot", lambda log: whole.append(1) or read_snapshot(log))
    for version in range(4, 9):  # 5 a compaction batch, 8 another
        write_batch(str(root), _table(version, rows=files), app_id="a", version=version, compact_interval=3,
                    max_records_per_file=1)
        assert sync_iceberg(str(root)).files_added == files
    assert resolved and max(resolved) == files, resolved  # before: 180 and 270 at batches 5 and 8
    assert not whole, whole
    table = StaticTable.from_metadata(iceberg_sync.current_metadata(Storage(str(root))))
    assert_mirrors(table, root, latest=8)


@pytest.mark.parametrize("optimized", [False, True])
def test_a_sync_in_step_across_a_compaction_batch_takes_the_batchs_own_files(tmp_path, monkeypatch, optimized):
    """Compact interval 3, a sync after each batch: the sync at a compaction batch (2, 5, 8), whose files the log's
    deltas cannot give, takes that batch's own files from the latest snapshot (no comparison of the table's whole
    file list with the log's: O(files) a compaction batch, ~100 ms at 30,000 files) when no batch since the table's
    last dropped a file; after an optimize's swap the table is compared whole. Every snapshot reads its rows."""
    from tests.iceberg.readers import assert_mirrors

    root = tmp_path / "out"
    whole: list[int] = []
    real = iceberg_sync._commit_batch

    def counted(storage, transaction, batch, files, compared, *args):
        if compared:
            whole.append(batch)
        return real(storage, transaction, batch, files, compared, *args)

    monkeypatch.setattr(iceberg_sync, "_commit_batch", counted)
    for version in range(9):
        write_batch(str(root), _table(version), app_id="a", version=version, compact_interval=3, iceberg=True)
        if optimized and version == 3:
            assert optimize(str(root), target_file_size="1MB").committed
    latest = MetadataLog(str(root)).latest_batch_id()
    table = StaticTable.from_metadata(iceberg_sync.current_metadata(Storage(str(root))))
    assert_mirrors(table, root, latest=latest)
    if not optimized:
        assert whole == [0], whole  # the table's creation only (before: 0, 2, 5, 8)
    else:
        assert 4 in whole, whole  # the optimize's swap, compared whole
