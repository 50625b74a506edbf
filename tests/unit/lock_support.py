"""A baseline-folder lock held by another process, as a hung run would hold it."""

from __future__ import annotations

import contextlib
import subprocess
import sys


@contextlib.contextmanager
def held_by_another_process(lock_file):
    """`lock_file` locked (as a save locks it) by a child process, as a hung run would hold it."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom filelock import FileLock\n"
         "lock = FileLock(sys.argv[1])\nlock.acquire()\nprint('held', flush=True)\ntime.sleep(300)", str(lock_file)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        yield child
    finally:
        child.kill()
        child.wait()
