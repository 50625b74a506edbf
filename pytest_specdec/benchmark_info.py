"""What a recorded test's pytest-benchmark record says of where and what it measured.

pytest-benchmark names a saved run's machine by its CPU and Python only, and a test by its id,
which is the same on an H100 and an H200 host, on SGLang and the embedded engine, and for any
workload size: `--benchmark-compare` would put such runs side by side without a word. So each
recorded test's `extra_info` carries, under `KEY`, the hardware key (as its baseline file is
named), the backend and the fingerprint of its setup, and a compared row that measured elsewhere
or something else is warned of, naming what differs.

Light on purpose: pytest-benchmark calls the plugin's compare hook in every run given
`--benchmark-compare`, also one that collects no specdec test.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Mapping

import pytest

if TYPE_CHECKING:
    from .fingerprint import Fingerprint
    from .state import RunState

#: The `extra_info` key of a recorded test's pytest-benchmark record.
KEY = "specdec"
#: What the runs loaded by --benchmark-compare measured: {test's fullname: [(saved when, info)]}.
_COMPARED_KEY = pytest.StashKey["dict[str, list[tuple[str, Mapping[str, Any]]]]"]()


class BenchmarkCompareWarning(UserWarning):
    """--benchmark-compare puts this run beside one that measured on other hardware, on another
    backend or another setup: its rows compare different things."""


def saved_params(params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A test's parameters as pytest-benchmark saves them, ours by their test ids: it writes a value
    JSON cannot hold as 'UNSERIALIZABLE[MatrixCase(...)]', which its --benchmark-group-by=param:NAME,
    `pytest-benchmark compare --group-by` and CSV then show."""
    from .config import WorkloadSpec
    from .configuration import MatrixCase

    if params is None:
        return None
    return {name: value.param_id if isinstance(value, MatrixCase)
            else value.name if isinstance(value, WorkloadSpec) else value
            for name, value in params.items()}


def measured_where(state: RunState, fingerprint: Fingerprint) -> dict[str, Any]:
    """A recorded test's `KEY` entry: the hardware key, the backend and its setup's fingerprint."""
    return {"hardware": state.hardware.key, "backend": state.backend.name,
            "setup": fingerprint.to_json()}


def note_compared(config: pytest.Config, compared: Mapping[str, Any]) -> None:
    """Keep what each test of a run loaded by --benchmark-compare measured (pytest-benchmark's
    `pytest_benchmark_compare_machine_info`, called once per loaded run)."""
    seen = config.stash.setdefault(_COMPARED_KEY, {})
    when = str(compared.get("datetime") or "at an unknown time")
    benches = compared.get("benchmarks")
    for bench in benches if isinstance(benches, list) else ():
        # a hand-edited or foreign file: fields of another type say nothing, as absent ones
        extra = bench.get("extra_info") if isinstance(bench, dict) else None
        info = extra.get(KEY) if isinstance(extra, dict) else None
        # runs saved before it was recorded say nothing
        if isinstance(info, dict) and isinstance(bench.get("fullname"), str):
            seen.setdefault(bench["fullname"], []).append((when, info))


def warn_if_compared_otherwise(config: pytest.Config, fullname: str | None, test_id: str,
                               where: Mapping[str, Any]) -> None:
    """Warn of each run loaded by --benchmark-compare that measured test `fullname` otherwise."""
    for when, then in config.stash.get(_COMPARED_KEY, {}).get(fullname, ()):
        differs = _measured_otherwise(where, then)
        if differs:
            warnings.warn(BenchmarkCompareWarning(
                f"{test_id}: --benchmark-compare puts it beside the run saved {when}, which "
                f"measured it {differs}: that row compares different things; compare with a run "
                f"of this hardware, backend and setup"), stacklevel=1)


def _measured_otherwise(now: Mapping[str, Any], then: Mapping[str, Any]) -> str:
    """How the run `then` measured a test otherwise than this run (`now`), or ""."""
    from .fingerprint import Fingerprint

    parts = [f"on {name} {then.get(name)!r} (this run: {now[name]!r})"
             for name in ("hardware", "backend") if then.get(name) != now[name]]
    setup, old = Fingerprint.from_json(now["setup"]), Fingerprint.from_json(then.get("setup"))
    if setup is not None and (old is None or not setup.matches(old.digest)):
        changed = setup.what_changed(old, "workload, server settings or model: not recorded")
        parts.append(f"with another setup ({changed})")
    return ", ".join(parts)


__all__ = ["KEY", "BenchmarkCompareWarning", "measured_where", "note_compared",
           "warn_if_compared_otherwise"]
