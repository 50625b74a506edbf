"""Where `prefix:N` cuts an output whose server sent no token ids: its first N tokens' characters.

Text holds no token boundaries, and N characters are usually far fewer than N tokens, so the
losslessness guard would check a shorter span than the user asked for. While the server is up,
its own tokenizer (/v1/tokenize, or the embedded engine's) counts prefixes of each text: the
longest prefix of at most N tokens is the span compared. A re-tokenized prefix may split where
the generation did not, so the cut is the tokenizer's reading of N tokens, close to the sampled
one; all texts are searched together, one request a round.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

CountMany = Callable[[Sequence[str]], list[int]]


def token_spans(texts: Sequence[str], prefix: int, count_many: CountMany) -> tuple[int, ...]:
    """Characters of each text's first `prefix` tokens (its whole length where it is shorter)."""
    overhead = count_many([""])[0]  # the special tokens a count adds (BOS), as /generate adds them
    whole = count_many(list(texts))
    # per text the bounds of the cut: lo counts at most `prefix` tokens, hi more
    bounds = {i: (0, len(t)) for i, (t, n) in enumerate(zip(texts, whole)) if n - overhead > prefix}
    spans = [len(t) for t in texts]
    while bounds:
        mids = {i: (lo + hi) // 2 for i, (lo, hi) in bounds.items()}
        counts = count_many([texts[i][:mid] for i, mid in mids.items()])
        for (i, mid), n in zip(mids.items(), counts):
            lo, hi = bounds[i]
            lo, hi = (mid, hi) if n - overhead <= prefix else (lo, mid)
            if hi - lo > 1:
                bounds[i] = (lo, hi)
            else:
                del bounds[i]
                spans[i] = lo
    return tuple(spans)


def counter_spans(texts: Sequence[str], prefix: int, counter: Callable[[str], int] | None
                  ) -> tuple[int, tuple[int | None, ...]] | None:
    """`Outputs.spans` for `texts`, counted by a live server's `counter`; None where it cannot
    count (none, no /v1/tokenize, no tokenizer, or only a stand-in count: then no token count
    is known, and the guard says it compared characters)."""
    if counter is None:
        return None
    import asyncio

    import aiohttp  # loaded already: a server just answered the workload

    from . import client

    count_many: CountMany = getattr(counter, "count_many", None) or (lambda ts: [counter(t) for t in ts])
    try:
        spans = token_spans(texts, prefix, count_many)
    except (client.ServerQueryError, aiohttp.ClientError, asyncio.TimeoutError, OSError):
        return None  # said as characters compared: a count that failed counts nothing
    if getattr(counter, "served", True) is False:  # counted by a fallback, not the server's tokenizer
        return None
    return prefix, spans


__all__ = ["counter_spans", "token_spans"]
