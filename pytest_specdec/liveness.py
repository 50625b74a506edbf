"""Whether a live process still uses a file or folder: a shared `flock` on a marker file, held for
the holder's lifetime and dropped by the kernel when it exits or is killed, so a crashed run never
looks alive. Used for the journal a run writes and the artifact folders retention would delete."""

from __future__ import annotations

import os
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: nothing is told apart, nothing looks alive
    fcntl = None  # type: ignore[assignment]

#: The descriptor through which this process locks each marker (one per marker: a second one
#: would conflict with the first).
_HELD: dict[Path, int] = {}


def hold(marker: Path) -> None:
    """Mark `marker` as in use by this process for as long as it lives (created if missing)."""
    if fcntl is not None:
        fcntl.flock(_descriptor(marker), fcntl.LOCK_SH)


def held_elsewhere(marker: Path) -> bool:
    """Whether another live process holds `marker`. An absent marker is held by nobody; one this
    process holds reads as not held elsewhere (callers ask about other runs' files, and testing
    would mean converting this process's lock, which flock may drop on the way)."""
    if fcntl is None or marker in _HELD:
        return False
    try:
        fd = os.open(marker, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the test lock too
    return False


def release_all() -> None:
    """Let go of every marker (a run that ends in a process that lives on: pytester's in-process runs)."""
    while _HELD:
        os.close(_HELD.popitem()[1])


def _descriptor(marker: Path) -> int:
    if marker in _HELD and not _same_file(_HELD[marker], marker):  # replaced since: lock the new one
        os.close(_HELD.pop(marker))
    if marker not in _HELD:
        _HELD[marker] = os.open(marker, os.O_RDWR | os.O_CREAT, 0o644)
    return _HELD[marker]


def _same_file(fd: int, path: Path) -> bool:
    """Whether `fd` is still the file at `path` (a marker rewritten by rename is another file,
    whose lock no one holds)."""
    try:
        held, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino)


__all__ = ["hold", "held_elsewhere", "release_all"]
