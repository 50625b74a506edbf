"""The bench's SGLang column lays a batch out as SGLang's Triton backend does for a target verify:
SGLang's own extend-attention kernel on that layout gives the reference's output (Triton's
interpreter on a CPU; a GPU also in bf16). The kernel is the one on the path, as ``make
sglang-check`` puts 0.5.15's there (``scripts/pack-sglang.sh``), else that of SGLang's reference copy
(0.5.23, the ``sglang_reference`` fixture: ``make test``)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kernel_cases import DEVICE, needs_triton  # noqa: E402
from specdec_kernels.bench import random_best_first_parents  # noqa: E402
from specdec_kernels.sglang_tree_path import (sglang_tree_path_unusable, sglang_tree_verify,  # noqa: E402
                                              sglang_verify_batch)
from specdec_kernels.tree_layout import ancestor_mask_from_parents  # noqa: E402
from specdec_kernels.tree_verify import tree_verify_attention_reference  # noqa: E402

# SGLang's epilogue divides its padding rows by a zero sum (rows it never stores)
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered in divide:RuntimeWarning")
# the interpreter stores float32 into bf16 as raw bits (SGLang's store relies on the implicit cast)
DTYPES = [torch.float16, torch.float32] + ([torch.bfloat16] if DEVICE.type == "cuda" else [])
# on a GPU SGLang's dots take float32 as tf32 (Triton's default): about float16's precision
TOLERANCE = {torch.float16: 5e-3, torch.float32: 5e-3 if DEVICE.type == "cuda" else 1e-4, torch.bfloat16: 3e-2}


def _inputs(dtype, lens, num_nodes, q_heads, kv_heads, head_dim, slots, seed=0):
    gen = torch.Generator().manual_seed(seed)
    batch = len(lens)
    q = torch.randn(batch, num_nodes, q_heads, head_dim, generator=gen)
    k = torch.randn(batch, slots, kv_heads, head_dim, generator=gen)
    v = torch.randn(batch, slots, kv_heads, head_dim, generator=gen)
    for b, n in enumerate(lens):  # rows past L_b + T belong to no one: NaN there must not reach the output
        k[b, n + num_nodes:] = float("nan")
        v[b, n + num_nodes:] = float("nan")
    mask = ancestor_mask_from_parents(random_best_first_parents(batch, num_nodes, "cpu", gen))
    to = dict(device=DEVICE)
    return (q.to(dtype=dtype, **to), k.to(dtype=dtype, **to), v.to(dtype=dtype, **to),
            torch.tensor(lens, dtype=torch.int32, **to), mask.to(**to))


@pytest.fixture(scope="module")
def sglang_kernel(request) -> str:
    """Which SGLang's kernel the tests run: the one on the path, else the reference copy's."""
    if sglang_tree_path_unusable() is None:
        return "on the path"
    request.getfixturevalue("sglang_reference")  # skips where it is not installed (fails under CI)
    why = sglang_tree_path_unusable()
    if why is not None:
        pytest.fail(f"SGLang's reference copy is installed but its extend-attention kernel does not import: {why}")
    return "reference copy"


@needs_triton
@pytest.mark.usefixtures("sglang_kernel")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("lens, num_nodes, q_heads, kv_heads, head_dim", [
    ([5, 70, 0], 9, 4, 2, 64),  # ragged, one request without a prefix, two blocks of keys
    ([33], 17, 3, 1, 32),
])
def test_sglang_path_matches_the_reference(dtype, lens, num_nodes, q_heads, kv_heads, head_dim):
    q, k, v, cache_lens, mask = _inputs(dtype, lens, num_nodes, q_heads, kv_heads, head_dim, max(lens) + num_nodes + 6)
    batch = sglang_verify_batch(q, k, v, cache_lens, mask)
    assert batch.custom_mask.numel() == sum(num_nodes * (n + num_nodes) for n in lens)
    out = sglang_tree_verify(batch)
    ref = tree_verify_attention_reference(q.float(), k.float(), v.float(), cache_lens, mask)
    err = (out.float() - ref).norm(dim=-1) / ref.norm(dim=-1)
    assert out.shape == q.shape and float(err.max()) <= TOLERANCE[dtype]


@needs_triton
@pytest.mark.usefixtures("sglang_kernel")
def test_a_wrong_layout_shows():
    """The check above can fail: the tree's mask of the wrong request gives another output."""
    q, k, v, cache_lens, mask = _inputs(torch.float32, [5, 40], 9, 2, 1, 32, 55, seed=1)
    batch = sglang_verify_batch(q, k, v, cache_lens, mask.flip(0))
    ref = tree_verify_attention_reference(q.float(), k.float(), v.float(), cache_lens, mask)
    assert float(((sglang_tree_verify(batch).float() - ref).norm(dim=-1) / ref.norm(dim=-1)).max()) > 1e-2


def test_without_sglang_the_reason_names_the_fix(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "sglang", None)  # an import of it raises ImportError
    for name in [m for m in sys.modules if m.startswith("sglang.")]:
        monkeypatch.delitem(sys.modules, name)
    reason = sglang_tree_path_unusable()
    assert reason.startswith("ModuleNotFoundError") and "scripts/pack-sglang.sh" in reason
