"""The benchmark suite: every configured (method, TP, budget) server x every configured workload.

Parametrized by pytest-specdec from `[tool.specdec]` in pyproject.toml (ids like `ddtree-tp1-b16`
for the embedded default's matrix, `blackwell-ddtree-tp4-b16` for a GPU family's). A crashed
server, zero tokens, speculation that is silently off, or a regression against the stored
baseline fails the test with the reason; the figures land in the journal, the summary table,
pytest-benchmark and, with --specdec-save-baseline, the baseline file.
"""


def test_generation(specdec_server, specdec_workload, specdec_record):
    measurement = specdec_record.run(specdec_server, specdec_workload)
    assert measurement.completion_tokens > 0
    if specdec_server.spec.is_speculative:
        assert measurement.accept_length is not None and measurement.accept_length >= 1.0
