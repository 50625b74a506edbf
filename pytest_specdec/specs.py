"""From a matrix cell and the run's settings to a `ServerSpec` and the command that serves it.

The only place that knows how config keys become server arguments, so that the fixtures, the
pool and the xdist workers all boot exactly the same server for one test id.
"""

from __future__ import annotations

import sys
from functools import partial
from typing import Callable, Sequence

from .collection import MatrixCase
from .servers.backends import build_argv
from .servers.spec import ServerSpec
from .state import RunState


def _engine_args(state: RunState, case: MatrixCase) -> tuple[str, ...]:
    engine = state.config.engine
    args = ["--model-preset", engine.model_preset, "--draft-agreement", str(engine.draft_agreement),
            "--block-size", str(engine.block_size)]
    if engine.device != "auto":  # the engine picks CUDA when it sees a GPU
        args += ["--device", engine.device]
    if engine.num_layers is not None:
        args += ["--num-layers", str(engine.num_layers)]
    if state.dry_run and case.budget is not None:
        # A dry run rehearses the family's suite: known crashes are reproduced by the engine's
        # fault injection, so the xfail/XPASS machinery is exercised end to end.
        issue = _known_crash(state, case)
        if issue:
            args += ["--fault-crash-budgets", str(case.budget)]
    return tuple(args) + tuple(engine.extra_args)


def _known_crash(state: RunState, case: MatrixCase) -> bool:
    hw = state.hardware
    return any(issue.matches(arch=hw.arch, family=hw.family, method=case.method, tp=case.tp,
                             budget=case.budget, backend="embedded")
               for issue in state.config.known_issues) and not state.settings.run_known_issues


def server_spec(case: MatrixCase, state: RunState) -> ServerSpec:
    if state.backend == "sglang":
        return ServerSpec(backend="sglang", method=case.method, tp=case.tp, budget=case.budget,
                          model=state.config.model, draft_model=state.config.draft_model,
                          seed=state.config.engine.seed,
                          extra_args=state.config.sglang.extra_args)
    return ServerSpec(backend="embedded", method=case.method, tp=case.tp, budget=case.budget,
                      seed=state.config.engine.seed, extra_args=_engine_args(state, case))


def argv_builder(spec: ServerSpec, state: RunState,
                 model_path: str | None = None,
                 draft_model_path: str | None = None) -> Callable[[int], Sequence[str]]:
    """`port -> argv` for the spec's backend (the server manager picks the port)."""
    return partial(_argv, spec, model_path=model_path, draft_model_path=draft_model_path,
                   sglang_method_flags=state.config.sglang.method_flags,
                   python=state.config.sglang.python if spec.backend == "sglang"
                   else sys.executable)


def _argv(spec: ServerSpec, port: int, **kwargs) -> Sequence[str]:
    return build_argv(spec, port, **kwargs)
