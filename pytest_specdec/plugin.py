"""pytest hooks of pytest-specdec, and nothing else: each hook hands off to the module owning it.

Loaded for every pytest run through the `pytest11` entry point, so it imports neither torch nor
triton, and a project without `[tool.specdec]` pays only for reading its pyproject.toml.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import collection, fixtures, header, recording, session, summary
from . import state as state_mod
from .errors import SpecdecUsageError
from .options import OPTIONS
from .servers import cleanup
from .state import STATE_KEY

GATE_KEY = pytest.StashKey[session.Gate]()
RESULTS_KEY = pytest.StashKey[session.Results]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("specdec", "speculative-decoding benchmarks (pytest-specdec)")
    for option in OPTIONS:
        text = option.help.replace("%", "%%") + f" (ini: {option.ini})"  # argparse %-formats help
        if option.flag:
            group.addoption(option.cli, action="store_true", default=None, dest=option.ini,
                            help=text)
        else:
            group.addoption(option.cli, action="store", default=None, dest=option.ini,
                            metavar=option.metavar, help=text)
        parser.addini(option.ini, option.help, default="")


def pytest_configure(config: pytest.Config) -> None:
    for line in collection.MARKERS:
        config.addinivalue_line("markers", line)
    cli = {o.name: config.getoption(o.ini) for o in OPTIONS}
    ini = {o.name: str(config.getini(o.ini)) for o in OPTIONS}
    root = Path(config.inipath).parent if config.inipath else Path(config.rootpath)
    try:
        state = state_mod.build(root, cli, ini)
        gate = session.Gate(state)
        gate.check()  # a bad baseline file or expression stops the run here, before any boot
    except SpecdecUsageError as exc:
        raise pytest.UsageError(f"pytest-specdec: {exc}") from None
    config.stash[STATE_KEY] = state
    config.stash[GATE_KEY] = gate
    config.stash[RESULTS_KEY] = session.Results(state)
    if not session.is_worker(config):
        config.pluginmanager.register(Controller(config), "specdec-controller")
        if config.pluginmanager.hasplugin("xdist"):
            from .xdist_hooks import XdistHooks

            config.pluginmanager.register(XdistHooks(config.stash[RESULTS_KEY]), "specdec-xdist")
    config.pluginmanager.register(fixtures, "specdec-fixtures")


def pytest_unconfigure(config: pytest.Config) -> None:
    cleanup.kill_all()  # last resort: anything a failed teardown left behind


def pytest_report_header(config: pytest.Config) -> list[str]:
    return header.lines(config.stash[STATE_KEY])


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    collection.parametrize(metafunc, metafunc.config.stash[STATE_KEY])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = config.stash[STATE_KEY]
    collection.modify_items(items, state)
    session.skip_done(items, state)
    for item in items:
        recording.mark_for_benchmark(item)


def pytest_collection_finish(session: pytest.Session) -> None:
    session.config.stash[RESULTS_KEY].total = len(session.items)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    fixtures.retire_finished_server(item, nextitem)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    finish = (item, item.config.stash[STATE_KEY], item.config.stash[GATE_KEY],
              state_mod.run_id(item.config))
    try:
        result = yield
    except pytest.skip.Exception:
        raise
    except BaseException:  # pytest.fail() and KeyboardInterrupt are BaseExceptions
        session.finish_test(*finish, passed=False)  # what it recorded is journaled, as failed
        raise
    session.finish_test(*finish)
    return result


class Controller:
    """Hooks of the process that gathers results: the only one, or the xdist controller."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.results = config.stash[RESULTS_KEY]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        result = self.results.add_report(report)
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if result is not None and reporter is not None:
            reporter.write_line(session.progress_line(result, len(self.results.results),
                                                      self.results.total))

    @pytest.hookimpl(trylast=True)  # after pytest-benchmark's tables: the run ends with ours
    def pytest_terminal_summary(self, terminalreporter) -> None:
        summary.write(terminalreporter, self.results)
