"""The read side: only committed data (the counterpart of Spark's ``MetadataLogFileIndex``).

``reader`` turns the log's live entries into files, datasets and Spark reads; ``chain`` lets a downstream job
process each committed batch once.
"""
