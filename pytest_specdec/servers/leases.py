"""`GpuLeases`: which process may put a server on which GPUs, across pytest-xdist workers.

Workers are separate processes, so the truth lives in one JSON file in the run directory, read and
rewritten under a `filelock` lock. A lease names its holder's pid and that process's start time;
a lease whose holder is gone (or whose pid now belongs to a new process) is dropped on the next
look, so a worker killed mid-test does not keep its GPUs for the rest of the run. But a SIGKILLed
worker's server dies with it, and the driver frees that server's GPU memory a moment later: a
lease names its server's processes from its launch on (`record_pids`), and a dead holder's lease
that does keeps its GPUs until NVML no longer lists those pids on them, for at most the teardown's
GPU release wait from when the holder was found dead (`gone_since` in the book), so the next
server there does not fail for memory. Pids NVML never lists (a container's own pid namespace:
NVML reports host pids) read as released at once, as in the teardown's wait. Every change is
also appended to a history beside the book (`lease-history.jsonl`: acquire, release, and expire
for a dead holder's lease), written under the same lock, so its line order is the order in which
the book changed: it answers "who held which GPUs when" after a run.

Waiting is first come, first served: a request that finds too few GPUs free enters a queue in the
book, and a later request is granted only with enough GPUs left over for every request queued
before it (but a worker's that waits while it holds a lease, a server that would not stop, which
may never be met). Without the queue a TP8 configuration polled for all eight GPUs while other workers
freed one and leased the next at once, so it waited as long as smaller configurations remained.

Choosing GPUs: with `nvidia-smi topo -m` information, the free set whose weakest link is strongest
(NVLink over PCIe switch over host bridge over NUMA hop); without it, the lowest contiguous run,
which keeps aligned blocks free for large TP sizes. On a CPU host the inventory is simulated
(`--specdec-gpus N`): the numbers still partition the work, CUDA_VISIBLE_DEVICES is then harmless.

Other runs on the host: with `claims` (a real inventory), a lease also holds a host-wide claim on
each of its GPUs (host_claims.py), taken while the book's lock is held and let go before the book
forgets the lease, so this run's own workers never see each other's claims. A GPU another run
claims is passed over for the next best free set; with none left, the lease waits as for its own
run's workers, naming the other run once through `announce`, which also says once what a wait for
this run's own workers is for (who holds the GPUs, who is queued first, when the wait gives up).
Each wait line and a wait's timeout name the setting that bounds it (`--specdec-gpu-wait-timeout`,
or where the run set it): how long a wait is worth depends on how long the configurations run.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from pytest_specdec.servers import gpu_memory
from pytest_specdec.servers.host_claims import HostClaims
from pytest_specdec.whole_file import remove_leftovers, replace_text

LEASE_FILE = "gpu-leases.json"
HISTORY_FILE = "lease-history.jsonl"
_COMBINATION_LIMIT = 20000
#: How long a lease waits by default, and where a user changes it (options.py's gpu_wait_timeout).
WAIT_TIMEOUT_S = 3600.0
WAIT_TIMEOUT_SETTING = "--specdec-gpu-wait-timeout"

# Higher is better. NV# (NVLink with # links) ranks above every PCIe path.
_LINK_SCORES = {"X": 1000, "PIX": 40, "PXB": 30, "PHB": 20, "NODE": 10, "SOC": 0, "SYS": 0}


class GpuLeaseError(Exception):
    """Leasing failed: timed out waiting for free GPUs."""


class NotEnoughGpus(GpuLeaseError):
    """The request can never be met on this inventory: the test should skip with `str(error)`."""


@dataclass(frozen=True)
class Lease:
    """GPUs held by one process for one server; `gpus` are physical (NVML / PCI bus) indices."""

    lease_id: str
    gpus: tuple[int, ...]
    owner: str
    pid: int

    @property
    def cuda_visible_devices(self) -> str:
        return ",".join(str(g) for g in self.gpus)


class GpuLeases:
    """Cross-process lease book for a GPU inventory, stored in `run_dir`.

    `inventory` is the list of usable GPU indices (or a count N for 0..N-1). `topology` maps an
    index pair to its `nvidia-smi topo -m` link label (`NV12`, `PIX`, `SYS`, ...); see
    `read_topology()`. Every worker of one run must use the same `run_dir`. `claims` (None where no
    GPU of the host is leased) are this process's host-wide claims; `announce` prints a progress line.
    """

    def __init__(
        self,
        run_dir: Path,
        inventory: Sequence[int] | int,
        topology: Mapping[tuple[int, int], str] | None = None,
        claims: HostClaims | None = None,
        announce: Callable[[str], None] | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.inventory = tuple(range(inventory)) if isinstance(inventory, int) else tuple(inventory)
        self.topology = dict(topology or {})
        self.path = self.run_dir / LEASE_FILE
        self.history_path = self.run_dir / HISTORY_FILE
        self._lock = FileLock(str(self.path) + ".lock")
        self.claims = claims
        self.announce = announce

    # -- public --------------------------------------------------------------------------------

    def acquire(self, n: int, *, owner: str, timeout: float | None = WAIT_TIMEOUT_S,
                timeout_setting: str = WAIT_TIMEOUT_SETTING, poll: float = 0.2) -> Lease:
        """Lease `n` GPUs for this process, waiting up to `timeout` s for others to release, after
        the requests that began waiting before this one (see module docstring).

        Raises NotEnoughGpus at once when `n` exceeds the inventory (a skip, not a failure),
        GpuLeaseError when the wait times out (naming who holds what). `timeout_setting` is where
        the user sets `timeout`: the wait line and the timeout's error name it.
        """
        self.check_fits(n, owner=owner)
        deadline = None if timeout is None else time.monotonic() + timeout
        announced: set[str] = set()
        said_gone: set[str] = set()  # dead holders' leases whose memory wait this request has said
        ticket: str | None = None  # this request's place in the queue, once it waits
        place: dict = {}
        try:
            while True:
                with self._lock:
                    leases, waiters = self._load_live()
                    taken = {g for lease in leases.values() for g in lease["gpus"]}
                    free = [g for g in self.inventory if g not in taken]
                    if ticket is not None and ticket not in waiters:  # a book rewritten under it
                        waiters[ticket] = place
                    order = place["order"] if ticket is not None else None
                    # a worker that waits while it holds GPUs (a server that would not stop) keeps no
                    # one else waiting: its own lease may never end
                    holding = {v["pid"] for v in leases.values()}
                    ahead = [w for key, w in waiters.items() if key != ticket and w["pid"] not in holding
                             and (order is None or w["order"] < order)]
                    gpus, elsewhere = None, {}
                    gone = {key: v for key, v in leases.items() if "gone_since" in v}
                    if len(free) - sum(w["n"] for w in ahead) >= n:  # never a GPU an earlier request needs
                        gpus, elsewhere = self._claim(free, n)
                    if gpus is not None:
                        lease = Lease(uuid.uuid4().hex[:12], gpus, owner, os.getpid())
                        leases[lease.lease_id] = {
                            "gpus": list(gpus),
                            "owner": owner,
                            "pid": lease.pid,
                            "start_time": start_time(lease.pid),
                            "since": time.time(),
                        }
                        waiters.pop(ticket, None)
                        try:
                            self._save(leases, waiters)
                        except BaseException:
                            if self.claims is not None:
                                self.claims.release(gpus)  # no claim outlives its lease
                            raise
                        ticket = None
                        self._log("acquire", lease.lease_id, leases[lease.lease_id])
                        return lease
                    if ticket is None:
                        ticket = uuid.uuid4().hex[:12]
                        place = {"n": n, "owner": owner, "pid": os.getpid(), "start_time": start_time(os.getpid()),
                                 "since": time.time(),
                                 "order": 1 + max((w["order"] for w in waiters.values()), default=0)}
                        waiters[ticket] = place
                        self._save(leases, waiters)
                        if not elsewhere and self.announce is not None:  # another run's holder is named below
                            self.announce(self._waiting(n, owner, leases, ahead, timeout, timeout_setting))
                    if elsewhere and not ahead and len(free) >= n and self.claims is not None:
                        # first in this run's queue, kept waiting by another run: keep its new claims off
                        self.claims.reserve(self.choose(free, n))
                for key, v in gone.items():
                    waited = time.time() - v["gone_since"]
                    if key not in said_gone and waited >= gpu_memory.RELEASE_QUIET_S and self.announce is not None:
                        said_gone.add(key)
                        self.announce(self._gone_wait(owner, v, waited))
                for gpu, holder in elsewhere.items():
                    who = re.sub(r", (waiting for it )?since [^)]*\)$", ")", holder)  # the run re-claims as it moves on
                    if who not in announced and self.announce is not None:
                        self.announce(f"{owner} waits: GPU {gpu} is claimed by another run on this host, {holder}; "
                                      f"{_bound(timeout, timeout_setting)}")
                    announced.add(who)
                if deadline is not None and time.monotonic() >= deadline:
                    held = "; ".join(
                        [f"{_holder(v)}: {_named(v['gpus'])}" for v in self.holders().values()]
                        + [f"GPU {gpu} by another run on this host, {holder}" for gpu, holder in elsewhere.items()]
                    )
                    # free GPUs kept for a request queued before it: name that one, not an empty "held"
                    before = ", ".join(f"{w['owner']} ({w['n']} GPU{'s' if w['n'] != 1 else ''})" for w in ahead)
                    raise GpuLeaseError(
                        f"{owner} waited {timeout:g}s for {n} free GPU{'s' if n != 1 else ''} among "
                        f"{_named(self.inventory)}; held: {held or 'by no one'}"
                        + (f"; queued before it: {before}" if before else "")
                        + f"; raise {timeout_setting} to wait longer"
                    )
                time.sleep(poll)
        finally:
            if self.claims is not None:
                self.claims.unreserve()
            if ticket is not None:
                self._leave_queue(ticket)

    def _waiting(self, n: int, owner: str, leases: Mapping[str, dict], ahead: Sequence[Mapping],
                 timeout: float | None, timeout_setting: str) -> str:
        """What a request waits for, said once as it starts waiting, so a long wait is never silent:
        `ddtree-tp8-b8 waits for 8 free GPUs among GPUs 0,...,7: held by ar-tp1 (pid 4242) GPU 0; ...`."""
        held = ", ".join(f"{_holder(v)} {_named(v['gpus'])}" for v in leases.values())
        before = ", ".join(f"{w['owner']} ({w['n']} GPU{'s' if w['n'] != 1 else ''})" for w in ahead)
        bound = _bound(timeout, timeout_setting)
        return (f"{owner} waits for {n} free GPU{'s' if n != 1 else ''} among {_named(self.inventory)}: "
                f"held by {held or 'no one'}" + (f"; queued before it: {before}" if before else "") + f"; {bound}")

    @staticmethod
    def _gone_wait(owner: str, entry: Mapping, waited: float) -> str:
        """A wait for a dead holder's server's memory, said once it outlasts the quiet spell the
        teardown's wait keeps: whose GPUs, what is still held, how much longer at most."""
        bound = gpu_memory.RELEASE_TIMEOUT_S
        return (f"{owner} waits: {_named(entry['gpus'])} of {entry['owner']} (pid {entry['pid']}, gone): "
                f"{entry['held']} still; waiting up to {max(bound - waited, 0.0):.0f}s more for the driver to "
                f"release it before leasing them (bound: the {bound:g}s GPU release wait)")

    def _leave_queue(self, ticket: str) -> None:
        """Drop a request that stopped waiting (a timeout, an interrupt) from the queue."""
        with self._lock:
            leases, waiters = self._load_book()
            if waiters.pop(ticket, None) is not None:
                self._save(leases, waiters)

    def check_fits(self, n: int, *, owner: str) -> None:
        """NotEnoughGpus when `n` GPUs can never be leased from this inventory."""
        if n > len(self.inventory):
            raise NotEnoughGpus(
                f"{owner} needs {n} GPU{'s' if n != 1 else ''}, but the inventory has "
                f"{len(self.inventory)} ({_fmt(self.inventory) or 'none'})"
            )

    def release(self, lease: Lease) -> None:
        with self._lock:
            if self.claims is not None and lease.pid == os.getpid():
                self.claims.release(lease.gpus)
            leases = self._load()
            entry = leases.pop(lease.lease_id, None)
            if entry is not None:
                self._save(leases)
                self._log("release", lease.lease_id, entry)

    def release_all_of(self, pid: int) -> None:
        """Drop every lease held by `pid` (a worker's session end)."""
        with self._lock:
            leases = self._load()
            kept = {k: v for k, v in leases.items() if v["pid"] != pid}
            if self.claims is not None and pid == os.getpid():
                self.claims.release(g for v in leases.values() if v["pid"] == pid for g in v["gpus"])
            if len(kept) != len(leases):
                self._save(kept)
                for lease_id in leases.keys() - kept.keys():
                    self._log("release", lease_id, leases[lease_id])

    def record_pids(self, lease: Lease, pids: Iterable[int]) -> None:
        """Name the processes of the server on `lease` (from its launch on, as they start): should
        its holder die, the lease is handed on only once their GPU memory is released (see module
        docstring), also mid-boot, while its weights load."""
        with self._lock:
            leases, waiters = self._load_book()
            entry = leases.get(lease.lease_id)
            if entry is not None:
                entry["pids"] = sorted(set(pids))
                self._save(leases, waiters)

    def holders(self) -> dict[str, dict]:
        """Live leases, by id (dead holders' leases are dropped on the way, but for one whose
        server's GPU memory is not yet released: it is kept, with `gone_since` and `held`)."""
        with self._lock:
            return self._load_live()[0]

    def waiting(self) -> dict[str, dict]:
        """Requests waiting for GPUs, by ticket: `n`, `owner`, `pid`, `since`, `order` (first come first)."""
        with self._lock:
            return self._load_live()[1]

    def history(self) -> list[dict]:
        """Every change to the book so far, oldest first: dicts with `event` (acquire, release,
        expire), `time` (epoch seconds), `lease`, `gpus`, `owner`, `pid` (the holder) and `by`
        (the process that made the change; for expire, the one that found the holder gone), and
        for an expire handed on with its server's memory still held when the wait ran out, `held`."""
        try:
            lines = self.history_path.read_text().splitlines()
        except FileNotFoundError:
            return []
        events = []
        for line in lines:
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a torn last line from a process killed mid-write
        return events

    def choose(self, free: Sequence[int], n: int) -> tuple[int, ...]:
        """The best `n` of the `free` GPUs (see module docstring)."""
        free = sorted(free)
        if n <= 1 or not self.topology:
            return _lowest_contiguous(free, n)
        if _n_choose_k(len(free), n) > _COMBINATION_LIMIT:
            return _lowest_contiguous(free, n)
        best, best_key = None, None
        for combo in itertools.combinations(free, n):
            scores = [self._link_score(a, b) for a, b in itertools.combinations(combo, 2)]
            key = (min(scores), sum(scores), _contiguity(combo), [-g for g in combo])
            if best_key is None or key > best_key:
                best, best_key = combo, key
        return tuple(best)

    def _claim(self, free: Sequence[int], n: int) -> tuple[tuple[int, ...] | None, dict[int, str]]:
        """The best `n` of the `free` GPUs that no other run claims (now claimed by this process),
        or None; and who holds each GPU passed over."""
        elsewhere: dict[int, str] = {}
        candidates = list(free)
        while len(candidates) >= n:
            gpus = self.choose(candidates, n)
            taken = self.claims.claim(gpus) if self.claims is not None else None
            if taken is None:
                return gpus, elsewhere
            elsewhere[taken[0]] = taken[1]
            candidates.remove(taken[0])
        return None, elsewhere

    # -- storage -------------------------------------------------------------------------------

    def _link_score(self, a: int, b: int) -> int:
        label = self.topology.get((a, b)) or self.topology.get((b, a)) or "SYS"
        m = re.fullmatch(r"NV(\d+)", label)
        if m:
            return 100 + int(m.group(1))
        return _LINK_SCORES.get(label, 0)

    def _load(self) -> dict[str, dict]:
        return self._load_book()[0]

    def _load_book(self) -> tuple[dict[str, dict], dict[str, dict]]:
        """The leases and the queue of waiting requests, by id."""
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}, {}
        except (json.JSONDecodeError, OSError):
            return {}, {}  # a torn write cannot happen (atomic replace); garbage means start over
        return dict(data.get("leases", {})), dict(data.get("waiters", {}))

    def _load_live(self) -> tuple[dict[str, dict], dict[str, dict]]:
        """The book less dead processes' places in the queue and dead holders' leases, but for a
        lease whose server's memory is still held on its GPUs (see module docstring): that one
        stays, with `gone_since` (epoch seconds) and `held` (what NVML lists)."""
        leases, waiters = self._load_book()
        now = time.time()
        live, expired = {}, {}
        for key, entry in leases.items():
            if holder_alive(entry):
                live[key] = entry
                continue
            since = entry.get("gone_since", now)
            # a book of the previous release, or a server that never booted, names no pids
            held = gpu_memory.still_held(entry["gpus"], entry["pids"]) if entry.get("pids") else ""
            if held and now - since < gpu_memory.RELEASE_TIMEOUT_S:
                live[key] = {**entry, "gone_since": since, "held": held}
            else:
                expired[key] = {**entry, "held": held}
        waiting = {k: v for k, v in waiters.items() if holder_alive(v)}
        if live != leases or len(waiting) != len(waiters):
            self._save(live, waiting)
            for lease_id, entry in expired.items():
                self._log("expire", lease_id, entry)
        return live, waiting

    def _log(self, event: str, lease_id: str, entry: Mapping) -> None:
        """Append one event to the history; the caller holds the lock. One write per line, so a
        reader sees whole lines (or a torn last one if this process is killed mid-write)."""
        record = {"event": event, "time": time.time(), "lease": lease_id,
                  "gpus": list(entry.get("gpus", ())), "owner": entry.get("owner"),
                  "pid": entry.get("pid"), "by": os.getpid()}
        if entry.get("held"):  # a dead holder's GPUs handed on with memory still held: the bound ran out
            record["held"] = entry["held"]
        fd = os.open(self.history_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(record) + "\n").encode())
        finally:
            os.close(fd)

    def _save(self, leases: Mapping[str, dict], waiters: Mapping[str, dict] | None = None) -> None:
        if waiters is None:
            waiters = self._load_book()[1]
        remove_leftovers(self.path)  # the caller holds the book's lock, as every writer does: a killed one's
        # a full disk: the book stays as it was, and no half-written copy beside it; a run's own
        # bookkeeping, which a power cut ends with the run, so no fsync
        replace_text(self.path, json.dumps({"inventory": list(self.inventory), "leases": leases,
                                            "waiters": waiters}, indent=1), durable=False)


def read_topology(timeout: float = 10.0) -> dict[tuple[int, int], str] | None:
    """Link labels from `nvidia-smi topo -m`, or None without nvidia-smi (or on any failure)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=timeout, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_topology(out.stdout)


def parse_topology(text: str) -> dict[tuple[int, int], str]:
    """Parse the GPU-by-GPU part of `nvidia-smi topo -m` (header row `GPU0 GPU1 ...`)."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in text.splitlines()]
    # The header row comes first and also starts with GPU0 (indented by a tab on real output).
    start = next((i for i, line in enumerate(lines) if re.match(r"\s*GPU\d+\b", line)), None)
    if start is None:
        return {}
    columns = [int(c[3:]) for c in lines[start].split() if re.fullmatch(r"GPU\d+", c)]
    links: dict[tuple[int, int], str] = {}
    for line in lines[start + 1:]:
        cells = line.split()
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]):
            continue
        row = int(cells[0][3:])
        for col, label in zip(columns, cells[1:1 + len(columns)]):
            if col != row:
                links[(row, col)] = label
    return links


def _holder(entry: Mapping) -> str:
    """`ar-tp1 (pid 4242)`; a dead holder's lease kept for its server's memory says so."""
    gone = ", gone; its server's GPU memory not yet released" if "gone_since" in entry else ""
    return f"{entry['owner']} (pid {entry['pid']}{gone})"


def holder_alive(entry: Mapping) -> bool:
    """Whether the process `entry` names (its pid and, where kept, its start time) still runs: a
    zombie or a pid handed on to another process is gone (the attached lease's line reads it too)."""
    import psutil  # lazy: only the lease book needs it

    pid = entry.get("pid")
    if not isinstance(pid, int):
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        # A recycled pid is a different process: compare start times.
        recorded = entry.get("start_time")
        return recorded is None or recorded == proc.create_time()
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def start_time(pid: int) -> float | None:
    """`pid`'s start time, which tells it from a later process given the same pid; None if gone."""
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _lowest_contiguous(free: Sequence[int], n: int) -> tuple[int, ...]:
    """Aligned block (start % n == 0) first, so TP4 + TP4 fit 8 GPUs; then any run; then lowest."""
    windows = [tuple(free[i:i + n]) for i in range(len(free) - n + 1)]
    runs = [w for w in windows if w[-1] - w[0] == n - 1]
    for w in runs:
        if w[0] % n == 0:
            return w
    return runs[0] if runs else tuple(free[:n])


def _contiguity(combo: Sequence[int]) -> int:
    return -(combo[-1] - combo[0])


def _n_choose_k(n: int, k: int) -> int:
    from math import comb

    return comb(n, k)


def _bound(timeout: float | None, setting: str) -> str:
    """When a wait gives up, and where the user changes that."""
    return f"the test fails after {timeout:g}s without them ({setting})" if timeout is not None else "no time limit"


def _fmt(gpus: Sequence[int]) -> str:
    return ",".join(str(g) for g in gpus)


def _named(gpus: Sequence[int]) -> str:
    """`GPU 0` or `GPUs 0,1`: a bare `of 0` read as "of no GPUs"."""
    return f"GPU{'s' if len(gpus) != 1 else ''} {_fmt(gpus)}"
