"""Data files opened by their logged size (``parquet_read.read_footer`` / ``open_sized``: the footer from one ranged
read of the end, column chunks by ranged reads), on every backend, against pyarrow opening the same file itself: the
same footer and the same rows, a footer longer than the first read, and a file whose size is not the logged one
refused rather than read from the wrong place."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parquet_sink.parquet_read import open_parquet, open_sized, read_footer
from parquet_sink.storage.filesystem import Storage


def _stored(backend, name: str, table: pa.Table, **options) -> tuple[Storage, str, bytes]:
    buffer = io.BytesIO()
    pq.write_table(table, buffer, **options)
    data = buffer.getvalue()
    storage = Storage(backend.url, backend.storage_options)
    path = storage.join(name)
    with storage.open(path, "wb") as fh:
        fh.write(data)
    return storage, path, data


def test_sized_reads_match_pyarrow_on_every_backend(backend):
    narrow = pa.table({
        "n": pa.array([1, None, 3], pa.int64()),
        "s": ["a" * 100, None, "z"],
        "t": pa.array([0, 1_000, -2_000], pa.timestamp("ns")),  # INT96 in the file, microseconds read back
    })
    # 1,500 columns with long names: a footer far over the 64 KiB of the first read
    wide = pa.table({f"column_with_a_long_name_{i:05d}": [i, i + 1] for i in range(1500)})
    for name, table, options in [
        ("narrow.parquet", narrow, {"use_deprecated_int96_timestamps": True, "row_group_size": 2}),
        ("wide.parquet", wide, {}),
    ]:
        storage, path, data = _stored(backend, name, table, **options)
        expected = open_parquet(pa.BufferReader(data))
        footer = read_footer(storage, path, len(data))
        assert footer.equals(expected.metadata), name
        if name == "wide.parquet":
            assert footer.serialized_size > 64 * 1024
        with open_sized(storage, path, len(data)) as parquet:
            assert parquet.read().equals(expected.read()), name
            assert parquet.read_row_group(0, columns=[table.column_names[-1]]).equals(
                expected.read_row_group(0, columns=[table.column_names[-1]])
            ), name


def test_a_file_of_another_size_than_logged_is_refused(backend):
    storage, path, data = _stored(backend, "f.parquet", pa.table({"n": list(range(100))}))
    for size in (len(data) - 1, len(data) + 10, 4):
        with pytest.raises((pa.ArrowInvalid, OSError)):
            read_footer(storage, path, size)
    with pytest.raises(FileNotFoundError):
        read_footer(storage, storage.join("absent.parquet"), len(data))
