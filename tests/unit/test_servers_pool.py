"""ServerPool: one boot per spec, switching, sticky failures, restarts, attach mode, leases.

The pool's own logic runs against the fake engine (same CLI, fault flags and log lines, no model
to load); the real engine's faults as the servers package reads them are test_servers_process's.
Attach mode reads what the real engine says it serves.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
import urllib.request

import pytest

from pytest_specdec.servers import (
    AttachMismatch,
    GpuLeases,
    NotEnoughGpus,
    ServerError,
    ServerPool,
)
from pytest_specdec.servers import pool as pool_module
from pytest_specdec.servers.cleanup import alive

from servers_support import FAKE_ENTRY, server, spec, wait_gone

pytestmark = pytest.mark.timeout(180)


def generate(url: str) -> dict:
    body = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 4, "temperature": 0}}).encode()
    req = urllib.request.Request(url + "/generate", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def make_pool(tmp_path, entry=FAKE_ENTRY, **kwargs) -> tuple[ServerPool, list]:
    started = []

    def factory(s, gpus):
        m = server(s, tmp_path / "logs", entry=entry, gpus=gpus, wait_gpu_release=False)
        started.append(m)
        return m

    return ServerPool(factory, **kwargs), started


def pids_of(started) -> list[int]:
    return [m.pid for m in started if m.pid]


def test_one_boot_per_spec_across_many_uses_and_switching_tears_down(tmp_path):
    pool, started = make_pool(tmp_path)
    a, b = spec("ar"), spec("ddtree", 8)
    try:
        first = pool.acquire(a)
        for _ in range(10):
            assert pool.acquire(a) is first
            generate(first.url)
        assert pool.stats.boots == {"ar-tp1": 1}
        other = pool.acquire(b)  # switching spec: the previous server goes first
        assert wait_gone([first.pid]) == []
        assert list(pool.live()) == [b] and pool.acquire(b) is other
        assert pool.stats.boots == {"ar-tp1": 1, "ddtree-tp1-b8": 1}
    finally:
        pool.close()
    assert wait_gone(pids_of(started)) == []
    assert pool.live() == {}


def test_crash_mid_run_fails_with_cause_and_later_uses_error_at_once(tmp_path):
    pool, started = make_pool(tmp_path)
    s = spec("ddtree", 8, "--fault-crash-after", "1")
    try:
        srv = pool.acquire(s)
        generate(srv.url)
        with pytest.raises(OSError):
            generate(srv.url)  # the server dies under this test
        death = srv.diagnose()
        assert death is not None and death.reason == "died"
        assert str(death).startswith("server ddtree-tp1-b8 died: CUDA error: an illegal instruction was encountered")
        assert f"log: {srv.log_path}" in str(death)
        for _ in range(3):  # every later test of the spec: the same error, immediately
            t0 = time.monotonic()
            with pytest.raises(ServerError) as info:
                pool.acquire(s)
            assert time.monotonic() - t0 < 1.0
            assert str(info.value) == str(death)
        assert pool.failure(s) is not None and pool.stats.boots == {"ddtree-tp1-b8": 1}
        assert len(started) == 1  # no relaunch
        # Other specs are unaffected.
        assert pool.acquire(spec("ar")).url
    finally:
        pool.close()
    assert wait_gone(pids_of(started)) == []


def test_report_death_makes_the_failure_sticky_before_the_next_acquire(tmp_path):
    pool, started = make_pool(tmp_path)
    s = spec("ddtree", 8, "--fault-crash-after", "0")
    try:
        srv = pool.acquire(s)
        with pytest.raises(OSError):
            generate(srv.url)
        pool.report_death(s, srv.diagnose())
        assert pool.live() == {} and pool.failure(s).reason == "died"
    finally:
        pool.close()
    assert wait_gone(pids_of(started)) == []


def test_a_server_found_frozen_before_its_next_test_is_not_given_the_full_sigterm_grace(tmp_path):
    """A server found unresponsive as the next test asks for it was stopped with the full SIGTERM
    grace, which a frozen server (SIGSTOP, or wedged in a driver call) never honours: every other
    dead or frozen server the pool stops gets DEAD_SERVER_GRACE_S. The grace here is 30 s. Each
    stop's grace is recorded: teardown's SIGCONT lets a SIGSTOPped server honour SIGTERM at once,
    so the time taken would not tell the two graces apart."""
    started, graces = [], []

    def factory(s, gpus):
        started.append(server(s, tmp_path / "logs", entry=FAKE_ENTRY, term_grace=30.0, health_timeout=2.0,
                              wait_gpu_release=False))
        stop = started[-1].stop
        started[-1].stop = lambda **kw: (graces.append(kw.get("grace")), stop(**kw))[1]
        return started[-1]

    pool, s = ServerPool(factory), spec("ar")
    try:
        frozen = pool.acquire(s)
        os.kill(frozen.pid, signal.SIGSTOP)
        with pytest.raises(ServerError, match="unresponsive: /health did not answer within 2s"):
            pool.acquire(s)
        assert graces == [pool_module.DEAD_SERVER_GRACE_S] and graces[0] < 30.0
        assert pool.live() == {}
    finally:
        pool.close()
        for m in started:
            m.stop()
    assert wait_gone(pids_of(started)) == []


def test_the_check_of_a_reused_server_before_its_next_test_says_its_wait(tmp_path):
    """The pool's check of a server it hands out again waited its /health limit in silence
    (25 s by default) when the server had frozen since its last test; only the teardown's check
    said such a wait. It now says the rest of the wait, once, through the server's announcer."""
    said: list[str] = []
    started = []

    def factory(s, gpus):
        started.append(server(s, tmp_path / "logs", entry=FAKE_ENTRY, term_grace=3.0, health_timeout=5.0,
                              wait_gpu_release=False, announce=said.append))
        return started[-1]

    pool, s = ServerPool(factory), spec("ar")
    try:
        frozen = pool.acquire(s)
        assert said == []  # a boot of a few seconds says nothing
        os.kill(frozen.pid, signal.SIGSTOP)
        with pytest.raises(ServerError, match="unresponsive: /health did not answer within 5s"):
            pool.acquire(s)
        assert len(said) == 1 and re.fullmatch(
            r"server ar-tp1: /health did not answer within 2s; waiting up to \d+s more before counting it "
            r"as frozen \(bound: the 5s /health limit; --specdec-stall-timeout lowers it\)", said[0]), said
    finally:
        pool.close()
        for m in started:
            m.stop()
    assert wait_gone(pids_of(started)) == []


def test_restart_on_crash_budget(tmp_path):
    pool, started = make_pool(tmp_path, restart_on_crash=1)
    s = spec("ddtree", 8, "--fault-crash-after", "0")
    try:
        first = pool.acquire(s)
        with pytest.raises(OSError):
            generate(first.url)
        second = pool.acquire(s)  # one restart allowed
        assert second is not first and pool.stats.boots["ddtree-tp1-b8"] == 2
        assert first.log_path != second.log_path  # the crash log is kept
        with pytest.raises(OSError):
            generate(second.url)
        with pytest.raises(ServerError, match="died"):
            pool.acquire(s)  # budget spent
        with pytest.raises(ServerError, match="died"):
            pool.acquire(s)
        assert pool.stats.boots["ddtree-tp1-b8"] == 2 and pool.stats.failures["ddtree-tp1-b8"] == 2
    finally:
        pool.close()
    assert wait_gone(pids_of(started)) == []


def test_warmup_crash_is_remembered_without_relaunching(tmp_path):
    pool, started = make_pool(tmp_path)
    s = spec("ddtree", 8, "--fault-crash-warmup")
    with pytest.raises(ServerError) as first:
        pool.acquire(s)
    assert first.value.reason == "warmup-crash"
    with pytest.raises(ServerError) as again:
        pool.acquire(s)
    assert again.value is first.value and len(started) == 1
    pool.close()
    assert wait_gone(pids_of(started)) == []


def test_attach_identifies_the_server_and_never_kills_it(tmp_path):
    running = server(spec("ddtree", 16), tmp_path)
    running.start()
    try:
        pool = ServerPool.attach(running.url)
        got = pool.acquire(spec("ddtree", 16))
        assert got.url == running.url and got.log_path is None
        assert pool.attached_identity().id == "ddtree-tp1-b16"
        with pytest.raises(AttachMismatch, match="is ddtree-tp1-b16 .*; this test needs dflash-tp1"):
            pool.acquire(spec("dflash"))
        pool.close()
        got.stop()
        assert alive(running.pid)
        running.check_alive()
    finally:
        running.stop()
    assert wait_gone([running.pid]) == []


def test_an_attached_server_that_stops_answering_says_its_wait_and_what_it_saw(tmp_path):
    """An attached server's /health check waited in silence, then named the probe's outcome in
    the probe's own code word (`/health timeout`); it now says the wait as it goes on and the
    outcome in the words a launched server's check uses."""
    from pytest_specdec.servers.attach import AttachedServer

    running = server(spec("ar"), tmp_path)
    running.start()
    said: list[str] = []
    try:
        attached = AttachedServer(running.url, health_timeout=4.0, announce=said.append).for_spec(spec("ar"))
        os.kill(running.pid, signal.SIGSTOP)
        with pytest.raises(ServerError) as caught:
            attached.check_alive()
        assert str(caught.value).startswith(f"attached server ar-tp1 at {running.url} is not healthy: "
                                            f"/health did not answer within 4s"), str(caught.value)
        assert len(said) == 1 and re.fullmatch(
            rf"server ar-tp1 \(attached at {re.escape(running.url)}\): /health did not answer within 2s; "
            r"waiting up to \d+s more before counting it as unresponsive \(bound: the 4s /health limit; "
            r"--specdec-stall-timeout lowers it\)",
            said[0]), said
    finally:
        os.kill(running.pid, signal.SIGCONT)
        running.stop()
    assert wait_gone([running.pid]) == []


def test_attach_to_nothing_says_so(tmp_path):
    from pytest_specdec.servers.process import free_port

    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServerError, match=f"attached server {url} did not answer /server_info"):
        ServerPool.attach(url)


def test_leases_give_each_server_its_gpus_and_come_back(tmp_path):
    leases = GpuLeases(tmp_path / "run", 2)
    pool, started = make_pool(tmp_path, leases=leases)
    try:
        srv = pool.acquire(spec("ar", tp=2))
        with urllib.request.urlopen(srv.url + "/server_info", timeout=10) as resp:
            assert json.loads(resp.read())["cuda_visible_devices"] == "0,1"
        assert [v["gpus"] for v in leases.holders().values()] == [[0, 1]]
        # should this worker be SIGKILLed, the GPUs are handed on once these pids' memory is released
        assert [v["pids"] for v in leases.holders().values()] == [sorted(srv.processes())]
        with pytest.raises(NotEnoughGpus, match="ar-tp4 needs 4 GPUs, but the inventory has 2"):
            pool.acquire(spec("ar", tp=4))
        pool.retire(spec("ar", tp=2))
        assert leases.holders() == {}
        pool.acquire(spec("dflash"))
        assert [v["gpus"] for v in leases.holders().values()] == [[0]]
    finally:
        pool.close()
    assert leases.holders() == {}
    assert wait_gone(pids_of(started)) == []


def test_a_lease_names_its_servers_processes_while_it_boots(tmp_path):
    """A worker killed while its server boots (weights loading, GPU memory held) had its lease
    handed on at once: the pids were recorded only once the server was ready. The server's own
    pid is recorded at launch, and its children (SGLang's schedulers) as they start."""
    import threading
    import urllib.error

    leases = GpuLeases(tmp_path / "run", 2)
    pool, started = make_pool(tmp_path, leases=leases)
    # the fake engine spawns its child, then sleeps before it listens: a boot that is not ready yet
    slow = spec("ar", None, "--spawn-child", "--fault-slow-start", "5")
    booting = threading.Thread(target=pool.acquire, args=(slow,), daemon=True)
    booting.start()
    try:
        pids: list[int] = []
        while booting.is_alive() and len(pids) < 2:
            pids = next(iter(leases.holders().values()), {}).get("pids", [])
            time.sleep(0.05)
        assert len(pids) == 2 and started[0].pid in pids, pids  # the server and its child
        with pytest.raises(urllib.error.URLError):  # named before the server answers
            urllib.request.urlopen(started[0].url + "/health_generate", timeout=5)
        booting.join(60)
        assert [v["pids"] for v in leases.holders().values()] == [sorted(pids)]
    finally:
        booting.join(60)
        pool.close()
    assert leases.holders() == {}
    assert wait_gone(pids_of(started)) == []


def test_a_child_missed_by_one_walk_of_the_process_table_stays_in_the_lease(tmp_path, monkeypatch):
    """A walk of /proc under load can miss a live child for a moment (seen once in CI): the lease
    kept only the latest walk, so its record shrank and a dead worker's GPUs would not wait for that
    child's memory. A pid stays recorded while it lives."""
    from pytest_specdec.servers import cleanup

    leases = GpuLeases(tmp_path / "run", 2)
    pool, started = make_pool(tmp_path, leases=leases)
    try:
        srv = pool.acquire(spec("ar", None, "--spawn-child"))
        full = sorted(srv.processes())
        assert len(full) == 2, full
        real = cleanup.descendants
        monkeypatch.setattr(cleanup, "descendants", lambda pid: [])  # one walk that misses the child
        srv._note_processes()
        assert [v["pids"] for v in leases.holders().values()] == [full]
        monkeypatch.setattr(cleanup, "descendants", real)
        os.kill(full[1], signal.SIGKILL)  # a child that is gone leaves the record
        assert wait_gone([full[1]]) == []
        srv._note_processes()
        assert [v["pids"] for v in leases.holders().values()] == [[srv.pid]]
    finally:
        pool.close()
    assert wait_gone(pids_of(started)) == []


def _open_files() -> list[str]:
    """What this process holds open, by target (a log, a socket, a pipe)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            found.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass  # the listing's own descriptor, closed by now
    return found


def _settled_threads(at_most: int) -> int:
    """The thread count once helper threads that are just finishing (a probe's) have ended."""
    for _ in range(100):
        if threading.active_count() <= at_most:
            break
        time.sleep(0.05)
    return threading.active_count()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open files through /proc")
def test_a_long_matrix_leaves_no_file_thread_child_or_lease_behind(tmp_path):
    """A run of many configurations boots and stops one server per configuration for hours: each
    one's log, sockets, threads, child processes and lease go with it, so nothing grows with the
    number of configurations."""
    leases = GpuLeases(tmp_path / "leases", 2)
    pool, started = make_pool(tmp_path, leases=leases)
    specs = [spec("ar"), spec("dflash"), *(spec("ddtree", b) for b in (8, 12, 16, 24, 32, 64))]
    try:
        generate(pool.acquire(specs[0]).url)  # the first boot starts what lives for the run (the watchdog)
        pool.retire(specs[0])
        files, threads = _open_files(), _settled_threads(threading.active_count())
        for s in specs[1:]:
            generate(pool.acquire(s).url)
        pool.close()
        assert sorted(_open_files()) == sorted(files)
        assert _settled_threads(threads) == threads
        assert leases.holders() == {}
        assert [p for p in cleanup_descendants(os.getpid()) if alive(p)] == [watchdog_pid()]
    finally:
        pool.close()
    assert wait_gone(pids_of(started)) == []


def cleanup_descendants(pid: int) -> list[int]:
    from pytest_specdec.servers.cleanup import descendants

    return descendants(pid)


def watchdog_pid() -> int:
    from pytest_specdec.servers import cleanup

    return cleanup._watchdog.pid
