"""A misspelt `--specdec-*` flag or `specdec_*` ini key, named together with the one it most
likely stands for.

pytest turns argparse's abbreviations off and says only "unrecognized arguments: --specdec-tpp=1";
the plugin's flags are many and long, and `[tool.specdec]` keys already get a did-you-mean, so the
command line gets one too. So does a hardware family misspelt in `-m` (`-m blackwel`), or an
architecture given for one (`-m sm_120`), which pytest takes for a marker no test has and answers
by deselecting every test, and a configuration misspelt in one (`-m "specdec(method='dflsh')"`),
which beside `or` drops that configuration from a run that passes; each is read wherever it
stands, grouped in parentheses too (`-m "not (blackwel)"`). A misspelt ini key is worse: pytest
only warns of it in the warnings summary, after the whole benchmark ran with the default it meant
to change.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .options import OPTIONS

if TYPE_CHECKING:
    import pytest


def check(parser: pytest.Parser, args: Sequence[str]) -> None:
    """Raise pytest.UsageError for the first `--specdec-*` argument no option of the parser takes."""
    if not any(str(arg).startswith("--specdec") for arg in args):
        return  # most runs: no flag of the plugin's to check, and no second parse
    import pytest

    _, unknown = parser.parse_known_and_unknown_args([str(arg) for arg in args])
    for arg in unknown:
        flag = arg.split("=", 1)[0]
        if not flag.startswith("--specdec"):
            continue
        # the part after the shared prefix, which would make any two flags look alike
        names = {option.cli.removeprefix("--specdec-"): option.cli for option in OPTIONS}
        typed = flag.removeprefix("--specdec").lstrip("-_").replace("_", "-")
        close = difflib.get_close_matches(typed, names, n=1)
        hint = (f"did you mean {names[close[0]]}?" if close
                else "pytest --help lists the plugin's flags under pytest-specdec")
        raise pytest.UsageError(f"pytest-specdec: unknown flag {flag}; {hint}")


#: Words of a `-m` expression that name no marker.
_OPERATORS = {"and", "or", "not", "True", "False", "None"}


@dataclass(frozen=True)
class MarkerUse:
    """One marker a `-m` expression names, as written there."""

    name: str
    text: str  # `specdec(method='dflsh')` as typed, for the message
    arguments: str | None  # between the marker's own parentheses; None where it has none


def marker_uses(expression: str) -> list[MarkerUse]:
    """Every marker `expression` names, in order, wherever it stands: inside grouping parentheses
    (`(hopper or blackwel)`, `not (blackwel)`) as much as outside. Read with pytest's own grammar,
    which alone tells grouping parentheses from a marker's arguments; [] for an expression pytest
    refuses, since pytest then names the fault itself."""
    try:
        from _pytest.mark.expression import Expression, Scanner, TokenType
    except ImportError:  # a pytest that moved its grammar: -m goes unchecked, never refused by mistake
        return []
    try:
        Expression.compile(expression)
    except Exception:  # ParseError (pytest 8) or SyntaxError (pytest 9): pytest's own message names it
        return []
    try:
        scanner = Scanner(expression)
        return _walk(expression, [scanner.current, *scanner.tokens], TokenType)
    except (AttributeError, TypeError, IndexError, StopIteration):  # its private shape changed: as above
        return []


def _walk(expression: str, tokens: list, TokenType) -> list[MarkerUse]:  # noqa: N803 (pytest's enum)
    """`marker_uses` over pytest's tokens of `expression` (their type, value and pos are private)."""
    uses, i = [], 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token.type is not TokenType.IDENT:
            continue
        if tokens[i].type is not TokenType.LPAREN:  # the grammar puts a marker's arguments right after its name
            uses.append(MarkerUse(token.value, token.value, None))
            continue
        close = next(j for j in range(i, len(tokens)) if tokens[j].type is TokenType.RPAREN)  # arguments hold none
        uses.append(MarkerUse(token.value, expression[token.pos:tokens[close].pos + 1],
                              expression[tokens[i].pos + 1:tokens[close].pos]))
        i = close + 1
    return uses


def check_markexpr(config: pytest.Config) -> None:
    """Raise pytest.UsageError for a name in `-m` that is no registered marker but one letter or two
    from a hardware family's, or an architecture of one, and for a `specdec(...)` selector no
    marker can match. `-m` given twice or in addopts is the one pytest selects by."""
    expression = getattr(config.option, "markexpr", "") or ""
    if not expression:
        return
    import pytest

    from .hardware import GPU_FAMILIES, arch_family
    from .suggest import closest

    registered = {re.split(r"[(:]", line, maxsplit=1)[0].strip() for line in config.getini("markers")}
    uses = marker_uses(expression)
    for use in uses:
        name = use.name
        if name in _OPERATORS or name in registered:
            continue
        family = arch_family(name)
        if family is not None:  # -m sm_120: tests are marked by family, never by architecture
            raise pytest.UsageError(f"pytest-specdec: -m {expression!r}: {name!r} is an architecture, not a "
                                    f"marker, so no test has it; its family's marker is {family!r}")
        close = closest(name, GPU_FAMILIES)
        if close:
            raise pytest.UsageError(f"pytest-specdec: -m {expression!r}: {name!r} is no marker, so no test "
                                    f"has it; did you mean {close!r}?")
    for use in uses:
        problem = (_specdec_selector_problem(use.arguments)
                   if use.name == "specdec" and use.arguments is not None else None)
        if problem:
            raise pytest.UsageError(f"pytest-specdec: -m {expression!r}: {use.text} {problem}, so it "
                                    f"matches no test")


#: `key=value` of a `-m` marker's arguments: a quoted string or a bare literal.
_SELECTOR_ARG = re.compile(r"\s*(\w+)\s*=\s*('[^']*'|\"[^\"]*\"|[^,\s]+)\s*")


def _specdec_selector_problem(arguments: str) -> str | None:
    """What no `specdec(...)` marker can match in `-m "specdec(method='dflsh')"`: pytest answers a
    misspelt keyword or method by selecting nothing, and beside `or` by dropping that configuration
    from a run that passes; None for arguments a marker may have (any matrix or hand-written test:
    the rule is the markers' own, `configuration.marker_problem`)."""
    import ast

    from .configuration import marker_problem

    keywords: dict[str, object] = {}
    for part in filter(str.strip, arguments.split(",")):
        match = _SELECTOR_ARG.fullmatch(part)
        if match is None:
            continue  # pytest's own parser names a malformed argument
        try:
            keywords[match.group(1)] = ast.literal_eval(match.group(2))  # as pytest reads -m's literals
        except (ValueError, SyntaxError):
            return None  # not a literal: pytest's own parser names it
    problem = marker_problem(keywords)
    # only where the number quoted is the one refused: beside another fault it would name the wrong fix
    if problem and any(isinstance(value, str) and value.isdigit() and problem.startswith(f"has {key}=")
                       for key, value in keywords.items()):
        problem += " (a marker's numbers are unquoted)"
    return problem


INI_PREFIX = "specdec_"


def check_ini(config: Any) -> None:
    """Raise pytest.UsageError for the first `specdec_*` key of the ini file (or `-o`) that is no
    option's ini twin."""
    import pytest

    entries = getattr(config, "_inicfg", None)  # pytest 9 keeps the file's values there and deprecates inicfg
    if not isinstance(entries, Mapping):
        entries = getattr(config, "inicfg", None)  # pytest 8
    inipath = getattr(config, "inipath", None)
    where = {key: f"in {inipath}" for key in (entries if isinstance(entries, Mapping) else ())}
    for override in getattr(config.option, "override_ini", None) or []:
        where[override.partition("=")[0].strip()] = "given with -o"
    # the part after the shared prefix, which would make any two keys look alike
    names = {option.ini.removeprefix(INI_PREFIX): option.ini for option in OPTIONS}
    for key in sorted(where):
        if not key.startswith(INI_PREFIX) or key in names.values():
            continue
        close = difflib.get_close_matches(key.removeprefix(INI_PREFIX), names, n=1)
        hint = (f"did you mean {names[close[0]]}?" if close
                else "pytest --help lists the plugin's ini keys beside its flags")
        raise pytest.UsageError(f"pytest-specdec: unknown ini key {key} ({where[key]}); {hint}")
