"""A `--specdec-*` flag given twice on the command line with different values.

argparse keeps the last value and drops the others without a word, so `--specdec-keep-runs=3 ...
--specdec-keep-runs=5` (a script that appends flags, a command line edited in the shell's history)
runs with a setting its author may not have meant, and `--specdec-compare-fail` given once per
figure gates only the last one. Only the command line itself is read: a flag in `addopts` or
`PYTEST_ADDOPTS` that the command line overrides is the documented precedence, not a slip, and a
flag repeated with one value means one thing.
So does an ini key given twice with `-o`, and a flag in a `@FILE` of arguments (pytest reads each
line as one, as argparse does); the merge command (`python -m pytest_specdec merge`) checks its own
options the same way.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterable, Sequence

from .errors import SpecdecUsageError
from .options import OPTIONS

#: The value-taking flags, by their command-line spelling (switches carry no value to disagree on).
_VALUED = {option.cli: option for option in OPTIONS if not option.flag}

#: Flags whose one value lists several items, where a repetition likely meant to add one.
_JOINED = {"--specdec-compare-fail": "output_tok_s:5%,ttft_ms:10%", "--specdec-tp": "1,4"}


def given_values(args: Sequence[str], valued: Iterable[str] = _VALUED,
                 options: Iterable[str] | None = None) -> dict[str, list[str]]:
    """Each of the `valued` flags' values, in the order the command line gives them; with `options`
    (every option of a parser that takes argparse's abbreviations, which pytest turns off), a name
    is read as argparse reads it among all of them, a unique prefix as its option, and counted
    where that one is `valued`: a switch named like a valued option (`--lock` beside
    `--lock-timeout`) is the switch."""
    valued = tuple(valued)
    options = None if options is None else tuple(options)
    values: dict[str, list[str]] = {}
    args = [str(arg) for arg in args]
    for index, arg in enumerate(args):
        if arg == "--":
            break  # what follows is positional, never flags
        name, joined, value = arg.partition("=")
        flag = name if options is None else resolved(name, options)
        if flag not in valued:
            continue
        if not joined:  # `--specdec-report out`: the value is the next argument
            if index + 1 >= len(args):
                continue  # argparse says it lacks a value
            value = args[index + 1]
        values.setdefault(flag, []).append(value)
    return values


def resolved(name: str, options: Sequence[str]) -> str | None:
    """The option of `options` argparse reads `name` as: itself, or the one it is a unique prefix of."""
    if name in options:  # argparse takes an exact name before any prefix
        return name
    matches = [flag for flag in options if name.startswith("--") and len(name) > 2 and flag.startswith(name)]
    return matches[0] if len(matches) == 1 else None  # an ambiguous one is argparse's to report


def repeated(args: Sequence[str], valued: Iterable[str] = _VALUED,
             options: Iterable[str] | None = None) -> str | None:
    """The problem and fix for the first of the `valued` flags `args` give with two different values;
    `options` as `given_values` reads them."""
    for flag, values in given_values(args, valued, options).items():
        distinct = list(dict.fromkeys(values))
        if len(distinct) < 2:
            continue
        times = "twice" if len(values) == 2 else f"{len(values)} times"
        shown = ", ".join(repr(value) for value in distinct[:-1]) + f" and {distinct[-1]!r}"
        example = _JOINED.get(flag)
        fix = f"give it once, with all of them in one value (e.g. {flag}={example})" if example else "give it once"
        return f"{flag} is given {times} on the command line, as {shown}, and only the last would count; {fix}"
    return None


def overrides(args: Sequence[str]) -> list[str]:
    """The command line's `-o`/`--override-ini` values of `specdec_*` keys, each as a flag of its own
    (`-o specdec_keep_runs` and its value), so that `repeated` checks them as it checks flags."""
    flags: list[str] = []
    args = [str(arg) for arg in args]
    for index, arg in enumerate(args):
        if arg == "--":
            break
        if arg in ("-o", "--override-ini"):
            pair = args[index + 1] if index + 1 < len(args) else ""
        elif arg.startswith("--override-ini="):
            pair = arg.removeprefix("--override-ini=")
        elif arg.startswith("-o="):  # argparse reads `-o=KEY=VALUE` as `-o KEY=VALUE`
            pair = arg[3:]
        elif arg.startswith("-o") and not arg.startswith("--"):
            pair = arg[2:]
        else:
            continue
        key, joined, value = pair.partition("=")
        if joined and key.strip().startswith("specdec_"):
            flags.append(f"-o {key.strip()}={value}")
    return flags


def from_files(args: Sequence[str], cwd: Path) -> list[str]:
    """`args` with each `@FILE` replaced by its lines, one argument each, nested files too, as
    pytest's argparse (fromfile_prefix_chars) read them, relative to `cwd`, where pytest started."""
    out: list[str] = []
    for arg in (str(arg) for arg in args):
        if not arg.startswith("@"):
            out.append(arg)
            continue
        try:
            lines = (cwd / arg[1:]).read_text(encoding=sys.getfilesystemencoding(),
                                              errors=sys.getfilesystemencodeerrors()).splitlines()
        except OSError:  # argparse said so before any plugin ran; kept as it is
            out.append(arg)
            continue
        out.extend(from_files(lines, cwd))
    return out


def check(args: Sequence[str], cwd: Path | None = None) -> None:
    """Raise SpecdecUsageError for the first `--specdec-*` flag, or `-o specdec_*` key, the command
    line gives with two different values; with `cwd`, `@FILE` arguments are read from there."""
    if cwd is not None:
        args = from_files(args, cwd)
    ini = overrides(args)
    problem = repeated(args) or repeated(ini, [flag.partition("=")[0] for flag in ini])
    if problem:
        raise SpecdecUsageError(problem)
