"""A dead server is noticed at once and said why, never recorded as 0 tok/s.

pytester projects run the shipped `test_generation` against the embedded engine with its fault
flags (the failures users hit on real GPUs), in a subprocess so that servers, signals and
teardown are all real.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servers_support import default_sigint
from test_bench_flow import engine_processes, journal_figures, journal_lines, no_leftover_engines, project, run  # noqa: F401

pytest.importorskip("torch")

THREE_WORKLOADS = """
[[tool.specdec.workloads]]
name = "w1"
prompts = "chat"
num_prompts = 2
max_new_tokens = 8

[[tool.specdec.workloads]]
name = "w2"
prompts = "code"
num_prompts = 2
max_new_tokens = 8

[[tool.specdec.workloads]]
name = "w3"
prompts = "math"
num_prompts = 2
max_new_tokens = 8
"""


def faulty_project(pytester, engine_args, *, budgets=(8,), workloads=THREE_WORKLOADS, extra="",
                   startup_timeout=60):
    project(pytester, budgets=budgets, engine_args=engine_args, extra=extra,
            startup_timeout=startup_timeout)
    # Replace the single workload with three, so a spec serves several tests.
    text = (pytester.path / "pyproject.toml").read_text()
    head, _, rest = text.partition("[[tool.specdec.workloads]]")
    engine = rest[rest.index("[tool.specdec.engine]"):]
    (pytester.path / "pyproject.toml").write_text(head + workloads + "\n" + engine)


def test_crash_mid_run_fails_that_test_and_errors_the_rest_at_once(pytester, no_leftover_engines):
    faulty_project(pytester, ("--fault-crash-after", "3"))
    started = time.monotonic()
    result = run(pytester)
    elapsed = time.monotonic() - started
    result.assert_outcomes(passed=1, failed=1, errors=1)
    text = result.stdout.str()
    assert "server ddtree-tp1-b8 died: CUDA error: an illegal instruction was encountered" in text
    assert "log: " in text and "ddtree-tp1-b8" in text and "last lines:" in text
    # the third test errors with the same cause instead of waiting for any timeout
    result.stdout.fnmatch_lines(["*ERROR at setup of test_generation[[]ddtree-tp1-b8-w3[]]*",
                                 "server ddtree-tp1-b8 died: CUDA error: an illegal instruction*"])
    assert elapsed < 60
    # no zero throughput reported (a rate such as "400 tok/s" is not one)
    assert not re.search(r"(?<![\d.])0(\.0+)? tok/s", text), text
    assert not re.search(r"output_tok_s=0(\.0+)?(?![\d.])", text), text


def test_a_published_report_names_the_servers_log_relative_to_the_project(pytester,
                                                                          no_leftover_engines):
    """report.md and results.json named the log by absolute path, and the baseline too: a
    report published from a machine leaked its paths and found nothing on another."""
    faulty_project(pytester, ("--fault-crash-after", "0"), workloads=ONE_WORKLOAD)
    (pytester.path / "baselines").mkdir()
    (pytester.path / "baselines" / "durations.json").write_text(json.dumps(
        {"format": "pytest-specdec-durations", "version": 1, "configurations": {"ddtree-tp1-b8": 1.0}}))
    result = run(pytester, "--specdec-report=rep", "--specdec-shard=1/1")
    result.assert_outcomes(failed=1)
    assert f"(log: {pytester.path}/.specdec/artifacts/run-" in result.stdout.str()  # pytest's own
    for name in ("report.md", "results.json", "shard.json"):
        text = (pytester.path / "rep" / name).read_text()
        assert str(pytester.path) not in text, text
        assert "died: CUDA error: an illegal instruction was encountered (log: .specdec/artifacts/run-" \
            in text, text
    meta = json.loads((pytester.path / "rep" / "results.json").read_text())["meta"]
    assert meta["baseline"] == "baselines/cpu.json"
    shard = json.loads((pytester.path / "rep" / "shard.json").read_text())
    assert shard["matrix"]["balanced_by"] == "the durations in baselines/durations.json (1 of 1 configurations)"


def test_crash_during_warmup_has_its_own_message(pytester, no_leftover_engines):
    faulty_project(pytester, ("--fault-crash-warmup",))
    result = run(pytester)
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines(["*server ddtree-tp1-b8 crashed during warm-up*"])


ONE_WORKLOAD = THREE_WORKLOADS.split("[[tool.specdec.workloads]]\nname = \"w2\"")[0]


def test_crash_budgets_are_red_without_a_known_issue(pytester, no_leftover_engines):
    faulty_project(pytester, ("--fault-crash-budgets", "8,12"), budgets=(8, 12, 16),
                   workloads=ONE_WORKLOAD)
    result = run(pytester)
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(["*illegal instruction*"])


def test_sm120_dry_run_reproduces_known_crashes_as_xfail(pytester, no_leftover_engines):
    """`--specdec-arch=sm_120 -m blackwell`: the Blackwell suite on the embedded engine, whose
    fault injection reproduces the known sm_120 crash, so the known issue shows as xfailed."""
    faulty_project(pytester, (), budgets=(8,), workloads=ONE_WORKLOAD, extra="""
[tool.specdec.matrix.blackwell]
methods = ["ddtree"]
tp = [1, 4]
budget = [8, 16]

[[tool.specdec.known_issues]]
arch = "sm_120"
method = "ddtree"
budget = [8, 12]
reason = "verify crashes with CUDA illegal instruction on sm_120"
""")
    result = run(pytester, "--specdec-arch=sm_120", "-m", "blackwell")
    result.assert_outcomes(passed=1, xfailed=1, skipped=2, deselected=1)
    result.stdout.fnmatch_lines(["*SKIPPED*needs 4 GPUs; found: 1 simulated sm_120 GPU*",
                                 "*XFAIL*blackwell-ddtree-tp1-b8*known issue: verify crashes*"])
    # the known issue's server crashes on purpose, so it never records: the total leaves it out
    # (the last line read [1/2], as if a measurement were missing)
    assert "specdec [1/1] blackwell-ddtree-tp1-b16" in result.stdout.str(), result.stdout.str()


# servers_support.ready_first for the run's servers: the boot deadline starts once the log says
# ready, so seconds tell the hang from a slow boot however long the model build takes under load.
DEADLINE_FROM_READY = f"""
import sys

sys.path.insert(0, {str(Path(__file__).parent)!r})

from pytest_specdec.servers import process
from servers_support import ready_first

process.ManagedServer.wait_ready = ready_first(process.ManagedServer.wait_ready)
"""


def test_hang_is_reported_as_a_hang(pytester, no_leftover_engines):
    faulty_project(pytester, ("--fault-hang",), workloads=ONE_WORKLOAD, startup_timeout=2)
    pytester.makeconftest(DEADLINE_FROM_READY)
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*server ddtree-tp1-b8 hangs: /health_generate accepted "
                                 "connections but never answered*"])


@pytest.mark.parametrize("where, setting", [
    ("tool.specdec", "pyproject.toml [[]tool.specdec[]] key 'startup_timeout'"),
    ("ini", "ini specdec_startup_timeout"),
], ids=["tool.specdec", "ini"])
def test_slow_start_past_the_deadline(pytester, no_leftover_engines, where, setting):
    """The advice names the setting where the user set the deadline, not a flag they never gave."""
    faulty_project(pytester, ("--fault-slow-start", "30"), workloads=ONE_WORKLOAD,
                   startup_timeout=3 if where == "tool.specdec" else 600)
    if where == "ini":
        with (pytester.path / "pyproject.toml").open("a") as toml:
            toml.write('\n[tool.pytest.ini_options]\nspecdec_startup_timeout = "3"\n')
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*server ddtree-tp1-b8 not ready after the 3s startup timeout*"
                                 f"; raise {setting} if it is just slow*"])


def test_port_already_in_use(pytester, no_leftover_engines):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        faulty_project(pytester, (), workloads=ONE_WORKLOAD)
        # the port the plugin picks is taken before the server binds it (another process won the race)
        pytester.makeconftest(f"import pytest_specdec.servers.process as process\n"
                              f"process.free_port = lambda host='127.0.0.1': {port}\n")
        result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*server ddtree-tp1-b8 cannot start: address 127.0.0.1:{port} "
                                 f"already in use*"])


def test_zero_tokens_is_a_failure_with_a_diagnosis(pytester, no_leftover_engines):
    faulty_project(pytester, ("--fault-zero-tokens",), workloads=ONE_WORKLOAD)
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*zero completion tokens*"])
    assert not journal_lines(pytester), "a failed measurement must not be journaled as a result"


def test_restart_on_crash_gives_a_fresh_server(pytester, no_leftover_engines):
    faulty_project(pytester, ("--fault-crash-after", "3"))
    result = run(pytester, "--specdec-restart-on-crash=1")
    # w2 fails as the server dies under it; w3 gets a restarted server and passes
    result.assert_outcomes(passed=2, failed=1)


def test_sigint_mid_run_leaves_no_server_behind(pytester, no_leftover_engines):
    # long enough that the interrupt lands mid-run even on a slow machine (16 prompts a workload)
    faulty_project(pytester, (), workloads=THREE_WORKLOADS.replace("max_new_tokens = 8", "max_new_tokens = 400")
                   .replace("num_prompts = 2", "num_prompts = 16"))
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"],
                            cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, preexec_fn=default_sigint)
    deadline = time.monotonic() + 60
    while not engine_processes(pytester.path) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert engine_processes(pytester.path), "the engine never started"
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=60)
    assert "KeyboardInterrupt" in output
    # no_leftover_engines checks that nothing survived


PROBES_SEEN = """
import pytest_specdec.servers.process as process

_probe = process.probe


def probe(url, timeout):
    with open("probes.txt", "a") as f:
        f.write(url.rsplit("/", 1)[-1] + "\\n")
    return _probe(url, timeout)


process.probe = probe
"""


def test_ctrl_c_on_a_frozen_server_does_not_wait_for_its_health_probe(pytester, no_leftover_engines):
    """The moment a user presses Ctrl-C is a frozen server's workload. The interrupted session
    stops every server next, so the test's teardown must not first probe the frozen server's
    /health (a health timeout of 25 s before the interrupt takes effect). Three workloads: the
    interrupted test is not its configuration's last, whose server would be retired first."""
    faulty_project(pytester, ("--fault-hang-after", "1"))
    pytester.makeconftest(PROBES_SEEN)
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                             "--specdec-stall-timeout", "300"],
                            cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, preexec_fn=default_sigint)
    frozen = "Fault injection: --fault-hang-after 1"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(
            frozen in log.read_text() for log in pytester.path.glob(".specdec/artifacts/run-*/logs/*.log")):
        time.sleep(0.1)
    assert proc.poll() is None, proc.communicate()[0]
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=120)
    assert "KeyboardInterrupt" in output
    probes = (pytester.path / "probes.txt").read_text().split()
    assert "health_generate" in probes  # the boot's readiness probes were seen
    assert "health" not in probes, probes


def test_a_server_found_unresponsive_is_probed_once(pytester, no_leftover_engines, monkeypatch):
    """A test's request to a frozen server times out; its check names the server hanging after
    one /health check (answered 503 with SGLang's "Health check failed" line, as SGLang's HTTP
    side answers over a frozen scheduler). The test's teardown must not wait out a second one on
    the same server before the configuration counts as failed."""
    monkeypatch.setenv("SGLANG_HEALTH_CHECK_TIMEOUT", "3")  # the engine's 503 after 3 s, not SGLang's 20
    faulty_project(pytester, ("--fault-hang-after", "0"), workloads=ONE_WORKLOAD)
    pytester.makeconftest(PROBES_SEEN)
    pytester.makepyfile(test_generation="""
def test_generate(specdec_server):
    specdec_server.generate("hi", timeout=2, max_new_tokens=8)
""")
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*server ddtree-tp1-b8 hangs: Health check failed. Server couldn't get a "
                                 "response from detokenizer for last 3 seconds.*"])
    probes = (pytester.path / "probes.txt").read_text().split()
    assert probes.count("health") == 1, probes


def stalled_for(result) -> list[float]:
    """The silences the stall messages name: as measured, so at least the stall timeout, and more
    where the watchdog wakes late on a loaded machine (a fixed first digit failed there)."""
    return [float(s) for s in re.findall(r"stalled: no token for (\d+\.\d)s", result.stdout.str())]


def test_generate_on_a_frozen_server_stalls_as_a_workload_does(pytester, no_leftover_engines):
    """specdec_server.generate() waited its own 120 s timeout on a frozen server, then a /health
    probe; it now fails after the stall timeout with a stalled workload's message (its probe
    included), and the configuration counts as failed."""
    faulty_project(pytester, ("--fault-hang-after", "0"), workloads=ONE_WORKLOAD, extra="stall_timeout = 3")
    pytester.makeconftest(PROBES_SEEN)
    pytester.makepyfile(test_generation="""
def test_generate(specdec_server):
    specdec_server.generate("hi", max_new_tokens=8)


def test_alive(specdec_server):
    specdec_server.check_alive()
""")
    result = run(pytester, "-p", "timeout", "--timeout=90")  # the old wait was 120 s
    result.assert_outcomes(failed=1, errors=1)
    result.stdout.re_match_lines([
        r".*server ddtree-tp1-b8 stalled: no token for \d+\.\ds while 1 request was in flight "
        r"\(0 of 1 requests done\); raise pyproject\.toml \[tool\.specdec\] key 'stall_timeout' if "
        r"the server is just slow; probe: process alive \(pid \d+\), /health_generate did not "
        r"answer within 2s \(log: .*ddtree-tp1-b8\.log.*"])
    result.stdout.fnmatch_lines(["*ERROR at setup of test_alive[[]ddtree-tp1-b8[]]*",
                                 "server ddtree-tp1-b8 stalled: no token for*"])
    assert min(stalled_for(result)) >= 3.0, stalled_for(result)
    assert "health" not in (pytester.path / "probes.txt").read_text().split()  # no /health wait


def test_sigkill_of_pytest_takes_the_server_down_too(pytester, no_leftover_engines):
    faulty_project(pytester, (), workloads=THREE_WORKLOADS.replace("max_new_tokens = 8",
                                                                   "max_new_tokens = 400"))
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"],
                            cwd=pytester.path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not engine_processes(pytester.path) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert engine_processes(pytester.path), "the engine never started"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.mark.parametrize("method", ["signal", "thread"])
def test_a_timed_out_test_leaves_no_server_behind(pytester, no_leftover_engines, method):
    """pytest-timeout's signal method fails the test and tears down; its thread method ends
    pytest with os._exit, where only the watchdog and the kernel's parent-death signal help."""
    faulty_project(pytester, (), workloads=ONE_WORKLOAD)
    # test_boot boots the server under a generous timeout of its own, so the short one of the
    # run lands in test_slow with the server serving, however long the boot took
    pytester.makepyfile(test_slow="""
import time

import pytest


@pytest.mark.timeout(120)
def test_boot(specdec_server):
    assert specdec_server.generate("hi", max_new_tokens=4)["meta_info"]["completion_tokens"] == 4


def test_slow(specdec_server):
    specdec_server.check_alive()  # the server serves as the timeout lands
    time.sleep(60)
""")
    result = run(pytester, "test_slow.py", "-p", "timeout", "--timeout=2",
                 f"--timeout-method={method}")
    if method == "signal":
        result.assert_outcomes(passed=1, failed=1)
    else:  # os._exit in test_slow, after test_boot's pass (its dot): no summary comes
        result.stdout.fnmatch_lines(["test_slow.py .*Timeout*"])
    assert "Timeout" in result.stdout.str() + result.stderr.str()


STALL_TESTS = """
from pytest_specdec.workloads import builtin_workload


def test_workload(specdec_server, specdec_spec, specdec_record):
    # --fault-hang-after 2 freezes every server at its third request: only b8 sends that many
    prompts = 8 if specdec_spec.budget == 8 else 2
    workload = builtin_workload("chat", max_new_tokens=16).resized(prompts)
    specdec_record.run(specdec_server, workload)


def test_alive(specdec_server):
    specdec_server.check_alive()
"""


def test_a_stalled_server_is_red_in_seconds_and_the_run_goes_on(pytester, no_leftover_engines):
    """A server that stops producing tokens mid-workload: probed once, stopped, its
    configuration failed (its next test errors at once with the same cause), the next
    configuration runs; all long before a request's own 600 s timeout."""
    # no warm-up: the fault counts requests, and b16's two must stay below it
    faulty_project(pytester, ("--fault-hang-after", "2"), budgets=(8, 16), workloads=ONE_WORKLOAD,
                   extra="stall_timeout = 5\nwarmup_requests = 0")
    pytester.makepyfile(test_generation=STALL_TESTS)
    started = time.monotonic()
    result = run(pytester)
    elapsed = time.monotonic() - started
    result.assert_outcomes(passed=2, failed=1, errors=1)
    # the advice names where the bound was set (here [tool.specdec]), not a flag never given
    result.stdout.re_match_lines([
        r".*server ddtree-tp1-b8 stalled: no token for \d+\.\ds while 1 request was in flight "
        r"\(2 of 8 requests done\); raise pyproject\.toml \[tool\.specdec\] key 'stall_timeout' if "
        r"the server is just slow; probe: process alive \(pid \d+\), /health_generate did not "
        r"answer within 2s \(log: .*ddtree-tp1-b8\.log.*"])
    result.stdout.fnmatch_lines(["*ERROR at setup of test_alive[[]ddtree-tp1-b8[]]*",
                                 "server ddtree-tp1-b8 stalled: no token for*"])
    assert min(stalled_for(result)) >= 5.0, stalled_for(result)
    assert "Fault injection: --fault-hang-after 2" in result.stdout.str()  # the log's last lines
    assert elapsed < 120  # the bound is the behaviour: one request alone would wait 600 s


def test_a_stalled_attached_server_fails_its_later_tests_at_once(pytester, no_leftover_engines, tmp_path):
    """A server the run did not start (--specdec-server-url) stalls: it cannot be stopped or
    restarted, so its later tests error at once with the stall, as a launched server's do,
    instead of each waiting out a /health probe of the frozen server and naming only that."""
    from servers_support import server, spec

    running = server(spec("ddtree", 8, "--fault-hang-after", "1"), tmp_path)
    running.start()
    try:
        faulty_project(pytester, ())
        # backend auto: the project's "embedded" beside a server URL is a usage error
        result = run(pytester, f"--specdec-server-url={running.url}", "--specdec-backend=auto",
                     "--specdec-stall-timeout=3")
    finally:
        running.stop()
    result.assert_outcomes(failed=1, errors=2)
    for workload in ("w2", "w3"):
        result.stdout.fnmatch_lines([f"*ERROR at setup of test_generation[[]ddtree-tp1-b8-{workload}[]]*",
                                     "server ddtree-tp1-b8 stalled: no token for *(attached at *)"],
                                    consecutive=True)
    assert "is not healthy" not in result.stdout.str()


def failures_section(result) -> str:
    text = result.stdout.str()
    return text[text.index("= FAILURES ="):text.index("specdec summary")]


@pytest.mark.parametrize("fault, headline", [
    (("--fault-zero-tokens",),  # the warm-up's request meets it first
     "server ddtree-tp1-b8: workload 'w1', during its warm-up (1 untimed request before it is measured): "
     "the server produced zero completion tokens"),
    (("--fault-crash-after", "0"),
     "server ddtree-tp1-b8 died: CUDA error: an illegal instruction was encountered (log: "),
])
def test_each_failure_is_told_once_with_its_cause_and_log(pytester, no_leftover_engines, fault,
                                                          headline):
    """No message printed twice (an exception being handled, then ours), no prefix repeated, no
    traceback of the plugin's internals: the cause on one line, then the server's last words."""
    faulty_project(pytester, fault, workloads=ONE_WORKLOAD)
    result = run(pytester)
    result.assert_outcomes(failed=1)
    failures = failures_section(result)
    assert failures.count(headline) == 1, failures
    assert "During handling of the above exception" not in failures
    # pytest prints a traceback entry as `path:line: Error`; the engine's own (in its log) differ
    assert not re.search(r"pytest_specdec/\S+\.py:\d+: ", failures), failures
    assert "workload 'w1': workload 'w1'" not in failures
    assert "last server log lines:" in failures or "last lines:" in failures


# Freezes its configuration's server (SIGSTOP: a server that answers nothing, as one wedged on its
# GPU) as its only test passes; `frozen` picks which configurations' servers.
FROZEN_AFTER_TEST = '''
import os, signal


def test_freeze(specdec_server, specdec_spec):
    if specdec_spec.method in {frozen!r}:
        os.kill(specdec_server.pids()[0], signal.SIGSTOP)
'''
# generous beside the stall timeout it now takes; the old teardown took the 25 s health timeout
TEARDOWN_WITHIN_S = 15.0


def teardown_durations(result) -> dict[str, float]:
    """Each test's teardown duration, by test id, from `--durations=0 -vv`."""
    found = re.findall(r"^([\d.]+)s teardown +\S+::(\S+)$", result.stdout.str(), re.MULTILINE)
    return {test: float(seconds) for seconds, test in found}


def frozen_warnings(result) -> list[str]:
    return re.findall(r"server (\S+) froze after its test finished", result.stdout.str())


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["one-process", "xdist"])
def test_a_server_frozen_after_its_last_test_is_stopped_within_the_stall_timeout_and_said(
        pytester, no_leftover_engines, xdist):
    """A server frozen as its last test passed was found at teardown only, after the fixed 25 s
    health timeout, then stopped in silence: the run stayed green and the wait unexplained. It is
    now found within the run's stall timeout, stopped, and named in a warning with its log; the
    test's verdict stands (it measured before the freeze). The wait itself is said as it starts
    (it printed nothing until the warning): a probe unanswered for 2 s prints a progress line at
    once, past capture and from an xdist worker too: the server, how much longer, and the setting
    that bounds the wait. Of two configurations, the frozen one alone is named and said, and every
    teardown ends within the stall timeout, under xdist too (the warning reaches the controller)."""
    if xdist:
        pytest.importorskip("xdist")
    project(pytester, methods=("ar", "ddtree"), prompts=1, max_new_tokens=4, extra="stall_timeout = 3")
    pytester.makepyfile(test_generation=FROZEN_AFTER_TEST.format(frozen={"ddtree"}))
    result = run(pytester, "--durations=0", "-vv", *xdist)
    result.assert_outcomes(passed=2, warnings=1)
    result.stdout.re_match_lines([
        r".*pytest-specdec: server ddtree-tp1-b8 froze after its test finished: /health did not answer within "
        r"3s \(process alive, pid \d+\); raise pyproject\.toml \[tool\.specdec\] key 'stall_timeout' if the "
        r"server is just slow; it was stopped and counts as crashed \(log: .*/logs/ddtree-tp1-b8\.log\)\. "
        r"The test's verdict stands: it measured while the server answered"])
    assert frozen_warnings(result) == ["ddtree-tp1-b8"]
    durations = teardown_durations(result)
    assert set(durations) == {"test_freeze[ar-tp1]", "test_freeze[ddtree-tp1-b8]"}, result.stdout.str()
    assert max(durations.values()) < TEARDOWN_WITHIN_S, durations
    said = re.findall(r"^specdec: (?:\[gw\d+\] )?server (\S+): /health did not answer within 2s; waiting up "
                      r"to \d+s more before counting it as frozen \(bound: the stall timeout, pyproject\.toml "
                      r"\[tool\.specdec\] key 'stall_timeout'\)$", result.stderr.str(), re.MULTILINE)
    assert said == ["ddtree-tp1-b8"], result.stderr.str()


SAID = r"^specdec: (?:\[gw\d+\] )?server {server}: {what}$"


def said_lines(result, server: str, what: str) -> list[str]:
    """The progress lines (past capture, from an xdist worker too) matching `what`, a regex."""
    return re.findall(SAID.format(server=re.escape(server), what=what), result.stderr.str(), re.MULTILINE)


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["one-process", "xdist"])
def test_a_slow_boot_and_a_silent_workload_say_their_waits_as_they_go(pytester, no_leftover_engines, xdist):
    """A boot not ready after 5 s waited out its startup timeout (600 s by default) in silence,
    and a workload whose server stopped streaming waited out the stall timeout (60 s) the same
    way; only the teardown's /health check said its wait. Each now prints one line as it waits:
    the server, what it waits for, how much longer, and the setting that bounds it."""
    if xdist:
        pytest.importorskip("xdist")
    faulty_project(pytester, ("--fault-slow-start", "1", "--fault-hang-after", "0"), workloads=ONE_WORKLOAD,
                   extra="stall_timeout = 3")
    # the thresholds (5 s and 3 s) at 1 s, as the run's own processes (xdist's workers too) read
    # them: the waits said are the same, the test waits seconds less for them
    pytester.makeconftest("import pytest_specdec.client as client\n"
                          "import pytest_specdec.servers.process as process\n"
                          "process.BOOT_QUIET_S = client.STALL_QUIET_S = 1.0\n")
    pytester.makepyfile(test_generation="""
def test_generate(specdec_server):
    specdec_server.generate("hi", max_new_tokens=8)
""")
    result = run(pytester, *xdist)
    result.assert_outcomes(failed=1)
    setting = r"pyproject\.toml \[tool\.specdec\] key '{}'"
    assert len(said_lines(result, "ddtree-tp1-b8",
                          r"not ready after \ds; waiting up to \d+s more for its warm-up to answer "
                          r"/health_generate \(bound: the startup timeout, " + setting.format("startup_timeout")
                          + r"\); (?:its log's last line: .+|nothing in its log yet) \(log: .+\.log\)")) == 1, result.stderr.str()
    assert len(said_lines(result, "ddtree-tp1-b8",
                          r"no token for \ds while 1 request in flight; waiting up to \ds more before counting "
                          r"it as stalled \(bound: the stall timeout, " + setting.format("stall_timeout")
                          + r"\)")) == 1, result.stderr.str()


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["one-process", "xdist"])
def test_a_measured_workload_says_how_far_it_is_as_it_goes(pytester, no_leftover_engines, xdist):
    """After its warm-up line ("warming up, ... before it is measured") a workload said nothing
    while its measured requests ran (29 s of 160 prompts on the CPU, minutes on a GPU), so the
    last line on screen said "warming up". It now says the requests done, their tokens and the
    time as it goes, past capture and from an xdist worker too, after its warm-up line."""
    if xdist:
        pytest.importorskip("xdist")
    # each decode step ten times as long: the measured requests outlast the patched interval
    project(pytester, methods=("ar",), prompts=4, max_new_tokens=24, engine_args=("--fault-slow-factor", "10"))
    # the intervals (10 s, then 30 s) at 0.2 s, as the run's own processes (xdist's workers too)
    # read them: the line said is the same, the test waits seconds less for it
    pytester.makeconftest("import pytest_specdec.client as client\n"
                          "client.PROGRESS_FIRST_S = client.PROGRESS_EVERY_S = 0.2\n")
    result = run(pytester, *xdist)
    result.assert_outcomes(passed=1)
    warming = said_lines(result, "ar-tp1", r"workload 'chat': warming up, \d+ untimed requests? at concurrency "
                                           r"\d+ before it is measured")
    measuring = said_lines(result, "ar-tp1", r"workload 'chat': measuring, [0-3] of 4 requests done, "
                                             r"[\d,]+ tokens? so far in \d+ s")
    assert len(warming) == 1 and measuring, result.stderr.str()
    stderr = result.stderr.str()
    assert stderr.index("warming up") < stderr.index("measuring"), stderr


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["one-process", "xdist"])
def test_a_long_warm_up_says_how_far_it_is_as_it_goes(pytester, no_leftover_engines, xdist):
    """A large `warmup_requests` (minutes on a GPU) said nothing after "warming up, ... before it is
    measured" until the measured requests' first progress line. The warm-up now says its untimed
    requests done as it goes, past capture and from an xdist worker too, and none once it has
    ended: the measured requests' lines count their own 4, the journal their tokens alone."""
    if xdist:
        pytest.importorskip("xdist")
    # each decode step ten times as long: the 6 untimed requests outlast the patched interval
    project(pytester, methods=("ar",), prompts=4, max_new_tokens=24, engine_args=("--fault-slow-factor", "10"),
            extra="warmup_requests = 6")
    pytester.makeconftest("import pytest_specdec.client as client\n"
                          "client.PROGRESS_FIRST_S = client.PROGRESS_EVERY_S = 0.2\n")
    result = run(pytester, *xdist)
    result.assert_outcomes(passed=1)
    stderr = result.stderr.str()
    warm = said_lines(result, "ar-tp1", r"workload 'chat': warming up, [0-5] of 6 untimed requests done, "
                                        r"[\d,]+ tokens? so far in \d+ s")
    measuring = said_lines(result, "ar-tp1", r"workload 'chat': measuring, [0-3] of 4 requests done, "
                                             r"[\d,]+ tokens? so far in \d+ s")
    assert warm and measuring, stderr
    # the warm-up's line, then its progress, then the measured requests': none of it after it ended
    assert stderr.index("warming up, 6 untimed") < stderr.index(warm[0]) < stderr.rindex(warm[-1]) \
        < stderr.index(measuring[0]), stderr
    record, = journal_figures(pytester)
    measurement = record["data"]["details"]["measurement"]
    assert (measurement["num_requests"], measurement["completion_tokens"], measurement["warmup_requests"]) \
        == (4, 4 * 24, 6)


# One process only: from an xdist worker this is the same printer (the server's own, from the pool:
# the slow boot's xdist case says through it) and the same probe_saying (the frozen server's
# xdist case says its teardown probe through it).
def test_a_liveness_check_inside_a_test_says_its_wait(pytester, no_leftover_engines):
    """specdec_server.check_alive() on a frozen server (as run() makes after a workload) waited
    its /health limit in silence; it now says the rest of the wait once /health has been silent
    for 2 s, as the teardown's check does."""
    project(pytester, methods=("ar",), prompts=1, max_new_tokens=4, extra="stall_timeout = 3")  # the wait is said at 2 s
    pytester.makepyfile(test_generation="""
import os, signal


def test_freeze(specdec_server):
    os.kill(specdec_server.pids()[0], signal.SIGSTOP)
    specdec_server.check_alive()
""")
    result = run(pytester)
    result.assert_outcomes(failed=1)
    assert len(said_lines(result, "ar-tp1",
                          r"/health did not answer within 2s; waiting up to \d+s more before counting it as "
                          r"frozen \(bound: the stall timeout, pyproject\.toml \[tool\.specdec\] key "
                          r"'stall_timeout'\)")) == 1, result.stderr.str()
