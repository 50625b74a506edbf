"""The run's resolved state: config file, effective options, hardware and backend, built once.

`pytest_configure` builds one `RunState` and stashes it on the pytest config; hooks and fixtures
read it from there. Building it is where every user mistake is caught, before any test runs.
"""

from __future__ import annotations

import importlib.util
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

import pytest

from . import config as config_mod
from . import hardware as hardware_mod
from .config import SpecdecConfig
from .errors import SpecdecUsageError
from .hardware import Hardware
from .options import Settings, resolve


@dataclass(frozen=True)
class RunState:
    config: SpecdecConfig
    settings: Settings
    hardware: Hardware
    backend: str  # "embedded", "sglang" or "attach"
    backend_reason: str

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

    def path(self, value: str) -> Path:
        """A path option, relative to the project root."""
        candidate = Path(value)
        return candidate if candidate.is_absolute() else self.config.root / candidate


def sglang_importable() -> bool:
    return importlib.util.find_spec("sglang") is not None


def choose_backend(requested: str, hardware: Hardware, server_url: str | None) -> tuple[str, str]:
    """`auto` means SGLang where it is importable and a real GPU is present, else embedded."""
    if server_url:
        return "attach", f"attached to {server_url}"
    if requested == "embedded":
        return "embedded", "requested"
    if requested == "sglang":
        if not sglang_importable():
            raise SpecdecUsageError(
                "--specdec-backend sglang: the sglang package is not importable in this Python; "
                "install it (pip install sglang) or use --specdec-backend embedded")
        return "sglang", "requested"
    if hardware.physical_gpus == 0:
        return "embedded", "auto: no GPU"
    if not sglang_importable():
        return "embedded", "auto: sglang not importable"
    return "sglang", "auto: GPU and sglang present"


def build(root: Path, cli: Mapping[str, Any], ini: Mapping[str, str],
          detected: Hardware | None = None) -> RunState:
    cfg = config_mod.load(root)
    settings = resolve(cli, ini, cfg.options, cfg.source)
    # Known issues live beside the baselines they explain (baselines/known_issues.toml).
    known_file = root / settings.baseline_dir / "known_issues.toml"
    if known_file.is_file():
        extra = tuple(config_mod.load_known_issues(known_file))
        cfg = replace(cfg, known_issues=tuple(cfg.known_issues) + extra)
    hardware = hardware_mod.resolve(settings.arch, settings.gpus, detected)
    backend, reason = choose_backend(settings.backend, hardware, settings.server_url)
    return RunState(cfg, settings, hardware, backend, reason)


#: Where pytest_configure leaves the RunState for hooks and fixtures.
STATE_KEY = pytest.StashKey[RunState]()
_RUN_ID_KEY = pytest.StashKey[str]()


def run_id(config: pytest.Config) -> str:
    """One id per pytest run, the same in every xdist worker (they share leases and logs)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput and "testrunuid" in workerinput:
        return str(workerinput["testrunuid"])[:12]
    if _RUN_ID_KEY not in config.stash:
        config.stash[_RUN_ID_KEY] = uuid.uuid4().hex[:12]
    return config.stash[_RUN_ID_KEY]


def run_dir(state: RunState, config: pytest.Config) -> Path:
    """`<artifacts>/run-<id>`: server logs and the GPU lease book of this run."""
    path = state.path(state.settings.artifacts) / f"run-{run_id(config)}"
    path.mkdir(parents=True, exist_ok=True)
    return path
