"""A set of output files put into their folder together: written whole into a hidden staging
folder inside it, then the earlier set's files removed and the new set's moved in.

A writer interrupted while it writes leaves the earlier set as it was. The moves at the end are
renames, each atomic but not all together: one interrupted there leaves part of one set (the
earlier set's files still to be removed, or the new set's already moved), never files of two sets
side by side. Files the set does not name (a shard's journal, a user's own) are left alone.

A writer killed outright (SIGKILL, os._exit, a second SIGTERM) cannot remove its staging folder.
Each is named by its writer's pid and owner (its host, and a digest of the boot and pid namespace
that pid belongs to), so the next writer into that folder removes those whose writer is gone (same
owner, pid no longer running) instead of leaving them to pile up inside a published report; a live
writer's, or another owner's, stays. Containers sharing a report folder on a mounted volume may
have one hostname and separate pid namespaces: there a pid says nothing of the other's writers.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator, Sequence


@contextmanager
def staged(out_dir: Path, prefix: str) -> Iterator[Path]:
    """A hidden folder inside `out_dir` (made where missing) to write the set into; removed at
    the end with whatever was not moved out of it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    remove_abandoned(out_dir, prefix)
    folder = Path(tempfile.mkdtemp(dir=out_dir, prefix=f"{prefix}{os.getpid()}@{_owner()}-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _owner() -> str:
    """Where this process's pid means this process: its host and a digest of its boot id and pid
    namespace (each where the system has it)."""
    host = socket.gethostname().replace("/", "_") or "localhost"
    return f"{host}~{hashlib.sha256(_pid_space().encode()).hexdigest()[:8]}"


def _pid_space() -> str:
    """This boot's id and this process's pid namespace; empty parts where /proc has none."""
    parts = []
    try:
        parts.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
    except OSError:
        parts.append("")
    try:
        ns = os.stat("/proc/self/ns/pid")
        parts.append(f"{ns.st_dev}:{ns.st_ino}")
    except OSError:
        parts.append("")
    return "/".join(parts)


def remove_abandoned(out_dir: Path, prefix: str) -> list[Path]:
    """Remove the staging folders in `out_dir` that a writer of this owner (host and pid namespace)
    left when it died; returns them."""
    from .servers.cleanup import alive

    removed = []
    for entry in out_dir.glob(f"{prefix}*@*"):
        pid, _, rest = entry.name[len(prefix):].partition("@")
        owner = rest.rpartition("-")[0]  # mkdtemp's random tail has no "-"
        if not pid.isdigit() or owner != _owner() or not entry.is_dir() or entry.is_symlink() \
                or alive(int(pid)):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def publish(staging: Path, out_dir: Path, files: Sequence[Path], previous: Iterable[str]) -> list[Path]:
    """`files` (inside `staging`) moved to the same places in `out_dir`, in their order, once every
    file of `previous` (paths relative to `out_dir`: each file an earlier set may have left there)
    is removed. Returns where each went."""
    for name in previous:
        (out_dir / name).unlink(missing_ok=True)
    moved = []
    for path in files:
        target = out_dir / path.relative_to(staging)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, target)
        moved.append(target)
    return moved


__all__ = ["publish", "staged"]
