"""The shard folder: what one shard leaves for `python -m pytest_specdec merge`.

A sharded run's `--specdec-report DIR` is its shard folder. Beside the usual report it holds:

- `journal.jsonl`: the shard's results journal, the source of truth for its figures (a sharded
  run journals there unless `--specdec-journal` is given, which is then copied there at the
  end), so a shard killed and resumed with `--specdec-resume` merges like any other;
- `shard.json`: the shard's identity, written when the run starts (plugin version, shard K/N,
  the sharded matrix and its partition, hardware key, versions, commit, the gate in force and
  the figures it names, the baseline file's digest) and completed when it ends (each test's
  outcome and baseline comparisons, the durations and the configurations it ran only in part,
  so left out of them, pytest's exit status, what cut it short or left tests out, and whether
  every recording test of its part recorded), so the merge can say what one run would have.
  A shard that never ended has no outcomes: the merge says so and what it lacks.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from . import json_text
from .configuration import MatrixCase
from .errors import SpecdecUsageError
from .file_kind import refuse_special
from .fingerprint import Fingerprint, run_setup
from .shard import Shard, ShardPlan
from .whole_file import replace_text, replace_with_copy

if TYPE_CHECKING:
    from .run_limits import RunLimits
    from .session import Results
    from .state import RunState

MANIFEST = "shard.json"
JOURNAL = "journal.jsonl"
FORMAT = "pytest-specdec-shard"
VERSION = 1


def folder(state: RunState) -> Path | None:
    """This run's shard folder: its report folder when sharded; None otherwise."""
    if state.settings.shard is None or not state.settings.report:
        return None
    return state.path(state.settings.report)


def journal_path(state: RunState) -> Path:
    """The results journal: `--specdec-journal`, or the shard folder's when sharded and unset."""
    shard_folder = folder(state)
    if shard_folder is not None and state.settings.origins.get("journal") == "default":
        return shard_folder / JOURNAL
    return state.path(state.settings.journal)


@dataclass(frozen=True)
class TestOutcome:
    """How one test of a shard ended, with its baseline comparisons (Comparison JSON); for a
    known issue, its reason, so the merge holds a divergence across shards to be its expected
    failure, and the reference whose outputs its verdict `awaits` where its test passed before
    anything in the shard could compare them (skipped: `session.unsettled_reason`)."""

    nodeid: str
    outcome: str
    reason: str | None = None
    config: str | None = None
    comparisons: tuple[Mapping[str, Any], ...] = ()
    known_issue: str | None = None
    awaits: str | None = None
    #: whether its known issue was marked strict (a dry run's may not be: `collection.known_issues_strict`)
    known_issue_strict: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"nodeid": self.nodeid, "outcome": self.outcome, "reason": self.reason,
                "config": self.config, "comparisons": list(self.comparisons),
                "known_issue": self.known_issue, "awaits": self.awaits,
                "known_issue_strict": self.known_issue_strict}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> TestOutcome:
        known_issue, awaits = obj.get("known_issue"), obj.get("awaits")
        for key in ("reason", "config"):  # the merge matches and prints them as text
            if obj.get(key) is not None and not isinstance(obj[key], str):
                raise ValueError(f"the {key} {obj[key]!r} of test {obj.get('nodeid')!r} is not text")
        return cls(str(obj["nodeid"]), str(obj["outcome"]), obj.get("reason"), obj.get("config"),
                   tuple(obj.get("comparisons") or ()), None if known_issue is None else str(known_issue),
                   None if awaits is None else str(awaits), obj.get("known_issue_strict") is not False)


@dataclass(frozen=True)
class NamedFigure:
    """A figure a shard's gate names (`summary.named_in_gate`): a claim that some test records it,
    which only the merge of every shard can find false (`merge.unrecorded_gate`)."""

    metric: str
    rule: str  # `Rule.describe()`: `e2e_ms +5% (command line)`
    unset_by: str  # the layer to drop it from (`summary._unset_by`)

    def to_json(self) -> dict[str, str]:
        return {"metric": self.metric, "rule": self.rule, "unset_by": self.unset_by}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> NamedFigure:
        return cls(str(obj["metric"]), str(obj["rule"]), str(obj["unset_by"]))


def _case_json(case: MatrixCase) -> dict[str, Any]:
    return {"family": case.family, "method": case.method, "tp": case.tp, "budget": case.budget}


def _case(obj: Mapping[str, Any]) -> MatrixCase:
    budget = obj.get("budget")
    return MatrixCase(str(obj["family"]), str(obj["method"]), int(obj["tp"]),
                      None if budget is None else int(budget))


@dataclass(frozen=True)
class ShardManifest:
    """`shard.json`: one shard's identity and, once it ended, its outcomes."""

    plugin_version: str
    shard: Shard
    configurations: tuple[MatrixCase, ...]
    assignment: tuple[int, ...]
    matrix_digest: str
    balanced_by: str
    hardware_key: str
    hardware: str
    backend: str
    versions: Mapping[str, str] = field(default_factory=dict)
    commit: str | None = None
    reference: str = "ar"  # the losslessness guard's reference method and mode in this shard
    lossless: str = "off"
    #: whether it asked for the reference's margins (`--specdec-lossless-margins`; None: a shard
    #: older than it), and the switch its divergence messages name (`lossless.margins_switch`):
    #: a merge's comparison across shards names what the reference's shard would have
    lossless_margins: bool | None = None
    margins_switch: str | None = None
    setup: Fingerprint | None = None  # fingerprint.run_setup; None in shards older than it
    started: str = ""
    finished: str | None = None
    exitstatus: int | None = None
    tests: tuple[TestOutcome, ...] = ()
    durations: Mapping[str, float] = field(default_factory=dict)
    #: configurations it ran only some tests of (-k, -x...): left out of `durations`, which a
    #: merge's --save-baseline says as the shard's own save would have
    partial_durations: tuple[str, ...] = ()
    #: the figures its gate names; None in shards older than it (the merge then claims nothing)
    gate_names: tuple[NamedFigure, ...] | None = None
    #: whether every recording test of its part of the matrix recorded, here or resumed
    #: (`summary.shard_all_recorded`): only then may a merge say a named figure went unrecorded
    all_recorded: bool = False
    #: the tolerance in force per figure, where it was set left out (`e2e_ms`: `+5%`, None: not
    #: gated); None in shards older than it. Shards of one run must agree on it (`merge.load`)
    gate: Mapping[str, str | None] | None = None
    #: what its figures were compared with: a digest of the baseline file as the shard started
    #: (None: there was none), and whether the shard saved into it; absent in older shards
    baseline: Mapping[str, Any] | None = None
    #: what cut it short (`run_limits.RunLimits`: "-x", "an interrupt") and the options that left
    #: its tests out ("-k 'b8'"), so the merge says why a configuration has no result
    stopped_by: str | None = None
    left_out_by: tuple[str, ...] = ()
    directory: Path | None = None  # where it was read from; not stored

    @property
    def plan(self) -> ShardPlan:
        return ShardPlan(self.shard, self.configurations, self.assignment, self.balanced_by)

    @property
    def name(self) -> str:
        """`shard 2/4 (path)`, how errors and reports name it."""
        return f"shard {self.shard}" + (f" ({self.directory})" if self.directory else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "version": VERSION, "plugin_version": self.plugin_version,
            "shard": {"index": self.shard.index, "count": self.shard.count},
            "matrix": {"digest": self.matrix_digest,
                       "configurations": [_case_json(c) for c in self.configurations],
                       "assignment": list(self.assignment), "balanced_by": self.balanced_by},
            "hardware": {"key": self.hardware_key, "description": self.hardware},
            "backend": self.backend, "versions": dict(self.versions), "commit": self.commit,
            "lossless": {"reference": self.reference, "mode": self.lossless,
                         **({} if self.lossless_margins is None else
                            {"margins": self.lossless_margins, "margins_switch": self.margins_switch})},
            "setup": self.setup.to_json() if self.setup is not None else None,
            "started": self.started, "finished": self.finished, "exitstatus": self.exitstatus,
            "tests": [t.to_json() for t in self.tests], "durations": dict(self.durations),
            "partial_durations": list(self.partial_durations),
            "gate_names": None if self.gate_names is None else [g.to_json() for g in self.gate_names],
            "all_recorded": self.all_recorded,
            "gate": None if self.gate is None else dict(self.gate),
            "baseline": None if self.baseline is None else dict(self.baseline),
            "stopped_by": self.stopped_by, "left_out_by": list(self.left_out_by),
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], directory: Path | None = None) -> ShardManifest:
        matrix = obj["matrix"]
        exitstatus = obj.get("exitstatus")
        if exitstatus is not None and (isinstance(exitstatus, bool) or not isinstance(exitstatus, int)):
            raise ValueError(f"exitstatus {exitstatus!r} is not pytest's exit status (an integer)")
        if not isinstance(obj.get("durations") or {}, Mapping):
            raise ValueError(f"durations {obj['durations']!r} is not an object of seconds per "
                             f"configuration")
        partial = obj.get("partial_durations") or []  # absent in shards older than it
        if not isinstance(partial, list) or not all(isinstance(c, str) for c in partial):
            raise ValueError(f"partial_durations {partial!r} is not a list of configuration ids")
        return cls(
            plugin_version=str(obj["plugin_version"]),
            shard=Shard(int(obj["shard"]["index"]), int(obj["shard"]["count"])),
            configurations=tuple(_case(c) for c in matrix["configurations"]),
            assignment=tuple(int(i) for i in matrix["assignment"]),
            matrix_digest=str(matrix["digest"]), balanced_by=str(matrix.get("balanced_by", "")),
            hardware_key=str(obj["hardware"]["key"]),
            hardware=str(obj["hardware"].get("description", "")),
            backend=str(obj.get("backend", "")), versions=dict(obj.get("versions") or {}),
            commit=obj.get("commit"), started=str(obj.get("started", "")),
            reference=str((obj.get("lossless") or {}).get("reference", "ar")),
            lossless=str((obj.get("lossless") or {}).get("mode", "off")),
            lossless_margins=_margins(obj.get("lossless") or {}),
            margins_switch=_text((obj.get("lossless") or {}).get("margins_switch"), "lossless.margins_switch"),
            setup=Fingerprint.from_json(obj.get("setup")),
            finished=obj.get("finished"), exitstatus=exitstatus,
            tests=tuple(TestOutcome.from_json(t) for t in obj.get("tests") or ()),
            durations={str(k): float(v) for k, v in (obj.get("durations") or {}).items()},
            partial_durations=tuple(partial),
            gate_names=None if obj.get("gate_names") is None
            else tuple(NamedFigure.from_json(g) for g in obj["gate_names"]),
            all_recorded=obj.get("all_recorded") is True, gate=_gate(obj.get("gate")),
            baseline=obj["baseline"] if isinstance(obj.get("baseline"), Mapping) else None,
            stopped_by=None if obj.get("stopped_by") is None else str(obj["stopped_by"]),
            left_out_by=tuple(str(o) for o in obj.get("left_out_by") or ()),
            directory=directory,
        )


def named_figures(state: RunState) -> tuple[NamedFigure, ...]:
    """The figures this run's gate names, as the merge reads them back."""
    from .summary import _unset_by, named_in_gate

    return tuple(NamedFigure(rule.metric, rule.describe(), _unset_by(rule))
                 for rule in named_in_gate(state.tolerances))


def gate_in_force(state: RunState) -> dict[str, str | None]:
    """The tolerance in force per figure (`+5%`; None: not gated), not where it was set: two
    shards that set one gate in different layers gated alike."""
    out: dict[str, str | None] = {}
    for rule in state.tolerances.rules():
        out[rule.metric] = None if rule.tolerance is None else \
            f"{'-' if rule.direction == 'higher' else '+'}{rule.tolerance}"
    return out


def _margins(obj: Mapping[str, Any]) -> bool | None:
    """Whether the shard asked for margins; None where it does not say (a shard older than it)."""
    asked = obj.get("margins")
    if asked is not None and not isinstance(asked, bool):
        raise ValueError(f"lossless.margins {asked!r} is not true or false")
    return asked


def _text(value: Any, name: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{name} {value!r} is not a string or null")
    return value


def _gate(obj: Any) -> dict[str, str | None] | None:
    if obj is None:
        return None
    if not isinstance(obj, Mapping) or not all(v is None or isinstance(v, str) for v in obj.values()):
        raise ValueError(f"gate {obj!r} is not an object of tolerances per figure")
    return {str(k): v for k, v in obj.items()}


def baseline_identity(state: RunState) -> dict[str, Any]:
    """The baseline file this shard compares with, as it starts: its digest (None where there is
    none or it cannot be read: the gate says so itself) and whether this shard saves into it."""
    import hashlib

    from .relpaths import relative_path

    try:
        digest = hashlib.sha256(state.baseline_path.read_bytes()).hexdigest()[:16]
    except OSError:
        digest = None
    return {"file": relative_path(state.baseline_path, state.config.root), "digest": digest,
            "saves": bool(state.settings.save_baseline)}


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _write(directory: Path, manifest: ShardManifest) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    replace_text(directory / MANIFEST, json.dumps(manifest.to_json(), indent=2) + "\n", durable=True)


def start(plan: ShardPlan, state: RunState, directory: Path) -> ShardManifest:
    """Write the shard's identity before any test runs, so even a killed shard is recognised."""
    from . import __version__
    from .baselines import collect_versions, git_commit
    from .lossless import margins_switch
    from .relpaths import relative

    manifest = ShardManifest(
        plugin_version=__version__, shard=plan.shard, configurations=plan.configurations,
        assignment=plan.assignment, matrix_digest=plan.matrix_digest,
        balanced_by=relative(plan.balanced_by, state.config.root), hardware_key=state.hardware.key,
        hardware=state.hardware.describe(), backend=state.backend.name,
        versions=collect_versions(), commit=git_commit(state.config.root),
        reference=state.settings.reference, lossless=str(state.lossless),
        lossless_margins=bool(state.settings.lossless_margins), margins_switch=margins_switch(state),
        setup=run_setup(state),
        started=_now(), gate_names=named_figures(state), gate=gate_in_force(state),
        baseline=baseline_identity(state))
    try:
        _write(directory, manifest)
    except OSError as exc:  # before any test: nothing measured is lost, the run stops here
        from .write_failure import unwritable

        raise SpecdecUsageError(f"the shard folder cannot be written, so this shard could not be merged: "
                                f"{unwritable(exc, directory / MANIFEST, state.settings.setter('report'))}") from None
    return manifest


def outcomes(results: Results, plan: ShardPlan) -> tuple[TestOutcome, ...]:
    """Each test's outcome as the controller saw it, with the comparisons of its figures; a
    test resumed from the journal passed (its figures passed this run's checks, which compared
    them: `resume.py`), though pytest skipped it; a test whose verdict came after it ended
    (`Results.late_verdicts`), resumed or not, has that verdict."""
    from .collection import configuration_in_nodeid, known_issues_strict

    out = []
    nodeids = list(results.outcomes) + [n for n in results.results if n not in results.outcomes]
    late = results.late_verdicts()
    unsettled = results.unsettled_known_issues()
    resumed = {r.nodeid: r for r in results.resumed()}
    for nodeid in nodeids:
        outcome, reason = results.outcomes.get(nodeid, ("passed", None))
        result = results.results.get(nodeid)
        if nodeid in resumed:
            outcome, reason, result = "passed", None, resumed[nodeid]
        comparisons = tuple(c.to_json() for c in result.comparisons) if result else ()
        recorded = result or results.resumed_results.get(nodeid)
        case = recorded.case if recorded else None
        issue = results.state.known_issue(case.method, case.tp, case.budget) if case else None
        test = TestOutcome(nodeid, outcome, reason, configuration_in_nodeid(nodeid, plan.param_ids),
                           comparisons, known_issue=issue.reason if issue else None,
                           known_issue_strict=known_issues_strict(results.state))
        if nodeid in late:  # it ended before the reference's test could compare it
            outcome, reason = late[nodeid]
            test = replace(test, outcome=outcome, reason=reason)
        elif nodeid in unsettled:  # its reference is another shard's, or left out of the run
            test = replace(test, awaits=unsettled[nodeid][2].param_id)
        out.append(test)
    return tuple(out)


def finish(manifest: ShardManifest, state: RunState, directory: Path, results: Results,
           durations: Mapping[str, float], exitstatus: int,
           previous: ShardManifest | None = None, partial: Iterable[str] = (),
           all_recorded: bool = False, limits: RunLimits | None = None) -> ShardManifest:
    """Complete shard.json at the end of the run; copy an explicit journal into the folder.
    `previous`: the manifest a resumed run found, whose durations its resumed tests keep;
    `partial`: the configurations this run measured only in part (`Durations.complete`)."""
    journal = journal_path(state)
    # realpath: Path.resolve raised RuntimeError on a link loop there before Python 3.13
    if journal.exists() and os.path.realpath(journal) != os.path.realpath(directory / JOURNAL):
        # whole or not at all: a copy cut short (a full disk) leaves the earlier one for the merge;
        # durable: on the disk before shard.json says finished, or a power cut leaves a finished
        # manifest beside an older or empty copy, which the merge would trust
        replace_with_copy(directory / JOURNAL, journal, durable=True)
    kept = {**(previous.durations if previous else {}), **durations}
    done = replace(manifest, finished=_now(), exitstatus=int(exitstatus),
                   tests=outcomes(results, manifest.plan), durations=kept,
                   partial_durations=tuple(sorted(set(partial) - set(kept))), all_recorded=all_recorded,
                   stopped_by=limits.stopped_by if limits else None,
                   left_out_by=tuple(o for o in (limits.left_out_by if limits else ())
                                     if o != limits.stopped_by))
    _write(directory, done)
    return done


@dataclass
class Recorder:
    """The controller's shard folder: its manifest started with the run and finished with it."""

    state: RunState
    plan: ShardPlan
    directory: Path
    manifest: ShardManifest | None = None
    previous: ShardManifest | None = None  # what the interrupted run left, under --specdec-resume

    @classmethod
    def of(cls, state: RunState, plan: ShardPlan | None) -> Recorder | None:
        directory = folder(state)
        return None if plan is None or directory is None else cls(state, plan, directory)

    def start(self) -> None:
        if self.state.settings.resume and (self.directory / MANIFEST).is_file():
            try:
                self.previous = read(self.directory)
            except SpecdecUsageError:
                self.previous = None  # damaged: its tests are measured again anyway
        self.manifest = start(self.plan, self.state, self.directory)

    def finish(self, results: Results, durations: Mapping[str, float], exitstatus: int,
               partial: Iterable[str] = (), all_recorded: bool = False,
               limits: RunLimits | None = None) -> None:
        if self.manifest is not None:
            self.manifest = finish(self.manifest, self.state, self.directory, results, durations,
                                   exitstatus, self.previous, partial, all_recorded, limits)


def read(directory: str | Path) -> ShardManifest:
    """A shard folder's manifest; anything else is a usage error saying what a shard folder is."""
    directory = Path(directory)
    path = directory / MANIFEST
    how = "run pytest with --specdec-shard=K/N --specdec-report=DIR and merge DIR"
    if not directory.exists():  # a mistyped name, or a glob (`shard-*`) the shell matched to nothing
        raise SpecdecUsageError(f"{directory} does not exist; give each shard's --specdec-report folder ({how})")
    if directory.is_file():  # a glob of the manifests (`shard-*/shard.json`), or another file
        if directory.name == MANIFEST:
            raise SpecdecUsageError(f"{directory} is a shard's manifest, not its folder; give the folder, "
                                    f"{directory.parent}")
        raise SpecdecUsageError(f"{directory} is a file, not a shard folder; give each shard's --specdec-report "
                                f"folder ({how})")
    refuse_special(path, "shard manifest")
    if not path.is_file():
        raise SpecdecUsageError(f"{directory} is not a shard folder: it has no {MANIFEST} ({how})")
    try:
        obj = json_text.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SpecdecUsageError(f"{path} cannot be read ({exc}); re-run that shard") from None
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise SpecdecUsageError(f"{path} is not a pytest-specdec shard manifest ({how})")
    if not isinstance(obj.get("version"), int) or obj["version"] > VERSION:
        raise SpecdecUsageError(f"{path} has format version {obj.get('version')!r}, newer than "
                                f"this pytest-specdec reads ({VERSION}); upgrade pytest-specdec")
    try:
        return ShardManifest.from_json(obj, directory)
    except (AttributeError, KeyError, TypeError, ValueError, OverflowError) as exc:  # Overflow: int(1e999)
        raise SpecdecUsageError(f"{path} is damaged ({type(exc).__name__}: {exc}); re-run that "
                                f"shard") from None


__all__ = ["FORMAT", "JOURNAL", "MANIFEST", "VERSION", "NamedFigure", "Recorder", "ShardManifest", "TestOutcome", "finish",
           "folder", "journal_path", "outcomes", "read", "start"]
