"""The command line run in the test's own process: ``parquet_sink.cli.main.main`` with stdout and stderr captured,
returning what ``subprocess.run`` would (exit code, both streams as text). A command costs no interpreter start and
no imports (seconds each on a loaded machine); the tests about the process itself (the installed console script, a
terminal's progress counter, ``python -m parquet_sink``) keep real subprocesses."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
from collections.abc import Iterator, Mapping


@contextlib.contextmanager
def _environment(env: Mapping[str, str | None]) -> Iterator[None]:
    """``os.environ`` with ``env`` set (None: unset) inside, as it was outside."""
    saved = {name: os.environ.get(name) for name in env}
    try:
        for name, value in env.items():
            os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)
        yield
    finally:
        for name, value in saved.items():
            os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)


@contextlib.contextmanager
def _fresh_logging() -> Iterator[None]:
    """The root logger without handlers, as in a new process, so ``main``'s ``logging.basicConfig`` writes its
    warnings (and ``-v``'s debug lines) to the captured stderr; pytest's handlers and the levels come back after."""
    root, package = logging.getLogger(), logging.getLogger("parquet_sink")
    handlers, levels = root.handlers[:], (root.level, package.level)
    root.handlers.clear()
    try:
        yield
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers[:] = handlers
        root.setLevel(levels[0])
        package.setLevel(levels[1])


def run_cli(*args: object, env: Mapping[str, str | None] | None = None) -> subprocess.CompletedProcess[str]:
    """``parquet-sink ARGS`` in this process, with the environment variables ``env`` (None: unset) for its
    duration: the exit code ``main`` returns (or argparse exits with) and what it wrote to stdout and stderr."""
    from parquet_sink.cli.main import main

    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    with _environment(env or {}), _fresh_logging(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's --help and the like
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return subprocess.CompletedProcess(["parquet-sink", *argv], code, out.getvalue(), err.getvalue())
