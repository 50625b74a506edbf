# On the H200: the GPU tests of the idle-warpgroup change, then the kernel before it (OLD, a copy of
# kernels/tree_verify_gluon_pingpong.py at 64bc6ed) and after it, interleaved twice.
# bash scripts/d256_probes/run_idle.sh OUT OLD
set -u
OUT=$1
cp "$2" /tmp/old_pp.py
python3 -m pip install -q --no-deps --no-build-isolation -e . >$OUT/pip.log 2>&1
timeout 240 python3 -m pytest -q -x -n 8 tests/kernels/test_tree_verify.py -k "head_dim_256 or waiting_merge" -p no:cacheprovider > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -3 $OUT/tests.log
cp kernels/tree_verify_gluon_pingpong.py /tmp/new_pp.py
for rep in 1 2; do
  cp /tmp/old_pp.py kernels/tree_verify_gluon_pingpong.py
  timeout 150 python3 scripts/d256_probes/idle_time.py $OUT old$rep 2>&1 | grep -v Warn
  cp /tmp/new_pp.py kernels/tree_verify_gluon_pingpong.py
  timeout 150 python3 scripts/d256_probes/idle_time.py $OUT new$rep 2>&1 | grep -v Warn
done
