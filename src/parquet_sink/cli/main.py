"""The ``parquet-sink`` command line: see, check and clean a streaming file sink's output directory.
This module parses arguments and imports nothing heavy; :mod:`.commands` runs them.

Works on any fsspec URL; storage options (credentials) come from the ``PARQUET_SINK_STORAGE_OPTIONS``
environment variable (JSON), ``--storage-options-file PATH`` (JSON) and ``--storage-option key=value``
(repeatable), later ones winning key by key, and are never printed. Commands:

* ``ls PATH``: committed batches (files, rows with ``--rows``, bytes, commit time, query or app id and its
  batch id or version) and the log's compaction state.
* ``show PATH BATCH``: the log entries of one batch.
* ``verify PATH [--catalog-uri URI --catalog-prop KEY=VALUE --table NS.NAME]``: every committed file exists with
  its logged size, the log chain is intact, and the Delta log and Iceberg tables kept with it are in step.
* ``vacuum PATH [--older-than 7d] [--allow-short-retention] [--dry-run] [--include-files-before-log] [--catalog-uri URI
  --catalog-prop KEY=VALUE --table NS.NAME]``: delete Parquet data files no
  committed batch references (files older than the log's first commit only when asked).
* ``optimize PATH [--target-file-size 128MB] [--partition K=V] [--sort-by COL | --z-order COL] [--dry-run]``: rewrite the committed
  small files of each partition into files near the target size, swapped in with one commit every reader sees
  atomically (safe while the stream runs); progress on a terminal, a summary of files and bytes before and after.
* ``delta-sync PATH``: create or bring up to date the output's Delta Lake log (``_delta_log``), so every
  Delta reader reads exactly the committed files (needs ``pip install "parquet-sink[delta]"``).
* ``iceberg-sync PATH [--catalog-uri URI] [--catalog-prop KEY=VALUE ...] [--table NS.NAME] [--recreate]``: create
  or bring up to date the output's Iceberg table, in a catalog or (without one) its metadata alone with the output,
  so every Iceberg reader reads exactly the committed files (needs ``pip install "parquet-sink[iceberg]"``);
  ``--recreate`` makes it again from the log.
* ``doctor PATH --checkpoint CKPT``: what restarting the query from ``CKPT`` will do to the output;
  ``doctor PATH --app-id X --version V``: what rerunning ``write_batch`` of app X at version V will do; both say
  the command that brings a Delta log or Iceberg table kept with it in step (``--catalog-uri ... --table``).

Every command takes ``--json`` for scripts: its result is one JSON object on stdout with ``ok``; an error too
(``{"ok": false, "error": "...", "type": "NotAnOutputError"}``), instead of one line on stderr. One exit code
rule for every command: 0 ok; 1 problems found (``verify``, ``doctor``) or the operation failed (not an output,
an unreadable log, a storage error); 2 a usage or input error (an unknown option, a missing argument, a value
out of range: a ``ParameterError``), nothing done; 130 interrupted (Ctrl-C), nothing half-committed.

Example::

    $ parquet-sink ls s3://bucket/events --storage-option anon=false --json
    $ parquet-sink vacuum /data/events --older-than 7d --dry-run
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from .. import __version__
from ..errors import ParameterError, ParquetSinkError, caller_names_errors
from . import PROG
from .options import OPTIONS_ENV, OPTIONS_HELP, parse_storage_option, read_options_file

# Options whose value has a unit: a negative one ("-1d") is the value, which argparse would take for an option
# (and say "expected one argument"); joined to its option it gets the option's own error ("not a duration").
_UNIT_OPTIONS = ("--older-than", "--target-file-size")

logger = logging.getLogger(__name__)

INTERRUPTED = 130  # the exit code of a command cut short by Ctrl-C (SIGINT), as shells report it: 128 + 2


def _catalog_property(text: str) -> tuple[str, str]:
    """``key=value`` -> (key, value), both strings as pyiceberg takes catalog properties; errors never echo
    the value (it may be a secret)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError("expected key=value")
    return key.strip(), value


def _duration(flag: str) -> Callable[[str], str]:
    """An argparse type for a duration option named ``flag``: checked by the rule every entry point applies (a
    floor, as vacuum's with ``--allow-short-retention``, is checked where the other options are known)."""

    def parse(text: str) -> str:
        from ..log.compaction import parse_duration_ms  # pyarrow: only when a command uses a duration

        try:
            parse_duration_ms(text, flag)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc).replace(", or a datetime.timedelta", "")) from exc
        return text.strip()

    return parse


def _interval(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"a positive integer (Spark's default is 10), got {text!r}")
    return value


class UsageError(Exception):
    """A command line argparse refuses: its message, the command (``prog``) and its usage line."""

    def __init__(self, message: str, prog: str, usage: str) -> None:
        super().__init__(message)
        self.prog, self.usage = prog, usage


class _Parser(argparse.ArgumentParser):
    """argparse's parser, raising :class:`UsageError` instead of printing and exiting, so that :func:`main`
    reports it as every other error (JSON with ``--json``), with exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.prog, self.format_usage())


def build_parser() -> argparse.ArgumentParser:
    """The ``parquet-sink`` argument parser (one sub-command per operation).

    Example::

        >>> build_parser().parse_args(["ls", "/data/events", "--json"]).json
        True
    """
    common = _Parser(add_help=False)
    common.add_argument(
        "--storage-option",
        metavar="KEY=VALUE",
        type=parse_storage_option,
        action="append",
        default=[],
        help="fsspec storage option, repeatable; 'true'/'false', integers and JSON values ({...} or [...]) "
        "are converted. Not for secrets: the command line is visible to other users and kept in shell "
        f"history; use --storage-options-file or {OPTIONS_ENV}",
    )
    common.add_argument(
        "--storage-options-file",
        metavar="PATH",
        type=read_options_file,
        help='storage options as a JSON object in a file (e.g. {"account_name": "acct", "account_key": "..."}); '
        "keep it readable by you only",
    )
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("-v", "--verbose", action="store_true", help="log progress details to stderr")

    parser = _Parser(
        prog=PROG,
        description="See, check and clean the output directory of an exactly-once (or Spark) streaming file sink.",
        epilog=OPTIONS_HELP,
    )
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str, reads_interval: bool = False) -> argparse.ArgumentParser:
        """A sub-command; ``reads_interval``: it reads the log with ``--compact-interval`` (the others infer it)."""
        sub = commands.add_parser(name, parents=[common], help=summary, description=summary, epilog=OPTIONS_HELP)
        sub.add_argument("path", metavar="PATH", help="output directory (local path or fsspec URL)")
        if reads_interval:
            sub.add_argument(
                "--compact-interval",
                metavar="N",
                type=_interval,
                help="the writer's log compaction interval, for an output whose log cannot tell it (normally inferred "
                "from the log's files)",
            )
        # run: a function of .commands, imported when the command runs; command_parser: its options' spellings
        sub.set_defaults(run=f"_cmd_{name}", command_parser=sub)
        return sub

    def iceberg_catalog(sub: argparse.ArgumentParser, why: str) -> None:
        """The Iceberg catalog table a command reaches, as ``iceberg-sync`` names it (``why``: what for)."""
        sub.add_argument(
            "--catalog-uri", metavar="URI", dest="catalog",  # sync_iceberg's parameter (see _spelling)
            help="the pyiceberg catalog's uri property (sqlite:///catalog.db, postgresql://..., http://rest-catalog; "
            f"pyiceberg infers the catalog's type from it){why}",
        )
        sub.add_argument(
            "--catalog-prop", metavar="KEY=VALUE", type=_catalog_property, action="append", default=[],
            help="a pyiceberg catalog property, repeatable (type=rest, warehouse=..., name=NAME to read the catalog "
            "NAME of ~/.pyiceberg.yaml or PYICEBERG_CATALOG__NAME__* variables: the way to pass credentials)",
        )
        sub.add_argument("--table", metavar="NS.NAME", help="the table's identifier in the catalog (with a catalog)")

    def time_zone(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--time-zone", default="UTC", metavar="ZONE",
            help="the zone timestamp partition directories were written in (the writer's spark.sql.session.timeZone; "
            "default UTC)",
        )

    def log_settings(sub: argparse.ArgumentParser) -> None:
        """The output's log settings as the writers take them (``retention=`` ...): None applies the recorded
        ones, another value than those is refused (OutputSettingsError)."""
        sub.add_argument(
            "--retention", metavar="DURATION", type=_duration("--retention"),
            help="the output's retention (7d, 12h): default the one recorded with the output; another is refused",
        )
        sub.add_argument(
            "--min-batches-to-retain", metavar="N", type=_interval,
            help="the output's min_batches_to_retain: default the recorded one; another is refused",
        )
        sub.add_argument(
            "--cleanup-delay", metavar="DURATION", type=_duration("--cleanup-delay"),
            help="the output's cleanup_delay (10m, 0s): default the recorded one; another is refused",
        )

    ls = command("ls", "list committed batches and the log's compaction state", reads_interval=True)
    ls.add_argument("--rows", action="store_true", help="count the rows the log does not record (batches of Spark's sink or older versions) from the Parquet footers")
    show = command("show", "show the log entries of one batch", reads_interval=True)
    show.add_argument("batch", metavar="BATCH", type=int, help="batch id")
    verify = command(
        "verify", "check that committed files exist with their logged sizes, the log is intact, and the Delta log and "
        "Iceberg tables kept with it are in step", reads_interval=True,
    )
    iceberg_catalog(verify, ": compare that catalog table with the log too (the table kept without a catalog always "
                    "is)")
    vacuum = command(
        "vacuum",
        "delete Parquet data files no committed batch references (orphans of failed batches); hidden paths "
        "(_x, .x, as Spark hides them: _x=1/ is a partition directory) and other files are never touched",
    )
    vacuum.add_argument(
        "--older-than",
        metavar="DURATION",
        default="7d",
        type=_duration("--older-than"),
        help="only files older than this, with its unit (12h, 7d; default 7d, the minimum unless "
        "--allow-short-retention): younger ones may still be read through an older snapshot",
    )
    vacuum.add_argument(
        "--allow-short-retention",
        action="store_true",
        help="accept --older-than under 7d: no reader of an older snapshot and no writer can need those files",
    )
    vacuum.add_argument("--dry-run", action="store_true", help="list the files and their sizes, delete nothing")
    vacuum.add_argument(
        "--include-files-before-log",
        dest="include_before_log",
        action="store_true",
        help="also delete unreferenced files older than the log's first commit (kept by default: they may be a "
        "dataset the output was created over)",
    )
    iceberg_catalog(vacuum, ": expire that catalog table's snapshots past --older-than too (the table kept without a "
                    "catalog always is); without it a catalog's table keeps every file")
    optimize = command(
        "optimize",
        "rewrite the committed small files of each partition into files near a target size, swapped in with one "
        "commit every reader sees atomically (safe while the stream runs)",
        reads_interval=True,
    )
    optimize.add_argument(
        "--target-file-size",
        metavar="SIZE",
        default="128MiB",
        help="the size to pack files into, in bytes or with a unit (64MB, 128MiB, 1GB; default 128MiB); files "
        "at least this big are left as they are",
    )
    optimize.add_argument(
        "--partition",
        dest="partitions",  # optimize's parameter (see _spelling)
        metavar="K=V",
        action="append",
        default=[],
        help="only partition directories with this value (as written in the directory name, unescaped), repeatable",
    )
    optimize.add_argument(
        "--sort-by", metavar="COL", action="append", default=[],
        help="sort each rewritten file by this data column, repeatable (a file more than twice the target is cut "
        "into sorted files near it)",
    )
    optimize.add_argument(
        "--z-order", metavar="COL", action="append", default=[],
        help="cluster each partition's rows along a Z-order curve over these data columns (repeatable; every file of "
        "a partition is rewritten, a lone one too); not with --sort-by",
    )
    optimize.add_argument("--dry-run", action="store_true", help="say what would be rewritten, write nothing")
    log_settings(optimize)
    optimize.add_argument("--compression", default="snappy", help="Parquet codec of the new files (default snappy)")
    optimize.add_argument(
        "--spark-sink-stopped",
        action="store_true",
        help="the query of Spark's own file sink that committed the newest log batch is stopped for good (without "
        "it such an output is refused: that query would skip its next batches)",
    )
    iceberg_catalog(optimize, ": sync that catalog table after the swap (the table kept without a catalog always is)")
    time_zone(optimize)
    delta_sync = command(
        "delta-sync",
        "create or bring up to date the output's Delta Lake log (_delta_log), listing exactly the committed files",
    )
    delta_sync.add_argument(
        "--time-zone",
        default=None,
        metavar="ZONE",
        help="the zone timestamp partition directories were written in (the writer's spark.sql.session.timeZone; "
        "default: the one the Delta log recorded, else UTC): Delta stores them as UTC",
    )
    delta_sync.add_argument(
        "--recreate",
        action="store_true",
        help="delete _delta_log and write it again from _spark_metadata (after another Delta writer committed to "
        "it, or it diverged; Delta readers lose its history)",
    )
    delta_sync.set_defaults(run="_cmd_delta_sync")
    iceberg_sync = command(
        "iceberg-sync",
        "create or bring up to date the output's Apache Iceberg table, one snapshot per log batch, listing exactly "
        "the committed files",
    )
    iceberg_catalog(iceberg_sync, "; without a catalog the table's metadata lives with the output")
    time_zone(iceberg_sync)
    iceberg_sync.add_argument(
        "--recreate",
        action="store_true",
        help="drop the table from its catalog (never its data files) and delete its metadata with the output, then "
        "make it again from _spark_metadata (after another Iceberg writer committed to it, or it diverged; Iceberg "
        "readers lose its history)",
    )
    iceberg_sync.set_defaults(run="_cmd_iceberg_sync")
    doctor = command(
        "doctor",
        "explain what restarting a ParquetSink query from its checkpoint (or rerunning a write_batch app) will do",
    )
    doctor.add_argument("--checkpoint", metavar="CKPT", help="the query's checkpoint location")
    doctor.add_argument("--app-id", metavar="ID", help="a write_batch app id (with --version)")
    doctor.add_argument("--version", dest="app_version", metavar="V", type=int, help="the app version to rerun")
    doctor.add_argument(
        "--on-foreign-query",
        choices=("error", "append"),
        default="error",
        help="the sink's on_foreign_query setting (default: error)",
    )
    doctor.add_argument(
        "--batch-id-only",
        action="store_true",
        help="the sink runs with allow_batch_id_only=True and no checkpoint_location (Spark Connect): replays "
        "are told apart by batch id only",
    )
    doctor.add_argument(
        "--spark-sink-stopped",
        action="store_true",
        help="the sink (or write_batch) runs with spark_sink_stopped=True: the query of Spark's own file sink that "
        "committed the newest log batch is stopped for good",
    )
    doctor.add_argument(
        "--compact-interval", metavar="N", type=_interval,
        help="the sink's (or write_batch's) compact_interval: another than the output's is refused",
    )
    log_settings(doctor)
    iceberg_catalog(doctor, ": compare that catalog table with the log too (the table kept without a catalog always "
                    "is)")
    return parser


def _version() -> str:
    """The version, and whether the compiled log scanner (``log/_layout.c``) loads; without it (a build from
    source without a C compiler) logs are read column-wise with Arrow: the same answers, slower. Needs nothing
    but the standard library (the scanner module imports nothing)."""
    try:
        importlib.import_module("parquet_sink.log._layout")
        scanner = "compiled log scanner: present"
    except ImportError:
        scanner = ("compiled log scanner: missing, logs are read column-wise with Arrow (the same answers, ~1.5x "
                   "the compaction time); install a wheel, or build with a C compiler")
    return f"{PROG} {__version__} ({scanner})"


def _spelling(parser: argparse.ArgumentParser) -> dict[str, str]:
    """How a command spells the library parameters its options feed: each option's destination, and its long name
    with ``_`` for ``-``, map to that long name (``older_than`` -> ``--older-than``, ``allow_short_retention`` ->
    ``--allow-short-retention``; ``--partition`` stores into ``partitions``, optimize's parameter), so that the
    library's ParameterErrors read in the command's options (:func:`parquet_sink.errors.respell`)."""
    spelled: dict[str, str] = {}
    for action in parser._actions:  # argparse keeps no public list of a parser's options
        long = next((o for o in action.option_strings if o.startswith("--")), None)
        if long is not None:
            for name in (long[2:].replace("-", "_"), action.dest):
                spelled.setdefault(name, long)
    return spelled


def _joined_values(argv: list[str]) -> list[str]:
    """``argv`` with ``--older-than -1d`` given as ``--older-than=-1d`` (see :data:`_UNIT_OPTIONS`)."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] in _UNIT_OPTIONS and arg[:1] == "-" and arg[1:2].isdigit():
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def _unrecognized(command: argparse.ArgumentParser, extras: list[str]) -> UsageError:
    """The usage error of arguments the command does not take, with its usage and the nearest option it has
    (``--older_than``: did you mean ``--older-than``?)."""
    options = [o for action in command._actions for o in action.option_strings if o.startswith("--")]
    hints = []
    for extra in extras:
        name = extra.split("=", 1)[0]
        if not name.startswith("-"):
            continue
        spelled = "--" + name.lstrip("-").replace("_", "-").lower()
        close = [spelled] if spelled in options else difflib.get_close_matches(spelled, options, n=1)
        if close:
            hints.append(f"{name}: did you mean {close[0]}?")
    message = f"unrecognized arguments: {' '.join(extras)}" + (f" ({'; '.join(hints)})" if hints else "")
    return UsageError(message, command.prog, command.format_usage())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code: 0 ok, 1 problems found or the operation failed, 2 a usage
    or input error (see the module docstring). With ``--json`` an error is a JSON object on stdout.

    Example::

        >>> main(["verify", "/data/events"])
        OK: /data/events: log intact up to batch 57, 120 committed files (1.2 MiB) present with their logged sizes
        0
    """
    argv = _joined_values(list(sys.argv[1:] if argv is None else argv))
    as_json = "--json" in argv
    try:
        args, extras = build_parser().parse_known_args(argv)
        if extras:
            raise _unrecognized(args.command_parser, extras)
    except UsageError as exc:
        return _fail(as_json, exc, 2, exc.prog, exc.usage)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if args.verbose:
        logging.getLogger("parquet_sink").setLevel(logging.DEBUG)
    try:
        from . import commands  # the library: pyarrow, fsspec

        with caller_names_errors(_spelling(args.command_parser)):  # a refused input in the command's terms
            code = getattr(commands, args.run)(args)
        sys.stdout.flush()
        return code
    except KeyboardInterrupt:  # Ctrl-C: every commit is atomic, what was cut short is safe to run again
        return _fail(args.json, KeyboardInterrupt(
            f"{args.path}: interrupted; nothing was half-committed (every commit is atomic): run the command again"
        ), INTERRUPTED)
    except BrokenPipeError:  # `parquet-sink ls ... | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except ParameterError as exc:
        return _fail(args.json, exc, 2)
    except (ParquetSinkError, OSError) as exc:
        logger.debug("details", exc_info=True)
        return _fail(args.json, exc, 1)
    except Exception as exc:  # a dependency's error no check of this package caught: one line, the details with -v
        logger.debug("details", exc_info=True)
        return _fail(args.json, RuntimeError(
            f"{args.path}: {type(exc).__name__}: {exc} (unexpected: run again with -v for the details, and report it)"
        ), 1)


def _fail(as_json: bool, exc: BaseException, code: int, prog: str = PROG, usage: str = "") -> int:
    """Report an error: with ``--json`` one JSON object on stdout (``ok``: false, ``error``: the message,
    ``type``: the error's class), else one line on stderr (after the usage line for a usage error); returns
    ``code``."""
    message = " ".join(str(exc).split())
    if as_json:
        print(json.dumps({"ok": False, "error": message, "type": type(exc).__name__}, indent=2))
        sys.stdout.flush()
    else:
        print(f"{usage}{prog}: error: {message}", file=sys.stderr)
    return code


def run() -> None:
    """The console script: :func:`main`, then exit without tearing down the interpreter. pyarrow's native thread
    pools can abort a process that exits normally ("terminate called without an active exception", SIGABRT,
    apache/arrow#34314; seen in CI after ``parquet-sink show`` reported an error): a command's work and output are
    done and flushed by then, so nothing is lost by skipping the teardown.

    Example: ``$ parquet-sink verify /data/events; echo $?`` -> ``0``.
    """
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

