"""`.specdec/` stays bounded: the last N runs' journals and artifact folders are kept."""

from __future__ import annotations

import os

import pytest

from pytest_specdec.retention import prune


def test_prune_keeps_the_most_recent(tmp_path):
    paths = []
    for age, name in enumerate(["newest", "middle", "oldest"]):
        path = tmp_path / name
        path.mkdir() if name != "middle" else path.write_text("x")
        os.utime(path, (1000 - age, 1000 - age))
        paths.append(path)
    assert prune(paths, 1) == [tmp_path / "middle", tmp_path / "oldest"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["newest"]
    assert prune([tmp_path / "newest", tmp_path / "gone"], 1) == []


def test_runs_keep_the_last_n_journals_and_artifact_folders(pytester: pytest.Pytester):
    pytester.makepyprojecttoml("[tool.specdec]\nkeep_runs = 2\n")
    pytester.makepyfile("""
def test_measures(specdec_pool, specdec_record):
    specdec_record.metric("verify_us", 1.0)
""")
    for _ in range(4):
        pytester.runpytest().assert_outcomes(passed=1)
    state = pytester.path / ".specdec"
    journals = sorted(p.name for p in state.glob("journal*.jsonl"))
    assert len(journals) == 2 and "journal.jsonl" in journals, journals
    assert len(list((state / "artifacts").glob("run-*"))) == 2
