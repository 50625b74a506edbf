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

# Draws two pages with plot_pool's workers, each hung on its page (inside matplotlib, say): it
# leaves its pid in `marks` and sleeps.
HUNG_DRAWING = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import pytest_specdec.plot_pool as plot_pool

    marks = sys.argv[1]
    plot_pool.BOOT = ("import os, time\\n"
                      f"open(os.path.join({marks!r}, str(os.getpid())), 'w').close()\\n"
                      "time.sleep(3600)\\n")
    plot_pool.save_pages([], ["page-1", "page-2"], Path(marks), 2, lambda done, total: None)
    """
)


def wait_marks(marks: Path, count: int, proc: subprocess.Popen, timeout: float = 120.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while len(list(marks.iterdir())) < count:
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{count} workers never started (stand-in exit {proc.poll()})")
        time.sleep(0.05)
    return [int(p.name) for p in marks.iterdir()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_plot_workers_die_with_a_run_killed_outright(tmp_path):
    """A run killed while its plot workers drew left each to draw on until its page was done and
    it found its pipe closed; one hung on its page (the case PAGE_TIMEOUT_S is for) never did,
    and outlived the run for good. Each now dies with the thread that started it."""
    marks = tmp_path / "marks"
    marks.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", HUNG_DRAWING, str(marks)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    workers: list[int] = []
    try:
        workers = wait_marks(marks, 2, proc)
        proc.kill()
        proc.wait()
        assert wait_gone(workers, timeout=GONE_WITHIN_S) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in workers or [int(p.name) for p in marks.iterdir()]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


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
