"""Greedy decoding of a few prompts in-process, shared by the lossless tests."""

from __future__ import annotations

import torch

from pytest_specdec.engine.decoding import SpeculativeDecoder
from pytest_specdec.engine.drafter import BlockDrafter
from pytest_specdec.engine.tokenizer import ByteTokenizer


def greedy_decode(model, method: str, budget: int, prompts: list[str], new_tokens: int, context: int,
                  agreement: float = 0.9, block_size: int = 16, recurrent_tree: str = "exact",
                  lossy: float = 0.0, decoder: SpeculativeDecoder | None = None) -> tuple[list, float]:
    """Decode all prompts as one batch; return each prompt's first ``new_tokens`` tokens and the
    mean number of tokens committed per step (the accept length). ``decoder``: one built already
    (its own method, budget and drafter then; the other settings are ignored)."""
    if decoder is None:
        drafter = BlockDrafter(model, block_size - 1, agreement, seed=0) if method != "ar" else None
        decoder = SpeculativeDecoder(model, method, budget, drafter, max_batch=len(prompts), max_seq_len=context,
                                     recurrent_tree=recurrent_tree, lossy=lossy)
    dec, drafter = decoder, decoder.drafter
    tok = ByteTokenizer()
    outs = []
    with torch.inference_mode():
        for slot, prompt in enumerate(prompts):
            ids = tok.encode(prompt)
            outs.append([dec.prefill(slot, ids, drafter.stream_key(ids) if drafter else 0)])
        steps = 0
        while min(len(o) for o in outs) < new_tokens:
            step = dec.step(len(prompts))
            steps += 1
            for out, tokens in zip(outs, step.tokens):
                out.extend(tokens)
    committed = sum(len(o) - 1 for o in outs) / len(outs)
    return [o[:new_tokens] for o in outs], committed / steps
