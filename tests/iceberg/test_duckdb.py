"""duckdb's iceberg extension reads the Iceberg table sync_iceberg keeps: every snapshot (time travel by snapshot id)
returns read_committed(as_of_batch=b)'s rows, the current one with a filter on a partition column too. duckdb runs
in the venv ./dev.sh setup builds (.ci/duckdb-iceberg.txt: the registry ships the extension for duckdb 1.4.4 only,
while the readers group installs duckdb 2.x), as a child process given the metadata file and snapshot ids."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.table import StaticTable

from parquet_sink import optimize, read_committed, sync_iceberg, write_batch
from parquet_sink.iceberg.sync import MARKER

ROOT = Path(__file__).resolve().parents[2]
PYTHON = ROOT / ".venvs" / "duckdb-iceberg" / "bin" / "python"

# the child: loads the pinned extensions from its venv only (no download), prints each query's rows as JSON
_READER = """
import json, os, sys
import duckdb, duckdb_ext
directory = os.path.join(duckdb_ext.__path__[0], "extensions")
con = duckdb.connect(config={"extension_directory": directory, "autoinstall_known_extensions": False})
con.sql("LOAD avro"); con.sql("LOAD iceberg")
location, queries = sys.argv[1], json.loads(sys.argv[2])
out = {}
for name, (snapshot_id, where) in queries.items():
    scan = f"iceberg_scan('{location}'" + (f", snapshot_from_id={snapshot_id})" if snapshot_id else ")")
    out[name] = con.sql(f"SELECT i, k FROM {scan} {where} ORDER BY i").fetchall()
print(json.dumps(out))
"""


def _duckdb(location: str, queries: dict[str, tuple[int | None, str]]) -> dict[str, list]:
    if not PYTHON.exists():
        message = f"no {PYTHON.relative_to(ROOT)}: ./dev.sh setup builds it from .ci/duckdb-iceberg.txt"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    done = subprocess.run([str(PYTHON), "-c", _READER, location, json.dumps(queries)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _rows(table: pa.Table) -> list[list]:
    return sorted([[r["i"], r["k"]] for r in table.select(["i", "k"]).to_pylist()])


def test_duckdb_reads_every_snapshot(tmp_path):
    root = tmp_path / "out"
    for version in range(4):
        rows = pa.table({"i": [version * 10 + j for j in range(3)], "k": ["a", "b c", None]})
        write_batch(str(root), rows, app_id="a", version=version, partition_by=["k"])
        if version % 2:
            sync_iceberg(str(root))
    optimize(str(root))
    location = sync_iceberg(str(root)).metadata_location
    snapshots = {int(s.summary[MARKER]): s.snapshot_id for s in StaticTable.from_metadata(location).metadata.snapshots}
    queries = {str(batch): (snapshot_id, "") for batch, snapshot_id in snapshots.items()}
    queries["current, k = 'a'"] = (None, "WHERE k = 'a'")
    got = _duckdb(location, queries)
    for batch in snapshots:
        assert got[str(batch)] == _rows(read_committed(str(root), as_of_batch=batch)), batch
    assert got["current, k = 'a'"] == _rows(read_committed(str(root)).filter(pa.compute.field("k") == "a"))
    assert len(got["current, k = 'a'"]) == 4
