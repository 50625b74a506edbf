"""End of the session: the summary table, the baseline file, the report folder, CI summaries."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import SpecdecUsageError
from .session import Results

if TYPE_CHECKING:
    from .durations import Durations
    from .shard import ShardPlan
    from .shard_dir import Recorder


def rows(results: Results) -> list:
    """One row per test that recorded figures (this run or resumed), and one per test of a
    configuration that failed before it could record anything, so a crash is in the table."""
    from .report import ReportRow, row_from_result

    out = []
    seen = set()
    for result in results.all():
        outcome, reason = results.outcomes.get(result.nodeid, ("passed", None))
        if result.resumed:
            outcome, reason = "passed", "resumed from the journal"
        out.append(row_from_result(result, outcome=outcome, reason=reason))
        seen.add(result.nodeid)
    for nodeid, (outcome, reason) in results.outcomes.items():
        if nodeid in seen or outcome not in ("failed", "error", "xfailed", "xpassed"):
            continue
        name = nodeid.split("::")[-1]
        config = name[name.find("[") + 1:-1] if "[" in name else name
        out.append(ReportRow(test_id=name, config=config, outcome=outcome, reason=reason))
    return out


def write(terminalreporter, results: Results, problems: list[str]) -> None:
    """The table, the baseline, the report and CI summaries; an output that cannot be written
    joins `problems` (those of `finish` are there already), each shown as one line at the end."""
    table = rows(results)
    if table:
        _write(terminalreporter, results, table, problems)
    for problem in problems:
        terminalreporter.write_line(f"specdec: ERROR: {problem}", red=True, bold=True)


def _write(terminalreporter, results: Results, table: list, problems: list[str]) -> None:
    from . import report  # matplotlib and friends load only when there is something to report

    state = results.state
    meta = {"hardware": state.hardware.describe(), "hardware_key": state.hardware.key,
            "backend": state.backend.name, "baseline": str(state.baseline_path)}
    terminalreporter.write_sep("=", "specdec summary")
    for line in report.format_table(table).splitlines():
        terminalreporter.write_line(line)
    for nodeid, changed in results.remeasured.items():
        terminalreporter.write_line(f"specdec: resume: measured {nodeid.split('::')[-1]} again: "
                                    f"what it measures changed since the journal's record "
                                    f"({changed})")
    ungated = sum(1 for row in table if row.verdict == "not gated")
    if ungated:
        terminalreporter.write_line(
            f"specdec: {ungated} test(s) compared with {state.baseline_path.name} but not gated: no "
            f"tolerance applies to any of their figures (set --specdec-compare-fail or "
            f"[tool.specdec.tolerances])")
    saved = results.all()
    if state.settings.save_baseline and saved:
        try:
            path = results.save_baseline()
        except (OSError, SpecdecUsageError) as exc:
            problems.append(f"baseline not saved: {_why(exc, state.baseline_path)}")
        else:
            terminalreporter.write_line(f"specdec: saved {len(saved)} result(s) into {path}")
    if state.settings.report:
        folder = state.path(state.settings.report)
        try:
            files = report.write_report(folder, table, meta=meta)
        except (OSError, SpecdecUsageError) as exc:
            problems.append(f"report not written: {_why(exc, folder)}")
        else:
            written = [files.results_json, files.markdown, files.latex, files.standalone,
                       *files.plots]
            terminalreporter.write_line(f"specdec: report written to {files.results_json.parent} "
                                        f"({len(written)} files)")
            if files.plot_error:
                terminalreporter.write_line(f"specdec: {files.plot_error}")
    try:
        report.write_github_summary(table, meta=meta)
    except OSError as exc:  # the CI runner's variable, not the user's input: the run stands
        terminalreporter.write_line(f"specdec: warning: GITHUB_STEP_SUMMARY not written: "
                                    f"{_why(exc, '$GITHUB_STEP_SUMMARY')}", yellow=True)


def finish(results: Results, durations: Durations | None, plan: ShardPlan | None,
           shard: Recorder | None, exitstatus: int, problems: list[str]) -> int:
    """At session end, before the summary: the durations beside a saved baseline, the shard
    folder's outcomes; returns the exit status (an empty shard's run is a success, not
    pytest's "no tests collected"). A file that cannot be written joins `problems`."""
    import pytest

    state = results.state
    seconds = durations.seconds if durations is not None else {}
    if state.settings.save_baseline and seconds:
        from . import durations as durations_mod
        from .shard import DURATIONS_FILE

        path = state.baseline_path.parent / DURATIONS_FILE
        try:
            durations_mod.save(path, seconds)
        except (OSError, SpecdecUsageError) as exc:
            problems.append(f"durations not saved: {_why(exc, path)}")
    if plan is not None and not plan.mine and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        exitstatus = pytest.ExitCode.OK
    if shard is not None:
        shard.finish(results, seconds, exitstatus)
    return exitstatus


def _why(exc: Exception, path) -> str:
    """One line: the file and an OSError's reason, without errno and traceback (our own errors
    name their file already)."""
    if isinstance(exc, OSError):
        return f"{exc.filename or path}: {exc.strerror or exc}"
    return str(exc)
