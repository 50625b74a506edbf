# On the H200: the tree-verify GPU tests on the lazy-rescale kernel (lazy.patch, the diff of 65ab7ec),
# then graph times of the kernel as it is (base) and with the patch (lazy), in turn, twice (~560 s).
# bash scripts/lazy_rescale_probe/run.sh OUT; then python3 scripts/lazy_rescale_probe/summary.py OUT
set -u
OUT=$1
D=scripts/lazy_rescale_probe
python3 -m pip install -q --no-deps --no-build-isolation -e . >$OUT/pip.log 2>&1
cp kernels/tree_verify_gluon_pingpong.py /tmp/pp_base.py
patch -s -p1 < $D/lazy.patch && cp kernels/tree_verify_gluon_pingpong.py /tmp/pp_lazy.py
timeout ${TEST_SECONDS:-120} python3 -m pytest -q -n 8 -p no:randomly -p no:cacheprovider tests/kernels/test_tree_verify.py \
  -k "head_dim_256 or rescales or pingpong or persistent or waiting_merge" > $OUT/tests.log 2>&1
echo "tests rc $?"; tail -2 $OUT/tests.log; grep -E "^(FAILED|ERROR)" $OUT/tests.log | head
for v in base lazy; do  # compile both kernels' variants in parallel first
  cp /tmp/pp_$v.py kernels/tree_verify_gluon_pingpong.py
  timeout ${WARM_SECONDS:-70} python3 $D/time_shapes.py --warm > $OUT/warm_$v.log 2>&1; echo "warm $v rc $?"
done
for rep in 1 2; do
  for v in base lazy; do
    cp /tmp/pp_$v.py kernels/tree_verify_gluon_pingpong.py
    timeout ${EACH_SECONDS:-70} python3 $D/time_shapes.py $OUT "$v#$rep" 2>&1 | grep -v Warn | tail -3
  done
done
cp /tmp/pp_base.py kernels/tree_verify_gluon_pingpong.py
