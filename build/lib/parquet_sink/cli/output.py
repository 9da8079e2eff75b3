"""How the command line prints: human tables and sizes, JSON for scripts, a progress counter on a terminal."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any, TextIO, TypeVar

T = TypeVar("T")


def progress(items: Sequence[T], label: str, stream: TextIO | None = None) -> Iterator[T]:
    """Yield ``items`` while drawing a ``label 12/345`` counter on ``stream`` (stderr) if it is a terminal;
    silent otherwise, so scripts and pipes see nothing.

    Example::

        >>> for f in progress(files, "checking"):
        ...     check(f)
    """
    stream = stream or sys.stderr
    if not items or not stream.isatty():
        yield from items
        return
    total, drawn = len(items), 0.0
    try:
        for done, item in enumerate(items, start=1):
            if time.monotonic() - drawn >= 0.1 or done == total:
                stream.write(f"\r{label} {done}/{total}")
                stream.flush()
                drawn = time.monotonic()
            yield item
    finally:
        stream.write("\r" + " " * (len(label) + 2 * len(str(total)) + 2) + "\r")
        stream.flush()


def format_size(n: int | None) -> str:
    if n is None:
        return "-"
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    value, unit = float(n), 0
    while value >= 1024 and unit < len(units) - 1:
        value, unit = value / 1024, unit + 1
    return f"{n} B" if unit == 0 else f"{value:.1f} {units[unit]}"


def format_time(ms: int | None) -> str:
    if ms is None:
        return "-"
    return _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [list(headers)] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    print(json.dumps(data, indent=2) if args.json else text)
