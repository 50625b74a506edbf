"""Write a variant of the ping-pong kernel: python3 patch.py SRC DST VARIANT[,VARIANT...]
no_rescale: the accumulator's per-tile rescale dropped; no_turn: the warpgroups' turn waits dropped;
no_softmax: P = S * scale (no max, no exp2, alpha = 1). no_rescale and no_softmax give wrong outputs
by design; no_turn only lets both warpgroups issue MMAs at will; noturn also drops the turns' arrivals.
early: the rescale and P's conversion done before the turn wait instead of between the two MMAs."""
import sys

src, dst, variants = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
text = open(src).read()
RESCALE = ("acc = acc * gl.expand_dims(alpha_o, 1)\n        acc_tok = warpgroup_mma(gl.convert_layout(p.to(dtype), "
           "p_layout), v_smem.index(last)")
LOOP_RESCALE = ("            acc = acc * gl.expand_dims(alpha_o, 1)\n            acc_tok = warpgroup_mma("
                "gl.convert_layout(p.to(dtype), p_layout), v_smem.index(slot)")
FAKE = '''
@gluon.jit
def _fake_softmax(s, m_i, l_i, qk_scale, s_layout: gl.constexpr, o_layout: gl.constexpr):
    alpha_o = gl.convert_layout(l_i * 0.0 + 1.0, gl.SliceLayout(1, o_layout))
    return s * qk_scale, alpha_o, m_i, l_i


@gluon.jit
def _pingpong_mma_partition('''
EARLY = [
    ("""            mbarrier.wait(ready.index(nxt % STAGES), phase=(nxt // STAGES) & 1)
            mbarrier.wait(turn.index(WG), phase=(turns + j + 1) & 1)
            s_tok = warpgroup_mma(q_op, k_smem.index(nxt % STAGES).permute((1, 0)), s_zero, use_acc=False,
                                  is_async=True)
            acc = acc * gl.expand_dims(alpha_o, 1)
            acc_tok = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), v_smem.index(slot), acc,
                                    is_async=True)
""", """            acc = acc * gl.expand_dims(alpha_o, 1)
            p_op = gl.convert_layout(p.to(dtype), p_layout)
            mbarrier.wait(ready.index(nxt % STAGES), phase=(nxt // STAGES) & 1)
            mbarrier.wait(turn.index(WG), phase=(turns + j + 1) & 1)
            s_tok = warpgroup_mma(q_op, k_smem.index(nxt % STAGES).permute((1, 0)), s_zero, use_acc=False,
                                  is_async=True)
            acc_tok = warpgroup_mma(p_op, v_smem.index(slot), acc, is_async=True)
"""),
    ("""        mbarrier.wait(turn.index(WG), phase=(turns + n_full) & 1)
        acc = acc * gl.expand_dims(alpha_o, 1)
        acc_tok = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), v_smem.index(last), acc, is_async=True)
""", """        acc = acc * gl.expand_dims(alpha_o, 1)
        p_op = gl.convert_layout(p.to(dtype), p_layout)
        mbarrier.wait(turn.index(WG), phase=(turns + n_full) & 1)
        acc_tok = warpgroup_mma(p_op, v_smem.index(last), acc, is_async=True)
"""),
]
for v in variants:
    if v == "base":
        continue
    if v == "no_rescale":
        assert text.count(RESCALE) == 1 and text.count(LOOP_RESCALE) == 1
        text = text.replace(RESCALE, RESCALE.replace("acc = acc * gl.expand_dims(alpha_o, 1)\n        ", ""))
        text = text.replace(LOOP_RESCALE,
                            LOOP_RESCALE.replace("            acc = acc * gl.expand_dims(alpha_o, 1)\n", ""))
    elif v == "no_turn":
        n = text.count("mbarrier.wait(turn.index(WG)")
        assert n == 3, n
        text = text.replace("mbarrier.wait(turn.index(WG)", "pass  # mbarrier.wait(turn.index(WG)")
    elif v == "no_softmax":
        assert text.count("\n@gluon.jit\ndef _pingpong_mma_partition(") == 1
        text = text.replace("\n@gluon.jit\ndef _pingpong_mma_partition(", FAKE, 1)
        seg_start = text.index("def _pingpong_mma_item(")
        seg_end = text.index("def _tail_softmax_step(")
        seg = text[seg_start:seg_end]
        assert seg.count("= _softmax_step(s, m_i") == 2
        text = text[:seg_start] + seg.replace("= _softmax_step(s, m_i", "= _fake_softmax(s, m_i") + text[seg_end:]
    elif v == "noturn":
        assert text.count("mbarrier.wait(turn.index(WG)") == 3
        assert text.count("mbarrier.arrive(turn.index((WG + 1) % NUM_WG))") == 3
        text = text.replace("mbarrier.wait(turn.index(WG)", "pass  # mbarrier.wait(turn.index(WG)")
        text = text.replace("mbarrier.arrive(turn.index((WG + 1) % NUM_WG))", "pass  # no turn to hand over")
    elif v == "early":
        for old, new in EARLY:
            assert text.count(old) == 1, old
            text = text.replace(old, new)
    else:
        raise SystemExit(f"unknown variant {v}")
open(dst, "w").write(text)
