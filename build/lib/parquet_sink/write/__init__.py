"""The write side: the ``foreachBatch`` sink and ``write_batch`` (the counterpart of Spark's ``FileStreamSink``).

``sink`` and ``appends`` decide and commit; ``parquet_files`` (pyarrow on executors or in-process) and
``spark_staging`` (Spark's own writer into hidden staging) write data files; ``inflight`` keeps the leases
that protect a batch in flight; ``schema`` the schema rule; ``dependencies`` the sink's install check.
"""
