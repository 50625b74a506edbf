"""Whether another client used the server while a workload measured.

A server someone else also sends requests to (a shared GPU box behind `--specdec-server-url`)
measures slower for reasons no code change explains, and its figures would pass for a
regression. Two readings around each workload, just before it (after its warm-up and flush) and
just after its last response, tell:

- SGLang's `sglang:generation_tokens_total` counter (/metrics, served with --enable-metrics) counts
  the completion tokens of every request when it finishes, whoever sent it, and not its own
  /health probes: its increase beyond the workload's own completion tokens is another client's.
  A counter, not the running/queued gauges, because SGLang sets those only once per logging
  interval and a short workload falls between two. Counted at finish, it misses another client's
  request still running as the workload ends (a long one spanning it all).
- The live load, /v1/loads (`include=core`; `/get_load` on a release before it): the requests each
  DP rank runs or queues, from a snapshot SGLang's scheduler publishes on every prefill and on
  going idle. Ours have all answered at both readings, so any request in flight is another
  client's: this catches the long request the counter misses. The snapshot may lag a step behind
  our last answer, so a busy reading is read again for up to `GRACE_S` until it shows none;
  before the workload that wait also lets another client's short request end rather than overlap
  it. The counter is read after the load settles, so a request that ends during the wait still
  counts as the tokens it generated.

Unseen still: another client's request that starts after the first reading and ends before the
last one, of no more tokens than the counter's slack (or on a server without /metrics); and
everything on a server that serves neither reading.

The same check runs on launched servers (nobody else should use them). A server without /metrics,
or without either load path, cannot be checked by it: each said once per run per server.

A shared workload fails its test. Where the server is always shared (a team's staging server),
`--specdec-allow-shared` records its figures instead, marked shared (`Shared.mark`) in the table
and the reports, and leaves them out of the gate and of any baseline save: a red there would be
noise and a green meaningless, and a baseline of them would hold later runs to another client's load.
"""

from __future__ import annotations

import asyncio
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Mapping

from . import sglang_api as api

#: Tokens the server may generate beyond the workload's without counting as shared: a request
#: counted when it finishes may straddle a scrape by a few tokens, never by a workload's worth.
SLACK_TOKENS = 16
SLACK_SHARE = 0.02  # of the workload's own completion tokens, for long workloads
#: How long a busy load reading is read again until it shows none: SGLang's scheduler publishes
#: on going idle at once, so a step's lag is milliseconds; a request still there after it is not ours.
GRACE_S = 2.0


@dataclass(frozen=True)
class Shared:
    """A workload during which another client used the server: the server generated more tokens
    than the workload received, or ran or queued requests not the workload's as it started or ended."""

    server_tokens: int | None  # the counter's increase over the workload (None: no /metrics)
    own_tokens: int  # the workload's completion tokens
    #: another client's requests in flight (running or queued) as the workload started, as it ended
    in_flight: tuple[int, int] = (0, 0)

    @property
    def counted(self) -> bool:
        """Whether the counter itself shows the sharing (beyond the workload's tokens and slack)."""
        return self.server_tokens is not None and shared(0, self.server_tokens, self.own_tokens) is not None

    def _in_flight(self) -> str:
        start, end = self.in_flight
        if start and end:
            return f"another client's requests in flight as it started ({start}) and ended ({end})"
        return f"another client's {start or end} request(s) in flight as it {'started' if start else 'ended'}"

    def describe(self) -> str:
        evidence = []
        if self.counted:
            evidence.append(f"the server generated {self.server_tokens} tokens during this workload, "
                            f"{self.own_tokens} of them this run's")
        if any(self.in_flight):
            start, end = self.in_flight
            when = " and ".join(w for w, n in (("started", start), ("ended", end)) if n)
            evidence.append(f"the server ran or queued {max(start, end)} request(s) not this run's as this "
                            f"workload {when} (its live load, {api.LOADS})")
        return "; ".join(evidence) + ": another client shared it; its figures are not comparable"

    def mark(self) -> str:
        """How the table's verdict column, results.json and report.md mark its figures."""
        evidence = [f"{self.own_tokens} of {self.server_tokens} tokens this run's"] if self.counted else []
        if any(self.in_flight):
            evidence.append(self._in_flight())
        return "shared: " + ", ".join(evidence)

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {"server_tokens": self.server_tokens, "own_tokens": self.own_tokens}
        if any(self.in_flight):  # absent otherwise, as in the journals written before it
            record["in_flight"] = list(self.in_flight)
        return record

    @classmethod
    def from_json(cls, obj: Any) -> Shared | None:
        """None for anything else than a record `to_json` wrote (an older journal's has no in_flight)."""
        try:
            tokens = obj["server_tokens"]
            start, end = obj.get("in_flight", (0, 0))
            return cls(None if tokens is None else int(tokens), int(obj["own_tokens"]), (int(start), int(end)))
        except (AttributeError, KeyError, TypeError, ValueError):
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


def verdict(before: float | None, after: float | None, own_tokens: int,
            in_flight: tuple[int | None, int | None] = (None, None)) -> Shared | None:
    """The sharing the counter (read `before` and `after`, None: not served) and the live load
    (another client's requests in flight as the workload started and ended, None: not served)
    show together, or None."""
    counted = shared(before, after, own_tokens) if before is not None and after is not None else None
    start, end = (n or 0 for n in in_flight)
    if not (start or end):
        return counted
    tokens = None if before is None or after is None or after < before else round(after - before)
    return Shared(tokens, own_tokens, (start, end))


def requests_in_flight(path: str, body: Any) -> int:
    """The requests running or queued over the DP ranks of a /v1/loads (`path` api.LOADS) or
    /get_load answer; ValueError naming what the answer lacks."""
    ranks = body.get(api.LOADS_LIST) if path == api.LOADS and isinstance(body, dict) else body
    keys = (api.LOAD_RUNNING, api.LOAD_WAITING) if path == api.LOADS else (api.LOAD_OLD_REQS,)
    if not isinstance(ranks, list) or not ranks:
        raise ValueError("no list of DP ranks" + (f" under {api.LOADS_LIST!r}" if path == api.LOADS else ""))
    total = 0
    for rank in ranks:
        for key in keys:
            count = rank.get(key) if isinstance(rank, dict) else None
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ValueError(f"a DP rank without {key}")
            total += count
    return total


def sharing_message(config: str, record: Shared, switch: str) -> str:
    """A test's failure for figures measured on a shared server; `switch`: where to allow sharing."""
    return (f"server {config} was shared while it measured: {record.describe()}, so its gate says nothing "
            f"about the code either way (a red is no regression, a green no pass) and its figures are not "
            f"saved: measure it again while no other client uses the server, or, where the server is always "
            f"shared, run with {switch} to record its figures marked shared, never gated nor saved")


def shared_note(names: list[str], switch: str, where: str = "") -> str:
    """The end of a run (or merge) that recorded workloads measured on a shared server; the first
    few names where there are many, and `where` (the report) lists them all."""
    from .table_fold import named

    return (f"{len(names)} workload(s) measured on a shared server ({named(names, where)}): their figures are "
            f"shown marked shared, not gated and not saved into the baseline ({switch})")


#: seconds a /metrics scrape may take: it answers at once, off the scheduler, so a longer silence
#: is a server the liveness check names, and no reason to outwait the user's stall timeout
SCRAPE_TIMEOUT_S = 10.0
LOAD_TIMEOUT_S = 5.0  # a load read, likewise: the scheduler's last snapshot, answered at once


@dataclass
class SharingCheck:
    """The run's check (one per process): reads the counter and the live load, and says once per
    server URL each that it cannot be read."""

    said: set[tuple[str, str]] = field(default_factory=set)  # (URL, what): what could not be read
    warn: Callable[[str], None] = field(default=lambda text: warnings.warn(text, stacklevel=4))

    def read(self, url: str, stall_timeout: float | None = None) -> float | None:
        """The counter now, or None where it cannot be read (said once for this URL); a scrape
        waits SCRAPE_TIMEOUT_S at most, or the run's `stall_timeout` where shorter."""
        import aiohttp  # lazy: RunState holds this check from configure time, before any server

        from . import client

        try:
            samples = client.scrape_metrics(url, timeout_s=client.bounded(SCRAPE_TIMEOUT_S, stall_timeout))
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

    def in_flight(self, url: str, stall_timeout: float | None = None, grace_s: float = GRACE_S) -> int | None:
        """The requests the server runs or queues now, ours all answered, read again while any
        for up to `grace_s` (its snapshot may lag a step); None where the load cannot be read (said
        once for this URL). A read waits LOAD_TIMEOUT_S at most, or `stall_timeout` where shorter."""
        import aiohttp  # lazy, as in read

        from . import client

        deadline = time.monotonic() + grace_s
        pause = 0.05
        timeout_s = client.bounded(LOAD_TIMEOUT_S, stall_timeout)
        path = api.LOADS
        while True:
            try:
                path, body = client.fetch_loads(url, timeout_s=timeout_s)
                count = requests_in_flight(path, body)
            except client.ServerQueryError as exc:
                if exc.status == 404:
                    self._unchecked(url, f"serves neither {api.LOADS} nor {api.LOADS_OLD}", what="load")
                else:
                    self._unchecked(url, f"answered {api.LOADS} badly ({exc})", what="load")
                return None
            except ValueError as exc:
                self._unchecked(url, f"answered {path} with {exc}", what="load")
                return None
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                return None  # a server that does not answer: its liveness check says so, not this
            left = deadline - time.monotonic()
            if count == 0 or left <= 0:
                return count
            time.sleep(min(pause, left))  # a few reads: soon at first, where a lag ends
            pause = min(2 * pause, 0.4)

    def _unchecked(self, url: str, why: str, what: str = "metrics") -> None:
        if (url, what) in self.said:
            return
        self.said.add((url, what))
        whether = ("another client shared it while a workload measured" if what == "metrics" else
                   "another client's request was in flight as a workload started or ended (one the token "
                   "counter misses: still running as it ended)")
        self.warn(f"pytest-specdec: the server at {url} {why}, so whether {whether} cannot be checked this run")
