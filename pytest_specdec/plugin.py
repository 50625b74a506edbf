"""pytest hooks of pytest-specdec, and nothing else: each hook hands off to the module owning it.

Loaded through the `pytest11` entry point by every pytest run in the environment, also in projects
that never use it, so loading it costs next to nothing: this module imports only the option
table, each hook imports what it needs when it runs, and the heavy parts (the HTTP client, the
server manager, the report) load only once a collected test asks for a specdec fixture.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from pluggy import HookimplMarker

from .options import OPTIONS

if TYPE_CHECKING:
    import pytest

    from .ending_writes import EndingWrites

#: `pytest.hookimpl` itself (pytest defines it so), without importing pytest into this module.
hookimpl = HookimplMarker("pytest")


def pytest_addoption(parser: pytest.Parser) -> None:
    # each option's other two places, and which wins, for one who set it in pyproject.toml and reads this
    group = parser.getgroup("specdec", "speculative-decoding benchmarks (pytest-specdec; a flag wins over its "
                                       "ini twin, which wins over its [tool.specdec] key)")
    for option in OPTIONS:
        text = option.described.replace("%", "%%")  # argparse %-formats help
        text += f" (ini: {option.ini}; [tool.specdec] {option.name})"
        if option.flag:
            group.addoption(option.cli, action="store_true", default=None, dest=option.ini,
                            help=text)
        else:
            group.addoption(option.cli, action="store", default=None, dest=option.ini,
                            metavar=option.metavar, help=text)
        parser.addini(option.ini, option.described, type=option.ini_type, default=None)


@hookimpl(wrapper=True)
def pytest_cmdline_main(config: pytest.Config):
    # before xdist turns -n's distribution "no" into "load": whether the user chose a mode
    from .state import DIST_CHOSEN_KEY

    option = config.option
    config.stash[DIST_CHOSEN_KEY] = getattr(option, "dist", "no") != "no" or getattr(option, "distload", False)
    return (yield)


@hookimpl(wrapper=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]):
    result = yield  # after the initial conftests, whose options are then known too
    from .flag_typos import check
    from .state import PARSER_KEY

    check(parser, args)
    early_config.stash[PARSER_KEY] = parser  # the configure hook's repeated-flags check reads `-o` with it
    return result


def pytest_configure(config: pytest.Config) -> None:
    from pathlib import Path

    import pytest

    from . import collection, fixtures
    from . import state as state_mod
    from .errors import SpecdecUsageError
    from .options import ini_bool_text, ini_file_under_overrides, ini_text, ini_value, read_ini

    for line in collection.MARKERS:
        config.addinivalue_line("markers", line)
    if config.option.help or getattr(config.option, "markers", False):
        return  # pytest only lists: a settings mistake must not hide the help that explains them
    cli = {o.name: config.getoption(o.ini) for o in OPTIONS}
    root = Path(config.inipath).parent if config.inipath else Path(config.rootpath)
    try:
        if not hasattr(config, "workerinput"):  # a worker's rootdir is the controller's, checked there
            from . import early_args, flag_typos, repeated_flags

            flag_typos.check_ini(config)  # pytest only warns, after the run measured with the default
            invoked = config.invocation_params
            # argparse keeps the last value silently
            repeated_flags.check(invoked.args, invoked.dir, config.stash.get(state_mod.PARSER_KEY, None))

            early_args.check(config)  # before anything reads the configuration it may have missed
            from . import config_root

            config_root.check(config, root)  # a project's own [tool.specdec] that pytest's rootdir passes over
        under_override = ini_file_under_overrides(config)
        ini = read_ini(lambda key: ini_value(config, key), lambda key: ini_text(config, key),
                       lambda key: ini_bool_text(config, key), by_override=under_override)
        state = state_mod.build(root, cli, ini, listing=_lists(config), ini_under_override=under_override)
        # a listing (--co, --setup-plan, --setup-only) writes neither: a read-only checkout may list
        if (state.settings.save_baseline or state.settings.report) and not _runs_no_test(config):
            from . import outputs

            outputs.check(state)  # a path that cannot be written stops the run here, not at its end
        if state.tolerances.any or state.baseline_path.is_file():
            # a bad baseline file stops the run here, before any boot; a gate from any layer
            # ([tool.specdec.tolerances] too) needs it readable
            _gate(config, state).check()
        if state.settings.shard is not None:
            from . import shard

            config.stash[state_mod.SHARD_KEY] = shard.plan(state)
    except SpecdecUsageError as exc:
        if hasattr(config, "workerinput"):  # raised here, it crashes the worker: the controller says it
            _stop_worker(config, f"pytest-specdec: {exc}")
            return
        raise pytest.UsageError(f"pytest-specdec: {exc}") from None
    collection.check_tp_filter(state)  # here, not at collection: xdist workers collect
    config.stash[state_mod.STATE_KEY] = state
    if not hasattr(config, "workerinput"):  # the only process, or the xdist controller
        import pytest
        from .config import unlisted_arch_warnings

        for warning in unlisted_arch_warnings(state.config.known_issues, state.hardware.arch):
            config.issue_config_time_warning(pytest.PytestConfigWarning(f"pytest-specdec: {warning}"), stacklevel=2)
        config.pluginmanager.register(Controller(config), "specdec-controller")
        if config.getoption("dist", "no") != "no":  # tests run in xdist workers
            from .state import run_id
            from .xdist_hooks import XdistHooks

            run_id(config)  # before xdist starts its workers, which then share it
            config.pluginmanager.register(XdistHooks(_results(config), config), "specdec-xdist")
    else:
        config.pluginmanager.register(Worker(), "specdec-worker")
    config.pluginmanager.register(fixtures, "specdec-fixtures")
    config.pluginmanager.register(LastOrdering(), "specdec-last-ordering")


@hookimpl(trylast=True, specname="pytest_configure")
def pytest_configure_markexpr(config: pytest.Config) -> None:
    """After every plugin and conftest registered its markers, which `-m` may name."""
    if config.option.help or getattr(config.option, "markers", False):
        return  # pytest only lists
    if not hasattr(config, "workerinput"):  # a worker's -m is the controller's, checked there
        from .flag_typos import check_markexpr

        check_markexpr(config)


@hookimpl(wrapper=True, tryfirst=True)  # around every plugin's, xdist's wait for its workers and the summary too
def pytest_sessionfinish(session: pytest.Session, exitstatus: int):
    from .servers import cleanup

    guarded = cleanup.ending(True)  # a first Ctrl-C lets it finish
    try:
        return (yield)
    except KeyboardInterrupt:
        if not guarded:
            raise
        from .ending_writes import say_stopped

        say_stopped(session)  # a second Ctrl-C: one line, not pytest's traceback of a hook
        return None
    finally:
        cleanup.ending(False)


def pytest_keyboard_interrupt(excinfo: pytest.ExceptionInfo) -> None:
    from .servers import cleanup

    cleanup.tests_interrupted(excinfo.value)  # a Ctrl-C that stopped the tests: the ending's next is the second


def pytest_unconfigure(config: pytest.Config) -> None:
    # Last resort: kill anything a failed teardown left behind. Only a run that started a server
    # imported the registry of server processes; in any other there is nothing to kill.
    cleanup = _imported("pytest_specdec.servers.cleanup")
    if cleanup is not None:
        cleanup.kill_all()
    liveness = _imported("pytest_specdec.liveness")
    if liveness is not None:  # a run in a process that lives on (pytester's) lets go of its files
        liveness.release_all()


def _imported(name: str):
    """The module `name` as the modules that use it got it, or None where none did (nothing
    imported here). `from . import x` binds its package's attribute, which outlives the module's
    sys.modules entry where pytester restores sys.modules after an in-process run."""
    parent, _, child = name.rpartition(".")
    return getattr(sys.modules.get(parent), child, None) or sys.modules.get(name)


def pytest_report_header(config: pytest.Config) -> list[str]:
    from . import header
    from .state import SHARD_KEY, STATE_KEY

    if STATE_KEY not in config.stash:  # an xdist worker stopped at configure time (`WorkerStop`)
        return []
    state, plan = config.stash[STATE_KEY], config.stash.get(SHARD_KEY, None)
    lines = [header.line(state)]
    if plan is not None:
        from .shard import no_folder_line

        lines += [plan.header_line()] + ([] if state.settings.report else [no_folder_line(plan)])
    return lines


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> list[str]:
    from . import header
    from .collection import uses_specdec
    from .state import STATE_KEY

    if not any(map(uses_specdec, items)):
        return []
    if config.option.verbose < 0 or config.option.no_header:  # -q, -qq: pytest's own warnings stay too
        return header.warnings(config.stash[STATE_KEY])
    return header.details(config.stash[STATE_KEY])


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    from . import collection
    from .state import STATE_KEY

    collection.parametrize(metafunc, metafunc.config.stash[STATE_KEY])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import pytest

    from .errors import SpecdecUsageError

    try:  # a marker mistake, a journal --specdec-resume cannot read: the run stops, as at configure time
        _modify_items(config, items)
    except SpecdecUsageError as exc:
        _usage_error(config, f"pytest-specdec: {exc}")
    except pytest.UsageError as exc:  # its message names pytest-specdec already
        _usage_error(config, str(exc))


def _usage_error(config: pytest.Config, message: str) -> None:
    """Stop the run with `message` as a usage error: one line, exit 4; an xdist worker hands it to
    its controller instead (`WorkerStop`), since one raised there crashes the worker."""
    import pytest

    if hasattr(config, "workerinput"):
        _stop_worker(config, message)
        return
    raise pytest.UsageError(message) from None


def _modify_items(config: pytest.Config, items: list[pytest.Item]) -> None:
    from . import collection
    from .state import SHARD_KEY, STATE_KEY

    state = config.stash[STATE_KEY]
    if SHARD_KEY in config.stash:
        from .shard import split_items

        items[:], others = split_items(items, config.stash[SHARD_KEY])
        config.hook.pytest_deselected(items=others)
    collection.modify_items(items, state)
    if not any(map(collection.uses_specdec, items)):
        return
    if not hasattr(config, "workerinput"):  # under xdist the controller warns, once (XdistHooks)
        warn_of_backend(config, state)
    from . import recording, resume

    resume.resume_done(items, state, _gate(config, state))
    collection.skip_other_configurations(items, state)
    for item in items:
        recording.mark_for_benchmark(item)


@hookimpl(tryfirst=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems_stepwise(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Before pytest's --sw (stepwise), which skips the tests before the last failed one in the
    order it sees: in collection order, tests of configurations that run later, and never ran,
    were skipped as passed, and tests that had passed ran again."""
    if not config.pluginmanager.has_plugin("stepwiseplugin"):
        return
    from .collection import order_by_configuration
    from .state import STATE_KEY

    items[:] = order_by_configuration(items, config.stash[STATE_KEY])


@hookimpl(wrapper=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems_benchmarks(config: pytest.Config, items: list[pytest.Item]):
    """Around every plugin's item hook: pytest-benchmark sorts tests by whether they name its
    fixture, which ours request only after measuring, so --benchmark-skip measured them and then
    skipped them, and --benchmark-only skipped them all."""
    if not config.pluginmanager.hasplugin("benchmark") or not any(
            "specdec_record" in getattr(item, "fixturenames", ()) for item in items):
        return (yield)
    from . import recording

    shown = recording.show_benchmark_fixture(items)
    try:
        return (yield)
    finally:
        recording.hide_benchmark_fixture(shown)


@hookimpl(optionalhook=True)  # pytest-benchmark's hook: absent without it
def pytest_benchmark_compare_machine_info(config: pytest.Config, compared_benchmark: dict) -> None:
    from . import benchmark_info

    benchmark_info.note_compared(config, compared_benchmark)


def pytest_deselected(items: list[pytest.Item]) -> None:
    from .collection import configured_ids, note_collected, note_configured, recording_names

    if items:  # a deselected test's entry is its own, not a misspelling (unmatched.py)
        note_collected(items[0].config, recording_names(items))
        note_configured(items[0].config, configured_ids(items))  # its configuration ran in part


def pytest_collection_finish(session: pytest.Session) -> None:
    import pytest

    from .collection import (configured_ids, count_recording, note_collected, note_configured,
                             recording_names, server_cases, shared_baseline_keys, uses_specdec,
                             wants_server)
    from .errors import SpecdecUsageError
    from .state import STATE_KEY

    config = session.config
    if not any(map(uses_specdec, session.items)):
        return
    from . import hangup
    from .servers import cleanup
    from .state import run_id

    # a CI runner's SIGTERM, a dropped ssh session's SIGHUP still leave the summary and report;
    # an xdist controller says where a hangup's output goes, not each of its workers
    cleanup.interrupt_on_signals(hangup.of_run(config, run_id(config)), notice=not hasattr(config, "workerinput"),
                                 worker=hasattr(config, "workerinput"))
    note_collected(config, recording_names(session.items))
    note_configured(config, configured_ids(session.items))
    recording = count_recording(session.items)  # the total of the `[done/total]` progress lines
    shared = shared_baseline_keys(session.items)
    in_worker = hasattr(config, "workerinput")
    if in_worker:
        config.pluginmanager.get_plugin("specdec-worker").recording = recording
    else:
        _results(config).total = recording
    state = config.stash[STATE_KEY]
    try:  # in an xdist worker too: the controller collects nothing, so it cannot check these
        if shared:
            raise SpecdecUsageError(shared)
        # a listing boots no server: it needs no extra, no server to answer, no Hub model
        if any(map(wants_server, session.items)) and not state.listing:
            state.backend.check_ready(state)  # once, not as an error in every test
            state.backend.check_apart(state, server_cases(session.items))
        if any("specdec_pool" in getattr(item, "fixturenames", ()) for item in session.items) \
                and not state.listing:
            from .outputs import check_artifacts

            check_artifacts(state)
        # a run that measures nothing is not refused
        if not _runs_no_test(config) and recording:
            from .session import check_journal_free
            from .state import run_id

            check_journal_free(state, run_id(config))  # before any server boots for nothing
    except SpecdecUsageError as exc:
        if in_worker:
            _stop_worker(config, f"pytest-specdec: {exc}")
            return
        raise pytest.UsageError(f"pytest-specdec: {exc}") from None


@hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    # around the whole protocol, not in its teardown: pytest-rerunfailures runs a failed test's
    # setup, call and teardown again within it, on the server it had
    interrupted = True  # until the protocol returns: Ctrl-C, pytest.exit() propagate through it
    try:
        result = yield
        interrupted = False
        return result
    finally:
        from . import fixtures

        fixtures.retire_finished_server(item, nextitem, interrupted)


@hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    import pytest

    from .collection import uses_specdec

    finish = None  # a test that asks for nothing of ours loads nothing more, unless it records
    if uses_specdec(item):
        finish = _finishing(item)
        if "specdec_record" in getattr(item, "fixturenames", ()):
            from . import session
            from .errors import SpecdecUsageError

            _, state, _, run = finish
            try:  # before measuring: figures that cannot be journaled are not worth the wait, and
                session.claim_journal(state, run)  # a run starting meanwhile finds it taken
            except SpecdecUsageError as exc:  # its text says it all: no chained traceback
                raise pytest.fail.Exception(f"pytest-specdec: {exc}", pytrace=False) from None
    try:
        result = yield
    except pytest.skip.Exception:
        raise
    except BaseException:  # pytest.fail() and KeyboardInterrupt are BaseExceptions
        _finish_test(item, finish, passed=False)  # what it recorded is journaled, as failed
        raise
    _finish_test(item, finish)
    return result


def _finishing(item: pytest.Item) -> tuple:
    """`session.finish_test`'s arguments for `item`."""
    from .state import STATE_KEY, run_id

    state = item.config.stash[STATE_KEY]
    return item, state, _gate(item.config, state), run_id(item.config)


def _finish_test(item: pytest.Item, finish: tuple | None, passed: bool = True) -> None:
    if finish is None:
        recording = _imported("pytest_specdec.recording")  # loaded by the first recorder
        if recording is None or recording.existing_recorder(item) is None:
            return
        finish = _finishing(item)  # it fetched specdec_record with request.getfixturevalue
    from . import session

    session.finish_test(*finish, passed=passed)


@hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    report = yield
    recording = _imported("pytest_specdec.recording")  # loaded by the first recorder
    if recording is not None and recording.records_uncounted(item):
        setattr(report, recording.UNCOUNTED, True)  # xdist sends a report's attributes along
    from .collection import STAND_IN, stands_in

    if stands_in(item):  # its time is no measurement's: the durations file must not count it
        setattr(report, STAND_IN, True)
    if call.when == "teardown" and recording is not None:  # each report holds its own copy of the list
        recording.drop_carriers(item)
    return report


class LastOrdering:
    """Groups the items by configuration, references first, once more after every other plugin's
    item hook.

    pytest's cache plugin reorders for --ff and --nf after the plain hooks, ours included, and
    would split a configuration's tests (its server booting twice). Registered at configure time,
    after that plugin, this wrapper is outside its wrapper and so runs after it.
    """

    @hookimpl(wrapper=True, tryfirst=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]):
        result = yield
        from .collection import order_by_configuration
        from .state import STATE_KEY

        items[:] = order_by_configuration(items, config.stash[STATE_KEY])
        return result


#: The `workeroutput` key under which an xdist worker hands the controller its collected tests.
COLLECTED_OUTPUT = "specdec_collected"
#: The same for the usage error that stopped it (`WorkerStop`), which the controller raises.
USAGE_ERROR_OUTPUT = "specdec_usage_error"
#: The same for the node ids of its collected tests that the durations count (`configured_ids`).
CONFIGURED_OUTPUT = "specdec_configured"


class Worker:
    """Hooks of an xdist worker. It collects and the controller does not, so the number of tests
    that can record, the total of the controller's progress lines, rides on each call report."""

    def __init__(self) -> None:
        self.recording: int | None = None  # set when collection finishes

    @hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call):
        report = yield
        if call.when == "call" and self.recording is not None:
            from .recording import RECORDING_TOTAL

            setattr(report, RECORDING_TOTAL, self.recording)  # xdist sends a report's attributes along
        return report

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from .collection import collected_tests, configured_tests

        # the controller collects nothing: its summary's hints learn the collected tests here
        session.config.workeroutput[COLLECTED_OUTPUT] = sorted(collected_tests(session.config))
        session.config.workeroutput[CONFIGURED_OUTPUT] = sorted(configured_tests(session.config))


class WorkerStop:
    """Hooks of an xdist worker that met a usage error the controller did not (a prompt file it
    cannot read, removed since the controller read it): a `UsageError` raised in a worker crashes
    it ("node down", a traceback, a replacement worker that crashes too). The worker instead runs
    no test, and ends its session as asked to stop, the message in its `workeroutput`; the
    controller (`XdistHooks`) stops the run with it as a usage error, as a single process does."""

    def __init__(self, message: str, configured: bool) -> None:
        self.message = message
        self.configured = configured  # else stopped at configure time: no state to collect with

    @hookimpl(tryfirst=True)
    def pytest_collection(self, session: pytest.Session) -> bool | None:
        if not self.configured:
            session.items = []
            return True
        return None

    @hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        session.shouldstop = self.message  # xdist hands it on: the controller stops the run
        if not self.configured:
            return True  # it collected nothing, so told the controller nothing to schedule on it
        # a worker that collected waits in xdist's loop for its first test or its shutdown: one
        # that left at once closed its channel under a controller still scheduling (INTERNALERROR)
        return None

    @hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool:
        return True  # the run stops: xdist's loop ends after this first test, which runs not


def _stop_worker(config: pytest.Config, message: str) -> None:
    """Stop this xdist worker with a usage error (`WorkerStop`); the first one found is told."""
    from .state import STATE_KEY

    config.workeroutput.setdefault(USAGE_ERROR_OUTPUT, message)
    if not config.pluginmanager.has_plugin("specdec-worker-stop"):
        config.pluginmanager.register(WorkerStop(message, STATE_KEY in config.stash), "specdec-worker-stop")


class Controller:
    """Hooks of the process that gathers results: the only one, or the xdist controller."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.durations = None  # seconds per configuration, from the first report of ours on
        self.shard = None  # the shard folder's recorder, in a sharded run with a report folder
        self.session = None
        self.notes: list[str] = []  # outputs written at session end, one line each
        self.problems: list[str] = []  # outputs that could not be written, one line each
        self.writes: EndingWrites | None = None  # what the ending has still to write, once it starts
        self._file_to_name = False  # a progress line ended pytest's line of letters: name the file anew
        self._told: set[str] = set()  # tests whose outcome pytest has shown (its letter, or -v's word)
        self._held: list[str] = []  # progress lines for after pytest's last `[100%]`, at the loop's end

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        from .state import SHARD_KEY, STATE_KEY

        self.session = session
        # a listing runs no test: the shard folder keeps the manifest of the run that did
        if SHARD_KEY in self.config.stash and not self._lists_only:
            from . import shard_dir

            self.shard = shard_dir.Recorder.of(self.config.stash[STATE_KEY],
                                               self.config.stash[SHARD_KEY])
            if self.shard is not None:
                import pytest

                from .errors import SpecdecUsageError

                try:
                    self.shard.start()
                except SpecdecUsageError as exc:
                    raise pytest.UsageError(f"pytest-specdec: {exc}") from None

    @hookimpl(wrapper=True)  # its records before --junitxml writes the teardown report's properties
    def pytest_runtest_logreport(self, report: pytest.TestReport):
        if report.when == "call" or not report.passed:
            self._told.add(report.nodeid)
        if "specdec" not in report.keywords and not report.user_properties \
                and not self._runs_again(report):
            return (yield)  # not one of ours: pytest's own summary covers it
        from . import recording, session
        from .durations import Durations

        results = _results(self.config)
        if self.durations is None:
            self.durations = Durations.for_matrix(results.state)
        self.durations.add_report(report)
        result = results.add_report(report)
        if report.when == "teardown":  # read by now; JUnit keeps the figures and verdicts
            recording.drop_carriers(report)
            if report.nodeid in results.running_again:  # pytest-rerunfailures: its JUnit test case shows no failure
                recording.drop_figures(report)
        outcome = yield  # the terminal's letter or PASSED line first, so the test's own line is whole
        if report.when != "teardown":  # read by every hook by now (sent on by an xdist worker); kept in the terminal's stats
            recording.drop_carriers(report)
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        # -qq asks for pytest's least: its letters and the summary, whose table holds these figures
        if result is not None and reporter is not None and self.config.get_verbosity() > -2:
            line = session.progress_line(result, len(results.results), results.progress_total(),
                                         results.stood_in.get(report.nodeid))
            if self._letters_end_next():
                self._held.append(line)
            else:
                self._write_progress(reporter, line)
        return outcome

    def _letters_end_next(self) -> bool:
        """Whether pytest's line of letters is whole, its `[100%]` (or -x's percentage) still to
        come at the loop's end: a progress line written now would leave that alone on a line
        beneath it, so it is held until then."""
        session = self.session
        return self.config.get_verbosity() <= 0 and session is not None and bool(
            len(self._told) >= session.testscollected or session.shouldstop or session.shouldfail)

    @hookimpl(wrapper=True, tryfirst=True)  # around the terminal's, which ends the letters with `[100%]`
    def pytest_runtestloop(self, session: pytest.Session):
        try:
            return (yield)
        finally:
            self._write_held(at_end=True)

    def _write_held(self, at_end: bool = False) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        held, self._held = self._held, []
        for index, line in enumerate(held if reporter is not None else ()):
            self._write_progress(reporter, line, open_end=at_end and index == len(held) - 1)

    def _write_progress(self, reporter: pytest.TerminalReporter, line: str, open_end: bool = False) -> None:
        """Below the test's own line. Left open for pytest's next line to end where that line
        starts with a newline of its own (-v's test line, the summary), so no blank line comes
        between; where it starts with the file's name, that name is written when the next test
        starts (`pytest_runtest_logstart`), so none stands alone with nothing after it. The
        `open_end` line, the last at the loop's end, is left open as pytest leaves its `[100%]`.
        Under xdist every line is ended at once: its workers write straight to the terminal."""
        reporter.ensure_newline()
        writer = getattr(reporter, "_tw", None)
        if writer is not None and writer.width_of_current_line:  # letters name no file to end (-q, xdist)
            writer.line()
        # xdist's workers write straight to the terminal as each ends (pytest-benchmark's warning that
        # xdist disables it), one with no tests left while others run: a line left open would take
        # their words, so there each is ended, though a blank line then comes before the summary, and
        # under -v before the next test's name
        xdist = self.config.pluginmanager.has_plugin("dsession")
        if writer is not None and open_end and not xdist:
            writer.write(line)  # ended by the terminal's session end, as its `[100%]` is
        elif writer is not None and self.config.get_verbosity() > 0 and not xdist:
            writer.write(line)
            reporter.currentfspath = -2  # pytest's mark of a line to end before its next
        elif writer is not None and xdist:
            # one write, line and newline: a worker's stderr lands between two (write_line's)
            writer.write(line + "\n", flush=True)
            self._file_to_name = bool(reporter.showfspath) and self.config.get_verbosity() <= 0
        else:
            reporter.write_line(line)
            self._file_to_name = bool(reporter.showfspath) and self.config.get_verbosity() <= 0

    @hookimpl(tryfirst=True)  # before the terminal's, which would end an empty line first
    def pytest_runtest_logstart(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        self._write_held()  # a test run again (pytest-rerunfailures) after the last had begun
        if not self._file_to_name:
            return
        self._file_to_name = False
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        writer = getattr(reporter, "_tw", None)
        if reporter is None or writer is None or writer.width_of_current_line or reporter.currentfspath:
            return
        import os

        path = self.config.rootpath / nodeid.split("::")[0]  # as the terminal names a test's file
        writer.write(os.path.relpath(path, reporter.startpath) + " ")
        reporter.currentfspath = path  # so the terminal writes its letters after it, not the name again

    def _runs_again(self, report: pytest.TestReport) -> bool:
        """Whether this is the setup of a test run again (pytest-rerunfailures) whose earlier
        attempt recorded: its figures are to be dropped, whatever this attempt records."""
        from .state import RESULTS_KEY

        return report.when == "setup" and RESULTS_KEY in self.config.stash \
            and report.nodeid in self.config.stash[RESULTS_KEY].results

    @property
    def _lists_only(self) -> bool:
        """A listing (`_runs_no_test`): it measures nothing, so it writes nothing a run writes
        and has nothing for an end-of-run note to tell."""
        return _runs_no_test(self.config)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        from .state import SHARD_KEY, STATE_KEY

        if self._lists_only:
            from . import summary

            session.exitstatus = summary.empty_shard_status(self.config.stash.get(SHARD_KEY, None), exitstatus)
        elif self._writes_outputs:
            from . import summary
            from .collection import collected_tests, configured_tests

            self.writes = self.ending_writes()

            _results(self.config).collected |= collected_tests(self.config)
            _results(self.config).configured |= configured_tests(self.config)
            lf = self.config.pluginmanager.get_plugin("lfplugin")
            if self.durations is not None and (lf is not None and lf.active and lf.lastfailed
                                               or _results(self.config).unheard_workers):
                self.durations.collection_unknown = True

            from .fixtures import _announcer
            from .run_limits import RunLimits

            session.exitstatus = self._failed_if_problems(summary.finish(
                _results(self.config), self.durations, self.config.stash.get(SHARD_KEY, None),
                self.shard, exitstatus, self.notes, self.problems, _announcer(self.config),
                self._end_line, RunLimits.of(self.config, session, exitstatus), self.writes))
        elif self.config.stash[STATE_KEY].settings.report:  # no report of ours came (Ctrl-C in the first boot)
            from . import summary

            self.notes.append(summary.nothing_reported(self.config.stash[STATE_KEY]))

    @property
    def _writes_outputs(self) -> bool:
        """Whether the ending writes the run's outputs (a report of ours came, or a shard folder)."""
        from .state import SHARD_KEY

        return not self._lists_only and (self.durations is not None or SHARD_KEY in self.config.stash)

    def ending_writes(self) -> EndingWrites:
        """What the ending has still to write: all it asks for until its writes begin, since
        another plugin's ending may come first."""
        from .ending_writes import EndingWrites
        from .state import STATE_KEY

        if self.writes is None:
            if not self._writes_outputs:
                return EndingWrites()
            return EndingWrites.of(self.config.stash[STATE_KEY], self.durations is not None, self.shard is not None)
        return self.writes

    def _end_line(self, line: str) -> None:
        """A line at session end, before the terminal's summary (how far the report's plots are):
        it ends the line before it, and is left open as the loop's last progress line is
        (`_write_progress`), so the terminal's session end ends it with no blank line between."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        writer = getattr(reporter, "_tw", None)
        if writer is None:
            return
        if writer.width_of_current_line:
            writer.line()
        writer.write(f"specdec: {line}", flush=True)

    @hookimpl(wrapper=True)  # after every plugin's summary, also one that raises: ours ends the run
    def pytest_terminal_summary(self, terminalreporter):
        try:
            return (yield)
        finally:  # pytest-benchmark's --benchmark-compare-fail raises in its summary
            self._summary(terminalreporter)

    def _summary(self, terminalreporter) -> None:
        from .state import RESULTS_KEY, STATE_KEY

        if self._lists_only:
            return
        if RESULTS_KEY in self.config.stash:  # else no report of ours came: nothing to sum up
            from . import summary

            summary.write(terminalreporter, self.config.stash[RESULTS_KEY], self.notes, self.problems)
            if self.session is not None:
                self.session.exitstatus = self._failed_if_problems(self.session.exitstatus)
        elif self.config.stash[STATE_KEY].settings.report:
            from . import summary

            terminalreporter.write_line(f"specdec: {summary.nothing_reported(self.config.stash[STATE_KEY])}")

    def _failed_if_problems(self, exitstatus: int) -> int:
        import pytest

        # a baseline or report asked for and not written fails the run (CI must not go green)
        if self.problems and exitstatus == pytest.ExitCode.OK:
            return pytest.ExitCode.TESTS_FAILED
        return exitstatus


def warn_of_backend(config: pytest.Config, state) -> None:
    """The backend's warning, if any, in the summary of the process that reports: called once a
    collection holds specdec tests, where it ran (the only process, or an xdist controller hearing
    from its first worker), as the workers' own warnings would come once per worker."""
    warning = state.backend.warning(state)
    if warning is not None:
        import pytest

        try:
            config.issue_config_time_warning(pytest.PytestConfigWarning(f"pytest-specdec: {warning}"), stacklevel=2)
        except pytest.PytestConfigWarning:  # -W error or filterwarnings made it one: an ending, not a traceback
            pytest.exit(f"pytest-specdec: {warning} (this warning stops the run: -W or filterwarnings make "
                        f"PytestConfigWarning an error)", returncode=pytest.ExitCode.USAGE_ERROR)


def _runs_no_test(config: pytest.Config) -> bool:
    """--co, --setup-plan or --setup-only: no test function is called, so nothing is measured.
    --setup-only does set up fixtures (servers boot, their logs are kept), but the report, shard
    folder and baseline of the run that measured must survive it."""
    return _lists(config) or bool(getattr(config.option, "setuponly", False))


def _lists(config: pytest.Config) -> bool:
    """--co or --setup-plan: unlike --setup-only, which boots servers, no fixture is set up, so
    nothing the tests need to run is checked (`RunState.listing`)."""
    option = config.option
    return bool(option.collectonly or getattr(option, "setupplan", False))


def _gate(config: pytest.Config, state):
    """This process's baseline gate, made on first use (projects that never gate never load it)."""
    from .baseline_gate import Gate
    from .state import GATE_KEY

    if GATE_KEY not in config.stash:
        config.stash[GATE_KEY] = Gate(state)
    return config.stash[GATE_KEY]


def _results(config: pytest.Config):
    """The controller's results, made on first use."""
    from .session import Results
    from .state import RESULTS_KEY, STATE_KEY

    if RESULTS_KEY not in config.stash:
        config.stash[RESULTS_KEY] = Results(config.stash[STATE_KEY])
    return config.stash[RESULTS_KEY]
