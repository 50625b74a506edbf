# The README's jobs. Each sets up its own environment first (scripts/setup-venv.sh).
PY := .venv/bin/python

.PHONY: venv bench test wheel-check launch-check sglang-check lowest-check newest-check

venv:
	bash scripts/setup-venv.sh

# The benchmark suite on the backend this machine supports (the embedded engine without a GPU),
# ending with the summary table; results and plots land in .specdec/report. The shipped
# baselines/cpu.json is another machine's: only its deterministic figures are gated here
# (BENCH_GATE= gates everything [tool.specdec.tolerances] names).
BENCH_GATE ?= output_tok_s:off,tpot_ms:off,ttft_ms:off
bench: venv
	$(PY) -m pytest tests/bench --specdec-report=.specdec/report --specdec-compare-fail="$(BENCH_GATE)"

# The test suite: plugin, kernels (Triton's interpreter on a CPU), engine, contracts; two xdist
# workers, since many tests wait on the engine processes they start; the 30 slowest tests are
# listed at the end, where CI time goes.
# The package's bytecode is compiled first: each engine and pytest run the suite starts imports
# it, and where PYTHONDONTWRITEBYTECODE is set each of them would compile it again. The suite runs
# with bytecode writing allowed: pytest rewrites the asserts of the package's modules in the
# repository's runs (again in each in-process pytester run, which drops what it imported) and caches
# the result only where bytecode may be written.
test: venv
	$(PY) -m compileall -q pytest_specdec kernels > /dev/null
	env -u PYTHONDONTWRITEBYTECODE TRITON_INTERPRET=1 $(PY) -m pytest -n 2 --durations=30 tests/unit tests/kernels tests/engine

# The direct launch's CPU tests under the GPU image's Triton (3.6: a C launcher per kernel), beside
# `make test`'s run under the venv's (one C launch for every kernel since 3.7); and the sm_120
# compile check of the hybrid kernels under it (3.6 allocates registers differently: it found spills 3.9 did not).
launch-check: venv
	bash scripts/launch-check-triton.sh 3.6.0
	env -u TRITON_INTERPRET PYTHONPATH=$$(bash scripts/install-triton.sh 3.6.0) $(PY) -m pytest -q -p no:cacheprovider \
	  tests/kernels/test_compile_check.py -k test_hybrid_kernels_fit_sm120

# The bench's SGLang column on SGLang's own kernel, as scripts/pack-sglang.sh packs it for machines
# without SGLang (the releases below: its kernel library's layout and the older one), in Triton's
# interpreter: the batch laid out as SGLang's backend does.
SGLANG_VERSIONS ?= 0.5.23 0.5.15
sglang-check: venv
	for version in $(SGLANG_VERSIONS); do \
	  bash scripts/pack-sglang.sh $$version > /dev/null && \
	  PYTHONPATH=.sglang-carry/sglang-$$version $(PY) -c "from specdec_kernels.sglang_tree_path import \
	    sglang_tree_path_unusable as why; import sys; sys.exit(why())" && \
	  TRITON_INTERPRET=1 PYTHONPATH=.sglang-carry/sglang-$$version $(PY) -m pytest -q -p no:cacheprovider \
	    tests/kernels/test_sglang_tree_path.py || exit 1; \
	done

# The package as users get it: sdist and wheel, the wheel in a fresh venv (scripts/check-wheel.sh).
wheel-check: venv
	bash scripts/check-wheel.sh

# The unit tests that need no torch on Python 3.10 with each dependency at the lowest version
# pyproject.toml declares, in .venv-lowest (scripts/lowest-check.sh): the venv's newest releases
# would hide an API a lower bound lacks.
lowest-check:
	bash scripts/lowest-check.sh $(LOWEST_ARGS)

# The same tests at the other end: the newest Python (SPECDEC_NEWEST_PYTHON, default python3.13)
# with the newest release of each of those dependencies, in .venv-newest, made again each day.
# Not in CI: about five minutes in one process, the venv's making included.
newest-check:
	SPECDEC_CHECK_END=newest bash scripts/lowest-check.sh $(NEWEST_ARGS)
