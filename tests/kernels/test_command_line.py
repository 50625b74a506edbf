"""The kernels' command lines where torch is not installed: one line naming what to install and
exit status 2, as `python -m pytest_specdec.engine` says it, not a ModuleNotFoundError traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("command", ["bench", "hybrid_bench", "flex_sweep", "compile_check"])
def test_a_command_line_without_torch_says_what_to_install_in_one_line(command, tmp_path):
    """`python -m specdec_kernels.bench` imported the package, whose first module imports torch:
    a traceback before the command could say anything."""
    # torch made unimportable in the command's interpreter, as where it is not installed
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['torch'] = None\n")
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    run = subprocess.run([sys.executable, "-m", f"specdec_kernels.{command}"], cwd=tmp_path,
                         env=dict(os.environ, PYTHONPATH=path), capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.startswith(f"pytest-specdec: python -m specdec_kernels.{command} needs the `kernels` "
                                 f"extra, and torch is not installed: pip install torch"), run.stderr


@pytest.mark.parametrize("flag", ["--help", "-h", "--hel"])
@pytest.mark.parametrize("command", ["bench", "hybrid_bench", "flex_sweep", "compile_check"])
def test_a_command_lines_help_needs_no_torch(command, flag, tmp_path):
    """`--help` got the one line saying to install torch instead of the help: asking what a
    command takes needs none of what running it does."""
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['torch'] = None\n")
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    run = subprocess.run([sys.executable, "-m", f"specdec_kernels.{command}", flag], cwd=tmp_path,
                         env=dict(os.environ, PYTHONPATH=path), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"usage: python -m specdec_kernels.{command} "), run.stdout
    assert run.stderr == "", run.stderr


@pytest.mark.parametrize("args", [["--list-shapes"], ["--table-from", "rows.jsonl"]], ids=["list-shapes", "table-from"])
def test_the_benchs_modes_without_a_gpu_need_no_triton(args, tmp_path):
    """Listing the grid and rendering a saved run's rows (`--table-from`: "no GPU needed") import
    no Triton, yet the command refused them where Triton is not installed (a CPU torch)."""
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['triton'] = None\n")
    from specdec_kernels.bench import ROW_NUMBERS

    row = {"shape": "s", "bound": "memory", **{key: 1.0 for key in ROW_NUMBERS}, "goals": {"correct": "met"}}
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    run = subprocess.run([sys.executable, "-m", "specdec_kernels.bench", *args], cwd=tmp_path,
                         env=dict(os.environ, PYTHONPATH=path), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "triton" not in run.stderr, run.stderr


def _argparse_helps(parser, argv) -> bool:
    """What argparse itself does with `argv`: prints the help and exits 0, or not."""
    import contextlib
    import io

    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            parser.parse_args(argv)
    except SystemExit as exit:
        return exit.code == 0 and out.getvalue().startswith("usage:")
    return False


def _short_flags():
    import argparse

    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("-v", action="store_true")
    parser.add_argument("-n", type=int)
    return parser


ARGVS = [[], ["--help"], ["-h"], ["--h"], ["--he"], ["--hel"], ["--helpx"], ["--hx"], ["--quick", "--hel"],
         ["--", "-h"], ["--json", "-h"], ["--json=-h"], ["--json", "x", "-h"], ["-hx"], ["--bogus", "-h"],
         ["--max-seconds", "x", "-h"], ["-h", "--max-seconds", "x"], ["--l2-flush", "nope", "--help"],
         ["-vh"], ["-hv"], ["-n", "-h"], ["-n3", "-h"], ["--out", "o", "--he"], ["x", "-h"]]


@pytest.mark.parametrize("argv", ARGVS, ids=" ".join)
@pytest.mark.parametrize("name", ["bench", "hybrid_bench", "flex_sweep", "short_flags"])
def test_help_without_torch_is_asked_exactly_where_argparse_gives_it(name, argv):
    """Only -h and --help were taken for help: `--hel` (an abbreviation argparse takes; `--he` is
    ambiguous in bench beside --head-dims) got the line saying to install torch, and `-vh` would
    have; `--json -h` is refused by argparse, so it is not help either."""
    from specdec_kernels import arguments, flex_sweep
    from specdec_kernels.command_line import _asks_help

    make = {"bench": lambda: arguments.bench_parser("d"), "hybrid_bench": lambda: arguments.hybrid_bench_parser("d"),
            "flex_sweep": flex_sweep._parser, "short_flags": _short_flags}[name]
    assert _asks_help(make(), argv) == _argparse_helps(make(), argv)
