"""Result: the one record a test's figures travel in, and its JSON round trip."""

from __future__ import annotations

import json

from pytest_specdec.baselines import BaselineEntry
from pytest_specdec.gate import compare_metric, parse_tolerances
from pytest_specdec.configuration import MatrixCase
from pytest_specdec.metrics import MetricValue
from pytest_specdec.result import Result


def sample() -> Result:
    tolerances = parse_tolerances("output_tok_s:5%,accept_length:0.1")
    tok = MetricValue("output_tok_s", 812.4, "higher", spread=3.5, samples=8)
    accept = MetricValue("accept_length", 3.21, "higher", samples=8, deterministic=True)
    test_id = "test_generation[blackwell-ddtree-tp4-b16-chat]"
    comparisons = (
        compare_metric(test_id, tok, BaselineEntry(901.0, "higher"), tolerances["output_tok_s"]),
        compare_metric(test_id, accept, None, tolerances["accept_length"]),
    )
    return Result(test_id, f"tests/bench/test_generation.py::{test_id}",
                  MatrixCase("blackwell", "ddtree", 4, 16), "chat", (tok, accept), comparisons,
                  time=1.5, details={"measurement": {"num_requests": 8}})


def test_json_round_trip_keeps_every_field():
    result = sample()
    back = Result.from_json(json.loads(json.dumps(result.to_json())))
    assert back == result
    assert back.comparisons[0].line() == "output_tok_s 812.4 < baseline 901.0 -5% (-9.8%)"
    assert back.verdict == "regression" and back.config == "blackwell-ddtree-tp4-b16"


def test_json_names_the_configuration_for_readers_of_the_journal():
    doc = sample().to_json()
    assert (doc["config"], doc["spec"], doc["method"], doc["tp"], doc["budget"]) == \
        ("blackwell-ddtree-tp4-b16", "ddtree-tp4-b16", "ddtree", 4, 16)
    assert doc["metrics"]["output_tok_s"]["value"] == 812.4
    assert doc["comparisons"][0]["line"].startswith("output_tok_s 812.4 < baseline")


def test_a_test_outside_the_matrix_has_no_configuration():
    plain = Result("test_kernel", "t.py::test_kernel", metrics=(MetricValue("verify_us", 3.0, "lower"),))
    back = Result.from_json(plain.to_json(), resumed=True)
    assert back.case is None and back.config == "test_kernel" and back.resumed
    assert back.metric("verify_us").value == 3.0 and back.metric("missing") is None
