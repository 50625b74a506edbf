"""What a configuration is: the method names, which of them speculate, and the configuration id.

One source for these facts, imported by the config parser, the matrix, server specs, the SGLang
flag table, the engine's command line, attached servers' identities and the measurement guards,
so that a method added here is known everywhere and an id is spelled the same in test ids,
logs, the journal and baseline files. Pure Python, no pytest: the engine imports it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

#: Every decoding method, in the order a default matrix lists them.
METHODS = ("ar", "dflash", "ddtree")
#: Methods that draft and verify; every server running one must show spec_verify_ct.
SPECULATIVE_METHODS = frozenset({"dflash", "ddtree"})
#: Methods whose configurations differ by tree budget (draft nodes, root excluded).
BUDGETED_METHODS = frozenset({"ddtree"})
#: The method speedups are measured against: autoregressive decoding, as papers report them.
REFERENCE_METHOD = "ar"
#: Spellings servers use for "no speculation" (SGLang's speculative_algorithm None/"NONE", ...).
_NOT_SPECULATING = frozenset({"ar", "none", "autoregressive", ""})


def is_speculative(method: str | None) -> bool:
    """Whether `method` speculates; any name but the no-speculation spellings does (a server's
    plugin algorithm included), so an unknown algorithm is held to the speculation guards."""
    return method is not None and method.lower() not in _NOT_SPECULATING


def takes_budget(method: str) -> bool:
    return method in BUDGETED_METHODS


#: The keywords of a `specdec(...)` marker, and of an `-m "specdec(...)"` selector.
MARKER_KEYWORDS = ("method", "tp", "budget")


def marker_problem(keywords: Mapping[str, object]) -> str | None:
    """What no configuration can have in a `specdec(...)` marker's keywords (a hand-written test's,
    or an `-m` selector's, which then matches no test), as `has ...`; None where they are fine. One
    rule for both, so that a selector is refused exactly where no marker could match it."""
    from .suggest import hint

    method, tp, budget = keywords.get("method"), keywords.get("tp", 1), keywords.get("budget")
    unknown = sorted(set(keywords) - set(MARKER_KEYWORDS))
    if unknown:
        return f"has unknown keywords {', '.join(unknown)} ({hint(unknown[0], MARKER_KEYWORDS)})"
    if method is not None and method not in METHODS:
        return f"has method {method!r}, which is unknown ({hint(str(method), METHODS)})"
    if not is_count(tp) or tp & (tp - 1):
        return f"has tp={tp!r}, which is not a power of two (1, 2, 4, 8, ...)"
    if budget is not None and not is_count(budget):
        return f"has budget={budget!r}, which is not a whole number of draft nodes, 1 or more"
    if budget is not None and method is not None and not takes_budget(method):
        return f"has budget={budget!r}, but {method} takes no budget (a tree budget is ddtree's)"
    return None


def is_count(value: object) -> bool:
    """A whole number, 1 or more (a bool is no count, though Python calls it an int)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def method_of_algorithm(algorithm: str | None) -> str:
    """Our method name for a server's `speculative_algorithm` (`DDTREE` -> `ddtree`, None -> `ar`)."""
    return str(algorithm).lower() if is_speculative(algorithm) else "ar"


def algorithm_of_method(method: str) -> str | None:
    """SGLang's `speculative_algorithm` for a method (`ddtree` -> `DDTREE`, `ar` -> None)."""
    return method.upper() if is_speculative(method) else None


def configuration_id(method: str, tp: int, budget: int | None) -> str:
    """`ddtree-tp4-b16`, `dflash-tp1`, `ar-tp1`: a server configuration's name everywhere."""
    text = f"{method}-tp{tp}"
    return text + (f"-b{budget}" if budget is not None else "")


@dataclass(frozen=True)
class MatrixCase:
    """One (family, method, tp, budget) cell of a configured matrix."""

    family: str
    method: str
    tp: int
    budget: int | None

    @property
    def spec_id(self) -> str:
        """The configuration id (`ddtree-tp4-b16`), shared across families."""
        return configuration_id(self.method, self.tp, self.budget)

    @property
    def param_id(self) -> str:
        """The test id; GPU families prefix theirs so one file can hold several suites."""
        return self.spec_id if self.family == "cpu" else f"{self.family}-{self.spec_id}"
