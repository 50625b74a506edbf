"""Start-up's batch warm: one real decode step at each batch size before the engine says ready.

Why: on a GPU the step's Triton kernels (the tree build, tree-verify attention, accept and commit,
a hybrid model's recurrent ops) are planned and compiled per number of running sequences n; the
KV cache's capacity is fixed per engine, so n is what varies. Unwarmed, the first step at each n
compiles inside a client's measurement (a baseline that is several times too slow). SGLang
captures its decode CUDA graphs for a list of batch sizes at start for the same reason.

``--warmup-batch-sizes``: ``auto`` warms 1..--max-batch where the kernels compile (kernel impl
``triton``) and nothing with the torch references (CPU engines start as fast as before); ``none``
warms nothing; a comma list warms those sizes. The scheduler thread runs the warm before it takes
any request: the real ``SpeculativeDecoder.step`` on dummy slots (one short prompt prefilled into
each), then ``SpeculativeDecoder.reset``, so no request is counted, no fault budget is spent, and
later outputs are those of an engine that never warmed.

A hybrid model's prefill also compiles where the kernels do: its chains run at a few node counts
(linear_attention.prefill_bucket), so the warm prefills one prompt per count a prompt under the
context length reaches (:func:`prefill_lengths`) before the reset.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from . import logs
from .linear_attention import prefill_buckets
from .tokenizer import ByteTokenizer

if TYPE_CHECKING:
    from .decoding import SpeculativeDecoder
    from .drafter import BlockDrafter

#: The engine's own prompt: SGLang's warm-up request's, and the batch warm's dummy slots'.
WARMUP_PROMPT = "The capital city of France is"
#: Past this many seconds into the warm, each batch size gets its own progress line.
PROGRESS_AFTER_S = 5.0


def resolve(requested: tuple[int, ...] | None, max_batch: int, kernel_impl: str) -> tuple[int, ...]:
    """The batch sizes to warm: ``requested`` as given, or for ``auto`` (None) every size up to
    ``max_batch`` where the kernels compile (``kernel_impl`` as the decoder resolved it)."""
    if requested is not None:
        return requested
    return tuple(range(1, max_batch + 1)) if kernel_impl == "triton" else ()


def shown(sizes: tuple[int, ...]) -> str:
    """Sizes as the log shows them: ``1-8`` for a run of consecutive sizes, else ``1,2,4``."""
    if len(sizes) > 2 and list(sizes) == list(range(sizes[0], sizes[-1] + 1)):
        return f"{sizes[0]}-{sizes[-1]}"
    return ",".join(map(str, sizes))


def prefill_lengths(decoder: SpeculativeDecoder) -> tuple[int, ...]:
    """Prompt lengths whose prefills meet every compiled variant of a hybrid model's prefill: one
    per chain bucket a prompt of at most ``max_seq_len`` tokens reaches, where the kernels compile."""
    if decoder.kernel_impl != "triton" or not decoder.model.is_hybrid:
        return ()
    return tuple(sorted({min(bucket, decoder.max_seq_len) for bucket in prefill_buckets()}))


def warm_batch_sizes(decoder: SpeculativeDecoder, drafter: BlockDrafter | None, sizes: tuple[int, ...],
                     prefills: tuple[int, ...] | None = None) -> float:
    """Run one decode step at each of ``sizes`` on dummy slots and one prefill of each length in
    ``prefills`` (None: :func:`prefill_lengths`), then reset the decoder; return the seconds it
    took. Call it before any request reaches the decoder (it overwrites slots)."""
    started = time.perf_counter()
    prompt = ByteTokenizer().encode(WARMUP_PROMPT)[:decoder.max_seq_len]
    prefills = prefill_lengths(decoder) if prefills is None else prefills
    key = drafter.stream_key(prompt) if drafter is not None else 0
    for slot in range(max(sizes)):
        decoder.prefill(slot, prompt, key)
    # each size steps from the prompt's end, so no slot outgrows a short --context-length
    lens, cache_lens, roots = list(decoder.lens), decoder.cache_lens.clone(), decoder.roots.clone()
    for done, n in enumerate(sizes, 1):
        size_started = time.perf_counter()
        decoder.lens[:] = lens
        decoder.cache_lens.copy_(cache_lens)
        decoder.roots.copy_(roots)
        decoder.step(n)
        now = time.perf_counter()
        if now - started > PROGRESS_AFTER_S:
            logs.SCHEDULER.info(f"Warm-up of batch size {n} ({done}/{len(sizes)}) took {now - size_started:.2f} s")
    for length in prefills:
        decoder.prefill(0, (prompt * (length // len(prompt) + 1))[:length], key)
    decoder.reset()
    took = time.perf_counter() - started
    also = f" and the prefill at prompts of {','.join(map(str, prefills))} tokens" if prefills else ""
    logs.SCHEDULER.info(f"Warmed the decode step at batch sizes {shown(sizes)}{also} in {took:.2f} s "
                        f"(--warmup-batch-sizes)")
    return took
