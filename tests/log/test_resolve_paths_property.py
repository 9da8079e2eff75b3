"""Log paths resolved column-wise (``resolve_paths``: one scan of the paths' bytes decides whether any needs a
closer look) give what resolving each alone gives: the same root-relative paths and outside paths, and an
OutsideRootError whenever one of them climbs out with ``..``, whatever the chunks and wherever the odd path
sits (a ``..`` or ``%`` at a chunk's edge, or two dots split across two neighbouring paths)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parquet_sink.errors import OutsideRootError
from parquet_sink.log import lines as log_lines
from parquet_sink.log.snapshot import _Resolver, resolve_paths
from parquet_sink.storage.filesystem import Storage

SEGMENTS = ["part-0.parquet", "k=v", "x", "ab", "abc", "a b", "c%3Ad", "%", "%2E%2E", ".", "..", "...", "a..b", "x.", ".y", "ünï"]


@st.composite
def logged_paths(draw: st.DrawFn, root: str) -> list[str]:
    """URIs as a log holds them: most under the root as Spark writes them (percent-encoded), some raw."""
    storage = Storage(root)
    uris = []
    for _ in range(draw(st.integers(1, 12))):
        segments = draw(st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=4))
        path = root + "/" + "/".join(segments)
        uris.append(draw(st.sampled_from([storage.to_uri(path), storage.to_uri(path), "file://" + path])))
    return uris


def _one_by_one(storage: Storage, uris: list[str]) -> tuple[list[str], list[str | None]] | None:
    resolver, prefix = _Resolver(storage, False), storage.root.rstrip("/") + "/"
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
    root = str(tmp_path / "out")
    storage = Storage(root)

    @settings(max_examples=300, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(logged_paths(root), st.data())
    def run(uris: list[str], data: st.DataObject) -> None:
        cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(uris) - 1)), max_size=3)) - {len(uris)})
        bounds = [0, *cuts, len(uris)]
        chunks = [uris[a:b] for a, b in zip(bounds, bounds[1:])]
        ids = [list(range(a, b)) for a, b in zip(bounds, bounds[1:])]
        expected = _one_by_one(storage, uris)
        column = pa.chunked_array(chunks, pa.string())
        if expected is None:
            with pytest.raises(OutsideRootError):
                resolve_paths(storage, column, pa.chunked_array(ids, pa.int64()), False)
            return
        relative, outside = resolve_paths(storage, column, pa.chunked_array(ids, pa.int64()), False)
        assert (relative.to_pylist(), outside.to_pylist()) == expected

    run()
