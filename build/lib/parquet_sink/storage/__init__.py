"""Storage: the one seam between the package and fsspec backends (local disk, Azure, S3, ...).

Every difference between filesystems (exclusive create, atomic rename, listing caches, error translation)
lives here; no other subpackage imports fsspec. The counterpart of Hadoop's ``FileSystem`` /
``CheckpointFileManager`` under Spark's metadata log, and of pyiceberg's ``io/``.
"""
