"""Object stores and long-lived processes (issue 26): the exclusive-create probe per store, listings cached
by fsspec, damaged committed files, log entries that climb out of the root. Real moto and Azurite on
loopback; a header-stripping proxy (tests/helpers/servers.py) stands for a store that ignores If-None-Match."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import fsspec
import pyarrow as pa
import pytest

from parquet_sink import (
    committed_files, count_committed, history, read_committed, sync_delta_log, vacuum, verify, write_batch,
)
from parquet_sink.cli.main import main
from parquet_sink.errors import (
    DamagedDataFileError, NotAnOutputError, OutsideRootError, ParameterError, StaleVersionError, UnsafeStorageError,
    StorageError, UnsupportedStorageError,
)
from parquet_sink.write.appends import data_fingerprint
from parquet_sink.storage.filesystem import Storage
from tests.conftest import make_backend
from tests.helpers.servers import proxied_options, stripping_proxy

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["moto", "azurite"])
def test_probe_is_per_endpoint_not_per_bucket(request, tmp_path, name):
    """A commit through one endpoint must not vouch for another endpoint reaching a bucket of the same
    name: there the probe runs again and refuses a store that ignores If-None-Match."""
    backend = make_backend(name, request, tmp_path)
    direct = Storage(backend.url, backend.storage_options)
    first = direct.join("_spark_metadata", "0")
    assert direct.put_if_absent(first, b"v1\nfirst")
    server = request.getfixturevalue(f"{name}_server")
    with stripping_proxy(server.port) as port:
        proxied = Storage(backend.url, proxied_options(name, server, port))
        assert proxied.read_bytes(first) == b"v1\nfirst"  # the proxy reaches the same bucket
        with pytest.raises(UnsafeStorageError, match="does not honour exclusive create"):
            proxied.put_if_absent(first, b"v1\nsecond")
    assert direct.read_bytes(first) == b"v1\nfirst"


def test_large_log_write_stays_exclusive_on_s3(request, tmp_path, moto_server):
    """s3fs uploads more than twice its 50 MiB chunk in parts, with the condition on the completion, a
    request the probe never tried: a store that honours If-None-Match on PutObject only (the proxy strips
    it from CompleteMultipartUpload) would let a big compact file replace a commit. One PutObject it is."""
    backend = make_backend("moto", request, tmp_path)

    def completion(method: str, path: str) -> bool:
        return method == "POST" and "uploadId=" in path

    with stripping_proxy(moto_server.port, only=completion) as port:
        storage = Storage(backend.url, proxied_options("moto", moto_server, port))
        path = storage.join("_spark_metadata", "9.compact")
        assert storage.put_if_absent(path, b"v1\nfirst")
        assert not storage.put_if_absent(path, b"v1\n" + b"x" * (100 * 2**20))
        assert storage.read_bytes(path) == b"v1\nfirst"


def _write_elsewhere(url: str, options: dict, rows: list[int], version: int) -> None:
    """write_batch in another process (its own filesystem instances, its own caches)."""
    code = (
        "import json, sys, pyarrow as pa; from parquet_sink import write_batch; "
        "url, options, rows, version = json.loads(sys.argv[1]); "
        "write_batch(url, pa.table({'p': ['a'] * len(rows), 'n': rows}), app_id='other', version=version, "
        "partition_by=['p'], storage_options=options)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    subprocess.run([sys.executable, "-c", code, json.dumps([url, options, rows, version])], check=True, env=env)


@pytest.mark.parametrize("name", ["moto", "azurite"])
def test_cached_listing_does_not_hide_files_committed_later(request, tmp_path, name):
    """After this process listed a partition directory (the user's own filesystem with the same options, a
    vacuum plan), a file another process commits there later is read, not reported missing."""
    backend = make_backend(name, request, tmp_path)
    url, options = backend.url, backend.storage_options
    write_batch(url, pa.table({"p": ["a"], "n": [1]}), app_id="here", version=0, partition_by=["p"], storage_options=options)
    fs, root = fsspec.core.url_to_fs(url, **options)
    assert len(fs.ls(f"{root}/p=a")) == 1  # the user's listing, cached by fsspec
    storage = Storage(url, options)
    storage.find(storage.root)  # what a vacuum plan lists
    assert read_committed(url, storage_options=options).column("n").to_pylist() == [1]
    _write_elsewhere(url, options, [2, 3], version=0)
    assert sorted(read_committed(url, storage_options=options).column("n").to_pylist()) == [1, 2, 3]
    assert len(committed_files(url, storage_options=options)) == 2


@pytest.mark.parametrize("cut", ["truncated", "empty"])
def test_damaged_committed_file_is_a_typed_error(backend, cut):
    """A committed file cut short (or emptied) is named with its batch, both sizes and `verify`, not
    pyarrow's ArrowInvalid."""
    url, options = backend.url, backend.storage_options
    write_batch(url, pa.table({"n": [1, 2]}), app_id="a", version=0, storage_options=options)
    damaged = write_batch(url, pa.table({"n": [3, 4]}), app_id="a", version=1, storage_options=options)
    storage = Storage(url, options)
    path, size = damaged.files[0], damaged.bytes
    storage.put(path, storage.read_bytes(path)[: size // 2] if cut == "truncated" else b"")
    with pytest.raises(DamagedDataFileError) as caught:
        read_committed(url, storage_options=options)
    message = str(caught.value)
    found = size // 2 if cut == "truncated" else 0
    assert storage.display(path) in message and "batch 1" in message
    assert f"log says it has {size} bytes, storage holds {found}" in message and "parquet-sink verify" in message


def test_ls_rows_reports_a_damaged_file_without_a_traceback(tmp_path, capsys, caplog):
    out = str(tmp_path / "out")
    write_batch(out, pa.table({"n": [1, 2]}), app_id="a", version=0)
    damaged = write_batch(out, pa.table({"n": [3]}), app_id="a", version=1)
    Path(damaged.files[0]).write_bytes(b"")
    log_file = Path(out) / "_spark_metadata" / "1"  # as an older version wrote it: no rows recorded, footers read
    log_file.write_text(re.sub(r',"(commitTime|batchRows)":\d+', "", log_file.read_text()))
    assert main(["ls", "--rows", "--json", out]) == 0
    captured = capsys.readouterr()
    rows = {b["batch"]: b["rows"] for b in json.loads(captured.out)["batches"]}
    assert rows == {0: 2, 1: None}
    assert "holds 0 bytes, its log entry says" in caplog.text and "run `parquet-sink verify`" in caplog.text, caplog.text


@pytest.mark.parametrize(
    "climb", ["/../outside.parquet", "/k=a/../../outside.parquet", "/%2E%2E/outside.parquet", "/k=a%2F..%2F..%2Foutside.parquet"]
)
def test_log_entry_climbing_out_of_the_root(tmp_path, capsys, climb):
    """No reader, `verify`, `vacuum` or `ls` follows a `..` in a log entry: typed errors, a listed problem,
    and the file outside the root is never read nor deleted."""
    out = tmp_path / "out"
    write_batch(str(out), pa.table({"n": [1]}), app_id="a", version=0)
    write_batch(str(out), pa.table({"n": [2]}), app_id="a", version=1)
    outside = tmp_path / "outside.parquet"
    outside.write_bytes(b"not yours")
    os.utime(outside, (0, 0))  # old enough for any vacuum threshold
    log = out / "_spark_metadata" / "1"
    header, *lines = log.read_text().splitlines()
    data = next(i for i, line in enumerate(lines) if not json.loads(line)["isDir"])  # after the record's own entry
    entry = json.loads(lines[data])
    entry["path"] = f"file://{out}{climb}"
    lines[data] = json.dumps(entry, separators=(",", ":"))
    log.write_text("\n".join([header, *lines]) + "\n")
    for read in (read_committed, committed_files, lambda p: read_committed(p, allow_outside_root=True)):
        with pytest.raises(OutsideRootError, match=r"batch 1 .*climbs out of its directory with '\.\.'"):
            read(str(out))
    assert main(["verify", str(out)]) == 1
    assert "climbs out of its directory" in capsys.readouterr().out
    assert main(["vacuum", str(out), "--older-than", "0s", "--allow-short-retention"]) == 1
    assert main(["ls", "--rows", str(out)]) == 1
    assert "climbs out of its directory" in capsys.readouterr().err
    assert outside.read_bytes() == b"not yours"


def test_old_version_with_new_data_is_refused(tmp_path):
    """An app whose state was reset writes other rows under version 1 after versions 0..5: refused, naming
    the app, the version, the newest version and what to do, even after compaction; the same rows are a
    retry and skipped; a passed version that was never committed is refused too."""
    out = str(tmp_path / "out")
    for version in range(6):
        write_batch(out, pa.table({"n": [version, version]}), app_id="job", version=version, compact_interval=3)
    assert any(name.endswith(".compact") for name in os.listdir(Path(out) / "_spark_metadata"))
    files = sorted(p.name for p in Path(out).glob("*.parquet"))
    with pytest.raises(StaleVersionError) as caught:
        write_batch(out, pa.table({"n": [7, 7]}), app_id="job", version=1)
    message = str(caught.value)
    assert f"app 'job' wrote version 1 to {out}, but its newest committed version is 5" in message
    assert "version 6 or later" in message and "ignore_changed_data=True" in message
    retry = write_batch(out, pa.table({"n": [1, 1]}), app_id="job", version=1)
    assert not retry.committed and retry.committed_version == 5
    assert write_batch(out, pa.table({"n": [8]}), app_id="gappy", version=0).committed
    assert write_batch(out, pa.table({"n": [9]}), app_id="gappy", version=5).committed
    with pytest.raises(StaleVersionError, match="version 3 was never committed"):
        write_batch(out, pa.table({"n": [10]}), app_id="gappy", version=3)
    assert len(list(Path(out).glob("*.parquet"))) == len(files) + 2, "refused writes write no file"
    assert sorted(read_committed(out).column("n").to_pylist()) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 8, 9]


def test_data_fingerprint_is_the_data_not_its_layout():
    table = pa.table({"n": list(range(100_000)), "s": [str(i % 7) for i in range(100_000)]})
    rechunked = pa.concat_tables([table.slice(0, 33_333), table.slice(33_333)]).replace_schema_metadata({"a": "b"})
    assert data_fingerprint(rechunked) == data_fingerprint(table)
    assert data_fingerprint(table.slice(1)) != data_fingerprint(table)
    assert data_fingerprint(table.cast(pa.schema([("n", pa.int32()), ("s", pa.string())]))) != data_fingerprint(table)


def test_version_committed_without_a_fingerprint_is_skipped_with_a_warning(tmp_path, caplog):
    """A version committed by an older release (a commit id without fingerprint) cannot be compared: skipped as
    before, but with a warning saying so."""
    out = tmp_path / "out"
    write_batch(str(out), pa.table({"n": [1]}), app_id="job", version=0)
    log = out / "_spark_metadata" / "0"
    text = log.read_text()
    commit_id = json.loads(text.splitlines()[1])["commitId"]
    log.write_text(text.replace(commit_id, commit_id.partition("-")[0]))
    assert not write_batch(str(out), pa.table({"n": [2]}), app_id="job", version=0).committed
    assert "its data cannot be compared" in caplog.text
    assert read_committed(str(out)).column("n").to_pylist() == [1]


def test_reads_fetch_an_object_stores_small_files_whole(backend):
    """read_committed fetches an object store's committed files whole and concurrently (one GET each) and
    reads them from memory; the rows, partition columns and a missing file's typed error are those of a read
    in place."""
    from parquet_sink.errors import MissingDataFileError
    from parquet_sink.read.reader import _fetched, dataset_of, snapshot

    url, options = backend.url, backend.storage_options
    for version in range(3):
        rows = pa.table({"id": [10 * version + i for i in range(4)], "k": ["a", "b", "a", "c"]})
        write_batch(url, rows, app_id="a", version=version, partition_by=["k"], storage_options=options)
    snap = snapshot(url, storage_options=options)
    fetched = _fetched(snap)
    assert (fetched is None) is (backend.name == "local")
    in_place = dataset_of(snap).to_table().sort_by("id")
    assert read_committed(url, storage_options=options).sort_by("id").equals(in_place)
    assert in_place.column("id").to_pylist() == [v * 10 + i for v in range(3) for i in range(4)]
    gone = committed_files(url, storage_options=options)[0]
    Storage(url, options).delete(gone.path)
    with pytest.raises(MissingDataFileError, match="is missing from storage"):
        read_committed(url, storage_options=options)


def _spellings(name: str, url: str) -> list[str]:
    """Other URLs users type for the output at ``url`` (``scheme://bucket/out``)."""
    scheme, _, rest = url.partition("://")
    bucket = rest.split("/", 1)[0]
    alias = [f"s3a://{bucket}/out"] if scheme == "s3" else [
        f"az://{bucket}/out", f"abfss://{bucket}@devstoreaccount1.dfs.core.windows.net/out",
        f"abfs://{bucket}@DevStoreAccount1.dfs.core.windows.net/out",
    ]
    return [f"{scheme}://{bucket}/out/", f"{scheme}://{bucket}//out", f"{scheme}://{bucket}/./out",
            f"{scheme}://{bucket}/x/../out", f"{scheme.upper()}://{bucket}/out", *alias]


@pytest.mark.parametrize("name", ["moto", "azurite"])
def test_every_spelling_of_an_object_store_url_is_one_output(request, tmp_path, name):
    """`//`, `.` and `..` in a key name the output Hadoop's Path (so Spark's S3A and ABFS) and a local file
    system resolve them to, and a scheme is case-insensitive. Before, `s3://b//out` wrote under the key `/out/...`
    and read 0 of its committed rows back, `x/../out` wrote keys named `..`, Azure refused `.` and `..` as "access
    denied" (the SDK signs the path it was given, the HTTP client sends it resolved), `S3://` was unknown and an
    account name in other case than storage_options' raised adlfs's TypeError."""
    backend = make_backend(name, request, tmp_path)
    url, options = backend.url, backend.storage_options
    spellings = _spellings(name, url)
    for version, spelling in enumerate([url, *spellings]):
        result = write_batch(spelling, pa.table({"n": [version]}), app_id="a", version=version, storage_options=options)
        assert result.committed and result.log_batch_id == version, spelling
    expected = list(range(len(spellings) + 1))
    for spelling in [url, *spellings]:
        assert sorted(read_committed(spelling, storage_options=options).column("n").to_pylist()) == expected, spelling
        assert count_committed(spelling, storage_options=options) == len(expected)
        assert history(spelling, storage_options=options).num_rows == len(expected)
    storage = Storage(url, options)
    keys = [info.path for info in storage.find(storage.container)]
    assert keys and all(key.startswith(f"{storage.root}/") for key in keys), keys
    assert not [key for key in keys if "//" in key or "/./" in key or "/../" in key]


@pytest.mark.parametrize(
    "url, refused",
    [("s3://", "names no bucket"), ("s3:///out", "names no bucket"), ("abfs:///out", "names no bucket"),
     ("s3://b/../c/out", "climbs out of the bucket or container 'b'"), ("az://c/x/../../out", "climbs out")],
)
def test_url_without_a_bucket_or_climbing_out_of_it_is_refused(url, refused):
    """Before, `s3:///out` failed with s3fs's bare FileNotFoundError, `s3://` with "Cannot traverse all of S3" and
    `s3://b/../c/out` wrote to bucket `b` under the key `../c/out`."""
    options = {"key": "k", "secret": "s"} if url.startswith("s3") else {"account_name": "a", "account_key": "a2V5"}
    with pytest.raises(ParameterError, match=re.escape(url) + ".*" + re.escape(refused)):
        write_batch(url, pa.table({"n": [1]}), app_id="a", version=0, storage_options=options)


def test_an_unknown_scheme_is_named_as_such():
    with pytest.raises(UnsupportedStorageError, match=r"fsspec knows no filesystem for s4://\. Check the URL's scheme"):
        read_committed("s4://bucket/out")


def test_an_azure_url_naming_another_account_than_the_options_is_refused(azurite_server):
    """Before, adlfs's own TypeError ("dict() got multiple values for keyword argument 'account_name'") with
    account_name in storage_options; with a connection string, adlfs wrote to its account while the log named the
    URL's."""
    url = "abfss://c@otheraccount.dfs.core.windows.net/out"
    for options in (azurite_server.storage_options, {"connection_string": azurite_server.connection_string}):
        with pytest.raises(ParameterError, match="names the Azure account 'otheraccount' but storage_options name "
                                                 "'devstoreaccount1'") as caught:
            write_batch(url, pa.table({"n": [1]}), app_id="a", version=0, storage_options=options)
        assert azurite_server.account_key not in str(caught.value)


@pytest.mark.parametrize("inner_first", [False, True])
def test_vacuum_keeps_the_files_of_an_output_nested_in_the_output(backend, inner_first):
    """An output written inside another one (its own `_spark_metadata`) holds files the outer log never commits:
    vacuum of the outer output deleted them as orphans, and the inner output lost committed data. Written first,
    the inner output's files made the outer one's first write an ExistingDataError (a dataset it would hide)."""
    url, options = backend.url, backend.storage_options
    inner = f"{url}/sub"
    for where, n in [(inner, 2), (url, 1)] if inner_first else [(url, 1), (inner, 2)]:
        write_batch(where, pa.table({"n": [n]}), app_id="a", version=0, storage_options=options)
    storage = Storage(url, options)
    orphan = storage.join("part-00009-orphan.c000.snappy.parquet")
    storage.put(orphan, storage.read_bytes(committed_files(url, storage_options=options)[0].path))
    result = vacuum(url, "0s", allow_short_retention=True, storage_options=options)
    assert [info.path for info in result.plan.orphans] == [orphan]
    inner_files = [f.path for f in committed_files(inner, storage_options=options)]
    assert [info.path for info in result.plan.nested_kept] == inner_files
    assert read_committed(inner, storage_options=options).column("n").to_pylist() == [2]
    assert read_committed(url, storage_options=options).column("n").to_pylist() == [1]


def test_a_file_given_as_the_output_is_refused_on_every_store(backend):
    """A data file's URL given as the output: on local disk a ParameterError; on S3 write_batch committed a new
    output under the file's key (S3 lets a key and a prefix share a name), on Azure it failed with adlfs's
    AttributeError, and vacuum failed with a bare FileNotFoundError (local) or that AttributeError (Azure)."""
    url, options = backend.url, backend.storage_options
    write_batch(url, pa.table({"n": [1]}), app_id="a", version=0, storage_options=options)
    storage = Storage(url, options)
    data_file = storage.display(committed_files(url, storage_options=options)[0].path)
    before = sorted(info.path for info in storage.find(storage.root))
    with pytest.raises(ParameterError, match=re.escape(f"'{data_file}' is a file, not an output directory")):
        write_batch(data_file, pa.table({"n": [2]}), app_id="a", version=0, storage_options=options)
    for call in (read_committed, lambda p, **kw: vacuum(p, **kw)):
        with pytest.raises(NotAnOutputError, match=re.escape(f"({data_file} is a file: give the output directory")):
            call(data_file, storage_options=options)
    assert sorted(info.path for info in storage.find(storage.root)) == before
    assert read_committed(url, storage_options=options).column("n").to_pylist() == [1]


@pytest.mark.parametrize("name", ["moto", "azurite"])
def test_delta_log_of_an_output_reached_through_the_environment(request, tmp_path, monkeypatch, name):
    """An S3 endpoint in $AWS_ENDPOINT_URL (botocore reads it; MinIO users set it) or an Azure connection string in
    $AZURE_STORAGE_CONNECTION_STRING (adlfs reads it) reach the store for write_batch and the readers, but delta-rs
    was not told: sync_delta_log failed with "Generic S3 error" (the endpoint is http), and on Azure write_batch
    itself found no account name for the log's abfss:// URIs."""
    import deltalake

    backend = make_backend(name, request, tmp_path)
    server = request.getfixturevalue(f"{name}_server")
    if name == "moto":
        monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint_url)
        options = {"key": server.access_key, "secret": server.secret_key}
    else:
        monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", server.connection_string)
        options = {}
    write_batch(backend.url, pa.table({"n": [1, 2]}), app_id="a", version=0, storage_options=options)
    assert sync_delta_log(backend.url, storage_options=options).committed
    uri, delta_options = Storage(backend.url, options).object_store_location()
    assert deltalake.DeltaTable(uri, storage_options=delta_options).to_pyarrow_table().column("n").to_pylist() == [1, 2]


def test_endpoint_options_of_the_wrong_shape_are_named(capsys):
    """`--storage-option client_kwargs=http://minio:9000` (a string: not JSON) raised AttributeError ("'str' object
    has no attribute 'get'"); an endpoint without its scheme was "check that the location exists"."""
    url = "s3://bucket/out"
    assert main(["ls", url, "--storage-option", "client_kwargs=http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert "storage_options['client_kwargs'] for s3://bucket/out must be a dict, not str" in err
    assert """--storage-option 'client_kwargs={"endpoint_url": "http://host:9000"}'""" in err
    options = {"key": "k", "secret": "s", "client_kwargs": {"endpoint_url": "127.0.0.1:9"}}
    with pytest.raises(StorageError, match="s3://bucket/out failed: the store's endpoint is not a URL; give"):
        read_committed(url, storage_options=options)


def test_verify_does_not_count_a_nested_outputs_files_as_invisible_data(backend):
    """An output whose batches committed no file, with another output nested in it: verify warned that the
    nested output's committed files are this one's invisible data "`vacuum` would delete as orphans"."""
    url, options = backend.url, backend.storage_options
    empty = pa.table({"k": pa.array([], pa.string()), "n": pa.array([], pa.int64())})
    write_batch(url, empty, app_id="a", version=0, partition_by=["k"], storage_options=options)
    write_batch(f"{url}/sub", pa.table({"n": [2]}), app_id="a", version=0, storage_options=options)
    report = verify(url, storage_options=options)
    assert report.ok and report.warnings == [], report.warnings


def test_a_container_name_azure_refuses_is_named(azurite_server):
    """azure-storage gives its error code as a StorageErrorCode enum, whose str() is its name: the translation read
    no code, and an invalid container name was "check that the location exists and is reachable"."""
    with pytest.raises(StorageError, match=r"abfs://My_Container/out failed: the store refuses a name in the path"):
        read_committed("abfs://My_Container/out", storage_options=azurite_server.storage_options)


def test_every_spelling_of_a_local_file_url_is_one_output(tmp_path, monkeypatch):
    """The local counterpart: `file://localhost/p` is `file:///p` (RFC 8089; fsspec took `localhost` for a directory
    under the working directory, and wrote there), and a file URL naming another host is refused before anything is
    written (Hadoop's local filesystem refuses it too)."""
    monkeypatch.chdir(tmp_path)  # where fsspec's reading of `localhost` would have written
    out = tmp_path / "out"
    spellings = [str(out), f"file://{out}", f"file:{out}", f"file://localhost{out}", f"FILE://LocalHost{out}/"]
    for version, spelling in enumerate(spellings):
        assert write_batch(spelling, pa.table({"n": [version]}), app_id="a", version=version).log_batch_id == version
    for spelling in spellings:
        assert sorted(read_committed(spelling).column("n").to_pylist()) == list(range(len(spellings))), spelling
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    with pytest.raises(ParameterError, match=r"names the host 'otherhost': a file URL is this machine's disk"):
        write_batch(f"file://otherhost{out}", pa.table({"n": [9]}), app_id="b", version=0)
    assert count_committed(out) == len(spellings)


def test_vacuum_on_s3_makes_requests_per_listing_page_not_per_file(moto_server):
    """Issue 58 item 3: a dry run of vacuum on S3 makes the same requests over 4 files as over 48 (each listing
    one page), names no data file, and reads each log file once (the snapshot; the check does not parse a delta
    again). Before, each was read three times: the check, the snapshot, every entry decoded again from its JSON
    line."""
    from urllib.parse import unquote

    from tests.helpers.servers import FaultPlan, faulty_proxy

    counts = {}
    for files in (4, 48):
        bucket = f"vacuum-pages-{files}"
        moto_server.make_bucket(bucket)
        url, options = f"s3://{bucket}/out", moto_server.storage_options
        write_batch(url, pa.table({"id": list(range(files))}), app_id="a", version=0, max_records_per_file=1,
                    storage_options=options)
        write_batch(url, pa.table({"id": [files]}), app_id="a", version=1, storage_options=options)
        orphan = Storage(url, options).join("part-00009-orphan.c000.snappy.parquet")
        Storage(url, options).put(orphan, b"PAR1")
        requests: list[tuple[str, str]] = []
        plan = FaultPlan(rate=0.0, only=lambda method, path: requests.append((method, unquote(path))) and False)
        with faulty_proxy(moto_server.port, plan) as port:
            found = vacuum(url, "0s", allow_short_retention=True, dry_run=True,
                           storage_options=proxied_options("moto", moto_server, port)).plan
        assert [i.path for i in found.orphans] == [orphan]
        assert not [r for r in requests if r[1].endswith(".parquet")]  # no request per data file
        for log_file in ("/_spark_metadata/0", "/_spark_metadata/1"):
            assert len([r for r in requests if r[0] == "GET" and r[1].endswith(log_file)]) == 1
        counts[files] = len(requests)
    assert counts[4] == counts[48]
