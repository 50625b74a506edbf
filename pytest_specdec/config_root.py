"""A project's own `[tool.specdec]` or specdec.toml that the run would pass over.

The plugin reads its settings beside pytest's config file (else in its rootdir). pytest takes a
pyproject.toml for its config file only when it has a `[tool.pytest.ini_options]` table, so a
project whose pyproject.toml holds only `[tool.specdec]`, below a folder with a pytest.ini (a
monorepo, a home folder), gets the folder above as its config file: the run would measure the
default matrix, its header saying only "config defaults". Which of the two the user meant cannot
be known, so the run stops naming both files and how to choose.

Searched: the folder pytest was started in and each test path's folder, up to the folder the
settings are read from. A config file given with `-c` is the user's choice and is not questioned.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from .errors import SpecdecUsageError

if TYPE_CHECKING:
    import pytest


def settings_file(folder: Path) -> Path | None:
    """The file in `folder` that configures the plugin (specdec.toml, or a pyproject.toml with a
    `[tool.specdec]` table), else None. A pyproject.toml that cannot be read configures nothing
    here: pytest itself reports one it needs."""
    if (folder / "specdec.toml").is_file():
        return folder / "specdec.toml"
    pyproject = folder / "pyproject.toml"
    if not pyproject.is_file():
        return None
    from .config import tomllib

    try:
        with open(pyproject, "rb") as handle:
            data = tomllib.load(handle)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    tool = data.get("tool")
    return pyproject if isinstance(tool, dict) and "specdec" in tool else None


def passed_over(starts: Iterable[Path], root: Path) -> Path | None:
    """The nearest settings file between a start folder and `root` (root's own excluded), for the
    first start inside `root` that has one."""
    root = root.resolve()
    for start in starts:
        folder = start.resolve()
        if folder != root and root not in folder.parents:
            continue  # pytest's folders outside the root: not this project's
        while folder != root:
            found = settings_file(folder)
            if found is not None:
                return found
            folder = folder.parent
    return None


def _start_folders(config: pytest.Config) -> list[Path]:
    """The invocation folder, then each test path's folder (a node id's file part)."""
    invoked = Path(config.invocation_params.dir)
    folders = [invoked]
    for arg in config.option.file_or_dir or []:
        path = invoked / str(arg).split("::")[0]
        if path.exists():
            folders.append(path if path.is_dir() else path.parent)
    return folders


def check(config: pytest.Config, root: Path) -> None:
    """Stop a run whose settings, read in `root`, pass over a project's own."""
    if getattr(config.option, "inifilename", None):
        return
    found = passed_over(_start_folders(config), root)
    if found is None:
        return
    used = settings_file(root)
    reading = f"reads {used}" if used is not None else "runs its default matrix"
    chosen = (f"pytest chose the config file {config.inipath} above it" if config.inipath
              else f"pytest found no config file and chose the rootdir {config.rootpath} above it")
    if found.name == "pyproject.toml":
        use = (f"add a [tool.pytest.ini_options] table to it (pytest then takes it for the config file) "
               f"or pass -c {found}")
    else:
        use = (f"give {found.parent} a pytest config file (a pytest.ini, or a [tool.pytest.ini_options] "
               f"table in its pyproject.toml) or pass -c with that file")
    keep = f"; to keep {used or 'the defaults'}, pass -c {config.inipath}" if config.inipath else ""
    raise SpecdecUsageError(f"{found} configures pytest-specdec but is not read: {chosen}, so the plugin "
                            f"{reading}. To use it, {use}{keep}")
