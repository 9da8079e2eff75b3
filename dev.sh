#!/usr/bin/env bash
# One entry point for a fresh machine: installs everything the project needs, then runs it.
#   ./dev.sh demo    install, then run the crash-and-restart demo job
#   ./dev.sh test    install, then run the test suite (extra args go to pytest)
#   ./dev.sh compat  [line ...]  the compatibility subset on each line of the version matrix (.ci/matrix), each in
#                    a venv of its own under $PARQUET_SINK_VENVS (default ~/.cache/parquet-sink/venvs: kept between
#                    runs and clones where the machine keeps them; built when missing or when its line or
#                    pyproject.toml changed); the package's wheels and the logs under .venvs/
#   ./dev.sh bench   install, then run the benchmarks (writes benchmarks/RESULTS.md)
#   ./dev.sh setup   install only
set -euo pipefail
cd "$(dirname "$0")"
VENVS="${PARQUET_SINK_VENVS:-$HOME/.cache/parquet-sink/venvs}"

setup() {
    if [ ! -x .venv/bin/python ]; then
        python3 -m venv .venv
    fi
    .venv/bin/python -m pip install --quiet --upgrade pip
    # the published extras, plus the repository's own test and benchmark needs (PEP 735 groups)
    # byte-compiled on both cores after the install (pip compiles one file at a time: ~10 s more of the suite's
    # measured time; this machine sets PYTHONDONTWRITEBYTECODE, so nothing may be left to compile at import)
    .venv/bin/python -m pip install --quiet --no-compile -e ".[spark,azure,s3,connect,delta,iceberg]" --group dev
    .venv/bin/python -m compileall -q -j 0 "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" >/dev/null || true
    node_modules
    duckdb_iceberg
    export PYSPARK_PYTHON="$PWD/.venv/bin/python"
}

# Prints the path of a directory kept where the matrix's venvs are ($VENVS), named NAME and the hash of FILES, built
# first when missing by the function BUILD, which fills the temporary directory it is given; that directory is renamed
# into place only when BUILD succeeds, so two clones building at once never share a half-built one (the second
# rename loses: the first one's is the same). A clean clone (CI's) reuses it. Fails, printing nothing, when BUILD did.
#   kept_dir NAME BUILD FILES...
kept_dir() {
    local name="$1" build="$2" kept building
    shift 2
    kept="$VENVS/$name-$(cat "$@" | sha256sum | cut -c1-16)"
    if [ ! -d "$kept" ]; then
        mkdir -p "$VENVS"
        building="$(mktemp -d "$VENVS/.$name.XXXXXX")"
        if "$build" "$building" >&2; then
            mv -T "$building" "$kept" 2>/dev/null || true
        fi
        rm -rf "$building"
    fi
    [ -d "$kept" ] && echo "$kept"
}

# Points the link LINK at TARGET (a directory an earlier setup built in place at LINK is removed).
link_to() {
    [ -L "$2" ] || rm -rf "$2"
    ln -sfn "$1" "$2"
}

# duckdb with its iceberg extension, pinned in .ci/duckdb-iceberg.txt (the registry's extension packages are of
# duckdb 1.4.4 only), in a venv of its own: the duckdb oracle of tests/iceberg/test_duckdb.py, which runs
# .venvs/duckdb-iceberg, a link to the venv kept_dir keeps (~30 s a build under load). A failed install leaves no
# venv (the test then fails on CI, skips elsewhere, naming this step).
build_duckdb_iceberg() {
    python3 -m venv "$1" && "$1/bin/python" -m pip install --quiet -r .ci/duckdb-iceberg.txt
}

duckdb_iceberg() {
    local kept
    kept="$(kept_dir duckdb-iceberg build_duckdb_iceberg .ci/duckdb-iceberg.txt)" \
        || { echo "setup: the duckdb-iceberg venv did not build" >&2; return 0; }
    mkdir -p .venvs
    link_to "$kept" .venvs/duckdb-iceberg
}

# Azurite (the Azure emulator the tests start) from package-lock.json: node_modules is a link into the copy kept_dir
# keeps (a clean clone runs no `npm ci`: ~20 s); one an earlier setup installed in place is kept.
build_node_modules() {
    cp package.json package-lock.json "$1/" && (cd "$1" && npm ci --no-audit --no-fund --silent)
}

node_modules() {
    local kept
    if [ ! -L node_modules ] && [ -x node_modules/.bin/azurite-blob ]; then
        return 0
    fi
    kept="$(kept_dir node_modules build_node_modules package.json package-lock.json)" \
        || { echo "setup: npm ci of Azurite failed" >&2; return 1; }
    link_to "$kept/node_modules" node_modules
}

# The matrix's lines: "name|python|extras|marks|requirements", comments and blanks dropped.
matrix_lines() {
    grep -v '^\s*#' .ci/matrix | grep -v '^\s*$' | sed 's/\s*|\s*/|/g; s/^\s*//; s/\s*$//'
}

python_of() {  # an interpreter of Python $1 that runs (pyenv's, else on PATH: a pyenv shim may name one it lacks)
    local candidate
    for candidate in $(ls -d "$HOME"/.pyenv/versions/"$1".*/bin/python 2>/dev/null | sort -rV) "$(command -v "python$1")"; do
        if [ -n "$candidate" ] && "$candidate" -c 'import venv' >/dev/null 2>&1; then
            echo "$candidate"; return 0
        fi
    done
}

# The package's wheel for Python $2 (line $1), built from a copy of the checkout (setuptools builds in the source tree: a copy
# keeps parallel builds, and the suite running meanwhile, apart), as a user installs it: not editable.
compat_wheel() {
    local python="$2" interpreter copy wheels=".venvs/wheels/$1"
    local built
    built="$(ls "$PWD/$wheels"/parquet_sink-*.whl 2>/dev/null | head -1)"
    if [ -n "$built" ] && [ -z "$(find src setup.py pyproject.toml MANIFEST.in -newer "$built" -not -path '*/__pycache__*' \
            -not -path '*.egg-info*' -not -name '*.so' -print -quit)" ]; then
        echo "$built"; return 0  # nothing it is built from changed since
    fi
    interpreter="$(python_of "$python")"
    [ -n "$interpreter" ] || { echo "compat: no Python $python on this machine" >&2; return 1; }
    copy="$(mktemp -d)"
    tar --exclude=./.git --exclude=./.venv --exclude=./.venvs --exclude=./node_modules --exclude=./build \
        --exclude='*.egg-info' --exclude='*.so' --exclude=__pycache__ -cf - . | tar -xf - -C "$copy"
    rm -rf "$wheels" && mkdir -p "$wheels"
    "$interpreter" -m pip wheel --quiet --no-deps -w "$wheels" "$copy"
    rm -rf "$copy"
    ls "$PWD/$wheels"/parquet_sink-*.whl
}

# Builds (or keeps) the venv of one matrix line: the tests' needs (the PEP 735 group), the line's own versions, and
# the package's extras' dependencies (kept while the line and pyproject.toml are unchanged); then the package itself
# from a fresh wheel of the checkout, every time.
compat_venv() {
    local name="$1" python="$2" extras="$3" requirements="$4"
    local venv="$VENVS/$name" key wheel
    wheel="$(compat_wheel "$name" "$python")" || return 1
    key="$(printf '%s|%s|%s|%s\n' "$name" "$python" "$extras" "$requirements" | cat - pyproject.toml | sha256sum | cut -c1-16)"
    if [ ! -f "$venv/.key" ] || [ "$(cat "$venv/.key")" != "$key" ]; then
        rm -rf "$venv"
        "$(python_of "$python")" -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --upgrade pip
        # shellcheck disable=SC2086 # the requirements are words
        "$venv/bin/python" -m pip install --quiet "$wheel[$extras]" --group tests $requirements
        echo "$key" > "$venv/.key"
    fi
    "$venv/bin/python" -m pip install --quiet --no-deps --force-reinstall "$wheel"
}

# Builds every line's venv, in parallel (downloads and unpacking; each line's wheel and venv are its own).
compat_venvs() {
    local pids=() name python extras marks requirements
    while IFS='|' read -r name python extras marks requirements; do
        compat_venv "$name" "$python" "$extras" "$requirements" > ".venvs/$name.log" 2>&1 &
        pids+=($!)
    done < <(matrix_lines)
    local status=0
    for pid in "${pids[@]}"; do wait "$pid" || status=1; done
    return "$status"
}

compat() {
    mkdir -p .venvs "$VENVS"
    node_modules
    local status=0 name python extras marks requirements
    while IFS='|' read -r name python extras marks requirements; do
        if [ "$#" -gt 0 ] && [[ " $* " != *" $name "* ]]; then continue; fi
        local started=$SECONDS
        if ! compat_venv "$name" "$python" "$extras" "$requirements" >> ".venvs/$name.log" 2>&1; then
            echo "compat $name: the venv did not build (.venvs/$name.log)" >&2; status=1; continue
        fi
        local venv="$VENVS/$name" versions
        versions="$("$venv/bin/python" -c 'import sys, pyspark, pyarrow; print(f"Python {sys.version.split()[0]}, pyspark {pyspark.__version__}, pyarrow {pyarrow.__version__}")')"
        echo "== compat $name: $versions"
        # the installed package, not the checkout's src/ (tests import it as users do); no Spark class archive (its
        # dump costs a driver's run, which a subset this short never earns back: tests/helpers/jvm_archive.py)
        if PYSPARK_PYTHON="$venv/bin/python" TESTS_SPARK_CLASS_ARCHIVE=none "$venv/bin/python" -m pytest -n "${TEST_WORKERS:-2}" --dist loadgroup \
            -q -p no:cacheprovider --durations=10 -m "$marks" </dev/null; then
            echo "== compat $name: passed in $((SECONDS - started)) s"
        else
            echo "== compat $name: FAILED in $((SECONDS - started)) s" >&2; status=1
        fi
    done < <(matrix_lines)
    return "$status"
}

cmd="${1:-}"
shift || true
case "$cmd" in
    demo) setup; exec .venv/bin/python -m examples.demo "$@" ;;
    # two pytest workers (2 cores): each has its own SparkSession; Connect tests share one worker
    test) setup; exec .venv/bin/python -m pytest -n "${TEST_WORKERS:-2}" --dist loadgroup "$@" ;;
    setup) setup ;;
    compat) compat "$@" ;;
    compat-venvs) mkdir -p .venvs "$VENVS"; compat_venvs ;;
    bench) setup; exec .venv/bin/python -m benchmarks.run "$@" ;;
    *) echo "usage: ./dev.sh demo|test|setup|compat [line ...]|compat-venvs|bench [args]" >&2; exit 2 ;;
esac
