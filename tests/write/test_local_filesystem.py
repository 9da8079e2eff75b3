"""The Spark writer path stages on local disk with Hadoop's raw local filesystem whose permissions are set through
``java.nio`` (``jvm/src/parquetsink/hadoop/NioLocalFileSystem.java``, shipped as
``src/parquet_sink/write/parquet-sink-hadoop.jar``): without Hadoop's native library the raw filesystem runs a
``chmod`` process for every file and directory it creates (~7 ms each). Proven on a real driver whose ``chmod`` logs
its calls: none for the sink's files with the JAR, one per data file without it, the same file modes either way
(Hadoop's umask applied), every row committed once. The JAR must be what its source compiles to."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

import pyspark

from parquet_sink import committed_files, read_committed
from parquet_sink.write import manifest_write

ROOT = Path(__file__).resolve().parents[2]
RAW = "org.apache.hadoop.fs.RawLocalFileSystem"
NIO = "parquetsink.hadoop.NioLocalFileSystem"


def test_jar_holds_what_its_source_compiles_to(tmp_path: Path) -> None:
    """``jvm/build.sh`` was run after the last change of ``jvm/src`` (the same javac options)."""
    jars = Path(pyspark.__file__).parent / "jars"
    sources = sorted(str(p) for p in (ROOT / "jvm" / "src").rglob("*.java"))
    classes = tmp_path / "classes"
    subprocess.run(
        ["javac", "--release", "8", "-nowarn", "-Xlint:-options", "-cp", f"{jars}/*", "-d", str(classes), *sources],
        check=True, capture_output=True, timeout=120,
    )
    compiled = {str(p.relative_to(classes)): p.read_bytes() for p in classes.rglob("*.class")}
    with zipfile.ZipFile(manifest_write._JAR) as jar:
        shipped = {name: jar.read(name) for name in jar.namelist() if name.endswith(".class")}
    assert compiled and shipped.keys() == compiled.keys(), (sorted(shipped), sorted(compiled))
    stale = [name for name in compiled if compiled[name] != shipped[name]]
    assert not stale, f"{stale}: run jvm/build.sh"


def test_spark_path_creates_files_without_chmod_processes(tmp_path: Path) -> None:
    source = tmp_path / "in"
    source.mkdir()
    values = ["a", "b", "c"]
    for batch in range(2):
        rows = [{"id": batch * 100 + i, "k": values[i % 3]} for i in range(30)]
        (source / f"{batch}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.utime(source / f"{batch}.json", (1_000 + batch, 1_000 + batch))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "chmod.log"
    (bin_dir / "chmod").write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec /bin/chmod "$@"\n')
    (bin_dir / "chmod").chmod(0o755)
    runs = {name: {"out": str(tmp_path / name), "checkpoint": str(tmp_path / f"ckpt-{name}"), "jar": jar}
            for name, jar in (("without_jar", False), ("with_jar", True))}
    result = tmp_path / "result.json"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    config = {"input": str(source), "runs": runs, "result": str(result)}
    child = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "helpers" / "chmod_child.py"), json.dumps(config)],
        cwd=str(ROOT), env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600,
    )
    used = json.loads(result.read_text()) if result.exists() else {}
    assert child.returncode == 0 and used == {"without_jar": RAW, "with_jar": NIO}, (
        f"{used}\n{child.stdout[-3000:]}{child.stderr[-6000:]}"
    )
    calls = log.read_text().splitlines() if log.exists() else []
    for name, run in runs.items():
        table = read_committed(run["out"])
        assert Counter(table.column("id").to_pylist()) == Counter(b * 100 + i for b in range(2) for i in range(30))
        files = committed_files(run["out"])
        assert len(files) == 6  # 2 batches x 3 partition values, one task each
        # Hadoop's umask (077) applied to every data file, with or without the JAR
        assert {stat.S_IMODE(os.stat(f.path).st_mode) for f in files} == {0o600}, name
        mine = [c for c in calls if run["out"] + os.sep in c + os.sep or c.endswith(run["out"])]
        if run["jar"]:
            assert mine == [], mine
        else:  # the raw filesystem: a chmod process for each data file it created
            assert len([c for c in mine if c.endswith(".parquet")]) >= len(files), mine
