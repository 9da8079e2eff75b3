"""The schema rule of an output, shared by the Spark sink and :func:`parquet_sink.write_batch`: a batch may
add new nullable columns; it may not drop a column, change a column's type or change the partition columns.

The committed schema is read from one committed data file (the newest), found through the reader's path
rule, so a copied or moved output still answers.

Example::

    >>> schema_problems(pa.schema([("id", pa.int64())]), (), pa.schema([("id", pa.string())]), ())
    ["column 'id' changed type from int64 to string"]
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence, Set as AbstractSet

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import ParameterError, SchemaMismatchError
from ..log.snapshot import full_paths, resolve_paths
from ..parquet_read import naive_timestamps, read_schema
from ..partitioning import parse_partition_path
from ..storage.filesystem import Storage


def _normalise(typ: pa.DataType) -> pa.DataType:
    """``typ`` as far as the schema rule compares it, at every depth (struct fields, map keys and values,
    list elements): timestamp units dropped (files of other writers may hold ms or ns) and zones but for whether
    there is one (Spark's ``TimestampType``, an instant, against its ``TimestampNTZType``: a committed INT96 reads
    zoned here, :func:`read_committed_schema`), large/view and small variants alike, durations as the INT64
    Parquet stores them (Spark's writer writes a day-time interval as a plain INT64, the Arrow path as a duration),
    nested fields nullable."""
    if pa.types.is_large_string(typ) or pa.types.is_string_view(typ):
        return pa.string()
    if pa.types.is_large_binary(typ) or pa.types.is_binary_view(typ):
        return pa.binary()
    if pa.types.is_timestamp(typ):
        return pa.timestamp("us", "UTC" if typ.tz else None)
    if pa.types.is_duration(typ):
        return pa.int64()
    if pa.types.is_large_list(typ) or pa.types.is_list(typ):
        return pa.list_(_normalise(typ.value_type))
    if pa.types.is_map(typ):
        return pa.map_(_normalise(typ.key_type), _normalise(typ.item_type))
    if pa.types.is_struct(typ):
        return pa.struct([pa.field(f.name, _normalise(f.type)) for f in typ])
    return typ


def _zone_hint(old: pa.DataType, new: pa.DataType) -> str:
    """What to do when the types ``old`` and ``new`` differ only in whether timestamps are zoned; else nothing."""
    if _normalise(naive_timestamps(old)) != _normalise(naive_timestamps(new)):
        return ""
    if _normalise(old) == _normalise(naive_timestamps(old)):
        return (
            " (the committed timestamps have no time zone, Spark's TIMESTAMP_NTZ, these have one: pass them as naive "
            "wall-clock times, e.g. pandas .dt.tz_localize(None) or a cast to timestamp('us'), in Spark a cast to "
            "timestamp_ntz)"
        )
    return " (the committed timestamps are instants, Spark's TIMESTAMP, these have no time zone: in Spark a cast to timestamp)"


def schema_problems(
    committed: pa.Schema,
    committed_partitions: tuple[str, ...] | None,
    data_schema: pa.Schema,
    partition_by: tuple[str, ...],
) -> list[str]:
    """What makes a batch with data columns ``data_schema`` (partition columns left out) and partition
    columns ``partition_by`` incompatible with the committed data; empty when it may be committed.

    Example: ``schema_problems(old, ("day",), new, ())`` -> ``["partition columns [] differ from ..."]``.
    """
    problems = []
    if committed_partitions is not None and committed_partitions != partition_by:
        problems.append(
            f"partition columns {list(partition_by)} differ from the committed {list(committed_partitions)}"
        )
    new_fields = {f.name: f for f in data_schema}
    for old in committed:
        new = new_fields.get(old.name)
        if new is None:
            problems.append(f"column {old.name!r} ({old.type}) is missing")
        elif _normalise(new.type) != _normalise(old.type):
            problems.append(f"column {old.name!r} changed type from {old.type} to {new.type}" + _zone_hint(old.type, new.type))
    added = [f for f in data_schema if f.name not in committed.names]
    problems += [f"new column {f.name!r} is not nullable" for f in added if not f.nullable]
    return problems


def committed_zones(typ: pa.DataType, committed: pa.DataType) -> pa.DataType:
    """``typ`` (a batch column's) with each naive timestamp zoned UTC where the ``committed`` column's is zoned, at
    any depth: the column holds instants (Spark's ``TimestampType``, as its INT96 files, which pyarrow and
    :func:`~parquet_sink.read_committed` read naive, in UTC), so naive values are those instants in UTC and are
    written as such. A zoned batch against a naive committed column (Spark's ``TimestampNTZType``) stays as it is,
    for :func:`schema_problems` to refuse: which wall clock it meant is not known.

    Example: ``committed_zones(pa.timestamp("us"), pa.timestamp("us", "UTC"))`` -> ``timestamp[us, tz=UTC]``.
    """
    if pa.types.is_timestamp(typ) and pa.types.is_timestamp(committed):
        return pa.timestamp(typ.unit, "UTC") if committed.tz and not typ.tz else typ
    if pa.types.is_struct(typ) and pa.types.is_struct(committed):
        old = {f.name: f.type for f in committed}
        return pa.struct([f.with_type(committed_zones(f.type, old[f.name])) if f.name in old else f for f in typ])
    if (pa.types.is_list(typ) or pa.types.is_large_list(typ)) and (
        pa.types.is_list(committed) or pa.types.is_large_list(committed)
    ):
        element = typ.value_field.with_type(committed_zones(typ.value_type, committed.value_type))
        return pa.list_(element) if pa.types.is_list(typ) else pa.large_list(element)
    if pa.types.is_map(typ) and pa.types.is_map(committed):
        key = typ.key_field.with_type(committed_zones(typ.key_type, committed.key_type))
        return pa.map_(key, typ.item_field.with_type(committed_zones(typ.item_type, committed.item_type)), typ.keys_sorted)
    return typ


def read_committed_schema(
    storage: Storage, uri: pa.ChunkedArray, batch_id: pa.ChunkedArray
) -> tuple[pa.Schema, tuple[str, ...]] | None:
    """The data schema and partition columns of the committed file ``uri`` (as logged, one row) of batch
    ``batch_id``, its timestamps zoned where Spark reads instants (INT96 too) and naive where it reads
    ``TimestampNTZ``; None if that file is missing (the reader and ``verify`` report that).

    Example: ``read_committed_schema(storage, last.column("path"), last.column("batchId"))``.
    """
    relative, outside = resolve_paths(storage, uri, batch_id, allow_outside_root=True)
    try:
        with storage.open(full_paths(storage, relative, outside)[0].as_py(), "rb") as fh:
            schema = read_schema(fh, int96_zoned=True)
    except FileNotFoundError:
        return None
    return schema, tuple(name for name, _ in parse_partition_path(relative[0].as_py()))


# Parquet logical types Spark's reader refuses ("Illegal Parquet type", "The data type TIME is not supported"), for
# the whole output, not only the column: what to cast a column to instead.
_SPARK_UNREADABLE = {"FLOAT16": "float32", "TIME": "int64 or string", "UUID": "binary or string"}
_SPARK_MAX_PRECISION = 38


def _parquet_schema(schema: pa.Schema) -> pq.ParquetSchema | None:
    """The Parquet schema pyarrow's writer writes for ``schema`` (an empty file in memory: ~0.5 ms), or None when
    it has no Parquet type for a column (a union, a run-end encoded array, an interval)."""
    buffer = pa.BufferOutputStream()
    try:
        pq.ParquetWriter(buffer, schema).close()
    except pa.ArrowNotImplementedError:
        return None
    return pq.read_metadata(pa.BufferReader(buffer.getvalue())).schema


def check_storable(schema: pa.Schema, what: str, where: str) -> None:
    """SchemaMismatchError naming ``what`` (the write), ``where`` (the output) and each column of ``schema`` that
    Parquet cannot hold, or that Spark cannot read in the file pyarrow writes for it (FLOAT16, TIME, UUID, a decimal
    over 38 digits, at any depth: named by its Parquet path, ``s.x``), with what to cast it to; before anything is
    written. Spark refuses such a file for the whole output, so one batch would make every `spark.read.parquet` of
    it fail. Judged from the Parquet schema pyarrow writes for ``schema`` (an empty file in memory: ~0.5 ms).

    Example: ``check_storable(pa.schema([("f", pa.float16())]), "version 3 of app 'a'", "/data/out")`` raises
    SchemaMismatchError ("... Spark cannot read column 'f' (FLOAT16): cast it to float32 ...").
    """
    stored = _parquet_schema(schema)
    if stored is None:
        unheld = [f"{f.name!r} ({f.type})" for f in schema if _parquet_schema(pa.schema([f])) is None]
        raise SchemaMismatchError(
            f"{what} to {where}: Parquet cannot hold column {', '.join(unheld)}: no Parquet type stores it. Cast it "
            "to one Parquet and Spark hold (a union to a struct, run-end encoded values to their plain type, an "
            "interval to a struct of integers or a string). Nothing was written."
        )
    problems = []
    for column in stored:
        logical = column.logical_type.type
        if logical in _SPARK_UNREADABLE:
            problems.append(f"column {column.path!r} ({logical}): cast it to {_SPARK_UNREADABLE[logical]}")
        elif logical == "DECIMAL" and column.precision > _SPARK_MAX_PRECISION:
            problems.append(
                f"column {column.path!r} (a decimal of {column.precision} digits, over Spark's {_SPARK_MAX_PRECISION}): "
                "cast it to a decimal of at most 38 digits, or to string"
            )
    if problems:
        raise SchemaMismatchError(
            f"{what} to {where}: Spark cannot read " + "; ".join(problems) + ". `spark.read.parquet` refuses such a "
            "file for the whole output, not only the column. Nothing was written."
        )


def check_partition_by(partition_by: object) -> tuple[str, ...]:
    """``partition_by`` as a tuple of column names (None: none), checked before anything is written, for the
    sink and ``write_batch`` alike: ParameterError for a string (``"day"`` where ``["day"]`` is meant, which
    would partition by each letter), a name that is not a string, or a name given twice.

    Example: ``check_partition_by(["day"]) == ("day",)``; ``check_partition_by("day")`` raises ParameterError.
    """
    if partition_by is None:
        return ()
    if isinstance(partition_by, (str, bytes)):
        raise ParameterError(
            f"partition_by must be a list of column names, got the string {partition_by!r}: write "
            f"partition_by=[{partition_by!r}]"
        )
    if isinstance(partition_by, AbstractSet):
        raise ParameterError(
            f"partition_by must be a list of column names, got a set {partition_by!r}: a set has no order, and the "
            "directory order (day=.../hour=...) must be the same in every run. Pass a list."
        )
    try:
        names = tuple(partition_by)  # type: ignore[call-overload]
    except TypeError:
        raise ParameterError(f"partition_by must be a list of column names, got {partition_by!r}") from None
    if not all(isinstance(name, str) and name for name in names):
        raise ParameterError(f"partition_by must be a list of column names (non-empty strings), got {list(names)}")
    if len({name.lower() for name in names}) != len(names):  # as Spark compares names (spark.sql.caseSensitive=false)
        raise ParameterError(f"partition_by names a column twice (names are compared case-insensitively): {list(names)}")
    return names


def check_partition_columns(incoming: pa.Schema, partition_by: Sequence[str], what: str, where: str) -> None:
    """Spark's rules for the partition columns of a batch with columns ``incoming``, before anything is
    written: each exists and holds atomic values (no struct, list or map), and at least one column is left for the data files (Spark: "Cannot use all columns
    for partition columns"; files without columns would hold no rows for any reader). SchemaMismatchError
    naming ``what`` (the batch) and ``where`` (the output) otherwise.

    Example: ``check_partition_columns(pa.schema([("day", pa.string())]), ["day"], "batch 3", "/data/out")``
    raises SchemaMismatchError.
    """
    missing = [c for c in partition_by if c not in incoming.names]
    if missing:
        guesses = {c: [n for n in incoming.names if n.lower() == c.lower()][:1]
                   or difflib.get_close_matches(c, incoming.names, n=1, cutoff=0.6) for c in missing}
        hint = "".join(f" Did you mean {g[0]!r} for {c!r}?" for c, g in guesses.items() if g)
        raise SchemaMismatchError(
            f"{what} of {where}: partition columns {missing} are not in the data's columns {incoming.names}.{hint} "
            "Fix partition_by or the data. Nothing was committed."
        )
    nested = {c: str(incoming.field(c).type) for c in partition_by if pa.types.is_nested(incoming.field(c).type)}
    if nested:
        raise SchemaMismatchError(
            f"{what} of {where}: partition columns {nested} hold nested values; a directory name holds one atomic "
            "value (Spark refuses them too). Partition by atomic columns. Nothing was written."
        )
    if partition_by and not [name for name in incoming.names if name not in partition_by]:
        raise SchemaMismatchError(
            f"{what} of {where}: cannot use all columns {incoming.names} for partition columns (as Spark refuses): "
            "the data files would hold no column and every reader would see 0 rows. Keep at least one column out "
            "of partition_by. Nothing was written."
        )


def check_batch_schema(
    incoming: pa.Schema,
    partition_by: Sequence[str],
    committed: tuple[pa.Schema, Sequence[str]] | None,
    what: str,
    where: str,
) -> pa.Schema:
    """The schema rule of the sink and ``write_batch``, before anything of a batch is committed: its partition
    columns are allowed (:func:`check_partition_columns`), and its data columns fit the ``committed`` data (its
    data schema and partition columns; None when nothing is committed yet) as :func:`schema_problems` says.
    Returns the batch's data schema (partition columns apart); SchemaMismatchError naming ``what`` (the batch)
    and ``where`` (the output) otherwise.

    Example: ``check_batch_schema(pa.schema([("id", pa.int64())]), [], None, "batch 3", "/data/out")`` -> ``id: int64``.
    """
    check_partition_columns(incoming, partition_by, what, where)
    data_schema = pa.schema([f for f in incoming if f.name not in partition_by])
    problems = [] if committed is None else schema_problems(committed[0], committed[1], data_schema, partition_by)
    if problems:
        raise SchemaMismatchError(
            f"{what} is incompatible with the data committed to {where}: " + "; ".join(problems)
            + ". Nothing was committed. Only new nullable columns may be added; write incompatible data to a "
            "new output path (or cast the columns back to the committed types)."
        )
    return data_schema

