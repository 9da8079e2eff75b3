"""What differs between the pyarrow versions the package supports (16 on, ``pyproject.toml``), in one place.

- ``pyarrow.compute.indices_nonzero`` of a chunked array of no chunks (an empty table's column) crashes the process
  (a segmentation fault) before pyarrow 26: every caller asks :func:`nonzero` instead.

The floor is 16: page checksums (``page_checksum_verification``), which the log's columnar copies rely on to fail
on damage rather than decode wrong, came with 15, and pyarrow 15 crashes on ``true_count`` / ``false_count`` of a
compute kernel's boolean result (the log's compaction counts them).

Example::

    >>> nonzero(pa.chunked_array([], pa.bool_()))
    []
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def nonzero(mask: pa.Array | pa.ChunkedArray) -> list[int]:
    """The positions where the boolean ``mask`` is true, on every supported pyarrow.

    Example: ``nonzero(pa.chunked_array([[False, True], [True]]))`` -> ``[1, 2]``.
    """
    if isinstance(mask, pa.ChunkedArray) and mask.num_chunks == 0:
        return []
    return pc.indices_nonzero(mask).to_pylist()
