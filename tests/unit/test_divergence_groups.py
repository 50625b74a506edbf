"""The controller's losslessness verdicts over many results: each result is compared only with
those of its workload and test, grouped once, with the verdicts of comparing it with all."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_specdec import session
from pytest_specdec.backends import EmbeddedBackend
from pytest_specdec.configuration import MatrixCase
from pytest_specdec.lossless import Exactness, Outputs
from pytest_specdec.session import Results, divergences


def state():
    matrix = SimpleNamespace(methods=["ar", "dflash", "ddtree"], tp=[1, 4])
    settings = SimpleNamespace(reference="ar", lossless_margins=False)
    return SimpleNamespace(settings=settings, lossless=Exactness("exact"), backend=EmbeddedBackend,
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
    saved, failed, lossy, _ = results.baseline_candidates()
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


@pytest.fixture
def late(results):
    """`results` where the ddtree configurations of budget 16 are a known issue whose tests skipped
    unsettled, the dflash ones' stand-ins awaited their reference, and the AR of TP 4 of variant 1
    of w0 was not measured (so neither of that test's is settled)."""
    issue = session.KnownIssue("budget 16 diverges")
    results.state.known_issue = lambda method, tp, budget: issue if budget == 16 else None
    results.state.dry_run = False
    del results.results["t.py::test_generation[ar-tp4-w0-1]"]
    for nodeid, r in results.results.items():
        if r.case.budget == 16:
            results.outcomes[nodeid] = ("skipped", "its reference had recorded nothing yet")
        elif r.case.method == "dflash":
            results.awaiting.add(nodeid)
    results.awaiting.add("t.py::test_generation[dflash-tp1-w9-1]")  # no result: nothing to settle
    return results


def test_known_issues_and_stand_ins_are_settled_by_their_own_reference_among_many(late):
    """Each is settled by the AR of its own test, workload and TP, measured after it: the diverging
    ones (ddtree of variant 3 of w1, dflash of TP 4 of variant 5 of w2) as their test would have
    ended, every other one as matching; the two whose AR was not measured stay unsettled."""
    assert len(late.unsettled_known_issues()) == 3 * 4 * 2  # odd variants measured now, TP 1 and 4
    known = late.settled_known_issues()
    assert "t.py::test_generation[ddtree-tp4-b16-w0-1]" not in known and len(known) == 3 * 4 * 2 - 1
    xfailed = {nodeid for nodeid, (outcome, _) in known.items() if outcome == "xfailed"}
    assert xfailed == {"t.py::test_generation[ddtree-tp1-b16-w1-3]", "t.py::test_generation[ddtree-tp4-b16-w1-3]"}
    assert known["t.py::test_generation[ddtree-tp4-b16-w1-3]"][1].endswith(
        "(found by the test of ar-tp4, measured after it)")
    assert all(outcome == "failed" and why.startswith("[XPASS(strict)] known issue: budget 16 diverges: "
                                                      "its outputs match ar-tp")
               for nodeid, (outcome, why) in known.items() if nodeid not in xfailed)
    stood = late.settled_stand_ins()
    assert "t.py::test_generation[dflash-tp4-w0-1]" not in stood and len(stood) == 3 * 4 * 2 - 1
    assert {nodeid for nodeid, (outcome, _) in stood.items() if outcome == "failed"} == \
        {"t.py::test_generation[dflash-tp4-w2-5]"}
    assert stood["t.py::test_generation[dflash-tp4-w2-5]"][1].endswith(
        "(found by the test of ar-tp4, measured after it)")
    assert all(why is None for nodeid, (outcome, why) in stood.items() if outcome == "passed")


def test_settling_groups_the_results_once_not_once_per_known_issue_or_stand_in(late, counted):
    """settled_known_issues and settled_stand_ins (each twice a run: late_verdicts and
    baseline_candidates) filtered every result against all, twice per known issue or awaited
    stand-in: with thousands of results, a quadratic count of comparisons."""
    count = len(late.all())
    settling = len(late.unsettled_known_issues()) + len(late.awaiting)
    counted.clear()
    late.settled_known_issues()
    late.settled_stand_ins()
    assert len(counted) <= 2 * count + 2 * settling


def test_a_reference_finds_only_the_configurations_of_its_own_tp(results):
    """A dflash of TP 4 diverges in variant 5 of w2: ar-tp4's test names it, ar-tp1's (the
    reference of the TP 1 configurations alone) must not fail on it."""
    everything = results.all()
    of = {r.config: r for r in everything if r.nodeid.endswith("-w2-5]")}
    assert divergences(of["ar-tp1"], everything, results.state) == []
    assert [candidate.config for candidate, _ in divergences(of["ar-tp4"], everything, results.state)] == ["dflash-tp4"]


def test_a_resumed_configuration_skipped_as_already_measured_is_still_found_lossy(results):
    """A resumed test's report is a skip ("already measured"), which the controller notes as its
    outcome: a reference measured after it still finds its outputs lossy."""
    from dataclasses import replace

    nodeid = "t.py::test_generation[ddtree-tp1-b8-w1-3]"  # lossy, measured by an earlier run
    results.resumed_results[nodeid] = replace(results.results.pop(nodeid), resumed=True)
    results.outcomes[nodeid] = ("skipped", "already measured (resumed from the journal)")
    assert results.found_lossy()[nodeid].startswith("ddtree-tp1-b8 is not lossless: prompt 1 differs from ar-tp1")
