"""Workers of one run on one attached server (`--specdec-server-url`): nothing is launched, so no GPU
lease keeps two workers apart, yet each worker's workload would read the other's as another
client's load (sharing.py) and fail both tests as shared. The attached server's measurement lease
(servers/attach_lease.py) lets one worker measure on it at a time."""

from __future__ import annotations

import os
import time

import pytest

pytest.importorskip("torch")
pytest.importorskip("xdist")

from test_bench_flow import attached_engine, project, run  # noqa: E402  (needs torch)

WORKLOADS = "".join(f"""
[[tool.specdec.workloads]]
name = "w{i}"
prompts = "chat"
num_prompts = 8
max_new_tokens = 64
concurrency = 2
""" for i in (1, 2, 3, 4))


def test_two_workers_on_one_attached_server_measure_one_at_a_time(pytester):
    """`--dist load`, which a user may keep in addopts, splits one configuration's workloads
    across the workers: each is measured alone on the server, none shared."""
    with attached_engine("--method", "ddtree", "--budget", "8") as (url, _):
        project(pytester, budgets=(8,), backend="auto", extra="")
        text = (pytester.path / "pyproject.toml").read_text()
        start = text.index("[[tool.specdec.workloads]]")
        end = text.index("[tool.specdec.engine]")
        (pytester.path / "pyproject.toml").write_text(text[:start] + WORKLOADS + "\n" + text[end:])
        result = run(pytester, f"--specdec-server-url={url}", "-n", "2", "--dist", "load")
    out = result.stdout.str()
    assert "was shared while" not in out and "did not flush" not in out, out[-4000:]
    result.assert_outcomes(passed=4)
    said = result.stderr.str()
    assert "[gw0] server ddtree-tp1-b8: workload" in said and "[gw1] server ddtree-tp1-b8: workload" in said, said


def test_the_lease_waits_says_its_wait_once_and_names_the_holder_when_it_gives_up(tmp_path, monkeypatch):
    from pytest_specdec.servers import attach_lease
    from pytest_specdec.servers.attach_lease import AttachedLease, AttachedLeaseError

    monkeypatch.setattr(attach_lease, "QUIET_S", 0.2)
    url = "http://gpu-box:30000/"
    holder = AttachedLease(tmp_path, url, timeout=5, setting="--specdec-gpu-wait-timeout")
    holder.acquire("test_a[w1]")
    said: list[str] = []
    waiter = AttachedLease(tmp_path, url, timeout=0.5, setting="--specdec-gpu-wait-timeout", announce=said.append)
    with pytest.raises(AttachedLeaseError) as info:
        waiter.acquire("test_b[w2]")
    assert str(info.value).startswith("test_b[w2] waited 0.5s for the attached server http://gpu-box:30000, which "
                                      f"another worker of this run measures on (pid {os.getpid()}, test_a[w1], since ")
    assert str(info.value).endswith("); raise --specdec-gpu-wait-timeout to wait longer")
    assert len(said) == 1 and said[0].startswith("test_b[w2] waits for the attached server http://gpu-box:30000: "
                                                 f"another worker of this run measures on it (pid {os.getpid()}, "
                                                 "test_a[w1], since "), said
    holder.release()
    waiter.acquire("test_b[w2]")  # free once released; a failed wait held nothing
    other = AttachedLease(tmp_path, "http://other-box:30000", timeout=0.1, setting="x")
    other.acquire("test_c")  # another URL is another server
    waiter.release(), other.release()


def test_a_worker_that_ends_a_test_queues_behind_the_one_waiting(tmp_path):
    """A worker reaches its next test's setup within milliseconds of its last teardown, well within
    a waiter's poll: without a queue it took the server back each time, and the other worker waited
    for its whole share of the run."""
    import threading

    from pytest_specdec.servers.attach_lease import AttachedLease, AttachedLeaseError

    url = "http://gpu-box:30000"
    first = AttachedLease(tmp_path, url, timeout=5, setting="--specdec-gpu-wait-timeout")
    second = AttachedLease(tmp_path, url, timeout=5, setting="--specdec-gpu-wait-timeout")
    first.acquire("test_a[w1]")
    turn, done = threading.Event(), threading.Event()

    def wait_then_hold() -> None:
        second.acquire("test_b[w1]")
        turn.set()
        done.wait(10)
        second.release()

    waiter = threading.Thread(target=wait_then_hold)
    waiter.start()
    try:
        time.sleep(0.3)  # the waiter polls, queued
        first.release()
        first.timeout = 1.0
        with pytest.raises(AttachedLeaseError, match=r"\(pid \d+, test_b\[w1\], since "):
            first.acquire("test_a[w2]")  # the next test of the worker that just let go waits its turn
        assert turn.is_set()
    finally:
        done.set()
        waiter.join()
    first.acquire("test_a[w2]")
    first.release()


def test_a_child_the_test_forked_does_not_keep_the_server(tmp_path):
    """A process forked during the test (a multiprocessing pool that outlives it) shares the lock's
    descriptor: the release frees the server all the same."""
    from pytest_specdec.servers.attach_lease import AttachedLease

    url = "http://gpu-box:30000"
    holder = AttachedLease(tmp_path, url, timeout=5, setting="--specdec-gpu-wait-timeout")
    holder.acquire("test_a[w1]")
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # lives on, holding the inherited descriptor, until the parent closes the pipe
        os.close(write)
        os.read(read, 1)
        os._exit(0)
    os.close(read)
    try:
        holder.release()
        other = AttachedLease(tmp_path, url, timeout=0.5, setting="--specdec-gpu-wait-timeout")
        other.acquire("test_b[w2]")
        other.release()
    finally:
        os.close(write)
        os.waitpid(child, 0)


def test_a_long_url_or_an_unusable_folder_is_one_line_naming_the_file_and_the_setting(tmp_path):
    """A URL behind a long proxy path made a lock file name past 255 bytes: a traceback in every test."""
    from pytest_specdec.servers.attach_lease import AttachedLease, AttachedLeaseError

    long_url = "https://gateway.example.com/" + "/".join(f"segment{i:03d}" for i in range(40))
    lease = AttachedLease(tmp_path, long_url, timeout=1, setting="--specdec-gpu-wait-timeout")
    lease.acquire("test_a")  # its file name ends in the URL's digest
    other = AttachedLease(tmp_path, long_url + "x", timeout=0.1, setting="--specdec-gpu-wait-timeout")
    other.acquire("test_b")  # another URL with the same start is another server
    lease.release(), other.release()
    (tmp_path / "file").write_text("")
    blocked = AttachedLease(tmp_path / "file" / "leases", "http://gpu-box:30000", timeout=1, setting="x",
                            folder_setting="--specdec-artifacts")
    with pytest.raises(AttachedLeaseError) as info:
        blocked.acquire("test_c")
    assert str(info.value).startswith(f"cannot keep the attached server's turn file {tmp_path / 'file' / 'leases'}: ")
    assert str(info.value).endswith("; --specdec-artifacts names the folder it is kept in (under run-*/leases): "
                                    "make it writable, or point it at one that is"), info.value


def test_the_holder_is_named_by_its_xdist_worker_id(tmp_path, monkeypatch):
    """Users see `gw0`, `gw1` in xdist's output, not pids: the wait names the holder's worker too."""
    from pytest_specdec.servers.attach_lease import AttachedLease, AttachedLeaseError

    url = "http://gpu-box:30000"
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    holder = AttachedLease(tmp_path, url, timeout=5, setting="--specdec-gpu-wait-timeout")
    holder.acquire("test_a[w1]")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    waiter = AttachedLease(tmp_path, url, timeout=0.2, setting="--specdec-gpu-wait-timeout")
    with pytest.raises(AttachedLeaseError, match=rf"\(gw1, pid {os.getpid()}, test_a\[w1\], since "):
        waiter.acquire("test_b[w2]")
    holder.release()



def _wait_then_say(directory, name: str, said) -> None:
    from pytest_specdec.servers.attach_lease import AttachedLease

    lease = AttachedLease(directory, "http://gpu-box:30000", timeout=30, setting="--specdec-gpu-wait-timeout")
    lease.acquire(f"test_{name}")
    said.put(name)
    time.sleep(0.05)
    lease.release()


def test_waiters_get_the_server_in_the_order_they_asked(tmp_path):
    """Four workers wait, one after the other, while a fifth holds the server: they get it in that
    order. Waiters that raced for a flock got it in any order."""
    import multiprocessing

    from pytest_specdec.servers.attach_lease import AttachedLease

    fork = multiprocessing.get_context("fork")
    holder = AttachedLease(tmp_path, "http://gpu-box:30000", timeout=5, setting="--specdec-gpu-wait-timeout")
    holder.acquire("test_holder")
    said = fork.Queue()
    waiters = []
    try:
        for name in "abcd":
            waiter = fork.Process(target=_wait_then_say, args=(tmp_path, name, said), daemon=True)
            waiter.start()
            waiters.append(waiter)
            time.sleep(0.25)  # a few of its polls: it has asked before the next
        holder.release()
        assert [said.get(timeout=10) for _ in "abcd"] == list("abcd")
    finally:
        for waiter in waiters:
            waiter.join(10)
            if waiter.is_alive():
                waiter.kill()



def test_a_waiter_killed_in_line_does_not_hold_up_the_ones_behind_it(tmp_path):
    """A worker killed while it waits (a crash, `kill -9`) cannot leave the line: its pid is gone, so
    the next waiter takes its place."""
    import multiprocessing
    import signal

    from pytest_specdec.servers.attach_lease import AttachedLease

    fork = multiprocessing.get_context("fork")
    holder = AttachedLease(tmp_path, "http://gpu-box:30000", timeout=5, setting="--specdec-gpu-wait-timeout")
    holder.acquire("test_holder")
    doomed = fork.Process(target=_wait_then_say, args=(tmp_path, "doomed", fork.Queue()), daemon=True)
    doomed.start()
    time.sleep(0.3)  # in line, first
    os.kill(doomed.pid, signal.SIGKILL)
    doomed.join(10)
    holder.release()
    behind = AttachedLease(tmp_path, "http://gpu-box:30000", timeout=1, setting="--specdec-gpu-wait-timeout")
    behind.acquire("test_behind")
    behind.release()
