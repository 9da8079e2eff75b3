"""Tests of parquet_sink.storage: exclusive create, error translation, object-store behaviour on Azurite and moto."""
