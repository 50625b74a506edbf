"""The report header: the effective settings a reader needs to trust (or doubt) a run.

One line in every run of the environment; the rest only once a specdec test is collected (pytest
prints those lines after "collected N items"), so projects that never use the plugin see one.
"""

from __future__ import annotations

from dataclasses import dataclass

from .file_kind import link_fault_said
from .options import OPTIONS, OPTIONS_BY_NAME
from .sampling_rule import decodes_greedily
from .state import RunState


def line(state: RunState) -> str:
    return f"specdec: backend {state.backend} ({state.backend.reason}); config {state.config.source}"


def lossless_line(state: RunState) -> str:
    """What the losslessness guard compares with what, per family, or why it does not."""
    from .collection import family_skip_reason

    if not state.lossless.on:
        return "off"
    # a matrix this host skips has no outputs to guard, nor any use for advice to guard them
    here = [family for family in state.config.matrices if family_skip_reason(family, state) is None]
    if not here:
        return f"{state.lossless}: no configured matrix runs on this host, so none is guarded"
    guarded = [family for family in here if state.settings.reference in state.config.matrices[family].methods]
    unguarded = [family for family in here if family not in guarded]
    text = f"{state.lossless}: speculative outputs against {state.settings.reference}'s"
    if guarded:
        text += f" in {', '.join(guarded)}"
    if unguarded:
        text += (f"; not in {', '.join(unguarded)} (no {state.settings.reference} in the matrix: "
                 f"add it to guard them)")
    sampled = [w.name for w in state.config.workloads if not decodes_greedily(w.temperature)]
    if sampled:  # only greedy outputs are kept and compared (recording.Recorder.run)
        text += f"; not for workload {', '.join(sampled)} (temperature above 0: not greedy)"
    return text


def _without_baseline(state: RunState) -> str:
    """What the gate does with a gated figure that has no baseline entry, where it fails one."""
    if not state.settings.require_baseline:
        return ""
    if state.settings.save_baseline:  # this run saves them: nothing is missing afterwards
        return "; a figure without a baseline entry would fail, but this run saves them"
    return "; a figure without a baseline entry fails"


@dataclass(frozen=True)
class BaselineNote:
    """What the baselines line adds after the file's path, and whether that is a warning (written
    even where the header is not), decided where the note is, not read back from its words."""

    text: str = ""
    warns: bool = False


def _baseline_state(state: RunState) -> BaselineNote:
    """Why there is no baseline file, where there is none: a first run's folder is made by its
    first save, but a folder path naming a file can neither be read nor saved into."""
    path = state.baseline_path
    if path.is_file():
        return BaselineNote()
    if path.parent.exists() and not path.parent.is_dir():
        return BaselineNote(f" (none: the baseline folder is a file, so nothing is compared, nor can be saved; "
                            f"point {state.settings.setter('baseline_dir')} at a folder)", warns=True)
    broken = link_fault_said(path)
    if broken:  # a link into a share not mounted reads as a first run, every figure passing as new
        return BaselineNote(f" (none: {broken}, so nothing is compared; mount or repoint the link, "
                            f"or remove it to start a new baseline)", warns=True)
    return BaselineNote(" (none yet)")


def _over(state: RunState, name: str) -> str:
    """The values a setting's winner hides, so a pyproject.toml key a flag overrode is not a mystery."""
    said = [f"{origin} {state.settings.shown(name, origin, value)}"
            for origin, value in state.settings.overridden.get(name, ())]
    if not said:
        return ""
    return "; overrides " + (f"{', '.join(said[:-1])} and {said[-1]}" if len(said) > 1 else said[0])


def _found_by(source: str) -> str:
    """How the inventory was found; "none" is the probes' answer, not a probe's name."""
    if source == "none":
        return "neither NVML nor nvidia-smi found one"
    return f"detected by {source}"


def _file_settings(state: RunState) -> list[str]:
    """The settings of the config file that are no option's but change pass and fail, where set:
    the speculation guard's floor and the known issues (strict xfails)."""
    config = state.config
    out = []
    if config.min_accept_length is not None:
        out.append(f"min_accept_length={config.min_accept_length:g} ({config.source})")
    if config.known_issues:
        own = config.source.split(" [", 1)[0]
        files: dict[str, int] = {}
        for issue in config.known_issues:
            name = issue.where.split(" [", 1)[0]
            shown = config.source if name == own else name  # the baseline folder's file, as the run named it
            files[shown] = files.get(shown, 0) + 1
        out.append(f"known_issues={len(config.known_issues)} ("
                   + ", ".join(f"{count} in {name}" for name, count in files.items()) + ")")
    return out


def details(state: RunState) -> list[str]:
    """The lines that follow collection: what the run measures with, and against what."""
    return [text for text, _ in _details(state)]


def warnings(state: RunState) -> list[str]:
    """The lines of `details` that warn (a resume with no journal, a baseline folder that is a
    file, GPUs the probes could not see, a dry run of another family's matrix): written even
    where the header is not (-q, --no-header), since each changes what the run measures."""
    return [text for text, warns in _details(state) if warns]


def _details(state: RunState) -> list[tuple[str, bool]]:
    """`details`' lines, each with whether it warns."""
    hw = state.hardware
    arch = f"{hw.arch}, {hw.family}" if hw.arch else hw.family
    # a simulated inventory's phrase already says its count, arch and family
    found = ", as the settings ask" if hw.simulated else f" [{arch}, {hw.count} GPU(s), {_found_by(hw.source)}]"
    baselines = _baseline_state(state)
    out = [
        (f"specdec: hardware {hw.describe()}{found}"
         + (f"; {hw.trouble}" if hw.trouble else ""), bool(hw.trouble)),
        (f"specdec: baselines {state.baseline_path}{baselines.text}", baselines.warns),
    ]
    settings = state.settings
    changed = [f"{o.name}={settings.shown(o.name, settings.said(o.name), settings.values[o.name])} "
               f"({settings.said(o.name)}{_over(state, o.name)})"
               for o in OPTIONS if settings.origins[o.name] != "default"]
    changed += _file_settings(state)
    if changed:
        out.append(("specdec: settings " + ", ".join(changed), False))
    if state.gpu_claims is not None:
        out.append((f"specdec: GPU claims {state.gpu_claims} ({state.settings.said('gpu_claims')}): "
                    f"another run on this host waits for the GPUs this one holds", False))
    elif state.settings.server_url and not state.backend.launches:
        out.append((f"specdec: attached server's turn {state.claims_folder} ({state.settings.said('gpu_claims')}): "
                    f"another run on this host that attaches it waits for this one's test on it", False))
    elif hw.simulated and hw.count and state.backend.launches:
        out.append(("specdec: GPU claims none: the inventory is simulated, so no host's GPUs are taken", False))
    out.append((f"specdec: gate {state.tolerances.describe()}"
                + ("; timing figures per second the server had a CPU" if state.backend.launches
                   else "; timing figures as measured (an attached server's CPU wait is not seen)")
                + ("; noisy fails" if state.settings.strict_noise else "; noisy passes")
                + _without_baseline(state), False))
    out.append((f"specdec: lossless {lossless_line(state)}", False))
    if state.settings.resume:
        from .shard_dir import journal_path

        journal = journal_path(state)
        if not journal.is_file():  # a mistyped path or another folder's run: a whole run measured silently
            out.append((f"specdec: resume: no journal at {journal} to resume from, so every test is measured; "
                        f"if the interrupted run journaled elsewhere, give that file with "
                        f"{OPTIONS_BY_NAME['journal'].cli}=PATH", True))
    serving = state.backend.serving(state)
    if serving is not None:  # what the figures are keyed by, and what of it went unchecked
        out.append((f"specdec: attached server serves {serving}", False))
    note = state.backend.listing_note(state) if state.listing else None
    if note is not None:  # in place of what only the server could have told
        out.append((f"specdec: listing: {note}", False))
    counting = state.backend.counting(state)
    if counting is not None:  # the guard and truncate are only as good as this count
        out.append((f"specdec: context guard: prompt tokens counted {counting}", False))
    if state.dry_run and hw.family not in state.config.matrices:
        out.append((f"specdec: dry run: no {hw.family} matrix is configured, so there is no {hw.family} "
                    f"suite to rehearse and the cpu matrix runs; add [tool.specdec.matrix.{hw.family}]", True))
    elif state.dry_run:
        out.append((f"specdec: dry run: the {hw.family} suite runs on the {state.backend} backend; "
                    f"figures are not {hw.family} figures", False))
    return out
