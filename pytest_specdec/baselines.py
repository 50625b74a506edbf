"""Per-hardware baseline files: what a run compares its figures with (the gate is gate.py).

One JSON file per hardware key (`baselines/nvidia-h200-sm_90-x8.json`, `baselines/cpu.json`):
numbers measured on one machine mean nothing on another, so a file records the key it belongs
to and loading it for other hardware is an error rather than a silent comparison. Saving merges
into whatever is on disk under a lock (several xdist workers may save at once) and replaces the
file atomically, so an interrupted save never leaves a half-written baseline and a partial run
never drops other tests' entries.

An entry keeps a figure's value and, for timing figures, the samples it was decided from (its
distribution, calibrated for CPU contention where the run measured it), so that the gate can
tell a regression from the noise of both runs. It also keeps the node id of the test that saved
it (`tests/bench/test_x.py::test_gen[p]`): the file keys a test by its name and parameters, so
two tests of one name in different files would otherwise be compared with each other's figures
without a word (a run sees such a pair only when it collects both). A timing figure's entry
also keeps how many samples each save it pools contributed (`save_sizes`), so that pooling drops
whole saves and a measurement saved again is found at a save's boundary, whatever the count of
requests of each save. Version 3 files (a count of saves, `runs`, but not their sizes: their
saves are taken as equal-sized where the samples divide evenly among them, else as one save),
version 2 files (no node id: their entries match any test of their key) and version 1 files
(values and spreads only) are still read, and the next save writes them in this version.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import difflib
import errno
import json
import math
import os
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping

from . import json_text
from .directions import METRIC_DIRECTIONS, Direction
from .errors import SpecdecUsageError
from .file_kind import refuse_special
from .whole_file import remove_leftovers, replace_text

if TYPE_CHECKING:
    from filelock import FileLock

    from .fingerprint import Fingerprint
    from .metrics import MetricValue

FORMAT = "pytest-specdec-baselines"
#: 4: entries keep each pooled save's sample count (`save_sizes`) rather than only their count.
#: 3: entries keep the node id of the test that saved them (a reader of 2 would refuse the key).
VERSION = 4
#: Saves whose samples a timing figure's entry pools: one run's samples share that run's moment
#: on a shared machine; several runs' show how much the figure moves between runs.
POOLED_RUNS = 3
#: How long a save waits by default for the lock of a baseline folder's file (options.py's
#: baseline_lock_timeout): a save holds it well under a second, so minutes mean a hung holder.
LOCK_TIMEOUT_S = 120.0
#: A wait for the lock this long is said once: a save takes milliseconds, so this is another run's.
LOCK_QUIET_S = 2.0


# --------------------------------------------------------------------------------------------
# Hardware key and provenance


def baseline_path(baseline_dir: str | Path, key: str) -> Path:
    return Path(baseline_dir) / f"{key}.json"


def collect_versions() -> dict[str, str]:
    """Versions that explain a baseline: the plugin, torch and SGLang when installed.

    Read from package metadata, never by importing (importing torch costs seconds and may
    initialise CUDA in the pytest controller).
    """
    from importlib import metadata

    from . import __version__

    versions = {"pytest-specdec": __version__}
    for dist in ("torch", "triton", "sglang"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return versions


def git_commit(cwd: str | Path | None = None) -> str | None:
    """The HEAD commit of the repository at `cwd` (suffixed `-dirty` with local changes), or None."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if dirty else head or None


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


# --------------------------------------------------------------------------------------------
# File model

#: The keys of the file itself (Baselines.to_json writes them).
FILE_KEYS = ("format", "version", "hardware_key", "entries", "setups")
#: The keys an entry of this format may hold (BaselineEntry.to_json writes them).
ENTRY_KEYS = ("value", "direction", "spread", "samples", "deterministic", "date", "versions", "commit",
              "fingerprint", "distribution", "cpu_share", "save_sizes", "nodeid")
#: Keys earlier releases of this format wrote, read past: `calibrated` is `cpu_share` now, `runs`
#: the length of `save_sizes` (read where an entry has no `save_sizes`, see `former_save_sizes`;
#: written back for such an entry until it is saved again, see `guessed_from_runs`).
FORMER_ENTRY_KEYS = ("calibrated", "runs")


@dataclass(frozen=True)
class BaselineEntry:
    """One stored figure of one test on one hardware key."""

    value: float
    direction: Direction
    spread: float = 0.0
    samples: int = 1
    deterministic: bool = False
    date: str = ""
    versions: tuple[tuple[str, str], ...] = ()
    commit: str | None = None
    fingerprint: str | None = None  # digest of what was measured (fingerprint.py); None: unknown
    distribution: tuple[float, ...] = ()  # the samples of a timing figure (gate.py decides on them)
    cpu_share: float | None = None  # calibrated samples: their runs' CPU share (a running mean)
    #: the samples each save pooled in `distribution` contributed, oldest first (at most
    #: POOLED_RUNS saves; they sum to its length); () with no samples, one save where not given
    save_sizes: tuple[int, ...] = ()
    nodeid: str | None = None  # the pytest node id of the test that saved it; None: not recorded
    #: the count of saves (`runs`, > 1) a version-3 entry recorded, from which its `save_sizes`
    #: were guessed (`former_save_sizes`); 0 where they were recorded. Only the newest save's
    #: place, at the end of the samples, is known (`is_save_of`), so until the entry is saved
    #: again `to_json` writes this count back, not the guess: another test's save in between (a
    #: merge's earlier shard) would otherwise make the guess read as recorded
    guessed_from_runs: int = field(default=0, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.save_sizes and self.distribution:
            object.__setattr__(self, "save_sizes", (len(self.distribution),))
        if sum(self.save_sizes) != len(self.distribution) or any(n < 1 for n in self.save_sizes):
            # pooling cuts the distribution at these boundaries: wrong ones split a save
            raise ValueError(f"save_sizes {self.save_sizes} do not divide the {len(self.distribution)} "
                             f"samples of the distribution")

    @property
    def runs(self) -> int:
        """How many saves the distribution pools (1 for a figure without samples)."""
        return max(1, len(self.save_sizes))

    def pooled_with(self, newer: BaselineEntry) -> BaselineEntry:
        """`newer` (this save's entry) with the samples of the saves before it, when both
        measured the same kind of figure of the same setup: the last POOLED_RUNS saves'
        samples, newest last, each save whole (`save_sizes`). The same measurement saved again
        (a merge or a resumed run with --specdec-save-baseline run twice) is already pooled: the
        entry stays as it is, or its samples would count twice and the gate take them for two
        runs that agree."""
        if self.is_save_of(newer):
            return self
        if (not self.distribution or not newer.distribution or newer.deterministic
                or (self.direction, self.calibrated, self.deterministic)
                != (newer.direction, newer.calibrated, newer.deterministic)
                or None not in (self.fingerprint, newer.fingerprint)
                and self.fingerprint != newer.fingerprint):
            return newer
        # whole saves: the sizes of the saves differ where a workload's request count changed
        kept = self.save_sizes[max(0, len(self.save_sizes) - max(0, POOLED_RUNS - newer.runs)):]
        older = self.distribution[len(self.distribution) - sum(kept):]
        share = None if newer.cpu_share is None else \
            (self.cpu_share * len(kept) + newer.cpu_share * newer.runs) / (len(kept) + newer.runs)
        return replace(newer, distribution=older + newer.distribution,
                       save_sizes=kept + newer.save_sizes, cpu_share=share)

    def is_save_of(self, newer: BaselineEntry) -> bool:
        """Whether this entry already pools `newer`'s measurement (two runs' timing samples never
        all agree): its newest save (the same figure and samples of the same setup), or an earlier
        save whose samples are still one of its saves. Not the newest alone: a merge interrupted
        and run again after another run saved the test would pool its figures a second time. Only
        whole saves are compared (`save_sizes`): samples that straddle two saves are no save."""
        if not newer.distribution or newer.deterministic or self.fingerprint != newer.fingerprint:
            return False
        end = len(self.distribution)
        for back, size in enumerate(reversed(self.save_sizes)):
            # the newest save's value is this entry's; an earlier save's is gone: its samples tell it
            if (self.distribution[end - size:end] == newer.distribution
                    and (back > 0 or self.value == newer.value)):
                return True
            end -= size
        # a version-3 entry's guessed boundaries may cut its newest save, which lies at the end
        # of its samples with the entry's value, as the release that saved it looked for it
        n = len(newer.distribution)
        return (self.guessed_from_runs > 1 and self.value == newer.value and n <= len(self.distribution)
                and self.distribution[len(self.distribution) - n:] == newer.distribution)

    @property
    def calibrated(self) -> bool:
        return self.cpu_share is not None

    @classmethod
    def from_metric(cls, metric: MetricValue, *, date: str | None = None,
                    versions: Mapping[str, str] | None = None, commit: str | None = None,
                    fingerprint: str | None = None, nodeid: str | None = None) -> "BaselineEntry":
        return cls(
            value=float(metric.value), direction=metric.direction, spread=float(metric.spread),
            samples=int(metric.samples), deterministic=metric.deterministic, date=date or _now(),
            versions=tuple(sorted((versions or {}).items())), commit=commit,
            fingerprint=fingerprint,
            distribution=tuple(metric.distribution), cpu_share=metric.cpu_share, nodeid=nodeid,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "value": self.value, "direction": self.direction, "spread": self.spread,
            "samples": self.samples, "deterministic": self.deterministic, "date": self.date,
            "versions": dict(self.versions), "commit": self.commit,
            **({"fingerprint": self.fingerprint} if self.fingerprint is not None else {}),
            "distribution": list(self.distribution), "cpu_share": self.cpu_share,
            **({"runs": self.guessed_from_runs} if self.guessed_from_runs > 1 else
               {"save_sizes": list(self.save_sizes)}),
            **({"nodeid": self.nodeid} if self.nodeid is not None else {}),
        }

    @classmethod
    def from_json(cls, obj: Any, where: str, fix: str) -> "BaselineEntry":
        if not isinstance(obj, dict):
            raise SpecdecUsageError(f"{where}: expected an object with value, direction, spread, ...; {fix}")

        def number(key: str, default: float | None = None) -> float:
            value = obj.get(key, default)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise SpecdecUsageError(f"{where}: {key!r} must be a finite number, got {value!r}; {fix}")
            return float(value)

        for key in obj:
            if key not in ENTRY_KEYS and key not in FORMER_ENTRY_KEYS:
                # read past, a misspelt key would change how the figure is gated without a word, and
                # any other (a note, a per-entry "tolerance") would be believed in and a save drop it
                raise SpecdecUsageError(f"{where}: unknown key {key!r}{_unknown_key_hint(key, obj, fix)}")
        direction = obj.get("direction")
        if direction not in ("higher", "lower"):
            raise SpecdecUsageError(f"{where}: 'direction' must be 'higher' or 'lower', got {direction!r}; {fix}")
        spread = number("spread", 0.0)
        if spread < 0:
            raise SpecdecUsageError(f"{where}: 'spread' must be >= 0, got {spread!r}; {fix}")
        samples = obj.get("samples", 1)
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
            raise SpecdecUsageError(f"{where}: 'samples' must be a positive integer, got {samples!r}; {fix}")
        versions = obj.get("versions", {})
        if versions is None:
            versions = {}
        if not isinstance(versions, dict):
            raise SpecdecUsageError(f"{where}: 'versions' must be an object, got {versions!r}; {fix}")
        runs = obj.get("runs", 1)
        if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
            raise SpecdecUsageError(f"{where}: 'runs' must be a positive integer, got {runs!r}; {fix}")
        cpu_share = number("cpu_share") if obj.get("cpu_share") is not None else None
        if cpu_share is not None and not 0 < cpu_share <= 1:
            # a share of the wall time (calibration.py); outside (0, 1] it widens the allowance
            raise SpecdecUsageError(f"{where}: 'cpu_share' must be in (0, 1], got {cpu_share!r}; {fix}")
        deterministic = obj.get("deterministic", False)
        if not isinstance(deterministic, bool):
            # a string reads as true: a timing figure gated exactly, with no allowance for noise
            raise SpecdecUsageError(f"{where}: 'deterministic' must be true or false, got "
                                    f"{deterministic!r}; {fix}")
        commit = obj.get("commit")
        fingerprint = obj.get("fingerprint")
        if fingerprint is not None and not isinstance(fingerprint, str):
            # str() of anything else matches no setup: every run would warn of another one
            raise SpecdecUsageError(f"{where}: 'fingerprint' must be a digest string or null, got "
                                    f"{fingerprint!r}; {fix}")
        nodeid = obj.get("nodeid")
        if nodeid is not None and (not isinstance(nodeid, str) or not nodeid):
            # matched against the running test's node id: anything else would match none
            raise SpecdecUsageError(f"{where}: 'nodeid' must be the saving test's node id "
                                    f"(path::name[params]) or null, got {nodeid!r}; {fix}")
        distribution = obj.get("distribution", [])
        if distribution is None:
            distribution = []
        if not isinstance(distribution, list) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                for v in distribution):
            raise SpecdecUsageError(f"{where}: 'distribution' must be a list of finite numbers; {fix}")
        save_sizes = obj.get("save_sizes")
        if save_sizes is None:
            save_sizes = former_save_sizes(len(distribution), runs)
        elif (not isinstance(save_sizes, list) or sum_or_none(save_sizes) != len(distribution)
              or "runs" in obj and runs != len(save_sizes)):
            # pooling keeps and compares whole saves: sizes that miss the samples cut one in two
            raise SpecdecUsageError(
                f"{where}: 'save_sizes' must list how many samples each pooled save contributed "
                f"(positive integers, oldest first, {len(distribution)} in all as in 'distribution'"
                f"{f', {runs} saves as in runs' if 'runs' in obj else ''}), got {save_sizes!r}; {fix}")
        return cls(
            value=number("value"), direction=direction, spread=spread, samples=samples,
            deterministic=deterministic, date=str(obj.get("date", "")),
            versions=tuple(sorted((str(k), str(v)) for k, v in versions.items())),
            commit=None if commit is None else str(commit),
            fingerprint=fingerprint,
            distribution=tuple(float(v) for v in distribution),
            cpu_share=cpu_share, save_sizes=tuple(save_sizes), nodeid=nodeid,
            guessed_from_runs=runs if "save_sizes" not in obj and runs > 1 and distribution else 0,
        )


def former_save_sizes(samples: int, runs: int) -> tuple[int, ...]:
    """The save sizes of an entry that records only its count of saves (`runs`, format version 3,
    or a hand-written entry): equal-sized where the samples divide evenly among the saves, else one
    save, since a save cut in two would be pooled or told apart by half its samples."""
    if samples == 0:
        return ()
    return (samples // runs,) * runs if samples % runs == 0 else (samples,)


def sum_or_none(sizes: list[Any]) -> int | None:
    """The sum of `sizes` where each is a positive integer (not a bool), else None."""
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in sizes):
        return None
    return sum(sizes)


def _unknown_key_hint(key: str, obj: Mapping[str, Any], fix: str) -> str:
    """What to do about an entry's key this format does not hold: its near namesake, or that
    nothing reads it (and, for an entry another pytest-specdec saved, which one)."""
    from . import __version__

    near = difflib.get_close_matches(key, ENTRY_KEYS, n=1, cutoff=0.75)
    if near:
        return f"; did you mean {near[0]!r}? {fix}"
    saved_by = obj.get("versions", {}).get("pytest-specdec") if isinstance(obj.get("versions"), dict) else None
    newer = (f", or upgrade pytest-specdec if {saved_by}, which saved the entry, is newer than this one "
             f"({__version__})" if saved_by not in (None, __version__) else "")
    return (f": an entry holds only {', '.join(ENTRY_KEYS)}, nothing reads another key and a save "
            f"would drop it; remove it (a note belongs in the commit message){newer}")


@dataclass(frozen=True)
class Baselines:
    """The entries of one baseline file: {test id: {metric: entry}}."""

    hardware_key: str
    entries: Mapping[str, Mapping[str, BaselineEntry]] = field(default_factory=dict)
    path: Path | None = None
    #: {fingerprint digest: its parts} of the entries' setups, so that a run measuring another
    #: setup can say which part changed; empty in files saved before they were kept
    setups: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def get(self, test_id: str, metric: str) -> BaselineEntry | None:
        return self.entries.get(test_id, {}).get(metric)

    def __len__(self) -> int:
        return sum(len(m) for m in self.entries.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "hardware_key": self.hardware_key,
            "entries": {t: {m: e.to_json() for m, e in sorted(ms.items())} for t, ms in sorted(self.entries.items())},
            **({"setups": {d: dict(p) for d, p in sorted(self.setups.items())}} if self.setups else {}),
        }


def recorded_nodeid(nodeid: str | None) -> str | None:
    """`nodeid` where it is a pytest node id (`path::name`), else None: a result read from a
    journal record that kept none falls back to its test id, which names no file."""
    return nodeid if nodeid and "::" in nodeid else None


def other_test(baselines: Baselines, test_id: str, nodeid: str | None) -> str | None:
    """The node id recorded in `test_id`'s entries when it is not `nodeid`'s (another test of the
    same name and parameters, in another file or class, saved them), or None: entries that
    record none (files saved before version 3) match any test of their key."""
    nodeid = recorded_nodeid(nodeid)
    if nodeid is None:
        return None
    return next((e.nodeid for _, e in sorted(baselines.entries.get(test_id, {}).items())
                 if e.nodeid is not None and not same_test(e.nodeid, nodeid)), None)


def same_test(saved: str, nodeid: str) -> bool:
    """Whether two node ids name one test though pytest chose another rootdir for one of them
    (node ids are relative to it): the same name, and one file path ending in the other."""
    saved_path, _, saved_name = saved.partition("::")
    path, _, name = nodeid.partition("::")
    return saved_name == name and (saved_path == path or saved_path.endswith("/" + path)
                                   or path.endswith("/" + saved_path))


def other_test_error(source: object, test_id: str, nodeid: str, saved_by: str,
                     save: str) -> SpecdecUsageError:
    """The error for `nodeid` meeting the entries `saved_by` saved under their shared key
    (`other_test`); `save` is how to save it again (a run's option or the merge's)."""
    return SpecdecUsageError(
        f"baseline file {source}: the entries of {test_id} belong to {saved_by}, not to {nodeid}: "
        f"the file keys a test by its name and parameters, so these two tests would share one "
        f"entry, and neither is compared with the other's figures; rename one of the test "
        f"functions, or, if the test moved there, delete the entries of {test_id} and save them "
        f"again with {save}")


class WrongHardwareError(SpecdecUsageError):
    """A baseline file of another hardware key than the one it is read for: its message advises a
    run; `source`, `found` and `expected` let another reader (a merge of shards) advise its own."""

    def __init__(self, message: str, source: str, found: object, expected: str):
        super().__init__(message)
        self.source, self.found, self.expected = source, found, expected


def _flag(name: str) -> str:
    """An option's command-line flag: where to set it for a reader without the run's settings."""
    from .options import OPTIONS_BY_NAME

    return OPTIONS_BY_NAME[name].cli


def _fix(setter: Callable[[str], str]) -> str:
    # saving merges into the file, so it stops on the same error: move the file first
    return f"fix it, or move it aside (or delete it) and save a new one with {setter('save_baseline')}"


def parse_baselines(text: str, hardware_key: str, source: str,
                    setter: Callable[[str], str] = _flag) -> Baselines:
    """Validate a baseline document; every error names the file, the entry and the fix.

    `setter` names where to change an option (`Settings.setter`: where the run set it, else its
    flag), so the advice points at the ini or [tool.specdec] key the user wrote.
    """
    fix = _fix(setter)
    if not text.strip():
        raise SpecdecUsageError(f"baseline file {source} is empty (saves replace it whole, so something "
                                f"else emptied it); {fix}")
    try:
        doc = json_text.loads(text, object_pairs_hook=json_text.unique_keys)
    except json_text.RepeatedKey as exc:
        raise SpecdecUsageError(
            f"baseline file {source} names {exc.key!r} twice in one object (a hand edit or a merge "
            f"of two files?), and JSON keeps only the last; keep one, or move the file aside (or "
            f"delete it) and save a new one with {setter('save_baseline')}") from None
    except json.JSONDecodeError as exc:
        raise SpecdecUsageError(
            f"baseline file {source} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
            f"{json_text.problem(exc)}); {fix}"
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise SpecdecUsageError(
            f"baseline file {source} is not a pytest-specdec baseline file (expected \"format\": \"{FORMAT}\"); {fix}"
        )
    version = doc.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise SpecdecUsageError(f"baseline file {source}: 'version' must be a positive integer, got {version!r}; {fix}")
    if version > VERSION:
        raise SpecdecUsageError(
            f"baseline file {source} has format version {version}, newer than this pytest-specdec reads "
            f"({VERSION}); upgrade pytest-specdec"
        )
    for name in doc:
        if name not in FILE_KEYS:
            # a misspelt 'entries' would read as a file of no entries: every figure `new`
            near = difflib.get_close_matches(name, FILE_KEYS, n=1, cutoff=0.75)
            raise SpecdecUsageError(
                f"baseline file {source}: unknown top-level key {name!r}"
                + (f"; did you mean {near[0]!r}? {fix}" if near else
                   f": the file holds only {', '.join(FILE_KEYS)} and nothing reads another; remove it"))
    key = doc.get("hardware_key")
    if key != hardware_key:
        raise WrongHardwareError(
            f"baseline file {source} belongs to hardware {key!r}, but this machine is {hardware_key!r}; "
            f"baselines do not transfer between machines: use {hardware_key}.json (or {setter('arch')}/"
            f"{setter('gpus')} to match), or point {setter('baseline_dir')} elsewhere",
            source, key, hardware_key)
    raw = doc.get("entries", {})
    if not isinstance(raw, dict):
        raise SpecdecUsageError(f"baseline file {source}: 'entries' must be an object; {fix}")
    entries: dict[str, dict[str, BaselineEntry]] = {}
    for test_id, metrics in raw.items():
        if not isinstance(metrics, dict):
            raise SpecdecUsageError(f"baseline file {source}: entry {test_id!r} must map metric names to "
                                    f"objects; {fix}")
        entries[test_id] = {}
        for metric, obj in metrics.items():
            where = f"baseline file {source}: {test_id} {metric}"
            entry = entries[test_id][metric] = BaselineEntry.from_json(obj, where, fix)
            if metric in METRIC_DIRECTIONS and entry.value < 0:
                # built-in figures are rates, lengths and times; 0 can be measured (accept_rate)
                raise SpecdecUsageError(f"{where}: 'value' must be >= 0, got {entry.value!r}; {fix}")
            if metric in METRIC_DIRECTIONS and any(v < 0 for v in entry.distribution):
                # a timing figure is gated on its samples' median, not on its value
                raise SpecdecUsageError(f"{where}: 'distribution' must hold samples >= 0, got "
                                        f"{min(entry.distribution)!r}; {fix}")
    setups = doc.get("setups", {})
    if not isinstance(setups, dict) or not all(isinstance(p, dict) for p in setups.values()):
        raise SpecdecUsageError(f"baseline file {source}: 'setups' must map fingerprint digests to "
                                f"objects; {fix}")
    return Baselines(hardware_key=hardware_key, entries=entries, path=Path(source), setups=setups)


def load_baselines(path: str | Path, hardware_key: str, setter: Callable[[str], str] = _flag) -> Baselines:
    """The baselines in `path`; an absent file is an empty set (nothing saved yet). `setter` as
    for :func:`parse_baselines`."""
    path = Path(path)
    refuse_special(path, "baseline file")
    try:
        # utf-8-sig: an editor that saves a byte-order mark leaves the JSON itself intact
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        return Baselines(hardware_key=hardware_key, entries={}, path=path)
    except UnicodeDecodeError as exc:  # the codec's message gives neither the line nor the fix
        line = exc.object.count(b"\n", 0, exc.start) + 1
        raise SpecdecUsageError(f"baseline file {path} cannot be read: line {line} is not UTF-8 (byte "
                                f"{exc.object[exc.start]:#04x}); {_fix(setter)}") from None
    except OSError as exc:  # a folder, a link loop, no read permission
        raise SpecdecUsageError(f"baseline file {path} cannot be read: {exc.strerror or exc}; "
                                f"{_fix(setter)}") from None
    return parse_baselines(text, hardware_key, str(path), setter)


def _lock_for(path: Path) -> FileLock:
    """The lock beside the baseline file (hidden), where only those who may write the file can
    create it: a fixed name in a shared /tmp could be planted by another user to block saves."""
    from filelock import FileLock  # only a save takes it: reading a baseline file stays light

    return FileLock(str(path.with_name(f".{path.name}.lock")))


class LockTimeout(SpecdecUsageError):
    """The lock of a baseline folder's file stayed held past the save's bound; nothing was written."""


@contextlib.contextmanager
def locked(path: Path, *, timeout: float = LOCK_TIMEOUT_S, setting: str | None = None,
           announce: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the lock beside `path` (`_lock_for`) for the block, waiting at most `timeout` s for
    another process to let it go: past `LOCK_QUIET_S` the wait is said once through `announce`
    (the lock, its holder where /proc/locks tells, the time left and `setting`, which bounds
    it); past `timeout`, LockTimeout, the block never runs. A holder that dies drops the lock
    (flock), so only a live one, hung or slow, is waited for."""
    from filelock import Timeout

    setting = setting or _flag("baseline_lock_timeout")
    lock = _lock_for(path)
    quiet = min(LOCK_QUIET_S, timeout / 2)
    try:
        lock.acquire(timeout=quiet)
    except Timeout:
        holder = lock_holder(Path(lock.lock_file)) or "another process"
        if announce is not None:
            announce(f"baseline save: {lock.lock_file} is held by {holder}; waiting up to "
                     f"{timeout - quiet:g}s more before the save fails (bound: {setting})")
        try:
            lock.acquire(timeout=timeout - quiet)
        except Timeout:
            holder = lock_holder(Path(lock.lock_file)) or holder
            raise LockTimeout(
                f"{lock.lock_file} stayed held by {holder} for {timeout:g}s ({setting}), so nothing "
                f"was written into {path}; a save holds it well under a second: if no other save is "
                f"under way, that process hung, so end it (the lock goes with it) and save again, "
                f"or raise {setting} if it is just slow") from None
    try:
        yield
    finally:
        lock.release()


def lock_holder(lock_file: Path) -> str | None:
    """`pid N (command)` of the process holding `lock_file`'s flock, from Linux's /proc/locks;
    None where that does not tell (another OS, a holder in another PID namespace)."""
    try:
        st = os.stat(lock_file)
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in lines:
        fields = line.split()
        if "->" in fields or len(fields) < 6 or fields[5] != device:  # "->": a waiter, not the holder
            continue
        pid = fields[4]
        if not pid.isdigit() or pid == "0":
            return None
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                command = " ".join(fh.read().replace(b"\0", b" ").decode(errors="replace").split())
        except OSError:
            command = ""
        return f"pid {pid} ({command[:120]})" if command else f"pid {pid}"
    return None


def save_baselines(
    path: str | Path,
    hardware_key: str,
    results: Mapping[str, Iterable[MetricValue]],
    *,
    versions: Mapping[str, str] | None = None,
    commit: str | None = None,
    date: str | None = None,
    fingerprints: Mapping[str, str | Fingerprint] | None = None,
    nodeids: Mapping[str, str] | None = None,
    setter: Callable[[str], str] = _flag,
    lock: Mapping[str, Any] | None = None,
) -> Baselines:
    """Merge `results` ({test id: metrics}) into the file at `path` and return the merged set.

    Entries of other tests and of other metrics of the same test are kept; a metric measured
    now replaces its old entry, carrying `fingerprints[test id]` (what was measured: a digest,
    or a Fingerprint whose parts the file keeps under `setups`), except
    that a timing figure keeps the samples of the saves of the same setup before it
    (`BaselineEntry.pooled_with`), and `nodeids[test id]` (the node id of the test that measured
    it; entries another test of the same key saved are refused, nothing written). The file is
    written to a temporary sibling, fsync'd and moved into place with os.replace, all under a
    file lock, waited for as `lock` says (`locked`'s timeout, setting and announce). `setter` as
    for :func:`parse_baselines`, for the errors of the file already there.
    """
    path = Path(path)
    real = through_links(path)
    real.parent.mkdir(parents=True, exist_ok=True)
    versions = collect_versions() if versions is None else versions
    date = date or _now()
    with locked(real, **(lock or {})):
        remove_leftovers(real)  # under the lock every save holds: a killed save's, never a live one's
        current = load_baselines(path, hardware_key, setter)
        for test_id in results:
            saved_by = other_test(current, test_id, (nodeids or {}).get(test_id))
            if saved_by is not None:
                raise other_test_error(path, test_id, str((nodeids or {})[test_id]), saved_by,
                                       setter("save_baseline"))
        merged: dict[str, dict[str, BaselineEntry]] = {t: dict(m) for t, m in current.entries.items()}
        setups = dict(current.setups)
        for test_id, metrics in results.items():
            slot = merged.setdefault(test_id, {})
            measured = (fingerprints or {}).get(test_id)
            nodeid = recorded_nodeid((nodeids or {}).get(test_id))
            digest = getattr(measured, "digest", measured)
            if digest is not None and hasattr(measured, "parts"):
                setups[digest] = dict(measured.parts)
            for metric in metrics:
                check_saveable(metric, test_id, path)
                entry = BaselineEntry.from_metric(
                    metric, date=date, versions=versions, commit=commit, fingerprint=digest,
                    nodeid=nodeid)
                old = slot.get(metric.name)
                if old is not None and old.fingerprint in getattr(measured, "former", ()):
                    old = replace(old, fingerprint=digest)  # saved before the model part said what is served
                new = old.pooled_with(entry) if old is not None else entry
                # a save that knows no node id (an older journal's record) keeps the one there
                slot[metric.name] = replace(new, nodeid=nodeid or (old.nodeid if old else None))
        used = {e.fingerprint for ms in merged.values() for e in ms.values()}
        out = Baselines(hardware_key=hardware_key, entries=merged, path=path,
                        setups={d: p for d, p in setups.items() if d in used})
        replace_text(real, json.dumps(out.to_json(), indent=2, sort_keys=True) + "\n", durable=True)
    return out


def through_links(path: Path) -> Path:
    """Where a save of `path` writes: the file a symbolic link there points to (a baseline folder
    may link a file kept elsewhere), whose folder the lock and the temporary file go to, so that
    the rename replaces that file and not the link, and saves through either name share a lock.

    A link loop is an OSError (ELOOP) naming the link, as opening the file would raise: before
    Python 3.13, `Path.resolve` raised a RuntimeError, which no caller's `except OSError` caught."""
    if not path.is_symlink():
        return path
    try:  # strict: a loop is ELOOP on every Python (a lax resolve leaves it in the path from 3.13)
        return Path(os.path.realpath(path, strict=True))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise
    try:  # a link to a file not saved yet: the save creates it there (or says why it cannot)
        return path.resolve()
    except RuntimeError:  # a loop past a missing folder, before Python 3.13
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path)) from None


def check_saveable(metric: MetricValue, test_id: str, path: Path) -> None:
    """Refuse a figure that would make the file unreadable (`from_json` refuses what is not finite,
    as JSON writes NaN and Infinity), before anything is written: the file keeps its entries."""
    numbers = [("spread", metric.spread), ("cpu_share", metric.cpu_share),
               *(("a sample", v) for v in metric.distribution)]
    for what, value in numbers:
        if value is not None and not math.isfinite(value):
            raise SpecdecUsageError(f"{test_id} {metric.name}: {what} is {value!r}, which a baseline "
                                    f"cannot hold; nothing was saved into {path}, which keeps its entries")


def left_out(failed: list[str], lossy: list[str], are: str = "", shared: list[str] = (), where: str = "") -> str:
    """Which results a save leaves out of the baseline file and why, by test id, as a run's
    `--specdec-save-baseline` and `specdec merge --save-baseline` both say it: those of failed
    tests (expected failures of known issues included) first, then those of configurations that
    are not lossless, then those measured on a shared server (--specdec-allow-shared); the first
    few of each where there are many, and `where` (the report) lists them all."""
    from .table_fold import named

    parts = [f"{len(group)} result(s){are} of {what} ({named(group, where)})"
             for group, what in ((failed, "failed tests, which are no reference"),
                                 (lossy, "configurations that are not lossless"),
                                 (list(shared), "workloads measured on a shared server, whose figures "
                                                "another client's load makes no reference")) if group]
    return "; ".join(parts)


__all__ = [
    "FORMAT",
    "LOCK_TIMEOUT_S",
    "left_out",
    "VERSION",
    "BaselineEntry",
    "Baselines",
    "LockTimeout",
    "WrongHardwareError",
    "baseline_path",
    "collect_versions",
    "git_commit",
    "load_baselines",
    "lock_holder",
    "locked",
    "other_test",
    "other_test_error",
    "parse_baselines",
    "check_saveable",
    "recorded_nodeid",
    "same_test",
    "save_baselines",
]
