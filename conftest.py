"""Settings for this repository's own tests (not shipped with the plugin)."""

from __future__ import annotations

import functools
import os
import sys
import types
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _started_runs_are_not_xdist_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under `make test` (pytest-xdist) a test's PYTEST_XDIST_* variables would reach the pytest runs
    it starts, which would then act as workers (pytest-benchmark, for one, saves nothing there)."""
    for name in [name for name in os.environ if name.startswith("PYTEST_XDIST_")]:
        monkeypatch.delenv(name)


@pytest.fixture(autouse=True)
def _started_runs_load_no_hypothesis(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """hypothesis's pytest plugin imports all of hypothesis, ~0.75 s of every pytest run a test
    starts (in-process runs import it again each time: pytester restores sys.modules after each);
    none of those runs uses it."""
    if "pytester" in request.fixturenames:
        request.getfixturevalue("pytester")  # its set-up discards PYTEST_ADDOPTS: ours goes after it
    addopts = os.environ.get("PYTEST_ADDOPTS", "")
    monkeypatch.setenv("PYTEST_ADDOPTS", f"-p no:hypothesispytest {addopts}".strip())

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


def shared_setup_scope(nodeid: str, root: Path) -> str | None:
    """The test file of `nodeid` where that file defines a module-scoped fixture (a run of the
    engine, a project measured, the compile check): its tests then go to one xdist worker, which
    sets it up once; split over two workers each paid for it (38 s of shard runs, 100 s of compiles
    twice in CI). None for other tests, which xdist hands out one by one."""
    path = nodeid.split("::", 1)[0]
    return path if _defines_module_fixture(root / path) else None


@functools.lru_cache(maxsize=None)
def _defines_module_fixture(path: Path) -> bool:
    try:
        return 'scope="module"' in path.read_text()
    except (OSError, UnicodeDecodeError):  # not a file (a doctest's id, say): scheduled as before
        return False


@pytest.hookimpl(wrapper=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """The scheduler the plugin or xdist chose, with each file of module-scoped fixtures one unit."""
    scheduler = yield
    split = getattr(scheduler, "_split_scope", None)
    if split is None:  # xdist's own "load" (no units) where the plugin chose none: left as it is
        return scheduler
    scheduler._split_scope = lambda nodeid: shared_setup_scope(nodeid, config.rootpath) or split(nodeid)
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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    """After every fixture's teardown (pytester's restore of sys.modules included, whatever the
    fixtures' order or however pytester was requested), the package attributes and sys.modules of
    this repository's packages agree again: see rejoin_dropped_submodules."""
    try:
        return (yield)
    finally:
        rejoin_dropped_submodules()
