"""`--specdec-shard K/N`: the partition of the matrix, and the option as users set it.

The partition is a pure function of the matrix (and the recorded durations), so it is checked
as a property over many matrices and shard counts; the option is checked through pytester on
tests that need no server.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_specdec import shard
from pytest_specdec.config import Matrix, WorkloadSpec
from pytest_specdec.configuration import MatrixCase
from pytest_specdec.errors import SpecdecUsageError
from pytest_specdec.options import OPTIONS, parse_value

SHARD_OPTION = next(o for o in OPTIONS if o.name == "shard")


def fake_state(matrices: list[Matrix], shard_text: str, family: str = "hopper",
               baseline_dir: Path = Path("/nonexistent-specdec-baselines")) -> SimpleNamespace:
    """What `shard.plan` reads of a RunState: settings, matrices, workloads, hardware."""
    return SimpleNamespace(
        settings=SimpleNamespace(shard=shard.parse_shard(shard_text), cpu_matrix=False, tp=None),
        config=SimpleNamespace(matrices={m.family: m for m in matrices},
                               workloads=(WorkloadSpec("chat", num_prompts=4, max_new_tokens=16),)),
        hardware=SimpleNamespace(family=family, describe=lambda: f"a {family} host", left_out=(), none_usable=False),
        baseline_path=baseline_dir / "cpu.json",
    )


def matrix_strategy(family: str):
    return st.builds(
        Matrix, st.just(family),
        st.lists(st.sampled_from(("ar", "dflash", "ddtree")), min_size=1, max_size=3,
                 unique=True).map(tuple),
        st.lists(st.sampled_from((1, 2, 4, 8)), min_size=1, max_size=4, unique=True).map(tuple),
        st.lists(st.sampled_from((4, 8, 12, 15, 16, 32, 64)), min_size=1, max_size=7,
                 unique=True).map(tuple))


@settings(max_examples=150, deadline=None)
@given(cpu=matrix_strategy("cpu"), hopper=st.none() | matrix_strategy("hopper"),
       blackwell=st.none() | matrix_strategy("blackwell"))
def test_shards_are_disjoint_and_complete_for_every_matrix_and_count(cpu, hopper, blackwell):
    """Each shard works out its part alone; together the parts are the matrix, once."""
    matrices = [m for m in (cpu, hopper, blackwell) if m is not None]
    runs_here = [c for c in shard.sharded_matrix(fake_state(matrices, "1/1"))]
    # blackwell's configurations belong to Blackwell hosts, and a Hopper host with a hopper
    # matrix runs only that one: its shards divide those
    assert {c.family for c in runs_here} == ({"hopper"} if hopper else {"cpu"})
    if not 1 <= len(runs_here) <= 40:
        return
    for count in range(1, 8):
        parts = [shard.plan(fake_state(matrices, f"{k}/{count}")).mine
                 for k in range(1, count + 1)]
        taken = [case for part in parts for case in part]
        assert sorted(taken, key=repr) == sorted(runs_here, key=repr)  # complete, no repeats
        assert len(set(taken)) == len(taken)
        if count <= len(runs_here):
            assert all(parts), f"an empty shard although {len(runs_here)} >= {count}"


@settings(max_examples=300, deadline=None)
@given(costs=st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=40),
       count=st.integers(1, 7))
def test_partition_balances_within_one_configuration(costs, count):
    """Greedy to the least loaded shard: loads differ by at most the largest single cost."""
    parts = shard.partition(costs, count)
    assert sorted(i for part in parts for i in part) == list(range(len(costs)))
    loads = [sum(costs[i] for i in part) for part in parts]
    assert max(loads) - min(loads) <= max(costs) + 1e-6
    assert parts == shard.partition(list(costs), count)  # deterministic


def test_partition_worked_example():
    assert shard.partition([8, 1, 1, 4, 4, 2], 2) == [[0, 5], [1, 2, 3, 4]]


def test_recorded_durations_outweigh_the_estimate():
    """ar-tp1 took 100 s, the others 10 s: without durations ar-tp1 weighs like its neighbours."""
    cases = [MatrixCase("cpu", "ar", 1, None)] + [MatrixCase("cpu", "ddtree", 1, b)
                                                  for b in (8, 16, 32)]
    durations = {"ar-tp1": 100.0, "ddtree-tp1-b8": 10.0, "ddtree-tp1-b16": 10.0}
    expected, known = shard.costs(cases, durations, workload_tokens=64)
    assert known == 3
    assert expected == [100.0, 10.0, 10.0, 10.0]  # b32 scaled by the median duration/estimate
    assert shard.partition(expected, 2) == [[0], [1, 2, 3]]
    estimated, known = shard.costs(cases, {}, workload_tokens=64)
    assert known == 0 and len(set(estimated)) == 1


def test_the_estimate_weighs_gpu_count():
    cases = [MatrixCase("hopper", "dflash", tp, None) for tp in (1, 1, 1, 1, 8)]
    assert shard.partition(shard.costs(cases, {}, 100)[0], 2) == [[4], [0, 1, 2, 3]]


@pytest.mark.parametrize("text", ["0/3", "4/3", "2", "a/b", "1/0", "-1/2", ""])
def test_a_bad_shard_names_itself_and_the_form(text):
    with pytest.raises(SpecdecUsageError, match=r"--specdec-shard.*(K/N|1\.\.N)"):
        parse_value(SHARD_OPTION, text, "--specdec-shard")


def test_durations_file_errors_name_the_file(tmp_path):
    from pytest_specdec import durations

    path = tmp_path / "durations.json"
    path.write_text('{"format": "pytest-specdec-durations", "configurations": {"ar-tp1": -1}}')
    with pytest.raises(SpecdecUsageError, match=r"durations.json: ar-tp1: -1 is not a number"):
        durations.load(path)
    durations.save(tmp_path / "d2.json", {"ar-tp1": 1.5})
    durations.save(tmp_path / "d2.json", {"dflash-tp1": 2.0})
    assert durations.load(tmp_path / "d2.json") == {"ar-tp1": 1.5, "dflash-tp1": 2.0}


SPEC_TEST = """
def test_cell(specdec_spec):
    assert specdec_spec.method in ("ar", "dflash", "ddtree")

def test_plain():
    pass
"""

MATRIX = """
[tool.specdec]
backend = "embedded"
{extra}

[tool.specdec.matrix.cpu]
methods = ["ar", "ddtree"]
tp = [1]
budget = [8, 16, 32]

[tool.specdec.matrix.blackwell]
methods = ["ddtree"]
tp = [1]
budget = [8]
"""


def _ran(result: pytest.RunResult) -> list[str]:
    return sorted(line.split("::")[-1].split()[0] for line in result.outlines
                  if line.startswith("PASSED"))


def test_each_shard_runs_its_configurations_and_says_which(pytester):
    pytester.makepyprojecttoml(MATRIX.format(extra=""))
    pytester.makepyfile(test_cells=SPEC_TEST)
    everything = []
    for k in (1, 2, 3):
        result = pytester.runpytest("-rA", "-p", "no:cacheprovider", f"--specdec-shard={k}/3")
        result.stdout.fnmatch_lines([f"specdec: shard {k}/3: * of 4 configurations, balanced by "
                                     f"GPU count x workload size (no durations recorded yet): *"])
        everything += _ran(result)
    # the blackwell configuration belongs to Blackwell hosts; the plain test runs in shard 1 only
    assert sorted(everything) == sorted(
        ["test_cell[ar-tp1]", "test_cell[ddtree-tp1-b8]", "test_cell[ddtree-tp1-b16]",
         "test_cell[ddtree-tp1-b32]", "test_plain"])


def test_the_shard_comes_from_ini_or_tool_specdec_and_an_empty_shard_passes(pytester):
    pytester.makepyprojecttoml(MATRIX.format(extra='shard = "6/6"'))
    pytester.makepyfile(test_cells=SPEC_TEST.replace("def test_plain", "def _not_a_test"))
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["specdec: shard 6/6: 0 of 4 configurations, *: none (more "
                                 "shards than configurations)"])
    assert result.ret == 0
    pytester.makeini("[pytest]\nspecdec_shard = 1/2\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "-rA")
    result.stdout.fnmatch_lines(["specdec: shard 1/2: 2 of 4 configurations*"])
    result.assert_outcomes(passed=2)


def test_a_shard_without_a_report_folder_says_the_merge_will_not_have_it(pytester):
    """Without --specdec-report a shard leaves nothing for the merge, which found out hours later."""
    pytester.makepyprojecttoml(MATRIX.format(extra=""))
    pytester.makepyfile(test_cells=SPEC_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "--co", "--specdec-shard=1/2")
    result.stdout.fnmatch_lines(["specdec: shard 1/2 writes no shard folder for python -m pytest_specdec "
                                 "merge *: give --specdec-report=DIR to merge it"])
    result = pytester.runpytest("-p", "no:cacheprovider", "--co", "--specdec-shard=1/2",
                                "--specdec-report=shard-1")
    assert "writes no shard folder" not in result.stdout.str()


@pytest.mark.parametrize("listing", ["--co", "--setup-plan", "--setup-only"])
def test_a_collect_only_run_leaves_the_shard_folder_of_the_run_that_measured(pytester, listing):
    """`--co` (or `--setup-plan`, or `--setup-only`, which sets fixtures up but calls no test) with
    a shard's options wrote its shard.json again, with no tests: the shard a merge was to read lost
    every outcome it had measured."""
    import json

    pytester.makepyprojecttoml(MATRIX.format(extra=""))
    pytester.makepyfile(test_cells="def test_cell(specdec_record):\n"
                                   "    specdec_record.metric('output_tok_s', 1.0)\n")
    args = ("-p", "no:cacheprovider", "--specdec-shard=1/1", "--specdec-report=shard-1")
    pytester.runpytest(*args).assert_outcomes(passed=1)
    manifest = pytester.path / "shard-1" / "shard.json"
    measured = manifest.read_text()
    assert len(json.loads(measured)["tests"]) == 1
    pytester.runpytest(*args, listing)
    assert manifest.read_text() == measured
    other = pytester.path / "shard-2"
    pytester.runpytest("-p", "no:cacheprovider", "--specdec-shard=1/1", "--specdec-report=shard-2", listing)
    assert not other.exists()


def test_a_bad_shard_is_a_usage_error(pytester):
    pytester.makepyprojecttoml(MATRIX.format(extra=""))
    result = pytester.runpytest("--specdec-shard", "4/3")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--specdec-shard: '4/3': K must lie in 1..N*"])


def test_a_host_class_shards_its_tp_sizes_alone(pytester):
    """4-GPU hosts take TP1 and TP2, 8-GPU hosts TP8, each class in shards of its own."""
    pytester.makepyprojecttoml("""
[tool.specdec]
backend = "embedded"
gpus = 8

[tool.specdec.matrix.cpu]
methods = ["ar", "dflash"]
tp = [1, 2, 8]
""")
    pytester.makepyfile(test_cells=SPEC_TEST.replace("def test_plain", "def _not_a_test"))
    small = [pytester.runpytest("-rA", "-p", "no:cacheprovider", "--specdec-tp=1,2",
                                f"--specdec-shard={k}/2") for k in (1, 2)]
    small[0].stdout.fnmatch_lines(["specdec: shard 1/2: 2 of 4 configurations*"])
    assert sorted(_ran(small[0]) + _ran(small[1])) == [
        "test_cell[ar-tp1]", "test_cell[ar-tp2]", "test_cell[dflash-tp1]", "test_cell[dflash-tp2]"]
    pytester.makepyprojecttoml(pytester.path.joinpath("pyproject.toml").read_text()
                               .replace('gpus = 8', 'gpus = 8\ntp = [8]'))
    large = pytester.runpytest("-rA", "-p", "no:cacheprovider", "--specdec-shard=1/1")
    assert _ran(large) == ["test_cell[ar-tp8]", "test_cell[dflash-tp8]"]
    result = pytester.runpytest("--specdec-tp", "0")
    result.stderr.fnmatch_lines(["*--specdec-tp: '0' is not a list of tensor-parallel sizes*"])
