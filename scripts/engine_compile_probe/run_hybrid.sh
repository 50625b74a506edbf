# The same save/gate pairs on the 27b-hybrid-layers preset (ar, ddtree b8/b16), warmed (default) then
# with --warmup-batch-sizes none, each on a fresh Triton cache; from this folder, OUT set.
export PYTHONDONTWRITEBYTECODE=1
sed -i 's/model_preset = "8b-layer"/model_preset = "27b-hybrid-layers"/; s/methods = \["ar", "dflash", "ddtree"\]/methods = ["ar", "ddtree"]/' pyproject.toml
for mode in warmed unwarmed; do
  export TRITON_CACHE_DIR=/tmp/tc-h-$mode; rm -rf $TRITON_CACHE_DIR baselines .specdec .benchmarks
  if [ $mode = unwarmed ]; then sed -i 's/model_preset = "27b-hybrid-layers"/model_preset = "27b-hybrid-layers"\nextra_args = ["--warmup-batch-sizes", "none"]/' pyproject.toml; fi
  echo "== $mode"
  for r in save gate; do
    if [ $r = save ]; then A=--specdec-save-baseline; else A=--specdec-compare-fail=output_tok_s:50%,accept_length:1%; fi
    timeout 150 python -m pytest -p no:randomly -q $A --specdec-report=$OUT/$mode-$r 2>&1 | sed -n '/specdec summary/,$p' | head -10
  done
done
git checkout pyproject.toml
