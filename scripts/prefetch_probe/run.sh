# On the H200: the tree-verify GPU tests on the ping-pong kernel whose warpgroups prefetch their rows'
# ancestor-mask words into L2 at the start of an item with tree tiles (prefetch.patch), then graph
# times of the kernel as it is (base) and patched (new), in turn, twice.
# bash scripts/prefetch_probe/run.sh OUT; then python3 scripts/prefetch_probe/summary.py OUT
set -u
OUT=$1
D=scripts/prefetch_probe
python3 -m pip install -q --no-deps --no-build-isolation -e . >$OUT/pip.log 2>&1
cp kernels/tree_verify_gluon_pingpong.py /tmp/base_pp.py
patch -s -p1 < $D/prefetch.patch && cp kernels/tree_verify_gluon_pingpong.py /tmp/new_pp.py
timeout ${TEST_SECONDS:-150} python3 -m pytest -q -n 8 -p no:randomly -p no:cacheprovider tests/kernels/test_tree_verify.py \
  -k "head_dim_256 or rescales or pingpong or persistent or waiting_merge or merge or gluon" > $OUT/tests.log 2>&1
echo "tests rc $?"; tail -2 $OUT/tests.log; grep -E "^(FAILED|ERROR)" $OUT/tests.log | head
for v in base new; do
  cp /tmp/${v}_pp.py kernels/tree_verify_gluon_pingpong.py
  timeout ${WARM_SECONDS:-80} python3 $D/time_shapes.py --warm > $OUT/warm_$v.log 2>&1; echo "warm $v rc $?"
done
for rep in 1 2; do
  for v in base new; do
    cp /tmp/${v}_pp.py kernels/tree_verify_gluon_pingpong.py
    timeout ${EACH_SECONDS:-90} python3 $D/time_shapes.py $OUT "$v#$rep" 2>&1 | grep -v Warn | tail -2
  done
done
cp /tmp/base_pp.py kernels/tree_verify_gluon_pingpong.py
python3 $D/summary.py $OUT
