"""The sglang backend end to end, on a CPU: `[tool.specdec.sglang] python` is fake_sglang.py, which
checks each launch's flags with SGLang's own parser (0.5.23, its reference copy) and serves them
with the embedded engine. So the argv the plugin builds per (method, TP, budget), the GPUs each
server is given, readiness and failures from SGLang-style logs, and teardown of SGLang's process
tree (a scheduler per TP rank) are all real; only the model is not.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from test_guards_flow import AFTER_DDTREE  # noqa: E402

STAND_IN = Path(__file__).with_name("fake_sglang.py")

GENERATION_TEST = """
def test_generation(specdec_server, specdec_workload, specdec_record):
    assert specdec_record.run(specdec_server, specdec_workload).completion_tokens > 0
"""


@pytest.fixture
def sglang_project(pytester: pytest.Pytester, sglang_reference: Path, monkeypatch: pytest.MonkeyPatch):
    """A project whose SGLang is the stand-in: `write(matrix, sglang=...)` writes its config."""
    python = pytester.path / "sglang-python"
    python.write_text(f"#!/bin/sh\nFAKE_SGLANG_REF={sglang_reference} exec {sys.executable} {STAND_IN} \"$@\"\n")
    python.chmod(0o755)
    for name in ("target", "draft"):
        (pytester.path / "models" / name).mkdir(parents=True)
    monkeypatch.setenv("FAKE_SGLANG_RECORD", str(pytester.path / "launches.jsonl"))
    monkeypatch.delenv("FAKE_SGLANG_FAULTS", raising=False)
    monkeypatch.setenv("FAKE_SGLANG_PR", "1")

    def write(matrix: str, sglang: str = "") -> None:
        pytester.makepyprojecttoml(f"""
[tool.specdec]
model = "models/target"
draft_model = "models/draft"
startup_timeout = 60

[tool.specdec.matrix.hopper]
{matrix}

[[tool.specdec.workloads]]
name = "chat"
prompts = "chat"
num_prompts = 2
max_new_tokens = 24
concurrency = 2

[tool.specdec.sglang]
python = "{python}"
{sglang}
""")
        pytester.makepyfile(test_generation=GENERATION_TEST)
        # the stand-in's GPUs are FAKE_SGLANG_GPUS's, whatever this host has (and its claims are no GPU's)
        pytester.makeconftest("from pytest_specdec import hardware\n"
                              "hardware.detect = lambda: hardware.Hardware((), 'none', physical_gpus=0)\n")

    yield write
    leftovers = server_processes(pytester.path)
    assert leftovers == [], f"processes of the SGLang stand-in survived the session: {leftovers}"


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:benchmark", "-rA",
                                         "--specdec-backend=sglang", "--specdec-arch=sm_90", *args, timeout=240)


def launches(pytester: pytest.Pytester) -> list[dict]:
    path = pytester.path / "launches.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def server_processes(root: Path, wait: float = 10.0) -> list[str]:
    """Servers (the stand-in serves in its own process) and scheduler children started from the
    project at `root`, after up to `wait` s."""
    deadline = time.monotonic() + wait
    while True:
        found = []
        for entry in Path("/proc").iterdir():
            try:
                args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                cwd = os.readlink(entry / "cwd")
            except OSError:
                continue
            if ("sglang.launch_server" in args or "sglang::scheduler" in args) and cwd.startswith(str(root)):
                found.append(f"{entry.name} {args}")
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def test_each_configuration_gets_sglangs_flags_and_its_own_gpus(pytester, sglang_project, monkeypatch):
    monkeypatch.setenv("FAKE_SGLANG_GPUS", "2")
    sglang_project('methods = ["ar", "dflash", "ddtree"]\ntp = [1, 2]\nbudget = [8]',
                   sglang='extra_args = ["--mem-fraction-static", "0.8"]')
    result = run(pytester, "--specdec-gpus=2", *(f"test_generation.py::test_generation[hopper-{config}-chat]"
                                                  for config in ("ar-tp1", "ddtree-tp1-b8", "dflash-tp2")))
    result.assert_outcomes(passed=3)
    seen = {(r["args"]["speculative_algorithm"], r["args"]["tp_size"]): r for r in launches(pytester)}
    assert set(seen) == {(None, 1), ("DDTREE", 1), ("DFLASH", 2)}
    for record in seen.values():
        args = record["args"]
        assert args["model_path"] == str(pytester.path / "models" / "target")
        assert (args["host"], args["log_level"], args["random_seed"], args["enable_metrics"]) == \
            ("127.0.0.1", "info", 0, True)
        assert record["argv"][-2:] == ["--mem-fraction-static", "0.8"]
        assert len(record["cuda_visible_devices"].split(",")) == args["tp_size"]
    assert seen[(None, 1)]["args"]["speculative_draft_model_path"] is None
    assert seen[("DDTREE", 1)]["args"]["speculative_ddtree_budget"] == 8
    assert seen[("DFLASH", 2)]["args"]["speculative_draft_model_path"] == str(pytester.path / "models" / "draft")
    assert seen[("DFLASH", 2)]["cuda_visible_devices"] == "0,1"


def test_the_num_draft_tokens_preset_runs_on_upstreams_parser(pytester, sglang_project, monkeypatch):
    monkeypatch.setenv("FAKE_SGLANG_PR", "0")
    sglang_project('methods = ["ddtree"]\ntp = [1]\nbudget = [8]', sglang='method_flags = "num-draft-tokens"')
    run(pytester).assert_outcomes(passed=1)
    assert launches(pytester)[0]["args"]["speculative_num_draft_tokens"] == 9


def test_upstreams_parser_refusing_the_default_preset_is_named(pytester, sglang_project, monkeypatch):
    monkeypatch.setenv("FAKE_SGLANG_PR", "0")
    sglang_project('methods = ["ddtree"]\ntp = [1]\nbudget = [8]')
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([
        "server ddtree-tp1-b8 cannot start: its command line was refused (sglang serve: error: unrecognized "
        "arguments: --speculative-ddtree-budget 8); match [[]tool.specdec.sglang[]] method_flags to this SGLang "
        "build*"])


def test_failures_read_from_sglang_style_logs(pytester, sglang_project, monkeypatch):
    monkeypatch.setenv("FAKE_SGLANG_FAULTS", json.dumps({
        "ddtree-b8": ["--fault-crash-warmup"], "ddtree-b16": ["--fault-crash-after", "1"],
        "dflash": ["--fault-zero-tokens"]}))
    sglang_project('methods = ["dflash", "ddtree"]\ntp = [2]\nbudget = [8, 16]')
    result = run(pytester, "--specdec-gpus=2")
    result.assert_outcomes(failed=2, errors=1)
    # "(exited with code 1)" only where the process had exited when its log was read
    for line in ("server ddtree-tp2-b8 crashed during warm-up*: CUDA out of memory*",
                 # the warm-up's two requests meet the faults first, and say so
                 "workload 'chat', during its warm-up (2 untimed requests before it is measured): server "
                 "ddtree-tp2-b16 died: CUDA error: an illegal instruction was encountered*",
                 "server dflash-tp2: workload 'chat', during its warm-up (2 untimed requests before it is measured): "
                 "the server produced zero completion tokens for all 2 *"):
        result.stdout.fnmatch_lines([line])


def long_prompts(pytester: pytest.Pytester, truncate: bool) -> None:
    """The chat workload becomes one 300-character prompt (301 tokens), 64 new tokens each."""
    pytester.path.joinpath("long.jsonl").write_text(json.dumps({"prompt": "x" * 300}) + "\n")
    path = pytester.path / "pyproject.toml"
    path.write_text(path.read_text().replace('prompts = "chat"', f'prompts = "long.jsonl"\ntruncate = '
                                             f'{str(truncate).lower()}').replace("max_new_tokens = 24",
                                                                                 "max_new_tokens = 64"))


def test_truncate_cuts_prompts_by_each_servers_own_count(pytester, sglang_project):
    """`truncate = true` was not applied on the sglang backend, which had no count of the model's
    tokens: the prompt too long for the context failed its requests. The server's /v1/tokenize
    counts now, so the prompts are cut to fit (190 tokens + 64 new, 256 - 2 at most)."""
    sglang_project('methods = ["ar"]\ntp = [1]', sglang='extra_args = ["--context-length", "256"]')
    long_prompts(pytester, truncate=True)
    result = run(pytester)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["specdec: context guard: prompt tokens counted by each server's /v1/tokenize "
                                 "(SGLang 0.5.3.post1 and later); a server without it is not guarded, and "
                                 "truncate is not applied to it (workload chat)*"])
    assert "has no /v1/tokenize" not in result.stdout.str()


def test_a_prompt_too_long_is_refused_by_the_servers_count(pytester, sglang_project):
    """The guard was off on the sglang backend: the workload's requests failed at the server."""
    sglang_project('methods = ["ar"]\ntp = [1]', sglang='extra_args = ["--context-length", "256"]')
    long_prompts(pytester, truncate=False)
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*server ar-tp1: workload 'chat', prompt 1: 301 prompt tokens + 64 max_new_tokens = 365, but the server "
        "(context length 256) serves a request in full only up to 254 tokens, *; * (prompt tokens counted by the "
        "server's tokenizer "
        "(/v1/tokenize))"])


def test_a_release_without_tokenize_runs_the_workload_as_it_stands_and_says_so(pytester, sglang_project,
                                                                               monkeypatch):
    """Before 0.5.3.post1 SGLang has no /v1/tokenize: the prompts go out uncut, as they did, the
    server refuses the one too long, and a warning names the endpoint it lacks."""
    monkeypatch.setenv("FAKE_SGLANG_NO_TOKENIZE", "1")
    sglang_project('methods = ["ar"]\ntp = [1]', sglang='extra_args = ["--context-length", "256"]')
    long_prompts(pytester, truncate=True)
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*The input (301 tokens) is longer than the model's context length (256 tokens)*"])
    result.stdout.fnmatch_lines(["*server ar-tp1 has no /v1/tokenize (SGLang before 0.5.3.post1), so workload "
                                 "'chat' was not checked against its context length and its truncate = true was "
                                 "not applied: a prompt too long fails its requests*"])




# Each verdict once and each --dist mode once: the fix (the worker's skip, the controller's late
# verdict) takes the same path under both modes, and every one of the four pairs failed on the old code.
@pytest.mark.parametrize("dist, lossy", [("load", True), ("loadgroup", False)], ids=["lossy-load", "fixed-loadgroup"])
def test_a_non_strict_known_issue_measured_before_its_reference_is_no_xpass(
        pytester, sglang_project, monkeypatch, dist, lossy):
    """A dry run on a backend that does not reproduce known issues marks them non-strict. Under
    xdist, ddtree (a known issue) ended before ar, its reference: nothing compared its outputs, and
    it read XPASS. Now it skips as not compared, and its row gets the verdict once ar's outputs come:
    xfailed where they differ, xpassed where they match."""
    sglang_project('methods = ["ar", "ddtree"]\ntp = [1]\nbudget = [8]', "")
    with (pytester.path / "pyproject.toml").open("a") as config:
        config.write('\n[[tool.specdec.known_issues]]\nmethod = "ddtree"\nbudget = [8]\n'
                     'reason = "wrong drafts"\n')
    pytester.makeconftest((pytester.path / "conftest.py").read_text() + AFTER_DDTREE)
    if lossy:
        # a wrong acceptance at every step it can take one: at 0.3 a draw once kept the compared prefix right
        monkeypatch.setenv("FAKE_SGLANG_FAULTS", json.dumps({"ddtree": ["--fault-lossy", "1.0"]}))
    result = run(pytester, "-n", "2", "--dist", dist)
    result.stdout.no_fnmatch_line("XPASS *")
    result.stdout.no_fnmatch_line("*xpassed in *")
    result.stdout.fnmatch_lines(["SKIPPED * wrong drafts*: its test passed, but its outputs could not be "
                                 "compared with hopper-ar-tp1's*"])
    verdict = "xfailed: known issue: wrong drafts*" if lossy else "xpassed: known issue: wrong drafts*"
    result.stdout.fnmatch_lines([f"*ddtree-tp1-b8 *chat *{verdict}"])
    assert result.ret == 0




def parser_actions(parser) -> list:
    """What a parser accepts: each action's options, default, choices, nargs, type and kind."""
    return [(a.option_strings, repr(a.default), sorted(map(repr, a.choices or ())), repr(a.nargs),
             getattr(a.type, "__qualname__", repr(a.type)), type(a).__name__) for a in parser._actions]


def test_the_stand_ins_parser_is_sglangs_own_as_a_full_import_builds_it(sglang_reference):
    """The stand-in builds SGLang's parser without running the sglang package's __init__ (seconds
    at every launch): its options, defaults, choices and types must be those of a full import."""
    import argparse
    import inspect
    import subprocess

    stand_in = (inspect.getsource(parser_actions) + "\n\nimport json, sys\n"
                f"sys.path.insert(0, {str(STAND_IN.parent)!r})\n"
                "import fake_sglang\n"
                "parsed = parser_actions(fake_sglang.parser())\n"
                "assert not hasattr(sys.modules['sglang'], '__file__')  # its __init__ did not run\n"
                "print(json.dumps(parsed))\n")
    env = dict(os.environ, FAKE_SGLANG_REF=str(sglang_reference), FAKE_SGLANG_PR="0")
    done = subprocess.run([sys.executable, "-c", stand_in], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    from sglang.srt.server_args import ServerArgs  # the full import: the package's __init__ runs

    full = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(full)
    assert json.loads(done.stdout.splitlines()[-1]) == json.loads(json.dumps(parser_actions(full)))
