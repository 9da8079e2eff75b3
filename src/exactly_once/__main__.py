"""``python -m exactly_once``: the ``exactly-once`` command line.

Example::

    $ python -m exactly_once ls /data/events
"""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
