"""The durations file: how long each configuration took, so that shards balance real costs.

`baselines/durations.json` (beside the baseline files, committed with them, so every shard reads
the same one) maps a configuration's id to the seconds its tests took on the host that ran it,
server start included. A run counts them from its test reports (`Durations`); a baseline save
and the merge of shards with --save-baseline add to it. The merge's report folder gets a copy of
its own durations only (`write`), which replaces what an earlier merge left there.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from . import json_text
from .errors import SpecdecUsageError
from .file_kind import link_loop, refuse_special
from .whole_file import remove_leftovers, replace_text

if TYPE_CHECKING:
    from .state import RunState

FORMAT = "pytest-specdec-durations"
VERSION = 1


#: What writes the baseline folder's file again once a broken one is deleted, for its readers that
#: do not write it themselves (a sharded run balancing its shards).
REMADE_BY_A_SAVE = "a run with --specdec-save-baseline, or a merge with --save-baseline, writes it again"


def load(path: str | Path, remade_by: str = REMADE_BY_A_SAVE) -> dict[str, float]:
    """{configuration id: seconds}; an absent file is empty, a broken one a usage error whose
    fix says what writes it again where it is deleted (`remade_by`: the caller knows)."""
    path = Path(path)
    fix = f"fix or delete it ({remade_by})"
    refuse_special(path, "durations file")
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark an editor saved is no error
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:  # a folder, unreadable: say so, not a traceback
        loop = link_loop(path, exc) if isinstance(exc, OSError) else None
        if loop:
            raise SpecdecUsageError(f"durations file {path} cannot be read: {loop}; remove or repoint the "
                                    f"link ({remade_by})") from None
        why = getattr(exc, "strerror", None) or exc
        raise SpecdecUsageError(f"durations file {path} cannot be read: {why}; {fix}") from None
    try:
        doc = json_text.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecdecUsageError(f"durations file {path} is not valid JSON (line {exc.lineno}: "
                                f"{json_text.problem(exc)}); {fix}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise SpecdecUsageError(f"durations file {path} is not a pytest-specdec durations file "
                                f"(expected \"format\": \"{FORMAT}\"); {fix}")
    raw = doc.get("configurations")
    if not isinstance(raw, dict):
        raise SpecdecUsageError(f"durations file {path}: 'configurations' must map configuration "
                                f"ids to seconds; {fix}")
    out = {}
    for config, seconds in raw.items():
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
                or not math.isfinite(seconds) or seconds < 0:
            raise SpecdecUsageError(f"durations file {path}: {config}: {seconds!r} is not a "
                                    f"number of seconds; {fix}")
        out[str(config)] = float(seconds)
    return out


def save(path: str | Path, durations: Mapping[str, float],
         remade_by: str = REMADE_BY_A_SAVE, lock: Mapping[str, Any] | None = None) -> dict[str, float]:
    """Merge `durations` into the file (other configurations kept), atomically under a lock: the
    baseline folder's file, which every run and merge adds to; a broken one is a usage error
    (`load`), not overwritten. `lock`: `baselines.locked`'s timeout, setting and announce."""
    from .baselines import locked, through_links

    path = through_links(Path(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path, **(lock or {})):
        remove_leftovers(path)  # under the lock every save holds: a killed save's, never a live one's
        merged = {**load(path, remade_by), **_rounded(durations)}
        replace_text(path, _document(merged), durable=True)
    return merged


def write(path: str | Path, durations: Mapping[str, float]) -> dict[str, float]:
    """Replace the file with `durations` alone, atomically and with no lock file: a report's
    copy, which says what the run it belongs to took, not what earlier runs there did."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    written = _rounded(durations)
    replace_text(path, _document(written), durable=True)
    return written


def not_saved(partial: Iterable[str], measured: str = "this run") -> str:
    """The line a save says for the configurations whose entries it kept (`partial`): what
    `measured` took of each was a part of its cost, which the next sharded run would balance on.
    The first few of many: a narrowed run of a whole matrix measured each configuration in part."""
    from .table_fold import named

    return (f"durations not saved for {named(list(partial))}: {measured} measured only some of the "
            f"tests of each (-k, -m, --deselect, --lf, -x, a resume); shards balanced on part "
            f"of a configuration's time would be uneven")


def _rounded(durations: Mapping[str, float]) -> dict[str, float]:
    return {k: round(float(v), 3) for k, v in durations.items()}


def _document(durations: Mapping[str, float]) -> str:
    doc = {"format": FORMAT, "version": VERSION, "configurations": dict(sorted(durations.items()))}
    return json.dumps(doc, indent=2) + "\n"


@dataclass
class Durations:
    """Seconds per configuration, summed over its tests' setup, call and teardown (the setup
    of its first test starts its server). Only configurations whose tests ran count: a skip
    here says nothing about what the configuration costs where it runs."""

    spent: dict[str, float] = field(default_factory=dict)
    ran: set[str] = field(default_factory=set)
    param_ids: tuple[str, ...] = ()  # the matrix's, to find a report's configuration
    finished: set[str] = field(default_factory=set)  # tests (their node ids) whose teardown reported
    #: the tests collected are not all known: --lf left out, uncollected, the files where nothing
    #: failed; an xdist worker ended (interrupted, crashed) without saying what it collected
    collection_unknown: bool = False

    @classmethod
    def for_matrix(cls, state: RunState) -> "Durations":
        from .collection import matrix_cases

        return cls(param_ids=tuple(case.param_id for case in matrix_cases(state)))

    def add_report(self, report: Any) -> None:
        """Count one phase of a test report (setup, call or teardown) for its configuration."""
        from .collection import STAND_IN, configuration_in_nodeid

        if getattr(report, STAND_IN, False):  # judged on resumed figures: it measured nothing
            return
        if report.when == "teardown":
            self.finished.add(report.nodeid)
        self.add(configuration_in_nodeid(report.nodeid, self.param_ids), report.duration,
                 ran=report.when == "call")

    def complete(self, collected: Iterable[str], configured: Iterable[str] = ()
                 ) -> tuple[dict[str, float], list[str]]:
        """The seconds of the configurations all of whose `collected` recording tests (their
        names) and `configured` tests (node ids of those whose seconds count, recording or not),
        deselected ones too, finished here, and the configurations that ran without some of them:
        a run narrowed by -k, --deselect, --lf or stopped by -x took a part of what the
        configuration costs, which would unbalance the shards that read it as the whole."""
        from .collection import configuration_in_nodeid

        seconds = self.seconds
        if self.collection_unknown:
            return {}, sorted(seconds)
        names = {nodeid.rsplit("::", 1)[-1] for nodeid in self.finished}
        left_out = {configuration_in_nodeid(name, self.param_ids) for name in collected if name not in names}
        left_out |= {configuration_in_nodeid(nodeid, self.param_ids) for nodeid in configured
                     if nodeid not in self.finished}
        return ({config: s for config, s in seconds.items() if config not in left_out},
                sorted(config for config in seconds if config in left_out))

    @property
    def seconds(self) -> dict[str, float]:
        return {config: s for config, s in self.spent.items() if config in self.ran}

    def add(self, config: str | None, seconds: float, *, ran: bool = True) -> None:
        if config is None or not math.isfinite(seconds) or seconds < 0:
            return
        self.spent[config] = self.spent.get(config, 0.0) + seconds
        if ran:
            self.ran.add(config)

    def update(self, other: Mapping[str, float]) -> None:
        for config, seconds in other.items():
            self.add(config, seconds)

    @classmethod
    def of(cls, parts: Iterable[Mapping[str, float]]) -> "Durations":
        out = cls()
        for part in parts:
            out.update(part)
        return out


__all__ = ["FORMAT", "REMADE_BY_A_SAVE", "VERSION", "Durations", "load", "not_saved", "save", "write"]
