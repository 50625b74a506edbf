"""Which run writes a journal: one live run at a time.

Every process of the run that writes a journal (the only one, or each xdist worker that records)
holds a shared `flock` on the journal's run marker for as long as it lives. A second run in the
same project, which would rotate the journal away from under the first (and, past
--specdec-keep-runs, delete what it rotated), finds the marker locked and stops instead. The
kernel drops the lock of a process that exits or is killed, so a crashed run never blocks the
next one. Callers hold the journal's file lock, so these steps never race each other.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import SpecdecUsageError

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: runs are not told apart
    fcntl = None  # type: ignore[assignment]

#: The descriptor through which this process locks each marker (one per marker: a second one
#: would conflict with the first).
_HELD: dict[Path, int] = {}


def marker_of(journal: Path) -> Path:
    return journal.with_name(journal.name + ".run")


def owner(marker: Path) -> tuple[str | None, str]:
    """The run id the marker names, and the pid that started that run's journal ("?" if unknown)."""
    try:
        lines = marker.read_text().split()
    except FileNotFoundError:
        return None, "?"
    return (lines[0] if lines else None), (lines[1] if len(lines) > 1 else "?")


def check_free(journal: Path, run: str) -> None:
    """Raise SpecdecUsageError when a live run other than `run` writes `journal`."""
    marker = marker_of(journal)
    current, pid = owner(marker)
    if current == run or fcntl is None:
        return
    fd = _descriptor(marker)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SpecdecUsageError(
            f"the results journal {journal} is being written by another pytest run (pid {pid}) that "
            f"is still going; wait for it to end, or give this run a journal of its own "
            f"(--specdec-journal)") from None
    fcntl.flock(fd, fcntl.LOCK_UN)


def take(journal: Path, run: str) -> None:
    """Name `run` as the journal's writer and hold the marker for this process's lifetime."""
    marker = marker_of(journal)
    if owner(marker)[0] != run:
        marker.write_text(f"{run}\n{os.getpid()}\n")
    if fcntl is not None:
        fcntl.flock(_descriptor(marker), fcntl.LOCK_SH)


def release_all() -> None:
    """Let go of every marker (a run that ends in a process that lives on: pytester's in-process runs)."""
    while _HELD:
        os.close(_HELD.popitem()[1])


def _descriptor(marker: Path) -> int:
    if marker not in _HELD:
        _HELD[marker] = os.open(marker, os.O_RDWR | os.O_CREAT, 0o644)
    return _HELD[marker]


__all__ = ["check_free", "marker_of", "owner", "release_all", "take"]
