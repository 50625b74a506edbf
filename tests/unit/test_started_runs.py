"""The pytest runs this suite's tests start load no plugin they do not use (the root conftest)."""

from __future__ import annotations

import pytest

NO_HYPOTHESIS = """
def test_plugins(request):
    assert not request.config.pluginmanager.has_plugin("hypothesispytest")
"""


@pytest.mark.parametrize("subprocess", [True, False])
def test_a_run_a_pytester_test_starts_loads_no_hypothesis(pytester: pytest.Pytester, subprocess: bool):
    """pytester's set-up discards PYTEST_ADDOPTS after the conftest's autouse fixture had set it:
    each run still paid ~0.75 s for hypothesis's plugin (in-process ones ~1.5 s, importing it anew)."""
    pytester.makepyfile(test_plugins=NO_HYPOTHESIS)
    run = pytester.runpytest_subprocess if subprocess else pytester.runpytest_inprocess
    run("-p", "no:cacheprovider").assert_outcomes(passed=1)
