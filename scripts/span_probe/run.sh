# Probe only, on the H200: bash scripts/span_probe/run.sh OUT  (POLICY='{"num_splits": 8}' etc. per run)
set -u
OUT=$1
python3 -m pip install -q --no-deps --no-build-isolation -e . >$OUT/pip.log 2>&1
git checkout -q kernels/
python3 scripts/span_probe/instrument.py
timeout ${PROBE_SECONDS:-200} python3 scripts/span_probe/probe.py $OUT ${LABEL:-base} 2>&1 | grep -v Warn
git checkout -q kernels/
