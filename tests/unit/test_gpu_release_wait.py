"""The wait for a stopped server's GPU memory, on a stand-in NVML: bounded, and said while it lasts.

A teardown (after Ctrl-C too) waited up to 30 s in silence for NVML to stop listing the server's
pids, which a driver slow to free memory, or a process stuck in the kernel, keeps listed.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

from pytest_specdec.servers import gpu_memory


def fake_nvml(held: dict[int, list[int]]) -> SimpleNamespace:
    """pynvml's calls that wait_released makes: GPU index -> pids holding 512 MiB on it."""
    return SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetComputeRunningProcesses=lambda index: [
            SimpleNamespace(pid=pid, usedGpuMemory=512 << 20) for pid in held.get(index, [])])


def test_memory_still_held_has_the_rest_of_the_wait_said_once(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml({1: [4242]}))
    monkeypatch.setattr(gpu_memory, "RELEASE_QUIET_S", 0.0)
    said: list[str] = []
    left = gpu_memory.wait_released([0, 1], [4242], timeout=0.6, announce=said.append, who="server ar-tp1")
    assert left == "GPU 1: pid 4242 holds 512 MiB"
    assert len(said) == 1, said
    assert said[0].startswith("server ar-tp1: stopped, but GPU 1: pid 4242 holds 512 MiB still; waiting up to ")
    assert said[0].endswith("more for the driver to release it (bound: the 0.6s GPU release wait)")


def test_memory_released_at_once_is_not_said(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml({1: [7]}))  # another process's, not ours
    monkeypatch.setattr(gpu_memory, "RELEASE_QUIET_S", 0.0)
    said: list[str] = []
    assert gpu_memory.wait_released([0, 1], [4242], timeout=5, announce=said.append) == ""
    assert said == []
