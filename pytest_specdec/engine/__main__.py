"""``python -m pytest_specdec.engine``: start the embedded engine (`--help` lists the flags)."""

from . import logs
from .cli import main

# After a clean stop the interpreter's own teardown (torch, the scheduler's daemon thread) took
# ~0.6 s more: nothing is left to do but flush the log, which `die` does.
logs.die(main())
