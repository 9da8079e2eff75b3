"""The log's compiled line scanner (src/parquet_sink/log/_layout.c), the one thing pyproject.toml says only in an
experimental table. Optional: a build without a C compiler falls back to the column-wise reader in log/lines.py
(the same answers, about three times the CPU time per block)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("parquet_sink.log._layout", ["src/parquet_sink/log/_layout.c"], optional=True)])
