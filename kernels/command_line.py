"""What a command line of this package (``python -m specdec_kernels.bench`` and its siblings)
needs that is not installed, said in one line with exit status 2, as ``python -m
pytest_specdec.engine`` says it, instead of a ModuleNotFoundError traceback.

Checked by importing, not by the installed metadata: a package that is installed but does not
import here (a torch built for another Python) fails the command just the same. ``--help`` needs
none of it: given the command's parser, a command line asking for help gets argparse's help.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence


def require(command: str, *modules: str, parser: Callable[[], argparse.ArgumentParser] | None = None,
            argv: Sequence[str] | None = None) -> None:
    """Exit 2 with one line naming what to install unless each of `modules` imports; where one does
    not and `argv` (default: the process's) asks for help, print `parser`'s help and exit 0."""
    absent = [name for name in modules if not _imports(name)]
    if not absent:
        return
    if parser is not None and _asks_help(sys.argv[1:] if argv is None else argv):
        parser().parse_args(["--help"])  # exits 0
    print(f"pytest-specdec: {command} needs the `kernels` extra, and {', '.join(absent)} "
          f"{'is' if len(absent) == 1 else 'are'} not installed: pip install {' '.join(absent)} "
          f"(torch's CUDA build: the kernels are timed on a GPU)", file=sys.stderr)
    raise SystemExit(2)


def _imports(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def _asks_help(argv: Sequence[str]) -> bool:
    """Whether `argv` holds -h or --help as an option (not after ``--``)."""
    options = argv[:list(argv).index("--")] if "--" in argv else argv
    return "-h" in options or "--help" in options
