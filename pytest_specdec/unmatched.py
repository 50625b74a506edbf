"""Why a gated figure found no baseline entry to compare with, in words a user can act on.

A first run has nothing to compare with, but so has a run whose baseline file spells a test or
figure differently from the test, or whose baseline folder is misspelt: all three read as `new`.
This module tells them apart: the folder or file that is not there (and where the folder was
set), or the entries of similar names, not claimed by a test of this run, that were likely meant.
Both the `--specdec-require-baseline` failure and the summary's note use it. The other way round,
`unclaimed` finds the entries no test of a run is (a configuration removed from the matrix leaves
its entries behind, compared with nothing), for the summary's note of a run that collected whole
the files whose tests saved them.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from .file_kind import link_fault_said

if TYPE_CHECKING:
    from .baselines import Baselines
    from .options import Settings

#: Files of a baseline folder that are not a hardware's baselines.
_NOT_BASELINES = ("durations.json",)


def close(name: str, candidates: Iterable[str]) -> list[str]:
    """The candidates most like `name`, best first (difflib's default cut-off, at most three)."""
    return difflib.get_close_matches(name, sorted(set(candidates)), n=3)


def did_you_mean(names: list[str]) -> str:
    """`; did you mean 'a' or 'b'?`, or "" for no names."""
    return f"; did you mean {' or '.join(repr(n) for n in names)}?" if names else ""


def where_folder_was_set(settings: Settings) -> str:
    """Where the baseline folder came from, as the user would change it."""
    if settings.origins["baseline_dir"] == "default":
        return f"the default of {settings.setter('baseline_dir')}"
    return f"set by {settings.source('baseline_dir')}"


def missing_file(path: Path, settings: Settings) -> str | None:
    """None where the baseline file is there; else that a link on its path leads nowhere, that its
    folder is not (and where the folder was set), or that the folder holds no such file (and the files there of similar names: another
    hardware key's)."""
    if path.is_file():
        return None
    broken = link_fault_said(path)
    if broken:  # "holds no FILE" beside the link itself sent the user to the folder
        return broken
    folder = path.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        return f"the baseline folder {folder} {what} ({where_folder_was_set(settings)})"
    others = [p.name for p in folder.glob("*.json") if p.name not in _NOT_BASELINES]
    near = close(path.name, others)
    # a file named for another hardware key is that machine's, and its figures do not transfer
    # (a load refuses it): offered as meant, it sent the user to copy it over
    key = path.name.removesuffix(".json")
    meant = [name for name in near if _hardware_key(folder / name) in (None, key)]
    foreign = [name for name in near if name not in meant]
    notes = ([did_you_mean(meant).removeprefix("; ")] if meant else []) + (
        [f"{', '.join(foreign)} {'is' if len(foreign) == 1 else 'are'} another hardware's, whose figures "
         f"do not transfer to {key}"] if foreign else [])
    return (f"the baseline folder {folder} ({where_folder_was_set(settings)}) holds no {path.name}"
            + (f" ({'; '.join(notes)})" if notes else ""))


def _hardware_key(path: Path) -> str | None:
    """The hardware key a baseline file says it holds; None where it cannot be read as one."""
    import json

    try:
        key = json.loads(path.read_text(encoding="utf-8")).get("hardware_key")
    except (OSError, ValueError, AttributeError):
        return None
    return key if isinstance(key, str) else None


def missing_entry(baselines: Baselines, test_id: str, metric: str, claimed_tests: Iterable[str],
                  claimed_figures: Iterable[str], direction: str | None = None) -> tuple[str, list[str]]:
    """Why the file has no entry for `metric` of `test_id`, and the names it likely meant.

    Only a name whose renaming would give the figure an entry to compare with is suggested: an
    entry that a test this run collected (`claimed_tests`, deselected ones too) or this test's own
    `claimed_figures` stand for is theirs, a test's entry without `metric` would still have none,
    and a figure of the other `direction` would be refused as this one's. An entry keyed by a node
    id ending in `test_id` (written by hand: saves key a test by its name and parameters) is named
    however unlike its path makes it. An entry another of `claimed_tests` without an entry of its own
    is more like is left to that test (a renamed workload: `[ar-chat]` is `[ar-chats]`'s, not
    `[dflash-chats]`'s).
    """
    stored = baselines.entries.get(test_id)
    if stored is not None:
        figures = {name for name, entry in stored.items()
                   if direction is None or entry.direction == direction}
        return f"its entry has no {metric}", close(metric, figures - set(claimed_figures))
    claimed_tests = set(claimed_tests)
    tests = {name for name, figures in baselines.entries.items() if metric in figures} - claimed_tests
    # a hand-written node id is this test's entry under a key no test has, however long its path
    node_ids = sorted(name for name in tests if name.endswith(f"::{test_id}"))
    if node_ids:
        return "no entry for this test", node_ids
    # a renamed workload leaves every test of the run without its entry: each old entry is the
    # likely meaning of its own renamed test, not of the others it also resembles
    rivals = claimed_tests - set(baselines.entries) - {test_id}
    return "no entry for this test", [name for name in close(test_id, tests)
                                      if not any(_likeness(r, name) > _likeness(test_id, name) for r in rivals)]


def unclaimed(baselines: Baselines, collected: Iterable[str], files: Iterable[str]) -> list[str]:
    """The test ids of the file's entries that no test of `collected` (the run's recording tests'
    ids, deselected ones too) is, each saved by a test of one of `files` (the files the run
    collected, node-id paths): only there does no collected test mean none exists. Entries that
    keep no node id (format version 2) name no file and are left out; a key written as a node id
    whose test was collected is the "did you mean" of that test's own note."""
    collected, files = set(collected), set(files)
    out = []
    for test_id, figures in sorted(baselines.entries.items()):
        if test_id in collected or test_id.rpartition("::")[2] in collected:
            continue
        saved_in = {entry.nodeid.partition("::")[0] for entry in figures.values() if entry.nodeid}
        if saved_in and all(any(_same_file(path, file) for file in files) for path in saved_in):
            out.append(test_id)
    return out


def _same_file(saved: str, path: str) -> bool:
    """One file, though pytest chose another rootdir for one of the node ids (`same_test`'s rule)."""
    return saved == path or saved.endswith("/" + path) or path.endswith("/" + saved)


def _likeness(name: str, candidate: str) -> float:
    """How like `candidate` `name` is, as `close` ranks it (difflib's ratio)."""
    matcher = difflib.SequenceMatcher()
    matcher.set_seq2(name)
    matcher.set_seq1(candidate)
    return matcher.ratio()


__all__ = ["close", "did_you_mean", "missing_entry", "missing_file", "unclaimed", "where_folder_was_set"]
