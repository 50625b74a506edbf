"""The tokenizer, the seeded model and its safetensors round trip."""

from __future__ import annotations

import json

import pytest
import torch

from pytest_specdec.engine.decoding import SpeculativeDecoder
from pytest_specdec.engine.model import PRESETS, TargetModel
from pytest_specdec.engine.protocol import OUT_OF_VOCAB
from pytest_specdec.engine.tokenizer import BOS_ID, EOS_ID, ByteTokenizer, IncrementalDecoder

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def model():
    return TargetModel.from_seed(PRESETS["tiny"], 0, CPU, torch.float32, 256)


def greedy_ids(model, prompt_ids, n=40):
    dec = SpeculativeDecoder(model, "ar", 0, None, max_batch=1, max_seq_len=200)
    with torch.inference_mode():
        out = [dec.prefill(0, prompt_ids)]
        while len(out) < n:
            out += dec.step(1).tokens[0]
    return out


def test_tokenizer_round_trips_utf8_with_bos():
    tok = ByteTokenizer()
    ids = tok.encode("héllo ✓")
    assert ids[0] == BOS_ID and len(ids) == 1 + len("héllo ✓".encode())
    assert tok.decode(ids + [EOS_ID]) == "héllo ✓"


def test_incremental_decoder_holds_back_a_split_character():
    dec = IncrementalDecoder()
    check = "✓".encode()
    assert dec.feed([ord("a"), check[0]]) == "a"  # incomplete sequence not shown yet
    assert dec.feed(list(check[1:])) == "a✓"


def test_seeded_weights_are_deterministic_and_seed_dependent(model):
    same = TargetModel.from_seed(PRESETS["tiny"], 0, CPU, torch.float32, 256)
    other = TargetModel.from_seed(PRESETS["tiny"], 1, CPU, torch.float32, 256)
    tokens = torch.tensor([ByteTokenizer().encode("abc")])
    with torch.inference_mode():
        assert torch.equal(model.prefill(tokens), same.prefill(tokens))
        assert not torch.allclose(model.prefill(tokens), other.prefill(tokens))


def test_output_is_printable_text_that_depends_on_the_whole_context(model):
    tok = ByteTokenizer()
    ids = tok.encode("The capital city of France is")
    out = greedy_ids(model, ids, n=100)
    assert all(32 <= t < 127 or t == 10 for t in out)
    for pos in (1, 20):  # one bit of one early prompt byte
        changed = list(ids)
        changed[pos] ^= 1
        assert greedy_ids(model, changed, n=100) != out, (
            f"output ignores prompt byte {pos}: lossless tests could not catch a wrong KV row there")


def test_context_overturns_the_context_free_choice_sometimes(model):
    """About 15% of greedy tokens differ from what the current token alone predicts: enough for
    drafts to fail and trees to matter, rare enough for drafts to succeed."""
    with torch.inference_mode():
        successor = model.context_free_logits().argmax(-1)
    ids = ByteTokenizer().encode("Once upon a time")
    out = greedy_ids(model, ids, n=150)
    seq = ids[-1:] + out
    flips = sum(int(successor[a]) != b for a, b in zip(seq, seq[1:])) / len(out)
    assert 0.03 < flips < 0.4


def test_an_id_outside_the_vocabulary_embeds_as_zeros(model):
    """protocol.OUT_OF_VOCAB: the prefill embeds it as zeros (not as the vocabulary's last row,
    where a negative index would land), as SGLang's vocab-parallel embedding embeds such an id."""
    zeroed = TargetModel.from_seed(PRESETS["tiny"], 0, CPU, torch.float32, 256)
    zeroed.embed = torch.cat([model.embed, torch.zeros(1, model.embed.shape[1])])  # row 259: zeros
    with torch.inference_mode():
        out = model.prefill(torch.tensor([[BOS_ID, OUT_OF_VOCAB, 65]]))
        assert torch.equal(out, zeroed.prefill(torch.tensor([[BOS_ID, model.config.vocab_size, 65]])))


def test_safetensors_round_trip(model, tmp_path):
    file = tmp_path / "tiny.safetensors"
    model.save_safetensors(file)
    loaded = TargetModel.from_safetensors(file, CPU, torch.float32, 256)
    assert loaded.config == model.config
    tokens = torch.tensor([ByteTokenizer().encode("round trip")])
    with torch.inference_mode():
        assert torch.equal(loaded.prefill(tokens), model.prefill(tokens))


def test_hugging_face_directory_layout_loads(model, tmp_path):
    from safetensors.torch import load_file, save_file

    model.save_safetensors(tmp_path / "plain.safetensors")
    tensors = load_file(str(tmp_path / "plain.safetensors"))
    save_file(tensors, str(tmp_path / "model.safetensors"))  # no specdec metadata
    cfg = model.config
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
        "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim, "intermediate_size": cfg.intermediate_size,
        "rope_theta": cfg.rope_theta, "rms_norm_eps": cfg.rms_norm_eps}))
    loaded = TargetModel.from_safetensors(tmp_path, CPU, torch.float32, 256, num_layers=1)
    assert loaded.config.num_layers == 1 and loaded.config.head_dim == cfg.head_dim


def test_wrong_shapes_are_named(model, tmp_path):
    from safetensors.torch import load_file, save_file

    model.save_safetensors(tmp_path / "m.safetensors")
    tensors = load_file(str(tmp_path / "m.safetensors"))
    tensors["model.norm.weight"] = torch.ones(3)
    save_file(tensors, str(tmp_path / "bad.safetensors"),
              metadata={"specdec_config": json.dumps(model.config.__dict__)})
    with pytest.raises(ValueError, match="model.norm.weight"):
        TargetModel.from_safetensors(tmp_path / "bad.safetensors", CPU, torch.float32, 256)
