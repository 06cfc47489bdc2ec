"""``python -m jaxrec``: the ``jaxrec`` command line (see :mod:`jaxrec.cli`)."""

import sys

from jaxrec.cli import main

sys.exit(main())
