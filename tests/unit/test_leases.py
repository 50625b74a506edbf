"""GpuLeases: cross-process GPU leasing on a simulated inventory (no GPU needed)."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytest_specdec.servers.leases import (
    GpuLeaseError,
    GpuLeases,
    NotEnoughGpus,
    parse_topology,
)

pytestmark = pytest.mark.timeout(120)


def test_lease_release_and_aligned_choice(tmp_path):
    leases = GpuLeases(tmp_path, 8)
    one = leases.acquire(1, owner="ar-tp1")
    assert one.gpus == (0,) and one.cuda_visible_devices == "0" and one.pid == os.getpid()
    four = leases.acquire(4, owner="ddtree-tp4-b16")
    assert four.gpus == (4, 5, 6, 7)  # the aligned block, leaving 0-3 whole once ar-tp1 ends
    two = leases.acquire(2, owner="dflash-tp2")
    assert two.gpus == (2, 3)
    assert sorted(g for v in leases.holders().values() for g in v["gpus"]) == [0, 2, 3, 4, 5, 6, 7]
    leases.release(one)
    leases.release(two)
    assert leases.acquire(4, owner="x").gpus == (0, 1, 2, 3)


def test_a_spec_larger_than_the_inventory_is_a_skip_reason(tmp_path):
    with pytest.raises(NotEnoughGpus, match=r"ddtree-tp8-b16 needs 8 GPUs, but the inventory has 4 \(0,1,2,3\)"):
        GpuLeases(tmp_path, 4).acquire(8, owner="ddtree-tp8-b16")
    with pytest.raises(NotEnoughGpus, match=r"inventory has 0 \(none\)"):
        GpuLeases(tmp_path / "none", 0).acquire(1, owner="ar-tp1")


def test_waiting_times_out_naming_the_holders(tmp_path):
    leases = GpuLeases(tmp_path, 2)
    leases.acquire(2, owner="dflash-tp2")
    t0 = time.monotonic()
    with pytest.raises(GpuLeaseError, match=r"waited 0.5s for 1 free GPU .* held: dflash-tp2 \(pid \d+\): GPUs 0,1"):
        leases.acquire(1, owner="ar-tp1", timeout=0.5)
    assert time.monotonic() - t0 < 3


def _queued(run_dir: Path) -> dict:
    """The requests the book says are waiting."""
    path = run_dir / "gpu-leases.json"
    return json.loads(path.read_text()).get("waiters", {}) if path.exists() else {}


def _wait_for_all(run_dir: str, inventory: int, got) -> None:
    """A worker whose configuration needs the whole inventory: it reports what it was leased."""
    lease = GpuLeases(Path(run_dir), inventory).acquire(inventory, owner="ddtree-tp8-b8", timeout=60, poll=0.5)
    got.put(lease.gpus)


def test_a_large_request_is_not_overtaken_by_small_ones(tmp_path):
    """A TP8 configuration waiting for all GPUs, while another worker goes from one TP1
    configuration to the next: each release was followed at once by the next lease, so the TP8
    request found no moment with every GPU free until the small configurations ran out."""
    leases = GpuLeases(tmp_path, 8)
    lease = leases.acquire(1, owner="ar-tp1")
    ctx = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    got = ctx.Queue()
    waiter = ctx.Process(target=_wait_for_all, args=(str(tmp_path), 8, got))
    waiter.start()
    try:
        deadline = time.monotonic() + 30
        while not _queued(tmp_path) and time.monotonic() < deadline and waiter.is_alive():
            time.sleep(0.05)
        time.sleep(0.1)  # the old book had no queue to watch: give the waiter its first look
        leases.release(lease)
        with pytest.raises(GpuLeaseError, match=r"waited 0s for 1 free GPU among GPUs 0,1,2,3,4,5,6,7; held: by no one; "
                                                r"queued before it: ddtree-tp8-b8 \(8 GPUs\); raise "):
            leases.acquire(1, owner="dflash-tp1", timeout=0)  # the next TP1 queues behind the TP8
        assert got.get(timeout=30) == tuple(range(8))
        waiter.join(timeout=30)
        assert waiter.exitcode == 0
        assert leases.acquire(1, owner="dflash-tp1", timeout=30).gpus == (0,)  # its turn, once TP8 is done
        assert _queued(tmp_path) == {}  # nobody left queued, the timed-out request included
    finally:
        if waiter.is_alive():
            waiter.kill()
        waiter.join()


def _hold_one_then_wait_for_all(run_dir: str, inventory: int) -> None:
    """A worker whose server would not stop (it keeps that lease) and asks for the whole inventory."""
    leases = GpuLeases(Path(run_dir), inventory)
    leases.acquire(1, owner="stuck-tp1")
    with pytest.raises(GpuLeaseError):
        leases.acquire(inventory, owner="ddtree-tp8-b8", timeout=20, poll=0.05)


def test_a_worker_waiting_while_it_holds_gpus_keeps_no_one_waiting(tmp_path):
    ctx = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    stuck = ctx.Process(target=_hold_one_then_wait_for_all, args=(str(tmp_path), 4))
    stuck.start()
    try:
        deadline = time.monotonic() + 30
        while not _queued(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _queued(tmp_path), "the stuck worker never queued"
        assert GpuLeases(tmp_path, 4).acquire(2, owner="ar-tp2", timeout=0).gpus == (2, 3)
    finally:
        stuck.kill()
        stuck.join()


def test_a_queued_request_that_gives_up_or_dies_leaves_the_queue(tmp_path):
    leases = GpuLeases(tmp_path, 2)
    leases.acquire(2, owner="dflash-tp2")
    with pytest.raises(GpuLeaseError):
        leases.acquire(2, owner="ar-tp2", timeout=0.3, poll=0.05)
    assert _queued(tmp_path) == {}
    (tmp_path / "gpu-leases.json").write_text(json.dumps({"leases": {}, "waiters": {
        "gone": {"n": 2, "owner": "gw3", "pid": os.getpid(), "start_time": 1, "since": 0, "order": 1}}}))
    assert leases.acquire(1, owner="ar-tp1", timeout=1).gpus == (0,)  # a dead worker's place holds nothing


def test_a_wait_for_this_runs_own_workers_says_what_it_waits_for_once(tmp_path):
    """Only a wait for another run's GPU was announced: a TP8 configuration waiting on this run's
    other workers, up to the hour's timeout, printed nothing."""
    said: list[str] = []
    leases = GpuLeases(tmp_path, 2, announce=said.append)
    leases.acquire(1, owner="ar-tp1")
    with pytest.raises(GpuLeaseError):
        leases.acquire(2, owner="ddtree-tp2-b8", timeout=0.3, poll=0.02)
    assert said == [f"ddtree-tp2-b8 waits for 2 free GPUs among GPUs 0,1: held by ar-tp1 (pid {os.getpid()}) GPU 0; "
                    f"the test fails after 0.3s without them (--specdec-gpu-wait-timeout)"]


def test_the_wait_and_its_timeout_name_where_the_bound_is_set(tmp_path):
    """The bound was an hour with no option: neither the wait line nor the timeout said how to
    change it. Both name the setting, where the user set it (else its flag)."""
    said: list[str] = []
    leases = GpuLeases(tmp_path, 1, announce=said.append)
    leases.acquire(1, owner="ar-tp1")
    where = "pyproject.toml [tool.specdec] key 'gpu_wait_timeout'"
    with pytest.raises(GpuLeaseError) as caught:
        leases.acquire(1, owner="ddtree-tp1-b8", timeout=0.2, timeout_setting=where, poll=0.02)
    assert said == [f"ddtree-tp1-b8 waits for 1 free GPU among GPU 0: held by ar-tp1 (pid {os.getpid()}) GPU 0; "
                    f"the test fails after 0.2s without them ({where})"]
    assert str(caught.value) == (f"ddtree-tp1-b8 waited 0.2s for 1 free GPU among GPU 0; held: ar-tp1 (pid {os.getpid()}): "
                                 f"GPU 0; raise {where} to wait longer")
    with pytest.raises(GpuLeaseError, match="; raise --specdec-gpu-wait-timeout to wait longer$"):
        leases.acquire(1, owner="ddtree-tp1-b8", timeout=0)


def test_the_lease_default_is_the_options(tmp_path):
    """The pool's and the lease book's own defaults (for callers outside the plugin) are the option's."""
    from pytest_specdec.options import OPTIONS_BY_NAME
    from pytest_specdec.servers.leases import WAIT_TIMEOUT_S, WAIT_TIMEOUT_SETTING

    option = OPTIONS_BY_NAME["gpu_wait_timeout"]
    assert (option.default, option.cli) == (WAIT_TIMEOUT_S, WAIT_TIMEOUT_SETTING)


def test_inventory_of_explicit_indices(tmp_path):
    leases = GpuLeases(tmp_path, [3, 5])
    assert leases.acquire(2, owner="x").gpus == (3, 5)


def _worker(run_dir: str, inventory: int, rounds: int, seed: int, errors) -> None:
    """Lease, mark each GPU busy with an exclusive create, hold a moment, unmark, release."""
    rng = random.Random(seed)
    leases = GpuLeases(Path(run_dir), inventory)
    marks = Path(run_dir) / "marks"
    for _ in range(rounds):
        lease = leases.acquire(rng.choice([1, 1, 2, 4]), owner=f"w{seed}", timeout=60, poll=0.01)
        made = []
        try:
            for g in lease.gpus:
                try:
                    fd = os.open(marks / f"gpu{g}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                    os.close(fd)
                    made.append(g)
                except FileExistsError:
                    errors.put(f"GPU {g} leased twice (worker {seed})")
            time.sleep(rng.uniform(0.001, 0.01))
        finally:
            for g in made:
                os.unlink(marks / f"gpu{g}")
            leases.release(lease)


def test_leases_never_oversubscribe_across_processes(tmp_path):
    (tmp_path / "marks").mkdir()
    ctx = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    errors = ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(str(tmp_path), 6, 15, i, errors)) for i in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=90)
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert found == []
    assert GpuLeases(tmp_path, 6).holders() == {}


def test_a_dead_holders_lease_is_recovered(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import time
                from pathlib import Path
                from pytest_specdec.servers.leases import GpuLeases
                GpuLeases(Path({str(tmp_path)!r}), 2).acquire(2, owner="worker-gw1")
                print("held", flush=True)
                time.sleep(120)
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        leases = GpuLeases(tmp_path, 2)
        with pytest.raises(GpuLeaseError, match="worker-gw1"):
            leases.acquire(1, owner="ar-tp1", timeout=0.3)  # a live holder keeps its GPUs
        holder.kill()
        holder.wait()
        assert leases.acquire(2, owner="ar-tp2", timeout=5).gpus == (0, 1)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_a_recycled_pid_does_not_keep_a_lease(tmp_path):
    """Same pid, different process start time: the holder is gone."""
    leases = GpuLeases(tmp_path, 1)
    (tmp_path / "gpu-leases.json").write_text(json.dumps({"leases": {
        "old": {"gpus": [0], "owner": "gw0", "pid": os.getpid(), "start_time": 1, "since": 0}}}))
    assert leases.acquire(1, owner="ar-tp1", timeout=1).gpus == (0,)


TOPO = """\
\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m
GPU0\t X \tSYS\tNV4\tSYS\t0-31\t0\t\tN/A
GPU1\tSYS\t X \tSYS\tNV4\t0-31\t0\t\tN/A
GPU2\tNV4\tSYS\t X \tPIX\t0-31\t0\t\tN/A
GPU3\tSYS\tNV4\tPIX\t X \t0-31\t0\t\tN/A

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def test_topology_parse_and_nvlink_preference(tmp_path):
    topo = parse_topology(TOPO)
    assert topo[(0, 2)] == "NV4" and topo[(1, 0)] == "SYS" and topo[(2, 3)] == "PIX"
    assert (0, 0) not in topo
    assert parse_topology("\t" + TOPO) == topo  # real output indents the header row
    assert parse_topology("nvidia-smi: command failed") == {}
    leases = GpuLeases(tmp_path, 4, topology=topo)
    assert leases.acquire(2, owner="a").gpus == (0, 2)
    assert leases.acquire(2, owner="b").gpus == (1, 3)
    # Without topology the lowest aligned pair is chosen instead.
    assert GpuLeases(tmp_path / "plain", 4).acquire(2, owner="a").gpus == (0, 1)


# As printed on a 2 x H200 host (the header row is indented and underlined).
TOPO_H200X2 = (
    "\t\x1b[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV18\t0-31\t0\t\tN/A\nGPU1\tNV18\t X \t0-31\t0\t\tN/A\n\nLegend:\n\n  X    = Self\n"
)


def test_topology_of_a_real_two_gpu_host():
    assert parse_topology(TOPO_H200X2) == {(0, 1): "NV18", (1, 0): "NV18"}


def test_topology_prefers_pcie_switch_over_numa_hops(tmp_path):
    leases = GpuLeases(tmp_path, 4, topology=parse_topology(TOPO))
    assert leases.choose([0, 1, 3], 2) == (1, 3)  # NV4 beats SYS
    assert leases.choose([0, 1], 2) == (0, 1)


def test_a_book_the_disk_refuses_leaves_no_temporary_file_behind(tmp_path, monkeypatch):
    """A full disk as the book is rewritten: the book stays as it was (the rename never came)
    and its half-written temporary copy is removed, not left in the run folder for each failed
    save of each worker."""
    import errno
    import pathlib

    leases = GpuLeases(tmp_path, 2)
    one = leases.acquire(1, owner="ar-tp1")
    book = tmp_path / "gpu-leases.json"
    before = book.read_text()
    files = sorted(p.name for p in tmp_path.iterdir())
    real_write_text = pathlib.Path.write_text

    def full_disk(self, text, *args, **kwargs):
        real_write_text(self, text[: len(text) // 2], *args, **kwargs)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))

    monkeypatch.setattr(pathlib.Path, "write_text", full_disk)
    with pytest.raises(OSError, match="No space left on device"):
        leases.release(one)
    monkeypatch.undo()
    assert book.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == files


def test_a_killed_writers_temporary_book_is_removed_under_the_books_lock(tmp_path):
    """A worker SIGKILLed between the book's temporary copy and its rename left `.gpu-leases.json.*.tmp`
    for good; every writer of the book holds its lock, so any found under it is a dead one's."""
    leases = GpuLeases(tmp_path, 2)
    torn = tmp_path / ".gpu-leases.json.k1ll3d.tmp"
    torn.write_text("{")
    leases.release(leases.acquire(1, owner="ar-tp1"))
    assert not torn.exists()
