"""The README's example, copied as it is into a new project, runs on this machine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def tour_blocks() -> tuple[str, str]:
    """The TOML configuration and the test file of the README's "A short tour"."""
    tour = README.read_text(encoding="utf-8").split("## A short tour", 1)[1]
    toml = re.search(r"```toml\n(.*?)```", tour, re.S).group(1)
    python = re.search(r"```python\n(.*?)```", tour, re.S).group(1)
    return toml, python


def test_the_readme_example_runs_its_cpu_matrix(pytester: pytest.Pytester):
    toml, python = tour_blocks()
    pytester.makepyprojecttoml(toml)
    pytester.makepyfile(test_generation=python)
    # one configuration of the cpu matrix shows that the example runs as written; the blackwell
    # matrix's configuration of the same name skips here (no Blackwell GPU)
    result = pytester.runpytest_subprocess("-k", "ddtree-tp1-b8", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*specdec summary*", "ddtree-tp1-b8 *chat *"])
