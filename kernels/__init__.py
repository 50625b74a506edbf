"""DDTree speculative-decoding kernels: Triton kernels, each beside its torch reference.

Importable as ``specdec_kernels`` (never as ``kernels``). Every operation takes
``impl="auto" | "triton" | "torch"``; ``auto`` runs Triton on CUDA tensors or under
``TRITON_INTERPRET=1`` and the torch reference otherwise. Triton is imported lazily, and torch
with the first name used. The tree-verify attention plans each call once per call signature
(``verify_plan``, per-arch tiles in ``configs``); on Hopper GPUs its split kernel is a Gluon one
(``tree_verify_gluon``, past 64 query rows and at head dim 256 ``tree_verify_gluon_pingpong``).
Hybrid (Gated DeltaNet) layers verify a tree with ``tree_causal_conv1d`` and
``tree_gated_delta_rule`` and commit its accepted path with ``commit_recurrent_state``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .accept_commit import tree_accept_and_commit
    from .ddtree_build import build_ddtree
    from .kv_commit import commit_accepted_kv
    from .recurrent_commit import commit_recurrent_state
    from .tree_accept import AcceptResult, tree_accept_greedy
    from .tree_layout import DDTree, ancestor_mask_from_parents, unpack_ancestor_mask
    from .tree_conv import tree_causal_conv1d
    from .tree_delta import tree_gated_delta_rule
    from .tree_verify import tree_verify_attention

#: Each name's module, imported on first use: the package's command lines (``python -m
#: specdec_kernels.bench``) import the package first, and would end in a torch traceback before
#: they could say what to install (``command_line``).
_MODULES = {
    "AcceptResult": "tree_accept",
    "DDTree": "tree_layout",
    "ancestor_mask_from_parents": "tree_layout",
    "build_ddtree": "ddtree_build",
    "commit_accepted_kv": "kv_commit",
    "commit_recurrent_state": "recurrent_commit",
    "tree_accept_and_commit": "accept_commit",
    "tree_accept_greedy": "tree_accept",
    "tree_causal_conv1d": "tree_conv",
    "tree_gated_delta_rule": "tree_delta",
    "tree_verify_attention": "tree_verify",
    "unpack_ancestor_mask": "tree_layout",
}

__all__ = [
    "AcceptResult",
    "DDTree",
    "ancestor_mask_from_parents",
    "build_ddtree",
    "commit_accepted_kv",
    "commit_recurrent_state",
    "tree_accept_and_commit",
    "tree_accept_greedy",
    "tree_causal_conv1d",
    "tree_gated_delta_rule",
    "tree_verify_attention",
    "unpack_ancestor_mask",
]


def __getattr__(name: str):
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
