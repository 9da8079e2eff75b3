"""A Hypothesis state machine: random sequences of write_batch (with and without delta_log), failed writes
that leave files behind, batches logged the way Spark's sink logs them (old ones dropped by retention at
compaction) and syncs. Invariant after every sync: the Delta log lists exactly the committed files and every
Delta reader returns read_committed's rows; the rows written by write_batch are all there once."""

from __future__ import annotations

import uuid

import deltalake
import pyarrow as pa
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from parquet_sink import MetadataLog, committed_files, read_committed, sync_delta_log, write_batch
from parquet_sink import failpoints
from parquet_sink.delta import DeltaLogError
from parquet_sink.errors import NotAnOutputError
from tests.helpers.filters import run_model
from tests.delta.readers import assert_delta_matches, delta_files, spark_style_batch

VALUES = st.sampled_from(["a", "b c", "x:y", "p/q", None])
INTERVAL = 2


class DeltaModel(RuleBasedStateMachine):
    root: str = ""

    @initialize(old=st.booleans())
    def start(self, old: bool) -> None:
        """A new output whose first batch is logged the way Spark's sink logs it, and its first sync."""
        self.out = f"{self.root}/{uuid.uuid4().hex[:8]}"
        self.next_id = 0
        self.version = 0
        self.expected: list[int] = []  # ids written by write_batch: never dropped (logged now)
        self.started = False  # a log batch exists (before it, a failed write's files would be a dataset)
        self.spark_batch("a", old, sync=True)

    def _table(self, keys: list[str | None]) -> pa.Table:
        ids = list(range(self.next_id, self.next_id + len(keys)))
        self.next_id += len(keys)
        return pa.table({"id": pa.array(ids, pa.int64()), "k": pa.array(keys, pa.string())})

    @rule(keys=st.lists(VALUES, min_size=0, max_size=4), delta=st.booleans())
    def write(self, keys: list[str | None], delta: bool) -> None:
        table = self._table(keys)
        result = write_batch(self.out, table, app_id="app", version=self.version, partition_by=["k"],
                             compact_interval=INTERVAL, delta_log=delta, spark_sink_stopped=True)  # its Spark batches: a stopped query
        assert result.committed
        self.started = True
        self.version += 1
        self.expected += table.column("id").to_pylist()
        if delta:
            self.check()

    @precondition(lambda self: self.started)
    @rule(keys=st.lists(VALUES, min_size=1, max_size=3))
    def failed_write(self, keys: list[str | None]) -> None:
        """write_batch dies between its files and its commit: the files stay on disk, uncommitted."""
        failpoints._ACTIVE["before_commit"] = ("raise", 1)
        failpoints._HITS.pop("before_commit", None)
        try:
            with pytest.raises(failpoints.FailpointError):
                write_batch(self.out, self._table(keys), app_id="app", version=self.version, partition_by=["k"],
                            compact_interval=INTERVAL, delta_log=True, spark_sink_stopped=True)
        finally:
            failpoints._ACTIVE.pop("before_commit", None)

    @rule(key=VALUES, old=st.booleans(), sync=st.booleans())
    def spark_batch(self, key: str | None, old: bool, sync: bool) -> None:
        """A batch as Spark's sink logs it (no commit record, retention 7 days), logged 30 days ago when ``old``:
        the next compaction it makes drops it (and Delta must then remove it); then a sync if ``sync``."""
        log = MetadataLog(self.out, compact_interval=INTERVAL, retention="7d", cleanup=False)
        spark_style_batch(log, self._table([key]), ("k",), old)
        self.started = True
        if sync:
            self.sync()

    @precondition(lambda self: deltalake.DeltaTable.is_deltatable(self.out))
    @rule(how=st.sampled_from(["append", "overwrite", "optimize"]), keys=st.lists(VALUES, min_size=1, max_size=2))
    def foreign_commit(self, how: str, keys: list[str | None]) -> None:
        """Another Delta writer commits to the Delta log: the next sync refuses and leaves it as it is, the
        writers' hook too; ``recreate`` writes it again from the log."""
        before = deltalake.DeltaTable(self.out).version()
        if how == "optimize":
            deltalake.DeltaTable(self.out).optimize.compact()
        else:
            deltalake.write_deltalake(self.out, self._table(keys), mode=how, partition_by=["k"])
        if deltalake.DeltaTable(self.out).version() == before:
            return  # nothing to compact: no commit (the newest commit may be a sync's WRITE)
        theirs = delta_files(self.out)
        with pytest.raises(DeltaLogError, match="another Delta writer"):
            sync_delta_log(self.out)
        assert delta_files(self.out) == theirs
        sync_delta_log(self.out, recreate=True)
        self.check()

    @rule()
    def sync(self) -> None:
        if not self.started:
            with pytest.raises(NotAnOutputError):
                sync_delta_log(self.out)
            return
        sync_delta_log(self.out)
        self.check()

    def check(self) -> None:
        if not deltalake.DeltaTable.is_deltatable(self.out):  # no committed file yet: no Delta log
            assert not len(committed_files(self.out))
            return
        table = assert_delta_matches(self.out)
        ids = table.column("id").to_pylist() if table.num_columns else []
        assert len(ids) == len(set(ids))
        assert set(self.expected) <= set(ids)
        assert sorted(read_committed(self.out, columns=["id"] if ids else None).to_pydict().get("id", [])) == sorted(ids)


def test_delta_model(tmp_path, fuzz_minutes: float) -> None:
    machine = type("DeltaModelHere", (DeltaModel,), {"root": str(tmp_path)})
    run_model(machine, fuzz_minutes, examples=12, steps=8, fuzz_examples=30, fuzz_steps=25)
