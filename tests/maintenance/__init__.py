"""Tests of parquet_sink.maintenance and the CLI."""
