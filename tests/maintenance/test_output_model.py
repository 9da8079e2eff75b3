"""One stateful model of a whole output (issue 54, item 9): a Hypothesis state machine draws operations from the
writers and maintenance commands with their options on one output (``write_batch`` partitioned or not, with the
Delta log or not; ``optimize`` by bins, ``sort_by`` or ``z_order``; ``vacuum``; ``sync_delta_log``; log compaction at
the drawn interval) over values at their edges (NaN, -0.0, +-inf, nulls), and after every step checks every reader
against the model: ``read_committed`` with and without drawn filters (pyarrow's filter over the model's rows as the
oracle), ``count_committed``, ``history``, time travel to every batch since the last ``vacuum``, ``verify``, and
delta-rs's readers of the Delta log; at the end of each run ``spark.read.parquet`` with filter pushdown on, against
Spark with it off (Spark SQL's float order: NaN above every number). Items 1-8's shapes are its regression examples
where they are operations here; ``--fuzz-minutes`` runs it long.
"""

from __future__ import annotations

import math
import uuid

import deltalake
import pyarrow as pa
import pyarrow.dataset as ds
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from parquet_sink import (
    committed_files, count_committed, history, optimize, read_committed, snapshot, sync_delta_log, vacuum, verify,
    write_batch,
)
from tests.helpers.filters import FilterCase, assert_filters_agree, filters, run_model
from tests.helpers.strategies import Kind

NAN = float("nan")
_FLOATS = st.sampled_from([NAN, 0.0, -0.0, 1.0, -1.0, 5.0, math.inf, -math.inf, None])
KINDS = {
    "x": Kind("double", pa.float64(), _FLOATS),
    "n": Kind("long", pa.int64(), st.sampled_from([0, 1, 2, 7, -3, None])),
    "s": Kind("string", pa.string(), st.sampled_from(["a", "b c", "", "é", None])),
}
SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.float64()), ("n", pa.int64()), ("s", pa.string()),
                    ("p", pa.int32())])
ROWS = st.lists(st.fixed_dictionaries({c: k.values for c, k in KINDS.items()} | {"p": st.sampled_from([0, 1, None])}),
                max_size=6)
_PREDICATES = ["x > 5", "x != 1.0", "x = double('NaN')", "x = -0.0D", "NOT (x <= 1.0)", "n >= 2", "s = 'a'",
               "x IS NULL", "isnan(x)"]


class OutputModel(RuleBasedStateMachine):
    root: str = ""
    spark = None
    spark_every = 1  # Spark checks every n-th run (its jobs cost most of a run)
    runs = 0

    @initialize(partitioned=st.booleans(), interval=st.sampled_from([2, 3, 10]), delta=st.booleans())
    def start(self, partitioned: bool, interval: int, delta: bool) -> None:
        self.out = f"{self.root}/{uuid.uuid4().hex[:8]}"
        self.partition_by = ["p"] if partitioned else None
        self.interval, self.delta = interval, delta
        self.rows: list[dict] = []
        self.version = 0
        self.snapshots: dict[int, list[int]] = {}  # log batch -> the ids its snapshot holds
        self.travel_from = 0  # the oldest batch time travel must still read (vacuum removes replaced files)

    def _expected(self) -> pa.Table:
        return pa.Table.from_pylist(self.rows, schema=SCHEMA)

    @rule(rows=ROWS)
    def append(self, rows: list[dict]) -> None:
        rows = [{"id": len(self.rows) + i} | r for i, r in enumerate(rows)]
        table = pa.Table.from_pylist(rows, schema=SCHEMA)
        result = write_batch(self.out, table, app_id="app", version=self.version, partition_by=self.partition_by,
                             compact_interval=self.interval, delta_log=self.delta)
        assert result.committed
        self.version += 1
        self.rows += rows
        self.snapshots[result.log_batch_id] = sorted(r["id"] for r in self.rows)

    @rule(size=st.sampled_from(["2KB", "1MB"]), order=st.sampled_from(["bins", "sort_by", "z_order"]))
    def optimize(self, size: str, order: str) -> None:
        if not self.rows and not self.snapshots:
            return
        options = {"sort_by": ["n"]} if order == "sort_by" else {"z_order": ["n", "x"]} if order == "z_order" else {}
        result = optimize(self.out, target_file_size=size, compact_interval=self.interval, **options)
        if result.committed:
            ids = sorted(r["id"] for r in self.rows)
            for batch in range(max(self.snapshots) + 1, result.log_batch_id + 1):
                self.snapshots[batch] = ids  # its empty batches and its swap: the same rows

    @rule()
    def vacuum(self) -> None:
        if not self.snapshots:
            return
        vacuum(self.out, "0s", allow_short_retention=True)
        self.travel_from = max(self.snapshots)  # older snapshots may name files vacuum removed

    @rule()
    def sync(self) -> None:
        if self.snapshots:
            sync_delta_log(self.out)
            self.delta = True  # the output keeps a Delta log from now on

    @rule(data=st.data())
    def filtered_reads(self, data: st.DataObject) -> None:
        if not self.rows:  # no row yet: a partitioned output has no file to take a schema from
            return
        batches = [self.rows] if self.rows else [[]]
        case = FilterCase(KINDS, [], batches, 1)
        chosen = [data.draw(filters(case)) for _ in range(3)]
        assert_filters_agree(self.out, self._expected(), chosen, None)

    @invariant()
    def readers_agree(self) -> None:
        if not self.snapshots:
            return
        expected = sorted(r["id"] for r in self.rows)
        assert sorted(read_committed(self.out, columns=["id"]).column("id").to_pylist()) == expected
        assert count_committed(self.out) == len(expected)
        stats = snapshot(self.out, statistics=True).files.table.column("stats")
        assert stats.null_count == 0, "every writer of ours, optimize too, logs each file's statistics"
        report = verify(self.out)
        assert report.ok, report.problems
        latest = max(self.snapshots)
        assert history(self.out, limit=1).column("log_batch_id").to_pylist() == [latest]
        readable = [b for b in sorted(self.snapshots) if b >= self.travel_from]
        for batch in {readable[0], readable[len(readable) // 2]}:  # the oldest it must read, and one between
            got = read_committed(self.out, as_of_batch=batch, columns=["id"]).column("id").to_pylist()
            assert sorted(got) == self.snapshots[batch], batch
        if self.delta and not deltalake.DeltaTable.is_deltatable(self.out):
            assert not len(committed_files(self.out))  # a log committing no file yet gets no Delta log
        elif self.delta:
            table = deltalake.DeltaTable(self.out).to_pyarrow_table(columns=["id"])
            assert sorted(table.column("id").to_pylist()) == expected

    def teardown(self) -> None:
        OutputModel.runs += 1
        if self.spark is None or not self.snapshots or not self.rows or OutputModel.runs % self.spark_every:
            return
        start = len(self.rows) % len(_PREDICATES)  # a few per run, every one over the runs
        for predicate in (_PREDICATES * 2)[start:start + 3]:
            rows = {}
            for pushdown in ("true", "false"):
                self.spark.conf.set("spark.sql.parquet.filterPushdown", pushdown)
                try:
                    rows[pushdown] = sorted(r.id for r in self.spark.read.parquet(self.out).where(predicate)
                                            .select("id").collect())
                finally:
                    self.spark.conf.unset("spark.sql.parquet.filterPushdown")
            assert rows["true"] == rows["false"], predicate
        ids = sorted(r.id for r in self.spark.read.parquet(self.out).select("id").collect())
        assert ids == sorted(r["id"] for r in self.rows)


def test_output_model(spark, tmp_path, fuzz_minutes: float) -> None:
    machine = type("OutputModelHere", (OutputModel,),
                   {"root": str(tmp_path), "spark": spark, "spark_every": 1 if fuzz_minutes else 4})
    run_model(machine, fuzz_minutes, examples=6, steps=10, fuzz_examples=20, fuzz_steps=30)
