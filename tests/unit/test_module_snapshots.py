"""pytester's snapshot of sys.modules and this repository's lazily imported modules: the
repository's conftest.py keeps a package's submodule attributes and sys.modules in agreement after
each test, so a test patching `from pytest_specdec import plot_pool` patches what the code reads,
and keeps a compiled package (torch) a pytester test imported, which cannot be imported twice."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT_CONFTEST = (Path(__file__).resolve().parents[2] / "conftest.py").read_text()

# Run in this order: each pytester test leaves a package attribute its snapshot's restore undid,
# each next test patches the module as the test files do and reads it as the plugin's code does.
IN_ORDER = '''
import sys


def test_a_first_import_in_a_pytester_test(pytester):
    assert "pytest_specdec.plot_pool" not in sys.modules, "imported eagerly now: take a lazy module"
    import pytest_specdec.plot_pool  # noqa: F401  (dropped from sys.modules by pytester's teardown)


def test_a_patch_of_the_module_taken_off_the_package_is_read(monkeypatch):
    from pytest_specdec import plot_pool

    monkeypatch.setattr(plot_pool, "PAGE_TIMEOUT_S", "patched")
    from pytest_specdec.plot_pool import PAGE_TIMEOUT_S  # as report.py's `from .plot_pool import ...`

    assert PAGE_TIMEOUT_S == "patched"


def test_a_fresh_import_in_a_pytester_test(pytester):
    del sys.modules["pytest_specdec.plot_pool"]
    import pytest_specdec.plot_pool  # noqa: F401  (the package's attribute; the old one comes back)


def test_a_patch_by_its_dotted_name_is_read(monkeypatch):
    monkeypatch.setattr("pytest_specdec.plot_pool.PAGE_TIMEOUT_S", "patched")
    from pytest_specdec.plot_pool import PAGE_TIMEOUT_S

    assert PAGE_TIMEOUT_S == "patched"
'''


def test_a_module_a_pytester_test_imported_is_patched_where_the_code_reads_it(pytester):
    """A pytester test that first imported pytest_specdec.plot_pool left it on the package but out
    of sys.modules; a later test's `from pytest_specdec import plot_pool` patched that stale module
    and the report imported a fresh one (a CI flake of test_plots). Both later tests failed so."""
    pytester.makeconftest(ROOT_CONFTEST)
    pytester.makepyfile(test_in_order=IN_ORDER)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(passed=4)


COMPILED_TWICE = '''
import pytest


def test_an_import_of_a_compiled_package_beside_pytester(pytester):
    pytest.importorskip("torch")  # as test_readme's tests that run the embedded engine skip without it


def test_a_later_import_of_it(pytester):
    import torch

    assert torch.zeros(2).sum().item() == 0
'''


def test_a_compiled_package_a_pytester_test_imported_stays_for_the_next_test(pytester):
    """test_readme.py and test_examples.py run in one process ended in "Fatal Python error:
    Segmentation fault": a pytester test's importorskip("torch") was dropped from sys.modules by
    pytester's restore, and the next test's `import torch` initialised its compiled core a second
    time (SystemError: bad call flags, then the crash)."""
    if importlib.util.find_spec("torch") is None:  # found, not imported: this test is beside pytester too
        pytest.skip("torch is not installed (the `engine` extra)")
    pytester.makeconftest(ROOT_CONFTEST)
    pytester.makepyfile(test_twice=COMPILED_TWICE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    assert result.ret == 0, result.stderr.str()[-2000:]
    result.assert_outcomes(passed=2)
