#!/usr/bin/env bash
# device driver for the A/B (not part of the repository)
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
python3 -c "import triton, torch; print(triton.__version__, torch.__version__)"
T0=$(date +%s)
# phase 1 (compile, correctness): warm both versions and run GPU tests beside them
(PYTHONPATH=ab/a timeout 200 python3 ab/warm.py 5 >"$OUT/warm_a.log" 2>&1; echo "warm a rc=$?" >>"$OUT/warm_a.log") &
(PYTHONPATH=ab/b timeout 200 python3 ab/warm.py 5 >"$OUT/warm_b.log" 2>&1; echo "warm b rc=$?" >>"$OUT/warm_b.log") &
PYTHONPATH=ab/a timeout 200 python3 -m pytest ab/tests_a/test_kv_commit.py ab/tests_a/test_accept_commit.py ab/tests_a/test_recurrent_commit.py ab/tests_a/test_tree_accept.py -q -n 4 -p no:cacheprovider >"$OUT/tests_commit.log" 2>&1
echo "== commit tests rc=$?"; tail -2 "$OUT/tests_commit.log"; grep -E "^(FAILED|ERROR)" "$OUT/tests_commit.log" | head
PYTHONPATH=ab/b timeout 150 python3 -m pytest ab/tests_b/test_tree_verify.py ab/tests_b/test_verify_plan.py -q -n 4 -p no:cacheprovider -k "merge or split or plan" >"$OUT/tests_wide.log" 2>&1
echo "== wide merge tests rc=$?"; tail -2 "$OUT/tests_wide.log"; grep -E "^(FAILED|ERROR)" "$OUT/tests_wide.log" | head
wait
tail -3 "$OUT/warm_a.log" "$OUT/warm_b.log"; grep -h WARM-ERR "$OUT"/warm_*.log | head
echo "phase 1 took $(( $(date +%s) - T0 )) s"
# phase 2 (timing, nothing else running)
cd ab
PYTHONPATH=a timeout 110 python3 verify_wide_merge_ab.py "$OUT" main >"$OUT/ab_main.log" 2>&1; echo "== ab main rc=$?"
PYTHONPATH=b timeout 110 python3 verify_wide_merge_ab.py "$OUT" wide >"$OUT/ab_wide.log" 2>&1; echo "== ab wide rc=$?"
PYTHONPATH=a timeout 90 python3 host_busy_probe.py "$OUT" >"$OUT/host.log" 2>&1; echo "== host rc=$?"
tail -2 "$OUT/host.log"
echo "total $(( $(date +%s) - T0 )) s"
