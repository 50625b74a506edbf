"""The warm-up before a workload is measured: untimed requests, then a cache flush.

The first workload a fresh server runs pays its first-shape costs (Triton JIT compiles, CUDA
graph captures, allocator growth): measured cold, its figures are many times slower than the same
workload's a minute later, and saved as a baseline they would pass any later regression of that
size. SGLang's bench_serving sends `--warmup-requests` (one by default) untimed first, and with
`--flush-cache` flushes after them; so does the plugin, by default one round at the workload's
concurrency (its first prompts, its sampling settings and max_new_tokens: the shapes it hits).

The flush drops the warm-up's prompts from the prefix cache, so the measured requests find none
of their own prefixes cached, and resets SGLang's lifetime speculative counters. SGLang flushes
only while idle and refuses otherwise (HTTP 400): a refusal is said once per server, not failed.
A flush unanswered for the run's stall timeout (where that is the shorter wait) is a stall: the
server answers it at once, so silence that long is a frozen server, as a silent workload is.

How many: a workload's `warmup_requests` key, else the run-wide `--specdec-warmup-requests`, else
one round (min(concurrency, num_prompts)); 0 sends none and flushes nothing.
"""

from __future__ import annotations

import asyncio
import warnings
from dataclasses import dataclass, field
from typing import Callable

from . import sglang_api as api
from .workloads import Workload

#: seconds a flush may take: it answers at once, flushed or refused
FLUSH_TIMEOUT_S = 30.0


def warmup_count(workload: Workload, configured: int | None) -> int:
    """The warm-up requests to send before `workload`: `configured` (the workload's key, else the
    run-wide setting) where set, else one round at its concurrency."""
    if configured is not None:
        return configured
    return min(workload.concurrency, len(workload.prompts))


def warmup_workload(workload: Workload, count: int) -> Workload:
    """`count` requests of `workload`: its first prompts (cycling where it has fewer), sent at its
    concurrency with its own sampling settings and max_new_tokens."""
    return workload.resized(count)


class FlushStalled(Exception):
    """/flush_cache did not answer within the run's stall timeout (`waited_s` seconds)."""

    def __init__(self, waited_s: float) -> None:
        self.waited_s = waited_s
        super().__init__(f"{api.FLUSH_CACHE} did not answer within {waited_s:g}s")


async def _flush_async(url: str, timeout_s: float) -> tuple[int, str]:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async with session.post(f"{url.rstrip('/')}{api.FLUSH_CACHE}",
                                timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            return resp.status, (await resp.text(errors="replace")).strip()


@dataclass
class CacheFlush:
    """The run's flush after each warm-up (one per process): says once per server URL that it
    was refused or not served."""

    said: set[str] = field(default_factory=set)
    warn: Callable[[str], None] = field(default=lambda text: warnings.warn(text, stacklevel=4))

    def flush(self, url: str, stall_timeout: float | None = None) -> bool:
        """POST /flush_cache; whether the server flushed (a refusal is said once for this URL).
        Raises FlushStalled where the run's `stall_timeout`, shorter than FLUSH_TIMEOUT_S, ran out."""
        import aiohttp

        from .client import _run_sync, bounded

        timeout_s = bounded(FLUSH_TIMEOUT_S, stall_timeout)
        try:
            status, body = _run_sync(lambda: _flush_async(url, timeout_s))
        except asyncio.TimeoutError:
            if timeout_s < FLUSH_TIMEOUT_S:
                raise FlushStalled(timeout_s) from None
            self._unflushed(url, f"did not answer within {FLUSH_TIMEOUT_S:g} s")
            return False
        except (aiohttp.ClientError, OSError) as exc:
            self._unflushed(url, f"could not be reached ({str(exc) or type(exc).__name__})")
            return False
        if status == 200:
            return True
        why = "does not serve it" if status == 404 else \
            f"refused it (HTTP {status}: {' '.join(body.split())[:200] or 'no reason given'})"
        self._unflushed(url, why + (", as SGLang does while a request is queued or running" if status == 400 else ""))
        return False

    def _unflushed(self, url: str, why: str) -> None:
        if url in self.said:
            return
        self.said.add(url)
        self.warn(f"pytest-specdec: the server at {url} did not flush its cache after a workload's warm-up: "
                  f"{api.FLUSH_CACHE} {why}; the measured requests may find the warm-up's prompt prefixes "
                  f"cached (said once per server this run)")


__all__ = ["FLUSH_TIMEOUT_S", "CacheFlush", "FlushStalled", "warmup_count", "warmup_workload"]
