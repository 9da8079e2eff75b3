"""Tests of parquet_sink.write: the sink, write_batch, leases, writer bounds, differential tests against Spark's own sink."""
