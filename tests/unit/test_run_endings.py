"""Runs that end badly, as users end them: every process the plugin started is gone at once.

Each test writes a small project whose test holds its server until the outer test ends the run
(a marker file says when the test is inside its body), ends it, and polls until no engine
process of the project, and no pytest process that held one, is left. The bound is generous;
the old failures it catches took longer by construction (see each test). Every test kills what
it started, also when it fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from servers_support import default_sigint, wait_gone  # noqa: E402
from test_bench_flow import engine_processes, project  # noqa: E402

pytestmark = pytest.mark.timeout(300)

GONE_WITHIN_S = 10.0

# Holds the server until the outer test ends the run. SIGINT is ignored: a test busy in native
# code, which a KeyboardInterrupt does not reach either.
HOLDING_TEST = '''
import os, signal, time


def test_hold(specdec_server, pytestconfig):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    (pytestconfig.rootpath / "holding").write_text(str(os.getpid()))
    time.sleep(240)
'''

# Freezes its server first (SIGSTOP): a server that honours no signal but SIGKILL, as one wedged
# in a driver call.
FROZEN_SERVER_TEST = '''
import os, signal, time


def test_hold(specdec_server, pytestconfig):
    os.kill(specdec_server.pids()[0], signal.SIGSTOP)
    (pytestconfig.rootpath / "holding").write_text(str(os.getpid()))
    time.sleep(240)
'''


def start(root: Path, *args: str) -> subprocess.Popen:
    """pytest in `root`, in a session of its own (so the test can kill all of it), output to a file."""
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("PYTEST_XDIST_", "PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST"))}
    with open(root / "pytest.out", "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
                                cwd=root, env=environ, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=default_sigint)


def wait_holding(root: Path, proc: subprocess.Popen, timeout: float = 180) -> int:
    """The pid of the process running HOLDING_TEST, once it is inside the test."""
    marker = root / "holding"
    deadline = time.monotonic() + timeout
    while not marker.exists() or not marker.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the held test never started:\n{(root / 'pytest.out').read_text()[-3000:]}")
        time.sleep(0.1)
    return int(marker.read_text())


def kill_everything(proc: subprocess.Popen, pids: list[int]) -> None:
    """What a failed test would leave: its pytest session and every process it noted."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()


def engine_pids(root: Path) -> list[int]:
    return [int(line.split()[0]) for line in engine_processes(root)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_xdist_controller_takes_its_workers_and_their_servers_along(pytester):
    """Killing only the controller used to leave the worker in its test, and its server, until
    execnet noticed: 5 s, then a SIGINT to itself, then 10 s more before os._exit."""
    pytest.importorskip("xdist")
    project(pytester, methods=("ar",), prompts=1, max_new_tokens=4)
    pytester.makepyfile(test_hold=HOLDING_TEST)
    proc = start(pytester.path, "-n", "2", "test_hold.py")
    noted: list[int] = []
    try:
        worker = wait_holding(pytester.path, proc)
        noted = [worker, *engine_pids(pytester.path)]
        assert len(noted) == 2, f"expected the worker and its server, found {noted}"
        os.kill(proc.pid, signal.SIGKILL)  # the controller alone
        proc.wait()
        assert wait_gone(noted, timeout=GONE_WITHIN_S) == []
        assert engine_processes(pytester.path) == []
    finally:
        kill_everything(proc, noted)


def test_ctrl_c_does_not_wait_out_a_frozen_servers_full_sigterm_grace(pytester):
    """Ctrl-C mid-test stopped the test's server with the full SIGTERM grace (10 s) before
    SIGKILL, as a normal end does; the user who interrupted waited that long. The bound is well
    under the full grace."""
    project(pytester, methods=("ar",), prompts=1, max_new_tokens=4)
    pytester.makepyfile(test_hold=FROZEN_SERVER_TEST)
    proc = start(pytester.path, "test_hold.py")
    noted: list[int] = []
    try:
        wait_holding(pytester.path, proc)
        noted = engine_pids(pytester.path)
        assert len(noted) == 1, f"expected one server, found {noted}"
        proc.send_signal(signal.SIGINT)
        assert wait_gone(noted, timeout=6.0) == []
        proc.wait(timeout=60)
    finally:
        kill_everything(proc, noted)


def test_without_prctl_a_worker_keeps_todays_behaviour(monkeypatch):
    """Not Linux: nothing is armed, nothing raises."""
    from pytest_specdec.servers import cleanup

    monkeypatch.setattr(cleanup.sys, "platform", "darwin")
    assert cleanup.die_with_parent() is False
    assert cleanup.parent_death_preexec() is None


# One test records, the next holds its server until the outer test sends SIGTERM.
RECORDS_THEN_HOLDS_TEST = '''
import os, time


def test_generation(specdec_server, specdec_workload, specdec_record):
    assert specdec_record.run(specdec_server, specdec_workload).completion_tokens > 0


def test_hold(specdec_server, pytestconfig):
    (pytestconfig.rootpath / "holding").write_text(str(os.getpid()))
    time.sleep(240)
'''


def test_sigterm_ends_the_run_as_ctrl_c_does_writing_what_finished(pytester):
    """SIGTERM (a CI runner's cancel, a batch system's time limit) killed the servers and then
    pytest at once: no summary, no report, no baseline of the tests that had finished, not a
    word. It now ends the run as Ctrl-C does, its servers killed first."""
    project(pytester, methods=("ar",), prompts=1, max_new_tokens=4)
    pytester.makepyfile(test_sig=RECORDS_THEN_HOLDS_TEST)
    proc = start(pytester.path, "--specdec-report=out", "test_sig.py")
    noted: list[int] = []
    try:
        wait_holding(pytester.path, proc)
        noted = engine_pids(pytester.path)
        assert len(noted) == 1, f"expected one server, found {noted}"
        proc.send_signal(signal.SIGTERM)
        assert wait_gone(noted, timeout=GONE_WITHIN_S) == []
        code = proc.wait(timeout=120)
        out = (pytester.path / "pytest.out").read_text()
        assert code == pytest.ExitCode.INTERRUPTED, out[-3000:]
        assert "KeyboardInterrupt: SIGTERM: this process's servers were killed; the run ends as after Ctrl-C" in out
        rows = json.loads((pytester.path / "out" / "results.json").read_text())["results"]
        assert [row["test_id"] for row in rows] == ["test_generation[ar-tp1-chat]"]
    finally:
        kill_everything(proc, noted)


def test_an_interrupted_xdist_controller_says_the_wait_for_its_workers(pytester):
    """A SIGINT or SIGTERM to the controller alone left its workers in their tests: xdist waited
    for them in silence (execnet's 5 s, then xdist's 10 s), the servers up all along. The
    controller now says that wait and its bound as it starts."""
    pytest.importorskip("xdist")
    project(pytester, methods=("ar",), prompts=1, max_new_tokens=4)
    pytester.makepyfile(test_hold=HOLDING_TEST)
    proc = start(pytester.path, "-n", "2", "test_hold.py")
    noted: list[int] = []
    try:
        worker = wait_holding(pytester.path, proc)
        noted = [worker, *engine_pids(pytester.path)]
        assert len(noted) == 2, f"expected the worker and its server, found {noted}"
        proc.send_signal(signal.SIGINT)  # the controller alone
        proc.wait(timeout=120)
        assert wait_gone(noted, timeout=GONE_WITHIN_S) == []
        out = (pytester.path / "pytest.out").read_text()
        assert "specdec: interrupted: waiting for the xdist workers to end their tests and stop their " \
               "servers (bound: execnet interrupts a worker still in its test after 5s" in out, out[-3000:]
    finally:
        kill_everything(proc, noted)
