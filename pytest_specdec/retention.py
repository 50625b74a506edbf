"""`.specdec/` stays bounded: the last N runs' journals and artifact folders are kept, older ones
deleted (N is `--specdec-keep-runs`), so months of runs do not pile up beside the project."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path


def prune(paths: Iterable[Path], keep: int) -> list[Path]:
    """Delete all but the `keep` most recently modified of `paths` (files or folders); returns
    the deleted ones. Another process pruning the same folder at once is harmless."""
    dated = []
    for path in paths:
        try:
            dated.append((path.stat().st_mtime, path))
        except FileNotFoundError:
            continue  # pruned meanwhile by another xdist worker
    dated.sort(reverse=True)
    removed = []
    for _, path in dated[max(keep, 0):]:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    return removed
