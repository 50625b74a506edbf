"""The journal and artifacts paths, checked before a run: the plugin rotates and prunes what lies
there, so a path that names the project folder, a user's file or a folder of other files must
stop the run at start rather than have them renamed or deleted."""

from __future__ import annotations

import re
from pathlib import Path

from .errors import SpecdecUsageError
from .file_kind import link_loop, refuse_special

# every journal line this plugin writes starts so (journal.Journal.append: keys sorted)
_JOURNAL_START = re.compile(rb'\s*\{\s*"config_id"\s*:')
#: A rotated journal's time stamp (session.start_journal) and a run folder's name (state.run_dir):
#: retention deletes only paths of these shapes.
STAMP = r"\d{8}-\d{6}-\d{6}"
RUN_FOLDER = re.compile(r"run-[0-9a-f]{12}")


def is_journal(path: Path) -> bool:
    """Whether an existing file is a results journal of this plugin (empty, or its first line
    one of its records, even torn)."""
    with path.open("rb") as f:
        head = f.read(256)
    return not head.strip() or bool(_JOURNAL_START.match(head))


def rotated_journals(journal: Path) -> list[Path]:
    """The earlier journals that rotation left beside ``journal`` (``<stem>.<stamp><suffix>``)."""
    shape = re.compile(re.escape(journal.stem) + r"\." + STAMP + re.escape(journal.suffix))
    return [p for p in journal.parent.glob(f"{journal.stem}.*{journal.suffix}") if shape.fullmatch(p.name)]


def run_folders(artifacts: Path) -> list[Path]:
    """The run folders under ``artifacts`` (``run-<12 hex>``), nothing else that lies there."""
    return [p for p in artifacts.glob("run-*") if RUN_FOLDER.fullmatch(p.name) and p.is_dir()]


def check(journal: Path, journal_origin: str, artifacts: Path, artifacts_origin: str) -> None:
    """Raise SpecdecUsageError where the journal or the artifacts path cannot be what it names."""
    try:
        _check(journal, journal_origin, artifacts, artifacts_origin)
    except OSError as exc:  # a name too long, a folder on the way that cannot be searched
        what, path = ((f"the artifacts folder ({artifacts_origin})", artifacts)
                      if exc.filename is not None and str(exc.filename).startswith(str(artifacts))
                      else (f"the results journal ({journal_origin})", journal))
        loop = link_loop(path, exc)
        if loop:
            raise SpecdecUsageError(f"{what} is {path}, which cannot be looked up: {loop}; remove or repoint "
                                    f"the link, or give another path") from None
        raise SpecdecUsageError(f"{what} is {path}, which cannot be looked up ({exc.strerror or exc}); "
                                f"give another path") from None


def _check(journal: Path, journal_origin: str, artifacts: Path, artifacts_origin: str) -> None:
    where = f"the results journal ({journal_origin})"
    # is_dir and is_file read a link loop, the journal's or a folder's on its path, as nothing
    # there; each read then fails
    try:
        journal.stat()
    except (FileNotFoundError, NotADirectoryError):  # nothing yet, or a file on the way (said below)
        pass
    refuse_special(journal, where, "it is a file the plugin appends to and rotates: give a file path such "
                                   "as .specdec/journal.jsonl")
    if journal.is_dir():
        raise SpecdecUsageError(f"{where} is {journal}, a folder; it is a file the plugin rotates: "
                                "give a file path such as .specdec/journal.jsonl")
    for parent in journal.parents:
        if parent.exists():
            if not parent.is_dir():
                raise SpecdecUsageError(f"{where} is {journal}, but {parent} is a file, not a folder; "
                                        "give a path under a folder")
            break
    if journal.is_file() and not is_journal(journal):
        raise SpecdecUsageError(f"{where} is {journal}, an existing file that is not a pytest-specdec journal; "
                                "the plugin would rotate or append to it: point the journal elsewhere, or move "
                                "the file")
    if artifacts.exists() and not artifacts.is_dir():
        raise SpecdecUsageError(f"the artifacts folder ({artifacts_origin}) is {artifacts}, a file; give a folder "
                                "such as .specdec/artifacts")
