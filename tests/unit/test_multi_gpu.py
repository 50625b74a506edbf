"""Multi-GPU scheduling under pytest-xdist, on a CPU with a simulated inventory (--specdec-gpus N).

Each pytester-style project runs the shipped test_generation plus `test_devices.py`, a user test
that asks its server which GPUs it may use (/server_info's `cuda_visible_devices`) and writes the
answer down. The GPU lease book keeps a history of every acquire, release and expiry, written
under its lock; replaying it shows that no GPU was ever held by two leases at once, and (with more
than one lease held at some moment) that configurations really ran side by side. No assertion
depends on wall-clock time.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("xdist")

from servers_support import started_environ  # noqa: E402
from test_bench_flow import GENERATION_TEST, engine_processes  # noqa: E402

from pytest_specdec.baselines import load_baselines  # noqa: E402
from pytest_specdec.collection import configuration_in_nodeid  # noqa: E402
from pytest_specdec.journal import Journal  # noqa: E402
from pytest_specdec.servers.leases import GpuLeases  # noqa: E402
from pytest_specdec.xdist_hooks import ConfigurationScheduling  # noqa: E402

pytestmark = pytest.mark.timeout(420)

KILL_ENV = "SPECDEC_TEST_KILL_WORKER_AT"

# A user test beside test_generation: the server reports what its process may use; the record
# lets the outer test match it against the lease book's history. With KILL_ENV naming this
# configuration, the worker SIGKILLs itself once, mid-test, while it holds the lease and its server.
DEVICES_TEST = f'''
import json, os, signal, urllib.request


def test_devices(specdec_server, specdec_spec, pytestconfig):
    with urllib.request.urlopen(specdec_server.url + "/server_info", timeout=30) as resp:
        info = json.load(resp)
    visible = info["cuda_visible_devices"]
    assert visible is not None, "the server was started without CUDA_VISIBLE_DEVICES"
    assert len(visible.split(",")) == specdec_spec.tp
    record = {{"spec": specdec_server.spec.id, "tp": specdec_spec.tp, "worker_pid": os.getpid(),
               "visible": visible}}
    fd = os.open(pytestconfig.rootpath / "seen.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, (json.dumps(record) + "\\n").encode())
    os.close(fd)
    if os.environ.get("{KILL_ENV}") == specdec_server.spec.id:
        marker = pytestconfig.rootpath / "killed-worker.pid"
        try:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return  # killed once already: the rescheduled test runs normally
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)
'''


def write_project(root: Path, *, methods=("ddtree",), tp=(1,), budgets=(8,), generation_test=True,
                  devices_test=True) -> None:
    def toml_list(values) -> str:
        return ", ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in values)

    (root / "pyproject.toml").write_text(f"""
[tool.specdec]
backend = "embedded"
startup_timeout = 90

[tool.specdec.matrix.cpu]
methods = [{toml_list(methods)}]
tp = [{toml_list(tp)}]
{f"budget = [{toml_list(budgets)}]" if "ddtree" in methods else ""}

[[tool.specdec.workloads]]
name = "chat"
prompts = "chat"
num_prompts = 2
max_new_tokens = 8
""")
    if generation_test:
        (root / "test_generation.py").write_text(GENERATION_TEST)
    if devices_test:
        (root / "test_devices.py").write_text(DEVICES_TEST)


def run_pytest(root: Path, *args: str, env: dict[str, str] | None = None,
               timeout: float = 360) -> pytest.RunResult:
    """pytest in `root`, in a subprocess of its own session (killed whole on timeout)."""
    environ = started_environ()
    environ.update(env or {}, PYTHONUNBUFFERED="1")
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args]
    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=root, env=environ, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"pytest {' '.join(args)} did not finish in {timeout:g}s:\n{out[-4000:]}\n{err[-2000:]}")
    print(out)
    print(err, file=sys.stderr)
    return pytest.RunResult(proc.returncode, out.splitlines(), err.splitlines(),
                            time.monotonic() - started)


def lease_history(root: Path) -> list[dict]:
    runs = sorted((root / ".specdec" / "artifacts").glob("run-*/leases"))
    assert len(runs) == 1, f"expected one run's lease book, found {runs}"
    return GpuLeases(runs[0], 0).history()


def seen(root: Path) -> list[dict]:
    path = root / "seen.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@dataclass
class Replay:
    peak_leases: int       # most leases held at one moment
    still_held: dict       # lease id -> the acquire event, for leases never released or expired
    acquires: list[dict]


def replay(events: list[dict], inventory: int) -> Replay:
    """Walk a lease history in order; fail on a GPU held twice, outside the inventory, or on a
    release of a lease that was never acquired."""
    held: dict[int, dict] = {}
    leases: dict[str, dict] = {}
    peak_leases = 0
    for event in events:
        kind = event["event"]
        if kind == "acquire":
            assert event["lease"] not in leases, f"lease {event['lease']} acquired twice"
            for gpu in event["gpus"]:
                assert 0 <= gpu < inventory, f"GPU {gpu} is outside the inventory of {inventory}: {event}"
                other = held.get(gpu)
                assert other is None, (f"GPU {gpu} leased to {event['owner']} (pid {event['pid']}) "
                                       f"while {other and other['owner']} (pid {other and other['pid']}) "
                                       f"held it")
                held[gpu] = event
            leases[event["lease"]] = event
            peak_leases = max(peak_leases, len(leases))
        elif kind in ("release", "expire"):
            acquired = leases.pop(event["lease"], None)
            assert acquired is not None, f"{kind} of a lease never acquired: {event}"
            assert acquired["gpus"] == event["gpus"] and acquired["pid"] == event["pid"]
            for gpu in acquired["gpus"]:
                del held[gpu]
        else:
            raise AssertionError(f"unknown lease event {event}")
    return Replay(peak_leases, leases, [e for e in events if e["event"] == "acquire"])


def assert_servers_saw_their_leases(history: list[dict], records: list[dict]) -> None:
    """Every server's CUDA_VISIBLE_DEVICES is exactly the GPUs its worker leased for it."""
    assert records, "no test_devices result was recorded"
    for record in records:
        matching = [e for e in history if e["event"] == "acquire" and e["owner"] == record["spec"]
                    and e["pid"] == record["worker_pid"]]
        assert matching, f"no lease for {record['spec']} by pid {record['worker_pid']}: {history}"
        assert record["visible"] == ",".join(str(g) for g in matching[-1]["gpus"]), record
        assert len(matching[-1]["gpus"]) == record["tp"]


# -- the lease history itself ----------------------------------------------------------------


def _acquire_and_vanish(run_dir: str) -> None:
    GpuLeases(Path(run_dir), 2).acquire(1, owner="killed-worker")
    os._exit(0)  # no release: as a SIGKILLed xdist worker leaves it


def test_lease_history_records_acquire_release_and_expiry(tmp_path):
    leases = GpuLeases(tmp_path, 2)
    first = leases.acquire(1, owner="ar-tp1")
    ctx = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    child = ctx.Process(target=_acquire_and_vanish, args=(str(tmp_path),))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    leases.release(first)
    both = leases.acquire(2, owner="dflash-tp2", timeout=10)  # finds the child's lease expired
    leases.release(both)
    events = leases.history()
    assert [(e["event"], e["owner"]) for e in events] == [
        ("acquire", "ar-tp1"), ("acquire", "killed-worker"), ("release", "ar-tp1"),
        ("expire", "killed-worker"), ("acquire", "dflash-tp2"), ("release", "dflash-tp2")]
    expire = events[3]
    assert expire["pid"] == child.pid and expire["by"] == os.getpid() and expire["gpus"] == [1]
    assert [e["time"] for e in events] == sorted(e["time"] for e in events)
    result = replay(events, 2)
    assert result.peak_leases == 2 and result.still_held == {}


def test_replay_catches_a_gpu_leased_twice():
    events = [
        {"event": "acquire", "lease": "a", "gpus": [0, 1], "owner": "x", "pid": 1},
        {"event": "acquire", "lease": "b", "gpus": [1], "owner": "y", "pid": 2},
    ]
    with pytest.raises(AssertionError, match=r"GPU 1 leased to y \(pid 2\) while x \(pid 1\) held it"):
        replay(events, 8)
    with pytest.raises(AssertionError, match="outside the inventory"):
        replay([dict(events[0], gpus=[8])], 8)


def test_a_torn_history_line_is_skipped(tmp_path):
    leases = GpuLeases(tmp_path, 1)
    leases.release(leases.acquire(1, owner="ar-tp1"))
    with open(leases.history_path, "a") as fh:
        fh.write('{"event": "acq')
    assert [e["event"] for e in leases.history()] == ["acquire", "release"]


def test_the_controller_finds_a_configuration_in_a_node_id():
    ids = ["ddtree-tp1-b1", "ddtree-tp1-b16", "blackwell-ddtree-tp1-b16", "ar-tp1"]
    cases = {
        "test_generation.py::test_generation[ddtree-tp1-b16-chat]": "ddtree-tp1-b16",
        "test_generation.py::test_generation[ddtree-tp1-b1-chat]": "ddtree-tp1-b1",
        "test_devices.py::test_devices[ddtree-tp1-b1]": "ddtree-tp1-b1",
        "t.py::test_x[blackwell-ddtree-tp1-b16-code]": "blackwell-ddtree-tp1-b16",
        "t.py::TestC::test_w[3-ar-tp1]": "ar-tp1",
        "t.py::test_plain": None,
        "t.py::test_other[ar-tp4]": None,
        "t.py::test_other[xar-tp1]": None,
    }
    assert {n: configuration_in_nodeid(n, ids) for n in cases} == cases


class FakeWorker:
    """What the scheduler uses of an xdist worker: it is sent test indices and told to finish."""

    def __init__(self, name: str) -> None:
        self.gateway = type("Gateway", (), {"id": name})()
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def test_loadgroup_schedules_whole_configurations_and_a_replacement_worker_finishes(pytester):
    config = pytester.parseconfig("--tx=2*popen", "--dist", "loadgroup")
    collection = ["test_devices.py::test_devices[ar-tp1]",
                  "test_generation.py::test_generation[ar-tp1-chat]",
                  "test_devices.py::test_devices[ddtree-tp1-b8]",
                  "test_generation.py::test_generation[ddtree-tp1-b8-chat]",
                  "test_other.py::test_plain"]
    sched = ConfigurationScheduling(config, None, ["ar-tp1", "ddtree-tp1-b8"])
    gw0, gw1 = FakeWorker("gw0"), FakeWorker("gw1")
    for node in (gw0, gw1):
        sched.add_node(node)
    for node in (gw0, gw1):
        sched.add_node_collection(node, collection)
    sched.schedule()
    assert (gw0.sent, gw1.sent) == ([0, 1, 4], [2, 3])  # one unit per configuration
    assert gw0.shutting_down and gw1.shutting_down

    for index in (2, 3):
        sched.mark_test_complete(gw1, index)
    sched.remove_node(gw1)
    sched.mark_test_complete(gw0, 0)
    assert sched.remove_node(gw0) == collection[1]  # gw0 died running ar-tp1's second test
    gw2 = FakeWorker("gw2")
    sched.add_node(gw2)
    sched.add_node_collection(gw2, collection)
    sched.schedule()
    assert gw2.sent == [4]  # the test gw0 died in is reported failed once, not run again
    # An xdist worker runs a test once it knows the next one or that none will come.
    assert gw2.shutting_down, "the replacement worker would wait forever for a next test"


def test_real_gpus_are_leased_by_nvlink_topology(pytester, monkeypatch):
    """On real GPUs the pool's lease book reads `nvidia-smi topo -m`; a simulated one does not."""
    from pytest_specdec import hardware
    from pytest_specdec.servers import leases

    gpus = tuple(hardware.GPU(i, "NVIDIA H200", "sm_90") for i in range(4))
    monkeypatch.setattr(hardware, "detect", lambda: hardware.Hardware(gpus, "nvidia-smi", 4))
    links = {(0, 2): "NV18", (2, 0): "NV18", (1, 3): "NV18", (3, 1): "NV18"}
    monkeypatch.setattr(leases, "read_topology", lambda: links)
    pytester.makepyprojecttoml('[tool.specdec]\nbackend = "embedded"\n')
    pytester.makepyfile("""
        def test_pair(specdec_pool):
            lease = specdec_pool.leases.acquire(2, owner="ddtree-tp2-b16")
            assert lease.gpus == (0, 2)  # the NVLink pair, not the lowest pair 0,1
    """)
    claims = pytester.path / "claims"  # a real inventory claims its GPUs host-wide: not in the host's folder
    pytester.runpytest_inprocess("-p", "no:cacheprovider", f"--specdec-gpu-claims={claims}").assert_outcomes(passed=1)
    monkeypatch.setattr(hardware, "detect", lambda: hardware.Hardware((), "none", 0))
    pytester.makepyfile("""
        def test_pair(specdec_pool):
            assert specdec_pool.leases.topology == {}
    """)
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "--specdec-gpus", "4").assert_outcomes(passed=1)


# -- four TP1 servers on two workers ----------------------------------------------------------

# Two configurations a worker: leases held side by side and reused GPUs, at half the engine boots and
# xdist workers of the 8 TP1 on -n 4 this ran before.
TP1_SPECS = [f"ddtree-tp1-b{b}" for b in range(1, 5)]


@pytest.fixture(scope="module")
def four_tp1(tmp_path_factory):
    """One run shared by the checks below: 4 TP1 configurations, 4 simulated GPUs, `-n 2`."""
    root = tmp_path_factory.mktemp("four-tp1")
    write_project(root, budgets=range(1, 5))
    result = run_pytest(root, "-n", "2", "--dist", "loadgroup", "--specdec-gpus", "4",
                        "--specdec-save-baseline", "--specdec-report", "report")
    deadline = time.monotonic() + 10
    while engine_processes(root) and time.monotonic() < deadline:
        time.sleep(0.2)
    return root, result


def test_four_tp1_configurations_all_pass_on_two_workers(four_tp1):
    root, result = four_tp1
    result.assert_outcomes(passed=8)
    assert sorted(r["spec"] for r in seen(root)) == sorted(TP1_SPECS)
    # pytest-benchmark is off under xdist; the bridge must not make it warn about that per test
    assert "Benchmark fixture was not used" not in result.stdout.str()
    assert engine_processes(root) == []


def test_no_gpu_is_ever_held_by_two_leases_and_leases_overlap(four_tp1):
    root, result = four_tp1
    history = lease_history(root)
    outcome = replay(history, 4)
    assert sorted(e["owner"] for e in outcome.acquires) == sorted(TP1_SPECS)  # one boot each
    assert outcome.still_held == {}, "leases left behind after the session"
    assert outcome.peak_leases >= 2, f"the configurations never ran side by side: {history}"
    assert len({e["pid"] for e in outcome.acquires}) >= 2, "only one worker leased GPUs"


def test_each_server_sees_only_its_leased_gpu(four_tp1):
    root, _ = four_tp1
    records = seen(root)
    assert_servers_saw_their_leases(lease_history(root), records)
    assert {len(r["visible"].split(",")) for r in records} == {1}
    assert len({r["visible"] for r in records}) >= 2, "every server was put on the same GPU"


def test_every_workers_results_reach_journal_summary_report_and_baseline(four_tp1):
    root, result = four_tp1
    test_ids = [f"test_generation[{spec}-chat]" for spec in TP1_SPECS]

    lines = (root / ".specdec" / "journal.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line whole: no torn or glued records
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(Journal(root / ".specdec" / "journal.jsonl").done()) == 4
    records = [r for r in records if "confirms" not in r]  # the figures, not their checks' marks
    assert sorted(r["config_id"] for r in records) == sorted(f"test_generation.py::{t}" for t in test_ids)
    assert all(r["status"] == "measured" and r["data"]["metrics"]["output_tok_s"]["value"] > 0
               for r in records)
    assert len({r["pid"] for r in records}) >= 2, "the journal holds one worker's results only"

    result.stdout.fnmatch_lines(["*specdec summary*"])
    summary = result.stdout.str().split("specdec summary", 1)[1]
    for spec in TP1_SPECS:
        assert f"{spec} " in summary, f"{spec} missing from the summary table"
    result.stdout.fnmatch_lines(["specdec: saved 4 result(s) into *cpu.json"])

    rows = json.loads((root / "report" / "results.json").read_text())["results"]
    assert sorted(r["test_id"] for r in rows) == sorted(test_ids)

    baseline = load_baselines(root / "baselines" / "cpu.json", "cpu")
    assert sorted(baseline.entries) == sorted(test_ids)
    assert all("accept_length" in baseline.entries[t] for t in test_ids)


# -- TP4 + TP4 + TP1 ------------------------------------------------------------------------------


def test_tp4_tp4_tp1_mix_never_oversubscribes_eight_gpus(tmp_path):
    write_project(tmp_path, tp=(1, 4), budgets=(8, 16))
    result = run_pytest(tmp_path, "-n", "3", "--dist", "loadgroup", "--specdec-gpus", "8",
                        "-k", "not (tp1 and b16)")  # ddtree-tp4-b8, ddtree-tp4-b16, ddtree-tp1-b8
    result.assert_outcomes(passed=6)  # under xdist the controller does not count deselected items
    history = lease_history(tmp_path)
    outcome = replay(history, 8)
    assert sorted((e["owner"], len(e["gpus"])) for e in outcome.acquires) == [
        ("ddtree-tp1-b8", 1), ("ddtree-tp4-b16", 4), ("ddtree-tp4-b8", 4)]
    for event in outcome.acquires:
        if len(event["gpus"]) == 4:  # aligned blocks, so two TP4 servers fit 8 GPUs at all
            assert event["gpus"] in ([0, 1, 2, 3], [4, 5, 6, 7]), event
    assert outcome.still_held == {}
    assert_servers_saw_their_leases(history, seen(tmp_path))


# -- a worker killed mid-test -----------------------------------------------------------------------


def test_a_killed_workers_lease_is_recovered_and_the_run_finishes(tmp_path):
    """One GPU, two workers: until the killed worker's lease is recovered, nothing else can run.

    The test the worker died in is reported once, as failed ("worker crashed", in the summary
    table too), never run again; the configuration's next test goes to the replacement worker,
    which needs the GPU the dead worker held.
    """
    write_project(tmp_path, methods=("ar", "ddtree"), budgets=(8,))
    # the files' order decides which test the worker dies in: pytest-randomly's shuffle would move it
    result = run_pytest(tmp_path, "-p", "no:randomly", "-n", "2", "--dist", "loadgroup", "--specdec-gpus", "1",
                        env={KILL_ENV: "ar-tp1"})
    killed = int((tmp_path / "killed-worker.pid").read_text())
    result.stdout.fnmatch_lines(["*replacing crashed worker gw*"])
    result.assert_outcomes(failed=1, passed=3)
    crashed = "test_devices.py::test_devices[ar-tp1]"
    outcomes = [line for line in result.stdout.lines
                if crashed in line and line.startswith(("PASSED", "FAILED"))]
    assert len(outcomes) == 1 and outcomes[0].startswith(f"FAILED {crashed} - worker crashed")
    result.stdout.fnmatch_lines(["*specdec summary*", "ar-tp1 * FAILED: worker crashed: xdist "
                                 "worker 'gw*' died while running test_devices.py::test_devic*"])
    for spec in ("ar-tp1", "ddtree-tp1-b8"):
        result.stdout.fnmatch_lines([f"PASSED test_generation.py::test_generation[[]{spec}-chat[]]"])
    records = seen(tmp_path)
    assert sorted(r["spec"] for r in records) == ["ar-tp1", "ddtree-tp1-b8"]

    history = lease_history(tmp_path)
    outcome = replay(history, 1)
    expired = [e for e in history if e["event"] == "expire"]
    assert [(e["owner"], e["pid"]) for e in expired] == [("ar-tp1", killed)]
    after = history[history.index(expired[0]) + 1:]
    # The rescheduled configuration leased the GPU again (the other one ran before or after).
    assert "ar-tp1" in [e["owner"] for e in after if e["event"] == "acquire"]
    assert sorted({e["owner"] for e in outcome.acquires}) == ["ar-tp1", "ddtree-tp1-b8"]
    assert all(e["pid"] != killed for e in after)
    assert outcome.still_held == {}
    assert_servers_saw_their_leases(history, records)
    deadline = time.monotonic() + 10
    while engine_processes(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert engine_processes(tmp_path) == [], "the killed worker's engine survived"


# -- waiting for GPUs ------------------------------------------------------------------------------

# Another configuration holds the only GPU for the whole test, so the test's own server waits.
HELD_ELSEWHERE = """
import pytest


@pytest.fixture(autouse=True)
def gpu_held_elsewhere(specdec_pool):
    lease = specdec_pool.leases.acquire(1, owner="other-tp1")
    yield
    specdec_pool.leases.release(lease)
"""


def test_the_gpu_wait_is_bounded_by_its_option_and_both_name_where_it_was_set(tmp_path):
    """The wait for free GPUs was fixed at an hour: a configuration queued behind longer ones
    failed after it, and a CI run could not bound it lower; neither message said how to change it."""
    write_project(tmp_path, methods=("ar",), generation_test=False, devices_test=False)
    toml = tmp_path / "pyproject.toml"
    toml.write_text(toml.read_text().replace("startup_timeout = 90", "startup_timeout = 90\ngpu_wait_timeout = 0.5"))
    (tmp_path / "conftest.py").write_text(HELD_ELSEWHERE)
    (tmp_path / "test_waits.py").write_text("def test_boot(specdec_server):\n    pass\n")
    result = run_pytest(tmp_path, "--specdec-gpus", "1", timeout=90)
    result.assert_outcomes(errors=1)  # the server fixture fails the test's setup
    where = "pyproject.toml [[]tool.specdec[]] key 'gpu_wait_timeout'"
    result.stderr.fnmatch_lines([f"specdec: ar-tp1 waits for 1 free GPU among GPU 0: held by other-tp1 (pid *) GPU 0; "
                                 f"the test fails after 0.5s without them ({where})"])
    result.stdout.fnmatch_lines([f"*server ar-tp1: ar-tp1 waited 0.5s for 1 free GPU among GPU 0; held: other-tp1 "
                                 f"(pid *): GPU 0; raise {where} to wait longer*"])
    result.stdout.fnmatch_lines(["specdec: settings *gpu_wait_timeout=0.5 (pyproject.toml [[]tool.specdec[]])*"])


# -- more GPUs than exist --------------------------------------------------------------------------


def test_a_configuration_larger_than_the_inventory_skips_with_a_reason(tmp_path):
    write_project(tmp_path, methods=("ar",), tp=(8,), devices_test=False)
    result = run_pytest(tmp_path, "-n", "2", "--dist", "loadgroup", "--specdec-gpus", "4")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED*needs 8 GPUs; found: 4 simulated GPUs*"])
    assert not list((tmp_path / ".specdec").glob("artifacts/run-*/leases/lease-history.jsonl"))


DIST_LOAD_LINE = "specdec: --dist load may give one configuration's tests to several workers"


def test_a_chosen_dist_mode_on_an_attached_server_says_the_workers_share_it():
    """Attached, nothing boots per worker: the workers take turns on the one server, where two
    workloads at once would each read as another client's load in the other's figures."""
    from pytest_specdec.xdist_hooks import dist_cost_line

    assert dist_cost_line("load", None) == f"{DIST_LOAD_LINE}, each booting its server; --dist loadgroup (or " \
                                           f"-n alone) boots each once"
    assert dist_cost_line("worksteal", "http://gpu-box:30000") == (
        "specdec: --dist worksteal may give one configuration's tests to several workers, which take turns on "
        "the attached server http://gpu-box:30000, one test at a time (two at once would each measure the other's "
        "load, and fail as shared), so no faster than one worker; --dist loadgroup (or -n alone) gives them to one "
        "worker")


def test_a_bare_n_boots_each_configuration_once(tmp_path):
    """`-n 2` alone meant xdist's "load": a configuration's two tests could go to both workers,
    each booting the server. It now schedules by configuration."""
    write_project(tmp_path, methods=("ar",))
    result = run_pytest(tmp_path, "-n", "2", "--specdec-gpus", "2")
    result.assert_outcomes(passed=2)
    assert not any(DIST_LOAD_LINE in line for line in result.outlines)
    logs = sorted(p.name for p in (tmp_path / ".specdec" / "artifacts").glob("run-*/logs/*.log"))
    assert logs == ["ar-tp1.log"], logs


def test_a_dist_load_the_user_chose_is_kept_with_a_line_saying_its_cost(tmp_path):
    """A mode the user chose is kept, with a header line saying what it costs. The line follows
    the workers' collection, not what runs: a configuration larger than the inventory (skipped,
    no server booted) names the matrix as well as one that boots."""
    write_project(tmp_path, methods=("ar",), tp=(8,), devices_test=False)
    result = run_pytest(tmp_path, "-n", "2", "--dist", "load", "--specdec-gpus", "2")
    result.assert_outcomes(skipped=1)
    assert any(DIST_LOAD_LINE in line for line in result.outlines), result.stdout.str()[-3000:]
