"""`ServerPool`: session-wide reuse of servers, one boot per spec, sticky failures.

Policy, and why:
- One live server per pool (per pytest process / xdist worker). Tests are ordered by spec, so a
  spec is not needed again once the next one starts; keeping it would hold GPUs (and leases) that
  other workers wait for. Switching spec therefore tears the previous server down first.
- Liveness before every hand-out: a server that died between tests is noticed before the next
  test starts, not after its workload times out.
- A failure (boot failure, death, unresponsive) consumes one of `restart_on_crash` restarts;
  once they are spent, the error is remembered and every later request for that spec raises it at
  once, so a crashed spec costs one timeout, not one per test.
- In attach mode (`--specdec-server-url`) nothing is launched, leased or killed; a failure is
  sticky at once (there is nothing to restart). Its `attached_lease` (attach_lease.py) is held by
  the test that uses the server, so the run's workers measure on it one at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pytest_specdec.servers.attach import AttachedServer
from pytest_specdec.servers.attach_lease import AttachedLease
from pytest_specdec.servers.diagnosis import ServerError
from pytest_specdec.servers.leases import WAIT_TIMEOUT_S, WAIT_TIMEOUT_SETTING, GpuLeaseError, GpuLeases, Lease
from pytest_specdec.servers.process import ManagedServer
from pytest_specdec.servers.spec import ServerSpec

DEAD_SERVER_GRACE_S = 1.0

ServerFactory = Callable[[ServerSpec, tuple[int, ...]], ManagedServer]


@dataclass
class _Slot:
    server: ManagedServer
    lease: Lease | None


@dataclass
class PoolStats:
    """Counts the plugin reports in its summary (and tests assert on)."""

    boots: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)


class ServerPool:
    """Hands out ready servers by spec. `factory(spec, gpus)` builds a not-yet-started server."""

    def __init__(
        self,
        factory: ServerFactory | None,
        *,
        leases: GpuLeases | None = None,
        restart_on_crash: int = 0,
        lease_timeout: float | None = WAIT_TIMEOUT_S,
        lease_setting: str = WAIT_TIMEOUT_SETTING,
        attached: AttachedServer | None = None,
        attached_lease: AttachedLease | None = None,
    ) -> None:
        self.factory = factory
        self.leases = leases
        self.restart_on_crash = restart_on_crash
        self.lease_timeout = lease_timeout
        self.lease_setting = lease_setting  # where the user set lease_timeout: the wait and its timeout name it
        self._attached = attached
        self.attached_lease = attached_lease  # one worker's test at a time on the attached server
        self._live: dict[ServerSpec, _Slot] = {}
        self._failed: dict[ServerSpec, ServerError] = {}
        self.stats = PoolStats()

    @classmethod
    def attach(cls, url: str, announce: Callable[[str], None] | None = None, stall_timeout: float | None = None,
               stall_setting: str = "--specdec-stall-timeout", lease: AttachedLease | None = None) -> ServerPool:
        """A pool over one running server; `acquire(spec)` raises AttachMismatch unless it is `spec`.
        `announce` says a liveness check's wait as it goes on; `stall_timeout` caps that wait; `lease`
        keeps the run's workers from measuring on it at once."""
        return cls(None, attached=AttachedServer(url, announce=announce, stall_timeout=stall_timeout,
                                                 stall_setting=stall_setting), attached_lease=lease)

    # -- public --------------------------------------------------------------------------------

    def acquire(self, spec: ServerSpec) -> ManagedServer | AttachedServer:
        """A live, ready server for `spec`; raises the spec's ServerError, NotEnoughGpus (skip),
        GpuLeaseError, or AttachMismatch (skip)."""
        if self._attached is not None:
            server = self._attached.for_spec(spec)
            if spec in self._failed:
                raise self._failed[spec]
            try:
                server.check_alive()
            except ServerError as e:
                self._failed[spec] = e  # we cannot restart it: one health timeout, not one per test
                raise
            return server
        if spec in self._failed:
            raise self._failed[spec]
        slot = self._live.get(spec)
        if slot is not None:
            try:
                slot.server.check_alive()
                return slot.server
            except ServerError as e:
                self._drop(spec, grace=DEAD_SERVER_GRACE_S)  # as report_death: nothing to wait for
                self._count_failure(spec, e)
        if self.leases is not None:
            self.leases.check_fits(spec.num_gpus, owner=spec.id)  # skip before tearing anything down
        self.retire_all(keep=None)
        while True:
            try:
                return self._boot(spec)
            except ServerError as e:
                self._count_failure(spec, e)

    def attached_identity(self):
        """What the attached server said it is (None when this pool launches its own)."""
        return self._attached.identity if self._attached is not None else None

    def failure(self, spec: ServerSpec) -> ServerError | None:
        """The remembered error of a spec that is out of restarts, if any."""
        return self._failed.get(spec)

    def report_death(self, spec: ServerSpec, error: ServerError) -> None:
        """A test saw `spec`'s server die or stall (e.g. from `server.diagnose()` after a failed
        request): tear it down now and count the failure, so the next test does not even try it.
        Nothing in a dead or frozen server is worth a long SIGTERM grace. An attached server is
        neither stopped nor restarted: its later tests fail at once with `error`."""
        if self._attached is not None:
            self._failed.setdefault(spec, error)
            return
        if spec in self._live:
            self._drop(spec, grace=DEAD_SERVER_GRACE_S)
            try:
                self._count_failure(spec, error)
            except ServerError:
                pass  # now sticky; the next acquire raises it

    def retire(self, spec: ServerSpec, grace: float | None = None) -> None:
        """Stop `spec`'s server (with `grace`, default its own SIGTERM grace) and release its GPUs
        (call when no later test needs it)."""
        if spec in self._live:
            self._drop(spec, raise_teardown=True, grace=grace)

    def retire_all(self, keep: ServerSpec | None = None) -> None:
        for spec in [s for s in self._live if s != keep]:
            self.retire(spec)

    def live(self) -> dict[ServerSpec, ManagedServer]:
        return {spec: slot.server for spec, slot in self._live.items()}

    def close(self, grace: float | None = None) -> None:
        """Stop everything this pool started, each with `grace` (default: its own SIGTERM grace);
        raises the first teardown error after trying all."""
        errors = []
        for spec in list(self._live):
            try:
                self._drop(spec, raise_teardown=True, grace=grace)
            except ServerError as e:
                errors.append(e)
        if errors:
            raise errors[0]

    def __enter__(self) -> ServerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------

    def _boot(self, spec: ServerSpec) -> ManagedServer:
        lease = None
        if self.leases is not None:
            lease = self.leases.acquire(spec.num_gpus, owner=spec.id, timeout=self.lease_timeout,
                                        timeout_setting=self.lease_setting)
        try:
            server = self.factory(spec, lease.gpus if lease else ())
            if lease is not None:  # should this worker be killed, even mid-boot, its GPUs wait for these pids' memory
                server.on_processes = lambda pids: self.leases.record_pids(lease, pids)
            server.start()
        except BaseException:
            if lease is not None:
                self.leases.release(lease)
            raise
        self._live[spec] = _Slot(server, lease)
        self.stats.boots[spec.id] = self.stats.boots.get(spec.id, 0) + 1
        return server

    def _count_failure(self, spec: ServerSpec, error: ServerError) -> None:
        """Record a failure; raise it (sticky) when the restart budget is spent."""
        n = self.stats.failures[spec.id] = self.stats.failures.get(spec.id, 0) + 1
        if n > self.restart_on_crash:
            self._failed[spec] = error
            raise error

    def _drop(self, spec: ServerSpec, raise_teardown: bool = False,
              grace: float | None = None) -> None:
        slot = self._live.pop(spec)
        try:
            slot.server.stop(grace=grace)
        except ServerError:
            # Survivors may still hold GPU memory: keep the lease (it lapses when this process
            # exits) rather than hand the GPUs to another worker's server.
            if raise_teardown:
                raise
            return
        if slot.lease is not None:
            try:
                self.leases.release(slot.lease)
            except (GpuLeaseError, OSError):
                pass
