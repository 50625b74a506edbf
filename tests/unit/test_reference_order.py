"""Collection order: each reference configuration runs before the configurations the losslessness
guard holds to it, so a speculative test is compared as it runs and its own outcome says so.

Collected only (`--co`): no server boots. The flows themselves are in test_guards_flow.py.
"""

from __future__ import annotations

import pytest

PROJECT = """
[tool.specdec]
backend = "embedded"
{extra}

[tool.specdec.matrix.cpu]
methods = [{methods}]
tp = [{tps}]
budget = [8, 16]
"""

TESTS = """
def test_one(specdec_spec):
    pass


def test_two(specdec_spec):
    pass
"""


def collected(pytester: pytest.Pytester, methods: str, *args: str, tps: str = "1",
              extra: str = "") -> list[str]:
    pytester.makepyprojecttoml(PROJECT.format(methods=methods, tps=tps, extra=extra))
    pytester.makepyfile(test_order=TESTS)
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", "--co", "-q", *args)
    return [line.split("::")[-1] for line in result.stdout.lines if "::" in line]


def test_the_reference_runs_before_the_configurations_checked_against_it(pytester):
    """Listed last, ar ran last: ddtree and dflash passed their own tests however lossy, and only
    ar's test failed, naming them."""
    assert collected(pytester, '"ddtree", "dflash", "ar"') == [
        "test_one[ar-tp1]", "test_two[ar-tp1]",
        "test_one[ddtree-tp1-b8]", "test_two[ddtree-tp1-b8]",
        "test_one[ddtree-tp1-b16]", "test_two[ddtree-tp1-b16]",
        "test_one[dflash-tp1]", "test_two[dflash-tp1]",
    ]


def test_each_tp_reference_runs_before_its_own_tp_only(pytester):
    """The guard pairs a configuration with the reference at its own TP: ar-tp2 moves to before
    the first TP2 configuration, not to the front."""
    order = collected(pytester, '"ddtree", "ar"', "-k", "test_one", tps="1, 2")
    assert order == ["test_one[ar-tp1]", "test_one[ddtree-tp1-b8]", "test_one[ddtree-tp1-b16]",
                     "test_one[ar-tp2]", "test_one[ddtree-tp2-b8]", "test_one[ddtree-tp2-b16]"]


def test_another_reference_method_moves_instead(pytester):
    """With --specdec-reference=dflash, ar speculates nothing and is checked by nothing: it keeps its
    place, and dflash moves before ddtree."""
    order = collected(pytester, '"ar", "ddtree", "dflash"', "-k", "test_one", "--specdec-reference=dflash")
    assert order == ["test_one[ar-tp1]", "test_one[dflash-tp1]", "test_one[ddtree-tp1-b8]",
                     "test_one[ddtree-tp1-b16]"]


def test_with_the_guard_off_the_matrix_order_stands(pytester):
    order = collected(pytester, '"ddtree", "ar"', "-k", "test_one", extra='lossless = "off"')
    assert order == ["test_one[ddtree-tp1-b8]", "test_one[ddtree-tp1-b16]", "test_one[ar-tp1]"]


def test_failed_first_keeps_the_reference_ahead(pytester):
    """--ff puts last run's failures first, after every other plugin's ordering: a failed ddtree
    would then run before ar again."""
    pytester.makepyprojecttoml(PROJECT.format(methods='"ar", "ddtree"', tps="1", extra=""))
    pytester.makepyfile(test_order="""
def test_one(specdec_spec):
    assert specdec_spec.method != "ddtree"
""")
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=1, failed=2)
    result = pytester.runpytest("-p", "no:randomly", "--ff", "--co", "-q")
    order = [line.split("::")[-1] for line in result.stdout.lines if "::" in line]
    assert order == ["test_one[ar-tp1]", "test_one[ddtree-tp1-b8]", "test_one[ddtree-tp1-b16]"]


@pytest.mark.parametrize("shard", ["1/2", "2/2"])
def test_a_shard_takes_the_same_configurations_with_the_references_moved(pytester, shard):
    """The shard plan divides the matrix in its configured order before collection orders the
    items: moving the references changes the order within a shard, not which shard runs what."""
    moved = collected(pytester, '"ddtree", "dflash", "ar"', f"--specdec-shard={shard}", "-k", "test_one")
    kept = collected(pytester, '"ddtree", "dflash", "ar"', f"--specdec-shard={shard}", "-k", "test_one",
                     extra='lossless = "off"')
    assert sorted(moved) == sorted(kept) and moved
    if "test_one[ar-tp1]" in moved:
        assert moved[0] == "test_one[ar-tp1]" and kept[-1] == "test_one[ar-tp1]"
