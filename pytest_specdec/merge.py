"""Merging shards: the shard folders of one sharded run into one set of results.

Each shard's journal is the source of truth for its figures; its `shard.json` says which shard
it is, what matrix it divided and how its tests ended (outcomes and baseline comparisons). The
merge refuses shards that cannot belong together (another plugin version, another matrix, setup
(workloads, server settings, model) or partition, the same shard twice, another hardware key, a
configuration measured by two shards) and says what it lacks (a missing or unfinished shard: which configurations have
no result). Everything is checked before anything is written. A journal line that cannot be read
is skipped aloud (`Merged.skipped`), as a resumed run skips it; a test whose record it may have
held has no result, and that fails the merge.
The command writes the paths in failure messages relative to the folder it runs in (the
project) where inside it (relpaths.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from . import lossless
from .errors import SpecdecUsageError
from .journal import DONE, FAILED_CHECKS, MEASURED, DamagedLine, Journal
from .report import ReportRow, row_from_result
from .result import RECORD_DAMAGE, Result
from .shard_dir import JOURNAL, MANIFEST, ShardManifest, TestOutcome, read

#: pytest's exit status of a run that collected no test (pytest.ExitCode, not imported here).
NO_TESTS_COLLECTED = 5
#: pytest's outcomes that fail a run.
FAILED_OUTCOMES = ("failed", "error")


@dataclass(frozen=True)
class Merged:
    """The merged run: its shards, one row per test (and per configuration without a result),
    the journaled results (with their shard's comparisons) and what went wrong where."""

    shards: tuple[ShardManifest, ...]
    rows: tuple[ReportRow, ...]
    results: tuple[tuple[Result, ShardManifest, str], ...]  # with its journal status
    problems: tuple[str, ...]  # each a line: a shard's gate failed, a shard missing or unfinished
    #: each a line: a damaged journal line skipped (shard, file, line) and what that cost
    skipped: tuple[str, ...] = ()
    #: each a line: what the comparisons across shards checked less than asked (`uncounted_across`,
    #: `blind_across`)
    notes: tuple[str, ...] = ()
    #: each a line: what makes the shards' verdicts hard to read together, without failing it
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """No problem, and every configuration measured or skipped with its reason."""
        return not self.problems and not any(row.failed for row in self.rows)

    @property
    def count(self) -> int:
        return self.shards[0].shard.count

    def durations(self) -> dict[str, float]:
        from .durations import Durations

        return Durations.of(m.durations for m in self.shards).seconds

    def partial_durations(self) -> list[str]:
        """`config (shard K/N)` of each configuration a shard ran only some tests of (-k, -x...),
        whose durations it left out: a save keeps their entries."""
        return [f"{config} (shard {m.shard})" for m in self.shards for config in m.partial_durations]

    @property
    def nodeids(self) -> dict[str, str]:
        """Each test's pytest node id by its test id (a row's), from its journal and its shard's outcomes."""
        found = {test.nodeid.split("::")[-1]: test.nodeid for m in self.shards for test in m.tests}
        found.update((result.test_id, result.nodeid) for result, _, _ in self.results)
        return found

    @property
    def title(self) -> str:
        """The report's title: `pytest-specdec results: 2 of 2 shards merged (1/2, 2/2)`."""
        return f"pytest-specdec results: {len(self.shards)} of {self.count} shards merged " \
               f"({self._given})"

    @property
    def _given(self) -> str:
        return ", ".join(str(m.shard) for m in self.shards)

    def meta(self) -> dict[str, str]:
        return {
            "shards": f"{len(self.shards)} of {self.count} merged ({self._given})",
            "hardware": "; ".join(sorted({m.hardware for m in self.shards})),
            "hardware_key": ", ".join(sorted({m.hardware_key for m in self.shards})),
            "backend": ", ".join(sorted({m.backend for m in self.shards})),
            "plugin_version": self.shards[0].plugin_version,
            **({"journal": "; ".join(self.skipped)} if self.skipped else {}),
        }


def load(directories: Iterable[str | Path]) -> list[ShardManifest]:
    """The shards' manifests, checked to belong to one sharded run."""
    manifests = [read(d) for d in directories]
    if not manifests:
        raise SpecdecUsageError("no shard folders given; name each shard's --specdec-report folder")
    first = manifests[0]
    for other in manifests[1:]:
        if other.plugin_version != first.plugin_version:
            raise SpecdecUsageError(
                f"{other.name} was measured with pytest-specdec {other.plugin_version}, "
                f"{first.name} with {first.plugin_version}; run every shard with one version")
        if other.matrix_digest != first.matrix_digest or other.shard.count != first.shard.count:
            raise SpecdecUsageError(
                f"{other.name} divided another matrix than {first.name} "
                f"({_matrix_text(other)} vs {_matrix_text(first)}); run every shard with the "
                f"same configuration and the same N")
        if other.setup is not None and first.setup is not None and not (
                other.setup.matches(first.setup.digest) or first.setup.matches(other.setup.digest)):
            raise SpecdecUsageError(
                f"{other.name} measured another setup than {first.name} (its "
                f"{', '.join(other.setup.changed_parts(first.setup.parts))} differ); a report of both "
                f"would mix them: run every shard with the same configuration file")
        if other.assignment != first.assignment:
            raise SpecdecUsageError(
                f"{other.name} partitioned the matrix differently from {first.name} (their "
                f"baseline folders' durations.json differ); run every shard from one commit")
    by_index: dict[int, ShardManifest] = {}
    for manifest in manifests:
        earlier = by_index.setdefault(manifest.shard.index, manifest)
        if earlier is not manifest:
            raise SpecdecUsageError(f"shard {manifest.shard} is given twice: {earlier.directory} "
                                    f"and {manifest.directory}; give each shard once")
    manifests = sorted(manifests, key=lambda m: m.shard.index)
    _one_hardware(manifests)
    return manifests


def _one_hardware(manifests: Sequence[ShardManifest]) -> None:
    """Refuse shards measured on different hardware keys: figures are compared and saved per key,
    and one table, its verdicts and its comparisons across shards would mix two machines'.
    Refused rather than split per key: each key's shards are only part of the partition (the rest
    would read as missing shards), so each hardware class is its own sharded run (README, hosts of
    different sizes), merged on its own."""
    by: dict[str, list[ShardManifest]] = {}
    for manifest in manifests:
        by.setdefault(manifest.hardware_key, []).append(manifest)
    if len(by) < 2:
        return
    seen = "; ".join(f"{', '.join(m.name for m in mine)} on {key!r}" for key, mine in by.items())
    raise SpecdecUsageError(
        f"the shards ran on different hardware ({seen}): baselines are per hardware key, so one report "
        f"(and --save-baseline) would mix the figures of different machines; run each hardware's shards as "
        f"a sharded run of its own (--specdec-shard=K/N, N its hosts, into their own shard folders) and "
        f"merge each run's shards on their own")


def baselines_differ(manifests: Sequence[ShardManifest]) -> list[str]:
    """A line per hardware key whose shards compared their figures with different baseline files
    (another checkout of the baseline folder, a file edited between their starts): their verdicts
    are against different references. Not failed (each shard gated against a baseline it had),
    and not said where a shard of that key saved into it (then it changes as the run goes) or of
    shards older than the record."""
    lines = []
    for key in sorted({m.hardware_key for m in manifests}):
        mine = [m for m in manifests if m.hardware_key == key]
        if any(m.baseline is None or m.baseline.get("saves") for m in mine):
            continue
        by: dict[Any, list[str]] = {}
        for m in mine:
            by.setdefault(m.baseline.get("digest") if m.baseline else None, []).append(str(m.shard))
        if len(by) > 1:
            file = (mine[0].baseline or {}).get("file")
            seen = "; ".join(f"shard(s) {', '.join(s)}: " + (f"digest {d}" if d else "none there")
                             for d, s in by.items())
            lines.append(f"the shards of {key} compared with different baseline files {file} ({seen}): "
                         f"their verdicts are against different baselines; run every shard from one "
                         f"commit of the baseline folder")
    return lines


def commits_differ(manifests: Sequence[ShardManifest]) -> list[str]:
    """One line where the shards ran from different commits (a push between a CI matrix's jobs, a
    Slurm array reading a checkout someone updated): the tests, workloads or baselines may differ
    in ways the setup check does not see. Shards outside a repository (no commit) say nothing."""
    by: dict[str, list[str]] = {}
    for m in manifests:
        if m.commit:
            by.setdefault(m.commit, []).append(str(m.shard))
    if len(by) < 2:
        return []
    seen = "; ".join(f"shard(s) {', '.join(s)}: {commit[:12]}{'-dirty' if commit.endswith('-dirty') else ''}"
                     for commit, s in by.items())
    return [f"the shards ran from different commits ({seen}); run every shard from one commit"]


def gates_differ(manifests: Sequence[ShardManifest]) -> str | None:
    """The figures the shards gated differently, one line, or None: each shard's verdicts are its
    own gate's, so a merge that passes because one shard ran ungated (`*:off`, a tolerance left off
    a CI job's command) passes on a gate nobody set. Shards older than the record say nothing."""
    known = [m for m in manifests if m.gate is not None]
    metrics = sorted({metric for m in known for metric in m.gate or {}})
    differ = []
    for metric in metrics:
        by: dict[str, list[str]] = {}
        for m in known:
            tolerance = (m.gate or {}).get(metric)
            by.setdefault("not gated" if tolerance is None else tolerance, []).append(str(m.shard))
        if len(by) > 1:
            differ.append(f"{metric} " + ", ".join(f"{t} in shard(s) {', '.join(s)}" for t, s in by.items()))
    if not differ:
        return None
    return (f"the shards ran under different gates ({'; '.join(differ)}): each row's verdict is its own "
            f"shard's; run every shard with the same tolerances (--specdec-compare-fail, ini "
            f"specdec_compare_fail or [tool.specdec.tolerances]) and merge again")


def _resume(manifest: ShardManifest) -> str:
    """How to finish a shard's part: its own shard and folder, with resume (it keeps what the
    journal holds)."""
    folder = f"={manifest.directory}" if manifest.directory else "=DIR"
    return (f"run it again with --specdec-shard={manifest.shard} --specdec-report{folder} "
            f"--specdec-resume")


def _matrix_text(manifest: ShardManifest) -> str:
    return f"{len(manifest.configurations)} configurations in {manifest.shard.count} shards, " \
           f"matrix {manifest.matrix_digest}"


def _journaled(manifest: ShardManifest) -> tuple[list[tuple[Result, str]], dict[str, str],
                                                 list[DamagedLine]]:
    """The shard's journaled results, the latest per test, with their journal status;
    {node id: why} of records whose figures do not read back; and the journal's lines that could
    not be read at all (skipped, as a resumed run skips them; the caller says so)."""
    assert manifest.directory is not None
    comparisons = {t.nodeid: t.comparisons for t in manifest.tests}
    out, damaged, lines = [], {}, []
    journal = manifest.directory / JOURNAL
    try:
        latest = Journal(journal).latest(lines)
    except OSError as exc:  # a folder, a link loop, no read permission: its results cannot be merged
        raise SpecdecUsageError(f"{journal} cannot be read ({exc.strerror or exc}); fix it, or re-run "
                                f"that shard") from None
    for record in latest.values():
        stored = comparisons.get(str(record.data.get("nodeid")), ())
        try:
            # the journal holds figures from before the gate; the manifest, the gate's comparisons
            result = Result.from_json({**record.data, "comparisons": list(stored)})
        except RECORD_DAMAGE as exc:
            damaged[record.config_id] = (f"its record in {journal} is damaged "
                                         f"({type(exc).__name__}: {exc})")
            continue
        out.append((result, record.status))
    return out, damaged, lines


def _unjournaled(manifest: ShardManifest, journaled: Sequence[tuple[Result, str]],
                 damaged: dict[str, str], lines: Sequence[DamagedLine] = ()) -> dict[str, str]:
    """{node id: why} of the tests that passed but whose figures the shard's journal lacks, or
    holds only from an attempt that failed (its passing record was lost: a damaged line)."""
    journal = (manifest.directory or Path()) / JOURNAL
    status = {result.nodeid: s for result, s in journaled}
    missing = f"it passed, but {journal} {'has no record of it' if journal.exists() else 'is missing'}"
    out = {}
    for test in manifest.tests:
        if test.outcome != "passed" or status.get(test.nodeid) == DONE:
            continue
        if test.nodeid in status:
            lost = " (a damaged line may have held a later one)" if lines else ""
            unchecked = " (figures whose checks never finished)" if status[test.nodeid] == MEASURED else ""
            out[test.nodeid] = (f"it passed, but its latest record in {journal} is "
                                f"{status[test.nodeid]!r}{unchecked}{lost}")
        else:
            out[test.nodeid] = damaged.get(test.nodeid, missing)
    return out


def _rows_of(manifest: ShardManifest, journaled: Sequence[tuple[Result, str]],
             unjournaled: dict[str, str]) -> list[ReportRow]:
    cases = {c.param_id: c for c in manifest.configurations}
    tests = {t.nodeid: t for t in manifest.tests}
    workloads = _configured_workloads(manifest, journaled)
    rows, seen = [], set()
    for result, status in journaled:
        test = tests.get(result.nodeid)
        if test is not None and test.outcome == "skipped" and status != DONE and test.awaits is None:
            continue  # skipped for its own reason: an older run's record is not its result
        if result.nodeid in unjournaled:  # it passed, but this record is no passed result
            outcome, reason = "error", f"no result: {unjournaled[result.nodeid]}"
        elif test is not None and (test.outcome != "skipped" or test.awaits is not None):
            outcome, reason = test.outcome, test.reason
        elif status == DONE:  # skipped: resumed from the journal
            outcome, reason = "passed", None
        elif status == MEASURED:
            outcome, reason = "error", "its checks never finished after its figures were journaled"
        else:
            outcome, reason = "failed", "failed after its figures were journaled"
        rows.append(row_from_result(result, outcome=outcome, reason=reason))
        seen.add(result.nodeid)
    for test in manifest.tests:
        if test.nodeid in seen:
            continue
        outcome, reason = test.outcome, test.reason
        if test.outcome == "passed":
            outcome, reason = "error", f"no result: {unjournaled[test.nodeid]}"
        case = cases.get(test.config or "")
        name = test.nodeid.split("::")[-1]
        rows.append(ReportRow(
            test_id=name, config=test.config or test.nodeid, workload=_workload_in(name, test.config, workloads),
            family=case.family if case else None, method=case.method if case else None,
            tp=case.tp if case else None, budget=case.budget if case else None, outcome=outcome,
            reason=reason))
    return rows


def _configured_workloads(manifest: ShardManifest, journaled: Sequence[tuple[Result, str]]) -> dict[str, str]:
    """The shard's configured workloads by their ids as pytest escapes them: those its setup names
    (`shard.json`), or in a shard older than that, those its journal recorded."""
    from .summary import escaped_workloads

    named = manifest.setup.parts.get("workloads") if manifest.setup is not None else None
    if isinstance(named, Mapping):
        return escaped_workloads(str(name) for name in named)
    return escaped_workloads(dict.fromkeys(result.workload for result, _ in journaled if result.workload))


def _workload_in(name: str, config: str | None, workloads: dict[str, str]) -> str | None:
    """The configured workload a test's parameters name past its configuration's (`ar-tp1-chat`),
    as a run's summary reads it for a test that recorded nothing (`summary.workload_in`): its own
    parameters (`nan`, `slow`) are no workload."""
    from .summary import workload_in

    if not config or "[" not in name:
        return None
    return workload_in(name[name.find("[") + 1:-1].replace(config, "", 1), workloads)


def merge(directories: Iterable[str | Path], where: str = "") -> Merged:
    """The shards of `directories` merged: rows, results, and the lines the merge ends with, which
    name the first few of many tests and say `where` (the merged report) lists them all."""
    from .table_fold import named

    manifests = load(directories)
    first = manifests[0]
    present = {m.shard.index: m for m in manifests}
    rows: list[ReportRow] = []
    results: list[tuple[Result, ShardManifest, str]] = []
    measured_by: dict[str, ShardManifest] = {}
    problems: list[str] = []
    skipped: list[str] = []
    for manifest in manifests:
        journaled, damaged, lines = _journaled(manifest)
        for result, status in journaled:
            key = result.config
            other = measured_by.setdefault(key, manifest)
            if other is not manifest:
                raise SpecdecUsageError(
                    f"configuration {key} was measured by {other.name} and by {manifest.name}; "
                    f"each configuration belongs to one shard: merge one of them")
            results.append((result, manifest, status))
        unjournaled = _unjournaled(manifest, journaled, damaged, lines)
        shard_rows = _rows_of(manifest, journaled, unjournaled)
        rows.extend(shard_rows)
        lacking = {**damaged, **unjournaled}
        journal = (manifest.directory or Path()) / JOURNAL
        if lacking and not journal.exists():  # a folder copied without it: one line, not one a test
            problems.append(f"{manifest.name}: {journal} is missing, so its {len(lacking)} passed test(s) have no "
                            f"result: copy the shard's whole folder (its {JOURNAL} beside {MANIFEST}), or run that "
                            f"shard again with --specdec-resume and merge again")
            lacking = {}
        for nodeid, why in lacking.items():
            problems.append(f"{manifest.name}: no result for {nodeid}: {why}; run that shard "
                            f"again with --specdec-resume and merge again")
        # as a resumed run does: the line is skipped, and what it may have held is missed aloud
        cost = "a test of that shard lacks its result (FAILED below)" if lacking else \
            "every test of that shard has its record"
        skipped += [f"{manifest.name}: {line}; {cost}" for line in lines]
        if manifest.finished is None:
            problems.append(f"{manifest.name} did not finish (killed, or still running): its outcomes "
                            f"and baseline comparisons are unknown; {_resume(manifest)} and merge again")
        elif manifest.stopped_by is not None:  # the rest of its tests never ran
            failed = sorted({r.config for r in shard_rows if r.outcome in FAILED_OUTCOMES})
            problems.append(f"{manifest.name} was stopped by {manifest.stopped_by} (pytest exit status "
                            f"{manifest.exitstatus})" + (f": {named(failed, where)}" if failed else "")
                            + f"; {_resume(manifest)} to measure the rest, and merge again")
        elif manifest.exitstatus == NO_TESTS_COLLECTED:  # not a failure of its tests: none ran
            by = f": {', '.join(manifest.left_out_by)} left them all out" if manifest.left_out_by else ""
            problems.append(f"{manifest.name} ran no test (pytest exit status {manifest.exitstatus}{by}); run "
                            f"that shard again selecting its tests and merge again")
        elif manifest.exitstatus not in (0, None):
            failed = sorted({r.config for r in shard_rows if r.outcome in FAILED_OUTCOMES})
            problems.append(f"{manifest.name} failed (pytest exit status {manifest.exitstatus})"
                            + (f": {named(failed, where)}" if failed else ""))
    warnings = baselines_differ(manifests) + commits_differ(manifests)
    differing = gates_differ(manifests)
    if differing:
        problems.append(differing)
    covered = {row.config for row in rows} | {t.config for m in manifests for t in m.tests}
    for case, index in zip(first.configurations, first.assignment):
        if case.param_id in covered:
            continue
        owner = present.get(index)
        if owner is None:
            why = f"no result: shard {index}/{first.shard.count} is missing from the merge"
        elif owner.finished is None:
            why = f"no result: shard {owner.shard} did not finish"
        elif owner.stopped_by is not None:
            why = f"no result: shard {owner.shard} was stopped by {owner.stopped_by} before it ran it"
        elif owner.left_out_by:
            why = (f"no result: shard {owner.shard} left its tests out ({', '.join(owner.left_out_by)}); "
                   f"run that shard again without {'them' if len(owner.left_out_by) > 1 else 'it'} "
                   f"(--specdec-resume keeps what it measured) and merge again")
        else:
            why = f"no result: shard {owner.shard} ran none of its tests (deselected?)"
        rows.append(ReportRow(test_id=case.param_id, config=case.param_id, method=case.method,
                              tp=case.tp, budget=case.budget, outcome="error", reason=why))
    compared = _compared(results)
    verdicts = _verdicts(compared, {t.nodeid: t for m in manifests for t in m.tests})
    problems += [f"across shards: {problem}" for _, _, problem in verdicts.values() if problem]
    rows = [replace(row, outcome=verdicts[row.test_id][0], reason=verdicts[row.test_id][1])
            if row.test_id in verdicts else row for row in rows]
    absent = [i for i in range(1, first.shard.count + 1) if i not in present]
    if absent:
        lacking = [c.param_id for c, i in zip(first.configurations, first.assignment)
                   if i in absent]
        problems.append(f"missing shard(s) {', '.join(f'{i}/{first.shard.count}' for i in absent)}"
                        f": {len(lacking)} configuration(s) have no result"
                        + (f": {named(lacking, where)}" if lacking else ""))
    return Merged(tuple(manifests), tuple(rows), tuple(results), tuple(problems), tuple(skipped),
                  notes=tuple(uncounted_across(compared) + blind_across(compared)), warnings=tuple(warnings))


@dataclass(frozen=True)
class _Compared:
    """A speculative configuration's outputs compared with its reference's, which `shard` measured."""

    candidate: Result
    reference: Result
    shard: ShardManifest
    divergence: lossless.Divergence | None
    exactness: lossless.Exactness  # the candidate's shard's, which the comparison applied


def _compared(results: Sequence[tuple[Result, ShardManifest, str]], *,
              within_shards: bool = False) -> dict[str, _Compared]:
    """{test id: comparison} of speculative configurations whose greedy outputs meet those of
    their reference configuration measured by another shard (each shard checks its own pairs;
    this is the check an unsharded run would have made); `within_shards`: by any shard."""
    from .configuration import is_speculative

    measured = {(r.case, r.workload, lossless.counterpart(r.nodeid, r.config)): (r, m) for r, m, status in results
                if status in (DONE, MEASURED, FAILED_CHECKS) and r.case is not None and r.outputs is not None}
    out = {}
    for (case, workload, shared), (candidate, shard) in measured.items():
        exactness = lossless.parse_exactness(shard.lossless)
        if not exactness.on or not is_speculative(case.method) or case.method == shard.reference:
            continue
        tps = [c.tp for c in shard.configurations
               if c.family == case.family and c.method == shard.reference]
        found = measured.get((lossless.reference_of(case, shard.reference, tps), workload, shared))
        if found is None or (found[1] is shard and not within_shards):
            continue
        out[candidate.test_id] = _Compared(candidate, found[0], found[1], lossless.compare(
            candidate.config, candidate.outputs, found[0].config, found[0].outputs, exactness,
            _margins_switch(found[1])), exactness)
    return out


def _margins_switch(shard: ShardManifest) -> str | None:
    """The switch a divergence names where the reference's margin is missing, as the shard that
    measured the reference would have (margins are asked of the reference's requests only); a
    shard older than that record may or may not have asked, so the hint says on what it holds."""
    if shard.lossless_margins is None:
        from .options import OPTIONS_BY_NAME

        return f"{OPTIONS_BY_NAME['lossless_margins'].cli} (if the shards did not ask for margins)"
    return shard.margins_switch


def uncounted_across(compared: dict[str, _Compared]) -> list[str]:
    """The line (or none) naming the configurations whose comparison across shards checked only
    the first N characters of some outputs under prefix:N, as a run's summary names its own
    (`lossless.uncounted`): each shard saw no reference to compare them with, so none said it."""
    by_mode: dict[str, list[str]] = {}
    for test_id, check in compared.items():
        if lossless.uncounted(check.candidate.outputs, check.reference.outputs, check.exactness):
            by_mode.setdefault(str(check.exactness), []).append(test_id)
    return [lossless.uncounted_note(lossless.parse_exactness(mode), names) for mode, names in by_mode.items()]


def blind_across(compared: dict[str, _Compared]) -> list[str]:
    """The line (or none) naming the configurations whose comparison across shards passed on texts
    holding U+FFFD, which could not see those characters (`lossless.blind`), as a run's summary
    names its own: each shard saw no reference to compare them with, so none said it."""
    names = [test_id for test_id, check in compared.items()
             if lossless.blind(check.candidate.outputs, check.reference.outputs, check.exactness)]
    return [lossless.blind_note(names)] if names else []


def _divergences(results: Sequence[tuple[Result, ShardManifest, str]], *,
                 within_shards: bool = False) -> dict[str, str]:
    """{test id: message} of the :func:`_compared` configurations whose outputs leave their
    reference's."""
    return {test_id: check.divergence.message()
            for test_id, check in _compared(results, within_shards=within_shards).items()
            if check.divergence is not None}


def _verdicts(compared: dict[str, _Compared],
              tests: dict[str, TestOutcome]) -> dict[str, tuple[str, str, str | None]]:
    """{test id: (outcome, why, the merge's failure or None)} of the tests the comparisons across
    shards decide, as one unsharded run would have ended them: a divergence fails the test,
    unless its shard held its configuration to a known issue; then, and for a known issue whose
    verdict awaited its reference's outputs, `lossless.known_issue_verdict` decides, as a run
    whose reference came after the test does."""
    out: dict[str, tuple[str, str, str | None]] = {}
    for test_id, check in compared.items():
        test = tests.get(check.candidate.nodeid)
        if test is None or test.known_issue is None:
            if check.divergence is not None:
                message = check.divergence.message()
                out[test_id] = ("failed", message, message)
            continue
        if check.divergence is None and test.awaits is None:  # a known issue that passed, not strict
            continue
        outcome, why = lossless.known_issue_verdict(
            test.known_issue, check.reference.config, check.divergence,
            f"the merge, against {check.reference.config} of shard {check.shard.shard}",
            strict=test.known_issue_strict)
        out[test_id] = (outcome, why, f"{test_id}: {why}" if outcome == "failed" else None)
    return out


def not_measured(merged: Merged) -> list[str]:
    """`config: reason` for each configuration test that produced no figures."""
    return [f"{row.config}: {row.outcome}: {row.reason}" for row in merged.rows
            if not row.metrics and row.outcome in ("skipped", "error")]


def unrecorded_gate(merged: Merged) -> str | None:
    """The figures some shard's gate names that no test of any shard recorded, as one run's
    summary says them (`summary.unrecorded_gate`); one line, or None. Said only of a complete
    merge: every shard present and finished, each of whose own recording tests recorded (a
    left-out or failed test may be the one that records it). Shards run under different gates
    each gated their own figures: a figure one shard's gate names is that shard's claim that some
    test records it, and where the shards' gates differ the line names the shards that claimed it."""
    shards = merged.shards
    if len(shards) != merged.count or any(m.finished is None or not m.all_recorded
                                          or m.gate_names is None for m in shards):
        return None
    recorded = {metric.name for result, _, _ in merged.results for metric in result.metrics}
    claims: dict[str, dict[str, list[str]]] = {}  # {metric: {rule: [shards naming it so]}}
    unset_by: set[str] = set()
    for manifest in shards:
        for named in manifest.gate_names or ():
            if named.metric not in recorded:
                claims.setdefault(named.metric, {}).setdefault(named.rule, []).append(str(manifest.shard))
                unset_by.add(named.unset_by)
    if not claims:
        return None
    rules = [rule if len(by) == len(shards) else f"{rule} in shard(s) {', '.join(by)}"
             for metric in claims for rule, by in claims[metric].items()]
    from .summary import unrecorded_line

    return unrecorded_line(rules, unset_by, "the shards' gates name were recorded by no test of any shard")


def not_lossless(merged: Merged) -> list[str]:
    """Test ids of speculative configurations whose outputs leave their reference's, in one shard
    or across two: no reference for a baseline (a shard that measured one before its reference
    journaled it as done and failed the reference's test instead)."""
    return sorted(_divergences(merged.results, within_shards=True))


def left_out(merged: Merged) -> tuple[list[str], list[str]]:
    """(test ids of failed tests, of configurations that are not lossless) whose figures
    :func:`save_baselines` leaves out, as a run's --specdec-save-baseline sorts them
    (`Results.baseline_candidates`): a test that failed, errored or xfailed (a known issue's
    expected failure, lossy or not), as the merged rows end it, is a failed test first."""
    ended = {row.test_id: row.outcome for row in merged.rows}
    failed = sorted({r.test_id for r, _, _ in merged.results if ended.get(r.test_id) in NO_REFERENCE})
    return failed, [test_id for test_id in not_lossless(merged) if test_id not in failed]


#: How the tests end whose figures are no reference for a baseline.
NO_REFERENCE = ("failed", "error", "xfailed")


def shared(merged: Merged) -> list[str]:
    """Test ids of the passed results measured on a shared server (--specdec-allow-shared): their
    rows keep the mark, :func:`save_baselines` leaves them out, and the merge's end counts them."""
    failed, lossy = left_out(merged)
    return sorted({r.test_id for r, _, status in merged.results
                   if status == DONE and r.shared is not None and r.test_id not in failed and r.test_id not in lossy})


def _saved(merged: Merged) -> list[tuple[Result, ShardManifest]]:
    """The results :func:`save_baselines` saves, each with its shard: the finished measurements
    but those :func:`left_out` and :func:`shared` name."""
    failed, lossy = left_out(merged)
    # a test that failed is no reference, whatever its journal's last readable record says
    ended = {(id(m), t.nodeid) for m in merged.shards for t in m.tests if t.outcome in NO_REFERENCE}
    return [(r, m) for r, m, status in merged.results if status == DONE and r.test_id not in lossy
            and r.test_id not in failed and (id(m), r.nodeid) not in ended and r.shared is None]


def save_baselines(merged: Merged, baseline_dir: str | Path,
                   lock: Mapping[str, Any] | None = None) -> tuple[list[Path], dict[str, Any]]:
    """Each shard's journaled figures (as a run's --specdec-save-baseline saves them: every
    finished measurement but those :func:`left_out` names) into the baseline file of its
    hardware key, merged into what is there, with the shard's versions and commit; and the
    durations beside them. `lock`: how long each file's lock is waited for (`baselines.locked`).
    Returns the files written and {hardware key: its baseline file as the save left it}."""
    from . import baselines, durations
    from .shard import DURATIONS_FILE

    written: list[Path] = []
    files: dict[str, baselines.Baselines] = {}
    saved = _saved(merged)
    for manifest in merged.shards:
        mine = [r for r, m in saved if m is manifest]
        if not mine:
            continue
        path = baselines.baseline_path(baseline_dir, manifest.hardware_key)
        try:  # a file broken since check_targets read it (another save, a hand edit) stops it here
            files[manifest.hardware_key] = baselines.save_baselines(
                path, manifest.hardware_key, {r.test_id: r.metrics for r in mine},
                versions=manifest.versions, commit=manifest.commit,
                fingerprints={r.test_id: r.fingerprint for r in mine if r.fingerprint},
                nodeids={r.test_id: r.nodeid for r in mine}, lock=lock)
        except baselines.LockTimeout:
            raise  # its text names --lock-timeout already; the command adds what to do
        except SpecdecUsageError as exc:
            raise _as_merges(exc, merged, manifest.hardware_key) from None
        if path not in written:
            written.append(path)
    if merged.durations():
        written.append(Path(baseline_dir) / DURATIONS_FILE)
        durations.save(written[-1], merged.durations(), REMADE_BY_MERGING_BASELINES, lock=lock)
    return written, files


#: What writes each durations file a merge merges into again, once a broken one is deleted.
REMADE_BY_MERGING_BASELINES = "the next merge with --save-baseline writes it again"


def _as_merges(exc: SpecdecUsageError, merged: Merged, key: str) -> SpecdecUsageError:
    """A baseline file's error (of the file of hardware `key`) with the merge's advice: the
    reader's is a run's, which picks its file by hardware and saves with --specdec-save-baseline."""
    from . import baselines

    if isinstance(exc, baselines.WrongHardwareError):
        shards = ", ".join(str(m.shard) for m in merged.shards if m.hardware_key == key)
        return SpecdecUsageError(
            f"baseline file {exc.source} belongs to hardware {exc.found!r}, but the figures of shard(s) "
            f"{shards}, measured on {key!r}, go there; baselines do not transfer between machines: "
            f"move it aside, or point --baseline-dir elsewhere")
    return SpecdecUsageError(str(exc).replace("--specdec-save-baseline", "merge --save-baseline"))


def baseline_elsewhere(merged: Merged, baseline_dir: str | Path) -> str | None:
    """Why a save into the default `baseline_dir` would miss the shards' baseline, or None: their
    file existed where they ran (a digest recorded) but there is no such file here, so the merge
    runs outside the project (a CI job's workspace, a subfolder) and would start a new baseline
    file beside the one they gated on, which the next run never reads."""
    from . import baselines

    for key in sorted({m.hardware_key for m in merged.shards}):
        compared = [m for m in merged.shards if m.hardware_key == key and m.baseline
                    and m.baseline.get("digest")]
        path = baselines.baseline_path(baseline_dir, key)
        if compared and not path.exists():
            file = compared[0].baseline.get("file")
            shards = ", ".join(str(m.shard) for m in compared)
            return (f"--save-baseline: no {path} here, but shard(s) {shards} compared their figures with "
                    f"{file} of their project, so the save would start a new file that no run reads; run "
                    f"the merge in the project root, or give --baseline-dir the folder that holds "
                    f"{Path(str(file)).name} (a --baseline-dir given is taken as it is)")
    return None


def check_targets(merged: Merged, baseline_dir: str | Path | None) -> None:
    """With --save-baseline (`baseline_dir`), the files the merge will merge into, read now: the
    baseline folder's durations file and the baseline file of each shard's hardware key. A broken
    one stops the merge before it writes anything, so merging again once it is fixed saves no
    figure twice into a baseline. The report folder's durations file is an output, replaced."""
    from . import baselines, durations
    from .shard import DURATIONS_FILE

    if baseline_dir is None:
        return
    durations.load(Path(baseline_dir) / DURATIONS_FILE, REMADE_BY_MERGING_BASELINES)
    for key in sorted({m.hardware_key for m in merged.shards}):
        path = baselines.baseline_path(baseline_dir, key)
        try:
            stored = baselines.load_baselines(path, key)
        except SpecdecUsageError as exc:
            raise _as_merges(exc, merged, key) from None
        owners: dict[str, str] = {}  # two shards' tests of one key would refuse each other too
        for result, manifest in _saved(merged):  # the save would stop half-way through; it saves only these
            if manifest.hardware_key != key:
                continue
            for metric in result.metrics:  # else one key's file saved before another's figure is refused
                baselines.check_saveable(metric, result.test_id, path)
            nodeid = baselines.recorded_nodeid(result.nodeid)
            if nodeid is None:
                continue
            saved_by = baselines.other_test(stored, result.test_id, nodeid) \
                or (owner if (owner := owners.get(result.test_id)) and not baselines.same_test(owner, nodeid)
                    else None)
            if saved_by is not None:
                raise baselines.other_test_error(path, result.test_id, nodeid, saved_by,
                                                 "merge --save-baseline")
            owners[result.test_id] = nodeid


__all__ = ["FAILED_OUTCOMES", "NO_REFERENCE", "Merged", "check_targets", "gates_differ", "left_out", "load", "merge",
           "not_lossless", "not_measured", "save_baselines", "shared", "unrecorded_gate"]
