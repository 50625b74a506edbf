"""`ServerSpec`: what one inference server is, and its stable id.

A spec is the unit of reuse: the pool boots each distinct spec once, tests are grouped and ordered
by it, and its id (`ddtree-tp4-b16`, `dflash-tp1`, `ar-tp1`) appears in test ids, logs, baselines
and the journal. The id therefore names only what changes a measurement's meaning between
configurations of one matrix (method, tensor parallelism, tree budget); everything else that
distinguishes two servers (backend, model, extra arguments) still makes the specs unequal, so the
pool never hands a test the wrong server.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pytest_specdec.configuration import METHODS, configuration_id, is_speculative, takes_budget
from pytest_specdec.errors import SpecdecUsageError

BACKENDS = ("embedded", "sglang", "attach")


@dataclass(frozen=True)
class ServerSpec:
    """One server configuration.

    `budget` is the DDTree node budget (draft nodes, root excluded: the verify pass sees
    `budget + 1` tokens). It is required for `ddtree` and meaningless for the other methods, so it
    must be None there: a stray budget would otherwise split one dflash server into several
    identical ones. `extra_args` go last on the command line, after everything we generate, so a
    user can override any of our defaults.
    """

    backend: str
    method: str
    tp: int = 1
    budget: int | None = None
    model: str | None = None
    draft_model: str | None = None
    seed: int = 0
    context_length: int | None = None
    extra_args: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise SpecdecUsageError(
                f"server backend {self.backend!r} is unknown; use one of {', '.join(BACKENDS)}"
            )
        if self.method not in METHODS:
            raise SpecdecUsageError(
                f"speculative method {self.method!r} is unknown; use one of {', '.join(METHODS)}"
            )
        if not isinstance(self.tp, int) or self.tp < 1:
            raise SpecdecUsageError(f"tp={self.tp!r} for method {self.method}: use an integer >= 1")
        if takes_budget(self.method):
            if not isinstance(self.budget, int) or self.budget < 1:
                raise SpecdecUsageError(
                    f"method {self.method} needs a budget >= 1 (draft nodes per tree), got {self.budget!r}"
                )
        elif self.budget is not None:
            raise SpecdecUsageError(
                f"budget={self.budget} given for method {self.method}; only ddtree takes a budget"
            )
        if self.context_length is not None and self.context_length < 1:
            raise SpecdecUsageError(f"context_length={self.context_length}: use a positive integer")
        # Accept a list from config code but keep the dataclass hashable.
        object.__setattr__(self, "extra_args", tuple(str(a) for a in self.extra_args))

    @property
    def id(self) -> str:
        """Stable, human-readable id: `ddtree-tp4-b16`, `dflash-tp1`, `ar-tp1`."""
        return configuration_id(self.method, self.tp, self.budget)

    @property
    def num_gpus(self) -> int:
        """GPUs one server of this spec occupies (tensor parallelism only; no DP yet)."""
        return self.tp

    @property
    def is_speculative(self) -> bool:
        return is_speculative(self.method)

    def __str__(self) -> str:
        return self.id
