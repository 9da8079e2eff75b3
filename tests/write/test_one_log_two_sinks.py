"""One log, two sinks (issue 53, item 7): Hypothesis draws interleavings of Spark's own file sink (with kills in its
commit window), ParquetSink (both writer paths, ``on_foreign_query`` drawn), ``write_batch`` backfills and
``optimize`` on one output and one checkpoint, and after each step checks, with Spark's own sink as the oracle of
what it does:

* every row of a batch the checkpoint calls done is committed exactly once, but for the batches ``doctor`` said
  Spark's own sink would skip (going back after anything of ours committed: it cannot be prevented, only said);
* every refusal of ours is a typed error before anything was committed, and ``doctor`` predicted it (its plan was
  not ok); every step ``doctor`` called ok went through;
* a backfill is committed once or refused, as ``doctor --app-id`` predicted; ``verify`` stays ok.

The fixed tests in test_beside_spark_sink.py and test_migration.py are its first regression shapes.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from parquet_sink import ParquetSink, doctor, errors, read_committed, verify, write_batch
from parquet_sink.maintenance import optimize
from tests.helpers.filters import fixed_or_fuzzed
from tests.helpers.spark_util import run_available_now
from tests.write.test_beside_spark_sink import _add_input, _stream

_STEPS = ["spark", "spark_window", "ours", "backfill", "optimize"]


def _commits(ckpt: Path) -> int:
    """The newest batch the checkpoint calls done (-1: none)."""
    names = [p.name for p in (ckpt / "commits").glob("*")] if (ckpt / "commits").exists() else []
    return max((int(n) for n in names if n.isdigit()), default=-1)


class _Run:
    """One output, one checkpoint, one input directory; what the model expects of them."""

    def __init__(self, spark, root: Path) -> None:
        self.spark, self.src, self.ckpt, self.out = spark, root / "src", root / "ckpt", root / "out"
        self.files = 0
        self.lost: set[int] = set()  # query batches doctor said Spark's own sink would skip, losing their rows
        self.doubled: set[int] = set()  # query batches doctor warned on_foreign_query='append' would write again
        self.backfills: list[int] = []  # committed backfill versions
        self.version = 0

    def add_input(self) -> None:
        _add_input(self.src, self.files, [1000 * self.files, 1000 * self.files + 1])
        self.files += 1

    def spark_sink(self, window: bool) -> None:
        if self.out.exists():
            said = doctor(str(self.out), checkpoint=str(self.ckpt)).spark_sink
            if said is not None:
                self.lost.update(b for b in said.lost if b < self.files)  # Spark runs a batch per pending file
        run_available_now(_stream(self.spark, self.src), str(self.ckpt), path=str(self.out))
        if window:  # killed between its log commit and its checkpoint's commits/N: the state such a kill leaves
            done = _commits(self.ckpt)
            for name in (str(done), f".{done}.crc"):
                (self.ckpt / "commits" / name).unlink(missing_ok=True)

    def ours(self, writer: str, append: bool) -> None:
        plan = None
        if self.out.exists() and (self.ckpt / "metadata").exists():
            plan = doctor(str(self.out), checkpoint=str(self.ckpt),
                          on_foreign_query="append" if append else "error").plan
        before = read_committed(str(self.out)).num_rows if self.out.exists() else 0
        sink = ParquetSink(str(self.out), writer=writer, on_foreign_query="append" if append else "error")
        try:
            run_available_now(_stream(self.spark, self.src), str(self.ckpt), sink)
        except Exception as exc:  # the query fails with the sink's error
            refused = errors.original_error(exc)
            assert isinstance(refused, errors.ParquetSinkError), exc
            assert plan is None or not plan.ok, (plan, refused)
            assert read_committed(str(self.out)).num_rows == before if self.out.exists() else True
            return
        if plan is not None and plan.warnings and plan.action == "commit":
            self.doubled.add(plan.batch)  # doctor said append writes that batch again
        assert plan is None or plan.ok or plan.warnings, plan

    def backfill(self) -> None:
        table = pa.table({"id": [-1 - 2 * self.version, -2 - 2 * self.version], "k": ["b", "b"]})
        plan = doctor(str(self.out), app_id="backfill", version=self.version).plan if self.out.exists() else None
        try:
            write_batch(str(self.out), table, app_id="backfill", version=self.version)
        except errors.SparkSinkBatchError:
            assert plan is not None and plan.action == "spark", plan
            return
        assert plan is None or plan.action == "commit", plan
        self.backfills.append(self.version)
        self.version += 1

    def optimize(self) -> None:
        if not self.out.exists():
            return
        try:
            optimize(str(self.out), target_file_size="1MB")
        except errors.SparkSinkBatchError:
            pass  # Spark's own sink committed the newest batch: refused, nothing written (checked below)

    def check(self) -> None:
        if not self.out.exists():
            return
        ids = Counter(read_committed(str(self.out)).column("id").to_pylist())
        assert all(n == 1 for i, n in ids.items() if i // 1000 not in self.doubled or i < 0), ids
        for batch in range(_commits(self.ckpt) + 1):  # the checkpoint calls it done
            for i in (1000 * batch, 1000 * batch + 1):
                assert ids[i] == (0 if batch in self.lost else 1) or batch in self.doubled, (batch, ids, self.lost)
        for version in self.backfills:
            assert ids[-1 - 2 * version] == ids[-2 - 2 * version] == 1, ids
        assert verify(str(self.out)).ok


def test_interleavings_of_two_sinks_and_our_writers_on_one_log(spark, tmp_path_factory, fuzz_minutes):
    @given(st.lists(st.sampled_from(_STEPS), min_size=3, max_size=5), st.data())
    @fixed_or_fuzzed(fuzz_minutes, examples=2, fuzz_examples=30)
    def run(steps: list[str], data: st.DataObject) -> None:
        root = tmp_path_factory.mktemp("two-sinks")
        model = _Run(spark, root)
        try:
            for step in ["spark", *steps]:  # the output starts as Spark's own sink's
                if step in ("spark", "spark_window", "ours") and data.draw(st.booleans(), label="new input"):
                    model.add_input()
                if step in ("spark", "spark_window"):
                    if model.files == 0:
                        model.add_input()
                    model.spark_sink(window=step == "spark_window")
                elif step == "ours":
                    model.ours(data.draw(st.sampled_from(["spark", "arrow"]), label="writer"),
                               data.draw(st.booleans(), label="append"))
                elif step == "backfill":
                    model.backfill()
                else:
                    model.optimize()
                model.check()
        finally:
            shutil.rmtree(root, ignore_errors=True)

    run()
