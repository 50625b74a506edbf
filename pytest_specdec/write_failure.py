"""One line for an output file the operating system would not let us write: the file, its
reason, and what frees the way (space, permissions, another folder setting).

A full disk and a read-only folder have different fixes; a bare "No space left on device" after a
long benchmark leaves the user to guess which setting moves the file elsewhere.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

#: errnos whose fix is room on the disk (or under the quota)
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT)
#: errnos whose fix is write permission (or a writable mount)
_NO_PERMISSION = (errno.EACCES, errno.EPERM, errno.EROFS)


def unwritable(exc: OSError, path: str | Path, option: str) -> str:
    """`file: reason; fix`: `path` where the error names no file, `option` the setting that
    chooses another place."""
    where = exc.filename or path
    return f"{where}: {exc.strerror or exc}; {fix(exc, option)}"


def fix(exc: OSError, option: str) -> str:
    """What lets the write succeed next time, by the error's kind; where something else stands in
    the way (the OS's reason, "File exists", names neither it nor what belongs there), what it is."""
    if exc.errno in _NO_ROOM:
        return f"free space there, or choose another {option}"
    if exc.errno in _NO_PERMISSION:
        return f"make it writable, or choose another {option}"
    if exc.errno == errno.EEXIST and exc.filename and os.path.islink(exc.filename):
        return (f"a symbolic link to no folder stands where a folder belongs: remove or repoint it, or "
                f"choose another {option}")
    if exc.errno == errno.EEXIST:  # a folder the save makes (or one of its parents) is a file
        return f"a file stands where a folder belongs: move it aside, or choose another {option}"
    if exc.errno == errno.ENOTDIR:
        return f"a file stands where a folder on the way belongs: move it aside, or choose another {option}"
    if exc.errno == errno.EISDIR:  # a file the save writes (its lock, a temporary) is a folder
        return f"a folder stands where a file belongs: remove it, or choose another {option}"
    if exc.errno == errno.ELOOP:
        return f"a symbolic link there leads back to itself: remove it, or choose another {option}"
    return f"choose another {option}"


__all__ = ["fix", "unwritable"]
