"""Two pytest runs on one host attaching one server (`--specdec-server-url`): each run's lease folder
is its own, so only the host-wide turn (servers/attach_lease.py, in the GPU claims folder) keeps
them from measuring at once, each reading the other's requests as another client's. The other run
is a subprocess with a run folder of its own and the same claims folder."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytest_specdec.servers import attach_lease
from pytest_specdec.servers.attach_lease import AttachedLease, AttachedLeaseError, HostTurn

pytestmark = pytest.mark.timeout(120)

URL = "http://gpu-box:30000"
SETTING = "--specdec-gpu-wait-timeout"


def _other_run(procs: list, tmp_path: Path, url: str = URL) -> subprocess.Popen:
    """Another run's test on the server: its own run folder, the host's claims; holds the turn
    (`held` on stdout) until told `release` on stdin, then says `released` and stays alive."""
    code = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from pytest_specdec.servers.attach_lease import AttachedLease, HostTurn
        host = HostTurn(Path({str(tmp_path / 'claims')!r}), run="run-a", project="/home/ana/bench")
        lease = AttachedLease(Path({str(tmp_path / 'run-a' / 'leases')!r}), {url!r}, timeout=5,
                              setting="x", host=host)
        lease.acquire("test_theirs[chat]")
        print("held", flush=True)
        assert sys.stdin.readline().strip() == "release"
        lease.release()
        print("released", flush=True)
        sys.stdin.readline()
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    procs.append(proc)
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _mine(tmp_path: Path, timeout: float, said: list[str] | None = None, url: str = URL) -> AttachedLease:
    host = HostTurn(tmp_path / "claims", run="run-b", project="/home/bo/bench", setting="--specdec-gpu-claims")
    return AttachedLease(tmp_path / "run-b" / "leases", url, timeout=timeout, setting=SETTING,
                         announce=None if said is None else said.append, host=host)


def test_a_run_waits_for_another_runs_test_on_the_server_and_names_that_run(tmp_path, procs, monkeypatch):
    """Two runs' folders share no file: without the host's turn both measured at once."""
    monkeypatch.setattr(attach_lease, "QUIET_S", 0.2)
    theirs = _other_run(procs, tmp_path, URL + "/")  # another spelling of the same server
    said: list[str] = []
    mine = _mine(tmp_path, timeout=0.6, said=said)
    with pytest.raises(AttachedLeaseError) as info:
        mine.acquire("test_mine[chat]")
    since = r"since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
    holder = rf"pid {theirs.pid} \(user [^,]+, run run-a, project /home/ana/bench, {since}\)"
    assert len(said) == 1, said
    assert re.fullmatch(
        rf"test_mine\[chat\] waits for the attached server {URL}: another run on this host measures on it "
        rf"\({holder}\), and two at once would each fail as shared; waiting up to \d+s more \({SETTING}\)", said[0]), said
    assert re.fullmatch(
        rf"test_mine\[chat\] waited 0.6s for the attached server {URL}, which another run on this host "
        rf"measures on \({holder}\); raise {SETTING} to wait longer", str(info.value)), info.value
    theirs.stdin.write("release\n")
    theirs.stdin.flush()
    assert theirs.stdout.readline().strip() == "released"
    mine.timeout = 5
    mine.acquire("test_mine[chat]")  # its turn once the other run's test is over
    mine.release()


def test_runs_take_turns_one_test_at_a_time(tmp_path, procs):
    """While this run holds the server, the other run's test waits; once it lets go, that test has it."""
    mine = _mine(tmp_path, timeout=5)
    mine.acquire("test_mine[chat]")
    code = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from pytest_specdec.servers.attach_lease import AttachedLease, HostTurn
        host = HostTurn(Path({str(tmp_path / 'claims')!r}), run="run-a", project="/home/ana/bench")
        lease = AttachedLease(Path({str(tmp_path / 'run-a' / 'leases')!r}), {URL!r}, timeout=30, setting="x",
                              host=host)
        print("waiting", flush=True)
        lease.acquire("test_theirs[chat]")
        print("held", time.time(), flush=True)
        lease.release()
    """)
    theirs = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    procs.append(theirs)
    assert theirs.stdout.readline().strip() == "waiting"
    time.sleep(1.0)  # several of its polls: it would have the server by now were it not kept waiting
    let_go = time.time()
    mine.release()
    word, when = theirs.stdout.readline().split()
    assert word == "held" and float(when) >= let_go, (when, let_go)
    assert theirs.wait(10) == 0


def test_a_killed_run_frees_the_server(tmp_path, procs):
    """The kernel drops a dead process's flock: a run killed mid-test (kill -9, an OOM kill) leaves
    nothing to clean up."""
    theirs = _other_run(procs, tmp_path)
    mine = _mine(tmp_path, timeout=0.3)
    with pytest.raises(AttachedLeaseError, match=rf"another run on this host measures on \(pid {theirs.pid} "):
        mine.acquire("test_mine[chat]")
    os.kill(theirs.pid, signal.SIGKILL)
    theirs.wait()
    mine.timeout = 5
    mine.acquire("test_mine[chat]")
    mine.release()


def test_the_runs_own_workers_queue_at_home_behind_the_one_that_waits_for_the_other_run(tmp_path, procs):
    """A test takes its run's turn, then the host's: another worker of this run waits for the first,
    named as waiting for the other run, rather than both contending host-wide."""
    theirs = _other_run(procs, tmp_path)
    import threading

    first = _mine(tmp_path, timeout=5)
    waiting = threading.Thread(target=lambda: (first.acquire("test_a[chat]"), first.release()))
    waiting.start()
    try:
        time.sleep(0.5)  # the first holds its run's turn and waits for the host's
        second = _mine(tmp_path, timeout=0.3)
        with pytest.raises(AttachedLeaseError, match=r"which another worker of this run measures on \(pid \d+, "
                                                     r"test_a\[chat\], since [\d:]+, waiting for another run on this host\)"):
            second.acquire("test_b[chat]")
    finally:
        theirs.stdin.write("release\n")
        theirs.stdin.flush()
        waiting.join(10)
    second.timeout = 5
    second.acquire("test_b[chat]")
    second.release()


def test_a_ctrl_c_during_the_wait_for_the_other_run_leaves_nothing_held(tmp_path, procs, monkeypatch):
    monkeypatch.setattr(attach_lease, "QUIET_S", 0.1)
    theirs = _other_run(procs, tmp_path)

    def interrupt(words: str) -> None:
        raise KeyboardInterrupt

    mine = _mine(tmp_path, timeout=5)
    mine.announce = interrupt
    with pytest.raises(KeyboardInterrupt):
        mine.acquire("test_mine[chat]")
    assert (tmp_path / "claims" / "attached-http___gpu-box_30000.queue").read_text() == "[]"  # out of the line
    assert (tmp_path / "run-b" / "leases" / "attached-http___gpu-box_30000.queue").read_text() == "[]"
    home = AttachedLease(tmp_path / "run-b" / "leases", URL, timeout=0.2, setting=SETTING)
    home.acquire("test_next")  # the run's own turn is free
    home.release()
    theirs.stdin.write("release\n")
    theirs.stdin.flush()
    assert theirs.stdout.readline().strip() == "released"
    mine.announce = None
    mine.acquire("test_mine[chat]")  # and the host's
    mine.release()


@pytest.mark.parametrize("spelling", [URL + "/", "HTTP://GPU-Box:30000", "http://gpu-box:30000//"])
def test_spellings_of_one_server_are_one_turn(tmp_path, spelling):
    """A trailing slash, case: one server, one file. `localhost` and `127.0.0.1` stay apart (module docstring)."""
    mine = _mine(tmp_path, timeout=5)
    other = _mine(tmp_path, timeout=5, url=spelling)
    assert other.path == mine.path and other.host_path == mine.host_path
    assert _mine(tmp_path, 5, url="http://gpu-box").host_path == _mine(tmp_path, 5, url="http://gpu-box:80").host_path
    assert _mine(tmp_path, 5, url="http://localhost:30000").host_path != \
        _mine(tmp_path, 5, url="http://127.0.0.1:30000").host_path


def test_a_claims_folder_that_is_no_folder_is_one_line_naming_it_and_the_setting(tmp_path):
    (tmp_path / "claims").write_text("")
    with pytest.raises(AttachedLeaseError) as info:
        _mine(tmp_path, timeout=1).acquire("test_mine[chat]")
    assert str(info.value) == (
        f"cannot keep the attached server's host-wide turn file {tmp_path / 'claims' / 'attached-http___gpu-box_30000.lock'}: "
        "not a folder this user can write in; --specdec-gpu-claims names the folder every run on this host keeps "
        "it in: make it writable by every user, or point it at one on a local filesystem that is")
    home = AttachedLease(tmp_path / "run-b" / "leases", URL, timeout=0.2, setting=SETTING)
    home.acquire("test_next")  # the run's turn was let go
    home.release()


def test_the_header_names_the_folder_of_the_attached_servers_turn(pytester, tmp_path):
    pytester.makepyprojecttoml('[tool.specdec]\nbackend = "auto"\n[tool.specdec.matrix.cpu]\nmethods = ["ar"]\n')
    pytester.makepyfile("def test_cell(specdec_spec):\n    pass\n")
    chosen = tmp_path / "claims"
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--co", "--specdec-server-url=http://127.0.0.1:9",
                                          f"--specdec-gpu-claims={chosen}")
    result.stdout.fnmatch_lines([f"specdec: attached server's turn {chosen} (command line): another run on this host that "
                                 "attaches it waits for this one's test on it"])


@pytest.mark.parametrize("planted", ["no start time", "another start time"])
def test_a_waiter_killed_in_the_hosts_line_whose_pid_lives_on_does_not_hold_it_up(tmp_path, procs, planted):
    """The host's line outlives runs: a waiter killed in it (a CI job cancelled, `kill -9`) leaves its
    entry, and its pid is soon another process's (a container's pytest is pid 1 every time). Without
    its start time that process was read as the waiter, first in line for good, and every run of the
    host then waited out its timeout on every test."""
    import json

    reused = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    procs.append(reused)
    mine = _mine(tmp_path, timeout=1)
    mine.host_path.parent.mkdir(parents=True)
    stale = ["deadbeef-0123", reused.pid] + ([] if planted == "no start time" else [12345.0])
    mine.host_path.with_suffix(".queue").write_text(json.dumps([stale]))
    mine.acquire("test_mine[chat]")
    mine.release()


@pytest.mark.parametrize("kept", ["lock", "queue"])
def test_a_link_planted_in_the_claims_folder_is_one_line_saying_remove_it(tmp_path, kept):
    """The claims folder is every user's: a link there is never followed, and the line says so and
    what to do, as a GPU claim's does (it said 'Too many levels of symbolic links; make it writable')."""
    victim = tmp_path / "victim"
    victim.write_text("mine")
    mine = _mine(tmp_path, timeout=1)
    planted = mine.host_path.with_suffix(f".{kept}")
    planted.parent.mkdir(parents=True)
    planted.symlink_to(victim)
    with pytest.raises(AttachedLeaseError) as info:
        mine.acquire("test_mine[chat]")
    assert str(info.value) == (
        f"attached server's host-wide turn file {planted} is a symbolic link (made by user "
        f"{attach_lease.host_claims.user_name()}), which a claim never follows (another user of the folder could "
        "point it at one of your files): remove the link (in a shared folder only its owner or root can), or set "
        "--specdec-gpu-claims to another folder every run on this host uses")
    assert victim.read_text() == "mine"


def test_a_queue_another_user_kept_read_only_is_one_line_naming_it_and_saying_remove_it(tmp_path, monkeypatch):
    """Another user's queue file this one may only read (as open_shared then gives it): it said the lock
    file's name, 'Invalid argument', and to make the folder writable, which it was."""
    import errno as errno_

    opened = attach_lease.host_claims.open_shared
    monkeypatch.setattr(attach_lease.host_claims, "open_shared", lambda path: os.open(path, os.O_RDONLY)
                        if path.suffix == ".queue" else opened(path))
    mine = _mine(tmp_path, timeout=1)
    queue = mine.host_path.with_suffix(".queue")
    queue.parent.mkdir(parents=True)
    queue.write_text("[]")
    with pytest.raises(AttachedLeaseError) as info:
        mine.acquire("test_mine[chat]")
    assert str(info.value) == (
        f"attached server's host-wide turn file {queue}: {os.strerror(errno_.EACCES)}; remove it (a run makes it "
        "afresh; in a shared folder only its owner or root can), or set --specdec-gpu-claims to another folder "
        "every run on this host uses")
    home = AttachedLease(tmp_path / "run-b" / "leases", URL, timeout=0.2, setting=SETTING)
    home.acquire("test_next")  # the run's turn was let go
    home.release()
