#!/usr/bin/env bash
# One entry point for a fresh machine: installs everything the project needs, then runs it.
#   ./dev.sh demo    install, then run the crash-and-restart demo job
#   ./dev.sh test    install, then run the test suite (extra args go to pytest)
#   ./dev.sh bench   install, then run the benchmarks (writes benchmarks/RESULTS.md)
set -euo pipefail
cd "$(dirname "$0")"

setup() {
    if [ ! -x .venv/bin/python ]; then
        python3 -m venv .venv
    fi
    .venv/bin/python -m pip install --quiet --upgrade pip
    # the published extras, plus the repository's own test and benchmark needs (PEP 735 groups)
    .venv/bin/python -m pip install --quiet -e ".[spark,azure,s3,connect,delta]" --group dev
    if [ ! -x node_modules/.bin/azurite-blob ]; then
        npm ci --no-audit --no-fund --silent
    fi
    export PYSPARK_PYTHON="$PWD/.venv/bin/python"
}

cmd="${1:-}"
shift || true
case "$cmd" in
    demo) setup; exec .venv/bin/python -m examples.demo "$@" ;;
    # two pytest workers (2 cores): each has its own SparkSession; Connect tests share one worker
    test) setup; exec .venv/bin/python -m pytest -n "${TEST_WORKERS:-2}" --dist loadgroup "$@" ;;
    bench) setup; exec .venv/bin/python -m benchmarks.run "$@" ;;
    *) echo "usage: ./dev.sh demo|test|bench [args]" >&2; exit 2 ;;
esac
