set -u
python3 -m pip install -q --no-deps --no-build-isolation -e . > $OUT/pip.log 2>&1 || tail -5 $OUT/pip.log
cd scripts/engine_compile_probe
export PYTHONDONTWRITEBYTECODE=1
pair() {  # $1 label: a save run on a fresh Triton cache, then a gate run on the same cache
  export TRITON_CACHE_DIR=/tmp/tc-$1; rm -rf $TRITON_CACHE_DIR baselines .specdec .benchmarks
  echo "== $1 save (fresh Triton cache)"; timeout 170 python -m pytest -p no:randomly -q --specdec-save-baseline --specdec-report=$OUT/$1-save 2>&1 | tail -16
  python cache_count.py $TRITON_CACHE_DIR
  echo "== $1 gate (same cache)"; timeout 120 python -m pytest -p no:randomly -q --specdec-compare-fail="output_tok_s:50%,accept_length:1%" --specdec-report=$OUT/$1-gate 2>&1 | tail -16
  python cache_count.py $TRITON_CACHE_DIR
}
pair warmed
grep -rh "Warmed the decode" .specdec 2>/dev/null | head -4
echo "== lengths (fresh cache)"; export TRITON_CACHE_DIR=/tmp/tc-len; rm -rf $TRITON_CACHE_DIR
timeout 120 python engine_lengths.py
python cache_count.py $TRITON_CACHE_DIR; grep "Warmed" $OUT/engine-8b.log
echo "== lengths, 27b-hybrid-layers (fresh cache)"; export TRITON_CACHE_DIR=/tmp/tc-hyb; rm -rf $TRITON_CACHE_DIR
timeout 150 python engine_lengths.py 27b-hybrid-layers
python cache_count.py $TRITON_CACHE_DIR; grep "Warmed" $OUT/engine-27b-hybrid-layers.log
cp pyproject.toml /tmp/pp.bak; sed -i 's/model_preset = "8b-layer"/model_preset = "8b-layer"\nextra_args = ["--warmup-batch-sizes", "none"]/' pyproject.toml
pair unwarmed
cp /tmp/pp.bak pyproject.toml
