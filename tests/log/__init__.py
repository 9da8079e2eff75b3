"""Tests of parquet_sink.log: the _spark_metadata log, compaction, columnar copies, a model of the log."""
