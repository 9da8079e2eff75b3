"""Shared fixtures: one real local SparkSession per test session, helpers to run streaming queries."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", help="run the long random-kill soak")


@pytest.fixture(scope="session")
def spark() -> Iterator["pyspark.sql.SparkSession"]:  # noqa: F821
    from tests.spark_util import make_session

    session = make_session()
    yield session
    session.stop()


@pytest.fixture
def out(tmp_path: Path) -> str:
    return str(tmp_path / "out")
