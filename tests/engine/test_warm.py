"""The batch warm (--warmup-batch-sizes): each listed batch size is stepped before ready, and
nothing of it shows afterwards: not in the decoder's slots, not in /metrics or /v1/loads, not in a
client's greedy output, not in a fault's counts. On the CPU the kernels are the torch references,
so the list form forces a warm there (auto warms nothing on the CPU)."""

from __future__ import annotations

import re

import pytest
import torch

from greedy import greedy_decode
from pytest_specdec import sglang_api as api
from pytest_specdec.engine import logs, warm
from pytest_specdec.engine.cli import parse_args
from pytest_specdec.engine.decoding import SpeculativeDecoder
from pytest_specdec.engine.drafter import BlockDrafter
from pytest_specdec.engine.logs import ILLEGAL_INSTRUCTION, READY_LINE
from pytest_specdec.engine.model import PRESETS, TargetModel
from pytest_specdec.engine.tokenizer import ByteTokenizer
from pytest_specdec.engine.warm import resolve, shown, warm_batch_sizes

PROMPTS = ["The capital city of France is", "x", "def add(a, b):\n    return a + b\n"]
CONTEXT = 96
WARM_LINE = r"Warmed the decode step at batch sizes (\S+) in (\d+\.\d\d) s"


@pytest.fixture(scope="module", params=["tiny", "tiny-hybrid"])
def model(request):
    return TargetModel.from_seed(PRESETS[request.param], 0, torch.device("cpu"), torch.float32, CONTEXT + 20)


def decoder_of(model, method: str, lossy: float = 0.0) -> SpeculativeDecoder:
    drafter = BlockDrafter(model, 15, 0.9, seed=0) if method != "ar" else None
    return SpeculativeDecoder(model, method, 8 if method != "ar" else 0, drafter, max_batch=4,
                              max_seq_len=CONTEXT, lossy=lossy)


def slot_state(dec: SpeculativeDecoder) -> dict:
    """Everything a later request could inherit from a slot, and the lossy fault's coin."""
    tensors = {name: getattr(dec, name).clone() for name in
               ("cache_lens", "roots", "stream_keys", "k_cache", "v_cache", "state", "conv_state")}
    return {**tensors, "lens": list(dec.lens), "top_logprobs": list(dec.top_logprobs),
            "prefill_logprobs": dec.prefill_logprobs, "coin": dec._lossy_coin.getstate()}


@pytest.mark.parametrize("method", ["ar", "dflash", "ddtree"])
def test_the_warm_steps_each_size_and_leaves_the_decoder_as_built(model, method, monkeypatch):
    """The hybrid model's recurrent states too; the lossy coin is rewound (its draws would move
    --fault-lossy's wrong acceptances onto other client steps)."""
    dec = decoder_of(model, method, lossy=0.5)
    built = slot_state(dec)
    stepped = []
    real_step = dec.step
    monkeypatch.setattr(dec, "step", lambda n: stepped.append(n) or real_step(n))
    with torch.inference_mode():
        warm_batch_sizes(dec, dec.drafter, (1, 2, 4))
    assert stepped == [1, 2, 4]
    after = slot_state(dec)
    for name, value in built.items():
        same = torch.equal(value, after[name]) if isinstance(value, torch.Tensor) else value == after[name]
        assert same, f"{name} differs after the warm"


def test_a_long_warm_says_each_size_as_it_goes(model, monkeypatch, caplog):
    monkeypatch.setattr(warm, "PROGRESS_AFTER_S", 0.0)
    dec = decoder_of(model, "ddtree")
    with torch.inference_mode(), caplog.at_level("INFO", logger=logs.SCHEDULER.name):
        warm_batch_sizes(dec, dec.drafter, (1, 2, 4))
    said = [r.getMessage() for r in caplog.records]
    assert [re.sub(r"\d+\.\d\d s", "S", m) for m in said] == [
        "Warm-up of batch size 1 (1/3) took S", "Warm-up of batch size 2 (2/3) took S",
        "Warm-up of batch size 4 (3/3) took S", "Warmed the decode step at batch sizes 1,2,4 in S (--warmup-batch-sizes)"]


def test_a_warmed_decoder_decodes_as_an_unwarmed_one(model):
    warmed = decoder_of(model, "ddtree", lossy=0.3)
    with torch.inference_mode():
        warm_batch_sizes(warmed, warmed.drafter, (1, 2, 3, 4))
    fresh = greedy_decode(model, "ddtree", 8, PROMPTS, 40, CONTEXT, lossy=0.3)
    assert greedy_decode(model, "ddtree", 8, PROMPTS, 40, CONTEXT, lossy=0.3, decoder=warmed) == fresh


def test_a_hybrid_warm_prefills_each_length_and_leaves_no_trace(model, monkeypatch, caplog):
    dec = decoder_of(model, "ddtree")
    built = slot_state(dec)
    prefilled = []
    real_prefill = dec.prefill
    monkeypatch.setattr(dec, "prefill", lambda slot, ids, key: prefilled.append(len(ids)) or real_prefill(slot, ids, key))
    with torch.inference_mode(), caplog.at_level("INFO", logger=logs.SCHEDULER.name):
        warm_batch_sizes(dec, dec.drafter, (2,), prefills=(16, 32, 64))
    assert prefilled == [len(ByteTokenizer().encode(warm.WARMUP_PROMPT))] * 2 + [16, 32, 64]
    assert re.sub(r"\d+\.\d\d s", "S", caplog.records[-1].getMessage()) == (
        "Warmed the decode step at batch sizes 2 and the prefill at prompts of 16,32,64 tokens in S "
        "(--warmup-batch-sizes)")
    after = slot_state(dec)
    for name, value in built.items():
        same = torch.equal(value, after[name]) if isinstance(value, torch.Tensor) else value == after[name]
        assert same, f"{name} differs after the warm"


def test_only_a_hybrid_model_on_compiling_kernels_warms_its_prefill(model):
    """One prompt per chain bucket a prompt under the context length reaches."""
    dec = decoder_of(model, "ar")
    assert warm.prefill_lengths(dec) == ()  # the torch references compile nothing
    dec.kernel_impl = "triton"
    assert warm.prefill_lengths(dec) == ((16, 32, 64) if model.is_hybrid else ())
    dec.max_seq_len = 20
    assert warm.prefill_lengths(dec) == ((16, 20) if model.is_hybrid else ())


def test_auto_warms_every_size_where_the_kernels_compile_and_none_with_the_torch_ones():
    assert resolve(None, 4, "triton") == (1, 2, 3, 4)
    assert resolve(None, 4, "torch") == ()
    assert resolve((), 4, "triton") == ()
    assert resolve((2, 3), 4, "torch") == (2, 3)
    assert (shown((1, 2, 3, 4)), shown((1, 2, 4)), shown((1, 2)), shown((5,))) == ("1-4", "1,2,4", "1,2", "5")


@pytest.mark.parametrize("text, sizes", [("auto", None), ("none", ()), ("3,1,3", (1, 3)), ("8", (8,))])
def test_the_flag_takes_auto_none_or_a_list(text, sizes):
    assert parse_args(["--method", "ar", "--warmup-batch-sizes", text]).warmup_batch_sizes == sizes


@pytest.mark.parametrize("flags, message", [
    (["--warmup-batch-sizes", "9"], "--warmup-batch-sizes 9: a batch size must be in 1..8 (--max-batch)"),
    (["--warmup-batch-sizes", "0,2,5", "--max-batch", "4"],
     "--warmup-batch-sizes 0,5: a batch size must be in 1..4 (--max-batch)"),
    (["--warmup-batch-sizes", "1,x"], "expected auto, none or comma-separated batch sizes like 1,2,4, got '1,x'"),
    (["--warmup-batch-sizes", ","], "expected auto, none or comma-separated batch sizes like 1,2,4, got ','"),
])
def test_a_bad_list_is_one_clear_error(flags, message, capsys):
    with pytest.raises(SystemExit):
        parse_args(["--method", "ddtree", *flags])
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()[-1]) > len(message), err


def test_listed_sizes_warm_before_ready_and_leave_no_trace(engines):
    """Against an engine of auto (nothing warmed on the CPU): the same greedy outputs, with
    --fault-lossy's wrong acceptances on the same steps, and no request counted anywhere."""
    flags = ("--method", "ddtree", "--budget", "8", "--context-length", str(CONTEXT), "--fault-lossy", "0.3")
    warmed = engines(*flags, "--warmup-batch-sizes", "1,2,3", ready=False)
    plain = engines(*flags, ready=False)
    warmed.wait_ready(), plain.wait_ready()
    line = warmed.wait_for_line(WARM_LINE)
    assert line.group(1) == "1-3" and float(line.group(2)) < 10
    assert warmed.log.index(line.group(0)) < warmed.log.index(READY_LINE)
    assert not re.search(WARM_LINE, plain.log)  # auto on the CPU
    # /server_info: the sizes warmed, and start-up figures that run to ready, the warm included
    warmed_info, plain_info = warmed.get("/server_info").json(), plain.get("/server_info").json()
    assert (warmed_info["warmup_batch_sizes"], plain_info["warmup_batch_sizes"]) == ([1, 2, 3], [])
    for figures in (warmed_info["startup_time"], warmed_info["internal_states"][0]["startup_time"]):
        assert figures["scheduler_e2e"] >= float(line.group(2)) - 0.005 + figures["load_weight"], figures
    assert warmed_info["startup_time"]["tokenizer_e2e"] >= warmed_info["startup_time"]["scheduler_e2e"]
    for engine in (warmed, plain):
        metrics = engine.get("/metrics").text
        for name in ("sglang:num_requests_total", "sglang:generation_tokens_total"):
            assert sum(map(float, re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", metrics, re.M))) == 0, metrics
        load = engine.get("/v1/loads").json()["loads"][0]
        assert (load[api.LOAD_RUNNING], load[api.LOAD_WAITING]) == (0, 0)
    for prompt in PROMPTS:
        assert warmed.generate(prompt, 40)["output_ids"] == plain.generate(prompt, 40)["output_ids"]


def test_the_warm_spends_no_crash_after_count(engines):
    engine = engines("--method", "ddtree", "--budget", "8", "--warmup-batch-sizes", "1,2,3,4",
                     "--fault-crash-after", "1")
    assert engine.generate(PROMPTS[0], 8)["meta_info"]["completion_tokens"] == 8
    with pytest.raises(OSError):
        engine.post("/generate", {"text": PROMPTS[0]}, timeout=30)
    assert engine.wait_exit() != 0 and ILLEGAL_INSTRUCTION in engine.log


def test_a_crashing_budget_crashes_at_the_warms_first_verify(engines):
    engine = engines("--method", "ddtree", "--budget", "8", "--warmup-batch-sizes", "1,2",
                     "--fault-crash-budgets", "8", ready=False)
    assert engine.wait_exit() != 0
    assert ILLEGAL_INSTRUCTION in engine.log and READY_LINE not in engine.log
    assert not re.search(WARM_LINE, engine.log) and "Prefill batch" not in engine.log
