"""Hooks that exist only under pytest-xdist; registered from pytest_configure when it is loaded.

Workers collect, the controller does not: the controller learns here that a worker's collection
names the matrix, for the header's details and the backend's warning. The total of its
`[done/total]` progress lines comes with the workers' reports (`plugin.Worker`): which tests can
record is known only from the items.

`--dist loadgroup`, and a bare `-n`, send each configuration's tests to one worker, so a server
boots once and its GPU lease is held by one process. xdist's own groups come from `xdist_group` marks, as an
`@group` suffix on node ids that pytest 9.2 silently drops (and the mark is unknown where xdist is
not installed). The controller therefore schedules with `ConfigurationScheduling`, which reads
the configuration from the node id's parameters, and honours a user's `@group` suffix where one
arrives.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from xdist.scheduler import LoadGroupScheduling

from .collection import configuration_in_nodeid, matrix_cases
from .session import Results
from .state import DIST_CHOSEN_KEY, STATE_KEY


# execnet's wait before it interrupts a worker whose channel closed, and xdist's teardown
# timeout after which it kills the worker (execnet's gateway_base, xdist's NodeManager).
EXECNET_GRACE_S = 5.0
XDIST_EXIT_TIMEOUT_S = 10.0


class XdistHooks:
    def __init__(self, results: Results, config: pytest.Config) -> None:
        self.results = results
        self.config = config
        self._seen = False
        self._nodes: dict[str, object] = {}  # the workers up now, by id: the controller's interrupt goes to them
        self._session: pytest.Session | None = None  # whose failures tell a stop by -x from a Ctrl-C
        self._usage_error: str | None = None  # the first a worker stopped with (`plugin.WorkerStop`)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self._session = session

    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        self.results.unheard_workers.add(node.gateway.id)  # until its list of what it collected comes
        if not self._seen:  # every worker collects the same items
            self._seen = True
            if self._names_a_configuration(ids):
                from .plugin import warn_of_backend

                self._write_header_details(node.config)
                warn_of_backend(node.config, self.results.state)
                from . import hangup
                from .servers import cleanup
                from .state import run_id

                # the controller's SIGTERM or SIGHUP ends the run as Ctrl-C does; after a hangup its
                # output goes to the log its workers' goes to, in the run folder they share
                cleanup.interrupt_on_signals(hangup.of_run(node.config, run_id(node.config)),
                                             passes_on=self._worker_pids)

    def pytest_testnodeready(self, node) -> None:
        self._nodes[node.gateway.id] = node

    def _worker_pids(self) -> list[int]:
        """The pids of the workers this controller started on this host (execnet's popen gateways),
        still running; a remote worker (ssh, socket) is xdist's own to end."""
        pids = []
        for node in list(self._nodes.values()):
            gateway = node.gateway
            spec = getattr(gateway, "spec", None)
            popen = getattr(getattr(gateway, "_io", None), "popen", None)
            if getattr(spec, "popen", False) and not getattr(spec, "via", None) and popen is not None \
                    and popen.poll() is None:
                pids.append(popen.pid)
        return pids

    def _names_a_configuration(self, ids) -> bool:
        """Whether a worker's collection (node ids) holds a test of a configuration of the matrix."""
        param_ids = [case.param_id for case in matrix_cases(self.results.state)]
        return any(configuration_in_nodeid(nodeid, param_ids) for nodeid in ids)

    def _write_header_details(self, config) -> None:
        """The header's lines that follow collection (hardware, baselines, settings, gate,
        losslessness): pytest asks for them only where it collects, which the controller does
        not. Written once a worker's collection names a configuration of the matrix."""
        from . import header

        state = self.results.state
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        if config.option.verbose < 0 or config.option.no_header:  # as pytest_report_collectionfinish
            for line in header.warnings(state):
                reporter.write_line(line)
            return
        for line in header.details(state):
            reporter.write_line(line)
        if not by_configuration(config):
            reporter.write_line(dist_cost_line(config.getvalue("dist"), state.settings.server_url))

    def pytest_testnodedown(self, node, error) -> None:
        """Keep the tests a worker collected, deselected ones too, for the summary's hints and
        the durations' completeness."""
        from .collection import note_collected, note_configured
        from .plugin import COLLECTED_OUTPUT, CONFIGURED_OUTPUT, USAGE_ERROR_OUTPUT

        self._nodes.pop(node.gateway.id, None)
        output = getattr(node, "workeroutput", {})
        if self._usage_error is None:
            self._usage_error = output.get(USAGE_ERROR_OUTPUT)
        collected = output.get(COLLECTED_OUTPUT)
        if collected is not None:
            self.results.unheard_workers.discard(node.gateway.id)
            note_collected(node.config, collected)
            note_configured(node.config, output.get(CONFIGURED_OUTPUT, ()))

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session):
        """A worker's usage error ends the run as it ends a single process: one line, exit 4,
        not xdist's "Interrupted" that the worker's stop request turns into."""
        try:
            result = yield
        # xdist's Interrupted, after a worker asked it to stop; before xdist 3.6, which hands a worker's
        # stop request on, its RuntimeError "no active workers" once every worker stopped so and left
        except (KeyboardInterrupt, RuntimeError) as exc:
            if self._usage_error is None or (isinstance(exc, RuntimeError) and "no active workers" not in str(exc)):
                raise  # another error of the controller's keeps its traceback
            raise pytest.UsageError(self._usage_error) from None
        if self._usage_error is not None:
            raise pytest.UsageError(self._usage_error)
        return result

    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched) -> None:
        """A worker died in a test: that test fails once, as "worker crashed" (the scheduler
        does not run it again), and the summary table says so in its row."""
        worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "?")
        report.longrepr = f"worker crashed: xdist worker {worker!r} died while running {crashitem}"
        if self._names_a_configuration([crashitem]):
            self.results.outcomes[crashitem] = ("failed", str(report.longrepr))

    def pytest_keyboard_interrupt(self, excinfo) -> None:
        """The controller interrupted (Ctrl-C, SIGTERM, or a signal to it alone): xdist then waits
        for its workers to end their tests, which a worker reached by no signal does only when
        execnet interrupts it: say that wait and its bound instead of keeping silent through it."""
        from .fixtures import _announcer
        from .run_limits import INTERRUPT, stopped_by
        from .servers import cleanup

        # xdist ends a run that -x, --maxfail or --sw stopped as interrupted: named as the summary names it
        stopped = stopped_by(self.config, self._session, pytest.ExitCode.INTERRUPTED)
        why = "interrupted" if stopped in (None, INTERRUPT) else f"stopped by {stopped}"
        _announcer(self.config)(waiting_line(cleanup.passed_on(), len(self._nodes), why))

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log):
        if not by_configuration(config):
            return None
        param_ids = [case.param_id for case in matrix_cases(config.stash[STATE_KEY])]
        return ConfigurationScheduling(config, log, param_ids)


def waiting_line(passed: tuple[str, int] | None, workers: int, why: str = "interrupted") -> str:
    """What an interrupted controller waits for: its `workers` (those up) to end their tests, the
    ones its signal was `passed` on to (its name, how many it reached) doing so at once; execnet's
    interrupt and xdist's kill bound the wait either way. `why` the run ended: "interrupted", or
    "stopped by -x" where no signal came."""
    if passed is None:
        return (f"{why}: waiting for the xdist workers to end their tests and stop their servers "
                f"(bound: execnet interrupts a worker still in its test after {EXECNET_GRACE_S:g}s, and xdist "
                f"kills one still running {XDIST_EXIT_TIMEOUT_S:g}s later; its servers go with it)")
    name, reached = passed
    others = workers - reached
    told = "the xdist workers" if others <= 0 else f"the {reached} xdist worker{'s' * (reached != 1)} on this host"
    does = ("which end their tests and stop their servers" if others <= 0 or reached != 1
            else "which ends its test and stops its servers")
    them = "them" if others <= 0 or reached != 1 else "it"
    rest = "" if others <= 0 else f" and the {others} remote one{'s' * (others != 1)}, which no signal reached"
    return (f"{why}: {name} passed on to {told}, {does} as after Ctrl-C; waiting for {them}{rest} "
            f"(bound: execnet interrupts a worker still running after "
            f"{EXECNET_GRACE_S:g}s, and xdist kills one still running {XDIST_EXIT_TIMEOUT_S:g}s later; its "
            f"servers go with it)")


def dist_cost_line(dist: str, server_url: str | None) -> str:
    """The header's line for a `--dist` mode the user chose that may split a configuration's
    tests: launched, each worker boots its server; attached, the workers take turns on the one
    server (attach_lease.py), as two at once would each read the other's load as shared."""
    cost = (f"which take turns on the attached server {server_url}, one test at a time (two at once would each "
            f"measure the other's load, and fail as shared), so no faster than one worker; --dist loadgroup "
            f"(or -n alone) gives them to one worker" if server_url else
            "each booting its server; --dist loadgroup (or -n alone) boots each once")
    return f"specdec: --dist {dist} may give one configuration's tests to several workers, {cost}"


def by_configuration(config: pytest.Config) -> bool:
    """Whether workers are given whole configurations: under `--dist loadgroup`, and under the
    "load" that a bare `-n` implies (which would boot a configuration's server on every worker
    that runs one of its tests); another mode the user chose is theirs."""
    dist = config.getvalue("dist")
    return dist == "loadgroup" or dist == "load" and not config.stash.get(DIST_CHOSEN_KEY, True)


class ConfigurationScheduling(LoadGroupScheduling):
    """`--dist loadgroup` with one work unit per matrix configuration.

    Also: an xdist worker runs a test only once it knows the next one, or that none will come.
    A worker that joins late (the replacement for a crashed one) was given one unit; with a
    one-test unit it then waited forever. So a worker is topped up to two pending tests, and told
    to finish as soon as the queue is empty.
    """

    def __init__(self, config: pytest.Config, log, param_ids: Iterable[str]) -> None:
        super().__init__(config, log)
        self.param_ids = tuple(param_ids)

    def _split_scope(self, nodeid: str) -> str:
        if nodeid.rfind("@") > nodeid.rfind("]"):
            return super()._split_scope(nodeid)
        return configuration_in_nodeid(nodeid, self.param_ids) or nodeid

    def remove_node(self, node) -> str | None:
        """xdist's, except that the test a crashed worker was running is not queued again: it
        is reported failed once ("worker crashed"), not FAILED and then PASSED under one id.
        The rest of its configuration's tests go to the other workers (or a replacement)."""
        workload = self.assigned_work.pop(node)
        if not self._pending_of(workload):
            return None
        crashitem = next(nodeid for unit in workload.values()
                         for nodeid, completed in unit.items() if not completed)
        for scope, unit in workload.items():
            if crashitem in unit:
                unit[crashitem] = True
            if not all(unit.values()):
                self.workqueue[scope] = unit
        for other in self.assigned_work:
            self._reschedule(other)
        return crashitem

    def _reschedule(self, node) -> None:
        super()._reschedule(node)
        while (self.workqueue and not node.shutting_down
               and self._pending_of(self.assigned_work[node]) < 2):
            self._assign_work_unit(node)
        if not self.workqueue and not node.shutting_down:
            node.shutdown()
