"""Write an ablated copy of the ping-pong kernel: python3 patch.py SRC DST VARIANT[,VARIANT...]
no_rescale: the accumulator's per-tile rescale dropped; no_turn: the warpgroups' turn waits dropped;
no_softmax: P = S * scale (no max, no exp2, alpha = 1). Wrong outputs by design: timing only."""
import sys

src, dst, variants = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
text = open(src).read()
RESCALE = "acc = acc * gl.expand_dims(alpha_o, 1)\n        acc_tok = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), v_smem.index(last)"
LOOP_RESCALE = "            acc = acc * gl.expand_dims(alpha_o, 1)\n            acc_tok = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), v_smem.index(slot)"
FAKE = '''
@gluon.jit
def _fake_softmax(s, m_i, l_i, qk_scale, s_layout: gl.constexpr, o_layout: gl.constexpr):
    alpha_o = gl.convert_layout(l_i * 0.0 + 1.0, gl.SliceLayout(1, o_layout))
    return s * qk_scale, alpha_o, m_i, l_i


@gluon.jit
def _pingpong_mma_partition('''
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
    else:
        raise SystemExit(f"unknown variant {v}")
open(dst, "w").write(text)
