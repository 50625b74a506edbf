#!/usr/bin/env bash
# The CPU compile check (python -m specdec_kernels.compile_check) under another Triton than the
# venv's: by default the GPU image's 3.6.0 for sm_90. A Gluon form the venv's newer Triton builds may
# not lower on 3.6, and finding that here costs no GPU time. The wheel (no dependencies) is installed
# once into .triton-<version>/.
#   bash scripts/compile-check-triton.sh [VERSION] [sm_90] [sm_120]
set -euo pipefail
cd "$(dirname "$0")/.."
version=3.6.0
case ${1:-} in [0-9]*) version=$1; shift ;; esac
[ -x .venv/bin/python ] || bash scripts/setup-venv.sh
dir=.triton-$version
if [ ! -e "$dir/triton/__init__.py" ]; then
  rm -rf "$dir.partial"
  .venv/bin/python -m pip install -q --no-deps --target "$dir.partial" "triton==$version"
  mv "$dir.partial" "$dir"  # a download cut short leaves no half-installed Triton behind
fi
env -u TRITON_INTERPRET PYTHONPATH="$PWD/$dir" .venv/bin/python -m specdec_kernels.compile_check "${@:-sm_90}"
