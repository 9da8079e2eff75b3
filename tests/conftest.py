"""Shared fixtures: one real local SparkSession per test session, helpers to run streaming queries."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


@dataclass(frozen=True)
class Backend:
    """Where a test's output lives: an fsspec URL plus the storage options to reach it."""

    name: str
    url: str
    storage_options: dict[str, Any]
    secret: str | None = None  # a credential that must never appear in logs or errors


@pytest.fixture(scope="session")
def azurite_server(tmp_path_factory):
    from tests.servers import azurite

    with azurite(tmp_path_factory.mktemp("azurite")) as server:
        yield server


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory):
    from tests.servers import moto_s3

    with moto_s3(tmp_path_factory.mktemp("moto")) as server:
        yield server


def make_backend(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """A fresh, empty output location on the named backend (servers start once per session)."""
    unique = uuid.uuid4().hex[:12]
    if name == "local":
        return Backend(name, str(tmp_path / "out"), {})
    if name == "azurite":
        server = request.getfixturevalue("azurite_server")
        server.make_container(f"c{unique}")
        return Backend(name, f"abfs://c{unique}/out", dict(server.storage_options), server.account_key)
    server = request.getfixturevalue("moto_server")
    server.make_bucket(f"b{unique}")
    return Backend(name, f"s3://b{unique}/out", dict(server.storage_options), server.secret_key)


BACKENDS = ["local", "azurite", "moto"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return make_backend(request.param, request, tmp_path)
