"""A did-you-mean for a name the user typed that is not one of a known few.

Families, methods, backends and the like are short words a slip turns into another word; the
error then names the one the user most likely meant, as a misspelt key or flag does, and lists
the known names only where none is close.
"""

from __future__ import annotations

import difflib
from typing import Iterable


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name `name` most likely stands for, case aside; None where none is close."""
    by_lower = {k.lower(): k for k in known}
    # above difflib's 0.6, which offers cpu for tpu or gpu: a guess no user of either means
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.7)
    return by_lower[close[0]] if close else None


def hint(name: str, known: Iterable[str]) -> str:
    """`did you mean 'x'?` for a close name, else `use one of a, b, c`."""
    known = tuple(known)
    close = closest(name, known)
    return f"did you mean {close!r}?" if close else f"use one of {', '.join(known)}"
