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

from . import liveness
from .errors import SpecdecUsageError
from .file_kind import refuse_special
from .whole_file import remove_leftovers, replace_text
from .write_failure import fix


def marker_of(journal: Path) -> Path:
    return journal.with_name(journal.name + ".run")


def owner(marker: Path) -> tuple[str | None, str]:
    """The run id the marker names, and the pid that started that run's journal ("?" if unknown).

    Damaged bytes read as an unknown run's (the marker is rewritten when taken); a marker that
    cannot be opened at all (a folder, a link loop) would stop every run with a traceback, so it
    is a usage error naming it."""
    refuse_special(marker, "the results journal's run marker", "remove it (each run writes it anew)")
    try:
        lines = marker.read_bytes().decode("utf-8", "replace").split()
    except FileNotFoundError:
        return None, "?"
    except OSError as exc:
        raise SpecdecUsageError(f"the results journal's run marker {marker} cannot be read "
                                f"({exc.strerror or exc}); it is the plugin's own file, written anew "
                                f"by each run: remove it") from None
    return (lines[0] if lines else None), (lines[1] if len(lines) > 1 else "?")


def check_free(journal: Path, run: str, setting: str = "--specdec-journal") -> None:
    """Raise SpecdecUsageError when a live run other than `run` writes `journal`; `setting` is
    where the journal was set (`Settings.setter`), which the advice names."""
    marker = marker_of(journal)
    current, pid = owner(marker)
    if current != run and liveness.held_elsewhere(marker):
        raise SpecdecUsageError(
            f"the results journal {journal} is being written by another pytest run (pid {pid}) that "
            f"is still going; wait for it to end, or give this run a journal of its own "
            f"({setting})")


def take(journal: Path, run: str, setting: str = "--specdec-journal") -> None:
    """Name `run` as the journal's writer and hold the marker for this process's lifetime.

    The marker is written beside it and renamed into place, so a full disk never leaves one
    naming no run, or half of one; a marker the OS refuses is a usage error naming the file, its
    reason and the fix (`setting`, where the journal was set), not a traceback in each test."""
    marker = marker_of(journal)
    remove_leftovers(marker)  # under the journal's lock, which every writer of the marker holds: a killed one's
    try:
        if owner(marker)[0] != run:
            replace_text(marker, f"{run}\n{os.getpid()}\n", durable=False)
        liveness.hold(marker)
    except OSError as exc:  # named as the marker, not as the temporary file the OS refused
        raise SpecdecUsageError(f"the results journal's run marker cannot be written, so this run cannot "
                                f"journal its figures: {marker}: {exc.strerror or exc}; "
                                f"{fix(exc, setting)}") from None


__all__ = ["check_free", "marker_of", "owner", "take"]
