"""From the configured matrices to marked, ordered test items.

Each family's matrix becomes parameters of tests that ask for `specdec_spec` (or the server built
from it). Items carry the family's marker, `gpus(tp)` and `specdec(method, tp, budget)`;
collection then turns hardware mismatches into skips with a reason, known issues into strict
xfails, and orders items so each configuration boots once and each reference configuration runs
before the configurations the losslessness guard holds to it. No `xdist_group` mark: under xdist the
scheduler reads the configuration from the node id, and without xdist the mark would be unknown
(an error under --strict-markers).
"""

from __future__ import annotations

import os
from typing import Iterable

import pytest

from .configuration import METHODS, MatrixCase, is_count, is_speculative, marker_problem
from .hardware import GPU_FAMILIES, Hardware
from .lossless import reference_of
from .state import RunState

MARKERS = (
    "blackwell: targets Blackwell GPUs (sm_100/sm_120); skipped elsewhere with the hardware found",
    "hopper: targets Hopper GPUs (sm_90); skipped elsewhere with the hardware found",
    "ada: targets Ada GPUs (sm_89); skipped elsewhere with the hardware found",
    "ampere: targets Ampere GPUs (sm_80/sm_86); skipped elsewhere with the hardware found",
    "cpu: a configuration of the cpu matrix (the embedded engine, on any machine); selects them: -m cpu",
    "gpu: needs a real GPU (not a simulated one); skipped on a CPU-only machine",
    "gpus(n): needs at least n GPUs in the inventory; skipped with fewer",
    "specdec(method=..., tp=..., budget=...): the speculative-decoding configuration a test "
    "exercises; known issues match on it",
)


def matrix_cases(state: RunState) -> list[MatrixCase]:
    """Every configured matrix's cells, less the TP sizes --specdec-tp leaves out."""
    sizes = state.settings.tp
    return [MatrixCase(matrix.family, method, tp, budget)
            for matrix in state.config.matrices.values()
            for method, tp, budget in matrix.entries() if sizes is None or tp in sizes]


def check_tp_filter(state: RunState) -> None:
    """A --specdec-tp that leaves no configuration of any matrix would run nothing, green; a size
    no matrix has would drop out unseen, the run green on fewer sizes than asked for."""
    sizes = state.settings.tp
    matrices = state.config.matrices.values()
    if sizes is None or not matrices:
        return
    where = state.settings.source("tp")
    have = "; ".join(f"{m.family} tp = {list(m.tp)}" for m in matrices)
    if not matrix_cases(state):
        raise pytest.UsageError(
            f"pytest-specdec: {where} {','.join(map(str, sizes))} selects no configuration: the "
            f"matrices have {have}; pick sizes from those, or add the size to a matrix")
    missing = [size for size in sizes if not any(size in m.tp for m in matrices)]
    if missing:
        origin = state.settings.origins["tp"]
        given = ",".join(map(str, sizes)) if origin in ("command line", "ini") else list(sizes)
        raise pytest.UsageError(f"pytest-specdec: {where} {given} lists {', '.join(map(str, missing))}, which "
                                f"no matrix has ({have}), so {'it' if len(missing) == 1 else 'they'} would "
                                f"not run: " + _tp_filter_fix(state, sizes, missing))


def _tp_filter_fix(state: RunState, sizes: tuple[int, ...], missing: list[int]) -> str:
    """At the top of [tool.specdec], `tp = [1, 4]` reads as setting the sizes; say it selects."""
    kept = [size for size in sizes if size not in missing]
    origin = state.settings.origins["tp"]
    if origin == "command line":
        return (f"it selects among the matrices' sizes and adds none; add the size to a matrix's tp, "
                f"or drop it: --specdec-tp={','.join(map(str, kept))}")
    if origin == "ini":
        said, sizes_text = state.settings.said("tp"), ",".join(map(str, kept))
        # where `-o` gave it, the fix is that `-o`, not an ini file the project may not have
        drop = f"{said}={sizes_text}" if said.startswith("-o ") else f"specdec_tp = \"{sizes_text}\""
        return (f"it selects among the matrices' sizes and adds none; add the size to a matrix's tp, "
                f"or drop it: {drop}")
    matrix = next(iter(state.config.matrices.values()))
    table = f"tool.specdec.matrix.{matrix.family}" if state.config.source.startswith("pyproject.toml") \
        else f"matrix.{matrix.family}"
    wanted = sorted({*matrix.tp, *missing})
    return (f"at the top, tp only selects among the matrices' sizes; to run at "
            f"{', '.join(map(str, missing))}, set the sizes in a matrix, e.g. [{table}] tp = {wanted}, "
            f"and remove tp from the top; or keep tp = {kept}")


def _marker_text(marker: pytest.Mark) -> str:
    """`@pytest.mark.gpus('two')`: the marker as the user wrote it."""
    args = [repr(a) for a in marker.args] + [f"{k}={v!r}" for k, v in marker.kwargs.items()]
    return f"@pytest.mark.{marker.name}({', '.join(args)})"


def gpus_needed(item: pytest.Item, marker: pytest.Mark) -> int:
    """The n of `gpus(n)` (or `gpus(n=...)`); anything else stops the run naming the test."""
    values = list(marker.args) + list(marker.kwargs.values())
    if len(values) == 1 and set(marker.kwargs) <= {"n"} and is_count(values[0]):
        return values[0]
    raise pytest.UsageError(
        f"pytest-specdec: {item.nodeid}: {_marker_text(marker)} is not a GPU count; write "
        f"@pytest.mark.gpus(n) with n a whole number of GPUs, 1 or more, e.g. gpus(2)")


def specdec_configuration(item: pytest.Item, marker: pytest.Mark
                          ) -> tuple[str | None, int, int | None]:
    """(method, tp, budget) of `specdec(method=..., tp=..., budget=...)`, checked, as known
    issues match on them; anything else stops the run naming the test."""
    kwargs = marker.kwargs
    problem = "takes keywords only" if marker.args else marker_problem(kwargs)
    if problem is None:
        return kwargs.get("method"), kwargs.get("tp", 1), kwargs.get("budget")
    raise pytest.UsageError(
        f"pytest-specdec: {item.nodeid}: {_marker_text(marker)} {problem}; write "
        f"@pytest.mark.specdec(method=..., tp=..., budget=...) with method one of "
        f"{', '.join(METHODS)}, e.g. specdec(method=\"ddtree\", tp=1, budget=16)")


def case_marks(case: MatrixCase) -> list[pytest.MarkDecorator]:
    marks = [pytest.mark.specdec(method=case.method, tp=case.tp, budget=case.budget)]
    if case.family in GPU_FAMILIES:
        marks.append(getattr(pytest.mark, case.family))
        marks.append(pytest.mark.gpus(case.tp))
        return marks
    marks.append(pytest.mark.cpu)  # `-m cpu` selects the cpu matrix, as `-m blackwell` a family's
    if case.tp > 1:
        marks.append(pytest.mark.gpus(case.tp))
    return marks


def parametrize(metafunc: pytest.Metafunc, state: RunState) -> None:
    """Matrix cells for tests that need a server; configured workloads for those that run one."""
    if "specdec_spec" in metafunc.fixturenames:
        metafunc.parametrize(
            "specdec_spec",
            [pytest.param(case, marks=case_marks(case), id=case.param_id)
             for case in matrix_cases(state)],
            indirect=True,
        )
    if "specdec_workload" in metafunc.fixturenames:
        metafunc.parametrize(
            "specdec_workload",
            [pytest.param(w, id=w.name) for w in state.config.workloads],
            indirect=True,
        )


def uses_specdec(item: pytest.Item) -> bool:
    """Whether a test asks for one of the plugin's fixtures (they all start with `specdec_`)."""
    return any(name.startswith("specdec_") for name in getattr(item, "fixturenames", ()))


def needs_server(item: pytest.Item) -> bool:
    """Whether a test will ask for a server (it requests one, is not marked to skip and is no
    stand-in for figures resumed from the journal)."""
    return "specdec_server" in getattr(item, "fixturenames", ()) and will_run(item) \
        and not stands_in(item)


def server_cases(items: Iterable[pytest.Item]) -> list[MatrixCase]:
    """The configurations of the tests among `items` that will ask for a server."""
    return [case for item in items if needs_server(item) and (case := case_of(item)) is not None]


_STAND_IN_KEY = pytest.StashKey[bool]()
#: Attribute of a stand-in's reports (`mark_stand_in`), which xdist sends along to the controller.
STAND_IN = "specdec_stand_in"


def mark_stand_in(item: pytest.Item) -> None:
    """`item` runs without its fixtures, judged on figures resumed from the journal (resume.py)."""
    item.stash[_STAND_IN_KEY] = True


def stands_in(item: pytest.Item) -> bool:
    """Whether `item` runs as a stand-in for figures resumed from the journal (`mark_stand_in`)."""
    return item.stash.get(_STAND_IN_KEY, False)


def can_record(item: pytest.Item) -> bool:
    """Whether a test can record a result: it asks for `specdec_record` and pytest will call it
    (a test resumed from the journal is marked to skip), and its server is not made to crash as
    its known issue says (a dry run's). Known at collection; whether it records is not (it may
    skip itself, fail first or record nothing), so this counts what can."""
    return ("specdec_record" in getattr(item, "fixturenames", ()) and will_run(item)
            and not item.stash.get(_PLAYED_CRASH_KEY, False))


_COUNTED_KEY = pytest.StashKey[bool]()


def count_recording(items: Iterable[pytest.Item]) -> int:
    """How many of `items` can record: the total of the `[done/total]` progress lines. Each item
    counted is marked, so a test that records uncounted (it fetched `specdec_record` with
    `request.getfixturevalue`, or ran though marked to skip) is told apart as it runs (`counted`)."""
    total = 0
    for item in items:
        if can_record(item):
            item.stash[_COUNTED_KEY] = True
            total += 1
    return total


_COLLECTED_KEY = pytest.StashKey["set[str]"]()


def note_collected(config: pytest.Config, names: Iterable[str]) -> None:
    """Keep baseline keys of recording tests this run collected (`recording_names`), deselected
    ones too (-k, -m, --lf, a shard's split): an entry of one of them is that test's own, never a
    misspelling for a "did you mean" to suggest."""
    config.stash.setdefault(_COLLECTED_KEY, set()).update(names)


def recording_names(items: Iterable[pytest.Item]) -> set[str]:
    """The baseline keys (`Recorder.test_id`) of the recording tests among `items`."""
    return {item.name for item in items if "specdec_record" in getattr(item, "fixturenames", ())}


def collected_tests(config: pytest.Config) -> set[str]:
    """What `note_collected` kept in this process (under xdist, the controller's holds its
    workers')."""
    return set(config.stash.get(_COLLECTED_KEY, ()))


_CONFIGURED_KEY = pytest.StashKey["set[str]"]()


def configured_ids(items: Iterable[pytest.Item]) -> set[str]:
    """The node ids of the tests among `items` that the durations count (the `specdec` keyword, as
    the matrix's tests have), recording or not: each one's seconds are part of its configuration's.
    Node ids, not names: tests that record nothing may share a name across files."""
    return {item.nodeid for item in items if "specdec" in item.keywords}


def note_configured(config: pytest.Config, nodeids: Iterable[str]) -> None:
    """Keep `configured_ids` of the tests this run collected, deselected ones too: a
    configuration one of whose tests did not run took part of its cost (`Durations.complete`)."""
    config.stash.setdefault(_CONFIGURED_KEY, set()).update(nodeids)


def configured_tests(config: pytest.Config) -> set[str]:
    """What `note_configured` kept in this process (under xdist, the controller's holds its
    workers')."""
    return set(config.stash.get(_CONFIGURED_KEY, ()))


_SHARED_KEY = pytest.StashKey[str]()


def shared_baseline_keys(items: Iterable[pytest.Item]) -> str | None:
    """Where two recording tests of different files or classes have one name and parameters, the
    one key a baseline file (and the gate) knows a test by (`Recorder.test_id`): each would be
    compared with, and saved over, the other's figures. The message naming them, also kept on
    each such item (`shared_key_error`), or None."""
    nodeids: dict[str, list[str]] = {}
    for item in items:
        if "specdec_record" in getattr(item, "fixturenames", ()):
            nodeids.setdefault(item.name, []).append(item.nodeid)
    shared = {name: ids for name, ids in nodeids.items() if len(set(ids)) > 1}
    if not shared:
        return None
    lines = [f"{', '.join(sorted(set(ids)))} share the baseline key {name}"
             for name, ids in sorted(shared.items())]
    message = ("; ".join(lines) + ": a baseline file keys a test by its name and parameters, not "
               "its file or class, so each would be compared with, and saved over, the other's "
               "figures; rename one of the test functions")
    for item in items:
        if item.name in shared:
            item.stash[_SHARED_KEY] = message
    return message


def shared_key_error(item: pytest.Item) -> str | None:
    """`shared_baseline_keys`' message where `item` is one of the tests it names."""
    return item.stash.get(_SHARED_KEY, None)


def counted(item: pytest.Item) -> bool:
    """Whether `count_recording` counted this test in this process."""
    return item.stash.get(_COUNTED_KEY, False)


def will_run(item: pytest.Item) -> bool:
    """Whether pytest will call the test: no skip mark, no skipif whose condition holds, no
    xfail(run=False). A condition that cannot be evaluated counts as running: the test reports
    that error itself."""
    if item.get_closest_marker("skip") is not None:
        return False
    try:  # pytest's own reading of its marks (stable since pytest 6)
        from _pytest.skipping import evaluate_skip_marks, evaluate_xfail_marks

        if evaluate_skip_marks(item) is not None:
            return False
        xfail = evaluate_xfail_marks(item)
        return xfail is None or xfail.run or item.config.option.runxfail
    except Exception:
        return True


def family_skip_reason(family: str, state: RunState) -> str | None:
    """Why this host does not run a family's tests, or None: a GPU family's run on its GPUs
    only, and the cpu matrix on a GPU host whose family has a matrix only with
    --specdec-cpu-matrix (one matrix per host, so a report has no row twice)."""
    hw = state.hardware
    if family == "cpu" and hw.family in state.config.matrices and hw.family != "cpu" \
            and not state.settings.cpu_matrix:
        return (f"the cpu matrix runs on a {hw.family} host only with --specdec-cpu-matrix; "
                f"this host runs its {hw.family} matrix")
    if family in GPU_FAMILIES and hw.family != family:
        # a GPU of that family the run left out (another model, MIG mode) says how to run on it
        # (or none used at all: `no GPU` alone would hide the host's GPUs)
        there = hw.none_usable or any(gpu.family == family for gpu in hw.left_out)
        return f"needs a {family.capitalize()} GPU; found: {hw.describe()}" + (f"; {hw.left_out_note}" if there else "")
    return None


def skip_reason(item: pytest.Item, state: RunState) -> str | None:
    """Why this item cannot run on this hardware, or None."""
    hw = state.hardware
    marker = item.get_closest_marker("gpus")
    needed = gpus_needed(item, marker) if marker is not None else 0  # checked on every test
    case = case_of(item)
    families = [case.family] if case is not None else []
    families += [family for family in GPU_FAMILIES if item.get_closest_marker(family)]
    for family in families:
        reason = family_skip_reason(family, state)
        if reason is not None:
            return reason
    if item.get_closest_marker("gpu") and hw.physical_gpus == 0:
        return "needs a GPU; found: no GPU" + (" (the simulated arch is for dry runs only)"
                                               if hw.simulated else "") + _why_none(hw)
    if hw.count < needed:
        reason = f"needs {needed} GPU{'s' if needed > 1 else ''}; found: {hw.describe()}"
        if state.settings.gpus is None and hw.left_out and needed <= hw.physical_gpus + len(hw.left_out):
            reason += f"; {hw.left_out_note}"  # the host has them, but of another model or in MIG mode
        elif hw.physical_gpus == 0 and state.settings.origins["gpus"] == "default":
            # no GPU here and no inventory chosen: the user may not know the embedded engine can simulate them
            reason += _why_none(hw) + f"; {state.settings.setter('gpus')}={needed} simulates {'them' if needed > 1 else 'it'} on the CPU"
        elif state.settings.gpus is None and hw.physical_gpus < needed <= hw.host_gpus:
            # the host has them, but a CUDA_VISIBLE_DEVICES the user may not have set (Slurm) hides them
            reason += (f"; CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')} gives this run "
                       f"{hw.physical_gpus} of the host's {hw.host_gpus}: give it {needed} to run this test")
        return reason
    return None


def _why_none(hw: Hardware) -> str:
    """`; GPUs 0,1 (...) left out, in MIG mode: ...`: why a host with GPUs runs on none, as the
    header says it; "" where it has none, or the run uses some."""
    return f"; {hw.left_out_note}" if hw.none_usable else ""


def known_issue_reason(item: pytest.Item, state: RunState) -> str | None:
    """Why the configuration in the item's `specdec` marker is expected to fail here, or None."""
    case = case_of(item)
    if case is not None:  # a matrix test runs its parameter's configuration, whatever else it says
        for marker in item.iter_markers("specdec"):
            if specdec_configuration(item, marker) != (case.method, case.tp, case.budget):
                raise pytest.UsageError(
                    f"pytest-specdec: {item.nodeid}: {_marker_text(marker)} names another "
                    f"configuration than the matrix's {case.spec_id} this test runs, and known issues "
                    f"would match the marker's; remove the marker (a matrix test's configuration is "
                    f"its parameter)")
        issue = state.known_issue(case.method, case.tp, case.budget)
        return issue.reason if issue is not None else None
    marker = item.get_closest_marker("specdec")
    if marker is None:
        return None
    issue = state.known_issue(*specdec_configuration(item, marker))
    return issue.reason if issue is not None else None


def modify_items(items: list[pytest.Item], state: RunState) -> None:
    """Skips and known issues from the markers. A marker mistake stops the run (a `UsageError`,
    which an xdist worker hands its controller: `plugin.WorkerStop`)."""
    for item in items:
        reason = skip_reason(item, state)
        issue = known_issue_reason(item, state)  # also checks the marker of a test that skips
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
        elif issue is not None:
            strict = known_issues_strict(state, item)
            why = "" if strict else (f" (a dry run on the {state.backend} backend does not reproduce it"
                                     + (" in a test the plugin serves no server to"
                                        if state.backend.reproduces_known_issues else "")
                                     + ": an XPASS here does not mean it is fixed)")
            item.add_marker(pytest.mark.xfail(reason=f"known issue: {issue}{why}", strict=strict))
            if plays_known_crash(item, state):
                item.stash[_PLAYED_CRASH_KEY] = True
    items[:] = order_by_configuration(items, state)


#: Marks a test whose server the backend makes crash as its known issue says (a dry run's).
_PLAYED_CRASH_KEY = pytest.StashKey[bool]()


def plays_known_crash(item: pytest.Item, state: RunState) -> bool:
    """Whether `item`'s server crashes on purpose: a dry run on a backend that plays a matrix
    configuration's known issue out (its engine's fault injection), so the test never records."""
    case = case_of(item)
    return (state.dry_run and state.backend.reproduces_known_issues and serves_its_configuration(item)
            and case is not None and state.known_issue(case.method, case.tp, case.budget) is not None)


def serves_its_configuration(item: pytest.Item) -> bool:
    """Whether `item` is a matrix configuration's test that asks for its server: only that server
    has a dry run's known crash injected; a test of only `specdec_spec` starts none."""
    return case_of(item) is not None and "specdec_server" in getattr(item, "fixturenames", ())


def known_issues_strict(state: RunState, item: pytest.Item | None = None) -> bool:
    """Whether this run marks known issues strict (`item`'s, where given): a dry run's XPASS says
    the bug is fixed only where the backend plays the failure out, which it does in a matrix
    configuration's server, never in a test without one (a test of one's own that only carries a
    `specdec` marker, or a matrix test of `specdec_spec` alone)."""
    if not state.dry_run:
        return True
    return state.backend.reproduces_known_issues and (item is None or serves_its_configuration(item))


def skip_other_configurations(items: list[pytest.Item], state: RunState) -> None:
    """Mark to skip, as collected, the tests whose server would be another configuration than the
    one this run has (an attached server's): they are then not counted among those that can
    record. A stand-in for resumed figures needs no server and keeps them. A server that is none
    of the configured ones stops the run at collection finish (`wants_server`), in an xdist worker
    too: not a green run of skips."""
    for item in items:
        case = case_of(item)
        if case is None or "specdec_server" not in getattr(item, "fixturenames", ()) \
                or not will_run(item) or stands_in(item):
            continue
        reason = state.backend.other_configuration(case, state)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
            item.stash[_OTHER_CONFIGURATION_KEY] = True


_OTHER_CONFIGURATION_KEY = pytest.StashKey[bool]()


def wants_server(item: pytest.Item) -> bool:
    """Whether a test will ask for a server, or would but for the attached server being another
    configuration (`skip_other_configurations`): a run of those alone still checks that server."""
    return needs_server(item) or item.stash.get(_OTHER_CONFIGURATION_KEY, False)


def case_of(item: pytest.Item) -> MatrixCase | None:
    """The matrix cell an item is parametrized with, if any."""
    callspec = getattr(item, "callspec", None)
    case = callspec.params.get("specdec_spec") if callspec else None
    return case if isinstance(case, MatrixCase) else None


def configuration_in_nodeid(nodeid: str, param_ids: Iterable[str]) -> str | None:
    """Which configuration (its param id, also its xdist group) a node id runs, or None.

    For the xdist controller, which sees node ids but no items: the configuration's id is one
    `-`-separated run of the id's parameter part (`test_generation[ddtree-tp1-b16-chat]`); the
    longest match wins, so `ddtree-tp1-b1` never claims `ddtree-tp1-b16`.
    """
    name = nodeid.rsplit("::", 1)[-1]
    if not name.endswith("]") or "[" not in name:
        return None
    params = f"-{name[name.index('[') + 1:-1]}-"
    for param_id in sorted(param_ids, key=len, reverse=True):
        if f"-{param_id}-" in params:
            return param_id
    return None


def reference_case(case: MatrixCase, state: RunState) -> MatrixCase | None:
    """The configuration whose outputs `case`'s must reproduce: the reference method in the
    same family, at the same TP where the matrix has it, else at the family's first TP."""
    matrix = state.config.matrices.get(case.family)
    method = state.settings.reference
    if matrix is None or method not in matrix.methods:
        return None
    return reference_of(case, method, matrix.tp)


def checked_against(case: MatrixCase, state: RunState) -> MatrixCase | None:
    """The reference configuration the losslessness guard holds `case`'s outputs to, or None
    (the guard is off, `case` is the reference or does not speculate, its family has no
    reference)."""
    if not state.lossless.on or not is_speculative(case.method) or case.method == state.settings.reference:
        return None
    return reference_case(case, state)


def order_by_configuration(items: Iterable[pytest.Item],
                           state: RunState | None = None) -> list[pytest.Item]:
    """Stable sort that pulls each configuration's items together at its first appearance, and,
    given the run's `state`, each reference configuration to just before the first
    configuration checked against it.

    A server boots once per configuration and stays up only while its tests run, so at most one
    server per GPU set is alive. A speculative configuration measured after its reference is
    checked by its own test, which fails where it is not lossless; measured before, only the
    reference's test could find it out.
    """
    items = list(items)
    first_seen: dict[str, int] = {}
    cases: dict[str, MatrixCase] = {}
    for index, item in enumerate(items):
        case = case_of(item)
        if case is not None:
            first_seen.setdefault(case.param_id, index)
            cases.setdefault(case.param_id, case)
    anchor = dict(first_seen)
    references: set[str] = set()
    for param_id, case in cases.items() if state is not None else ():
        reference = checked_against(case, state)
        if reference is None or reference.param_id not in first_seen:
            continue
        references.add(reference.param_id)
        anchor[reference.param_id] = min(anchor[reference.param_id], first_seen[param_id])

    def key(entry: tuple[int, pytest.Item]) -> tuple[int, int, int]:
        index, item = entry
        case = case_of(item)
        if case is None:
            return index, 1, index
        # a reference pulled forward lands before the configuration it was pulled to
        return anchor[case.param_id], 0 if case.param_id in references else 1, index

    return [item for _, item in sorted(enumerate(items), key=key)]
