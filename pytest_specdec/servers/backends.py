"""`build_argv`: the command line for a spec, whichever backend it names.

The one place that dispatches on `spec.backend`, so `ManagedServer` and the pool stay
backend-agnostic (they only ever call `argv_for_port(port)`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from pytest_specdec.servers.embedded import ENGINE_MODULE, build_embedded_argv
from pytest_specdec.servers.sglang import DEFAULT_METHOD_FLAGS, MethodFlags, build_sglang_argv
from pytest_specdec.servers.spec import ServerSpec


def build_argv(
    spec: ServerSpec,
    port: int,
    *,
    model_path: str | None = None,
    draft_model_path: str | None = None,
    sglang_method_flags: MethodFlags = DEFAULT_METHOD_FLAGS,
    python: str = sys.executable,
    embedded_entry: Sequence[str] | None = None,
) -> list[str]:
    """argv that serves `spec` on 127.0.0.1:`port` (see the backend modules for the details)."""
    if spec.backend == "sglang":
        return build_sglang_argv(
            spec,
            port,
            model_path=model_path,
            draft_model_path=draft_model_path,
            method_flags=sglang_method_flags,
            python=python,
        )
    entry = embedded_entry if embedded_entry is not None else [python, "-m", ENGINE_MODULE]
    return build_embedded_argv(spec, port, model_path=model_path, entry=entry)
