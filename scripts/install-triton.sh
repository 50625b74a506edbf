#!/usr/bin/env bash
# Install one Triton release (the wheel, no dependencies) into .triton-<version>/ once, beside the
# venv's, and print that folder: the scripts that run a check under another Triton put it first on
# PYTHONPATH.
#   bash scripts/install-triton.sh VERSION
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: scripts/install-triton.sh VERSION}
[ -x .venv/bin/python ] || bash scripts/setup-venv.sh >&2
dir=.triton-$version
if [ ! -e "$dir/triton/__init__.py" ]; then
  rm -rf "$dir.partial"
  .venv/bin/python -m pip install -q --no-deps --target "$dir.partial" "triton==$version" >&2
  mv "$dir.partial" "$dir"  # a download cut short leaves no half-installed Triton behind
fi
echo "$PWD/$dir"
