"""Waiting, after a teardown (and before a dead worker's lease is handed on, see leases.py), until
the GPUs have given the dead server's memory back.

A killed CUDA process frees its memory asynchronously; the next server on the same GPUs would
otherwise fail with "Not enough memory" and be blamed for it. NVML (nvidia-ml-py) is imported
lazily and any NVML failure means "cannot tell", never an error: on a CPU host, or with a simulated
inventory, there is nothing to wait for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

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
    with _nvml() as pynvml:
        if pynvml is None:
            return ""
        wanted = set(pids)
        wait = SaidWait(timeout, announce, RELEASE_QUIET_S)
        while True:
            held = _held(pynvml, gpus, wanted)
            if not held or wait.over():
                return "; ".join(held)
            wait.pause(0.25, lambda left: f"{who}: stopped, but {'; '.join(held)} still; waiting up to {left:.0f}s "
                                          f"more for the driver to release it (bound: the {timeout:g}s GPU release wait)")


def still_held(gpus: Sequence[int], pids: Iterable[int]) -> str:
    """What `pids` hold on `gpus` now, as `wait_released` words it, or "" (nothing, or NVML cannot
    tell): one look, for a caller that polls on its own (the lease book, recovering a dead
    worker's GPUs, must not hold its lock through a wait)."""
    with _nvml() as pynvml:
        try:
            return "; ".join(_held(pynvml, gpus, set(pids))) if pynvml is not None else ""
        except Exception:
            return ""


def others_on(gpus: Sequence[int], ours: Iterable[int]) -> str:
    """Who else holds memory on `gpus` (physical NVML indices), the processes `ours` aside:
    `GPU 3: pid 999 (user bob, python) holds 70000 MiB`, or "" (none, or NVML cannot tell).
    Memory of a pid with no live process is named too: a SIGKILLed worker's lease is recovered as
    soon as its pid is gone, while its server's memory may take a moment more to be released.

    A lease keeps this run's servers apart and a host claim another pytest-specdec run, but
    nothing keeps off a process that claims nothing (a notebook, another user's job): a server that
    then fails for memory was blamed for it, while the cause was on the GPU before it booted.
    """
    with _nvml() as pynvml:
        if pynvml is None:
            return ""
        try:
            mine = set(ours)
            found, dead = [], []
            for index, pid, mib in _processes(pynvml, gpus):
                if pid in mine:
                    continue
                if _alive(pid):
                    found.append(f"GPU {index}: pid {pid}{_who(pid)} holds {mib} MiB")
                else:  # a killed server (a dead worker's, its lease already recovered) not yet freed
                    dead.append(f"GPU {index}: {mib} MiB still held by pid {pid}, no live process here")
            if dead:
                found.append("; ".join(dead) + " (a killed server whose memory the driver had not yet released: "
                             "rerun, it frees within seconds; or a process outside this container)")
            return "; ".join(found)
        except Exception:
            return ""


def _held(pynvml, gpus: Sequence[int], wanted: set[int]) -> list[str]:
    """`GPU 1: pid 4242 holds 512 MiB` for each of `wanted` holding memory on one of `gpus`."""
    return [f"GPU {index}: pid {pid} holds {mib} MiB" for index, pid, mib in _processes(pynvml, gpus)
            if pid in wanted]


def _processes(pynvml, gpus: Sequence[int]) -> Iterator[tuple[int, int, int]]:
    """(GPU index, pid, MiB) of each compute process NVML lists on `gpus`."""
    for index in gpus:
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except Exception:
            continue  # a simulated slot beyond the real inventory
        for p in procs:
            yield index, p.pid, (p.usedGpuMemory or 0) // (1 << 20)


@contextmanager
def _nvml() -> Iterator[Any]:
    """pynvml, initialised for the block and shut down after it; None where NVML cannot be used
    (no nvidia-ml-py, no driver): "cannot tell", never an error."""
    try:
        import pynvml
    except ImportError:
        yield None
        return
    try:
        pynvml.nvmlInit()
    except Exception:
        yield None
        return
    try:
        yield pynvml
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False  # gone, or a pid of another namespace (a container): nothing to name


def _who(pid: int) -> str:
    """` (user bob, python)`, or nothing where the pid is not this host's to read (a container)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        return f" (user {proc.username()}, {proc.name()})"
    except (psutil.Error, KeyError):  # KeyError: a uid without a passwd entry
        return ""
