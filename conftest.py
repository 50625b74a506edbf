"""Settings for this repository's own tests (not shipped with the plugin)."""

from __future__ import annotations

import importlib.machinery
import os
import shutil
import sys
import tempfile
import types
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

# numpy refuses a second import in one process, and pytester's in-process runs drop from sys.modules
# what they first imported: imported here, it is in every run's snapshot and never dropped.
try:
    import numpy  # noqa: F401
except ImportError:  # the torch-free checks (lowest/newest) may lack it
    pass


@pytest.fixture(autouse=True)
def _started_runs_are_not_xdist_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under `make test` (pytest-xdist) a test's PYTEST_XDIST_* variables would reach the pytest runs
    it starts, which would then act as workers (pytest-benchmark, for one, saves nothing there)."""
    for name in [name for name in os.environ if name.startswith("PYTEST_XDIST_")]:
        monkeypatch.delenv(name)


# The option that keeps hypothesis's plugin out of the pytest runs tests start (pytester's here,
# subprocess ones through tests/unit/servers_support.py's started_environ, which reads it from here).
NO_HYPOTHESIS = "-p no:hypothesispytest"


@pytest.fixture(autouse=True)
def _started_runs_load_no_hypothesis(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """hypothesis's pytest plugin imports all of hypothesis, ~0.75 s of every pytest run a test
    starts (in-process runs import it again each time: pytester restores sys.modules after each);
    none of those runs uses it."""
    if "pytester" in request.fixturenames:
        request.getfixturevalue("pytester")  # its set-up discards PYTEST_ADDOPTS: ours goes after it
    addopts = os.environ.get("PYTEST_ADDOPTS", "")
    monkeypatch.setenv("PYTEST_ADDOPTS", f"{NO_HYPOTHESIS} {addopts}".strip())

# SGLang itself, installed by scripts/setup-venv.sh into a directory of its own: its pinned
# dependencies conflict with this venv's, so only the tests that read or run it put it on sys.path.
SGLANG_REFERENCE = Path(os.environ.get("SPECDEC_SGLANG_REFERENCE", Path(sys.prefix) / "sglang-reference"))


@pytest.fixture(scope="session")
def sglang_reference() -> Path:
    """SGLang's reference copy on sys.path (after the venv's own packages) for this session;
    where it is missing, skips saying how to install it (fails under CI, which installs it)."""
    if not (SGLANG_REFERENCE / "sglang").is_dir():
        missing = (f"SGLang's reference copy is not installed in {SGLANG_REFERENCE}: run scripts/setup-venv.sh "
                   f"(or point SPECDEC_SGLANG_REFERENCE at a `pip install --target` of sglang==0.5.23)")
        if os.environ.get("CI"):  # CI installs it: its absence there is a broken setup, not a skip
            pytest.fail(missing)
        pytest.skip(missing)
    entry = str(SGLANG_REFERENCE)
    added = entry not in sys.path
    if added:
        sys.path.append(entry)
    yield SGLANG_REFERENCE
    if added:
        sys.path.remove(entry)


def shared_setup_files(items: list[pytest.Item]) -> set[str]:
    """The test files (as their node ids name them) holding a test that uses a module-scoped
    fixture (a run of the engine, a project measured, the compile check): each goes to one xdist
    worker, which sets it up once; split over two workers each paid for it (38 s of shard runs,
    100 s of compiles twice in CI). Read from each test's fixture closure as pytest resolved it, so
    a fixture from a conftest or an imported module counts, and a mention in a comment does not."""
    return {item.nodeid.split("::", 1)[0] for item in items if _uses_module_fixture(item)}


def _uses_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)  # pytest offers no public name-to-definitions map
    if info is None:  # an item of another plugin's kind: scheduled as xdist would
        return False
    for name in info.names_closure:
        for fixturedef in reversed(info.name2fixturedefs.get(name, ())):  # the closest definition first
            if fixturedef.scope == "module":
                return True
            if name not in fixturedef.argnames:  # it overrides the farther ones without requesting them
                break
    return False


# The workerinput key naming the file where a worker writes the files of shared_setup_files: xdist's
# controller collects nothing, so only a worker's items tell.
SHARED_SETUP_INPUT = "shared_setup_files"
_SHARED_SETUP_DIR = pytest.StashKey[Path]()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """Gives each xdist worker a file of its own to write its shared-setup files to."""
    config = node.config
    if _SHARED_SETUP_DIR not in config.stash:
        config.stash[_SHARED_SETUP_DIR] = Path(tempfile.mkdtemp(prefix="shared-setup-"))
    node.workerinput[SHARED_SETUP_INPUT] = str(config.stash[_SHARED_SETUP_DIR] / f"{node.gateway.id}.txt")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """A worker writes its shared-setup files before xdist tells the controller its collection
    (xdist's own hook, which runs after this one), so they are there when the controller schedules."""
    target = getattr(session.config, "workerinput", {}).get(SHARED_SETUP_INPUT)
    if target is not None:
        Path(target).write_text("".join(f"{path}\n" for path in sorted(shared_setup_files(session.items))))


def pytest_unconfigure(config: pytest.Config) -> None:
    """The controller's folder of the workers' shared-setup files goes with its run."""
    folder = config.stash.get(_SHARED_SETUP_DIR, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.hookimpl(wrapper=True, optionalhook=True)  # a run without xdist (-p no:xdist) has no such hook
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """The scheduler the plugin or xdist chose, with each file of shared_setup_files one unit."""
    scheduler = yield
    split = getattr(scheduler, "_split_scope", None)
    if split is None:  # xdist's own "load" (no units) where the plugin chose none: left as it is
        return scheduler
    known: list[frozenset[str]] = []

    def shared_files() -> frozenset[str]:
        if known:
            return known[0]
        folder = config.stash.get(_SHARED_SETUP_DIR, None)
        files = frozenset(line for written in (folder.glob("*.txt") if folder else ())
                          for line in written.read_text().splitlines())
        if scheduler.collection_is_completed:  # every worker has written its files by then
            known.append(files)
        return files

    def split_scope(nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        return path if path in shared_files() else split(nodeid)

    scheduler._split_scope = split_scope
    return scheduler


# The packages of this repository: their submodules are imported lazily, inside functions.
OWN_PACKAGES = ("pytest_specdec", "specdec_kernels")


def rejoin_dropped_submodules(packages: tuple[str, ...] = OWN_PACKAGES) -> list[str]:
    """Puts back in sys.modules each submodule of `packages` that is still its package's attribute
    but no longer in sys.modules, and makes a package's attribute the module sys.modules holds
    where the two differ; returns the names put back.

    pytester restores the sys.modules of a test's start at its end, dropping what the test first
    imported, while the import system had set those modules on their packages: a later
    `from pytest_specdec import plot_pool` took that stale module off the package and patched it,
    and the code under test's `from .plot_pool import ...` imported a fresh one, unpatched.
    Keeping the stale module (rather than dropping the attribute) keeps one copy of its classes."""
    rejoined = []
    pending = [sys.modules[name] for name in packages if name in sys.modules]
    while pending:
        package = pending.pop()
        if not hasattr(package, "__path__"):  # a plain module: its module attributes are imports
            continue
        for attr, module in list(vars(package).items()):
            name = f"{package.__name__}.{attr}"
            if not isinstance(module, types.ModuleType) or module.__name__ != name:
                continue  # not a submodule (`import os` in the package, say)
            held = sys.modules.get(name)
            if held is None:
                sys.modules[name] = module
                rejoined.append(name)
            elif held is not module and isinstance(held, types.ModuleType):
                setattr(package, attr, held)  # the one `from .x import` reads wins
                module = held
            pending.append(module)
    return rejoined


def compiled_packages() -> dict[str, types.ModuleType]:
    """Every module in sys.modules of each top-level package that has a compiled (extension) module
    loaded: torch, numpy, yaml, tokenizers and the like."""
    modules = list(sys.modules.items())
    tops = {name.partition(".")[0] for name, module in modules
            if isinstance(getattr(module, "__loader__", None), importlib.machinery.ExtensionFileLoader)}
    return {name: module for name, module in modules if name.partition(".")[0] in tops}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    """After every fixture's teardown (pytester's restore of sys.modules included, whatever the
    fixtures' order or however pytester was requested), the package attributes and sys.modules of
    this repository's packages agree again: see rejoin_dropped_submodules. And a compiled package
    that a test beside pytester imported (pytest.importorskip("torch")) stays imported: that
    restore dropped it, and the next test's `import torch` initialised its core a second time in
    one process, a SystemError and then a segmentation fault that ended the whole run."""
    kept = compiled_packages() if "pytester" in getattr(item, "fixturenames", ()) else {}
    try:
        return (yield)
    finally:
        for name, module in kept.items():
            sys.modules.setdefault(name, module)
        rejoin_dropped_submodules()
