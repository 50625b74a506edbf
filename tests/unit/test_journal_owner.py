"""journal_owner: the run marker beside the journal, as a disk that refuses it leaves it."""

from __future__ import annotations

import errno
import os
import pathlib
import subprocess
import sys

import pytest

from pytest_specdec import journal_owner, liveness
from pytest_specdec.errors import SpecdecUsageError


@pytest.fixture(autouse=True)
def _let_go():
    yield
    liveness.release_all()  # the markers of these tests are not held past them


@pytest.mark.parametrize("code, fix", [
    (errno.ENOSPC, "free space there, or choose another --specdec-journal"),
    (errno.EROFS, "make it writable, or choose another --specdec-journal"),
])
def test_a_run_marker_the_disk_refuses_is_one_line_naming_it_and_the_fix(tmp_path, monkeypatch, code, fix):
    """The marker was written in place outside any handling: the OSError reached each recording
    test as a traceback, and a write cut short left a marker naming half a run. Now the marker is
    as an earlier (ended) run left it, nothing is left beside it, and the error says the file,
    the OS reason and the fix."""
    journal = tmp_path / "journal.jsonl"
    marker = journal_owner.marker_of(journal)
    marker.write_text("earlier-run\n4242\n")
    real_write_text = pathlib.Path.write_text

    def refused(self, text, *args, **kwargs):
        real_write_text(self, text[:3], *args, **kwargs)  # what a full disk let through
        raise OSError(code, os.strerror(code), str(self))

    monkeypatch.setattr(pathlib.Path, "write_text", refused)
    with pytest.raises(SpecdecUsageError) as caught:
        journal_owner.take(journal, "this-run")
    monkeypatch.undo()
    message = str(caught.value)
    assert "\n" not in message
    assert str(marker) in message and os.strerror(code) in message
    assert message.endswith(fix)
    assert marker.read_text() == "earlier-run\n4242\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [marker.name]


def test_a_marker_taken_again_by_another_run_of_this_process_is_held(tmp_path):
    """A marker rewritten by rename is a new file: the lock this process held on the old one
    must not stand in for it, or another run would find the new marker free."""
    journal = tmp_path / "journal.jsonl"
    marker = journal_owner.marker_of(journal)
    journal_owner.take(journal, "first-run")
    journal_owner.take(journal, "second-run")
    assert journal_owner.owner(marker)[0] == "second-run"
    probe = ("import sys; from pathlib import Path; from pytest_specdec import liveness; "
             "print(liveness.held_elsewhere(Path(sys.argv[1])))")
    out = subprocess.run([sys.executable, "-c", probe, str(marker)], capture_output=True, text=True,
                         check=True, timeout=120).stdout.strip()
    assert out == "True"


def test_a_recording_test_whose_run_marker_the_disk_refuses_fails_in_one_line(pytester, monkeypatch):
    """Through a run: the OSError escaped `session.claim_journal`, which turns only usage errors
    into one-line failures, so each recording test failed with the plugin's traceback."""
    pytester.makepyprojecttoml("[tool.specdec]\n")
    pytester.makepyfile("def test_records(specdec_record):\n    specdec_record.metric('verify_us', 3.0)\n")
    real_write_text = pathlib.Path.write_text

    def full_disk_for_the_marker(self, text, *args, **kwargs):
        if self.name.startswith(".journal.jsonl.run."):  # the marker's temporary sibling
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real_write_text(self, text, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "write_text", full_disk_for_the_marker)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    marker = pytester.path / ".specdec" / "journal.jsonl.run"
    result.stdout.fnmatch_lines([f"*pytest-specdec: the results journal's run marker cannot be written, so "
                                 f"this run cannot journal its figures: {marker}: No space left on device; "
                                 f"free space there, or choose another --specdec-journal*"])
    shown = result.stdout.str()
    assert "journal_owner.py" not in shown and "During handling" not in shown and ".journal.jsonl.run." not in shown


def test_a_killed_takes_temporary_marker_is_removed_under_the_journals_lock(tmp_path):
    """A run SIGKILLed between the marker's temporary copy and its rename left `.journal.jsonl.run.*.tmp`
    for good; every take holds the journal's lock (`session.start_journal`), so any found is a dead one's."""
    journal = tmp_path / "journal.jsonl"
    torn = tmp_path / ".journal.jsonl.run.k1ll3d.tmp"
    torn.write_text("half-a-r")
    journal_owner.take(journal, "this-run")
    assert not torn.exists()
    assert journal_owner.owner(journal_owner.marker_of(journal))[0] == "this-run"


def test_a_marker_this_process_holds_is_not_held_elsewhere(tmp_path):
    marker = tmp_path / "run.marker"
    liveness.hold(marker)
    assert not liveness.held_elsewhere(marker)
