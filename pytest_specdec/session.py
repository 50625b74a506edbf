"""The benchmark session: journal, the checks of a test's figures and the controller's collection of results.

Runs in two roles. Where a test runs (the only process, or an xdist worker), `finish_test`
journals its figures, attaches them to the report, gates them against the baseline and checks
the losslessness of greedy outputs against the reference configuration's (`judge`, which
--specdec-resume also runs on journaled figures: resume.py). In the
controller (the only process, or the xdist master), `Results` gathers every test's figures from
the reports, prints a progress line per configuration, and at the end hands them to the report
writers and, with `--specdec-save-baseline`, merges them into the baseline file.
"""

from __future__ import annotations

import datetime as _dt
import errno
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, NoReturn

import pytest
from filelock import FileLock

from . import baselines as baselines_mod
from . import gate as gate_mod
from . import journal_owner
from . import lossless
from .baseline_gate import Gate
from .benchmark_info import measured_where
from .collection import case_of, checked_against, known_issues_strict, reference_case
from .config import KnownIssue
from .configuration import MatrixCase, is_speculative
from .errors import SpecdecUsageError
from .fingerprint import Fingerprint, measured_setup
from .journal import DONE, FAILED_CHECKS, MEASURED, Journal, JournalRecord
from .recording import (AWAITS_PROPERTY, RECORDING_TOTAL, REMEASURED_PROPERTY, RESULT_PROPERTY,
                        RESUMED_PROPERTY, STOOD_IN_PROPERTY, UNCOUNTED, attach_to_report, existing_recorder, result_of_report)
from .result import RECORD_DAMAGE, Result
from .sharing import sharing_message
from .state import RunState


def journal_for(state: RunState) -> Journal:
    from .shard_dir import journal_path

    return Journal(journal_path(state), said=state.journal_said, cache=state.journal_read)


def workload_key(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    workload = callspec.params.get("specdec_workload") if callspec else None
    return getattr(workload, "name", None) or "-"


def start_journal(state: RunState, run: str) -> None:
    """Before this run's first record: a run without --specdec-resume starts a new journal.

    Called where tests run (every xdist worker), so the journal's owner is recorded in a marker
    file beside it, under the journal's lock: the first process of a run rotates the old journal
    (kept beside it, with a time stamp, as many as --specdec-keep-runs allows); the others of the
    same run find the marker and append. Another run still writing it is a SpecdecUsageError
    (`journal_owner`).
    Runs whose recording tests never run never touch the journal. Once a process took it, its
    marker's lock keeps other runs off: nothing is checked again.
    """
    journal = journal_for(state)
    if (journal.path, run) in _TAKEN:
        return
    journal.path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(journal.path) + ".lock"):
        journal_owner.check_free(journal.path, run, state.settings.setter("journal"))
        if journal_owner.owner(journal_owner.marker_of(journal.path))[0] != run \
                and not state.settings.resume and journal.path.exists():
            from .retention import prune

            from .run_paths import rotated_journals

            stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
            journal.path.rename(journal.path.with_name(
                f"{journal.path.stem}.{stamp}{journal.path.suffix}"))
            prune(rotated_journals(journal.path), state.settings.keep_runs - 1)  # this run's is the Nth
        journal_owner.take(journal.path, run, state.settings.setter("journal"))
    _TAKEN.add((journal.path, run))


#: (journal, run) this process took: each recording test would otherwise probe the folder and
#: take the journal's lock again.
_TAKEN: set[tuple[Path, str]] = set()


def claim_journal(state: RunState, run: str) -> None:
    """Before a recording test measures: the journal's folder must be writable and no other live
    run may write the journal; then this run takes it (`start_journal`), so a run that starts
    while this test measures is stopped at its collection, not after its own first measurement."""
    from .outputs import check_folder

    journal = journal_for(state)
    if (journal.path, run) not in _TAKEN:
        check_folder(journal.path.parent, "journal folder", state.settings.setter("journal"))
        start_journal(state, run)


def check_journal_free(state: RunState, run: str) -> None:
    """Before a recording test measures: SpecdecUsageError if the journal's folder cannot be
    written, or another live run writes the journal (its figures could not be journaled; the
    other run's stay as they are)."""
    from .outputs import check_folder

    journal = journal_for(state)
    check_folder(journal.path.parent, "journal folder", state.settings.setter("journal"))
    if journal.path.parent.is_dir():
        with FileLock(str(journal.path) + ".lock"):
            journal_owner.check_free(journal.path, run, state.settings.setter("journal"))


_FINGERPRINT_KEY = pytest.StashKey[Fingerprint]()


def item_fingerprint(item: pytest.Item, state: RunState) -> Fingerprint:
    """What `item` measures (configuration, workload, server settings, model), worked out once."""
    if _FINGERPRINT_KEY not in item.stash:
        workload = workload_key(item)
        item.stash[_FINGERPRINT_KEY] = measured_setup(
            case_of(item), None if workload == "-" else workload, state)
    return item.stash[_FINGERPRINT_KEY]


#: Digests of the journal records an earlier run left of tests this resumed run measures again
#: (resume.py): until their new records land, their outputs are no one's reference nor held to one.
REPLACED_KEY = pytest.StashKey[frozenset]()
#: Node ids of the tests a resumed run stands in (resume.py): each is judged by its own test, not
#: by the reference's test this run measures.
STOOD_IN_KEY = pytest.StashKey[frozenset]()


def finish_test(item: pytest.Item, state: RunState, gate: Gate, run: str,
                passed: bool = True) -> None:
    """After a test's call: journal what it recorded, then report, feed pytest-benchmark, gate
    it against the baseline and check its outputs against the reference configuration's
    (raises on a regression or a divergence).

    The journal comes first: a measurement is on disk, as `measured`, before anything that could
    fail on it (a bad comparison, the pytest-benchmark bridge) runs, and is marked `done` only
    once its checks passed, so a process that dies in between leaves figures that resume
    measures again. A test that failed after recording keeps its figures in the journal as
    `failed`, which resume measures again; so does one that fails the checks on them (a second
    record, `failed-checks`, after its `measured`).
    """
    recorder = existing_recorder(item)
    if recorder is None or recorder.finished:
        return
    recorder.finished = True
    result = replace(recorder.to_result(), fingerprint=item_fingerprint(item, state))
    recorder.outputs = None  # the item lives to the session's end: its outputs go on in `result` alone
    if not recorder.metrics:
        if passed:  # samples without figures: nothing to journal or gate
            recorder.feed_benchmark(measured_where(state, result.fingerprint))
        return
    try:
        start_journal(state, run)
    except SpecdecUsageError as exc:  # another run started writing the journal while this test measured
        raise pytest.fail.Exception(f"pytest-specdec: {exc}", pytrace=False) from None
    measured = _append(item, state, result, MEASURED if passed else "failed")
    if not passed:
        attach_to_report(item, result)  # its figures beside its failure, as a merge of shards shows them
        return
    broke = None
    failures: list[str] = []
    unsettled = None
    try:
        if result.shared is None:  # another client's load shaped them: no pytest-benchmark timing either
            recorder.feed_benchmark(measured_where(state, result.fingerprint))
        judged = judge(result, state, gate, recording_tests(item.session.items),
                       item.config.stash.get(REPLACED_KEY, frozenset()),
                       stood_in=item.config.stash.get(STOOD_IN_KEY, frozenset()))
        result, failures, unsettled = judged.result, judged.failures, judged.unsettled
        _journal_found_lossy(item, state, judged.lossy)
    except Exception as exc:  # the figures are journaled; what broke is this test's failure
        broke = f"{type(exc).__name__} after the measurement was journaled " \
                f"({journal_for(state).path}): {exc}"
    attach_to_report(item, result)
    if broke:
        _journal_failed(item, state, result)
        pytest.fail(broke, pytrace=False)
    if failures:
        _journal_failed(item, state, result)
        pytest.fail("\n".join(failures), pytrace=False)
    if xpasses_strictly(item):  # a known issue that now passes: pytest fails it as XPASS(strict)
        _journal_failed(item, state, result)
        if unsettled is not None:  # its outputs may be its known divergence: no XPASS on that
            pytest.skip(unsettled_reason(xfail_reason(item), unsettled))
        return
    _mark_done(item, state, measured)
    if unsettled is not None and may_xfail(item):  # a non-strict one: no XPASS on uncompared outputs either
        pytest.skip(unsettled_reason(xfail_reason(item), unsettled))


@dataclass(frozen=True)
class Judged:
    """This run's verdict on a test's figures (`judge`)."""

    result: Result  # with this run's baseline comparisons
    failures: list[str]  # why the test fails, in order; none: it passes
    lossy: list[tuple[JournalRecord | None, lossless.Divergence]]  # the divergences found
    #: the reference its outputs are held to, where that had journaled none to compare with yet
    unsettled: MatrixCase | None


def judge(result: Result, state: RunState, gate: Gate, claimed: set[str],
          replaced: frozenset = frozenset(), *, own_only: bool = False,
          stood_in: frozenset = frozenset()) -> Judged:
    """This run's checks of a test's figures, whether measured now or resumed from the journal.

    The failures, in order: a server another client shared while the workload measured
    (sharing.py; under `--specdec-allow-shared` its figures are neither compared nor failed, only
    marked shared), a regression (under this run's tolerances and
    `--specdec-strict-noise`), gated figures with no baseline entry under
    `--specdec-require-baseline`, outputs that leave the reference's under this run's
    losslessness settings. `claimed`: the test ids of this run's recording tests
    (`recording_tests`); `replaced`: as `lossless_failures` reads it; `own_only`: only
    `result`'s own divergence, not those of speculative configurations it is the reference of (a
    resumed reference: each of those this run collects is checked by its own test, measured or
    resumed); `stood_in`: tests whose own stand-in judges them (`STOOD_IN_KEY`), left out likewise.
    """
    shared = result.shared
    # allowed (--specdec-allow-shared), its figures are recorded but never gated: another client's load
    # makes a red noise and a green meaningless
    allowed = shared is not None and state.settings.allow_shared
    compares = (state.tolerances.any or state.baseline_path.is_file()) and not allowed
    result = result.compared(tuple(gate.compare(result)) if compares else ())  # never another run's
    lossy, unsettled = lossless_failures(result, state, replaced, own_only=own_only, stood_in=stood_in)
    failures = [divergence.message() for _, divergence in lossy]
    message = gate_mod.failure_message(result.comparisons, state.settings.strict_noise)
    if message:
        # a "regression" against figures of another workload or model says more than it knows
        other = gate.other_setup(result)
        # a saving run gates them first and saves no failed test's figures: saving alone never replaces them
        stale = (f" (its entries of {', '.join(other)} measured another setup: "
                 f"{gate.what_changed(result)}; if the change is meant, delete them and save again "
                 f"with {state.settings.setter('save_baseline')})") if other else ""
        failures.insert(0, f"regression against {state.baseline_path.name}{stale}:\n{message}")
    if state.settings.require_baseline and not state.settings.save_baseline and not allowed:  # a save run makes them
        unmatched = gate.unmatched(result, claimed)
        if unmatched:
            failures.insert(1 if message else 0, unmatched)  # after a regression, before the rest
    if shared is not None and not allowed:
        # failed, not warned of nor ungated: another client's load explains any verdict, a red as
        # much as a green, and a failed test's figures are neither saved nor resumed as done
        failures.insert(0, sharing_message(result.config, shared, state.settings.setter("allow_shared")))
    return Judged(result, failures, lossy, unsettled)


def recording_tests(items: list[pytest.Item]) -> set[str]:
    """The baseline keys of this run's recording tests (`Recorder.test_id`), those it deselected
    too (`collection.note_collected`): an entry of one of them is its own, never a misspelling of
    another test's."""
    from .collection import collected_tests, recording_names

    config = items[0].config if items else None
    return recording_names(items) | (collected_tests(config) if config is not None else set())


def xpasses_strictly(item: pytest.Item) -> bool:
    """Whether a passing call fails as XPASS(strict): an unconditional strict xfail, as known issues
    are marked (a conditional one is pytest's to evaluate, and is left to it)."""
    for mark in item.iter_markers("xfail"):
        if mark.args or "condition" in mark.kwargs or mark.kwargs.get("run") is False:
            continue
        return bool(mark.kwargs.get("strict", item.config.getini("xfail_strict")))
    return False


def may_xfail(item: pytest.Item) -> bool:
    """Whether an xfail mark of `item` holds (a known issue): whether its outcome is xfailed,
    xpassed or XPASS(strict) is pytest's to decide."""
    try:  # pytest's own reading of its marks, as `collection.will_run` reads them
        from _pytest.skipping import evaluate_xfail_marks

        return evaluate_xfail_marks(item) is not None
    except Exception:
        return item.get_closest_marker("xfail") is not None


def xfail_reason(item: pytest.Item) -> str:
    mark = item.get_closest_marker("xfail")
    return str(mark.kwargs.get("reason", "")) if mark is not None else ""


def _journal_failed(item: pytest.Item, state: RunState, result: Result) -> None:
    """Mark a journaled measurement as failed by its checks, so that --specdec-resume measures
    and checks it again instead of skipping it as done (a red run resumed must not go green)."""
    _append(item, state, result, FAILED_CHECKS)


def _append(item: pytest.Item, state: RunState, result: Result, status: str) -> JournalRecord:
    """Journal a test's figures; a journal that cannot take them fails the test in one line."""
    journal = journal_for(state)
    try:
        return journal.append(item.nodeid, workload_key(item), result.to_json(), status=status,
                              fingerprint=result.fingerprint.digest)
    except OSError as exc:
        _journal_refused(state, exc, "figures", "so they were not kept")


def _mark_done(item: pytest.Item, state: RunState, measured: JournalRecord) -> None:
    """Confirm a test's journaled figures once their checks passed: only now may resume skip it."""
    try:
        journal_for(state).mark_done(measured)
    except OSError as exc:  # without its mark the journal holds this test as unchecked, as a merge reads it
        _journal_refused(state, exc, "verdict", "so a resumed run would measure it again and a "
                                                "merge of shards would find no result of it")


def _journal_refused(state: RunState, exc: OSError, what: str, cost: str) -> NoReturn:
    """Fail the test in one line: the journal could not take its `what` (figures, verdict)."""
    journal = journal_for(state)
    room = "free space there or " if exc.errno in (errno.ENOSPC, errno.EDQUOT) else ""
    # from None: the OSError it is raised while handling would follow the line as its cause
    raise pytest.fail.Exception(f"pytest-specdec: the results journal {journal.path} cannot take this test's "
                                f"{what} ({exc.strerror or exc}), {cost}; {room}choose another "
                                f"{state.settings.setter('journal')}", pytrace=False) from None


def lossless_failures(result: Result, state: RunState, replaced: frozenset = frozenset(), *,
                      own_only: bool = False, stood_in: frozenset = frozenset()
                      ) -> tuple[list[tuple[JournalRecord | None, lossless.Divergence]], MatrixCase | None]:
    """Divergences from the reference's outputs that this result lets us see, each with the
    journal record of the speculative configuration that diverged: its own when it is
    speculative and the reference is journaled; when it is the reference, those of every
    speculative configuration journaled before it (which could not be checked then), unless
    `own_only`. Also the reference a speculative result is held to where that had journaled no
    outputs to compare with yet (from the same reading of the journal: another worker's may land
    in between). `replaced`: digests of records (`REPLACED_KEY`) an earlier run left of tests
    this run measures again, left out; `stood_in`: as `judge` reads it."""
    if not state.lossless.on or result.case is None or result.outputs is None:
        return [], None  # without reading the journal
    # a reference compares every configuration held to it; any other only its reference
    others, records = _journaled(result, state, replaced, all_outputs=result.case.method == state.settings.reference)
    among = Divergences(others, state)
    found = [(records.get(candidate.nodeid), divergence)
             for candidate, divergence in among.of(result)
             if candidate.nodeid == result.nodeid
             or not (own_only or _known_issue(candidate, state) or candidate.nodeid in stood_in)]
    return found, among.uncompared(result)


def _journaled(result: Result, state: RunState, replaced: frozenset, *,
               all_outputs: bool = False) -> tuple[list[Result], dict[str, JournalRecord]]:
    """The journal's results of `result`'s workload that measured what this run measures, with
    their records by node id, less the `replaced` ones; with the outputs of the reference
    configurations (kept in memory), and, where `all_outputs`, of the others too (read again)."""
    others, records = [], {}
    journal = journal_for(state)
    model = json.dumps(state.backend.model_part(state), sort_keys=True)  # an attached server's may come later
    for record in journal.latest_of(result.workload):
        if record.status not in (DONE, MEASURED, FAILED_CHECKS) or record.digest in replaced:
            continue
        other = _current_result(record, state, model)
        if all_outputs and other is not None and other.outputs is None:
            other = _with_outputs(other, record)
        if other is not None:
            others.append(other)
            records[other.nodeid] = record
    return others, records


def _current_result(record: JournalRecord, state: RunState, model: str) -> Result | None:
    """`record`'s result where it reads and measured what this run measures (`_current`), else
    None; worked out once per record and served model, as each test of a run reads the journal."""
    derived = state.journal_read.derived
    key = (record.digest, model)
    if not record.digest or key not in derived:
        try:
            other = Result.from_json(record.data)
        except RECORD_DAMAGE:  # warned of, and measured again, by resume.resume_done
            other = None
        current = other is not None and other.case is not None and _current(record, other.case, state)
        if not record.digest:
            return other if current else None
        if current and other.case.method != state.settings.reference:
            other = replace(other, outputs=None)  # on disk: only its reference's test compares them (`_with_outputs`)
        derived[key] = other if current else None
    return derived[key]


def _with_outputs(result: Result, record: JournalRecord) -> Result:
    """`result` (`_current_result`'s, without the outputs the run keeps only of references) with
    its record's outputs, read again for the one comparison that needs them."""
    try:
        return replace(result, outputs=lossless.Outputs.from_json(record.data.get("outputs")))
    except RECORD_DAMAGE:  # read whole before: the journal changed under the run
        return result


def unsettled_reason(xfail_reason: str, reference: MatrixCase) -> str:
    """Why a known issue whose test passed is skipped: nothing compared its outputs yet."""
    return (f"{xfail_reason}: its test passed, but its outputs could not be compared with "
            f"{reference.param_id}'s, which had recorded none yet (measured by another xdist worker "
            f"or shard, or left out of the run), so whether it is fixed is not known here")


def _known_issue(result: Result, state: RunState) -> bool:
    """Whether `result`'s configuration is a known issue here: its divergence is its own test's
    expected failure, not the reference's test's."""
    case = result.case
    return case is not None and state.known_issue(case.method, case.tp, case.budget) is not None


def _journal_found_lossy(item: pytest.Item, state: RunState,
                         lossy: list[tuple[JournalRecord | None, lossless.Divergence]]) -> None:
    """Mark the records of speculative configurations this reference found not lossless as
    failed by their checks: they passed before the reference was measured, and a resumed run
    must measure them again rather than skip them as done and compare their old outputs. A
    `measured` record is left alone: its test is still being checked (its `done` mark would then
    confirm no last record) or died, which resume measures again anyway."""
    for record, _ in lossy:
        if record is None or record.config_id == item.nodeid or record.status != DONE:
            continue
        journal_for(state).append(record.config_id, record.workload, record.data,
                                  status=FAILED_CHECKS, fingerprint=record.fingerprint)


def divergences(result: Result, others: list[Result], state: RunState) -> list[tuple[Result, lossless.Divergence]]:
    """(speculative result, its divergence) for each pair of `result` and one of `others` (of its
    workload and test: `lossless.counterpart`) where one is the other's reference and the
    speculative one's outputs differ."""
    return Divergences(others, state).of(result)


def _test_of(result: Result) -> tuple[str | None, str]:
    """What a result shares with those its outputs are compared with: its workload and its test
    without its configuration (`lossless.counterpart`)."""
    return result.workload, lossless.counterpart(result.nodeid, result.config)


def _divergences_in(result: Result, others: list[Result],
                    state: RunState) -> list[tuple[Result, lossless.Divergence]]:
    """`divergences` of `result` with `others`, already those of its workload and test."""
    case = result.case
    reference = state.settings.reference

    def guarded(method: str) -> bool:  # any speculative method but the reference itself
        return is_speculative(method) and method != reference

    if case.method == reference:
        pairs = [(r, result) for r in others
                 if guarded(r.case.method) and reference_case(r.case, state) == case]
    elif guarded(case.method):
        wanted = reference_case(case, state)
        pairs = [(result, r) for r in others if r.case == wanted]
    else:
        return []
    found = []
    switch = lossless.margins_switch(state)
    for candidate, expected in pairs:
        divergence = lossless.compare(candidate.config, candidate.outputs, expected.config,
                                      expected.outputs, state.lossless, switch)
        if divergence is not None:
            found.append((candidate, divergence))
    return found


class Divergences:
    """`divergences(result, results, state)` and the reference nothing compared (`uncompared`)
    for each of many `results`: the results are grouped once by workload and test, so each is
    compared only with its group, not filtered against all (a run of thousands of results
    otherwise does so once per result)."""

    def __init__(self, results: list[Result], state: RunState):
        self.state = state
        self.groups: dict[tuple[str | None, str], list[Result]] = {}
        #: test (`lossless.counterpart`, which holds the workload's parameter) -> configurations with outputs
        self.measured: dict[str, set[MatrixCase]] = {}
        for r in results:
            if r.outputs is not None and r.case is not None:
                test = _test_of(r)
                self.groups.setdefault(test, []).append(r)
                self.measured.setdefault(test[1], set()).add(r.case)

    def of(self, result: Result) -> list[tuple[Result, lossless.Divergence]]:
        if not self.state.lossless.on or result.case is None or result.outputs is None:
            return []
        group = self.groups.get(_test_of(result), [])
        return _divergences_in(result, [r for r in group if r.nodeid != result.nodeid], self.state)

    def uncompared(self, result: Result) -> MatrixCase | None:
        """The reference configuration `result`'s outputs are held to where none of the results
        holds its outputs of `result`'s test, so nothing compared them; else None."""
        reference = checked_against(result.case, self.state) if result.case is not None else None
        if reference is None or result.outputs is None:
            return None
        shared = lossless.counterpart(result.nodeid, result.config)
        return None if reference in self.measured.get(shared, ()) else reference


def _current(record: JournalRecord, case: MatrixCase, state: RunState) -> bool:
    """Whether a journaled record measured what its test measures in this run: a resumed run's
    journal still holds the records of tests it measures again (another workload, model or
    server settings), whose outputs are no reference for this run's, nor held to it."""
    workload = None if record.workload == "-" else record.workload
    return measured_setup(case, workload, state).matches(record.fingerprint)


@dataclass
class Results:
    """The controller's view: every finished test's result, in completion order, and the
    results of tests a resumed run skipped (their journaled figures)."""

    state: RunState
    results: dict[str, Result] = field(default_factory=dict)
    resumed_results: dict[str, Result] = field(default_factory=dict)
    remeasured: dict[str, str] = field(default_factory=dict)  # node id -> why a resumed run measured it again
    outcomes: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    #: tests that can record (`collection.can_record`); under xdist, the first count a worker's
    #: report carries (a replacement worker that collects later in a resumed run may count fewer)
    total: int | None = None
    #: tests that record though `total` did not count them: each raises the progress lines' total
    uncounted: set[str] = field(default_factory=set)
    #: baseline keys of the recording tests collected, deselected ones too, also by xdist workers
    #: (`collection.note_collected`): never a misspelt entry for the summary to suggest
    collected: set[str] = field(default_factory=set)
    #: node ids of the tests collected whose seconds the durations count, recording or not, deselected
    #: ones too, also by xdist workers (`collection.note_configured`)
    configured: set[str] = field(default_factory=set)
    #: resumed tests stood in that skipped awaiting the outputs of a reference this run measures
    awaiting: set[str] = field(default_factory=set)
    #: node id -> where the figures of a resumed test's stand-in come from (journal, when measured)
    stood_in: dict[str, str] = field(default_factory=dict)
    #: xdist workers that collected but ended without saying what (interrupted, crashed): the
    #: tests they collected and deselected are unknown
    unheard_workers: set[str] = field(default_factory=set)
    #: node id -> its failed attempts that a plugin ran again (pytest-rerunfailures' "rerun")
    reruns: dict[str, int] = field(default_factory=dict)
    #: tests whose attempt now ending failed and runs again, until the next attempt's setup (its
    #: teardown may report "rerun" too, or, before pytest-rerunfailures 16.6.1, not report at all)
    running_again: set[str] = field(default_factory=set)
    #: the baseline file as this run's save left it (`save_baseline`); None when it saved none
    saved_baseline: baselines_mod.Baselines | None = None
    #: report.md and results.json as this run wrote them (`--specdec-report`): where the rows a
    #: folded summary table leaves out are; none where it wrote no report
    reported: tuple[Path, ...] = ()

    def add_report(self, report: pytest.TestReport) -> Result | None:
        """Note the test's outcome; return its result when this report carries one."""
        if report.when == "setup" and report.nodeid in self.running_again:  # the next attempt starts
            self.running_again.discard(report.nodeid)
            self.outcomes.pop(report.nodeid, None)  # the failed attempt's is not its outcome
        self._note_outcome(report)
        if report.outcome == "rerun" and report.nodeid not in self.running_again:  # its first failed phase
            self.running_again.add(report.nodeid)
            self.reruns[report.nodeid] = self.reruns.get(report.nodeid, 0) + 1
        if self.total is None:
            self.total = getattr(report, RECORDING_TOTAL, None)
        if report.when == "setup":  # run again: an earlier attempt's figures are not its result
            self.results.pop(report.nodeid, None)
        if getattr(report, UNCOUNTED, False):  # on each of its reports once it has a recorder
            self.uncounted.add(report.nodeid)  # a node id, so a rerun raises the total once
        for name, value in getattr(report, "user_properties", ()):
            if name == RESUMED_PROPERTY and report.when == "setup":
                self.resumed_results[report.nodeid] = Result.from_json(json.loads(value),
                                                                       resumed=True)
            elif name == REMEASURED_PROPERTY and report.when == "setup":
                self.remeasured[report.nodeid] = value
            elif name == AWAITS_PROPERTY and report.when == "call":
                self.awaiting.add(report.nodeid)
            elif name == STOOD_IN_PROPERTY and report.when == "call":
                self.stood_in[report.nodeid] = self._published(str(value))
        if report.when != "call":
            return None
        result = result_of_report(report)
        if result is not None:
            self.results[report.nodeid] = result
        return result

    def progress_total(self) -> int | None:
        """The `[done/total]` lines' total: the tests counted at collection and those that turned
        out to record uncounted; None while neither is known (no worker's report carried a count)."""
        if self.total is None and not self.uncounted:
            return None
        return (self.total or 0) + len(self.uncounted)

    def _note_outcome(self, report: pytest.TestReport) -> None:
        recorded = any(name == RESULT_PROPERTY for name, _ in getattr(report, "user_properties", ()))
        if "specdec" not in getattr(report, "keywords", {}) and not recorded:
            return  # neither a configuration nor figures of ours: pytest's own summary covers it
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed"
            self.outcomes[report.nodeid] = (outcome, self._published(str(report.wasxfail)))
        elif report.failed or report.outcome == "rerun":  # a failed attempt stays the outcome until the next ends
            outcome = "failed" if report.when == "call" else "error"
            self.outcomes[report.nodeid] = (outcome, self._published(_reason(report)))
        elif report.skipped and report.nodeid not in self.outcomes:
            self.outcomes[report.nodeid] = ("skipped", self._published(_reason(report)))
        elif report.when == "call" and report.passed:
            self.outcomes.setdefault(report.nodeid, ("passed", None))

    def _published(self, reason: str) -> str:
        """A reason as the reports and shard.json publish it: paths relative to the project."""
        from .relpaths import relative

        return relative(reason, self.state.config.root)

    def resumed(self) -> list[Result]:
        """Results measured by an earlier, interrupted run of this journal (--specdec-resume)."""
        return [r for nodeid, r in self.resumed_results.items() if nodeid not in self.results]

    def all(self) -> list[Result]:
        return list(self.results.values()) + self.resumed()

    def found_lossy(self) -> dict[str, str]:
        """{node id: why} of speculative configurations whose test passed (or was resumed as
        passed) though their outputs leave their reference's: measured before the reference, so
        only the reference's test could compare them, and it failed naming them. Their rows in
        the summary, the reports and the shard folder say so, as a merge of shards does."""
        results = self.all()
        among = Divergences(results, self.state)
        found = {}
        for result in results:
            if result.case is None or result.case.method == self.state.settings.reference:
                continue
            outcome = self.outcomes.get(result.nodeid, ("passed", None))[0]
            if not (result.resumed or outcome == "passed"):
                continue
            for _, divergence in among.of(result)[:1]:
                found[result.nodeid] = (f"{divergence.message()} (found by the test of "
                                        f"{divergence.reference}, measured after it)")
        return found

    def unsettled_known_issues(self) -> dict[str, tuple[Result, KnownIssue, MatrixCase]]:
        """{node id: (its result, its known issue, its reference)} of known issues whose test
        passed in this run and was skipped because nothing had compared their outputs yet
        (`unsettled_reason`)."""
        unsettled = {}
        for result in self.all():
            case = result.case
            outcome = self.outcomes.get(result.nodeid, ("passed", None))[0]
            if case is None or result.resumed or outcome != "skipped":
                continue
            issue = self.state.known_issue(case.method, case.tp, case.budget)
            reference = checked_against(case, self.state)
            if issue is not None and reference is not None:
                unsettled[result.nodeid] = (result, issue, reference)
        return unsettled

    def settled_known_issues(self) -> dict[str, tuple[str, str]]:
        """{node id: (outcome, why)} of the :meth:`unsettled_known_issues` whose reference's
        outputs came later in this run: `lossless.known_issue_verdict`, as a test that ran after
        its reference would have ended."""
        unsettled = self.unsettled_known_issues()
        if not unsettled:  # most runs: no grouping
            return {}
        among = Divergences(self.all(), self.state)  # grouped once: a run may have thousands of results
        settled = {}
        for nodeid, (result, issue, reference) in unsettled.items():
            if among.uncompared(result):
                continue
            found = among.of(result)
            settled[nodeid] = lossless.known_issue_verdict(
                issue.reason, reference.param_id, found[0][1] if found else None,
                f"the test of {reference.param_id}, measured after it", strict=known_issues_strict(self.state))
        return settled

    def settled_stand_ins(self) -> dict[str, tuple[str, str | None]]:
        """{node id: (outcome, why)} of the resumed tests stood in that skipped awaiting the
        outputs of a reference this run measures (another xdist worker's), once those came:
        "failed" where their outputs leave the reference's, else "passed", as their stand-in
        would have ended after the reference."""
        if not self.awaiting:  # most runs: no grouping
            return {}
        among = Divergences(self.all(), self.state)  # grouped once: a run may have thousands of results
        settled: dict[str, tuple[str, str | None]] = {}
        for nodeid in self.awaiting:
            result = self.results.get(nodeid)
            if result is None or among.uncompared(result):
                continue
            found = among.of(result)
            settled[nodeid] = (("failed", f"{found[0][1].message()} (found by the test of "
                                          f"{found[0][1].reference}, measured after it)")
                               if found else ("passed", None))
        return settled

    def late_verdicts(self) -> dict[str, tuple[str, str]]:
        """{node id: (outcome, why)} of tests whose verdict came only after they ended, from the
        test of a reference measured after them (:meth:`found_lossy`,
        :meth:`settled_known_issues`): their rows in the summary, the reports and the shard
        folder say it."""
        if not self.all():
            return {}
        late = {nodeid: ("failed", why) for nodeid, why in self.found_lossy().items()}
        late.update(self.settled_known_issues())
        late.update(self.settled_stand_ins())
        return late

    def baseline_candidates(self) -> tuple[list[Result], list[Result], list[Result], list[Result]]:
        """(results to save, results of failed tests, results that are not lossless, results
        measured on a shared server): a test that failed or errored after recording (its gate, its
        losslessness check, its own assertions), an expected failure (a known issue's xfail) too, is
        no reference for later runs, nor is a speculative configuration whose outputs differ from
        its reference's (measured before the reference, its own test passed), nor a workload
        another client shared the server during (passed under --specdec-allow-shared, resumed too)."""
        results = self.all()
        among = Divergences(results, self.state)
        # every pair is seen from its speculative side: the references need not look again
        lossy = {candidate.nodeid for result in results
                 if result.case is not None and result.case.method != self.state.settings.reference
                 for candidate, _ in among.of(result)}
        saved, failed, not_lossless, shared = [], [], [], []
        # a lossy one found late is `lossy`, not failed
        late = {**self.settled_known_issues(), **self.settled_stand_ins()}
        for result in results:
            outcome = late.get(result.nodeid, self.outcomes.get(result.nodeid, ("passed", None)))[0]
            # a known issue skipped with figures: nothing compared its outputs
            unsettled = outcome == "skipped" and not result.resumed
            if outcome in ("failed", "error", "xfailed") or unsettled:  # the journal has them as failed too
                failed.append(result)
            elif result.nodeid in lossy:
                not_lossless.append(result)
            else:
                (shared if result.shared is not None else saved).append(result)
        return saved, failed, not_lossless, shared

    def shared(self) -> list[Result]:
        """The results of tests that passed on figures measured on a shared server
        (--specdec-allow-shared), which the run's end names."""
        return self.baseline_candidates()[3]

    def save_baseline(self, results: list[Result],
                      announce: Callable[[str], None] | None = None) -> Path:
        """Merge `results` (:meth:`baseline_candidates`) into the baseline file (atomic, locked;
        other entries are kept); `announce` prints a long wait for the lock."""
        path = self.state.baseline_path
        self.saved_baseline = baselines_mod.save_baselines(
            path, self.state.hardware.key, {r.test_id: r.metrics for r in results},
            versions=baselines_mod.collect_versions(),
            commit=baselines_mod.git_commit(self.state.config.root),
            fingerprints={r.test_id: r.fingerprint for r in results if r.fingerprint},
            nodeids={r.test_id: r.nodeid for r in results}, setter=self.state.settings.setter,
            lock=lock_bound(self.state, announce))
        return path

    def saved_runs(self, result: Result, metric: str) -> int | None:
        """How many runs `result`'s `metric` entry pools in the baseline this run saved (None: no
        entry, or no save), as the summary's small-sample line says it."""
        entry = self.saved_baseline.get(result.test_id, metric) if self.saved_baseline else None
        return entry.runs if entry is not None else None


def lock_bound(state: RunState, announce: Callable[[str], None] | None) -> dict[str, Any]:
    """The bound on a save's wait for a baseline folder file's lock, as `baselines.locked` takes it."""
    return {"timeout": state.settings.baseline_lock_timeout,
            "setting": state.settings.setter("baseline_lock_timeout"), "announce": announce}


def _reason(report: pytest.TestReport) -> str:
    """Why a test failed or skipped, without the server log's last lines (the table shortens
    it, report.md keeps it; our failures open with the cause)."""
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "")
    text = text.removeprefix("Failed: ").strip()
    head, tail_marker, _ = text.partition("; last lines:")
    return head + ")" if tail_marker else head


def progress_line(result: Result, done: int, total: int | None, resumed_from: str | None = None) -> str:
    """`done` counts the tests that recorded so far, `total` those that can
    (`Results.progress_total`); `resumed_from`: where a stand-in's figures come from
    (`Results.stood_in`), which the line names, so they do not read as measured now."""
    metrics = result.values()

    def fmt(name: str, unit: str) -> str:
        if name not in metrics:
            return ""
        return f" {name}={metrics[name]:.4g}{unit}"

    verdicts = [c.line() for c in result.comparisons if c.verdict in ("regression", "improvement")]
    if result.shared is not None:  # compared with nothing, or failed for it: said beside its figures
        verdicts.append(result.shared.mark())
    tail = f" | {'; '.join(verdicts)}" if verdicts else ""
    workload = f" {result.workload}" if result.workload else ""  # a test with no workload: no stray space
    count = f"{done}/{total}" if total is not None else str(done)  # a total no report carried
    whence = f" (resumed from {resumed_from}; not measured now)" if resumed_from else ""
    return (f"specdec [{count}] {result.config}{workload}:"
            f"{fmt('output_tok_s', ' tok/s')}{fmt('accept_length', '')}{fmt('ttft_ms', 'ms')}"
            f"{fmt('tpot_ms', 'ms')}{fmt('verify_us', 'us')}{tail}{whence}")
