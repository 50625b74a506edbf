"""The kernel suite's shards (tests/kernels/conftest.py): together they run every test once, and a
malformed shard is a usage error that names the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parents[1] / "kernels" / "conftest.py"


@pytest.fixture
def suite(pytester, monkeypatch):
    monkeypatch.delenv("KERNEL_SUITE_SHARD", raising=False)  # the shard this run itself may be
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_a="""
import pytest

@pytest.mark.parametrize("case", range(7))
def test_grid(case):
    pass
""", test_b="""
def test_one():
    pass

def test_two():
    pass
""")
    return pytester


def passed_names(result) -> set[str]:
    return {line.split("::", 1)[1].split(" ")[0] for line in result.outlines if " PASSED" in line}


def test_shards_run_every_test_once(suite, monkeypatch):
    everything = passed_names(suite.runpytest("-v", "-p", "no:cacheprovider"))
    assert len(everything) == 9
    seen = []
    for index in (1, 2, 3):
        monkeypatch.setenv("KERNEL_SUITE_SHARD", f"{index}/3")
        result = suite.runpytest("-v", "-p", "no:cacheprovider")
        names = passed_names(result)
        assert len(names) == 3, result.outlines
        result.assert_outcomes(passed=3, deselected=6)
        seen.extend(names)
    assert sorted(seen) == sorted(everything)


@pytest.mark.parametrize("value", ["2", "0/2", "3/2", "a/b", "1/0"])
def test_a_malformed_shard_is_a_usage_error(suite, monkeypatch, value):
    monkeypatch.setenv("KERNEL_SUITE_SHARD", value)
    result = suite.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*KERNEL_SUITE_SHARD must be i/n*{value!r}*"])
