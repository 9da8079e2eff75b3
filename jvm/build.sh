#!/usr/bin/env bash
# Builds src/parquet_sink/write/parquet-sink-jvm.jar from jvm/src (javac, Java 8 bytecode, against the jars of the
# venv's pyspark: Hadoop's client API, Spark 4 / Scala 2.13). The JAR is committed: users need no JDK.
# tests/write/test_jvm_classes.py fails when the JAR's classes are not what this source compiles to.
#   jvm/build.sh [python]      (default: .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
python="${1:-.venv/bin/python}"
jars="$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
classes="$(mktemp -d)"
trap 'rm -rf "$classes"' EXIT
javac --release 8 -nowarn -Xlint:-options -cp "$jars/*" -d "$classes" $(find jvm/src -name '*.java' | sort)
# fixed entry times and order: the same classes give the same JAR
find "$classes" -exec touch -d '1980-01-02 00:00:00' {} +
(cd "$classes" && find . -type f -name '*.class' | sort | sed 's|^\./||' > "$classes.list" && jar --create --no-manifest --file "$OLDPWD/src/parquet_sink/write/parquet-sink-jvm.jar" "@$classes.list")
rm -f "$classes.list"
echo "built src/parquet_sink/write/parquet-sink-jvm.jar"
