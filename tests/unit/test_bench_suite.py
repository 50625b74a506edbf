"""The repository's own benchmark suite (tests/bench, pyproject.toml, baselines/), run as a user
runs it for the family markers: the plugin's tests check the mechanism on projects of their own,
so only this catches the shipped matrix, known issues or suite losing what they promise.

A machine without a Blackwell GPU skips `-m blackwell` naming what it found; a dry run as sm_120
runs the Blackwell items on the embedded engine, the shipped sm_120 story as xfails.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def bench(tmp_path: Path, *args: str, where: str = "tests/bench") -> subprocess.CompletedProcess:
    """`pytest WHERE ARGS` in the repository, its journal and logs kept out of the checkout."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", where,
         f"--specdec-journal={tmp_path / 'journal.jsonl'}", f"--specdec-artifacts={tmp_path / 'artifacts'}",
         *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def outcomes(process: subprocess.CompletedProcess) -> dict[str, list[str]]:
    """Each -rA outcome word and the test ids it was given to (the parametrization only)."""
    found: dict[str, list[str]] = {}
    for line in process.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "XFAIL", "FAILED", "ERROR", "XPASS") and "::" in rest:
            found.setdefault(word, []).append(rest.split("[", 1)[1].split("]", 1)[0])
        elif word == "SKIPPED":  # -rA groups skips by reason: "SKIPPED [n] file: reason"
            found.setdefault(word, []).append(rest.split(": ", 1)[-1])
    return found


def test_minus_m_blackwell_without_blackwell_skips_every_item_naming_the_hardware(tmp_path):
    from pytest_specdec.hardware import detect

    found = detect()
    if found.family == "blackwell":
        pytest.skip(f"this machine has a Blackwell GPU ({found.describe()}): the items would run")
    done = bench(tmp_path, "-m", "blackwell")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    skips = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skips and all(f"needs a Blackwell GPU; found: {found.describe()}" in line for line in skips), skips
    assert " skipped, " in done.stdout and "passed" not in done.stdout.splitlines()[-1]


def test_a_sm120_dry_run_runs_the_blackwell_items_with_the_shipped_known_issue_as_xfail(tmp_path):
    """Budgets 8 and 12 are the shipped story (the embedded engine plays the crash out), 16 runs
    and passes, TP4 needs GPUs a simulated sm_120 x1 does not have; the cpu matrix stays out."""
    chosen = " or ".join(f"blackwell-ddtree-{cell}-chat" for cell in ("tp1-b8", "tp1-b12", "tp1-b16", "tp4-b8"))
    # one simulated GPU on the embedded engine, as on a machine without GPUs, wherever this runs;
    # the file of the chosen items alone: the kernel files' collection imports torch (1.5 s)
    done = bench(tmp_path, "--specdec-arch=sm_120", "--specdec-gpus=1", "--specdec-backend=embedded",
                 "-m", "blackwell", "-k", chosen, where="tests/bench/test_generation.py")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    got = outcomes(done)
    assert sorted(got) == ["PASSED", "SKIPPED", "XFAIL"], got
    assert sorted(got["XFAIL"]) == ["blackwell-ddtree-tp1-b12-chat", "blackwell-ddtree-tp1-b8-chat"]
    assert got["PASSED"] == ["blackwell-ddtree-tp1-b16-chat"]
    assert "known issue: DDTree verify crashes with 'CUDA error: an illegal instruction was encountered' " \
           "on sm_120" in done.stdout
    assert got["SKIPPED"] == ["needs 4 GPUs; found: 1 simulated sm_120 GPU (blackwell)"]
