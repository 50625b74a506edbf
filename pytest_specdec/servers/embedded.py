"""Command line for the embedded reference engine (`python -m pytest_specdec.engine`).

The engine's CLI is fixed in docs/ARCHITECTURE.md. Engine-only knobs (`--model-preset`,
`--device`, `--draft-agreement`, the `--fault-*` flags, ...) travel in `spec.extra_args`, so one
spec type serves both backends and a fault-injected spec is a different spec (booted separately,
never reused for a healthy one).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from pytest_specdec.servers.spec import ServerSpec

ENGINE_MODULE = "pytest_specdec.engine"


def build_embedded_argv(
    spec: ServerSpec,
    port: int,
    *,
    model_path: str | None = None,
    host: str = "127.0.0.1",
    entry: Sequence[str] | None = None,
) -> list[str]:
    """argv for the embedded engine serving `spec` on `host:port`.

    `entry` replaces `[python, -m, pytest_specdec.engine]` (tests point it at a stand-in script).
    The engine is single-process, so `spec.tp` only decides how many GPUs it is leased; the budget
    is passed only for ddtree. `spec.model` is usually a Hub id meant for SGLang, so weights are
    passed only as an explicit, already provisioned `model_path`; without it the engine uses its
    built-in synthetic preset.
    """
    argv = list(entry) if entry is not None else [sys.executable, "-m", ENGINE_MODULE]
    argv += ["--host", host, "--port", str(port), "--method", spec.method]
    if spec.budget is not None:
        argv += ["--budget", str(spec.budget)]
    argv += ["--seed", str(spec.seed), "--log-level", "info"]
    if model_path:
        argv += ["--model-path", str(model_path)]
    if spec.context_length is not None:
        argv += ["--context-length", str(spec.context_length)]
    argv += list(spec.extra_args)
    return argv
