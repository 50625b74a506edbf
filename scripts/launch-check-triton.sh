#!/usr/bin/env bash
# The direct launch's CPU tests (tests/kernels/test_triton_launch.py: which launcher layout a Triton
# has, and that a direct launch hands the C launch what that Triton's own launcher would) under each
# Triton release named, by default every one whose layout triton_launch knows. Each wheel (no
# dependencies) is installed once into .triton-<version>/. Exit status: non-zero if any failed.
#   bash scripts/launch-check-triton.sh [VERSION ...]
set -uo pipefail
cd "$(dirname "$0")/.."
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(3.5.1 3.6.0 3.7.1 3.8.0 3.9.0)
status=0
for v in "${versions[@]}"; do
  dir=$(bash scripts/install-triton.sh "$v") || { echo "Triton $v: could not be installed"; status=1; continue; }
  decision=$(env -u TRITON_INTERPRET PYTHONPATH="$dir" .venv/bin/python -c \
    "import triton; from specdec_kernels.triton_launch import direct_launch_unusable as u
print(u() or f'Triton {triton.__version__}: launched directly')")
  env -u TRITON_INTERPRET PYTHONPATH="$dir" .venv/bin/python -m pytest -q -p no:randomly -p no:cacheprovider \
    tests/kernels/test_triton_launch.py >/tmp/launch-check-$v.log 2>&1
  rc=$?
  echo "$decision; tests $(tail -1 /tmp/launch-check-$v.log) (rc $rc)"
  [ $rc = 0 ] || status=1
done
exit $status
