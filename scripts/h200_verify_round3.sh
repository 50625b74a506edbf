#!/usr/bin/env bash
# Round 3 of the verify-kernel work on a lent H200 (kernels/PERF.md): one call, everything in
# sequence on one GPU. Stage "diag": L2-flush method check, plain-read floor, tile sweep, ncu.
# Stage "sweep": the tile sweep, the merge under ncu, the kernel suite. Stage "full": the whole grid with SDPA and FlexAttention. Stage "tests": the kernel
# suite and the GPU bench tests. Results land under $OUT.
set -u
stage=${1:?usage: scripts/h200_verify_round3.sh diag|sweep|full|tests|final}
OUT=${OUT:-/tmp/out}
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/pip.log" 2>&1 || tail -5 "$OUT/pip.log"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
case $stage in
diag)
  S=B8-T9-H32/8/128-L8192,B1-T9-H32/8/128-L32768,B32-T9-H32/8/128-L1024,B8-T16-H32/8/128-L8192
  S=$S,B8-T17-H32/8/128-L8192,B32-T9-H32/8/128-L32768,B8-T9-H32/8/128-L32768,B32-T9-H32/8/128-L8192
  for f in zero read; do
    timeout 120 python3 -m specdec_kernels.bench --no-sdpa --flex none --shapes "$S" --l2-flush $f \
      --json "$OUT/flush_$f.json" --markdown "$OUT/flush_$f.md" >"$OUT/flush_$f.log" 2>&1
    echo "== flush $f rc=$?"; grep -E '^\{"date' "$OUT/flush_$f.log" | cut -c1-400
    grep -E '^\| B' "$OUT/flush_$f.log" | cut -d'|' -f2,5,9,11
  done
  timeout 200 python3 -m specdec_kernels.bench --sweep-only --json "$OUT/sweep.json" \
    --markdown "$OUT/sweep.md" >"$OUT/sweep.log" 2>&1
  echo "== sweep rc=$?"; grep -E '^\|' "$OUT/sweep.log"
  for s in B8-T9-H32/8/128-L8192 B32-T9-H32/8/128-L1024; do
    tag=$(echo "$s" | tr '/' '_')
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
    timeout 150 "$NCU" --clock-control none -k regex:tree_verify --launch-count 2 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
      --section LaunchStats --section WarpStateStats --section SchedulerStats \
      python3 -m specdec_kernels.bench --no-sdpa --flex none --no-read-floor --shapes "$s" \
      >"$OUT/ncu_$tag.txt" 2>&1
    echo "== ncu $s rc=$?"
    grep -E "^  [a-z_]+tree_verify|Duration|DRAM Throughput|Memory Throughput|L2 Hit|Achieved Occupancy|Registers Per|Block Limit|Theoretical Occ|Warp Cycles Per Issued|Issue Slots Busy|No Eligible" \
      "$OUT/ncu_$tag.txt" | head -40
  done
  ;;
final)
  timeout 100 python3 -m specdec_kernels.bench --sweep-only --json "$OUT/sweep.json" \
    --markdown "$OUT/sweep.md" >"$OUT/sweep.log" 2>&1
  echo "== sweep rc=$?"; grep -E '^\|' "$OUT/sweep.log"
  timeout 300 python3 -m specdec_kernels.bench --max-seconds 250 --json "$OUT/bench.json" \
    --markdown "$OUT/bench.md" >"$OUT/bench.log" 2>&1
  echo "== bench rc=$?"; grep -E '^\{"date' "$OUT/bench.log" | cut -c1-400; tail -2 "$OUT/bench.log" | cut -c1-400
  grep -E '^\| B1-' "$OUT/bench.log" | cut -d'|' -f2,3,5,9,10
  ;;
sweep)
  timeout 200 python3 -m specdec_kernels.bench --sweep-only --json "$OUT/sweep.json" \
    --markdown "$OUT/sweep.md" >"$OUT/sweep.log" 2>&1
  echo "== sweep rc=$?"; grep -E '^\{"date' "$OUT/sweep.log" | cut -c1-300; grep -E '^\|' "$OUT/sweep.log"
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
  timeout 100 "$NCU" --clock-control none -k regex:tree_verify --launch-count 2 --section SpeedOfLight \
    --section LaunchStats python3 -m specdec_kernels.bench --no-sdpa --flex none --no-read-floor \
    --shapes B8-T9-H32/8/128-L8192 >"$OUT/ncu_merge.txt" 2>&1
  echo "== ncu rc=$?"; grep -E "^  [a-z_]+tree_verify|Duration|Registers Per" "$OUT/ncu_merge.txt"
  timeout 280 python3 -m pytest tests/kernels -q -x -n 14 -p no:cacheprovider >"$OUT/tests.log" 2>&1
  echo "== kernel tests rc=$?"; tail -5 "$OUT/tests.log"
  ;;
full)
  timeout 540 python3 -m specdec_kernels.bench --max-seconds 470 --json "$OUT/bench.json" \
    --markdown "$OUT/bench.md" >"$OUT/bench.log" 2>&1
  echo "== bench rc=$?"; grep -E '^\{"date' "$OUT/bench.log" | cut -c1-400; tail -4 "$OUT/bench.log" | cut -c1-600
  grep -E '^\| B' "$OUT/bench.log" | cut -d'|' -f2,5,9,10,11,14,15,17 | head -100
  ;;
tests)
  timeout 420 python3 -m pytest tests/kernels -q -x -n 14 -p no:cacheprovider >"$OUT/tests.log" 2>&1
  echo "== kernel tests rc=$?"; tail -5 "$OUT/tests.log"
  timeout 150 python3 -m pytest tests/bench/test_verify_kernel.py -rA -p no:cacheprovider -p no:xdist \
    >"$OUT/bench_tests.log" 2>&1
  echo "== bench tests rc=$?"; grep -E "PASSED|FAILED|XFAIL|ERROR|passed|failed" "$OUT/bench_tests.log" | cut -c1-300 | tail -20
  ;;
esac
