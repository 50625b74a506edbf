"""`Result`: one test's figures, as they travel from the test to the journal, the controller's
summary, the report files and the baseline file.

One typed record for every stage, so that each reads the same fields by name rather than keys of
a dict whose shape only the writer knew. `to_json` is what the journal stores and what a test
report carries to the xdist controller; `from_json` reads either back.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from .configuration import MatrixCase
from .fingerprint import Fingerprint
from .gate import Comparison, verdict_of
from .lossless import Outputs
from .metrics import MetricValue
from .sharing import Shared


#: what `Result.from_json` raises on a record of the wrong shape (a hand edit, another version)
RECORD_DAMAGE = (AttributeError, KeyError, TypeError, ValueError, OverflowError)  # Overflow: int(1e999)


@dataclass(frozen=True)
class Result:
    """The figures one test recorded, with where they came from and how they compared.

    `test_id` (the test's name with its parameters) keys the baseline file; `nodeid` and
    `workload` key the journal. `outputs` are the greedy outputs the losslessness guard
    compares (None when not greedy). `details` holds what reports show but nothing decides on
    (the workload's full measurement, the server's own figures, client/server disagreements).
    """

    test_id: str
    nodeid: str
    case: MatrixCase | None = None
    workload: str | None = None
    metrics: tuple[MetricValue, ...] = ()
    comparisons: tuple[Comparison, ...] = ()
    time: float = 0.0
    details: Mapping[str, Any] = field(default_factory=dict)
    resumed: bool = False  # read back from the journal of an interrupted run
    fingerprint: Fingerprint | None = None  # what was measured (configuration, workload, ...)
    outputs: Outputs | None = None

    @property
    def config(self) -> str:
        """The configuration's test id (`ddtree-tp1-b16`, `blackwell-ddtree-tp4-b16`)."""
        return self.case.param_id if self.case is not None else self.test_id

    @property
    def shared(self) -> Shared | None:
        """Whether another client used the server while it measured (sharing.py), else None."""
        return Shared.from_json(self.details.get("shared"))

    @property
    def verdict(self) -> str:
        """`gate.verdict_of` its comparisons; "shared" where another client shared its server,
        whose figures no comparison judges."""
        return "shared" if self.shared is not None else verdict_of(self.comparisons)

    def figure_verdicts(self) -> dict[str, str]:
        """{figure: its verdict as shown (`Comparison.shown_verdict`)} of the compared figures."""
        return {c.metric: c.shown_verdict for c in self.comparisons}

    def metric(self, name: str) -> MetricValue | None:
        return next((m for m in self.metrics if m.name == name), None)

    def values(self) -> dict[str, float]:
        return {m.name: m.value for m in self.metrics}

    def compared(self, comparisons: tuple[Comparison, ...]) -> Result:
        return replace(self, comparisons=tuple(comparisons))

    def to_json(self) -> dict[str, Any]:
        case = self.case
        return {
            "test_id": self.test_id,
            "nodeid": self.nodeid,
            "config": self.config if case is not None else None,
            "spec": case.spec_id if case is not None else None,
            "family": case.family if case is not None else None,
            "method": case.method if case is not None else None,
            "tp": case.tp if case is not None else None,
            "budget": case.budget if case is not None else None,
            "workload": self.workload,
            "metrics": {m.name: m.to_json() for m in self.metrics},
            "comparisons": [c.to_json() for c in self.comparisons],
            "time": self.time,
            "details": dict(self.details),
            "fingerprint": self.fingerprint.to_json() if self.fingerprint is not None else None,
            "outputs": None if self.outputs is None else self.outputs.to_json(),
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], *, resumed: bool = False) -> Result:
        test_id = str(obj["test_id"])
        workload = obj.get("workload")
        if workload is not None and not isinstance(workload, str):  # else a report's cell or a dict key fails later
            raise TypeError(f"workload {workload!r} is not a workload's name")
        case = None
        if obj.get("method") is not None:
            case = MatrixCase(str(obj.get("family") or "cpu"), str(obj["method"]), int(obj["tp"]),
                              None if obj.get("budget") is None else int(obj["budget"]))
        metrics = tuple(MetricValue.from_json(name, m) for name, m in (obj.get("metrics") or {}).items())
        # an older comparison counted only its samples: its figure says the requests behind them
        requests = {m.name: m.samples for m in metrics}
        return cls(
            test_id=test_id,
            nodeid=str(obj.get("nodeid") or test_id),
            case=case,
            workload=workload,
            metrics=metrics,
            comparisons=tuple(Comparison.from_json(test_id, c, requests.get(c["metric"], 0))
                              for c in obj.get("comparisons", ())),
            time=float(obj.get("time", 0.0)),
            details=dict(obj.get("details") or {}),
            resumed=resumed,
            fingerprint=Fingerprint.from_json(obj.get("fingerprint")),
            outputs=Outputs.from_json(obj.get("outputs")),
        )
