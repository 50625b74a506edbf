"""The package's optional extras as installed: what a run needs that is missing, said in one line.

The requirements of each extra are read from this package's installed metadata, so pyproject.toml
stays their one source. A run that needs an extra (the embedded engine needs `engine`) checks it
once, after collection, instead of failing every test with an ImportError from a server process.
"""

from __future__ import annotations

import re
import shlex
from importlib import metadata

from .errors import SpecdecUsageError

DISTRIBUTION = "pytest-specdec"
CPU_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/cpu"


def requirements(extra: str) -> list[str]:
    """The requirement strings of `extra` (e.g. `torch>=2.4`); none when not installed as a
    distribution (run from a source tree), where there is nothing to check against."""
    try:
        declared = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return []
    marker = re.compile(rf"""extra\s*==\s*["']{re.escape(extra)}["']""")
    return [req.split(";", 1)[0].strip() for req in declared
            if ";" in req and marker.search(req.split(";", 1)[1])]


def missing(extra: str) -> list[str]:
    """The requirements of `extra` whose distribution is not installed."""
    out = []
    for req in requirements(extra):
        try:
            metadata.distribution(_name(req))
        except metadata.PackageNotFoundError:
            out.append(req)
    return out


def require(extra: str, needed_by: str) -> None:
    """SpecdecUsageError, one line with the install command, unless `extra` is installed."""
    absent = missing(extra)
    if not absent:
        return
    names = [_name(req) for req in absent]
    rest = [req for req in absent if _name(req) != "torch"]
    commands = [] if len(rest) == len(absent) else \
        [f"{CPU_TORCH} (the CPU build; plain `pip install torch` on a GPU host)"]
    if rest:
        commands.append("pip install " + " ".join(shlex.quote(req) for req in rest))
    raise SpecdecUsageError(f"{needed_by} needs the `{extra}` extra, and {', '.join(names)} "
                            f"{'is' if len(names) == 1 else 'are'} not installed: "
                            + ", then ".join(commands))


def install_command(extra: str) -> str:
    """The command that installs `extra`'s requirements by their own names (`pip install
    'matplotlib>=3.7'`): pytest-specdec itself is not on the package index, so
    `pip install 'pytest-specdec[extra]'` would fail there, or fetch another project's package."""
    reqs = missing(extra) or requirements(extra)
    if not reqs:  # run from a source tree: no metadata to read the extra from
        return f"install the `{extra}` extra of pytest-specdec"
    return "pip install " + " ".join(shlex.quote(req) for req in reqs)


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~\[(]", requirement, maxsplit=1)[0]
