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
forth. A waiter leaves the line with the turn, on giving up, or (killed) when its process is gone:
its pid, with its start time, as a pid is handed on.

Another pytest run on the host (another terminal, a CI job on the same runner) that attaches the
same server keeps a run folder of its own, and the two measured at once, each failing as shared.
So a turn is also claimed host-wide, where GPUs are (host_claims.py: `--specdec-gpu-claims`, by
default a folder of the temporary directory every run of the host looks in), by the same pair of
files, open to every user, its holder's name (pid, user, run, project folder, since when) written
for a waiting run to give. A test takes its run's turn first, then the host's: a run's workers
queue at home and one of them at a time stands in the host's line, so runs too are served first
come, first served; the two are always taken in that order and let go of host first, so nothing
waits in a circle. One bound (`timeout`) covers both waits. Runs in other pid namespaces (another
container sharing the folder) read each other's waiters as gone: still one at a time, in no set
order. Only runs of one host are kept apart: a run on another machine attaching the same server
is another client (sharing.py).

The files are named by the URL as typed, but for a trailing slash, the case of its scheme and host
and a port left to the scheme's default. Names of one machine (`localhost`, `127.0.0.1`, its host
name) are not told the same: that would need a resolver's word, and runs of a host that attach one
server mostly spell it alike.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pytest_specdec.servers import host_claims
from pytest_specdec.servers.said_wait import SaidWait

#: How long a wait for another worker's test goes unsaid: a short workload ends within it.
QUIET_S = 3.0
POLL_S = 0.1
#: The longest URL kept whole in the lock file's name, well within a file name's 255 bytes.
NAME_MAX = 120


class AttachedLeaseError(Exception):
    """The wait for the attached server ran out (its text names the holder and the bound), or the
    files that keep its turn cannot be kept (its text names the file and the folder's setting)."""


@dataclass(frozen=True)
class HostTurn:
    """Where every run of the host claims an attached server's turn (the GPU claims folder), who
    this run is (for another run's wait to name), and where the user named the folder."""

    directory: Path
    run: str
    project: str
    setting: str = "--specdec-gpu-claims"


@dataclass(frozen=True)
class _Place:
    """One of the two places a turn is kept: its lock file (the queue beside it), whom a wait
    there is for, how its holder is named, and what to say where its files cannot be kept."""

    path: Path
    others: str
    describe: Callable[[bytes], str]
    open: Callable[[Path], int]
    unusable: Callable[[Path, OSError], AttachedLeaseError]


class AttachedLease:
    """This process's turn on the server at `url`, kept in `directory` (the run's, shared by its
    workers) and, with `host`, in the host's folder too. `owner` names who waits (a test's id);
    `announce` says a long wait."""

    def __init__(self, directory: Path, url: str, *, timeout: float, setting: str,
                 announce: Callable[[str], None] | None = None, folder_setting: str = "--specdec-artifacts",
                 host: HostTurn | None = None) -> None:
        self.url = url.rstrip("/")
        name = f"attached-{_file_name(_server_key(url))}.lock"
        self.path = Path(directory) / name
        self.timeout = timeout
        self.setting = setting
        self.announce = announce
        self.folder_setting = folder_setting  # where the user names the folder the files are kept in
        self.host = host
        self.host_path = None if host is None else Path(host.directory) / name
        self._fd: int | None = None
        self._host_fd: int | None = None

    def acquire(self, owner: str) -> None:
        """Hold the server for `owner`, waiting while another process holds it; AttachedLeaseError
        after `timeout` seconds. A KeyboardInterrupt during the wait leaves nothing held."""
        started = time.monotonic()
        local = _Place(self.path, "another worker of this run", _describe, self._open_local, self._unusable)
        fd = self._wait_turn(local, owner, SaidWait(self.timeout, self.announce, QUIET_S))
        try:
            self._write_local(fd, owner, waits=self.host is not None)
            if self.host is not None:
                spent = time.monotonic() - started
                place = _Place(self.host_path, "another run on this host", host_claims.describe,
                               self._open_host, self._host_file_unusable)
                # said once more (at once, if the run's own wait was said): whom it waits for has changed
                wait = SaidWait(max(self.timeout - spent, 0.0), self.announce, max(QUIET_S - spent, 0.0))
                host_fd = self._wait_turn(place, owner, wait)
                try:
                    os.ftruncate(host_fd, 0)
                    os.pwrite(host_fd, json.dumps({"pid": os.getpid(), "user": host_claims.user_name(),
                                                   "run": self.host.run, "project": self.host.project,
                                                   "owner": owner, "since": time.time()}).encode(), 0)
                except OSError:
                    pass  # a file another user made read-only: the turn holds, unnamed
                self._host_fd = host_fd
                self._write_local(fd, owner, waits=False)
        except BaseException:
            self._let_go()
            os.close(fd)  # closing drops the flock
            raise
        self._fd = fd

    def _wait_turn(self, place: _Place, owner: str, wait: SaidWait) -> int:
        """The descriptor of `place`'s lock file, its flock held once `owner` is first in line and
        the holder has let go; AttachedLeaseError when `wait` runs out."""
        import fcntl

        ticket = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"  # threads of one process wait apart
        fd = place.open(place.path)
        queue = None
        try:
            queue_path = place.path.with_suffix(".queue")
            queue = place.open(queue_path)
            if fcntl.fcntl(queue, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY:  # another user's, kept from this one
                raise place.unusable(queue_path, PermissionError(errno.EACCES, os.strerror(errno.EACCES)))
            try:
                _in_line(queue, lambda line: line + [_entry(ticket)])
                while not (_first(queue, ticket) and _take(fd)):
                    holder = place.describe(os.pread(fd, 4096, 0))
                    if wait.over():
                        raise AttachedLeaseError(
                            f"{owner} waited {self.timeout:g}s for the attached server {self.url}, which "
                            f"{place.others} measures on ({holder}); raise {self.setting} to wait longer")
                    wait.pause(POLL_S, lambda left: (
                        f"{owner} waits for the attached server {self.url}: {place.others} measures on it "
                        f"({holder}), and two at once would each fail as shared; waiting up to {left:.0f}s more "
                        f"({self.setting})"))
            except OSError as exc:  # a filesystem without flock
                raise place.unusable(queue_path, exc) from None
        except BaseException:
            os.close(fd)  # closing drops a flock taken on the way
            raise
        finally:
            if queue is not None:
                try:
                    _in_line(queue, lambda line: [entry for entry in line if entry[0] != ticket])  # turn or give-up
                except OSError:
                    pass  # the unusable queue is already said
                finally:
                    os.close(queue)
        return fd

    def _write_local(self, fd: int, owner: str, *, waits: bool) -> None:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "worker": os.environ.get("PYTEST_XDIST_WORKER"),
                                  "owner": owner, "since": time.time(), "waits": waits}).encode(), 0)

    def _open_local(self, path: Path) -> int:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise self._unusable(path, exc) from None

    def _open_host(self, path: Path) -> int:
        try:
            host_claims.shared_folder(path.parent)
        except OSError as exc:
            raise self._host_unusable(exc) from None
        try:
            return host_claims.open_shared(path)
        except OSError as exc:  # a link planted there, a file another user kept from this one
            raise self._host_file_unusable(path, exc) from None

    def _unusable(self, path: Path, exc: OSError) -> AttachedLeaseError:
        return AttachedLeaseError(
            f"cannot keep the attached server's turn file {exc.filename or path}: {exc.strerror or exc}; "
            f"{self.folder_setting} names the folder it is kept in (under run-*/leases): make it writable, or "
            f"point it at one that is")

    def _host_unusable(self, exc: OSError) -> AttachedLeaseError:
        return AttachedLeaseError(
            f"cannot keep the attached server's host-wide turn file {exc.filename or self.host_path}: "
            f"{exc.strerror or exc}; {self.host.setting} names the folder every run on this host keeps it in: "
            f"make it writable by every user, or point it at one on a local filesystem that is")

    def _host_file_unusable(self, path: Path, exc: OSError) -> AttachedLeaseError:
        return AttachedLeaseError(host_claims.unusable_file(
            path, exc, self.host.setting, what="attached server's host-wide turn file"))

    def release(self) -> None:
        self._let_go()  # the host's turn first: another run, first in its line, takes it over
        fd, self._fd = self._fd, None
        if fd is not None:
            _unlock(fd)

    def _let_go(self) -> None:
        fd, self._host_fd = self._host_fd, None
        if fd is not None:
            _unlock(fd)


def _unlock(fd: int) -> None:
    import fcntl

    try:
        os.ftruncate(fd, 0)  # no stale name once free
    except OSError:
        pass
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


def _entry(ticket: str) -> list:
    """`[ticket, pid, started]`: this process in a line, by its start time too, as the GPU leases'
    line keeps its waiters, so a pid the kernel hands on once its waiter is killed (a container's
    pytest is pid 1 every time; the host's line outlives runs) is not read as it still waiting."""
    from .leases import start_time

    return [ticket, os.getpid(), start_time(os.getpid())]


def _waiting(entry: object) -> bool:
    """Whether `entry` is a waiter still alive: its pid a process, not a zombie (a killed waiter not
    yet reaped), that started when it did. An entry with no start time (an older line; the host's
    folder is every user's) is read as gone: its waiter, if alive, puts itself back as it polls."""
    from .leases import holder_alive

    return (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[1], int)
            and isinstance(entry[2], (int, float)) and holder_alive({"pid": entry[1], "start_time": entry[2]}))


def _in_line(queue: int, change: Callable[[list], list]) -> list:
    """The waiters' line in `queue` (`[ticket, pid, started]`, first come first), changed by `change`
    under the file's flock; a waiter whose process is gone (killed while it waited) leaves it."""
    import fcntl

    fcntl.flock(queue, fcntl.LOCK_EX)  # held for a read and a write: microseconds
    try:
        try:
            line = json.loads(os.pread(queue, 1 << 20, 0).decode() or "[]")
        except ValueError:
            line = []  # a waiter killed mid-write: the living re-queue below as they poll
        if not isinstance(line, list):
            line = []  # not a line this module wrote (the host's folder is every user's): begun afresh
        line = change([entry for entry in line if _waiting(entry)])
        os.ftruncate(queue, 0)
        os.pwrite(queue, json.dumps(line).encode(), 0)
        return line
    finally:
        fcntl.flock(queue, fcntl.LOCK_UN)


def _first(queue: int, ticket: str) -> bool:
    """Whether `ticket` is first in line (put back last where the line lost it)."""
    line = _in_line(queue, lambda line: line if any(entry[0] == ticket for entry in line)
                    else line + [_entry(ticket)])
    return line[0][0] == ticket


def _server_key(url: str) -> str:
    """`http://gpu-box:80` for `HTTP://GPU-Box/`: one spelling of a server's root (module docstring)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    except ValueError:  # a port that is no number: the attach names it
        return url.rstrip("/")
    host = (parts.hostname or "").lower()
    if not parts.scheme or not host:
        return url.rstrip("/")
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme.lower()}://{host}{f':{port}' if port else ''}{parts.path.rstrip('/')}"


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
        waits = ", waiting for another run on this host" if who.get("waits") else ""
        return f"{worker}pid {who['pid']}, {who['owner']}, since {since}{waits}"
    except (ValueError, KeyError, TypeError):
        return "a process that has not written its name"  # between its flock and its write
