"""gate: tolerance layers and precedence, the rank test, verdicts (exact, statistical, noisy)."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest

from pytest_specdec.baselines import BaselineEntry, Baselines
from pytest_specdec.errors import SpecdecUsageError
from pytest_specdec.gate import (
    Tolerance,
    compare_all,
    compare_metric,
    failure_message,
    mann_whitney_p,
    parse_tolerance_table,
    parse_tolerances,
    resolve_tolerances,
    verdict_of,
)
from pytest_specdec.metrics import MetricValue

TID = "test_generation[ddtree-tp1-b16-chat]"


def mv(name="output_tok_s", value=100.0, direction="higher", spread=0.0, deterministic=False,
       distribution=(), cpu_share=None):
    return MetricValue(name, value, direction, spread, 16, deterministic, tuple(distribution), cpu_share)


def entry(value=100.0, direction="higher", spread=0.0, deterministic=False, distribution=(),
          cpu_share=None):
    return BaselineEntry(value=value, direction=direction, spread=spread, samples=16,
                         deterministic=deterministic, distribution=tuple(distribution),
                         cpu_share=cpu_share)


def around(center, spread=0.02, n=8, seed=0):
    rng = random.Random(seed)
    return [center * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


# ------------------------------------------------------------------ tolerances


def test_parse_tolerances_relative_absolute_wildcard_and_off():
    t = parse_tolerances(" output_tok_s:5% , accept_length:0.05,ttft_ms:10%,*:20%,tpot_ms:off")
    assert t["output_tok_s"] == Tolerance("output_tok_s", pytest.approx(0.05), True)
    assert t["accept_length"] == Tolerance("accept_length", 0.05, False)
    assert t["ttft_ms"].allowed(200.0) == pytest.approx(20.0)
    assert str(t["output_tok_s"]) == "5%" and str(t["accept_length"]) == "0.05"
    assert set(t) == {"output_tok_s", "accept_length", "ttft_ms", "*", "tpot_ms"}
    assert parse_tolerances("ttft_ms:OFF")["ttft_ms"] is t["tpot_ms"]  # off in any case, not "not a number"


@pytest.mark.parametrize(
    "expr, match",
    [
        ("", "empty tolerance expression"),
        ("output_tok_s", "is not METRIC:TOLERANCE"),
        (":5%", "is not METRIC:TOLERANCE"),
        ("output_tok_s:5%,", "stray comma"),
        ("output_tok_s:five%", "is not a number or percentage"),
        ("output_tok_s:-5%", "must be a finite number >= 0"),
        ("output_tok_s:nan", "must be a finite number >= 0"),
        ("output_tok_s:5%,output_tok_s:3%", "given twice"),
        ("tok/s:5%", "is not a metric name"),
        ("tok_s:5%", "unknown metric 'tok_s'; valid names: accept_length, accept_rate, e2e_ms, "
                     "output_tok_s, tpot_ms, ttft_ms, verify_us"),
        # a misspelt metric is named as a misspelt key is
        ("accept_lenght:2%", r"unknown metric 'accept_lenght'; did you mean 'accept_length'\? \(else declare a "
                             r"metric of your own"),
        ("TTFT_ms:10%", r"unknown metric 'TTFT_ms'; did you mean 'ttft_ms'\?"),
    ],
)
def test_bad_tolerance_expressions_are_usage_errors(expr, match):
    with pytest.raises(SpecdecUsageError, match=match) as info:
        parse_tolerances(expr)
    assert str(info.value).startswith("--specdec-compare-fail:")


def test_the_tolerances_table_is_checked_the_same_way():
    table = parse_tolerance_table({"output_tok_s": "15%", "accept_length": 0, "ttft_ms": "off"}, "f")
    assert table["accept_length"] == Tolerance("accept_length", 0.0, False)
    with pytest.raises(SpecdecUsageError, match=r"^f: unknown metric 'tok_s'; valid names: accept_length"):
        parse_tolerance_table({"tok_s": "5%"}, "f")
    with pytest.raises(SpecdecUsageError, match=r"^f: unknown metric 'output_toks'; did you mean 'output_tok_s'\?"):
        parse_tolerance_table({"output_toks": "5%"}, "f")
    with pytest.raises(SpecdecUsageError, match=r"^f key 'output_tok_s': True is not a tolerance; write a percentage"):
        parse_tolerance_table({"output_tok_s": True}, "f")


def test_precedence_command_line_then_ini_then_file_per_figure():
    file_table = parse_tolerance_table({"output_tok_s": "20%", "tpot_ms": "30%", "accept_length": 0}, "f")
    tol = resolve_tolerances("output_tok_s:5%,ttft_ms:off", "tpot_ms:25%", "*:50%", file_table,
                             "pyproject.toml")
    out = tol.rule("output_tok_s")
    assert (str(out.tolerance), out.origin) == ("5%", "command line")
    assert (str(tol.get("tpot_ms")), tol.rule("tpot_ms").origin) == ("25%", "ini")
    assert (str(tol.get("accept_length")), tol.rule("accept_length").origin) == ("0", "pyproject.toml")
    assert tol.get("ttft_ms") is None and tol.rule("ttft_ms").origin == "command line"  # off beats the file's *
    assert str(tol.get("accept_rate")) == "50%"  # only the file's wildcard names it
    assert "output_tok_s -5% (command line)" in tol.describe()
    assert "tpot_ms +25% (ini)" in tol.describe()
    assert tol.describe().endswith("not gated: ttft_ms") and tol.any


def test_a_higher_layer_wildcard_beats_a_lower_layer_name():
    """`*:off` on the command line must ungate what [tool.specdec.tolerances] names, as any option
    given there beats the file; a name beats the wildcard within one layer only."""
    file_table = parse_tolerance_table({"output_tok_s": "20%", "tpot_ms": "30%"}, "f")
    tol = resolve_tolerances("*:off", None, None, file_table, "pyproject.toml")
    assert tol.get("output_tok_s") is None and tol.rule("output_tok_s").origin == "command line"
    assert not tol.any and tol.describe().startswith("not gated: output_tok_s")
    tol = resolve_tolerances(None, "*:5%", "ttft_ms:1%", file_table, "pyproject.toml")
    assert (str(tol.get("tpot_ms")), tol.rule("tpot_ms").origin) == ("5%", "ini")
    tol = resolve_tolerances("*:off,tpot_ms:7%", "output_tok_s:2%", None, file_table, "pyproject.toml")
    assert (str(tol.get("tpot_ms")), tol.rule("tpot_ms").origin) == ("7%", "command line")
    assert tol.get("output_tok_s") is None and tol.any
    tol = resolve_tolerances(None, "output_tok_s:2%", "*:9%", file_table, "pyproject.toml")
    assert str(tol.get("tpot_ms")) == "30%" and str(tol.get("ttft_ms")) == "9%"  # the file: name, then *


def test_nothing_set_gates_nothing_and_says_so():
    tol = resolve_tolerances(None, "", None, {}, "pyproject.toml")
    assert not tol.any and tol.get("output_tok_s") is None
    assert tol.describe().startswith("not gated: output_tok_s")


def test_a_figure_twice_in_the_file_is_an_error():
    with pytest.raises(SpecdecUsageError, match="output_tok_s given both in compare_fail and in"):
        resolve_tolerances(None, None, "output_tok_s:5%", {"output_tok_s": Tolerance("output_tok_s", 0.1, True)},
                           "pyproject.toml")


# ------------------------------------------------------------------ the rank test


def brute_force_p(worse, better):
    """P(U >= u) by enumerating every split of the pooled values (no ties)."""
    pooled, n = worse + better, len(worse)
    u = sum(x < y for x in worse for y in better)
    splits = list(itertools.combinations(range(len(pooled)), n))
    hits = sum(sum(pooled[i] < pooled[j] for i in s for j in range(len(pooled)) if j not in s) >= u
               for s in splits)
    return hits / len(splits)


@pytest.mark.parametrize("seed", range(4))
def test_mann_whitney_matches_enumeration(seed):
    rng = random.Random(seed)
    worse, better = [rng.random() for _ in range(5)], [rng.random() + 0.3 for _ in range(4)]
    assert mann_whitney_p(worse, better) == pytest.approx(brute_force_p(worse, better))


def test_mann_whitney_extremes():
    assert mann_whitney_p([1, 2, 3], [4, 5, 6]) == pytest.approx(1 / 20)  # 3 vs 3 cannot go lower
    assert mann_whitney_p(list(range(8)), list(range(10, 18))) == pytest.approx(1 / 12870)
    assert mann_whitney_p([4, 5, 6], [1, 2, 3]) == 1.0
    assert 0 < mann_whitney_p(list(range(40)), list(range(20, 60))) < 0.01  # normal approximation


def test_mann_whitney_counts_a_tie_as_half_and_rounds_it_towards_no_evidence():
    assert mann_whitney_p([5] * 4, [5] * 4) > 0.5  # nothing but ties: no evidence either way
    assert mann_whitney_p([1, 2], [2, 3]) == pytest.approx(2 / 6)  # U = 3.5: P(U >= 3), not P(U >= 4)
    assert mann_whitney_p([2], [1, 2, 3]) == pytest.approx(3 / 4)  # one sample: U = 1.5, P(U >= 1)


# ------------------------------------------------------------------ exact figures

TOL = parse_tolerances("output_tok_s:5%,accept_length:2%,ttft_ms:10%")


def test_regression_line_matches_the_documented_format():
    c = compare_metric(TID, mv(value=812.4), entry(901.0), TOL["output_tok_s"])
    assert c.verdict == "regression" and c.failed
    assert c.line() == "output_tok_s 812.4 < baseline 901.0 -5% (-9.8%)"


def test_deterministic_figures_gate_exactly_whatever_their_samples():
    c = compare_metric(TID, mv("accept_length", 3.10, spread=1.0, deterministic=True, distribution=[2, 4, 3]),
                       entry(3.21, spread=1.0, deterministic=True, distribution=[2, 4, 3]), TOL["accept_length"])
    assert c.failed and c.p_value is None
    assert c.line() == "accept_length 3.10 < baseline 3.21 -2% (-3.4%)"


def test_lower_is_better_and_improvements():
    slow = compare_metric(TID, mv("ttft_ms", 120.0, "lower"), entry(100.0, "lower"), TOL["ttft_ms"])
    assert slow.failed and slow.line() == "ttft_ms 120.0 > baseline 100.0 +10% (+20.0%)"
    fast = compare_metric(TID, mv("ttft_ms", 80.0, "lower"), entry(100.0, "lower"), TOL["ttft_ms"])
    assert fast.verdict == "improvement" and fast.line() == "ttft_ms 80.00 < baseline 100.0 -10% (-20.0%)"


def test_within_tolerance_unchanged_and_new():
    assert compare_metric(TID, mv(value=870.0), entry(901.0), TOL["output_tok_s"]).line() == \
        "output_tok_s 870.0 < baseline 901.0 ±5% (-3.4%)"
    new = compare_metric(TID, mv(value=812.4), None, TOL["output_tok_s"])
    assert new.verdict == "new" and new.line() == "output_tok_s 812.4 (no baseline)"


def test_a_relative_tolerance_is_a_share_of_the_baseline_not_of_the_run():
    """10 % of 3.0 is 0.3 both ways: 2.72 (-0.28) passes and 3.31 (+0.31) is an improvement;
    10 % of the run's own figure would say the opposite of both."""
    tol = Tolerance("accept_length", 0.10, True)

    def exact(now):
        return compare_metric(TID, mv("accept_length", now, deterministic=True), entry(3.0, deterministic=True),
                              tol).verdict

    assert exact(2.72) == "unchanged" and exact(3.31) == "improvement"


def test_a_deterministic_figure_against_a_sampled_baseline_is_judged_by_its_noise():
    """Exact only where both sides reproduce: a greedy run's acceptance against an entry saved
    from sampled decoding, whose requests scatter, is not red for a drift inside that scatter."""
    c = compare_metric(TID, mv("accept_length", 2.6, deterministic=True),
                       entry(3.0, distribution=[2.0, 2.6, 3.0, 3.4, 4.0]), Tolerance("accept_length", 0.10, True))
    assert c.verdict == "noisy"


def test_direction_mismatch_is_a_usage_error():
    with pytest.raises(SpecdecUsageError, match="if the change is meant, delete the entry .* and save the "
                                                "figure again with --specdec-save-baseline"):
        compare_metric(TID, mv(value=1.0), entry(1.0, "lower"), None)


# ------------------------------------------------------------------ timing figures from samples


def test_a_clear_regression_from_samples_is_red_with_its_evidence():
    now = mv(value=600.0, distribution=around(600.0), cpu_share=1.0)
    then = entry(900.0, distribution=around(900.0, seed=1), cpu_share=1.0)
    c = compare_metric(TID, now, then, parse_tolerances("output_tok_s:15%")["output_tok_s"])
    assert c.verdict == "regression" and c.failed and c.p_value < 0.001
    assert c.line().startswith("output_tok_s 599.2 < baseline 902.6 -15% (-33.6%) [p=7.8e-05")
    assert "-15% (-33." in c.line() and "8 vs 8 samples, per second the server had a CPU]" in c.line()


def test_beyond_tolerance_but_not_clearly_is_noisy_not_red():
    now = mv(value=800.0, distribution=[500, 1100, 700, 900, 650, 1000, 600, 950])
    then = entry(900.0, distribution=around(900.0))
    c = compare_metric(TID, now, then, parse_tolerances("output_tok_s:5%")["output_tok_s"])
    assert c.verdict == "noisy" and not c.failed and c.noisy
    assert "too noisy to decide [p=" in c.line()
    assert failure_message([c]) is None
    assert failure_message([c], strict_noise=True) == c.line()


def test_a_run_just_past_the_edge_is_ranked_against_the_edge_not_the_baseline():
    """The rank test moves the baseline's samples to the edge of what passes: a run 11 % down at
    a 10 % tolerance, its requests among the edge's, is noisy, though each is below every baseline
    request."""
    now = mv(value=89.25, distribution=[86.0, 87.0, 88.0, 89.0, 89.5, 90.0, 91.0, 92.0])
    then = entry(100.0, distribution=[98.0, 99.0, 99.5, 100.0, 100.0, 100.5, 101.0, 102.0])
    c = compare_metric(TID, now, then, parse_tolerances("output_tok_s:10%")["output_tok_s"])
    assert c.verdict == "noisy" and c.p_value > 0.1


def test_a_run_inside_the_contention_allowance_is_not_red_however_its_requests_rank():
    """Red needs both: the run's median beyond the edge (here the baseline's over 1.64, both runs
    having had a CPU 30 % of the time) and the rank test. Half the requests far down and the rest
    just above the edge rank as significant (p = 0.01), but the run is not beyond the edge."""
    now = mv(value=130.0, distribution=[10.0] * 8 + [130.0] * 9, cpu_share=0.3)
    then = entry(210.0, distribution=[82.0 + 1.5 * i for i in range(8)] + [328.0 + 1.5 * i for i in range(8)],
                 cpu_share=0.3)
    c = compare_metric(TID, now, then, Tolerance("output_tok_s", 0.0, True))
    assert c.p_value < 0.025 and c.baseline / c.contention < c.value
    assert c.verdict == "noisy"


def test_too_few_samples_for_the_rank_test_are_decided_by_standard_errors():
    """Three a side can never reach p = 0.025 (C(6, 3) = 20 orderings): the spreads decide."""
    tol = parse_tolerances("output_tok_s:5%")["output_tok_s"]
    collapse = compare_metric(TID, mv(value=10.0, spread=0.1, distribution=[10, 10.1, 9.9]),
                              entry(100.0, spread=1.0, distribution=[100, 101, 99]), tol)
    assert collapse.verdict == "regression" and collapse.p_value is None
    vague = compare_metric(TID, mv(value=80.0, spread=20.0, distribution=[60, 80, 100]),
                           entry(100.0, spread=20.0, distribution=[80, 100, 120]), tol)
    assert vague.verdict == "noisy"


def test_a_collapse_is_red_however_noisy_its_samples():
    """Decided by standard errors, a drop was measured against two errors in the baseline's units:
    two requests of 1.5 and 0.5 tok/s against 100 (-99 %) read as "noisy", a silent green. As a
    log ratio against relative errors, it is red; vague drops stay noisy."""
    tol = parse_tolerances("output_tok_s:5%")["output_tok_s"]
    collapse = compare_metric(TID, mv(value=1.0, distribution=[1.5, 0.5]),
                              entry(100.0, distribution=[100.0, 100.0]), tol)
    assert collapse.verdict == "regression" and collapse.p_value is None
    slower = compare_metric(TID, mv("tpot_ms", 100.0, "lower", distribution=[150.0, 50.0]),
                            entry(1.0, "lower", distribution=[1.0, 1.0]), tol)
    assert slower.verdict == "regression"
    vague = compare_metric(TID, mv(value=60.0, distribution=[90.0, 30.0]),
                           entry(100.0, distribution=[100.0, 100.0]), tol)
    assert vague.verdict == "noisy"
    nothing = compare_metric(TID, mv(value=0.0, distribution=[0.0, 0.0]), entry(100.0, spread=60.0), tol)
    assert nothing.verdict == "regression"
    # a doubled latency (x2.1 past the edge) is a collapse: red whatever its spreads
    doubled = compare_metric(TID, mv("ttft_ms", 210.0, "lower", spread=63.0),
                             entry(100.0, "lower", spread=30.0), parse_tolerances("ttft_ms:0%")["ttft_ms"])
    assert doubled.verdict == "regression"


def test_a_collapsed_median_with_a_request_not_beyond_the_edge_is_left_to_the_errors():
    """Red whatever the errors say only when every request is beyond every baseline request moved
    to the edge: one request back above the edge, or exactly on it, is not beyond it."""
    assert few("output_tok_s", [10.0, 40.0, 200.0], [100.0, 100.0, 100.0], 15).verdict == "noisy"
    assert few("output_tok_s", [10.0, 42.5], [100.0, 50.0], 15).verdict == "noisy"  # 42.5: 50's edge


def test_one_sample_against_a_pool_of_runs_borrows_the_pools_scatter():
    """One request a workload: the run's figure has one sample and no spread, the baseline's the
    pool of its last saves (one sample each) and the last save's spread, 0. Unchanged runs drifting
    past the edge went red; the pool's scatter decides now, and a collapse is still red."""
    tol = parse_tolerances("ttft_ms:30%")["ttft_ms"]
    pool = entry(5.42, "lower", distribution=[5.42, 4.71, 8.42])
    drift = compare_metric(TID, mv("ttft_ms", 10.14, "lower", distribution=[10.14]), pool, tol)
    assert drift.verdict == "noisy" and drift.p_value is None
    collapse = compare_metric(TID, mv("ttft_ms", 40.0, "lower", distribution=[40.0]), pool, tol)
    assert collapse.verdict == "regression"


def test_an_unchanged_run_with_drift_inside_the_tolerance_passes():
    now = mv(value=850.0, distribution=around(850.0))
    c = compare_metric(TID, now, entry(900.0, distribution=around(900.0, seed=3)),
                       parse_tolerances("output_tok_s:10%")["output_tok_s"])
    assert c.verdict == "unchanged"


def test_improvements_must_be_clear_too():
    clear = compare_metric(TID, mv("tpot_ms", 1.0, "lower", distribution=around(1.0)),
                           entry(2.0, "lower", distribution=around(2.0, seed=2)), TOL["ttft_ms"])
    assert clear.verdict == "improvement"
    vague = compare_metric(TID, mv("tpot_ms", 1.0, "lower", distribution=[0.5, 3.0, 0.7, 2.5, 0.9, 2.2]),
                           entry(2.0, "lower", distribution=around(2.0)), TOL["ttft_ms"])
    assert vague.verdict == "unchanged"


def test_a_contended_machine_needs_a_larger_drop_to_call_it():
    """Calibrated figures of runs that waited most of the time for a CPU still move: -30 % when
    both had a CPU 30 % of the time is noisy; the same drop on a quiet machine is red."""
    tol = parse_tolerances("output_tok_s:15%")["output_tok_s"]
    def run(share_now, share_then, ratio=0.7):
        return compare_metric(TID, mv(value=70.0, distribution=around(100.0 * ratio), cpu_share=share_now),
                              entry(100.0, distribution=around(100.0, seed=1, n=24), cpu_share=share_then), tol)
    quiet = run(0.95, 0.95)
    assert quiet.verdict == "regression" and 1.0 < quiet.contention < 1.05
    busy = run(0.3, 0.3)
    assert busy.verdict == "noisy" and busy.contention == pytest.approx(1.64, abs=0.01)
    assert "x1.64 allowed for CPU contention]" in busy.line()
    assert run(0.3, 0.3, ratio=0.4).verdict == "regression"  # -60 %: clear even there


def test_a_contended_machine_needs_a_larger_rise_of_a_latency_too():
    """The edge moves up for a figure that rose: +30 % of a calibrated latency is red on a quiet
    machine and noisy when both runs had a CPU 30 % of the time; +150 % is red there too."""
    tol = parse_tolerances("ttft_ms:15%")["ttft_ms"]

    def run(share, ratio):
        return compare_metric(TID, mv("ttft_ms", 100.0 * ratio, "lower", distribution=around(100.0 * ratio),
                                      cpu_share=share),
                              entry(100.0, "lower", distribution=around(100.0, seed=1, n=24), cpu_share=share), tol)

    assert run(0.95, 1.3).verdict == "regression"
    assert run(0.3, 1.3).verdict == "noisy"
    assert run(0.3, 2.5).verdict == "regression"


def test_calibrated_against_uncalibrated_compares_values_by_spread():
    c = compare_metric(TID, mv(value=600.0, distribution=around(1800.0), cpu_share=1.0),
                       entry(900.0, spread=5.0, distribution=around(900.0)), TOL["output_tok_s"])
    assert c.value == 600.0 and c.baseline == 900.0 and c.verdict == "regression" and not c.calibrated


def test_values_without_samples_use_their_spreads():
    noisy = compare_metric(TID, mv(value=812.4, spread=40.0), entry(901.0, spread=30.0), TOL["output_tok_s"])
    assert noisy.verdict == "noisy"
    quiet = compare_metric(TID, mv(value=812.4, spread=4.0), entry(901.0, spread=3.0), TOL["output_tok_s"])
    assert quiet.failed


def test_ungated_figures_never_fail_and_comparisons_round_trip():
    ungated = compare_metric(TID, mv("accept_rate", 0.40), entry(0.50), None)
    assert ungated.verdict == "regression" and not ungated.failed
    assert ungated.line() == "accept_rate 0.4 < baseline 0.5 (-20.0%, not gated)"
    # unchanged and ungated: no tolerance to show (it read as gated at ±0%)
    same = compare_metric(TID, mv("accept_rate", 0.50), entry(0.50), None)
    assert same.line() == "accept_rate 0.5 == baseline 0.5 (+0.0%, not gated)"
    from pytest_specdec.gate import Comparison

    timed = compare_metric(TID, mv(value=600.0, distribution=around(600.0), cpu_share=1.0),
                           entry(900.0, distribution=around(900.0), cpu_share=1.0), TOL["output_tok_s"])
    assert Comparison.from_json(TID, timed.to_json()) == timed


def test_compare_all_verdicts_and_failure_message():
    b = Baselines("cpu", {TID: {"output_tok_s": entry(901.0), "accept_length": entry(3.21),
                                "ttft_ms": entry(100.0, "lower")}})
    tol = resolve_tolerances("output_tok_s:5%,accept_length:2%,ttft_ms:10%", None, None, {}, "f")
    comps = compare_all(TID, [mv(value=812.4), mv("accept_length", 3.30), mv("ttft_ms", 101.0, "lower"),
                              mv("tpot_ms", 5.0, "lower")], b.get, tol)
    assert [c.verdict for c in comps] == ["regression", "improvement", "unchanged", "new"]
    assert failure_message(comps) == "output_tok_s 812.4 < baseline 901.0 -5% (-9.8%)"
    assert verdict_of(comps) == "regression" and verdict_of(comps[1:]) == "improved"


def test_a_test_compared_but_never_gated_says_so():
    b = Baselines("cpu", {TID: {"output_tok_s": entry(901.0)}})
    comps = compare_all(TID, [mv(value=10.0)], b.get, resolve_tolerances(None, None, None, {}, "f"))
    assert verdict_of(comps) == "not gated"
    assert verdict_of([]) == ""


def test_ungated_figures_that_moved_leave_the_tests_verdict_to_its_gated_ones():
    """A figure no tolerance names is compared and shown, never gated: its noise or improvement
    neither makes the test "noisy" or "improved" nor fails it under --specdec-strict-noise."""
    b = Baselines("cpu", {TID: {"output_tok_s": entry(900.0, distribution=around(900.0)),
                                "accept_length": entry(3.0), "ttft_ms": entry(100.0, "lower")}})
    comps = compare_all(TID, [mv(value=800.0, distribution=[500, 1100, 700, 900, 650, 1000, 600, 950]),
                              mv("accept_length", 3.5), mv("ttft_ms", 101.0, "lower")], b.get,
                        resolve_tolerances("ttft_ms:10%", None, None, {}, "f"))
    assert [c.verdict for c in comps] == ["noisy", "improvement", "unchanged"]
    assert verdict_of(comps) == "ok" and failure_message(comps, strict_noise=True) is None


def test_a_test_whose_gated_figures_all_lack_a_baseline_is_new_not_ok():
    b = Baselines("cpu", {TID: {"tpot_ms": entry(2.0, "lower")}})  # output_tok_s misspelt away
    comps = compare_all(TID, [mv(value=10.0), mv("tpot_ms", 2.0, "lower")], b.get,
                        resolve_tolerances("output_tok_s:5%", None, None, {}, "f"))
    assert [c.verdict for c in comps] == ["new", "unchanged"]
    assert verdict_of(comps) == "new"


# ------------------------------------------------------------------ hints for a missing entry

def test_a_hint_names_only_an_entry_whose_renaming_gives_the_figure_a_baseline():
    from pytest_specdec.baselines import Baselines
    from pytest_specdec.unmatched import missing_entry

    lower = entry(5.0, "lower")
    stored = Baselines("cpu", {"test_gen[ab]": {"ttft_ms": lower}, "test_gen[abd]": {"ttft_ms": lower},
                               "test_gen[abc_]": {"my_fig": lower},
                               "test_gen[x]": {"ttft_msec": entry(5.0, "higher"), "ttfb_ms": lower}})
    # [ab] is a test this run collected (deselected, say); [abc_] holds no ttft_ms
    assert missing_entry(stored, "test_gen[abc]", "ttft_ms", {"test_gen[ab]"}, {}) == (
        "no entry for this test", ["test_gen[abd]"])
    node_id = "tests/benchmarks/speculative/test_generation_against_sglang.py::test_generation[dflash-tp1-chat]"
    stored.entries[node_id] = {"ttft_ms": lower}
    assert missing_entry(stored, "test_generation[dflash-tp1-chat]", "ttft_ms", set(), {}) == (
        "no entry for this test", [node_id])
    # a figure of the other direction would be refused as this one's
    assert missing_entry(stored, "test_gen[x]", "ttft_ms", set(), {"ttft_ms": "lower"}, "lower") == (
        "its entry has no ttft_ms", ["ttfb_ms"])


# ------------------------------------------------------------------ the few-sample fallback's errors


def few(name, now, then, tol=0.0):
    """A timing figure of these samples (its median) against a baseline of those."""
    direction = "higher" if name == "output_tok_s" else "lower"
    return compare_metric(TID, mv(name, statistics.median(now), direction, distribution=now),
                          entry(statistics.median(then), direction, distribution=then),
                          parse_tolerances(f"{name}:{tol:g}%")[name])


def test_three_samples_a_side_are_judged_by_students_t_not_the_normal():
    """Two standard errors estimated from three samples a side made 4-5 % of unchanged runs red,
    not 2.5 %: -20 % against a 10 % scatter is not clear with 4 degrees of freedom; -25 % is."""
    base = [100.0, 110.0, 90.0]
    assert few("output_tok_s", [v * 0.8 for v in base], base).verdict == "noisy"
    # nor -22 %: a median of three is 1.16 times as uncertain as their mean
    assert few("output_tok_s", [v * 0.78 for v in base], base).verdict == "noisy"
    assert few("output_tok_s", [v * 0.75 for v in base], base).verdict == "regression"


def test_a_request_against_a_request_shows_no_noise_and_only_a_collapse_is_red():
    """One request a side: any drift past the edge was red (half of unchanged runs at 0 %)."""
    assert few("tpot_ms", [130.0], [100.0], 15).verdict == "noisy"
    assert few("output_tok_s", [70.0], [100.0], 15).verdict == "noisy"
    assert few("tpot_ms", [240.0], [100.0], 15).verdict == "regression"  # x2.09 past the edge
    assert few("output_tok_s", [40.0], [100.0], 15).verdict == "regression"


def test_a_rise_and_a_drop_by_the_same_factor_weigh_the_same():
    """A rise was clear by the difference or the log ratio, whichever said more: a latency 1.5 x
    was red where a throughput / 1.5 with the same relative errors was noisy."""
    tol = Tolerance("ttft_ms", 0.0, True)
    rise = compare_metric(TID, mv("ttft_ms", 150.0, "lower", spread=23.34), entry(100.0, "lower", spread=15.56), tol)
    drop = compare_metric(TID, mv(value=100 / 1.5, spread=10.37), entry(100.0, spread=15.56),
                          Tolerance("output_tok_s", 0.0, True))
    assert rise.verdict == drop.verdict == "noisy"
    # one request against a pool of 8: borrowed scatter is relative, the same both ways
    pool = [100 * math.exp(0.1 * z) for z in (-1.5, -1, -0.5, -0.2, 0.2, 0.5, 1, 1.5)]
    slower = few("tpot_ms", [130.0], pool)
    fewer = few("output_tok_s", [100 / 1.3], [1e4 / v for v in pool])
    assert slower.verdict == fewer.verdict == "regression"
    # one request has the pool's scatter a request (0.1), not its median's: x1.2 is inside it
    assert few("tpot_ms", [120.0], pool).verdict == "noisy"


def test_t_quantiles_and_welch_degrees_of_freedom():
    from pytest_specdec.gate import t_quantile

    assert t_quantile(1) == 12.706 and t_quantile(4) == 2.776 and t_quantile(30) == 2.042
    assert 4.303 > t_quantile(2.5) > 3.182 and t_quantile(0.5) == 12.706
    assert t_quantile(31) < 2.042 and abs(t_quantile(1e9) - 1.96) < 1e-3


def test_unchanged_runs_of_two_requests_a_side_are_rarely_red():
    """Seeded: 400 unchanged runs of 2 against 2 requests at 10 % scatter; the normal cutoff made
    about 7 % red, Student's t at most ALPHA (2.5 %)."""
    rng = random.Random(118)
    red = 0
    for _ in range(400):
        now = [100 * math.exp(rng.gauss(0, 0.1)) for _ in range(2)]
        then = [100 * math.exp(rng.gauss(0, 0.1)) for _ in range(2)]
        red += few("tpot_ms", now, then).verdict == "regression"
    assert red <= 10


def test_two_requests_that_agree_claim_no_precision_the_other_sides_scatter_denies():
    """2 against 6 unchanged requests went red about 3 % of the time, not ALPHA: judged by their
    own scatter, two requests that happened to agree (114, 115 ms) made a 12 % rise clear against
    six scattered over 88-115 ms. Each side's error is now at least the pooled scatter's, with
    n + m - 2 degrees of freedom; a rise of 27 % stays red."""
    then = [88.0, 94.0, 98.0, 103.0, 108.0, 115.0]
    assert few("tpot_ms", [114.0, 115.0], then).verdict == "noisy"
    assert few("tpot_ms", [130.0, 131.0], then).verdict == "regression"


def test_one_request_against_many_is_decided_by_its_exact_rank():
    """U of one sample against m is uniform on 0..m, so p = 1 / (m + 1) at best: the normal
    approximation, taken beyond 30 samples a side, never went below 0.04, and a TPOT of one sample
    100 times slower than 48 baseline samples was noisy, never red. From 39 samples on the rank
    test decides (p = 1/40 = ALPHA is red); below, the standard errors."""
    then = [100.0 + i for i in range(48)]
    collapse = few("tpot_ms", [10000.0], then, 15)
    assert collapse.verdict == "regression" and collapse.p_value == pytest.approx(1 / 49)
    assert few("tpot_ms", [10000.0] * 40, [100.0], 15).verdict == "regression"  # one baseline request
    edge = few("tpot_ms", [500.0], then[:39], 15)
    assert edge.p_value == 0.025 and edge.verdict == "regression"
    assert few("tpot_ms", [500.0], then[:38], 15).p_value is None


def test_a_figure_of_ones_own_with_an_edge_at_or_below_0_is_judged_by_its_errors():
    """No logarithm where the edge is at or below 0 (a figure of the user's own may be): the
    difference against t times the combined error decides, so a drift inside the scatter is noisy."""
    tol = Tolerance("margin", 0.5, False)
    vague = compare_metric(TID, mv("margin", -1.5, distribution=[-5.0, -1.5, 2.0]),
                           entry(0.0, distribution=[-1.0, 0.0, 1.0]), tol)
    assert vague.verdict == "noisy"
    clear = compare_metric(TID, mv("margin", -3.0, distribution=[-3.1, -3.0, -2.9]),
                           entry(0.0, distribution=[-0.1, 0.0, 0.1]), tol)
    assert clear.verdict == "regression"
    # an edge of exactly 0: a baseline of -1 with an absolute tolerance of 1, lower is better
    rise = compare_metric(TID, mv("margin", 0.5, "lower", spread=0.1), entry(-1.0, "lower", spread=0.1),
                          Tolerance("margin", 1.0, False))
    assert rise.verdict == "regression"
