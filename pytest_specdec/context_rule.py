"""SGLang's context-length rule for one request, in one place: the embedded engine enforces it and
the plugin's guard (workloads.fit_to_context) checks a workload against it, so the two agree.

SGLang applies it in two stages. Its tokenizer manager refuses a prompt of ``context_length``
tokens or more, and one whose prompt plus ``max_new_tokens`` exceeds ``context_length`` (equal is
allowed). Its scheduler then serves at most ``max_req_len = context_length - 1`` tokens a request:
it cuts ``max_new_tokens`` to ``max_req_len - prompt - 1`` without a word, and refuses a prompt of
``max_req_input_len = max_req_len - 5`` tokens or more. A benchmark must get what it asked for, so
the guard requires the request to be served in full (``fits``), which is stricter than passing the
tokenizer manager.

Two things shrink these limits on SGLang and are not modelled: EAGLE-family algorithms reserve
output slots for their draft tokens (DFLASH and DDTREE reserve none), and a KV pool smaller than
the context lowers ``max_req_len`` to the pool's size less one (``max_req_input_len`` in
/server_info tells).
"""

from __future__ import annotations

#: How far below max_req_len SGLang's scheduler puts the longest prompt it takes.
INPUT_MARGIN = 5


def max_req_len(context_length: int) -> int:
    """The most tokens (prompt plus output) SGLang's scheduler gives one request."""
    return context_length - 1


def max_req_input_len(context_length: int) -> int:
    """SGLang's scheduler refuses a prompt of this many tokens or more."""
    return max_req_len(context_length) - INPUT_MARGIN


def context_from_max_req_input_len(value: int) -> int:
    """The context length whose max_req_input_len is ``value`` (what /server_info states)."""
    return value + INPUT_MARGIN + 1


def new_tokens_served(prompt_tokens: int, max_new_tokens: int, context_length: int) -> int:
    """max_new_tokens as SGLang's scheduler cuts it to its request limit."""
    return max(0, min(max_new_tokens, max_req_len(context_length) - prompt_tokens - 1))


def max_prompt_tokens(max_new_tokens: int, context_length: int) -> int:
    """The longest prompt served in full with ``max_new_tokens`` (below 1: none is)."""
    return min(max_req_input_len(context_length) - 1, context_length - 2 - max_new_tokens)


def fits(prompt_tokens: int, max_new_tokens: int, context_length: int) -> bool:
    """Whether SGLang serves the request as asked: neither stage refuses it nor cuts its output."""
    return prompt_tokens <= max_prompt_tokens(max_new_tokens, context_length)


def context_needed(prompt_tokens: int, max_new_tokens: int) -> int:
    """The smallest context length that serves the request in full."""
    return max(prompt_tokens + max_new_tokens + 2, prompt_tokens + INPUT_MARGIN + 2)


__all__ = ["INPUT_MARGIN", "context_from_max_req_input_len", "context_needed", "fits", "max_prompt_tokens",
           "max_req_input_len", "max_req_len", "new_tokens_served"]
