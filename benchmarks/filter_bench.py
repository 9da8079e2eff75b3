"""Section 7 ("filter"): row counts and selective filtered reads against delta-rs on the same files.

An output of ``files`` small files (``ROWS_PER_FILE`` rows each, ``id`` ascending, so each file holds one id
range) written by ``write_batch`` in ten appends, and a Delta log of the same files made by ``sync_delta_log``.
Timed, interleaved repeats, each reader from scratch (no cached table or snapshot), each timed call right after an
untimed one of the same reader (the first call after another engine's long scan in the same process pays for its
aftermath, docs/performance.md):

* count: ``count_committed(out)`` against ``DeltaTable(out).to_pyarrow_dataset().count_rows()``;
* filtered read, 1% of the files match (a range of ids): ``read_committed(out, filter=f)`` against
  ``DeltaTable(out).to_pyarrow_dataset().to_table(filter=f)``;
* both again against delta-rs's DataFusion engine (``QueryBuilder``, SQL ``count(*)`` and ``WHERE``), which
  prunes files by the statistics of the Delta log, as ours prunes by those of ``_spark_metadata``.

No Spark. Standalone: ``python -m benchmarks.filter_bench [--files 10000,100000] [--repeats 3] [--moto]`` prints
the markdown section (``--moto``: on a moto S3 server the tests' helper starts, instead of local disk);
``python -m benchmarks.run --sections filter`` puts the local one in RESULTS.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.dataset as ds

from parquet_sink import Storage, count_committed, read_committed, sync_delta_log, write_batch

from .common import Stat, ratio_stat, timed

logger = logging.getLogger("benchmarks.filter")

ROWS_PER_FILE = 10
APPENDS = 10


@dataclass
class FilterResults:
    files: list[int]
    where: str = "local disk"
    times: dict[tuple[str, str, int], Stat] = field(default_factory=dict)  # (reader, "count"/"filter", files)
    build_seconds: dict[int, float] = field(default_factory=dict)


def build(out: str, files: int, options: dict | None = None) -> None:
    """``files`` files of ``ROWS_PER_FILE`` rows in ``APPENDS`` write_batch appends, then the Delta log."""
    per_append = files // APPENDS
    for version in range(APPENDS):
        start = version * per_append * ROWS_PER_FILE
        ids = pa.array(range(start, start + per_append * ROWS_PER_FILE), pa.int64())
        table = pa.table({"id": ids, "v": pa.compute.multiply(ids, 0.5), "k": pa.compute.cast(ids, pa.string())})
        write_batch(out, table, app_id="bench", version=version, max_records_per_file=ROWS_PER_FILE,
                    storage_options=options)
    sync_delta_log(out, storage_options=options)


def build_copied(local_dir: str, out: str, files: int, options: dict) -> None:
    """:func:`build` on local disk under ``local_dir``, then the output uploaded to ``out`` (an ``s3://`` URL) with
    the file URIs of its log rewritten to the store's: the same data files, log entries and Delta log (its paths are
    relative) as :func:`build` on the store, without its hour at 100,000 files on moto (a PUT and three HEADs per
    file, then the Delta sync reading every footer back). The log's columnar copies stay behind: the first read on
    the store (the untimed warm-up) makes and stores its own. Files on the store have upload times, not the log's."""
    local = os.path.join(local_dir, f"filter-{files}")
    build(local, files)
    storage = Storage(out, options)
    local_prefix = Storage(local).to_uri(local).encode() + b"/"
    store_prefix = storage.to_uri(storage.root).encode() + b"/"
    log_dir = os.path.join(local, "_spark_metadata")
    for name in os.listdir(log_dir):
        path = os.path.join(log_dir, name)
        if name.endswith(".columnar"):
            os.remove(path)
            continue
        with open(path, "rb") as fh:
            text = fh.read()
        with open(path, "wb") as fh:
            fh.write(text.replace(local_prefix, store_prefix))
    storage.fs.put(local + "/", storage.root, recursive=True)
    shutil.rmtree(local)


def selective_range(files: int) -> tuple[int, int]:
    """The ids ``[low, high)`` of 1% of the files, from the middle of the output."""
    low = files // 2 * ROWS_PER_FILE
    return low, low + files // 100 * ROWS_PER_FILE


def selective_filter(files: int) -> ds.Expression:
    low, high = selective_range(files)
    return (ds.field("id") >= low) & (ds.field("id") < high)


def run(
    work_dir: str, sizes: list[int], repeats: int, options: dict | None = None, datasets: bool = True,
    copy_from: str | None = None,
) -> FilterResults:
    """``work_dir``: a local directory, or an ``s3://`` URI with ``options`` (storage options). ``datasets``:
    also delta-rs's pyarrow dataset readers (they open every file's footer: on moto ~1 minute per 10,000 files
    and call). ``copy_from``: on a store, build each output in this local directory and upload it
    (:func:`build_copied`)."""
    from deltalake import DeltaTable, QueryBuilder

    where = "moto S3" + (" (each output built on local disk, then uploaded with its log's URIs rewritten)" if copy_from else "")
    results = FilterResults(sizes, "local disk" if options is None else where)
    for files in sizes:
        out = f"{work_dir.rstrip('/')}/filter-{files}"
        if copy_from is None:
            seconds, _ = timed(lambda: build(out, files, options))
        else:
            seconds, _ = timed(lambda: build_copied(copy_from, out, files, options))
        results.build_seconds[files] = seconds
        rows, chosen = files * ROWS_PER_FILE, selective_filter(files)
        matching = files // 100 * ROWS_PER_FILE
        uri, delta_options = Storage(out, options).object_store_location()

        def delta() -> ds.Dataset:
            return DeltaTable(uri, storage_options=delta_options).to_pyarrow_dataset()

        def sql(query: str) -> pa.Table:
            table = DeltaTable(uri, storage_options=delta_options)
            return QueryBuilder().register("t", table).execute(query).read_all()

        low, high = selective_range(files)
        readers = {
            ("ours", "count"): (lambda: count_committed(out, storage_options=options), rows),
            ("delta-rs", "count"): (lambda: delta().count_rows(), rows),
            ("delta-rs-sql", "count"): (lambda: sql("SELECT count(*) AS n FROM t").column("n")[0].as_py(), rows),
            ("ours", "filter"): (lambda: read_committed(out, filter=chosen, storage_options=options).num_rows, matching),
            ("delta-rs", "filter"): (lambda: delta().to_table(filter=chosen).num_rows, matching),
            ("delta-rs-sql", "filter"): (lambda: sql(f"SELECT * FROM t WHERE id >= {low} AND id < {high}").num_rows, matching),
        }
        if not datasets:
            readers = {key: reader for key, reader in readers.items() if key[0] != "delta-rs"}
        for fn, _ in readers.values():
            fn()  # warm-up
        for rep in range(repeats):
            for key in (list(readers) if rep % 2 == 0 else list(readers)[::-1]):
                fn, expected = readers[key]
                # untimed once first: the first call after another engine's long scan in this process pays for
                # its aftermath (ours after delta-rs's 40 s count of 100,000 files: 0.9 s instead of 0.3 s)
                fn()
                seconds, found = timed(fn)
                if found != expected:
                    raise RuntimeError(f"{key}: {found} rows, expected {expected}")
                results.times.setdefault((*key, files), Stat()).add(seconds)
        logger.info("filter %d files: %s", files, "; ".join(
            f"{mode} {reader} {results.times[(reader, mode, files)].fmt()}" for reader, mode in readers))
        if options is None:
            shutil.rmtree(out, ignore_errors=True)
    return results


def section(results: FilterResults) -> str:
    """The markdown of the section (ratios > 1: ours faster)."""
    lines = [
        "## 7. Row counts and selective filtered reads vs delta-rs\n",
        f"Outputs of N files of {ROWS_PER_FILE} rows (`id` ascending: one id range per file) written by "
        f"`write_batch` in {APPENDS} appends, with a Delta log of the same files made by `sync_delta_log`; "
        f"{results.where}. Count: `count_committed(out)` vs `DeltaTable(out).to_pyarrow_dataset().count_rows()`. Filtered "
        "read (an id range, 1% of the files match): `read_committed(out, filter=f)` vs "
        "`DeltaTable(out).to_pyarrow_dataset().to_table(filter=f)`. Each from scratch, interleaved repeats; "
        "median (min-max); ratio = delta-rs / ours per repeat (> 1: ours faster). Then the same against delta-rs's "
        "DataFusion engine (`QueryBuilder().register(\"t\", DeltaTable(out))`, `SELECT count(*)` and "
        "`SELECT * ... WHERE id >= a AND id < b`), which prunes files by the Delta log's statistics. No Spark: a full "
        "run measures this section first, before its Spark session starts. Each timed call follows an untimed call "
        "of the same reader (the first call after another engine's long scan pays for its aftermath).\n",
    ]
    for theirs_name, title in (("delta-rs", "delta-rs (pyarrow dataset)"), ("delta-rs-sql", "delta-rs (DataFusion SQL)")):
        if not any((theirs_name, "count", files) in results.times for files in results.files):
            continue  # not measured (--no-datasets)
        lines += [
            f"| files | count, ours | count, {title} | ours vs it | 1% read, ours | 1% read, {title} | ours vs it |",
            "|---|---|---|---|---|---|---|",
        ]
        for files in results.files:
            cells = [f"{files:,}"]
            for mode in ("count", "filter"):
                ours, theirs = results.times[("ours", mode, files)], results.times[(theirs_name, mode, files)]
                ratio = ratio_stat(ours, theirs, False)
                cells += [ours.fmt(), theirs.fmt(), f"{ratio.median:.2f}x ({ratio.low:.2f}-{ratio.high:.2f})"]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.filter_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", default="10000,100000", help="output sizes in files, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tmpdir", help="where the outputs go (default: the system temp dir, on disk)")
    parser.add_argument("--moto", action="store_true", help="on a moto S3 server (tests/helpers/servers.py)")
    parser.add_argument(
        "--no-datasets", action="store_true",
        help="skip delta-rs's pyarrow dataset readers (every footer opened: hours at 100,000 files on moto)",
    )
    parser.add_argument(
        "--copy-build", action="store_true",
        help="with --moto: build each output on local disk and upload it, log URIs rewritten (minutes, not hours)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-5s %(name)s: %(message)s")
    logging.getLogger("parquet_sink").setLevel(logging.WARNING)
    work = tempfile.mkdtemp(prefix="eo-bench-filter-", dir=args.tmpdir)
    sizes = [int(n) for n in args.files.split(",")]
    try:
        if args.moto:
            from tests.helpers.servers import moto_s3

            with moto_s3() as server:
                server.make_bucket("bench")
                results = run(
                    "s3://bench", sizes, args.repeats, server.storage_options, not args.no_datasets,
                    work if args.copy_build else None,
                )
        else:
            results = run(work, sizes, args.repeats, datasets=not args.no_datasets)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(section(results))
    for files, seconds in results.build_seconds.items():
        print(f"(building {files:,} files and their Delta log took {seconds:.0f} s)")


if __name__ == "__main__":
    main()
