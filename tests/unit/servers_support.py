"""Helpers shared by the servers tests: which engine to launch, and the no-survivor check."""

from __future__ import annotations

import functools
import importlib.util
import os
import signal
import sys
import time
from pathlib import Path

from pytest_specdec.servers import ManagedServer, ServerSpec, build_embedded_argv
from pytest_specdec.servers.cleanup import alive, group_members
from pytest_specdec.servers.diagnosis import LogWatcher

FAKE_ENTRY = (sys.executable, str(Path(__file__).with_name("fake_engine.py")))
# The real embedded engine once it exists; the stand-in until then. Both take the same fault flags.
REAL_ENGINE = importlib.util.find_spec("pytest_specdec.engine.__main__") is not None
ENGINE_ENTRY = (sys.executable, "-m", "pytest_specdec.engine") if REAL_ENGINE else FAKE_ENTRY
ENGINE_NAME = "embedded engine" if REAL_ENGINE else "fake engine"


def _root_conftest_value(name: str) -> object:
    """A setting of the repository's conftest.py, its one definition. Loaded from its file under a
    name of its own: pytest imports it as `conftest`, a name each later conftest takes over in
    sys.modules."""
    path = Path(__file__).resolve().parents[2] / "conftest.py"
    loaded = importlib.util.spec_from_file_location("specdec_root_conftest", path)
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return getattr(module, name)


NO_HYPOTHESIS = _root_conftest_value("NO_HYPOTHESIS")


def default_sigint() -> None:
    """``preexec_fn`` for a child the test interrupts with SIGINT. A shell without job control
    starts background jobs with SIGINT ignored (CI started with ``&``); once anything in the
    test process puts that inherited disposition back (a plugin restoring the handler it
    replaced), every child it starts ignores SIGINT too and never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def started_environ() -> dict[str, str]:
    """The environment of a pytest run a test starts itself. None of this session's PYTEST_XDIST_*
    (the run would act as an xdist worker), PYTEST_CURRENT_TEST or PYTEST_ADDOPTS (options meant for
    this session), and hypothesis's plugin off, as the conftest does for pytester's runs: it imports
    hypothesis as each process starts and again, whole, for its terminal summary (seconds of every
    run's start and ending, its xdist workers' too); none of these runs uses it."""
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("PYTEST_XDIST_", "PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST"))}
    environ["PYTEST_ADDOPTS"] = NO_HYPOTHESIS
    return environ


def spec(method="ar", budget=None, *extra, tp=1) -> ServerSpec:
    return ServerSpec(backend="embedded", method=method, tp=tp, budget=budget, extra_args=extra)


def server(s: ServerSpec, log_dir: Path, *, entry=ENGINE_ENTRY, gpus=(), **kwargs) -> ManagedServer:
    kwargs.setdefault("startup_timeout", 60.0)
    kwargs.setdefault("term_grace", 3.0)
    return ManagedServer(
        s,
        lambda port: build_embedded_argv(s, port, entry=list(entry)),
        log_dir=log_dir,
        gpus=gpus,
        **kwargs,
    )


def wait_gone(pids, timeout: float = 10.0) -> list[int]:
    """pids (and process groups) still alive after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in pids if alive(p) or group_members(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def children_of(pid: int) -> list[int]:
    from pytest_specdec.servers.cleanup import descendants

    return descendants(pid)


def ready_first(wait_ready, within: float = 60.0):
    """`ManagedServer.wait_ready` whose boot deadline starts once the server's log says it is
    ready, where `--fault-hang`'s hang begins: a startup timeout of seconds then tells that hang
    from a slow boot however long the model build takes on a loaded machine, instead of a deadline
    long enough to cover the build. For the class (a pytester project's conftest) or, through
    `deadline_from_ready`, one server."""

    def after_ready(s: ManagedServer) -> None:
        watcher, until = LogWatcher(s.log_path), time.monotonic() + within
        while not watcher.scan().ready and s.is_running() and time.monotonic() < until:
            time.sleep(0.05)
        wait_ready(s)

    return after_ready


def deadline_from_ready(s: ManagedServer) -> None:
    """`ready_first` for the server `s` alone (start() calls wait_ready after each launch)."""
    s.wait_ready = functools.partial(ready_first(ManagedServer.wait_ready), s)
