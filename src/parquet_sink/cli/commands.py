"""The command line's commands: each calls the library (:mod:`parquet_sink.maintenance`) and prints what it
returns, as a table or (``--json``) for scripts. Imported only when a command runs (``--help`` stays fast)."""

from __future__ import annotations

import argparse
from typing import Any

from ..delta.sync import sync_delta_log
from ..errors import LogError, ParameterError
from ..iceberg.compare import recreate_iceberg
from ..iceberg.sync import is_table_identifier, sync_iceberg
from ..log.files import COMPACT_SUFFIX, HIDDEN_DIR
from ..maintenance import Output, RestartPlan, count_rows, doctor, optimize, read_output, vacuum, verify
from . import PROG
from .options import storage_options
from .output import emit, format_size, format_table, format_time, progress



def _cmd_ls(args: argparse.Namespace) -> int:
    """``ls PATH``: every batch as ``history`` tells it (runs of optimize-wait batches folded into one line), and
    the compaction and retention state."""
    output = read_output(args.path, storage_options=storage_options(args), compact_interval=args.compact_interval)
    # rows as the log records them; --rows reads the footers of batches it does not (Spark's, older versions')
    story = output.story(count_rows(output, progress) if args.rows else None)
    compacts = sorted(b for b, info in output.listing.items() if info.path.endswith(COMPACT_SUFFIX))
    batches = [
        {
            "batch": r.batch,
            "operation": r.operation,
            "files": r.files,  # still committed
            "rows": r.rows,  # added by the batch
            "bytes": r.bytes,
            "commit_time_ms": r.committed_ms,
            "query_id": r.query_id,
            "query_batch": r.query_batch,
            "note": r.note,
        }
        for r in story
    ]
    data = {
        "ok": True,
        "path": output.storage.display(output.storage.root),
        "latest_batch": output.latest,
        "compact_interval": output.log.compact_interval,
        "compact_batches": compacts,
        "oldest_batch": min(output.batches, default=None),
        "oldest_log_file": min(output.listing, default=None),
        "batches": batches,
        "warnings": [w for w in [output.spark_sink_behind()] if w],
    }
    headers = ["batch", "operation", "query / app", "version", "committed (UTC)", "rows added", "files now",
               "bytes now", "note"]
    table = format_table(headers, [_ls_line(run) for run in _folded(batches)])
    if output.latest is None:
        summary = f"{data['path']}: no batches committed yet"
    else:
        summary = (
            f"{data['path']}: {len(batches)} batches, latest {output.latest}; compact interval "
            f"{data['compact_interval']}; compact files: {', '.join(map(str, compacts)) or 'none'}; oldest log file: "
            f"{data['oldest_log_file']}. 'rows added': what each batch wrote; 'files now', 'bytes now': its files "
            "still committed (an optimize moves rows into its own batch's files)"
        )
    summary += "".join(f"\nwarning: {w}" for w in data["warnings"])
    emit(args, data, f"{table}\n{summary}" if batches else summary)
    return 0


def _folded(batches: list[dict]) -> list[list[dict]]:
    """``ls``'s lines: each batch alone, but a run of optimize-wait batches (empty) as one line."""
    runs: list[list[dict]] = []
    for b in batches:
        if runs and b["operation"] == "optimize-wait" and runs[-1][-1]["operation"] == "optimize-wait":
            runs[-1].append(b)
        else:
            runs.append([b])
    return runs


def _ls_line(run: list[dict]) -> list[object]:
    first, last = run[0], run[-1]
    if len(run) == 1:
        return [first["batch"], first["operation"] or "-", first["query_id"], first["query_batch"],
                format_time(first["commit_time_ms"]), first["rows"], first["files"], format_size(first["bytes"]),
                first["note"]]
    return [f"{first['batch']}-{last['batch']}", f"optimize-wait x{len(run)}", first["query_id"],
            f"{first['query_batch']}-{last['query_batch']}", format_time(last["commit_time_ms"]), 0, 0, format_size(0),
            "empty: bring the optimize after them to a compaction batch"]


def _cmd_show(args: argparse.Namespace) -> int:
    """``show PATH BATCH``: the entries of one batch."""
    output = read_output(args.path, storage_options=storage_options(args), compact_interval=args.compact_interval)
    batch = output.batches.get(args.batch)
    if batch is None:
        present = f"{min(output.batches)}..{max(output.batches)}" if output.batches else "none"
        raise LogError(
            f"batch {args.batch} is not in the log of {output.storage.display(output.storage.root)} (batches "
            f"present: {present}). Older batches written by Spark's own sink are part of their compact batch."
        )
    entries = [
        {
            "path": e.path,
            "size": e.size,
            "isDir": e.is_dir,
            "modificationTime": e.modification_time,
            "batchId": e.batch_id,
        }
        for e in batch.entries
    ]
    record = batch.record
    data = {
        "ok": True,
        "batch": batch.batch_id,
        "query_id": record.query_id if record else None,
        "query_batch": record.query_batch_id if record else None,
        "commit_time_ms": batch.committed_ms,
        "entries": entries,
    }
    header = (
        f"batch {batch.batch_id}: {len(batch.data_files)} files, {format_size(sum(e.size for e in batch.data_files))}, "
        f"committed {format_time(batch.committed_ms)} UTC"
        + (f" by query {record.query_id} (its batch {record.query_batch_id})" if record else "")
    )
    table = format_table(
        ["path", "size", "modificationTime", "batchId"],
        [[e["path"], e["size"], e["modificationTime"], e["batchId"]] for e in entries],
    )
    emit(args, data, f"{header}\n{table}")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    """``verify PATH``: committed files exist with their logged size; the log chain is intact."""
    report = verify(
        args.path, storage_options=storage_options(args), compact_interval=args.compact_interval, progress=progress,
        iceberg=_iceberg_table(args),
    )
    data = {
        "path": report.path,
        "ok": report.ok,
        "latest_batch": report.latest_batch,
        "files": report.files,
        "bytes": report.bytes,
        "problems": report.problems,
        "warnings": report.warnings,
    }
    if report.problems:
        text = f"{len(report.problems)} problem(s) in {report.path}:\n" + "\n".join(f"  - {p}" for p in report.problems)
    elif report.latest_batch is None:
        text = f"OK: {report.path}: no batches committed yet"
    else:
        text = (
            f"OK: {report.path}: log intact up to batch {report.latest_batch}, {report.files} committed files "
            f"({format_size(report.bytes)}) present with their logged sizes"
        )
    text += "".join(f"\nwarning: {w}" for w in report.warnings)
    emit(args, data, text)
    return 0 if report.ok else 1


def _cmd_vacuum(args: argparse.Namespace) -> int:
    """``vacuum PATH --older-than DURATION [--dry-run] [--include-files-before-log]``: delete orphan data
    files, the empty directories that leaves, and the staging directories and leases of dead attempts."""
    result = vacuum(
        args.path, args.older_than, dry_run=args.dry_run, allow_short_retention=args.allow_short_retention,
        include_files_before_log=args.include_before_log,
        storage_options=storage_options(args), progress=progress, iceberg=_iceberg_table(args),
    )
    plan, removed_dirs = result.plan, result.removed_dirs
    storage, orphans = plan.storage, plan.orphans
    total = result.bytes
    data = {
        "ok": True,
        "path": storage.display(storage.root),
        "dry_run": args.dry_run,
        "older_than": args.older_than,
        "files": [{"path": storage.display(i.path), "size": i.size, "modified_ms": i.mtime_ms} for i in orphans],
        "bytes": total,
        "younger_kept": len(plan.young),
        "in_flight_kept": len(plan.in_flight),
        "before_log_kept": len(plan.before_log),
        "delta_kept": len(plan.delta_kept),
        "iceberg_kept": len(plan.iceberg_kept),
        "iceberg_metadata": [storage.display(i.path) for i in plan.iceberg_stale],
        "replaced_kept": len(plan.replaced_kept),
        "nested_kept": len(plan.nested_kept),
        "removed_dirs": [storage.display(d) for d in removed_dirs],
        "dead_staging": [storage.display(d) for d in plan.dead_staging],
        "dead_leases": [storage.display(lease.path) for lease in plan.dead_leases],
        "orphaned_copies": [storage.display(i.path) for i in plan.orphaned_copies],
        "log_temps": [storage.display(i.path) for i in plan.log_temps],
    }
    verb = "would delete" if args.dry_run else "deleted"
    lines = [f"{verb} {len(orphans)} orphan file(s), {format_size(total)}, older than {args.older_than}"]
    lines += [f"  {storage.display(i.path)}  {format_size(i.size)}" for i in orphans]
    if removed_dirs:
        lines.append(f"removed {len(removed_dirs)} emptied director(y/ies)")
    if plan.dead_staging or plan.dead_leases:
        lines.append(
            f"{verb} {len(plan.dead_staging)} staging director(y/ies) and {len(plan.dead_leases)} lease(s) of dead "
            "attempts"
        )
    if plan.orphaned_copies:
        lines.append(
            f"{verb} {len(plan.orphaned_copies)} columnar cop(y/ies) of compact files Spark's log cleanup deleted, "
            f"{format_size(sum(i.size for i in plan.orphaned_copies))}"
        )
    if plan.log_temps:
        lines.append(f"{verb} {len(plan.log_temps)} temporary file(s) of log commits that never finished")
    if plan.iceberg_stale:
        lines.append(
            f"{verb} {len(plan.iceberg_stale)} Iceberg metadata file(s) (old metadata versions, manifest lists, "
            "manifests) no snapshot left needs"
        )
    if plan.young:
        lines.append(
            f"kept {len(plan.young)} unreferenced file(s) younger than {args.older_than}: they may belong to a "
            "batch being written now"
        )
    if plan.before_log:
        lines.append(
            f"kept {len(plan.before_log)} unreferenced file(s) older than the log's first commit: they may be data "
            "the output was created over; --include-files-before-log deletes them too"
        )
    if plan.delta_kept:
        lines.append(
            f"kept {len(plan.delta_kept)} file(s) a Delta version within the Delta log's retention (and "
            f"{args.older_than}) may read (time travel)"
        )
    if plan.iceberg_kept:
        lines.append(
            f"kept {len(plan.iceberg_kept)} file(s) an Iceberg snapshot within {args.older_than} (or of a catalog's "
            "table) references (time travel)"
        )
    if plan.replaced_kept:
        lines.append(
            f"kept {len(plan.replaced_kept)} file(s) an optimize replaced less than {args.older_than} ago: the "
            "snapshot before it (as_of_batch, as_of_time) still reads them"
        )
    if plan.nested_kept:
        lines.append(
            f"kept {len(plan.nested_kept)} file(s) of another output or Delta table nested in this one (a directory "
            "with a log of its own): vacuum that one by its own path"
        )
    if plan.in_flight:
        lines.append(
            f"kept {len(plan.in_flight)} unreferenced file(s) of batches in flight ({len(plan.live_leases)} lease(s) "
            f"under {HIDDEN_DIR}/leases; a lease ends with its batch's commit, when a restarted query or app commits "
            "that batch, or, an optimize's, when an optimize next commits)"
        )
    emit(args, data, "\n".join(lines))
    return 0


def _cmd_optimize(args: argparse.Namespace) -> int:
    """``optimize PATH [--target-file-size SIZE] [--partition K=V] [--sort-by COL | --z-order COL] [--dry-run]``: compact small
    files; prints files and bytes before and after."""
    partitions = {}
    for pair in args.partitions:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ParameterError(f"--partition {pair!r}: use COLUMN=VALUE, e.g. --partition day=2024-01-01")
        if name in partitions:
            raise ParameterError(f"--partition {name}= given twice ({partitions[name]!r}, {value!r}): a directory has one value")
        partitions[name] = value
    result = optimize(
        args.path, target_file_size=args.target_file_size, partitions=partitions or None, sort_by=args.sort_by,
        z_order=args.z_order,
        dry_run=args.dry_run, compression=args.compression, compact_interval=args.compact_interval,
        storage_options=storage_options(args), progress=progress, spark_sink_stopped=args.spark_sink_stopped,
        retention=args.retention, min_batches_to_retain=args.min_batches_to_retain, cleanup_delay=args.cleanup_delay,
        iceberg=_iceberg_table(args), time_zone=args.time_zone,
    )
    plan = result.plan
    storage = plan.storage
    data = {
        "ok": True,
        "path": storage.display(storage.root),
        "dry_run": result.dry_run,
        "committed": result.committed,
        "log_batch_id": result.log_batch_id,
        "target_file_size": plan.target_file_size,
        "files_before": plan.files_considered,
        "bytes_before": plan.bytes_considered,
        "bins": [
            {"partition": b.directory, "files": len(b.inputs), "bytes": b.bytes} for b in plan.bins
        ],
        "files_removed": plan.files_removed if result.dry_run else result.files_removed,
        "bytes_removed": plan.bytes_removed if result.dry_run else result.bytes_removed,
        "files_added": result.files_added,
        "bytes_added": result.bytes_added,
        "rows": result.rows,
        "empty_batches": result.padding_batches,
        "lost_races": result.conflicts,
        "abandoned_bins": len(result.abandoned),
        "iceberg_log_batch": None if result.iceberg is None else result.iceberg.log_batch,
        "seconds": round(result.seconds, 3),
    }
    where = data["path"]
    if result.dry_run:
        text = (
            f"would rewrite {plan.files_removed} of {plan.files_considered} committed file(s), "
            f"{format_size(plan.bytes_removed)}, into {len(plan.bins)} file(s) near {format_size(plan.target_file_size)}"
        )
        text += "".join(f"\n  {b.directory or '/'}: {len(b.inputs)} files, {format_size(b.bytes)}" for b in plan.bins)
    elif not result.committed:
        text = (
            f"nothing to optimize in {where}: no partition holds two files smaller than {format_size(plan.target_file_size)}"
            if not plan.bins else f"nothing committed: other writers removed the inputs of all {len(plan.bins)} bin(s) first"
        )
    else:
        after = plan.files_considered - result.files_removed + result.files_added
        text = (
            f"optimized {where} as log batch {result.log_batch_id} in {result.seconds:.1f}s: "
            f"{result.files_removed} file(s), {format_size(result.bytes_removed)} -> {result.files_added} file(s), "
            f"{format_size(result.bytes_added)} ({result.rows} rows)\n"
            f"committed files: {plan.files_considered} before, {after} after"
        )
        if result.padding_batches:
            text += f"\n{len(result.padding_batches)} empty batch(es) committed to reach the compaction batch"
        if result.abandoned:
            text += f"\n{len(result.abandoned)} bin(s) given up: another writer removed one of their inputs first"
    if result.iceberg is not None:
        text += f"\nIceberg table in step: mirrors log batch {result.iceberg.log_batch}"
    emit(args, data, text)
    return 0


def _cmd_delta_sync(args: argparse.Namespace) -> int:
    """``delta-sync PATH``: the Delta log follows ``_spark_metadata``."""
    result = sync_delta_log(
        args.path, storage_options=storage_options(args), time_zone=args.time_zone, recreate=args.recreate
    )
    data = {
        "ok": True,
        "path": result.path,
        "log_batch": result.log_batch_id,
        "previous_log_batch": result.previous_log_batch_id,
        "delta_version": result.delta_version,
        "committed": result.committed,
        "created": result.created,
        "added": result.added,
        "removed": result.removed,
        "duplicates": result.duplicates,
    }
    if result.log_batch_id is None or result.delta_version is None:
        text = f"{result.path}: no committed file yet, no Delta log written"
    elif result.committed:
        text = (
            f"{result.path}: Delta log {'created' if result.created else 'updated'} at version {result.delta_version}: "
            f"mirrors log batch {result.log_batch_id} (was {result.previous_log_batch_id}), {result.added} file(s) "
            f"added, {result.removed} removed"
        )
    else:
        text = f"{result.path}: Delta log version {result.delta_version} already mirrors log batch {result.log_batch_id}"
    emit(args, data, text)
    return 0


def _catalog(args: argparse.Namespace) -> dict[str, str] | None:
    """The catalog properties of ``--catalog-uri`` and ``--catalog-prop``; None for neither."""
    properties = dict(args.catalog_prop)
    if args.catalog is not None:  # --catalog-uri
        properties["uri"] = args.catalog
    return properties or None


def _iceberg_table(args: argparse.Namespace) -> dict[str, Any] | None:
    """The catalog table of ``--catalog-uri``/``--catalog-prop`` and ``--table``, as the library's ``iceberg=``
    takes it; None for none of them (the table kept without a catalog, if any). ParameterError for one without
    the other."""
    catalog = _catalog(args)
    if catalog is None and args.table is None:
        return None
    if catalog is None or args.table is None:
        raise ParameterError(
            f"{'--catalog-uri (or --catalog-prop)' if catalog is None else '--table'} is missing: pass both "
            "--catalog-uri (or --catalog-prop) and --table, or neither (the Iceberg metadata kept with the output). "
            "Nothing was changed."
        )
    if not is_table_identifier(args.table):  # in the options' words (the library's names iceberg['table'])
        raise ParameterError(
            f"with --catalog-uri (or --catalog-prop), --table is an identifier 'namespace.name', not {args.table!r}. "
            "Nothing was changed."
        )
    return {"catalog": catalog, "table": args.table}


def _cmd_iceberg_sync(args: argparse.Namespace) -> int:
    """``iceberg-sync PATH``: the Iceberg table follows ``_spark_metadata`` (catalog properties never printed)."""
    target = _iceberg_table(args) or {}
    result = (recreate_iceberg if args.recreate else sync_iceberg)(
        args.path, catalog=target.get("catalog"), table=target.get("table"), storage_options=storage_options(args),
        time_zone=args.time_zone,
    )
    data = {
        "ok": True,
        "path": result.path,
        "table": args.table,
        "metadata_location": result.metadata_location,
        "snapshot_id": result.snapshot_id,
        "log_batch": result.log_batch,
        "previous_log_batch": result.previous_log_batch,
        "snapshots": result.snapshots,
        "created": result.created,
        "added": result.files_added,
        "removed": result.files_removed,
    }
    name = f"Iceberg table {args.table}" if args.table else "Iceberg table"
    if result.metadata_location is None:
        text = f"{result.path}: no committed file yet, no Iceberg table written"
    elif result.snapshots:
        text = (
            f"{result.path}: {name} {'created' if result.created else 'updated'}: mirrors log batch "
            f"{result.log_batch} (was {result.previous_log_batch}) in {result.snapshots} snapshot(s), "
            f"{result.files_added} file(s) added, {result.files_removed} removed\nmetadata: {result.metadata_location}"
        )
    else:
        text = f"{result.path}: {name} already mirrors log batch {result.log_batch}\nmetadata: {result.metadata_location}"
    emit(args, data, text)
    return 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    """``doctor PATH --checkpoint CKPT``: what a restart from the checkpoint will do to the output;
    ``doctor PATH --app-id X --version V``: what rerunning ``write_batch`` of app X at version V will do."""
    if (args.checkpoint is None) == (args.app_id is None) or (args.app_id is None) != (args.app_version is None):
        raise ParameterError(
            "give --checkpoint CKPT (a streaming query) or --app-id ID --version V (a write_batch app), not both"
        )
    diagnosis = doctor(
        args.path, checkpoint=args.checkpoint, app_id=args.app_id, version=args.app_version,
        storage_options=storage_options(args), on_foreign_query=args.on_foreign_query,
        batch_id_only=args.batch_id_only, spark_sink_stopped=args.spark_sink_stopped,
        compact_interval=args.compact_interval, retention=args.retention,
        min_batches_to_retain=args.min_batches_to_retain, cleanup_delay=args.cleanup_delay,
        iceberg=_iceberg_table(args),
    )
    output, ckpt, plan = diagnosis.output, diagnosis.checkpoint, diagnosis.plan
    mirrors = {"mirror_problems": diagnosis.mirror_problems, "mirror_warnings": diagnosis.mirror_warnings}
    said = [f"problem: {p}" for p in diagnosis.mirror_problems] + [f"warning: {w}" for w in diagnosis.mirror_warnings]
    if ckpt is None:
        return _doctor_app(args, output, plan, diagnosis.log_warnings, mirrors, said)
    queries = output.queries()
    data = {
        "path": output.storage.display(output.storage.root),
        "checkpoint": {"query_id": ckpt.query_id, "offsets": ckpt.offsets, "commits": ckpt.commits},
        "log": {
            "latest_batch": output.latest,
            "queries": [
                {"query_id": q, "log_batch": r.log_batch_id, "query_batch": r.query_batch_id}
                for q, r in queries.items()
            ],
        },
        "next_batch": plan.batch,
        "replay": plan.replay,
        "action": plan.action,
        "log_batch": plan.log_batch,
        "ok": plan.ok,
        "message": plan.message,
        "warnings": plan.warnings,
        "log_warnings": diagnosis.log_warnings,
        **mirrors,
        "spark_sink": None if diagnosis.spark_sink is None else {
            "next_batch": diagnosis.spark_sink.batch, "lost": list(diagnosis.spark_sink.lost),
            "message": diagnosis.spark_sink.message,
        },
    }
    committers = "; ".join(
        f"query {q} up to its batch {r.query_batch_id} (log batch {r.log_batch_id})" for q, r in queries.items()
    )
    if ckpt.query_id is None:
        # named: a mistyped path looks like a new query's
        checkpoint = f"checkpoint: none yet at {args.checkpoint} (a new query: Spark writes it when the query starts)"
    elif ckpt.offsets is None:
        checkpoint = f"checkpoint: query {ckpt.query_id}, no offsets yet (no batch planned)"
    else:
        commits = "no commit yet" if ckpt.commits is None else f"commits up to batch {ckpt.commits}"
        checkpoint = f"checkpoint: query {ckpt.query_id}, offsets up to batch {ckpt.offsets}, {commits}"
    if output.latest is None:
        log = "output log: empty"
    else:
        committers = committers or "Spark's own file sink (no query ids)"
        log = f"output log: newest batch {output.latest}, committed by {committers}"
    lines = [checkpoint, log, plan.message] + [f"warning: {w}" for w in plan.warnings + diagnosis.log_warnings] + said
    if diagnosis.spark_sink is not None:
        lines.append(f"instead of ParquetSink: {diagnosis.spark_sink.message}")
    emit(args, data, "\n".join(lines))
    return 0 if plan.ok else 1


def _doctor_app(
    args: argparse.Namespace, output: Output, plan: RestartPlan, log_warnings: list[str],
    mirrors: dict[str, list[str]], said: list[str],
) -> int:
    own = output.queries().get(args.app_id)
    data = {
        "path": output.storage.display(output.storage.root),
        "app_id": args.app_id,
        "version": args.app_version,
        "committed_version": None if own is None else own.query_batch_id,
        "committed_log_batch": None if own is None else own.log_batch_id,
        "latest_batch": output.latest,
        "action": plan.action,
        "log_batch": plan.log_batch,
        "ok": plan.ok,
        "message": plan.message,
        "warnings": plan.warnings,
        "log_warnings": log_warnings,
        **mirrors,
    }
    log = "output log: empty" if output.latest is None else f"output log: newest batch {output.latest}"
    emit(args, data, "\n".join([log, plan.message] + [f"warning: {w}" for w in plan.warnings + log_warnings] + said))
    return 0 if plan.ok else 1
