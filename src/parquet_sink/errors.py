"""Typed errors. Every error names the path (and batch where there is one) and says what to do.

Spark hands an error raised in ``foreachBatch`` to ``query.awaitTermination()`` as a
``StreamingQueryException`` carrying it only as text (on classic PySpark and under Spark Connect):
:func:`original_error` gets the typed error back from it.
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib
import inspect
import os
import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from types import ModuleType
from typing import Any, ParamSpec, TypeVar

_P = ParamSpec("_P")
_R = TypeVar("_R")


class ParquetSinkError(Exception):
    """Base class of every error raised by parquet_sink."""


class ParameterError(ParquetSinkError, ValueError):
    """An argument out of range or of the wrong kind (named in the message with the accepted values); raised
    before anything is written."""


class StorageError(ParquetSinkError):
    """A storage backend failed or cannot give the guarantees exactly-once needs. ``retryable``: whether the
    same call again may succeed (True only on :class:`RetryableStorageError`)."""

    retryable = False


class RetryableStorageError(StorageError):
    """The store throttled or failed (HTTP 429, 500, 503...), reset the connection, cut an answer short or did not
    answer in time: nothing is half-committed, and the same call again (the same batch, read or vacuum) may succeed."""

    retryable = True


class UnsupportedStorageError(StorageError):
    """The URL names a store the package refuses: one only this process sees (``memory://`` for the sink), or one
    it cannot test (``gs://``)."""


class UnsafeStorageError(StorageError):
    """The store does not honour exclusive create (put-if-absent), so commits could be lost."""


class MissingDependencyError(ParquetSinkError, ImportError):
    """A package the sink needs at run time (pyspark, or pandas/pyarrow for ``mapInArrow``) is missing or too old."""

    @classmethod
    def require(cls, what: str, modules: Sequence[str], minimum: tuple[int, int], needs: str, install: str) -> ModuleType:
        """The top-level package of ``modules`` once every one of them imports and its ``__version__`` is at least
        ``minimum``; else this error class naming ``what`` needed it, what it ``needs`` (the package, its version
        and parts, in words), what was found and the ``install`` command. The extras' packages (deltalake,
        pyiceberg) are checked with it.

        Example: ``DeltaDependencyError.require("sync_delta_log('/data/events')", ["deltalake.transaction"], (1, 0),
        "the deltalake package (delta-rs) >= 1.0", INSTALL).__version__`` -> ``'1.6.6'``.
        """
        try:
            for module in modules:
                importlib.import_module(module)
        except ImportError as exc:
            raise cls(f"{what} needs {needs}, which is missing or older ({exc}). Install it with: {install}") from exc
        package = importlib.import_module(modules[0].split(".")[0])
        version = getattr(package, "__version__", "")
        if tuple(int(p) for p in re.findall(r"\d+", version)[:2]) < minimum:
            raise cls(f"{what} needs {needs}, found {package.__name__} {version}. Install it with: {install}")
        return package


class ExecutorDependencyError(MissingDependencyError):
    """The executors' Python cannot import a package the Arrow writer path runs there (this package, pyarrow)."""


class SinkUsageError(ParquetSinkError, TypeError):
    """The sink was handed to the wrong Spark API (``foreach`` instead of ``foreachBatch``)."""


class TemporaryCheckpointWarning(UserWarning):
    """The streaming query runs without ``checkpointLocation``: Spark gave it a temporary checkpoint, so a
    restart is a new query, which the sink refuses (ForeignQueryError) rather than skip or duplicate data.
    Silence with ``warnings.filterwarnings("ignore", category=TemporaryCheckpointWarning)``."""


class QueryInterrupted(SystemExit, KeyboardInterrupt):
    """Ctrl-C (SIGINT) in :func:`~parquet_sink.await_termination`: the query was stopped cleanly (every batch it
    committed stays, a batch cut short is redone when it starts again with the same checkpoint) and one line said
    so on stderr. A ``KeyboardInterrupt``, so ``except KeyboardInterrupt`` catches it; and a ``SystemExit`` (code
    130, as a shell reports a Ctrl-C, as the command line exits), so an uncaught one ends the program without a
    traceback. Not a :class:`ParquetSinkError`: ``except Exception`` does not swallow a Ctrl-C."""


class LogError(ParquetSinkError):
    """Base class for problems with the `_spark_metadata` log."""


class CorruptLogError(LogError):
    """A log file is empty, truncated, not UTF-8, not JSON, or misses required keys."""


class UnsupportedLogVersionError(LogError):
    """A log file was written by a newer log format than this version understands."""


class MissingLogFileError(LogError):
    """A log file the batch chain needs (a delta or a compact file) is missing."""


class SnapshotExpiredError(LogError):
    """An older snapshot was asked for whose log files are gone and which newer files cannot answer in full, or
    whose data files ``vacuum`` deleted after an optimize or retention removed them from the output."""


class SnapshotNotFoundError(LogError):
    """The snapshot asked for does not exist: a batch past the latest committed one, or a time before the
    first commit (or one the log does not record)."""


class LogPathError(LogError):
    """The `_spark_metadata` path exists but is not a directory, so the log cannot be listed."""


class NotAnOutputError(LogError):
    """The path has no `_spark_metadata` log, so committed data cannot be told apart."""


class CommitConflictError(ParquetSinkError):
    """A commit that conflicts with what another writer committed first (another run of the same checkpoint
    committed the batch; a writer without a query id cannot tell), or lost races too many times in a row."""


class SparkSinkBatchError(CommitConflictError):
    """The newest log batch was committed by Spark's own file sink (``writeStream.format("parquet")``), which skips
    every batch id the log already holds: a batch of ours committed after it would make that query skip its next
    batch, losing its rows. Nothing was written. ``spark_sink_stopped=True`` says its query never runs again."""


class OutputSettingsError(ParquetSinkError, ValueError):
    """An argument contradicts a setting recorded with the output (its compact interval, retention, batches to retain
    or cleanup delay), which every writer and maintenance command applies; raised before anything is committed."""


class ForeignQueryError(ParquetSinkError):
    """The output's log holds batches of another streaming query (a new checkpoint on an old output)."""


class QueryIdentityError(ParquetSinkError):
    """The sink cannot tell which streaming query it serves (Spark Connect without ``checkpoint_location``),
    or the checkpoint it was given belongs to another query."""


class OutputResetError(ParquetSinkError):
    """The checkpoint is ahead of the output log: batches Spark considers done are not in the log."""


class StaleVersionError(ParquetSinkError):
    """``write_batch`` got different data under a version its app already committed (or went past)."""


class SchemaMismatchError(ParquetSinkError):
    """A batch's schema is incompatible with the data already committed."""


class ExistingDataError(ParquetSinkError):
    """The output directory already holds Parquet files but no committed batch (a dataset, not an output)."""


class MissingDataFileError(ParquetSinkError):
    """A committed data file is missing from storage."""


class DamagedDataFileError(ParquetSinkError):
    """A committed data file cannot be read: its size differs from the one the log recorded, or its bytes were
    changed in place."""


class OutsideRootError(ParquetSinkError):
    """A log entry points outside the output root (refused unless allowed explicitly)."""


class SnapshotError(ParquetSinkError):
    """A consistent snapshot of the log could not be read (too many concurrent cleanups)."""


class RowCountMismatchError(ParquetSinkError):
    """The data files found for a batch hold a different number of rows than its write job wrote."""


class OptimizeError(ParquetSinkError):
    """A background optimize (``ParquetSink(optimize_every=...)``) failed for a cause that is not a typed error of
    this package; the stream's batches are committed, the swap is not (its files are orphans for ``vacuum``)."""


_NAMED: ContextVar[bool] = ContextVar("parquet_sink_named_call", default=False)  # an outer call names the errors


def call_text(function: str, path: object) -> str:
    """How an error names a call of ``function`` on the output ``path``: ``read_committed('/data/out')``."""
    shown = os.fspath(path) if isinstance(path, (str, os.PathLike)) else path
    return f"{function}({shown!r})"


@contextmanager
def parameters_of(call: str) -> Iterator[None]:
    """A :class:`ParameterError` raised inside gets ``call`` (:func:`call_text`) in front of its message, unless it
    names a call on the same path already: the checks of arguments are shared by many entry points and know the
    argument, not the output. Named calls inside (this, :func:`names_output` functions) add nothing: the outermost
    names the error.

    Example::

        >>> with parameters_of("ParquetSink('/data/out')"):
        ...     check_flags(delta_log="yes")
        ParameterError: ParquetSink('/data/out'): delta_log must be True or False, got 'yes'
    """
    if _NAMED.get():  # inside another named call: the outermost names the error
        yield
        return
    token = _NAMED.set(True)
    try:
        yield
    except ParameterError as exc:
        path = call[call.index("(") :]
        if not re.match(r"[\w.]+" + re.escape(path), str(exc)):
            exc.args = (f"{call}: {exc}",)
        raise
    finally:
        _NAMED.reset(token)


@contextmanager
def caller_names_errors(spelling: Mapping[str, str] | None = None) -> Iterator[None]:
    """Inside, no named call (:func:`parameters_of`, :func:`names_output`) puts itself in front of a
    :class:`ParameterError`: for a caller that reports errors in its own terms. The command line is one: its user
    typed ``parquet-sink vacuum /data/out --older-than 1d``, not ``vacuum('/data/out', ...)``. ``spelling``: how
    that caller spells the parameters of the calls inside (``{"older_than": "--older-than"}``); a ParameterError
    raised inside names them so (:func:`respell`).

    Example::

        >>> with caller_names_errors({"older_than": "--older-than", "allow_short_retention": "--allow-short-retention"}):
        ...     vacuum("/data/out", "1d")
        ParameterError: --older-than 1d is shorter than the safe minimum of 7d: ... Pass --allow-short-retention if ...
    """
    token = _NAMED.set(True)
    try:
        yield
    except ParameterError as exc:
        if spelling:
            exc.args = (respell(str(exc), spelling),)
        raise
    finally:
        _NAMED.reset(token)


_CALLER_HINT = re.compile(r" ?\(CLI: [^)]*\)")  # a hint of the command line's spelling in a Python API message


def respell(message: str, spelling: Mapping[str, str]) -> str:
    """A ParameterError's ``message`` with the parameters it names spelled as a caller spells them (``spelling``:
    parameter -> option): ``name=True`` becomes the option alone (a switch), ``name=[a, b]`` the option once per
    item, ``name=value`` the option and the value, and the bare name the option where it is a parameter's name
    beyond doubt (it holds ``_``, or it begins the message or a clause: ``version must be ...``); a hint of the
    caller's spelling (``(CLI: --allow-short-retention)``) is dropped.

    Example: ``respell("older_than=1d is short: pass allow_short_retention=True", {"older_than": "--older-than",
    "allow_short_retention": "--allow-short-retention"})`` -> ``"--older-than 1d is short: pass --allow-short-retention"``.
    """
    if not spelling:
        return message
    names = "|".join(sorted(map(re.escape, spelling), key=len, reverse=True))
    value = r"\[[^\]]*\]|'[^']*'|\"[^\"]*\"|[^\s,;)]*[^\s,;:.)]"

    def assigned(match: re.Match[str]) -> str:
        option, given = spelling[match.group(1)], match.group(2) or ""
        if given in ("", "True"):
            return option
        if given.startswith("["):
            try:
                items = ast.literal_eval(given)
            except (ValueError, SyntaxError):
                items = None
            if isinstance(items, list):
                return " ".join(f"{option} {item}" for item in items) or option
        return f"{option} {given}"

    def named(match: re.Match[str]) -> str:
        name, before = match.group(1), match.string[: match.start()].rstrip()
        clause_start = not before or before.endswith((":", ";", "."))
        return spelling[name] if "_" in name or clause_start else name

    text = _CALLER_HINT.sub("", message)
    # never inside a path or a URL: a partition directory may be named like a parameter (.../version=3/part-0.parquet,
    # C:\\out\\version=3), so may a query's (...?version=3&older_than=1)
    text = re.sub(rf"(?<![\w.'\"/\\?&-])({names})=({value})?", assigned, text)
    return re.sub(rf"(?<![\w.'\"=/\\?&-])({names})(?![\w'\"(=/\\-])", named, text)


class KeywordError(ParameterError, TypeError):
    """A keyword argument the callable does not take (a ``TypeError``, as Python's own), naming the nearest one it
    does: Spark's spelling (``partitionBy``) as ours (``partition_by``), or a near miss."""


def nearest_keyword(name: str, known: Collection[str]) -> str | None:
    """The keyword of ``known`` that ``name`` most likely meant: its snake_case (``checkpointLocation`` ->
    ``checkpoint_location``), else the closest by spelling; None when none is close.

    Example: ``nearest_keyword("deltaLog", ["delta_log", "path"])`` -> ``'delta_log'``.
    """
    snake = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()
    if snake in known:
        return snake
    close = difflib.get_close_matches(snake, list(known), n=1) or difflib.get_close_matches(name, list(known), n=1)
    return close[0] if close else None


def keyword_checker(function: Callable[..., Any], title: str) -> Callable[[Mapping[str, Any]], None]:
    """A check of a call's keyword arguments against ``function``'s parameters (none when it takes ``**kwargs``:
    it checks its own), raising :class:`KeywordError` for one it lacks, titled ``title`` (none: a named call's
    :func:`parameters_of` names it)."""
    parameters = inspect.signature(function).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return lambda kwargs: None
    known = [p.name for p in parameters if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"]

    def check(kwargs: Mapping[str, Any]) -> None:
        for name in kwargs:
            if name not in known:
                near = nearest_keyword(name, known)
                said = f"unknown keyword argument {name!r}{f' (did you mean {near!r}?)' if near else ''}"
                raise KeywordError(f"{title}{': ' if title else ''}{said}; it takes {', '.join(known)}")

    return check


def checks_keywords(init: Callable[..., None]) -> Callable[..., None]:
    """Decorator of a public class's ``__init__`` whose first argument is an output's path: a keyword it does not
    take is a :class:`KeywordError` naming the call and the nearest keyword (``ParquetSink('/data/out'): unknown
    keyword argument 'partitionBy' (did you mean 'partition_by'?)``), not Python's bare ``TypeError``."""
    check = keyword_checker(init, "")

    @functools.wraps(init)
    def checked(self: Any, *args: Any, **kwargs: Any) -> None:
        path = args[0] if args else kwargs.get("path", "")
        with parameters_of(call_text(type(self).__name__, path)):
            check(kwargs)
        init(self, *args, **kwargs)

    return checked


def names_output(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """Decorator of a public function whose first argument is an output's path: a :class:`ParameterError` it raises
    names the call (:func:`parameters_of`), ``vacuum('/data/out'): older_than='5' is not a duration ...``, and a
    keyword it does not take is a :class:`KeywordError` naming the nearest it does (``partitionBy``: did you mean
    ``partition_by``). A generator function names it in each step of its iteration."""
    name = function.__name__
    check = keyword_checker(function, "")

    if inspect.isgeneratorfunction(function):

        def steps(path: Any, *args: Any, **kwargs: Any) -> Any:
            inner = function(path, *args, **kwargs)
            while True:
                with parameters_of(call_text(name, path)):
                    try:
                        item = next(inner)
                    except StopIteration as stop:
                        return stop.value
                yield item

        @functools.wraps(function)
        def checked(path: Any, *args: Any, **kwargs: Any) -> Any:
            with parameters_of(call_text(name, path)):
                check(kwargs)  # at the call, not at the first step
            return steps(path, *args, **kwargs)

        return checked  # type: ignore[return-value]

    @functools.wraps(function)
    def named(path: Any, *args: Any, **kwargs: Any) -> Any:
        with parameters_of(call_text(name, path)):
            check(kwargs)
            return function(path, *args, **kwargs)

    return named  # type: ignore[return-value]


# The last line of the Python traceback Spark puts in a failed query's message: "parquet_sink.errors.<Class>: <text>".
_RAISED = re.compile(r"^parquet_sink\.errors\.([A-Za-z]+Error): (.*)$", re.MULTILINE)


def original_error(exc: BaseException | None) -> ParquetSinkError | None:
    """The parquet_sink error a streaming query died of, rebuilt with its class and message from the
    ``StreamingQueryException`` Spark raised (``query.awaitTermination()``, ``query.exception()``), on classic
    PySpark and under Spark Connect; ``exc`` itself if it is one; None when the query died of something else.

    Example::

        >>> try:
        ...     query.awaitTermination()
        ... except Exception as exc:
        ...     if isinstance(original_error(exc), ForeignQueryError):
        ...         ...  # a new checkpoint on an old output
        ...     raise
    """
    if exc is None or isinstance(exc, ParquetSinkError):
        return exc
    texts = [str(exc), str(getattr(exc, "desc", "") or ""), str(getattr(exc, "_desc", "") or "")]
    found = [m for text in texts for m in _RAISED.finditer(text)]
    for match in reversed(found):  # the innermost (last) traceback line is what the sink raised
        klass = globals().get(match.group(1))
        if isinstance(klass, type) and issubclass(klass, ParquetSinkError):
            error = klass(match.group(2).strip())
            error.__cause__ = exc
            return error
    return None
