"""Fault injection: the failures users hit with real servers, reproduced on purpose.

Each ``--fault-*`` flag makes the engine fail the way a real server does, with the log lines a
real server writes, so the plugin's crash, hang and zero-token handling can be tested without a
broken GPU:

- ``--fault-crash-warmup``: the warm-up request fails; the server logs SGLang's
  ``Initialization failed. warmup error: ...`` with a traceback and exits 1, never ready.
- ``--fault-crash-after N``: N client requests are served; on the next one the scheduler raises
  ``CUDA error: an illegal instruction was encountered``, logs ``Scheduler hit an exception``
  and ``Received sigquit from a child process``, and the process exits 1.
- ``--fault-crash-budgets 8,12``: with a speculative method whose budget is in the set, the
  first verify (during warm-up) crashes the same way (the sm_120 DDTree b8/b12 story).
- ``--fault-hang-after N``: N client requests are served; the next one streams a few tokens,
  then the scheduler freezes for good: no more tokens, the endpoints that need the scheduler
  hang as under ``--fault-hang``, except /health and /health_generate, which answer 503 after
  SGLANG_HEALTH_CHECK_TIMEOUT (20 s) with SGLang's ``Health check failed`` line, as SGLang's
  HTTP side does over a stuck scheduler; the process stays alive (a GPU kernel that never returns).
- ``--fault-zero-tokens``: every client request finishes at once with no tokens
  (completion_tokens 0, finish_reason stop) while /health stays 200.
- ``--fault-hang``: once ready, the endpoints that need the scheduler (/generate,
  /v1/completions, /v1/chat/completions, /health, /health_generate, /server_info, /flush_cache) accept the connection and never answer, like a
  stuck scheduler; /ready, /model_info, /v1/models, /v1/tokenize and /metrics still answer,
  because in SGLang they are served without the scheduler, and so does /health with
  SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION off, which then generates nothing.
- ``--fault-slow-start S``: model loading takes S seconds longer; the port is not bound
  meanwhile (connection refused), as while SGLang loads weights.
- ``--fault-slow-factor F``: every decode step takes F times as long (the step runs, then the
  scheduler sleeps F - 1 times what it took): a planted performance regression for the gate.
- ``--fault-lossy P``: with probability P per sequence and verify step, the greedy walk accepts
  one draft token the target did not predict (where the walk stops, a child of that node is
  accepted as if the target had chosen it), so the output is no longer the target's own greedy
  output: a planted losslessness bug for the guard. No effect on ``ar`` (nothing is drafted).

A small ``--context-length`` needs no fault flag: longer requests get SGLang's HTTP 400 errors.
Warm-up and health-check requests are the engine's own: they do not count towards
``--fault-crash-after`` and are not emptied by ``--fault-zero-tokens``. The batch warm's steps
(``--warmup-batch-sizes``, before the warm-up request) are no requests at all: they count towards
nothing, are not slowed by ``--fault-slow-factor``, and leave ``--fault-lossy``'s coin where it was;
with ``--fault-crash-budgets`` the first of them is the verify that crashes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import logs

if TYPE_CHECKING:
    from torch import Tensor

# torch's wording for an asynchronous CUDA kernel fault, after the signature line
_CUDA_ERROR_TAIL = (
    "\nCUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)


class InjectedCudaError(RuntimeError):
    """A CUDA kernel fault raised on purpose by a ``--fault-*`` flag."""


@dataclass(frozen=True)
class FaultPlan:
    crash_warmup: bool = False
    crash_after: int | None = None
    crash_budgets: frozenset[int] = frozenset()
    zero_tokens: bool = False
    hang: bool = False
    hang_after: int | None = None
    slow_start: float = 0.0
    slow_factor: float = 1.0
    lossy: float = 0.0


def accept_one_wrong_draft(tokens: Tensor, parents: Tensor, target_argmax: Tensor, row: int) -> bool:
    """Make `row`'s greedy walk accept one draft token the target did not predict.

    Walks the tree as greedy acceptance will; where the walk stops, the target's argmax is
    rewritten to the token of a child of that node, so acceptance takes that (wrong) draft and
    the target's own choice after it as the bonus. `target_argmax` is changed in place. Returns
    False when the walk stops at a leaf (no draft left to accept wrongly).
    """
    toks, pars, chosen = tokens[row].tolist(), parents[row].tolist(), target_argmax[row].tolist()
    node = 0
    while True:
        children = [c for c in range(1, len(toks)) if pars[c] == node]
        match = next((c for c in children if toks[c] == chosen[node]), None)
        if match is None:
            break
        node = match
    if not children:
        return False
    target_argmax[row, node] = toks[children[0]]
    return True


#: Tokens the request that triggers ``--fault-hang-after`` receives before the freeze.
HANG_AFTER_TOKENS = 3


def illegal_instruction(reason: str) -> InjectedCudaError:
    """The exception to raise for an injected illegal-instruction crash, after saying why in the
    log (the reason goes on its own line so the signature line stays exactly SGLang's)."""
    logs.SCHEDULER.warning(f"Fault injection: {reason}")
    return InjectedCudaError(logs.ILLEGAL_INSTRUCTION + _CUDA_ERROR_TAIL)
