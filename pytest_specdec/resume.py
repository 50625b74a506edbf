"""--specdec-resume: a test the journal holds as done is not measured again, but judged again.

The journal keeps all that the checks read of a test's figures (each figure's value, spread,
per-request samples and CPU share, and the greedy outputs), so a resumed test's verdict is
decided as a measuring run decides it (`session.judge`): against this run's baseline file,
tolerances, `--specdec-strict-noise`, `--specdec-require-baseline` and losslessness settings,
not trusted from the run that measured it, whose settings may have been others. A resumed run
then ends as one uninterrupted run with its settings would have on those figures.

A test whose figures pass, and that no reference this run measures has still to compare, is
marked to skip (`already measured`); its figures, with this run's comparisons, ride on its report
to the controller (also under xdist, where it collects nothing), which shows them and can save
them into the baseline file. A test whose figures fail, that pytest may hold to an xfail mark (a
known issue: xfailed, xpassed and XPASS(strict) are pytest's to decide), or whose reference this
run measures (its own test, not the reference's, is red where their outputs differ, as in one
uninterrupted run), runs as a stand-in (`_stand_in`): none of its fixtures is made, so no server
boots, and its call fails with the reasons a measuring run gives, or passes. Its journal record
stays `done`: the figures are whole and checked; the next resume judges them again under
its own settings.

A done record measured on a shared server (passed under --specdec-allow-shared) is kept by a
resumed run that allows sharing too, judged again as shared (never gated, never saved); a resumed
run without the switch measures it again, as the failure it would give asks.
"""

from __future__ import annotations

import json
import warnings

import pytest

from . import lossless
from .baseline_gate import Gate
from .collection import case_of, mark_stand_in, will_run
from .configuration import MatrixCase
from .fingerprint import Fingerprint
from .journal import DONE, Journal, JournalRecord, JournalWarning
from .recording import (AWAITS_PROPERTY, REMEASURED_PROPERTY, RESUMED_PROPERTY, STOOD_IN_PROPERTY,
                        attach_to_report, drop_results)
from .result import RECORD_DAMAGE, Result
from .session import (REPLACED_KEY, STOOD_IN_KEY, Judged, item_fingerprint, journal_for, judge,
                      may_xfail, recording_tests, unsettled_reason, workload_key, xfail_reason)
from .sharing import Shared
from .state import RunState


def resume_done(items: list[pytest.Item], state: RunState, gate: Gate) -> None:
    """Under --specdec-resume: judge again each test the journal records as done with its current
    fingerprint, skipping it or standing it in (module docstring); a test whose setup changed since
    (its fingerprint differs) is measured again, and the summary says why. The last records of
    the tests it measures again are noted first (`REPLACED_KEY`): no judgement here or later in
    the run holds a test to their outputs, nor them to a reference's."""
    if not state.settings.resume:
        return
    journal = journal_for(state)
    latest = journal.latest()
    done = {key: record for key, record in latest.items() if record.status == DONE}
    replaced = frozenset(latest[_key(item)].digest for item in items
                         if _key(item) in latest and _key(item) not in done and will_run(item))
    if items:
        items[0].config.stash[REPLACED_KEY] = replaced
    claimed = recording_tests(items)
    resumable: list[tuple[pytest.Item, JournalRecord, Result]] = []
    for item in items:
        record = done.get(_key(item))
        if record is None:
            continue
        current = item_fingerprint(item, state)
        if not current.matches(record.fingerprint):
            old = Fingerprint.from_json(record.data.get("fingerprint"))
            changed = current.what_changed(old, "no fingerprint in its journal record")
            item.user_properties.append(
                (REMEASURED_PROPERTY, f"what it measures changed since the journal's record ({changed})"))
            continue
        if _shared(record) and not state.settings.allow_shared:
            # kept as done under --specdec-allow-shared; a run without it measures what its failure would ask for
            item.user_properties.append(
                (REMEASURED_PROPERTY, f"its record was measured on a shared server, which this run does not "
                                      f"allow ({state.settings.setter('allow_shared')})"))
            continue
        resumed = _readable(record, journal)
        if resumed is not None:  # damaged figures are no measurement: measured again
            resumable.append((item, record, resumed))
    measured_here = _measured_here(items, {id(item) for item, _, _ in resumable}, state)
    stood_in = set()
    for item, record, resumed in resumable:
        judged = _judged(resumed, state, gate, claimed, replaced, journal)
        # a reference this run measures compares it later: its own test must give that verdict
        awaits = judged.unsettled is not None and _compared_here(resumed, judged.unsettled, measured_here)
        if judged.failures or may_xfail(item) or awaits:
            _stand_in(item, resumed, record, journal, state, gate, claimed, measured_here)
            stood_in.add(item.nodeid)
        else:
            item.add_marker(pytest.mark.skip(reason=f"already measured (resumed from {journal.path})"))
            item.user_properties.append((RESUMED_PROPERTY, json.dumps(judged.result.to_json())))
    if items:
        items[0].config.stash[STOOD_IN_KEY] = frozenset(stood_in)


def _shared(record: JournalRecord) -> bool:
    """Whether a record's figures were measured on a shared server (passed under --specdec-allow-shared)."""
    details = record.data.get("details")
    return isinstance(details, dict) and Shared.from_json(details.get("shared")) is not None


def _key(item: pytest.Item) -> tuple[str, str]:
    return item.nodeid, workload_key(item)


def _measured_here(items: list[pytest.Item], resumed: set[int], state: RunState) -> set[tuple[MatrixCase, str]]:
    """(configuration, `lossless.counterpart`) of the tests this run measures (not resumed); a
    test an attached server of another configuration will skip (marked after this) measures nothing."""
    measured = set()
    for item in items:
        case = case_of(item)
        if case is not None and id(item) not in resumed and will_run(item) \
                and state.backend.other_configuration(case, state) is None:
            measured.add((case, lossless.counterpart(item.nodeid, case.param_id)))
    return measured


def _compared_here(result: Result, reference: MatrixCase, measured_here: set[tuple[MatrixCase, str]]) -> bool:
    """Whether this run measures the test of `reference` that `result`'s outputs are held to."""
    return (reference, lossless.counterpart(result.nodeid, result.config)) in measured_here


def _judged(resumed: Result, state: RunState, gate: Gate, claimed: set[str], replaced: frozenset,
            journal: Journal) -> Judged:
    """`session.judge` of resumed figures, held only to their own checks (a resumed reference:
    each speculative configuration this run collects is checked by its own test)."""
    try:
        return judge(resumed, state, gate, claimed, replaced, own_only=True)
    except Exception as exc:  # as a measuring test whose checks broke: that test fails
        return Judged(resumed, [f"{type(exc).__name__} judging the figures resumed from {journal.path}: {exc}"],
                      [], None)


def _readable(record: JournalRecord, journal: Journal) -> Result | None:
    """A journaled record's figures; None, with a warning (it is then measured again), where
    they do not read back."""
    try:
        return Result.from_json(record.data, resumed=True)
    except RECORD_DAMAGE as exc:
        warnings.warn(f"{journal.path}: the record of {record.config_id} ({record.workload}) is "
                      f"damaged ({type(exc).__name__}: {exc}); measuring it again",
                      JournalWarning, stacklevel=2)
        return None


def _stand_in(item: pytest.Item, resumed: Result, record: JournalRecord, journal: Journal,
              state: RunState, gate: Gate, claimed: set[str],
              measured_here: set[tuple[MatrixCase, str]]) -> None:
    """Run `item` without measuring: its setup makes none of its fixtures, and its call judges the
    resumed figures again as the journal then stands (a reference this run measured before it has
    outputs to compare with by then, as in one uninterrupted run), reports them (as a measuring
    call does) and fails with the failures, or passes; a known issue whose reference has still
    recorded no outputs is skipped, as a measured one is (`session.unsettled_reason`)."""
    mark_stand_in(item)
    whence = f"(judged on its figures resumed from {journal.path}, measured {record.time or 'earlier'})"

    def setup() -> None:  # the figures are journaled: nothing to measure with
        pass

    def runtest() -> None:
        drop_results(item)  # a rerun reports them once
        item.user_properties.append((STOOD_IN_PROPERTY, f"{journal.path}, measured {record.time or 'earlier'}"))
        judged = _judged(resumed, state, gate, claimed | recording_tests([item]),
                         item.config.stash.get(REPLACED_KEY, frozenset()), journal)
        attach_to_report(item, judged.result)
        if judged.failures:
            pytest.fail("\n".join([*judged.failures, whence]), pytrace=False)
        if judged.unsettled is not None and may_xfail(item):  # no XPASS on uncompared outputs
            pytest.skip(f"{unsettled_reason(xfail_reason(item), judged.unsettled)} {whence}")
        if judged.unsettled is not None and _compared_here(resumed, judged.unsettled, measured_here):
            # its reference, measured by another xdist worker, compares it later: its verdict is late
            item.user_properties.append((AWAITS_PROPERTY, judged.unsettled.param_id))
            pytest.skip(f"its outputs could not be compared with {judged.unsettled.param_id}'s, which this "
                        f"run measures and had recorded none yet (another xdist worker's); that test's "
                        f"comparison decides its row {whence}")

    item.setup = setup  # type: ignore[method-assign]
    item.runtest = runtest  # type: ignore[method-assign]


__all__ = ["resume_done"]
