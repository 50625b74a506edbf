#!/usr/bin/env bash
# One device call: the ping-pong kernel's two diagnostics beside the 64-row Gluon kernel's A/B, then
# the ping-pong kernel's A/B where its wait inside warpgroup 0's partition returned.
cd "$(dirname "$0")/../.."
OUT=${1:?OUT}
export PYTHONUNBUFFERED=1
G="B1-T17-H32/8/128-L1024 B1-T9-H64/8/128-L1024 B1-T33-H32/8/128-L1024 B1-T65-H32/8/128-L1024 B1-T16-H64/8/128-L1024 B1-T17-H64/8/128-L1024 B1-T33-H64/8/128-L1024 B1-T65-H64/8/128-L1024"
P="B1-T9-H32/8/128-L1024 B1-T16-H32/8/128-L1024 B8-T9-H32/8/128-L1024 B8-T16-H32/8/128-L1024 B8-T17-H32/8/128-L1024 B8-T16-H64/8/128-L1024 B8-T17-H6/1/256-L1024 B32-T9-H3/1/256-L1024 B32-T17-H3/1/256-L1024 B32-T9-H6/1/256-L1024"
one() { local tag=$1; shift; (STEPS=1 timeout 120 python3 scripts/cluster_merge_probe/ab.py "$OUT" --one "$@" >"$OUT/$tag.log" 2>&1; echo "rc=$?" >>"$OUT/$tag.log") & }
one p_in B1-T9-H32/8/128-L1024 cluster_in
one p_nobar B1-T9-H32/8/128-L1024 cluster_nobar
one pt_in B8-T17-H32/8/128-L1024 cluster_in
SHAPES="$G" LIMIT_S=200 STALL_S=40 timeout 260 python3 scripts/cluster_merge_probe/run.py "$OUT/gluon" 2>&1 | grep -v Warn
wait
for f in "$OUT"/p*.log; do echo "== $f"; grep -v Warn "$f" | tail -6; done
if grep -q "err" "$OUT/p_in.log"; then
  SHAPES="$P" VARIANTS="base split_only cluster_in" LIMIT_S=170 STALL_S=40 timeout 200 python3 scripts/cluster_merge_probe/run.py "$OUT/pingpong" 2>&1 | grep -v Warn
fi
