"""The ping-pong kernel's state as named Gluon aggregates: a work item, its masked key tiles, the
buffers they come through, and each partition's arguments, read by field name instead of by
position out of 3- to 27-element tuples.

They compile to the code the tuples did: each lists its fields in the order of the tuple it
replaced (a nested one where a tuple nested one), and an aggregate flattens to its fields' IR
values in that order, so the warp-specialised partitions capture the same values in the same
order; and as a tuple assigned to a name turns its constants (the kernel's flags, an integer
argument the launch specialised to 1) into tensors, every field is a runtime value, the
constructor turning a constant into a tensor the same way.

This module has no ``from __future__ import annotations``: an aggregate checks each field's value
against the annotation object itself when the kernel is traced.
"""

from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import tma

try:
    from triton.experimental.gluon import aggregate as _aggregate
except ImportError:  # Triton 3.6 (the GPU image's) has only the private form
    from triton.language.core import _aggregate


def aggregate(cls):
    """``cls`` as an aggregate whose constructor takes its fields in order, a constexpr given for a
    tensor field becoming a constant tensor (as in a tuple assigned to a name)."""
    fields = tuple(cls.__annotations__.items())

    def __init__(self, *values, _semantic=None):
        if len(values) != len(fields):
            raise TypeError(f"{cls.__name__} takes {len(fields)} fields ({', '.join(n for n, _ in fields)}), "
                            f"got {len(values)}")
        for (name, kind), value in zip(fields, values):
            if kind is gl.tensor and isinstance(value, gl.constexpr):
                value = _semantic.to_tensor(value.value)
            setattr(self, name, value)

    __init__.__triton_builtin__ = True  # run at trace time like a builtin: not a kernel dependency to hash
    cls.__init__ = __init__
    return _aggregate(cls)


Smem = gl.shared_memory_descriptor


@aggregate
class WorkGrid:
    """The launch's work items: where the requests' prefix lengths are, query tiles a (request,
    KV head), KV heads, programs a split, keys a split, tree nodes, and where the tree's rows go:
    0 the split holding the prefix's last row, 1 the one after it (``VerifyPlan.own_tree_split``)."""
    lens_ptr: gl.tensor
    num_m_tiles: gl.tensor
    num_kv_heads: gl.tensor
    base_programs: gl.tensor
    chunk: gl.tensor
    num_nodes: gl.tensor
    tree_split: gl.tensor


@aggregate
class ProgramWork:
    """This program's work items: the first, the end of all items, the step to the next."""
    first_item: gl.tensor
    num_items: gl.tensor
    item_step: gl.tensor


@aggregate
class WorkItem:
    """One work item (a query tile of one (request, KV head) on one split of its keys): its
    coordinates, the request's prefix length, the split's first key and end, its whole key tiles
    and their end, whether it has a partial prefix tile, and its masked tiles."""
    split: gl.tensor
    m_tile: gl.tensor
    head_b: gl.tensor
    kv_head: gl.tensor
    b: gl.tensor
    prefix_len: gl.tensor
    lo: gl.tensor
    hi: gl.tensor
    n_full: gl.tensor
    full_end: gl.tensor
    has_partial: gl.tensor
    n_masked: gl.tensor


@aggregate
class KeyRing:
    """The ring of mask-free key tiles: K and V slots, ``ready`` (a tile landed), ``empty`` (every
    consumer is done with it)."""
    k_smem: Smem
    v_smem: Smem
    ready: Smem
    empty: Smem


@aggregate
class MaskedBuffers:
    """Where the masked key tiles come through (the ring's slots, or two buffers of their own):
    K and V, their ready and free barriers, and the load warp's own barrier."""
    k: Smem
    v: Smem
    ready: Smem
    free: Smem
    landed: Smem


@aggregate
class MaskedTiles:
    """A work item's masked key tiles (the split's partial last prefix tile, then its tree tiles):
    their buffers, the buffer use of tile 0, whether the load warp zeroes the rows past the
    request's keys, how many, whether the first is the partial tile, the whole tiles' end, the
    split's end, the prefix length, the tree nodes and the request's keys."""
    bufs: MaskedBuffers
    first_use: gl.tensor
    loader_zeroes: gl.tensor
    n_masked: gl.tensor
    has_partial: gl.tensor
    full_end: gl.tensor
    hi: gl.tensor
    prefix_len: gl.tensor
    num_nodes: gl.tensor
    request_end: gl.tensor


@aggregate
class RowPointers:
    """The tensors a consumer partition reads and writes besides the key tiles: q, the ancestor
    masks, the output, the partials and their log-sum-exps."""
    q_ptr: gl.tensor
    mask_ptr: gl.tensor
    out_ptr: gl.tensor
    part_o_ptr: gl.tensor
    part_lse_ptr: gl.tensor


@aggregate
class RowStrides:
    """Strides of q (request, node, head), of the ancestor masks (request, node) and of the
    output (request, node, head)."""
    stride_qb: gl.tensor
    stride_qt: gl.tensor
    stride_qh: gl.tensor
    stride_mb: gl.tensor
    stride_mt: gl.tensor
    stride_ob: gl.tensor
    stride_ot: gl.tensor
    stride_oh: gl.tensor


@aggregate
class LoadArgs:
    """The load warp's arguments."""
    k_desc: tma.tensor_descriptor
    v_desc: tma.tensor_descriptor
    ring: KeyRing
    items: WorkGrid
    work: ProgramWork
    bufs: MaskedBuffers
    cache_rows: gl.tensor
    KV_SHARE: gl.tensor
    IN_RING: gl.tensor


@aggregate
class ConsumerArgs:
    """What the 64-row warpgroups and the tail warpgroup both take, after their own buffers: the
    work items, this program's work, the masked tiles' buffers, the strides, the scale of the
    scores (log2), the splits, the rows a split's partial holds, whether the masked tiles come
    through the ring."""
    items: WorkGrid
    work: ProgramWork
    bufs: MaskedBuffers
    strides: RowStrides
    qk_scale: gl.tensor
    num_splits: gl.tensor
    rows_pad: gl.tensor
    IN_RING: gl.tensor


@aggregate
class MmaArgs:
    """A 64-row warpgroup's arguments: the tensors it reads and writes, its q buffer (read with three
    warpgroups or a 256-wide head), the ring, and the rest."""
    io: RowPointers
    q_smem: Smem
    ring: KeyRing
    common: ConsumerArgs


@aggregate
class TailArgs:
    """The tail warpgroup's arguments: as :class:`MmaArgs`, with its q^T and P^T buffers and its
    rescale flags instead of the q buffer."""
    io: RowPointers
    qt_smem: Smem
    pt_smem: Smem
    ring: KeyRing
    flag_smem: Smem
    common: ConsumerArgs
