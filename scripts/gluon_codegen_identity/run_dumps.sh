#!/bin/bash
# Dump every Gluon split-kernel variant the compile check plans, with Triton 3.9 (the venv's) and
# 3.6 (a copy at $T36, put first on PYTHONPATH), plainly and with the integer arguments a launch
# specialises to 1 as constants.
# usage: run_dumps.sh PKGDIR OUTROOT   (PKGDIR holds specdec_kernels/: a checkout's kernels/ copied)
PKG=$1; OUT=$2; PY=${PY:-.venv/bin/python}; T36=${T36:-/tmp/t36}; HERE=$(dirname "$0")
mkdir -p "$OUT"
for t in 39 36; do
  extra=""; [ $t = 36 ] && extra=":$T36"
  for mode in plain spec; do
    flag=""; [ $mode = spec ] && flag="--spec"
    cache=$(mktemp -d)
    TRITON_CACHE_DIR=$cache PYTHONPATH=$PKG$extra nice -n 10 "$PY" "$HERE/dump.py" "$OUT/$t-$mode" $flag > "$OUT/$t-$mode.log" 2>&1
    rm -rf "$cache"
  done
done
