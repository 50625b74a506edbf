"""`HostClaims`: one host-wide claim per physical GPU, so that pytest runs sharing a host never put
servers on one GPU at once.

A run's lease book (leases.py) is shared by that run's xdist workers only; another run on the same
host (another checkout, another user, a CI job) keeps a book of its own. So a lease also claims
each of its GPUs in a folder every run of the host looks in: an exclusive `flock` on one small
file per GPU, named by the GPU's UUID (by its physical index where the inventory knows no UUID,
which is the same GPU to every run that sees the whole host). The kernel drops a flock when its
process exits, however it exits, so a crashed run frees its GPUs with nothing left to clean up.
The holder writes who it is (pid, user, run, project folder, since when) into the file, for a
waiting run to name it. Files are never deleted: unlinking a lock file races with a process
that has just opened it.

A request that waits for GPUs another run claims reserves them: an exclusive `flock` on a second
file per GPU (`<name>.wait.lock`), all of them or none, which every other process's claim of those
GPUs respects. Otherwise a run going from one small configuration to the next re-claimed each GPU
the moment it let go of it, and the other run's large configuration waited until the first had no
small one left. A reservation only keeps new claims off: it never waits for one, so it cannot
deadlock, and its holder lets go of it once it has its claims, gives up or exits.

Only GPUs of the host are claimed: a real inventory's, and those a simulated one (a dry run's
`--specdec-arch`) is laid over, on which its servers run. Slots with no GPU behind them (a CPU
machine, tests, a simulated inventory larger than the host) are no host's GPUs, and concurrent
test runs would wait on each other for nothing.
"""

from __future__ import annotations

import errno
import getpass
import json
import os
import re
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from pytest_specdec.errors import SpecdecUsageError

#: The folder's name under the temporary directory when no option names one.
DEFAULT_NAME = "pytest-specdec-gpu-claims"


def default_directory() -> Path:
    """Shared by every user of the host, as the temporary directory is."""
    return Path(tempfile.gettempdir()) / DEFAULT_NAME


class HostClaims:
    """This process's claims in `directory`; `keys` maps a physical GPU index to its file's name
    (a UUID, or the index). `run` and `project` say who claims, for a waiting run's message;
    `setting` is where the user chose the folder, for the message of a claim file that is unusable.
    `gpus` are the host's GPUs among those leased (None: all); the others are slots of a simulated
    inventory, claimed by no file."""

    def __init__(self, directory: Path, keys: Mapping[int, str], *, run: str, project: str,
                 setting: str = "--specdec-gpu-claims", gpus: Iterable[int] | None = None) -> None:
        self.directory = Path(directory)
        self.gpus = None if gpus is None else frozenset(gpus)
        self.setting = setting
        self.keys = {gpu: re.sub(r"[^A-Za-z0-9_.-]", "_", key) for gpu, key in keys.items()}
        self.identity = {"user": user_name(), "run": run, "project": project}
        self._held: dict[int, int] = {}  # GPU -> the descriptor whose flock claims it
        self._reserved: dict[int, int] = {}  # GPU -> the descriptor whose flock reserves it for this process
        shared_folder(self.directory)

    def path(self, gpu: int, kind: str = "") -> Path:
        return self.directory / f"{self.keys.get(gpu, f'gpu{gpu}')}{kind}.lock"

    def reserve(self, gpus: Iterable[int]) -> bool:
        """Reserve all of `gpus` for this process's waiting request, or none (False: another
        process reserves one of them). Replaces this process's earlier reservation."""
        import fcntl

        wanted = sorted(g for g in gpus if self.gpus is None or g in self.gpus)
        if wanted == sorted(self._reserved):
            return True
        self.unreserve()
        for gpu in wanted:
            path = self.path(gpu, ".wait")
            try:
                fd = open_shared(path)
            except OSError as exc:
                self.unreserve()
                raise SpecdecUsageError(self._unusable(path, exc)) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # another waiter's, or a filesystem without flock (the claim says so)
                os.close(fd)
                self.unreserve()
                return False
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps({"pid": os.getpid(), **self.identity, "since": time.time()}).encode(), 0)
            except OSError:
                pass
            self._reserved[gpu] = fd
        return True

    def unreserve(self) -> None:
        for fd in self._reserved.values():
            os.close(fd)  # closing drops the flock
        self._reserved.clear()

    def _reserved_elsewhere(self, gpu: int) -> str | None:
        """Who reserves `gpu` for a request of theirs, where that is another process."""
        import fcntl

        if gpu in self._reserved:
            return None
        try:
            fd = os.open(self.path(gpu, ".wait"), os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return None  # never reserved (or unusable: the claim file names the problem)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return describe(os.pread(fd, 4096, 0)).replace(", since ", ", waiting for it since ")
        except OSError:
            return None
        finally:
            os.close(fd)  # also lets go of the shared lock just taken
        return None

    def claim(self, gpus: Iterable[int]) -> tuple[int, str] | None:
        """Claim all of `gpus` or none: None once this process holds them all, else the first GPU
        another process holds and who that is (what was claimed on the way is let go). A claim
        file that cannot be used is a SpecdecUsageError naming it and the fix."""
        got: list[int] = []
        try:
            for gpu in gpus:
                if self.gpus is not None and gpu not in self.gpus:
                    continue  # no GPU behind the slot: nobody else can hold it
                holder = self._claim_one(gpu)
                if holder is not None:
                    self.release(got)
                    return gpu, holder
                got.append(gpu)
        except BaseException:
            self.release(got)  # no claim outlives a lease that was never made
            raise
        return None

    def release(self, gpus: Iterable[int]) -> None:
        for gpu in gpus:
            fd = self._held.pop(gpu, None)
            if fd is not None:
                try:
                    os.ftruncate(fd, 0)  # no stale name once free
                except OSError:
                    pass
                os.close(fd)  # closing drops the flock

    def held(self) -> tuple[int, ...]:
        return tuple(sorted(self._held))

    def _claim_one(self, gpu: int) -> str | None:
        import fcntl  # POSIX; real GPU hosts are Linux

        if gpu in self._held:
            return None
        reserved = self._reserved_elsewhere(gpu)
        if reserved is not None:
            return reserved
        path = self.path(gpu)
        try:
            fd = open_shared(path)
        except OSError as exc:
            raise SpecdecUsageError(self._unusable(path, exc)) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                return describe(os.pread(fd, 4096, 0))
            finally:
                os.close(fd)
        except OSError as exc:  # a folder whose filesystem has no flock (ENOLCK): no claim can hold here
            os.close(fd)
            raise SpecdecUsageError(self._unusable(path, exc)) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps({"pid": os.getpid(), **self.identity, "since": time.time()}).encode(), 0)
        except OSError:
            pass  # a file another user made read-only: the claim holds, unnamed
        self._held[gpu] = fd
        return None

    def _unusable(self, path: Path, exc: OSError) -> str:
        return unusable_file(path, exc, self.setting)


def shared_folder(directory: Path) -> None:
    """Make `directory`, open to every user of the host (an attached server's turn is kept here
    too, attach_lease.py); PermissionError where it is no folder this user can write in."""
    try:
        directory.mkdir(parents=True)
        os.chmod(directory, 0o1777)  # every user's runs claim here; sticky, as /tmp is
    except FileExistsError:
        pass
    if not directory.is_dir() or not os.access(directory, os.W_OK | os.X_OK):
        raise PermissionError("not a folder this user can write in")


def unusable_file(path: Path, exc: OSError, setting: str, what: str = "GPU claim file") -> str:
    """One line on why the shared `path` cannot be had and what to do: a link is removed, as is a file
    another user made this one's read-only (a run makes it afresh); a folder that cannot lock is left."""
    elsewhere = f"or set {setting} to another folder every run on this host uses"
    if path.is_symlink():
        return (f"{what} {path} is a symbolic link{_made_by(path)}, which a claim never follows (another "
                f"user of the folder could point it at one of your files): remove the link (in a shared folder "
                f"only its owner or root can), {elsewhere}")
    if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
        return (f"{what} {path}: {exc.strerror or exc}: the folder's filesystem cannot lock files; set "
                f"{setting} to a folder on a local filesystem every run on this host uses")
    return (f"{what} {path}: {exc.strerror or exc}; remove it (a run makes it afresh; in a shared folder "
            f"only its owner or root can), {elsewhere}")


def open_shared(path: Path) -> int:
    """The claim file, made readable and writable by every user; never through a symlink,
    which another user of a shared folder could point at one of this user's files."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    except FileExistsError:
        pass
    else:
        try:
            os.fchmod(fd, 0o666)  # past the umask
        except OSError:
            os.close(fd)
            raise
        return fd
    try:
        return os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except PermissionError:
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW)  # flock needs no write access


def _made_by(path: Path) -> str:
    """` (made by user ana)`, or nothing where the owner cannot be told."""
    try:
        import pwd

        return f" (made by user {pwd.getpwuid(path.lstat().st_uid).pw_name})"
    except (ImportError, KeyError, OSError):
        return ""


def describe(raw: bytes) -> str:
    """`pid 4242 (user ana, run 3f2a9c1b7d04, project /home/ana/bench, since 2026-01-05 10:32:07)`."""
    try:
        who = json.loads(raw.decode())
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(who["since"])))
        return (f"pid {who['pid']} (user {who['user']}, run {who['run']}, project {who['project']}, "
                f"since {since})")
    except (ValueError, KeyError, TypeError):
        return "a process that has not written its name"  # between its flock and its write


def user_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a uid without a passwd entry (containers)
        return str(os.getuid())
