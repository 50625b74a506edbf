OUT=$1
python3 -m pip install -q --no-deps --no-build-isolation -e . >$OUT/pip.log 2>&1
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
[ -z "$NCU" ] && exit 0
for s in B8-T65-H24/4/256-L8192 B8-T65-H32/8/128-L8192; do
  timeout 200 $NCU --kernel-name regex:pingpong --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section SchedulerStats --section Occupancy \
    python3 scripts/ncu_probe/ncu_probe.py $s > $OUT/ncu_$(echo $s | tr '/' '_').txt 2>&1
  echo "rc $?"; grep -E "Throughput|Pipe|Stall|Warp Cycles|Issued|Eligible|Active Warps|Duration|ERR|Bank|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth" $OUT/ncu_$(echo $s | tr '/' '_').txt | head -60
done
