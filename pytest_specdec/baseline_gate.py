"""This process's baseline gate: the baseline file, read and checked once, and each result's
comparison with it (the decisions themselves are gate.py's).

Apart from `session` because the plugin checks the baseline file at configure time in every
run of a project that has one, also in runs that collect no specdec test: this module and what
it imports (`baselines`, `gate`, `directions`) are light, and the journal, the metrics and the
recorder load only once a test uses a specdec fixture.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from . import gate as gate_mod
from .directions import known_directions
from .errors import SpecdecUsageError

if TYPE_CHECKING:
    from .baselines import Baselines
    from .gate import Comparison
    from .result import Result
    from .state import RunState


@dataclass
class Gate:
    """The baseline comparison, loaded once per process."""

    state: RunState
    _baselines: Baselines | None = None

    def check(self) -> None:
        """Read and validate the baseline file now (configure time; the tolerances were checked
        with the settings): its built-in and declared metrics must keep their direction. A mistake is a usage
        error before any server boots, not a failure after each measurement."""
        path = self.state.baseline_path
        existing = next(p for p in path.parents if p.exists() or p == p.parent)
        if existing.exists() and not existing.is_dir():
            # read as "no baseline yet", every figure would pass as new, and no save could make one
            raise SpecdecUsageError(f"baseline folder {path.parent} "
                                    + ("is a file" if existing == path.parent else f"is inside {existing}, a file")
                                    + f", so no baseline can be read from it or saved into it; point "
                                    f"{self.state.settings.setter('baseline_dir')} at a folder")
        if path.exists() and not path.is_file():
            # read as "no baseline yet", every figure would pass as new
            raise SpecdecUsageError(f"baseline file {path} is not a file; remove it or choose another "
                                    f"{self.state.settings.setter('baseline_dir')}")
        if not path.exists():  # a loop at the file or a folder above it reads as not there
            self._check_link(path)
        if not path.is_file():
            return
        baselines = self.baselines()
        known = known_directions(self.state.config.metrics)
        for test_id, metrics in baselines.entries.items():
            for name, entry in metrics.items():
                expected = known.get(name)
                if expected is not None and entry.direction != expected:
                    raise SpecdecUsageError(
                        f"baseline file {self.state.baseline_path}: {test_id} {name}: direction "
                        f"{entry.direction!r}, but {expected!r} is better for {name}; fix the "
                        f"entry, or move the file aside and save a new one with "
                        f"{self.state.settings.setter('save_baseline')}")

    def _check_link(self, path) -> None:
        """A path there that leads to no file: a link to a file not saved yet is a first run's (the
        save writes there); a loop, at the file or a folder on its path, read as no baseline, would
        pass every figure as new."""
        import os

        from .file_kind import link_loop

        try:
            os.stat(path)
        except OSError as exc:
            loop = link_loop(path, exc)
            if loop:
                raise SpecdecUsageError(
                    f"baseline file {path} cannot be read: {loop}, so nothing would be compared; remove or "
                    f"repoint the link, or choose another {self.state.settings.setter('baseline_dir')}") from None

    def baselines(self) -> Baselines:
        if self._baselines is None:
            from . import baselines as baselines_mod

            path = self.state.baseline_path
            self._baselines = baselines_mod.load_baselines(path, self.state.hardware.key, self.state.settings.setter) \
                if path.is_file() else baselines_mod.Baselines(self.state.hardware.key, {}, path)
        return self._baselines

    def other_setup(self, result: Result) -> list[str]:
        """The figures of `result` whose baseline entry measured something else (its fingerprint
        differs: another workload, server setting or model)."""
        stored = self.baselines().entries.get(result.test_id, {})
        measured = result.fingerprint
        return sorted(m for m, e in stored.items()
                      if measured is not None and e.fingerprint is not None and not measured.matches(e.fingerprint))

    def what_changed(self, result: Result) -> str:
        """Which parts of the setup (`fingerprint.measured_setup`) the entries of
        :meth:`other_setup` measured otherwise, as resume says it of a journal record:
        `its model differs`."""
        from .fingerprint import OLDER_VERSION, Fingerprint

        baselines = self.baselines()
        stored = baselines.entries.get(result.test_id, {})
        unknown = "workload, server settings or model: the baseline file does not record which"
        texts = []
        for metric in self.other_setup(result):
            digest = stored[metric].fingerprint
            parts = baselines.setups.get(digest)
            old = Fingerprint(digest, parts) if parts is not None else None
            text = result.fingerprint.what_changed(old, unknown)
            if text not in texts:
                texts.append(text)
        return "; ".join(t if t in (unknown, OLDER_VERSION) else f"its {t} differ{'s' if ',' not in t else ''}"
                         for t in texts)

    def unmatched(self, result: Result, claimed_tests: Iterable[str]) -> str | None:
        """The failure text for `result`'s gated figures that found no entry to compare with (a
        first run, a misspelt name in the file, a baseline folder that is not there), naming the
        file, the test and figure and the likely fix; None when every gated figure had one.
        `claimed_tests`: the test ids of this run's recording tests, never a misspelling of another."""
        from . import unmatched

        figures = [c.metric for c in result.comparisons if c.gated and c.verdict == "new"]
        if not figures:
            return None
        settings = self.state.settings
        path = self.state.baseline_path
        head = f"no baseline to compare with in {path} (required by {settings.setter('require_baseline')})"
        absent = unmatched.missing_file(path, settings)
        if absent is not None:
            return (f"{head}: {absent}, so nothing gated {result.test_id} {', '.join(figures)}; save "
                    f"a baseline with {settings.setter('save_baseline')}")
        recorded = {m.name: m.direction for m in result.metrics}
        lines = []
        for metric in figures:
            why, near = unmatched.missing_entry(self.baselines(), result.test_id, metric, claimed_tests,
                                                recorded, recorded.get(metric))
            lines.append(f"{result.test_id} {metric}: {why}{unmatched.did_you_mean(near)}")
        return "\n".join([f"{head}; fix a misspelt name in the file, or save the figures with "
                          f"{settings.setter('save_baseline')}:", *lines])

    def compare(self, result: Result) -> list[Comparison]:
        """`result` against its baseline entries, with a warning where an entry measured
        something else (:meth:`other_setup`), naming what (:meth:`what_changed`). Entries
        another test of the same name and parameters saved (their node id is not `result`'s) are
        a usage error, not compared."""
        from .baselines import other_test, other_test_error

        baselines = self.baselines()
        saved_by = other_test(baselines, result.test_id, result.nodeid)
        if saved_by is not None:
            raise other_test_error(self.state.baseline_path, result.test_id, result.nodeid, saved_by,
                                   self.state.settings.setter("save_baseline"))
        for metric in result.metrics:
            entry = baselines.get(result.test_id, metric.name)
            if entry is not None and entry.direction != metric.direction:
                # a figure of the user's own (check() knows the declared ones); a saving run compares
                # first and fails, so saving again never replaces the entry
                raise SpecdecUsageError(
                    f"baseline file {self.state.baseline_path}: {result.test_id} {metric.name}: the "
                    f"entry says {entry.direction!r} is better, but the test records it as "
                    f"{metric.direction!r}-is-better; if the change is meant, delete that entry and "
                    f"save the figure again with {self.state.settings.setter('save_baseline')}, else "
                    f"record it as {entry.direction!r}")
        other = self.other_setup(result)
        if other and not self.state.settings.save_baseline:  # a saving run re-creates them itself
            warnings.warn(f"{result.test_id}: the baseline of {', '.join(other)} measured another "
                          f"setup ({self.what_changed(result)}); re-create it with "
                          f"--specdec-save-baseline if the change is meant",
                          stacklevel=1)
        comparisons = gate_mod.compare_all(result.test_id, result.metrics, self.baselines().get,
                                           self.state.tolerances)
        for why in gate_mod.unreachable(comparisons):  # a gate in name only: say so, never green silently
            warnings.warn(f"{result.test_id}: {why}", stacklevel=1)
        return comparisons


__all__ = ["Gate"]
