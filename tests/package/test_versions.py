"""Declared ranges are tested ranges: every lower bound in pyproject.toml is what the version matrix's floors line
installs (.ci/matrix, run by .ci/run through ./dev.sh compat), the Python classifiers name exactly the Pythons the
matrix and the main suite run, and a PySpark older than the oldest supported is refused when a sink is built."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pyarrow as pa
import pytest
from packaging.requirements import Requirement

from parquet_sink.arrow_versions import nonzero

ROOT = Path(__file__).resolve().parents[2]
# The lower bounds the issue of declared ranges names; each is installed exactly by the floors line.
FLOORED = {"pyarrow", "numpy", "fsspec", "zlib-ng", "pandas", "pyspark", "deltalake", "adlfs", "s3fs", "polars", "duckdb", "pyiceberg"}


def _matrix() -> dict[str, dict[str, str]]:
    lines = {}
    for line in (ROOT / ".ci" / "matrix").read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, python, extras, marks, requirements = (part.strip() for part in line.split("|"))
        lines[name] = {"python": python, "extras": extras, "marks": marks, "requirements": requirements}
    return lines


def _declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = [Requirement(r) for r in project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        found += [Requirement(r) for r in extra if not r.startswith("parquet-sink")]
    return found


def _floor(requirement: Requirement) -> str | None:
    floors = [s.version for s in requirement.specifier if s.operator == ">="]
    return max(floors, key=lambda v: tuple(int(p) for p in re.findall(r"\d+", v))) if floors else None


def _release(version: str) -> tuple[int, ...]:
    parts = [int(p) for p in version.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def test_every_declared_lower_bound_is_installed_exactly_by_the_floors_line() -> None:
    pins = {
        Requirement(r).name: next(iter(Requirement(r).specifier)).version
        for r in _matrix()["floors"]["requirements"].split()
    }
    floors = {}
    for requirement in _declared():
        floor = _floor(requirement)
        if requirement.name in FLOORED and floor is not None:
            floors.setdefault(requirement.name, set()).add(_release(floor))
    assert set(floors) == FLOORED, set(floors) ^ FLOORED
    for name, declared in floors.items():
        assert name in pins, f"{name}: declared floor(s) {declared}, not installed by the floors line"
        # every extra that names it agrees with the floors line (the highest floor is the one pip meets)
        assert _release(pins[name]) == max(declared), (name, pins[name], declared)


def test_the_python_classifiers_are_the_pythons_ci_runs() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    classified = {
        c.rsplit(" :: ", 1)[1] for c in project["classifiers"] if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    }
    run = {line["python"] for line in _matrix().values()} | {"3.11"}  # the main suite: .venv from python3 (3.11)
    assert classified == run
    assert project["requires-python"] == f">={min(run, key=lambda v: tuple(map(int, v.split('.'))))}"


def test_every_older_spark_line_is_in_the_matrix() -> None:
    from parquet_sink.write.spark_versions import SUPPORTED

    lines = _matrix()
    assert {"spark-3.5", "spark-4.0", "spark-4.1", "spark-4.2", "floors"} <= set(lines)
    assert SUPPORTED == "3.5 and 4.0-4.3"
    assert "3.5.0" in lines["floors"]["requirements"]


def test_a_pyspark_older_than_supported_is_refused_naming_the_supported_ones(monkeypatch) -> None:
    import pyspark

    from parquet_sink.errors import MissingDependencyError
    from parquet_sink.write.dependencies import require_sink_dependencies

    require_sink_dependencies()  # the installed one is supported
    monkeypatch.setattr(pyspark, "__version__", "3.4.4")
    with pytest.raises(MissingDependencyError, match=r"supports PySpark 3\.5 and 4\.0-4\.3; this is PySpark 3\.4\.4"):
        require_sink_dependencies()


def test_the_positions_of_an_empty_column_without_chunks() -> None:
    """pyarrow before 26 crashes the process on indices_nonzero of a chunked array of no chunks (an empty table's
    column, as the sink's first catch-up of an empty log made): the floors line runs this on pyarrow 15."""
    assert nonzero(pa.chunked_array([], pa.bool_())) == []
    assert nonzero(pa.chunked_array([[False, True], [], [True]])) == [1, 2]
    assert nonzero(pa.array([True, False, True])) == [0, 2]


def test_the_jar_classes_serve_the_spark_they_are_built_for_and_say_so_elsewhere(spark, caplog) -> None:
    """The JAR's classes are built against Spark 4 (docs/usage.md, *Supported versions*): ``SinkFileWrite`` serves
    4.1 on, ``BatchRowsExec`` 4.0 on; where one is not usable the reason is logged at INFO and the batches are
    written as without it (``df.write``; the other tests of the subset write through it on those lines). Never a
    stream killed by a class that cannot link (Spark 3.5 has no ``org.apache.spark.sql.classic``)."""
    import logging

    from parquet_sink.write.jvm import _SINK_WRITE, _usable, jar_classes
    from parquet_sink.write.spark_versions import pyspark_version

    df = spark.range(1)
    jar = jar_classes(df)
    built_for = pyspark_version() >= (4, 1)
    assert jar is not None
    assert (jar.sink_write is not None, jar.batch_rows is not None) == (built_for, pyspark_version() >= (4, 0))
    with caplog.at_level(logging.INFO, logger="parquet_sink.write.jvm"):
        again = _usable(spark.sparkContext._jvm, _SINK_WRITE, "batches are written with df.write")
    assert (again is not None) == built_for
    said = [r.getMessage() for r in caplog.records if "not usable with this Spark" in r.getMessage()]
    assert bool(said) != built_for, said
    if said:
        assert "batches are written with df.write" in said[0]
