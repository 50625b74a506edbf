# On the H200: the tree-verify GPU tests with the kernel as it is now, then its graph times against
# the kernel before (ab/pp_before.py and ab/state_before.py, carried), the new one first.
# bash scripts/ablate_probe/run_ab.sh OUT
set -u
OUT=$1
D=scripts/ablate_probe
python3 -m pip install -q --no-deps --no-build-isolation -e . >$OUT/pip.log 2>&1
timeout ${TEST_SECONDS:-270} python3 -m pytest -q -n 8 tests/kernels/test_tree_verify.py -p no:cacheprovider > $OUT/tests.log 2>&1
echo "tests rc $?"; tail -4 $OUT/tests.log
cp kernels/tree_verify_gluon_pingpong.py /tmp/new_pp.py; cp kernels/tree_verify_pingpong_state.py /tmp/new_state.py
timeout ${EACH_SECONDS:-150} python3 $D/time_shapes.py $OUT "new" 2>&1 | grep -v Warn
cp ab/pp_before.py kernels/tree_verify_gluon_pingpong.py; cp ab/state_before.py kernels/tree_verify_pingpong_state.py
timeout ${EACH_SECONDS:-150} python3 $D/time_shapes.py $OUT "old" 2>&1 | grep -v Warn
cp /tmp/new_pp.py kernels/tree_verify_gluon_pingpong.py; cp /tmp/new_state.py kernels/tree_verify_pingpong_state.py
