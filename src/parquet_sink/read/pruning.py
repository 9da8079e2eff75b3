"""File skipping: which committed files a ``pyarrow.dataset`` filter may match, decided from the statistics
the log carries (:mod:`parquet_sink.log.file_stats`) and the files' partition values, before any file is
opened (the counterpart of Delta's ``DataSkippingReader`` and of delta-rs's ``PruningPredicate``).

Conservative: a file is skipped only when its statistics prove that no row can make the filter true, and it
is counted whole only when they prove every row does. The filter is read back as its tree (Arrow's own
serialization of the expression) and evaluated per file, column-wise over all files at once, in a
three-valued logic: for each file, whether some row *may* make a node true, false or null (Kleene's ``and``,
``or``, ``not``). What the evaluator does not understand (another function, a nested field, a non-monotonic
cast, a null or NaN literal, a comparison Arrow would refuse) may be anything. Every float column may hold
NaN (Parquet bounds leave it out): ``x != 1`` may be true, ``x < 1`` may be false there.

Example::

    >>> verdict = file_verdicts(ds.field("n") > 5, stats, {})
    >>> verdict.may_match, verdict.all_match
    (array([ True, False]), array([ True, False]))
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from ..log.file_stats import FileStats, stats_kind

_COMPLEMENT = {
    "equal": "not_equal", "not_equal": "equal", "less": "greater_equal", "greater_equal": "less",
    "less_equal": "greater", "greater": "less_equal",
}
_FLIPPED = {
    "equal": "equal", "not_equal": "not_equal", "less": "greater", "greater": "less",
    "less_equal": "greater_equal", "greater_equal": "less_equal",
}
_SET_VALUES = 64  # an isin over more values is bounded by the set's min and max


class _ArrowSchema(ctypes.Structure):
    """Arrow's C data interface struct, for the key-value metadata of a schema with repeated keys (pyarrow's
    ``Schema.metadata`` is a dict: it keeps one value per key)."""

    _fields_ = [
        ("format", ctypes.c_char_p), ("name", ctypes.c_char_p), ("metadata", ctypes.c_void_p),
        ("flags", ctypes.c_int64), ("n_children", ctypes.c_int64), ("children", ctypes.c_void_p),
        ("dictionary", ctypes.c_void_p), ("release", ctypes.CFUNCTYPE(None, ctypes.c_void_p)),
        ("private_data", ctypes.c_void_p),
    ]


def _metadata_items(schema: pa.Schema) -> list[tuple[str, bytes]]:
    """Every key-value pair of ``schema``'s metadata, in order, repeated keys included."""
    struct = _ArrowSchema()
    schema._export_to_c(ctypes.addressof(struct))
    try:
        items, at = [], struct.metadata
        if not at:
            return items

        def number(offset: int) -> int:
            return int.from_bytes(ctypes.string_at(at + offset, 4), "little", signed=True)

        offset = 4
        for _ in range(number(0)):
            size = number(offset)
            key = ctypes.string_at(at + offset + 4, size).decode()
            offset += 4 + size
            size = number(offset)
            items.append((key, ctypes.string_at(at + offset + 4, size)))
            offset += 4 + size
        return items
    finally:
        struct.release(ctypes.addressof(struct))


@dataclass(frozen=True)
class _Node:
    """One node of a filter: a ``field`` (name), a ``literal`` (scalar) or a ``call`` (function, arguments,
    options as a struct scalar); ``nested`` for what the evaluator does not read (a nested field reference)."""

    kind: str
    name: str = ""
    value: Any = None
    args: tuple[_Node, ...] = ()


def filter_tree(expression: ds.Expression) -> _Node:
    """The tree of a ``pyarrow.dataset`` expression, from Arrow's serialization of it (an IPC file whose
    schema metadata lists the nodes depth first and whose columns hold the literals and options)."""
    table = pa.ipc.open_file(expression.__reduce__()[1][0]).read_all()
    items = iter(_metadata_items(table.schema))

    def column(value: bytes) -> pa.Scalar:
        return table.column(int(value)).chunk(0)[0]

    def node(key: str, value: bytes) -> _Node:
        if key == "literal":
            return _Node("literal", value=column(value))
        if key == "field_ref":
            return _Node("field", name=value.decode())
        if key == "nested_field_ref":  # then as many references, each possibly nested again; the first names the column
            path = [node(*next(items)) for _ in range(int(value))]
            return _Node("nested", name=path[0].name if path else "")
        if key != "call":
            raise ValueError(f"unknown node {key!r} in a serialized expression")
        args: list[_Node] = []
        options = None
        for inner, inner_value in items:
            if inner == "end":
                return _Node("call", value.decode(), options, tuple(args))
            if inner == "options":
                options = column(inner_value)
            else:
                args.append(node(inner, inner_value))
        raise ValueError("unterminated call in a serialized expression")

    key, value = next(items)
    return node(key, value)


@dataclass
class _Values:
    """What the statistics say of a value node over the files: bounds (None: unknown for every file; a null
    element: unknown for that file) and, per file, whether some row may hold a value, a null or a NaN."""

    low: pa.Array | None
    high: pa.Array | None
    value: np.ndarray
    null: np.ndarray
    nan: np.ndarray


@dataclass
class _Truth:
    """Per file: whether some row may make a node true, false, null."""

    true: np.ndarray
    false: np.ndarray
    null: np.ndarray


@dataclass(frozen=True)
class FileVerdicts:
    """Per file: ``may_match`` (False: no row can match, the file is skipped) and ``all_match`` (every row
    matches: the file's row count counts whole)."""

    may_match: np.ndarray
    all_match: np.ndarray


def _maybe(n: int) -> np.ndarray:
    return np.ones(n, dtype=bool)


def _possible(mask: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A boolean result over bounds as 'possible' per file (null: an unknown bound, so possible)."""
    return np.asarray(pc.fill_null(mask, True).to_numpy(zero_copy_only=False), dtype=bool)


class _Evaluator:
    """Evaluates a filter tree over the statistics of ``n`` files (``columns``: name -> :class:`_Values`)."""

    def __init__(self, n: int, columns: dict[str, _Values]) -> None:
        self.n = n
        self.columns = columns

    def unknown(self) -> _Truth:
        return _Truth(_maybe(self.n), _maybe(self.n), _maybe(self.n))

    def values(self, node: _Node) -> _Values | None:
        if node.kind == "field":
            return self.columns.get(node.name)
        if node.kind == "call" and node.name == "cast" and len(node.args) == 1:
            source = self.values(node.args[0])
            return None if source is None else _cast(source, node.value)
        return None

    def truth(self, node: _Node) -> _Truth:
        try:
            return self._truth(node)
        except (pa.ArrowException, ValueError, TypeError, OverflowError):  # what Arrow refuses: anything
            return self.unknown()

    def _truth(self, node: _Node) -> _Truth:
        n, name, args = self.n, node.name, node.args
        if node.kind == "literal":
            if not pa.types.is_boolean(node.value.type):
                return self.unknown()
            value = node.value.as_py()
            return _Truth(np.full(n, value is True), np.full(n, value is False), np.full(n, value is None))
        if node.kind != "call":
            values = self.values(node)
            return self.unknown() if values is None else _boolean_column(values)
        if name in ("and_kleene", "and", "or_kleene", "or", "and_not", "and_not_kleene") and len(args) == 2:
            left, right = self.truth(args[0]), self.truth(args[1])
            if name.startswith("and_not"):
                right = _Truth(right.false, right.true, right.null)
            return _or(left, right) if name.startswith("or") else _and(left, right)
        if name == "invert" and len(args) == 1:
            inner = self.truth(args[0])
            return _Truth(inner.false, inner.true, inner.null)
        if name in ("is_null", "is_valid") and len(args) == 1:
            values = self.values(args[0])
            if values is None:
                return self.unknown()
            nan_is_null = name == "is_null" and node.value is not None and bool(node.value["nan_is_null"].as_py())
            null = values.null | (values.nan & nan_is_null)
            value = values.value
            if name == "is_valid":
                return _Truth(value, null, np.zeros(n, bool))
            return _Truth(null, value, np.zeros(n, bool))
        if name in _COMPLEMENT and len(args) == 2:
            return self._comparison(name, args[0], args[1])
        if name == "is_in" and len(args) == 1:
            return self._isin(args[0], node.value)
        return self.unknown()

    def _comparison(self, op: str, left: _Node, right: _Node) -> _Truth:
        if left.kind == "literal" and right.kind != "literal":
            op, left, right = _FLIPPED[op], right, left
        if right.kind != "literal":
            return self.unknown()
        values, literal = self.values(left), right.value
        if values is None or values.low is None or not literal.is_valid or _is_nan(literal):
            return self.unknown()
        true = values.value & (_bounds_allow(op, values, literal) | (values.nan & (op == "not_equal")))
        false = values.value & (_bounds_allow(_COMPLEMENT[op], values, literal) | (values.nan & (op != "not_equal")))
        return _Truth(true, false, values.null.copy())

    def _isin(self, arg: _Node, options: pa.StructScalar | None) -> _Truth:
        values = self.values(arg)
        if values is None or values.low is None or options is None:
            return self.unknown()
        candidates = _as_compared(options["value_set"].values, values.low.type)
        if candidates is None or candidates.null_count or (
            pa.types.is_floating(candidates.type) and pc.any(pc.is_nan(candidates)).as_py()
        ):
            return self.unknown()  # a null or NaN in the set matches rows the bounds say nothing of
        if len(candidates) > _SET_VALUES:
            bounds = pc.min_max(candidates)
            allowed = _possible(pc.and_(pc.less_equal(values.low, bounds["max"]), pc.greater_equal(values.high, bounds["min"])))
        else:
            allowed = np.zeros(self.n, bool)
            for candidate in candidates:
                allowed |= _bounds_allow("equal", values, candidate)
        return _Truth(values.value & allowed, values.value | values.null, values.null.copy())


def _as_compared(candidates: pa.Array, typ: pa.DataType) -> pa.Array | None:
    """``is_in``'s value set as it compares it: cast to the column's type ``typ``; None when that cast changes a value
    (0.1 as a float32, a time of day dropped by a date, 1.5 as an integer: the set matches values no comparison of
    the bounds with the set as given would find) or fails."""
    if candidates.type.equals(typ):
        return candidates
    try:
        cast = pc.cast(candidates, typ, safe=False)
        exact = pc.cast(cast, candidates.type, safe=False).equals(candidates)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return cast if exact else None


def filter_fields(expression: ds.Expression) -> set[str] | None:
    """The top-level columns ``expression`` reads; None when it reads a nested field (read every column).

    Example: ``filter_fields((ds.field("a") > 1) | ds.field("b").is_null())`` -> ``{'a', 'b'}``.
    """
    found, nested = _referenced(expression)
    return None if nested else found


def filter_columns(expression: ds.Expression) -> set[str]:
    """The top-level columns ``expression`` reads, those of its nested fields included.

    Example: ``filter_columns(ds.field("s", "a") > 1)`` -> ``{'s'}``.
    """
    return _referenced(expression)[0]


def _referenced(expression: ds.Expression) -> tuple[set[str], bool]:
    """(the top-level columns ``expression`` reads, whether it reads a nested field of one)."""
    found: set[str] = set()
    nested = False
    pending = [filter_tree(expression)]
    while pending:
        node = pending.pop()
        if node.kind in ("field", "nested") and node.name:
            found.add(node.name)
        nested |= node.kind == "nested"
        pending.extend(node.args)
    return found, nested


def _is_nan(literal: pa.Scalar) -> bool:
    return pa.types.is_floating(literal.type) and literal.as_py() != literal.as_py()


def _bounds_allow(op: str, values: _Values, literal: pa.Scalar) -> np.ndarray:
    """Per file: whether a non-NaN value between the bounds may satisfy ``value op literal`` (Arrow's own
    comparison of the bounds, with the implicit casts the filter gets)."""
    low, high = values.low, values.high
    if op == "equal":
        return _possible(pc.and_kleene(pc.less_equal(low, literal), pc.greater_equal(high, literal)))
    if op == "not_equal":
        return _possible(pc.or_kleene(pc.not_equal(low, literal), pc.not_equal(high, literal)))
    if op in ("less", "less_equal"):
        return _possible(getattr(pc, op)(low, literal))
    return _possible(getattr(pc, op)(high, literal))


def _boolean_column(values: _Values) -> _Truth:
    """A boolean column used as the filter itself."""
    if values.low is None or not pa.types.is_boolean(values.low.type):
        n = len(values.value)
        return _Truth(_maybe(n), _maybe(n), _maybe(n))
    true = values.value & _possible(pc.equal(values.high, True))
    false = values.value & _possible(pc.equal(values.low, False))
    return _Truth(true, false, values.null.copy())


def _and(a: _Truth, b: _Truth) -> _Truth:
    """``a and b`` as Kleene's and plain ``and`` both may give it (a row's operands are not known together:
    a null may come from either side)."""
    return _Truth(a.true & b.true, a.false | b.false, a.null | b.null)


def _or(a: _Truth, b: _Truth) -> _Truth:
    """``a or b``, Kleene's or plain, as :func:`_and`."""
    return _Truth(a.true | b.true, a.false & b.false, a.null | b.null)


def _kind(typ: pa.DataType) -> str | None:
    """The family a cast keeps order within: ``number``, ``float``, ``time``, ``string`` (another: a cast from
    or to it may reorder values)."""
    kind = stats_kind(typ)
    if kind is None or kind == "date" or kind.startswith("ts:"):
        return None if kind is None else "time"
    return {"int": "number", "decimal": "number"}.get(kind, kind)


# cast options under which a cast may wrap values around (out-of-range integers, times, decimals): not monotonic
_WRAPPING = ("allow_int_overflow", "allow_time_overflow", "allow_decimal_truncate")


def _cast(source: _Values, options: pa.StructScalar | None) -> _Values | None:
    """The bounds of ``cast(x)`` from those of ``x`` when the cast keeps order (numbers to numbers, times to
    times, strings to strings, floats only to floats: a NaN has no place in another type); None otherwise.
    Casting the bounds as the values are cast keeps them bounds: every such cast is monotonic."""
    if source.low is None or options is None or any(options[wraps].as_py() for wraps in _WRAPPING):
        return None
    target = options.type.field("to_type").type
    before, after = _kind(source.low.type), _kind(target)
    allowed = {("number", "number"), ("number", "float"), ("float", "float"), ("time", "time"), ("string", "string")}
    if (before, after) not in allowed or (pa.types.is_timestamp(source.low.type) and source.low.type.tz is not None
                                         and not pa.types.is_timestamp(target)):
        return None  # a zoned timestamp's date is its local date: zones step back (a day, in 1867 Alaska)
    cast = pc.CastOptions(
        target,
        allow_time_truncate=options["allow_time_truncate"].as_py(),
        allow_time_overflow=options["allow_time_overflow"].as_py(),
        allow_decimal_truncate=options["allow_decimal_truncate"].as_py(),
        allow_float_truncate=options["allow_float_truncate"].as_py(),
    )
    try:
        low, high = pc.cast(source.low, options=cast), pc.cast(source.high, options=cast)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return _Values(low, high, source.value, source.null, source.nan)


def _column_values(bounds_low: pa.Array, bounds_high: pa.Array, nulls: pa.Array, rows: pa.Array) -> _Values:
    """A column's :class:`_Values` from its per-file bounds, null counts and row counts."""
    nulls_known = nulls.is_valid().to_numpy(zero_copy_only=False)
    null_count = pc.fill_null(nulls, 0).to_numpy(zero_copy_only=False)
    row_count = pc.fill_null(rows, -1).to_numpy(zero_copy_only=False)
    has_null = ~nulls_known | (null_count > 0)
    has_value = ~nulls_known | (row_count < 0) | (null_count < row_count)
    nan = has_value if pa.types.is_floating(bounds_low.type) else np.zeros(len(has_value), bool)
    return _Values(bounds_low, bounds_high, has_value, has_null, nan)


def file_verdicts(filter: ds.Expression, stats: FileStats, partitions: dict[str, pa.Array]) -> FileVerdicts:
    """Per file, whether ``filter`` may match a row and whether it matches every row, from ``stats`` (the
    decoded statistics of the files, :func:`~parquet_sink.log.file_stats.decode_stats`) and ``partitions``
    (each partition column's typed value per file). A filter the evaluator cannot read at all may match
    everything.

    Example: ``file_verdicts(ds.field("day") == date(2024, 1, 1), stats, {"day": days}).may_match``.
    """
    n = len(stats.rows)
    columns = {
        name: _column_values(bounds.low, bounds.high, bounds.nulls, stats.rows) for name, bounds in stats.bounds.items()
    }
    for name, values in partitions.items():
        null = values.is_null().to_numpy(zero_copy_only=False)
        nan = _possible(pc.is_nan(values)) & ~null if pa.types.is_floating(values.type) else np.zeros(n, bool)
        columns[name] = _Values(values, values, ~null, null, nan)
    try:
        truth = _Evaluator(n, columns).truth(filter_tree(filter))
    except (pa.ArrowException, ValueError, KeyError, StopIteration):
        return FileVerdicts(_maybe(n), np.zeros(n, bool))
    return FileVerdicts(truth.true, ~truth.false & ~truth.null)


__all__ = ["FileVerdicts", "file_verdicts", "filter_columns", "filter_fields", "filter_tree"]
