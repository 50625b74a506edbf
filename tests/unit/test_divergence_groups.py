"""The controller's losslessness verdicts over many results: each result is compared only with
those of its workload and test, grouped once, with the verdicts of comparing it with all."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_specdec import session
from pytest_specdec.configuration import MatrixCase
from pytest_specdec.lossless import Exactness, Outputs
from pytest_specdec.session import Results, divergences


def state():
    matrix = SimpleNamespace(methods=["ar", "dflash", "ddtree"], tp=[1, 4])
    settings = SimpleNamespace(reference="ar")
    return SimpleNamespace(settings=settings, lossless=Exactness("exact"),
                           config=SimpleNamespace(matrices={"cpu": matrix}),
                           known_issue=lambda method, tp, budget: None)


def result(method, tp, budget, workload, variant, tokens, resumed=False):
    case = MatrixCase("cpu", method, tp, budget)
    test_id = f"test_generation[{case.param_id}-{workload}-{variant}]"
    return session.Result(test_id, f"t.py::{test_id}", case, workload, resumed=resumed,
                          outputs=Outputs(((1, 2, 3) if tokens == "same" else (1, 2, 9),), ("abc",)))


def many():
    """Three workloads, eight test variants each, every configuration of TP 1 and 4; the ddtree
    configurations of variant 3 of w1 diverge, and so does the dflash of TP 4 of variant 5 of w2."""
    out = []
    for workload in ("w0", "w1", "w2"):
        for variant in range(8):
            for tp in (1, 4):
                for method, budget in (("ar", None), ("dflash", None), ("ddtree", 8), ("ddtree", 16)):
                    lossy = (workload, variant, method) == ("w1", 3, "ddtree") or \
                            (workload, variant, method, tp) == ("w2", 5, "dflash", 4)
                    out.append(result(method, tp, budget, workload, variant, "other" if lossy else "same",
                                      resumed=variant % 2 == 0))
    return out


@pytest.fixture
def results():
    out = Results(state=state())
    for r in many():
        (out.resumed_results if r.resumed else out.results)[r.nodeid] = r
    return out


@pytest.fixture
def counted(monkeypatch):
    calls = []
    original = session.lossless.counterpart

    def counting(nodeid, config):
        calls.append(nodeid)
        return original(nodeid, config)

    monkeypatch.setattr(session.lossless, "counterpart", counting)
    return calls


def test_found_lossy_and_the_baseline_candidates_are_those_of_comparing_with_all(results):
    everything = results.all()
    expected = {}
    for r in everything:
        if r.case.method != "ar":
            for _, divergence in divergences(r, everything, results.state)[:1]:
                expected[r.nodeid] = divergence.message()
    found = results.found_lossy()
    assert sorted(found) == sorted(expected) and len(found) == 2 * 2 + 1
    assert all(why.startswith(expected[nodeid] + " (found by the test of ar-tp") for nodeid, why in found.items())
    saved, failed, lossy = results.baseline_candidates()
    assert sorted(r.nodeid for r in lossy) == sorted(expected) and failed == []
    assert len(saved) + len(lossy) == len(everything)


def test_each_result_is_grouped_once_not_filtered_against_all(results, counted):
    """found_lossy (twice a run, through late_verdicts) and baseline_candidates compared each
    result with every other result of its workload: with thousands of results, a quadratic count
    of comparisons. Now each result's test is worked out once to group them, once to find its group."""
    count = len(results.all())
    results.found_lossy()
    assert len(counted) <= 2 * count
    counted.clear()
    results.baseline_candidates()
    assert len(counted) <= 2 * count
