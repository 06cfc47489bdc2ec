"""``python -m jaxrec.cli``: the same as ``python -m jaxrec`` and the ``jaxrec`` command."""

import sys

from jaxrec.cli import main

sys.exit(main())
