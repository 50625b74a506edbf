"""A test that changes its configured workload before running it (dataclasses.replace)."""

from __future__ import annotations

import pytest

from test_bench_flow import journal_lines, no_leftover_engines, project, run  # noqa: F401

CHANGED = """
from dataclasses import replace


def test_generation(specdec_server, specdec_workload, specdec_record):
    specdec_record.run(specdec_server, replace(specdec_workload, num_prompts=2, max_new_tokens=4))
"""


def test_a_changed_configured_workload_fails_naming_what_changed(pytester, no_leftover_engines):
    """run() looked the workload up by its name alone: the changed one ran the configured one's
    prompts and tokens (here 3 of 24, not 2 of 4), journaled under its name, silently."""
    pytest.importorskip("torch")
    project(pytester, methods=("ar",), prompts=3, max_new_tokens=24)
    pytester.makepyfile(test_generation=CHANGED)
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*server ar-tp1: workload 'chat' is not its *tool.specdec.workloads* entry: num_prompts=2 "
        "(configured 3), max_new_tokens=4 (configured 24); *"])
    assert journal_lines(pytester) == []
