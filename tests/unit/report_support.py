"""Report rows as a test builds them: from a `Result`, as the plugin does."""

from __future__ import annotations

from pytest_specdec.configuration import MatrixCase
from pytest_specdec.metrics import MetricValue
from pytest_specdec.report import row_from_result
from pytest_specdec.result import Result


def row(method, tp, budget, tok_s, accept=None, comparisons=(), workload="chat", family="cpu",
        spread=0.0, ttft=12.34, tpot=1.5):
    metrics = [MetricValue("output_tok_s", tok_s, "higher", spread),
               MetricValue("ttft_ms", ttft, "lower"), MetricValue("tpot_ms", tpot, "lower")]
    if accept is not None:
        metrics.append(MetricValue("accept_length", accept, "higher", spread / 100))
    case = MatrixCase(family, method, tp, budget)
    test_id = f"test_generation[{case.param_id}-{workload}]"
    return row_from_result(Result(test_id, f"t.py::{test_id}", case, workload, tuple(metrics),
                                  tuple(comparisons)))
