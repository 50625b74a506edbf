"""The gate as a user spells it: tolerances no measurement can exceed are refused or said, and
every built-in figure's direction decides a 20 % change either way."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from pytest_specdec.baselines import BaselineEntry
from pytest_specdec.directions import METRIC_DIRECTIONS
from pytest_specdec.errors import SpecdecUsageError
from pytest_specdec.gate import (
    Tolerance,
    compare_metric,
    parse_tolerance_table,
    parse_tolerances,
    resolve_tolerances,
    unreachable,
)
from pytest_specdec.metrics import MetricValue

FILE = "pyproject.toml [tool.specdec]"


def resolve(cli=None, ini=None, table=None, known=METRIC_DIRECTIONS):
    parsed = None if table is None else parse_tolerance_table(table, f"{FILE}.tolerances", known)
    return resolve_tolerances(cli, ini, None, parsed, FILE, known)


def test_minus_zero_percent_is_shown_as_zero():
    """`-0%` passed the `>= 0` check as -0.0 and the header read `output_tok_s --0%`."""
    assert str(parse_tolerances("output_tok_s:-0%")["output_tok_s"]) == "0%"
    assert resolve("accept_length:-0").describe().startswith("accept_length -0 (command line)")


@pytest.mark.parametrize("layer", ["cli", "ini", "table"])
@pytest.mark.parametrize("spec, named", [
    ("output_tok_s:100%", "output_tok_s:100%"),
    ("accept_length:150%", "accept_length:150%"),
    ("*:200%", "*:200% (which gives output_tok_s its tolerance)"),
])
def test_a_relative_drop_of_100_percent_or_more_can_never_fail_and_is_refused(layer, spec, named):
    """A higher-is-better built-in figure is never below 0, so `100%` let any drop pass: the
    header said the figure was gated, and nothing could fail it."""
    metric, _, amount = spec.partition(":")
    kwargs = {"table": {metric: amount}} if layer == "table" else {layer: spec}
    with pytest.raises(SpecdecUsageError, match=r"can never fail") as err:
        resolve(**kwargs)
    assert named in str(err.value)
    assert "a percentage below 100%" in str(err.value) and ":off to leave it ungated" in str(err.value)


def test_what_a_large_relative_tolerance_may_still_gate():
    # a latency may double; `*` stands only for the figures its layer does not name
    assert "ttft_ms +200%" in resolve("ttft_ms:200%").describe()
    assert "tpot_ms +150%" in resolve("*:150%,output_tok_s:10%,accept_length:0,accept_rate:0").describe()
    # a figure of the user's own may go below 0
    known = {**METRIC_DIRECTIONS, "margin": "higher"}
    assert "margin -150%" in resolve("margin:150%", known=known).describe()


@pytest.mark.parametrize("spec", ["accept_rate:1", "accept_rate:2", "*:5,output_tok_s:5%"])
def test_an_absolute_drop_of_the_whole_accept_rate_is_refused(spec):
    """`accept_rate:2` meant as 2 %: an accept rate is a fraction, so no drop reaches 2."""
    with pytest.raises(SpecdecUsageError, match=r"accept_rate lies between 0 and 1.*write a percentage"):
        resolve(ini=spec)
    assert "accept_rate -0.5" in resolve("accept_rate:0.5").describe()


def cmp(name, now, then, tol, *, deterministic=False, n=16, seed=0):
    direction = METRIC_DIRECTIONS[name]
    if deterministic:
        return compare_metric("t", MetricValue(name, now, direction, 0.0, n, True),
                              BaselineEntry(then, direction, deterministic=True), tol)
    rng = random.Random(seed)
    ours = tuple(now * math.exp(rng.gauss(0, 0.03)) for _ in range(n))
    theirs = tuple(then * math.exp(rng.gauss(0, 0.03)) for _ in range(3 * n))
    return compare_metric("t", MetricValue(name, statistics.median(ours), direction, 0.0, n, False, ours),
                          BaselineEntry(statistics.median(theirs), direction, distribution=theirs, save_sizes=(n,) * 3),
                          tol)


@pytest.mark.parametrize("deterministic", [True, False], ids=["exact", "samples"])
@pytest.mark.parametrize("name", sorted(METRIC_DIRECTIONS))
def test_every_built_in_figure_fails_20_percent_worse_and_passes_20_percent_better(name, deterministic):
    higher = METRIC_DIRECTIONS[name] == "higher"
    tol = Tolerance(name, 0.10, True)
    better, worse = (1.2, 0.8) if higher else (0.8, 1.2)
    assert cmp(name, 100.0 * better, 100.0, tol, deterministic=deterministic).verdict == "improvement"
    assert cmp(name, 100.0 * worse, 100.0, tol, deterministic=deterministic).verdict == "regression"
    absolute = Tolerance(name, 10.0, False)  # the same bar in the figure's unit
    assert cmp(name, 100.0 * worse, 100.0, absolute, deterministic=deterministic).verdict == "regression"
    assert not cmp(name, 100.0 * better, 100.0, absolute, deterministic=deterministic).failed


def test_an_absolute_tolerance_of_the_whole_baseline_is_named():
    """`output_tok_s:15` meant as 15 %, against a baseline of 12 tok/s: a drop to 0 passed."""
    tol = Tolerance("output_tok_s", 15.0, False)
    c = cmp("output_tok_s", 0.5, 12.0, tol, deterministic=True)
    assert c.verdict == "unchanged"
    (why,) = unreachable([c])
    assert why.startswith("output_tok_s:15 allows a drop of its whole baseline 12.00, so no run can fail it")
    # a baseline of the tolerance itself: a drop to 0 is exactly the allowance, which passes
    (why,) = unreachable([cmp("output_tok_s", 0.0, 15.0, tol, deterministic=True)])
    assert why.startswith("output_tok_s:15 allows a drop of its whole baseline 15.00")
    # a bar below the baseline can fail; a latency's absolute bar always can; 0 against 0 is exact
    assert unreachable([cmp("output_tok_s", 12.0, 20.0, tol, deterministic=True),
                        cmp("ttft_ms", 1.0, 5.0, Tolerance("ttft_ms", 15.0, False), deterministic=True),
                        cmp("accept_rate", 0.0, 0.0, Tolerance("accept_rate", 0.0, False),
                            deterministic=True)]) == []


def test_a_run_whose_absolute_tolerance_cannot_fail_warns(pytester):
    pytester.makepyfile(test_figures="""
import os

def test_figures(specdec_record):
    specdec_record.metric("output_tok_s", float(os.environ.get("TOK_S", "12")))
""")
    pytester.runpytest("-p", "no:cacheprovider", "--specdec-save-baseline").assert_outcomes(passed=1)
    result = pytester.runpytest("-p", "no:cacheprovider", "--specdec-compare-fail", "output_tok_s:15")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(["*test_figures: output_tok_s:15 allows a drop of its whole baseline 12.00, so "
                                 "no run can fail it; write a percentage (output_tok_s:N%)*"])
