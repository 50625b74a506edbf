"""What a configuration is: the method names, which of them speculate, and the configuration id.

One source for these facts, imported by the config parser, the matrix, server specs, the SGLang
flag table, the engine's command line, attached servers' identities and the measurement guards,
so that a method added here is known everywhere and an id is spelled the same in test ids,
logs, the journal and baseline files. Pure Python, no pytest: the engine imports it too.
"""

from __future__ import annotations

from dataclasses import dataclass

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
