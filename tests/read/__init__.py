"""Tests of parquet_sink.read: read_committed and partition inference against Spark's reader."""
