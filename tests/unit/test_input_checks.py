"""Bad flag values, marker arguments and filters stop the run with one line naming the fix."""

from __future__ import annotations

import fnmatch

import pytest

CPU_MATRIX = """
[tool.specdec.matrix.cpu]
methods = ["ar"]
tp = [1]
"""


def _usage_error(result: pytest.RunResult, message: str) -> None:
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines(["ERROR: pytest-specdec: " + message])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize("flag", ["--specdec-report", "--specdec-baseline-dir", "--specdec-artifacts",
                                  "--specdec-gpu-claims", "--specdec-compare-fail"])
def test_an_empty_flag_value_is_a_usage_error(pytester: pytest.Pytester, flag):
    """--specdec-report=$DIR with DIR unset wrote no report, --specdec-baseline-dir= saved into the project."""
    pytester.makepyfile("def test_x(): pass")
    _usage_error(pytester.runpytest(f"{flag}="), f"{flag}: '' is empty (an unset variable?); give *, or leave "
                                                 f"{flag} out")


@pytest.mark.parametrize("flag, message", [
    ("--specdec-journal", "the results journal (--specdec-journal) is */LONG/x.jsonl, which cannot be looked up "
                          "(File name too long); give another path"),
    ("--specdec-artifacts", "the artifacts folder (--specdec-artifacts) is */LONG/x.jsonl, which cannot be looked "
                            "up (File name too long); give another path"),
    ("--specdec-report", "report folder */LONG/x.jsonl cannot be looked up (File name too long); choose another "
                         "--specdec-report"),
    ("--specdec-baseline-dir", "baseline folder */LONG/x.jsonl cannot be looked up (File name too long); choose "
                               "another --specdec-baseline-dir"),
])
def test_a_path_the_file_system_cannot_look_up_is_a_usage_error(pytester: pytest.Pytester, flag, message):
    """A folder name past the file system's limit raised OSError from a path's existence check: INTERNALERROR."""
    pytester.makepyfile("def test_x(): pass")
    long = "n" * 300
    result = pytester.runpytest(f"{flag}={long}/x.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    text = result.stderr.str().replace(long, "LONG")
    assert "Traceback" not in text + result.stdout.str() and "INTERNALERROR" not in text + result.stdout.str()
    assert any(fnmatch.fnmatchcase(line, "ERROR: pytest-specdec: " + message) for line in text.splitlines()), text


@pytest.mark.parametrize("option", ["specdec_report", "specdec_baseline_dir", "specdec_journal"])
def test_an_empty_ini_override_is_a_usage_error_as_its_flag_is(pytester: pytest.Pytester, option):
    """-o specdec_report=$DIR with DIR unset ran on without a report, where --specdec-report= stops;
    named as the `-o` it is, not as "ini specdec_report", which no ini file of the project sets."""
    pytester.makepyfile("def test_x(): pass")
    _usage_error(pytester.runpytest("-o", f"{option}="), f"-o {option}: '' is empty (an unset variable?); "
                                                        f"give *, or leave -o {option} out")
    assert pytester.runpytest().ret == pytest.ExitCode.OK  # unset, it is no value at all


@pytest.mark.parametrize("arg, message", [
    ("--specdec-tpp=1", "unknown flag --specdec-tpp; did you mean --specdec-tp?"),
    ("--specdec-save-baselines", "unknown flag --specdec-save-baselines; did you mean --specdec-save-baseline?"),
    ("--specdec_keep_runs=3", "unknown flag --specdec_keep_runs; did you mean --specdec-keep-runs?"),
    ("--specdec-xyzzy", "unknown flag --specdec-xyzzy; pytest --help lists the plugin's flags under pytest-specdec"),
])
def test_a_misspelt_flag_is_named_with_the_flag_it_likely_means(pytester: pytest.Pytester, arg, message):
    """pytest said only "unrecognized arguments", where a misspelt [tool.specdec] key gets a did-you-mean."""
    pytester.makepyfile("def test_x(): pass")
    _usage_error(pytester.runpytest(arg), message)


@pytest.mark.parametrize("expression, message", [
    ("blackwel", "-m 'blackwel': 'blackwel' is no marker, so no test has it; did you mean 'blackwell'?"),
    ("not Hopper", "-m 'not Hopper': 'Hopper' is no marker, so no test has it; did you mean 'hopper'?"),
    ("gpu and amper", "-m 'gpu and amper': 'amper' is no marker*did you mean 'ampere'?"),
    # an architecture where a family is wanted
    ("sm_120", "-m 'sm_120': 'sm_120' is an architecture, not a marker, so no test has it; its family's marker "
               "is 'blackwell'"),
    ("gpu and not sm90", "*'sm90' is an architecture, not a marker*its family's marker is 'hopper'"),
])
def test_a_misspelt_family_in_a_marker_expression_is_named_with_the_family(pytester: pytest.Pytester,
                                                                          expression, message):
    """-m blackwel deselected every test and said only "no tests collected (1 deselected)"."""
    pytester.makepyfile("def test_x(): pass")
    _usage_error(pytester.runpytest("-m", expression), message)


@pytest.mark.parametrize("expression, message", [
    ("(hopper or blackwel)", "-m '(hopper or blackwel)': 'blackwel' is no marker, so no test has it; did you mean "
                             "'blackwell'?"),
    ("not (blackwel)", "-m 'not (blackwel)': 'blackwel' is no marker, so no test has it; did you mean 'blackwell'?"),
    ("gpu and (cpu or (not sm_120))", "*'sm_120' is an architecture, not a marker*its family's marker is 'blackwell'"),
    ("(specdec(method='ar') or Hoper)", "*'Hoper' is no marker*did you mean 'hopper'?"),
    ("not (cpu and specdec(method='dflsh'))", "*specdec(method='dflsh') has method 'dflsh', which is unknown*"),
])
def test_a_misspelt_marker_inside_parentheses_is_named_as_outside(pytester: pytest.Pytester, expression, message):
    """-m "(hopper or blackwel)" ran hopper alone and passed: the check dropped every parenthesised
    span as if it held a marker's arguments, so a name grouped there was never read."""
    pytester.makepyfile("def test_x(): pass")
    _usage_error(pytester.runpytest("-m", expression), message)


@pytest.mark.parametrize("expression", ["(hopper or blackwel", "specdec(method='dflsh'"])
def test_a_malformed_marker_expression_is_left_to_pytests_own_message(pytester: pytest.Pytester, expression):
    """pytest's grammar reads the expression: one it refuses gets pytest's message, not a guess of ours."""
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("-m", expression)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines(["ERROR: Wrong expression passed to '-m'*"])
    assert "pytest-specdec" not in result.stderr.str()
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize("args, ini", [
    (["-m", "cpu", "-m", "(hopper or blackwel)"], ""),  # pytest selects by the last -m
    ([], "[pytest]\naddopts = -m '(hopper or blackwel)'\n"),
])
def test_a_misspelt_marker_in_parentheses_from_a_second_m_or_addopts_is_named(pytester: pytest.Pytester, args,
                                                                               ini):
    """The -m pytest selects by, however it was given, is read with its parentheses."""
    if ini:
        pytester.makeini(ini)
    pytester.makepyfile("def test_x(): pass")
    _usage_error(pytester.runpytest(*args), "-m '(hopper or blackwel)': 'blackwel' is no marker, so no test has "
                                            "it; did you mean 'blackwell'?")


@pytest.mark.parametrize("expression, message", [
    ("specdec(method='dflsh') or specdec(method='ar')",
     "*specdec(method='dflsh') has method 'dflsh', which is unknown (did you mean 'dflash'?), so it matches no test"),
    ("cpu and not specdec(methd='ar')",
     "*specdec(methd='ar') has unknown keywords methd (did you mean 'method'?), so it matches no test"),
    ("specdec(method='ddtree', tp=3)", "*has tp=3, which is not a power of two (1, 2, 4, 8, ...), so it matches no test"),
    ("specdec(tp='4')", "*has tp='4', which is not a power of two*(a marker's numbers are unquoted)*"),
    ("specdec(budget=0)", "*has budget=0, which is not a whole number of draft nodes, 1 or more*"),
    ("specdec(method='ar', budget=8)", "*has budget=8, but ar takes no budget*so it matches no test"),
])
def test_a_misspelt_configuration_in_a_marker_expression_is_named(pytester: pytest.Pytester, expression, message):
    """-m "specdec(method='dflsh') or specdec(method='ar')" ran ar alone and passed: the misspelt
    configuration dropped out of the run without a word (alone, it deselected every test)."""
    pytester.makepyfile("def test_x(): pass")
    _usage_error(pytester.runpytest("-m", expression), message)


@pytest.mark.parametrize("expression, message", [
    ("specdec(method='8')", "*has method '8', which is unknown (use one of ar, dflash, ddtree), so it matches no test"),
    ("specdec(method='ddtree', tp=3, budget='16')", "*has tp=3, which is not a power of two (1, 2, 4, 8, ...), so it "
                                                    "matches no test"),
])
def test_a_selector_fault_beside_no_quoted_number_is_not_said_to_be_one(pytester: pytest.Pytester, expression,
                                                                          message):
    """specdec(method='8') and a tp=3 beside budget='16' were told "(a marker's numbers are
    unquoted)": the fault named is another keyword's, so the hint named the wrong fix."""
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("-m", expression)
    _usage_error(result, message)
    assert "unquoted" not in result.stderr.str()


@pytest.mark.parametrize("expression", ["blackwell or hopper", "ada", "not gpu", "blackwel", "specdec(method='ar')",
                                        "sm_90", "specdec(method=\"ddtree\", tp=8, budget=16) or cpu",
                                        "(blackwel or sm_90) and not (specdec(method='ar', tp=1))"])
def test_a_marker_expression_of_known_markers_is_left_to_pytest(pytester: pytest.Pytester, expression):
    """Registered markers, and a project's own marker spelt like a family, are not misspellings."""
    pytester.makeini("[pytest]\nmarkers =\n    blackwel: a project's own\n    sm_90: a project's own too\n")
    pytester.makepyfile("def test_x(): pass")
    assert pytester.runpytest("-m", expression).ret in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)


@pytest.mark.parametrize("expression", ["specdec(budget=None)", "specdec(method='ar', budget=None)",
                                        "specdec(method=None) or specdec(method='ddtree', tp=1, budget=16)"])
def test_a_selector_of_none_that_markers_hold_is_left_to_pytest(pytester: pytest.Pytester, expression):
    """A matrix test's marker holds budget=None for ar and dflash (and a hand-written one may say
    method=None): pytest matches None, so `-m "specdec(budget=None)"` selects them and is no misspelling."""
    pytester.makepyfile("import pytest\n"
                        "@pytest.mark.specdec(method='ar', tp=1, budget=None)\ndef test_ar(): pass\n"
                        "@pytest.mark.specdec(method=None, tp=1, budget=None)\ndef test_any(): pass\n"
                        "@pytest.mark.specdec(method='ddtree', tp=1, budget=16)\ndef test_tree(): pass\n")
    result = pytester.runpytest("-m", expression)
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    assert result.parseoutcomes()["passed"] >= 1


@pytest.mark.parametrize("ini, args, message", [
    ("specdec_backnd = embedded", (), "unknown ini key specdec_backnd (in */tox.ini); did you mean specdec_backend?"),
    ("specdec_compare_fail = *:off", ("-o", "specdec_stal_timeout=5"),
     "unknown ini key specdec_stal_timeout (given with -o); did you mean specdec_stall_timeout?"),
    ("specdec_xyzzy = 1", (), "unknown ini key specdec_xyzzy (in *); pytest --help lists the plugin's ini keys "
                              "beside its flags"),
])
def test_a_misspelt_ini_key_is_named_with_the_key_it_likely_means(pytester: pytest.Pytester, ini, args, message):
    """pytest only warned of an unknown ini key, in the warnings summary after the whole run: a
    misspelt `specdec_stal_timeout` measured everything under the default it meant to change."""
    pytester.makeini("[pytest]\n" + ini)
    pytester.makepyfile("def test_x(): pass")
    _usage_error(pytester.runpytest(*args), message)


@pytest.mark.parametrize("args, message", [
    (["--specdec-gpus=65"], "--specdec-gpus: '65' is more GPUs than one host has; give at most "
                            "64*"),
    (["--specdec-tp=3"], "--specdec-tp: '3': 3 is not a power of two; tensor-parallel sizes are "
                         "1, 2, 4, 8, ...*"),
    (["--specdec-tp=1,6"], "--specdec-tp: '1,6': 6 is not a power of two*"),
    # refused as a repeat in [tool.specdec.matrix] is, not accepted silently
    (["--specdec-tp=1,4,1"], "--specdec-tp: '1,4,1' lists 1 more than once; list each size once; "
                             "--specdec-tp takes: *"),
    (["--specdec-compare-fail=output_tok_s:5%,output_tok_s:3%"],
     "--specdec-compare-fail: metric 'output_tok_s' is given twice in 'output_tok_s:5%,output_tok_s:3%'; "
     "give each metric once*"),
    (["--specdec-arch=sm_999"], "--specdec-arch: 'sm_999': no family known for this architecture*; "
                                "use one of sm_80, *sm_90*sm_120*"),
    # a family where an architecture is wanted is named as such, with its architectures
    (["--specdec-arch=blackwell"], "--specdec-arch: 'blackwell' is a hardware family, not an architecture; give "
                                   "one of its architectures: sm_100, sm_101, sm_103, sm_110, sm_120, sm_121; "
                                   "--specdec-arch takes: *"),
    (["--specdec-arch=Hoper"], "--specdec-arch: 'Hoper' is not an architecture, but close to the hardware family "
                               "'hopper'; give one of its architectures: sm_90; *"),
    (["--specdec-gpu-wait-timeout=inf"], "--specdec-gpu-wait-timeout: 'inf' must be a finite number greater "
                                         "than 0; --specdec-gpu-wait-timeout takes: *"),
])
def test_out_of_range_flag_values_are_usage_errors(pytester: pytest.Pytester, args, message):
    pytester.makepyfile("def test_x(): pass")
    _usage_error(pytester.runpytest(*args), message)


@pytest.mark.parametrize("ini, message", [
    ("specdec_gpus = 100", "ini specdec_gpus: '100' is more GPUs than one host has*"),
    ("specdec_tp = 3", "ini specdec_tp: '3': 3 is not a power of two*"),
    ("specdec_tp = 2,2", "ini specdec_tp: '2,2' lists 2 more than once; list each size once*"),
    ("specdec_compare_fail = ttft_ms:5%,ttft_ms:off", "ini specdec_compare_fail: metric 'ttft_ms' is given "
                                                      "twice in *; give each metric once*"),
    ("specdec_arch = banana", "ini specdec_arch: 'banana' is not a GPU architecture*"),  # once "--specdec-arch"
    ("specdec_arch = ampere", "ini specdec_arch: 'ampere' is a hardware family, not an architecture; give one of "
                              "its architectures: sm_80, sm_86, sm_87; *"),
    # values pytest cannot convert get the option's own words, not int()'s or float()'s
    ("specdec_gpus = two", "ini specdec_gpus: 'two' is not a whole number; --specdec-gpus takes: *"),
    ("specdec_startup_timeout = soon", "ini specdec_startup_timeout: 'soon' is not a number; *"),
    ("specdec_save_baseline = maybe", "ini specdec_save_baseline: 'maybe' is not a boolean (use true or false); *"),
    # a number pytest read is echoed as written, not as the float or int pytest made of it
    ("specdec_stall_timeout = 0", "ini specdec_stall_timeout: '0' must be a finite number greater than 0; *"),
    ("specdec_keep_runs = 00", "ini specdec_keep_runs: '00' must be 1 or more; *"),
    ("specdec_gpu_wait_timeout = -5", "ini specdec_gpu_wait_timeout: '-5' must be a finite number greater than "
                                      "0; --specdec-gpu-wait-timeout takes: seconds a configuration may wait*"),
    ("specdec_gpu_wait_timeout = later", "ini specdec_gpu_wait_timeout: 'later' is not a number; *"),
])
def test_out_of_range_ini_values_are_usage_errors(pytester: pytest.Pytester, ini, message):
    pytester.makeini("[pytest]\n" + ini)
    pytester.makepyfile("def test_x(): pass")
    _usage_error(pytester.runpytest(), message)


@pytest.mark.parametrize("override, message", [
    ("specdec_stall_timeout=0", "-o specdec_stall_timeout: '0' must be a finite number greater than 0; *"),
    ("specdec_startup_timeout=1e-999", "-o specdec_startup_timeout: '1e-999' must be a finite number greater than 0; *"),
    ("specdec_restart_on_crash=-01", "-o specdec_restart_on_crash: '-01' must be 0 or more; *"),
    # a value pytest cannot convert, a boolean, a gate's tolerance: each named as the -o it is
    ("specdec_keep_runs=abc", "-o specdec_keep_runs: 'abc' is not a whole number; --specdec-keep-runs takes: *"),
    ("specdec_strict_noise=maybe", "-o specdec_strict_noise: 'maybe' is not a boolean (use true or false); *"),
    ("specdec_compare_fail=output_tok_s:lots", "-o specdec_compare_fail: tolerance 'lots' for 'output_tok_s' is "
                                               "not a number or percentage *"),
    ("specdec_compare_fail=accept_rate:2", "-o specdec_compare_fail: accept_rate:2 can never fail: *"),
])
def test_an_override_is_echoed_as_the_user_wrote_it(pytester: pytest.Pytester, override, message):
    """`-o specdec_stall_timeout=0` was told "'0.0' must be ...": a value the user never wrote; and
    "ini specdec_stall_timeout: ...", a key the user gave with -o (the ini file's own is valid)."""
    pytester.makeini("[pytest]\nspecdec_stall_timeout = 5\n")
    pytester.makepyfile("def test_x(): pass")
    _usage_error(pytester.runpytest("-o", override), message)


@pytest.mark.parametrize("args", [["--specdec-tp=16"], ["--specdec-tp=2,4"]])
def test_a_tp_filter_that_selects_nothing_is_a_usage_error(pytester: pytest.Pytester, args):
    """Not a green run of "empty parameter set" skips that measured nothing."""
    pytester.makepyprojecttoml(CPU_MATRIX + '\n[tool.specdec.matrix.hopper]\nmethods = ["ar"]\n'
                                            'tp = [1, 8]\n')
    pytester.makepyfile("def test_cell(specdec_spec): pass")
    _usage_error(pytester.runpytest(*args),
                 f"{args[0].replace('=', ' ')} selects no configuration: the matrices have "
                 f"cpu tp = [[]1[]]; hopper tp = [[]1, 8[]]; pick sizes from those*")
    pytester.runpytest("--specdec-tp=8", "--specdec-gpus=8").assert_outcomes(skipped=1)


@pytest.mark.parametrize("where, args, message", [
    ("[tool.specdec]\ntp = [1, 4]\n", [],
     "pyproject.toml ?tool.specdec? key 'tp' ?1, 4? lists 4, which no matrix has (cpu tp = ?1?; hopper tp = ?1, 8?), "
     "so it would not run: at the top, tp only selects among the matrices' sizes; to run at 4, set the sizes in a "
     "matrix, e.g. ?tool.specdec.matrix.cpu? tp = ?1, 4?, and remove tp from the top; or keep tp = ?1?"),
    ("", ["--specdec-tp=1,2,8"], "--specdec-tp 1,2,8 lists 2, which no matrix has (*), so it would not run: it "
                                 "selects among the matrices' sizes and adds none; *or drop it: --specdec-tp=1,8"),
    ("[tool.pytest.ini_options]\nspecdec_tp = \"4,8,16\"\n", [],
     "ini specdec_tp 4,8,16 lists 4, 16, which no matrix has (*), so they would not run: *specdec_tp = \"8\""),
    # the fix of an `-o` is that `-o`, not a line of an ini file the project may not have
    ("", ["-o", "specdec_tp=4,8,16"],
     "-o specdec_tp 4,8,16 lists 4, 16, which no matrix has (*), so they would not run: *or drop it: -o specdec_tp=8"),
])
def test_a_tp_filter_listing_a_size_no_matrix_has_is_a_usage_error(pytester: pytest.Pytester, where, args, message):
    """[tool.specdec]'s tp = [1, 4], written to run at TP 1 and 4, ran the tp1 configurations alone and
    passed: the filter dropped 4, which no matrix listed, without a word."""
    pytester.makepyprojecttoml(where + CPU_MATRIX + '\n[tool.specdec.matrix.hopper]\nmethods = ["ar"]\ntp = [1, 8]\n')
    pytester.makepyfile("def test_cell(specdec_spec): pass")
    _usage_error(pytester.runpytest(*args), message)


@pytest.mark.skipif(pytest.version_tuple < (9,), reason="pytest reads a native [tool.pytest] table from 9.0 on")
@pytest.mark.parametrize("toml, fix", [("specdec_tp = [1, 4]", 'specdec_tp = "1,4"'),
                                       ("specdec_tp = 8", 'specdec_tp = "1,4"'),
                                       ("specdec_shard = 2", 'specdec_shard = "2/4"')])
def test_a_toml_value_that_is_no_string_under_tool_pytest_says_how_to_write_it(
        pytester: pytest.Pytester, toml, fix):
    """pytest's native [tool.pytest] table types its options strictly: [tool.specdec]'s tp = [1, 4]
    there named the type only, not the form the option takes."""
    pytester.makepyprojecttoml(CPU_MATRIX + f"\n[tool.pytest]\n{toml}\n")
    pytester.makepyfile("def test_x(): pass")
    _usage_error(pytester.runpytest(), f"ini {toml.split()[0]}: *expects a string, got *; an ini value is "
                                       f"written as on the command line, in quotes: {fix}*")


@pytest.mark.parametrize("toml, message", [
    ("specdec_tp = [1, 1]", "ini specdec_tp: ?1, 1? lists 1 more than once; list each size once: specdec_tp = \"1\";*"),
    ("specdec_backend = ['sglang']", "ini specdec_backend: ?'sglang'? must be a string: an ini value is written as on "
                                     "the command line, in quotes: specdec_backend = \"embedded\";*"),
])
def test_a_toml_value_under_ini_options_is_told_the_fix_under_its_ini_key(pytester: pytest.Pytester, toml, message):
    """[tool.pytest.ini_options] passes TOML lists on: their errors gave the fix as [tool.specdec]'s tp = [1] or
    backend = "embedded", keys that table does not have."""
    pytester.makepyprojecttoml(CPU_MATRIX + f"\n[tool.pytest.ini_options]\n{toml}\n")
    pytester.makepyfile("def test_x(): pass")
    _usage_error(pytester.runpytest(), message)


@pytest.mark.parametrize("warnings", [[], ["-W", "error"]])
def test_a_toml_list_under_ini_options_warns_of_no_pytest_deprecation(pytester: pytest.Pytester, recwarn,
                                                                       warnings):
    """specdec_tp = [1, 4] under [tool.pytest.ini_options] made pytest 9 warn that a string-typed
    option given a list will be a TypeError (PytestRemovedIn10Warning), and -W error stopped the run
    with that warning's text as the plugin's error."""
    pytester.makepyprojecttoml(CPU_MATRIX + "\n[tool.pytest.ini_options]\nspecdec_tp = [1]\n"
                                            "markers = [\"slow: a slow test\"]\n")
    pytester.makepyfile("def test_cell(specdec_spec): pass")
    result = pytester.runpytest("--collect-only", *warnings)
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    assert "Warning" not in result.stdout.str() + result.stderr.str()
    assert [str(w.message) for w in recwarn if issubclass(w.category, DeprecationWarning)] == []
    result.stdout.fnmatch_lines(["specdec: settings tp=1 (ini)"])


def test_a_tp_filter_repeating_a_size_in_tool_specdec_is_refused_naming_the_key(pytester: pytest.Pytester):
    pytester.makepyprojecttoml("[tool.specdec]\ntp = [4, 1, 4]\n" + CPU_MATRIX)
    pytester.makepyfile("def test_x(): pass")
    _usage_error(pytester.runpytest(), "pyproject.toml ?tool.specdec? key 'tp': ?4, 1, 4? lists 4 more than once; "
                                               "list each size once: tp = ?4, 1?;*")  # ? for fnmatch's [ ]


def test_a_tp_filter_from_the_ini_is_named_as_such(pytester: pytest.Pytester):
    pytester.makepyprojecttoml(CPU_MATRIX + '\n[tool.pytest.ini_options]\nspecdec_tp = "4"\n')
    pytester.makepyfile("def test_cell(specdec_spec): pass")
    _usage_error(pytester.runpytest(), "ini specdec_tp 4 selects no configuration*")


@pytest.mark.parametrize("marker, message", [
    ('gpus("two")', "@pytest.mark.gpus('two') is not a GPU count; write @pytest.mark.gpus(n) "
                    "with n a whole number of GPUs, 1 or more*"),
    ('gpus(n="x")', "@pytest.mark.gpus(n='x') is not a GPU count*"),
    ("gpus(1.5)", "@pytest.mark.gpus(1.5) is not a GPU count*"),
    ("gpus(-1)", "@pytest.mark.gpus(-1) is not a GPU count*"),
    ("gpus()", "@pytest.mark.gpus() is not a GPU count*"),
    ('specdec("ddtree", 4)', "@pytest.mark.specdec('ddtree', 4) takes keywords only; write "
                             "@pytest.mark.specdec(method=..., tp=..., budget=...)*"),
    ('specdec(method="ddtre")', "@pytest.mark.specdec(method='ddtre') has method 'ddtre', which "
                                "is unknown (did you mean 'ddtree'?); write*"),
    ('specdec(method="medusa")', "*has method 'medusa', which is unknown (use one of ar, dflash, ddtree)*"),
    ('specdec(method="ddtree", tp=3)', "*has tp=3, which is not a power of two*"),
    ('specdec(method="ddtree", budget="big")', "*has budget='big', which is not a whole number*"),
    ('specdec(method="ddtree", tree=8)', "*has unknown keywords tree*"),
    ('specdec(method="ar", budget=8)', "*has budget=8, but ar takes no budget (a tree budget is ddtree's)*"),
])
def test_bad_marker_arguments_are_usage_errors_naming_the_test(pytester: pytest.Pytester,
                                                                marker, message):
    pytester.makepyfile(test_marked=f"import pytest\n\n@pytest.mark.{marker}\n"
                                    f"def test_plain():\n    pass\n")
    _usage_error(pytester.runpytest(), "test_marked.py::test_plain: " + message)


def test_a_hand_written_specdec_marker_on_a_matrix_test_is_an_error(pytester: pytest.Pytester):
    """It overrode each configuration's own marker, so known issues matched the marker's
    configuration, not the one the test ran (an expected failure passed as a plain pass)."""
    pytester.makepyprojecttoml("[tool.specdec]\nbackend = 'embedded'\n[tool.specdec.matrix.cpu]\n"
                               "methods = ['ddtree']\nbudget = [8]\n[[tool.specdec.known_issues]]\n"
                               "method = 'ddtree'\nbudget = [8]\nreason = 'crashes'\n")
    pytester.makepyfile(test_marked="import pytest\n\n@pytest.mark.specdec(method='ar')\n"
                                    "def test_x(specdec_spec):\n    pass\n")
    _usage_error(pytester.runpytest(), "test_marked.py::test_x[[]ddtree-tp1-b8[]]: "
                 "@pytest.mark.specdec(method='ar') names another configuration than the matrix's "
                 "ddtree-tp1-b8 this test runs*")
    pytester.makepyfile(test_marked="def test_x(specdec_spec):\n    pass\n")
    result = pytester.runpytest("-rX")  # the known issue applies: its strict xfail passing is a failure
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*XPASS(strict)*known issue: crashes*"])


def test_a_bad_marker_on_a_test_that_skips_is_still_an_error(pytester: pytest.Pytester):
    """Else the mistake shows only on the hardware the test targets."""
    pytester.makepyfile(test_marked="import pytest\n\n@pytest.mark.blackwell\n"
                                    "@pytest.mark.gpus('two')\n@pytest.mark.specdec(method='ar')\n"
                                    "def test_plain():\n    pass\n")
    _usage_error(pytester.runpytest("--specdec-arch=sm_90"),
                 "test_marked.py::test_plain: @pytest.mark.gpus('two') is not a GPU count*")
    pytester.makepyfile(test_marked="import pytest\n\n@pytest.mark.blackwell\n"
                                    "@pytest.mark.specdec(method='ddtre')\n"
                                    "def test_plain():\n    pass\n")
    _usage_error(pytester.runpytest("--specdec-arch=sm_90"), "*has method 'ddtre'*")


def test_good_marker_arguments_still_work(pytester: pytest.Pytester):
    pytester.makepyfile(test_marked="import pytest\n\n@pytest.mark.gpus(n=2)\n"
                                    "@pytest.mark.specdec(method='ddtree', tp=2, budget=8)\n"
                                    "def test_plain():\n    pass\n")
    pytester.runpytest("--specdec-gpus=2").assert_outcomes(passed=1)
    pytester.runpytest("--specdec-gpus=1").assert_outcomes(skipped=1)


def test_under_xdist_a_marker_mistake_and_a_tp_filter_stop_the_run_as_one_process_does(pytester: pytest.Pytester):
    """xdist workers collect, and a usage error raised there crashed the worker (INTERNALERROR), so
    the marked test failed with the message while the others ran: the run's outcome hung on -n.
    The worker hands the error to the controller (`WorkerStop`), which ends the run with it. The tp
    filter needs no items, so it is checked at configure time, before any worker starts."""
    pytester.makepyprojecttoml(CPU_MATRIX)
    pytester.makepyfile(test_marked="import pytest\n\n@pytest.mark.gpus('two')\ndef test_plain():\n    pass\n\n"
                                    "def test_other():\n    pass\n")
    for workers in ([], ["-n", "2"]):
        result = pytester.runpytest(*workers, "-p", "no:cacheprovider")
        _usage_error(result, "test_marked.py::test_plain: @pytest.mark.gpus('two') is not a GPU count*")
        assert result.stderr.str().count("ERROR: pytest-specdec:") == 1, result.stderr.str()
        assert "passed" not in result.stdout.str() and "node down" not in result.stdout.str(), result.stdout.str()
    pytester.makepyfile(test_marked="def test_cell(specdec_spec): pass")
    stopped = pytester.runpytest("-n", "2", "-p", "no:cacheprovider", "--specdec-tp=4")
    assert stopped.ret == pytest.ExitCode.USAGE_ERROR
    stopped.stderr.fnmatch_lines(["*--specdec-tp 4 selects no configuration*"])


@pytest.mark.parametrize("flag, name", [
    ("--specdec-report", "out"), ("--specdec-artifacts", "artifacts"), ("--specdec-gpu-claims", "claims"),
    ("--specdec-baseline-dir", "baselines"), ("--specdec-journal", "journal.jsonl"),
])
def test_a_spaced_path_outside_the_project_that_moved_the_rootdir_is_a_usage_error(
        pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory, flag, name):
    """pytest settles its rootdir before it loads the plugin, so the value was a test path then:
    the rootdir moved to it and the project's matrix (one configuration here) was not read."""
    pytester.makepyprojecttoml(CPU_MATRIX)
    pytester.makepyfile("def test_cell(specdec_spec): pass")
    value = tmp_path_factory.mktemp("elsewhere") / name
    if name.endswith(".jsonl"):
        value.touch()
    else:
        value.mkdir()
    _usage_error(pytester.runpytest("--co", flag, str(value)),
                 f"{flag} {value}: pytest chooses its rootdir and config file before it knows this plugin's "
                 f"options, so it took this value for test paths and settled on rootdir {value.parent.parent} "
                 f"and no config file instead of rootdir {pytester.path} and config file "
                 f"{pytester.path / 'pyproject.toml'}: the project's configuration was not read. Join each "
                 f"value to its flag with '=': {flag}={value}")
    pytester.runpytest("--co", "-q", f"{flag}={value}").stdout.fnmatch_lines(["1 test collected*"])


def test_only_flags_with_their_value_in_the_next_argument_count_as_spaced():
    from pytest_specdec.early_args import Spaced, spaced_values

    assert spaced_values(["--specdec-report", "a", "--specdec-journal=b", "--specdec-resume", "c", "--",
                          "--specdec-artifacts", "d"]) == [Spaced("--specdec-report", "a")]


def test_a_spaced_value_no_file_can_be_named_is_no_crash(pytester: pytest.Pytester):
    """A value too long for a file name is not a path: its own check names it, no INTERNALERROR."""
    pytester.makepyprojecttoml(CPU_MATRIX)
    pytester.makepyfile("def test_cell(specdec_spec): pass")
    result = pytester.runpytest("--co", "-q", "--specdec-compare-fail", "x" * 300)
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--specdec-compare-fail*"])


def test_spaced_values_that_leave_the_rootdir_alone_are_fine(pytester: pytest.Pytester,
                                                              tmp_path_factory: pytest.TempPathFactory):
    """In the project, or beside a test path that settles the rootdir anyway: no false alarm."""
    pytester.makepyprojecttoml(CPU_MATRIX)
    pytester.makepyfile("def test_cell(specdec_spec): pass")
    pytester.mkdir("out")
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    for args in (["--specdec-report", "out"], ["--specdec-report", str(pytester.path / "out")],
                 [str(pytester.path), "--specdec-artifacts", str(elsewhere)],
                 ["--specdec-backend", "embedded", "--specdec-tp", "1"]):
        result = pytester.runpytest("--co", "-q", *args)
        assert result.ret == pytest.ExitCode.OK, (args, result.stderr.str())
        result.stdout.fnmatch_lines(["1 test collected*"])


@pytest.mark.parametrize("where, set_it", [
    ("--specdec-reference", lambda p, v: p.runpytest(f"--specdec-reference={v}")),
    ("ini specdec_reference", lambda p, v: (p.makeini(f"[pytest]\nspecdec_reference = {v}\n"), p.runpytest())[1]),
    ("pyproject.toml [[]tool.specdec] key 'reference'",  # [[] is fnmatch's [
     lambda p, v: (p.makepyprojecttoml(f"[tool.specdec]\nreference = \"{v}\"\n"), p.runpytest())[1]),
])
@pytest.mark.parametrize("value, problem", [
    # ddtree is refused as the reference, so no list or guess may offer it
    ("medusa", "'medusa' is not a method; use one of ar, dflash;"),
    ("ddtre", "'ddtre' is not a method ('ddtree', if meant, has a configuration per tree budget and cannot "
              "be the reference); use one of ar, dflash;"),
    ("dflsh", "'dflsh' is not a method; did you mean 'dflash'?"),
])
def test_a_bad_reference_is_offered_only_methods_a_reference_can_be(pytester: pytest.Pytester, where, set_it,
                                                                      value, problem):
    pytester.makepyfile("def test_x(): pass")
    result = set_it(pytester, value)
    _usage_error(result, f"{where}: {problem}*")
    assert "ddtree" not in result.stderr.str().replace("'ddtree', if meant", "")


def test_a_usage_error_only_an_xdist_worker_meets_ends_the_run_as_one_line(pytester: pytest.Pytester):
    """The controller reads the prompts on descriptor 3, its workers inherit no such descriptor: the
    worker's usage error crashed it ("node down", a traceback, a replacement crashing too) and the
    run ended as "no tests ran"; it ends as a single process's usage error, once."""
    import subprocess
    import sys

    pytester.makepyprojecttoml(CPU_MATRIX + '\n[[tool.specdec.workloads]]\nname = "mine"\nprompts = "/dev/fd/3"\n')
    pytester.path.joinpath("prompts.jsonl").write_text('{"prompt": "hello"}\n')
    pytester.makepyfile("def test_cell(specdec_spec, specdec_workload): pass")
    run = subprocess.run(["bash", "-c", f"exec {sys.executable} -m pytest -p no:cacheprovider -p xdist -n 1 "
                                        f"3< prompts.jsonl"],
                         cwd=pytester.path, capture_output=True, text=True, timeout=300)
    result = pytest.RunResult(run.returncode, run.stdout.splitlines(), run.stderr.splitlines(), 0)
    _usage_error(result, "*key 'prompts': /dev/fd/3 is a named pipe (FIFO)*workers inherit none*")
    assert run.stderr.count("ERROR: pytest-specdec:") == 1, run.stderr
    assert "node down" not in run.stdout and "crashed" not in run.stdout, run.stdout


def test_a_journal_resume_cannot_read_at_collection_is_a_usage_error_with_or_without_xdist(pytester: pytest.Pytester):
    """The journal is checked at configure time, and read under --specdec-resume at collection: one
    made a pipe in between raised out of the collection hook, an INTERNALERROR traceback in one
    process and in an xdist worker alike. Both end as the usage error configure time gives."""
    pytester.makepyprojecttoml(CPU_MATRIX)
    pytester.makepyfile("def test_cell(specdec_spec): pass")
    pytester.makeconftest("import os\nimport pytest\n\n\n@pytest.hookimpl(tryfirst=True)\n"
                          "def pytest_collection_modifyitems(config):\n"
                          "    if not os.path.exists('journal.jsonl'):  # after the configure-time check\n"
                          "        os.mkfifo('journal.jsonl')\n")
    for workers in ([], ["-n", "1"]):
        pytester.path.joinpath("journal.jsonl").unlink(missing_ok=True)
        result = pytester.runpytest(*workers, "-p", "no:cacheprovider", "--specdec-resume",
                                    "--specdec-journal=journal.jsonl")
        _usage_error(result, "results journal */journal.jsonl is a named pipe (FIFO), not a regular file*")
        assert result.stderr.str().count("ERROR: pytest-specdec:") == 1, result.stderr.str()


@pytest.mark.parametrize("args, message", [
    (["--specdec-keep-runs=3", "--specdec-keep-runs=5"],
     "--specdec-keep-runs is given twice on the command line, as '3' and '5', and only the last would count; "
     "give it once"),
    (["--specdec-backend", "embedded", "-q", "--specdec-backend=auto"],
     "--specdec-backend is given twice on the command line, as 'embedded' and 'auto', *; give it once"),
    (["--specdec-compare-fail=output_tok_s:5%", "--specdec-compare-fail=ttft_ms:10%"],
     "--specdec-compare-fail is given twice *; give it once, with all of them in one value "
     "(e.g. --specdec-compare-fail=output_tok_s:5%,ttft_ms:10%)"),
    (["-o", "specdec_keep_runs=3", "--override-ini=specdec_keep_runs=5"],
     "-o specdec_keep_runs is given twice on the command line, as '3' and '5', and only the last would count; "
     "give it once"),
])
def test_a_flag_given_twice_with_different_values_is_a_usage_error(pytester: pytest.Pytester, args, message):
    """argparse kept the last value without a word: a second --specdec-compare-fail dropped the first's gate."""
    pytester.makepyfile("def test_x(): pass")
    _usage_error(pytester.runpytest(*args), message)


def test_a_flag_repeated_with_its_value_or_over_addopts_runs(pytester: pytest.Pytester):
    """One value given twice means one thing; the command line over addopts is the documented precedence."""
    pytester.makepyprojecttoml("[tool.pytest.ini_options]\naddopts = \"--specdec-keep-runs=3\"\n")
    pytester.makepyfile("def test_x(): pass")
    assert pytester.runpytest("--specdec-keep-runs=5", "--specdec-keep-runs", "5").ret == pytest.ExitCode.OK


@pytest.mark.parametrize("lines, args", [
    (["--specdec-keep-runs=3"], ["--specdec-keep-runs=5"]),
    (["--specdec-keep-runs=3", "--specdec-keep-runs", "5"], []),
    (["@more.txt"], ["--specdec-keep-runs=5"]),
    (["-o", "specdec_keep_runs=3"], ["-o", "specdec_keep_runs=5"]),
])
def test_a_flag_given_twice_through_an_argument_file_is_a_usage_error(pytester: pytest.Pytester, lines, args):
    """pytest reads `@FILE`'s lines as arguments (argparse's fromfile_prefix_chars), nested files too:
    the check read `@args.txt` as one argument and let its values be dropped without a word."""
    pytester.makepyfile("def test_x(): pass")
    pytester.path.joinpath("more.txt").write_text("--specdec-keep-runs=3\n")
    pytester.path.joinpath("args.txt").write_text("\n".join(lines) + "\n")
    result = pytester.runpytest("@args.txt", *args)
    _usage_error(result, "* is given twice on the command line, as '3' and '5', and only the last would count; "
                         "give it once")


def test_an_argument_file_with_one_value_runs(pytester: pytest.Pytester):
    """A file's value repeated on the command line with the same value is one value."""
    pytester.makepyfile("def test_x(): pass")
    pytester.path.joinpath("args.txt").write_text("--specdec-keep-runs=3\n")
    assert pytester.runpytest("@args.txt", "--specdec-keep-runs", "3").ret == pytest.ExitCode.OK


@pytest.mark.parametrize("spelling", [
    ["-ospecdec_keep_runs=3"], ["-qo", "specdec_keep_runs=3"], ["-qospecdec_keep_runs=3"],
    ["-vqo", "specdec_keep_runs=3"], ["-sxospecdec_keep_runs=3"], ["--override-ini", "specdec_keep_runs=3"],
])
def test_an_ini_key_given_twice_in_any_spelling_of_o_is_a_usage_error(pytester: pytest.Pytester, spelling):
    """argparse reads `-qo KEY=V` and `-qoKEY=V` as `-q -o KEY=V` (combined short options): the check
    read only `-o` standing first in its argument, and let the combined one's value be dropped."""
    pytester.makepyfile("def test_x(): pass")
    _usage_error(pytester.runpytest(*spelling, "-o", "specdec_keep_runs=5"),
                 "-o specdec_keep_runs is given twice on the command line, as '3' and '5', *")


@pytest.mark.parametrize("args, message", [
    (["--specdec-keep-runs=3", "-o", "specdec_keep_runs=5"],
     "--specdec-keep-runs=3 and -o specdec_keep_runs=5 are both given on the command line, and only the flag "
     "would count (a flag wins over its ini key whatever the order); give one of them"),
    (["-qospecdec_keep_runs=5", "--specdec-keep-runs", "3"],
     "--specdec-keep-runs=3 and -o specdec_keep_runs=5 are both given on the command line, *"),
    (["--specdec-strict-noise", "--override-ini=specdec_strict_noise=false"],
     "--specdec-strict-noise and -o specdec_strict_noise=false are both given on the command line, *"),
])
def test_a_flag_and_its_o_twin_with_different_values_are_a_usage_error(pytester: pytest.Pytester, args, message):
    """pytest takes the flag over `-o` of its ini key whatever their order, without a word: both typed
    in one command, one of them is a slip, as a repeated flag is."""
    pytester.makepyfile("def test_x(): pass")
    _usage_error(pytester.runpytest(*args), message)


def test_a_flag_over_its_o_twin_with_one_value_or_over_ini_and_addopts_runs(pytester: pytest.Pytester,
                                                                             monkeypatch: pytest.MonkeyPatch):
    """One value in two spellings means one thing; a flag over the ini file's value, or over `-o` in
    addopts or PYTEST_ADDOPTS, is the documented precedence."""
    pytester.makepyprojecttoml("[tool.pytest.ini_options]\nspecdec_keep_runs = \"2\"\n"
                               "addopts = \"-o specdec_keep_runs=3\"\n")
    monkeypatch.setenv("PYTEST_ADDOPTS", "-o specdec_keep_runs=4")
    pytester.makepyfile("def test_x(): pass")
    assert pytester.runpytest("--specdec-keep-runs=5", "-qo", "specdec_keep_runs= 5").ret == pytest.ExitCode.OK
    assert pytester.runpytest("--specdec-strict-noise", "-o", "specdec_strict_noise=yes").ret == pytest.ExitCode.OK


def test_compare_fail_beside_its_o_twin_runs_both_layers(pytester: pytest.Pytester):
    """--specdec-compare-fail and -o specdec_compare_fail are two layers of one gate (the flag's
    figures first, the ini's for the rest), not a flag that silently wins: both count, so no refusal."""
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--specdec-compare-fail=tpot_ms:5%", "-o", "specdec_compare_fail=ttft_ms:10%")
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()


def test_an_ini_key_given_twice_with_o_and_an_equals_sign_is_a_usage_error(pytester: pytest.Pytester):
    """argparse reads `-o=KEY=VALUE` as `-o KEY=VALUE`; the check read the key as '' and passed it."""
    pytester.makepyfile("def test_x(): pass")
    _usage_error(pytester.runpytest("-o=specdec_keep_runs=3", "-o", "specdec_keep_runs=5"),
                 "-o specdec_keep_runs is given twice on the command line, as '3' and '5', *")


def test_a_pytest_whose_tokens_changed_shape_leaves_m_unchecked(monkeypatch):
    """0f03720 guarded the import and the scanner's construction, but the walk over its tokens read
    their private `type`, `value` and `pos` unguarded: a pytest whose Token lost one failed every run
    given -m with an AttributeError, where -m should go unchecked."""
    from collections import namedtuple

    from _pytest.mark import expression

    from pytest_specdec.flag_typos import marker_uses

    Token = namedtuple("Token", "type value")  # no pos
    real = expression.Scanner

    class Scanner(real):
        def __init__(self, text, *args, **kwargs):
            super().__init__(text, *args, **kwargs)
            self.tokens = (Token(t.type, t.value) for t in list(self.tokens))

    assert [use.name for use in marker_uses("specdec(method='x') or hopper")] == ["specdec", "hopper"]
    monkeypatch.setattr(expression, "Scanner", Scanner)
    assert marker_uses("specdec(method='x') or hopper") == []
