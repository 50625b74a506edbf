"""Parallel sampling (``n`` above 1), as SGLang serves it, so a client asking for several samples
of a prompt gets SGLang's answer shapes.

SGLang's GenerateReqInput reads the sample count from ``sampling_params`` (a list's items must
all agree: SAME_N) and turns a single prompt asking for more than one into a batch of one; its
batch normalization names a rid a sample (``r`` becomes ``r_0`` ... for every prompt's every
sample) but a list of rids still a prompt, and refuses per-prompt lists of logprob options
(LIST_WITH_N). Its tokenizer manager then sends each prompt ``n`` times, each sample under a
fresh rid (a uuid's hex: the client's rids name only the prompts' prefix-cache warm-up, so no
answer carries them); the outputs come prompt by prompt, the samples of each in a row (prompt
``i``'s sample ``j`` at ``i * n + j``), and a stream tags each output with that index. Its OpenAI
routes count each prompt's tokens once in the usage (every ``n``-th output's) and every sample's
completion tokens.

The engine decodes greedily, so its samples are copies of one greedy output: what SGLang gives
where it decodes greedily too (temperature 0, or top_k 1). At any other temperature SGLang's
samples are independent draws, which the engine cannot give, so it refuses ``n`` above 1 there as
a value it cannot honour (protocol.greedy_refusal) rather than answer ``n`` copies.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence, TypeVar

from .protocol import Refused

#: SGLang's words (_handle_parallel_sampling) for a list of sampling_params whose ``n`` differ.
SAME_N = "The parallel_sample_num should be the same for all samples in sample params."
#: SGLang's words (_normalize_logprob_params and the like) for a per-prompt list beside ``n`` above 1.
LIST_WITH_N = "Cannot use list {} with parallel_sample_num > 1"
#: The engine's refusal of a batch whose ``n`` is below 1: SGLang expands it to no samples and
#: then indexes them, an IndexError (a 500); ``{}`` the n given.
BATCH_WITHOUT_SAMPLES = ("n={} asks for no samples of each prompt of a list of prompts, which SGLang fails on "
                         "(a 500): send n 1 or more, or leave it out.")
#: The per-prompt options SGLang refuses as a list beside ``n`` above 1, in its order.
LIST_FIELDS = ("return_logprob", "logprob_start_len", "top_logprobs_num", "return_sampling_mask",
               "sampling_logprobs_mode")

T = TypeVar("T")


def _count(value: Any) -> int:
    """A sampling_params' ``n`` as a count: SGLang serves 0 or less as one sample of a single
    prompt (it only fans out above 1; a null or a batch's 0 or less it fails on, which the
    engine refuses: check_null_n, check_batch_samples); its contract check refused any other type."""
    return value if type(value) is int and value > 1 else 1


def _beam(params: Any) -> bool:
    """SGLang's rule that a beam search (beam_width above 1) takes ``n`` as its beams, not samples."""
    first = params[0] if isinstance(params, list) and params else params
    width = first.get("beam_width") if isinstance(first, dict) else None
    return type(width) is int and width > 1


def requested(params: Any) -> int:
    """The sample count a body's ``sampling_params`` asks for, without refusing anything: which
    form SGLang reads the body in (see as_batch)."""
    first = params[0] if isinstance(params, list) and params else params
    return 1 if not isinstance(first, dict) or _beam(params) else _count(first.get("n", 1))


def given(params: Any) -> Any:
    """The ``n`` a body's ``sampling_params`` names as SGLang's parallel_sample_num holds it
    (its first object's, 1 where none is named), before any reading of it as a count."""
    first = params[0] if isinstance(params, list) and params else params
    return first.get("n", 1) if isinstance(first, dict) else 1


#: The engine's refusal of a null ``n`` in sampling_params: SGLang takes it as its
#: parallel_sample_num and compares that with 1, a TypeError (a 500).
NULL_N = "n=null in sampling_params, which SGLang fails on (a 500): give n as an integer, or leave it out."


def check_null_n(params: Any) -> None:
    """The engine's refusal (NULL_N) of a null ``n`` where SGLang's normalization fails on it, just
    after its check that a list's items agree (SAME_N); a beam search never reads it."""
    if given(params) is None and not _beam(params):
        raise Refused(NULL_N)


def check_batch_samples(params: Any) -> None:
    """The engine's refusal (BATCH_WITHOUT_SAMPLES) of a batch asking for fewer than one sample
    of each prompt, where SGLang fails; a beam search takes ``n`` as its beams, not samples."""
    n = given(params)
    if type(n) is int and n < 1 and not _beam(params):
        raise Refused(BATCH_WITHOUT_SAMPLES.format(n))


def sample_count(params: Any) -> int:
    """SGLang's parallel_sample_num of ``sampling_params`` (one object, or a list of one a
    prompt), or its refusal (SAME_N) of a list whose items disagree."""
    if isinstance(params, list) and params:
        first = params[0].get("n", 1) if isinstance(params[0], dict) else 1
        if any((p.get("n", 1) if isinstance(p, dict) else 1) != first for p in params):
            raise Refused(SAME_N)
    return requested(params)


def as_batch(body: Any) -> Any:
    """A single prompt asking for more than one sample as SGLang reads it: a batch of one, its
    answer a list. An empty input_ids stays single, as SGLang refuses it before it looks at ``n``."""
    if not isinstance(body, dict) or requested(body.get("sampling_params")) == 1:
        return body
    text, ids = body.get("text"), body.get("input_ids")
    if isinstance(text, str):  # text decides the form where both are given
        return {**body, "text": [text], **({"input_ids": [ids]} if ids is not None else {})}
    if text is None and isinstance(ids, list) and ids and not isinstance(ids[0], list):
        return {**body, "input_ids": [ids]}
    return body


def check_lists(body: dict, samples: int) -> None:
    """SGLang's refusals of per-prompt lists beside ``n`` above 1, in its order: the logprob
    options, token_ids_logprob as a list of lists, custom_logit_processor as a list."""
    if samples == 1:
        return
    for name in LIST_FIELDS:
        if isinstance(body.get(name), list):
            raise Refused(LIST_WITH_N.format(name))
    ids = body.get("token_ids_logprob")
    if isinstance(ids, list) and ids and isinstance(ids[0], list):
        raise Refused(LIST_WITH_N.format("token_ids_logprob"))
    if isinstance(body.get("custom_logit_processor"), list):
        raise Refused(LIST_WITH_N.format("custom_logit_processor"))


def expand(prompts: Sequence[T], samples: int) -> list[T]:
    """Each prompt ``samples`` times in a row, prompt by prompt, each sample's rid left for the
    engine to draw (SGLang's regenerate_rid); the prompts as they are for one sample."""
    if samples == 1:
        return list(prompts)
    return [dataclasses.replace(p, rid=None) for p in prompts for _ in range(samples)]
