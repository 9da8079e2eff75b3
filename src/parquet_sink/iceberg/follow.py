"""The writers' side of the Iceberg mirror (the counterpart of Delta UniForm's Iceberg metadata written after
every Delta commit): what ``iceberg=`` of :class:`~parquet_sink.ParquetSink` and
:func:`~parquet_sink.write_batch` accepts (:func:`iceberg_target`), the sync after each commit whose failure is
logged, never raised (:func:`sync_after_commit`, as ``delta_log=True``'s), and the Iceberg table as the
writers' check before a commit sees it (:data:`ICEBERG`: what Iceberg cannot hold, refused by
:func:`~parquet_sink.table_formats.refuse_before_commit` with the Delta mirror's rules).

Example::

    >>> iceberg_target({"catalog": {"type": "sql", "uri": "sqlite:///c.db"}, "table": "db.events"}, "ParquetSink")
    IcebergTarget(catalog={'type': 'sql', 'uri': 'sqlite:///c.db'}, table='db.events')
"""

from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..errors import ParameterError
from ..table_formats import TableFormat
from .errors import IcebergRefusalError
from .sync import ICEBERG_DIR, METADATA_DIR, IcebergSyncResult, is_table_identifier, require_pyiceberg, sync_iceberg

logger = logging.getLogger(__name__)

_KEYS = ("catalog", "table")
_SECRET = re.compile(r"secret|password|token|credential|key", re.IGNORECASE)  # catalog properties never logged


@dataclass(frozen=True)
class IcebergTarget:
    """Where a writer's Iceberg table lives: ``catalog`` (a pyiceberg ``Catalog`` or its properties) and
    ``table`` (``"ns.name"``), or neither: the metadata alone, with the output."""

    catalog: Any = None
    table: str | None = None

    def cli(self, path: str) -> str:
        """The ``parquet-sink iceberg-sync`` command that brings this table in step, for a log line (catalog
        properties as ``--catalog-prop``, the values of those that look secret as ``...``; a Catalog object is
        named by its name)."""
        words = ["parquet-sink", "iceberg-sync", path]
        if isinstance(self.catalog, Mapping):
            words += [w for k, v in self.catalog.items()
                      for w in ("--catalog-prop", f"{k}={'...' if _SECRET.search(k) else v}")]
        elif self.catalog is not None:
            words += ["--catalog-prop", f"name={getattr(self.catalog, 'name', '...')}"]
        if self.table is not None:
            words += ["--table", self.table]
        return shlex.join(words)


def _shown(value: Any) -> str:
    """``value`` for an error message: a mapping by its keys only (its values may be catalog secrets)."""
    return f"a dict with the keys {sorted(map(str, value))}" if isinstance(value, Mapping) else repr(value)


def iceberg_target(value: Any, call: str) -> IcebergTarget | None:
    """The Iceberg table a writer keeps in step, from its ``iceberg=`` argument: None/False (none), True (the
    metadata alone, with the output), or a mapping with ``catalog`` (a pyiceberg ``Catalog`` or its properties:
    ``{"type": "sql", "uri": "sqlite:///catalog.db"}``) and ``table`` (``"ns.name"``). ParameterError for
    anything else; IcebergDependencyError without pyiceberg (named by ``call``).

    Example: ``iceberg_target(True, "ParquetSink('/data/events')")`` -> ``IcebergTarget(catalog=None, table=None)``.
    """
    if value is None or value is False:
        return None
    if value is True:
        require_pyiceberg(f"{call} with iceberg=True")
        return IcebergTarget()
    if not isinstance(value, Mapping) or set(value) != set(_KEYS):
        raise ParameterError(
            f"iceberg must be True (the table's metadata with the output) or a dict with exactly the keys "
            f"'catalog' and 'table' (such as {{'catalog': {{'type': 'sql', 'uri': 'sqlite:///catalog.db'}}, "
            f"'table': 'db.events'}}), not {_shown(value)}. Nothing was done."
        )
    catalog, table = value["catalog"], value["table"]
    if not is_table_identifier(table):
        raise ParameterError(f"iceberg['table'] names the table as 'namespace.name', not {table!r}. Nothing was done.")
    require_pyiceberg(f"{call} with iceberg={{'catalog': ..., 'table': {table!r}}}")
    from pyiceberg.catalog import Catalog

    if isinstance(catalog, Mapping) and catalog and all(isinstance(k, str) for k in catalog):
        return IcebergTarget(dict(catalog), table)
    if isinstance(catalog, Catalog):
        return IcebergTarget(catalog, table)
    raise ParameterError(
        f"iceberg['catalog'] must be a pyiceberg Catalog or its properties (a non-empty dict such as "
        f"{{'type': 'sql', 'uri': 'sqlite:///catalog.db'}}), not {catalog!r}. Nothing was done."
    )


def sync_after_commit(
    path: str, storage_options: Mapping[str, Any] | None, target: IcebergTarget, what: str, time_zone: str = "UTC"
) -> IcebergSyncResult | None:
    """The writers' hook (``iceberg=``), called on the driver after a ``_spark_metadata`` commit (or a replay's
    skip): :func:`~parquet_sink.sync_iceberg`, whose failure never fails the batch (committed already): it is
    logged as a WARNING with the command that catches up, and the next batch's sync catches up. Returns None
    when it failed.

    Example: ``sync_after_commit("/data/events", None, IcebergTarget(), "batch 7")``.
    """
    try:
        return sync_iceberg(path, catalog=target.catalog, table=target.table,
                            storage_options=dict(storage_options or {}), time_zone=time_zone)
    except Exception as exc:  # the batch is committed: an Iceberg failure must not fail or retry it
        logger.warning(
            "%s: %s is committed, but the Iceberg table could not follow (%s: %s); Iceberg readers see the previous "
            "snapshot until the next batch catches up, or run `%s`",
            path, what, type(exc).__name__, exc, target.cli(path),
        )
        return None


def _refusal(typ: pa.DataType) -> str | None:
    """Why a column of Arrow type ``typ`` (its own type, not its children's) has no Iceberg type pyiceberg reads
    back as written, or None (format 2, as :func:`~parquet_sink.sync_iceberg` creates tables)."""
    if pa.types.is_unsigned_integer(typ) and typ.bit_width > 16:
        return (f"{typ} (unsigned: Iceberg integers are signed, and pyiceberg would declare it as the signed type of "
                "the same width, which polars refuses); cast it to a wider signed integer or a decimal")
    if pa.types.is_timestamp(typ) and typ.unit == "ns":
        return f"{typ} (Iceberg format 2 timestamps hold microseconds); cast it to timestamp('us')"
    if (pa.types.is_time(typ) and typ != pa.time64("us")) or pa.types.is_duration(typ) or pa.types.is_interval(typ):
        return f"{typ} (Iceberg has no duration or interval type, and times in microseconds only); cast it to int64 or string"
    if pa.types.is_null(typ):
        return ("null (a column of nulls only: its files store Parquet's null type, which pyiceberg's reader refuses "
                "in a format 2 table, and the output's schema keeps the type for every later batch); give it the type "
                "its values will have (pa.nulls(n, pa.int64()), in Spark lit(None).cast('bigint'))")
    if pa.types.is_date64(typ):
        return f"{typ} (Iceberg dates are days); cast it to date32"
    if pa.types.is_decimal(typ) and (typ.precision > 38 or isinstance(typ, pa.Decimal256Type)):
        return f"{typ} (pyiceberg holds decimal128 of at most 38 digits); cast it to decimal128"
    if isinstance(typ, pa.ListViewType | pa.LargeListViewType) or pa.types.is_union(typ) or pa.types.is_run_end_encoded(typ):
        return f"{typ} (no Iceberg type)"
    return None


def type_problems(fields: list[pa.Field], path: str = "") -> list[tuple[str, str]]:
    """(column, why) of every column of ``fields`` (at ``path``: ``"s."`` for a struct's fields, at any depth)
    whose type Iceberg lacks: the rule pyiceberg's own conversion (``_pyarrow_to_schema_without_ids``) follows,
    without importing it (a writer without pyiceberg checks too), and unsigned 32- and 64-bit integers, which it
    converts to a signed type of the same width.

    Example: ``type_problems(list(pa.schema([("d", pa.duration("us"))])))`` -> ``[('d', 'duration[us] (...)')]``.
    """
    problems = []
    for field in fields:
        name = f"{path}{field.name}"
        typ = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
        why = _refusal(typ)
        if why is not None:
            problems.append((name, f"is {why}"))
        elif pa.types.is_struct(typ):
            problems += type_problems(list(typ), f"{name}.")
        elif pa.types.is_map(typ):
            problems += type_problems([typ.key_field.with_name("key"), typ.item_field.with_name("value")], f"{name}.")
        elif pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
            problems += type_problems([typ.value_field.with_name("element")], f"{name}.")
    return problems


# the Iceberg table as the writers' check before a commit sees it: kept when the writer passes iceberg= or the
# output holds ICEBERG_DIR (a sync made it, with or without a catalog); pyiceberg reads INT96 as nanoseconds. The
# table optimize follows unnamed is the one without catalog (METADATA_DIR): a catalog's is synced only when named
ICEBERG = TableFormat(
    "an Iceberg table", ICEBERG_DIR, lambda schema: type_problems(list(schema)), IcebergRefusalError, int96_nanos=True,
    followed=METADATA_DIR,
)


__all__ = ["ICEBERG", "IcebergTarget", "iceberg_target", "sync_after_commit", "type_problems"]
