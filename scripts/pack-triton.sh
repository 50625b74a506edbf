#!/usr/bin/env bash
# Pack a Triton release for the GPU machine, which has no network and takes at most 64 MiB a call:
# its Linux wheel for CPython 3.12 without the AMD backend, CUPTI, the profiler and the Blackwell
# ptxas, libtriton stripped of debug symbols, as one xz archive.
# scripts/h200_verify.sh runs under it where CARRIED_TRITON names the archive.
#   bash scripts/pack-triton.sh VERSION [OUT_DIR]    (OUT_DIR: .triton-carry, ignored by git)
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: scripts/pack-triton.sh VERSION [OUT_DIR]}
out=${2:-.triton-carry}
[ -x .venv/bin/python ] || bash scripts/setup-venv.sh >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
.venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$work" "triton==$version"
(cd "$work" && unzip -q triton-*.whl -x 'triton/backends/amd/*' 'triton/backends/nvidia/lib/cupti*' \
  'triton/backends/nvidia/bin/ptxas-blackwell' 'triton/backends/nvidia/bin/cuobjdump' \
  'triton/backends/nvidia/bin/nvdisasm' 'triton/_C/libproton.so' 'triton/profiler/*')
strip --strip-unneeded "$work/triton/_C/libtriton.so"
mkdir -p "$out"
tar -C "$work" -cf - triton | xz -9 -T2 > "$out/triton-$version.tar.xz.partial"
mv "$out/triton-$version.tar.xz.partial" "$out/triton-$version.tar.xz"  # no half-written archive left behind
ls -l "$out/triton-$version.tar.xz"
