"""What a command line of this package (``python -m specdec_kernels.bench`` and its siblings)
needs that is not installed, said in one line with exit status 2, as ``python -m
pytest_specdec.engine`` says it, instead of a ModuleNotFoundError traceback.

Checked by importing, not by the installed metadata: a package that is installed but does not
import here (a torch built for another Python) fails the command just the same.
"""

from __future__ import annotations

import importlib
import sys


def require(command: str, *modules: str) -> None:
    """Exit 2 with one line naming what to install unless each of `modules` imports."""
    absent = [name for name in modules if not _imports(name)]
    if not absent:
        return
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
