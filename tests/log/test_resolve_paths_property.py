"""Log paths resolved column-wise (``resolve_paths``: one scan of the paths' bytes decides whether any needs a
closer look) give what resolving each alone gives: the same root-relative paths and outside paths, and an
OutsideRootError whenever one of them climbs out with ``..``, whatever the chunks and wherever the odd path
sits (a ``..`` or ``%`` at a chunk's edge, or two dots split across two neighbouring paths)."""

from __future__ import annotations

import contextlib
import itertools
import os
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parquet_sink.errors import OutsideRootError
from parquet_sink.log import lines as log_lines
from parquet_sink.log.snapshot import _relative_segments, _Resolver, resolve_paths
from parquet_sink.storage.filesystem import Storage

SEGMENTS = [
    "part-0.parquet", "k=v", "j=w", "a=b=c", "x", "ab", "abc", "a b", "c%3Ad", "%", "%2E%2E", ".", "..", "...", "a..b",
    "x.", ".y", "ünï",
]


@st.composite
def logged_paths(draw: st.DrawFn, root: str) -> list[str]:
    """URIs as a log holds them: most under the root as Spark writes them (percent-encoded), some raw, some in
    another form (``file:/``), some under the roots the output was copied from (``old``: its files are under
    the root too; ``gone``: they are not)."""
    uris = []
    for _ in range(draw(st.integers(1, 12))):
        base = draw(st.sampled_from([root, root, os.path.dirname(root) + "/old", os.path.dirname(root) + "/gone"]))
        if base == root:
            segments = draw(st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=4))
        else:  # mostly Spark's shape (k=v directories, a file name), sometimes another directory between
            segments = [*draw(st.lists(st.sampled_from(["k=v", "j=w", "x", "a=b=c", "k=c%3Ad", "k=..", ".."]), max_size=3)), "part-0.parquet"]
        path = base + "/" + "/".join(segments)
        if base.endswith("/old"):  # relocated: the same file under the new root
            copy = Path(root + "/" + _relative_segments(path))
            with contextlib.suppress(OSError):  # a file where a directory of the same name is wanted: left out
                if ".." not in copy.parts and copy.parent.is_relative_to(root):
                    copy.parent.mkdir(parents=True, exist_ok=True)
                    copy.touch()
        storage = Storage(base)
        uris.append(draw(st.sampled_from([storage.to_uri(path), storage.to_uri(path), "file://" + path, "file:" + path])))
    return uris


def _one_by_one(storage: Storage, uris: list[str], outside_root: bool) -> tuple[list[str], list[str | None]] | None:
    resolver, prefix = _Resolver(storage, outside_root), storage.root.rstrip("/") + "/"
    relative, outside = [], []
    for batch, uri in enumerate(uris):
        try:
            path, rel = resolver.resolve(uri, batch)
        except OutsideRootError:
            return None
        relative.append(rel)
        outside.append(None if path == prefix + rel else path)
    return relative, outside


@pytest.mark.parametrize("scan", [None, 3], ids=["scan 256 KiB", "scan 3 bytes"])
def test_paths_resolved_column_wise_match_one_by_one(tmp_path, monkeypatch, scan) -> None:
    if scan:  # a path's bytes split across scans: a pair of dots on the edge of two
        monkeypatch.setattr(log_lines, "_PIECE", scan)
    examples = itertools.count()

    @settings(max_examples=300, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def run(data: st.DataObject) -> None:
        root = str(tmp_path / f"example-{next(examples)}" / "out")  # a fresh root: files under it decide relocation
        os.makedirs(root)
        storage = Storage(root)
        uris = data.draw(logged_paths(root))
        outside_root = data.draw(st.booleans())
        cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(uris) - 1)), max_size=3)) - {len(uris)})
        bounds = [0, *cuts, len(uris)]
        chunks = [uris[a:b] for a, b in zip(bounds, bounds[1:])]
        ids = [list(range(a, b)) for a, b in zip(bounds, bounds[1:])]
        expected = _one_by_one(storage, uris, outside_root)
        column = pa.chunked_array(chunks, pa.string())
        if expected is None:
            with pytest.raises(OutsideRootError):
                resolve_paths(storage, column, pa.chunked_array(ids, pa.int64()), outside_root)
            return
        relative, outside = resolve_paths(storage, column, pa.chunked_array(ids, pa.int64()), outside_root)
        assert (relative.to_pylist(), outside.to_pylist()) == expected

    run()


@pytest.mark.parametrize(
    "tails",
    [
        ["k=v/part-0.parquet", "k=c%3Ad/part-0.parquet"],  # an escape after a plain row of the same old root
        ["k=v/part-0.parquet", "x/part-0.parquet", "k=v/x/part-0.parquet"],  # a directory without "="
        ["k=v/part-0.parquet", "a=b=c/part-0.parquet", "k=../part-0.parquet"],
    ],
)
def test_rows_of_a_relocated_root_resolved_together_match_one_by_one(tmp_path, tails) -> None:
    root = str(tmp_path / "out")
    for tail in ("k=v/part-0.parquet", "part-0.parquet"):
        Path(root, tail).parent.mkdir(parents=True, exist_ok=True)
        Path(root, tail).touch()
    uris = [f"file://{tmp_path}/old/{tail}" for tail in tails]
    expected = _one_by_one(Storage(root), uris, True)
    relative, outside = resolve_paths(Storage(root), pa.chunked_array([uris]), pa.chunked_array([range(len(uris))]), True)
    assert (relative.to_pylist(), outside.to_pylist()) == expected
