set -u
python3 -m pip install -q --no-deps --no-build-isolation -e . > $OUT/pip.log 2>&1 || tail -5 $OUT/pip.log
cd scripts/engine_compile_probe
export PYTHONDONTWRITEBYTECODE=1
export TRITON_CACHE_DIR=/tmp/tc-save; rm -rf $TRITON_CACHE_DIR baselines .specdec .benchmarks
echo "== save (fresh Triton cache)"; timeout 200 python -m pytest -p no:randomly -q --specdec-save-baseline --specdec-report=$OUT/save 2>&1 | tail -12
python cache_count.py $TRITON_CACHE_DIR
echo "== gate (same cache)"; timeout 120 python -m pytest -p no:randomly -q --specdec-compare-fail="output_tok_s:50%,accept_length:1%" --specdec-report=$OUT/gate 2>&1 | tail -12
python cache_count.py $TRITON_CACHE_DIR
echo "== lengths (fresh cache)"; export TRITON_CACHE_DIR=/tmp/tc-len; rm -rf $TRITON_CACHE_DIR
timeout 200 python engine_lengths.py
python cache_count.py $TRITON_CACHE_DIR
grep -h "output_tok_s\|tok/s" $OUT/save/report.md 2>/dev/null | head -8
