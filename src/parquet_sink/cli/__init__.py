"""The ``parquet-sink`` command line."""
