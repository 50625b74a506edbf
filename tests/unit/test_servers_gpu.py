"""On real GPUs: a server sees only its leased GPU, and teardown waits until its memory is back.

Skips without NVML and a GPU. Memory is read per GPU from NVML (process lists may not show our
pids inside a container's pid namespace; memory in use does not depend on that).
"""

from __future__ import annotations

import time

import pytest

from pytest_specdec.servers import GpuLeases, ServerPool
from pytest_specdec.servers.gpu_memory import wait_released

from servers_support import ENGINE_ENTRY, REAL_ENGINE, server, spec, wait_gone

pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")

try:
    pynvml.nvmlInit()
    GPU_COUNT = pynvml.nvmlDeviceGetCount()
except Exception:  # no driver
    GPU_COUNT = 0

pytestmark = [
    pytest.mark.skipif(GPU_COUNT == 0, reason="no NVIDIA GPU (NVML found none)"),
    pytest.mark.skipif(not REAL_ENGINE, reason="needs the embedded engine"),
    pytest.mark.timeout(300),
]

MIB = 1 << 20


def used_mib() -> list[int]:
    return [
        pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).used // MIB
        for i in range(GPU_COUNT)
    ]


def wait_used(predicate, timeout=60.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        now = used_mib()
        if predicate(now) or time.monotonic() > deadline:
            return now
        time.sleep(0.25)


def test_each_server_uses_only_its_leased_gpus_and_memory_comes_back(tmp_path):
    leases = GpuLeases(tmp_path / "run", GPU_COUNT)

    def factory(s, gpus):
        return server(s, tmp_path / "logs", entry=ENGINE_ENTRY, gpus=gpus, startup_timeout=240)

    # torch kernels: this test is about GPU placement and teardown, not the Triton path.
    cuda = ("--device", "cuda", "--kernel-impl", "torch")
    n = min(GPU_COUNT, 2)
    pools = [ServerPool(factory, leases=leases) for _ in range(n)]  # one per "xdist worker"
    baseline = used_mib()
    try:
        servers = []
        for i, pool in enumerate(pools):  # one at a time, to see where each one's memory goes
            s = pool.acquire(spec("ddtree", 8 + i, *cuda))
            s.check_alive()
            servers.append(s)
            mine = s.gpus[0]
            loaded = wait_used(lambda now: now[mine] - baseline[mine] > 100)
            print(f"{s.spec.id} on GPU {s.gpus}: MiB {baseline} -> {loaded}")
            assert loaded[mine] - baseline[mine] > 100, (baseline, loaded)
            idle = [g for g in range(GPU_COUNT) if g not in {x.gpus[0] for x in servers}]
            assert all(loaded[g] - baseline[g] < 64 for g in idle), (baseline, loaded)  # nothing elsewhere
        gpus = [s.gpus for s in servers]
        assert sorted(g for gs in gpus for g in gs) == list(range(n))  # disjoint leases
        t0 = time.monotonic()
        pids = [s.pid for s in servers]
        for pool in pools:
            pool.close()  # stop() waits for the NVML process list to clear
        stopped = time.monotonic() - t0
        after = wait_used(lambda now: all(now[i] - baseline[i] < 64 for i in range(GPU_COUNT)), timeout=30)
        print(f"teardown {stopped:.2f}s, after MiB {after}")
        assert all(after[i] - baseline[i] < 64 for i in range(GPU_COUNT)), (baseline, after)
        assert wait_gone(pids) == []
        assert wait_released(range(GPU_COUNT), pids, timeout=1) == ""
    finally:
        for pool in pools:
            pool.close()
    assert leases.holders() == {}
