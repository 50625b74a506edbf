# On the H200: the direct launch under the image's Triton (3.6) and under Triton 3.9 (carried as
# .t39/t39.tar.xz: the cp312 wheel without AMD, CUPTI and profiler files, libtriton stripped): the
# direct-launch and tree-verify GPU tests, then host_probe.py on the quick shapes, for each.
# bash scripts/launch_probe/run.sh OUT
set -u
OUT=$1
python3 -m pip install -q --no-deps --no-build-isolation -e . >$OUT/pip.log 2>&1
mkdir -p /tmp/t39 && python3 -c "import tarfile; tarfile.open('.t39/t39.tar.xz').extractall('/tmp/t39')"
TESTS="tests/kernels/test_triton_launch.py tests/kernels/test_tree_verify.py"
K=${K:-"relaunch or freed or streams or guard or last or layout or direct or pingpong or waiting_merge or merge or gluon or head_dim_256"}
for v in ${VERSIONS:-36 39}; do
  # in-tree backends only: the image's Triton 3.6 entry points name an AMD backend the carried one lacks
  if [ $v = 39 ]; then export PYTHONPATH=/tmp/t39 TRITON_BACKENDS_IN_TREE=1; else unset PYTHONPATH TRITON_BACKENDS_IN_TREE; fi
  # Triton 3.9 compiles sm_90 with its ptxas-blackwell (not carried): the image's CUDA 13.0 ptxas instead
  if [ $v = 39 ]; then
    export TRITON_PTXAS_BLACKWELL_PATH=$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)
    $TRITON_PTXAS_BLACKWELL_PATH --version | tail -1
  fi
  python3 -c "import triton, torch; print('triton', triton.__version__, 'torch', torch.__version__)"
  timeout ${TEST_SECONDS:-150} python3 -m pytest -q -n 8 -p no:randomly -p no:cacheprovider $TESTS -k "$K" \
    > $OUT/tests$v.log 2>&1
  echo "tests $v rc $?"; tail -2 $OUT/tests$v.log; grep -E "^(FAILED|ERROR)" $OUT/tests$v.log | head
  [ -n "${NO_PROBE36:-}" ] && [ $v = 36 ] && continue
  timeout ${PROBE_SECONDS:-120} python3 scripts/launch_probe/host_probe.py $OUT/host$v.jsonl 2>&1 | grep -v Warn
  echo "probe $v rc $?"
done
