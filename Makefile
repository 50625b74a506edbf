# The two jobs of the README. Each sets up its own environment first (scripts/setup-venv.sh).
PY := .venv/bin/python

.PHONY: venv bench test

venv:
	bash scripts/setup-venv.sh

# The benchmark suite on the backend this machine supports (the embedded engine without a GPU),
# ending with the summary table; results and plots land in .specdec/report.
bench: venv
	$(PY) -m pytest tests/bench --specdec-report .specdec/report

# The test suite: plugin, kernels (Triton's interpreter on a CPU), engine, contracts.
test: venv
	TRITON_INTERPRET=1 $(PY) -m pytest tests/unit tests/kernels tests/engine
