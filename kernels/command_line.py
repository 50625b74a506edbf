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
    if parser is not None and _asks_help(parser(), sys.argv[1:] if argv is None else argv):
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


class _Help(Exception):
    """The parser met its help option."""


class _Refused(Exception):
    """The parser refused the command line before it met a help option."""


def _asks_help(parser: argparse.ArgumentParser, argv: Sequence[str]) -> bool:
    """Whether `parser` itself, parsing `argv`, would print its help: argparse takes `--he` for
    `--help` where abbreviations are allowed, and refuses `--json -h` (an option where the value
    goes) before it meets the help, so no rule on the strings says it. Its help action calls
    `print_help`; this parser's raises instead, and its `error` and `exit` stop it printing."""

    def asked(file=None) -> None:
        raise _Help

    def refused(*args, **kwargs) -> None:
        raise _Refused

    parser.print_help, parser.error, parser.exit = asked, refused, refused  # type: ignore[method-assign]
    try:
        parser.parse_known_args(list(argv))
    except _Help:
        return True
    except (_Refused, argparse.ArgumentError):  # ArgumentError: a parser made with exit_on_error=False
        return False
    return False
