"""One stateful model of a whole output (issue 54, item 9): a Hypothesis state machine draws operations from the
writers and maintenance commands with their options on one output, over values at their edges (NaN, -0.0, +-inf,
nulls):

* ``write_batch`` (partitioned or not, with the Delta log or not) and replays of its last version;
* ``ParquetSink`` micro-batches (its foreachBatch function called with a static DataFrame) on both writer paths, of
  two queries (their ids from a checkpoint's ``metadata``) and of a sink without a query id, replays of a batch id
  (never written twice), a query's first batch refused on an output of others (``on_foreign_query="error"``), the
  session's compact interval (when a sink batch creates the output) and codec, ``compression=``;
* ``optimize`` by bins, ``sort_by`` or ``z_order``; ``vacuum``; ``sync_delta_log``; ``sync_iceberg`` (the table
  without catalog, kept by every writer from then on with ``iceberg=True``, or from the first commit);
* the output's settings (``compact_interval``, ``retention``, ``min_batches_to_retain``, ``cleanup_delay``) drawn
  at the start and recorded by the first commit; every later writer omits them, repeats them, or contradicts one
  (``OutputSettingsError``, nothing written);
* a SIGKILL of a ``write_batch`` or ``optimize`` child process at a named failpoint or a random moment, then its
  restart (at most one a run in the normal run).

After every step it checks every reader against the model: ``read_committed`` with and without drawn filters
(pyarrow's filter over the model's rows as the oracle), ``count_committed``, the logged statistics, ``history``,
time travel (exact from the oldest batch the settings promise, ``SnapshotExpiredError`` or exact before it),
``verify``, delta-rs's readers with drawn filters, pyiceberg's scans of the Iceberg table's current snapshot and
of its oldest (at the log batch each records), and the directory globs docs/design.md calls safe (duckdb, polars:
the model's rows, plus the files an ``optimize`` replaced until ``vacuum`` deletes them); at the end of a run
``spark.read.parquet`` with filter pushdown on, against Spark with it off (Spark SQL's float order: NaN above every
number). ``--fuzz-minutes`` runs it long.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections import Counter
from pathlib import Path

import deltalake
import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pyiceberg.table import StaticTable

from parquet_sink import (
    MetadataLog, ParquetSink, committed_files, count_committed, errors, history, optimize, read_committed, snapshot,
    sync_delta_log, sync_iceberg, vacuum, verify, write_batch,
)
from parquet_sink.iceberg import current_metadata
from parquet_sink.iceberg.sync import MARKER
from parquet_sink.storage.filesystem import Storage
from tests.helpers.crash_util import assert_group_gone, start_child
from tests.helpers.filters import FilterCase, assert_filters_agree, filters, run_model, sorted_rows
from tests.helpers.spark_util import spark_sink_batch
from tests.helpers.strategies import Kind

OPTIMIZE_CHILD = Path(__file__).resolve().parents[1] / "helpers" / "optimize_child.py"
NAN = float("nan")
_FLOATS = st.sampled_from([NAN, 0.0, -0.0, 1.0, -1.0, 5.0, math.inf, -math.inf, None])
KINDS = {
    "x": Kind("double", pa.float64(), _FLOATS),
    "n": Kind("long", pa.int64(), st.sampled_from([0, 1, 2, 7, -3, None])),
    "s": Kind("string", pa.string(), st.sampled_from(["a", "b c", "", "é", None])),
}
SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.float64()), ("n", pa.int64()), ("s", pa.string()),
                    ("p", pa.int32())])
SPARK_SCHEMA = "id long, x double, n long, s string, p int"
ROWS = st.lists(st.fixed_dictionaries({c: k.values for c, k in KINDS.items()} | {"p": st.sampled_from([0, 1, None])}),
                max_size=6)
_PREDICATES = ["x > 5", "x != 1.0", "x = double('NaN')", "x = -0.0D", "NOT (x <= 1.0)", "n >= 2", "s = 'a'",
               "x IS NULL", "isnan(x)"]
SETTINGS = ("compact_interval", "retention", "min_batches_to_retain", "cleanup_delay")
DEFAULTS = {"compact_interval": 10, "retention": None, "min_batches_to_retain": 100, "cleanup_delay": "10m"}
HOW = st.sampled_from(["omit"] * 4 + ["same", "contradict"])  # what a writer passes of the output's settings
SESSION_INTERVAL, SESSION_CODEC = "spark.sql.streaming.fileSink.log.compactInterval", "spark.sql.parquet.compression.codec"
FOOTER_CODEC = {"snappy": "SNAPPY", "zstd": "ZSTD", "gzip": "GZIP"}
# failpoints a write_batch or an optimize child is killed at (None: a random moment of the call)
MIRROR_KILLS = ["delta_commit", "iceberg_commit", "iceberg_after_commit", "iceberg_metadata_write"]
WRITE_KILLS = [None, "before_write", "file_open", "task_write", "before_commit", "commit_publish", "compaction", "sidecar",
               "after_commit", *MIRROR_KILLS]
SINK_KILLS = ["before_write", "task_write", "before_publish", "publish_rename", "before_commit", "commit_publish",
              "compaction", "sidecar", "after_commit", *MIRROR_KILLS]  # a random moment: the JVM's start is most
OPTIMIZE_KILLS = [None, "optimize_write", "optimize_padding", "optimize_commit", "commit_publish", "compaction",
                  "optimize_after_commit", *MIRROR_KILLS]


def _ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


class OutputModel(RuleBasedStateMachine):
    root: str = ""
    spark = None
    spark_every = 1  # Spark's reader checks every n-th run (its jobs cost most of a run)
    max_kills = 1  # SIGKILLed children a run
    sink_kills = False  # kills of a sink's batch too (a Spark driver of its own each: long runs only)
    predicates: tuple[str, ...] = ()  # Spark's pushdown checks at the end of a run (none: 3 of _PREDICATES in turn)
    runs = 0

    @initialize(partitioned=st.booleans(), interval=st.sampled_from([None, 2, 3, 10]), delta=st.booleans(),
                retention=st.sampled_from([None, "7d"]), retain=st.sampled_from([None, 1, 3]),
                delay=st.sampled_from([None, "0s"]), iceberg=st.booleans())
    def start(self, partitioned: bool, interval: int | None, delta: bool, retention: str | None,
              retain: int | None, delay: str | None, iceberg: bool = False) -> None:
        self.name = uuid.uuid4().hex[:8]
        self.out = f"{self.root}/{self.name}"
        self.partition_by = ["p"] if partitioned else None
        self.delta = delta
        self.iceberg = iceberg  # the output keeps an Iceberg table without catalog (every writer passes iceberg=True)
        # what the first writer passes (None: the default), and what its commit recorded (None: no commit yet)
        self.initial = {"compact_interval": interval, "retention": retention, "min_batches_to_retain": retain,
                        "cleanup_delay": delay}
        self.recorded: dict | None = None
        self.rows: list[dict] = []
        self.version = 0
        self.snapshots: dict[int, list[int]] = {}  # log batch -> the ids its snapshot holds
        self.travel_from = 0  # the oldest batch time travel must still read (vacuum removes replaced files)
        self.stale: Counter = Counter()  # ids of files an optimize replaced, on disk until vacuum deletes them
        self.loose: set[int] | None = None  # a killed call's leftovers: ids globs may read besides, until vacuum
        self.before_log = False  # a call killed before the first commit left files vacuum keeps (before the log)
        self.queries = {q: uuid.uuid4().hex for q in ("q0", "q1")}  # query -> its id (in its checkpoint)
        self.done: dict[str | None, int] = {}  # query (None: the sink without a query id) -> newest batch id committed
        self.done_at: dict[str | None, int] = {}  # query -> the log batch of that commit
        self.sinks: dict[tuple, ParquetSink] = {}  # sink objects kept across batches (a driver that did not restart)
        self.kills = 0
        self.spark_batches: set[int] = set()  # log batches Spark's own file sink committed
        self.spark_compacted = -1  # the newest compaction batch Spark's sink wrote (our entries' statistics dropped)
        self.spark_newest = False  # Spark's sink committed the newest batch: ours commit after it only when told
        self.delta_behind = False  # Spark's sink committed after the Delta log's last sync (the next of ours syncs)
        self.iceberg_behind = False  # the same for the Iceberg table

    # -- the model's bookkeeping ---------------------------------------------------------------------

    def _expected(self) -> pa.Table:
        return pa.Table.from_pylist(self.rows, schema=SCHEMA)

    def _as_read(self) -> pa.Table:
        """The committed rows typed as Spark's reader and read_committed type them: a partition column whose
        directories are all the default (null) partition is of the null type (Spark's NullType)."""
        table = self._expected()
        if self.partition_by and table.column("p").null_count == len(table):
            table = table.set_column(table.schema.get_field_index("p"), "p", pa.nulls(len(table)))
        return table

    def _number(self, rows: list[dict]) -> list[dict]:
        return [{"id": len(self.rows) + i} | r for i, r in enumerate(rows)]

    def _settings(self, how: str, which: int) -> dict:
        """The settings a writer passes: before the first commit the drawn ones (which it records); then none, the
        recorded ones, or one that contradicts them."""
        if self.recorded is None:
            return {k: v for k, v in self.initial.items() if v is not None}
        if how == "omit":
            return {}
        if how == "same":
            return {k: v for k, v in self.recorded.items() if v is not None}
        setting = SETTINGS[which % len(SETTINGS)]
        value = {"compact_interval": self.recorded["compact_interval"] + 1, "retention": "30d",
                 "min_batches_to_retain": self.recorded["min_batches_to_retain"] + 1, "cleanup_delay": "1h"}[setting]
        return {setting: value}

    def _checkpoint(self, query: str) -> str:
        """The query's checkpoint: its ``metadata`` names its id, which the sink reads (``checkpoint_location``)."""
        checkpoint = Path(self.root, f"{self.name}-{query}")
        checkpoint.mkdir(exist_ok=True)
        (checkpoint / "metadata").write_text(json.dumps({"id": self.queries[query]}))
        return str(checkpoint)

    def _stopped(self, stopped: bool = True) -> dict:
        """``spark_sink_stopped=True`` once Spark's own sink wrote a batch (its query is stopped for good)."""
        return {"spark_sink_stopped": True} if self.spark_batches and stopped else {}

    def _contradicts(self, given: dict) -> bool:
        return self.recorded is not None and any(given[k] != self.recorded[k] for k in given)

    def _record(self, given: dict, session_interval: int | None = None) -> None:
        """The first commit records the settings it was given, else the defaults (a sink: the session's interval)."""
        if self.recorded is None:
            self.recorded = {k: given.get(k, DEFAULTS[k]) for k in SETTINGS}
            if "compact_interval" not in given and session_interval is not None:
                self.recorded["compact_interval"] = session_interval

    def _committed(self, batch: int, new_rows: list[dict]) -> None:
        """The model's commit of ``new_rows`` at log batch ``batch`` (the batches before it since the last one the
        model knows: empty ones, an optimize's or a killed call's, holding the rows before)."""
        before = sorted(r["id"] for r in self.rows)
        if batch > max(self.snapshots, default=-1):  # a new batch of ours is the newest
            self.spark_newest = self.delta_behind = self.iceberg_behind = False
        for empty in range(max(self.snapshots, default=-1) + 1, batch):
            self.snapshots[empty] = before
        self.rows += new_rows
        self.snapshots[batch] = sorted(r["id"] for r in self.rows)

    def _files_on_disk(self) -> set[str]:
        return {str(p) for p in Path(self.out).rglob("*.parquet")} if Path(self.out).exists() else set()

    def _refused(self, call, error: type, before: set[str]) -> None:
        """``call`` raises ``error`` and writes nothing: no commit, no data file."""
        latest = max(self.snapshots, default=None)
        with pytest.raises(error):
            call()
        assert (MetadataLog(self.out).latest_batch_id() if Path(self.out, "_spark_metadata").exists() else None) == latest
        assert self._files_on_disk() == before, "a refused call left files"

    # -- writers ---------------------------------------------------------------------------------------

    @rule(rows=ROWS, replay=st.booleans(), how=HOW, which=st.integers(0, 3), stopped=st.booleans())
    def append(self, rows: list[dict], replay: bool, how: str, which: int, stopped: bool) -> None:
        """write_batch of the next version, or a replay of the last one (skipped); after a batch of Spark's own
        sink, refused unless told that sink's query is stopped."""
        given = self._settings(how, which)
        options = dict(app_id="app", partition_by=self.partition_by, delta_log=self.delta, iceberg=self.iceberg,
                       **given, **self._stopped(stopped))
        if self.spark_newest and not stopped and not (replay and self.version) and not self._contradicts(given):
            table = pa.Table.from_pylist(self._number(rows), schema=SCHEMA)
            return self._refused(lambda: write_batch(self.out, table, version=self.version, **options),
                                 errors.SparkSinkBatchError, self._files_on_disk())
        if self._contradicts(given):
            table = pa.Table.from_pylist(self._number(rows), schema=SCHEMA)
            return self._refused(lambda: write_batch(self.out, table, version=self.version, **options),
                                 errors.OutputSettingsError, self._files_on_disk())
        if replay and self.version:
            result = write_batch(self.out, self._last_write, version=self.version - 1, **options)
            assert not result.committed and result.log_batch_id == self._last_batch, result
            return
        rows = self._number(rows)
        table = pa.Table.from_pylist(rows, schema=SCHEMA)
        result = write_batch(self.out, table, version=self.version, **options)
        assert result.committed
        self._record(given)
        self.version += 1
        self._last_write, self._last_batch = table, result.log_batch_id
        self._committed(result.log_batch_id, rows)

    @precondition(lambda self: self.spark is not None)
    @rule(rows=ROWS, writer=st.sampled_from(["spark", "arrow"]), query=st.sampled_from(["q0", "q1", None]),
          replay=st.booleans(), fresh=st.booleans(), refuse_foreign=st.booleans(), how=HOW, which=st.integers(0, 3),
          compression=st.sampled_from([None, None, "zstd"]), session_codec=st.sampled_from([None, "gzip", "zstd"]),
          session_interval=st.sampled_from([None, 3]))
    def sink_batch(self, rows: list[dict], writer: str, query: str | None, replay: bool, fresh: bool,
                   refuse_foreign: bool, how: str, which: int, compression: str | None, session_codec: str | None,
                   session_interval: int | None) -> None:
        """A micro-batch of a ParquetSink: the query's next batch id, or a replay of its last one (skipped, whatever
        its rows); a query's first batch on an output others wrote is refused with on_foreign_query="error"."""
        given = self._settings(how, which)
        last = self.done.get(query)
        batch_id = last if replay and last is not None else (-1 if last is None else last) + 1
        skipped = replay and last is not None
        foreign = last is None and bool(self.snapshots) and refuse_foreign
        options = dict(partition_by=self.partition_by, writer=writer, delta_log=self.delta, iceberg=self.iceberg,
                       compression=compression,
                       on_foreign_query="error" if foreign else "append", **given, **self._stopped())
        if query is not None:
            options["checkpoint_location"] = self._checkpoint(query)
        key = (query, writer, compression, foreign, bool(self.spark_batches))
        sink = self.sinks.get(key) if not fresh and not given else None
        if sink is None:
            sink = ParquetSink(self.out, **options)
            if not given:
                self.sinks[key] = sink
        rows = self._number(rows)
        frame = self.spark.createDataFrame([tuple(r[c] for c in SCHEMA.names) for r in rows], SPARK_SCHEMA)
        conf = {SESSION_CODEC: session_codec, SESSION_INTERVAL: session_interval if not Path(self.out).exists() else None}
        for name, value in conf.items():
            if value is not None:
                self.spark.conf.set(name, str(value))
        try:
            if self._contradicts(given):  # checked at a sink's first call, replay or not
                return self._refused(lambda: sink(frame, batch_id), errors.OutputSettingsError, self._files_on_disk())
            if foreign:
                return self._refused(lambda: sink(frame, batch_id), errors.ForeignQueryError, self._files_on_disk())
            sink(frame, batch_id)
        finally:
            for name, value in conf.items():
                if value is not None:
                    self.spark.conf.unset(name)
        progress = sink.last_progress
        assert progress.batch_id == batch_id and progress.skipped == skipped, (progress, skipped)
        if skipped:  # a replay writes nothing
            return
        self._record(given, conf[SESSION_INTERVAL])
        self.done[query], self.done_at[query] = batch_id, progress.log_batch_id
        self._committed(progress.log_batch_id, rows)
        codec = compression or session_codec or "snappy"
        for file in committed_files(self.out, batches=(progress.log_batch_id, progress.log_batch_id)):
            metadata = pq.ParquetFile(file.path).metadata
            if metadata.num_row_groups:  # the codec: the sink's, else the session's (Spark's own sink writes it)
                assert metadata.row_group(0).column(0).compression == FOOTER_CODEC[codec], (file.path, codec)

    @precondition(lambda self: self.spark is not None and self.snapshots)
    @rule(rows=ROWS, replay=st.booleans())
    def spark_sink(self, rows: list[dict], replay: bool) -> None:
        """Spark's own file sink writes the log's next batch (``FileStreamSink.addBatch``, as its query calls it, in
        a session with the output's compact interval), or a replay of the newest one: skipped ("already
        committed"), nothing written."""
        batch = max(self.snapshots) + (0 if replay else 1)
        interval = self.recorded["compact_interval"]
        rows = self._number(rows)
        frame = self.spark.createDataFrame([tuple(r[c] for c in SCHEMA.names) for r in rows], SPARK_SCHEMA)
        self.spark.conf.set(SESSION_INTERVAL, str(interval))  # read by its log, when made
        try:
            spark_sink_batch(self.spark, frame, self.out, batch, self.partition_by or ())
        finally:
            self.spark.conf.unset(SESSION_INTERVAL)
        if not replay:
            self._committed(batch, rows)
            self.spark_batches.add(batch)
            if (batch + 1) % self.recorded["compact_interval"] == 0:  # its compact file keeps Spark's keys only
                self.spark_compacted = batch
            self.spark_newest, self.delta_behind, self.iceberg_behind = True, self.delta, self.iceberg

    @precondition(lambda self: self.snapshots)
    @rule(size=st.sampled_from(["2KB", "1MB"]), order=st.sampled_from(["bins", "sort_by", "z_order"]), how=HOW,
          which=st.integers(0, 3))
    def optimize(self, size: str, order: str, how: str, which: int) -> None:
        given = self._settings(how, which)
        options = {"sort_by": ["n"]} if order == "sort_by" else {"z_order": ["n", "x"]} if order == "z_order" else {}
        options |= self._stopped()
        if self._contradicts(given):
            return self._refused(lambda: optimize(self.out, target_file_size=size, **options, **given),
                                 errors.OutputSettingsError, self._files_on_disk())
        self._optimized(optimize(self.out, target_file_size=size, **options, **given))

    def _optimized(self, result) -> None:
        """The model after an optimize: the same rows; the files it replaced stay on disk until vacuum."""
        if result.committed:
            self._committed(result.log_batch_id, [])
            abandoned = {f.path for b in result.abandoned for f in b.inputs}
            for file in (f for b in result.plan.bins for f in b.inputs if f.path not in abandoned):
                self.stale.update(pq.read_table(file.path, columns=["id"]).column("id").to_pylist())
        self._unmade_mirrors()

    def _unmade_mirrors(self) -> None:
        """After an optimize: a mirror no writer could make yet (its log committed no file then; Spark's own sink
        committed files since) is not made by optimize, which follows the tables the output has: it waits for the
        next commit of a writer of ours, or a sync."""
        if self.delta and not deltalake.DeltaTable.is_deltatable(self.out):
            self.delta_behind = True
        if self.iceberg and current_metadata(Storage(self.out)) is None:
            self.iceberg_behind = True

    @precondition(lambda self: self.snapshots)
    @rule(before_log=st.booleans())
    def vacuum(self, before_log: bool) -> None:
        vacuum(self.out, "0s", allow_short_retention=True, include_files_before_log=before_log)
        self.travel_from = max(self.snapshots)  # older snapshots may name files vacuum removed
        if not self.delta:  # a Delta log keeps the files its versions reference (docs/delta.md, Maintenance)
            self.stale.clear()
        if before_log or not self.before_log:
            self.loose, self.before_log = None, False

    @precondition(lambda self: self.snapshots and (not self.delta or self.delta_behind))
    @rule()
    def sync(self) -> None:
        sync_delta_log(self.out)
        self.delta, self.delta_behind = True, False  # the output keeps a Delta log from now on

    @precondition(lambda self: self.snapshots and (not self.iceberg or self.iceberg_behind))
    @rule()
    def iceberg_sync(self) -> None:
        sync_iceberg(self.out)
        self.iceberg, self.iceberg_behind = True, False  # every writer keeps the table from now on

    @precondition(lambda self: self.kills < self.max_kills)
    @rule(rows=ROWS, data=st.data())
    def killed(self, rows: list[dict], data: st.DataObject) -> None:
        """A write_batch, an optimize or (``sink_kills``) a sink's micro-batch in a child process, SIGKILLed at a
        failpoint or at a random moment: the output is as before the call or as after it (its rows once), then the
        call again (a restart) completes it."""
        what = data.draw(st.sampled_from(["write_batch", "optimize"] * 2 + ["sink"] * self.sink_kills), label="call")
        if what == "optimize" and not self.snapshots:
            return
        self.kills += 1
        points = {"write_batch": WRITE_KILLS, "optimize": OPTIMIZE_KILLS, "sink": SINK_KILLS}[what]
        point = data.draw(st.sampled_from(points), label="failpoint")
        given = self._settings("omit", 0)
        before = sorted(r["id"] for r in self.rows)
        config = {"out": self.out}
        if what == "optimize":
            rows, table = [], None
            config["kwargs"] = dict(target_file_size="2KB", **given, **self._stopped())
        else:
            rows = self._number(rows)
            table = pa.Table.from_pylist(rows, schema=SCHEMA)
            config["table"] = str(Path(self.root, f"{self.name}-{len(self.rows)}-{self.kills}.arrow"))
            with pa.OSFile(config["table"], "wb") as sink, pa.ipc.new_file(sink, table.schema) as ipc:
                ipc.write_table(table)
        if what == "write_batch":
            config["kwargs"] = dict(app_id="app", version=self.version, partition_by=self.partition_by,
                                    delta_log=self.delta, iceberg=self.iceberg, **given, **self._stopped())
        elif what == "sink":
            query = data.draw(st.sampled_from(["q0", "q1"]), label="query")
            config["batch_id"], config["spark_schema"] = self.done.get(query, -1) + 1, SPARK_SCHEMA
            config["kwargs"] = dict(partition_by=self.partition_by, delta_log=self.delta, iceberg=self.iceberg,
                                    on_foreign_query="append",
                                    writer=data.draw(st.sampled_from(["spark", "arrow"]), label="writer"),
                                    checkpoint_location=self._checkpoint(query), **given, **self._stopped())
        child = start_child(Path(self.root, "children"), config, failpoints=f"{point}=kill" if point else None,
                            script=OPTIMIZE_CHILD)
        if point is None:  # a random moment of the call
            while not child.started_path.exists() and child.proc.poll() is None:
                time.sleep(0.005)
            time.sleep(data.draw(st.sampled_from([0.0, 0.02, 0.05, 0.1, 0.3]), label="after"))
            child.kill()
        child.wait()
        assert_group_gone(child.pgid)
        assert child.returncode in (0, -9), (child.returncode, child.result(), child.log_tail())
        if child.returncode or what == "optimize":  # its files: a killed write's rows, an optimize's rewrite
            self.loose = (self.loose or set()) | {r["id"] for r in rows} | set(before)
            self.before_log = self.before_log or not self.snapshots
        after = sorted(before + [r["id"] for r in rows])
        if Path(self.out, "_spark_metadata").exists():
            got = _ids(read_committed(self.out, columns=["id"]))
            assert got in (before, after), (point, got)
            assert verify(self.out).ok
        if what == "write_batch":  # the restart: the same version again, committed once
            result = write_batch(self.out, table, **config["kwargs"])
            self._record(given)
            self.version += 1
            self._last_write, self._last_batch = table, result.log_batch_id
            self._committed(result.log_batch_id, rows)
        elif what == "sink":  # the restarted query runs the batch again: committed once
            sink = ParquetSink(self.out, **config["kwargs"])
            sink(self.spark.createDataFrame([tuple(r[c] for c in SCHEMA.names) for r in rows], SPARK_SCHEMA),
                 config["batch_id"])
            self._record(given)
            progress = sink.last_progress  # skipped: the child committed it, as the log's newest batch
            batch = MetadataLog(self.out).latest_batch_id() if progress.skipped else progress.log_batch_id
            self.done[query], self.done_at[query] = config["batch_id"], batch
            self._committed(batch, rows)
        else:  # the rerun: plans from the log again
            self._optimized(optimize(self.out, **config["kwargs"]))
            self._committed(MetadataLog(self.out).latest_batch_id(), [])  # the child's swap and padding, if any
            self._unmade_mirrors()
            if self.delta:  # what the child replaced (which files, the model cannot tell) the Delta log may keep
                self.stale.update(before)

    # -- readers ---------------------------------------------------------------------------------------

    @precondition(lambda self: self.rows)  # no row yet: a partitioned output has no file to take a schema from
    @rule(data=st.data())
    def filtered_reads(self, data: st.DataObject) -> None:
        case = FilterCase(KINDS, [], [self.rows], 1)
        chosen = [data.draw(filters(case)) for _ in range(3)]
        assert_filters_agree(self.out, self._as_read(), chosen, None)
        if not self.delta or self.delta_behind or not deltalake.DeltaTable.is_deltatable(self.out):
            return
        # delta-rs's own readers, with its own statistics: a float column holding NaN or an infinity has no JSON
        # bound, and delta-rs's dataset then skips the file for a filter on it (x != 1.0, x = NaN lose the NaN
        # rows; docs/delta.md, tests/delta/test_delta_differential.py): not ours, such filters are left out here
        x = self._expected().column("x")
        kinds = KINDS if pc.all(pc.is_finite(x)).as_py() is not False else {c: KINDS[c] for c in ("n", "s")}
        case = FilterCase(kinds, [], [self.rows], 1)
        table = deltalake.DeltaTable(self.out)
        for expression in [data.draw(filters(case)) for _ in range(2)]:
            try:
                expected = self._expected().filter(expression)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                continue
            got = table.to_pyarrow_dataset().to_table(filter=expression)
            assert sorted_rows(got.select(SCHEMA.names)) == sorted_rows(expected), expression
            got = table.to_pyarrow_table(filters=expression)
            assert sorted_rows(got.select(SCHEMA.names)) == sorted_rows(expected), expression

    def _floor(self) -> int:
        """The oldest batch time travel must read from its own log files: Spark's cleanup rule
        (``deleteExpiredLog``) with the output's min_batches_to_retain, once cleanup_delay lets it delete."""
        settings = self.recorded or DEFAULTS
        if settings["cleanup_delay"] != "0s":
            return 0
        interval = settings["compact_interval"]
        first = max(self.snapshots) + 1 - settings["min_batches_to_retain"]
        return 0 if interval > first else first - first % interval - 1

    @invariant()
    def readers_agree(self) -> None:
        if not self.snapshots:
            return
        expected = sorted(r["id"] for r in self.rows)
        assert _ids(read_committed(self.out, columns=["id"])) == expected
        assert count_committed(self.out) == len(expected)
        files = snapshot(self.out, statistics=True).files.table
        # Spark's own sink logs none, and its compaction writes every entry with Spark's keys only
        ours = pc.and_(pc.invert(pc.is_in(files.column("batch_id"), pa.array(sorted(self.spark_batches), pa.int64()))),
                       pc.greater(files.column("batch_id"), self.spark_compacted))
        stats = files.filter(ours).column("stats")
        assert stats.null_count == 0, "every writer of ours, optimize too, logs each file's statistics"
        report = verify(self.out)
        assert report.ok, report.problems
        latest = max(self.snapshots)
        assert history(self.out, limit=1).column("log_batch_id").to_pylist() == [latest]
        self._time_travel()
        if self.delta_behind:  # the Delta log waits for the next commit of ours (or a sync)
            pass
        elif self.delta and not deltalake.DeltaTable.is_deltatable(self.out):
            assert not len(committed_files(self.out))  # a log committing no file yet gets no Delta log
        elif self.delta:
            table = deltalake.DeltaTable(self.out).to_pyarrow_table(columns=["id"])
            assert _ids(table) == expected
        if self.iceberg and not self.iceberg_behind:
            self._iceberg(latest)
        self._globs(expected)

    def _iceberg(self, latest: int) -> None:
        """The Iceberg table without catalog is at the newest batch and reads its rows; its oldest snapshot (vacuum
        expires those past its retention) reads the rows of the log batch it records."""
        location = current_metadata(Storage(self.out))
        if location is None:  # a log committing no file yet gets no table
            assert not len(committed_files(self.out))
            return
        table = StaticTable.from_metadata(location)
        current = table.current_snapshot()
        assert int(current.summary[MARKER]) == latest, (current.summary, latest)
        oldest = min(table.metadata.snapshots, key=lambda s: s.sequence_number)
        for snap in {current.snapshot_id: current, oldest.snapshot_id: oldest}.values():
            batch = int(snap.summary[MARKER])
            assert _ids(table.scan(snapshot_id=snap.snapshot_id, selected_fields=("id",)).to_arrow()) == \
                self.snapshots[batch], batch

    def _time_travel(self) -> None:
        """Every batch from the promised one (the retained log files, and since the last vacuum) reads its rows;
        an older one reads its rows or is SnapshotExpiredError, never other rows."""
        floor = max(self._floor(), self.travel_from)
        batches = sorted(self.snapshots)
        readable = [b for b in batches if b >= floor]
        older = [b for b in batches if b < floor]
        for batch in {readable[0], readable[len(readable) // 2], *older[-1:]}:
            try:
                got = _ids(read_committed(self.out, as_of_batch=batch, columns=["id"]))
            except errors.SnapshotExpiredError:
                assert batch < floor, f"as_of_batch={batch} refused, but the settings promise batches from {floor}"
                continue
            assert got == self.snapshots[batch], batch

    def _globs(self, expected: list[int]) -> None:
        """The globs docs/design.md calls safe read the data files only: the committed rows, plus (after an
        optimize, until vacuum) the files it replaced, and whatever a killed call left until vacuum."""
        glob = f"{self.out}/*=*/**/*.parquet" if self.partition_by else f"{self.out}/*.parquet"
        if not list(Path(self.out).glob(glob[len(self.out) + 1:])):
            assert not expected
            return
        read = [sorted(r[0] for r in duckdb.sql(f"select id from read_parquet('{glob}')").fetchall()),
                sorted(pl.scan_parquet(glob, hive_partitioning=False).select("id").collect()["id"].to_list())]
        for got in read:
            extra = Counter(got) - Counter(expected)
            assert not Counter(expected) - Counter(got), "a glob misses committed rows"
            if self.loose is not None or self.delta:  # a Delta log may keep replaced files vacuum would delete
                assert set(extra) <= set(self.stale) | (self.loose or set()), extra
            else:
                assert extra == self.stale, (extra, self.stale)

    def teardown(self) -> None:
        OutputModel.runs += 1
        if self.spark is None or not self.snapshots or not self.rows or OutputModel.runs % self.spark_every:
            return
        start = len(self.rows) % len(_PREDICATES)  # a few per run, every one over the runs
        for predicate in self.predicates or (_PREDICATES * 2)[start:start + 3]:
            rows = {}
            for pushdown in ("true", "false"):
                self.spark.conf.set("spark.sql.parquet.filterPushdown", pushdown)
                try:
                    rows[pushdown] = sorted(r.id for r in self.spark.read.parquet(self.out).where(predicate)
                                            .select("id").collect())
                finally:
                    self.spark.conf.unset("spark.sql.parquet.filterPushdown")
            if rows["true"] != rows["false"]:  # Spark's pushdown may lose rows of Spark's own writer's files only
                lost = set(rows["false"]) - set(rows["true"])
                assert set(rows["true"]) <= set(rows["false"]) and lost <= self._in_float_dictionaries(), predicate
        ids = sorted(r.id for r in self.spark.read.parquet(self.out).select("id").collect())
        assert ids == sorted(r["id"] for r in self.rows)


    def _in_float_dictionaries(self) -> set[int]:
        """Ids of the committed files whose ``x`` a parquet-mr writer dictionary-encoded: Spark's own sink does
        (Spark's pushdown of ``x = -0.0D`` then skips such a file holding 0.0: its DictionaryFilter compares by
        Double.equals, a defect of Spark's reader on Spark's own files; REGRESSIONS' spark-sink-files-with-a-zero);
        our writers never write such a file (their float columns have no dictionary)."""
        ids: set[int] = set()
        for file in committed_files(self.out):
            meta = pq.ParquetFile(file.path).metadata
            x = meta.schema.names.index("x")
            if (meta.created_by or "").startswith("parquet-mr") and any(
                    meta.row_group(g).column(x).has_dictionary_page for g in range(meta.num_row_groups)):
                ids.update(pq.read_table(file.path, columns=["id"]).column("id").to_pylist())
        return ids


def _row(x: float | None, n: int | None = None, s: str | None = None, p: int | None = None) -> dict:
    return {"x": x, "n": n, "s": s, "p": p}


class _Draws:
    """A rule's ``data`` in a regression example: its draws, in order."""

    def __init__(self, *values) -> None:
        self.values = list(values)

    def draw(self, strategy, label: str | None = None):
        return self.values.pop(0)


_SINK = dict(query="q0", replay=False, fresh=True, refuse_foreign=False, how="omit", which=0, compression=None,
             session_codec=None, session_interval=None)
# What the long runs found, each as the steps that showed it (rule, arguments), replayed with every check after each
# step, and the Spark predicates that showed it, checked with pushdown on and off at the end.
REGRESSIONS = {
    # a sink batch on Spark's writer path (parquet-mr) dictionary-encoded [0.0, inf, 0.0] (the first task's file),
    # and Spark's pushdown of x = -0.0D skipped it (parquet-mr's DictionaryFilter compares by Double.equals): its
    # float columns now get no dictionary, as the Arrow path writes a column holding a zero
    "zero-in-a-spark-writer-dictionary": ([
        ("start", dict(partitioned=False, interval=None, delta=True, retention=None, retain=None, delay=None)),
        ("sink_batch", dict(_SINK, rows=[_row(x) for x in (0.0, math.inf, 0.0, 5.0, 1.0, -0.0)], writer="spark")),
    ], ("x = -0.0D",)),
    # a running sink (a cached sink object) whose view of the log other writers' commits passed, their cleanup
    # (min_batches_to_retain=1, cleanup_delay="0s") deleting log files it had not read: its next batch failed with
    # MissingLogFileError ("the log has a gap"); it now reads the log again from the compact file
    "sink-behind-other-writers-cleanup": ([
        ("start", dict(partitioned=False, interval=2, delta=False, retention=None, retain=1, delay="0s")),
        ("append", dict(rows=[_row(1.0)], replay=False, how="omit", which=0, stopped=False)),
        ("sink_batch", dict(_SINK, rows=[_row(2.0)], writer="spark", fresh=False)),
        *[("append", dict(rows=[_row(3.0)], replay=False, how="omit", which=0, stopped=False))] * 4,
        ("sink_batch", dict(_SINK, rows=[_row(4.0)], writer="spark", fresh=False)),
    ], ()),
    # Spark's own sink writing a compaction batch of the output rewrites every entry with Spark's keys only,
    # dropping our commit records (and statistics); the query's record gone, a replay of its last batch after a
    # restart (on_foreign_query="append", spark_sink_stopped=True) was committed again: its rows twice (so was a
    # write_batch retry of an app's last version). A record's entry now names it in its path, which Spark keeps
    "replay-after-spark-compaction": ([
        ("start", dict(partitioned=False, interval=2, delta=False, retention=None, retain=None, delay=None)),
        ("sink_batch", dict(_SINK, rows=[_row(1.0)], writer="spark")),
        ("append", dict(rows=[_row(2.0)], replay=False, how="omit", which=0, stopped=True)),
        ("spark_sink", dict(rows=[_row(3.0)], replay=False)),
        ("spark_sink", dict(rows=[_row(4.0)], replay=False)),
        ("sink_batch", dict(_SINK, rows=[_row(5.0)], writer="spark", replay=True)),
    ], ()),
    # cleanup (min_batches_to_retain=1, cleanup_delay="0s") left 5.compact alone, of interval 3; Spark's own sink (its
    # session's interval 3) derives another interval from it (deriveCompactInterval: 6) and writes batch 8 as a delta,
    # where every reader of ours, going by the recorded 3, needed 8.compact: MissingLogFileError (now read as written)
    "spark-sink-derives-another-interval-from-a-lone-compact-file": ([
        ("start", dict(partitioned=False, interval=3, delta=False, retention=None, retain=1, delay="0s")),
        *[("append", dict(rows=[_row(1.0)], replay=False, how="omit", which=0, stopped=True))] * 5,
        ("spark_sink", dict(rows=[_row(2.0)], replay=False)),
        *[("append", dict(rows=[_row(3.0)], replay=False, how="omit", which=0, stopped=True))] * 2,
        ("spark_sink", dict(rows=[_row(4.0)], replay=False)),
    ], ()),
    # the same, then a batch of ours: its cleanup (interval 3, min_batches_to_retain=1) deleted every log file below
    # 8, where the interval names 8.compact, but Spark's sink had written 8 as a delta: 5.compact, 6 and 7 gone, the
    # chain up to 9 broken (MissingLogFileError; Spark's reader, finding no compact file, looked for 9.compact).
    # Cleanup now never deletes past the newest compact file the log holds at or below its threshold
    "cleanup-after-spark-sink-wrote-a-delta-where-the-interval-names-a-compact-file": ([
        ("start", dict(partitioned=False, interval=3, delta=False, retention=None, retain=1, delay="0s")),
        *[("append", dict(rows=[_row(1.0)], replay=False, how="omit", which=0, stopped=True))] * 5,
        ("spark_sink", dict(rows=[_row(2.0)], replay=False)),
        *[("append", dict(rows=[_row(3.0)], replay=False, how="omit", which=0, stopped=True))] * 2,
        ("spark_sink", dict(rows=[_row(4.0)], replay=False)),
        *[("append", dict(rows=[_row(5.0)], replay=False, how="omit", which=0, stopped=True))] * 2,
    ], ()),
    # an optimize after a batch of Spark's own sink (spark_sink_stopped), killed after its commit and before its Delta
    # sync; run again, it found nothing to do and committed nothing: the Delta log stayed behind Spark's batch, whose
    # rows delta-rs's readers missed (now it syncs the Delta log with nothing to rewrite too)
    # a partitioned output whose rows all had a null p (the default partition directory alone): read_committed
    # and Spark's reader type p as null (NullType), the model expected int32 (a defect of the model)
    "a-partition-column-of-nulls-alone-is-of-the-null-type": ([
        ("start", dict(partitioned=True, interval=None, delta=False, retention=None, retain=None, delay=None)),
        ("append", dict(rows=[_row(math.nan, 0, "a")], replay=False, how="omit", which=0, stopped=False)),
        ("filtered_reads", dict(data=_Draws(~~pc.field("x").is_null(), pc.field("x") == pa.scalar(None, pa.float64()),
                                            pc.field("n") >= 0))),
    ], ()),
    # the Delta table created while p's directories were all the null partition declared p a string for good:
    # delta-rs read p=0 as "0" where read_committed and Spark's reader read 0. The first batch with a value now
    # retypes it (no file the table keeps held a value: docs/delta.md), and the model expects 0
    "a-delta-partition-column-created-of-nulls-takes-the-type-of-its-first-values": ([
        ("start", dict(partitioned=True, interval=None, delta=True, retention=None, retain=None, delay=None)),
        ("append", dict(rows=[_row(1.0)], replay=False, how="omit", which=0, stopped=False)),
        ("append", dict(rows=[_row(-0.0, 0, p=0), _row(2.0, 1, p=1)], replay=False, how="omit", which=0,
                        stopped=False)),
        ("filtered_reads", dict(data=_Draws(*[pc.field("n").is_valid()] * 5))),
    ], ()),
    # Spark's own sink dictionary-encoded [0.0, 0.0, 1.0, 0.0, 5.0]: Spark's pushdown of x = -0.0D lost its zeros
    # (Spark's reader on Spark's own file: its DictionaryFilter compares by Double.equals); the model now asserts
    # that every row pushdown loses is in such a file, which no writer of ours writes
    "spark-sink-files-with-a-zero": ([
        ("start", dict(partitioned=False, interval=None, delta=False, retention=None, retain=None, delay=None)),
        ("append", dict(rows=[_row(0.0)], replay=False, how="omit", which=0, stopped=False)),
        ("spark_sink", dict(rows=[_row(x) for x in (0.0, 0.0, 1.0, 0.0, 5.0)], replay=False)),
    ], ("x = -0.0D",)),
    # sync_delta_log and sync_iceberg of a log committing no file yet make no table (no schema to give it); Spark's
    # own sink then committed files, and an optimize, which follows the tables the output has, made none either: the
    # model expected both mirrors in step after a commit of ours (a defect of the model: they wait for a writer's
    # next commit or a sync)
    "a-mirror-synced-before-any-file-waits-past-an-optimize": ([
        ("start", dict(partitioned=True, interval=None, delta=False, retention=None, retain=None, delay=None)),
        ("append", dict(rows=[], replay=False, how="omit", which=0, stopped=False)),
        ("sync", {}),
        ("iceberg_sync", {}),
        ("spark_sink", dict(rows=[_row(math.nan, 0, "a", 0)] * 2, replay=False)),
        ("optimize", dict(size="2KB", order="z_order", how="omit", which=0)),
        ("append", dict(rows=[_row(1.0, p=1)], replay=False, how="omit", which=0, stopped=True)),
    ], ()),
    "optimize-killed-after-its-commit-leaves-the-delta-log-behind": ([
        ("start", dict(partitioned=False, interval=None, delta=True, retention=None, retain=None, delay=None)),
        *[("append", dict(rows=[_row(1.0)], replay=False, how="omit", which=0, stopped=True))] * 2,
        ("spark_sink", dict(rows=[_row(2.0)], replay=False)),
        ("killed", dict(rows=[], data=_Draws("optimize", "optimize_after_commit"))),
    ], ()),
}


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_output_model_regressions(spark, tmp_path, name: str) -> None:
    steps, predicates = REGRESSIONS[name]
    machine = type("OutputModelHere", (OutputModel,), {"root": str(tmp_path), "spark": spark, "spark_every": 1,
                                                       "predicates": predicates})
    state = machine()
    for rule_name, arguments in steps:
        getattr(state, rule_name)(**arguments)
        state.readers_agree()
    state.teardown()


def test_output_model(spark, tmp_path, fuzz_minutes: float) -> None:
    machine = type("OutputModelHere", (OutputModel,),
                   {"root": str(tmp_path), "spark": spark, "spark_every": 1 if fuzz_minutes else 4,
                    "max_kills": 3 if fuzz_minutes else 1, "sink_kills": bool(fuzz_minutes)})
    run_model(machine, fuzz_minutes, examples=6, steps=10, fuzz_examples=20, fuzz_steps=30)


def test_output_model_keeps_the_iceberg_table_in_step(spark, tmp_path) -> None:
    """Every writer, optimize, vacuum and a kill in the Iceberg sync, on an output keeping an Iceberg table without
    catalog, with every check after each step (the long runs draw these; this walks each once)."""
    machine = type("OutputModelHere", (OutputModel,), {"root": str(tmp_path), "spark": spark, "spark_every": 1,
                                                       "predicates": ("x > 5",)})
    state = machine()
    append = dict(replay=False, how="omit", which=0, stopped=True)
    steps = [
        ("start", dict(partitioned=True, interval=2, delta=False, retention=None, retain=None, delay=None,
                       iceberg=True)),
        ("append", dict(append, rows=[_row(1.0, p=0), _row(2.0, p=1)])),
        ("sink_batch", dict(_SINK, rows=[_row(3.0, p=1)], writer="arrow")),
        ("spark_sink", dict(rows=[_row(4.0, p=0)], replay=False)),
        ("killed", dict(rows=[_row(5.0, p=None)], data=_Draws("write_batch", "iceberg_commit"))),
        ("optimize", dict(size="1MB", order="bins", how="omit", which=0)),
        ("vacuum", dict(before_log=False)),
        ("append", dict(append, rows=[_row(6.0, p=0)])),
    ]
    for rule_name, arguments in steps:
        getattr(state, rule_name)(**arguments)
        state.readers_agree()
    table = StaticTable.from_metadata(current_metadata(Storage(state.out)))
    assert _ids(table.scan(selected_fields=("id",)).to_arrow()) == list(range(6))
    state.teardown()
