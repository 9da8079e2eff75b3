"""The ``_spark_metadata`` log, byte-compatible with Spark's file sink log.

One module per concept, bottom up (Spark's counterpart in brackets): ``entry`` the entry format and commit
records (``SinkFileStatus``), ``lines`` column-wise parsing and writing of entry lines, ``sidecar`` columnar
copies of compact files, ``files`` the versioned log files (``HDFSMetadataLog``), ``compaction`` compaction,
interval and cleanup (``CompactibleFileStreamLog``), ``metadata_log`` the public log (``FileStreamSinkLog``),
``snapshot`` the columnar view of the live entries that readers, writers and maintenance share.
"""
