#!/usr/bin/env bash
# The verify-kernel work on a lent H200 (kernels/PERF.md; rounds 3 and 4 ran the scripts of
# their round, in git at 42d2dbf): one call, everything in sequence on one GPU. Stages:
#   sweep  the variants of `bench.sweep_plan` side by side, after the descriptor, tail,
#          lazy-rescale, folded-scale and Gluon correctness tests on the GPU
#   check  the sweep, then the kernel suite and the GPU bench tests
#   final  the issue's whole grid with SDPA and FlexAttention (alone: it takes most of a call)
#   suite  the kernel suite and the GPU bench tests
#   commit accept + commit alone (fused and separate), their kernel tests, the GPU bench tests
#   pp     the ping-pong kernel's GPU tests alone (one process, killed if it hangs), then, if
#          they pass, the sweep
#   r7     the split, merge, Gluon and accept + commit GPU tests (killed if they hang), then, if
#          they pass, the sweep
#   sweeponly  the sweep alone
#   suitesweep  the kernel suite, then, if it passes, the sweep
#   r9     the split-query-head, accept and commit GPU tests (killed if they hang), then, if they
#          pass, the sweep and round 9's accept + commit diagnostics
#   r10    the ping-pong kernel's GPU tests and the tail's rescale test (killed if they hang), then,
#          if they pass, round 10's MMA probe (scripts/round10_mma_probe.py)
#   r11    round 11's diagnostics (scripts/round11_diag.py: kernel trace, graph overhead, forced
#          splits, per-program start and end stamps)
#   r12    round 12's diagnostics (scripts/round12_diag.py: round 11's trace and stamps on the
#          compute-bound shapes at 1k and 8k caches)
#   final13  the kernel suite, then the whole grid (final) on this checkout if it passed, else on
#          the copy under ab/prev; then the GPU bench tests
#   hd64   the kernel suite, then the grid at head dim 64 on this checkout and on ab/prev
#   r16    round 16's merge probe (scripts/round16_merge_probe.py), then the kernel suite and
#          the GPU bench tests
#   ab     the Gluon kernels' GPU tests (killed if they hang), then, if they pass, the A/B
#          timing of scripts/round12_ab.py: this checkout against the copy under ab/prev and
#          any other copy under ab/, alternated twice (and, with AB_RELIEF=N, this checkout with
#          N relief tiles); with AB_TEST_COPIES=1, the persistent GPU tests of each other copy too,
#          and the timing whatever the tests gave
# Results land under $OUT.
set -u
stage=${1:?usage: scripts/h200_verify.sh sweep|check|final|final13|suite|commit|pp|r7|sweeponly|suitesweep|r9|r10|r11|r12|ab|hd64|r16}
OUT=${OUT:-/tmp/out}
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/pip.log" 2>&1 || tail -5 "$OUT/pip.log"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader

sweep() {
  timeout 330 python3 -m specdec_kernels.bench --sweep-only --max-seconds 290 --json "$OUT/sweep.json" \
    --markdown "$OUT/sweep.md" >"$OUT/sweep.log" 2>&1
  echo "== sweep rc=$?"; grep -E '^\{"date' "$OUT/sweep.log" | cut -c1-300; grep -E '^\|' "$OUT/sweep.log"
  grep -E '"error"' "$OUT/sweep.log" | cut -c1-300 | head -5
}

kernel_tests() {
  timeout 330 python3 -m pytest tests/kernels -q -x -n 14 -p no:cacheprovider >"$OUT/tests.log" 2>&1
  rc=$?; echo "== kernel tests rc=$rc"; tail -3 "$OUT/tests.log" | cut -c1-300
  grep -E "^(FAILED|ERROR)|^E " "$OUT/tests.log" | cut -c1-300 | head -10
  return $rc
}

suite() {
  kernel_tests
  timeout 150 python3 -m pytest tests/bench/test_verify_kernel.py -rA -p no:cacheprovider -p no:xdist \
    >"$OUT/bench_tests.log" 2>&1
  echo "== bench tests rc=$?"
  grep -E "PASSED|FAILED|XFAIL|ERROR|passed|failed" "$OUT/bench_tests.log" | cut -c1-300 | tail -12
  grep -E "^E +AssertionError" "$OUT/bench_tests.log" | cut -c1-300
}

case $stage in
sweep)
  timeout 120 python3 -m pytest tests/kernels/test_tree_verify.py -q -p no:cacheprovider -n 8 \
    -k "descriptor or tail or ragged or lazy or fold or gluon" >"$OUT/gpu_tests.log" 2>&1
  echo "== descriptor/tail/lazy/fold/gluon tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_tests.log" | cut -c1-400 | tail -20
  sweep
  ;;
check)
  sweep; suite
  ;;
final13)
  if kernel_tests; then
    bash "$0" final
  else
    echo "== the suite failed: the grid on ab/prev"; PYTHONPATH=ab/prev bash "$0" final
  fi
  timeout 100 python3 -m pytest tests/bench/test_verify_kernel.py -rA -p no:cacheprovider -p no:xdist \
    >"$OUT/bench_tests.log" 2>&1
  echo "== bench tests rc=$?"
  grep -E "PASSED|FAILED|XFAIL|ERROR|passed|failed" "$OUT/bench_tests.log" | cut -c1-300 | tail -12
  ;;
hd64)
  # round 15: head dim 64 on the Gluon tiers; the kernel suite, then the grid at D = 64 on this
  # checkout and on the copy under ab/prev (the Triton kernel's tiles), one after the other
  if kernel_tests; then
    for tag in new prev; do
      if [ $tag = prev ]; then export PYTHONPATH=ab/prev; fi
      timeout 200 python3 -m specdec_kernels.bench --head-dim 64 --max-seconds 160 --json "$OUT/bench64_$tag.json" \
        --markdown "$OUT/bench64_$tag.md" >"$OUT/bench64_$tag.log" 2>&1
      echo "== bench64 $tag rc=$? rows $(grep -cE '^\| B' "$OUT/bench64_$tag.log")"
    done
  fi
  ;;
final)
  timeout 360 python3 -m specdec_kernels.bench --max-seconds 300 --json "$OUT/bench.json" \
    --markdown "$OUT/bench.md" >"$OUT/bench.log" 2>&1
  echo "== bench rc=$?"; grep -E '^\{"date' "$OUT/bench.log" | cut -c1-400; tail -2 "$OUT/bench.log" | cut -c1-400
  echo "table rows: $(grep -cE '^\| B' "$OUT/bench.log")"
  ;;
suite)
  suite
  ;;
r16)
  timeout 200 python3 scripts/round16_merge_probe.py >"$OUT/merge_probe.log" 2>&1
  echo "== merge probe rc=$?"; cut -c1-300 "$OUT/merge_probe.log" | tail -30
  suite
  ;;
pp)
  timeout -s KILL 150 python3 -m pytest tests/kernels/test_tree_verify.py -q -x -p no:cacheprovider -p no:xdist \
    -k "gluon_kernel_matches and pingpong" >"$OUT/pp_tests.log" 2>&1
  rc=$?; echo "== ping-pong tests rc=$rc"; grep -E "^(FAILED|ERROR)|passed|failed|^E " "$OUT/pp_tests.log" | cut -c1-300 | head -20
  if [ $rc -eq 0 ]; then sweep; fi
  ;;
r7)
  timeout -s KILL 170 python3 -m pytest tests/kernels/test_tree_verify.py tests/kernels/test_accept_commit.py \
    tests/kernels/test_kv_commit.py tests/kernels/test_verify_step.py -q -x -p no:cacheprovider -n 8 \
    -k "gluon or pingpong or split or merge or tail or commit or step" >"$OUT/r7_tests.log" 2>&1
  rc=$?; echo "== split/merge/Gluon/commit tests rc=$rc"
  grep -E "^(FAILED|ERROR)|passed|failed|^E " "$OUT/r7_tests.log" | cut -c1-300 | head -20
  if [ $rc -eq 0 ]; then
    sweep
  fi
  ;;
sweeponly)
  sweep
  ;;
suitesweep)
  if kernel_tests; then sweep; fi
  ;;
commit)
  timeout 120 python3 -m pytest tests/kernels/test_accept_commit.py tests/kernels/test_kv_commit.py \
    tests/kernels/test_tree_accept.py tests/kernels/test_verify_step.py -q -p no:cacheprovider -n 8 \
    >"$OUT/commit_tests.log" 2>&1
  echo "== accept/commit kernel tests rc=$?"; tail -2 "$OUT/commit_tests.log"
  for i in 1 2 3; do
    timeout 60 python3 -c "import json; from specdec_kernels.bench import run_accept_commit as r; print(json.dumps(r()))"
  done
  timeout 150 python3 -m pytest tests/bench/test_verify_kernel.py -rA -p no:cacheprovider -p no:xdist \
    >"$OUT/bench_tests.log" 2>&1
  echo "== bench tests rc=$?"
  grep -E "PASSED|FAILED|XFAIL|ERROR|passed|failed" "$OUT/bench_tests.log" | cut -c1-300 | tail -12
  grep -E "^E +AssertionError" "$OUT/bench_tests.log" | cut -c1-300
  ;;
r9)
  timeout -s KILL 170 python3 -m pytest tests/kernels/test_tree_verify.py tests/kernels/test_accept_commit.py \
    tests/kernels/test_kv_commit.py tests/kernels/test_tree_accept.py tests/kernels/test_verify_step.py -q -x \
    -p no:cacheprovider -n 8 -k "hsplit or split_query or accept or commit or walk or step" >"$OUT/r9_tests.log" 2>&1
  rc=$?; echo "== split-heads/accept/commit tests rc=$rc"
  grep -E "^(FAILED|ERROR)|passed|failed|^E " "$OUT/r9_tests.log" | cut -c1-300 | head -20
  if [ $rc -eq 0 ]; then
    sweep
    timeout 120 python3 scripts/round9_diag.py commit >"$OUT/diag.log" 2>&1
    echo "== diag rc=$?"; cut -c1-600 "$OUT/diag.log" | tail -8
  fi
  ;;
r10)
  timeout -s KILL 170 python3 -m pytest tests/kernels/test_tree_verify.py -q -x -p no:cacheprovider -n 8 \
    -k "(gluon_kernel_matches and pingpong) or tail_rescales" >"$OUT/r10_tests.log" 2>&1
  rc=$?; echo "== ping-pong and tail-rescale tests rc=$rc"
  grep -E "^(FAILED|ERROR)|passed|failed|^E " "$OUT/r10_tests.log" | cut -c1-300 | head -20
  if [ $rc -eq 0 ]; then
    timeout 120 python3 scripts/round10_mma_probe.py 4096 >"$OUT/probe.log" 2>&1
    echo "== probe rc=$?"; cut -c1-300 "$OUT/probe.log" | tail -10
  fi
  ;;
r11)
  timeout 500 python3 scripts/round11_diag.py "$OUT" ${2:-graphs,trace,stamps} >"$OUT/diag.log" 2>&1
  echo "== diag rc=$?"; cut -c1-2000 "$OUT/diag.log" | tail -12
  ;;
ab)
  if [ ! -d ab/prev/specdec_kernels ]; then
    echo "ab/prev/specdec_kernels is missing: put the kernels to compare against there (scripts/round12_ab.py)"
    exit 2
  fi
  rc=0
  if [ -z "${AB_SKIP_TESTS:-}" ]; then  # set where the same code passed them in an earlier call
    timeout -s KILL 240 python3 -m pytest tests/kernels/test_tree_verify.py -q -x -p no:cacheprovider -n 8 \
      -k "gluon_kernel_matches or tail_rescales or shorter_tree_split or split_query_heads_reads" \
      >"$OUT/ab_tests.log" 2>&1
    rc=$?
  fi
  if [ -z "${AB_SKIP_TESTS:-}" ]; then
    echo "== Gluon tests rc=$rc"
    grep -E "^(FAILED|ERROR)|passed|failed|^E " "$OUT/ab_tests.log" | cut -c1-300 | head -20
  fi
  if [ -n "${AB_TEST_COPIES:-}" ]; then
    # round 15: the persistent GPU tests of each copy under ab/ but prev too (no -x: every
    # failure listed), and the timing whatever they gave
    for dir in ab/*/; do
      tag=$(basename "$dir")
      if [ "$tag" != prev ] && [ -d "$dir/specdec_kernels" ]; then
        PYTHONPATH="$dir" timeout -s KILL 150 python3 -m pytest tests/kernels/test_tree_verify.py -q \
          -p no:cacheprovider -n 8 -k "persistent" >"$OUT/ab_tests_$tag.log" 2>&1
        echo "== $tag persistent tests rc=$?"
        grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/ab_tests_$tag.log" | cut -c1-200 | head -12
      fi
    done
    rc=0
  fi
  if [ $rc -eq 0 ]; then
    for round in 1 2; do
      PYTHONPATH=ab/prev timeout 120 python3 scripts/round12_ab.py prev >>"$OUT/ab.log" 2>&1
      timeout 120 python3 scripts/round12_ab.py new >>"$OUT/ab.log" 2>&1
      # any other copy under ab/ (round 13: diagnostic variants), each in its own process
      for dir in ab/*/; do
        tag=$(basename "$dir")
        if [ "$tag" != prev ] && [ -d "$dir/specdec_kernels" ]; then
          PYTHONPATH="$dir" timeout 120 python3 scripts/round12_ab.py "$tag" >>"$OUT/ab.log" 2>&1
        fi
      done
      if [ -n "${AB_RELIEF:-}" ]; then
        timeout 120 python3 scripts/round12_ab.py "new-relief$AB_RELIEF" "$AB_RELIEF" >>"$OUT/ab.log" 2>&1
      fi
    done
    echo "== ab done"; grep -E '^\{' "$OUT/ab.log" | cut -c1-200
  fi
  ;;
r12)
  timeout 500 python3 scripts/round12_diag.py "$OUT" >"$OUT/diag.log" 2>&1
  echo "== diag rc=$?"; cut -c1-2000 "$OUT/diag.log" | tail -12
  ;;
esac
