"""A dead holder's GPUs wait for its server's memory, on a stand-in NVML (no GPU needed).

A SIGKILLed worker's lease was handed on as soon as its pid was gone, while the server it had
started (killed with it) could still hold memory on those GPUs until the driver freed it: the next
server booted there failed for memory. The lease now names its server's pids, and its GPUs wait
(bounded, as the teardown's wait is) until NVML no longer lists them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from pytest_specdec.servers import gpu_memory
from pytest_specdec.servers.leases import GpuLeaseError, GpuLeases

from test_gpu_release_wait import fake_nvml

pytestmark = pytest.mark.timeout(120)

SERVER = 4242  # the pid NVML lists for the dead worker's server


def _book_of_a_dead_holder(run_dir, **entry) -> None:
    """GPU 0 leased to a holder that is gone (this pid with another start time: a recycled pid)."""
    (run_dir / "gpu-leases.json").write_text(json.dumps({"leases": {"gw1-lease": {
        "gpus": [0], "owner": "worker-gw1", "pid": os.getpid(), "start_time": 1, "since": 0, **entry}}}))


def _expired(leases: GpuLeases) -> list[dict]:
    return [e for e in leases.history() if e["event"] == "expire"]


def test_a_sigkilled_holders_gpus_wait_until_its_servers_memory_is_released(tmp_path, monkeypatch):
    held = {0: [SERVER], 1: [SERVER]}
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(held))
    monkeypatch.setattr(gpu_memory, "RELEASE_QUIET_S", 0.0)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from pathlib import Path
        from pytest_specdec.servers.leases import GpuLeases
        leases = GpuLeases(Path({str(tmp_path)!r}), 3)
        leases.record_pids(leases.acquire(2, owner="worker-gw1"), [{SERVER}, 4243])
        print("held", flush=True)
        time.sleep(120)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        holder.kill()
        holder.wait()
        said: list[str] = []
        leases = GpuLeases(tmp_path, 3, announce=said.append)
        assert leases.acquire(1, owner="ar-tp1", timeout=1).gpus == (2,)  # the one GPU the server did not use
        gone = rf"worker-gw1 \(pid {holder.pid}, gone; its server's GPU memory not yet released\): GPUs 0,1"
        with pytest.raises(GpuLeaseError, match=gone):
            leases.acquire(1, owner="dflash-tp1", timeout=0.3, poll=0.02)
        waits = [line for line in said if line.startswith("dflash-tp1 waits: ")]
        assert len(waits) == 1, said
        assert re.fullmatch(
            rf"dflash-tp1 waits: GPUs 0,1 of worker-gw1 \(pid {holder.pid}, gone\): GPU 0: pid {SERVER} holds 512 MiB; "
            rf"GPU 1: pid {SERVER} holds 512 MiB still; waiting up to \d+s more for the driver to release it before "
            rf"leasing them \(bound: the 30s GPU release wait\)", waits[0]), waits[0]
        assert _expired(leases) == []
        held.clear()  # the driver frees it
        assert leases.acquire(2, owner="dflash-tp2", timeout=1).gpus == (0, 1)
        assert [(e["owner"], "held" in e) for e in _expired(leases)] == [("worker-gw1", False)]
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_a_dead_holders_lease_is_not_handed_on_while_its_servers_pids_hold_memory(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml({0: [SERVER]}))
    _book_of_a_dead_holder(tmp_path, pids=[SERVER])
    leases = GpuLeases(tmp_path, 1)
    with pytest.raises(GpuLeaseError, match=r"held: worker-gw1 \(pid \d+, gone; its server's GPU memory"):
        leases.acquire(1, owner="ar-tp1", timeout=0)
    assert [v["held"] for v in leases.holders().values()] == [f"GPU 0: pid {SERVER} holds 512 MiB"]


def test_memory_still_held_past_the_release_wait_no_longer_keeps_the_gpus(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml({0: [SERVER]}))
    _book_of_a_dead_holder(tmp_path, pids=[SERVER], gone_since=0)  # found dead long ago
    leases = GpuLeases(tmp_path, 1)
    assert leases.acquire(1, owner="ar-tp1", timeout=1).gpus == (0,)
    assert [e.get("held") for e in _expired(leases)] == [f"GPU 0: pid {SERVER} holds 512 MiB"]


def test_pids_nvml_never_lists_read_as_released_at_once(tmp_path, monkeypatch):
    """In a container NVML lists host pids, never ours: no wait is paid for nothing."""
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml({0: [98765]}))
    monkeypatch.setattr(gpu_memory, "RELEASE_QUIET_S", 0.0)
    _book_of_a_dead_holder(tmp_path, pids=[SERVER])
    said: list[str] = []
    leases = GpuLeases(tmp_path, 1, announce=said.append)
    assert leases.acquire(1, owner="ar-tp1", timeout=0).gpus == (0,)
    assert said == []


def test_a_book_of_the_previous_release_without_pids_still_reads(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml({0: [SERVER]}))
    _book_of_a_dead_holder(tmp_path)
    leases = GpuLeases(tmp_path, 2)
    assert leases.acquire(2, owner="ar-tp2", timeout=0).gpus == (0, 1)
    assert [e["owner"] for e in _expired(leases)] == ["worker-gw1"]
