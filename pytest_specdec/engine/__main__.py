"""``python -m pytest_specdec.engine``: start the embedded engine (see cli.py for the flags)."""

import sys

from .cli import main

sys.exit(main())
