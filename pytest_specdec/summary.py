"""End of the session: the summary table, the baseline file, the report folder, CI summaries.

Apart from session.py, which runs with every test (in each xdist worker too), because this runs
once, in the controller, when the session finishes: the plugin imports it only then, so a run's
per-test path loads none of it. The merge command imports its wording (`workload_in`,
`unrecorded_line`, `small_sample_gate`) so that merged shards end with the lines a run ends with."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from .errors import SpecdecUsageError
from .options import written_at
from .sampling_rule import decodes_greedily
from .session import Results, lock_bound

if TYPE_CHECKING:
    from .baselines import Baselines
    from .durations import Durations
    from .ending_writes import EndingWrites
    from .result import Result
    from .run_limits import RunLimits
    from .shard import ShardPlan
    from .shard_dir import Recorder


def rows(results: Results) -> list:
    """One row per test that recorded figures (this run or resumed), and one per test of a
    configuration that failed before it could record anything, so a crash is in the table, or
    was skipped on a host that runs its family (a TP8 configuration on a 4-GPU host), so the
    report says why it has no figures, as a merge of shards does."""
    from .collection import configuration_in_nodeid, matrix_cases
    from .report import RESUMED, ReportRow, row_from_result

    out = []
    seen = set()
    measured = results.all()
    late = results.late_verdicts()
    for result in measured:
        outcome, reason = results.outcomes.get(result.nodeid, ("passed", None))
        if result.resumed:
            outcome, reason = "passed", RESUMED
        if result.nodeid in late:  # it ended before the reference's test could compare it
            outcome, reason = late[result.nodeid]
        out.append(row_from_result(result, outcome=outcome, reason=reason))
        seen.add(result.nodeid)
    unrecorded = [(nodeid, outcome, reason) for nodeid, (outcome, reason) in results.outcomes.items()
                  if nodeid not in seen and outcome in ("failed", "error", "skipped", "xfailed", "xpassed")]
    if not unrecorded:
        return out
    cases = {case.param_id: case for case in matrix_cases(results.state)}
    # another family's tests belong to other hosts (a shard deselects them): not this report's
    unrecorded = [(nodeid, outcome, reason) for nodeid, outcome, reason in unrecorded
                  if outcome != "skipped" or _runs_here(configuration_in_nodeid(nodeid, cases), cases, results)]
    workloads = escaped_workloads(results.state.workloads)
    for nodeid, outcome, reason in unrecorded:
        name = nodeid.split("::")[-1]
        params = name[name.find("[") + 1:-1] if "[" in name else name
        config = configuration_in_nodeid(nodeid, cases)
        case = cases.get(config or "")
        workload = workload_in(params.replace(config, "", 1), workloads) if config else None
        out.append(ReportRow(test_id=name, config=config or params, workload=workload,
                             family=case.family if case else None, method=case.method if case else None,
                             tp=case.tp if case else None, budget=case.budget if case else None,
                             outcome=outcome, reason=reason))
    return out


def escaped_workloads(names: Iterable[str]) -> dict[str, str]:
    """{id as pytest escapes it: name} of configured workloads: pytest escapes non-ASCII in ids
    (`ü` is `\\xfc`), so a name is found in an id as escaped and reported as written."""
    return {name.encode("unicode_escape").decode("ascii"): name for name in names}


def workload_in(params: str, workloads: dict[str, str]) -> str | None:
    """The configured workload (`workloads`: by its id as pytest escapes it) that is one
    `-`-separated run of a test's parameters past its configuration's id (`chat` of `-chat-slow`),
    else None: the test's own parameters (`nan`, `slow`) are no workload. The longest match wins.
    Names as written are matched too (pytest's ini option
    disable_test_id_escaping_and_forfeit_all_rights_to_community_support leaves `ü` in ids), in
    one longest-first pass with the escaped ids, so `chat` never wins over `chat-ü` in either."""
    runs = f"-{params.strip('-')}-"
    keys = list(workloads.items()) + [(name, name) for name in workloads.values()]
    for key, name in sorted(keys, key=lambda pair: len(pair[0]), reverse=True):  # stable: escaped first
        if f"-{key}-" in runs:
            return name
    return None


def _runs_here(config: str | None, cases: dict, results: Results) -> bool:
    """Whether `config` is a configuration of a family this host runs."""
    from .collection import family_skip_reason

    case = cases.get(config or "")
    return case is not None and family_skip_reason(case.family, results.state) is None


def write(terminalreporter, results: Results, notes: list[str], problems: list[str]) -> None:
    """The table, then what :func:`finish` wrote (`notes`) and could not write (`problems`),
    each one line at the end."""
    table = rows(results)
    if table:
        _write_table(terminalreporter, results, table)
    for note in notes:
        terminalreporter.write_line(f"specdec: {note}")
    for problem in problems:
        terminalreporter.write_line(f"specdec: ERROR: {problem}", red=True, bold=True)


def _write_table(terminalreporter, results: Results, table: list) -> None:
    from . import report
    from .table_fold import named

    state = results.state
    terminalreporter.write_sep("=", "specdec summary")
    for line in report.format_table(table, limit=state.settings.summary_rows,
                                    every_row=_every_row(results)).splitlines():
        terminalreporter.write_line(line)
    # one line per reason: a changed setting measures every test again, and a line each buried the rest
    remeasured: dict[str, list[str]] = {}
    for nodeid, why in results.remeasured.items():
        remeasured.setdefault(why, []).append(nodeid.split('::')[-1])
    for why, names in remeasured.items():
        terminalreporter.write_line(f"specdec: resume: measured {named(names)} again: {why}")
    uncompared = _uncompared_gate(results)
    if uncompared:
        terminalreporter.write_line(f"specdec: gate: {uncompared}", yellow=True)
    small = small_sample_gate(results.all(), state.settings.setter("save_baseline"), results.saved_runs,
                              where=full_list(results))
    if small:
        terminalreporter.write_line(f"specdec: {small}", yellow=True)
    ungated = [row for row in table if row.verdict == "not gated"]
    if ungated:
        terminalreporter.write_line(
            f"specdec: {len(ungated)} test(s) compared with {state.baseline_path.name} but not gated: "
            f"no tolerance applies to any of their figures ({_ungated_advice(state, ungated)})")


def _every_row(results: Results) -> str:
    """Where a folded summary table's rows all are: the report this run wrote, else the setting
    that shows them all in the terminal."""
    from .options import OPTIONS_BY_NAME

    if not results.reported:
        return f"{OPTIONS_BY_NAME['summary_rows'].cli}=0 shows every row"
    return f"every row is in {full_list(results)}"


def full_list(results: Results) -> str:
    """The report files this run wrote (`report.md and results.json`), where a line that names only
    the first few of its tests (`table_fold.named`) says the rest are; empty where it wrote none."""
    from .relpaths import relative_path

    return " and ".join(relative_path(path, results.state.config.root) for path in results.reported)


def _ungated_advice(state, ungated: Sequence) -> str:
    """Why the tests of `ungated` (table rows) gate nothing, and the fix where the user did not
    choose it: figures turned off on purpose (`*:off`, `METRIC:off`) are said to be off, since
    advice to gate them would contradict what the user just chose."""
    tolerances = state.tolerances
    figures = sorted({metric for row in ungated for metric in row.verdicts})
    off = [tolerances.off_by(metric) for metric in figures]
    if figures and all(off):
        by_origin: dict[str, list[str]] = {}
        for key, origin in off:
            if key not in by_origin.setdefault(origin, []):
                by_origin[origin].append(key)
        return "gate off: " + "; ".join(f"{', '.join(keys)} ({origin})" for origin, keys in by_origin.items())
    # the figures turned off stay off: the advice is for those no tolerance names
    unnamed = [metric for metric, why in zip(figures, off) if not why]
    only = f" for {', '.join(unnamed)}" if any(off) else ""
    # with a gate in force, "set --specdec-compare-fail" would read as if none were
    if tolerances.any:
        return (f"the gate in force does not name {', '.join(unnamed)}; add "
                f"{'it' if len(unnamed) == 1 else 'them'}, or * for all" if only else
                "the gate in force names none of their figures; add theirs, or * for all")
    if all(r.origin != "no tolerance set" for r in tolerances.rules()) and not only:
        return "the gate in force turns every figure off"
    return f"set {state.settings.setter('compare_fail')} or [tool.specdec.tolerances]{only}"


def _uncompared_gate(results: Results) -> str | None:
    """What a gate that compared nothing for some figures did not gate, and the likely why (a
    misspelt name in the baseline file, with the entries it likely meant; a baseline folder that
    is not there, and where it was set), or None."""
    from . import unmatched as unmatched_mod
    from .table_fold import named

    state = results.state
    unmatched = _uncompared(results)  # none where being saved now
    if not unmatched:
        return None
    absent = unmatched_mod.missing_file(state.baseline_path, state.settings)
    if absent is not None:
        return (f"no baseline file at {state.baseline_path}: {absent}, so none of the "
                f"{len(unmatched)} gated figure(s) was compared; save one with "
                f"{state.settings.setter('save_baseline')} (or point {state.settings.setter('baseline_dir')} "
                f"at yours)")
    baselines = _stored_baselines(results)
    # a test's figures that lack an entry for one reason are named together: a renamed workload
    # leaves every figure of every test without one, and one line each buried the names meant
    grouped: dict[tuple[str, str], list[str]] = {}
    for result, metric, why, near in _entries_meant(results, baselines, unmatched):
        # a near name only: "no entry" for every figure of a first run says nothing more
        note = f" ({why}{unmatched_mod.did_you_mean(near)})" if near else ""
        grouped.setdefault((result.test_id, note), []).append(metric)
    listed = [f"{test_id} {', '.join(metrics)}{note}" for (test_id, note), metrics in grouped.items()]
    return (f"{len(unmatched)} gated figure(s) have no entry in {state.baseline_path.name}, so nothing "
            f"gated them: {named(listed, full_list(results), sep='; ')}; save them with "
            f"{state.settings.setter('save_baseline')}, "
            f"or fix a misspelt name in the file")


def _stored_baselines(results: Results) -> Baselines | None:
    """The baseline file as the run ends: the one it saved, else read again (it was read and checked
    at configure time, but another run's save since may have broken it); None where there is none
    or it cannot be read, which only costs a note its names."""
    from .baselines import load_baselines

    state = results.state
    if results.saved_baseline is not None:
        return results.saved_baseline
    if not state.baseline_path.is_file():
        return None
    try:
        return load_baselines(state.baseline_path, state.hardware.key, state.settings.setter)
    except (OSError, SpecdecUsageError):
        return None


def _uncompared(results: Results) -> list[tuple[Result, str]]:
    """(result, figure) of the gated figures that found no entry to compare with (`new`); none in
    a run that saves, which writes them."""
    if results.state.settings.save_baseline:
        return []
    return [(r, c.metric) for r in results.all() for c in r.comparisons if c.gated and c.verdict == "new"]


def _entries_meant(results: Results, baselines, unmatched: list[tuple[Result, str]]):
    """(result, figure, why it has no entry, the entries it likely meant) of each of `unmatched`."""
    from . import unmatched as unmatched_mod

    claimed = {r.test_id for r in results.all()} | results.collected
    for result, metric in unmatched:
        recorded = {m.name: m.direction for m in result.metrics}
        why, near = unmatched_mod.missing_entry(baselines, result.test_id, metric, claimed,
                                                recorded, recorded.get(metric)) \
            if baselines is not None else ("", [])
        yield result, metric, why, near


def small_sample_gate(results: Iterable[Result], save: str,
                      saved: Callable[[Result, str], int | None] | None = None, where: str = "") -> str | None:
    """The gated figures decided from too few samples for the gate's nominal false reds
    (`Comparison.small_sample`), with the fewest, the cost and the fix, in one line; None when
    there are none. A merge of shards says it too; `save` is the option that saves a baseline.
    `saved` (result, figure) -> how many runs the figure's entry pools in the baseline file this
    run saved (None: no entry there); None when this run saved none. A save pools one more run
    into an entry of a single save: advice to save again would read as if this one had not.
    `where`: the report that lists every figure, which the line says where it names only a few."""
    from .baselines import POOLED_RUNS
    from .gate import ALPHA, FEW_SAMPLES
    from .table_fold import named

    small = [(r, c) for r in results for c in r.comparisons if c.small_sample]
    if not small:
        return None
    few = [(r, c) for r, c in small if c.sampled < FEW_SAMPLES]
    once = [(r, c) for r, c in small if c.baseline_runs == 1]
    found, fixes, pooled_note = [], [], None
    if few:
        fewest = min(c.sampled for _, c in few)
        found.append(f"{len(few)} from as few as {fewest} sample{'s' if fewest > 1 else ''}")
        # more prompts help only where the requests were few; TPOT's samples can be few of many
        short = [(r, c) for r, c in few if c.requests < FEW_SAMPLES]
        workloads = sorted({r.workload for r, _ in short if r.workload})
        if short:
            fixes.append(f"raise num_prompts to {FEW_SAMPLES} or more"
                         + (f" (workload {', '.join(workloads)})" if workloads else ""))
        sparse = [f"{c.metric}{f' of workload {r.workload}' if r.workload else ''} ({c.sample_count()})"
                  for r, c in few if c.requests >= FEW_SAMPLES]
        if sparse:
            fixes.append(f"see why {named(sparse, where)} had samples from so few of the requests (TPOT has "
                         f"none for an output of one token or one that arrived whole at once, which "
                         f"the run warned of)")
    if once:
        found.append(f"{len(once)} against a baseline entry of a single save")
        # an entry this run's save left at one save: a failed test's, or one of a changed setup
        pooled = [n for n in (saved(r, c.metric) if saved else None for r, c in once) if n and n > 1]
        rest = len(once) - len(pooled)
        if pooled:
            runs = f"{min(pooled)}" if min(pooled) == max(pooled) else f"{min(pooled)}-{max(pooled)}"
            whose = ("its entry" if len(once) == 1 else "their entries" if not rest
                     else f"{len(pooled)} of their entries")
            pooled_note = f"the save this run made pools {runs} of {POOLED_RUNS} runs into {whose}"
        if rest:
            fixes.append(f"save the baseline again with {save} to pool up to {POOLED_RUNS} runs"
                         + (f" for the other {rest}" if pooled else ""))
    advice = "; ".join(part for part in (" and ".join(fixes), pooled_note) if part)
    return (f"gate: {len(small)} figure(s) decided from small samples ({', '.join(found)}) go red with "
            f"nothing changed more often than the gate's {ALPHA * 100:g} % (5-10 % and more: the "
            f"README's gate section); {advice}")


def named_in_gate(tolerances) -> list:
    """The gate's rules for the figures a tolerance names (`e2e_ms:5%`), not only `*`: a name
    is a claim that some test records the figure; `*` claims nothing of any one figure."""
    named = []
    for rule in tolerances.rules():
        if rule.tolerance is None:
            continue
        # the layer that decided it: the highest naming it or giving `*`, the name first
        table = next(table for origin, table in tolerances.layers if rule.metric in table or "*" in table)
        if rule.metric in table:
            named.append(rule)
    return named


def _all_recorded(results: Results, durations: Durations | None) -> bool:
    """Whether every recording test this run collected (deselected ones too, in every xdist
    worker) recorded figures, here or resumed: only then is a figure none of them recorded one
    that no test records. A run narrowed by -k, -m, --deselect, --lf or a shard, stopped by -x or
    Ctrl-C, or whose tests skipped or failed, left out tests that may."""
    if durations is None or durations.collection_unknown or results.unheard_workers:
        return False  # --lf leaves whole files uncollected; a silent worker's tests are unknown
    recorded = _finished_recording(results)
    return bool(recorded) and results.collected <= recorded


def _finished_recording(results: Results) -> set[str]:
    """The test ids that recorded figures and did not fail, here or resumed: a test that failed
    may have stopped before the figure it records."""
    return {r.test_id for r in results.all()
            if r.resumed or results.outcomes.get(r.nodeid, ("passed", None))[0] not in UNFINISHED}


def shard_all_recorded(results: Results, durations: Durations | None, plan: ShardPlan) -> bool:
    """`_all_recorded` of a shard's own part: every recording test it collected recorded but those
    its split left to other shards (or to other host classes), which the merge of every shard
    answers for. A shard given no configuration has nothing to record (complete); one narrowed
    by -k, --lf, -x or Ctrl-C, or whose tests failed, is not."""
    from .collection import configuration_in_nodeid, matrix_cases

    if durations is not None and durations.collection_unknown or results.unheard_workers:
        return False
    mine = {case.param_id for case in plan.mine}
    every = [case.param_id for case in matrix_cases(results.state)]

    def own(name: str) -> bool:  # the split's rule (`shard.split_items`), on the names xdist hands back
        config = configuration_in_nodeid(name, every)
        return plan.shard.index == 1 if config is None else config in mine

    owned = {name for name in results.collected if own(name)}
    if durations is None:  # no test of ours reported: complete only where there was none to run
        return not owned and not plan.mine
    return owned <= _finished_recording(results)


#: How a test ends that may have stopped before recording all its figures.
UNFINISHED = ("failed", "error", "xfailed")


def _unset_by(rule) -> str:
    """Where a rule's tolerance is removed: the layer it came from (an `-o` key named as given)."""
    if rule.origin in ("command line", "ini") or rule.origin.startswith("-o "):
        return written_at("compare_fail", rule.origin)
    return f"{rule.origin}'s tolerances"  # the config file's compare_fail and its tolerances table


def unrecorded_gate(results: Results, durations: Durations | None) -> str | None:
    """The figures a tolerance names that no test of this run recorded, so the header's
    `e2e_ms +5%` compared nothing and the run reads as gated on them; one line, or None. Said
    only of a run all of whose recording tests recorded (`_all_recorded`): a partial run's
    left-out tests may be the ones that record it, and it must not cry wolf."""
    if not _all_recorded(results, durations):
        return None
    named = named_in_gate(results.state.tolerances)
    recorded = {m.name for r in results.all() for m in r.metrics}
    missing = [rule for rule in named if rule.metric not in recorded]
    if not missing:
        return None
    return unrecorded_line([rule.describe() for rule in missing], {_unset_by(rule) for rule in missing},
                           "the gate names were recorded by no test of this run")


def unrecorded_line(rules: Sequence[str], unset_by: Iterable[str], what: str) -> str:
    """The line of `unrecorded_gate`, which a merge of shards says too (`merge.unrecorded_gate`)."""
    return (f"gate: {len(rules)} figure(s) {what}, so nothing gated them: {', '.join(rules)}; record "
            f"each with specdec_record.metric(NAME, value) in the test meant to measure it, or drop it "
            f"from {' and '.join(sorted(set(unset_by)))}")


def _left_as_it_was(state, option: str) -> str:
    """What an interrupted save or report leaves, and the run that writes it."""
    return (f"no file there is half-written; the journal keeps this run's figures: a run with "
            f"--specdec-resume and {state.settings.setter(option)}{same_shard(state)} writes it without "
            f"measuring again the tests that passed")


def same_shard(state) -> str:
    """A shard journals into its own folder, which only a run of the same shard resumes from."""
    from .shard_dir import folder

    return (f" (and this run's {state.settings.setter('shard')} and {state.settings.setter('report')})"
            if folder(state) is not None else "")


def _write_outputs(results: Results, table: list, notes: list[str], problems: list[str],
                   announce: Callable[[str], None] | None = None,
                   progress: Callable[[str], None] | None = None, writes: EndingWrites | None = None) -> bool:
    """The baseline file, the report folder and the CI summary, at session end whether or not a
    terminal summary follows (another plugin's summary may raise, or the terminal be off);
    `announce` prints a long wait for the baseline file's lock, `progress` how far a long
    drawing of plots is; `writes` hears each one done. True when Ctrl-C interrupted them (the
    rest is not written, and the problem line names it)."""
    from . import plots, report  # matplotlib and friends load only when there is something to report
    from .relpaths import relative_path

    state = results.state
    meta = {"hardware": state.hardware.describe(), "hardware_key": state.hardware.key,
            **({"gpu_details": details} if (details := state.hardware.gpu_details()) else {}),
            "backend": state.backend.name,
            "baseline": relative_path(state.baseline_path, state.config.root)}
    saved, failed, lossy, shared = results.baseline_candidates()

    def left_out(are: str) -> str:
        from .baselines import left_out as said

        return said([r.test_id for r in failed], [r.test_id for r in lossy], are, [r.test_id for r in shared])

    if state.settings.save_baseline and saved:
        try:
            path = results.save_baseline(saved, announce)
        except KeyboardInterrupt:  # a Ctrl-C as the run ends: say what is missing, not a traceback
            if state.settings.report:  # not written either: the interrupt stops the ending
                from .ending_writes import unwritten

                problems.append(unwritten(state, ["save_baseline", "report"],
                                          f"interrupted while saving the baseline into {state.baseline_path}"))
            else:
                problems.append(f"baseline not saved: interrupted while saving it into {state.baseline_path}; "
                                f"{_left_as_it_was(state, 'save_baseline')}")
            return True
        except OSError as exc:  # a full disk, a read-only folder: the fix, and the figures kept
            problems.append(f"baseline not saved: {_refused(exc, state.baseline_path, state, 'baseline_dir')}; "
                            f"{_left_as_it_was(state, 'save_baseline')}")
        except SpecdecUsageError as exc:
            problems.append(f"baseline not saved: {_why(exc, state.baseline_path)}{_kept(exc, state)}")
        else:
            skipped = f"; left out {left_out('')}" if failed or lossy or shared else ""
            notes.append(f"saved {len(saved)} result(s) into {path}{skipped}")
    elif state.settings.save_baseline and (failed or lossy or shared):
        notes.append(f"nothing saved into {state.baseline_path}: its {left_out(' are')}")
    if writes is not None:
        writes.done("save_baseline")
    if state.settings.report:
        folder = state.path(state.settings.report)
        try:
            files = report.write_report(folder, table, meta=meta, option=state.settings.setter("report"),
                                        plots=not state.settings.no_plots, progress=plots.told(folder, progress))
        except KeyboardInterrupt:
            problems.append(f"report not written: interrupted while writing it into {folder}; "
                            f"{_left_as_it_was(state, 'report')}")
            return True
        except OSError as exc:
            problems.append(f"report not written: {_refused(exc, folder, state, 'report')}; "
                            f"{_left_as_it_was(state, 'report')}")
        except SpecdecUsageError as exc:
            problems.append(f"report not written: {_why(exc, folder)}")
        else:
            written = [files.results_json, files.markdown, files.latex, files.standalone,
                       *files.plots]
            notes.append(f"report written to {files.results_json.parent} ({len(written)} files)")
            results.reported = (files.markdown, files.results_json)
            if files.plot_error:
                notes.append(files.plot_error)
    if writes is not None:
        writes.done("report")
    try:
        report.write_github_summary(table, meta=meta)
    except OSError as exc:  # the CI runner's variable, not the user's input: the run stands
        notes.append(f"warning: GITHUB_STEP_SUMMARY not written: {_why(exc, '$GITHUB_STEP_SUMMARY')}")
    return False


def finish(results: Results, durations: Durations | None, plan: ShardPlan | None,
           shard: Recorder | None, exitstatus: int, notes: list[str], problems: list[str],
           announce: Callable[[str], None] | None = None,
           progress: Callable[[str], None] | None = None, limits: RunLimits | None = None,
           writes: EndingWrites | None = None) -> int:
    """At session end, before the summary: the durations beside a saved baseline, the baseline,
    the report, the shard folder's outcomes; returns the exit status (an empty shard's run is a
    success, not pytest's "no tests collected"). What was written joins `notes`, a file that
    cannot be written `problems`; `announce` prints a long wait for a baseline folder file's lock,
    `progress` how far a long drawing of the report's plots is; `limits` what stopped the run
    early or left tests out (`run_limits.py`); `writes` hears each write done, for the line of a
    second Ctrl-C that stops the ending (`ending_writes.py`)."""
    import pytest

    state = results.state
    seconds, partial = (durations.complete(results.collected, results.configured) if durations is not None
                        else ({}, []))
    if state.settings.save_baseline and partial:
        from .durations import not_saved

        notes.append(not_saved(partial))
    if state.settings.save_baseline and seconds:
        from . import durations as durations_mod
        from .shard import DURATIONS_FILE

        path = state.baseline_path.parent / DURATIONS_FILE
        try:
            durations_mod.save(path, seconds, f"the next run with {state.settings.setter('save_baseline')} "
                                              f"writes it again", lock=lock_bound(state, announce))
        except (OSError, SpecdecUsageError) as exc:
            why = _refused(exc, path, state, "baseline_dir") if isinstance(exc, OSError) else _why(exc, path)
            problems.append(f"durations not saved: {why}")
    if writes is not None:
        writes.done("durations")
    table = rows(results)
    if table:
        if _write_outputs(results, table, notes, problems, announce, progress, writes):
            exitstatus = pytest.ExitCode.INTERRUPTED
    elif state.settings.report:  # an old report there would read as this run's
        notes.append(nothing_reported(state))
    if writes is not None:  # none to write where no test recorded
        writes.done("save_baseline")
        writes.done("report")
    from .table_fold import named

    where = full_list(results)  # the report just written, where a line naming a few says the rest are
    if results.reruns:
        notes.append(rerun_note(results.reruns))
    shared = results.shared() if results.all() else []
    if shared:  # passed under --specdec-allow-shared: the table marks each, this counts them
        from .sharing import shared_note

        notes.append(shared_note(_names(shared), state.settings.setter("allow_shared"), where))
    from .run_limits import INTERRUPT, RunLimits

    limits = limits or RunLimits()
    if exitstatus == pytest.ExitCode.INTERRUPTED and limits.stopped_by is None:  # Ctrl-C as the outputs were written
        limits = RunLimits(INTERRUPT, limits.left_out_by + (INTERRUPT,), limits.by_node_id)
    if limits.stopped_by is not None:
        unfinished = interrupted_note(results, limits.stopped_by)
        if unfinished:
            notes.append(unfinished)
    unrecorded = unrecorded_gate(results, durations)
    if unrecorded:
        notes.append(unrecorded)
    leftover = leftover_entries(results, durations, plan, limits)
    if leftover:
        notes.append(leftover)
    # a merge checks a shard's
    unchecked = None if plan is not None else unchecked_lossless(results, limits.left_out_by)
    if unchecked:
        notes.append(unchecked)
    sampled = sampled_lossless(results)
    if sampled:
        notes.append(sampled)
    figures_only = figures_only_lossless(results)
    if figures_only:
        notes.append(figures_only)
    by_text = uncounted_lossless(results)
    if by_text:
        notes.append(by_text)
    unseen = blind_lossless(results)
    if unseen:
        notes.append(unseen)
    fixed = [nodeid.split("::")[-1] for nodeid, (outcome, _) in results.settled_known_issues().items()
             if outcome == "failed"]
    if fixed:  # a known issue that passes fails the run, as pytest's XPASS(strict) would have
        notes.append(f"known issue(s) whose outputs match their reference's, compared after their test "
                     f"ran: {named(fixed, where)} ([XPASS(strict)]); remove the known issue if it is fixed")
        if exitstatus == pytest.ExitCode.OK:
            exitstatus = pytest.ExitCode.TESTS_FAILED
    lossy = [nodeid.split("::")[-1] for nodeid, (outcome, _) in results.settled_stand_ins().items()
             if outcome == "failed"]
    if lossy:  # their stand-in skipped before the reference's outputs came: the run fails as it would have
        notes.append(f"resumed test(s) whose outputs leave their reference's, compared after their "
                     f"stand-in ran: {named(lossy, where)}")
        if exitstatus == pytest.ExitCode.OK:
            exitstatus = pytest.ExitCode.TESTS_FAILED
    exitstatus = empty_shard_status(plan, exitstatus)
    if shard is not None:
        try:
            shard.finish(results, seconds, exitstatus, partial,
                         plan is not None and shard_all_recorded(results, durations, plan), limits)
        except OSError as exc:  # its shard.json stays the started one: a merge finds the shard unfinished
            problems.append(f"shard folder not finished: {_refused(exc, shard.directory, state, 'report')}; "
                            f"a merge reads this shard as unfinished; the journal keeps this run's figures: "
                            f"a run of the same {state.settings.setter('shard')} and "
                            f"{state.settings.setter('report')} with {state.settings.setter('resume')} "
                            f"finishes it without measuring again the tests that passed")
    if writes is not None:
        writes.left.clear()  # what is not written now has its line: none is still to come
    return exitstatus


def leftover_entries(results: Results, durations: Durations | None, plan: ShardPlan | None,
                     limits: RunLimits) -> str | None:
    """The baseline file's entries that no test of this run is, though it collected whole the files
    whose tests saved them (a configuration or workload removed from the matrix, a test renamed),
    in one line with the fix; None where there are none, and under any selection (-k, -m, a node
    id, --deselect, --lf, --sw, --specdec-tp, a shard), a stop, or a worker not heard from, which
    may have left the tests that are theirs uncollected. A note, never an error."""
    from . import unmatched

    nodeids = {r.nodeid for r in results.all()} | set(results.outcomes) | results.configured
    files = {nodeid.partition("::")[0] for nodeid in nodeids if "::" in nodeid}
    state = results.state
    if (not files or limits.left_out_by or limits.stopped_by is not None or limits.by_node_id
            or plan is not None or durations is None or durations.collection_unknown
            or results.unheard_workers or state.settings.tp is not None):
        return None
    baselines = _stored_baselines(results)
    if baselines is None:
        return None
    # an entry the gate's note offers as a renamed test's (did you mean ...) is said there
    meant = {name for *_, near in _entries_meant(results, baselines, _uncompared(results)) for name in near}
    left = [test_id for test_id in unmatched.unclaimed(baselines, results.collected | {r.test_id for r in results.all()},
                                                       files) if test_id not in meant]
    if not left:
        return None
    from .relpaths import relative_path
    from .table_fold import named

    # no report of this run lists them (none of its tests is theirs): the baseline file does
    return (f"baseline: {state.baseline_path.name} holds the entries of {len(left)} test(s) this run did not "
            f"collect, though it collected their files whole: {named(left)} (a configuration or workload removed "
            f"from the matrix, or a test renamed); nothing compares with them: if they are gone for good, "
            f"delete their keys from \"entries\" in {relative_path(state.baseline_path, state.config.root)} "
            f"(a save keeps the entries it does not write)")


def empty_shard_status(plan: ShardPlan | None, exitstatus: int) -> int:
    """A shard given no configuration (more shards than configurations) succeeds, where pytest
    says "no tests collected": its part of the run is done."""
    import pytest

    if plan is not None and not plan.mine and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        return pytest.ExitCode.OK
    return exitstatus


def rerun_note(reruns: dict[str, int]) -> str:
    """One line naming the tests run again after a failed attempt (pytest-rerunfailures): their
    rows and a saved baseline hold the last attempt's figures, which a reader of the table alone
    would take for a first attempt's. The first few of many, and no report to see the rest in: none
    records a rerun."""
    from .table_fold import named

    tests = named([f"{nodeid.rsplit('::', 1)[-1]} ({n} failed attempt{'s' if n > 1 else ''})"
                   for nodeid, n in sorted(reruns.items())])
    return (f"run again after failing: {tests}; the table, the report and a saved baseline hold "
            f"each one's last attempt, the journal every attempt's figures")


def interrupted_note(results: Results, stopped_by: str) -> str | None:
    """After Ctrl-C (or a SIGTERM or SIGHUP, which end the run as it does), or a stop by -x,
    --maxfail or --sw (`run_limits.stopped_by`), with xdist or without: how many of the run's
    measurements finished, where they are kept and how to measure only the rest; None where
    every one finished. A run started again without resume would measure them all anew."""
    from .relpaths import relative_path
    from .run_limits import INTERRUPT
    from .shard_dir import folder, journal_path

    state = results.state
    total = results.progress_total()
    if total is None or len(results.results) >= total:
        return None
    done = _kept_done(results)
    settings = state.settings
    ended = "run interrupted" if stopped_by == INTERRUPT else f"run stopped by {stopped_by}"
    if done == 0 and not settings.resume:  # nothing journaled as done: resuming would measure them all too
        if results.results:
            return (f"{ended} with none of its {total} measurement(s) done (those that finished "
                    f"failed, which a resume measures again), so a run again measures them all")
        return (f"{ended} before any of its {total} measurement(s) finished: none is "
                f"journaled, so a run again measures them all")
    # a shard journals into its own folder, which only a run of the same shard resumes from
    same_shard = (f" and the same {settings.setter('shard')} and {settings.setter('report')}"
                  if folder(state) is not None else "")
    how = (f"run it again{same_shard} (resume is on: {settings.source('resume')})" if settings.resume
           else f"run it again with {settings.setter('resume')}{same_shard}")
    return (f"{ended} with {done} of {total} measurement(s) done, kept in the journal "
            f"{relative_path(journal_path(state), state.config.root)}: {how} to measure only the rest")


def _kept_done(results: Results) -> int:
    """This run's measurements the journal keeps as done, which a resume skips: one that a test
    recorded and then failed (its gate, its losslessness check, its own assertion) is measured
    again, so it is none of them."""
    from .session import journal_for

    done = journal_for(results.state).done()
    return sum((result.nodeid, result.workload or "-") in done for result in results.results.values())


def unchecked_lossless(results: Results, left_out_by: tuple[str, ...] = ()) -> str | None:
    """The speculative results whose reference recorded no outputs in this run (left out by
    `left_out_by`, the options given that leave tests out, or by the tests the command line
    named; skipped; failed before measuring; or measured through `specdec_record.result`, which
    records figures alone), so nothing checked their losslessness; one line, or None, naming the
    first few where there are many (no report records which went unchecked, so none is named)."""
    from .collection import reference_case
    from .configuration import is_speculative
    from .lossless import counterpart
    from .table_fold import named

    state = results.state
    if not results.all() or not state.lossless.on:
        return None
    measured = {(r.case, r.workload, counterpart(r.nodeid, r.config)) for r in results.all()
                if r.case is not None and r.outputs is not None}
    # a reference that ran but recorded figures alone: the run did not leave it out
    figures_only = {(r.case, r.workload, counterpart(r.nodeid, r.config)) for r in results.all()
                    if r.case is not None and r.outputs is None and "measurement" in r.details}
    unchecked: list[tuple[Result, str, bool]] = []  # (result, its reference's name, whether that recorded figures)
    for r in results.all():
        if r.case is None or r.outputs is None or not is_speculative(r.case.method) \
                or r.case.method == state.settings.reference:
            continue
        reference = reference_case(r.case, state)
        key = (reference, r.workload, counterpart(r.nodeid, r.config))
        if reference is not None and key not in measured:
            unchecked.append((r, reference.param_id, key in figures_only))
    # named over them all: two tests of one configuration read alike across the two causes too
    names = _names([r for r, _, _ in unchecked])

    def part(figures: bool) -> str | None:
        chosen = [(name, reference) for name, (_, reference, of_figures) in zip(names, unchecked)
                  if of_figures == figures]
        if not chosen:
            return None
        references = named(list(dict.fromkeys(reference for _, reference in chosen)))
        listed = named([name for name, _ in chosen])
        if figures:
            return (f"{listed} (their reference {references} recorded figures without outputs, through "
                    f"specdec_record.result(measurement), so there was nothing to compare them with); record "
                    f"the reference through specdec_record.run(specdec_server, workload)")
        why = (f"left out by {' or '.join(left_out_by)}" if left_out_by
               else "not among the tests the command line named")
        return (f"{listed} (their reference {references} recorded no outputs in this run: {why}, skipped, or "
                f"failed before it measured); run the reference with them")

    parts = [text for text in (part(False), part(True)) if text]
    return f"lossless: not checked: {'; '.join(parts)}" if parts else None


def sampled_lossless(results: Results) -> str | None:
    """The speculative results of a workload that samples (SGLang would not decode it greedily:
    sampling_rule), whose outputs no greedy reference can reproduce, so nothing checked their
    losslessness: said at the end, where `-q` (which hides the header's line) still shows it; one
    line, or None. The temperature is the one the test ran (`details`, kept only for a run that
    sampled), which a workload it built itself may not share with the configured workload of its name."""
    from .configuration import is_speculative

    state = results.state
    if not results.all() or not state.lossless.on:
        return None
    configured = {w.name: w.temperature for w in state.config.workloads}

    def ran(r: Result) -> float | None:
        value = r.details.get("temperature")
        return float(value) if isinstance(value, (int, float)) else None

    def temperature(r: Result) -> float:
        value = ran(r)
        return configured.get(r.workload or "", 0) if value is None else value

    sampled = [r for r in results.all() if r.case is not None and r.outputs is None
               and is_speculative(r.case.method) and r.case.method != state.settings.reference
               and (ran(r) is not None or not decodes_greedily(temperature(r)))]
    if not sampled:
        return None
    from .table_fold import named

    names = named(_names(sampled))
    workloads = ", ".join(sorted({f"{r.workload} at temperature {temperature(r):g}" for r in sampled}))
    return (f"lossless: not checked: {names} (sampled: {workloads}; only greedy outputs must equal "
            f"the reference's); a workload with temperature = 0 checks them")


def figures_only_lossless(results: Results) -> str | None:
    """The greedy results of a guarded family measured through `specdec_record.result(measurement)`,
    which records figures, not outputs (`run(server, workload)` records both), so nothing compared
    their outputs, as they were neither sampled nor left without their reference: one line, or None."""
    from .collection import reference_case
    from .configuration import is_speculative

    state = results.state
    if not results.all() or not state.lossless.on:
        return None
    configured = {w.name: w.temperature for w in state.config.workloads}
    reference = state.settings.reference
    figures_only = [r for r in results.all() if r.case is not None and r.outputs is None
                    and "measurement" in r.details and "temperature" not in r.details
                    and decodes_greedily(configured.get(r.workload or "", 0))
                    and (r.case.method == reference or is_speculative(r.case.method))
                    and reference_case(r.case, state) is not None
                    and any(is_speculative(m) and m != reference for m in state.config.matrices[r.case.family].methods)]
    if not figures_only:
        return None
    from .table_fold import named

    return (f"lossless: not checked: {named(_names(figures_only))} (measured through "
            f"specdec_record.result(measurement), which records figures, not outputs); "
            f"specdec_record.run(specdec_server, workload) records the outputs the guard compares")


def _compared_pairs(results: Results) -> list[tuple[Result, Result]]:
    """(speculative result, its reference's result) of each pair whose outputs the guard compared."""
    from .collection import reference_case
    from .configuration import is_speculative
    from .lossless import counterpart

    state = results.state
    with_outputs = {(r.case, r.workload, counterpart(r.nodeid, r.config)): r for r in results.all()
                    if r.case is not None and r.outputs is not None}
    pairs = []
    for (case, workload, test), r in with_outputs.items():
        if not is_speculative(case.method) or case.method == state.settings.reference:
            continue
        expected = with_outputs.get((reference_case(case, state), workload, test))
        if expected is not None:
            pairs.append((r, expected))
    return pairs


def uncounted_lossless(results: Results) -> str | None:
    """The speculative results whose `prefix:N` check compared only the first N characters of
    some outputs, as their servers sent no token ids and no tokenizer counted them (N characters
    are usually far fewer tokens): a pass there checked less than asked; one line, or None."""
    from .lossless import uncounted, uncounted_note

    if not results.all():  # nothing compared (and the state's settings need not be read)
        return None
    exactness = results.state.lossless
    if exactness.mode != "prefix":
        return None
    short = [r for r, expected in _compared_pairs(results) if uncounted(r.outputs, expected.outputs, exactness)]
    return uncounted_note(exactness, _names(short)) if short else None


def blind_lossless(results: Results) -> str | None:
    """The speculative results compared as text whose matching texts hold U+FFFD, where a
    different token of bytes that complete no character reads alike (`lossless.blind`): their
    pass could not see those characters; a note, not a failure, as nothing shows they differ;
    one line, or None."""
    from .lossless import blind, blind_note

    if not results.all():  # nothing compared (and the state's settings need not be read)
        return None
    exactness = results.state.lossless
    if not exactness.on:
        return None
    unseen = [r for r, expected in _compared_pairs(results) if blind(r.outputs, expected.outputs, exactness)]
    return blind_note(_names(unseen)) if unseen else None


def _names(results: Sequence[Result]) -> list[str]:
    """`config [workload]` of each result, or its test's name where two would read alike (two
    test functions, or parametrizations, of one configuration and workload)."""
    plain = [f"{r.config} [{r.workload}]" if r.workload else r.config for r in results]
    alike = Counter(plain)
    return [name if alike[name] == 1 else r.test_id for name, r in zip(plain, results)]


def nothing_reported(state) -> str:
    """The end-of-run line of a run that wrote no report; it warns of an earlier run's files only
    where the folder holds some, which a reader would otherwise take for this run's."""
    from .shard_dir import JOURNAL, MANIFEST, folder
    from .whole_file import is_temporary

    out = state.path(state.settings.report)
    # a shard folder's manifest and journal are this run's, written as it started; a temporary
    # file a run killed mid-write left is no report a reader could take for this run's
    own = {MANIFEST, JOURNAL} if folder(state) is not None else set()
    earlier = out.is_dir() and any(path.name not in own and not is_temporary(path.name)
                                   for path in out.iterdir())
    return (f"no report written to {out}: no test recorded figures or failed"
            + (" (what is there is an earlier run's)" if earlier else ""))


def _kept(exc: Exception, state) -> str:
    """Where the figures a save could not write for the lock of the baseline file are kept, and
    how to save them once it is free; empty for other errors (theirs say their fix)."""
    from .baselines import LockTimeout
    from .shard_dir import journal_path

    if not isinstance(exc, LockTimeout):
        return ""
    return (f"; the figures stay in the journal {journal_path(state)}: once the lock is free, a run with "
            f"{state.settings.setter('resume')} {state.settings.setter('save_baseline')}{same_shard(state)} "
            f"saves them without measuring again")


def _refused(exc: OSError, path, state, option: str) -> str:
    """The file the OS refused, its reason and the fix (`write_failure.unwritable`); `option`
    names the setting that moves it elsewhere."""
    from .write_failure import unwritable

    return unwritable(exc, path, state.settings.setter(option))


def _why(exc: Exception, path) -> str:
    """One line: the file and an OSError's reason, without errno and traceback (our own errors
    name their file already)."""
    if isinstance(exc, OSError):
        return f"{exc.filename or path}: {exc.strerror or exc}"
    return str(exc)
