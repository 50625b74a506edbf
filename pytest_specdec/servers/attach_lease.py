"""`AttachedLease`: one worker of a run at a time measures on an attached server.

A launched server is the worker's own, on GPUs leased to it (leases.py). An attached one
(`--specdec-server-url`) is the same server to every xdist worker, and a `--dist` mode that
splits a configuration's tests (`load`, which users keep in addopts) had two workers send their
workloads to it at once: each read the other's requests as another client's (sharing.py) and
both tests failed as shared, on a server nobody else used. So a test holds an exclusive `flock`
on one file per URL in the run's lease folder while it uses the server (warm-up, cache flush,
measurement, reference), and another worker's test waits for it, as a configuration waits for
GPUs: bounded by --specdec-gpu-wait-timeout, said once past `QUIET_S`. The kernel drops a flock
when its process exits, so a killed worker frees the server with nothing left to clean up.
Files are never deleted: unlinking a lock file races with a process that has just opened it.

Waiters take turns first come, first served: each writes a ticket at the end of a line kept in a
second file (under its flock), and only the first in line may take the turn. A worker whose test
has just ended reaches its next test's setup in milliseconds, well within a waiter's poll, so
without the line it took the turn back every time; and where waiters raced for a flock, one of
three could lose each race and wait out the timeout while the other two passed the server back and
forth. A waiter leaves the line with the turn, on giving up, or (killed) when its pid is gone.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from pytest_specdec.servers.said_wait import SaidWait

#: How long a wait for another worker's test goes unsaid: a short workload ends within it.
QUIET_S = 3.0
POLL_S = 0.1
#: The longest URL kept whole in the lock file's name, well within a file name's 255 bytes.
NAME_MAX = 120


class AttachedLeaseError(Exception):
    """The wait for the attached server ran out (its text names the holder and the bound), or the
    files that keep its turn cannot be kept (its text names the file and the folder's setting)."""


class AttachedLease:
    """This process's turn on the server at `url`, kept in `directory` (the run's, shared by its
    workers). `owner` names who waits (a test's id); `announce` says a long wait."""

    def __init__(self, directory: Path, url: str, *, timeout: float, setting: str,
                 announce: Callable[[str], None] | None = None, folder_setting: str = "--specdec-artifacts") -> None:
        self.url = url.rstrip("/")
        self.path = Path(directory) / f"attached-{_file_name(self.url)}.lock"
        self.timeout = timeout
        self.setting = setting
        self.announce = announce
        self.folder_setting = folder_setting  # where the user names the folder the files are kept in
        self._fd: int | None = None

    def acquire(self, owner: str) -> None:
        """Hold the server for `owner`, waiting while another process holds it; AttachedLeaseError
        after `timeout` seconds. A KeyboardInterrupt during the wait leaves nothing held."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise self._unusable(exc) from None
        queue = None
        try:
            try:
                queue = os.open(self.path.with_suffix(".queue"), os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise self._unusable(exc) from None
            ticket = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"  # threads of one process wait apart
            _in_line(queue, lambda line: line + [[ticket, os.getpid()]])
            wait = SaidWait(self.timeout, self.announce, QUIET_S)
            while True:
                if _first(queue, ticket) and _take(fd):
                    break
                holder = _describe(os.pread(fd, 4096, 0))
                if wait.over():
                    raise AttachedLeaseError(
                        f"{owner} waited {self.timeout:g}s for the attached server {self.url}, which another "
                        f"worker of this run measures on ({holder}); raise {self.setting} to wait longer")
                wait.pause(POLL_S, lambda left: (
                    f"{owner} waits for the attached server {self.url}: another worker of this run measures on "
                    f"it ({holder}), and two at once would each fail as shared; waiting up to {left:.0f}s more "
                    f"({self.setting})"))
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps({"pid": os.getpid(), "worker": os.environ.get("PYTEST_XDIST_WORKER"),
                                      "owner": owner, "since": time.time()}).encode(), 0)
        except BaseException:
            os.close(fd)  # closing drops a flock taken on the way
            raise
        finally:
            if queue is not None:
                try:
                    _in_line(queue, lambda line: [entry for entry in line if entry[0] != ticket])  # turn or give-up
                finally:
                    os.close(queue)
        self._fd = fd

    def _unusable(self, exc: OSError) -> AttachedLeaseError:
        return AttachedLeaseError(
            f"cannot keep the attached server's turn file {exc.filename or self.path}: {exc.strerror or exc}; "
            f"{self.folder_setting} names the folder it is kept in (under run-*/leases): make it writable, or "
            f"point it at one that is")

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)  # no stale name once free
        except OSError:
            pass
        import fcntl

        # a child the test forked shares the lock: closing our descriptor alone would leave it held
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _take(fd: int) -> bool:
    """Whether this process now holds `fd`'s exclusive flock (False: another does)."""
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _in_line(queue: int, change: Callable[[list], list]) -> list:
    """The waiters' line in `queue` (`[ticket, pid]`, first come first), changed by `change` under the
    file's flock; a waiter whose process is gone (killed while it waited) leaves it."""
    import fcntl

    from .cleanup import alive  # a zombie (a killed waiter not yet reaped) is gone too

    fcntl.flock(queue, fcntl.LOCK_EX)  # held for a read and a write: microseconds
    try:
        try:
            line = json.loads(os.pread(queue, 1 << 20, 0).decode() or "[]")
        except ValueError:
            line = []  # a waiter killed mid-write: the living re-queue below as they poll
        line = change([entry for entry in line if alive(entry[1])])
        os.ftruncate(queue, 0)
        os.pwrite(queue, json.dumps(line).encode(), 0)
        return line
    finally:
        fcntl.flock(queue, fcntl.LOCK_UN)


def _first(queue: int, ticket: str) -> bool:
    """Whether `ticket` is first in line (put back last where the line lost it)."""
    line = _in_line(queue, lambda line: line if any(entry[0] == ticket for entry in line)
                    else line + [[ticket, os.getpid()]])
    return line[0][0] == ticket


def _file_name(url: str) -> str:
    """`http___gpu-box_30000`: the URL, readable, within a file name's 255 bytes (a long one ends
    in its digest, which tells apart two URLs cut to the same start)."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", url)
    if len(name) <= NAME_MAX:
        return name
    return f"{name[:NAME_MAX - 17]}-{hashlib.sha256(url.encode()).hexdigest()[:16]}"


def _describe(raw: bytes) -> str:
    """`gw1, pid 4242, test_generation[ddtree-tp1-b8-w1], since 10:32:07`: the xdist worker id first,
    as xdist's own output names workers (absent outside xdist)."""
    try:
        who = json.loads(raw.decode())
        worker = f"{who['worker']}, " if who.get("worker") else ""
        since = time.strftime('%H:%M:%S', time.localtime(who['since']))
        return f"{worker}pid {who['pid']}, {who['owner']}, since {since}"
    except (ValueError, KeyError, TypeError):
        return "a process that has not written its name"  # between its flock and its write
