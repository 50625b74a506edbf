"""Where a run writes (the baseline and report folders at its end, the journal and artifacts
folders as it goes), checked at its start.

A path given by a flag, the ini file or pyproject.toml that cannot be written is a usage error
before any server boots, not a traceback after the whole benchmark ran.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import SpecdecUsageError

if TYPE_CHECKING:
    from .state import RunState

#: The files and the folder `report.write_report` puts into the report folder.
REPORT_FILES = ("results.json", "report.md", "report.tex", "report-standalone.tex")
REPORT_FOLDERS = ("plots",)


def check(state: RunState) -> None:
    """The outputs this run was asked for can be written; else a SpecdecUsageError naming why."""
    settings = state.settings
    if settings.save_baseline:
        from . import durations
        from .shard import DURATIONS_FILE

        path = state.baseline_path
        check_folder(path.parent, "baseline folder", settings.setter("baseline_dir"))
        real = linked(path, settings.setter("baseline_dir"))
        if real.parent != path.parent:  # a save writes where the link points
            check_folder(real.parent, f"folder of the file {path} links to", settings.setter("baseline_dir"))
        if path.exists() and not path.is_file():
            raise SpecdecUsageError(f"baseline file {path} is not a file; remove it or choose "
                                    f"another {settings.setter('baseline_dir')}")
        # merged into at the end: broken is an error now
        durations.load(path.parent / DURATIONS_FILE,  # this run stops: the next one writes it
                       f"the next run with {settings.setter('save_baseline')} writes it again")
    if settings.report:
        check_report_folder(state.path(settings.report), option=settings.setter("report"))


def linked(path: Path, option: str) -> Path:
    """Where a save of the baseline folder's file `path` writes (`baselines.through_links`); a link
    there that cannot be followed (a loop) is a usage error, before anything is measured."""
    from .baselines import through_links
    from .write_failure import unwritable

    try:
        return through_links(path)
    except OSError as exc:
        raise SpecdecUsageError(f"baseline file {path} cannot be saved into: {unwritable(exc, path, option)}") from None


def _dead_end(link: Path) -> str | None:
    """Why the symbolic link `link` leads to no folder: `exists()` says False as for a folder yet
    to make, but making it fails (at the end of the run, after the benchmark). None where it leads
    somewhere after all: its target was made since `exists()` looked."""
    try:
        os.stat(link)
    except OSError as exc:
        return "its target is missing" if exc.errno == errno.ENOENT else exc.strerror or str(exc)
    return None


def check_artifacts(state: RunState) -> None:
    """The artifacts folder, where a server pool keeps its run folder (logs, GPU leases)."""
    check_folder(state.path(state.settings.artifacts), "artifacts folder", state.settings.setter("artifacts"))


def check_report_folder(folder: Path, files: tuple[str, ...] = REPORT_FILES,
                        option: str = "--specdec-report") -> None:
    """`folder` can take a report: `files` (the merge writes more than a run) and its plots;
    `option` is where the folder was set, as errors name it."""
    check_folder(folder, "report folder", option)
    for name in files:
        if (folder / name).exists() and not (folder / name).is_file():
            raise SpecdecUsageError(f"report folder {folder}: {name} is not a file; remove it or "
                                    f"choose another {option}")
    for name in REPORT_FOLDERS:
        if (folder / name).exists() and not (folder / name).is_dir():
            raise SpecdecUsageError(f"report folder {folder}: {name} is not a folder; remove it or "
                                    f"choose another {option}")


def check_folder(folder: Path, what: str, option: str) -> None:
    """`folder` is a folder, or can be made one, where this process can create files."""
    fix = f"choose another {option}"
    existing = folder
    try:
        while not existing.exists() and existing != existing.parent:
            if existing.is_symlink():  # a link loop or a link to nothing: no folder can be made there
                dead_end = _dead_end(existing)
                if dead_end is None:  # its target was made meanwhile: checked as any folder on the way
                    break
                where = "it" if existing == folder else existing
                raise SpecdecUsageError(f"{what} {folder} cannot be created: {where} is a symbolic link that "
                                        f"cannot be followed ({dead_end}); remove or repoint the link, or {fix}")
            existing = existing.parent
    except OSError as exc:  # a name too long, a folder on the way that cannot be searched
        raise SpecdecUsageError(f"{what} {folder} cannot be looked up ({exc.strerror or exc}); {fix}") from None
    if not existing.is_dir():
        where = "it" if existing == folder else existing
        raise SpecdecUsageError(f"{what} {folder} cannot be created: {where} is a file, not a "
                                f"folder; {fix}")
    try:  # os.access says yes to root on read-only and virtual file systems (/proc): try it
        os.rmdir(tempfile.mkdtemp(dir=existing, prefix=".specdec-probe-"))
    except OSError as exc:
        why = ("is not writable" if existing == folder
               else f"cannot be created: making a folder in {existing} fails")
        raise SpecdecUsageError(f"{what} {folder} {why} ({exc.strerror or exc}); {fix}") from None


__all__ = ["REPORT_FILES", "REPORT_FOLDERS", "check", "check_artifacts", "check_folder", "check_report_folder",
           "linked"]
