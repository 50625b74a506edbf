"""pytest hooks of pytest-specdec, and nothing else: each hook hands off to the module owning it.

Loaded for every pytest run through the `pytest11` entry point, so it imports neither torch nor
triton, and a project without `[tool.specdec]` pays only for reading its pyproject.toml.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import collection, fixtures, header, state as state_mod
from .errors import SpecdecUsageError
from .options import OPTIONS
from .state import STATE_KEY

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
        config.stash[STATE_KEY] = state_mod.build(root, cli, ini)
    except SpecdecUsageError as exc:
        raise pytest.UsageError(f"pytest-specdec: {exc}") from None
    config.pluginmanager.register(fixtures, "specdec-fixtures")


def pytest_report_header(config: pytest.Config) -> list[str]:
    return header.lines(config.stash[STATE_KEY])


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    collection.parametrize(metafunc, metafunc.config.stash[STATE_KEY])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    collection.modify_items(items, config.stash[STATE_KEY])
