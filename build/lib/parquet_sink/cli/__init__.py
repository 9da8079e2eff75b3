"""The ``parquet-sink`` command line: ``main`` parses arguments (importing nothing heavy, so ``--help`` is fast),
``commands`` runs one (calling :mod:`parquet_sink.maintenance`), ``output`` prints, ``options`` reads storage
options."""

PROG = "parquet-sink"
