"""``python -m parquet_sink``: the ``parquet-sink`` command line.

Example::

    $ python -m parquet_sink ls /data/events
"""

import sys

from .cli.commands import main

if __name__ == "__main__":
    sys.exit(main())
