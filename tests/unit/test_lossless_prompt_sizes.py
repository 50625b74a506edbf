"""The losslessness guard holds outputs to the reference's only where both continued the same prompts.

A workload with `truncate = true` cuts each prompt to its own server's context length, so a
speculative server launched with a shorter one continued other prompts than the reference: their
outputs differ however lossless the decoding, and were reported as a lossless failure. Runs the
embedded engine in a subprocess, as test_guards_flow.py does; the shorter context is stood in for
by a project conftest that halves the speculative server's prompts as such a server's cut would.
"""

from __future__ import annotations

import pytest

from test_bench_flow import journal_figures, no_leftover_engines, project, run  # noqa: F401

pytest.importorskip("torch")

HALVED = """
from pytest_specdec import live
from pytest_specdec.workloads import Prompt

_resolved = live.LiveServer.workload


def _cut(self, spec):  # a speculative server of a shorter context length cuts every prompt
    workload = _resolved(self, spec)
    if not self.spec.is_speculative:
        return workload
    return workload.replace(prompts=tuple(Prompt(p.text[:len(p.text) // 2], p.max_new_tokens)
                                          for p in workload.prompts))


live.LiveServer.workload = _cut
"""


def test_each_prompt_s_size_is_journaled_with_its_outputs(pytester, no_leftover_engines):
    project(pytester, methods=("ar", "ddtree"), budgets=(8,), prompts=2, max_new_tokens=8)
    run(pytester).assert_outcomes(passed=2)
    sizes = [record["data"]["outputs"]["prompt_tokens"] for record in journal_figures(pytester)]
    assert len(sizes) == 2 and sizes[0] == sizes[1] and all(n > 0 for n in sizes[0])


def test_outputs_of_prompts_cut_otherwise_are_not_called_lossy(pytester, no_leftover_engines):
    project(pytester, methods=("ar", "ddtree"), budgets=(8,), prompts=2, max_new_tokens=8)
    pytester.makeconftest(HALVED)
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*ddtree-tp1-b8 cannot be checked for losslessness: its prompt 1 was * tokens "
                                 "long, ar-tp1's *, so they continued different prompts*"])
    result.stdout.no_fnmatch_line("*is not lossless*")
