"""``python -m pytest_specdec.engine``: start the embedded engine (`--help` lists the flags)."""

import sys

from .cli import main

sys.exit(main())
