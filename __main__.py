"""``python -m narrowpipe ...``: the same command line as the ``narrowpipe`` script."""

import sys

from .cli import main

sys.exit(main())
