"""Prompt tokens as a live server counts them, for the context-length guard (fit_to_context).

SGLang serves its tokenizer at /v1/tokenize from release 0.5.3.post1: a list of prompts in, one
count each out, special tokens added as /generate adds them, so a count is the prompt_tokens a
request of that text gets. A subword model's count is far below the embedded engine's byte count,
which is only an upper bound. `ServerTokenCounter` asks for the texts it has not seen yet, as one
list, so a workload is counted in one request and a truncation's search in one a round. A server
that cannot count -- without the endpoint (a 404), or started with --skip-tokenizer-init (its
handler then answers a 500 that names the missing tokenizer) -- is counted by the fallback from
then on, or, with none, not at all (`TokenizeNotServed` tells the caller, and why).
Around a workload the counter is used `within` the run's stall timeout: a /v1/tokenize the server
takes and never answers raises client.CallStalled then, not after its own 30 s a batch.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import aiohttp

from . import client
from . import sglang_api as api

#: Prompt text per request: the embedded engine takes request bodies up to 1 MiB.
BATCH_BYTES = 256 * 1024
#: Seconds the report header waits to learn whether an attached server counts.
PROBE_TIMEOUT_S = 5.0
#: What a server without the endpoint lacks, for messages.
NOT_SERVED = client.NO_TOKENIZE


class ServerTokenCounter:
    """`counter(text)` and `counter.count_many(texts)`: the server at `url` counts, each text once.

    `fallback` counts when the server cannot (no /v1/tokenize, or no tokenizer), described by
    `fallback_source` ("as ...", for messages); None: TokenizeNotServed is raised instead.
    `not_served` is why it cannot, once it said so (client.NO_TOKENIZE or client.NO_TOKENIZER).
    """

    def __init__(self, url: str, fallback: Callable[[str], int] | None = None, *, fallback_source: str = "",
                 timeout_s: float = 30.0) -> None:
        self.url = url
        self.fallback = fallback
        self.fallback_source = fallback_source
        self.timeout_s = timeout_s
        self.served: bool | None = None  # None: not asked yet
        self.not_served = NOT_SERVED
        self._counts: dict[bytes, int] = {}  # by the text's digest: a truncation's prefixes are not kept

    def __call__(self, text: str) -> int:
        return self.count_many([text])[0]

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return self._count(texts, self.timeout_s)

    def within(self, stall_timeout: float | None) -> StallBound:
        """This counter, each request waiting at most `stall_timeout` (CallStalled past it)."""
        return StallBound(self, stall_timeout)

    def _count(self, texts: Sequence[str], timeout_s: float, stall_timeout: float | None = None) -> list[int]:
        if self.served is not False:
            keys = [_key(t) for t in texts]
            todo = list({key: t for key, t in zip(keys, texts) if key not in self._counts}.items())
            try:
                for batch in _batches(todo):
                    counts = client.count_tokens(self.url, [t for _, t in batch], timeout_s=timeout_s,
                                                 stall_timeout=stall_timeout)
                    self._counts.update(zip((key for key, _ in batch), counts))
            except client.TokenizeNotServed as exc:
                if self.served:  # it counted before: this 404 is no missing endpoint
                    raise client.ServerQueryError(str(exc)) from None
                self.served = False
                self.not_served = exc.why
            else:
                if todo:
                    self.served = True
                return [self._counts[key] for key in keys]
        if self.fallback is None:
            raise client.TokenizeNotServed(f"{self.url} {self.not_served}", why=self.not_served)
        return [self.fallback(t) for t in texts]

    def probe(self) -> bool | None:
        """Whether the server counts for us, asked with an empty prompt until it answers; None
        while it does not (a server that is down is the readiness check's to report)."""
        if self.served is None:
            try:
                self._count([""], min(self.timeout_s, PROBE_TIMEOUT_S))
            except (client.ServerQueryError, aiohttp.ClientError, asyncio.TimeoutError, OSError):
                pass
        return self.served

    @property
    def source(self) -> str:
        """How the counts are made, as a phrase: "counted by ..."."""
        if self.served:
            return f"counted by the server's tokenizer ({api.TOKENIZE})"
        if self.served is None:
            return f"counted by the server's {api.TOKENIZE} where it serves it" + (
                f", else {self.fallback_source}" if self.fallback is not None else "")
        if self.fallback is None:
            return f"not counted: the server {self.not_served}"
        return f"counted {self.fallback_source}, as the server {self.not_served}"


@dataclass(frozen=True)
class StallBound:
    """`counter`'s counts (its cache and fallback shared) whose requests wait at most
    `stall_timeout`: what a workload's context-length guard counts with."""

    counter: ServerTokenCounter
    stall_timeout: float | None

    def __call__(self, text: str) -> int:
        return self.count_many([text])[0]

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return self.counter._count(texts, self.counter.timeout_s, self.stall_timeout)

    @property
    def source(self) -> str:
        return self.counter.source


def _key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=20).digest()


def _batches(texts: list[tuple[bytes, str]]) -> Iterator[list[tuple[bytes, str]]]:
    """`(key, text)` pairs in runs of at most BATCH_BYTES of text (a longer text alone)."""
    batch: list[tuple[bytes, str]] = []
    size = 0
    for item in texts:
        text = item[1]
        n = len(text.encode("utf-8", "surrogatepass"))
        if batch and size + n > BATCH_BYTES:
            yield batch
            batch, size = [], 0
        batch.append(item)
        size += n
    if batch:
        yield batch


__all__ = ["BATCH_BYTES", "NOT_SERVED", "PROBE_TIMEOUT_S", "ServerTokenCounter", "StallBound"]
