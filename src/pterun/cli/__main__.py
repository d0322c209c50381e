"""``python -m pterun.cli``: the ``pterun`` command."""

import sys

from pterun.cli import main

sys.exit(main())
