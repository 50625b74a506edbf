#!/usr/bin/env bash
# The tree-verify kernels on a Hopper GPU: what docs/kernels-performance.md reports. Stages:
#   suite  the kernel tests (every verify case of the grid on the GPU, the Gluon kernels' own cases);
#          SUITE_SHARD=i/n runs every n-th of them from the i-th (the whole suite outgrew one call's
#          600 s: SUITE_SHARD=1/2, then 2/2, in two calls)
#   bench  the grid's kernels compiled in parallel, then the GPU bench tests over the whole grid
#          (head dims 256 and 128), which write the run's table under $OUT (verify.md, verify.jsonl)
#   all    both, the grid's kernels compiling while the suite runs (longer than one 600 s call: for
#          a machine of your own, with SUITE_SECONDS raised past the suite's ~700 s)
#   flex   the GPU test of FlexAttention against the kernel over the whole grid (flex.jsonl under $OUT;
#          run again with the same OUT, it times only the shapes that file lacks)
#   sglang the kernel against SGLang's tree-verify path (CARRIED_SGLANG) over the grid of HEAD_DIMS
#          (default 256,128; SDPA not timed): sglang.md and sglang.json under $OUT
# Results land under $OUT; the package is installed editable from this checkout first. Time limits
# (seconds): SUITE_SECONDS, WARM_SECONDS, BENCH_SECONDS, FLEX_SECONDS, SGLANG_SECONDS (the whole grid took 370-470 s after a warm
# compile of 60-105 s on an H200; on a fresh machine the compile took over 90 s). A bench run cut
# short still leaves verify.md: the table of the rows it kept. CARRIED_TRITON=ARCHIVE runs a stage
# under the Triton that scripts/pack-triton.sh packed into ARCHIVE (the call carries it);
# CARRIED_SGLANG=DIR puts SGLang's kernels that scripts/pack-sglang.sh wrote in DIR on the path (the
# bench's SGLang column: the bench stage's tests then time it too).
set -u
stage=${1:?usage: scripts/h200_verify.sh suite|bench|all|flex|sglang}
OUT=${OUT:-/tmp/out}
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/pip.log" 2>&1 || tail -5 "$OUT/pip.log"
# Under another Triton than the image's: CARRIED_TRITON names an archive of scripts/pack-triton.sh (the
# call carries it). In-tree backends only: the image's entry points name an AMD backend the archive
# lacks; and the image's ptxas for sm_90, where newer releases call their Blackwell ptxas, not packed.
if [ -n "${CARRIED_TRITON:-}" ]; then
  rm -rf /tmp/carried-triton
  python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$CARRIED_TRITON" /tmp/carried-triton
  export PYTHONPATH=/tmp/carried-triton${PYTHONPATH:+:$PYTHONPATH} TRITON_BACKENDS_IN_TREE=1
  export TRITON_PTXAS_BLACKWELL_PATH=${TRITON_PTXAS_BLACKWELL_PATH:-$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)}
fi
if [ -n "${CARRIED_SGLANG:-}" ]; then
  export PYTHONPATH=$(realpath "$CARRIED_SGLANG")${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -c "import triton; print('triton', triton.__version__)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader

suite() {
  KERNEL_SUITE_SHARD="${SUITE_SHARD:-}" timeout "${SUITE_SECONDS:-590}" \
    python3 -m pytest tests/kernels -q -x -n 14 -p no:cacheprovider >"$OUT/tests.log" 2>&1
  echo "== kernel tests rc=$?"; tail -3 "$OUT/tests.log" | cut -c1-300
  grep -E "^(FAILED|ERROR)|^E " "$OUT/tests.log" | cut -c1-300 | head -10
}

warm() {
  timeout "${WARM_SECONDS:-200}" python3 -c "from specdec_kernels.bench import grid_shapes, warm_compile; warm_compile(grid_shapes(), $1)" \
    >"$OUT/warm.log" 2>&1
  echo "== warm compile rc=$?"
}

bench() {
  SPECDEC_VERIFY_GRID=full SPECDEC_VERIFY_TABLE="$OUT" timeout "${BENCH_SECONDS:-600}" python3 -m pytest \
    tests/bench/test_verify_kernel.py -rA -p no:cacheprovider -p no:xdist >"$OUT/bench_tests.log" 2>&1
  echo "== bench tests rc=$?"; grep -cE "PASSED" "$OUT/bench_tests.log"; grep -E "passed|failed" "$OUT/bench_tests.log" | tail -2
  if [ ! -e "$OUT/verify.md" ] && [ -s "$OUT/verify.jsonl" ]; then  # cut short: the table of the rows it kept
    python3 -m specdec_kernels.bench --table-from "$OUT/verify.jsonl" --markdown "$OUT/verify.md" | tail -1 | cut -c1-400
  fi
  grep -E "^FAILED" "$OUT/bench_tests.log" | cut -c1-400 | head -40
}

flex() {
  SPECDEC_VERIFY_GRID=full SPECDEC_VERIFY_TABLE="$OUT" timeout "${FLEX_SECONDS:-600}" python3 -m pytest \
    tests/bench/test_faster_than_flex.py -rA -p no:cacheprovider -p no:xdist >"$OUT/flex_tests.log" 2>&1
  echo "== flex tests rc=$?"; grep -E "passed|failed" "$OUT/flex_tests.log" | tail -2
  grep -E "^(FAILED|SKIPPED)" "$OUT/flex_tests.log" | cut -c1-300 | head -40
}

sglang() {
  timeout "${SGLANG_SECONDS:-560}" python3 -m specdec_kernels.bench --head-dims "${HEAD_DIMS:-256,128}" --sglang all \
    --flex none --no-sdpa --warm 14 --max-seconds $(( ${SGLANG_SECONDS:-560} - 40 )) --json "$OUT/sglang.json" \
    --markdown "$OUT/sglang.md" >"$OUT/sglang.log" 2>&1
  echo "== sglang bench rc=$?"; head -1 "$OUT/sglang.log" | cut -c1-600; tail -3 "$OUT/sglang.log" | cut -c1-600
}

case $stage in
suite) suite ;;
bench) warm 14; bench ;;
all) warm 4 & suite; wait; bench ;;
flex) flex ;;
sglang) sglang ;;
*) echo "unknown stage $stage" >&2; exit 2 ;;
esac
