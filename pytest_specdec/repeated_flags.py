"""A `--specdec-*` flag given twice on the command line with different values.

argparse keeps the last value and drops the others without a word, so `--specdec-keep-runs=3 ...
--specdec-keep-runs=5` (a script that appends flags, a command line edited in the shell's history)
runs with a setting its author may not have meant, and `--specdec-compare-fail` given once per
figure gates only the last one. Only the command line itself is read: a flag in `addopts` or
`PYTEST_ADDOPTS` that the command line overrides is the documented precedence, not a slip, and a
flag repeated with one value means one thing.
So does an ini key given twice with `-o`, in any spelling argparse takes (`-oKEY=V`, `-qo KEY=V`,
`--override-ini=KEY=V`: pytest's own parser reads them, where pytest handed it over), and a flag
given beside its ini twin's `-o` with another value, which the flag silently wins whatever the
order (save `--specdec-compare-fail`, whose ini layer gates the figures the flag does not name); a
flag over an ini file's value stays the documented precedence. A flag in a `@FILE` of
arguments counts too (pytest reads each line as one, as argparse does); the merge command
(`python -m pytest_specdec merge`) checks its own options the same way (it has no short options
and no ini to cross).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

from .errors import SpecdecUsageError
from .options import OPTIONS, Option

if TYPE_CHECKING:
    import pytest

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


def overrides(args: Sequence[str], parser: pytest.Parser | None = None) -> list[str]:
    """The command line's `-o`/`--override-ini` values of `specdec_*` keys, each as a flag of its own
    (`-o specdec_keep_runs` and its value), so that `repeated` checks them as it checks flags. With
    `parser` (pytest's), argparse itself reads them, in combined short options (`-qo`) too, as this
    Python's argparse does; without it, or where it refuses the line (pytest says why), the
    spellings of `-o` alone are read."""
    pairs = _parsed(args, parser) if parser is not None else None
    if pairs is None:
        pairs = _scanned(args)
    flags = []
    for pair in pairs:
        key, joined, value = pair.partition("=")
        if joined and key.strip().startswith("specdec_"):
            flags.append(f"-o {key.strip()}={value}")
    return flags


def _parsed(args: Sequence[str], parser: pytest.Parser) -> list[str] | None:
    import pytest

    try:
        namespace = parser.parse_known_args([str(arg) for arg in args])
    except (pytest.UsageError, SystemExit):  # pytest's own parse of the line reports it
        return None
    return list(getattr(namespace, "override_ini", None) or [])


def _scanned(args: Sequence[str]) -> list[str]:
    pairs: list[str] = []
    args = [str(arg) for arg in args]
    for index, arg in enumerate(args):
        if arg == "--":
            break
        if arg in ("-o", "--override-ini"):
            pairs.append(args[index + 1] if index + 1 < len(args) else "")
        elif arg.startswith("--override-ini="):
            pairs.append(arg.removeprefix("--override-ini="))
        elif arg.startswith("-o="):  # argparse reads `-o=KEY=VALUE` as `-o KEY=VALUE`
            pairs.append(arg[3:])
        elif arg.startswith("-o") and not arg.startswith("--"):
            pairs.append(arg[2:])
    return pairs


def crossed(args: Sequence[str], ini: Sequence[str]) -> str | None:
    """The problem and fix for the first option `args` give as a flag and `ini` (`overrides`) as its
    `-o` twin with another value: pytest takes the flag whatever the order, without a word."""
    words = list(_words(args))
    flags = given_values(words)
    keys = given_values(ini, [flag.partition("=")[0] for flag in ini])
    for option in OPTIONS:
        values = keys.get(f"-o {option.ini}")
        if not values or option.layered:  # flag and ini both count, as layers: together no slip
            continue
        if option.flag:
            spelled, value = option.cli, ("true" if option.cli in words else None)
        else:
            value = flags.get(option.cli, [None])[-1]
            spelled = f"{option.cli}={value}"
        if value is None or _same(option, value, values[-1]):
            continue
        return (f"{spelled} and -o {option.ini}={values[-1]} are both given on the command line, and only "
                f"the flag would count (a flag wins over its ini key whatever the order); give one of them")
    return None


def _words(args: Sequence[str]) -> Iterable[str]:
    for arg in (str(arg) for arg in args):
        if arg == "--":
            return  # what follows is positional, never flags
        yield arg


def _same(option: Option, flag: str, ini: str) -> bool:
    """Whether two spellings mean one value (`5` and ` 5`, `true` and `yes`)."""
    if flag.strip() == ini.strip():
        return True
    try:
        return option.parse(flag) == option.parse(ini)
    except (ValueError, SpecdecUsageError):  # a bad value is its own check's to report
        return False


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


def check(args: Sequence[str], cwd: Path | None = None, parser: pytest.Parser | None = None) -> None:
    """Raise SpecdecUsageError for the first `--specdec-*` flag, or `-o specdec_*` key, the command
    line gives with two different values, or as a flag and its `-o` twin with two; with `cwd`,
    `@FILE` arguments are read from there; `parser` as `overrides` reads it."""
    if cwd is not None:
        args = from_files(args, cwd)
    ini = overrides(args, parser)
    problem = repeated(args) or repeated(ini, [flag.partition("=")[0] for flag in ini]) or crossed(args, ini)
    if problem:
        raise SpecdecUsageError(problem)
