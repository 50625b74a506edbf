"""Whole-file replacement: a file the plugin rewrites is replaced whole or not at all.

The new content goes to a hidden temporary sibling (`.<name>.<random>.tmp`, made by mkstemp in
the file's own folder, so the rename never crosses a file system), which `os.replace` then moves
over the file. A write cut short (a full disk, a read-only folder, an interrupt) leaves the file
as it was and removes the temporary file before the error goes on, unchanged, to the caller,
which names the file itself in its message. Only a process killed between the temporary file's
creation and its rename leaves one behind: `is_temporary` tells such leftovers from the files of
a folder, and `remove_leftovers` deletes them where every writer of the file holds one lock.

The file keeps its mode (`replacing_mode`): a file shared with the group stays readable by it,
where mkstemp's private 0600 would hide it. `durable` adds an fsync of the file before the
rename and of its folder after it, for files a power cut must not take back (baselines, shard
manifests and the journal copies they vouch for); files that live only as long as a run skip them.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
from glob import escape as glob_escape
from pathlib import Path
from typing import Callable

#: The temporary siblings' shape: mkstemp's prefix and suffix around its random part.
_TEMPORARY = re.compile(r"\..+\.[A-Za-z0-9_]+\.tmp")


def replace_text(path: Path, text: str, *, durable: bool) -> None:
    """Replace `path` with `text` (UTF-8), whole or not at all; an OSError is the OS's own."""
    _replace(Path(path), lambda tmp: tmp.write_text(text, encoding="utf-8"), durable)


def replace_with_copy(path: Path, source: Path, *, durable: bool) -> None:
    """Replace `path` with a copy of the file `source`, whole or not at all: a copy cut short
    leaves the earlier one, never a truncated file for a reader to take for the whole."""
    _replace(Path(path), lambda tmp: shutil.copyfile(source, tmp), durable)


def _replace(path: Path, fill: Callable[[Path], object], durable: bool) -> None:
    try:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise _naming(exc, path) from None
    tmp = Path(name)
    try:
        try:
            fill(tmp)  # by name, as a plain write or copy would: its errors are the ones to tell
            # the file's mode only once filled: a read-only one's (0444) would refuse the filling
            os.fchmod(fd, replacing_mode(path))
            if durable:
                os.fsync(fd)  # mkstemp's descriptor: whatever the mode, it can flush the file
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):  # the write's own error is the one to tell
            tmp.unlink()
        if isinstance(exc, OSError) and exc.filename == name:
            raise _naming(exc, path) from None
        raise
    if durable:  # make the rename itself durable; a folder that refuses it still has the file
        with contextlib.suppress(OSError):
            _fsync(path.parent)


def _naming(exc: OSError, path: Path) -> OSError:
    """`exc` about the file being replaced: callers name `exc.filename` in their one-line
    messages, and a hidden random temporary name tells the user nothing."""
    exc.filename = str(path)
    return exc


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)  # enough for fsync, and the only way to open a folder
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replacing_mode(path: Path) -> int:
    """The mode a file written beside `path` and renamed over it takes: `path`'s own, or a new
    file's under the umask, never mkstemp's private 0600, which would hide it from the group."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:  # none there, or a link that leads nowhere (the rename replaces it): a new file
        return 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)  # the only portable way to read it is to set it
    os.umask(mask)
    return mask


def is_temporary(name: str) -> bool:
    """Whether a file name is a temporary sibling's: a write in progress, or one a killed process
    left, never one of the folder's own files."""
    return bool(_TEMPORARY.fullmatch(name))


def remove_leftovers(path: Path) -> None:
    """Delete the temporary siblings of `path` that writers killed before their rename left.
    Call it only under a lock that every writer of `path` holds from its temporary file's
    creation to its rename: then any such file there is a dead writer's, never a live one's."""
    for torn in Path(path).parent.glob(f".{glob_escape(Path(path).name)}.*.tmp"):
        with contextlib.suppress(OSError):
            torn.unlink()


__all__ = ["is_temporary", "remove_leftovers", "replace_text", "replace_with_copy", "replacing_mode"]
