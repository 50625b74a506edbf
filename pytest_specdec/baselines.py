"""Per-hardware baseline files, tolerance expressions and the direction- and noise-aware gate.

One JSON file per hardware key (`baselines/nvidia-h200-sm_90-x8.json`, `baselines/cpu.json`):
numbers measured on one machine mean nothing on another, so a file records the key it belongs
to and loading it for other hardware is an error rather than a silent comparison. Saving merges
into whatever is on disk under a lock (several xdist workers may save at once) and replaces the
file atomically, so an interrupted save never leaves a half-written baseline and a partial run
never drops other tests' entries.

The gate: a change is a regression only when it is worse than the tolerance AND larger than the
measured noise (`noise_sigmas` combined standard errors of both runs). Deterministic metrics
(acceptance under greedy decoding with a fixed seed) carry no noise, so they gate on the
tolerance alone.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from filelock import FileLock

from .errors import SpecdecUsageError
from .metrics import Direction, MetricValue

FORMAT = "pytest-specdec-baselines"
VERSION = 1

Verdict = str  # "new" | "regression" | "improvement" | "unchanged" | "noise"


# --------------------------------------------------------------------------------------------
# Hardware key and provenance


def baseline_path(baseline_dir: str | Path, key: str) -> Path:
    return Path(baseline_dir) / f"{key}.json"


def collect_versions() -> dict[str, str]:
    """Versions that explain a baseline: the plugin, torch and SGLang when installed.

    Read from package metadata, never by importing (importing torch costs seconds and may
    initialise CUDA in the pytest controller).
    """
    from importlib import metadata

    from . import __version__

    versions = {"pytest-specdec": __version__}
    for dist in ("torch", "triton", "sglang"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return versions


def git_commit(cwd: str | Path | None = None) -> str | None:
    """The HEAD commit of the repository at `cwd` (suffixed `-dirty` with local changes), or None."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if dirty else head or None


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


# --------------------------------------------------------------------------------------------
# File model


@dataclass(frozen=True)
class BaselineEntry:
    """One stored figure of one test on one hardware key."""

    value: float
    direction: Direction
    spread: float = 0.0
    samples: int = 1
    deterministic: bool = False
    date: str = ""
    versions: tuple[tuple[str, str], ...] = ()
    commit: str | None = None
    fingerprint: str | None = None  # digest of what was measured (fingerprint.py); None: unknown

    @classmethod
    def from_metric(cls, metric: MetricValue, *, date: str | None = None,
                    versions: Mapping[str, str] | None = None, commit: str | None = None,
                    fingerprint: str | None = None) -> "BaselineEntry":
        return cls(
            value=float(metric.value), direction=metric.direction, spread=float(metric.spread),
            samples=int(metric.samples), deterministic=metric.deterministic, date=date or _now(),
            versions=tuple(sorted((versions or {}).items())), commit=commit,
            fingerprint=fingerprint,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "value": self.value, "direction": self.direction, "spread": self.spread,
            "samples": self.samples, "deterministic": self.deterministic, "date": self.date,
            "versions": dict(self.versions), "commit": self.commit,
            **({"fingerprint": self.fingerprint} if self.fingerprint is not None else {}),
        }

    @classmethod
    def from_json(cls, obj: Any, where: str) -> "BaselineEntry":
        if not isinstance(obj, dict):
            raise SpecdecUsageError(f"{where}: expected an object with value, direction, spread, ...")

        def number(key: str, default: float | None = None) -> float:
            value = obj.get(key, default)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise SpecdecUsageError(f"{where}: {key!r} must be a finite number, got {value!r}")
            return float(value)

        direction = obj.get("direction")
        if direction not in ("higher", "lower"):
            raise SpecdecUsageError(f"{where}: 'direction' must be 'higher' or 'lower', got {direction!r}")
        spread = number("spread", 0.0)
        if spread < 0:
            raise SpecdecUsageError(f"{where}: 'spread' must be >= 0, got {spread!r}")
        samples = obj.get("samples", 1)
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
            raise SpecdecUsageError(f"{where}: 'samples' must be a positive integer, got {samples!r}")
        versions = obj.get("versions") or {}
        if not isinstance(versions, dict):
            raise SpecdecUsageError(f"{where}: 'versions' must be an object, got {versions!r}")
        commit = obj.get("commit")
        return cls(
            value=number("value"), direction=direction, spread=spread, samples=samples,
            deterministic=bool(obj.get("deterministic", False)), date=str(obj.get("date", "")),
            versions=tuple(sorted((str(k), str(v)) for k, v in versions.items())),
            commit=None if commit is None else str(commit),
            fingerprint=None if obj.get("fingerprint") is None else str(obj["fingerprint"]),
        )


@dataclass(frozen=True)
class Baselines:
    """The entries of one baseline file: {test id: {metric: entry}}."""

    hardware_key: str
    entries: Mapping[str, Mapping[str, BaselineEntry]] = field(default_factory=dict)
    path: Path | None = None

    def get(self, test_id: str, metric: str) -> BaselineEntry | None:
        return self.entries.get(test_id, {}).get(metric)

    def __len__(self) -> int:
        return sum(len(m) for m in self.entries.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "hardware_key": self.hardware_key,
            "entries": {t: {m: e.to_json() for m, e in sorted(ms.items())} for t, ms in sorted(self.entries.items())},
        }


_FIX = "fix or delete it, or re-create it with --specdec-save-baseline"


def parse_baselines(text: str, hardware_key: str, source: str) -> Baselines:
    """Validate a baseline document; every error names the file, the entry and the fix."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecdecUsageError(
            f"baseline file {source} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); {_FIX}"
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise SpecdecUsageError(
            f"baseline file {source} is not a pytest-specdec baseline file (expected \"format\": \"{FORMAT}\"); {_FIX}"
        )
    version = doc.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise SpecdecUsageError(f"baseline file {source}: 'version' must be a positive integer, got {version!r}; {_FIX}")
    if version > VERSION:
        raise SpecdecUsageError(
            f"baseline file {source} has format version {version}, newer than this pytest-specdec reads "
            f"({VERSION}); upgrade pytest-specdec"
        )
    key = doc.get("hardware_key")
    if key != hardware_key:
        raise SpecdecUsageError(
            f"baseline file {source} belongs to hardware {key!r}, but this machine is {hardware_key!r}; "
            f"baselines do not transfer between machines: use {hardware_key}.json (or --specdec-arch/"
            "--specdec-gpus to match), or point --specdec-baseline-dir elsewhere"
        )
    raw = doc.get("entries", {})
    if not isinstance(raw, dict):
        raise SpecdecUsageError(f"baseline file {source}: 'entries' must be an object; {_FIX}")
    entries: dict[str, dict[str, BaselineEntry]] = {}
    for test_id, metrics in raw.items():
        if not isinstance(metrics, dict):
            raise SpecdecUsageError(f"baseline file {source}: entry {test_id!r} must map metric names to objects")
        entries[test_id] = {
            metric: BaselineEntry.from_json(obj, f"baseline file {source}: {test_id} {metric}")
            for metric, obj in metrics.items()
        }
    return Baselines(hardware_key=hardware_key, entries=entries, path=Path(source))


def load_baselines(path: str | Path, hardware_key: str) -> Baselines:
    """The baselines in `path`; an absent file is an empty set (nothing saved yet)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Baselines(hardware_key=hardware_key, entries={}, path=path)
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecdecUsageError(f"baseline file {path} cannot be read: {exc}") from None
    return parse_baselines(text, hardware_key, str(path))


def _lock_for(path: Path) -> FileLock:
    """The lock beside the baseline file (hidden), where only those who may write the file can
    create it: a fixed name in a shared /tmp could be planted by another user to block saves."""
    return FileLock(str(path.with_name(f".{path.name}.lock")))


def save_baselines(
    path: str | Path,
    hardware_key: str,
    results: Mapping[str, Iterable[MetricValue]],
    *,
    versions: Mapping[str, str] | None = None,
    commit: str | None = None,
    date: str | None = None,
    fingerprints: Mapping[str, str] | None = None,
) -> Baselines:
    """Merge `results` ({test id: metrics}) into the file at `path` and return the merged set.

    Entries of other tests and of other metrics of the same test are kept; a metric measured
    now replaces its old entry, carrying `fingerprints[test id]` (what was measured). The file
    is written to a temporary sibling, fsync'd and moved into place with os.replace, all under
    a file lock.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    versions = collect_versions() if versions is None else versions
    date = date or _now()
    with _lock_for(path):
        current = load_baselines(path, hardware_key)
        merged: dict[str, dict[str, BaselineEntry]] = {t: dict(m) for t, m in current.entries.items()}
        for test_id, metrics in results.items():
            slot = merged.setdefault(test_id, {})
            for metric in metrics:
                slot[metric.name] = BaselineEntry.from_metric(
                    metric, date=date, versions=versions, commit=commit,
                    fingerprint=(fingerprints or {}).get(test_id))
        out = Baselines(hardware_key=hardware_key, entries=merged, path=path)
        _atomic_write(path, json.dumps(out.to_json(), indent=2, sort_keys=True) + "\n")
    return out


def _atomic_write(path: Path, text: str) -> None:
    """Replace `path` with `text` atomically, keeping the file's mode (a new file gets the
    usual mode under the umask, not mkstemp's private 0600)."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:  # make the rename itself durable
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def _umask() -> int:
    mask = os.umask(0)  # the only portable way to read it is to set it
    os.umask(mask)
    return mask


# --------------------------------------------------------------------------------------------
# Tolerances

_METRIC_NAME = re.compile(r"^(\*|[A-Za-z_][A-Za-z0-9_.]*)$")


@dataclass(frozen=True)
class Tolerance:
    """How much worse than the baseline a metric may get: relative (`5%`) or absolute (`0.05`)."""

    metric: str
    amount: float
    relative: bool

    def allowed(self, baseline: float) -> float:
        """The allowance in the metric's own unit."""
        return abs(baseline) * self.amount if self.relative else self.amount

    def __str__(self) -> str:
        return f"{self.amount * 100:g}%" if self.relative else f"{self.amount:g}"

    def to_json(self) -> dict[str, Any]:
        return {"amount": self.amount, "relative": self.relative}

    @classmethod
    def from_json(cls, metric: str, obj: Mapping[str, Any] | None) -> "Tolerance | None":
        return None if obj is None else cls(metric, float(obj["amount"]), bool(obj["relative"]))


def parse_tolerances(
    expr: str,
    *,
    known_metrics: Iterable[str] | None = None,
    source: str = "--specdec-compare-fail",
) -> dict[str, Tolerance]:
    """`output_tok_s:5%,accept_length:2%,ttft_ms:10%` → {metric: Tolerance}.

    `METRIC:N%` is relative to the baseline, `METRIC:N` absolute in the metric's unit, `*:N%`
    applies to every metric not named. With `known_metrics`, a misspelt name is an error rather
    than a gate that silently never fires.
    """
    example = "e.g. output_tok_s:5%,accept_length:2%,ttft_ms:10%"
    if not isinstance(expr, str) or not expr.strip():
        raise SpecdecUsageError(f"{source}: empty tolerance expression; {example}")
    known = set(known_metrics) if known_metrics is not None else None
    out: dict[str, Tolerance] = {}
    for item in expr.split(","):
        item = item.strip()
        if not item:
            raise SpecdecUsageError(f"{source}: empty item in {expr!r} (stray comma?); {example}")
        metric, sep, amount = item.partition(":")
        metric, amount = metric.strip(), amount.strip()
        if not sep or not metric or not amount:
            raise SpecdecUsageError(f"{source}: {item!r} is not METRIC:TOLERANCE; {example}")
        if not _METRIC_NAME.match(metric):
            raise SpecdecUsageError(f"{source}: {metric!r} is not a metric name; {example}")
        if known is not None and metric != "*" and metric not in known:
            raise SpecdecUsageError(
                f"{source}: unknown metric {metric!r}; known metrics: {', '.join(sorted(known))}"
            )
        if metric in out:
            raise SpecdecUsageError(f"{source}: metric {metric!r} is given twice in {expr!r}")
        relative = amount.endswith("%")
        number = amount[:-1].strip() if relative else amount
        try:
            value = float(number)
        except ValueError:
            raise SpecdecUsageError(
                f"{source}: tolerance {amount!r} for {metric!r} is not a number or percentage (like 5% or 0.05)"
            ) from None
        if not math.isfinite(value) or value < 0:
            raise SpecdecUsageError(f"{source}: tolerance {amount!r} for {metric!r} must be a finite number >= 0")
        out[metric] = Tolerance(metric, value / 100.0 if relative else value, relative)
    return out


def tolerance_for(tolerances: Mapping[str, Tolerance], metric: str) -> Tolerance | None:
    return tolerances.get(metric) or tolerances.get("*")


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
    """One metric of one test against its baseline, with the verdict and the report line."""

    test_id: str
    metric: str
    value: float
    direction: Direction
    baseline: float | None
    tolerance: Tolerance | None
    noise: float  # absolute noise allowance used (0 for deterministic metrics)
    verdict: Verdict

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
    def failed(self) -> bool:
        return self.gated and self.verdict == "regression"

    @property
    def noteworthy(self) -> bool:
        """Worth a line in the summary's notes (a change, or a change hidden in noise)."""
        return self.verdict in ("regression", "improvement", "noise")

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "value": self.value, "direction": self.direction,
                "baseline": self.baseline, "noise": self.noise, "verdict": self.verdict,
                "tolerance": None if self.tolerance is None else self.tolerance.to_json(),
                "line": self.line()}  # for people reading the journal; derived, never read back

    @classmethod
    def from_json(cls, test_id: str, obj: Mapping[str, Any]) -> "Comparison":
        return cls(test_id, obj["metric"], float(obj["value"]), obj["direction"],
                   None if obj.get("baseline") is None else float(obj["baseline"]),
                   Tolerance.from_json(obj["metric"], obj.get("tolerance")),
                   float(obj.get("noise", 0.0)), obj["verdict"])

    def line(self) -> str:
        """`output_tok_s 812.4 < baseline 901.0 -5% (-9.8%)`: value, baseline, the allowed
        change in the bad (regression) or good (improvement) direction, the actual change."""
        if self.baseline is None:
            return f"{self.metric} {_fmt(self.value)} (no baseline)"
        op = "<" if self.value < self.baseline else ">" if self.value > self.baseline else "="
        change = self.change
        actual = "n/a" if change is None else f"{change * 100:+.1f}%"
        if self.tolerance is None and self.verdict in ("regression", "improvement"):
            return f"{self.metric} {_fmt(self.value)} {op} baseline {_fmt(self.baseline)} ({actual}, not gated)"
        tol = str(self.tolerance) if self.tolerance is not None else "0%"
        if self.verdict in ("regression", "improvement"):
            worse_sign = "-" if self.direction == "higher" else "+"
            better_sign = "+" if worse_sign == "-" else "-"
            sign = worse_sign if self.verdict == "regression" else better_sign
            return f"{self.metric} {_fmt(self.value)} {op} baseline {_fmt(self.baseline)} {sign}{tol} ({actual})"
        if op == "=":
            op = "=="
        note = f", within noise ±{_fmt(self.noise)}" if self.verdict == "noise" else ""
        return f"{self.metric} {_fmt(self.value)} {op} baseline {_fmt(self.baseline)} ±{tol} ({actual}{note})"


def compare_metric(
    test_id: str,
    metric: MetricValue,
    baseline: BaselineEntry | None,
    tolerance: Tolerance | None,
    *,
    noise_sigmas: float = 2.0,
) -> Comparison:
    """Direction-aware, noise-aware verdict for one metric.

    worse/better means beyond the tolerance (0 when the metric is not gated) AND beyond
    `noise_sigmas` × the combined standard error of both runs. A metric marked deterministic
    on both sides has no noise allowance.
    """
    if baseline is None:
        return Comparison(test_id, metric.name, metric.value, metric.direction, None, tolerance, 0.0, "new")
    if baseline.direction != metric.direction:
        raise SpecdecUsageError(
            f"baseline for {test_id} {metric.name} says {baseline.direction!r} is better but the metric is "
            f"{metric.direction!r}-is-better; re-create the baseline with --specdec-save-baseline"
        )
    if metric.deterministic and baseline.deterministic:
        noise = 0.0
    else:
        noise = noise_sigmas * math.hypot(metric.spread, baseline.spread)
    allowed = tolerance.allowed(baseline.value) if tolerance is not None else 0.0
    delta = metric.value - baseline.value
    worse = -delta if metric.direction == "higher" else delta
    eps = 1e-12 * max(1.0, abs(baseline.value))
    if abs(worse) <= allowed + eps:
        verdict = "unchanged"
    elif abs(worse) <= noise + eps:
        verdict = "noise"
    else:
        verdict = "regression" if worse > 0 else "improvement"
    return Comparison(test_id, metric.name, metric.value, metric.direction, baseline.value, tolerance, noise, verdict)


def compare_all(
    test_id: str,
    metrics: Iterable[MetricValue],
    baselines: Baselines,
    tolerances: Mapping[str, Tolerance],
    *,
    noise_sigmas: float = 2.0,
) -> list[Comparison]:
    return [
        compare_metric(test_id, m, baselines.get(test_id, m.name), tolerance_for(tolerances, m.name),
                       noise_sigmas=noise_sigmas)
        for m in metrics
    ]


def verdict_of(comparisons: Iterable[Comparison]) -> str:
    """A test's verdict: a gated regression wins; then a gated improvement; all-new is "new";
    anything else compared is "ok"; "" when nothing was compared."""
    comparisons = list(comparisons)
    if not comparisons:
        return ""
    if any(c.failed for c in comparisons):
        return "regression"
    if any(c.verdict == "improvement" and c.gated for c in comparisons):
        return "improved"
    if all(c.verdict == "new" for c in comparisons):
        return "new"
    return "ok"


def regression_message(comparisons: Iterable[Comparison]) -> str | None:
    """The failure text for a test (one line per gated regression), or None when it passes."""
    lines = [c.line() for c in comparisons if c.failed]
    return "\n".join(lines) if lines else None


__all__ = [
    "FORMAT",
    "VERSION",
    "BaselineEntry",
    "Baselines",
    "Comparison",
    "Tolerance",
    "baseline_path",
    "collect_versions",
    "compare_all",
    "compare_metric",
    "git_commit",
    "load_baselines",
    "parse_baselines",
    "parse_tolerances",
    "regression_message",
    "save_baselines",
    "tolerance_for",
    "verdict_of",
]
