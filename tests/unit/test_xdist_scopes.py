"""`make test`'s xdist workers and module-scoped fixtures: the repository's conftest.py gives
each file whose tests use one (wherever it is defined) to a single worker, so its set-up (shard
runs, the compile check, an engine) runs once, not once on each worker that was handed one of its
tests."""

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
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", "-n", "2")
    result.assert_outcomes(passed=12)
    assert len((pytester.path / "setups.txt").read_text().split()) == 1  # one worker set it up


def recording_fixture(name: str) -> str:
    return f'''
import os

import pytest


@pytest.fixture(scope="module")
def {name}():
    with open("setups.txt", "a") as f:
        f.write("{name} " + os.environ["PYTEST_XDIST_WORKER"] + "\\n")
'''


def using(fixture: str, header: str = "import pytest\n") -> str:
    return (f"{header}\n\n@pytest.mark.parametrize('i', range(6))\n"
            f"def test_it({fixture}, i):\n    pass\n")


def test_a_module_fixture_of_a_conftest_or_a_support_module_is_set_up_by_one_worker(pytester):
    """The test files name no `scope="module"` themselves: the old search of each file's text
    split them over both workers, each setting the fixture up."""
    pytester.makeconftest(ROOT_CONFTEST)
    pytester.mkdir("sub")
    (pytester.path / "sub" / "conftest.py").write_text(recording_fixture("from_conftest"))
    (pytester.path / "sub" / "test_from_conftest.py").write_text(using("from_conftest"))
    imports = "import pytest\n\nfrom support import imported  # noqa: F401\n"
    pytester.makepyfile(support=recording_fixture("imported"), test_imported=using("imported", imports))
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", "-n", "2")
    result.assert_outcomes(passed=12)
    setups = sorted((pytester.path / "setups.txt").read_text().splitlines())
    assert [line.split()[0] for line in setups] == ["from_conftest", "imported"], setups  # each set up once


MENTION = """
import pytest


# A comment saying scope="module" would share a set-up: none here, so no unit.
@pytest.mark.parametrize("i", range(4))
def test_mention(i, worker_id):
    with open("workers.txt", "a") as f:
        f.write(worker_id + "\\n")
"""


def test_a_mere_mention_of_module_scope_makes_no_unit(pytester):
    """The old search of the file's text took the comment for a fixture and gave all four tests
    to one worker; as four units, xdist hands the two workers one each to start with."""
    pytester.makeconftest(ROOT_CONFTEST)
    pytester.makepyfile(test_mention=MENTION)
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", "-n", "2")
    result.assert_outcomes(passed=4)
    assert len(set((pytester.path / "workers.txt").read_text().split())) == 2


def test_a_run_without_xdist_takes_the_conftest(pytester):
    """Its xdist hooks are optional: pytest stopped a `-p no:xdist` run at an unknown hook."""
    pytester.makeconftest(ROOT_CONFTEST)
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:xdist").assert_outcomes(passed=1)
