"""Host-wide GPU claims: two runs on one host, each with its own lease book, never lease one GPU
at once. The claim folder and a 'real' inventory are injected, so this runs on a CPU machine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from pytest_specdec.errors import SpecdecUsageError
from pytest_specdec.servers.host_claims import HostClaims
from pytest_specdec.servers.leases import GpuLeaseError, GpuLeases

pytestmark = pytest.mark.timeout(120)

KEYS = {0: "GPU-aaaa-0000", 1: "GPU-bbbb-1111"}


def _other_run(procs: list, claims: Path, run_dir: Path, n: int) -> subprocess.Popen:
    """Another pytest run's worker: its own book, the host's claims; leases `n` GPUs, starts a
    'server' on them (its pid on the `held` line), and releases its lease (staying alive) when
    told `release` on stdin."""
    code = textwrap.dedent(f"""
        import subprocess, sys
        from pathlib import Path
        from pytest_specdec.servers.host_claims import HostClaims
        from pytest_specdec.servers.leases import GpuLeases
        claims = HostClaims(Path({str(claims)!r}), {KEYS!r}, run="run-a", project="/home/ana/bench")
        leases = GpuLeases(Path({str(run_dir)!r}), [0, 1], claims=claims)
        lease = leases.acquire({n}, owner="ar-tp{n}")
        server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        print("held", server.pid, flush=True)
        assert sys.stdin.readline().strip() == "release"
        leases.release(lease)
        print("released", flush=True)
        sys.stdin.readline()
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    proc.server = None
    procs.append(proc)
    word, server = proc.stdout.readline().split()
    assert word == "held"
    proc.server = int(server)
    return proc


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.server is not None:
            try:
                os.kill(proc.server, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _this_run(tmp_path: Path, said: list[str], on_wait=None) -> GpuLeases:
    claims = HostClaims(tmp_path / "claims", KEYS, run="run-b", project="/home/bo/bench")

    def announce(text: str) -> None:
        said.append(text)
        if on_wait is not None:
            on_wait()

    return GpuLeases(tmp_path / "run-b", [0, 1], claims=claims, announce=announce)


def test_another_runs_gpu_is_passed_over_then_waited_for_naming_its_holder(tmp_path, procs):
    """Each run's book was its own: both leased GPU 0."""
    other = _other_run(procs, tmp_path / "claims", tmp_path / "run-a", 1)
    said: list[str] = []
    leases = _this_run(tmp_path, said)
    assert leases.acquire(1, owner="ar-tp1").gpus == (1,)  # the next free GPU, at once
    assert said == []
    with pytest.raises(GpuLeaseError, match=rf"waited 0.3s for 1 free GPU among GPUs 0,1; held: ar-tp1 \(pid {os.getpid()}\): "
                                            rf"GPU 1; GPU 0 by another run on this host, pid {other.pid} \(user .+, "
                                            rf"run run-a, project /home/ana/bench, since .+\)"):
        leases.acquire(1, owner="ddtree-tp1-b8", timeout=0.3, poll=0.02)
    assert len(said) == 1, "the holder is named once, not at every look"
    assert said[0].startswith(f"ddtree-tp1-b8 waits: GPU 0 is claimed by another run on this host, pid {other.pid} ")
    assert said[0].endswith("; the test fails after 0.3s without them (--specdec-gpu-wait-timeout)")


def test_another_run_moving_on_to_its_next_configuration_is_named_once(tmp_path):
    """The other run's claim names when it was taken; each of its configurations claims anew, and
    every new time made the wait announce the same run again, a line per configuration."""
    theirs = HostClaims(tmp_path / "claims", KEYS, run="run-a", project="/home/ana/bench")  # as another process
    assert theirs.claim([0]) is None
    path = tmp_path / "claims" / "GPU-aaaa-0000.lock"

    def next_configuration() -> None:
        who = json.loads(path.read_text())
        path.write_text(json.dumps({**who, "since": who["since"] + 60}))

    said: list[str] = []
    leases = _this_run(tmp_path, said, on_wait=next_configuration)
    with pytest.raises(GpuLeaseError, match="GPU 0 by another run on this host"):
        leases.acquire(2, owner="ar-tp2", timeout=0.3, poll=0.02)
    assert len(said) == 1 and "run run-a, project /home/ana/bench" in said[0]


def test_a_waiting_run_is_not_overtaken_by_the_other_runs_next_configuration(tmp_path):
    """The other run let go of GPU 0 between two configurations and claimed it again at once for
    its next one, so this run's TP2 configuration waited as long as the other had any left."""
    theirs = HostClaims(tmp_path / "claims", KEYS, run="run-a", project="/home/ana/bench")  # as another process
    assert theirs.claim([0]) is None
    refused: list = []

    def their_next_configuration() -> None:
        theirs.release([0])
        refused.append(theirs.claim([0]))

    said: list[str] = []
    leases = _this_run(tmp_path, said, on_wait=their_next_configuration)
    lease = leases.acquire(2, owner="ar-tp2", timeout=5, poll=0.02)
    assert lease.gpus == (0, 1) and len(refused) == 1
    gpu, holder = refused[0]
    assert gpu == 0 and holder.startswith(f"pid {os.getpid()} (user ") and "run run-b, project /home/bo/bench, " \
        "waiting for it since " in holder
    leases.release(lease)
    assert theirs.claim([0, 1]) is None  # granted, it reserves nothing more


def test_a_reservation_ends_when_its_request_gives_up(tmp_path):
    theirs = HostClaims(tmp_path / "claims", KEYS, run="run-a", project="/home/ana/bench")
    assert theirs.claim([0]) is None
    leases = _this_run(tmp_path, [])
    with pytest.raises(GpuLeaseError):
        leases.acquire(2, owner="ar-tp2", timeout=0.2, poll=0.02)
    theirs.release([0])
    assert theirs.claim([0, 1]) is None


def test_a_waiting_run_gets_the_gpu_when_the_other_releases_its_lease(tmp_path, procs):
    other = _other_run(procs, tmp_path / "claims", tmp_path / "run-a", 2)

    def release_there() -> None:
        other.stdin.write("release\n")
        other.stdin.flush()
        assert other.stdout.readline().strip() == "released"

    said: list[str] = []
    leases = _this_run(tmp_path, said, on_wait=release_there)
    assert leases.acquire(2, owner="ar-tp2", timeout=60).gpus == (0, 1)
    assert len(said) == 1 and other.poll() is None  # it waited, and the other run lives on
    held = json.loads((tmp_path / "claims" / "GPU-aaaa-0000.lock").read_text())
    assert held["pid"] == os.getpid() and held["run"] == "run-b" and held["project"] == "/home/bo/bench"


def test_a_waiting_run_gets_the_gpu_when_the_other_is_killed(tmp_path, procs):
    other = _other_run(procs, tmp_path / "claims", tmp_path / "run-a", 2)
    said: list[str] = []
    leases = _this_run(tmp_path, said, on_wait=lambda: (other.kill(), other.wait()))
    assert leases.acquire(1, owner="ar-tp1", timeout=60).gpus == (0,)  # the kernel let go of its flock
    assert len(said) == 1 and other.returncode == -9
    os.kill(other.server, 0)  # its server outlived it without keeping the claim (no inherited descriptor)


def test_releasing_a_lease_lets_go_of_its_claims(tmp_path):
    mine = GpuLeases(tmp_path / "run-b", [0, 1], claims=HostClaims(tmp_path / "claims", KEYS, run="b", project="/b"))
    theirs = HostClaims(tmp_path / "claims", KEYS, run="a", project="/a")  # another open file: as another process
    lease = mine.acquire(2, owner="ar-tp2")
    gpu, holder = theirs.claim([1])
    assert gpu == 1 and holder.startswith(f"pid {os.getpid()} (user ") and "run b, project /b, since " in holder
    mine.release(lease)
    assert (tmp_path / "claims" / "GPU-aaaa-0000.lock").read_text() == ""  # no stale name once free
    assert theirs.claim([0, 1]) is None and theirs.held() == (0, 1)
    with pytest.raises(GpuLeaseError, match="GPU 0 by another run on this host, pid"):
        mine.acquire(1, owner="ar-tp1", timeout=0.1)
    theirs.release([0, 1])
    lease = mine.acquire(2, owner="ar-tp2", timeout=0.1)
    mine.release_all_of(os.getpid())  # a worker's session end lets go too
    assert theirs.claim([0, 1]) is None


def test_a_folder_without_flock_is_a_usage_error_and_leaks_no_descriptor(tmp_path, monkeypatch):
    """A filesystem that cannot lock (ENOLCK) names the file and the fix, and every descriptor
    opened on the way is closed, the GPU claimed before it let go."""
    import errno
    import fcntl

    claims = HostClaims(tmp_path / "claims", KEYS, run="r", project="p")
    real = fcntl.flock

    def flock(fd, op):
        if os.readlink(f"/proc/self/fd/{fd}") == str(claims.path(1)):
            raise OSError(errno.ENOLCK, "No locks available")
        return real(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock)
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(SpecdecUsageError, match=r"No locks available: the folder's filesystem cannot lock files; set --specdec-gpu-claims "
                                              r"to a folder on a local filesystem"):
        claims.claim([0, 1])
    assert len(os.listdir("/proc/self/fd")) == before
    assert claims.held() == ()


def test_claims_are_all_or_none_and_files_fall_back_to_the_index(tmp_path):
    a = HostClaims(tmp_path / "claims", {0: "GPU-aaaa"}, run="a", project="/a")
    b = HostClaims(tmp_path / "claims", {0: "GPU-aaaa"}, run="b", project="/b")
    assert a.claim([3]) is None and (tmp_path / "claims" / "gpu3.lock").is_file()  # no UUID known
    busy = b.claim([0, 3])
    assert busy is not None and busy[0] == 3 and b.held() == ()  # GPU 0, claimed on the way, let go
    assert a.claim([0]) is None


def test_the_default_folder_is_shared_by_the_hosts_users(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    from pytest_specdec.servers.host_claims import default_directory

    claims = HostClaims(default_directory(), KEYS, run="a", project="/a")
    assert claims.directory == tmp_path / "pytest-specdec-gpu-claims"
    assert claims.directory.stat().st_mode & 0o7777 == 0o1777
    assert claims.claim([0]) is None
    assert (claims.directory / "GPU-aaaa-0000.lock").stat().st_mode & 0o777 == 0o666
    claims.release([0])


def test_a_symlinked_claim_file_is_refused_naming_it_and_the_fix(tmp_path):
    """Another user of a shared folder could point a claim file at one of this user's files.
    The refusal names the file and what to do, not an OSError; what was claimed on the way is let go."""
    victim = tmp_path / "notes.txt"
    victim.write_text("keep me")
    (tmp_path / "claims").mkdir()
    link = tmp_path / "claims" / "GPU-aaaa-0000.lock"
    link.symlink_to(victim)
    claims = HostClaims(tmp_path / "claims", KEYS, run="a", project="/a", setting="ini specdec_gpu_claims")
    with pytest.raises(SpecdecUsageError) as refused:
        claims.claim([1, 0])
    assert str(refused.value).startswith(f"GPU claim file {link} is a symbolic link (made by user ")
    assert str(refused.value).endswith(
        "), which a claim never follows (another user of the folder could point it at one of your files): remove "
        "the link (in a shared folder only its owner or root can), or set ini specdec_gpu_claims to another "
        "folder every run on this host uses")
    assert claims.held() == () and HostClaims(tmp_path / "claims", KEYS, run="b", project="/b").claim([1]) is None
    assert victim.read_text() == "keep me"


def test_a_symlinked_claim_file_fails_the_test_with_one_line(pytester, monkeypatch, tmp_path):
    """Through the server fixture: the message, no traceback."""
    from pytest_specdec import hardware

    gpus = (hardware.GPU(0, "NVIDIA H200", "sm_90", uuid="GPU-8f6d0c1e"),)
    monkeypatch.setattr(hardware, "detect", lambda: hardware.Hardware(gpus, "nvml", 1))
    link = tmp_path / "claims" / "GPU-8f6d0c1e.lock"
    link.parent.mkdir()
    link.symlink_to(tmp_path / "notes.txt")
    pytester.makepyprojecttoml('[tool.specdec]\nbackend = "embedded"\n[tool.specdec.matrix.hopper]\n'
                               'methods = ["ar"]\n')
    pytester.makepyfile("def test_served(specdec_server): pass")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", f"--specdec-gpu-claims={link.parent}")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"server ar-tp1: GPU claim file {link} is a symbolic link (made by user *), "
                                 f"which a claim never follows*: remove the link*, or set --specdec-gpu-claims "
                                 f"to another folder every run on this host uses"])
    assert "OSError" not in result.stdout.str() and "Traceback" not in result.stdout.str()


def test_a_real_inventory_claims_host_wide_and_a_simulated_one_does_not(pytester, monkeypatch, tmp_path):
    """The plugin wires the claims to a real inventory only; the header names the folder."""
    from pytest_specdec import hardware

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the default folder, away from the host's
    default = tmp_path / "pytest-specdec-gpu-claims"
    gpus = (hardware.GPU(0, "NVIDIA H200", "sm_90", uuid="GPU-8f6d0c1e"), hardware.GPU(1, "NVIDIA H200", "sm_90"))
    monkeypatch.setattr(hardware, "detect", lambda: hardware.Hardware(gpus, "nvml", 2))
    pytester.makepyprojecttoml('[tool.specdec]\nbackend = "embedded"\n[tool.specdec.matrix.hopper]\n'
                               'methods = ["ar"]\n[tool.specdec.matrix.cpu]\nmethods = ["ar"]\n')
    pytester.makepyfile(f"""
        import json, os
        from pathlib import Path

        def test_claims(specdec_pool, specdec_spec):
            lease = specdec_pool.leases.acquire(2, owner="ar-tp2")
            held = json.loads((Path({str(default)!r}) / "GPU-8f6d0c1e.lock").read_text())
            assert held["pid"] == os.getpid() and held["project"] == {str(pytester.path)!r}
            assert (Path({str(default)!r}) / "gpu1.lock").is_file()  # no UUID known: the index
            specdec_pool.leases.release(lease)
            assert (Path({str(default)!r}) / "GPU-8f6d0c1e.lock").read_text() == ""
    """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=1)  # the other family's matrix skips
    result.stdout.fnmatch_lines([f"specdec: GPU claims {default} (default): another run on this host waits*"])
    chosen = tmp_path / "chosen"
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--co", "-o", f"specdec_gpu_claims={chosen}")
    result.stdout.fnmatch_lines([f"specdec: GPU claims {chosen} (-o specdec_gpu_claims): *"])
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", f"--specdec-gpu-claims={a_file}")
    result.assert_outcomes(errors=1, skipped=1)  # the pool fixture fails its setup
    result.stdout.fnmatch_lines([f"*pytest-specdec: GPU claims folder {a_file}: not a folder this user can write in; "
                                 f"set --specdec-gpu-claims to a folder every run on this host can write"])

    monkeypatch.setattr(hardware, "detect", lambda: hardware.Hardware((), "none", 0))
    default.rename(tmp_path / "earlier")
    pytester.makepyfile("""
        def test_claims(specdec_pool, specdec_spec):
            assert specdec_pool.leases.claims is None
            specdec_pool.leases.release(specdec_pool.leases.acquire(2, owner="ar-tp2"))
    """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--specdec-gpus", "2")
    result.assert_outcomes(passed=1, skipped=1)  # the other family's matrix skips
    result.stdout.fnmatch_lines(["specdec: GPU claims none: the inventory is simulated*"])
    assert not default.exists()


@pytest.mark.parametrize("backend", ["embedded", "sglang"])
def test_a_dry_run_on_a_gpu_host_claims_the_gpus_its_servers_run_on(tmp_path, monkeypatch, backend):
    """--specdec-arch on a host with GPUs gives its servers the run's GPUs as CUDA_VISIBLE_DEVICES
    (SGLang, or the engine with device = "cuda", computes on them) but claimed none: a dry run
    leased GPU 0 while another run held it, and both servers shared it. Now it claims them as any
    run does and passes over GPU 0; a slot beyond the run's GPUs is claimed by nobody and its
    server sees no GPU."""
    from pytest_specdec import backends, hardware
    from pytest_specdec.config import SpecdecConfig
    from pytest_specdec.configuration import MatrixCase
    from pytest_specdec.options import resolve
    from pytest_specdec.state import RunState

    host = tuple(hardware.GPU(i, "NVIDIA H100", "sm_90", 81559, uuid) for i, uuid in KEYS.items())
    dry = hardware.resolve("sm_120", 3, hardware.Hardware(host, "nvml", 2, 2))  # two GPUs and a slot
    chosen = backends.EmbeddedBackend("requested") if backend == "embedded" else backends.SGLangBackend("requested")
    monkeypatch.setattr(backends, "_provision", lambda model, st: f"/cache/{model}")
    run = RunState(SpecdecConfig(source="test", root=tmp_path, model="org/model"),
                   resolve({"gpu_claims": str(tmp_path / "claims")}, {}, {}, "test"), dry, chosen)
    assert run.dry_run and run.gpu_claims == tmp_path / "claims"
    theirs = HostClaims(tmp_path / "claims", KEYS, run="a", project="/a")  # another open file: as another run
    assert theirs.claim([0]) is None
    pool = chosen.pool(run, tmp_path / "run-b")
    lease = pool.leases.acquire(1, owner="ar-tp1", timeout=5)
    assert lease.gpus == (1,) and pool.leases.claims.held() == (1,)
    assert json.loads((tmp_path / "claims" / f"{KEYS[1]}.lock").read_text())["pid"] == os.getpid()
    slot = pool.leases.acquire(1, owner="dflash-tp1", timeout=5)
    assert slot.gpus == (2,) and pool.leases.claims.held() == (1,)  # no GPU behind it: no claim file
    assert sorted(p.name for p in (tmp_path / "claims").iterdir()) == [f"{KEYS[0]}.lock", f"{KEYS[1]}.lock"]
    spec = chosen.server_spec(MatrixCase("blackwell", "ar", 1, None), run)
    assert pool.factory(spec, lease.gpus).extra_env == {}
    assert pool.factory(spec, slot.gpus).extra_env == {"CUDA_VISIBLE_DEVICES": "-1"}
    pool.leases.release(lease)
    pool.leases.release(slot)
    assert pool.leases.claims.held() == ()
    theirs.release([0])


@pytest.mark.parametrize("backend", ["sglang", "auto"])
def test_a_dry_run_on_sglang_beyond_the_runs_gpus_stops_before_any_server_boots(pytester, monkeypatch, tmp_path,
                                                                                backend):
    """--specdec-arch sm_120 --specdec-gpus 4 on a run given two GPUs put SGLang servers on the slots
    beyond with CUDA_VISIBLE_DEVICES=-1, where SGLang cannot start: a red test per such server, each
    after its startup. Now the run stops at collection with one line naming the problem and the fix;
    no server is launched and no GPU claimed."""
    from pytest_specdec import backends, hardware

    host = tuple(hardware.GPU(i, "NVIDIA H100", "sm_90", 81559, uuid) for i, uuid in KEYS.items())
    monkeypatch.setattr(hardware, "detect", lambda: hardware.Hardware(host, "nvml", 2, 2))
    monkeypatch.setattr(backends, "sglang_importable", lambda python=None: True)
    launched = tmp_path / "launched"
    python = tmp_path / "sglang-python"  # every launch is written down, and fails
    python.write_text(f"#!/bin/sh\necho \"$CUDA_VISIBLE_DEVICES\" >> {launched}\nexit 1\n")
    python.chmod(0o755)
    (pytester.path / "models" / "target").mkdir(parents=True)
    pytester.makepyprojecttoml(f'[tool.specdec]\nmodel = "models/target"\nstartup_timeout = 5\n'
                               f'[tool.specdec.matrix.blackwell]\nmethods = ["ar"]\ntp = [1, 4]\n'
                               f'[tool.specdec.sglang]\npython = "{python}"\n')
    pytester.makepyfile("def test_served(specdec_server): pass")
    claims = tmp_path / "claims"
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--specdec-arch=sm_120", "--specdec-gpus=4",
                                          f"--specdec-backend={backend}", f"--specdec-gpu-claims={claims}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "*pytest-specdec: --specdec-gpus 4: a dry run of 4 GPUs laid over the 2 this run was given (0, 1); "
        "SGLang's servers need a GPU, and the 2 slots beyond have none*; set --specdec-gpus to at most 2, or "
        "rehearse on the embedded engine, which runs on the CPU (set --specdec-backend to embedded)"])
    assert not launched.exists() and not claims.exists()
    pytester.makepyfile("def test_served(specdec_spec): pass")  # no server needed: nothing to refuse
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "--specdec-arch=sm_120", "--specdec-gpus=4",
                                 f"--specdec-backend={backend}").assert_outcomes(passed=2)


def test_the_embedded_engine_on_the_cpu_serves_a_dry_runs_slots_beyond_the_runs_gpus(pytester, monkeypatch,
                                                                                      tmp_path):
    """The same rehearsal on the engine: TP1 on the run's GPU 0, TP4 on slots that include the two
    with no GPU behind them (its server sees none, which the engine on the CPU does not need)."""
    from pytest_specdec import hardware

    host = tuple(hardware.GPU(i, "NVIDIA H100", "sm_90", 81559, uuid) for i, uuid in KEYS.items())
    monkeypatch.setattr(hardware, "detect", lambda: hardware.Hardware(host, "nvml", 2, 2))
    pytester.makepyprojecttoml('[tool.specdec.matrix.blackwell]\nmethods = ["ar"]\ntp = [1, 4]\n')
    pytester.makepyfile("""
        import json, urllib.request

        def test_served(specdec_server, specdec_spec):
            with urllib.request.urlopen(specdec_server.url + "/server_info") as response:
                seen = json.load(response)["cuda_visible_devices"]
            assert seen == ("0" if specdec_spec.tp == 1 else "-1")
    """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--specdec-arch=sm_120", "--specdec-gpus=4",
                                          "--specdec-backend=embedded", f"--specdec-gpu-claims={tmp_path / 'claims'}")
    result.assert_outcomes(passed=2)
