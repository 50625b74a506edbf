# On the H200: each ablated ping-pong kernel (patch.py), then the kernel as it is, twice in turn.
# bash scripts/ablate_probe/run.sh OUT
set -u
OUT=$1
D=scripts/ablate_probe
python3 -m pip install -q --no-deps --no-build-isolation -e . >$OUT/pip.log 2>&1
cp kernels/tree_verify_gluon_pingpong.py /tmp/pp_orig.py
for rep in ${REPS:-1 2}; do
  for v in ${VARIANTS:-base no_rescale no_turn no_softmax no_softmax,no_rescale}; do
    python3 $D/patch.py /tmp/pp_orig.py kernels/tree_verify_gluon_pingpong.py $v
    timeout ${EACH_SECONDS:-115} python3 $D/time_shapes.py $OUT "$v#$rep" 2>&1 | grep -v Warn | tail -6
  done
done
cp /tmp/pp_orig.py kernels/tree_verify_gluon_pingpong.py
