#!/usr/bin/env bash
# SGLang's Triton tree-verify path (extend attention with a custom mask) without SGLang's server
# stack, for the bench's SGLang column on machines where SGLang itself does not install (the GPU
# machine has no network; SGLang's package imports transformers, starlette, torchvision...).
# From the SGLang wheel it keeps only the attention kernels' modules (and, since they moved to its
# kernel library, its environment settings), unchanged, as namespace packages without the
# packages' own imports, and writes a `sglang.srt.utils` with the platform checks they call
# (SGLang's own reads the server stack). The result goes on PYTHONPATH:
#   bash scripts/pack-sglang.sh [VERSION [OUT_DIR]]    (default 0.5.23, .sglang-carry: ignored by git)
#   PYTHONPATH=.sglang-carry/sglang-0.5.23 python -m specdec_kernels.bench --sglang all ...
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-0.5.23}
out=${2:-.sglang-carry}
[ -x .venv/bin/python ] || bash scripts/setup-venv.sh >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
.venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
  --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  -d "$work" "sglang==$version" 2> >(grep -v "^WARNING: Location" >&2)
cd "$work"
# where the release keeps the kernel: its kernel library (0.5.23), or its attention layers (0.5.15)
listing=$(unzip -Z1 sglang-*.whl)
if grep -qx "sglang/kernels/ops/attention/extend_attention.py" <<< "$listing"; then
  ops=sglang/kernels/ops/attention  # its __init__ (the kernel registry's) stays out
  unzip -q sglang-*.whl $ops/extend_attention.py $ops/decode_attention.py $ops/prefill_attention.py \
    $ops/score_mod.py sglang/srt/environ.py
else
  ops=sglang/srt/layers/attention/triton_ops
  unzip -q sglang-*.whl $ops/extend_attention.py $ops/decode_attention.py $ops/prefill_attention.py
fi
rm sglang-*.whl
cat > sglang/srt/utils.py <<'EOF'
"""The platform checks SGLang's Triton attention kernels import (written by scripts/pack-sglang.sh)."""
import torch


def is_cuda():
    return torch.cuda.is_available() and torch.version.cuda is not None


def is_hip():
    return torch.version.hip is not None


def is_gfx95_supported():  # AMD archs: what SGLang asks of them only matters on ROCm
    return False


def is_gfx1250_supported():
    return False


def get_device_core_count(device_id: int = 0) -> int:
    return torch.cuda.get_device_properties(device_id).multi_processor_count if torch.cuda.is_available() else 0
EOF
cd - > /dev/null
mkdir -p "$out"
rm -rf "$out/sglang-$version"
mv "$work" "$out/sglang-$version"  # whole or not at all: a failed step above leaves nothing there
trap - EXIT
echo "$out/sglang-$version"
