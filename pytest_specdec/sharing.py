"""Whether another client used the server while a workload measured.

A server someone else also sends requests to (a shared GPU box behind `--specdec-server-url`)
measures slower for reasons no code change explains, and its figures would pass for a
regression. SGLang's `sglang:generation_tokens_total` counter (/metrics, served with
--enable-metrics) counts the completion tokens of every request when it finishes, whoever sent it,
and not its own /health probes: read just before and just after a workload, its increase beyond
the workload's own completion tokens is another client's. A counter, not the running/queued
gauges, because SGLang sets those only once per logging interval and a short workload falls
between two. Counted at finish, another client's request still running as the workload ends
goes unseen (a long one spanning it all).

The same check runs on launched servers (two scrapes per workload; nobody else should use them). A
server without /metrics cannot be checked: said once per run per server, with how to enable it.

A shared workload fails its test. Where the server is always shared (a team's staging server),
`--specdec-allow-shared` records its figures instead, marked shared (`Shared.mark`) in the table
and the reports, and leaves them out of the gate and of any baseline save: a red there would be
noise and a green meaningless, and a baseline of them would hold later runs to another client's load.
"""

from __future__ import annotations

import asyncio
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Mapping

from . import sglang_api as api

#: Tokens the server may generate beyond the workload's without counting as shared: a request
#: counted when it finishes may straddle a scrape by a few tokens, never by a workload's worth.
SLACK_TOKENS = 16
SLACK_SHARE = 0.02  # of the workload's own completion tokens, for long workloads


@dataclass(frozen=True)
class Shared:
    """A workload during which the server generated more tokens than the workload received."""

    server_tokens: int  # the counter's increase over the workload
    own_tokens: int  # the workload's completion tokens

    def describe(self) -> str:
        return (f"the server generated {self.server_tokens} tokens during this workload, {self.own_tokens} of "
                f"them this run's: another client shared it; its figures are not comparable")

    def mark(self) -> str:
        """How the table's verdict column, results.json and report.md mark its figures."""
        return f"shared: {self.own_tokens} of {self.server_tokens} tokens this run's"

    def to_json(self) -> dict[str, int]:
        return {"server_tokens": self.server_tokens, "own_tokens": self.own_tokens}

    @classmethod
    def from_json(cls, obj: Any) -> Shared | None:
        """None for anything else than a record `to_json` wrote (an older journal's has none)."""
        try:
            return cls(int(obj["server_tokens"]), int(obj["own_tokens"]))
        except (KeyError, TypeError, ValueError):
            return None


def generated_tokens(samples: Mapping[str, list[tuple[dict[str, str], float]]]) -> float | None:
    """The counter's total over its label sets (streaming or not, each tokenizer's), or None
    where the server does not serve it."""
    values = [v for _, v in samples.get(api.METRIC_GENERATION_TOKENS, []) if math.isfinite(v)]
    return sum(values) if values else None


def shared(before: float, after: float, own_tokens: int) -> Shared | None:
    """The sharing the counter shows, or None. A counter that went down is a server restarted
    in between (its liveness check says so), which says nothing about sharing."""
    generated = after - before
    if generated < 0 or generated <= own_tokens + max(SLACK_TOKENS, SLACK_SHARE * own_tokens):
        return None
    return Shared(round(generated), own_tokens)


def sharing_message(config: str, record: Shared, switch: str) -> str:
    """A test's failure for figures measured on a shared server; `switch`: where to allow sharing."""
    return (f"server {config} was shared while it measured: {record.describe()}, so its gate says nothing "
            f"about the code either way (a red is no regression, a green no pass) and its figures are not "
            f"saved: measure it again while no other client uses the server, or, where the server is always "
            f"shared, run with {switch} to record its figures marked shared, never gated nor saved")


def shared_note(names: list[str], switch: str) -> str:
    """The end of a run (or merge) that recorded workloads measured on a shared server."""
    return (f"{len(names)} workload(s) measured on a shared server ({', '.join(names)}): their figures are "
            f"shown marked shared, not gated and not saved into the baseline ({switch})")


@dataclass
class SharingCheck:
    """The run's check (one per process): reads the counter, and says once per server URL that it
    cannot be read."""

    said: set[str] = field(default_factory=set)
    warn: Callable[[str], None] = field(default=lambda text: warnings.warn(text, stacklevel=4))

    def read(self, url: str) -> float | None:
        """The counter now, or None where it cannot be read (said once for this URL)."""
        import aiohttp  # lazy: RunState holds this check from configure time, before any server

        from . import client

        try:
            samples = client.scrape_metrics(url)
        except client.ServerQueryError as exc:
            if exc.status == 404:
                self._unchecked(url, "does not serve /metrics (SGLang serves it only when started with "
                                     "--enable-metrics: start it with that flag to have sharing checked)")
            else:
                self._unchecked(url, f"answered /metrics badly ({exc})")
            return None
        except ValueError as exc:
            self._unchecked(url, f"answered /metrics with {exc}")
            return None
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            return None  # a server that does not answer: its liveness check says so, not this
        count = generated_tokens(samples)
        if count is None:
            self._unchecked(url, f"serves /metrics without {api.METRIC_GENERATION_TOKENS}")
        return count

    def _unchecked(self, url: str, why: str) -> None:
        if url in self.said:
            return
        self.said.add(url)
        self.warn(f"pytest-specdec: the server at {url} {why}, so whether another client shared it while "
                  f"a workload measured cannot be checked this run")
