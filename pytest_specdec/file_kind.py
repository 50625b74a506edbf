"""What stands at a path a reader expected a regular file at, so its error can say so.

A named pipe (a FIFO, or the /dev/fd/N that bash's `<(command)` gives) blocks open() until a
writer comes, which may be never, and can be read once only; a device reads endless (/dev/zero) or
empty (/dev/null). Each reader refuses these before opening, naming what is there and the fix.
A path that leads nowhere through a broken link or a link loop is said to, naming the link and
where it points: the path the user wrote may be right, and the link what to fix.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

from .errors import SpecdecUsageError

_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def no_file(path: Path) -> str:
    """What stands at a path that exists but is no readable file (is_file says no)."""
    if path.is_dir():
        return "a folder"
    fault = link_fault(path)
    return special(path) or (fault[1] if fault and fault[0] == Path(path) else "a symbolic link to no readable file")


def link_fault(path: str | Path) -> tuple[Path, str] | None:
    """(the link, what is wrong with it) where `path` leads nowhere because a symbolic link on it,
    the path itself or a folder on the way, is broken or a loop: is_file and exists say only no,
    and "no file at" sends the user to the path, not the link. None where no link is at fault."""
    path = Path(path)
    for depth in range(1, len(path.parts) + 1):
        step = Path(*path.parts[:depth])
        if not os.path.islink(step):
            if not os.path.lexists(step):
                return None  # plainly missing from here on
            continue
        try:
            os.stat(step)
        except OSError as exc:
            try:
                target = os.readlink(step)
            except OSError:
                return None
            if exc.errno == errno.ELOOP:
                return step, (f"a symbolic link loop (it points to {target}, and following the links never "
                              f"reaches a file)")
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):  # a link to a link: the chain breaks further on
                where = "which leads to nothing" if os.path.lexists(step.parent / target) else "where nothing is"
                return step, f"a broken symbolic link to {target}, {where}"
            return None
    return None


def link_fault_said(path: str | Path) -> str | None:
    """'PATH is a broken symbolic link to T, ...', or 'FOLDER, a folder on its path, is ...', for
    a `link_fault`; None where there is none."""
    fault = link_fault(path)
    if fault is None:
        return None
    link, what = fault
    return f"{link} is {what}" if link == Path(path) else f"{link}, a folder on its path, is {what}"


def special(path: str | Path) -> str | None:
    """'a named pipe (FIFO)', 'a character device', ... for such a path (after links); None for a
    regular file, a folder, nothing there or a path that cannot be looked up (each reader says those).
    At /dev/stdin or /dev/fd/N it also says whose descriptor that is: `pytest < prompts.jsonl` finds
    /dev/null there, a device, though the command line gave a regular file."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return None
    kind = next((name for test, name in _KINDS if test(mode)), None)
    return kind if kind is None or not _DESCRIPTOR.fullmatch(os.path.normpath(str(path))) else kind + _OWN_FD


#: a path naming a descriptor of the process that opens it: what it reads depends on that process
_DESCRIPTOR = re.compile(r"/dev/(?:stdin|stdout|stderr|fd/\d+)|/proc/(?:self|thread-self|\d+)/fd/\d+")
_OWN_FD = (", a descriptor of the process reading it (pytest puts /dev/null at its standard input "
           "while it captures output, -s keeps it; pytest-xdist workers inherit none of the command "
           "line's descriptors)")


def link_loop(path: str | Path, exc: OSError) -> str | None:
    """'it is a symbolic link loop (...)', or 'a folder on its path is ...', where `exc` is ELOOP
    at `path`: the link is what to fix, not the file's content; None for any other error."""
    if exc.errno != errno.ELOOP:
        return None
    where = "it is" if os.path.islink(path) else "a folder on its path is"
    return f"{where} a symbolic link loop ({exc.strerror})"


_WRITE_IT = "write its content to a file and give that file's path"


def refuse_special(path: str | Path, what: str, fix: str = _WRITE_IT, shown: str | None = None) -> None:
    """Raise SpecdecUsageError where `path` is a pipe, device or socket: `what` names the input
    ("workload file", "baseline file") as the reader's other errors do, and `shown` the file as
    they name it (default: `path`); `fix` replaces the advice to write the content to a file, for
    the plugin's own files, which a run writes anew."""
    kind = special(path)
    if kind is not None:
        raise SpecdecUsageError(f"{what} {shown or path} is {kind}, not a regular file: {_why(kind)}; {fix}")


def _why(kind: str) -> str:
    if kind.startswith("a named pipe"):
        return "reading it waits for a writer and reads its content once only (as bash's <(...) gives)"
    return "it is read as no file's content (endless or empty)" if "device" in kind else "it holds no content to read"


__all__ = ["link_fault", "link_fault_said", "link_loop", "no_file", "refuse_special", "special"]
