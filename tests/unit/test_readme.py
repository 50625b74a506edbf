"""The README's example, copied as it is into a new project, runs on this machine."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def tour_blocks() -> tuple[str, str]:
    """The TOML configuration and the test file of the README's "A short tour"."""
    tour = README.read_text(encoding="utf-8").split("## A short tour", 1)[1]
    toml = re.search(r"```toml\n(.*?)```", tour, re.S).group(1)
    python = re.search(r"```python\n(.*?)```", tour, re.S).group(1)
    return toml, python


def test_the_readme_example_runs_its_cpu_matrix(pytester: pytest.Pytester):
    toml, python = tour_blocks()
    pytester.makepyprojecttoml(toml)
    pytester.makepyfile(test_generation=python)
    # one configuration of the cpu matrix shows that the example runs as written; the blackwell
    # matrix's configuration of the same name skips here (no Blackwell GPU)
    result = pytester.runpytest_subprocess("-k", "ddtree-tp1-b8", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*specdec summary*", "ddtree-tp1-b8 *chat *"])


def test_the_tour_puts_its_test_where_the_readmes_commands_and_the_examples_run():
    """The tour put its test in tests/test_generation.py, while the README's commands and every
    example run `pytest tests/bench`: a project set up as the tour says failed each shard with
    "file or directory not found: tests/bench"."""
    _, python = tour_blocks()
    path = re.match(r"# (\S+\.py)", python).group(1)
    examples = README.parent / "examples"
    for text in [README.read_text(encoding="utf-8"), *(f.read_text() for f in sorted(examples.iterdir()))]:
        for folder in re.findall(r"pytest (tests/\S+)", text):
            assert path.startswith(folder.rstrip("/") + "/") or folder.endswith(".py"), (folder, path)


def test_the_readme_maps_every_test_verdict_to_its_table_text_and_figure_verdicts():
    """The table said ok / improved / new baseline, the figures' JUnit verdicts unchanged /
    improvement / new, and the README said a figure's verdict was shown in the table: a reader
    could not tell which word meant what. Its table of verdicts lists each as the code says it."""
    from pytest_specdec.gate import FIGURE_VERDICTS, TEST_VERDICTS
    from pytest_specdec.report import VERDICT_TEXT

    gate = README.read_text(encoding="utf-8").split("#### The gate", 1)[1].split("\n#### ", 1)[0]
    listed = re.search(r"Each figure gets a verdict \((.*?)\)", gate, re.S).group(1)
    assert tuple(re.findall(r"`([^`]+)`", listed)) == FIGURE_VERDICTS
    lines = gate.split("| test verdict | table | its figures' verdicts |", 1)[1].splitlines()[2:]
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in lines[:next(i for i, line in enumerate(lines) if not line.startswith("|"))]]
    assert [row[0].strip("`") for row in rows] == list(TEST_VERDICTS)
    assert {row[0].strip("`"): row[1].strip("`") for row in rows} == VERDICT_TEXT
    named = {word for row in rows for word in re.findall(r"`([^`]+)`", row[2])}
    assert named == set(FIGURE_VERDICTS)


def readme_option_rows() -> dict[str, str]:
    """The README's table of options: each flag (without its `=VALUE`) and its meaning."""
    rows = re.findall(r"^\| `(--specdec-[a-z-]+)[^`]*` \| (.*) \|$", README.read_text(encoding="utf-8"), re.M)
    return dict(rows)


def test_every_options_help_states_the_readmes_limits_and_defaults():
    """`pytest --help` for --specdec-gpus did not say the README's "at most 64", which the option
    enforces. Each option's help (as --help and the ini's help show it) states every limit and
    default the README's table gives, and a default the code has is the README's."""
    from pytest_specdec.options import OPTIONS

    rows = readme_option_rows()
    assert set(rows) == {option.cli for option in OPTIONS}
    for option in OPTIONS:
        meaning, described = rows[option.cli], option.described
        for limit in re.findall(r"at most (\d+)", meaning):
            assert f"at most {limit}" in described, (option.cli, described)
        defaults = re.findall(r"default:? `?([^`\s,;)]+)", meaning) + re.findall(r"`([^`]+)` \(default\)", meaning)
        for default in defaults:
            default = default.rstrip("/")
            if option.default is not None:
                shown = f"{option.default:g}" if isinstance(option.default, float) else str(option.default)
                assert shown == default, (option.cli, option.default, default)
            assert default in described, (option.cli, described)


def test_the_gpu_limit_in_the_help_is_the_enforced_one():
    from pytest_specdec.options import MAX_GPUS, OPTIONS_BY_NAME

    assert f"at most {MAX_GPUS}" in OPTIONS_BY_NAME["gpus"].described
    assert f"at most {MAX_GPUS}" in readme_option_rows()["--specdec-gpus"]


def test_the_readmes_default_tolerances_are_the_ones_this_repository_gates_with():
    """The README states the measured defaults as one expression, and pyproject.toml's
    [tool.specdec.tolerances] is what runs: nothing tied the two, so either could move alone."""
    from pytest_specdec.gate import parse_tolerance_table, parse_tolerances

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    said = re.search(r"This repository gates with\s+`([^`]+)`", README.read_text(encoding="utf-8"))
    assert said, "the README no longer states the default tolerances"
    table = tomllib.loads((README.parent / "pyproject.toml").read_text())["tool"]["specdec"]["tolerances"]
    assert parse_tolerances(said.group(1)) == parse_tolerance_table(table, "pyproject.toml")


def make_recipe(target: str) -> str:
    """The recipe lines of a Makefile target (its tab-indented lines after `target:`)."""
    text = (README.parent / "Makefile").read_text(encoding="utf-8")
    found = re.search(rf"^{re.escape(target)}:[^\n]*\n((?:\t[^\n]*\n)+)", text, re.M)
    assert found, f"the Makefile has no recipe for `{target}`"
    return found.group(1)


def test_the_readmes_two_commands_run_the_bench_and_every_test_folder_and_ci_runs_the_second():
    """The README's quick start promises one command for the benchmark suite and one for the test
    suite, and CI runs the latter: nothing checked that the targets still do so, so a test folder
    left out of `make test` (or a CI script that stopped calling it) went unseen."""
    quick = README.read_text(encoding="utf-8").split("## Quick start", 1)[1].split("\n## ", 1)[0]
    first, second = re.findall(r"```\n(.*?)\n```", quick, re.S)[:2]
    assert (first, second) == ("make bench", "make test")
    assert re.search(r"-m pytest tests/bench(\s|$)", make_recipe("bench"))
    tested = re.search(r"-m pytest ([^\n]*)", make_recipe("test")).group(1).split()
    folders = {f"tests/{p.name}" for p in (README.parent / "tests").iterdir()
               if p.is_dir() and any(p.glob("test_*.py"))}
    assert set(tested) >= folders - {"tests/bench"}, "a test folder `make test` does not run"
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert second in [line.strip().removeprefix("step ") for line in ci]  # `step`: timed


def readme_section(heading: str) -> str:
    """The README's text under `heading` (a `### ` or `#### ` line), up to the next heading."""
    return README.read_text(encoding="utf-8").split(f"\n{heading}\n", 1)[1].split("\n#", 1)[0]


def test_the_fixtures_table_lists_every_fixture_the_plugin_defines():
    """`specdec_state` and `specdec_pool` are fixtures any test may request, and the README's table
    named neither: nothing tied the table to fixtures.py, so a fixture added or renamed went unseen."""
    from pytest_specdec import fixtures

    source = Path(fixtures.__file__).read_text(encoding="utf-8")
    defined = set(re.findall(r"^@pytest\.fixture\b[^\n]*\ndef (\w+)", source, re.M))
    assert defined, "no fixture found in fixtures.py: the pattern no longer matches its decorators"
    listed = re.findall(r"^\| `(\w+)` \|", readme_section("### Fixtures"), re.M)
    assert sorted(listed) == sorted(defined)


def test_the_markers_section_names_every_marker_the_plugin_registers():
    from pytest_specdec.collection import MARKERS

    section = readme_section("### Markers")
    for line in MARKERS:
        name = re.match(r"\w+", line).group(0)
        assert re.search(rf"`{name}[`(]", section), name


def test_the_workloads_table_gives_each_key_and_default_the_code_has():
    from dataclasses import MISSING, fields

    from pytest_specdec.config import WorkloadSpec

    rows = re.findall(r"^\| `(\w+)` \| ([^|]*) \|", readme_section("### Workloads"), re.M)
    table = {key: default.strip().strip("`") for key, default in rows}
    assert list(table) == [f.name for f in fields(WorkloadSpec)]
    for f in fields(WorkloadSpec):
        if f.default is MISSING:
            continue
        if f.default is None:  # taken from elsewhere (warmup_requests: the run-wide setting), said in words
            assert table[f.name] and table[f.name] != "None", f.name
            continue
        shown = (str(f.default).lower() if isinstance(f.default, bool)
                 else f"{f.default:g}" if isinstance(f.default, float) else str(f.default))
        assert table[f.name] == shown, (f.name, table[f.name], f.default)


def test_the_workloads_table_says_the_default_name_of_each_kind_of_prompts(tmp_path: Path):
    """The table gave a workload's default name as "the prompt file's stem" alone, where most
    workloads name a built-in set and no file: the name is then the set's (two entries of one set
    without names repeat it, which stops the run). Each example the row gives is the name the
    code gives."""
    from pytest_specdec import config

    rows = re.findall(r"^\| `(\w+)` \| ([^|]*) \|", readme_section("### Workloads"), re.M)
    default = dict(rows)["name"]
    assert "built-in set's name" in default
    stem, path = re.search(r"`(\w+)` for `([\w/]+\.jsonl)`", default).groups()
    (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / path).write_text('{"prompt": "hello"}\n')
    parsed = config.parse({"workloads": [{"prompts": path}, {"prompts": "code"}]}, "specdec.toml", tmp_path)
    assert [w.name for w in parsed.workloads] == [stem, "code"]


def header_line(prefix: str, *args: str) -> str:
    """The header line starting with `prefix` that `pytest --co` prints in this repository."""
    import subprocess

    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--co", *args],
                         cwd=README.parent, capture_output=True, text=True, timeout=300)
    printed = re.search(rf"^{re.escape(prefix)}.*$", run.stdout, re.M)
    assert printed, run.stdout + run.stderr
    return printed.group(0)


def test_the_gate_line_the_readme_shows_is_the_one_this_repository_prints():
    """The README showed this repository's header with accept_rate not gated, while its
    pyproject.toml gates accept_rate exactly: the example had not followed the tolerances."""
    shown = re.search(r"^specdec: gate .*$", readme_section("#### The gate"), re.M).group(0)
    assert shown == header_line("specdec: gate ", "tests/bench/test_generation.py")


def test_the_shard_line_the_readme_shows_is_the_one_its_command_prints():
    """The README gives the command and the header line of this repository's Blackwell suite as a
    sharded dry run; the line follows the matrix and the partition, which change on their own."""
    text = README.read_text(encoding="utf-8")
    command = re.search(r"dry run: `pytest (tests/bench [^`]*--specdec-shard=[^`]*)`", text).group(1)
    shown = re.search(r"^specdec: shard .*$", text, re.M).group(0)
    assert shown == header_line("specdec: shard ", *command.split())


def test_the_readme_says_a_users_figure_without_a_spread_is_compared_exactly():
    """The README called spread 0 "unknown" while the gate compared such a figure exactly (any
    drift past its tolerance red): a user could not tell whether a noisy figure of their own would
    go red or `noisy`. It says which, and the gate does what it says, both ways."""
    from pytest_specdec.baselines import BaselineEntry
    from pytest_specdec.gate import Tolerance, compare_metric
    from pytest_specdec.metrics import MetricValue

    gate = README.read_text(encoding="utf-8").split("#### The gate", 1)[1].split("\n#### ", 1)[0]
    said = " ".join(re.search(r"A figure of your own recorded as `specdec_record\.metric\(name, value\)`"
                              r"(.*?)\n- ", gate, re.S).group(1).split())
    assert "compared exactly" in said and "any drift past its tolerance is red, never `noisy`" in said
    assert "1.96 combined standard errors" in said
    tolerance = Tolerance("kv_hit_rate", 0.05, True)
    # as Recorder.metric records it, with the defaults, and as a save stores it
    then = BaselineEntry.from_metric(MetricValue("kv_hit_rate", 0.90, "higher"))
    assert compare_metric("t", MetricValue("kv_hit_rate", 0.85, "higher"), then, tolerance).verdict == "regression"
    # 0.85 is 0.005 past the edge (0.855): red only beyond 1.96 standard errors of the spread given
    noisy = BaselineEntry.from_metric(MetricValue("kv_hit_rate", 0.90, "higher", spread=0.01))
    assert compare_metric("t", MetricValue("kv_hit_rate", 0.85, "higher", spread=0.01), noisy,
                          tolerance).verdict == "noisy"
    assert compare_metric("t", MetricValue("kv_hit_rate", 0.80, "higher", spread=0.01), noisy,
                          tolerance).verdict == "regression"


def test_the_known_issues_files_format_is_the_one_the_readme_gives(tmp_path: Path):
    """The README named baselines/known_issues.toml but not its format: an entry copied from the
    README as `[[tool.specdec.known_issues]]` was refused as an unknown key 'tool'. It says the
    header the file takes; the section's own entry, under that header, loads."""
    from pytest_specdec import config

    section = README.read_text(encoding="utf-8").split("### Known issues", 1)[1].split("\n### ", 1)[0]
    header = re.search(r"each entry headed\s+`(\[\[\w+\]\])` at the file's top level", section).group(1)
    entry = re.search(r"```toml\n(.*?)```", section, re.S).group(1)
    path = tmp_path / "known_issues.toml"
    path.write_text(entry.replace("[[tool.specdec.known_issues]]", header))
    [issue] = config.load_known_issues(path)
    assert (issue.methods, issue.budget, issue.backend) == (("ddtree",), (32, 64), ("sglang",))


def test_the_readme_says_what_ends_a_run_whose_benchmark_compare_fails(pytester: pytest.Pytester):
    """The README said the summary table ends the terminal output after pytest-benchmark's
    --benchmark-compare-fail raises, where the raised exception's traceback follows it and pytest
    writes no closing line. What it says now is what such a run prints: the table, the
    exception's last line as quoted, and exit status 1."""
    pytest.importorskip("torch")
    section = readme_section("### Resume, reports, pytest-benchmark, CI")
    said = re.search(r"Python prints its traceback\s+\(`([^`]+)`\),\s+pytest no closing `N passed` line,"
                     r"\s+and the exit status is (\d)", section, re.S)
    assert said, "the README does not say how such a run ends"
    quoted, status = " ".join(said.group(1).split()), int(said.group(2))
    pytester.makepyprojecttoml('[tool.specdec]\nbackend = "embedded"\n')
    pytester.makepyfile(test_figures="def test_figures(specdec_record):\n"
                                     "    specdec_record.metric('output_tok_s', 100.0)\n")
    pytester.makeconftest("""
import pytest
from pytest_benchmark.session import PerformanceRegression

@pytest.hookimpl(tryfirst=True)  # as --benchmark-compare-fail raises in pytest-benchmark's summary
def pytest_terminal_summary(terminalreporter):
    raise PerformanceRegression("Performance has regressed.")
""")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    assert result.ret == status
    result.stdout.fnmatch_lines(["*specdec summary*", "config*verdict*"])
    result.stdout.no_fnmatch_line("*1 passed*")
    assert result.stderr.str().strip().splitlines()[-1].endswith(quoted)


def test_the_readmes_bench_serving_command_is_sglangs(sglang_reference):
    """The README ran `python -m sglang.bench_serving`, which SGLang 0.5.23 keeps only as a
    deprecated alias (a FutureWarning, to be removed) of sglang.benchmark.serving: the command
    names SGLang's own module, and each of its flags is one that module's parser declares."""
    command = re.search(r"^python -m (sglang\.\S+)((?: .*\\\n)*.*)$", README.read_text(encoding="utf-8"), re.M)
    assert command, "the README shows no `python -m sglang...` command"
    module = sglang_reference.joinpath(*command.group(1).split(".")).with_suffix(".py")
    assert module.is_file(), f"SGLang has no module {command.group(1)}"
    source = module.read_text()
    assert "deprecated" not in (ast.get_docstring(ast.parse(source)) or "").lower(), f"{command.group(1)} is deprecated"
    declared = {node.args[0].value for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
                and getattr(node.func, "attr", None) == "add_argument" and node.args
                and isinstance(node.args[0], ast.Constant)}
    flags = set(re.findall(r"(--[a-z][a-z-]*)", command.group(2)))
    assert flags and flags <= declared, sorted(flags - declared)
