"""`make test`'s xdist workers and module-scoped fixtures: the repository's conftest.py gives
each file that defines one to a single worker, so its set-up (shard runs, the compile check, an
engine) runs once, not once on each worker that was handed one of its tests."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("xdist")

ROOT_CONFTEST = (Path(__file__).resolve().parents[2] / "conftest.py").read_text()

SHARED = """
import os

import pytest


@pytest.fixture(scope="module")
def setup_once():
    with open("setups.txt", "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")


@pytest.mark.parametrize("i", range(6))
def test_shared(setup_once, i):
    pass
"""


def test_a_file_of_module_fixtures_is_set_up_by_one_worker(pytester):
    pytester.makeconftest(ROOT_CONFTEST)
    pytester.makepyfile(test_shared=SHARED,
                        test_other="import pytest\n\n\n@pytest.mark.parametrize('i', range(6))\n"
                                   "def test_other(i):\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "-n", "2")
    result.assert_outcomes(passed=12)
    assert len((pytester.path / "setups.txt").read_text().split()) == 1  # one worker set it up
