"""Shards: one host's part of the configuration matrix (`--specdec-shard K/N`).

Teams run the matrix on several hosts at once (CI matrix jobs, Slurm job arrays) and the hosts
do not talk to each other, so every shard works out the same partition from what they all share:
the matrix in the project's config and the durations file committed beside the baselines. The
unit is a configuration (a server boots once per configuration, so its tests never split), each
configuration lands in exactly one shard, and the shards' expected costs are balanced: by the
durations earlier runs recorded where there are any, else by GPU count x workload size.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

if TYPE_CHECKING:  # the option table imports this module: it stays light
    from .configuration import MatrixCase
    from .state import RunState

#: The durations file in the baseline folder: seconds per configuration, written by
#: `--specdec-save-baseline` and by `python -m pytest_specdec merge --save-baseline`.
DURATIONS_FILE = "durations.json"


@dataclass(frozen=True)
class Shard:
    """Shard `index` (1-based) of `count`."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """`2/4` -> Shard(2, 4); the option table's parser (a ValueError says what is wrong)."""
    index, sep, count = str(text).strip().partition("/")
    try:
        shard = Shard(int(index), int(count)) if sep else None
    except ValueError:
        shard = None
    if shard is None:
        raise ValueError(f"{text!r} is not K/N (shard K of N, e.g. 2/4)")
    if shard.count < 1 or not 1 <= shard.index <= shard.count:
        raise ValueError(f"{text!r}: K must lie in 1..N and N be at least 1 (e.g. 2/4)")
    return shard


def partition(costs: Sequence[float], count: int) -> list[list[int]]:
    """Indexes of `costs` per shard: longest first, each to the least loaded shard.

    A worked example: costs [8, 1, 1, 4, 4, 2] in 2 shards -> 8 to shard 1, both 4s to shard 2,
    2 to shard 1 (loads tie at 8: it has fewer configurations), both 1s to shard 2: loads 10 and
    10. Ties go to the shard with fewer configurations, then the lower index, so equal costs deal
    out like cards. Deterministic:
    the same costs give the same partition in every process. Each shard's indexes are sorted.
    """
    shards: list[list[int]] = [[] for _ in range(count)]
    loads = [0.0] * count
    for i in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        target = min(range(count), key=lambda s: (loads[s], len(shards[s]), s))
        shards[target].append(i)
        loads[target] += costs[i]
    return [sorted(members) for members in shards]


def estimated_cost(case: MatrixCase, workload_tokens: int) -> float:
    """A configuration's cost before any run measured it: its GPUs times the tokens its
    workloads ask for (GPU-time, as a host running configurations side by side spends it)."""
    return float(case.tp * workload_tokens)


def costs(cases: Sequence[MatrixCase], durations: Mapping[str, float],
          workload_tokens: int) -> tuple[list[float], int]:
    """Each configuration's expected cost, and how many came from recorded durations.

    Recorded durations are seconds; estimates are brought to seconds by the median ratio of
    duration to estimate over the configurations that have both, so a few new configurations
    in a measured matrix weigh what their neighbours weigh.
    """
    import statistics

    estimates = [estimated_cost(case, workload_tokens) for case in cases]
    known = [durations.get(case.param_id) for case in cases]
    ratios = [d / e for d, e in zip(known, estimates) if d is not None and e > 0]
    scale = statistics.median(ratios) if ratios else 1.0
    out = [d if d is not None else e * scale for d, e in zip(known, estimates)]
    return out, sum(d is not None for d in known)


def host_runs_family(family: str, state: RunState) -> bool:
    """Whether this host runs a family's matrix at all (collection skips the others'); their
    configurations belong to other host classes' shards."""
    from .collection import family_skip_reason

    return family_skip_reason(family, state) is None


def sharded_matrix(state: RunState) -> list[MatrixCase]:
    """The configurations the shards of this host class divide among themselves, in matrix order."""
    from .collection import matrix_cases

    return [case for case in matrix_cases(state) if host_runs_family(case.family, state)]


@dataclass(frozen=True)
class ShardPlan:
    """This run's shard, the whole sharded matrix and which shard takes each configuration."""

    shard: Shard
    configurations: tuple[MatrixCase, ...]
    assignment: tuple[int, ...]  # 1-based shard index of each configuration
    balanced_by: str

    @property
    def mine(self) -> tuple[MatrixCase, ...]:
        return tuple(case for case, index in zip(self.configurations, self.assignment)
                     if index == self.shard.index)

    def owns(self, case: MatrixCase) -> bool:
        return any(case == mine for mine in self.mine)

    @property
    def param_ids(self) -> tuple[str, ...]:
        return tuple(case.param_id for case in self.configurations)

    @property
    def matrix_digest(self) -> str:
        """Names the sharded matrix: shards of one run agree on it, and the merge checks that."""
        text = json.dumps(self.param_ids, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    def header_line(self) -> str:
        mine = [case.param_id for case in self.mine]
        listed = ", ".join(mine) if mine else "none (more shards than configurations)"
        return (f"specdec: shard {self.shard}: {len(mine)} of {len(self.configurations)} "
                f"configurations, balanced by {self.balanced_by}: {listed}")


def no_folder_line(plan: ShardPlan) -> str:
    """The header's note for a sharded run without `--specdec-report`: it leaves no shard folder,
    so hours of measurement would reach the merge as a missing shard."""
    return (f"specdec: shard {plan.shard} writes no shard folder for python -m pytest_specdec merge "
            f"(its figures stay in the journal only): give --specdec-report=DIR to merge it")


def split_items(items: Sequence, plan: ShardPlan) -> tuple[list, list]:
    """(this shard's items, the others'): a configuration's tests go to its shard, tests of no
    configuration to shard 1, and configurations of families this host does not run nowhere
    (other host classes' shards run them)."""
    from .collection import case_of

    mine = set(plan.mine)
    keep, drop = [], []
    for item in items:
        case = case_of(item)
        ours = plan.shard.index == 1 if case is None else case in mine
        (keep if ours else drop).append(item)
    return keep, drop


def plan(state: RunState) -> ShardPlan | None:
    """This run's shard plan, or None when the run is not sharded."""
    from . import durations as durations_mod

    shard = state.settings.shard
    if shard is None:
        return None
    cases = sharded_matrix(state)
    path = state.baseline_path.parent / DURATIONS_FILE
    recorded = durations_mod.load(path)
    tokens = sum(w.num_prompts * w.max_new_tokens for w in state.config.workloads)
    expected, known = costs(cases, recorded, tokens)
    members = partition(expected, shard.count)
    assignment = [0] * len(cases)
    for number, indexes in enumerate(members, start=1):
        for i in indexes:
            assignment[i] = number
    balanced_by = (f"the durations in {path} ({known} of {len(cases)} configurations)" if known
                   else "GPU count x workload size (no durations recorded yet)")
    return ShardPlan(shard, tuple(cases), tuple(assignment), balanced_by)


__all__ = ["DURATIONS_FILE", "Shard", "ShardPlan", "costs", "estimated_cost", "host_runs_family",
           "no_folder_line", "parse_shard", "partition", "plan", "sharded_matrix", "split_items"]
