"""One line for an output file the operating system would not let us write: the file, its
reason, and what frees the way (space, permissions, another folder setting).

A full disk and a read-only folder have different fixes; a bare "No space left on device" after a
long benchmark leaves the user to guess which setting moves the file elsewhere.
"""

from __future__ import annotations

import errno
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
    """What lets the write succeed next time, by the error's kind."""
    if exc.errno in _NO_ROOM:
        return f"free space there, or choose another {option}"
    if exc.errno in _NO_PERMISSION:
        return f"make it writable, or choose another {option}"
    return f"choose another {option}"


__all__ = ["fix", "unwritable"]
