#!/usr/bin/env bash
# SGLang's Triton tree-verify path (extend attention with a custom mask) without SGLang's server
# stack, for the bench's SGLang column on machines where SGLang itself does not install (the GPU
# machine has no network; SGLang's package imports transformers, starlette, torchvision...).
# From the SGLang wheel it keeps only the three kernel modules that path imports, unchanged, and
# writes a `sglang.srt.utils` with the three platform checks they call (SGLang's own reads the
# server stack). The result goes on PYTHONPATH:
#   bash scripts/pack-sglang.sh [VERSION [OUT_DIR]]    (default 0.5.15, .sglang-carry: ignored by git)
#   PYTHONPATH=.sglang-carry/sglang-0.5.15 python -m specdec_kernels.bench --sglang all ...
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-0.5.15}
out=${2:-.sglang-carry}
[ -x .venv/bin/python ] || bash scripts/setup-venv.sh >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
.venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
  --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  -d "$work" "sglang==$version"
ops=sglang/srt/layers/attention/triton_ops
(cd "$work" && unzip -q sglang-*.whl "$ops/extend_attention.py" "$ops/prefill_attention.py" \
  "$ops/decode_attention.py")
cat > "$work/sglang/srt/utils.py" <<'EOF'
"""The platform checks SGLang's Triton attention kernels import (written by scripts/pack-sglang.sh)."""
import torch


def is_cuda():
    return torch.cuda.is_available() and torch.version.cuda is not None


def is_hip():
    return torch.version.hip is not None


def is_gfx95_supported():  # gfx95 (CDNA4) is AMD's: what SGLang asks of it only matters on ROCm
    return False
EOF
mkdir -p "$out"
rm -rf "$out/sglang-$version.partial"
mv "$work" "$out/sglang-$version.partial"
trap - EXIT
rm -f "$out/sglang-$version.partial"/sglang-*.whl
rm -rf "$out/sglang-$version"
mv "$out/sglang-$version.partial" "$out/sglang-$version"  # no half-written tree left behind
echo "$out/sglang-$version"
