"""End of the session: the summary table, the baseline file, the report folder, CI summaries."""

from __future__ import annotations

from typing import Any

from .session import Results


def rows(results: Results) -> list:
    """One row per test that recorded figures (this run or resumed), and one per test of a
    configuration that failed before it could record anything, so a crash is in the table."""
    from .report import ReportRow

    out = []
    seen = set()
    for nodeid, payload in list(results.payloads.items()) + [
            (p.get("nodeid"), p) for p in results.resumed()]:
        outcome, reason = results.outcomes.get(nodeid, ("passed", None))
        if payload.get("resumed"):
            outcome, reason = "passed", "resumed from the journal"
        comparisons = payload.get("comparisons", [])
        verdict = _verdict(comparisons)
        out.append(ReportRow(
            test_id=payload["test_id"], config=payload.get("config") or payload["test_id"],
            workload=payload.get("workload"), method=payload.get("method"),
            tp=payload.get("tp"), budget=payload.get("budget"),
            metrics={k: float(v["value"]) for k, v in payload.get("metrics", {}).items()},
            verdict=verdict,
            comparisons=tuple(c["line"] for c in comparisons
                              if c["verdict"] in ("regression", "improvement", "noise")),
            outcome=outcome, reason=reason))
        seen.add(nodeid)
    for nodeid, (outcome, reason) in results.outcomes.items():
        if nodeid in seen or outcome not in ("failed", "error", "xfailed", "xpassed"):
            continue
        name = nodeid.split("::")[-1]
        config = name[name.find("[") + 1:-1] if "[" in name else name
        out.append(ReportRow(test_id=name, config=config, outcome=outcome, reason=reason))
    return out


def _verdict(comparisons: list[dict[str, Any]]) -> str:
    if not comparisons:
        return ""
    if any(c["gated"] and c["verdict"] == "regression" for c in comparisons):
        return "regression"
    if any(c["gated"] and c["verdict"] == "improvement" for c in comparisons):
        return "improved"
    if all(c["verdict"] == "new" for c in comparisons):
        return "new"
    return "ok"


def write(terminalreporter, results: Results) -> None:
    table = rows(results)
    if not table:
        return
    from . import report  # matplotlib and friends load only when there is something to report

    state = results.state
    meta = {"hardware": state.hardware.describe(), "hardware_key": state.hardware.key,
            "backend": state.backend, "baseline": str(state.baseline_path)}
    terminalreporter.write_sep("=", "specdec summary")
    for line in report.format_table(table).splitlines():
        terminalreporter.write_line(line)
    if state.settings.save_baseline and results.payloads:
        path = results.save_baseline()
        terminalreporter.write_line(f"specdec: saved {len(results.payloads)} result(s) into {path}")
    if state.settings.report:
        files = report.write_report(state.path(state.settings.report), table, meta=meta)
        written = [files.results_json, files.markdown, files.latex, *files.plots]
        terminalreporter.write_line(f"specdec: report written to {files.results_json.parent} "
                                    f"({len(written)} files)")
        if files.plot_error:
            terminalreporter.write_line(f"specdec: {files.plot_error}")
    report.write_github_summary(table, meta=meta)
