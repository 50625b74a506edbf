"""End of the session: the summary table, the baseline file, the report folder, CI summaries."""

from __future__ import annotations

import os
from pathlib import Path

from .session import Results


def write(terminalreporter, results: Results) -> None:
    payloads = results.all()
    if not payloads:
        return
    from . import report  # matplotlib and friends load only when there is something to report

    state = results.state
    terminalreporter.write_sep("=", "specdec summary")
    for line in report.terminal_table(payloads).splitlines():
        terminalreporter.write_line(line)
    if state.settings.save_baseline and results.payloads:
        path = results.save_baseline()
        terminalreporter.write_line(f"specdec: saved {len(results.payloads)} result(s) into {path}")
    if state.settings.report:
        folder = state.path(state.settings.report)
        written = report.write_all(folder, payloads, header=_header(results))
        terminalreporter.write_line(f"specdec: report written to {folder} "
                                    f"({', '.join(p.name for p in written)})")
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as handle:
            handle.write(report.markdown(payloads, header=_header(results)) + "\n")


def _header(results: Results) -> dict:
    state = results.state
    return {"hardware": state.hardware.describe(), "hardware_key": state.hardware.key,
            "backend": state.backend, "baseline": str(state.baseline_path)}
