#!/usr/bin/env bash
# Round 4 of the verify-kernel work on a lent H200 (kernels/PERF.md): one call, everything in
# sequence on one GPU. Stage "sweep": the variants of `bench.sweep_plan` side by side, plus
# the descriptor, tail and lazy-rescale correctness tests on the GPU. Stage "full": the whole grid with
# SDPA and FlexAttention. Stage "tests": the kernel suite and the GPU bench tests. Stage
# "check": the sweep, then "tests".
# Results land under $OUT.
set -u
stage=${1:?usage: scripts/h200_verify_round4.sh sweep|full|tests|check}
OUT=${OUT:-/tmp/out}
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/pip.log" 2>&1 || tail -5 "$OUT/pip.log"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
case $stage in
sweep)
  timeout 120 python3 -m pytest tests/kernels/test_tree_verify.py -q -p no:cacheprovider -n 8 \
    -k "descriptor or tail or ragged or lazy" >"$OUT/gpu_tests.log" 2>&1
  echo "== descriptor/tail tests rc=$?"; tail -3 "$OUT/gpu_tests.log"
  timeout 330 python3 -m specdec_kernels.bench --sweep-only --max-seconds 300 --json "$OUT/sweep.json" \
    --markdown "$OUT/sweep.md" >"$OUT/sweep.log" 2>&1
  echo "== sweep rc=$?"; grep -E '^\{"date' "$OUT/sweep.log" | cut -c1-300; grep -E '^\|' "$OUT/sweep.log"
  grep -E '"error"' "$OUT/sweep.log" | cut -c1-300 | head -5
  ;;
full)
  timeout 540 python3 -m specdec_kernels.bench --max-seconds 470 --json "$OUT/bench.json" \
    --markdown "$OUT/bench.md" >"$OUT/bench.log" 2>&1
  echo "== bench rc=$?"; grep -E '^\{"date' "$OUT/bench.log" | cut -c1-400; tail -4 "$OUT/bench.log" | cut -c1-600
  grep -E '^\| B' "$OUT/bench.log" | cut -d'|' -f2,3,5,9,10,11,14,15,17 | head -100
  ;;
check)
  timeout 150 python3 -m specdec_kernels.bench --sweep-only --max-seconds 120 --json "$OUT/sweep.json" \
    --markdown "$OUT/sweep.md" >"$OUT/sweep.log" 2>&1
  echo "== sweep rc=$?"; grep -E '^\{"date' "$OUT/sweep.log" | cut -c1-300; grep -E '^\|' "$OUT/sweep.log"
  ;&
tests)
  timeout 330 python3 -m pytest tests/kernels -q -x -n 14 -p no:cacheprovider >"$OUT/tests.log" 2>&1
  echo "== kernel tests rc=$?"; tail -5 "$OUT/tests.log"
  timeout 150 python3 -m pytest tests/bench/test_verify_kernel.py -rA -p no:cacheprovider -p no:xdist \
    >"$OUT/bench_tests.log" 2>&1
  echo "== bench tests rc=$?"; grep -E "PASSED|FAILED|XFAIL|ERROR|passed|failed" "$OUT/bench_tests.log" | cut -c1-300 | tail -20
  ;;
esac
