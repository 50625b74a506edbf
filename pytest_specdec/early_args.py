"""A flag's value written after a space, which pytest took for a test path when it chose its rootdir.

pytest settles its rootdir and config file from the command line's free arguments before it loads
entry-point plugins. At that moment `--specdec-report /tmp/x/out` is an unknown flag followed by a
free argument: an existing /tmp/x/out counts as a test path, the rootdir moves towards it, and the
project's config file (its `[tool.specdec]` matrix, its ini options) is silently not read. Once
the plugin is loaded the flag takes its value as it should, so nothing else shows the mistake.

The check works pytest's choice out again without those values and speaks only where they made
the difference, so an in-project `--specdec-report out` never trips it.
"""

from __future__ import annotations

import inspect
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from .errors import SpecdecUsageError
from .options import OPTIONS

if TYPE_CHECKING:
    import pytest

#: The plugin's flags that take a value (switches take none, so none can be misread).
VALUE_FLAGS = frozenset(option.cli for option in OPTIONS if not option.flag)


@dataclass(frozen=True)
class Spaced:
    """One flag given with its value as the next argument."""

    flag: str
    value: str


@dataclass(frozen=True)
class Setup:
    """What pytest settles before loading plugins: the rootdir and the config file (None: none)."""

    rootpath: Path
    inipath: Path | None

    def describe(self) -> str:
        return f"rootdir {self.rootpath} and " + (f"config file {self.inipath}" if self.inipath
                                                    else "no config file")


def spaced_values(args: Sequence[str], flags: Iterable[str] = VALUE_FLAGS) -> list[Spaced]:
    """Each of `flags` whose value is the next argument rather than joined by '='."""
    flags = frozenset(flags)
    found = []
    for index, arg in enumerate(args[:-1]):
        if arg == "--":  # everything after it is a free argument
            break
        if arg in flags:
            found.append(Spaced(arg, args[index + 1]))
    return found


def check(config: pytest.Config) -> None:
    """Stop a run whose rootdir or config file a spaced flag value changed, naming the fix."""
    params = config.invocation_params
    # pytest puts PYTEST_ADDOPTS before the command line when it settles the rootdir
    args = shlex.split(os.environ.get("PYTEST_ADDOPTS", "")) + list(params.args)
    # os.path.exists: a value no file can be named (too long, a NUL) is no path, not a crash
    spaced = [s for s in spaced_values(args) if os.path.exists(Path(params.dir) / s.value)]
    if not spaced:
        return
    settle = _settler(config)
    if settle is None:
        return
    free = [str(arg) for arg in (config.option.file_or_dir or [])]
    # in command-line order: pytest looks for a config file above the first path first
    early = sorted(free + [s.value for s in spaced], key=lambda arg: args.index(arg) if arg in args else -1)
    actual = Setup(Path(config.rootpath), Path(config.inipath) if config.inipath else None)
    without, with_values = settle(free), settle(early)
    # only where the values made the difference, and pytest went by them (a pytest that loads
    # plugins first never misreads them)
    if without is None or with_values is None or with_values == without or actual != with_values:
        return
    given = ", ".join(f"{s.flag} {s.value}" for s in spaced)
    fixed = " ".join(f"{s.flag}={s.value}" for s in spaced)
    raise SpecdecUsageError(
        f"{given}: pytest chooses its rootdir and config file before it knows this plugin's options, "
        f"so it took {'this value' if len(spaced) == 1 else 'these values'} for test paths and settled "
        f"on {actual.describe()} instead of {without.describe()}: the project's configuration was not "
        f"read. Join each value to its flag with '=': {fixed}")


def setup_finder(given: dict[str, Any]) -> Callable[[list[str]], tuple] | None:
    """pytest's own `determine_setup`, given those of `given`'s keywords it takes, as a function of a
    run's free arguments; None where this pytest has none of the form it had in 8.4 to 9."""
    try:
        from _pytest.config.findpaths import determine_setup

        accepted = inspect.signature(determine_setup).parameters
    except (ImportError, TypeError, ValueError):
        return None
    required = {name for name, param in accepted.items() if param.default is inspect.Parameter.empty}
    if "args" not in accepted or not required <= set(given) | {"args"}:
        return None
    kwargs = {name: value for name, value in given.items() if name in accepted}
    return lambda free: determine_setup(args=free, **kwargs)


def _settler(config: pytest.Config) -> Callable[[list[str]], Setup | None] | None:
    """pytest's own rootdir and config-file choice for given free arguments; None where this pytest
    has no such function (the check then stays silent rather than guess)."""
    option = config.option
    find = setup_finder({"inifile": getattr(option, "inifilename", None),
                         "override_ini": getattr(option, "override_ini", None),
                         "rootdir_cmd_arg": getattr(option, "rootdir", None) or None,
                         "invocation_dir": Path(config.invocation_params.dir)})
    if find is None:
        return None

    def settle(free: list[str]) -> Setup | None:
        try:
            rootpath, inipath, *_ = find(free)
        except Exception:  # pytest's own UsageError: it settled once, its message stands
            return None
        return Setup(Path(rootpath), Path(inipath) if inipath else None)

    return settle
