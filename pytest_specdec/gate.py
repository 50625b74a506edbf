"""The regression gate: which tolerance applies to each figure, and the verdict for each figure.

Tolerances come from three places with the precedence of every option: the command line
(`--specdec-compare-fail`), the ini file (`specdec_compare_fail`), then `[tool.specdec]`
(`compare_fail = "..."` and the `[tool.specdec.tolerances]` table). The highest layer that names
a figure or gives `*` decides it, a name beating the wildcard within that layer only: `*:off` on
the command line ungates every figure the ini or the file names, and `METRIC:off` one. Unknown figure names are usage errors, never a gate that cannot fire: a
metric of the user's own is named once, with its direction, in `[tool.specdec.metrics]`.

Verdicts. A deterministic figure (acceptance under greedy decoding) must reproduce: any change
beyond its tolerance is a regression or an improvement. A timing figure is decided from samples
(the workload's requests) against the samples stored in the baseline: `regression` only when the
run is beyond the edge of what still passes (the tolerance, then, for figures calibrated for CPU
contention by calibration.py, what contention alone explains) and a one-sided rank test
(Mann-Whitney U against the baseline's samples moved to that edge) says so at `ALPHA`, or, with
too few samples for that test, when the log ratio of the figure to the edge exceeds Student's t
(1 - ALPHA; n + m - 2 degrees of freedom, each side's error at least the pooled scatter's, or
Welch-Satterthwaite's where a side has no samples of its own) times the combined relative standard error,
or the run collapsed (`COLLAPSE`). Beyond the tolerance but not clearly so is `noisy`, which fails the test only under `--specdec-strict-noise`.
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol, Sequence

from .directions import DECLARE_HINT, METRIC_DIRECTIONS, METRIC_NAME, Direction
from .errors import SpecdecUsageError
from .options import written_at

if TYPE_CHECKING:
    from .metrics import MetricValue

#: One-sided significance of a timing regression (and of an improvement); 3 samples a side
#: cannot reach it (p >= 0.05), 4 can.
ALPHA = 0.025
#: The fewest samples of this run a figure decided from samples needs for the gate's false reds to
#: stay near `ALPHA` when the run is noisier than its baseline; fewer (or a baseline entry of one
#: save) went red 5-10 % of the time and more with nothing changed (docs/PERF.md, "Regression
#: gate"). A sample is a request's, but not every request gives one (`Comparison.sampled`).
FEW_SAMPLES = 4
#: How far a calibrated figure still moves between runs, in log units per unit of combined CPU
#: contention (1 - share, both runs): calibration takes out the wait for a CPU, not the cache and
#: memory traffic of whoever took it. Measured with scripts/gate_power.py (docs/PERF.md).
CONTENTION_NOISE = 0.5

Verdict = str  # "new" | "unchanged" | "improvement" | "regression" | "noisy"
#: A figure's verdicts, as JUnit (`specdec.<metric>.verdict`) and results.json show them: a
#: figure no tolerance gates is "not gated" whatever it did (`Comparison.shown_verdict`).
FIGURE_VERDICTS = ("new", "unchanged", "improvement", "regression", "noisy", "not gated")
#: A test's verdicts (`verdict_of`), from the worst; the table words them (report.VERDICT_TEXT).
TEST_VERDICTS = ("regression", "noisy", "improved", "new", "ok", "not gated")

EXAMPLE = "e.g. output_tok_s:5%,accept_length:2%,ttft_ms:10%"


class Figure(Protocol):
    """What the gate needs of a figure: a `MetricValue` now, a `BaselineEntry` then."""

    value: float
    direction: Direction
    spread: float
    deterministic: bool
    distribution: tuple[float, ...]
    cpu_share: float | None


# --------------------------------------------------------------------------------------------
# Tolerances


@dataclass(frozen=True)
class Tolerance:
    """How much worse than the baseline a figure may get: relative (`5%`) or absolute (`0.05`)."""

    metric: str
    amount: float
    relative: bool

    def allowed(self, baseline: float) -> float:
        """The allowance in the figure's own unit."""
        return abs(baseline) * self.amount if self.relative else self.amount

    def __str__(self) -> str:
        return f"{self.amount * 100:g}%" if self.relative else f"{self.amount:g}"

    def to_json(self) -> dict[str, Any]:
        return {"amount": self.amount, "relative": self.relative}

    @classmethod
    def from_json(cls, metric: str, obj: Mapping[str, Any] | None) -> Tolerance | None:
        return None if obj is None else cls(metric, float(obj["amount"]), bool(obj["relative"]))


@dataclass(frozen=True)
class Rule:
    """The gate in force for one figure, and where it was set (for the report header)."""

    metric: str
    tolerance: Tolerance | None  # None: not gated
    origin: str
    direction: Direction = "higher"

    def describe(self) -> str:
        if self.tolerance is None:
            return f"{self.metric} not gated ({self.origin})"
        sign = "-" if self.direction == "higher" else "+"
        return f"{self.metric} {sign}{self.tolerance} ({self.origin})"


_OFF = object()  # `METRIC:off`


def _parse_amount(metric: str, amount: str, source: str) -> Tolerance | object:
    if amount.lower() == "off":
        return _OFF
    relative = amount.endswith("%")
    number = amount[:-1].strip() if relative else amount
    try:
        value = float(number)
    except ValueError:
        raise SpecdecUsageError(f"{source}: tolerance {amount!r} for {metric!r} is not a number or "
                                f"percentage (like 5%, relative, or 0.05, absolute in the figure's unit), or off") from None
    if not math.isfinite(value) or value < 0:
        raise SpecdecUsageError(f"{source}: tolerance {amount!r} for {metric!r} must be a finite "
                                f"number >= 0")
    value = abs(value)  # `-0%` is 0 %, shown so in the header (not `--0%`)
    return Tolerance(metric, value / 100.0 if relative else value, relative)


#: Built-in figures that cannot exceed a bound (SGLang's accept rate is a fraction): an absolute
#: tolerance of the bound or more lets no drop fail.
UPPER_BOUNDS: Mapping[str, float] = {"accept_rate": 1.0}


def _check_can_fail(source: str, layer: Mapping[str, Any], known: Mapping[str, Direction]) -> None:
    """Refuse a tolerance that no measurement can exceed, which would gate its figure in name
    only: a drop of 100 % or more of a higher-is-better figure (none is below 0), or an absolute
    drop of a bounded figure's whole range (`accept_rate:2` meant as 2 %). `*` is checked for the
    figures of its layer that it stands for."""
    for metric in known:
        key = metric if metric in layer else "*" if "*" in layer else None
        tol = None if key is None else layer[key]
        if not isinstance(tol, Tolerance):
            continue
        bound = UPPER_BOUNDS.get(metric)
        # a figure of the user's own may go below 0, so a drop of 100 % or more may be measured
        if tol.relative and tol.amount >= 1.0 and known[metric] == "higher" and metric in METRIC_DIRECTIONS:
            why = f"{metric} is higher-is-better and cannot drop by {tol} (it is never below 0)"
            fix = "a percentage below 100%"
        elif not tol.relative and bound is not None and tol.amount >= bound:
            why = f"{metric} lies between 0 and {bound:g}, so no drop exceeds {tol}"
            fix = f"a percentage ({tol}%?) or an absolute drop below {bound:g}"
        else:
            continue
        spelt = f"{key}:{tol}" + (f" (which gives {metric} its tolerance)" if key == "*" else "")
        raise SpecdecUsageError(f"{source}: {spelt} can never fail: {why}; write {fix}, or "
                                f"{metric}:off to leave it ungated")


def _check_name(metric: str, source: str, known: Mapping[str, Direction]) -> None:
    if metric == "*":
        return
    if not METRIC_NAME.match(metric):
        raise SpecdecUsageError(f"{source}: {metric!r} is not a metric name; {EXAMPLE}")
    if metric not in known:
        from .suggest import closest

        meant = closest(metric, sorted(known))
        raise SpecdecUsageError(f"{source}: unknown metric {metric!r}; " + (
            f"did you mean {meant!r}? (else {DECLARE_HINT})" if meant else
            f"valid names: {', '.join(sorted(known))} (or * for all); {DECLARE_HINT}"))


def parse_tolerances(expr: str, *, source: str = "--specdec-compare-fail",
                     known: Mapping[str, Direction] = METRIC_DIRECTIONS) -> dict[str, Any]:
    """`output_tok_s:5%,accept_length:2%,ttft_ms:off` -> {metric: Tolerance or off}.

    `METRIC:N%` is relative to the baseline, `METRIC:N` absolute in the figure's unit, `*:N%`
    applies to every figure not named, `METRIC:off` gates nothing for it.
    """
    if not isinstance(expr, str) or not expr.strip():
        raise SpecdecUsageError(f"{source}: empty tolerance expression; {EXAMPLE}")
    out: dict[str, Any] = {}
    for item in expr.split(","):
        item = item.strip()
        if not item:
            raise SpecdecUsageError(f"{source}: empty item in {expr!r} (stray comma?); {EXAMPLE}")
        metric, sep, amount = item.partition(":")
        metric, amount = metric.strip(), amount.strip()
        if not sep or not metric or not amount:
            raise SpecdecUsageError(f"{source}: {item!r} is not METRIC:TOLERANCE; {EXAMPLE}")
        _check_name(metric, source, known)
        if metric in out:
            raise SpecdecUsageError(f"{source}: metric {metric!r} is given twice in {expr!r}; "
                                    f"give each metric once, with the tolerance meant")
        out[metric] = _parse_amount(metric, amount, source)
    return out


def parse_tolerance_table(table: Mapping[str, Any], source: str,
                          known: Mapping[str, Direction] = METRIC_DIRECTIONS) -> dict[str, Any]:
    """`[tool.specdec.tolerances]`: `output_tok_s = "5%"`, `accept_length = 0`, `ttft_ms = "off"`."""
    out: dict[str, Any] = {}
    for metric, value in table.items():
        _check_name(metric, source, known)
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise SpecdecUsageError(f"{source} key {metric!r}: {value!r} is not a tolerance; write a "
                                    f"percentage such as \"5%\", an absolute number, or \"off\"")
        out[metric] = _parse_amount(metric, str(value).strip(), f"{source} key {metric!r}")
    return out


@dataclass(frozen=True)
class Tolerances:
    """Every layer's tolerances, highest precedence first; `rule(metric)` resolves one figure."""

    layers: tuple[tuple[str, Mapping[str, Any]], ...] = ()  # (origin, {metric: Tolerance|off})
    directions: Mapping[str, Direction] = field(default_factory=lambda: dict(METRIC_DIRECTIONS))

    def rule(self, metric: str) -> Rule:
        direction = self.directions.get(metric, "higher")
        for origin, table in self.layers:
            for key in (metric, "*"):  # the name beats the wildcard within a layer only
                if key in table:
                    value = table[key]
                    return Rule(metric, None if value is _OFF else value, origin, direction)
        return Rule(metric, None, "no tolerance set", direction)

    def get(self, metric: str) -> Tolerance | None:
        return self.rule(metric).tolerance

    def off_by(self, metric: str) -> tuple[str, str] | None:
        """(`KEY:off`, origin) where a layer ungates `metric` on purpose (`*:off`, `METRIC:off`);
        None where a tolerance gates it or none names it."""
        for origin, table in self.layers:
            for key in (metric, "*"):
                if key in table:
                    return (f"{key}:off", origin) if table[key] is _OFF else None
        return None

    @property
    def any(self) -> bool:
        """Whether some figure is gated (a higher layer's `*:off` may ungate all a lower one names)."""
        return any(rule.tolerance is not None for rule in self.rules())

    def rules(self) -> list[Rule]:
        return [self.rule(metric) for metric in self.directions]

    def describe(self) -> str:
        """One header line's worth: the gate in force for every built-in and declared figure."""
        gated = [r.describe() for r in self.rules() if r.tolerance is not None]
        ungated = [r.metric for r in self.rules() if r.tolerance is None]
        parts = gated + ([f"not gated: {', '.join(ungated)}"] if ungated else [])
        return "; ".join(parts)


def resolve_tolerances(cli: str | None, ini: str | None, file_expr: str | None,
                       file_table: Mapping[str, Any] | None, file_name: str,
                       known: Mapping[str, Direction] = METRIC_DIRECTIONS, ini_origin: str = "ini") -> Tolerances:
    """The layers in precedence order; a figure named twice within the file is an error.

    `file_table` is `[tool.specdec.tolerances]` as `parse_tolerance_table` returned it; `known`
    the built-in metrics and the declared ones; `ini_origin` the ini layer's name in the header
    (`-o specdec_compare_fail` where `-o` gave it: `Settings.said`).
    """
    layers: list[tuple[str, Mapping[str, Any]]] = []
    if cli:
        layers.append(("command line", parse_tolerances(cli, source="--specdec-compare-fail", known=known)))
        _check_can_fail("--specdec-compare-fail", layers[-1][1], known)
    if ini:
        source = written_at("compare_fail", ini_origin)  # `-o specdec_compare_fail` where `-o` gave it
        layers.append((ini_origin, parse_tolerances(ini, source=source, known=known)))
        _check_can_fail(source, layers[-1][1], known)
    file_layer: dict[str, Any] = {}
    if file_expr:
        file_layer.update(parse_tolerances(file_expr, source=written_at("compare_fail", file_name), known=known))
    if file_table:
        table = dict(file_table)
        twice = sorted(set(table) & set(file_layer))
        if twice:
            raise SpecdecUsageError(
                f"{file_name}: {', '.join(twice)} given both in compare_fail and in "
                f"[tool.specdec.tolerances]; keep one")
        file_layer.update(table)
    if file_layer:
        _check_can_fail(file_name, file_layer, known)
        layers.append((file_name, file_layer))
    return Tolerances(tuple(layers), dict(known))


# --------------------------------------------------------------------------------------------
# Statistics


def mann_whitney_p(worse: Sequence[float], better: Sequence[float]) -> float:
    """One-sided p-value that `worse` is stochastically smaller than `better` (Mann-Whitney U).

    Exact (the U distribution counted by recursion) up to 30 samples a side, or one sample
    against any number, the normal approximation beyond; ties count one half. Small samples cannot
    reach small p-values (3 against 3 never goes below 0.05): that is what makes a short run
    `noisy`, not red.
    """
    n, m = len(worse), len(better)
    if n == 0 or m == 0:
        return 1.0
    u = sum(1.0 if x < y else 0.5 if x == y else 0.0 for x in worse for y in better)
    if min(n, m) == 1:
        # U is uniform on 0..n*m; the normal approximation would never go below 0.04 here: no red
        return (n * m + 1 - math.floor(u + 1e-9)) / (n * m + 1)
    if n <= 30 and m <= 30:
        counts = _u_counts(n, m)
        # P(U >= u) under H0 (U is symmetric); a tie's half is rounded down: conservative
        return sum(counts[math.floor(u + 1e-9):]) / sum(counts)
    mean = n * m / 2
    sd = math.sqrt(n * m * (n + m + 1) / 12)
    return 0.5 * math.erfc((u - 0.5 - mean) / sd / math.sqrt(2))


@functools.lru_cache(maxsize=64)
def _u_counts(n: int, m: int) -> list[int]:
    """Number of orderings of n + m distinct values giving each U = 0..n*m."""
    table = {(0, j): [1] for j in range(m + 1)}
    for i in range(1, n + 1):
        table[(i, 0)] = [1]
        for j in range(1, m + 1):
            a, b = table[(i - 1, j)], table[(i, j - 1)]
            # the largest value is one of the i (it beats all j others: U gains j) or of the j
            size = i * j + 1
            out = [0] * size
            for k, c in enumerate(a):
                out[k + j] += c
            for k, c in enumerate(b):
                out[k] += c
            table[(i, j)] = out
    return table[(n, m)]


def contention_allowance(now: Figure, then: Figure) -> float:
    """The factor (>= 1) by which two calibrated runs' figures may differ for contention alone:
    about 1.04 when both had their CPU 95 % of the time, 1.64 when both had it 30 %."""
    if now.cpu_share is None or then.cpu_share is None:
        return 1.0
    return math.exp(CONTENTION_NOISE * math.hypot(1 - now.cpu_share, 1 - then.cpu_share))


def center(figure: Figure) -> float:
    """The figure a verdict is about: a timing figure's median sample, else its value (an
    accept length is a ratio of sums, not a median of per-request ratios)."""
    if figure.deterministic or not figure.distribution:
        return figure.value
    return statistics.median(figure.distribution)


# --------------------------------------------------------------------------------------------
# Comparison


def _fmt(x: float) -> str:
    a = abs(x)
    if a >= 100:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


@dataclass(frozen=True)
class Comparison:
    """One figure of one test against its baseline: the verdict and how it was reached."""

    test_id: str
    metric: str
    value: float  # this run's figure as compared (calibrated where `calibrated`)
    direction: Direction
    baseline: float | None
    tolerance: Tolerance | None
    verdict: Verdict
    p_value: float | None = None  # the rank test's, for timing figures decided from samples
    samples: tuple[int, int] = (1, 1)  # (this run's, the baseline's)
    calibrated: bool = False
    contention: float = 1.0  # the factor allowed for CPU contention (contention_allowance)
    #: the run's samples a figure decided from samples had, the run's requests behind them and the
    #: saves its baseline entry pools; 0 for a deterministic figure or one recorded without samples
    #: (the summary's small-sample note). Samples can be fewer than requests: TPOT has none for an
    #: output that arrived whole at once, a sampled acceptance figure none for an unverified request
    sampled: int = 0
    requests: int = 0
    baseline_runs: int = 0

    @property
    def change(self) -> float | None:
        """Relative change (value / baseline - 1); None without a non-zero baseline."""
        if self.baseline is None or self.baseline == 0:
            return None
        return self.value / self.baseline - 1.0

    @property
    def gated(self) -> bool:
        return self.tolerance is not None

    @property
    def shown_verdict(self) -> str:
        """The verdict as JUnit and results.json show it: a dashboard reading "regression" on a
        figure no tolerance gates would see a red that is not."""
        return self.verdict if self.gated else "not gated"

    @property
    def failed(self) -> bool:
        return self.gated and self.verdict == "regression"

    @property
    def noisy(self) -> bool:
        return self.gated and self.verdict == "noisy"

    @property
    def small_sample(self) -> bool:
        """A gated figure, compared with a baseline, decided from too few samples for the gate's
        nominal false-red rate: fewer than `FEW_SAMPLES` samples (the statistic's n, whatever the
        requests), or a baseline of one save."""
        return (self.gated and self.baseline is not None and self.sampled > 0
                and (self.sampled < FEW_SAMPLES or self.baseline_runs == 1))

    def sample_count(self) -> str:
        """`2 requests`, or `2 samples of 8 requests` where some requests gave the figure none."""
        if self.requests <= self.sampled:
            return f"{self.sampled} request{'s' if self.sampled > 1 else ''}"
        return f"{self.sampled} sample{'s' if self.sampled > 1 else ''} of {self.requests} requests"

    @property
    def noteworthy(self) -> bool:
        """Worth a line in the summary's notes (a change, or one too noisy to call)."""
        return self.verdict in ("regression", "improvement", "noisy")

    def line(self) -> str:
        """`output_tok_s 812.4 < baseline 901.0 -5% (-9.8%)`: value, baseline, the allowed
        change in the bad (regression) or good (improvement) direction, the actual change;
        then, for figures decided from samples, the evidence."""
        if self.baseline is None:
            return f"{self.metric} {_fmt(self.value)} (no baseline)"
        op = "<" if self.value < self.baseline else ">" if self.value > self.baseline else "="
        change = self.change
        actual = "n/a" if change is None else f"{change * 100:+.1f}%"
        evidence = self._evidence()
        if self.tolerance is None:
            shown = "==" if op == "=" else op
            return (f"{self.metric} {_fmt(self.value)} {shown} baseline {_fmt(self.baseline)} "
                    f"({actual}, not gated){evidence if self.noteworthy else ''}")
        tol = str(self.tolerance)
        worse_sign = "-" if self.direction == "higher" else "+"
        better_sign = "+" if worse_sign == "-" else "-"
        if self.verdict == "regression":
            return f"{self.metric} {_fmt(self.value)} {op} baseline {_fmt(self.baseline)} " \
                   f"{worse_sign}{tol} ({actual}){evidence}"
        if self.verdict == "noisy":
            return f"{self.metric} {_fmt(self.value)} {op} baseline {_fmt(self.baseline)} " \
                   f"{worse_sign}{tol} ({actual}): too noisy to decide{evidence}"
        if self.verdict == "improvement":
            return f"{self.metric} {_fmt(self.value)} {op} baseline {_fmt(self.baseline)} " \
                   f"{better_sign}{tol} ({actual}){evidence}"
        if op == "=":
            op = "=="
        return f"{self.metric} {_fmt(self.value)} {op} baseline {_fmt(self.baseline)} ±{tol} ({actual})"

    def _evidence(self) -> str:
        parts = []
        if self.p_value is not None:
            parts.append(f"p={self.p_value:.2g}, {self.samples[0]} vs {self.samples[1]} samples")
        elif self.calibrated:
            parts.append("by standard errors: too few samples for a rank test")
        if self.calibrated:
            parts.append("per second the server had a CPU")
        if self.contention > 1.005:
            parts.append(f"x{self.contention:.2f} allowed for CPU contention")
        if 0 < self.sampled < FEW_SAMPLES and self.verdict in ("regression", "noisy"):
            # such a red is false more often than ALPHA says: the reader should know before acting
            parts.append(f"{self.sample_count()}: a small sample")
        return f" [{', '.join(parts)}]" if parts else ""

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "value": self.value, "direction": self.direction,
                "baseline": self.baseline, "verdict": self.verdict, "p_value": self.p_value,
                "samples": list(self.samples), "calibrated": self.calibrated,
                "contention": self.contention, "sampled": self.sampled, "requests": self.requests,
                "baseline_runs": self.baseline_runs,
                "tolerance": None if self.tolerance is None else self.tolerance.to_json(),
                "line": self.line()}  # for people reading the journal; derived, never read back

    @classmethod
    def from_json(cls, test_id: str, obj: Mapping[str, Any], figure_requests: int = 0) -> Comparison:
        """`figure_requests`: the requests of the figure compared (`MetricValue.samples`), for a
        comparison from before `sampled`, which held only its samples (under "requests")."""
        samples = obj.get("samples") or (1, 1)
        sampled = int(obj.get("sampled", obj.get("requests", 0)))
        # what compare_metric gives now: the figure's requests, never fewer than its samples
        requests = int(obj.get("requests", 0)) if "sampled" in obj else sampled and max(figure_requests, sampled)
        return cls(test_id, obj["metric"], float(obj["value"]), obj["direction"],
                   None if obj.get("baseline") is None else float(obj["baseline"]),
                   Tolerance.from_json(obj["metric"], obj.get("tolerance")), obj["verdict"],
                   None if obj.get("p_value") is None else float(obj["p_value"]),
                   (int(samples[0]), int(samples[1])), bool(obj.get("calibrated", False)),
                   float(obj.get("contention", 1.0)),
                   sampled=sampled, requests=requests, baseline_runs=int(obj.get("baseline_runs", 0)))


def compare_metric(test_id: str, metric: MetricValue, baseline: Figure | None,
                   tolerance: Tolerance | None) -> Comparison:
    """The verdict for one figure (see the module docstring)."""
    if baseline is None:
        return Comparison(test_id, metric.name, center(metric), metric.direction, None,
                          tolerance, "new", calibrated=metric.calibrated)
    if baseline.direction != metric.direction:
        raise SpecdecUsageError(
            f"baseline for {test_id} {metric.name} says {baseline.direction!r} is better but the "
            f"metric is {metric.direction!r}-is-better; if the change is meant, delete the entry "
            f"(a saving run compares with it first, so cannot replace it) and save the figure again "
            f"with --specdec-save-baseline")
    now, then = center(metric), center(baseline)
    calibrated = metric.calibrated and baseline.calibrated
    if metric.calibrated != baseline.calibrated:  # one side only: compare as measured
        now, then = metric.value, baseline.value
    higher = metric.direction == "higher"
    allowed = tolerance.allowed(then) if tolerance is not None else 0.0
    worse = (then - now) if higher else (now - then)
    eps = 1e-12 * max(1.0, abs(then))
    exact = metric.deterministic and baseline.deterministic
    samples_now = metric.distribution if calibrated or not metric.calibrated else ()
    samples_then = baseline.distribution if calibrated or not baseline.calibrated else ()
    base = dict(test_id=test_id, metric=metric.name, value=now, direction=metric.direction,
                baseline=then, tolerance=tolerance, calibrated=calibrated,
                sampled=0 if exact else len(samples_now),
                # a MetricValue's `samples` counts the workload's requests (metrics.Measurement)
                requests=0 if exact or not samples_now else max(metric.samples, len(samples_now)),
                # a MetricValue as the baseline (scripts, tests) pools no saves: one
                baseline_runs=0 if exact or not samples_now else getattr(baseline, "runs", 1))
    if abs(worse) <= allowed + eps:
        return Comparison(**base, verdict="unchanged")
    direction = "regression" if worse > 0 else "improvement"
    if exact:
        return Comparison(**base, verdict=direction)
    # The edge of what still passes: the tolerance, then what CPU contention alone explains, on
    # the side the run moved to. Is this run clearly beyond it?
    moved_down = (direction == "regression") == higher
    factor = contention_allowance(metric, baseline) if calibrated else 1.0

    def edge(v: float) -> float:
        step = tolerance.allowed(v) if tolerance is not None else 0.0
        return (v - step) / factor if moved_down else (v + step) * factor

    gap = edge(then) - now if moved_down else now - edge(then)  # > 0: beyond the edge
    n, m = len(samples_now), len(samples_then)
    if n and m and math.comb(n + m, n) * ALPHA >= 1:
        # enough samples for the rank test to be able to say so
        edges = [edge(v) for v in samples_then]
        p = mann_whitney_p(samples_now, edges) if moved_down else mann_whitney_p(edges, samples_now)
        clear = gap > 0 and p <= ALPHA
    else:
        # too few samples (or none: figures recorded one value at a time, version-1 baselines)
        p = None
        clear = _clear_by_errors(metric, baseline, samples_now, samples_then, edge, now, then,
                                 moved_down)
    verdict = direction if clear else ("noisy" if direction == "regression" else "unchanged")
    return Comparison(**base, verdict=verdict, p_value=p, samples=(max(n, 1), max(m, 1)),
                      contention=factor)


#: One-sided quantiles 1 - ALPHA (0.975) of Student's t for 1..30 degrees of freedom.
T_QUANTILES = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
               2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
               2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
#: Beyond the edge by this factor (a throughput halved, a latency doubled past it) is a collapse:
#: red whatever the errors say, when every request of the run is beyond every baseline request
#: moved to the edge. The only red a single request against a single request can give.
COLLAPSE = 2.0


def t_quantile(df: float) -> float:
    """Student's t at 1 - ALPHA for `df` degrees of freedom (Welch-Satterthwaite's are
    fractional: linear in 1 / df between the table's, below 1 as at 1); infinite df is the
    normal's 1.96."""
    if df > len(T_QUANTILES):
        z = 1.959964
        return z + (z ** 3 + z) / (4 * df)  # Cornish-Fisher: 2.04 at 31, 1.96 at infinity
    if df <= 1:
        return T_QUANTILES[0]
    low = int(df)
    if low == df:
        return T_QUANTILES[low - 1]
    share = (1 / low - 1 / df) / (1 / low - 1 / (low + 1))
    return T_QUANTILES[low - 1] + share * (T_QUANTILES[low] - T_QUANTILES[low - 1])


@dataclass(frozen=True)
class _Error:
    """One side's relative standard error (of the log of its figure), its degrees of freedom
    (inf: a spread of unknown origin) and which samples it was estimated from."""

    variance: float
    df: float
    source: str
    #: the variance a sample's log scatter squared stands for (median factor^2 / n); 0: not from samples
    per_scatter: float = 0.0


def _log_scatter(samples: Sequence[float]) -> float:
    """Standard deviation of the samples' logs (their relative scatter); of the samples over
    their mean where one is not positive (no logarithm)."""
    if min(samples) > 0:
        return statistics.stdev([math.log(v) for v in samples])
    mean = statistics.fmean(samples)
    return statistics.stdev(samples) / abs(mean) if mean else 0.0


def _error(figure: Figure, own: Sequence[float], other: Sequence[float], side: str) -> _Error:
    """The figure's relative standard error: its spread, or more where its samples say so (a
    baseline's pool of several runs); a side of one sample, which shows no noise, takes the other
    side's scatter a sample (one request a workload once made any drift past the edge red)."""
    spread = figure.spread / abs(figure.value) if figure.value else 0.0
    n = max(len(own), 1)
    if len(own) >= 2:  # the spread was taken from these samples (or from fewer: a pool's last save)
        per = _median_factor(n) ** 2 / n
        return _Error(per * _log_scatter(own) ** 2, n - 1, side, per)
    if len(other) >= 2:  # as the other side's scatter, estimated from its samples
        error = max(_median_factor(n) * _log_scatter(other) / math.sqrt(n), spread)
        return _Error(error ** 2, len(other) - 1, "then" if side == "now" else "now")
    return _Error(spread ** 2, math.inf, side)


def _median_factor(n: int) -> float:
    """A median of n samples' standard error over their mean's (normal samples): the mean's for
    1 or 2, 1.16 for 3, towards sqrt(pi / 2) = 1.2533 beyond."""
    return 1.0 if n <= 2 else 1.16 if n == 3 else 1.2533


def _combined(errors: Sequence[_Error]) -> tuple[float, float]:
    """The combined error and its degrees of freedom. Both sides with samples of their own: each
    side's error is at least what the two sides' pooled scatter gives it, with n + m - 2 degrees
    of freedom (two requests that happened to agree claim no precision the other side's scatter
    denies: by their own scatter and Welch-Satterthwaite, 2 against 6 unchanged requests went red
    about 3 % of the time, not 2.5 %). Otherwise Welch-Satterthwaite's; errors estimated from the
    same samples (a side that borrowed the other's scatter) count as one estimate."""
    if len(errors) == 2 and all(e.per_scatter > 0 for e in errors):
        df = sum(e.df for e in errors)
        pooled = sum(e.df * e.variance / e.per_scatter for e in errors) / df
        return math.sqrt(sum(max(e.variance, pooled * e.per_scatter) for e in errors)), df
    by_source: dict[str, _Error] = {}
    for e in errors:
        seen = by_source.get(e.source)
        by_source[e.source] = e if seen is None else _Error(seen.variance + e.variance, seen.df, e.source)
    total = sum(e.variance for e in by_source.values())
    spent = sum(e.variance ** 2 / e.df for e in by_source.values() if math.isfinite(e.df))
    return math.sqrt(total), (total ** 2 / spent if spent > 0 else math.inf)


def _clear_by_errors(metric: Figure, baseline: Figure, samples_now: Sequence[float],
                     samples_then: Sequence[float], edge: Callable[[float], float], now: float,
                     then: float, moved_down: bool) -> bool:
    """Too few samples for the rank test: clearly beyond the edge when the log of the figure over
    the edge exceeds Student's t (at 1 - ALPHA, the degrees of freedom `_combined` gives) times the
    combined relative error, or by a collapse. One criterion for both directions: a rise and a
    drop by the same factor weigh the same. Without any scatter on either side, samples carried
    (a request against a request) say nothing of noise: only a collapse is red; figures recorded
    without samples or spread are taken as exact (any drift past the edge is red)."""
    errors = [_error(metric, samples_now, samples_then, "now"),
              _error(baseline, samples_then, samples_now, "then")]
    noise, df = _combined(errors)
    ratio = _log_ratio(edge(then), now, moved_down)
    if ratio is not None and ratio >= math.log(COLLAPSE) and _every_sample_beyond(
            samples_now, [edge(v) for v in samples_then], moved_down):
        return True
    if noise == 0:
        return not (samples_now or samples_then)
    if ratio is None:  # an edge at or below 0 (a figure of the user's own): by the difference
        scale = math.hypot(math.sqrt(errors[0].variance) * abs(metric.value),
                           math.sqrt(errors[1].variance) * abs(baseline.value))
        gap = edge(then) - now if moved_down else now - edge(then)
        return gap > t_quantile(df) * scale
    return ratio > t_quantile(df) * noise


def _every_sample_beyond(samples_now: Sequence[float], edges: Sequence[float],
                         moved_down: bool) -> bool:
    """Whether every request of the run is beyond every baseline request moved to the edge;
    true where a side carries no samples."""
    if not samples_now or not edges:
        return True
    return max(samples_now) < min(edges) if moved_down else min(samples_now) > max(edges)


def _log_ratio(edge_value: float, now: float, moved_down: bool) -> float | None:
    """How far beyond the edge `now` is, as the log of their ratio (> 0: beyond it): infinite for a
    drop to 0 or below; None where the edge is not positive (a figure of the user's own may be),
    which has no logarithm."""
    if edge_value <= 0 or (now <= 0 and not moved_down):
        return None
    if now <= 0:
        return math.inf
    return math.log(edge_value / now) if moved_down else math.log(now / edge_value)


def unreachable(comparisons: Iterable[Comparison]) -> list[str]:
    """Why the absolute tolerances of these built-in higher-is-better figures can never fail: a
    drop of the whole baseline (`output_tok_s:15` meant as 15 %, against 12 tok/s) is allowed,
    and none of these figures goes below 0."""
    return [f"{c.metric}:{c.tolerance} allows a drop of its whole baseline {_fmt(c.baseline)}, so "
            f"no run can fail it; write a percentage ({c.metric}:N%) or an absolute drop below "
            f"{_fmt(c.baseline)}"
            for c in comparisons
            if c.tolerance is not None and not c.tolerance.relative and c.direction == "higher"
            and c.metric in METRIC_DIRECTIONS and c.baseline is not None
            and c.tolerance.amount > 0 and 0 <= c.baseline <= c.tolerance.amount]


def compare_all(test_id: str, metrics: Iterable[MetricValue], baseline_of, tolerances: Tolerances
                ) -> list[Comparison]:
    """Every figure of a test; `baseline_of(test_id, metric)` gives the stored entry or None."""
    return [compare_metric(test_id, m, baseline_of(test_id, m.name), tolerances.get(m.name))
            for m in metrics]


def verdict_of(comparisons: Iterable[Comparison]) -> str:
    """A test's verdict: a gated regression wins; then a gated noisy figure, then a gated
    improvement; a gated figure new (no baseline entry), or every figure new where none is
    gated, is "new"; compared but nothing gated is "not gated"; else "ok"; "" when nothing was
    compared."""
    comparisons = list(comparisons)
    if not comparisons:
        return ""
    if any(c.failed for c in comparisons):
        return "regression"
    if any(c.noisy for c in comparisons):
        return "noisy"
    if any(c.verdict == "improvement" and c.gated for c in comparisons):
        return "improved"
    gated = [c for c in comparisons if c.gated]
    if any(c.verdict == "new" for c in gated) or all(c.verdict == "new" for c in comparisons):
        return "new"  # a gated figure had no baseline to compare with: not "ok"
    if not any(c.gated for c in comparisons):
        return "not gated"
    return "ok"


def failure_message(comparisons: Iterable[Comparison], strict_noise: bool = False) -> str | None:
    """The failure text for a test (one line per gated regression, and per noisy figure under
    --specdec-strict-noise), or None when it passes."""
    lines = [c.line() for c in comparisons if c.failed or (strict_noise and c.noisy)]
    return "\n".join(lines) if lines else None
