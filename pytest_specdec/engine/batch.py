"""A batched /generate body (``text`` or ``input_ids`` a list of prompts) split into one request a
prompt, as SGLang's GenerateReqInput.normalize_batch_and_arguments splits it.

SGLang reads a body as a batch when ``text`` is a list (``text`` decides when both are given), or
else when ``input_ids`` is a list of lists. Each prompt gets ``sampling_params`` (one object for
all, or the list's item of its place), a rid (a string ``r`` becomes ``r_0``, ``r_1``, ...; a
list gives one a prompt; none, a fresh one each), and is then checked as a single request is
(protocol.parse_generate), in the prompt order, the first refusal answering the whole batch. The
answer is a list of the prompts' outputs in the prompt order (see EngineServer.generate).

Where SGLang has no answer of its own for a list whose length disagrees with the batch's, the
engine refuses it with a 400 naming both lengths: a shorter ``sampling_params`` list fails
SGLang with an IndexError (a 500), and a longer one has its extra items ignored without a word.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from . import contract, parallel
from .protocol import (GENERATE_FIELDS, GenerateRequest, Refused, RidsCheck, SchemaViolation, check_inputs,
                       check_served_as_launched, check_session_pair, known_fields, parse_one_prompt,
                       unsupported_after, UNSERVED_LOGPROB_OPTIONS)

#: SGLang's words (_normalize_rid) for a list of rids whose length is not the batch's.
RID_LENGTH = "The specified rids length mismatch with the batch_size for batch processing."
#: SGLang's words (_validate_rid_uniqueness) for rids given twice, ``{}`` their list as Python shows it.
DUPLICATE_RIDS = "Duplicate request IDs detected within the request: {}"
#: The per-prompt fields SGLang also takes as one value a prompt in a batch.
PER_PROMPT_FIELDS = ("return_logprob", "top_logprobs_num", "logprob_start_len", "return_sampling_mask",
                     "return_hidden_states")
#: Fields every prompt of a batch is served by (its logprobs), carried to each prompt's own check.
SHARED_FIELDS = ("stream", "return_logprob", "top_logprobs_num", "logprob_start_len", *UNSERVED_LOGPROB_OPTIONS)


def is_batch(body: Any) -> bool:
    """Whether SGLang reads ``body`` as a batch (its _determine_batch_size)."""
    if not isinstance(body, dict):
        return False
    text, ids = body.get("text"), body.get("input_ids")
    if text is not None:
        return isinstance(text, list)
    return isinstance(ids, list) and bool(ids) and isinstance(ids[0], list)


def parse_batch(body: dict, *, encode, vocab_size: int, context_length: int,
                rids_free: RidsCheck | None = None) -> list[GenerateRequest]:
    """One GenerateRequest a prompt of a batched body, in the prompt order; raises the first
    refusal, as SGLang answers a batch with its first error: its normalization's (the rids), then
    a rid in flight (``rids_free``, all the batch's at once), then each prompt's; the engine's
    refusal of a value it cannot honour only once every prompt passed SGLang's checks."""
    if (violation := contract.generate_contract_error(body)) is not None:
        raise SchemaViolation(violation)
    known_fields(body, GENERATE_FIELDS)  # an unknown name is refused in an empty batch too
    text, ids = body.get("text"), body.get("input_ids")
    prompts = text if text is not None else ids
    n = len(prompts)
    if text is not None and ids is not None and not (isinstance(ids, list) and ids and isinstance(ids[0], list)):
        # SGLang would hand each prompt an integer as its ids (a 500); one form for both is clear
        raise Refused("input_ids should be a list of lists for batch processing (text is a batch; give "
                      "input_ids as one list of ids a prompt, or leave it out).")
    check_inputs(body)
    given = body.get("rid")
    try:
        check_session_pair(body)
        samples = parallel.sample_count(body.get("sampling_params"))
        parallel.check_null_n(body.get("sampling_params"))
        rids = batch_rids(given, n, samples)
    except Refused as exc:
        # SGLang's abort task then reads the rid as given: a list's items (a string's characters)
        exc.rids = [r for r in given if isinstance(r, str)] if isinstance(given, (list, str)) else []
        raise
    params = batch_sampling(body.get("sampling_params"), n)
    parallel.check_lists(body, samples)
    if ids is not None and text is not None and len(ids) != n:
        raise Refused(f"input_ids has {len(ids)} prompts but text has {n}: give both for every prompt, "
                      f"or only one of them.")
    try:
        check_served_as_launched(body)
        parallel.check_batch_samples(body.get("sampling_params"))  # where SGLang's batch handling fails
    except Refused as exc:
        exc.rids = [r for r in rids if r is not None]
        raise
    if rids_free is not None:
        rids_free([r for r in rids if r is not None])
    rids = rids[:n]  # a prompt's samples draw fresh rids (parallel.expand)
    requests = []
    for i in range(n):
        # the first prompt's check covers the fields all share; the others carry only their own and
        # the logprob options that shape their answer (small), so a batch's check grows with its body
        item = dict(body) if i == 0 else {k: body[k] for k in SHARED_FIELDS if k in body}
        item["text" if text is not None else "input_ids"] = prompts[i]
        if text is not None and ids is not None:
            item["input_ids"] = ids[i]
        item["sampling_params"], item["rid"] = params[i], rids[i]
        for name in PER_PROMPT_FIELDS:
            if isinstance(body.get(name), list) and len(body[name]) == n:
                item[name] = body[name][i]
        requests.append(parse_one_prompt(item, encode=encode, vocab_size=vocab_size, context_length=context_length,
                                         batched=True))
    unsupported_after(requests)
    return parallel.expand(requests, samples)


def batch_rids(rid: Any, n: int, samples: int = 1) -> list[str | None]:
    """Each prompt's rid, as SGLang's _normalize_rid and _validate_rid_uniqueness make them, in
    their words; None leaves the engine to draw one. With ``samples`` above 1 a string names
    every sample (``n * samples`` rids), a list still one a prompt (see parallel.py)."""
    if rid is None:
        return [None] * n
    if isinstance(rid, str):
        return [f"{rid}_{i}" for i in range(n * samples)]
    if len(rid) != n:
        raise Refused(RID_LENGTH)
    duplicates = [r for r, count in Counter(rid).items() if count > 1]
    if duplicates:
        raise Refused(DUPLICATE_RIDS.format(duplicates))
    return list(rid)


def batch_sampling(params: Any, n: int) -> list[Any]:
    """Each prompt's sampling_params: one object (or null) for all, or a list of one a prompt."""
    if not isinstance(params, list):
        return [params] * n
    if len(params) != n:
        raise Refused(f"sampling_params has {len(params)} items for a batch of {n} prompts: give one object "
                      f"for all prompts, or a list of one object a prompt.")
    return list(params)
