"""The Gluon split kernel compiles for sm_90 at the table's entries (head dims 128 and 64), on
any host.

CI has no Hopper GPU, so this is where CI sees the Gluon kernel at all: it must compile with the
Triton release installed (Gluon's API moves between releases), fit Hopper's shared memory, use
the warpgroup MMA, and keep the next tile's q.k MMA in flight across the softmax. Run in a
subprocess without TRITON_INTERPRET, like the sm_120 check.
"""

from __future__ import annotations

import pytest

from test_sm120_compile import _nvidia_tools_present

pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")


@pytest.mark.skipif(not _nvidia_tools_present(),
                    reason="this Triton install ships no NVIDIA ptxas/cuobjdump: cannot compile for sm_90")
def test_gluon_kernel_compiles_for_sm90_and_overlaps():
    from specdec_kernels.gluon_check import SM90_SHARED_LIMIT, run_check_subprocess

    reports = run_check_subprocess()
    # at head dims 128 and 64 (round 15): the 64-row kernel; the ping-pong kernel's single
    # warpgroup, alone and with the tail (and so with two programs per KV head), its two
    # warpgroups alone and with the tail, its three
    tiles = [("pingpong", 64, 4), ("pingpong", 128, 8), ("pingpong", 192, 12), ("pingpong+tail8", 64, 4),
             ("pingpong+tail8", 128, 8), ("pingpong+tail8/2heads", 64, 4), ("pingpong+tail8/persistent", 64, 4),
             ("pingpong+tail8/persistent", 128, 8), ("verify_gluon", 64, 4)]
    # (and at head dim 64 the single warpgroup twice: on 64- and, on long splits, 128-key tiles)
    assert sorted((r["head_dim"], r["kernel"], r["block_m"], r["num_warps"]) for r in reports) == sorted(
        [(d, *tile) for d in (64, 128) for tile in tiles] + [(64, "pingpong", 64, 4)])
    # head dim 64's 64-row kernel takes 64-key tiles (8 KB, as 32 keys at 128)
    assert {(r["head_dim"], r["block_n"]) for r in reports if r["kernel"] == "verify_gluon"} == {(64, 64), (128, 32)}
    single = [r for r in reports if r["kernel"] == "pingpong" and r["block_m"] == 64]
    assert sorted((r["head_dim"], r["block_n"]) for r in single) == [(64, 64), (64, 128), (128, 64)]
    for r in reports:
        where = f"D={r['head_dim']} BM={r['block_m']} BN={r['block_n']} warps={r['num_warps']}"
        print(where, {k: r[k] for k in ("shared_bytes", "registers", "spill_bytes", "forbidden")})
        assert r["shared_bytes"] <= SM90_SHARED_LIMIT, f"{where}: {r['shared_bytes']} B shared memory"
        assert not r["forbidden"], f"{where}: {r['forbidden']}"
        assert r["mix"].get("HGMMA", 0) > 0, f"{where}: no warpgroup MMA in the SASS"
        assert r["ok"], where
