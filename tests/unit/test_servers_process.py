"""ManagedServer against a real process: readiness, each failure's own message, teardown.

Fault behaviour comes from the engine's fault flags (the embedded engine once it exists, the
stand-in `fake_engine.py` until then); process-tree behaviour that needs test-only flags
(`--spawn-child`, `--ignore-sigterm`) always uses the stand-in. Every test ends by proving that
no process it started survives.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from pytest_specdec.servers import ServerError, cleanup, process
from pytest_specdec.servers.cleanup import descendants, registered
from pytest_specdec.servers.said_wait import SaidWait

from servers_support import FAKE_ENTRY, deadline_from_ready, default_sigint, server, spec, wait_gone

pytestmark = pytest.mark.timeout(120)


def generate(url: str, n: int = 4) -> dict:
    body = json.dumps({"text": "hello", "sampling_params": {"max_new_tokens": n, "temperature": 0}}).encode()
    req = urllib.request.Request(url + "/generate", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def fails_with(s, reason: str) -> ServerError:
    t0 = time.monotonic()
    with pytest.raises(ServerError) as info:
        s.start()
    e = info.value
    assert e.reason == reason, str(e)
    assert not s.is_running()
    e.elapsed = time.monotonic() - t0
    return e


def test_the_log_names_the_gpus_the_server_was_given(tmp_path):
    """Its log began with the command line alone: which GPUs a server had (to check that no two
    live servers shared one) was nowhere a user would look."""
    s = server(spec("ar", None, tp=2), tmp_path, entry=FAKE_ENTRY, gpus=(2, 3))
    s.start()
    try:
        first = s.log_path.read_text().splitlines()[0]
        assert first.startswith("# specdec: CUDA_VISIBLE_DEVICES=2,3 CUDA_DEVICE_ORDER=PCI_BUS_ID "), first
        assert first.endswith(" ".join(s.argv))
    finally:
        s.stop()
    hidden = server(spec("ar", None), tmp_path / "hidden", entry=FAKE_ENTRY, gpus=(9,), env={"CUDA_VISIBLE_DEVICES": "-1"})
    hidden.start()
    try:
        assert hidden.log_path.read_text().startswith("# specdec: CUDA_VISIBLE_DEVICES=-1 CUDA_DEVICE_ORDER=PCI_BUS_ID ")
    finally:
        hidden.stop()


def test_boot_check_alive_and_teardown_kill_the_whole_tree(tmp_path):
    s = server(spec("ar", None, "--spawn-child"), tmp_path, entry=FAKE_ENTRY)
    s.start()
    try:
        s.check_alive()
        tree = [s.pid] + descendants(s.pid)
        assert len(tree) >= 2, "the stand-in should have spawned a child"
        assert s.log_path == tmp_path / "ar-tp1.log"
        assert "The server is fired up and ready to roll!" in s.log_path.read_text()
        assert s.pid in registered()
    finally:
        s.stop()
    assert wait_gone(tree, timeout=0) == []
    assert s.pid not in registered()
    s.stop()  # idempotent


def test_sigterm_ignored_escalates_to_sigkill(tmp_path):
    s = server(spec("ar", None, "--ignore-sigterm", "--spawn-child"), tmp_path, entry=FAKE_ENTRY, term_grace=0.5)
    s.start()
    tree = [s.pid] + descendants(s.pid)
    t0 = time.monotonic()
    s.stop()
    assert time.monotonic() - t0 < 5
    assert wait_gone(tree, timeout=0) == []
    assert s.returncode == -signal.SIGKILL


def test_a_server_slow_to_honour_sigterm_has_the_rest_of_its_grace_said(tmp_path):
    """A server still running 3 s after SIGTERM was waited on in silence for the rest of its
    grace (10 s by default) before SIGKILL; that wait is now said once, as it goes on."""
    said: list[str] = []
    s = server(spec("ar", None, "--ignore-sigterm"), tmp_path, entry=FAKE_ENTRY, term_grace=4.0,
               announce=said.append)
    s.start()
    s.stop()
    assert s.returncode == -signal.SIGKILL
    assert said == ["server ar-tp1: still running 3s after SIGTERM; waiting up to 1s more before SIGKILL "
                    "(bound: the 4s SIGTERM grace)"], said
    quick = server(spec("ar"), tmp_path, entry=FAKE_ENTRY, announce=said.append)
    quick.start()
    quick.stop()
    assert len(said) == 1  # a server that exits on SIGTERM is stopped without a word


def test_gpus_become_cuda_visible_devices(tmp_path):
    s = server(spec("ar"), tmp_path, entry=FAKE_ENTRY, gpus=(2, 3), wait_gpu_release=False)
    with s:
        with urllib.request.urlopen(s.url + "/server_info", timeout=10) as resp:
            assert json.loads(resp.read())["cuda_visible_devices"] == "2,3"
    assert wait_gone([s.pid]) == []


def test_crash_during_warmup(tmp_path):
    s = server(spec("ddtree", 8, "--fault-crash-warmup"), tmp_path)
    e = fails_with(s, "warmup-crash")
    assert str(e).startswith("server ddtree-tp1-b8 crashed during warm-up (exited with code 1): "
                             "CUDA out of memory. Tried to allocate 2.00 GiB"), str(e)
    assert f"log: {s.log_path}" in str(e) and "last lines:" in str(e)
    assert e.elapsed < 30  # fails fast, not at the 60 s deadline
    assert wait_gone([s.pid]) == []


def test_a_crash_on_gpus_another_process_holds_names_that_process(tmp_path, monkeypatch):
    """A leased GPU that a process outside every lease and claim (a notebook, another user's job)
    fills made the server fail for memory, and the failure blamed the server alone: it now names
    who else holds the GPUs."""
    from types import SimpleNamespace

    import psutil

    held = {3: [os.getpid()]}  # this test's process stands in for the other user's job
    monkeypatch.setitem(sys.modules, "pynvml", SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetComputeRunningProcesses=lambda index: [
            SimpleNamespace(pid=pid, usedGpuMemory=70000 << 20) for pid in held.get(index, [])]))
    s = server(spec("ddtree", 8, "--fault-crash-warmup"), tmp_path, gpus=(2, 3))
    e = fails_with(s, "warmup-crash")
    me = psutil.Process()
    note = (f"; its GPUs were not free: GPU 3: pid {os.getpid()} (user {me.username()}, {me.name()}) holds 70000 MiB; "
            f"free them, or give the run other GPUs (CUDA_VISIBLE_DEVICES)")
    assert e.headline.startswith("server ddtree-tp1-b8 crashed during warm-up (exited with code 1): "
                                 "CUDA out of memory. Tried to allocate 2.00 GiB"), e.headline
    assert e.headline.endswith(note) and e.cause.endswith(note), e.headline
    held.clear()  # GPUs no one else holds: the failure is the server's, as before
    e = fails_with(server(spec("ddtree", 8, "--fault-crash-warmup"), tmp_path / "free", gpus=(2, 3)), "warmup-crash")
    assert "not free" not in str(e)


def test_a_crash_on_memory_a_dead_process_still_holds_says_so_and_the_fix(tmp_path, monkeypatch):
    """A SIGKILLed worker's lease is recovered once its pid is gone, but its server's memory may not be
    released yet: the next server on those GPUs failed for memory and nothing was named, as a dead pid
    was taken for one that blocks nothing."""
    from types import SimpleNamespace

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    monkeypatch.setitem(sys.modules, "pynvml", SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetComputeRunningProcesses=lambda index: [
            SimpleNamespace(pid=gone.pid, usedGpuMemory=70000 << 20)] if index == 2 else []))
    e = fails_with(server(spec("ddtree", 8, "--fault-crash-warmup"), tmp_path, gpus=(2, 3)), "warmup-crash")
    note = (f"; its GPUs were not free: GPU 2: 70000 MiB still held by pid {gone.pid}, no live process here "
            f"(a killed server whose memory the driver had not yet released: rerun, it frees within seconds; "
            f"or a process outside this container); free them, or give the run other GPUs (CUDA_VISIBLE_DEVICES)")
    assert e.headline.endswith(note) and e.cause.endswith(note), e.headline


def test_a_failure_names_the_gpus_the_server_ran_on_across_xdist(tmp_path):
    """Which GPUs a crashed configuration had was only in its log and the lease history."""
    import pickle

    s = server(spec("ddtree", 8, "--fault-crash-warmup"), tmp_path, gpus=(4, 5), wait_gpu_release=False,
               placement="GPUs 4,5 (NVIDIA H200)")
    e = fails_with(s, "warmup-crash")
    assert f"(log: {s.log_path}; on GPUs 4,5 (NVIDIA H200); last lines:" in str(e), str(e)
    assert str(pickle.loads(pickle.dumps(e))) == str(e)  # as a worker ships it to the controller


def test_a_crash_names_the_exit_status_of_a_server_slow_to_exit(tmp_path):
    # The fatal line is logged before the process exits; the report still names how it ended.
    late = (sys.executable, "-c", "import sys, time; print('RuntimeError: CUDA out of memory. Tried to allocate "
            "1.00 GiB', flush=True); time.sleep(0.8); sys.exit(1)")
    s = server(spec("ar"), tmp_path, entry=late)
    e = fails_with(s, "warmup-crash")
    assert str(e).startswith("server ar-tp1 crashed during warm-up (exited with code 1): CUDA out of memory. "
                             "Tried to allocate 1.00 GiB ("), str(e)  # the server's line, not the logged command's
    assert wait_gone([s.pid]) == []


def test_crash_for_listed_budgets_only(tmp_path):
    crashing = server(spec("ddtree", 12, "--fault-crash-budgets", "8,12"), tmp_path)
    e = fails_with(crashing, "warmup-crash")
    assert e.cause.startswith("CUDA error: an illegal instruction was encountered"), str(e)
    fine = server(spec("ddtree", 16, "--fault-crash-budgets", "8,12"), tmp_path)
    with fine:
        fine.check_alive()
    assert wait_gone([crashing.pid, fine.pid]) == []


def test_hang(tmp_path):
    # The hang begins once the engine is ready: the deadline starts there, so it need not cover
    # the model build (seconds on a busy CPU), and a short one is waited out.
    s = server(spec("ar", None, "--fault-hang"), tmp_path, startup_timeout=2, health_timeout=2)
    deadline_from_ready(s)
    e = fails_with(s, "hang")
    assert "hangs: /health_generate accepted connections but never answered within the 2s startup timeout" in str(e)
    assert wait_gone([s.pid]) == []


def test_slow_start_past_the_deadline(tmp_path):
    s = server(spec("ar", None, "--fault-slow-start", "60"), tmp_path, startup_timeout=2)
    e = fails_with(s, "slow-start")
    assert "not ready after the 2s startup timeout" in str(e)
    assert "raise --specdec-startup-timeout" in str(e)
    assert 2 <= e.elapsed < 10
    assert wait_gone([s.pid]) == []


class _Interrupted(BaseException):
    """What pytest-timeout's signal method (pytest.fail) or Ctrl-C raises into a running boot."""


def test_a_boot_interrupted_from_outside_stops_its_process(tmp_path):
    """An exception that is no ServerError (a pytest-timeout, Ctrl-C) raised while the server
    starts: the half-started process goes with it, instead of booting on beside the next test's
    boot of the same configuration (on a GPU, holding the memory that boot needs)."""
    s = server(spec("ar", None, "--fault-slow-start", "60"), tmp_path, entry=FAKE_ENTRY)

    def interrupt(signum, frame):
        raise _Interrupted()

    previous = signal.signal(signal.SIGUSR1, interrupt)  # SIGALRM is pytest-timeout's own
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGUSR1))
    timer.start()
    try:
        with pytest.raises(_Interrupted):
            s.start()
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
    assert s.pid is not None and wait_gone([s.pid], timeout=5) == []
    assert not s.is_running() and s.pid not in registered()


def test_slow_start_within_the_deadline_is_fine(tmp_path):
    s = server(spec("ar", None, "--fault-slow-start", "1"), tmp_path)
    with s:
        s.check_alive()
    assert wait_gone([s.pid]) == []


def test_port_already_in_use_is_caught_before_launch(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        s = server(spec("ar"), tmp_path, port=port)
        e = fails_with(s, "port-in-use")
        assert f"address 127.0.0.1:{port} already in use" in str(e)
        assert s.pid is None  # nothing was launched


def test_port_lost_in_a_race_shows_in_the_log_and_a_picked_port_is_retried(tmp_path, monkeypatch):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        monkeypatch.setattr(process, "port_in_use", lambda port, host="": False)  # lose the race
        # An explicit port: the server's own bind failure is reported as such.
        s = server(spec("ar"), tmp_path, port=taken)
        e = fails_with(s, "port-in-use")
        assert "already in use" in str(e) and f"log: {s.log_path}" in str(e)
        # A port we picked: pick again.
        ports = iter([taken])
        real_free_port = process.free_port
        monkeypatch.setattr(process, "free_port", lambda host: next(ports, None) or real_free_port(host))
        r = server(spec("ar"), tmp_path, entry=FAKE_ENTRY)
        with r:
            assert r.port != taken
    assert wait_gone([s.pid, r.pid]) == []


def test_exit_before_ready(tmp_path):
    s = server(spec("ar"), tmp_path, entry=(sys.executable, "-c", "import sys; sys.exit(3)"))
    e = fails_with(s, "exited")
    assert str(e).startswith("server ar-tp1 exited with code 3 before it was ready (no known fatal error")


OOM_KILLER = "out-of-memory killer (host memory, not GPU memory), which says so in the kernel's log"


def test_a_sigkill_its_log_does_not_explain_points_at_the_out_of_memory_killer(tmp_path):
    """'was killed by SIGKILL' alone left the user guessing: no process of the plugin's kills a live
    server, and the usual sender, the kernel's OOM killer, says so only in the kernel's log."""
    killed = server(spec("ar"), tmp_path / "boot",
                    entry=(sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"))
    e = fails_with(killed, "exited")
    assert str(e).startswith("server ar-tp1 was killed by SIGKILL before it was ready (no known fatal error "
                             f"in its log); nothing in its log says why: a SIGKILL is most often the kernel's "
                             f"{OOM_KILLER}: dmesg | grep -i oom, or journalctl -k (log: "), str(e)
    s = server(spec("ar"), tmp_path / "ready", entry=FAKE_ENTRY)
    with s:
        os.kill(s.pid, signal.SIGKILL)
        with pytest.raises(ServerError) as info:
            s.check_alive()
    assert info.value.reason == "died" and OOM_KILLER in info.value.cause, str(info.value)
    exited = server(spec("ar"), tmp_path / "exit", entry=(sys.executable, "-c", "import sys; sys.exit(3)"))
    assert OOM_KILLER not in str(fails_with(exited, "exited"))  # an exit status of its own is no kill


def test_a_refused_command_line_is_named_with_where_its_flags_come_from(tmp_path):
    """A server whose parser refuses its flags (SGLang without the DDTree pull request, given the
    default method_flags) said it "exited with code 2 before it was ready (no known fatal error in
    its log)", its complaint somewhere in the last lines of a usage text hundreds of lines long."""
    s = server(spec("ar", None, "--no-such-flag"), tmp_path, argv_hint="fix [tool.specdec.engine] extra_args")
    e = fails_with(s, "refused")
    assert str(e).startswith("server ar-tp1 cannot start: its command line was refused "
                             "(python -m pytest_specdec.engine: error: unrecognized arguments: --no-such-flag); "
                             "fix [tool.specdec.engine] extra_args (log: ")
    assert e.cause == "python -m pytest_specdec.engine: error: unrecognized arguments: --no-such-flag"


def test_death_after_ready_names_the_cause_and_is_remembered(tmp_path):
    s = server(spec("ddtree", 8, "--fault-crash-after", "1"), tmp_path)
    s.start()
    try:
        generate(s.url)
        with pytest.raises(OSError):
            generate(s.url)
        t0 = time.monotonic()
        with pytest.raises(ServerError) as info:
            s.check_alive()
        e = info.value
        assert e.reason == "died"
        assert str(e).startswith(
            "server ddtree-tp1-b8 died: CUDA error: an illegal instruction was encountered (log: "
        ), str(e)
        assert str(s.log_path) in str(e) and "last lines:" in str(e)
        assert s.diagnose() is e  # remembered: no second probe
        assert time.monotonic() - t0 < 5
    finally:
        s.stop()
    assert wait_gone([s.pid]) == []


def test_unresponsive_but_alive(tmp_path):
    s = server(spec("ar"), tmp_path, entry=FAKE_ENTRY, health_timeout=1)
    s.start()
    try:
        os.kill(s.pid, signal.SIGSTOP)
        with pytest.raises(ServerError) as info:
            s.check_alive()
        assert info.value.reason == "unresponsive"
        assert "/health did not answer within 1s (process alive" in str(info.value)
    finally:
        s.stop(grace=0.5)
    assert wait_gone([s.pid]) == []


def test_a_stopped_server_is_woken_to_honour_sigterm(tmp_path):
    """A process stopped by SIGSTOP (a debugger, a job-control stop) never acts on SIGTERM: it
    waited out the whole grace and was SIGKILLed, its shutdown (and its log's last lines) lost."""
    s = server(spec("ar"), tmp_path, entry=FAKE_ENTRY)
    s.start()
    os.kill(s.pid, signal.SIGSTOP)
    s.stop(grace=5)
    assert s.returncode != -signal.SIGKILL
    assert wait_gone([s.pid]) == []


STANDIN = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {support!r})
    from pytest_specdec.servers import cleanup
    if {no_pdeathsig!r}:
        cleanup.parent_death_preexec = lambda: None  # prove the Python-level layer alone
    from servers_support import FAKE_ENTRY, server, spec
    from pathlib import Path
    s = server(spec("ar", None, {child_flag!r}), Path({log_dir!r}), entry=FAKE_ENTRY)
    s.start()
    from pytest_specdec.servers.cleanup import descendants
    print(" ".join(str(p) for p in [s.pid] + descendants(s.pid)), flush=True)
    if {how!r} == "exit":
        sys.exit(3)
    time.sleep(120)
    """
)


@pytest.mark.parametrize(
    "how, sig, no_pdeathsig, child_flag",
    [
        ("exit", None, True, "--spawn-child"),  # atexit
        ("sleep", signal.SIGTERM, True, "--spawn-child"),  # our SIGTERM handler
        ("sleep", signal.SIGINT, True, "--spawn-child"),  # KeyboardInterrupt, then atexit
        ("sleep", signal.SIGKILL, True, "--spawn-child"),  # no Python runs: the watchdog kills the whole tree
        ("sleep", signal.SIGKILL, False, "--spawn-child"),  # ... with PR_SET_PDEATHSIG on the leader as well
        # a child that left the server's group (setsid) survived these two, which killed only groups
        ("exit", None, True, "--spawn-setsid-child"),
        ("sleep", signal.SIGTERM, True, "--spawn-setsid-child"),
        # ... and these, where no Python runs: an orphan by then, found by its owner token
        ("sleep", signal.SIGKILL, True, "--spawn-setsid-child"),
        ("sleep", signal.SIGKILL, False, "--spawn-setsid-child"),
    ],
)
def test_servers_die_with_their_parent(tmp_path, how, sig, no_pdeathsig, child_flag):
    code = STANDIN.format(support=str(Path(__file__).parent), no_pdeathsig=no_pdeathsig,
                          log_dir=str(tmp_path), how=how, child_flag=child_flag)
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              preexec_fn=default_sigint)
    pids: list[int] = []
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) >= 2, "stand-in did not start its server"
        if sig is not None:
            parent.send_signal(sig)
        parent.wait(timeout=30)
        assert wait_gone(pids) == []
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for pid in pids:  # a failed run must not leave its server behind
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


CLEAN_EXIT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {support!r})
    from pytest_specdec.servers import cleanup
    from servers_support import FAKE_ENTRY, server, spec
    from pathlib import Path
    for n in range(3):
        s = server(spec("ar", None), Path({log_dir!r}), entry=FAKE_ENTRY)
        s.start()
        s.stop()
    print(cleanup._watchdog.pid, flush=True)
    """
)


def test_a_process_that_started_servers_exits_without_leaving_its_watchdog(tmp_path):
    """A long run's process leaves nothing at its exit: its watchdog is told to end and reaped at
    exit, not left running beside an open pipe (which `-X dev` reports as ResourceWarnings)."""
    code = CLEAN_EXIT.format(support=str(Path(__file__).parent), log_dir=str(tmp_path))
    done = subprocess.run([sys.executable, "-X", "dev", "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "ResourceWarning" not in done.stderr, done.stderr
    watchdog_pid = int(done.stdout.split()[0])
    assert wait_gone([watchdog_pid]) == []


class _SlowPipe:
    """A watchdog's stdin whose write waits for `proceed`, saying whether it was closed meanwhile."""

    def __init__(self):
        self.writing, self.proceed = threading.Event(), threading.Event()
        self.closed = False
        self.closed_during_write = None

    def write(self, text):
        self.writing.set()
        self.proceed.wait(10)
        self.closed_during_write = self.closed

    def flush(self):
        pass

    def close(self):
        self.closed = True


class _FakeWatchdog:
    def __init__(self):
        self.stdin = _SlowPipe()

    def poll(self):
        return None

    def wait(self, timeout=None):
        return 0


def test_the_exits_watchdog_close_waits_for_a_registration_writing_to_it(monkeypatch):
    """The atexit close took the watchdog without the registry's lock: a registration on another
    thread, midway through its write, had the pipe closed under it."""
    fake = _FakeWatchdog()
    monkeypatch.setattr(cleanup, "_watchdog", fake)
    monkeypatch.setattr(cleanup, "_watchdog_owner", os.getpid())
    late = threading.Thread(target=cleanup.unregister, args=(999_999,))
    late.start()
    assert fake.stdin.writing.wait(10)
    closing = threading.Thread(target=cleanup._close_watchdog)
    closing.start()
    closing.join(0.5)  # unlocked, the close is done by now
    fake.stdin.proceed.set()
    late.join(10)
    closing.join(10)
    assert fake.stdin.closed_during_write is False
    assert fake.stdin.closed and cleanup._watchdog is None


def test_a_health_watchdog_verdict_during_warmup_is_a_hang(tmp_path):
    stuck = (sys.executable, "-c", "import time; print('[TP0] Health check failed. Server couldn\\'t get a "
             "response from detokenizer for last 20 seconds.', flush=True); time.sleep(60)")
    s = server(spec("ar"), tmp_path, entry=stuck)
    e = fails_with(s, "hang")
    assert str(e).startswith("server ar-tp1 hangs during warm-up: Health check failed.")
    assert wait_gone([s.pid]) == []


def test_group_members_are_the_server_and_its_child(tmp_path):
    from pytest_specdec.servers.cleanup import alive, group_members

    s = server(spec("ar", None, "--spawn-child"), tmp_path, entry=FAKE_ENTRY)
    with s:
        tree = sorted(group_members(s.pid))
        assert len(tree) >= 2 and s.pid in tree
        assert sorted(descendants(s.pid) + [s.pid]) == tree
        assert all(alive(pid) for pid in tree)
    assert group_members(s.pid) == []
    assert wait_gone(tree, timeout=0) == []
    assert not any(alive(pid) for pid in tree)


def test_a_slow_boot_is_said_while_it_lasts(tmp_path, monkeypatch):
    """A server loading for minutes (a large model on SGLang) printed nothing until it was ready
    or its startup timeout ran out: a run that looked hung. The wait is said after a quiet spell,
    naming the server, the time left and its setting, and the log's last line."""
    monkeypatch.setattr(process, "BOOT_QUIET_S", 0.5)
    said: list[str] = []
    s = server(spec("ar", None, "--fault-slow-start", "3"), tmp_path, announce=said.append,
               startup_setting="pyproject.toml [tool.specdec] key 'startup_timeout'")
    try:
        s.start()
        assert said, "a 3 s boot was never said"
        assert said[0].startswith("server ar-tp1: not ready after ")
        assert "(bound: the startup timeout, pyproject.toml [tool.specdec] key 'startup_timeout')" in said[0]
        assert "delayed 3 s by --fault-slow-start" in said[0] and str(s.log_path) in said[0]
        assert len(said) == 1  # then once a minute, not every poll
    finally:
        s.stop()
    assert wait_gone([s.pid]) == []


def test_a_boot_is_polled_quickly_at_first_then_every_poll_interval(tmp_path, monkeypatch):
    """The embedded engine is ready ~1.6 s after launch: polls every 0.5 s from the start waited up
    to that much longer on every boot. Quick polls first, then the poll interval."""
    monkeypatch.setattr(process, "QUICK_BOOT_S", 0.5)
    slept: list[tuple[float, float]] = []
    started = time.monotonic()

    class Time:
        monotonic = staticmethod(time.monotonic)

        @staticmethod
        def sleep(seconds: float) -> None:
            slept.append((time.monotonic() - started, seconds))
            time.sleep(seconds)

    monkeypatch.setattr(process, "time", Time)
    s = server(spec("ar", None, "--fault-slow-start", "1"), tmp_path)
    try:
        s.start()
    finally:
        s.stop()
    early = [seconds for at, seconds in slept if at < 0.4]
    late = [seconds for at, seconds in slept if at > 0.7]
    assert early and max(early) <= process.QUICK_POLL_INTERVAL_S, slept
    assert late and min(late) == s.poll_interval == process.POLL_INTERVAL_S, slept


class FakeClock:
    """Time that passes only when slept: a wait's words and bound without waiting for them."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.parametrize("gone_at, raises", [(4.0, False), (None, True)], ids=["goes", "stays"])
def test_a_process_that_outlives_sigkill_has_the_wait_for_it_said(tmp_path, monkeypatch, gone_at, raises):
    """A process the kernel holds (uninterruptible sleep, a GPU driver call) outlives SIGKILL, and
    teardown waited for it up to 10 s without a word: a frozen terminal. The wait is now said,
    once, after 3 s. The survivor is simulated (none can be made to order), on a fake clock."""
    clock = FakeClock()
    monkeypatch.setattr(process, "SaidWait", functools.partial(SaidWait, clock=clock.monotonic, sleep=clock.sleep))
    said: list[str] = []
    s = server(spec("ar", None, "--ignore-sigterm"), tmp_path, entry=FAKE_ENTRY, term_grace=0.2, announce=said.append)
    s.start()
    pid = s.pid
    holding = lambda: gone_at is None or clock.now < gone_at  # noqa: E731
    real_alive = cleanup.alive
    monkeypatch.setattr(cleanup, "group_members", lambda pgid: [pid] if pgid == pid and holding() else [])
    # the survivor's life is the fake one alone: on the fake clock the real process has no time to die
    monkeypatch.setattr(cleanup, "alive", lambda p: holding() if p == pid else real_alive(p))
    if raises:
        with pytest.raises(ServerError, match=rf"processes \[{pid}\] survived SIGKILL"):
            s.stop()
        monkeypatch.undo()
        cleanup.unregister(pid)
    else:
        s.stop()
    assert said == [f"server ar-tp1: pid {pid} still alive 3s after SIGKILL (stuck in the kernel: uninterruptible "
                    f"sleep, or a GPU driver call); waiting up to 7s more for it to go (bound: the 10s SIGKILL wait)"]
    assert wait_gone([pid]) == []


def test_a_process_gone_at_sigkill_is_not_waited_on_aloud(tmp_path, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(process, "SaidWait", functools.partial(SaidWait, clock=clock.monotonic, sleep=clock.sleep))
    said: list[str] = []
    s = server(spec("ar", None, "--ignore-sigterm"), tmp_path, entry=FAKE_ENTRY, term_grace=0.2, announce=said.append)
    s.start()
    s.stop()
    assert said == [] and s.returncode == -signal.SIGKILL
