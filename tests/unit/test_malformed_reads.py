"""Files the plugin reads that a user, a crash or a hand edit left malformed: each is a usage error
naming the file and the fix, or is read as what it safely means; never a traceback."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from pytest_specdec import benchmark_info, config, journal_owner, run_paths
from pytest_specdec.errors import SpecdecUsageError


def _make(path, kind):
    if kind == "folder":
        path.mkdir()
    elif kind == "link loop":
        os.symlink(path.name, path)
    elif kind == "dangling link":
        os.symlink("nowhere.toml", path)


# What a settings file's error says stands there: a link names where it points (it said only "a
# symbolic link to no readable file", the same for a loop as for a link to nothing)
_SAID = {"folder": "a folder",
         "link loop": "a symbolic link loop (it points to {name}, and following the links never reaches a file)",
         "dangling link": "a broken symbolic link to nowhere.toml, where nothing is"}


@pytest.mark.parametrize("kind", ["folder", "link loop"])
def test_a_run_marker_that_cannot_be_opened_is_a_usage_error_naming_it(tmp_path, kind):
    marker = journal_owner.marker_of(tmp_path / "journal.jsonl")
    _make(marker, kind)
    with pytest.raises(SpecdecUsageError, match=rf"run marker {marker} cannot be read .*remove it"):
        journal_owner.owner(marker)


def test_a_run_marker_of_damaged_bytes_reads_as_an_unknown_runs(tmp_path):
    """A marker names a run to tell a live writer apart; bytes that are no text name none, and the
    run that takes the journal writes it anew (it was a UnicodeDecodeError at collection)."""
    marker = journal_owner.marker_of(tmp_path / "journal.jsonl")
    marker.write_bytes(b"\xff\xfe\x80\n")
    run, pid = journal_owner.owner(marker)
    assert run != "some-run" and pid == "?"
    journal_owner.check_free(tmp_path / "journal.jsonl", "some-run")  # nobody holds it
    journal_owner.take(tmp_path / "journal.jsonl", "some-run")
    assert journal_owner.owner(marker) == ("some-run", str(os.getpid()))


@pytest.mark.parametrize("on_path, where", [(False, "it is"), (True, "a folder on its path is")])
def test_a_journal_that_is_a_link_loop_is_a_usage_error_at_start_naming_the_loop(tmp_path, on_path, where):
    """is_dir and is_file read a loop as nothing there, so it passed the check and the first read
    of the journal stopped the run with an INTERNALERROR; then the error said only "cannot be
    looked up (Too many levels of symbolic links)", not that the link is what to fix."""
    loop = tmp_path / ("state" if on_path else "journal.jsonl")
    _make(loop, "link loop")
    journal = loop / "journal.jsonl" if on_path else loop
    with pytest.raises(SpecdecUsageError) as caught:
        run_paths.check(journal, "--specdec-journal", tmp_path / "artifacts", "--specdec-artifacts")
    assert str(caught.value) == (f"the results journal (--specdec-journal) is {journal}, which cannot be looked "
                                 f"up: {where} a symbolic link loop (Too many levels of symbolic links); remove "
                                 f"or repoint the link, or give another path")


@pytest.mark.parametrize("bench", [
    {"fullname": "t.py::test", "extra_info": "text"},
    {"fullname": "t.py::test", "extra_info": ["a"]},
    {"fullname": ["t.py::test"], "extra_info": {"specdec": {"hardware": "cpu"}}},
    "not an object",
])
def test_a_compared_benchmark_file_with_fields_of_another_type_is_read_as_saying_nothing(bench):
    """pytest-benchmark loads a saved run it can compare and hands it over as it is; an
    extra_info of another type was an AttributeError, a list for fullname a TypeError."""
    cfg = SimpleNamespace(stash=pytest.Stash())
    benchmark_info.note_compared(cfg, {"datetime": "then", "benchmarks": [bench]})
    benchmark_info.note_compared(cfg, {"datetime": "then", "benchmarks": {"not": "a list"}})
    benchmark_info.warn_if_compared_otherwise(cfg, "t.py::test", "test", {"hardware": "cpu"})


@pytest.mark.parametrize("kind", ["folder", "link loop", "dangling link"])
def test_a_specdec_toml_that_is_no_file_is_a_usage_error_not_the_defaults(tmp_path, kind):
    """is_file said no, so the run measured the default matrix with the header saying only
    "config defaults", though the user had put a settings file there."""
    _make(tmp_path / "specdec.toml", kind)
    with pytest.raises(SpecdecUsageError) as info:
        config.load(tmp_path)
    assert str(info.value) == (f"{tmp_path / 'specdec.toml'} is {_SAID[kind].format(name='specdec.toml')}, not a "
                               f"settings file; make it the TOML file that configures pytest-specdec, or remove it "
                               f"to run the defaults")


@pytest.mark.parametrize("toml", ["tool = 1\n", "tool = [1, 2]\n"])
def test_a_pyproject_whose_tool_is_no_table_configures_nothing_here(tmp_path, toml):
    """pytest reads no pyproject.toml given -c another file, so this one reached the plugin alone:
    an AttributeError. A `tool` that is no table holds no [tool.specdec]."""
    (tmp_path / "pyproject.toml").write_text(toml)
    assert config.load(tmp_path).source == "defaults"


@pytest.mark.parametrize("kind", ["folder", "link loop", "dangling link"])
def test_a_known_issues_file_that_is_no_file_is_a_usage_error_not_no_known_issues(tmp_path, kind):
    """The baseline folder's known_issues.toml was read only where is_file said yes: a folder or a
    broken link there ran the matrix with none of its known issues, their tests failing rather
    than expected to."""
    from pytest_specdec.state import build

    (tmp_path / "baselines").mkdir()
    path = tmp_path / "baselines" / "known_issues.toml"
    _make(path, kind)
    with pytest.raises(SpecdecUsageError) as info:
        build(tmp_path, {}, {})
    assert str(info.value) == (f"known issues file {path} is {_SAID[kind].format(name='known_issues.toml')}, not a "
                               f"TOML file; make it the file of [[known_issues]] entries, or remove it")
