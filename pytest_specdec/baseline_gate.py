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
from typing import TYPE_CHECKING

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
        if not self.state.baseline_path.is_file():
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
        digest = result.fingerprint.digest if result.fingerprint is not None else None
        return sorted(m for m, e in stored.items()
                      if digest is not None and e.fingerprint not in (None, digest))

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

    def compare(self, result: Result) -> list[Comparison]:
        """`result` against its baseline entries, with a warning where an entry measured
        something else (:meth:`other_setup`), naming what (:meth:`what_changed`)."""
        other = self.other_setup(result)
        if other and not self.state.settings.save_baseline:  # a saving run re-creates them itself
            warnings.warn(f"{result.test_id}: the baseline of {', '.join(other)} measured another "
                          f"setup ({self.what_changed(result)}); re-create it with "
                          f"--specdec-save-baseline if the change is meant",
                          stacklevel=1)
        return gate_mod.compare_all(result.test_id, result.metrics, self.baselines().get,
                                    self.state.tolerances)


__all__ = ["Gate"]
