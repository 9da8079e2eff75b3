"""``python -m parquet_sink``: the ``parquet-sink`` command line.

Example::

    $ python -m parquet_sink ls /data/events
"""

from .cli.main import run

if __name__ == "__main__":
    run()
