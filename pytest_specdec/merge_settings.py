"""A run option's project value for `python -m pytest_specdec merge` (its --summary-rows).

A run takes --specdec-summary-rows from the project's ini key or `[tool.specdec]` table when the
flag is not given; the merge took only its own flag, so a project's setting held for its runs and
not for their merge. The merge runs in the project (its default --baseline-dir says so), and finds
the project's settings as a pytest run started in the same folder does: pytest's config file (its
own search, `determine_setup`), then the settings file beside it. Only the option's own keys are
read: a mistake elsewhere in the project's settings is the runs' to report, not the merge's.

Two cases a run stops on are kept apart by what the merge needs. A settings file that cannot be
read at all (broken TOML, a specdec.toml that is a folder) stops it only where the flag is not
given: its value is then unknowable, and folding at 50 instead would be the bug this module ends;
given, nothing in the file is needed. A settings file that pytest passes over (config_root.py: a
`[tool.specdec]` below a pytest.ini) stops it where that file sets the option and the flag is not
given: the merge cannot tell which of the two the user meant, and has no `-c` to choose with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from .errors import SpecdecUsageError
from .options import OPTIONS_BY_NAME, resolve, written_at


def project_value(name: str, given: Any, folder: Path) -> Any:
    """Option `name`'s value: `given` (the merge's flag, None where not given), else the project's ini
    key, then its `[tool.specdec]` key, else the default. Each place that sets it is checked, as a run
    checks it (options.resolve), with a run's error, the ini's naming its file too."""
    from . import config

    option = OPTIONS_BY_NAME[name]
    try:
        rootpath, inipath, inicfg = _pytest_setup(folder)
        table, source = config.load_options(inipath.parent if inipath else rootpath)
    except SpecdecUsageError as exc:  # a file that cannot be read: needed only without the flag
        if given is not None:
            return getattr(resolve({name: given}, {}, {}, "defaults"), name)
        raise SpecdecUsageError(f"{exc} (or pass --{option.name.replace('_', '-')} to the merge, which then "
                                f"reads no project setting)") from None
    if given is None:
        _check_passed_over(name, folder, inipath, rootpath)
    entry = inicfg.get(option.ini)
    written = getattr(entry, "value", entry)  # pytest 9 wraps each value; pytest 8 keeps it as written
    ini = {} if written is None else {name: written.strip() if isinstance(written, str) else written}
    toml = {name: table[name]} if name in table else {}
    try:
        return getattr(resolve({} if given is None else {name: given}, ini, toml, source), name)
    except SpecdecUsageError as exc:
        if inipath is None or not str(exc).startswith(f"{written_at(name, 'ini')}:"):
            raise
        from .relpaths import relative_path

        raise SpecdecUsageError(f"{relative_path(inipath, folder)}: {exc}") from None


def _check_passed_over(name: str, folder: Path, inipath: Path | None, rootpath: Path) -> None:
    """Stop where a settings file pytest passes over (config_root.py) sets option `name`: a run
    started here stops on it too, and which of the two the user meant cannot be known."""
    from . import config, config_root

    root = inipath.parent if inipath else rootpath
    try:
        found = config_root.passed_over([folder], root)
        sets = found is not None and name in config.load_options(found.parent)[0]
    except SpecdecUsageError:  # that file unreadable: the runs' to report, as config_root's check leaves it
        return
    if sets:
        chosen = f"the config file {inipath}" if inipath else f"the rootdir {rootpath}"
        flag = f"--{name.replace('_', '-')}"
        raise SpecdecUsageError(
            f"{found} sets {name} but is not read: pytest chose {chosen} above it, so a run started here "
            f"stops on it; pass {flag} to the merge, or give {found.parent} a pytest config file (a "
            f"pytest.ini, or a [tool.pytest.ini_options] table in its pyproject.toml) as a run's error says")


def _pytest_setup(folder: Path) -> tuple[Path, Path | None, Mapping[str, Any]]:
    """pytest's rootdir, config file and its values for a run started in `folder` with no arguments;
    `folder` and no config file where this pytest has no `determine_setup` of the form it had in
    8.4 to 9 (the settings file in `folder` is still read)."""
    import pytest

    from .early_args import setup_finder

    find = setup_finder({"inifile": None, "override_ini": None, "rootdir_cmd_arg": None, "invocation_dir": folder})
    if find is None:
        return folder, None, {}
    try:
        rootpath, inipath, inicfg, *_ = find([])
    except pytest.UsageError as exc:  # a config file pytest cannot read: its run stops on it too
        raise SpecdecUsageError(str(exc)) from None
    return Path(rootpath), Path(inipath) if inipath else None, inicfg
