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


async def _flush_async(url: str) -> tuple[int, str]:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async with session.post(f"{url.rstrip('/')}{api.FLUSH_CACHE}",
                                timeout=aiohttp.ClientTimeout(total=FLUSH_TIMEOUT_S)) as resp:
            return resp.status, (await resp.text(errors="replace")).strip()


@dataclass
class CacheFlush:
    """The run's flush after each warm-up (one per process): says once per server URL that it
    was refused or not served."""

    said: set[str] = field(default_factory=set)
    warn: Callable[[str], None] = field(default=lambda text: warnings.warn(text, stacklevel=4))

    def flush(self, url: str) -> bool:
        """POST /flush_cache; whether the server flushed (a refusal is said once for this URL)."""
        import aiohttp

        from .client import _run_sync

        try:
            status, body = _run_sync(lambda: _flush_async(url))
        except asyncio.TimeoutError:
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


__all__ = ["FLUSH_TIMEOUT_S", "CacheFlush", "warmup_count", "warmup_workload"]
