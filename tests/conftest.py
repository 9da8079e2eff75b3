"""Shared fixtures: one real local SparkSession per test session, the test servers, helpers to run streaming
queries.

Layout: the tests mirror the package (``storage/``, ``log/``, ``read/``, ``write/``, ``maintenance/``), with the
crash tests (``crash/``), Spark Connect (``connect/``), the package as users install it (``package/``) and the
helpers (``helpers/``) apart. Every test that uses a SparkSession is marked ``spark`` and every test under
``crash/`` ``crash``, so the fast inner loop is ``pytest -m "not spark and not crash"``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

# The default run draws the same examples on every run: CI judges the change, not the luck of the draw.
# ``--fuzz-minutes N`` draws new ones (the tests that read it also raise their example counts).
hypothesis_settings.register_profile("fixed", derandomize=True, database=None)
hypothesis_settings.register_profile("fuzz", derandomize=False, database=None)
hypothesis_settings.load_profile("fixed")

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", help="run the long random-kill soak")
    parser.addoption(
        "--fuzz-minutes", type=float, default=0.0,
        help="keep the property-based tests drawing new random examples for this many minutes each",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--fuzz-minutes"):
        hypothesis_settings.load_profile("fuzz")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests on the Spark Connect client run last (the client switches pyspark's functions to Connect), all
    on one xdist worker (``./dev.sh test`` runs two: one Connect server, started by the first of them).
    The slow tests (driver kills: a driver of their own each) start first, so that the two workers end
    together."""

    def on_connect(item: pytest.Item) -> bool:
        return "connect_spark" in getattr(item, "fixturenames", ())

    for item in items:
        if on_connect(item):
            item.add_marker(pytest.mark.xdist_group("connect"))
            item.add_marker(pytest.mark.connect)
        if {"spark", "connect_spark"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.spark)
        if Path(str(item.fspath)).parent.name == "crash":
            item.add_marker(pytest.mark.crash)
        if item.nodeid.startswith(COMPAT_TESTS):
            item.add_marker(pytest.mark.compat)
        if item.nodeid.startswith(FLOOR_TESTS):
            item.add_marker(pytest.mark.floors)
    items.sort(key=lambda item: (on_connect(item), Path(item.nodeid.split("::")[0]).stem not in SLOW_MODULES))


# The compatibility subset (``-m compat``): what differs between the Spark and pyarrow versions the package declares,
# run by .ci/run on each older Spark line and on the lowest declared versions (dev.sh compat). The sink on both
# writer paths and every backend, replays and restarts, a driver killed in the commit window and restarted (Spark's
# writer path: the one that differs by Spark version), Spark's own sink and reader against ours both ways (three of
# the differential's regression streams; the others and its drawn streams run on the newest only, for the matrix's time), a log
# compacted by us and read by Spark (and the reverse), the schema checks that call PySpark's Arrow conversions,
# Spark Connect (4.x: pyspark carries its server), and the log/read core on pyarrow.
COMPAT_TESTS = (
    "tests/write/test_sink.py::test_partitioned_stream_spark_and_reader_agree",
    "tests/write/test_sink.py::test_sink_on_every_backend",
    "tests/write/test_sink.py::test_replayed_batch_is_skipped",
    "tests/write/test_sink.py::test_fresh_checkpoint_on_old_output_is_refused_then_appends",
    "tests/write/test_sink.py::test_stateful_update_mode_counts_and_sums",
    "tests/write/test_sink.py::test_schema_change_refused_before_commit_and_evolution_allowed",
    "tests/write/test_sink.py::test_max_records_per_file_and_codec",
    "tests/write/test_sink.py::test_restarted_sink_accepts_its_own_timestamp_files",
    "tests/write/test_sink.py::test_timestamp_and_date_columns_round_trip",
    "tests/write/test_sink_checks.py::test_a_calendar_interval_is_refused_with_a_typed_error",
    "tests/write/test_sink_checks.py::test_intervals_are_written_as_sparks_sink_writes_them_across_a_restart",
    "tests/write/test_sink_checks.py::test_a_failure_inside_the_schema_conversion_is_not_the_users",
    "tests/write/test_empty_output.py::test_all_empty_batches_read_as_spark_sinks_output",
    # three of the differential's regression streams, one per thing a Spark line may change: Spark's partition
    # naming (Spark writer), a dotted column name (Arrow path), INT96 timestamps far from the epoch (Spark writer)
    "tests/write/test_differential.py::test_regression_streams[underscore-partition-spark]",
    "tests/write/test_differential.py::test_regression_streams[dotted-name-arrow]",
    "tests/write/test_differential.py::test_regression_streams[far-int96-timestamps-spark]",
    "tests/write/test_write_batch.py::test_write_batch_layout_matches_the_sink_and_spark_reads_it",
    "tests/write/test_write_batch.py::test_pandas_polars_and_record_batches",
    "tests/write/test_write_batch.py::test_sink_and_write_batch_share_one_record_format",
    "tests/write/test_write_batch.py::test_a_chain_downstream_of_an_optimized_source_gets_every_row_once",
    "tests/crash/test_crash.py::test_driver_killed_at_failpoint[spark-commit_publish]",
    "tests/read/test_reader.py::test_reads_sparks_own_sink_exactly_like_spark",
    "tests/read/test_reader.py::test_spark_reader_takes_committed_paths_literally",
    "tests/read/test_reader.py::test_as_of_and_batches_before_and_after_compaction_with_cleanup",
    "tests/read/test_reader.py::test_reader_loop_during_commits_compactions_cleanups",
    "tests/log/test_metadata_log.py::test_reads_spark_written_log_exactly",
    "tests/log/test_metadata_log.py::test_spark_reads_log_we_wrote_and_ignores_unlisted_files",
    "tests/log/test_log_sidecar.py",
    "tests/log/test_writer_intervals.py::test_spark_reads_what_writers_with_other_intervals_wrote",
    "tests/package/test_versions.py",
    "tests/connect/test_connect.py::test_connect_fresh_checkpoint_on_old_output_refused_then_appended",
)

# Added on the floors line (the lowest declared pyarrow, deltalake, pyiceberg, adlfs, s3fs, fsspec, numpy, pandas): the tests of
# what calls those libraries' APIs most, without Spark (the floors found here: pyarrow 25, deltalake 1.6.3, adlfs 2026.2).
FLOOR_TESTS = (
    "tests/delta/",
    "tests/iceberg/",
    "tests/maintenance/test_optimize",
    "tests/log/test_log_sidecar.py",
    "tests/log/test_compaction_golden.py",
    "tests/read/test_filtered_reads.py",
    "tests/storage/test_object_stores.py",
)


SLOW_MODULES = {
    "test_crash", "test_backend_crash", "test_chain_crash", "test_writer_bounds", "test_relative_path", "test_optimize_crash",
    "test_jvm_classes",
}


@pytest.fixture(scope="session", autouse=True)
def spark_class_archive(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The Spark driver class archive of this run (``tests/helpers/jvm_archive.py``): when the run has tests that
    use Spark or start drivers of their own, the first xdist worker here starts its dump in the background, and
    every worker names it in the environment, for the drivers started once it exists. A run of the fast inner
    loop (``-m "not spark and not crash"``) makes none."""
    from tests.helpers import jvm_archive

    if os.environ.get(jvm_archive.ENV) or not any(
        item.get_closest_marker("spark") or item.get_closest_marker("crash") for item in request.session.items
    ):
        yield
        return
    # The run's root temp directory, shared by the xdist workers (each has its own basetemp below it).
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    archive = root / "spark-classes.jsa"
    os.environ[jvm_archive.ENV] = str(archive)
    dump = None
    try:
        os.close(os.open(root / "spark-classes.lock", os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        pass  # another worker makes it
    else:
        workdir = root / "spark-classes"
        workdir.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("PARQUET_SINK_") and k != jvm_archive.ENV}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH")]))
        with open(workdir / "dump.log", "wb") as log:
            dump = subprocess.Popen(
                [sys.executable, "-m", "tests.helpers.jvm_archive", str(archive), str(workdir)],
                cwd=Path(__file__).resolve().parents[1], env=env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )
    yield
    if dump is not None:  # a short run may end before the dump does: it is of no use any more
        try:
            os.killpg(dump.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        dump.wait()


@pytest.fixture(scope="session")
def fuzz_minutes(request: pytest.FixtureRequest) -> float:
    """``--fuzz-minutes``: 0 for the default run (a fixed seed, few examples)."""
    return request.config.getoption("--fuzz-minutes")


@pytest.fixture(scope="session")
def spark() -> Iterator["pyspark.sql.SparkSession"]:  # noqa: F821
    from tests.helpers.spark_util import make_session

    session = make_session()
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect_spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator["pyspark.sql.SparkSession"]:  # noqa: F821
    """A Spark Connect session on pyspark's bundled Connect server, which runs in a child process of its
    own (a classic session cannot share a process with a local Connect server; see tests/helpers/connect_util.py).
    Started once, when the first Connect test runs (they run last); the server and its workers are
    killed at the end."""
    from tests.helpers.connect_util import connect_client

    root = Path(__file__).resolve().parents[1]
    workdir = tmp_path_factory.mktemp("connect-server")
    port_file = workdir / "port"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    with open(workdir / "server.log", "wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.connect_util", str(port_file)],
            cwd=root, env=env, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 180
        while not port_file.exists():
            if server.poll() is not None or time.monotonic() > deadline:
                tail = (workdir / "server.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"the Spark Connect server did not start; log tail:\n{tail}")
            time.sleep(0.2)
        session = connect_client(int(port_file.read_text()))
        yield session
        session.stop()
    finally:
        os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
        server.stdin.close()
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(server.pid, signal.SIGKILL)  # Python workers the driver may leave behind
        except ProcessLookupError:
            pass
        server.wait()


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
    from tests.helpers.servers import azurite

    with azurite(tmp_path_factory.mktemp("azurite")) as server:
        yield server


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory):
    from tests.helpers.servers import moto_s3

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
