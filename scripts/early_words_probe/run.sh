# On the H200: the tree-verify GPU tests on the working tree's kernels (the first three ancestor words loaded before the stream),
# then graph times of HEAD's kernels (base) and the working tree's (new), in turn, twice.
# bash scripts/early_words_probe/run.sh OUT; then python3 scripts/early_words_probe/summary.py OUT
set -u
OUT=$1
D=scripts/early_words_probe
F="tree_verify_gluon tree_verify_gluon_pingpong"
python3 -m pip install -q --no-deps --no-build-isolation -e . >$OUT/pip.log 2>&1
for f in $F; do cp kernels/$f.py /tmp/new_$f.py; git show HEAD:kernels/$f.py > /tmp/base_$f.py; done
timeout ${TEST_SECONDS:-150} python3 -m pytest -q -n 8 -p no:randomly -p no:cacheprovider tests/kernels/test_tree_verify.py \
  -k "head_dim_256 or rescales or pingpong or persistent or waiting_merge or merge or gluon" > $OUT/tests.log 2>&1
echo "tests rc $?"; tail -2 $OUT/tests.log; grep -E "^(FAILED|ERROR)" $OUT/tests.log | head
use() { for f in $F; do cp /tmp/$1_$f.py kernels/$f.py; done; }
for v in base new; do
  use $v
  timeout ${WARM_SECONDS:-80} python3 $D/time_shapes.py --warm > $OUT/warm_$v.log 2>&1; echo "warm $v rc $?"
done
for rep in 1 2; do
  for v in base new; do
    use $v
    timeout ${EACH_SECONDS:-90} python3 $D/time_shapes.py $OUT "$v#$rep" 2>&1 | grep -v Warn | tail -2
  done
done
use new
python3 $D/summary.py $OUT
