OUT=$1
python3 -m pip install -q --no-deps --no-build-isolation -e . >$OUT/pip.log 2>&1
for s in B8-T65-H24/4/256-L8192 B8-T65-H32/8/128-L8192; do
  f=$OUT/stall_$(echo $s | tr '/' '_').txt
  timeout 150 /usr/local/cuda/bin/ncu --kernel-name regex:pingpong --launch-skip 1 --launch-count 1 \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__inst_executed.sum,sm__cycles_elapsed.avg" \
    --section SourceCounters --print-details all \
    python3 scripts/ncu_probe/ncu_probe.py $s > $f 2>&1
  echo "== $s rc $?"; grep -E "stalled|gmma|bank|inst_executed|cycles_elapsed" $f | sort -k3 -n -r | head -30
done
