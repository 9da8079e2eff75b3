"""Every column a partition column: Spark refuses it ("Cannot use all columns for partition columns"), since
the data files would hold no column and every reader would see 0 rows. The sink (both writer paths) and
``write_batch`` refuse it too, typed, before anything is written; a ``partition_by`` string (``"day"`` where
``["day"]`` is meant) is refused as the sink refuses it (issue 36, items 3 and 9)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parquet_sink import ParquetSink, await_termination, write_batch
from parquet_sink.errors import ParameterError, SchemaMismatchError
from tests.helpers.spark_util import run_available_now, write_input_files
from tests.helpers.strategies import ATOMIC, PARTITION_NAMES

PARTITIONABLE = [k for k in ATOMIC if k.partitionable]


def _nothing_written(out: Path) -> bool:
    return not out.exists() or (not list(out.rglob("*.parquet")) and not (out / "_spark_metadata").exists())


@st.composite
def all_partitioned(draw) -> tuple[pa.Table, list[str]]:
    """A table (0-3 rows, 1-3 partitionable columns) and its columns in some order as partition_by."""
    names = draw(st.lists(st.sampled_from(PARTITION_NAMES), min_size=1, max_size=3, unique_by=str.lower))
    kinds = {name: draw(st.sampled_from(PARTITIONABLE)) for name in names}
    schema = pa.schema([(name, kind.arrow) for name, kind in kinds.items()])
    rows = draw(st.lists(st.fixed_dictionaries({n: st.none() | k.values for n, k in kinds.items()}), max_size=3))
    return pa.Table.from_pylist(rows, schema=schema), draw(st.permutations(names))


@given(case=all_partitioned())
@settings(max_examples=25, deadline=None)
def test_write_batch_refuses_every_column_as_a_partition_column(tmp_path_factory, case):
    table, partition_by = case
    out = tmp_path_factory.mktemp("all") / "out"
    with pytest.raises(SchemaMismatchError, match=r"cannot use all columns .* for partition columns") as info:
        write_batch(str(out), table, app_id="a", version=0, partition_by=partition_by)
    assert str(out) in str(info.value) and "version 0 of app 'a'" in str(info.value)
    assert _nothing_written(out)


@pytest.mark.parametrize("partition_by", ["day", b"day", [1], ["day", "day"], 3], ids=repr)
def test_write_batch_refuses_partition_by_that_is_not_a_list_of_names(tmp_path, partition_by):
    out = tmp_path / "out"
    with pytest.raises(ParameterError, match="partition_by"):
        write_batch(str(out), pa.table({"day": ["d"], "n": [1]}), app_id="a", version=0, partition_by=partition_by)
    assert _nothing_written(out)
    with pytest.raises(ParameterError, match="partition_by"):
        ParquetSink(str(out), partition_by=partition_by, check_storage=False)


@pytest.mark.parametrize("writer", ["spark", "arrow"])
def test_sink_refuses_every_column_as_a_partition_column_as_spark_does(spark, tmp_path, writer):
    src = str(tmp_path / "in")
    write_input_files(src, [[{"id": 1, "day": "a"}, {"id": 2, "day": "b"}]])

    def stream():
        return spark.readStream.schema("id long, day string").json(src)

    # the oracle: Spark's own sink refuses the stream
    with pytest.raises(Exception, match="Cannot use all columns for partition columns"):
        run_available_now(stream(), str(tmp_path / "ck-spark"), path=str(tmp_path / "spark"), partitionBy=["day", "id"])
    out = tmp_path / "out"
    sink = ParquetSink(str(out), partition_by=["day", "id"], writer=writer)
    query = stream().writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ck")).start()
    with pytest.raises(SchemaMismatchError, match=r"cannot use all columns \['id', 'day'\] for partition columns"):
        await_termination(query)
    assert _nothing_written(out)
