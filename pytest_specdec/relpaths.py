"""Paths in what a run leaves to be published: relative to the project root where inside it.

A failure's message names files (a server's log, the journal, a prompt file) by absolute path,
and the report's metadata names the baseline file. report.md, results.json, junit.xml, the
GitHub step summary and shard.json are published, where `/home/alice/work/proj/.specdec/...`
leaks the machine's layout and finds nothing on another one; `.specdec/...` finds the file in any
checkout. A path outside the project keeps its absolute form, the only one that finds it.
"""

from __future__ import annotations

import re
from pathlib import Path


def relative(text: str, root: str | Path) -> str:
    """`text` with each absolute path under `root` (as written, or with its links resolved)
    relative to it; `root` itself becomes `.`."""
    root = Path(root)
    spellings = {str(root), str(root.resolve())} if root.is_absolute() else set()
    for prefix in sorted((p.rstrip("/") for p in spellings), key=len, reverse=True):
        if not prefix:  # the file system's root: every path is under it, none is the project's
            continue
        # a path starts the text or follows a character no path name continues with
        pattern = re.compile(r"(?<![\w.~/-])" + re.escape(prefix) + r"(/(?=\S)|(?![\w-])(?!\.[\w.]))")
        text = pattern.sub(lambda m: "" if m.group(1) else ".", text)
    return text


def relative_path(path: str | Path, root: str | Path) -> str:
    """One path as :func:`relative` writes it in a text."""
    return relative(str(path), root)


__all__ = ["relative", "relative_path"]
