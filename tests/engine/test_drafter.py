"""The synthetic block drafter: its agreement knob moves acceptance, and it is deterministic."""

from __future__ import annotations

import pytest
import torch

from pytest_specdec.engine.decoding import SpeculativeDecoder
from pytest_specdec.engine.drafter import BlockDrafter
from pytest_specdec.engine.model import PRESETS, TargetModel
from pytest_specdec.engine.tokenizer import ByteTokenizer

PROMPTS = ["The capital city of France is", "Once upon a time", "SELECT * FROM"]


@pytest.fixture(scope="module")
def model():
    return TargetModel.from_seed(PRESETS["tiny"], 0, torch.device("cpu"), torch.float32, 600)


def acceptance_length(model, method: str, agreement: float, budget: int = 16, new_tokens: int = 200) -> float:
    """Tokens committed per verify step (bonus included), over a few prompts."""
    drafter = BlockDrafter(model, 15, agreement, seed=0)
    dec = SpeculativeDecoder(model, method, budget, drafter, max_batch=len(PROMPTS), max_seq_len=512)
    tok = ByteTokenizer()
    with torch.inference_mode():
        for slot, prompt in enumerate(PROMPTS):
            ids = tok.encode(prompt)
            dec.prefill(slot, ids, drafter.stream_key(ids))
        committed = steps = 0
        while committed < new_tokens * len(PROMPTS):
            out = dec.step(len(PROMPTS))
            committed += sum(len(t) for t in out.tokens)
            steps += len(PROMPTS)
    return committed / steps


def test_high_agreement_ddtree_commits_several_tokens_per_step(model):
    ddtree = acceptance_length(model, "ddtree", 0.9)
    dflash = acceptance_length(model, "dflash", 0.9, budget=15)
    assert ddtree > 3.0
    assert ddtree >= dflash > 2.0


def test_zero_agreement_commits_about_one_token_per_step(model):
    assert acceptance_length(model, "ddtree", 0.0, new_tokens=60) < 1.2


def test_acceptance_grows_with_agreement(model):
    lengths = [acceptance_length(model, "ddtree", p, new_tokens=80) for p in (0.3, 0.7, 1.0)]
    assert lengths == sorted(lengths) and lengths[0] < lengths[-1]


def test_drafts_are_deterministic_and_independent_of_the_batch(model):
    a = BlockDrafter(model, 15, 0.5, seed=3)
    b = BlockDrafter(model, 15, 0.5, seed=3)
    roots = torch.tensor([65, 66, 67])
    positions = torch.tensor([10, 20, 30])
    keys = torch.tensor([a.stream_key([1, 2]), a.stream_key([3]), a.stream_key([4, 5, 6])])
    both = a.draft(roots, positions, keys)
    assert torch.equal(both, b.draft(roots, positions, keys))
    assert torch.equal(both[1:2], a.draft(roots[1:2], positions[1:2], keys[1:2]))
    assert both.shape == (3, 15, model.config.vocab_size)
    assert torch.allclose(both.exp().sum(-1), torch.ones(3, 15))


def test_agreement_outside_unit_interval_is_refused(model):
    with pytest.raises(ValueError, match="agreement"):
        BlockDrafter(model, 15, 1.5, seed=0)
