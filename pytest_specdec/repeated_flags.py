"""A `--specdec-*` flag given twice on the command line with different values.

argparse keeps the last value and drops the others without a word, so `--specdec-keep-runs=3 ...
--specdec-keep-runs=5` (a script that appends flags, a command line edited in the shell's history)
runs with a setting its author may not have meant, and `--specdec-compare-fail` given once per
figure gates only the last one. Only the command line itself is read: a flag in `addopts` or
`PYTEST_ADDOPTS` that the command line overrides is the documented precedence, not a slip, and a
flag repeated with one value means one thing.
"""

from __future__ import annotations

from typing import Sequence

from .errors import SpecdecUsageError
from .options import OPTIONS

#: The value-taking flags, by their command-line spelling (switches carry no value to disagree on).
_VALUED = {option.cli: option for option in OPTIONS if not option.flag}

#: Flags whose one value lists several items, where a repetition likely meant to add one.
_JOINED = {"--specdec-compare-fail": "output_tok_s:5%,ttft_ms:10%", "--specdec-tp": "1,4"}


def given_values(args: Sequence[str]) -> dict[str, list[str]]:
    """Each value-taking `--specdec-*` flag's values, in the order the command line gives them."""
    values: dict[str, list[str]] = {}
    args = [str(arg) for arg in args]
    for index, arg in enumerate(args):
        if arg == "--":
            break  # what follows is test paths, never flags
        flag, joined, value = arg.partition("=")
        if flag not in _VALUED:
            continue
        if not joined:  # `--specdec-report out`: the value is the next argument
            if index + 1 >= len(args):
                continue  # argparse says it lacks a value
            value = args[index + 1]
        values.setdefault(flag, []).append(value)
    return values


def check(args: Sequence[str]) -> None:
    """Raise SpecdecUsageError for the first flag the command line gives with two different values."""
    for flag, values in given_values(args).items():
        distinct = list(dict.fromkeys(values))
        if len(distinct) < 2:
            continue
        times = "twice" if len(values) == 2 else f"{len(values)} times"
        shown = ", ".join(repr(value) for value in distinct[:-1]) + f" and {distinct[-1]!r}"
        example = _JOINED.get(flag)
        fix = f"give it once, with all of them in one value (e.g. {flag}={example})" if example else "give it once"
        raise SpecdecUsageError(f"{flag} is given {times} on the command line, as {shown}, and only the last "
                                f"would count; {fix}")
