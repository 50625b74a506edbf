#!/usr/bin/env bash
# Which step hangs: each in its own process under a time limit, all at once.
cd "$(dirname "$0")/../.."
OUT=${1:?OUT}
run() { local tag=$1; shift; (STEPS=1 timeout 150 python3 "$@" >"$OUT/$tag.log" 2>&1; echo "rc=$?" >>"$OUT/$tag.log") & }
run tiny scripts/cluster_merge_probe/tiny.py
run g_base scripts/cluster_merge_probe/ab.py "$OUT" --one B1-T17-H32/8/128-L1024 base
run g_split scripts/cluster_merge_probe/ab.py "$OUT" --one B1-T17-H32/8/128-L1024 split_only
run g_cluster scripts/cluster_merge_probe/ab.py "$OUT" --one B1-T17-H32/8/128-L1024 cluster
run p_cluster scripts/cluster_merge_probe/ab.py "$OUT" --one B1-T9-H32/8/128-L1024 cluster
run p_split scripts/cluster_merge_probe/ab.py "$OUT" --one B1-T9-H32/8/128-L1024 split_only
run pt_cluster scripts/cluster_merge_probe/ab.py "$OUT" --one B8-T17-H32/8/128-L1024 cluster
wait
for f in "$OUT"/*.log; do echo "== $f"; grep -v Warn "$f" | tail -8; done
