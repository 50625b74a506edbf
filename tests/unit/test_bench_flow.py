"""The benchmark flow end to end, as users run it: pytester projects against the embedded engine.

Each test writes a small project (a matrix, one workload, the shipped test_generation) and runs
pytest on it in a subprocess, so servers, journal, baselines and reports are all real.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
from http_stub import QuietHandler, serving

from pytest_specdec.journal import Journal

pytest.importorskip("torch")

GENERATION_TEST = (Path(__file__).resolve().parents[1] / "bench" / "test_generation.py").read_text()


def project(pytester: pytest.Pytester, *, methods=("ddtree",), budgets=(8,), agreement=0.9,
            extra: str = "", engine_args: tuple[str, ...] = (), prompts: int = 3,
            max_new_tokens: int = 24, startup_timeout: float = 60, model_preset: str = "tiny",
            backend: str = "embedded") -> None:
    methods_toml = ", ".join(f'"{m}"' for m in methods)
    budgets_toml = ", ".join(str(b) for b in budgets) if "ddtree" in methods else ""  # only ddtree takes one
    engine_toml = ", ".join(f'"{a}"' for a in engine_args)
    pytester.makepyprojecttoml(f"""
[tool.specdec]
backend = "{backend}"
startup_timeout = {startup_timeout}
{extra}

[tool.specdec.matrix.cpu]
methods = [{methods_toml}]
tp = [1]
{f"budget = [{budgets_toml}]" if budgets_toml else ""}

[[tool.specdec.workloads]]
name = "chat"
prompts = "chat"
num_prompts = {prompts}
max_new_tokens = {max_new_tokens}

[tool.specdec.engine]
model_preset = "{model_preset}"
draft_agreement = {agreement}
extra_args = [{engine_toml}]
""")
    pytester.makepyfile(test_generation=GENERATION_TEST)


def run(pytester: pytest.Pytester, *args: str, timeout: float = 240) -> pytest.RunResult:
    # in file order wherever pytest-randomly is installed: the faults these runs inject count requests
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "-rA", *args,
                                         timeout=timeout)


def journal_lines(pytester: pytest.Pytester) -> list[dict]:
    path = pytester.path / ".specdec" / "journal.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def journal_figures(pytester: pytest.Pytester) -> list[dict]:
    """The journal's records of figures, without the `done` marks that confirm them."""
    return [r for r in journal_lines(pytester) if "confirms" not in r]


def engine_processes(root: Path) -> list[str]:
    """Engine processes started from the project at `root` (their working directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if "pytest_specdec.engine" in args and cwd.startswith(str(root)):
            found.append(f"{entry.name} {args}")
    return found


@pytest.fixture
def no_leftover_engines(pytester):
    yield
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        leftovers = engine_processes(pytester.path)
        if not leftovers:
            return
        time.sleep(0.2)
    pytest.fail(f"engine processes survived the session: {sorted(leftovers)}")


SMALL_PAGES = """
import pytest_specdec.plots


def pytest_configure(config):
    pytest_specdec.plots.PANELS_PER_PAGE = 1  # a page a workload: two workloads draw as many do
"""


def test_a_report_of_many_plot_pages_says_how_far_its_drawing_is(pytester, no_leftover_engines):
    """A run of many workloads drew its plots for minutes after its last test, silent: it
    seemed to hang. Where plots have further pages the terminal now says so, and how many are
    drawn, before the summary (a report of one page a plot says nothing of pages: the main
    flow's report checks that)."""
    project(pytester, methods=("ar",), prompts=1, max_new_tokens=4,
            extra='[[tool.specdec.workloads]]\nname = "code"\nprompts = "chat"\nnum_prompts = 1\n'
                  'max_new_tokens = 4\n')
    pytester.makeconftest(SMALL_PAGES)
    result = run(pytester, "--specdec-report", "report")
    result.assert_outcomes(passed=2)
    told = ["specdec: report: drawing 2 plot pages into *report",
            "specdec: report: 1 of 2 plot pages drawn",
            "specdec: report: 2 of 2 plot pages drawn"]
    result.stdout.fnmatch_lines(told, consecutive=True)
    result.stdout.fnmatch_lines([told[-1], "*specdec summary*"])  # before the summary
    assert (pytester.path / "report" / "plots" / "tokens_per_s-2.png").exists()
    result.stdout.fnmatch_lines(["specdec: report written to *report (* files)"])


def test_main_flow_prints_the_table_and_writes_the_journal(pytester, no_leftover_engines, monkeypatch):
    """The flow end to end, which also leaves nothing in the temporary directory: journals, run
    folders, lock files, server logs and report staging once piled up in /tmp (17 journals and
    22 run folders after 25 minutes); they belong under the project's `.specdec/`. Its report
    is of one page a plot, which says nothing of pages."""
    tmp = pytester.path.parent / f"{pytester.path.name}-tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))  # the run's subprocesses (pytest, engines) take it
    project(pytester, methods=("ar", "ddtree"), budgets=(8, 16))
    result = run(pytester, "--specdec-report", "report")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*specdec [[]1/3[]] ar-tp1 chat:*output_tok_s=*",
                                 "*specdec summary*", "*ddtree-tp1-b16*"])
    records = journal_figures(pytester)
    assert sorted(r["config_id"].split("[")[-1] for r in records) == \
        ["ar-tp1-chat]", "ddtree-tp1-b16-chat]", "ddtree-tp1-b8-chat]"]
    ddtree = next(r for r in records if "b16" in r["config_id"])
    assert ddtree["data"]["metrics"]["accept_length"]["value"] > 1.5
    assert (pytester.path / "report" / "results.json").is_file()
    assert (pytester.path / "report" / "report.md").is_file()
    assert "no report written" not in result.stdout.str()
    result.stdout.fnmatch_lines(["specdec: report written to *report (* files)"])
    result.stdout.no_fnmatch_line("*plot pages*")
    assert (pytester.path / ".specdec" / "journal.jsonl").is_file()
    assert sorted(os.listdir(tmp)) == []


SECOND_FILE = """
def test_more(specdec_server, specdec_pool):
    assert [spec.id for spec in specdec_pool.live()] == [specdec_server.spec.id]
"""


def test_each_configuration_boots_once_across_the_tests_and_files_that_use_it(pytester, no_leftover_engines):
    """In file order the configurations interleave (test_generation's ar, dflash, then
    test_more's ar, dflash): collection groups each one's tests, so each server boots once and
    is the only one alive while its tests run."""
    project(pytester, methods=("ar", "dflash"), prompts=2, max_new_tokens=16,
            extra='[[tool.specdec.workloads]]\nname = "code"\nprompts = "code"\nnum_prompts = 2\n'
                  'max_new_tokens = 16\n')
    pytester.makepyfile(test_more=SECOND_FILE)
    result = run(pytester)
    result.assert_outcomes(passed=6)
    logs = sorted(p.name for p in pytester.path.glob(".specdec/artifacts/run-*/logs/*.log"))
    assert logs == ["ar-tp1.log", "dflash-tp1.log"]  # a second boot writes ar-tp1.2.log


def test_planted_regression_fails_the_gate_and_improvement_passes(pytester, no_leftover_engines):
    """The baseline's run also saves a pytest-benchmark run, which the improved run compares with:
    --benchmark-compare works on a later run (each engine boot is most of a run's time)."""
    project(pytester, agreement=0.7)
    first = run(pytester, "--specdec-save-baseline", "--benchmark-autosave")
    first.assert_outcomes(passed=1)
    baseline = json.loads((pytester.path / "baselines" / "cpu.json").read_text())
    assert "test_generation[ddtree-tp1-b8-chat]" in json.dumps(baseline)
    saved = list((pytester.path / ".benchmarks").rglob("*.json"))
    assert len(saved) == 1
    (bench,) = json.loads(saved[0].read_text())["benchmarks"]
    # one per request: per-token latency of each, but none of a request whose whole output came in
    # one network read (a loaded machine), which the run warns of
    whole = re.search(r"(\d+) of 3 requests received their whole output", first.stdout.str())
    assert bench["stats"]["rounds"] == 3 - (int(whole[1]) if whole else 0)
    assert bench["extra_info"]["accept_length"] > 1.0

    project(pytester, agreement=0.2)  # the drafter agrees less: accept length must drop
    result = run(pytester, "--specdec-compare-fail", "accept_length:2%")
    result.assert_outcomes(failed=1)
    result.stdout.re_match_lines([r".*accept_length \d+\.\d+ < baseline \d+\.\d+ -2% \(-\d+\.\d%\)"])

    project(pytester, agreement=1.0)
    result = run(pytester, "--specdec-compare-fail", "accept_length:2%",
                 "--benchmark-compare", "--benchmark-compare-fail=mean:1000%")
    result.assert_outcomes(passed=1)
    result.stdout.re_match_lines([r".*accept_length \d+\.\d+ > baseline \d+\.\d+ \+2% \(\+\d+\.\d%\)"])
    result.stdout.fnmatch_lines(["*benchmark 'test_generation': 2 tests*"])
    # pytest-benchmark sorts the rows by their minimum, so either may come first
    result.stdout.fnmatch_lines(["*test_generation[[]ddtree-tp1-b8-chat[]] (0001_*"])
    result.stdout.fnmatch_lines(["*test_generation[[]ddtree-tp1-b8-chat[]] (NOW)*"])


def test_killed_run_resumes_without_remeasuring_or_duplicates(pytester, no_leftover_engines):
    project(pytester, methods=("ar", "dflash", "ddtree"), budgets=(8,))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"],
                            cwd=pytester.path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    journal = Journal(pytester.path / ".specdec" / "journal.jsonl")
    try:
        deadline = time.monotonic() + 120
        while not journal.done_keys() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert journal.done_keys(), "the first configuration never finished"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # a reboot, as far as pytest can tell
        proc.wait()
    done_before = {config_id for config_id, _ in journal.done_keys()}
    assert 1 <= len(done_before) < 3

    result = run(pytester, "--specdec-resume")
    result.assert_outcomes(passed=3 - len(done_before), skipped=len(done_before))
    result.stdout.fnmatch_lines(["*already measured (resumed from*journal.jsonl)*"])
    ids = [r["config_id"] for r in journal_figures(pytester)]
    assert all(ids.count(config_id) == 1 for config_id in done_before)  # none measured twice
    assert len(journal.done_keys()) == 3
    result.stdout.fnmatch_lines(["*specdec summary*"])
    assert result.stdout.str().count("ar-tp1") >= 1


@contextlib.contextmanager
def attached_engine(*flags: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """An engine someone else started (`flags` added), ready: its URL and process, killed after."""
    import socket
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "pytest_specdec.engine", "--port", str(port), *flags],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, cwd="/")  # not the project: engine_processes() looks there
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(url + "/health_generate", timeout=5).read()
                break
            except OSError:
                time.sleep(0.2)
        yield url, server
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["one-process", "xdist"])
def test_attach_to_a_running_server_uses_it_and_never_stops_it(pytester, workers):
    """--specdec-server-url: nothing is launched; tests of other configurations skip, and the
    progress total does not count them (it read `specdec [1/2]` with the one test that could
    measure done); the server we did not start is still serving afterwards."""
    import urllib.request

    with attached_engine("--method", "ddtree", "--budget", "8") as (url, server):
        project(pytester, budgets=(8, 16), backend="auto")  # a backend named would launch its own
        result = run(pytester, f"--specdec-server-url={url}", *workers)
        result.assert_outcomes(passed=1, skipped=1)
        result.stdout.fnmatch_lines([f"*specdec: backend attach (attached to {url})*",
                                     "*specdec [[]1/1[]] ddtree-tp1-b8 chat:*",
                                     "*SKIPPED*attached server * is ddtree-tp1-b8 (per /server_info); "
                                     "this test needs ddtree-tp1-b16*"])
        assert not engine_processes(pytester.path), "attach mode must launch nothing"
        assert server.poll() is None, "the attached server must not be stopped"
        urllib.request.urlopen(url + "/health", timeout=10).read()


def test_the_guard_on_an_attached_server_counts_with_its_tokenizer(pytester):
    """An attached server's prompts were counted by the byte bound, whatever its tokenizer: now
    by its own /v1/tokenize, as the header and the refusal say."""
    with attached_engine("--method", "ar", "--context-length", "256") as (url, _):
        project(pytester, methods=("ar",), max_new_tokens=64, backend="auto")
        pytester.path.joinpath("long.jsonl").write_text(json.dumps({"prompt": "x" * 300}) + "\n")
        config = pytester.path / "pyproject.toml"
        config.write_text(config.read_text().replace('prompts = "chat"', 'prompts = "long.jsonl"'))
        result = run(pytester, f"--specdec-server-url={url}")
        result.assert_outcomes(failed=1)
        result.stdout.fnmatch_lines([
            "specdec: context guard: prompt tokens counted by the server's tokenizer (/v1/tokenize)",
            "*server ar-tp1: workload 'chat', prompt 1: 301 prompt tokens + 64 max_new_tokens = 365, but the "
            "server (context length 256) serves a request in full only up to 254 tokens, *; * (prompt tokens counted by the server's "
            "tokenizer (/v1/tokenize))"])


OLD_MODEL_PART = """
from pytest_specdec import backends

# the model part an earlier release gave an attached server: the configured ids
backends.AttachBackend.model_part = backends.Backend.model_part
"""


def test_an_attached_server_that_is_the_configuration_runs_and_keys_figures_by_what_it_serves(pytester):
    """An attached server's figures were keyed by the configured model ids, whatever it served:
    the header now says what it serves and the saved entries hold that model, while entries saved
    under the configured ids still match."""
    with attached_engine("--method", "ddtree", "--budget", "8") as (url, _):
        project(pytester, budgets=(8,), backend="auto", extra='model = "specdec-embedded/TINY"')
        pytester.makeconftest(OLD_MODEL_PART)
        run(pytester, f"--specdec-server-url={url}", "--specdec-save-baseline").assert_outcomes(passed=1)
        (pytester.path / "conftest.py").unlink()
        result = run(pytester, f"--specdec-server-url={url}", "--specdec-require-baseline")
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines(["specdec: attached server serves ddtree-tp1-b8, model specdec-embedded/tiny, "
                                     "draft model specdec-embedded/tiny"])
        result.stdout.no_fnmatch_line("*measured another setup*")
        run(pytester, f"--specdec-server-url={url}", "--specdec-save-baseline").assert_outcomes(passed=1)
    baseline = json.loads((pytester.path / "baselines" / "cpu.json").read_text())
    models = [parts["model"] for parts in baseline["setups"].values()]
    assert {"model": "specdec-embedded/tiny", "draft_model": "specdec-embedded/tiny"} in models, models


def test_an_attached_embedded_engine_has_its_draft_model_checked(pytester):
    """The embedded engine's /server_info named no draft model, so a drafting engine attached
    under another configured draft model ran and recorded its figures under that one. It now
    names what it drafts with, its own target (its drafter is distilled from it), as SGLang
    names the target for a draft bundled in its checkpoint: the configured draft is checked, and
    the engine's own name passes."""
    with attached_engine("--method", "ddtree", "--budget", "8") as (url, _):
        project(pytester, budgets=(8,), backend="auto",
                extra='model = "specdec-embedded/tiny"\ndraft_model = "z-lab/Qwen3-8B-DFlash"')
        result = run(pytester, f"--specdec-server-url={url}")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([
            "ERROR: *the server serves another setup than the configuration says (per its /server_info): "
            "draft model: configured 'z-lab/Qwen3-8B-DFlash', served 'specdec-embedded/tiny'; *set draft_model *"])
        project(pytester, budgets=(8,), backend="auto",
                extra='model = "specdec-embedded/tiny"\ndraft_model = "specdec-embedded/TINY"')
        result = run(pytester, f"--specdec-server-url={url}")
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines(["specdec: attached server serves ddtree-tp1-b8, model specdec-embedded/tiny, "
                                     "draft model specdec-embedded/tiny"])
    with attached_engine("--method", "ar") as (url, _):  # drafts with nothing: a configured draft is not asked of it
        project(pytester, methods=("ar",), backend="auto",
                extra='model = "specdec-embedded/tiny"\ndraft_model = "z-lab/Qwen3-8B-DFlash"')
        run(pytester, f"--specdec-server-url={url}").assert_outcomes(passed=1)


OLD_ENGINE_INFO = """
from pytest_specdec.servers import attach

_identify = attach.identify


def identify(info, model_info=None):  # the engine before it named its draft model in /server_info
    return _identify({k: v for k, v in info.items() if k != "speculative_draft_model_path"}, model_info)


attach.identify = identify
"""


@pytest.mark.parametrize("draft", [None, "specdec-embedded/TINY"])
def test_baselines_saved_before_the_engine_named_its_draft_still_match(pytester, draft):
    """Entries and journal records saved against an attached engine before it reported its draft
    model hold the configured draft (or none) where the engine now names its own target: each
    test warned that its baseline "measured another setup (its model differs)", and a resumed run
    measured again. They match, as the same setup."""
    with attached_engine("--method", "ddtree", "--budget", "8") as (url, _):
        project(pytester, budgets=(8,), backend="auto", extra=f'draft_model = "{draft}"' if draft else "")
        pytester.makeconftest(OLD_ENGINE_INFO)
        run(pytester, f"--specdec-server-url={url}", "--specdec-save-baseline").assert_outcomes(passed=1)
        (pytester.path / "conftest.py").unlink()
        resumed = run(pytester, f"--specdec-server-url={url}", "--specdec-resume")
        result = run(pytester, f"--specdec-server-url={url}", "--specdec-require-baseline", "-W", "error",
                     # a warm engine may send a request's whole output in one read (said as a warning)
                     "-W", "ignore:server ddtree-tp1-b8:UserWarning")
    resumed.assert_outcomes(skipped=1)
    resumed.stdout.fnmatch_lines(["*already measured (resumed from*journal.jsonl)*"])
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*measured another setup*")


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["one-process", "xdist"])
def test_an_attached_server_of_another_model_and_method_stops_the_run_naming_both(pytester, workers):
    """A server of another model, or of none of the configured methods, ran the run anyway: every
    test skipped as another configuration (green), or measured another model under the
    configured one's key. Now one error names each field, configured and served, and the fix."""
    with attached_engine("--method", "ddtree", "--budget", "8") as (url, _):
        project(pytester, methods=("dflash", "ar"), backend="auto", extra='model = "Qwen/Qwen3-8B"')
        result = run(pytester, f"--specdec-server-url={url}", *workers)
    said = [
        f"*pytest-specdec: --specdec-server-url {url}: the server serves another setup than the "
        f"configuration says (per its /server_info and /model_info): method: configured dflash or ar, served "
        f"ddtree; model: configured 'Qwen/Qwen3-8B', served 'specdec-embedded/tiny'; figures measured on it "
        f"would be recorded and gated as the configuration's. Attach a server that serves the configuration, "
        f"or set model and the matrix in pyproject.toml [[]tool.specdec[]] to what it serves"]
    # under xdist too (a worker's check ends the run as one process's does: a95369b)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: " + said[0][1:]])


@contextlib.contextmanager
def reticent_proxy(url: str) -> Iterator[str]:
    """A server in front of `url` whose /server_info and /model_info say nothing of what it
    serves (another server, an older SGLang): its URL."""
    import urllib.error
    import urllib.request

    said = ("speculative_algorithm", "method", "speculative_num_draft_tokens", "speculative_ddtree_budget",
            "budget", "tp_size", "model_path", "served_model_name", "speculative_draft_model_path")

    class Proxy(QuietHandler):
        def _forward(self):
            size = int(self.headers.get("Content-Length") or 0)
            request = urllib.request.Request(url + self.path, data=self.rfile.read(size) if size else None,
                                             method=self.command,
                                             headers={"Content-Type": self.headers.get("Content-Type", "")})
            try:
                with urllib.request.urlopen(request, timeout=120) as resp:
                    status, kind, body = resp.status, resp.headers.get("Content-Type", ""), resp.read()
            except urllib.error.HTTPError as e:
                status, kind, body = e.code, e.headers.get("Content-Type", ""), e.read()
            if self.path.split("?")[0] in ("/server_info", "/get_server_info", "/model_info"):
                body = json.dumps({k: v for k, v in json.loads(body).items() if k not in said}).encode()
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _forward

    with serving(Proxy, threaded=True) as proxy_url:
        yield proxy_url


def test_an_attached_server_that_does_not_say_what_it_serves_still_runs(pytester):
    """A /server_info without the method, TP or model was read as an ar-tp1 server: every test of
    another method skipped. What it does not say is not checked, as the header says once."""
    with attached_engine("--method", "dflash") as (url, _), reticent_proxy(url) as proxy:
        project(pytester, methods=("dflash",), backend="auto", extra='model = "Qwen/Qwen3-8B"')
        result = run(pytester, f"--specdec-server-url={proxy}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["specdec: attached server serves ?-tp?, model (not reported), draft model (not "
                                 "reported); it does not report the method, TP, budget, model, so "
                                 "those are not checked against the configuration"])


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["one-process", "xdist"])
def test_configurations_an_attached_server_cannot_tell_apart_stop_the_run(pytester, workers):
    """A server that reports neither its method nor its TP matched every configuration: the
    dflash and the ddtree tests both ran on the one dflash server, each recorded under its own
    key, green. Now the run stops before any test, naming both, what the server does not report
    that tells them apart (not TP: both are TP 1) and the fixes; the `-m` the message gives runs the one configuration."""
    with attached_engine("--method", "dflash") as (url, _), reticent_proxy(url) as proxy:
        project(pytester, methods=("dflash", "ddtree"), budgets=(8,), backend="auto")
        result = run(pytester, f"--specdec-server-url={proxy}", *workers)
        said = (f"*pytest-specdec: --specdec-server-url {proxy}: the server does not report its method or "
                f"budget (per its /server_info), so the 2 configurations dflash-tp1, ddtree-tp1-b8 of this run "
                f"would all run on it, each one's figures recorded and gated under its own key though one server "
                f"measured them all. Run one configuration at a time against it (-m \"specdec(method='dflash', "
                f"tp=1)\" runs dflash-tp1 alone), attach each configuration's own server in a run of its own, or "
                f"have the server report speculative_algorithm, speculative_num_draft_tokens in its "
                f"/server_info")
        # under xdist too (a worker's check ends the run as one process's does: a95369b)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(["ERROR: " + said[1:]])
        assert not journal_figures(pytester), "nothing may be recorded under either key"
        result = run(pytester, f"--specdec-server-url={proxy}", "-m", "specdec(method='dflash', tp=1)", *workers)
    result.assert_outcomes(passed=1)
    assert [r["config_id"] for r in journal_figures(pytester)] == ["test_generation.py::test_generation[dflash-tp1-chat]"]


def test_fixtures_a_hand_written_test_can_use(pytester, no_leftover_engines):
    project(pytester, methods=("ddtree",), budgets=(8,))
    pytester.makepyfile(test_custom="""
def test_custom(specdec_server, specdec_spec, specdec_hardware, specdec_model_path, specdec_record):
    body = specdec_server.generate("def add(a, b):", max_new_tokens=12, temperature=0.0)
    assert body["meta_info"]["completion_tokens"] == 12
    assert body["meta_info"]["spec_verify_ct"] >= 1
    assert specdec_spec.spec_id == specdec_server.spec.id == "ddtree-tp1-b8"
    assert specdec_server.log_path.is_file()
    assert specdec_hardware.family == "cpu" or specdec_hardware.count >= 1
    assert specdec_model_path is None  # the embedded engine uses its built-in weights
    specdec_record.metric("accept_length", body["meta_info"]["spec_accept_length"])
    specdec_record.metric("widgets", 3.0, "higher")
""")
    result = run(pytester, "test_custom.py", "--specdec-save-baseline")
    result.assert_outcomes(passed=1)
    baseline = json.loads((pytester.path / "baselines" / "cpu.json").read_text())
    entry = baseline["entries"]["test_custom[ddtree-tp1-b8]"]
    assert entry["widgets"]["value"] == 3.0 and entry["widgets"]["direction"] == "higher"
    assert entry["accept_length"]["value"] > 1.0


def test_truncated_prompts_are_accepted_by_the_server(pytester, no_leftover_engines):
    """`truncate = true` cuts prompts to what the server accepts: prompt (BOS included, as the
    engine's tokenizer counts it) + max_new_tokens strictly below the context length."""
    project(pytester, methods=("ar",), engine_args=("--context-length", "256"), max_new_tokens=64)
    pytester.path.joinpath("long.jsonl").write_text(json.dumps({"prompt": "x" * 300}) + "\n")
    text = pytester.path.joinpath("pyproject.toml").read_text()
    pytester.path.joinpath("pyproject.toml").write_text(
        text.replace('prompts = "chat"', 'prompts = "long.jsonl"\ntruncate = true'))
    result = run(pytester)
    result.assert_outcomes(passed=1)
    (record,) = journal_figures(pytester)
    assert record["data"]["details"]["measurement"]["completion_tokens"] == 3 * 64
