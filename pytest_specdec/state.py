"""The run's resolved state: config file, effective options, hardware and backend, built once.

`pytest_configure` builds one `RunState` and stashes it on the pytest config; hooks and fixtures
read it from there. Building it is where every user mistake is caught, before any test runs.
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import pytest

from . import backends
from . import config as config_mod
from . import hardware as hardware_mod
from . import run_paths
from .backends import Backend
from .config import KnownIssue, SpecdecConfig
from .directions import known_directions
from .gate import Tolerances, resolve_tolerances
from .hardware import Hardware
from .journal_cache import LatestCache
from .lossless import Exactness, parse_exactness
from .options import Settings, resolve
from .relpaths import relative_path
from .sharing import SharingCheck
from .warmup import CacheFlush
from .workloads import Workload, configured_workload



@dataclass(frozen=True)
class RunState:
    config: SpecdecConfig
    settings: Settings
    hardware: Hardware
    backend: Backend
    workloads: Mapping[str, Workload] = field(default_factory=dict)  # by name, prompts read

    def workload(self, name: str) -> Workload:
        """A configured workload, read at configure time (`[[tool.specdec.workloads]]`)."""
        return self.workloads[name]
    tolerances: Tolerances = Tolerances()
    #: a listing (--co, --setup-plan): no fixture is set up and no test called, so nothing a test
    #: needs to run (an extra, a server, a Hub model) is checked, and no server is contacted
    listing: bool = False
    #: the journal's damaged lines this run has warned of (`journal_for`): each said once
    journal_said: set = field(default_factory=set, compare=False, repr=False)
    #: what this run's readers of the journal have read of it (`journal_for`): each line parsed once
    journal_read: LatestCache = field(default_factory=LatestCache, compare=False, repr=False)
    #: whether another client shared a server during a workload (sharing.py): each server whose
    #: /metrics cannot tell said once
    sharing: SharingCheck = field(default_factory=SharingCheck, compare=False, repr=False)
    #: the flush after each workload's warm-up (warmup.py): each server that refused it, said once
    cache_flush: CacheFlush = field(default_factory=CacheFlush, compare=False, repr=False)
    #: the servers (by URL) whose /model_info went unanswered (live.py): each said once
    vocab_said: set = field(default_factory=set, compare=False, repr=False)

    @property
    def lossless(self) -> Exactness:
        """How much of each output must match the reference's (the option, else the backend's)."""
        return parse_exactness(self.settings.lossless or self.backend.default_lossless)

    @property
    def dry_run(self) -> bool:
        """An arch was simulated: the family's suite runs on the embedded engine as a rehearsal."""
        return self.hardware.simulated and self.hardware.family != "cpu"

    @property
    def baseline_path(self) -> Path:
        base = Path(self.settings.baseline_dir)
        if not base.is_absolute():
            base = self.config.root / base
        return base / f"{self.hardware.key}.json"

    def known_issue(self, method: str | None, tp: int, budget: int | None) -> KnownIssue | None:
        """The known issue this configuration hits here, or None (also under
        --specdec-run-known-issues, which runs known-broken configurations as any other)."""
        if self.settings.run_known_issues:
            return None
        hw = self.hardware
        return config_mod.find_known_issue(
            self.config.known_issues, arch=hw.arch, family=hw.family, method=method, tp=tp,
            budget=budget, backend=self.backend.issue_backend)

    @property
    def gpu_claims(self) -> Path | None:
        """The host-wide GPU claims folder; None where this run puts no server on a real GPU."""
        hw = self.hardware
        if not hw.real_indices or not self.backend.launches:
            return None  # slots with no GPU behind them are no host's: test runs must not wait on each other
        return self.claims_folder

    @property
    def claims_folder(self) -> Path:
        """The folder every run of the host claims in: GPUs, and an attached server's turn."""
        if self.settings.gpu_claims:
            return self.path(self.settings.gpu_claims)
        from .servers.host_claims import default_directory

        return default_directory()

    def path(self, value: str) -> Path:
        """A path option, relative to the project root."""
        candidate = Path(value)
        return candidate if candidate.is_absolute() else self.config.root / candidate


def build(root: Path, cli: Mapping[str, Any], ini: Mapping[str, Any],
          detected: Hardware | None = None, *, listing: bool = False,
          ini_under_override: Mapping[str, Any] | None = None) -> RunState:
    """`ini_under_override`: options.resolve's, the ini file's own values of the keys `-o` set."""
    cfg = config_mod.load(root)
    settings = resolve(cli, ini, cfg.options, cfg.source, ini_under_override)
    # Known issues live beside the baselines they explain (baselines/known_issues.toml).
    known_file = root / settings.baseline_dir / "known_issues.toml"
    try:
        has_known = known_file.is_file()
    except OSError as exc:  # a name too long, a folder on the way that cannot be searched
        from .errors import SpecdecUsageError

        option = settings.setter("baseline_dir")
        raise SpecdecUsageError(f"baseline folder {known_file.parent} cannot be looked up "
                                f"({exc.strerror or exc}); choose another {option}") from None
    if has_known or os.path.lexists(known_file):  # a folder or a broken link there is an error, not none
        extra = tuple(config_mod.load_known_issues(known_file, relative_path(known_file, root)))
        cfg = replace(cfg, known_issues=tuple(cfg.known_issues) + extra)
    hardware = hardware_mod.resolve(settings.arch, settings.gpus, detected, settings.source("gpus"),
                                    settings.source("arch"))
    backend = backends.choose(settings.backend, hardware, settings.server_url, cfg.sglang.python,
                              source=settings.source)
    workloads = {spec.name: configured_workload(spec, root) for spec in cfg.workloads}
    tolerances = resolve_tolerances(cli.get("compare_fail"), ini.get("compare_fail"),
                                    cfg.options.get("compare_fail"), cfg.tolerances, cfg.source,
                                    known_directions(cfg.metrics), settings.said("compare_fail", "ini"))
    state = RunState(cfg, settings, hardware, backend, workloads, tolerances, listing=listing)
    run_paths.check(state.path(settings.journal), settings.source("journal"), state.path(settings.artifacts),
                    settings.source("artifacts"))
    backend.check(state)
    return state


#: Where pytest_configure leaves the RunState for hooks and fixtures.
STATE_KEY = pytest.StashKey[RunState]()
#: This process's baseline gate and, in the controller, the run's results (`session`), each made
#: on first use by the plugin.
GATE_KEY = pytest.StashKey["Gate"]()
RESULTS_KEY = pytest.StashKey["Results"]()
#: This run's shard plan, under --specdec-shard only.
SHARD_KEY = pytest.StashKey["ShardPlan"]()
_RUN_ID_KEY = pytest.StashKey[str]()
#: The file in a run's artifact folder whose lock says a live process uses it (liveness.py).
LIVE_MARKER = ".live"
#: Whether the user chose xdist's distribution mode, rather than -n choosing "load" for them.
DIST_CHOSEN_KEY = pytest.StashKey[bool]()
#: pytest's option parser, for reading the command line's `-o` as argparse does (repeated_flags).
PARSER_KEY = pytest.StashKey[pytest.Parser]()


#: Characters a run id keeps as they are: it names a folder (`run-<id>`) and a journal marker's word.
_ID_SAFE = re.compile(r"[A-Za-z0-9._-]+")
#: The longest --testrunuid kept whole; a longer one keeps this much, readable, before its hash.
_ID_KEPT = 24


def id_of(testrunuid: str) -> str:
    """The run id of xdist's `testrunuid`: the value itself where it is short and safe in a path,
    else a safe prefix of it and a hash of the whole, so distinct values never share a run id
    (and so a run folder or a journal)."""
    if len(testrunuid) <= _ID_KEPT and _ID_SAFE.fullmatch(testrunuid):
        return testrunuid
    prefix = re.sub(r"[^A-Za-z0-9._-]+", "_", testrunuid)[:_ID_KEPT - 9]
    return f"{prefix}-{hashlib.sha256(testrunuid.encode()).hexdigest()[:8]}"


def run_id(config: pytest.Config) -> str:
    """One id per pytest run, the same in every xdist worker (they share leases and logs)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput and "testrunuid" in workerinput:
        return id_of(str(workerinput["testrunuid"]))
    if _RUN_ID_KEY not in config.stash:
        given = getattr(config.option, "testrunuid", None)  # xdist's --testrunuid, where the user gave one
        config.stash[_RUN_ID_KEY] = id_of(str(given)) if given else uuid.uuid4().hex[:12]
        if hasattr(config.option, "testrunuid") and not given:
            config.option.testrunuid = config.stash[_RUN_ID_KEY]  # an xdist controller's workers take it
    return config.stash[_RUN_ID_KEY]


def run_dir(state: RunState, config: pytest.Config) -> Path:
    """`<artifacts>/run-<id>`: server logs and the GPU lease book of this run, held for this
    process's lifetime. Creating it deletes the oldest other runs' folders beyond
    --specdec-keep-runs, but not one a live run holds."""
    from . import liveness

    path = state.path(state.settings.artifacts) / f"run-{run_id(config)}"
    created = not path.is_dir()
    path.mkdir(parents=True, exist_ok=True)
    liveness.hold(path / LIVE_MARKER)  # before pruning, which another run may be doing too; each worker too
    if created:
        from .retention import prune
        from .run_paths import run_folders

        prune((p for p in run_folders(path.parent)
               if p != path and not liveness.held_elsewhere(p / LIVE_MARKER)), state.settings.keep_runs - 1)
    return path
