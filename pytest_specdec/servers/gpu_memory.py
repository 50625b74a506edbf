"""Waiting, after a teardown, until the GPUs have given the dead server's memory back.

A killed CUDA process frees its memory asynchronously; the next server on the same GPUs would
otherwise fail with "Not enough memory" and be blamed for it. NVML (nvidia-ml-py) is imported
lazily and any NVML failure means "cannot tell", never an error: on a CPU host, or with a simulated
inventory, there is nothing to wait for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from pytest_specdec.servers.said_wait import SaidWait

RELEASE_TIMEOUT_S = 30.0
# The driver frees a dead process's memory within a second or so: memory still held this long gets
# the rest of the wait said, so a teardown (after Ctrl-C too) is not a silent half minute.
RELEASE_QUIET_S = 3.0


def wait_released(gpus: Sequence[int], pids: Iterable[int], timeout: float = RELEASE_TIMEOUT_S,
                  announce: Callable[[str], None] | None = None, who: str = "the server") -> str:
    """Poll until none of `pids` holds memory on `gpus` (physical NVML indices); with
    `announce`, memory still held after `RELEASE_QUIET_S` has the rest of the wait said, naming `who`.

    Returns "" once released (or when NVML cannot be used), else a description of what is still
    held. pids as NVML reports them are host pids: inside a container with its own pid namespace
    they may never match ours, which reads as "released" -- the timeout is then not paid.
    """
    try:
        import pynvml
    except ImportError:
        return ""
    try:
        pynvml.nvmlInit()
    except Exception:
        return ""
    try:
        wanted = set(pids)
        wait = SaidWait(timeout, announce, RELEASE_QUIET_S)
        while True:
            held = []
            for index in gpus:
                try:
                    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
                except Exception:
                    continue  # simulated index beyond the real inventory
                for p in procs:
                    if p.pid in wanted:
                        mib = (p.usedGpuMemory or 0) // (1 << 20)
                        held.append(f"GPU {index}: pid {p.pid} holds {mib} MiB")
            if not held or wait.over():
                return "; ".join(held)
            wait.pause(0.25, lambda left: f"{who}: stopped, but {'; '.join(held)} still; waiting up to {left:.0f}s "
                                          f"more for the driver to release it (bound: the {timeout:g}s GPU release wait)")
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
