"""``write_batch`` with the data users really pass (pandas categoricals, polars Enum and Null columns, pyarrow
dictionaries, nested nanosecond timestamps, ``date64``, slices of bigger tables), with pyarrow and Spark as the
oracles: what ``spark.read.parquet`` and ``read_committed`` read back equals what was passed, and what Spark
cannot read or Parquet cannot hold is a typed error naming the column, the write and the output, with nothing
written."""

from __future__ import annotations

import datetime as dt
import decimal
import re
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parquet_sink import committed_files, errors, read_committed, write_batch
from parquet_sink.write.appends import data_fingerprint

UTC = dt.timezone.utc


def _directories(out: str) -> list[str]:
    return sorted(p.rsplit("/", 1)[0] for p in committed_files(out).table.column("relative_path").to_pylist())


def _rows(table: pa.Table) -> list[str]:
    names = sorted(table.column_names)
    return sorted(repr(tuple(row[c] for c in names)) for row in table.to_pylist())


@pytest.mark.parametrize(
    "encoded",
    [
        pd.DataFrame({"p": pd.Categorical(["b", "a", "b", None]), "v": [1, 2, 3, 4]}),
        pl.DataFrame({"p": ["x", "y", "x", None], "v": [1, 2, 3, 4]}, schema={"p": pl.Enum(["y", "x"]), "v": pl.Int64}),
        pl.DataFrame({"p": ["x", "y", "x", None], "v": [1, 2, 3, 4]}, schema={"p": pl.Categorical, "v": pl.Int64}),
        pa.table({"p": pa.array([-0.0, 0.0, 1e20, None]).dictionary_encode(), "v": [1, 2, 3, 4]}),
        pa.table({"p": pa.array([True, False, None, True]).dictionary_encode(), "v": [1, 2, 3, 4]}),
        pa.table({"p": pa.nulls(3), "v": [1, 2, 3]}),
        pl.DataFrame({"p": [None, None], "v": [1, 2]}),
    ],
    ids=["pandas-categorical", "polars-enum", "polars-categorical", "dictionary-double", "dictionary-bool",
         "arrow-null", "polars-null"],
)
def test_an_encoded_or_all_null_partition_column_is_partitioned_by_its_values(tmp_path, encoded):
    """A dictionary-encoded partition column (a pandas categorical, a polars Enum) and a column of Arrow's null type
    (polars' Null: a column with no value yet) failed with pyarrow's ArrowNotImplementedError. The oracle: the same
    rows with the column decoded, whose directories the differential tests hold to Spark's."""
    table = pa.Table.from_pandas(encoded, preserve_index=False) if isinstance(encoded, pd.DataFrame) else (
        encoded.to_arrow() if isinstance(encoded, pl.DataFrame) else encoded)
    typ = table.schema.field("p").type
    plain = table.set_column(0, "p", table.column("p").cast(typ.value_type if pa.types.is_dictionary(typ) else pa.string()))
    out, oracle = str(tmp_path / "out"), str(tmp_path / "oracle")
    write_batch(out, encoded, app_id="a", version=0, partition_by=["p"])
    write_batch(oracle, plain, app_id="a", version=0, partition_by=["p"])
    assert _directories(out) == _directories(oracle)
    assert _rows(read_committed(out)) == _rows(read_committed(oracle))
    assert sorted(read_committed(out).column("v").to_pylist()) == sorted(table.column("v").to_pylist())
