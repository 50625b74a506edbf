"""Per-request records, workload aggregation, measurement guards and server-side figures.

A benchmark number is only worth gating on if it measured what it claims to. This module turns
the client's per-request records into one `Measurement`, and refuses to do so (raising
`MeasurementError` with a diagnosis) when the run was partial, produced no tokens, or claimed
speculative decoding that the server never performed. It also reads the server's own figures
(SGLang `Decode batch` log lines, DDTree fork log lines, `/metrics`) so that the client-side
acceptance length can be cross-checked against what the server says it did.

Pure Python, no pytest, no numpy: the plugin imports this in the pytest controller.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence, Union

from . import sglang_api as api
from .calibration import Calibration
from .configuration import is_speculative
from .directions import METRIC_DIRECTIONS, Direction, direction_of
from .sglang_api import SPEC_META_KEYS

class MeasurementError(Exception):
    """A workload ran but its result must not be reported as a measurement.

    The message is the diagnosis a user needs (which requests, status, finish_reason, server log
    tail); pytest shows it as the test's failure reason.
    """


#: A server log tail for failure messages, or a callable read only when something failed.
LogTail = Union[str, Callable[[], str], None]


# --------------------------------------------------------------------------------------------
# Records


@dataclass(frozen=True)
class RequestRecord:
    """What one /generate request did, as seen by the client.

    Timings are client-side wall clock in milliseconds from just before the request was sent.
    The `spec_*` fields are None when the server's meta_info did not carry them (SGLang omits
    them when nothing was verified), never zero-filled, so "not speculating" stays visible.
    """

    index: int  # the request's prompt's position in the workload, from 0 (messages count from 1)
    status: int  # HTTP status; 0 when no response arrived (connection refused, timeout)
    error: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int = 0
    ttft_ms: float | None = None
    e2e_ms: float = 0.0
    chunks: int = 0
    #: the whole output (two tokens or more) arrived in the network read that brought the first
    #: token: its TTFT spans the generation and its TPOT would time the client's parsing
    whole_at_once: bool = False
    server_e2e_latency_s: float | None = None
    spec_verify_ct: int | None = None
    spec_accept_length: float | None = None
    spec_accept_rate: float | None = None
    spec_num_correct_drafts: int | None = None
    spec_num_proposed_drafts: int | None = None
    text: str = ""
    output_ids: tuple[int, ...] | None = None  # the whole output's token ids, where the server sent them
    #: each output token's top-two log-probability lead (`lossless.Outputs.margins`), where asked and sent
    margins: tuple[float | None, ...] | None = None
    #: a request of several sequences (sampling n above 1): the most tokens one of them has, where
    #: `completion_tokens` counts all of them; None for one sequence
    sequence_tokens: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.status == 200

    @property
    def tpot_ms(self) -> float | None:
        """Mean time per output token after the first, bench_serving's (latency - ttft) /
        (output_len - 1); None with fewer than two tokens, and for an output that arrived whole
        at once, whose tokens after the first have no arrival times of their own. Per sequence for
        a request of several: they decode side by side, a token each per step, so the time over
        all their tokens would be n times shorter than any stream's wait for its next token."""
        tokens = self.completion_tokens if self.sequence_tokens is None else self.sequence_tokens
        if self.ttft_ms is None or tokens < 2 or self.whole_at_once:
            return None
        return (self.e2e_ms - self.ttft_ms) / (tokens - 1)

    def describe(self) -> str:
        """One line for failure messages."""
        parts = [f"request {self.index + 1}: HTTP {self.status or 'no response'}"]
        parts.append(f"finish_reason={self.finish_reason or 'none'}")
        parts.append(f"completion_tokens={self.completion_tokens}")
        if self.error:
            parts.append(f"error: {_shorten(self.error, 300)}")
        return ", ".join(parts)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class WorkloadResult:
    """Everything the client saw for one workload run; the raw material of a `Measurement`."""

    workload: str
    url: str
    concurrency: int
    records: tuple[RequestRecord, ...]
    wall_s: float  # first request sent to last response finished

    @property
    def errors(self) -> tuple[RequestRecord, ...]:
        return tuple(r for r in self.records if not r.ok)

    @property
    def completion_tokens(self) -> int:
        return sum(r.completion_tokens for r in self.records)

    def to_dict(self) -> dict:
        return {
            "workload": self.workload,
            "url": self.url,
            "concurrency": self.concurrency,
            "wall_s": self.wall_s,
            "records": [r.to_dict() for r in self.records],
        }


# --------------------------------------------------------------------------------------------
# Aggregation


def _stdev(values: Sequence[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def ratio_standard_error(numerators: Sequence[float], denominators: Sequence[float]) -> float:
    """Standard error of R = sum(y) / sum(x) over requests (the ratio estimator).

    Why: accept_length is a ratio of sums, not a mean of per-request ratios, so its noise is
    estimated with the ratio estimator's linearised variance rather than a plain stdev.
    """
    n = len(numerators)
    total_x = sum(denominators)
    if n < 2 or total_x == 0:
        return 0.0
    ratio = sum(numerators) / total_x
    mean_x = total_x / n
    residual = sum((y - ratio * x) ** 2 for y, x in zip(numerators, denominators))
    return math.sqrt(residual / (n * (n - 1))) / mean_x


@dataclass(frozen=True)
class Percentiles:
    """Latency distribution over the requests of one workload (milliseconds)."""

    p50: float
    p90: float
    p99: float
    mean: float
    n: int
    #: standard error of the median (≈ 1.2533·σ/√n), the noise used when gating on p50
    spread: float

    @classmethod
    def of(cls, values: Sequence[float]) -> "Percentiles":
        n = len(values)
        # "inclusive": linear interpolation between order statistics (numpy's default); it needs
        # two values, and one value is every percentile of itself.
        cuts = statistics.quantiles(values, n=100, method="inclusive") if n > 1 else list(values) * 99
        return cls(
            p50=cuts[49],
            p90=cuts[89],
            p99=cuts[98],
            mean=statistics.fmean(values),
            n=n,
            spread=1.2533 * _stdev(values) / math.sqrt(n),
        )


@dataclass(frozen=True)
class MetricValue:
    """One gated figure: what baselines store and compare.

    `spread` is an absolute noise estimate (a standard error) in the metric's unit; 0 means
    none known, which the gate takes as noiseless where neither side has samples or a spread (a
    user's `metric(name, value)` is compared exactly: a silent `noisy` would gate it in name
    only). `deterministic` marks figures that must reproduce exactly (accept
    length under greedy decoding with a fixed seed), which are compared without noise allowance.
    `distribution` holds the samples a timing figure is decided from (one per request), and
    `cpu_share` (calibration.py) says they were taken per second the server had a CPU, and how
    much of the run it had one (None: not calibrated); `value` is always the figure as measured.
    """

    name: str
    value: float
    direction: Direction
    spread: float = 0.0
    samples: int = 1
    deterministic: bool = False
    distribution: tuple[float, ...] = ()
    cpu_share: float | None = None

    @property
    def calibrated(self) -> bool:
        return self.cpu_share is not None

    def __post_init__(self) -> None:
        if self.direction not in ("higher", "lower"):
            raise ValueError(f"metric {self.name!r}: direction must be 'higher' or 'lower', not {self.direction!r}")
        if not math.isfinite(self.value):
            raise ValueError(f"metric {self.name!r}: value {self.value!r} is not finite")

    def to_json(self) -> dict:
        """The figure without its name (records key their figures by name)."""
        return {"value": self.value, "direction": self.direction, "spread": self.spread,
                "samples": self.samples, "deterministic": self.deterministic,
                "distribution": list(self.distribution), "cpu_share": self.cpu_share}

    @classmethod
    def from_json(cls, name: str, obj: Mapping) -> "MetricValue":
        return cls(name, float(obj["value"]), obj["direction"], float(obj.get("spread", 0.0)),
                   int(obj.get("samples", 1)), bool(obj.get("deterministic", False)),
                   tuple(float(v) for v in obj.get("distribution") or ()),
                   None if obj.get("cpu_share") is None else float(obj["cpu_share"]))


def combine_repeats(values: Sequence[MetricValue]) -> MetricValue:
    """Mean of one metric over repeated runs; spread = standard error across the runs.

    The per-run spreads are kept as a floor so that two lucky identical runs do not claim a
    noise of zero.
    """
    if not values:
        raise ValueError("combine_repeats of no values")
    names = {v.name for v in values}
    if len(names) != 1:
        raise ValueError(f"combine_repeats of different metrics: {sorted(names)}")
    n = len(values)
    mean = sum(v.value for v in values) / n
    across = _stdev([v.value for v in values]) / math.sqrt(n)
    within = math.sqrt(sum(v.spread**2 for v in values)) / n
    first = values[0]
    return MetricValue(
        name=first.name,
        value=mean,
        direction=first.direction,
        spread=max(across, within),
        samples=sum(v.samples for v in values),
        deterministic=all(v.deterministic for v in values),
    )


@dataclass(frozen=True)
class Measurement:
    """The aggregate of one complete, guarded workload run.

    accept_length / accept_rate are None for non-speculative runs. A `Measurement` exists only
    for runs where every request succeeded; `summarize` refuses anything partial.
    """

    workload: str
    num_requests: int
    concurrency: int
    completion_tokens: int
    prompt_tokens: int | None
    wall_s: float
    output_tok_s: float
    output_tok_s_spread: float
    ttft_ms: Percentiles
    tpot_ms: Percentiles | None
    e2e_ms: Percentiles
    accept_length: float | None = None
    accept_length_spread: float = 0.0
    accept_rate: float | None = None
    accept_rate_spread: float = 0.0
    spec_verify_ct: int | None = None
    #: per request: output rate (scaled so that their mean is output_tok_s), TTFT, TPOT, accept
    #: length; the samples timing figures are decided from
    rate_samples: tuple[float, ...] = ()
    ttft_samples: tuple[float, ...] = ()
    tpot_samples: tuple[float, ...] = ()
    accept_samples: tuple[float, ...] = ()
    calibration: Calibration | None = None  # the server's CPU share during the workload
    #: requests whose whole output arrived at once (RequestRecord.whole_at_once): not in tpot_ms
    whole_at_once: int = 0
    #: untimed requests sent before the workload (warmup.py), and whether the cache was flushed
    #: after them (None: no warm-up, so no flush asked)
    warmup_requests: int = 0
    cache_flushed: bool | None = None

    def metrics(self, *, deterministic_accept: bool = False) -> tuple[MetricValue, ...]:
        """The gated figures. Latencies are gated on their medians (robust to stragglers).

        `deterministic_accept`: the run used greedy decoding with a fixed seed, so acceptance
        figures must reproduce exactly and are compared tightly. Timing figures carry their
        per-request samples, calibrated when the run measured the server's CPU share.
        """
        n = self.num_requests
        cal = self.calibration

        def timed(name: str, value: float, spread: float, samples: tuple[float, ...],
                  rate: bool) -> MetricValue:
            if cal is not None:
                samples = tuple(cal.rate(s) if rate else cal.duration(s) for s in samples)
            return MetricValue(name, value, "higher" if rate else "lower", spread, n,
                               distribution=samples,
                               cpu_share=cal.share if cal is not None else None)

        out = [timed("output_tok_s", self.output_tok_s, self.output_tok_s_spread,
                     self.rate_samples, rate=True)]
        # acceptance keeps the requests' spread when it is deterministic (run to run): the gate
        # compares it exactly, and the report's bars show how it varies over the requests
        if self.accept_length is not None:
            out.append(
                MetricValue("accept_length", self.accept_length, "higher", self.accept_length_spread, n,
                            deterministic_accept, self.accept_samples)
            )
        if self.accept_rate is not None:
            out.append(
                MetricValue("accept_rate", self.accept_rate, "higher", self.accept_rate_spread, n,
                            deterministic_accept)
            )
        out.append(timed("ttft_ms", self.ttft_ms.p50, self.ttft_ms.spread, self.ttft_samples,
                         rate=False))
        if self.tpot_ms is not None:
            out.append(timed("tpot_ms", self.tpot_ms.p50, self.tpot_ms.spread, self.tpot_samples,
                             rate=False))
        return tuple(out)

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(result: WorkloadResult) -> Measurement:
    """Aggregate a complete workload run. Raises MeasurementError on a partial run.

    output_tok_s is total completion tokens over the workload's wall time; accept_length is
    sum(completion_tokens) / sum(spec_verify_ct) over the requests that were verified (SGLang's
    definition, bonus token included).
    """
    records = result.records
    if not records:
        raise MeasurementError(f"workload {result.workload!r} ran no requests: nothing was measured")
    check_no_errors(result)
    if result.wall_s <= 0:
        raise MeasurementError(f"workload {result.workload!r}: wall time {result.wall_s!r} s is not positive")

    tokens = result.completion_tokens
    output_tok_s = tokens / result.wall_s
    rates = [r.completion_tokens / (r.e2e_ms / 1000.0) for r in records if r.e2e_ms > 0]
    rel_noise = (_stdev(rates) / (sum(rates) / len(rates)) / math.sqrt(len(rates))) if len(rates) > 1 else 0.0

    ttfts = [r.ttft_ms for r in records if r.ttft_ms is not None]
    if not ttfts:
        raise MeasurementError(f"workload {result.workload!r}: no request produced a first token")
    tpots = [t for t in (r.tpot_ms for r in records) if t is not None]

    verified = [r for r in records if r.spec_verify_ct]
    accept_length = accept_rate = None
    accept_length_spread = accept_rate_spread = 0.0
    verify_total: int | None = None
    if verified:
        verify_total = sum(r.spec_verify_ct or 0 for r in verified)
        tok = [float(r.completion_tokens) for r in verified]
        ver = [float(r.spec_verify_ct or 0) for r in verified]
        accept_length = sum(tok) / verify_total
        accept_length_spread = ratio_standard_error(tok, ver)
        drafted = [r for r in verified if r.spec_num_proposed_drafts]
        if drafted:
            correct = [float(r.spec_num_correct_drafts or 0) for r in drafted]
            proposed = [float(r.spec_num_proposed_drafts or 0) for r in drafted]
            accept_rate = sum(correct) / sum(proposed)
            accept_rate_spread = ratio_standard_error(correct, proposed)
        else:
            rates_reported = [r.spec_accept_rate for r in verified if r.spec_accept_rate is not None]
            if rates_reported:  # weighted by verify steps, the closest to a ratio of sums we can get
                weights = [float(r.spec_verify_ct or 0) for r in verified if r.spec_accept_rate is not None]
                accept_rate = sum(a * w for a, w in zip(rates_reported, weights)) / sum(weights)

    prompt = [r.prompt_tokens for r in records]
    return Measurement(
        workload=result.workload,
        num_requests=len(records),
        concurrency=result.concurrency,
        completion_tokens=tokens,
        prompt_tokens=None if any(p is None for p in prompt) else sum(p for p in prompt if p is not None),
        wall_s=result.wall_s,
        output_tok_s=output_tok_s,
        output_tok_s_spread=output_tok_s * rel_noise,
        ttft_ms=Percentiles.of(ttfts),
        tpot_ms=Percentiles.of(tpots) if tpots else None,
        e2e_ms=Percentiles.of([r.e2e_ms for r in records]),
        accept_length=accept_length,
        accept_length_spread=accept_length_spread,
        accept_rate=accept_rate,
        accept_rate_spread=accept_rate_spread,
        spec_verify_ct=verify_total,
        rate_samples=tuple(r * output_tok_s / statistics.fmean(rates) for r in rates) if rates else (),
        ttft_samples=tuple(ttfts),
        tpot_samples=tuple(tpots),
        accept_samples=tuple(r.completion_tokens / r.spec_verify_ct for r in verified),
        whole_at_once=sum(r.whole_at_once for r in records),
    )


# --------------------------------------------------------------------------------------------
# Guards


def _tail_text(log_tail: LogTail) -> str:
    """Resolve the log-tail hook lazily: reading a log is only worth it when something failed."""
    if log_tail is None:
        return ""
    try:
        text = log_tail() if callable(log_tail) else log_tail
    except Exception as exc:  # a failing diagnostic must not hide the diagnosis itself
        return f"\n(could not read the server log tail: {exc})"
    text = (text or "").rstrip()
    if not text:
        return "\n(server log is empty)"
    return "\nlast server log lines:\n" + text


def _listing(records: Sequence[RequestRecord], limit: int = 5) -> str:
    lines = [f"  {r.describe()}" for r in records[:limit]]
    if len(records) > limit:
        lines.append(f"  ... and {len(records) - limit} more")
    return "\n".join(lines)


def check_no_errors(result: WorkloadResult, log_tail: LogTail = None) -> None:
    """Any failed request fails the whole measurement: a partial run is not a result."""
    bad = result.errors
    if bad:
        raise MeasurementError(
            f"workload {result.workload!r}: {len(bad)} of {len(result.records)} requests failed against "
            f"{result.url}; a partial run is not reported as a measurement\n{_listing(bad)}{_tail_text(log_tail)}"
        )


def check_tokens(result: WorkloadResult, log_tail: LogTail = None) -> None:
    """Every request must have produced at least one completion token."""
    empty = [r for r in result.records if r.completion_tokens <= 0]
    if not empty:
        return
    if len(empty) == len(result.records):
        head = f"workload {result.workload!r}: the server produced zero completion tokens for all {len(empty)} requests"
    else:
        head = f"workload {result.workload!r}: {len(empty)} of {len(result.records)} requests produced zero completion tokens"
    raise MeasurementError(f"{head} ({result.url})\n{_listing(empty)}{_tail_text(log_tail)}")


#: How unlikely a random draft must make this run's accepted drafts for the guard to pass.
CHANCE_ALPHA = 1e-3


def chance_acceptance(draft_nodes: float | None, vocab_size: int | None) -> float:
    """Accepted drafts per verify step that a draft of random tokens reaches, at most.

    A node is accepted only if its whole path matches the target, so a node at depth d of a
    random draft is accepted with probability (1/V)^d; the most a tree of B nodes can expect is
    with every node at depth one: B / V. Unknown vocabularies (SGLang does not publish one) are
    taken as large: an LLM's 32k-256k tokens make B / V negligible.
    """
    if not draft_nodes or not vocab_size:
        return 0.0
    return draft_nodes / vocab_size


def poisson_tail(k: int, mean: float) -> float:
    """P(X >= k) for X ~ Poisson(mean): accepting k drafts or more by chance."""
    if k <= 0:
        return 1.0
    if mean <= 0:
        return 0.0
    if k > mean + 40 * math.sqrt(mean) + 40:
        return 0.0  # far beyond the mean: below any threshold that matters
    term = cdf = math.exp(-mean)
    for i in range(1, k):
        term *= mean / i
        cdf += term
    return max(0.0, 1.0 - cdf)


def check_speculation(
    result: WorkloadResult,
    method: str | None,
    *,
    min_accept_length: float | None = None,
    vocab_size: int | None = None,
    log_tail: LogTail = None,
) -> None:
    """A speculative method must have speculated, and its drafts must beat random ones.

    With `min_accept_length=None` the threshold is per configuration: the drafts accepted over
    the workload must be more than a random draft of the same size over the same vocabulary
    would get (`chance_acceptance`) with probability 1 - CHANCE_ALPHA. A number replaces that
    with a fixed floor on the accept length (1.0 allows a run with no accepted drafts).
    """
    if not is_speculative(method):
        return
    verified = [r for r in result.records if r.spec_verify_ct]
    if not verified:
        raise MeasurementError(
            f"speculative decoding is not active on this server: method {method!r} was requested, "
            f"but none of the {len(result.records)} responses of workload {result.workload!r} carried "
            f"spec_verify_ct in meta_info (check the server's --speculative-algorithm){_tail_text(log_tail)}"
        )
    tokens = sum(r.completion_tokens for r in verified)
    verify = sum(r.spec_verify_ct or 0 for r in verified)
    accept_length = tokens / verify
    if min_accept_length is not None:
        if accept_length < min_accept_length:
            raise MeasurementError(
                f"method {method!r}: accept length {accept_length:.2f} over workload {result.workload!r} "
                f"({tokens} tokens / {verify} verify steps) is below min_accept_length {min_accept_length:g}"
                f"{_tail_text(log_tail)}"
            )
        return
    if all(r.spec_num_correct_drafts is not None for r in verified):
        accepted = sum(r.spec_num_correct_drafts or 0 for r in verified)
    else:  # each verify step commits its accepted drafts and one bonus token; prefill one more
        accepted = max(0, tokens - verify - len(verified))
    proposed = [r for r in verified if r.spec_num_proposed_drafts]
    nodes = sum(r.spec_num_proposed_drafts or 0 for r in proposed) / \
        sum(r.spec_verify_ct or 0 for r in proposed) if proposed else None
    chance = chance_acceptance(nodes, vocab_size)
    p = poisson_tail(accepted, verify * chance)
    if p > CHANCE_ALPHA:
        random_draft = (f"a random draft of {nodes:g} nodes over a {vocab_size}-token vocabulary "
                        f"accepts up to {chance:.3f} per step by chance (p = {p:.2g})"
                        if chance else "drafts were never accepted")
        raise MeasurementError(
            f"method {method!r}: the drafts do no better than chance over workload {result.workload!r}: "
            f"{accepted} accepted in {verify} verify steps ({accepted / verify:.3f} per step, accept "
            f"length {accept_length:.2f}); {random_draft}. The drafter is not helping; set "
            f"min_accept_length=1.0 to allow this{_tail_text(log_tail)}"
        )


def measure(
    result: WorkloadResult,
    *,
    method: str | None = None,
    min_accept_length: float | None = None,
    vocab_size: int | None = None,
    log_tail: LogTail = None,
) -> Measurement:
    """All guards, then aggregation: the one call a test needs."""
    check_no_errors(result, log_tail)
    check_tokens(result, log_tail)
    check_speculation(result, method, min_accept_length=min_accept_length, vocab_size=vocab_size,
                      log_tail=log_tail)
    return summarize(result)


# --------------------------------------------------------------------------------------------
# Server-side figures

#: What the plugin reads from a `Decode batch` line, each number after its label.
DECODE_LINE_FIELDS = {
    "running_req": re.compile(r"#running-req:\s*(\d+)"),
    "accept_len": re.compile(r"accept len:\s*([0-9.]+)"),
    "accept_rate": re.compile(r"accept rate:\s*([0-9.]+)"),
    "gen_throughput": re.compile(r"gen throughput \(token/s\):\s*([0-9.]+)"),
}
# SGLANG_LOG_FORWARD_ITERS=1 puts the forward iteration between the mark and its comma
_DECODE_MARK = re.compile(re.escape(api.DECODE_BATCH) + r"(?: \[\d+\])?[.,]")
_DDTREE_FIELDS = ("avg_accepted_drafts", "avg_commit_len", "avg_accepted_depth")
_DDTREE_RE = {name: re.compile(rf"\b{name}\s*=\s*([0-9.]+)") for name in _DDTREE_FIELDS}


@dataclass(frozen=True)
class DecodeLogLine:
    """One SGLang `Decode batch` line (the `Decode batch.` and `Decode batch,` forms, and
    `Decode batch [N],` where SGLANG_LOG_FORWARD_ITERS tags it with its forward iteration)."""

    running_req: int | None
    accept_len: float | None
    accept_rate: float | None
    gen_throughput: float | None


@dataclass(frozen=True)
class DDTreeLogLine:
    """One DDTree fork statistics line; any of the three fields may be missing in a fork."""

    avg_accepted_drafts: float | None
    avg_commit_len: float | None
    avg_accepted_depth: float | None


def _float(pattern: re.Pattern, line: str) -> float | None:
    m = pattern.search(line)
    if not m:
        return None
    try:
        return float(m.group(1).rstrip("."))
    except ValueError:
        return None


def parse_decode_lines(lines: Iterable[str]) -> list[DecodeLogLine]:
    out = []
    for line in lines:
        if not _DECODE_MARK.search(line):
            continue
        running = _float(DECODE_LINE_FIELDS["running_req"], line)
        out.append(
            DecodeLogLine(
                running_req=None if running is None else int(running),
                accept_len=_float(DECODE_LINE_FIELDS["accept_len"], line),
                accept_rate=_float(DECODE_LINE_FIELDS["accept_rate"], line),
                gen_throughput=_float(DECODE_LINE_FIELDS["gen_throughput"], line),
            )
        )
    return out


def parse_ddtree_lines(lines: Iterable[str]) -> list[DDTreeLogLine]:
    out = []
    for line in lines:
        values = {name: _float(rx, line) for name, rx in _DDTREE_RE.items()}
        if any(v is not None for v in values.values()):
            out.append(DDTreeLogLine(**values))
    return out


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


@dataclass(frozen=True)
class ServerFigures:
    """What the server says about a window of its run (log lines or /metrics).

    accept_length is bonus-inclusive tokens per verify step: SGLang's `accept len`, or the
    DDTree forks' avg_commit_len (avg_accepted_drafts + 1 when only that is logged). intervals:
    the logging intervals read (an interval logs a decode line, and a DDTree line beside it).
    """

    source: str
    accept_length: float | None = None
    accept_rate: float | None = None
    gen_throughput: float | None = None
    avg_accepted_depth: float | None = None
    lines: int = 0
    intervals: int = 0


def server_figures_from_log(text: str, *, source: str = "server log",
                            whole_intervals_only: bool = False) -> ServerFigures:
    """Average the decode-interval figures of a log excerpt (each line covers the same number of
    decode steps, so a plain mean is the interval-weighted mean).

    `whole_intervals_only` leaves out the first interval's lines: the interval counters run on
    across workloads (SGLang's do), so that interval also holds steps taken before the excerpt.
    """
    lines = text.splitlines()
    decode = parse_decode_lines(lines)
    ddtree = parse_ddtree_lines(lines)
    if whole_intervals_only:
        decode, ddtree = decode[1:], ddtree[1:]
    accept = _mean(d.accept_len for d in decode)
    if accept is None and ddtree:
        accept = _mean(
            d.avg_commit_len if d.avg_commit_len is not None
            else (d.avg_accepted_drafts + 1 if d.avg_accepted_drafts is not None else None)
            for d in ddtree
        )
    return ServerFigures(
        source=source,
        accept_length=accept,
        accept_rate=_mean(d.accept_rate for d in decode),
        gen_throughput=_mean(d.gen_throughput for d in decode),
        avg_accepted_depth=_mean(d.avg_accepted_depth for d in ddtree),
        lines=len(decode) + len(ddtree),
        intervals=max(len(decode), len(ddtree)),
    )


def read_log_since(path: str | Path, offset: int = 0) -> tuple[str, int]:
    """The text a log file gained since byte `offset`, and the new offset.

    Record the offset before a workload and read after it, so that only this workload's
    decode lines (not warm-up, not the previous configuration's) are averaged.
    """
    with open(path, "rb") as fh:
        fh.seek(offset)
        data = fh.read()
    return data.decode("utf-8", errors="replace"), offset + len(data)


def server_figures_from_log_file(path: str | Path, offset: int = 0, *,
                                 whole_intervals_only: bool = False) -> ServerFigures:
    text, _ = read_log_since(path, offset)
    return server_figures_from_log(text, source=str(path), whole_intervals_only=whole_intervals_only)


def parse_prometheus_text(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text exposition → {sample name: [(labels, value), ...]}.

    Raises ValueError when the text is not in Prometheus' text format.
    """
    from prometheus_client.parser import text_string_to_metric_families  # lazy: a large package

    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    except ValueError as exc:
        raise ValueError(f"not Prometheus' text format: {exc}") from None
    return out


def server_figures_from_metrics(text: str) -> ServerFigures:
    """SGLang's /metrics gauges (mean over label sets, e.g. TP ranks or DP groups).

    Note: these gauges describe the latest logging interval, not the workload as a whole
    (gen_throughput reads 0 once the server is idle). SGLang's spec gauges read 0, not absent,
    on a server without speculation and before its first decode interval: an accept length of 0
    (at least 1 where anything was verified) is no figure, and that label set's accept rate
    with it.
    """
    samples = parse_prometheus_text(text)

    def labelled(name: str) -> list[tuple[frozenset, float]]:
        return [(frozenset(labels.items()), v) for labels, v in samples.get(name, []) if math.isfinite(v)]

    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    lengths = labelled(api.METRIC_SPEC_ACCEPT_LENGTH)
    unverified = {labels for labels, v in lengths if v <= 0}
    accept_length = mean([v for _, v in lengths if v > 0])
    rates = [v for labels, v in labelled(api.METRIC_SPEC_ACCEPT_RATE) if labels not in unverified]
    return ServerFigures(
        source="/metrics",
        accept_length=accept_length,
        accept_rate=None if accept_length is None else mean(rates),
        gen_throughput=mean([v for _, v in labelled(api.METRIC_GEN_THROUGHPUT)]),
        lines=sum(len(v) for v in samples.values()),
    )


@dataclass(frozen=True)
class Disagreement:
    metric: str
    client: float
    server: float
    allowed: float
    source: str

    def __str__(self) -> str:
        return (
            f"{self.metric} disagrees: client {self.client:.3f} vs {self.source} {self.server:.3f} "
            f"(|diff| {abs(self.client - self.server):.3f} > allowed {self.allowed:.3f})"
        )


def compare_accept_length(
    client: float | None,
    server: ServerFigures | float | None,
    *,
    decimals: int = 2,
    slack: float = 0.0,
    source: str | None = None,
) -> Disagreement | None:
    """Report client/server accept-length disagreement beyond the server's printing precision.

    The server prints `decimals` places, so half a unit in the last place is rounding; `slack`
    widens that for known systematic differences (SGLang's client-side figure counts the
    prefill token, the log does not). Returns None when they agree or either side is missing.
    """
    if isinstance(server, ServerFigures):
        source = source or server.source
        server = server.accept_length
    if client is None or server is None:
        return None
    allowed = 0.5 * 10 ** (-decimals) + slack + 1e-12
    if abs(client - server) > allowed:
        return Disagreement("accept_length", client, server, allowed, source or "server")
    return None


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = [
    "METRIC_DIRECTIONS",
    "SPEC_META_KEYS",
    "DDTreeLogLine",
    "DecodeLogLine",
    "Direction",
    "Disagreement",
    "Measurement",
    "MeasurementError",
    "MetricValue",
    "Percentiles",
    "RequestRecord",
    "ServerFigures",
    "WorkloadResult",
    "check_no_errors",
    "check_speculation",
    "check_tokens",
    "combine_repeats",
    "compare_accept_length",
    "direction_of",
    "measure",
    "parse_decode_lines",
    "parse_ddtree_lines",
    "parse_prometheus_text",
    "ratio_standard_error",
    "read_log_since",
    "server_figures_from_log",
    "server_figures_from_log_file",
    "server_figures_from_metrics",
    "summarize",
]
