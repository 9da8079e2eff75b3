"""``SinkOutput`` (issue 56, item 1): the output as an object, and the free functions, are one surface: every
operation run through both on twin outputs gives the same result (rows, counts, files, history, schema, plans,
reports), and the object applies its storage options to every call (moto: credentials given once)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

import parquet_sink
from parquet_sink import (
    SinkOutput, committed_files, count_committed, doctor, history, optimize, read_committed, snapshot, vacuum,
    verify, write_batch,
)
from parquet_sink.errors import NotAnOutputError, ParameterError


class _Functions:
    """The free functions, shaped as the object's methods."""

    def __init__(self, path: str, storage_options: dict | None = None) -> None:
        self.path, self.options = path, {"storage_options": storage_options} if storage_options else {}

    def write(self, data, **kw):
        return write_batch(self.path, data, **kw, **self.options)

    def read(self, **kw):
        return read_committed(self.path, **kw, **self.options)

    def count(self, **kw):
        return count_committed(self.path, **kw, **self.options)

    def files(self, **kw):
        return committed_files(self.path, **kw, **self.options)

    def snapshot(self, **kw):
        return snapshot(self.path, **kw, **self.options)

    def history(self, **kw):
        return history(self.path, **kw, **self.options)

    def optimize(self, **kw):
        return optimize(self.path, **kw, **self.options)

    def vacuum(self, *args, **kw):
        return vacuum(self.path, *args, **kw, **self.options)

    def verify(self):
        return verify(self.path, **self.options)

    def doctor(self, **kw):
        return doctor(self.path, **kw, **self.options)

    def schema(self):
        return parquet_sink.committed_dataset(self.path, **self.options).schema

    def latest_batch(self):
        return snapshot(self.path, **self.options).latest_batch_id

    def sync_iceberg(self, **kw):
        return parquet_sink.sync_iceberg(self.path, **kw, **self.options)


def _script(surface) -> dict:
    """The same operations on one output through ``surface``; what each returned, comparably."""
    said = {}
    for version in range(3):
        table = pa.table({"id": [3 * version + i for i in range(3)], "day": ["a", "b", "a"], "x": [1.0, 2.0, 3.0]})
        said[f"write {version}"] = surface.write(table, app_id="app", version=version, partition_by=["day"]).log_batch_id
    said["retry"] = surface.write(pa.table({"id": [6, 7, 8], "day": ["a", "b", "a"], "x": [1.0, 2.0, 3.0]}),
                                  app_id="app", version=2, partition_by=["day"]).committed
    said["rows"] = sorted(surface.read(columns=["id"]).column("id").to_pylist())
    said["filtered"] = sorted(surface.read(filter=ds.field("day") == "b").column("id").to_pylist())
    said["as of 0"] = sorted(surface.read(as_of_batch=0).column("id").to_pylist())
    said["count"] = surface.count(filter=ds.field("x") > 1.5)
    said["files"] = len(surface.files())
    said["schema"] = surface.schema().names
    said["latest"] = surface.latest_batch()
    said["history"] = surface.history(limit=2).select(["log_batch_id", "rows"]).to_pylist()
    said["optimize plan"] = surface.optimize(dry_run=True).plan.files_removed
    result = surface.optimize()
    said["optimize"] = (result.files_added, result.plan.files_removed)
    said["vacuum"] = len(surface.vacuum("0s", allow_short_retention=True, dry_run=True).plan.orphans)
    said["verify"] = (surface.verify().ok, surface.verify().files)
    said["doctor"] = surface.doctor(app_id="app", version=3).plan.action
    said["after"] = sorted(surface.read(columns=["id"]).column("id").to_pylist())
    iceberg = surface.sync_iceberg()
    said["iceberg"] = (iceberg.log_batch == surface.latest_batch(), iceberg.files_added, iceberg.files_removed)
    return said


def test_the_object_and_the_free_functions_agree(tmp_path: Path) -> None:
    ours, theirs = _script(SinkOutput(tmp_path / "object")), _script(_Functions(str(tmp_path / "functions")))
    assert ours == theirs
    assert ours["rows"] == list(range(9)) and ours["optimize"] == (2, 6) and ours["doctor"] == "commit"
    assert ours["iceberg"] == (True, 6 + 2, 6)  # the writes' files, then the optimize's swap of them for two


def test_the_object_carries_its_storage_options_to_every_call(moto_server) -> None:
    bucket = f"b{uuid.uuid4().hex[:12]}"
    moto_server.make_bucket(bucket)
    url = f"s3://{bucket}/out"
    ours = _script(SinkOutput(url, storage_options=moto_server.storage_options))
    theirs = _script(_Functions(f"s3://{bucket}/functions", moto_server.storage_options))
    assert ours == theirs
    with pytest.raises(ParameterError, match="given once to SinkOutput"):
        SinkOutput(url, storage_options=moto_server.storage_options).read(storage_options={})


def test_the_object_is_what_users_of_delta_rs_expect(tmp_path: Path) -> None:
    """Importable from the package with ``optimize``; a missing output fails at the first read, as the functions do;
    ``read(spark=...)`` is typed by its overloads."""
    from parquet_sink import optimize as imported  # the free function, like vacuum

    assert imported is optimize
    missing = SinkOutput(tmp_path / "nothing")
    assert repr(missing) == f"SinkOutput({str(tmp_path / 'nothing')!r})"
    with pytest.raises(NotAnOutputError):
        missing.read()
    import typing

    returns = [o.__annotations__["return"] for o in typing.get_overloads(SinkOutput.read)]
    assert returns == ["pa.Table", "DataFrame"]
