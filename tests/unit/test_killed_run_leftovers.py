"""A run killed outright (SIGKILL, a second SIGTERM, `os._exit`) leaves no process it started.

Each test starts a stand-in for the run in a subprocess, kills it once its helpers are up, and
polls with a generous bound until they are gone; it kills what it started, also when it fails.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from servers_support import wait_gone

pytest.importorskip("matplotlib")

GONE_WITHIN_S = 30.0

@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_asking_to_die_with_the_parent_starts_no_process(monkeypatch):
    """Finding libc's prctl ran `ldconfig -p` in a subprocess (ctypes.util.find_library) for every
    server and plot worker started: a process more per launch, and one a drawing counted as its
    worker. prctl is now looked up among the symbols already loaded."""
    from pytest_specdec.servers import cleanup

    started = []
    original = subprocess.Popen
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a) or original(*a, **k))
    assert cleanup.parent_death_preexec() is not None
    assert started == []
