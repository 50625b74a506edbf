"""The rids of the client requests in flight, kept as SGLang's tokenizer manager keeps them (its
rid_to_state): a request naming a rid that one in flight has is refused, and a rid is free again
once its request ended (its last answer sent, or dropped after its client left).

SGLang checks every rid of a request (each prompt's of a batch) before it sends any to its
scheduler, so a refused batch runs none of its prompts; `claim` does the same.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from .protocol import Refused

if TYPE_CHECKING:  # the scheduler loads torch; this module stays light for the contract tests
    from .scheduler import Request

#: SGLang's words (its tokenizer manager's _init_req_state) for a rid already in flight.
DUPLICATE_RID = "Duplicate request ID detected: {}"
#: How long after a /generate stream ends SGLang's abort task (create_abort_task) aborts its rids
#: still in flight: a stream refused for naming a rid in flight so aborts the request holding it.
STREAM_ABORT_DELAY_S = 2.0


class DuplicateRid(Refused):
    """A request naming a rid in flight, refused; ``rids`` are all the request's (Refused.rids)."""

    def __init__(self, rid: str, rids: list[str]) -> None:
        super().__init__(DUPLICATE_RID.format(rid))
        self.rids = rids


class InFlight:
    """Rids in flight, each with its request. Claimed on the HTTP thread; released there or on
    the scheduler thread (Request.done), hence the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[str, Request] = {}

    def check(self, rids: list[str]) -> None:
        """Refuse the first of a request's ``rids`` in flight or given twice, as SGLang's tokenizer
        manager does at its point of the request's checks (protocol.RidsCheck); `claim` takes them
        once the request passed all its checks, and refuses again one claimed meanwhile."""
        with self._lock:
            self._check(rids)

    def _check(self, rids: list[str]) -> None:
        seen: set[str] = set()
        for rid in rids:
            if rid in self._requests or rid in seen:
                raise DuplicateRid(rid, rids)
            seen.add(rid)

    def claim(self, reqs: Iterable[Request]) -> None:
        """Take the rids of ``reqs`` (a request, or a batch's prompts), all or none: the first rid
        in flight or given twice is refused in SGLang's words."""
        reqs = list(reqs)
        with self._lock:
            self._check([req.rid for req in reqs])
            self._requests.update((req.rid, req) for req in reqs)
        for req in reqs:
            req.on_done = self.release

    def release(self, req: Request) -> None:
        """Free ``req``'s rid, unless it already went to a newer request (it was freed before)."""
        with self._lock:
            if self._requests.get(req.rid) is req:
                del self._requests[req.rid]

    def release_unsent(self, reqs: Iterable[Request]) -> None:
        """Free the rids of those of ``reqs`` never submitted (their handler ended first): no
        scheduler will ever drop them."""
        for req in reqs:
            if not req.submitted:
                self.release(req)

    def __contains__(self, rid: str) -> bool:
        with self._lock:
            return rid in self._requests


class DelayedAborts:
    """The abort tasks of refused streams (STREAM_ABORT_DELAY_S after each), still to run: the
    server's shutdown cancels them, so none aborts a request while the server shuts down."""

    def __init__(self) -> None:
        self._pending: set[asyncio.TimerHandle] = set()

    def schedule(self, abort: Callable[[list[str]], None], rids: list[str]) -> None:
        """`abort(rids)` STREAM_ABORT_DELAY_S from now, on the running loop."""
        def run() -> None:
            self._pending.discard(handle)
            abort(rids)

        handle = asyncio.get_running_loop().call_later(STREAM_ABORT_DELAY_S, run)
        self._pending.add(handle)

    def cancel(self) -> None:
        """Those not run yet, cancelled."""
        for handle in self._pending:
            handle.cancel()
        self._pending.clear()
