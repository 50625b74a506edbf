"""The report header: the effective settings a reader needs to trust (or doubt) a run.

One line in every run of the environment; the rest only once a specdec test is collected (pytest
prints those lines after "collected N items"), so projects that never use the plugin see one.
"""

from __future__ import annotations

from .options import OPTIONS
from .state import RunState


def line(state: RunState) -> str:
    return f"specdec: backend {state.backend} ({state.backend.reason}); config {state.config.source}"


def details(state: RunState) -> list[str]:
    hw = state.hardware
    arch = f"{hw.arch}, {hw.family}" if hw.arch else hw.family
    out = [
        f"specdec: hardware {hw.describe()} [{arch}, {hw.count} GPU(s), detected by {hw.source}]",
        f"specdec: baselines {state.baseline_path}"
        + ("" if state.baseline_path.is_file() else " (none yet)"),
    ]
    changed = [f"{o.name}={state.settings.values[o.name]} ({state.settings.origins[o.name]})"
               for o in OPTIONS if state.settings.origins[o.name] != "default"]
    if changed:
        out.append("specdec: settings " + ", ".join(changed))
    if state.dry_run:
        out.append(f"specdec: dry run: the {hw.family} suite runs on the {state.backend} backend; "
                   f"figures are not {hw.family} figures")
    return out
