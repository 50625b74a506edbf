"""The benchmark session: journal, resume, baseline gate and the controller's collection of results.

Runs in two roles. Where a test runs (the only process, or an xdist worker), `finish_test`
journals its figures, attaches them to the report and gates them against the baseline. In the
controller (the only process, or the xdist master), `Results` gathers every test's figures from
the reports, prints a progress line per configuration, and at the end hands them to the report
writers and, with `--specdec-save-baseline`, merges them into the baseline file.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from filelock import FileLock

from . import baselines as baselines_mod
from .baselines import Baselines, Comparison
from .journal import Journal
from .recording import attach_to_report, existing_recorder, result_of_report
from .result import Result
from .state import RunState


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def journal_for(state: RunState) -> Journal:
    return Journal(state.path(state.settings.journal))


def workload_key(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    workload = callspec.params.get("specdec_workload") if callspec else None
    return getattr(workload, "name", None) or "-"


def start_journal(state: RunState, run: str) -> None:
    """Before this run's first record: a run without --specdec-resume starts a new journal.

    Called where tests run (every xdist worker), so the journal's owner is recorded in a marker
    file beside it, under the journal's lock: the first process of a run rotates the old journal
    (kept beside it, with a time stamp); the others of the same run find the marker and append.
    Runs that measure nothing never touch the journal.
    """
    journal = journal_for(state)
    marker = journal.path.with_name(journal.path.name + ".run")
    journal.path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(journal.path) + ".lock"):
        owner = marker.read_text().strip() if marker.exists() else None
        if owner == run:
            return
        if not state.settings.resume and journal.path.exists():
            stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
            journal.path.rename(journal.path.with_name(
                f"{journal.path.stem}.{stamp}{journal.path.suffix}"))
        marker.write_text(run + "\n")


def skip_done(items: list[pytest.Item], state: RunState) -> None:
    """--specdec-resume: configurations the journal records as done are not measured again."""
    if not state.settings.resume:
        return
    journal = journal_for(state)
    done = journal.done_keys()
    for item in items:
        if (item.nodeid, workload_key(item)) in done:
            item.add_marker(pytest.mark.skip(
                reason=f"already measured (resumed from {journal.path})"))


@dataclass
class Gate:
    """The baseline comparison, loaded once per process."""

    state: RunState
    _baselines: Baselines | None = None
    _tolerances: dict | None = None

    def tolerances(self) -> dict:
        if self._tolerances is None:
            expr = self.state.settings.compare_fail
            self._tolerances = baselines_mod.parse_tolerances(expr) if expr else {}
        return self._tolerances

    def baselines(self) -> Baselines:
        if self._baselines is None:
            path = self.state.baseline_path
            self._baselines = baselines_mod.load_baselines(path, self.state.hardware.key) \
                if path.is_file() else Baselines(self.state.hardware.key, {}, path)
        return self._baselines

    def compare(self, result: Result) -> list[Comparison]:
        return baselines_mod.compare_all(result.test_id, result.metrics, self.baselines(),
                                         self.tolerances())


def finish_test(item: pytest.Item, state: RunState, gate: Gate, run: str) -> None:
    """After a test's call: journal, report and gate what it recorded (raises on regression)."""
    recorder = existing_recorder(item)
    if recorder is None or not recorder.metrics or recorder.finished:
        return
    recorder.finished = True
    result = recorder.to_result()
    if state.settings.compare_fail or state.baseline_path.is_file():
        result = result.compared(tuple(gate.compare(result)))
    start_journal(state, run)
    journal_for(state).append(item.nodeid, workload_key(item), result.to_json())
    attach_to_report(item, result)
    message = baselines_mod.regression_message(result.comparisons)
    if message:
        pytest.fail(f"regression against {state.baseline_path.name}:\n{message}", pytrace=False)


@dataclass
class Results:
    """The controller's view: every finished test's result, in completion order."""

    state: RunState
    results: dict[str, Result] = field(default_factory=dict)
    outcomes: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    total: int = 0

    def add_report(self, report: pytest.TestReport) -> Result | None:
        """Note the test's outcome; return its result when this report carries one."""
        self._note_outcome(report)
        if report.when != "call":
            return None
        result = result_of_report(report)
        if result is not None:
            self.results[report.nodeid] = result
        return result

    def _note_outcome(self, report: pytest.TestReport) -> None:
        if "specdec" not in getattr(report, "keywords", {}):
            return  # not a benchmark configuration: pytest's own summary covers it
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed"
            self.outcomes[report.nodeid] = (outcome, str(report.wasxfail))
        elif report.failed:
            outcome = "failed" if report.when == "call" else "error"
            self.outcomes[report.nodeid] = (outcome, _first_line(report))
        elif report.skipped and report.nodeid not in self.outcomes:
            self.outcomes[report.nodeid] = ("skipped", _first_line(report))
        elif report.when == "call" and report.passed:
            self.outcomes.setdefault(report.nodeid, ("passed", None))

    def resumed(self) -> list[Result]:
        """Results measured by an earlier, interrupted run of this journal (--specdec-resume)."""
        out = []
        if not self.state.settings.resume:
            return out
        for record in journal_for(self.state).latest().values():
            if record.status == "done" and record.config_id not in self.results:
                out.append(Result.from_json(record.data, resumed=True))
        return out

    def all(self) -> list[Result]:
        return list(self.results.values()) + self.resumed()

    def save_baseline(self) -> Path:
        """Merge this run's figures into the baseline file (atomic, locked; others are kept)."""
        figures = {r.test_id: r.metrics for r in self.results.values()}
        path = self.state.baseline_path
        baselines_mod.save_baselines(
            path, self.state.hardware.key, figures,
            versions=baselines_mod.collect_versions(),
            commit=baselines_mod.git_commit(self.state.config.root))
        return path


def _first_line(report: pytest.TestReport) -> str:
    """The reason a test failed or skipped, one line (our failures start with the cause)."""
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "")
    text = text.removeprefix("Failed: ")
    return text.strip().splitlines()[0] if text.strip() else ""


def progress_line(result: Result, done: int, total: int) -> str:
    metrics = result.values()

    def fmt(name: str, unit: str) -> str:
        if name not in metrics:
            return ""
        return f" {name}={metrics[name]:.4g}{unit}"

    verdicts = [c.line() for c in result.comparisons if c.verdict in ("regression", "improvement")]
    tail = f" | {'; '.join(verdicts)}" if verdicts else ""
    return (f"specdec [{done}/{total}] {result.config} {result.workload or ''}:"
            f"{fmt('output_tok_s', ' tok/s')}{fmt('accept_length', '')}{fmt('ttft_ms', 'ms')}"
            f"{fmt('tpot_ms', 'ms')}{fmt('verify_us', 'us')}{tail}")
