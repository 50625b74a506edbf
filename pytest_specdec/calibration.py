"""Self-calibration of timing figures: take out the time the machine gave to other processes.

On a shared or oversubscribed host the same server measures much faster or slower from one
minute to the next, because its decode loop spends most of the wall time waiting for a CPU, not
because it changed. Linux counts that wait per thread (`/proc/<pid>/task/<tid>/schedstat`: time
on a CPU, time runnable but waiting for one). During each workload the plugin reads it for every
thread of the server's processes and takes the busiest thread (the decode loop) as the critical
path: the run's `share` is the part of the wall time that thread was not kept waiting,
`(wall - wait) / wall`. Timing figures are then divided by it (rates) or multiplied by it
(latencies), giving what the server did per second it actually had a CPU. Sleeps, I/O and
slower code still count; only the contention is taken out.

Unavailable (no /proc, a server we did not launch, or a remote one) means no calibration:
figures are compared as measured.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

#: A share below this means the figures say more about the machine than about the server.
MIN_SHARE = 0.05

ThreadKey = tuple[int, int]  # (pid, tid)


@dataclass(frozen=True)
class Calibration:
    """How much of a workload's wall time the server's critical thread had a CPU."""

    wall_s: float
    wait_s: float  # run-queue wait of the busiest thread during the workload
    cpu_s: float  # its time on a CPU

    @property
    def share(self) -> float:
        return max(MIN_SHARE, min(1.0, (self.wall_s - self.wait_s) / self.wall_s)) \
            if self.wall_s > 0 else 1.0

    def rate(self, value: float) -> float:
        """A per-second figure as if the server had had a CPU whenever it wanted one."""
        return value / self.share

    def duration(self, value: float) -> float:
        """A time figure likewise (a latency shrinks by the share)."""
        return value * self.share

    def describe(self) -> str:
        return f"the server's decode thread waited {self.wait_s:.2f} s of {self.wall_s:.2f} s for a CPU"

    def to_json(self) -> dict[str, float]:
        return {"wall_s": self.wall_s, "wait_s": self.wait_s, "cpu_s": self.cpu_s}

    @classmethod
    def from_json(cls, obj: dict | None) -> Calibration | None:
        if not obj:
            return None
        return cls(float(obj["wall_s"]), float(obj["wait_s"]), float(obj["cpu_s"]))


def read_threads(pids: Iterable[int]) -> dict[ThreadKey, tuple[float, float]]:
    """(time on a CPU, run-queue wait) in seconds for every thread of `pids` that can be read."""
    out: dict[ThreadKey, tuple[float, float]] = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                    on_cpu, waiting = fh.read().split()[:2]
            except (OSError, ValueError):
                continue
            out[(pid, int(tid))] = (int(on_cpu) / 1e9, int(waiting) / 1e9)
    return out


class CpuWaitMeter:
    """Brackets a workload: `start()` before it, `stop(wall_s)` after, for the server's pids.

    `pids` is called at both ends (a server may start threads or helper processes meanwhile).
    """

    def __init__(self, pids: Callable[[], Iterable[int]]) -> None:
        self.pids = pids
        self._before: dict[ThreadKey, tuple[float, float]] = {}

    def start(self) -> None:
        self._before = read_threads(self.pids())

    def stop(self, wall_s: float) -> Calibration | None:
        after = read_threads(self.pids())
        deltas = [(cpu - self._before[key][0], wait - self._before[key][1])
                  for key, (cpu, wait) in after.items() if key in self._before]
        if not deltas or wall_s <= 0:
            return None
        cpu, wait = max(deltas)  # the busiest thread: the decode loop
        return Calibration(wall_s, min(wait, wall_s), cpu)
