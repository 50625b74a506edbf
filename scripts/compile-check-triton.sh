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
dir=$(bash scripts/install-triton.sh "$version")
env -u TRITON_INTERPRET PYTHONPATH="$dir" .venv/bin/python -m specdec_kernels.compile_check "${@:-sm_90}"
