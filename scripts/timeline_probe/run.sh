# Probe only, on the H200: bash scripts/timeline_probe/run.sh OUT
set -u
OUT=$1
python3 -m pip install -q --no-deps --no-build-isolation -e . >$OUT/pip.log 2>&1
for v in ${VARIANTS:-base}; do
  git checkout -q kernels/
  python3 scripts/timeline_probe/instrument.py $v
  timeout ${PROBE_SECONDS:-150} python3 scripts/timeline_probe/probe.py $OUT "${v// /+}" 2>&1 | grep -v Warn
done
git checkout -q kernels/
