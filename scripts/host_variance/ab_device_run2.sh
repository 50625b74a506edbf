#!/usr/bin/env bash
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
T0=$(date +%s)
(PYTHONPATH=ab/a timeout 150 python3 ab/warm.py 6 >"$OUT/warm_a.log" 2>&1; echo "warm a rc=$?" >>"$OUT/warm_a.log") &
(PYTHONPATH=ab/c timeout 150 python3 ab/warm.py 6 >"$OUT/warm_c.log" 2>&1; echo "warm c rc=$?" >>"$OUT/warm_c.log") &
PYTHONPATH=ab/c timeout 150 python3 -m pytest ab/tests_b/test_tree_verify.py ab/tests_b/test_verify_plan.py -q -n 3 -p no:cacheprovider -k "merge or split or plan" >"$OUT/tests_c.log" 2>&1
echo "== hybrid merge tests rc=$?"; tail -1 "$OUT/tests_c.log"; grep -E "^(FAILED|ERROR)" "$OUT/tests_c.log" | head
wait
tail -n 2 "$OUT/warm_a.log" "$OUT/warm_c.log"; grep -h WARM-ERR "$OUT"/warm_*.log | head
echo "phase 1 took $(( $(date +%s) - T0 )) s"
cd ab
PYTHONPATH=a timeout 80 python3 verify_wide_merge_ab.py "$OUT" main >"$OUT/ab_main.log" 2>&1; echo "== ab main rc=$?"
PYTHONPATH=c timeout 80 python3 verify_wide_merge_ab.py "$OUT" hybrid >"$OUT/ab_hybrid.log" 2>&1; echo "== ab hybrid rc=$?"
PYTHONPATH=a timeout 200 python3 host_why.py >"$OUT/host_why.log" 2>&1; echo "== host why rc=$?"
cat "$OUT/host_why.log" | cut -c1-300 | tail -40
echo "total $(( $(date +%s) - T0 )) s"
