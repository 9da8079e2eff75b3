"""Writers asked for different compact intervals on one output: every batch is named by the interval the
log's first writer recorded (``_exactly_once/.compact_interval``), never ``N`` by one writer and ``N.compact``
by another; a writer asked for another interval is refused (``OutputSettingsError``, issue 54), one asked for
none goes by the output's.

Before two compact files show the interval, each writer used to go by its own: with ``write_batch(...,
compact_interval=3)`` then ``compact_interval=10`` (or a stream beside an optimize), batch 2 was a delta for one
and a compact file for the other; the log then held both forms of a batch (readers see one of them: rows lost)
or a writer compacting by the other's chain stopped on a MissingLogFileError.
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from parquet_sink import LogEntry, MetadataLog, read_committed, write_batch
from parquet_sink.errors import OutputSettingsError
from parquet_sink.log.compaction import CompactibleLog, LogOptions
from parquet_sink.log.files import INTERVAL_RECORD, parse_batch_name
from parquet_sink.storage.filesystem import Storage


def _names(out: str, options: dict | None = None) -> dict[int, list[str]]:
    """Batch id -> the forms of it in the log (``N``, ``N.compact``)."""
    forms: dict[int, list[str]] = {}
    log = CompactibleLog(Storage(out, options))
    for name in log.storage.ls_names(log.log_dir):
        parsed = parse_batch_name(name)
        if parsed:
            forms.setdefault(parsed[0], []).append(name.rsplit("/", 1)[-1])
    return forms


def _append(out: str, app: str, version: int, ids: range, interval: int | None) -> int:
    table = pa.table({"id": pa.array(ids, pa.int64())})
    # after batches as Spark's sink writes them, whose query (there is none) is stopped for good
    result = write_batch(out, table, app_id=app, version=version, compact_interval=interval, spark_sink_stopped=True)
    assert result.committed
    return result.log_batch_id


def _check(out: str, interval: int, expected: list[int], options: dict | None = None) -> None:
    """One form per batch, named by ``interval``; every row once."""
    forms = _names(out, options)
    assert all(len(f) == 1 for f in forms.values()), forms
    for batch, (name,) in forms.items():
        assert name.endswith(".compact") == ((batch + 1) % interval == 0), (batch, name, interval)
    ids = sorted(read_committed(out, columns=["id"], storage_options=options).column("id").to_pylist())
    assert ids == sorted(expected)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    intervals=st.tuples(st.integers(1, 5), st.none() | st.integers(1, 12)),
    writers=st.lists(st.sampled_from([0, 1]), min_size=1, max_size=14),
)
# a writer asked for 1 reading a log recorded with 4 after 3.compact expected 4.compact, not the delta 4 (MissingLogFileError)
@example(intervals=(4, 1), writers=[0, 0, 0, 0, 1, 1])
@example(intervals=(4, None), writers=[0, 0, 0, 0, 1, 1])
def test_writers_with_other_intervals_name_batches_by_the_first_writers(tmp_path_factory, intervals, writers):
    """Writer 1 asked for another interval than the recorded one is refused, nothing committed; asked for none it
    names batches by the output's."""
    out = str(tmp_path_factory.mktemp("intervals") / "out")
    versions = [0, 0]
    expected: list[int] = []
    recorded = intervals[writers[0]] or 10
    for who in writers:
        n = len(expected) // 3
        ids = range(n * 3, n * 3 + 3)
        if expected and intervals[who] not in (None, recorded):
            with pytest.raises(OutputSettingsError, match=f"compact_interval={intervals[who]}"):
                _append(out, f"app-{who}", versions[who], ids, intervals[who])
            continue
        batch = _append(out, f"app-{who}", versions[who], ids, intervals[who])
        assert batch == n
        versions[who] += 1
        expected += ids
    _check(out, recorded, expected)


def test_the_first_writer_records_the_interval(out):
    _append(out, "a", 0, range(3), 4)
    marker = Storage(out).join(INTERVAL_RECORD)
    assert Storage(out).read_bytes(marker) == b"4"
    log = CompactibleLog(Storage(out), LogOptions(compact_interval=10))
    assert log.recorded_interval() == 4
    assert log.interval_for(log.list_names()) == 4  # a log asked for 10 names batches by the log's ...
    with pytest.raises(OutputSettingsError, match="compact_interval=10 contradicts"):
        _append(out, "b", 0, range(3, 6), 10)  # ... and a writer asked for it is refused
    _append(out, "b", 0, range(3, 6), None)
    assert Storage(out).read_bytes(marker) == b"4"  # written once


def test_spark_reads_what_writers_with_other_intervals_wrote(out, spark):
    _append(out, "a", 0, range(0, 3), 3)
    for version in range(4):
        _append(out, "b", version, range(3 + 3 * version, 6 + 3 * version), None)
    assert _names(out) == {0: ["0"], 1: ["1"], 2: ["2.compact"], 3: ["3"], 4: ["4"]}
    assert sorted(r.id for r in spark.read.parquet(out).select("id").collect()) == list(range(15))


def test_a_log_without_records_goes_by_the_writers_own_interval_until_one_is_recorded(out):
    """Deltas of Spark's own sink (or an older release) carry no record: the next writer names batches by its
    own interval, as before, and records it; the writers after it go by that record."""
    storage = Storage(out)
    storage.makedirs(storage.join("_spark_metadata"))
    for batch in range(2):  # as Spark's sink writes them: a data file, a delta without our keys
        data = storage.join(f"part-{batch}.parquet")
        pq.write_table(pa.table({"id": pa.array([-1 - batch], pa.int64())}), data)
        line = LogEntry(storage.to_uri(data), storage.info(data).size, modification_time=1).to_json()
        storage.put(storage.join("_spark_metadata", str(batch)), f"v1\n{line}".encode())
    log = CompactibleLog(storage)
    assert log.recorded_interval() is None
    _append(out, "a", 0, range(0, 3), 4)  # batch 2: a delta under 4
    _append(out, "b", 0, range(3, 6), None)  # batch 3: goes by the record (4): compact
    assert _names(out) == {0: ["0"], 1: ["1"], 2: ["2"], 3: ["3.compact"]}
    assert sorted(read_committed(out).column("id").to_pylist()) == [-2, -1, *range(6)]


def test_racing_writers_with_other_intervals_commit_every_batch_once(tmp_path):
    """Two threads appending at once, one asked for interval 2, one for none (the output's): one form per batch,
    every row once."""
    for attempt in range(3):
        out = str(tmp_path / f"out-{attempt}")
        _append(out, "seed", 0, range(0, 1), 2)
        done: list[int] = []

        def run(app: str, interval: int, base: int) -> None:
            for version in range(6):
                start = base + version * 10
                _append(out, app, version, range(start, start + 10), interval)
                done.extend(range(start, start + 10))

        threads = [threading.Thread(target=run, args=("a", 2, 1000)), threading.Thread(target=run, args=("b", None, 5000))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        _check(out, 2, [0, *done])


def test_a_writer_that_inferred_another_interval_goes_by_a_record_made_since(out):
    """A log of an older release (no record) with one compact file left: a writer asked for 10 infers 6 from
    ``5.compact`` (Spark's rule), one asked for 3 keeps 3 and records it; the first then names batches by 3."""
    storage = Storage(out)
    writer = MetadataLog(out, compact_interval=3, cleanup=False)
    for batch in range(6):
        writer.add(batch, [])
    storage.delete(storage.join(INTERVAL_RECORD))
    for name in ("0", "1", "2.compact", "2.compact.columnar"):
        storage.delete(storage.join("_spark_metadata", name))
    other = MetadataLog(out, default_interval=10, cleanup=False)
    assert other.interval_for(MetadataLog(out, cleanup=False).list_names()) == 6  # Spark's deriveCompactInterval
    assert MetadataLog(out, compact_interval=3, cleanup=False).add(6, [])
    assert storage.read_bytes(storage.join(INTERVAL_RECORD)) == b"3"
    assert other.add(7, []) and other.add(8, [])
    assert _names(out)[8] == ["8.compact"]


def test_a_record_that_is_not_an_interval_is_ignored_with_a_warning(out, caplog):
    _append(out, "a", 0, range(3), 3)
    storage = Storage(out)
    storage.delete(storage.join(INTERVAL_RECORD))
    storage.put(storage.join(INTERVAL_RECORD), b"three")
    log = CompactibleLog(storage, LogOptions(compact_interval=4))
    with caplog.at_level("WARNING"):
        assert log.recorded_interval() is None
    assert "not an interval" in caplog.text and "three" in caplog.text
    _append(out, "a", 1, range(3, 6), 4)  # goes by its own interval, as without a record
    _append(out, "a", 2, range(6, 9), 4)
    _append(out, "a", 3, range(9, 12), 4)
    assert _names(out)[3] == ["3.compact"]


def test_first_writers_racing_on_each_store_agree_on_one_interval(backend):
    """Two first writers of a new output at once, asked for 1 and 4 (batch 0 is ``0.compact`` for one and ``0``
    for the other): one record, the winner's; the other is refused (OutputSettingsError) with nothing committed,
    and every batch is in its form on local disk, Azurite and moto."""
    url, options = backend.url, backend.storage_options
    errors: dict[str, BaseException] = {}

    def run(app: str, interval: int, base: int) -> None:
        try:
            for version in range(3):
                table = pa.table({"id": pa.array([base + version], pa.int64())})
                write_batch(url, table, app_id=app, version=version, compact_interval=interval, storage_options=options)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors[app] = exc

    threads = [threading.Thread(target=run, args=("a", 1, 0)), threading.Thread(target=run, args=("b", 4, 10))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    storage = Storage(url, options)
    interval = int(storage.read_bytes(storage.join(INTERVAL_RECORD)))
    assert interval in (1, 4)
    loser = "b" if interval == 1 else "a"
    assert list(errors) == [loser] and isinstance(errors[loser], OutputSettingsError), errors
    assert sorted(_names(url, options)) == list(range(3))
    _check(url, interval, [0, 1, 2] if loser == "b" else [10, 11, 12], options)


SESSION_INTERVAL = "spark.sql.streaming.fileSink.log.compactInterval"


def _spark_sink(spark, out: str, batch: int, ids: range, session_interval: int | None) -> None:
    """Spark's own file sink commits ``ids`` as log batch ``batch``, its log made in a session whose compact interval
    is ``session_interval`` (None: Spark's default, 10): it goes by that interval while the log holds no compact
    file, whatever the output recorded."""
    from tests.helpers.spark_util import spark_sink_batch

    if session_interval is not None:
        spark.conf.set(SESSION_INTERVAL, str(session_interval))
    try:
        spark_sink_batch(spark, spark.createDataFrame([(i,) for i in ids], "id long"), out, batch)
    finally:
        spark.conf.unset(SESSION_INTERVAL)


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    recorded=st.sampled_from([2, 3, 5]),
    steps=st.lists(st.sampled_from(["ours", "spark", "spark-3", "spark-output"]), min_size=3, max_size=8),
)
# Spark's sink in a default session after write_batch(compact_interval=3) wrote 2 where the record names
# 2.compact: every reader of ours stopped on MissingLogFileError (5.compact), Spark's read every row
@example(recorded=3, steps=["ours", "spark", "spark", "spark", "spark", "spark", "spark"])
@example(recorded=2, steps=["ours", "spark", "spark", "ours", "ours", "spark-3", "ours", "spark"])
def test_spark_sink_at_its_session_interval_and_our_writers_agree_on_every_row(tmp_path_factory, spark, recorded,
                                                                               steps):
    """Spark's own sink names a batch by its session's interval until the log holds a compact file (Spark's
    ``CompactibleFileStreamLog.compactInterval``); our writers by the recorded one. Whatever the names, every
    reader of ours, and Spark's reader in a default session, return every committed row once, and each writer goes
    on (a compaction of ours reads the log as written)."""
    out = str(tmp_path_factory.mktemp("spark-intervals") / "out")
    _append(out, "a", 0, range(0, 3), recorded)
    expected, version = list(range(3)), 1
    for step in steps:
        batch, ids = len(expected) // 3, range(len(expected), len(expected) + 3)
        if step == "ours":
            assert _append(out, "a", version, ids, None) == batch
            version += 1
        else:
            session = {"spark": None, "spark-3": 3, "spark-output": recorded}[step]
            try:
                _spark_sink(spark, out, batch, ids, session)
            except Exception as exc:  # Spark's sink compacting by its own interval found no such chain
                assert session != recorded and "BATCH_METADATA_NOT_FOUND" in str(exc), (session, _names(out), exc)
                assert max(_names(out)) == batch - 1  # it committed nothing
                continue
        expected += ids
        assert sorted(read_committed(out, columns=["id"]).column("id").to_pylist()) == expected, _names(out)
    assert sorted(r.id for r in spark.read.parquet(out).select("id").collect()) == expected, _names(out)
    assert MetadataLog(out).check() == []


def test_doctor_and_verify_name_the_batches_spark_s_sink_named_by_another_interval(tmp_path, spark, capsys):
    """Spark's own sink in a default session (interval 10) after write_batch(compact_interval=3): batch 2 is a delta
    where the recorded interval names 2.compact. verify and doctor say which batch, the interval, the recorded one
    and the remedy; the remedy, run as written, holds: Spark's sink at interval 3 stops at its compaction (5) until a
    writer of ours wrote 5.compact, then goes on, and nothing is left to warn about."""
    from parquet_sink import doctor, verify
    from parquet_sink.cli.main import main as cli_main

    out = str(tmp_path / "out")
    _append(out, "a", 0, range(0, 3), 3)
    for batch in (1, 2):
        _spark_sink(spark, out, batch, range(3 * batch, 3 * batch + 3), None)
    assert _names(out) == {0: ["0"], 1: ["1"], 2: ["2"]}
    warnings = verify(out).warnings
    assert len(warnings) == 1 and verify(out).ok
    warning = warnings[0]
    for said in ("log batch 2 (", "/_spark_metadata/2) is a delta", "recorded compact interval 3 names 2.compact",
                 "e.g. 10, Spark's default", "BATCH_METADATA_NOT_FOUND",
                 "Run Spark's sink with spark.sql.streaming.fileSink.log.compactInterval=3, after log batch 5"):
        assert said in warning, (said, warning)
    diagnosis = doctor(out, app_id="a", version=1, spark_sink_stopped=True)
    assert diagnosis.log_warnings == [warning] and diagnosis.plan.ok  # the plan (commit as log batch 3) stands
    assert cli_main(["doctor", out, "--app-id", "a", "--version", "1", "--spark-sink-stopped"]) == 0
    assert f"warning: {warning}" in capsys.readouterr().out
    # the remedy as it says: at interval 3, Spark's sink stops at its compaction 5 (it wants 2.compact)...
    for batch in (3, 4):
        _spark_sink(spark, out, batch, range(3 * batch, 3 * batch + 3), 3)
    with pytest.raises(Exception, match="BATCH_METADATA_NOT_FOUND"):
        _spark_sink(spark, out, 5, range(15, 18), 3)
    # ... until a writer of ours has written 5.compact (from the log as written); then it goes on
    assert _append(out, "a", 1, range(15, 18), None) == 5

    def interval_warnings() -> list[str]:
        return [w for w in verify(out).warnings if "compactInterval" in w]

    assert interval_warnings() == [] and doctor(out, app_id="a", version=2, spark_sink_stopped=True).log_warnings == []
    for batch in range(6, 12):  # (by the interval it derives from 5.compact: 6, so 8 is a delta, 11.compact)
        _spark_sink(spark, out, batch, range(3 * batch, 3 * batch + 3), 3)
    assert interval_warnings() == [] and _names(out)[11] == ["11.compact"]
    expected = list(range(36))
    assert sorted(read_committed(out, columns=["id"]).column("id").to_pylist()) == expected
    assert sorted(r.id for r in spark.read.parquet(out).select("id").collect()) == expected
