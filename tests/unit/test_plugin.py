"""The plugin as users meet it: entry point, options and ini twins, markers, skips, header."""

from __future__ import annotations

import importlib.metadata
import json
import sys
from pathlib import Path

import pytest

from pytest_specdec import hardware

ON_GPU_MACHINE = hardware.detect().count > 0

SPEC_TEST = """
def test_cell(specdec_spec):
    assert specdec_spec.method in ("ar", "dflash", "ddtree")
"""

SMALL_MATRIX = """
[tool.specdec.matrix.cpu]
methods = ["ar", "ddtree"]
tp = [1]
budget = [8, 16]

[tool.specdec.matrix.blackwell]
methods = ["ddtree"]
tp = [1]
budget = [8, 12, 16]

[tool.specdec.matrix.hopper]
methods = ["dflash"]
tp = [1, 4]
"""


def test_entry_point_registers_the_plugin():
    points = importlib.metadata.entry_points(group="pytest11")
    assert any(p.name == "specdec" and p.value == "pytest_specdec.plugin" for p in points)


def test_plugin_is_active_in_a_plain_run(pytester: pytest.Pytester):
    pytester.makepyfile("def test_x(pytestconfig):\n"
                        "    assert pytestconfig.pluginmanager.has_plugin('specdec')\n")
    pytester.runpytest().assert_outcomes(passed=1)


def test_plugin_import_pulls_in_nothing_heavy(pytester: pytest.Pytester):
    code = ("import sys, pytest_specdec.plugin;"
            "heavy = [m for m in ('torch', 'triton', 'matplotlib', 'aiohttp', 'filelock', 'pytest', 'json',"
            " 'hashlib', 'pytest_specdec.shard', 'pytest_specdec.lossless')"
            " if m in sys.modules];"
            "print('HEAVY', heavy)")
    result = pytester.run(sys.executable, "-c", code)
    result.stdout.fnmatch_lines(["HEAVY []"])


def test_help_lists_every_option_and_its_ini_twin(pytester: pytest.Pytester):
    from pytest_specdec.options import OPTIONS

    result = pytester.runpytest("--help")
    text = result.stdout.str()
    for option in OPTIONS:
        assert option.cli in text
        assert f"{option.ini} ({option.ini_type})" in text


def test_help_names_each_options_tool_specdec_key_and_which_place_wins(pytester: pytest.Pytester):
    """--help named the ini twin only: not the [tool.specdec] key, nor that the flag wins over both."""
    from pytest_specdec.options import OPTIONS

    text = " ".join(line.strip() for line in pytester.runpytest("--help").stdout.lines)
    assert ("speculative-decoding benchmarks (pytest-specdec; a flag wins over its ini twin, which wins over "
            "its [tool.specdec] key)") in text
    for option in OPTIONS:
        assert f"(ini: {option.ini}; [tool.specdec] {option.name})" in text, option.name


@pytest.mark.parametrize("flag, default", [("--specdec-startup-timeout", "600"), ("--specdec-stall-timeout", "60"),
                                            ("--specdec-gpu-wait-timeout", "3600"),
                                            ("--specdec-baseline-lock-timeout", "120"),
                                            ("--specdec-keep-runs", "10"), ("--specdec-restart-on-crash", "0"),
                                            ("--specdec-summary-rows", "50"),
                                            ("--specdec-journal", ".specdec/journal.jsonl"),
                                            ("--specdec-artifacts", ".specdec/artifacts"),
                                            ("--specdec-baseline-dir", "baselines"), ("--specdec-backend", "auto"),
                                            ("--specdec-reference", "ar")])
def test_help_shows_each_options_default(pytester: pytest.Pytester, flag, default):
    """The README's table gives these defaults; `pytest --help` is where a user looks first."""
    lines = pytester.runpytest("--help").stdout.lines
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith(flag))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" " * 8))
    entry = " ".join(line.strip() for line in lines[start:end])
    assert f"(default: {default})" in entry, entry


def test_help_says_what_resume_skips_and_that_every_run_journals():
    """--specdec-resume skips tests, not configurations, and measures failed or changed ones again;
    the journal is written by every run, not only for --specdec-resume."""
    from pytest_specdec.options import OPTIONS_BY_NAME

    resume, journal = OPTIONS_BY_NAME["resume"].help, OPTIONS_BY_NAME["journal"].help
    assert "skip the tests" in resume and "failed" in resume and "changed" in resume
    assert "every run" in journal


@pytest.mark.parametrize("flag, shown", [("--help", "*--specdec-backend=*"),
                                          ("--markers", "@pytest.mark.specdec(method=*")])
def test_help_and_markers_are_listed_in_a_project_whose_settings_are_wrong(
        pytester: pytest.Pytester, flag, shown):
    """The help that says what a setting takes must not be hidden by the setting's mistake."""
    pytester.makepyprojecttoml('[tool.specdec]\nbackend = "embeded"\n')
    result = pytester.runpytest(flag, "--specdec-tp", "3")
    assert result.ret == 0, result.stderr.str()
    result.stdout.fnmatch_lines([shown])


def test_markers_are_listed(pytester: pytest.Pytester):
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines([
        "@pytest.mark.blackwell:*", "@pytest.mark.hopper:*", "@pytest.mark.ada:*",
        "@pytest.mark.ampere:*", "@pytest.mark.gpu:*", "@pytest.mark.gpus(n):*",
        "@pytest.mark.specdec(method=..., tp=..., budget=...):*",
    ])


def test_matrix_parametrizes_with_family_marks_and_ids(pytester: pytest.Pytester):
    pytester.makepyprojecttoml(SMALL_MATRIX)
    pytester.makepyfile(SPEC_TEST)
    result = pytester.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines([
        "*test_cell[[]ar-tp1[]]", "*test_cell[[]ddtree-tp1-b8[]]", "*test_cell[[]ddtree-tp1-b16[]]",
        "*test_cell[[]blackwell-ddtree-tp1-b12[]]", "*test_cell[[]hopper-dflash-tp4[]]",
    ])
    result = pytester.runpytest("--collect-only", "-q", "-m", "blackwell")
    result.stdout.fnmatch_lines(["*3/8 tests collected (5 deselected)*"])


def test_matrix_collects_under_strict_markers_without_xdist(pytester: pytest.Pytester):
    pytester.makepyprojecttoml(SMALL_MATRIX)
    pytester.makepyfile(SPEC_TEST)
    # a subprocess: pytest.mark caches known markers process-wide, the outer run knows xdist's
    result = pytester.runpytest_subprocess("--collect-only", "-q", "--strict-markers", "-p", "no:xdist")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["8 tests collected*"])


def test_family_marker_skips_with_the_hardware_found(pytester: pytest.Pytester):
    pytester.makepyprojecttoml(SMALL_MATRIX)
    pytester.makepyfile(SPEC_TEST)
    result = pytester.runpytest("-m", "blackwell", "-rs", "--specdec-arch", "sm_90")
    result.assert_outcomes(skipped=3)
    result.stdout.fnmatch_lines([
        "*needs a Blackwell GPU; found: 1 simulated sm_90 GPU (hopper)*"])


@pytest.mark.skipif(ON_GPU_MACHINE, reason="this machine has a GPU; the no-GPU phrase needs none")
def test_family_marker_skip_reason_on_a_cpu_machine(pytester: pytest.Pytester):
    pytester.makepyprojecttoml(SMALL_MATRIX)
    pytester.makepyfile(SPEC_TEST)
    result = pytester.runpytest("-m", "hopper", "-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*needs a Hopper GPU; found: no GPU*"])


def test_arch_override_runs_that_family_with_known_issues_as_xfail(pytester: pytest.Pytester):
    pytester.makepyprojecttoml(SMALL_MATRIX + """
[[tool.specdec.known_issues]]
arch = "sm_120"
method = "ddtree"
budget = [8, 12]
reason = "verify crashes with CUDA illegal instruction on sm_120"
""")
    pytester.makepyfile("""
def test_cell(specdec_spec):
    # stands in for the crash the known issue describes
    assert specdec_spec.budget not in (8, 12), "illegal instruction"
""")
    result = pytester.runpytest("--specdec-arch=sm_120", "-m", "blackwell", "-rxs")
    result.assert_outcomes(passed=1, xfailed=2)
    result.stdout.fnmatch_lines(["*known issue: verify crashes with CUDA illegal instruction*"])


def test_a_fixed_known_issue_xpasses_strictly_and_fails_the_run(pytester: pytest.Pytester, monkeypatch):
    """Outside a dry run a known issue is strict, in a matrix test with no server too: its XPASS
    says the bug is fixed, on the hardware that had it. (This ran as a dry run, --specdec-arch,
    where a test without a server reproduces nothing: test_a_dry_run_does_not_call_a_matrix_...)"""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the cpu family, wherever this runs: no dry run
    pytester.makepyprojecttoml(SMALL_MATRIX + """
[[tool.specdec.known_issues]]
family = "cpu"
method = "ddtree"
budget = [16]
reason = "was broken"
""")
    pytester.makepyfile(SPEC_TEST)
    result = pytester.runpytest("-m", "cpu")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*XPASS(strict)*known issue: was broken*"])
    assert result.ret == 1


def test_a_dry_run_does_not_call_a_matrix_tests_known_issue_fixed_where_it_has_no_server(pytester: pytest.Pytester):
    """A matrix test of `specdec_spec` alone starts no server, so a dry run on the embedded engine
    plays no crash out for it, yet its xfail was strict and its pass failed the rehearsal as
    [XPASS(strict)], as a plain test's with a `specdec` marker did."""
    pytester.makepyprojecttoml(SMALL_MATRIX + """
[[tool.specdec.known_issues]]
family = "blackwell"
method = "ddtree"
budget = [16]
reason = "was broken"
""")
    pytester.makepyfile(SPEC_TEST)
    result = pytester.runpytest("--specdec-arch=sm_100", "-m", "blackwell", "-rX")
    result.assert_outcomes(passed=2, xpassed=1)
    result.stdout.fnmatch_lines(["*known issue: was broken (a dry run on the embedded backend does not reproduce "
                                 "it in a test the plugin serves no server to*"])
    assert result.ret == 0  # with the server its crash plays out: test_sm120_dry_run_reproduces_known_crashes_as_xfail


def test_run_known_issues_runs_them_normally(pytester: pytest.Pytester):
    pytester.makepyprojecttoml(SMALL_MATRIX + """
[[tool.specdec.known_issues]]
family = "blackwell"
budget = [8, 12]
reason = "was broken"
""")
    pytester.makepyfile(SPEC_TEST)
    result = pytester.runpytest("--specdec-arch=sm_120", "-m", "blackwell",
                                "--specdec-run-known-issues")
    result.assert_outcomes(passed=3)


# An sm_120 known issue of ddtree at budget 8, and a plain test marked as that configuration.
SM120_B8_ISSUE = """
[[tool.specdec.known_issues]]
arch = "sm_120"
method = "ddtree"
budget = [8]
reason = "{reason}"
"""
B8_MARKED = """
import pytest

@pytest.mark.specdec(method="ddtree", tp=1, budget=8)
def test_b8():
"""


def test_specdec_marker_on_a_plain_test_matches_known_issues(pytester: pytest.Pytester):
    pytester.makepyprojecttoml(SM120_B8_ISSUE.format(reason="crashes"))
    pytester.makepyfile(B8_MARKED + """    raise RuntimeError("illegal instruction")

@pytest.mark.specdec(method="ddtree", tp=1, budget=16)
def test_b16():
    pass
""")
    pytester.runpytest("--specdec-arch=sm_120").assert_outcomes(passed=1, xfailed=1)
    pytester.runpytest("--specdec-arch=sm_90").assert_outcomes(passed=1, failed=1)


def test_a_dry_run_does_not_call_a_plain_tests_known_issue_fixed(pytester: pytest.Pytester):
    """A test of one's own with a `specdec` marker has no server of the plugin's, so a dry run on
    the embedded engine plays no crash out for it: passing there, it failed the rehearsal with
    "[XPASS(strict)] known issue" as if the bug were fixed. Its xfail is not strict there (a
    matrix test's stays so: test_a_fixed_known_issue_xpasses_strictly_and_fails_the_run)."""
    pytester.makepyprojecttoml(SM120_B8_ISSUE.format(reason="crashes"))
    pytester.makepyfile(B8_MARKED + "    pass\n")
    result = pytester.runpytest("--specdec-arch=sm_120", "-rX")
    result.assert_outcomes(xpassed=1)
    result.stdout.fnmatch_lines(["*known issue: crashes (a dry run on the embedded backend does not reproduce "
                                 "it in a test the plugin serves no server to: an XPASS here does not mean it "
                                 "is fixed)*"])


def test_gpus_marker_skips_with_too_few_gpus(pytester: pytest.Pytester):
    pytester.makepyfile("""
import pytest

@pytest.mark.gpus(4)
def test_four():
    pass
""")
    result = pytester.runpytest("--specdec-arch=sm_90", "--specdec-gpus=2", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*needs 4 GPUs; found: 2 simulated sm_90 GPUs (hopper)*"])
    pytester.runpytest("--specdec-arch=sm_90", "--specdec-gpus=4").assert_outcomes(passed=1)


@pytest.mark.parametrize("gpus, args, said", [
    # the README's dry run (`--specdec-arch=sm_120`) on a machine without a GPU skipped every TP4 and
    # TP8 test saying `needs 4 GPUs; found: ... x1`, never that --specdec-gpus=4 runs them there
    (4, ("--specdec-arch=sm_90",),
     "*needs 4 GPUs; found: 1 simulated sm_90 GPU (hopper); --specdec-gpus=4 simulates them on the CPU"),
    # one GPU is said in the singular: it said `needs 1 GPUs` and that the flag `simulates them`
    (1, ("--specdec-backend=embedded",), "SKIPPED*needs 1 GPU; found: no GPU*; --specdec-gpus=1 simulates it on the CPU"),
], ids=["four", "one"])
def test_too_few_gpus_on_a_machine_without_one_names_the_flag_that_simulates_them(pytester, monkeypatch, gpus,
                                                                                   args, said):
    """A machine without a GPU names the flag that runs such a test on the embedded engine; an
    inventory the user chose gets no such hint."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU, wherever this runs
    pytester.makepyfile(f"""
import pytest

@pytest.mark.gpus({gpus})
def test_some():
    pass
""")
    result = pytester.runpytest(*args, "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([said])
    if gpus > 1:  # an inventory the user chose, still too small: no hint
        result = pytester.runpytest(*args, "--specdec-gpus=2", "-rs")
        result.assert_outcomes(skipped=1)
        result.stdout.no_fnmatch_line("*simulates them*")


def test_gpu_marker_needs_a_real_gpu_even_in_a_dry_run(pytester: pytest.Pytester):
    pytester.makepyfile("""
import pytest

@pytest.mark.gpu
def test_kernel():
    pass
""")
    result = pytester.runpytest("--specdec-arch=sm_120", "-rs")
    if ON_GPU_MACHINE:
        result.assert_outcomes(passed=1)
    else:
        result.assert_outcomes(skipped=1)
        result.stdout.fnmatch_lines(["*needs a GPU; found: no GPU*dry runs only*"])


def test_simulated_inventory_without_arch_keeps_the_cpu_suite(pytester: pytest.Pytester):
    if ON_GPU_MACHINE:
        pytest.skip("a GPU machine schedules on its real GPUs")
    pytester.makepyprojecttoml("""
[tool.specdec.matrix.cpu]
methods = ["ar"]
tp = [1, 4]
""")
    pytester.makepyfile(SPEC_TEST)
    pytester.runpytest("-rs").assert_outcomes(passed=1, skipped=1)
    pytester.runpytest("--specdec-gpus=8").assert_outcomes(passed=2)


def test_minus_m_cpu_selects_the_cpu_matrix_as_a_family_marker_selects_its_own(pytester: pytest.Pytester):
    """The README said each configuration carries its family's marker, and `cpu` is a family to the
    matrix's checks, but the cpu matrix's carried none: `pytest -m cpu` collected nothing, silently."""
    pytester.makepyprojecttoml(SMALL_MATRIX + "\n[tool.pytest.ini_options]\nstrict_markers = true\n")
    pytester.makepyfile(SPEC_TEST)
    result = pytester.runpytest("--co", "-q", "-m", "cpu")
    result.stdout.fnmatch_lines(["test_*::test_cell[[]ar-tp1[]]", "test_*::test_cell[[]ddtree-tp1-b8[]]",
                                 "test_*::test_cell[[]ddtree-tp1-b16[]]", "3/8 tests collected (5 deselected)*"])
    pytester.runpytest("--co", "-q", "-m", "blackwell").stdout.fnmatch_lines(["3/8 tests collected*"])
    assert "cpu: a configuration of the cpu matrix" in pytester.runpytest("--markers").stdout.str()


def test_header_states_backend_hardware_and_baseline(pytester: pytest.Pytester):
    """A simulated inventory read "detected by simulated", as if a probe named simulated had found it."""
    pytester.makepyprojecttoml(SMALL_MATRIX)
    pytester.makepyfile(SPEC_TEST)
    result = pytester.runpytest("--specdec-arch=sm_120", "--specdec-gpus=8",
                                "--specdec-backend=embedded")
    result.stdout.fnmatch_lines([
        "specdec: backend embedded (requested); config pyproject.toml [[]tool.specdec[]]",
        "collected 8 items",
        "specdec: hardware 8 simulated sm_120 GPUs (blackwell), as the settings ask",
        "specdec: baselines */baselines/simulated-sm_120-x8.json (none yet)",
        "specdec: settings *backend=embedded (command line)*",
        "specdec: dry run: the blackwell suite runs on the embedded backend*",
    ])


def test_the_header_of_a_machine_without_a_gpu_says_what_looked(pytester: pytest.Pytester, monkeypatch):
    """A CPU machine's header read "detected by none", as if a probe named none had found its 0 GPUs."""
    from pytest_specdec import hardware

    monkeypatch.setattr(hardware, "detect", lambda: hardware.Hardware((), "none", physical_gpus=0))
    pytester.makepyprojecttoml(SMALL_MATRIX)
    pytester.makepyfile(SPEC_TEST)
    result = pytester.runpytest("--specdec-backend=embedded", "--co")
    result.stdout.fnmatch_lines(["specdec: hardware no GPU [[]cpu, 0 GPU(s), neither NVML nor nvidia-smi found one[]]"])


def test_the_header_says_simulated_slots_without_an_arch_in_plain_words(pytester: pytest.Pytester, monkeypatch):
    """--specdec-gpus=2 on a CPU host read `simulated GPU (cpu, cpu) x2 [simulated] [cpu, cpu, 2 GPU(s),
    simulated, as the settings ask]`: "simulated" three times, and the CPU called the GPUs' arch."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU, wherever this runs
    pytester.makepyprojecttoml(SMALL_MATRIX)
    pytester.makepyfile(SPEC_TEST)
    result = pytester.runpytest("--specdec-gpus=2", "--specdec-backend=embedded", "--co")
    result.stdout.fnmatch_lines(["specdec: hardware 2 simulated GPUs without an arch, as the settings ask"])


def test_the_header_says_a_baseline_folder_that_is_a_file_is_none(pytester: pytest.Pytester):
    """--specdec-baseline-dir naming a file read "(none yet)", as a first run's folder does, though
    nothing could be compared against it nor ever saved into it."""
    pytester.makepyprojecttoml(SMALL_MATRIX)
    pytester.makepyfile(SPEC_TEST)
    pytester.makefile(".txt", notes="a file")
    result = pytester.runpytest("--co", "--specdec-baseline-dir=notes.txt")
    result.stdout.fnmatch_lines(["specdec: baselines */notes.txt/cpu.json (none: the baseline folder is a file, "
                                 "so nothing is compared, nor can be saved; point --specdec-baseline-dir at a folder)"])


def test_a_baseline_folder_that_is_a_file_warns_by_a_field_not_by_its_words(pytester: pytest.Pytester, tmp_path):
    """Whether the baselines line warned was read back from its words (it began " (none: "), so
    a rewording could drop the warning -q still writes; the note now carries it as a field."""
    from types import SimpleNamespace

    from pytest_specdec import header

    (tmp_path / "notes.txt").write_text("a file")
    settings = SimpleNamespace(setter=lambda name: "--specdec-baseline-dir")
    as_file = header._baseline_state(SimpleNamespace(baseline_path=tmp_path / "notes.txt" / "cpu.json",
                                                     settings=settings))
    first_run = header._baseline_state(SimpleNamespace(baseline_path=tmp_path / "new" / "cpu.json",
                                                       settings=settings))
    assert as_file.warns and "the baseline folder is a file" in as_file.text
    assert not first_run.warns and first_run.text == " (none yet)"
    # and -q, which writes no header, still writes that warning
    pytester.makepyprojecttoml(SMALL_MATRIX)
    pytester.makepyfile(SPEC_TEST)
    pytester.makefile(".txt", notes="a file")
    result = pytester.runpytest("--co", "-q", "--specdec-baseline-dir=notes.txt")
    result.stdout.fnmatch_lines(["specdec: baselines */notes.txt/cpu.json (none: the baseline folder is a file*"])
    assert "(none yet)" not in pytester.runpytest("--co", "-q").stdout.str()


def test_a_dry_run_of_a_family_without_a_matrix_says_the_cpu_matrix_runs(pytester: pytest.Pytester):
    """It said the hopper suite ran, and the cpu matrix's tests ran."""
    pytester.makepyprojecttoml("[tool.specdec]\nbackend = 'embedded'\n[tool.specdec.matrix.cpu]\n"
                               "methods = ['ar']\n")
    pytester.makepyfile(SPEC_TEST)
    result = pytester.runpytest("--specdec-arch=sm_90", "--co")
    result.stdout.fnmatch_lines(["specdec: dry run: no hopper matrix is configured, so there is no hopper suite "
                                 "to rehearse and the cpu matrix runs; add [[]tool.specdec.matrix.hopper[]]",
                                 "*<Function test_cell[[]ar-tp1[]]>"])


def test_the_header_details_are_written_under_xdist_too(pytester: pytest.Pytester):
    """The controller collects nothing, so pytest never asked it for the lines after collection:
    hardware, baselines, settings, gate and losslessness were missing under -n 2."""
    pytest.importorskip("xdist")
    pytester.makepyprojecttoml("[tool.specdec]\nbackend = 'embedded'\n[tool.specdec.matrix.cpu]\n"
                               "methods = ['ar']\n")
    pytester.makepyfile(SPEC_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "xdist", "-n", "2",
                                "--specdec-compare-fail", "accept_length:0")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["specdec: hardware *", "specdec: baselines *", "specdec: settings *",
                                 "specdec: gate accept_length -0 (command line)*", "specdec: lossless *"])
    assert sum(line.startswith("specdec: gate ") for line in result.stdout.lines) == 1  # once, not a worker


def test_under_xdist_the_last_progress_line_ends_before_the_workers_write(pytester: pytest.Pytester):
    """xdist's workers end after the loop and write straight to the terminal: pytest-benchmark's
    warning that xdist disables it came on the same line as the last `specdec [i/n]` progress
    line, left open for the terminal's session end to end (under -v every progress line was left
    open, and a worker with no tests left ends while the others run). Here each worker writes once
    the controller is finishing (its conftest marks that), as late as pytest-benchmark's warning."""
    pytest.importorskip("xdist")
    pytester.makepyprojecttoml("[tool.specdec]\nbackend = 'embedded'\n[tool.specdec.matrix.cpu]\n"
                               "methods = ['ar', 'dflash']\n")
    pytester.makepyfile("def test_cell(specdec_spec, specdec_record):\n"
                        "    specdec_record.metric('widgets', 3.0, 'higher')\n")
    pytester.makeconftest("""
import os
import time
from pathlib import Path

import pytest

FINISHING = Path(__file__).with_name("controller-finishing")

@pytest.hookimpl(tryfirst=True)  # before xdist's, which waits for the workers to end
def pytest_sessionfinish(session):
    if not hasattr(session.config, "workerinput"):
        FINISHING.touch()

def pytest_unconfigure(config):
    if hasattr(config, "workerinput"):
        for _ in range(600):  # the controller is past its loop within a minute
            if FINISHING.exists():
                break
            time.sleep(0.1)
        os.write(2, b"a worker's last words\\n")
""")
    import os
    import subprocess
    import sys

    for verbosity in ("-q", "-rN", "-v"):
        (pytester.path / "controller-finishing").unlink(missing_ok=True)
        # one unbuffered stream, as a terminal shows the workers' stderr among the controller's lines
        run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "xdist", "-n", "2",
                              verbosity], cwd=pytester.path, env=dict(os.environ, PYTHONUNBUFFERED="1"),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
        lines = run.stdout.splitlines()
        assert run.returncode == 0 and lines.count("a worker's last words") == 2, run.stdout
        progress = [line for line in lines if line.startswith("specdec [")]
        assert len(progress) == 2 and all(line.endswith(":") for line in progress), run.stdout


def test_the_lossless_header_names_sampled_workloads_it_does_not_check(pytester: pytest.Pytester):
    """Only greedy outputs are compared: a workload at temperature 0.7 went unchecked while the
    header said speculative outputs were checked against ar's."""
    pytester.makepyprojecttoml("[tool.specdec]\nbackend = 'embedded'\n[tool.specdec.matrix.cpu]\n"
                               "methods = ['ar', 'dflash']\n[[tool.specdec.workloads]]\nname = 'greedy'\n"
                               "[[tool.specdec.workloads]]\nname = 'sampled'\ntemperature = 0.7\n")
    pytester.makepyfile(SPEC_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "--co")
    result.stdout.fnmatch_lines(["specdec: lossless exact: speculative outputs against ar's in cpu; not for "
                                 "workload sampled (temperature above 0: not greedy)"])


TOUR_MATRICES = """
[tool.specdec]
backend = "auto"
[tool.specdec.matrix.cpu]
methods = ["ar", "dflash", "ddtree"]
budget = [8, 16]
[tool.specdec.matrix.blackwell]
methods = ["dflash", "ddtree"]
budget = [8, 16]
"""


@pytest.mark.parametrize("arch, said", [
    (None, "exact: speculative outputs against ar's in cpu"),
    # the dry run rehearses the blackwell matrix: there the advice can act
    ("sm_120", "exact: speculative outputs against ar's; not in blackwell (no ar in the matrix: add it to "
               "guard them)"),
])
def test_the_lossless_header_advises_only_on_matrices_this_host_runs(pytester: pytest.Pytester, monkeypatch,
                                                                     arch, said):
    """The README tour's config on a machine without a GPU said "not in blackwell (no ar in the
    matrix: add it to guard them)" of a matrix whose tests all skip there."""
    monkeypatch.setattr(hardware, "detect", lambda: hardware.Hardware((), "none", physical_gpus=0))
    pytester.makepyprojecttoml(TOUR_MATRICES)
    pytester.makepyfile(SPEC_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "--co", *([f"--specdec-arch={arch}"] if arch else []))
    assert [line for line in result.stdout.lines if line.startswith("specdec: lossless")] == [
        f"specdec: lossless {said}"]


def test_the_lossless_header_says_no_matrix_runs_where_none_does(pytester: pytest.Pytester, monkeypatch):
    monkeypatch.setattr(hardware, "detect", lambda: hardware.Hardware((), "none", physical_gpus=0))
    pytester.makepyprojecttoml("[tool.specdec.matrix.blackwell]\nmethods = ['dflash']\n")
    pytester.makepyfile(SPEC_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "--co")
    result.stdout.fnmatch_lines(["specdec: lossless exact: no configured matrix runs on this host, so none is "
                                 "guarded"])


def test_the_header_settings_name_the_files_pass_fail_settings(pytester: pytest.Pytester):
    """min_accept_length changes which tests pass, yet the settings line never named it, nor the
    known issues that turn tests into strict xfails."""
    pytester.makepyprojecttoml("[tool.specdec]\nbackend = 'embedded'\nmin_accept_length = 1.5\n"
                               "[tool.specdec.matrix.cpu]\nmethods = ['ar']\n"
                               "[[tool.specdec.known_issues]]\nmethod = ['ddtree']\nreason = 'crashes'\n")
    pytester.mkdir("baselines")
    pytester.path.joinpath("baselines", "known_issues.toml").write_text(
        "[[known_issues]]\nmethod = ['dflash']\nreason = 'lossy'\n[[known_issues]]\nmethod = ['ar']\nreason = 'x'\n")
    pytester.makepyfile(SPEC_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "--co")
    result.stdout.fnmatch_lines(["specdec: settings backend=embedded (pyproject.toml [[]tool.specdec[]]), "
                                 "min_accept_length=1.5 (pyproject.toml [[]tool.specdec[]]), known_issues=3 "
                                 "(1 in pyproject.toml [[]tool.specdec[]], 2 in baselines/known_issues.toml)"])


@pytest.mark.parametrize("backend, warned", [(None, True), ("'auto'", True), ("'embedded'", False)])
def test_auto_falling_back_to_the_engine_on_a_gpu_host_warns_and_says_how_to_pin(
        pytester: pytest.Pytester, monkeypatch, backend, warned):
    """A GPU runner whose fresh venv could not see SGLang ran, and gated, the Blackwell suite on
    the embedded engine, said only in the header's reason. The choice stays; the header's first
    line and a warning in the summary say what runs and how to pin the backend."""
    from pytest_specdec import backends

    b200 = hardware.Hardware((hardware.GPU(0, "NVIDIA B200", "sm_100"),), "nvml", physical_gpus=1)
    monkeypatch.setattr(hardware, "detect", lambda: b200)
    monkeypatch.setattr(backends, "sglang_importable", lambda python=None: False)
    pytester.makepyprojecttoml(("[tool.specdec]\nbackend = %s\n" % backend if backend else "")
                               + "[tool.specdec.matrix.blackwell]\nmethods = ['dflash']\n")
    pytester.makepyfile(SPEC_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "--co")
    text = result.stdout.str()
    if warned:
        result.stdout.fnmatch_lines([
            "specdec: backend embedded (auto: sglang not importable in this Python, though this host has a GPU; "
            "--specdec-backend=sglang requires it); config *",
            "*PytestConfigWarning: pytest-specdec: backend auto chose the embedded engine on a host with "
            "NVIDIA B200 (sm_100, blackwell) x1*, as sglang is not importable in this Python: the blackwell "
            "matrix is measured, and gated against *.json, on the embedded engine, not on SGLang. To require "
            "SGLang, set --specdec-backend=sglang *; to choose the engine on purpose, --specdec-backend=embedded"])
    else:
        assert "PytestConfigWarning" not in text and "specdec: backend embedded (requested)" in text


def gpu_host_without_sglang(pytester: pytest.Pytester) -> None:
    """A project whose every process (a controller, each xdist worker) sees one B200 and no
    importable SGLang, with a blackwell matrix and one specdec test."""
    pytester.makeconftest("from pytest_specdec import backends, hardware\n"
                          "b200 = hardware.Hardware((hardware.GPU(0, 'NVIDIA B200', 'sm_100'),), 'nvml', "
                          "physical_gpus=1)\n"
                          "hardware.detect = lambda: b200\n"
                          "backends.sglang_importable = lambda python=None: False\n")
    pytester.makepyprojecttoml("[tool.specdec.matrix.blackwell]\nmethods = ['dflash']\n")
    pytester.makepyfile(SPEC_TEST)


def test_auto_falling_back_to_the_engine_on_a_gpu_host_warns_once_under_xdist_too(pytester: pytest.Pytester):
    """The warning came only from the process that collects: under -n 2 the controller collects
    nothing and the workers kept quiet, so only the header's first line said it."""
    pytest.importorskip("xdist")
    gpu_host_without_sglang(pytester)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "xdist", "-n", "2")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines([
        "specdec: backend embedded (auto: sglang not importable in this Python, though this host has a GPU; *",
        "*warnings summary*",
        "*PytestConfigWarning: pytest-specdec: backend auto chose the embedded engine on a host with "
        "NVIDIA B200 (sm_100, blackwell) x1*: the blackwell matrix is measured, and gated against *.json, on "
        "the embedded engine, not on SGLang. *"])
    assert result.stdout.str().count("backend auto chose the embedded engine") == 1  # not once per worker


@pytest.mark.parametrize("workers", [(), ("-p", "xdist", "-n", "2")], ids=["alone", "xdist"])
def test_the_fallback_warning_made_an_error_ends_the_run_with_its_words(pytester: pytest.Pytester, workers):
    """-W error::pytest.PytestConfigWarning turned the warning into an INTERNALERROR traceback."""
    if workers:
        pytest.importorskip("xdist")
    gpu_host_without_sglang(pytester)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "error::pytest.PytestConfigWarning",
                                           *workers)
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "INTERNALERROR" not in text, text
    assert "pytest-specdec: backend auto chose the embedded engine" in text
    assert "this warning stops the run: -W or filterwarnings make PytestConfigWarning an error" in text


def test_no_fallback_warning_in_a_run_that_collects_no_specdec_test(pytester: pytest.Pytester, monkeypatch):
    from pytest_specdec import backends

    b200 = hardware.Hardware((hardware.GPU(0, "NVIDIA B200", "sm_100"),), "nvml", physical_gpus=1)
    monkeypatch.setattr(hardware, "detect", lambda: b200)
    monkeypatch.setattr(backends, "sglang_importable", lambda python=None: False)
    pytester.makepyfile("def test_x(): pass")
    assert "PytestConfigWarning" not in pytester.runpytest("-p", "no:cacheprovider").stdout.str()


def test_header_is_one_line_when_no_specdec_test_is_collected(pytester: pytest.Pytester):
    pytester.makepyprojecttoml(SMALL_MATRIX)
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--specdec-arch=sm_120")
    result.assert_outcomes(passed=1)
    ours = [line for line in result.stdout.lines if line.startswith("specdec")]
    assert ours == ["specdec: backend embedded (auto: no GPU); config pyproject.toml [tool.specdec]"]


BASELINE_FILE = """{"format": "pytest-specdec-baselines", "version": 2, "hardware_key": "%s",
 "entries": {"test_gen[ar-tp1]": {"output_tok_s": {"value": 10.0, "direction": "higher"}}}}"""


@pytest.mark.parametrize("baseline", [False, True], ids=["no-baseline", "baseline-file"])
def test_a_run_without_specdec_tests_loads_nothing_heavy(pytester: pytest.Pytester, baseline):
    """The plugin loads in every pytest run of the environment: one that uses none of it must
    not pay for the HTTP client, the server manager, the metrics or the report. A baseline file
    is still read and checked at start, by light code: the session, its journal and the metrics
    load with the first specdec test."""
    pytester.makepyprojecttoml(SMALL_MATRIX)
    if baseline:
        pytester.mkdir("baselines")
        pytester.path.joinpath("baselines", f"{hardware.detect().key}.json").write_text(
            BASELINE_FILE % hardware.detect().key)
    pytester.makepyfile("""
import sys
HEAVY = ("aiohttp", "filelock", "psutil", "matplotlib", "torch", "pytest_specdec.client",
         "pytest_specdec.servers.process", "pytest_specdec.servers.cleanup",
         "pytest_specdec.metrics", "pytest_specdec.report", "pytest_specdec.live",
         "pytest_specdec.session", "pytest_specdec.journal", "pytest_specdec.recording")

def test_nothing_heavy_is_loaded():
    assert [name for name in HEAVY if name in sys.modules] == []
""")
    # a subprocess: this process has loaded everything already
    pytester.runpytest_subprocess("-p", "no:xdist").assert_outcomes(passed=1)


@pytest.mark.parametrize("where", ["cli", "ini", "toml"])
def test_each_option_is_settable_in_three_places(pytester: pytest.Pytester, where: str):
    """Every option reaches the run state from the command line, the ini file or [tool.specdec]."""
    from pytest_specdec.options import OPTIONS

    samples = {"backend": "auto", "arch": "sm_120", "gpus": "2",  # auto: a server_url attaches
               "server_url": "http://127.0.0.1:9", "save_baseline": "true",
               "compare_fail": "output_tok_s:5%", "baseline_dir": "elsewhere",
               "report": "out", "resume": "true", "journal": "j.jsonl",
               "run_known_issues": "true", "startup_timeout": "12.5",
               "restart_on_crash": "3", "artifacts": "arts",
               "stall_timeout": "7.5", "keep_runs": "4", "cpu_matrix": "true",
               "shard": "1/3", "tp": "1", "strict_noise": "true", "reference": "dflash",
               "lossless": "prefix:16", "gpu_claims": "claims", "require_baseline": "true",
               "gpu_wait_timeout": "90", "baseline_lock_timeout": "30", "no_plots": "true",
               "lossless_margins": "true", "allow_shared": "true", "warmup_requests": "2",
               "summary_rows": "7"}
    assert set(samples) == {o.name for o in OPTIONS}, "a new option needs a sample here"
    expected = {"gpus": 2, "startup_timeout": 12.5, "restart_on_crash": 3, "stall_timeout": 7.5,
                "gpu_wait_timeout": 90.0, "baseline_lock_timeout": 30.0,
                "keep_runs": 4, "cpu_matrix": True, "tp": [1], "strict_noise": True,
                "save_baseline": True, "resume": True, "run_known_issues": True, "require_baseline": True,
                "no_plots": True, "lossless_margins": True, "allow_shared": True, "warmup_requests": 2,
                "summary_rows": 7}
    args = []
    if where == "cli":
        for option in OPTIONS:
            args += [option.cli] if option.flag else [f"{option.cli}={samples[option.name]}"]
    elif where == "ini":
        body = "\n".join(f"{o.ini} = {samples[o.name]}" for o in OPTIONS)
        pytester.makeini("[pytest]\n" + body)
    else:
        def toml_value(name: str) -> str:
            value = expected.get(name, samples[name])
            return str(value).lower() if isinstance(value, bool) else (
                str(value) if isinstance(value, (int, float, list)) else f'"{value}"')
        pytester.makepyprojecttoml("[tool.specdec]\n" + "\n".join(
            f"{o.name} = {toml_value(o.name)}" for o in OPTIONS))
    pytester.makepyfile("""
import json
def test_dump(specdec_state):
    print("VALUES", json.dumps(dict(specdec_state.settings.values), sort_keys=True, default=str))
    print("ORIGINS", json.dumps(sorted(set(specdec_state.settings.origins.values()))))
""")
    result = pytester.runpytest("-s", *args)
    result.assert_outcomes(passed=1)
    line = next(l for l in result.stdout.lines if "VALUES " in l)
    import json
    values = json.loads(line.split("VALUES ", 1)[1])
    for name, raw in samples.items():
        assert values[name] == expected.get(name, raw), name
    origin = {"cli": "command line", "ini": "ini", "toml": "pyproject.toml [tool.specdec]"}[where]
    assert f'ORIGINS ["{origin}"]' in result.stdout.str()


def test_command_line_beats_ini_beats_toml(pytester: pytest.Pytester):
    pytester.makepyprojecttoml("""
[tool.pytest.ini_options]
specdec_startup_timeout = "20"

[tool.specdec]
startup_timeout = 30
restart_on_crash = 2
""")
    pytester.makepyfile("""
def test_dump(specdec_state):
    s = specdec_state.settings
    print("GOT", s.startup_timeout, s.restart_on_crash, s.origins["startup_timeout"])
""")
    pytester.runpytest("-s").stdout.fnmatch_lines(["*GOT 20.0 2 ini"])
    pytester.runpytest("-s", "--specdec-startup-timeout=5").stdout.fnmatch_lines(
        ["*GOT 5.0 2 command line"])


def test_the_header_shows_tp_as_its_flag_takes_it(pytester: pytest.Pytester):
    """tp=(1, 4): Python's tuple, neither the flag's 1,4 nor TOML's [1, 4]."""
    pytester.makepyprojecttoml("[tool.specdec]\ntp = [1, 4]\n[tool.specdec.matrix.cpu]\nmethods = ['ar']\n"
                               "tp = [1, 4]\n")
    pytester.makepyfile("def test_cell(specdec_spec): pass")
    result = pytester.runpytest("--collect-only", "--specdec-tp=1")
    result.stdout.fnmatch_lines(["specdec: settings *tp=1 (command line; overrides pyproject.toml ?tool.specdec? 1,4)*"])


def test_the_header_says_what_a_setting_overrides(pytester: pytest.Pytester):
    """keep_runs=7 (command line) did not say it hid pyproject.toml's keep_runs = 3 and the ini's 5."""
    pytester.makepyprojecttoml("[tool.specdec]\nkeep_runs = 3\nstall_timeout = 30\n"
                               "[tool.pytest.ini_options]\nspecdec_keep_runs = \"5\"\n")
    pytester.makepyfile("def test_cell(specdec_spec): pass")
    result = pytester.runpytest("--collect-only", "--specdec-keep-runs=7")
    result.stdout.fnmatch_lines(["specdec: settings *stall_timeout=30 (pyproject.toml ?tool.specdec?), keep_runs=7 "
                                 "(command line; overrides ini 5 and pyproject.toml ?tool.specdec? 3)*"])


@pytest.mark.parametrize("ini", ["[pytest]\nspecdec_keep_runs = 5\n", "[tool:pytest]\nspecdec_keep_runs = 5\n"])
def test_the_header_names_an_o_key_and_the_ini_value_it_hides(pytester: pytest.Pytester, ini):
    """-o specdec_keep_runs=7 showed as `keep_runs=7 (ini; overrides pyproject.toml [tool.specdec] 3)`:
    the ini file's own 5, which pytest replaces with -o's before the plugin reads it, went unnamed,
    and the ini file named as where the 7 came from."""
    (pytester.path / ("pytest.ini" if ini.startswith("[pytest]") else "setup.cfg")).write_text(ini)
    pytester.makepyprojecttoml("[tool.specdec]\nkeep_runs = 3\n")
    pytester.makepyfile("def test_cell(specdec_spec): pass")
    result = pytester.runpytest("--collect-only", "-o", "specdec_keep_runs=7")
    result.stdout.fnmatch_lines(["specdec: settings *keep_runs=7 (-o specdec_keep_runs; overrides ini 5 and "
                                 "pyproject.toml ?tool.specdec? 3)*"])
    result = pytester.runpytest("--collect-only", "--specdec-keep-runs=7", "-o", "specdec_keep_runs=7")
    result.stdout.fnmatch_lines(["specdec: settings *keep_runs=7 (command line; overrides -o specdec_keep_runs 7, "
                                 "ini 5 and pyproject.toml ?tool.specdec? 3)*"])
    result = pytester.runpytest("--collect-only", "-o", "specdec_compare_fail=ttft_ms:10%")
    result.stdout.fnmatch_lines(["specdec: gate ttft_ms +10% (-o specdec_compare_fail)*"])


@pytest.mark.parametrize("files, args, shown", [
    # TOML's true, which pytest hands on from [tool.pytest.ini_options] as Python's 'True'
    ({"pyproject.toml": "[tool.pytest.ini_options]\nspecdec_save_baseline = true\n"
                        "[tool.specdec]\nstrict_noise = false\n"}, ["--specdec-strict-noise"],
     "save_baseline=true (ini), strict_noise=true (command line; overrides pyproject.toml ?tool.specdec? false)"),
    ({"pytest.ini": "[pytest]\nspecdec_save_baseline = yes\n", "specdec.toml": "strict_noise = true\n"}, [],
     "save_baseline=yes (ini), strict_noise=true (specdec.toml)"),
    ({"pytest.ini": "[pytest]\nspecdec_save_baseline = 0\n"}, ["-o", "specdec_strict_noise=on"],
     "save_baseline=0 (ini), strict_noise=on (-o specdec_strict_noise)"),
    # -o over the ini file's own spelling: both as written
    ({"pytest.ini": "[pytest]\nspecdec_strict_noise = yes\n"}, ["-o", "specdec_strict_noise=off"],
     "strict_noise=off (-o specdec_strict_noise; overrides ini yes)"),
])
def test_the_header_echoes_a_boolean_as_its_file_spells_it(pytester: pytest.Pytester, files, args, shown):
    """save_baseline=True (ini), where pyproject.toml said true and pytest.ini yes: Python's spelling,
    which no file of the user's holds."""
    for name, text in files.items():
        (pytester.path / name).write_text(text)
    pytester.makepyfile("def test_cell(specdec_spec): pass")
    result = pytester.runpytest("--collect-only", *args)
    result.stdout.fnmatch_lines([f"specdec: settings {shown}"])


@pytest.mark.parametrize("args", [[], ["--specdec-keep-runs=3"], ["-o", "specdec_keep_runs=3"]])
def test_a_bad_tool_specdec_value_is_refused_also_under_a_flag_or_ini_value(pytester: pytest.Pytester, args):
    """keep_runs = 0 passed while a flag set the option, to stop the first run without the flag."""
    pytester.makepyprojecttoml("[tool.specdec]\nkeep_runs = 0\n")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: pytest-specdec: pyproject.toml ?tool.specdec? key 'keep_runs': 0 must be "
                                 "1 or more; --specdec-keep-runs takes: *"])


@pytest.mark.parametrize("ini, message", [
    ("specdec_resume = maybe", "*ini specdec_resume: *'maybe'*; --specdec-resume takes: *"),
    ("specdec_gpus = many", "*ini specdec_gpus: *'many'*; --specdec-gpus takes: *"),
    ("specdec_keep_runs = 0", "*ini specdec_keep_runs: '0' must be 1 or more*"),
    ("specdec_keep_runs = -1", "*ini specdec_keep_runs: '-1' must be 1 or more*"),  # once "0 or more"
    ("specdec_summary_rows = -5", "*ini specdec_summary_rows: '-5' must be 0 or more; --specdec-summary-rows takes: *"),
])
def test_ini_values_are_typed_and_a_bad_one_is_a_usage_error(pytester: pytest.Pytester, ini,
                                                                 message):
    pytester.makeini("[pytest]\n" + ini)
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: pytest-specdec: " + message])
    assert "Traceback" not in result.stderr.str()


@pytest.mark.parametrize("args, message", [
    (["--specdec-backend=vllm"], "*--specdec-backend: 'vllm' is not a backend; use one of auto, embedded, sglang*"),
    (["--specdec-backend=sglng"], "*--specdec-backend: 'sglng' is not a backend; did you mean 'sglang'?*"),
    (["--specdec-startup-timeout=-1"], "*'-1' must be a finite number greater than 0*"),
    (["--specdec-startup-timeout=nan"], "*'nan' must be a finite number greater than 0*"),
    (["--specdec-stall-timeout=inf"], "*--specdec-stall-timeout: 'inf' must be a finite number*"),
    (["--specdec-gpus=many"], "*--specdec-gpus: 'many' is not a whole number*"),
    (["--specdec-summary-rows=all"], "*--specdec-summary-rows: 'all' is not a whole number; "
                                     "--specdec-summary-rows takes: *0 shows every row*"),
    (["--specdec-summary-rows=-1"], "*--specdec-summary-rows: '-1' must be 0 or more; --specdec-summary-rows takes: *"),
    (["--specdec-arch=pascal"], "*'pascal' is not a GPU architecture*sm_90*"),
    (["--specdec-server-url=localhost:30000"], "*'localhost:30000' is not an http(s) URL*"),
    (["--specdec-server-url=http://127.0.0.1:port"], "*is not an http(s) URL*"),
    (["--specdec-server-url=http://127.0.0.1:99999"], "*'http://127.0.0.1:99999': its port is out of range; "
                                                      "a port is 1-65535*"),
    (["--specdec-lossless=nearly"], "*'nearly' is not a losslessness mode; use \"exact\", \"prefix:N\", \"off\"*"),
    (["--specdec-reference=medusa"], "*--specdec-reference: 'medusa' is not a method; use one of ar, dflash;*"),
    (["--specdec-reference=dflsh"], "*--specdec-reference: 'dflsh' is not a method; did you mean 'dflash'?*"),
    # its reference case has no budget, so it matched no ddtree configuration: nothing was checked
    (["--specdec-reference=ddtree"], "*--specdec-reference: 'ddtree' has a configuration per tree budget, so "
                                     "no one of them is the reference*; use ar or dflash*"),
])
def test_bad_flag_values_are_usage_errors(pytester: pytest.Pytester, args, message):
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: pytest-specdec: " + message])
    assert "Traceback" not in result.stderr.str()


SERVER_TEST = """
def test_generation(specdec_server):
    assert specdec_server.url
"""


def test_a_server_url_where_nothing_answers_is_one_line(pytester: pytest.Pytester):
    pytester.makepyprojecttoml(SMALL_MATRIX)
    pytester.makepyfile(SERVER_TEST)
    result = pytester.runpytest("--specdec-server-url=http://127.0.0.1:9")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.strip()]
    assert len(errors) == 1, result.stderr.str()
    assert errors[0].startswith("ERROR: pytest-specdec: --specdec-server-url http://127.0.0.1:9: "
                                "no /server_info at http://127.0.0.1:9")
    assert errors[0].endswith("start the server or fix the URL")
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_server_url_set_in_the_ini_is_named_as_set(pytester: pytest.Pytester):
    """Given with -o, it is named as that -o (it was "ini specdec_server_url", a key no ini file set)."""
    pytester.makepyprojecttoml(SMALL_MATRIX)
    pytester.makepyfile(SERVER_TEST)
    result = pytester.runpytest("-o", "specdec_server_url=http://127.0.0.1:9")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: pytest-specdec: -o specdec_server_url http://127.0.0.1:9: "
                                 "no /server_info at http://127.0.0.1:9*"])
    pytester.makeini("[pytest]\nspecdec_server_url = http://127.0.0.1:9\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: pytest-specdec: ini specdec_server_url http://127.0.0.1:9: "
                                 "no /server_info at http://127.0.0.1:9*"])


@pytest.mark.parametrize("where", ["cli", "ini", "toml"])
def test_a_server_url_beside_a_named_backend_is_a_usage_error(pytester: pytest.Pytester, where: str):
    """--specdec-server-url attached even where the backend was asked for by name: now one line
    naming both settings, wherever the backend was set."""
    args = ["--specdec-server-url=http://127.0.0.1:9"]
    if where == "cli":
        pytester.makepyprojecttoml(SMALL_MATRIX)
        args.append("--specdec-backend=embedded")
    elif where == "ini":
        pytester.makepyprojecttoml('[tool.pytest.ini_options]\nspecdec_backend = "embedded"\n' + SMALL_MATRIX)
    else:
        pytester.makepyprojecttoml('[tool.specdec]\nbackend = "embedded"\n' + SMALL_MATRIX)
    pytester.makepyfile(SERVER_TEST)
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    named = {"cli": "--specdec-backend", "ini": "ini specdec_backend",
             "toml": "pyproject.toml [[]tool.specdec[]] key 'backend'"}[where]
    result.stderr.fnmatch_lines([f"ERROR: pytest-specdec: --specdec-server-url http://127.0.0.1:9 attaches to a "
                                 f"server someone else runs, but {named} embedded asks for embedded servers *; "
                                 f"to attach, leave the backend at auto *"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_missing_extra_is_one_line_with_the_install_command(pytester: pytest.Pytester,
                                                               monkeypatch: pytest.MonkeyPatch):
    from pytest_specdec import extras

    monkeypatch.setattr(extras, "missing", lambda extra: ["torch>=2.4", "safetensors>=0.4"]
                        if extra == "engine" else [])
    pytester.makepyprojecttoml(SMALL_MATRIX)
    pytester.makepyfile(SERVER_TEST)
    result = pytester.runpytest("--specdec-backend=embedded")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "ERROR: pytest-specdec: the embedded engine (backend requested) needs the `engine` extra, "
        "and torch, safetensors are not installed: pip install torch --index-url "
        "https://download.pytorch.org/whl/cpu (*), then pip install 'safetensors>=0.4'"])
    # a run whose tests need no server does not need the engine either
    pytester.makepyfile(SPEC_TEST)
    pytester.runpytest("--specdec-backend=embedded", "test_a_missing_extra_is_one_line_with_the_"
                       "install_command.py").assert_outcomes(passed=3, skipped=5)


def listed_ids(result: pytest.RunResult) -> list[str]:
    """The test ids a `--co` or `--co -q` run listed, in its order."""
    ids = [line.strip() for line in result.stdout.lines if "::" in line and not line.startswith(" ")]
    return ids or [line.strip()[len("<Function "):-1] for line in result.stdout.lines
                   if line.strip().startswith("<Function ")]


@pytest.mark.parametrize("listing", [("--co",), ("--collect-only", "-q"), ("--setup-plan", "-q")])
def test_a_listing_needs_no_engine_extra(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                         listing: tuple[str, ...]):
    """`pytest --co` (what CI tools run to split or list tests) in a venv without the `engine`
    extra listed the tests and then stopped with the install-torch line: a listing boots no server,
    so it checks no extra, and lists the ids a run with the extra collects. A run still stops."""
    from pytest_specdec import extras

    pytester.makepyprojecttoml(SMALL_MATRIX)
    pytester.makepyfile(SERVER_TEST)
    with_extra = pytester.runpytest("-p", "no:cacheprovider", "--co", "-q", "--specdec-backend=embedded")
    assert with_extra.ret == pytest.ExitCode.OK, with_extra.stderr.str()
    expected = [nodeid.split("::", 1)[1] for nodeid in listed_ids(with_extra)]
    assert len(expected) == 8  # every matrix's configurations: a listing skips none for this host

    monkeypatch.setattr(extras, "missing", lambda extra: ["torch>=2.4"] if extra == "engine" else [])
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` fails, as in a venv without it
    result = pytester.runpytest("-p", "no:cacheprovider", *listing, "--specdec-backend=embedded")
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.OK, text
    assert "engine" not in result.stderr.str() and "ERROR" not in text
    if "--setup-plan" in listing:  # the cpu matrix's tests planned, the GPU families' skipped here
        result.assert_outcomes(skipped=5)
        assert sum(f"::{name} " in text for name in expected) == 3
    else:
        assert [nodeid.split("::", 1)[-1] for nodeid in listed_ids(result)] == expected
    # a run that measures still stops before any test, saying what to install
    ran = pytester.runpytest("-p", "no:cacheprovider", "--specdec-backend=embedded")
    assert ran.ret == pytest.ExitCode.USAGE_ERROR
    ran.stderr.fnmatch_lines(["ERROR: pytest-specdec: the embedded engine (backend requested) needs the "
                              "`engine` extra, and torch is not installed: pip install torch *"])


@pytest.mark.parametrize("listing", [("--co",), ("--collect-only", "-q"), ("--setup-plan",)])
def test_a_listing_of_an_attached_run_does_not_contact_the_server(pytester: pytest.Pytester,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  listing: tuple[str, ...]):
    """`pytest --co --specdec-server-url=...` asked the server for its /server_info (and, in the
    header, for a token count), and stopped where it did not answer: a listing runs no test on it.
    The ids are the configuration's, as a run's are (the server only skips tests, it adds none);
    the header says what was not checked."""
    import socket

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    contacted = []
    connect = socket.socket.connect

    def recording_connect(sock: socket.socket, address):
        if isinstance(address, tuple) and address[1:2] == (port,):
            contacted.append(address)
        return connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", recording_connect)
    url = f"http://127.0.0.1:{port}"
    pytester.makepyprojecttoml(SMALL_MATRIX)
    pytester.makepyfile(SERVER_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", *listing, f"--specdec-server-url={url}")
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.OK, text
    assert contacted == []
    assert "ERROR" not in text and "Traceback" not in text
    if "-q" not in listing:
        result.stdout.fnmatch_lines([f"specdec: listing: the attached server {url} is not contacted, so "
                                     f"neither what it serves nor which tests a run skips *"])
    if "--setup-plan" not in listing:
        assert len(listed_ids(result)) == 8
    # a run contacts it, and stops on its silence
    ran = pytester.runpytest("-p", "no:cacheprovider", f"--specdec-server-url={url}")
    assert ran.ret == pytest.ExitCode.USAGE_ERROR and contacted


def test_a_listing_on_sglang_looks_up_no_hub_model(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    """On the sglang backend, a listing looked the models up on the Hugging Face Hub (and wanted
    the `models` extra for it): a listing fetches no model."""
    from pytest_specdec import backends, extras

    looked_up = []
    monkeypatch.setattr(backends, "_on_hub", lambda ref, state: looked_up.append(ref))
    monkeypatch.setattr(backends, "_provision", lambda ref, state: looked_up.append(ref) or "/nowhere")
    monkeypatch.setattr(extras, "missing", lambda extra: ["huggingface_hub>=0.23"] if extra == "models" else [])
    pytester.makepyprojecttoml(f"""
[tool.specdec]
model = "org/target"
draft_model = "org/draft"

[tool.specdec.sglang]
python = "{python_with_sglang(pytester)}"
""" + SMALL_MATRIX)
    pytester.makepyfile(SERVER_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "--co", "-q", "--specdec-backend=sglang")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
    assert looked_up == [] and len(listed_ids(result)) == 8
    ran = pytester.runpytest("-p", "no:cacheprovider", "--specdec-backend=sglang")
    assert ran.ret == pytest.ExitCode.USAGE_ERROR
    ran.stderr.fnmatch_lines(["ERROR: pytest-specdec: fetching org/target from the Hugging Face Hub needs the "
                              "`models` extra*"])


def test_requirements_of_an_extra_come_from_the_installed_metadata():
    from pytest_specdec import extras

    assert any(req.startswith("torch") for req in extras.requirements("engine"))
    assert extras.requirements("report") == ["matplotlib>=3.8.4"]
    assert extras.missing("report") == []


def test_a_gpu_host_runs_its_family_matrix_and_the_cpu_matrix_only_when_asked(
        pytester: pytest.Pytester):
    pytester.makepyprojecttoml(SMALL_MATRIX)
    pytester.makepyfile(SPEC_TEST)
    result = pytester.runpytest("--specdec-arch=sm_90", "--specdec-gpus=4", "-rs")
    result.assert_outcomes(passed=2, skipped=6)  # hopper's 2 run; cpu's 3 and blackwell's 3 skip
    result.stdout.fnmatch_lines(["*the cpu matrix runs on a hopper host only with "
                                 "--specdec-cpu-matrix; this host runs its hopper matrix*"])
    pytester.runpytest("--specdec-arch=sm_90", "--specdec-gpus=4",
                       "--specdec-cpu-matrix").assert_outcomes(passed=5, skipped=3)
    # an Ada host has no matrix of its own: the cpu matrix stands in
    pytester.runpytest("--specdec-arch=sm_89", "--specdec-gpus=4").assert_outcomes(passed=3,
                                                                                   skipped=5)


def test_a_dry_run_on_sglang_does_not_call_a_known_issue_fixed(pytester: pytest.Pytester):
    """A dry run on the sglang backend (the Blackwell suite rehearsed on an H200) runs a known
    issue's configuration on hardware that never had the bug, and SGLang cannot be made to fail
    as the entry says, as the embedded engine is: its XPASS was strict, failing the run with
    "[XPASS(strict)] known issue: ..." as if the bug were fixed and the entry stale."""
    pytester.makepyprojecttoml(SMALL_MATRIX + f"""
[tool.specdec.sglang]
python = "{python_with_sglang(pytester)}"
""" + SM120_B8_ISSUE.format(reason="verify crashes on sm_120"))
    pytester.makepyfile(B8_MARKED + "    pass\n")
    result = pytester.runpytest("--specdec-arch=sm_120", "--specdec-backend=sglang", "-rX")
    result.assert_outcomes(xpassed=1)
    result.stdout.fnmatch_lines(["*known issue: verify crashes on sm_120 (a dry run on the sglang "
                                 "backend does not reproduce it: an XPASS here does not mean it is fixed)*"])


def python_with_sglang(pytester: pytest.Pytester) -> Path:
    """An interpreter that finds an (empty) sglang package, for the sglang backend's choice."""
    site = pytester.path / "site"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    python = pytester.path / "sglang-python"
    python.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    return python


def test_the_header_says_how_sglangs_prompts_are_counted(pytester: pytest.Pytester):
    """`truncate = true` cuts prompts too long for the context with the server's token count: on
    SGLang each server's /v1/tokenize gives it, and a release without the endpoint is not guarded,
    which the header says before any server starts."""
    pytester.makepyprojecttoml(SMALL_MATRIX + f"""
[tool.specdec.sglang]
python = "{python_with_sglang(pytester)}"

[[tool.specdec.workloads]]
name = "long"
truncate = true

[[tool.specdec.workloads]]
name = "short"
""")
    pytester.makepyfile(SPEC_TEST)
    result = pytester.runpytest("--specdec-backend=sglang")
    result.stdout.fnmatch_lines(["specdec: context guard: prompt tokens counted by each server's /v1/tokenize "
                                 "(SGLang 0.5.3.post1 and later); a server without it is not guarded, and "
                                 "truncate is not applied to it (workload long): a prompt too long for its "
                                 "context fails its requests"])
    assert "specdec: context guard" not in pytester.runpytest("--specdec-backend=embedded").stdout.str()


def test_too_few_gpus_where_cuda_visible_devices_hides_the_hosts_others_says_so(pytester, monkeypatch):
    """A Slurm job given GPUs 2,3 of an eight-GPU host skipped its TP4 tests saying only `found:
    ... x2`, as if the host had two: the skip names the CUDA_VISIBLE_DEVICES that hides the rest."""
    eight = [hardware.GPU(i, "NVIDIA H200", "sm_90", 143771, f"GPU-{i}a{i}b") for i in range(8)]
    monkeypatch.setattr(hardware, "_detect_nvml", lambda: list(eight))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    pytester.makepyfile("""
import pytest

@pytest.mark.gpus(4)
def test_four():
    pass

@pytest.mark.gpus(16)
def test_sixteen():
    pass
""")
    result = pytester.runpytest("--specdec-backend=embedded", "-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["SKIPPED*needs 4 GPUs; found: NVIDIA H200 (sm_90, hopper) x2; "
                                 "CUDA_VISIBLE_DEVICES=2,3 gives this run 2 of the host's 8: give it 4 to run this test"])
    # no host has sixteen: nothing to give
    result.stdout.fnmatch_lines(["SKIPPED*needs 16 GPUs; found: NVIDIA H200 (sm_90, hopper) x2"])


def test_a_mixed_hosts_skips_name_the_gpus_the_run_left_out(pytester, monkeypatch):
    """On 2 x H100 + 2 x RTX PRO 6000 a TP4 test skipped `found: ... x2` with the CUDA_VISIBLE_DEVICES
    advice of a Slurm job (none was set), and a blackwell test skipped on a host holding two."""
    gpus = [hardware.GPU(i, "NVIDIA H100 80GB HBM3", "sm_90", 81559, f"GPU-{i}h") for i in range(2)]
    gpus += [hardware.GPU(i, "NVIDIA RTX PRO 6000 Blackwell Server Edition", "sm_120", 97887, f"GPU-{i}r")
             for i in (2, 3)]
    monkeypatch.setattr(hardware, "_detect_nvml", lambda: list(gpus))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    pytester.makepyfile("""
import pytest

@pytest.mark.gpus(4)
def test_four():
    pass

@pytest.mark.blackwell
def test_blackwell():
    pass
""")
    result = pytester.runpytest("--specdec-backend=embedded", "-rs")
    result.assert_outcomes(skipped=2)
    left_out = ("GPUs 2,3 (NVIDIA RTX PRO 6000 Blackwell Server Edition) left out, another model than GPUs 0,1 "
                "(NVIDIA H100 80GB HBM3): one run measures one model, under its baseline key; run on them with "
                "CUDA_VISIBLE_DEVICES=GPU-2r,GPU-3r")
    result.stdout.fnmatch_lines([f"SKIPPED*needs 4 GPUs; found: NVIDIA H100 80GB HBM3 (sm_90, hopper) x2; {left_out}"])
    result.stdout.fnmatch_lines([f"SKIPPED*needs a Blackwell GPU; found: NVIDIA H100 80GB HBM3 (sm_90, hopper) x2; "
                                 f"{left_out}"])
    pytester.makepyprojecttoml(SMALL_MATRIX)  # the header's details follow a collection of measuring tests
    pytester.makepyfile(SPEC_TEST)
    result = pytester.runpytest("--specdec-backend=embedded", "--co")
    result.stdout.fnmatch_lines([f"specdec: hardware NVIDIA H100 80GB HBM3 (sm_90, hopper) x2 [[]*[]]; {left_out}",
                                 "specdec: baselines */nvidia-h100-80gb-hbm3-sm_90-x2.json*"])


def test_a_host_whose_every_gpu_is_in_mig_mode_skips_saying_why_it_has_none(pytester, monkeypatch):
    """On 2 x H100 both in MIG mode the skips said `found: no GPU` and offered --specdec-gpus=2 to
    simulate them on the CPU, as on a CPU host: not that the host's two GPUs were left out, nor the fix."""
    gpus = [hardware.GPU(i, "NVIDIA H100 80GB HBM3", "sm_90", 81559, f"GPU-{i}h", mig=True) for i in range(2)]
    monkeypatch.setattr(hardware, "_detect_nvml", lambda: list(gpus))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    pytester.makepyfile("""
import pytest

@pytest.mark.gpu
def test_gpu():
    pass

@pytest.mark.gpus(2)
def test_two():
    pass

@pytest.mark.gpus(4)
def test_four():
    pass

@pytest.mark.blackwell
def test_blackwell():
    pass
""")
    result = pytester.runpytest("--specdec-backend=embedded", "-rs")
    result.assert_outcomes(skipped=4)
    mig = ("GPUs 0,1 (NVIDIA H100 80GB HBM3) left out, in MIG mode: a server there runs on a slice, whose figures "
           "are not the whole GPU's; run on it with MIG off (nvidia-smi -i 0,1 -mig 0)")
    result.stdout.fnmatch_lines([f"SKIPPED*needs a GPU; found: no GPU; {mig}"])
    result.stdout.fnmatch_lines([f"SKIPPED*needs 2 GPUs; found: no GPU; {mig}"])
    # more than the host has: MIG off is not enough, so simulating them stays the way to run it
    result.stdout.fnmatch_lines([f"SKIPPED*needs 4 GPUs; found: no GPU; {mig}; --specdec-gpus=4 simulates them*"])
    result.stdout.fnmatch_lines([f"SKIPPED*needs a Blackwell GPU; found: no GPU; {mig}"])


def test_results_json_records_each_gpus_memory_and_power_limit(pytester, monkeypatch):
    """A red on a board capped at half its power read as a regression: results.json named the
    model only, so the figures could not be told from those of a board at its default."""
    capped = hardware.GPU(0, "NVIDIA H100 80GB HBM3", "sm_90", 81559, "GPU-0h", power_limit_w=350,
                          default_power_limit_w=700)
    monkeypatch.setattr(hardware, "_detect_nvml", lambda: [capped])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    pytester.makepyprojecttoml(SMALL_MATRIX + """
[[tool.specdec.workloads]]
name = "one"
prompts = "chat"
num_prompts = 1
max_new_tokens = 8

[tool.specdec.engine]
draft_agreement = 0.9
""")
    pytester.makepyfile("""
def test_generation(specdec_server, specdec_workload, specdec_record):
    specdec_record.run(specdec_server, specdec_workload)
""")
    result = pytester.runpytest("--specdec-backend=embedded", "--specdec-report=rep", "-k", "hopper-dflash-tp1")
    assert result.parseoutcomes()["passed"] == 1
    doc = json.loads((pytester.path / "rep" / "results.json").read_text())
    assert doc["meta"]["gpu_details"] == "GPU 0: 81559 MiB, power limit 350 W (default 700 W)"
    assert doc["results"][0]["gpus"] == "GPU 0 (NVIDIA H100 80GB HBM3, power limit 350 W of 700 W)"


READY_LOG = """
import os

import pytest

from pytest_specdec import backends

_check_ready = backends.EmbeddedBackend.check_ready


def _logged(self, state):
    with open("ready.log", "a") as f:  # one line per call, by the process that made it
        f.write(f"{os.getpid()}\\n")
    return _check_ready(self, state)


backends.EmbeddedBackend.check_ready = _logged


@pytest.fixture
def specdec_server(specdec_pool):  # the pool without a boot: the checks around it are what counts
    return None
"""


def test_an_xdist_worker_checks_the_backend_once_as_one_process_does(pytester: pytest.Pytester):
    """Workers run collection finish's checks (readiness, configurations apart, artifacts), and
    the `specdec_pool` fixture ran them again in each worker: a sglang backend's Hub look-ups
    twice per worker. Each process now checks once, where one process does."""
    pytester.makepyprojecttoml("[tool.specdec]\nbackend = 'embedded'\n[tool.specdec.matrix.cpu]\n"
                               "methods = ['ar']\ntp = [1]\n")
    pytester.makeconftest(READY_LOG)
    pytester.makepyfile("def test_cell(specdec_spec, specdec_server):\n    pass\n")
    calls = {}
    for workers in ([], ["-p", "xdist", "-n", "1"]):
        pytester.path.joinpath("ready.log").unlink(missing_ok=True)
        pytester.runpytest_subprocess("-p", "no:cacheprovider", *workers).assert_outcomes(passed=1)
        pids = pytester.path.joinpath("ready.log").read_text().split()
        calls[bool(workers)] = sorted(pids.count(pid) for pid in set(pids))
    assert calls[True] == calls[False] == [1], calls


def test_a_baseline_file_behind_a_broken_link_warns_in_the_header_and_the_summary(pytester: pytest.Pytester, tmp_path):
    """A baseline file linked into a share that is not mounted read as a first run: "(none yet)" in
    the header and "the folder holds no cpu.json" at the end, beside the link itself, every gated
    figure passing as new. Both now name the link and where it points."""
    from types import SimpleNamespace

    from pytest_specdec import header, unmatched

    (tmp_path / "baselines").mkdir()
    target = tmp_path / "share" / "cpu.json"
    (tmp_path / "baselines" / "cpu.json").symlink_to(target)
    settings = SimpleNamespace(setter=lambda name: "--specdec-baseline-dir")
    note = header._baseline_state(SimpleNamespace(baseline_path=tmp_path / "baselines" / "cpu.json",
                                                  settings=settings))
    assert note.warns and f"cpu.json is a broken symbolic link to {target}, where nothing is" in note.text
    pytester.makepyprojecttoml(SMALL_MATRIX)
    pytester.makepyfile(SPEC_TEST)
    (pytester.path / "baselines").mkdir()
    (pytester.path / "baselines" / "cpu.json").symlink_to(target)
    result = pytester.runpytest("--co", "-q")
    result.stdout.fnmatch_lines(["specdec: baselines */baselines/cpu.json (none: */baselines/cpu.json is a broken "
                                 "symbolic link to */share/cpu.json, where nothing is, so nothing is compared; "
                                 "mount or repoint the link, or remove it to start a new baseline)"])
    said = unmatched.missing_file(pytester.path / "baselines" / "cpu.json", settings)
    assert said is not None and "broken symbolic link" in said and "holds no" not in said
