"""Runs that end badly, as users end them: every process the plugin started is gone at once.

Each test writes a small project whose test holds its server until the outer test ends the run
(a marker file says when the test is inside its body), ends it, and polls until no engine
process of the project, and no pytest process that held one, is left. The bound is generous;
the old failures it catches took longer by construction (see each test). Every test kills what
it started, also when it fails.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from servers_support import default_sigint, started_environ, wait_gone  # noqa: E402
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

# The engine with SIGTERM blocked: a server that only SIGKILL ends, as one wedged in a driver call
# (SIGSTOP would not do: teardown sends SIGCONT with its SIGTERM).
DEAF_ENGINE_CONFTEST = """
import sys
from functools import partial

from pytest_specdec import backends
from pytest_specdec.servers.embedded import build_embedded_argv

DEAF = ("import runpy, signal; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM}); "
        "runpy.run_module('pytest_specdec.engine', run_name='__main__', alter_sys=True)")


def argv_builder(self, spec, state):
    return partial(build_embedded_argv, spec, entry=[sys.executable, "-c", DEAF])


backends.EmbeddedBackend.argv_builder = argv_builder
"""

# Holds its server as HOLDING_TEST does, but Ctrl-C reaches the test (KeyboardInterrupt).
INTERRUPTIBLE_HOLDING_TEST = '''
import os, time


def test_hold(specdec_server, pytestconfig):
    (pytestconfig.rootpath / "holding").write_text(str(os.getpid()))
    time.sleep(240)
'''


def start(root: Path, *args: str) -> subprocess.Popen:
    """pytest in `root`, in a session of its own (so the test can kill all of it), output to a file."""
    environ = started_environ()
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


def held_xdist_run(pytester) -> tuple[subprocess.Popen, list[int]]:
    """An `-n 2` run held in its one test: the controller, and the pids of its worker and server."""
    pytest.importorskip("xdist")
    project(pytester, methods=("ar",), prompts=1, max_new_tokens=4)
    pytester.makepyfile(test_hold=HOLDING_TEST)
    proc = start(pytester.path, "-n", "2", "test_hold.py")
    noted: list[int] = []
    try:
        noted = [wait_holding(pytester.path, proc), *engine_pids(pytester.path)]
        assert len(noted) == 2, f"expected the worker and its server, found {noted}"
    except BaseException:
        kill_everything(proc, noted)
        raise
    return proc, noted


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_xdist_controller_takes_its_workers_and_their_servers_along(pytester):
    """Killing only the controller used to leave the worker in its test, and its server, until
    execnet noticed: 5 s, then a SIGINT to itself, then 10 s more before os._exit."""
    proc, noted = held_xdist_run(pytester)
    try:
        os.kill(proc.pid, signal.SIGKILL)  # the controller alone
        proc.wait()
        assert wait_gone(noted, timeout=GONE_WITHIN_S) == []
        assert engine_processes(pytester.path) == []
    finally:
        kill_everything(proc, noted)


def sigterm_blocked(pid: int) -> bool:
    """Whether `pid` blocks SIGTERM (its SigBlk mask in /proc)."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(re.search(r"^SigBlk:\s*([0-9a-f]+)$", status, re.M).group(1), 16)
    return bool(mask & (1 << (signal.SIGTERM - 1)))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the signal mask in /proc")
def test_ctrl_c_does_not_wait_out_a_frozen_servers_full_sigterm_grace(pytester):
    """Ctrl-C mid-test stopped the test's server with the full SIGTERM grace (10 s) before
    SIGKILL, as a normal end does; the user who interrupted waited that long. The server here
    honours only SIGKILL (DEAF_ENGINE_CONFTEST), so it lives out whatever grace it is given; the
    bound is well under the full grace. (A server frozen with SIGSTOP would not do: teardown
    sends SIGCONT with its SIGTERM, and it exits at once whatever the grace.)"""
    project(pytester, methods=("ar",), prompts=1, max_new_tokens=4)
    pytester.makeconftest(DEAF_ENGINE_CONFTEST)
    pytester.makepyfile(test_hold=INTERRUPTIBLE_HOLDING_TEST)
    proc = start(pytester.path, "test_hold.py")
    noted: list[int] = []
    try:
        wait_holding(pytester.path, proc)
        noted = engine_pids(pytester.path)
        assert len(noted) == 1, f"expected one server, found {noted}"
        assert sigterm_blocked(noted[0]), "the stand-in server honours SIGTERM: any grace would pass"
        proc.send_signal(signal.SIGINT)
        assert wait_gone(noted, timeout=6.0) == [], (pytester.path / "pytest.out").read_text()[-3000:]
        proc.wait(timeout=60)
    finally:
        kill_everything(proc, noted)


# Two tests of one configuration, the first of which holds its server.
HOLD_THEN_SAME_CONFIGURATION_TEST = '''
import os, time


def test_hold(specdec_server, pytestconfig):
    (pytestconfig.rootpath / "holding").write_text(str(os.getpid()))
    time.sleep(240)


def test_next(specdec_server):
    pass
'''


@pytest.mark.parametrize("dist", [(), ("-n", "1")], ids=["alone", "xdist"])
def test_ctrl_c_says_at_once_which_servers_it_stops_and_the_bound(pytester, dist):
    """Ctrl-C in a test whose next test has the same configuration left its server to the pool's
    close at the session's end: for one that ignores SIGTERM, the grace and the ending's work
    passed with no output. The line is said once, while that server still waits out its grace,
    and a worker's reaches the user as its other progress lines do."""
    if dist:
        pytest.importorskip("xdist")
    project(pytester, methods=("ar",), prompts=1, max_new_tokens=4)
    pytester.makeconftest(DEAF_ENGINE_CONFTEST)
    pytester.makepyfile(test_hold=HOLD_THEN_SAME_CONFIGURATION_TEST)
    proc = start(pytester.path, *dist, "test_hold.py")
    noted: list[int] = []
    line = re.compile(r"specdec: (\[gw0\] )?the run is ending: stopping server ar-tp1 now "
                      r"\(SIGTERM, then SIGKILL after 2s\)")
    try:
        wait_holding(pytester.path, proc)
        noted = engine_pids(pytester.path)
        assert len(noted) == 1, f"expected one server, found {noted}"
        proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 60
        while not line.search((pytester.path / "pytest.out").read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, \
                (pytester.path / "pytest.out").read_text()[-3000:]
            time.sleep(0.05)
        still_up = wait_gone(noted, timeout=0)
        proc.wait(timeout=60)
        out = (pytester.path / "pytest.out").read_text()
        assert still_up == noted, f"said only once the server was gone:\n{out[-3000:]}"
        said = line.findall(out)
        assert said == (["[gw0] "] if dist else [""]), out[-3000:]
        assert wait_gone(noted, timeout=GONE_WITHIN_S) == []
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


@pytest.mark.parametrize("sig, said", [
    (signal.SIGTERM, "SIGTERM: this process's servers were killed; the run ends as after Ctrl-C"),
    (signal.SIGHUP, "SIGHUP (a terminal hangup, or kill -HUP): this process's servers were killed; the run ends "
                    "as after Ctrl-C, reporting the tests that finished (a second SIGHUP or SIGTERM"),
], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_or_sighup_ends_the_run_as_ctrl_c_does_writing_what_finished(pytester, sig, said):
    """SIGTERM (a CI runner's cancel, a batch system's time limit) and SIGHUP (the ssh session of a
    long run dropped) killed the servers and then pytest at once: no summary, no report, no
    baseline of the tests that had finished, not a word. Each now ends the run as Ctrl-C does, its
    servers killed first; a kill -HUP leaves the output where it was, a file here, no terminal to lose."""
    project(pytester, methods=("ar",), prompts=1, max_new_tokens=4)
    pytester.makepyfile(test_sig=RECORDS_THEN_HOLDS_TEST)
    proc = start(pytester.path, "--specdec-report=out", "test_sig.py")
    noted: list[int] = []
    try:
        wait_holding(pytester.path, proc)
        noted = engine_pids(pytester.path)
        assert len(noted) == 1, f"expected one server, found {noted}"
        proc.send_signal(sig)
        assert wait_gone(noted, timeout=GONE_WITHIN_S) == []
        code = proc.wait(timeout=120)
        out = (pytester.path / "pytest.out").read_text()
        assert code == pytest.ExitCode.INTERRUPTED, out[-3000:]
        assert f"KeyboardInterrupt: {said}" in out
        rows = json.loads((pytester.path / "out" / "results.json").read_text())["results"]
        assert [row["test_id"] for row in rows] == ["test_generation[ar-tp1-chat]"]
        assert not list((pytester.path / ".specdec" / "artifacts").glob("run-*/after-hangup.log"))
    finally:
        kill_everything(proc, noted)


@pytest.mark.parametrize("dist", [(), ("-n", "1")], ids=["one process", "xdist"])
def test_a_sigterm_once_the_tests_are_over_lets_the_ending_write_what_finished(pytester, dist):
    """A SIGTERM that came while the run wrote its ending (an xdist controller waiting for its
    workers to stop, the report being written) raised KeyboardInterrupt out of
    pytest_sessionfinish: a raw traceback, exit 130, and no summary nor report at all."""
    project(pytester, methods=("ar",), prompts=1, max_new_tokens=4)
    pytester.makepyfile(test_generation=RECORDS_THEN_HOLDS_TEST.split("def test_hold")[0])
    pytester.makeconftest("""
import os, signal, pytest


@pytest.hookimpl(tryfirst=True)  # before the report is written, as a CI runner's cancel may come
def pytest_sessionfinish(session):
    if not hasattr(session.config, "workerinput"):
        os.kill(os.getpid(), signal.SIGTERM)
""")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly",
                                           "--specdec-report=out", *dist, timeout=180)
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.OK, out[-3000:]
    assert re.search(r"specdec: SIGTERM: (this process's servers were killed; )?the run is finishing what it "
                     r"writes \(summary, report, baselines\); a Ctrl-C stops it at once, leaving no file "
                     r"half-written, and a second SIGTERM or SIGHUP ends pytest at once", out), out[-3000:]
    assert "Traceback" not in out
    rows = json.loads((pytester.path / "out" / "results.json").read_text())["results"]
    assert [row["test_id"] for row in rows] == ["test_generation[ar-tp1-chat]"]
    assert engine_processes(pytester.path) == []


def test_an_interrupted_xdist_run_saves_no_durations_of_a_configuration_it_ran_in_part(pytester):
    """Under xdist the controller learns what its workers collected only from a worker that ends
    cleanly: interrupted (SIGTERM to the controller), every configuration that had run looked
    whole, and --specdec-save-baseline saved the seconds of its first test as its whole cost."""
    pytest.importorskip("xdist")
    project(pytester, methods=("ar",), prompts=1, max_new_tokens=4)
    pytester.makepyfile(test_sig="""
import os, time


def test_generation(specdec_server, specdec_workload, specdec_record):
    assert specdec_record.run(specdec_server, specdec_workload).completion_tokens > 0


def test_hold(specdec_server, specdec_workload, specdec_record, pytestconfig):
    (pytestconfig.rootpath / "holding").write_text(str(os.getpid()))
    time.sleep(240)
""")
    proc = start(pytester.path, "-n", "1", "--specdec-save-baseline", "test_sig.py")
    noted: list[int] = []
    try:
        noted = [wait_holding(pytester.path, proc), *engine_pids(pytester.path)]
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
        out = (pytester.path / "pytest.out").read_text()
        assert code == pytest.ExitCode.INTERRUPTED, out[-3000:]
        assert "durations not saved for ar-tp1: this run measured only some of the tests" in out, out[-3000:]
        assert not (pytester.path / "baselines" / "durations.json").exists()
    finally:
        kill_everything(proc, noted)


def test_an_interrupted_xdist_controller_says_the_wait_for_its_workers(pytester):
    """A SIGINT or SIGTERM to the controller alone left its workers in their tests: xdist waited
    for them in silence (execnet's 5 s, then xdist's 10 s), the servers up all along. The
    controller now says that wait and its bound as it starts. xdist's kill comes 1 s into the
    wait here, not 10 s: the line is said as the wait starts, and the worker that ignores the
    interrupt still ends only by that kill, its server with it."""
    pytester.makeconftest("from xdist.workermanage import NodeManager\n\nNodeManager.EXIT_TIMEOUT = 1\n")
    proc, noted = held_xdist_run(pytester)
    try:
        proc.send_signal(signal.SIGINT)  # the controller alone, passed on to a worker that ignores it
        proc.wait(timeout=120)
        assert wait_gone(noted, timeout=GONE_WITHIN_S) == []
        out = (pytester.path / "pytest.out").read_text()
        assert "specdec: interrupted: SIGINT passed on to the xdist workers, which end their tests and stop " \
               "their servers as after Ctrl-C; waiting for them (bound: execnet interrupts a worker still " \
               "running after 5s" in out, out[-3000:]
    finally:
        kill_everything(proc, noted)


# Holds until the run is interrupted; its fixture's teardown says that the worker ended its test
# itself (a worker xdist kills never tears it down).
HOLDS_WITH_A_TEARDOWN_TEST = (RECORDS_THEN_HOLDS_TEST + '''

import pytest


@pytest.fixture
def torn_down(pytestconfig):
    yield
    (pytestconfig.rootpath / "torn-down").write_text("yes")


def test_hold_then_tear_down(specdec_server, pytestconfig, torn_down):
    (pytestconfig.rootpath / "holding").write_text(str(os.getpid()))
    time.sleep(240)
''').replace("def test_hold(", "def _not_held(")


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM], ids=["SIGHUP", "SIGTERM"])
def test_a_signal_to_the_xdist_controller_alone_reaches_its_workers(pytester, sig):
    """A SIGHUP or SIGTERM to the controller alone left its workers in their tests: xdist waited,
    execnet's SIGINT after 5 s never reached a worker started with SIGINT ignored (a CI shell's
    background job), and xdist killed it 10 s later, its test's teardown never run. The controller
    now passes the signal on: each worker kills its servers and ends its test as after Ctrl-C,
    then the controller writes its summary and report."""
    pytest.importorskip("xdist")
    project(pytester, methods=("ar",), prompts=1, max_new_tokens=4)
    pytester.makepyfile(test_sig=HOLDS_WITH_A_TEARDOWN_TEST)
    environ = started_environ()
    with open(pytester.path / "pytest.out", "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly",
                                 "-n", "2", "test_sig.py", "--specdec-report=out"],
                                cwd=pytester.path, env=environ, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    noted: list[int] = []
    try:
        noted = [wait_holding(pytester.path, proc), *engine_pids(pytester.path)]
        assert len(noted) == 2, f"expected the worker and its server, found {noted}"
        proc.send_signal(sig)  # the controller alone
        proc.wait(timeout=120)
        out = (pytester.path / "pytest.out").read_text()
        assert wait_gone(noted, timeout=GONE_WITHIN_S) == [], out[-3000:]
        assert (pytester.path / "torn-down").exists(), out[-3000:]
        rows = json.loads((pytester.path / "out" / "results.json").read_text())["results"]
        assert [row["test_id"] for row in rows] == ["test_generation[ar-tp1-chat]"], out[-3000:]
        assert "specdec summary" in out, out[-3000:]
        assert f"specdec: interrupted: {sig.name} passed on to the xdist workers, which end their tests and " \
               f"stop their servers as after Ctrl-C; waiting for them (bound: execnet interrupts a worker " \
               f"still running after 5s" in out, out[-3000:]
    finally:
        kill_everything(proc, noted)


# Its own cleanup on the interrupt takes a while, as a `with` block's may: a second
# KeyboardInterrupt there would stop it before it says so.
SLOW_TEARDOWN_TEST = HOLDS_WITH_A_TEARDOWN_TEST.replace(
    '\n    time.sleep(240)\n',
    '\n    try:\n        time.sleep(240)\n    finally:\n        time.sleep(1)\n'
    '        (pytestconfig.rootpath / "cleaned-up").write_text("yes")\n')

# The controller's ending waits for the worker's teardown: only a worker interrupted at once, not
# by execnet once the controller tears its gateway down (after this hook), tears down first.
WAITS_FOR_THE_TEARDOWN = """
import time, pytest


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    if hasattr(session.config, "workerinput"):
        return
    root = session.config.rootpath
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (root / "torn-down").exists():
        time.sleep(0.1)
    (root / "torn-down-first").write_text(str((root / "torn-down").exists()))
"""


def sigint_project(pytester) -> None:
    pytest.importorskip("xdist")
    project(pytester, methods=("ar",), prompts=1, max_new_tokens=4)
    pytester.makepyfile(test_sig=SLOW_TEARDOWN_TEST)
    pytester.makeconftest(WAITS_FOR_THE_TEARDOWN)


@pytest.mark.parametrize("group", [False, True], ids=["controller alone", "process group"])
def test_a_sigint_not_from_a_terminal_reaches_the_xdist_workers_once(pytester, group):
    """`kill -INT` of the controller alone was not passed on: its workers stayed in their tests
    until execnet interrupted them, 5 s after the controller began tearing them down. It is now
    passed on at once; a SIGINT to the whole group reaches a worker directly and through the
    controller, and the worker takes the copy as the same interrupt, its teardown run whole."""
    sigint_project(pytester)
    proc = start(pytester.path, "-p", "no:randomly", "-n", "2", "test_sig.py", "--specdec-report=out")
    noted: list[int] = []
    try:
        noted = [wait_holding(pytester.path, proc), *engine_pids(pytester.path)]
        assert len(noted) == 2, f"expected the worker and its server, found {noted}"
        if group:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT)
        proc.wait(timeout=150)
        out = (pytester.path / "pytest.out").read_text()
        assert wait_gone(noted, timeout=GONE_WITHIN_S) == [], out[-3000:]
        assert (pytester.path / "torn-down-first").read_text() == "True", out[-3000:]
        assert (pytester.path / "cleaned-up").exists(), out[-3000:]
        rows = json.loads((pytester.path / "out" / "results.json").read_text())["results"]
        assert [row["test_id"] for row in rows] == ["test_generation[ar-tp1-chat]"], out[-3000:]
        assert "specdec: interrupted: SIGINT passed on to the xdist workers" in out, out[-3000:]
    finally:
        kill_everything(proc, noted)


def test_a_terminals_ctrl_c_is_not_passed_on_to_the_xdist_workers_it_reached(pytester):
    """A terminal's Ctrl-C reaches every worker itself: a copy from the controller would come as a
    second Ctrl-C in the middle of their teardown. The controller keeps it, and says it waits."""
    sigint_project(pytester)
    proc, terminal = start_on_a_terminal(pytester.path, sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                                         "-p", "no:randomly", "-n", "2", "test_sig.py", "--specdec-report=out")
    noted: list[int] = []
    try:
        noted = [wait_holding(pytester.path, proc), *engine_pids(pytester.path)]
        os.write(terminal.master, b"\x03")
        proc.wait(timeout=150)
        out = terminal.seen.decode(errors="replace")
        assert wait_gone(noted, timeout=GONE_WITHIN_S) == [], out[-3000:]
        assert (pytester.path / "torn-down-first").read_text() == "True", out[-3000:]
        assert (pytester.path / "cleaned-up").exists(), out[-3000:]
        assert "passed on" not in out, out[-3000:]
    finally:
        terminal.hang_up()
        kill_everything(proc, noted)


CONTROLLER_PASSING_ON = """
import os, signal, subprocess, sys
from pytest_specdec.servers import cleanup
from pytest_specdec.xdist_hooks import waiting_line

child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def remote_only():
    return []


def failing():
    raise RuntimeError("no pids")


workers = {"local": lambda: [child.pid], "remote": remote_only, "failing": failing}[sys.argv[1]]
cleanup.interrupt_on_signals(passes_on=workers)
try:
    os.kill(os.getpid(), signal.SIGTERM)
    signal.pause()
except KeyboardInterrupt:
    print(waiting_line(cleanup.passed_on(), 2), flush=True)
child.kill()
print(child.wait(), flush=True)
"""


@pytest.mark.parametrize("workers, said", [
    ("local", "interrupted: SIGTERM passed on to the 1 xdist worker on this host, which ends its test and stops "
              "its servers as after Ctrl-C; waiting for it and the 1 remote one, which no signal reached (bound: "
              "execnet interrupts a worker still running after 5s, and xdist kills one still running 10s later; "
              "its servers go with it)"),
    ("remote", "interrupted: waiting for the xdist workers to end their tests and stop their servers (bound: "
               "execnet interrupts a worker still in its test after 5s, and xdist kills one still running 10s "
               "later; its servers go with it)"),
    ("failing", "interrupted: waiting for the xdist workers to end their tests and stop their servers (bound: "
                "execnet interrupts a worker still in its test after 5s"),
])
def test_the_controllers_wait_line_says_whether_its_signal_was_passed_on(workers, said):
    """Once the controller passed its SIGTERM or SIGHUP on, its line still said that it waited for
    workers no signal had reached. It now says which it told, and the bound that still holds; a
    remote worker (no pid here) or workers whose pids it could not have keep the old line."""
    pytest.importorskip("xdist")
    done = subprocess.run([sys.executable, "-c", CONTROLLER_PASSING_ON, workers], capture_output=True,
                          text=True, timeout=60)
    lines = done.stdout.split("\n")
    assert lines[0].startswith(said), done.stdout + done.stderr
    assert lines[1] == str(-signal.SIGTERM if workers == "local" else -signal.SIGKILL), done.stdout + done.stderr


WORKER_TAKING_SIGNALS = """
import os, signal, sys, time
from pytest_specdec.servers import cleanup

cleanup.interrupt_on_signals(worker=sys.argv[1] == "worker")
late = len(sys.argv) > 2  # the second copy comes after the window a repeat has
cleanup.REPEAT_WINDOW_S = 0.2 if late else cleanup.REPEAT_WINDOW_S
for n in (1, 2, 3):
    try:
        if late and n == 2:
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.5)
        print(n, "absorbed", flush=True)
    except KeyboardInterrupt:
        print(n, "interrupted", flush=True)
"""


@pytest.mark.parametrize("role, said", [("worker", ["1 interrupted", "2 absorbed"]), ("single", ["1 interrupted"])])
def test_a_worker_takes_one_repeat_of_its_interrupt_as_the_same_interrupt(role, said):
    """Its controller passes a SIGHUP or SIGTERM on, and a hangup or a process group's SIGTERM also
    reaches the worker directly: the second must not end it at once, mid-ending. The one after
    does; a process of its own still ends at its second."""
    done = subprocess.run([sys.executable, "-c", WORKER_TAKING_SIGNALS, role], capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.split("\n")[:-1] == said, done.stdout + done.stderr
    assert done.returncode == -signal.SIGHUP


def test_a_copy_of_a_workers_interrupt_that_comes_late_is_a_new_one():
    """Only a copy within the repeat window is the same interrupt: one that comes later (execnet's
    own SIGINT, 5 s into xdist's shutdown) is not swallowed while the worker ends its test."""
    done = subprocess.run([sys.executable, "-c", WORKER_TAKING_SIGNALS, "worker", "late"], capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.split("\n")[:-1] == ["1 interrupted"], done.stdout + done.stderr
    assert done.returncode == -signal.SIGHUP


def start_on_a_terminal(root: Path, *command: str) -> tuple[subprocess.Popen, Terminal]:
    """`command` in `root` on a pseudo-terminal of its own, which is its controlling terminal (it
    leads the terminal's session); closing the terminal's master hangs it up, as a dropped ssh
    session does."""
    master, slave = pty.openpty()
    environ = started_environ()

    def controlling_terminal() -> None:
        default_sigint()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    try:
        proc = subprocess.Popen(command, cwd=root, env=environ, stdin=slave, stdout=slave, stderr=slave,
                                start_new_session=True, preexec_fn=controlling_terminal)
    finally:
        os.close(slave)
    return proc, Terminal(master)


class Terminal:
    """The master side of a pseudo-terminal, read all along (a terminal nobody reads blocks its
    writers) until `hang_up` closes it."""

    def __init__(self, master: int) -> None:
        self.master = master
        self.seen = bytearray()
        self._stop = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            if select.select([self.master], [], [], 0.1)[0]:
                try:
                    data = os.read(self.master, 65536)
                except OSError:  # the other side closed
                    return
                if not data:
                    return
                self.seen += data

    def hang_up(self) -> None:
        if self.master < 0:
            return
        self._stop.set()
        self._reader.join()
        os.close(self.master)
        self.master = -1



# A test whose figures make two plot pages (tokens/s, accept length), with the baseline of its configuration.
TWO_PLOTS_TEST = """
def test_figures(specdec_spec, specdec_record):
    specdec_record.metric("output_tok_s", 100.0)
    specdec_record.metric("accept_length", 1.0)
"""

# The report's plot pages drawn by two plot workers, each of which, as it takes its first page,
# notes its pid in `drawing-<pid>` (the run is inside its ending) and waits for the outer test's
# `go`: the wait is in the page's unpickling, in the worker, which imports nothing of the project.
HELD_PLOTS_CONFTEST = """
import operator

import pytest_specdec.plot_pool as plot_pool
import pytest_specdec.plots as plots

WAIT = ("import os, time\\n"
        "open('drawing-%d' % os.getpid(), 'w').close()\\n"
        "deadline = time.monotonic() + 120\\n"
        "while not os.path.exists('go') and time.monotonic() < deadline:\\n"
        "    time.sleep(0.05)\\n")


class _Wait:
    def __reduce__(self):
        return (exec, (WAIT,))


class _Held:
    # a workload of its own for each page, so that the pool draws them
    def __init__(self, page, n):
        self.page, self.workloads = page, (f"w{n}",)

    def __getattr__(self, name):
        return getattr(self.page, name)

    def __reduce__(self):
        return (operator.getitem, ([_Wait(), self.page], 1))


_pages_of = plots.pages_of
plots.pages_of = lambda rows: [_Held(page, n) for n, page in enumerate(_pages_of(rows))]
plot_pool.workers = lambda pages: 2
"""

CONFIGURED_PROJECT = "[tool.specdec]\nbackend = 'embedded'\n[tool.specdec.matrix.cpu]\nmethods = ['ar']\ntp = [1]\n"


def held_ending(pytester, *args: str) -> tuple[subprocess.Popen, list[int]]:
    """A run in its ending, its two plot workers held on their pages: pytest, and the workers' pids."""
    pytester.makepyprojecttoml(CONFIGURED_PROJECT)
    pytester.makepyfile(test_figures=TWO_PLOTS_TEST)
    pytester.makeconftest(HELD_PLOTS_CONFTEST)
    proc = start(pytester.path, "-p", "no:randomly", "--specdec-report=out", "--specdec-save-baseline", *args)
    deadline = time.monotonic() + 120
    while len(drawing := list(pytester.path.glob("drawing-*"))) < 2:
        if proc.poll() is not None or time.monotonic() > deadline:
            kill_everything(proc, [])
            pytest.fail(f"the plot workers never held:\n{(pytester.path / 'pytest.out').read_text()[-3000:]}")
        time.sleep(0.05)
    return proc, [int(path.name.split("-")[1]) for path in drawing]


def wait_said(root: Path, proc: subprocess.Popen, text: str) -> None:
    deadline = time.monotonic() + 60
    while text not in (root / "pytest.out").read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"never said {text!r}:\n{(root / 'pytest.out').read_text()[-3000:]}")
        time.sleep(0.05)


CTRL_C_IN_THE_ENDING = ("specdec: Ctrl-C: the run is finishing what it writes (summary, report, baselines); "
                        "a second Ctrl-C stops it at once, leaving no file half-written, and a SIGTERM or "
                        "SIGHUP ends pytest at once")


@pytest.mark.parametrize("dist", [(), ("-n", "1")], ids=["one process", "xdist"])
def test_a_ctrl_c_while_the_report_is_drawn_lets_the_ending_finish(pytester, dist):
    """A terminal's Ctrl-C (SIGINT to the whole foreground group) while the report's plots were
    drawn raised KeyboardInterrupt out of the ending: the report was lost ('report not written:
    interrupted'), and the plot workers died of it too. As a SIGTERM there does, the first now
    lets the ending finish, saying so in one line; the workers draw on. Under xdist the Ctrl-C
    reaches the xdist worker too, whose own ending is over by then: it says nothing."""
    if dist:
        pytest.importorskip("xdist")
    proc, workers = held_ending(pytester, *dist)
    try:
        os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C: pytest and its plot workers
        wait_said(pytester.path, proc, CTRL_C_IN_THE_ENDING)
        (pytester.path / "go").write_text("")
        code = proc.wait(timeout=120)
        out = (pytester.path / "pytest.out").read_text()
        assert code == pytest.ExitCode.OK, out[-3000:]
        assert out.count(CTRL_C_IN_THE_ENDING) == 1 and "Traceback" not in out, out[-3000:]
        assert "plot worker(s) failed" not in out and "1 passed" in out, out[-3000:]
        assert "specdec: report written to" in out, out[-3000:]
        assert (pytester.path / "out" / "plots" / "accept_length.png").is_file()
        assert "test_figures[ar-tp1" in (pytester.path / "baselines" / "cpu.json").read_text()
    finally:
        kill_everything(proc, workers)


def test_a_second_ctrl_c_stops_the_ending_in_one_line_and_a_resume_writes_the_report(pytester):
    """The second Ctrl-C stops the drawing (its workers killed) with the one line of what is not
    written and the run that writes it, exit status 2 as pytest's interrupted run: no traceback,
    no half-written file, and that run writes the report."""
    proc, workers = held_ending(pytester)
    try:
        os.killpg(proc.pid, signal.SIGINT)
        wait_said(pytester.path, proc, CTRL_C_IN_THE_ENDING)
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=120)
        out = (pytester.path / "pytest.out").read_text()
        assert code == pytest.ExitCode.INTERRUPTED, out[-3000:]
        assert "Traceback" not in out, out[-3000:]
        assert re.search(r"specdec: ERROR: report not written: interrupted while writing it into \S*out; no file "
                         r"there is half-written; the journal keeps this run's figures: a run with "
                         r"--specdec-resume and --specdec-report writes it without measuring again the "
                         r"tests that passed", out), out[-3000:]
        assert wait_gone(workers, timeout=GONE_WITHIN_S) == []
        assert not (pytester.path / "out").exists() or list((pytester.path / "out").iterdir()) == []
    finally:
        kill_everything(proc, workers)
    (pytester.path / "conftest.py").unlink()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "--specdec-resume",
                                           "--specdec-report=out", timeout=180)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-3000:]
    assert (pytester.path / "out" / "plots" / "accept_length.png").is_file()
    rows = json.loads((pytester.path / "out" / "results.json").read_text())["results"]
    assert [row["test_id"] for row in rows] == ["test_figures[ar-tp1]"]



# Two Ctrl-Cs as durations.json is saved, the ending's first write: the first let it go on, the second stops it.
CTRL_C_TWICE_IN_DURATIONS = """
import os, signal

import pytest_specdec.durations as durations

_save = durations.save


def save(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGINT)
    return _save(*args, **kwargs)


durations.save = save
"""


#: A second Ctrl-C's line where the ending had written nothing of a saving run with a report.
NONE_OF_THE_ENDING_WRITTEN = (
    "specdec: ERROR: durations.json, baseline and report not written: a second Ctrl-C stopped the run's "
    "ending; no file there is half-written; the journal keeps this run's figures: a run with "
    "--specdec-resume, --specdec-save-baseline and --specdec-report writes them without measuring again "
    "the tests that passed; durations.json: the next run with --specdec-save-baseline writes it again")


def test_a_second_ctrl_c_outside_the_report_stops_the_ending_in_one_line(pytester):
    """A Ctrl-C in a write that does not catch it (durations.json, the shard folder, another plugin's)
    left pytest_sessionfinish as ~40 lines of traceback, the process dead of SIGINT, and nothing
    said of the baseline and report it never wrote. One line now names them and the runs that
    write them; the run ends interrupted (2)."""
    pytester.makepyprojecttoml(CONFIGURED_PROJECT)
    pytester.makepyfile(test_figures=TWO_PLOTS_TEST)
    pytester.makeconftest(CTRL_C_TWICE_IN_DURATIONS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "--specdec-report=out",
                                           "--specdec-save-baseline", timeout=180)
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED, out[-3000:]
    assert "Traceback" not in out and out.count(CTRL_C_IN_THE_ENDING) == 1, out[-3000:]
    said = [line for line in out.splitlines() if "not written" in line]
    assert said == [NONE_OF_THE_ENDING_WRITTEN], out
    assert not (pytester.path / "out").exists() and not (pytester.path / "baselines").exists()


# Two Ctrl-Cs in another plugin's ending that runs before ours: a conftest met in collection
# (its folder is no test* folder, which pytest loads at start-up) is registered after the plugin.
CTRL_C_TWICE_BEFORE_OUR_ENDING = """
import os, signal


def pytest_sessionfinish(session):
    os.kill(os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGINT)
"""


def test_a_second_ctrl_c_before_our_ending_began_names_all_it_would_write(pytester):
    """A second Ctrl-C in an ending that runs before ours (a conftest found in collection) stopped
    it before the baseline and report were written, and the line said 'after its baseline and
    report were written'. It names them as not written, with the run that writes them."""
    pytester.makepyprojecttoml(CONFIGURED_PROJECT)
    suite = pytester.mkdir("suite")
    (suite / "test_figures.py").write_text(TWO_PLOTS_TEST)
    (suite / "conftest.py").write_text(CTRL_C_TWICE_BEFORE_OUR_ENDING)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "--specdec-report=out",
                                           "--specdec-save-baseline", timeout=180)
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED, out[-3000:]
    assert "Traceback" not in out and "were written" not in out, out[-3000:]
    said = [line for line in out.splitlines() if "not written" in line]
    assert said == [NONE_OF_THE_ENDING_WRITTEN], out
    assert not (pytester.path / "out").exists() and not (pytester.path / "baselines").exists()


# The project's own SIGINT handler (it notes each call, then stops as Python's does), and Ctrl-Cs in
# the ending, before our writes; after the run, whose handler SIGINT has.
THEIR_SIGINT_CONFTEST = """
import os, signal, pytest


def theirs(signum, frame):
    with open("theirs-called", "a") as out:
        out.write("1")
    raise KeyboardInterrupt


signal.signal(signal.SIGINT, theirs)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    for _ in range({presses}):
        os.kill(os.getpid(), signal.SIGINT)


def pytest_unconfigure(config):
    with open("sigint-after", "w") as out:
        out.write("theirs" if signal.getsignal(signal.SIGINT) is theirs else repr(signal.getsignal(signal.SIGINT)))
"""


@pytest.mark.parametrize("presses", [1, 2])
def test_a_projects_own_sigint_handler_has_the_endings_second_ctrl_c_and_gets_it_back(pytester, presses):
    """A conftest's SIGINT handler that raises took the ending's first Ctrl-C, which then stopped
    the ending as its second ('a second Ctrl-C stopped the run's ending'), the report unwritten.
    The first is the ending's to absorb, as under Python's handler; the second is the project's
    handler's, and SIGINT is its own again after the run."""
    pytester.makepyprojecttoml(CONFIGURED_PROJECT)
    pytester.makepyfile(test_figures=TWO_PLOTS_TEST)
    pytester.makeconftest(THEIR_SIGINT_CONFTEST.format(presses=presses))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "--specdec-report=out",
                                           timeout=180)
    out = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in out and out.count(CTRL_C_IN_THE_ENDING) == 1, out[-3000:]
    assert (pytester.path / "sigint-after").read_text() == "theirs"
    called = pytester.path / "theirs-called"
    if presses == 1:
        assert result.ret == pytest.ExitCode.OK and "specdec: report written to" in out, out[-3000:]
        assert not called.exists()
    else:
        assert result.ret == pytest.ExitCode.INTERRUPTED, out[-3000:]
        assert called.read_text() == "1"
        assert "specdec: ERROR: report not written: a second Ctrl-C stopped the run's ending" in out, out[-3000:]


# A Ctrl-C in the tests (pytest stops them, the ending begins), then one in the ending, before our writes.
CTRL_C_IN_THE_TESTS = TWO_PLOTS_TEST + """

def test_stopped():
    import os, signal, time
    # the Ctrl-C, to this process or to the xdist controller, which passes it on to this worker
    os.kill(os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid(), signal.SIGINT)
    time.sleep(60)
"""
CTRL_C_IN_THE_ENDING_CONFTEST = """
import os, signal, pytest


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    if not hasattr(session.config, "workerinput"):
        os.kill(os.getpid(), signal.SIGINT)
"""


@pytest.mark.parametrize("dist", [(), ("-n", "1")], ids=["one process", "xdist"])
def test_a_ctrl_c_in_the_ending_of_a_run_a_ctrl_c_stopped_stops_it_at_once(pytester, dist):
    """A Ctrl-C that stopped the tests did not count: the next, in the ending, was taken as the
    ending's first ('the run is finishing what it writes'), and a user who pressed twice had to
    press a third time. It is the second, as after a SIGTERM in the tests: it stops the ending
    in the one line."""
    if dist:
        pytest.importorskip("xdist")
    pytester.makepyprojecttoml(CONFIGURED_PROJECT)
    pytester.makepyfile(test_figures=CTRL_C_IN_THE_TESTS)
    pytester.makeconftest(CTRL_C_IN_THE_ENDING_CONFTEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "--specdec-report=out",
                                           *dist, timeout=180)
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED, out[-3000:]
    assert "Traceback" not in out and CTRL_C_IN_THE_ENDING not in out, out[-3000:]
    assert "specdec: ERROR: report not written: a second Ctrl-C stopped the run's ending" in out, out[-3000:]
    assert not (pytester.path / "out").exists()


def test_an_in_process_xdist_run_gives_sigint_back_as_it_found_it(pytester):
    """An in-process run under xdist left its controller's SIGINT handler (`_on_interrupt`, which
    passes a Ctrl-C on to workers) in the process that runs on: the ending now gives Python's own back."""
    pytest.importorskip("xdist")
    pytester.makepyprojecttoml(CONFIGURED_PROJECT)
    pytester.makepyfile(test_figures=TWO_PLOTS_TEST)
    before = signal.getsignal(signal.SIGINT)
    if before is not signal.default_int_handler:
        pytest.skip("this process's SIGINT handler is not Python's own")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:randomly", "-n", "1")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-3000:]
    assert signal.getsignal(signal.SIGINT) is before


def hangup_log(root: Path) -> Path:
    logs = list((root / ".specdec" / "artifacts").glob("run-*/after-hangup.log"))
    assert len(logs) == 1, f"expected one hangup log, found {logs}"
    return logs[0]




@pytest.mark.parametrize("first, second", [(signal.SIGHUP, signal.SIGHUP), (signal.SIGHUP, signal.SIGTERM),
                                           (signal.SIGTERM, signal.SIGHUP)])
def test_a_second_sighup_or_sigterm_ends_pytest_at_once(pytester, first, second):
    """The first ends the run as Ctrl-C does; the second, in that ending, ends pytest at once. The
    handlers are the plugin's in any run of a test asking for one of its fixtures: no server is
    booted (killing one is the other tests' point)."""
    project(pytester, methods=("ar",), prompts=1, max_new_tokens=4)
    pytester.makepyfile(test_hold=HOLDING_TEST.replace("(specdec_server, ", "(specdec_state, "))
    # the ending that the first signal starts is held by a teardown that sleeps
    pytester.makeconftest("""
import time, pytest

@pytest.fixture(autouse=True)
def slow_teardown(pytestconfig):
    yield
    (pytestconfig.rootpath / "tearing-down").write_text("1")
    time.sleep(240)
""")
    proc = start(pytester.path, "test_hold.py")
    noted: list[int] = []
    try:
        wait_holding(pytester.path, proc)
        noted = engine_pids(pytester.path)
        proc.send_signal(first)
        marker = pytester.path / "tearing-down"
        deadline = time.monotonic() + 60
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), (pytester.path / "pytest.out").read_text()[-3000:]
        proc.send_signal(second)
        assert proc.wait(timeout=60) == -second
    finally:
        kill_everything(proc, noted)


def test_a_terminal_hangup_ends_the_run_with_its_output_in_a_log(pytester):
    """A real hangup (the terminal's master closed, as sshd does when the connection drops): every
    write to the terminal fails from then on, which would break the ending. The output bound for
    the terminal goes to the run's log instead, and the report, the baselines and the JUnit file
    of the tests that finished are written."""
    project(pytester, methods=("ar",), prompts=1, max_new_tokens=4)
    pytester.makepyfile(test_sig=RECORDS_THEN_HOLDS_TEST)
    proc, terminal = start_on_a_terminal(
        pytester.path, sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_sig.py",
        "--specdec-report=out", "--specdec-save-baseline", "--junitxml=junit.xml")
    noted: list[int] = []
    try:
        wait_holding(pytester.path, proc)
        noted = engine_pids(pytester.path)
        assert len(noted) == 1, f"expected one server, found {noted}"
        terminal.hang_up()
        assert wait_gone(noted, timeout=GONE_WITHIN_S) == []
        code = proc.wait(timeout=120)
        log = hangup_log(pytester.path).read_text()
        assert code == pytest.ExitCode.INTERRUPTED, log[-3000:]
        assert "KeyboardInterrupt: SIGHUP (a terminal hangup, or kill -HUP): this process's servers were killed; " \
               "the run " \
               f"ends as after Ctrl-C, reporting the tests that finished; the terminal's output from here on " \
               f"is in {hangup_log(pytester.path)}" in log, log[-3000:]
        assert "1 passed" in log and "specdec: report" in log, log[-3000:]
        assert "\x1b[" not in log  # the terminal's colours stayed with it
        rows = json.loads((pytester.path / "out" / "results.json").read_text())["results"]
        assert [row["test_id"] for row in rows] == ["test_generation[ar-tp1-chat]"]
        assert "test_generation" in (pytester.path / "junit.xml").read_text()
        assert "test_generation[ar-tp1-chat]" in (pytester.path / "baselines" / "cpu.json").read_text()
    finally:
        terminal.hang_up()
        kill_everything(proc, noted)


def test_a_terminal_hangup_under_xdist_ends_the_run_with_every_process_output_in_the_log(pytester):
    """The session's shell gets the hangup and leaves: its job, the controller and the workers, get
    SIGHUP together. Each sends its terminal output to the run's log and ends as after Ctrl-C."""
    pytest.importorskip("xdist")
    project(pytester, methods=("ar",), prompts=1, max_new_tokens=4)
    pytester.makepyfile(test_sig=RECORDS_THEN_HOLDS_TEST)
    shell = f"{sys.executable} -m pytest -p no:cacheprovider -n 2 test_sig.py --specdec-report=out; echo ended"
    proc, terminal = start_on_a_terminal(pytester.path, "/bin/sh", "-c", shell)
    noted: list[int] = []
    try:
        worker = wait_holding(pytester.path, proc)
        controller = _parent(worker)
        noted = [worker, *engine_pids(pytester.path)]
        assert len(noted) == 2, f"expected the worker and its server, found {noted}"
        terminal.hang_up()
        assert wait_gone(noted, timeout=GONE_WITHIN_S) == []
        assert wait_gone([controller], timeout=120) == []
        log = hangup_log(pytester.path).read_text()
        rows = json.loads((pytester.path / "out" / "results.json").read_text())["results"]
        assert [row["test_id"] for row in rows] == ["test_generation[ar-tp1-chat]"], log[-3000:]
        assert "KeyboardInterrupt: SIGHUP (a terminal hangup, or kill -HUP)" in log, log[-3000:]
    finally:
        terminal.hang_up()
        kill_everything(proc, noted)


def _parent(pid: int) -> int:
    import psutil

    return psutil.Process(pid).ppid()


# Holds inside the test until the outer test says go, then measures on its server.
HOLDS_THEN_RECORDS_TEST = '''
import os, time


def test_generation(specdec_server, specdec_workload, specdec_record, pytestconfig):
    (pytestconfig.rootpath / "holding").write_text(str(os.getpid()))
    while not (pytestconfig.rootpath / "go").exists():
        time.sleep(0.05)
    assert specdec_record.run(specdec_server, specdec_workload).completion_tokens > 0
'''


def test_a_run_started_with_sighup_ignored_outlives_its_terminal(pytester):
    """`nohup pytest ... &` starts pytest with SIGHUP ignored, so that the run outlives the ssh
    session. The plugin's handler went in over that and killed every server on the hangup, and
    each test after it failed on a dead server. An ignored SIGHUP now stays ignored."""
    project(pytester, methods=("ar",), prompts=1, max_new_tokens=4)
    pytester.makepyfile(test_sig=HOLDS_THEN_RECORDS_TEST)

    def as_nohup() -> None:
        default_sigint()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    with open(pytester.path / "pytest.out", "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_sig.py"],
                                cwd=pytester.path, env=started_environ(), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=as_nohup)
    noted: list[int] = []
    try:
        wait_holding(pytester.path, proc)
        noted = engine_pids(pytester.path)
        assert len(noted) == 1, f"expected one server, found {noted}"
        os.killpg(proc.pid, signal.SIGHUP)  # the hangup reaches the whole job
        (pytester.path / "go").write_text("")
        code = proc.wait(timeout=120)
        assert code == pytest.ExitCode.OK, (pytester.path / "pytest.out").read_text()[-3000:]
    finally:
        kill_everything(proc, noted)
