# Probe only, on the H200: bash scripts/tree_prefetch_probe/run.sh OUT  (base and prefetch, alternated twice)
set -u
OUT=$1
python3 -m pip install -q --no-deps --no-build-isolation -e . >$OUT/pip.log 2>&1
for rep in 1 2; do
  git checkout -q kernels/
  python3 scripts/tree_prefetch_probe/ab.py $OUT base 2>&1 | grep -v Warn
  python3 scripts/tree_prefetch_probe/patch.py
  python3 scripts/tree_prefetch_probe/ab.py $OUT prefetch 2>&1 | grep -v Warn
done
git checkout -q kernels/
