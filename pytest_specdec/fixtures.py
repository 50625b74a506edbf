"""Fixtures of pytest-specdec; registered as a plugin from pytest_configure.

The heavy lifting lives in `servers/` (launch, pool, leases), `live.py` (guards around a
workload) and `recording.py` (journal, baselines, pytest-benchmark); these functions only wire
them to pytest's scopes.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from typing import TYPE_CHECKING, Callable, Iterator

import pytest

from .collection import case_of
from .errors import SpecdecUsageError
from .lossless import reference_top_logprobs
from .state import STATE_KEY, RunState, run_dir

if TYPE_CHECKING:  # the modules behind these load when a fixture runs, not with the plugin
    from .config import WorkloadSpec
    from .configuration import MatrixCase
    from .hardware import Hardware
    from .live import LiveServer
    from .recording import Recorder
    from .servers.pool import ServerPool


@pytest.fixture(scope="session")
def specdec_state(pytestconfig: pytest.Config) -> RunState:
    """The run's resolved config, options, hardware and backend."""
    return pytestconfig.stash[STATE_KEY]


@pytest.fixture(scope="session")
def specdec_hardware(specdec_state: RunState) -> Hardware:
    """The GPU inventory the run schedules on (simulated under --specdec-arch/--specdec-gpus)."""
    return specdec_state.hardware


@pytest.fixture
def specdec_spec(request: pytest.FixtureRequest) -> MatrixCase:
    """The matrix cell this test is parametrized with."""
    if not hasattr(request, "param"):
        raise pytest.UsageError("specdec_spec is parametrized from the configured matrix; "
                                "request it from a test function, not from a fixture override")
    return request.param


@pytest.fixture
def specdec_workload(request: pytest.FixtureRequest) -> WorkloadSpec:
    """The configured workload this test is parametrized with ([[tool.specdec.workloads]])."""
    if not hasattr(request, "param"):
        raise pytest.UsageError("specdec_workload is parametrized from [[tool.specdec.workloads]]")
    return request.param


@pytest.fixture(scope="session")
def specdec_model_path(specdec_state: RunState) -> str | None:
    """The target model as a local path: a local folder as is, a Hub id downloaded into
    `model_cache` with a completeness check (SGLang). None where the backend loads no model of
    ours: the embedded engine (its built-in synthetic weights), an attached server (its own), or
    no model configured."""
    try:
        return specdec_state.backend.model_path(specdec_state)
    except SpecdecUsageError as exc:
        from .live import fail

        fail(str(exc))


@pytest.fixture(scope="session")
def specdec_pool(specdec_state: RunState, request: pytest.FixtureRequest) -> Iterator[ServerPool]:
    """Session-wide server reuse: each configuration boots once; all are stopped at the end."""
    state = specdec_state
    try:
        # readiness, artifacts: checked at collection finish, in an xdist worker too (plugin.py)
        if hasattr(request.config, "workerinput"):
            from .servers.cleanup import die_with_parent

            die_with_parent()  # before any server: a killed controller takes this worker and them along
        pool = state.backend.pool(state, run_dir(state, request.config), announce=_announcer(request.config))
    except SpecdecUsageError as exc:
        pool, problem = None, f"pytest-specdec: {exc}"
    if pool is None:
        pytest.fail(problem, pytrace=False)  # one line per test, no chained traceback
    request.config.stash[POOL_KEY] = pool
    yield pool
    from .servers.diagnosis import ServerError
    from .servers.process import INTERRUPTED_GRACE_S

    # after Ctrl-C the user is waiting: a server slow to honour SIGTERM gets SIGKILL soon
    interrupted = getattr(request.session, "exitstatus", None) == pytest.ExitCode.INTERRUPTED
    if interrupted:  # e.g. an xdist worker interrupted between tests: no test's protocol said it
        _say_stopping(request.config, pool, INTERRUPTED_GRACE_S)
    try:
        pool.close(grace=INTERRUPTED_GRACE_S if interrupted else None)
    except ServerError as exc:
        warnings.warn(f"pytest-specdec: teardown: {exc}", stacklevel=1)


POOL_KEY = pytest.StashKey["ServerPool"]()


def _announcer(config: pytest.Config) -> Callable[[str], None]:
    """Print a progress line while a test waits, past pytest's capture (and from an xdist worker,
    whose stderr is the controller's)."""
    worker = getattr(config, "workerinput", {}).get("workerid")
    prefix = f"specdec: [{worker}] " if worker else "specdec: "

    def announce(text: str) -> None:
        capture = config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            sys.stderr.write(f"\n{prefix}{text}\n")
            sys.stderr.flush()

    return announce


_STOP_SAID_KEY = pytest.StashKey[bool]()


def _say_stopping(config: pytest.Config, pool: ServerPool, grace: float) -> None:
    """Say which servers an ending run stops and its bound, once per run: a frozen server takes
    the whole grace before SIGKILL, and the user who pressed Ctrl-C would see nothing meanwhile."""
    ids = [spec.id for spec in pool.live()]
    if not ids or config.stash.get(_STOP_SAID_KEY, False):
        return
    config.stash[_STOP_SAID_KEY] = True
    several = len(ids) > 1
    announce = _announcer(config)
    announce(f"the run is ending: stopping server{'s' if several else ''} {', '.join(ids)} now "
             f"(SIGTERM, then SIGKILL after {grace:g}s{' each' if several else ''})")


def retire_finished_server(item: pytest.Item, nextitem: pytest.Item | None,
                           interrupted: bool = False) -> None:
    """Stop a configuration's server as soon as this process has no further test for it.

    Items are ordered by configuration, so the next item tells. Under xdist this frees the GPU
    lease for other workers instead of holding it until this worker's next boot. `interrupted`
    (Ctrl-C in the test): the run is ending and the user waits, so every server is stopped now,
    saying so, with a short SIGTERM grace, even one the next test would have used.
    """
    pool = item.config.stash.get(POOL_KEY, None)
    case = case_of(item)
    if pool is None or case is None:
        return
    if not interrupted and nextitem is not None and case_of(nextitem) == case:
        return
    state = item.config.stash[STATE_KEY]
    if not state.backend.launches:
        return
    from .servers.diagnosis import ServerError
    from .servers.process import INTERRUPTED_GRACE_S

    try:
        if interrupted:
            _say_stopping(item.config, pool, INTERRUPTED_GRACE_S)
            pool.close(grace=INTERRUPTED_GRACE_S)
        else:
            pool.retire(state.backend.server_spec(case, state))
    except ServerError as exc:
        warnings.warn(f"pytest-specdec: teardown: {exc}", stacklevel=1)


_ATTEMPTED_KEY = pytest.StashKey[bool]()


@pytest.fixture
def specdec_server(specdec_spec: MatrixCase, specdec_pool: ServerPool, specdec_state: RunState,
                   request: pytest.FixtureRequest) -> Iterator[LiveServer]:
    """A live, health-checked server for this test's configuration."""
    from .live import fail
    from .servers.attach import AttachMismatch
    from .servers.diagnosis import ServerError
    from .servers.leases import GpuLeaseError, NotEnoughGpus

    state = specdec_state
    spec = state.backend.server_spec(specdec_spec, state)
    run_again = _ATTEMPTED_KEY in request.node.stash  # pytest-rerunfailures: this item set up before
    request.node.stash[_ATTEMPTED_KEY] = True
    try:
        server = specdec_pool.acquire(spec)
    except (NotEnoughGpus, AttachMismatch) as exc:
        pytest.skip(str(exc))
    except (GpuLeaseError, SpecdecUsageError) as exc:  # a lease, or a model that cannot be had
        fail(f"server {spec.id}: {exc}")
    except ServerError as exc:
        if run_again and state.backend.launches:  # the attempt before spent the restarts: say why
            fail(f"{exc}\n(this test is run again after the attempt that left its server failed: raise "
                 f"{state.settings.setter('restart_on_crash')} (now {state.settings.restart_on_crash}) "
                 f"to boot the server again for it)")
        fail(str(exc))
    turn = specdec_pool.attached_lease
    if turn is not None:  # another worker's test on the same attached server would share it with this one
        from .servers.attach_lease import AttachedLeaseError

        try:
            turn.acquire(request.node.name)
        except AttachedLeaseError as exc:
            fail(f"server {spec.id}: {exc}")
    try:
        yield from _live_server(spec, server, specdec_spec, specdec_pool, state, request)
    finally:  # also on a failure and Ctrl-C: the next worker's test may have the server
        if turn is not None:
            turn.release()


def _live_server(spec, server, specdec_spec: MatrixCase, specdec_pool: ServerPool, state: RunState,
                 request: pytest.FixtureRequest) -> Iterator[LiveServer]:
    """The LiveServer of `specdec_server`, yielded while its test runs; checked after it."""
    from .live import LiveServer

    owned = state.backend.launches
    live = LiveServer(
        spec=spec, url=server.url, log_path=server.log_path, check=server.check_alive,
        placement=getattr(server, "placement", ""),
        min_accept_length=state.config.min_accept_length, root=state.config.root,
        token_counter=state.backend.token_counter(server.url), owned=owned, workloads=state.workloads,
        workload_specs={w.name: w for w in state.config.workloads},
        stall_timeout=state.settings.stall_timeout, stall_setting=state.settings.setter("stall_timeout"),
        probe_stall=server.stall_error, report_failure=lambda error: specdec_pool.report_death(spec, error),
        pids=server.processes if owned else None, announce=_announcer(request.config),
        top_logprobs=reference_top_logprobs(specdec_spec, state), sharing=state.sharing,
        warmup_requests=state.settings.warmup_requests, cache_flush=state.cache_flush,
        vocab_said=state.vocab_said)
    yield live
    # an interrupted session (Ctrl-C mid-workload) stops every server next: probing one that is
    # frozen would only hold the interrupt up for the health timeout
    interrupted = getattr(request.session, "exitstatus", pytest.ExitCode.OK) != pytest.ExitCode.OK
    if live.failure is None and owned and not interrupted:
        live.check_after_test()


@pytest.fixture
def specdec_record(request: pytest.FixtureRequest) -> Recorder:
    """Record metrics with their direction; they are journaled, gated against the baseline and
    handed to pytest-benchmark when the test's call ends."""
    from .collection import shared_key_error
    from .recording import new_recorder

    shared = shared_key_error(request.node)  # an xdist worker's: a single process stopped at collection
    if shared:
        pytest.fail(f"pytest-specdec: {shared}", pytrace=False)
    if "specdec_record" not in getattr(request.node, "fixturenames", ()):
        _skip_benchmark(request.config)
        _claim_journal(request.config)  # fetched as the test runs: the call wrapper claimed nothing
    return new_recorder(request.node)


def _skip_benchmark(config: pytest.Config) -> None:
    """Under --benchmark-skip, a test that fetched the recorder as it ran is a benchmark too:
    pytest-benchmark sorted it by its signature at collection, and would skip it only once its
    figures were measured and journaled, when they are handed to it."""
    if config.getoption("benchmark_skip", default=False) and not config.getoption("benchmark_only", default=False):
        pytest.skip("--benchmark-skip: this test records (it fetched specdec_record with "
                    "request.getfixturevalue), so it is a benchmark, skipped as it fetched the recorder, "
                    "after its setup; name specdec_record in its signature to skip it before any server boots")


def _claim_journal(config: pytest.Config) -> None:
    """Before a test that fetched the recorder measures: as the call wrapper does for a test
    that names it, so a journal that cannot be written fails it now, in one line."""
    from .session import claim_journal
    from .state import run_id

    try:
        claim_journal(config.stash[STATE_KEY], run_id(config))
    except SpecdecUsageError as exc:  # its text says it all: no chained traceback
        raise pytest.fail.Exception(f"pytest-specdec: {exc}", pytrace=False) from None

