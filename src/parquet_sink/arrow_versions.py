"""What differs between the pyarrow versions the package supports (25 on, ``pyproject.toml``), in one place.

- ``pyarrow.compute.indices_nonzero`` of a chunked array of no chunks (an empty table's column) crashes the process
  (a segmentation fault) before pyarrow 26: every caller asks :func:`nonzero` instead.

The floor is 25, the oldest on which the floors line of the version matrix (.ci/matrix) passes: page checksums
(``page_checksum_verification``, which the log's columnar copies rely on to fail on damage rather than decode wrong)
came with 15; 15 crashes on ``true_count`` of a compute kernel's boolean result (compaction counts them); 16 has no
``ParquetWriter.add_key_value_metadata`` (the copies' source checksum); 17 reads a damaged copy without an error;
21 cannot hash a schema with metadata (optimize); 22 and earlier read Spark's hybrid-calendar files off; 24 and
earlier infer Delta partition values and optimize's Delta commits otherwise than delta-rs reads them.

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
