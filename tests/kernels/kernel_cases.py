"""Shared helpers for the kernel tests: where the Triton path runs, case grids, random trees.

Where: on a CUDA GPU when one is present, else on the CPU under Triton's interpreter
(``TRITON_INTERPRET=1``, as CI runs), else the Triton tests skip with a reason. The full case
grid of the kernels issue runs on a GPU or with ``SPECDEC_FULL_KERNEL_TESTS=1``; otherwise a
covering subset runs (every listed T, tree shape, G, L, head dim and dtype at least once), small
enough for the interpreter.
"""

from __future__ import annotations

import itertools
import os
import re

import pytest
import torch

from specdec_kernels import ancestor_mask_from_parents
from specdec_kernels.impl import triton_interpreting

HAS_CUDA = torch.cuda.is_available()
FULL_GRID = HAS_CUDA or os.environ.get("SPECDEC_FULL_KERNEL_TESTS", "0") not in ("", "0")
DEVICE = torch.device("cuda") if HAS_CUDA else torch.device("cpu")

needs_triton = pytest.mark.skipif(
    not (HAS_CUDA or triton_interpreting()),
    reason="no CUDA GPU found and TRITON_INTERPRET=1 is not set: the Triton path cannot run here",
)

NODE_COUNTS = (1, 2, 9, 13, 16, 17, 33, 64, 65)
TREE_SHAPES = ("chain", "fanout", "best_first", "deep_narrow")
GROUPS = (1, 2, 4, 5, 8)
PREFIX_LENS = (0, 1, 15, 16, 17, 127, 1000)
DTYPES = (torch.float16, torch.bfloat16)
HEAD_DIMS = (64, 128, 256)

# Relative error per query row, ||out - ref|| / ||ref|| over D, against a float64 reference
# computed from the same (rounded) inputs. The output's own rounding is 2^-9 (bf16) or 2^-12
# (fp16) per element and the probabilities are rounded to the input dtype before the P.V
# product, so the bounds sit a few times above what those give.
ROW_TOLERANCE = {torch.float16: 4e-3, torch.bfloat16: 3e-2, torch.float32: 1e-5}


def verify_cases():
    """(T, shape, G, L, dtype, head_dim, num_splits) tuples: full product or a covering set."""
    split_choices = (None, 2, 5)
    if FULL_GRID:
        grid = itertools.product(NODE_COUNTS, TREE_SHAPES, GROUPS, PREFIX_LENS, DTYPES)
        return [(t, s, g, l, dt, HEAD_DIMS[i % 3], split_choices[i % 3])
                for i, (t, s, g, l, dt) in enumerate(grid)]
    cases = []
    for i in range(12):  # cycles through every axis; longest axis has 9 values
        cases.append((NODE_COUNTS[i % 9], TREE_SHAPES[i % 4], GROUPS[i % 5], PREFIX_LENS[i % 7],
                      DTYPES[i % 2], HEAD_DIMS[i % 3], split_choices[i % 3]))
    return cases


def case_id(case) -> str:
    t, shape, g, l, dtype, d, splits = case
    return f"T{t}-{shape}-G{g}-L{l}-{str(dtype).removeprefix('torch.')}-D{d}-s{splits or 'auto'}"


def random_parents(num_nodes: int, shape: str, generator: torch.Generator) -> torch.Tensor:
    """Parents ``[T]`` int32 (root -1, parent < child) of one tree of the named shape.

    chain: each node's parent is the previous node. fanout: every draft node hangs off the root.
    best_first: each node's parent drawn uniformly from the earlier nodes.
    deep_narrow: mostly a chain, with a few short side branches.
    """
    parents = [-1]
    for i in range(1, num_nodes):
        if shape == "chain":
            parents.append(i - 1)
        elif shape == "fanout":
            parents.append(0)
        elif shape == "best_first":
            parents.append(int(torch.randint(0, i, (1,), generator=generator)))
        elif shape == "deep_narrow":
            side = float(torch.rand(1, generator=generator)) < 0.2 and i > 1
            parents.append(i - 2 if side else i - 1)
        else:
            raise ValueError(shape)
    return torch.tensor(parents, dtype=torch.int32)


def random_tree_batch(batch: int, num_nodes: int, shape: str, generator: torch.Generator):
    """(parents [B, T] int32, ancestor_mask [B, T, W] int32), one random tree per request."""
    parents = torch.stack([random_parents(num_nodes, shape, generator) for _ in range(batch)])
    return parents, ancestor_mask_from_parents(parents)


def ancestor_chain(parents_row: torch.Tensor, node: int) -> list[int]:
    """Node indices from the root down to ``node`` (inclusive), by a plain walk."""
    chain = []
    while node >= 0:
        chain.append(node)
        node = int(parents_row[node])
    return chain[::-1]


def row_errors(out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Per (request, node, head) relative L2 error over D, in float64."""
    out64, ref64 = out.double(), ref.double()
    return (out64 - ref64).norm(dim=-1) / ref64.norm(dim=-1).clamp_min(1e-30)


def assert_wrong_device_named(op, args: dict, name: str, lead: str, **options) -> None:
    """``op(**args)`` with ``args[name]`` moved to the meta device (no data: nothing may read it)
    raises one line naming ``name``, ``lead`` (the first tensor argument), both devices and the fix."""
    moved = dict(args, **{name: args[name].to("meta")})
    where = re.escape(str(args[lead].device))
    message = rf"^{name} must be on {lead}'s device \({where}\), got meta; pass {name}\.to\({lead}\.device\)$"
    with pytest.raises(ValueError, match=message) as err:
        op(**moved, **options)
    assert "\n" not in str(err.value)
