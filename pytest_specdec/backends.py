"""One object per server backend: the embedded engine, SGLang, or a server someone else runs.

The backend is decided once, at configure time (`choose`), and everything that differs between
backends asks that object: the `ServerSpec` a matrix cell becomes, the command line that serves
it, where the model comes from, which known issues apply, how prompts are counted against the
context length, and whether servers are launched (and so leased, retired and killed) at all.
No other module compares backend names.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

from . import extras
from .configuration import MatrixCase
from .errors import SpecdecUsageError
from .hardware import Hardware
from .servers.embedded import ENGINE_MODULE, build_embedded_argv
from .servers.sglang import build_sglang_argv
from .servers.spec import ServerSpec
from .sglang_api import (INFO_NUM_DRAFT_TOKENS, INFO_SKIP_TOKENIZER_INIT, INFO_SPECULATIVE_ALGORITHM, INFO_TP_SIZE,
                         SKIP_TOKENIZER_INIT_FLAG, TOKENIZE)
from .workloads import embedded_token_count

if TYPE_CHECKING:
    from .servers.host_claims import HostClaims
    from .servers.pool import ServerPool
    from .state import RunState
    from .token_count import ServerTokenCounter

ArgvBuilder = Callable[[int], Sequence[str]]

#: CUDA_VISIBLE_DEVICES that shows a process no GPU (CUDA's list ends at the first invalid entry)
NO_GPU = "-1"


class Backend:
    """What a run needs to know about its servers; subclasses fill in their backend's part."""

    name: ClassVar[str]
    #: the `backend` value of `[[known_issues]]` entries that apply to this backend's servers
    issue_backend: ClassVar[str] = "embedded"
    #: whether this run starts its servers (and so leases GPUs for them and stops them)
    launches: ClassVar[bool] = True
    #: how much of each output must match the reference's unless `lossless` says otherwise:
    #: batched GPU kernels are not bit-stable, so a long output may drift by a near-tie
    default_lossless: ClassVar[str] = "prefix:32"
    #: where the flags of a command line the server refused come from, and the fix
    argv_hint: ClassVar[str] = ""
    #: whether a dry run's servers fail as a known issue says (so that its XPASS means "fixed")
    reproduces_known_issues: ClassVar[bool] = False
    #: top logprobs the reference's requests ask for (0: none): SGLang serves them, so a divergence
    #: can say how close the reference's choice was; a server that refuses them would fail the run
    reference_top_logprobs: ClassVar[int] = 0
    #: the methods whose requests the server serves logprobs on (None: every method)
    logprob_methods: ClassVar[tuple[str, ...] | None] = None

    def __init__(self, reason: str) -> None:
        self.reason = reason  # why this backend was chosen, for the report header
        self._counters: dict[str, ServerTokenCounter] = {}  # by URL: each asks its server once a text

    def __str__(self) -> str:
        return self.name

    def check(self, state: RunState) -> None:
        """Raise SpecdecUsageError for a mistake this backend can see before any server boots."""

    def warning(self, state: RunState) -> str | None:
        """What a user of a run that collected specdec tests must hear about this backend's
        choice, or None."""
        return None

    def server_spec(self, case: MatrixCase, state: RunState) -> ServerSpec:
        raise NotImplementedError

    def former_model_parts(self, state: RunState) -> list[dict[str, Any]]:
        """The model parts earlier releases gave this setup, which the journal records and baseline
        entries they wrote hold: the configured ids, on every backend."""
        return [{"model": state.config.model, "draft_model": state.config.draft_model}]

    def token_counter(self, url: str) -> Callable[[str], int] | None:
        """Prompt length in the tokens of the live server at `url`, for the context-length guard;
        None: not counted."""
        return None

    def counting(self, state: RunState) -> str | None:
        """How the guard counts prompt tokens, for the report header; None: as the server does,
        nothing to say."""
        return None

    def other_configuration(self, case: MatrixCase, state: RunState) -> str | None:
        """Why a test of `case` cannot have this run's server, known before it runs, or None."""
        return None

    def serving(self, state: RunState) -> str | None:
        """What a server this run did not start serves, for the report header; None: the run
        starts its servers from the configuration."""
        return None

    def listing_note(self, state: RunState) -> str | None:
        """What a listing (`RunState.listing`) leaves unchecked that its header would otherwise
        tell, for that header; None: nothing it would tell (a missing extra or Hub model is said
        by the run that needs it, before any test)."""
        return None

    def _server_counter(self, url: str, fallback: Callable[[str], int] | None = None,
                        fallback_source: str = "") -> ServerTokenCounter:
        """The server's own count (its /v1/tokenize), one counter per URL for the session."""
        from .token_count import ServerTokenCounter  # aiohttp, once a server is up

        url = url.rstrip("/")
        if url not in self._counters:
            self._counters[url] = ServerTokenCounter(url, fallback, fallback_source=fallback_source)
        return self._counters[url]

    def argv_builder(self, spec: ServerSpec, state: RunState) -> ArgvBuilder:
        """`port -> argv` for `spec` (the server manager picks the port)."""
        raise NotImplementedError

    def server_settings(self, spec: ServerSpec, state: RunState) -> dict[str, Any]:
        """Everything that decides how `spec`'s server behaves, as plain JSON (the server part
        of a measurement's fingerprint): the spec, with its model ids and every extra argument."""
        return dataclasses.asdict(spec)

    def model_path(self, state: RunState) -> str | None:
        """The target model as a local path (the `specdec_model_path` fixture); None: built in."""
        return None

    def model_part(self, state: RunState) -> dict[str, Any]:
        """The models this backend's servers serve, as plain JSON (the model part of a
        measurement's fingerprint): the configured target and draft ids."""
        return {"model": state.config.model, "draft_model": state.config.draft_model}

    def check_apart(self, state: RunState, cases: Iterable[MatrixCase]) -> None:
        """SpecdecUsageError where the configurations `cases` of the tests that will run would all
        be measured on one server that does not say which of them it is; a backend that launches
        boots one server per configuration, so nothing to check."""

    def check_ready(self, state: RunState) -> None:
        """SpecdecUsageError, one line, when this run cannot serve its tests (a missing extra, a
        server that is not there): checked once, after collection, if a test needs a server."""

    def needs_gpu(self, state: RunState) -> tuple[str, str] | None:
        """What of this run's servers cannot start without a GPU, and how to run them without one;
        None: they start on the CPU."""
        return None

    def check_gpu_slots(self, state: RunState) -> None:
        """A server that needs a GPU, on a dry run's slot with none of this run's GPUs behind it
        (on a GPU host its CUDA_VISIBLE_DEVICES is -1), fails to start after its startup time, test
        after test: say so once, before any server boots."""
        hw = state.hardware
        empty = [gpu.index for gpu in hw.gpus if hw.hides((gpu.index,))]
        need = self.needs_gpu(state) if empty else None
        if need is None:
            return
        what, fix = need
        settings = state.settings
        asked = (f"{settings.source('gpus')} {settings.gpus}" if settings.gpus is not None
                 else f"{settings.source('arch')} {settings.arch}")
        given = hw.real_indices
        if not given:
            raise SpecdecUsageError(
                f"{asked}: {what} need a GPU, and this run was given none of this host's "
                f"{max(hw.host_gpus, hw.physical_gpus)} (CUDA_VISIBLE_DEVICES hides them), so its servers would "
                f"see none and fail to start; give the run GPUs in CUDA_VISIBLE_DEVICES, or {fix}")
        raise SpecdecUsageError(
            f"{asked}: a dry run of {hw.count} GPUs laid over the {len(given)} this run was given "
            f"({', '.join(map(str, given))}); {what} need a GPU, and the {len(empty)} slots beyond have none "
            f"(their servers would see CUDA_VISIBLE_DEVICES={NO_GPU} and fail to start, one test after "
            f"another); set {settings.setter('gpus')} to at most {len(given)}, or {fix}")

    def pool(self, state: RunState, run_dir: Path,
             announce: Callable[[str], None] | None = None) -> ServerPool:
        """The session's server pool: each configuration boots once, on leased GPUs (claimed
        host-wide on a real inventory; `announce` prints a wait for another run's GPU, a slow
        boot's and a slow liveness check's)."""
        # the server manager is imported once a test needs a server, not when the plugin loads
        from .servers.leases import GpuLeases, read_topology
        from .servers.pool import ServerPool
        from .servers.process import ManagedServer

        leases = None
        if state.hardware.count:
            # Real GPUs: TP sets follow NVLink where `nvidia-smi topo -m` shows it; a simulated
            # inventory has no links to read.
            topology = read_topology() if not state.hardware.simulated else None
            leases = GpuLeases(run_dir / "leases", [gpu.index for gpu in state.hardware.gpus],
                               topology=topology, claims=_host_claims(state, run_dir), announce=announce)
        log_dir = run_dir / "logs"

        def factory(spec: ServerSpec, gpus: tuple[int, ...]) -> ManagedServer:
            # a slot of a simulated inventory that is none of this run's GPUs: its server sees none
            hidden = {"CUDA_VISIBLE_DEVICES": NO_GPU} if state.hardware.hides(gpus) else None
            return ManagedServer(
                spec, self.argv_builder(spec, state), log_dir=log_dir, gpus=gpus, env=hidden,
                startup_timeout=state.settings.startup_timeout,
                startup_setting=state.settings.setter("startup_timeout"),
                stall_timeout=state.settings.stall_timeout, stall_setting=state.settings.setter("stall_timeout"),
                wait_gpu_release=state.hardware.physical_gpus > 0, argv_hint=self.argv_hint, announce=announce,
                placement=state.hardware.placement(gpus))

        return ServerPool(factory, leases=leases, restart_on_crash=state.settings.restart_on_crash,
                          lease_timeout=state.settings.gpu_wait_timeout,
                          lease_setting=state.settings.setter("gpu_wait_timeout"))


class EmbeddedBackend(Backend):
    """The engine of this package, one process per configuration, with synthetic weights."""

    name = "embedded"
    argv_hint = "check [tool.specdec.engine] extra_args"
    reproduces_known_issues = True  # a dry run's known crash is injected (see _engine_args)
    default_lossless = "exact"  # one process, greedy, batch-independent: bit-stable by design
    reference_top_logprobs = 2  # the lead of the first choice over the second: lossless.margin_note
    logprob_methods = ("ar",)  # a speculative step verifies a tree: the engine refuses return_logprob there

    def __init__(self, reason: str, *, sglang_missing_in: str | None = None) -> None:
        super().__init__(reason)
        self.sglang_missing_in = sglang_missing_in  # `auto` on a GPU host: the Python SGLang was not found in

    def warning(self, state: RunState) -> str | None:
        """`auto` on a GPU host without SGLang measures, and gates, the engine where the user
        likely meant SGLang (a fresh venv does not see a system-wide SGLang): say so, and how to
        pin the backend, without changing the choice."""
        hw = state.hardware
        if self.sglang_missing_in is None or hw.simulated:  # a dry run's header says what it runs on
            return None
        family = hw.family if hw.family in state.config.matrices else "cpu"
        flag = _flag("backend")
        return (f"backend auto chose the embedded engine on a host with {hw.describe()}, as sglang is not "
                f"importable in {self.sglang_missing_in}: the {family} matrix is measured, and gated against "
                f"{state.baseline_path.name}, on the embedded engine, not on SGLang. To require SGLang, set "
                f"{flag}=sglang (a run without it then stops; a venv sees an SGLang installed system-wide "
                f"only when made with --system-site-packages); to choose the engine on purpose, {flag}=embedded")

    def server_spec(self, case: MatrixCase, state: RunState) -> ServerSpec:
        return ServerSpec(backend=self.name, method=case.method, tp=case.tp, budget=case.budget,
                          seed=state.config.engine.seed, extra_args=self._engine_args(case, state))

    @staticmethod
    def _engine_args(case: MatrixCase, state: RunState) -> tuple[str, ...]:
        engine = state.config.engine
        args = engine.argv()
        if state.dry_run and state.known_issue(case.method, case.tp, case.budget) is not None:
            # A dry run rehearses the family's suite: known crashes are reproduced by the engine's
            # fault injection, so the xfail/XPASS machinery is exercised end to end; a tree of the
            # budget crashes in its verify, a configuration of no budget at its first request.
            args += (["--fault-crash-budgets", str(case.budget)] if case.budget is not None
                     else ["--fault-crash-after", "0"])
        return tuple(args) + tuple(engine.extra_args)

    def argv_builder(self, spec: ServerSpec, state: RunState) -> ArgvBuilder:
        return partial(build_embedded_argv, spec, entry=[sys.executable, "-m", ENGINE_MODULE])

    def model_part(self, state: RunState) -> dict[str, Any]:
        # the engine serves its preset's synthetic models; model and draft_model it never reads
        return {"preset": state.config.engine.model_preset}

    def token_counter(self, url: str) -> Callable[[str], int] | None:
        return embedded_token_count  # the engine's own tokenizer, here: no request needed

    def check(self, state: RunState) -> None:
        """Each matrix budget through the engine's own checks (a tree that fills the context got
        the engine killed for its memory after minutes of warm-up)."""
        from .engine.cli import parse_args, rejecting_parser

        source, engine = state.config.source, state.config.engine
        where = ""  # the budget being checked, for the one parser's refusal

        def reject(message: str) -> NoReturn:
            raise SpecdecUsageError(f"{where}: the embedded engine refuses it: {message}")

        parser = rejecting_parser(reject)  # built once: each build took ~5 ms, 39 of them a default matrix
        for matrix in state.config.matrices.values():
            table = f"{source[:-1]}.matrix.{matrix.family}]" if source.endswith("]") else \
                f"{source} [matrix.{matrix.family}]"
            checked = set()
            for method, _, budget in matrix.entries():
                if budget is None or (method, budget) in checked:
                    continue  # another TP's entry: the engine's checks read no TP
                checked.add((method, budget))
                where = f"{table} budget {budget}"
                parse_args(["--method", method, "--budget", str(budget), *engine.argv(), *engine.extra_args], parser)

    def check_ready(self, state: RunState) -> None:
        extras.require("engine", f"the embedded engine (backend {self.reason})")
        self.check_gpu_slots(state)
        self._check_a_gpu_exists(state)

    def _check_a_gpu_exists(self, state: RunState) -> None:
        """The engine on device cuda on a host without a GPU exits at start, test after test, its
        reason only in each log's last lines: say so once, before any server boots."""
        hw = state.hardware
        if max(hw.physical_gpus, hw.host_gpus) > 0:
            return  # the slots' own check (check_gpu_slots) covers a GPU host
        need = self.needs_gpu(state)
        if need is None:
            return
        import torch  # only for device cuda on a host where no GPU was detected: ask as the engine will

        if torch.cuda.device_count() > 0:
            return
        what, fix = need
        raise SpecdecUsageError(f"{what} need a GPU, and this host has none (none detected, and torch sees "
                                f"no CUDA device), so each would exit at start, test after test; {fix}")

    def needs_gpu(self, state: RunState) -> tuple[str, str] | None:
        from .engine.cli import rejecting_parser

        source, engine = state.config.source, state.config.engine
        table = f"{source[:-1]}.engine]" if source.endswith("]") else f"{source} [engine]"

        def reject(message: str) -> NoReturn:
            raise SpecdecUsageError(f"{table} extra_args: the embedded engine refuses them: {message}")

        argv = ["--method", "ar", *engine.argv(), *engine.extra_args]
        if rejecting_parser(reject).parse_args(argv).device != "cuda":
            return None  # the CPU: any slot will do
        fix = (f'set device = "auto" in {table}' if engine.device == "cuda"
               else f"drop --device cuda from {table} extra_args")
        return "the embedded engine's servers on device cuda", f"run the engine on the CPU ({fix})"


class SGLangBackend(Backend):
    """`python -m sglang.launch_server`, with models provisioned from the Hub into the cache."""

    name = "sglang"
    issue_backend = "sglang"
    reference_top_logprobs = 2  # the lead of the first choice over the second: lossless.margin_note
    argv_hint = ("match [tool.specdec.sglang] method_flags to this SGLang build (the preset num-draft-tokens "
                 "takes upstream's flags only) and check its extra_args")

    def check(self, state: RunState) -> None:
        from .models import check_local

        _each((state.config.model, state.config.draft_model), lambda model: check_local(_in_project(model, state)))

    def needs_gpu(self, state: RunState) -> tuple[str, str] | None:
        return ("SGLang's servers", f"rehearse on the embedded engine, which runs on the CPU (set "
                                    f"{state.settings.setter('backend')} to embedded)")

    def server_spec(self, case: MatrixCase, state: RunState) -> ServerSpec:
        return ServerSpec(backend=self.name, method=case.method, tp=case.tp, budget=case.budget,
                          model=state.config.model, draft_model=state.config.draft_model,
                          seed=state.config.engine.seed, extra_args=state.config.sglang.extra_args)

    def argv_builder(self, spec: ServerSpec, state: RunState) -> ArgvBuilder:
        draft = state.config.draft_model if spec.is_speculative else None
        paths = _each((state.config.model, draft), lambda model: _provision(model, state))
        return partial(build_sglang_argv, spec, model_path=paths[0],
                       draft_model_path=paths[1], method_flags=state.config.sglang.method_flags,
                       python=state.config.sglang.python)

    def model_path(self, state: RunState) -> str | None:
        return _provision(state.config.model, state) if state.config.model else None

    def token_counter(self, url: str) -> Callable[[str], int] | None:
        return self._server_counter(url)

    def counting(self, state: RunState) -> str | None:
        uncut = [w.name for w in state.config.workloads if w.truncate]
        return (f"by each server's {TOKENIZE} (SGLang 0.5.3.post1 and later); a server without it is not "
                f"guarded" + (f", and truncate is not applied to it (workload {', '.join(uncut)}): a prompt too "
                              f"long for its context fails its requests" if uncut else ""))

    def server_settings(self, spec: ServerSpec, state: RunState) -> dict[str, Any]:
        return {**super().server_settings(spec, state),
                "method_flags": list(state.config.sglang.method_flags.get(spec.method, ()))}

    def check_ready(self, state: RunState) -> None:
        from .configuration import is_speculative
        from .models import is_hub_id, offline

        self.check_gpu_slots(state)
        # else each test errors as its server is built, after the configurations before it ran
        source = state.config.source
        where = source if source.endswith("]") else "[tool.specdec] of pyproject.toml (or specdec.toml)"
        if not state.config.model:
            raise SpecdecUsageError(f"the sglang backend serves a model: set model in {where} "
                                    f"(a local folder or a Hub id)")
        for matrix in state.config.matrices.values():
            speculative = [m for m in matrix.methods if is_speculative(m)]
            if speculative and not state.config.draft_model:
                table = f"{source[:-1]}.matrix.{matrix.family}]" if source.endswith("]") else \
                    f"{source} [matrix.{matrix.family}]"
                raise SpecdecUsageError(f"methods {', '.join(speculative)} of {table} need a draft model on the "
                                        f"sglang backend: set draft_model in {where}")
        served = (state.config.model, state.config.draft_model if any(
            is_speculative(m) for matrix in state.config.matrices.values() for m in matrix.methods) else None)
        hub = [ref for ref in filter(None, served) if is_hub_id(_in_project(ref, state))]
        for ref in hub:
            extras.require("models", f"fetching {ref} from the Hugging Face Hub")
        # offline, what the cache lacks cannot be fetched; online, a bad id is found by one listing
        # each: said once, for every model, not by one server's build after another
        _each(hub, (lambda ref: _provision(ref, state)) if offline() else (lambda ref: _on_hub(ref, state)))


class AttachBackend(Backend):
    """A server someone else started (`--specdec-server-url`): nothing is launched or stopped,
    and each test runs only if that server is its configuration (per `/server_info`). The run
    stops where it is none of the configured ones, or serves another model or draft model than
    configured; the fingerprint's model part is what it serves."""

    name = "attach"
    launches = False
    #: where the server has no /v1/tokenize: a byte-level tokenizer with a BOS never makes fewer
    #: tokens than a subword one that adds at most one special token, an upper bound
    FALLBACK_SOURCE = "as the embedded engine counts (BOS + one per UTF-8 byte), an upper bound"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self._identity = None  # what the server says it is, once asked
        self._identity_read = False

    def server_spec(self, case: MatrixCase, state: RunState) -> ServerSpec:
        return ServerSpec(backend=self.name, method=case.method, tp=case.tp, budget=case.budget,
                          seed=state.config.engine.seed)

    def argv_builder(self, spec: ServerSpec, state: RunState) -> ArgvBuilder:
        raise TypeError("an attached server is never launched")

    def server_settings(self, spec: ServerSpec, state: RunState) -> dict[str, Any]:
        return {**super().server_settings(spec, state), "url": state.settings.server_url}

    def model_part(self, state: RunState) -> dict[str, Any]:
        """What the server says it serves, so that figures are keyed by what ran; the
        configuration's claim only where it says nothing (its draft where it does not draft: none)."""
        configured = super().model_part(state)
        identity = self._served(state)
        if identity is None:
            return configured
        unreported = identity.unreported
        draft = (configured["draft_model"] if "draft_model" in unreported and identity.speculates is not False
                 else identity.draft_model)
        return {"model": configured["model"] if "model" in unreported else identity.model, "draft_model": draft}

    def former_model_parts(self, state: RunState) -> list[dict[str, Any]]:
        """Also, where the server names the draft it speculates with, the configured draft in its
        place: what `model_part` said while it named none (the embedded engine, before it reported
        its own target as its draft; the attach check has compared a configured draft with it)."""
        formers = super().former_model_parts(state)
        identity = self._served(state)
        if identity is not None and identity.speculates and "draft_model" not in identity.unreported:
            formers.append({**self.model_part(state), "draft_model": state.config.draft_model})
        return formers

    def token_counter(self, url: str) -> ServerTokenCounter:
        return self._server_counter(url, embedded_token_count, self.FALLBACK_SOURCE)

    def counting(self, state: RunState) -> str | None:
        """The server is up already: whether it counts is asked now (a server that does not
        answer is the readiness check's to report); a listing does not ask."""
        counter = self.token_counter(state.settings.server_url)
        served = None if state.listing else counter.probe()
        text = counter.source.removeprefix("counted ")  # after the probe: which count is in effect
        if served is False:
            text += "; a prompt that fits may be refused, and truncate cuts more than it needs to"
        return text

    def serving(self, state: RunState) -> str | None:
        """What the server serves, and what of the configuration it does not report and so
        cannot be checked against (where the configuration sets it), for the report header."""
        identity = self._served(state)
        if identity is None:
            return None
        text = f"{identity.id}, model {identity.model or '(not reported)'}"
        if identity.speculates is not False:
            text += f", draft model {identity.draft_model or '(not reported)'}"
        unchecked = [name for name, unset in (
            ("method", False), ("TP", False), ("budget", False), ("model", not state.config.model),
            ("draft model", not state.config.draft_model or identity.speculates is False))
            if not unset and _field(name) in identity.unreported]
        if unchecked:
            text += (f"; it does not report the {', '.join(unchecked)}, so "
                     f"{'that is' if len(unchecked) == 1 else 'those are'} not checked against the configuration")
        return text

    def listing_note(self, state: RunState) -> str | None:
        return (f"the attached server {state.settings.server_url} is not contacted, so neither what it serves "
                f"nor which tests a run skips as another configuration's is checked; the test ids are the "
                f"configuration's, as a run's are")

    def other_configuration(self, case: MatrixCase, state: RunState) -> str | None:
        """The server is another configuration than `case` (per its /server_info, read once);
        None where it is `case` or does not say (its readiness check and tests report that)."""
        from .servers.attach import mismatch

        identity = self._served(state)
        if identity is None:
            return None
        return mismatch(state.settings.server_url, identity, self.server_spec(case, state))

    def _served(self, state: RunState):
        """The server's identity, read once; None where it cannot be read (the readiness check
        says why), or is not to be: a listing needs none, and a server that does not answer
        would hold it up for each read's timeout."""
        from .servers.attach import read_identity
        from .servers.diagnosis import ServerError

        if state.listing:
            return None
        if not self._identity_read:
            try:
                self._identity = read_identity(state.settings.server_url.rstrip("/"))
            except (ServerError, ValueError):
                self._identity = None
            self._identity_read = True
        return self._identity

    def check_ready(self, state: RunState) -> None:
        from .collection import matrix_cases
        from .servers.attach import disagreements, fetch_server_info, read_identity
        from .servers.diagnosis import ServerError

        url = state.settings.server_url
        where = state.settings.source("server_url")
        try:
            info = fetch_server_info(url.rstrip("/"))
        except ServerError as exc:
            fix = {"hang": "restart it", "no-route": _route_fix(url)}.get(exc.reason, "start the server or fix the URL")
            raise SpecdecUsageError(f"{where} {url}: {exc.cause}; {fix}") from None
        if info.get(INFO_SKIP_TOKENIZER_INIT) is True:  # else every test fails on SGLang's refusal, one by one
            raise SpecdecUsageError(f"{where} {url}: the server runs with "
                                    f"{SKIP_TOKENIZER_INIT_FLAG} (its /server_info says so), so it has no tokenizer "
                                    f"and refuses every request the plugin sends, whose prompts are text; restart "
                                    f"it without {SKIP_TOKENIZER_INIT_FLAG}")
        try:
            identity = read_identity(url.rstrip("/"), info)
        except ValueError as exc:
            raise SpecdecUsageError(f"{where} {url}: {exc}") from None
        self._identity, self._identity_read = identity, True
        config = state.config
        found = disagreements(identity, [(c.method, c.tp, c.budget) for c in matrix_cases(state)],
                              config.model, config.draft_model)
        if found:
            source = (config.source if config.source != "defaults"
                      else "[tool.specdec] of pyproject.toml (or specdec.toml)")
            keys = [key for key, field in (("model", "model"), ("draft_model", "draft model"))
                    if any(d.field == field for d in found)]
            keys += ["the matrix"] if any(d.field not in ("model", "draft model") for d in found) else []
            raise SpecdecUsageError(
                f"{where} {url}: the server serves another setup than the configuration says (per its "
                f"/server_info{' and /model_info' if any(d.field == 'model' for d in found) else ''}): "
                f"{'; '.join(map(str, found))}; figures measured on it would be recorded and gated as the "
                f"configuration's. Attach a server that serves the configuration, or set "
                f"{' and '.join(keys)} in {source} to what it serves")

    def check_apart(self, state: RunState, cases: Iterable[MatrixCase]) -> None:
        """Tests of several configurations that the server all matches, as it does not report the
        field that tells them apart, would each record one server's figures under its own
        configuration's key (a `dflash-tp4` row and a `ddtree-tp8-b16` row measured on one
        server, saved as baselines of both): refuse, naming them, the fields and the fixes."""
        from .servers.attach import indistinct

        identity = self._served(state)
        if identity is None:  # unreadable: the readiness check says why
            return
        specs, fields = indistinct(identity, (self.server_spec(case, state) for case in cases))
        if not specs:
            return
        url, where = state.settings.server_url, state.settings.source("server_url")
        keys = {"method": INFO_SPECULATIVE_ALGORITHM, "TP": INFO_TP_SIZE, "budget": INFO_NUM_DRAFT_TOKENS}
        unsaid = fields[0] if len(fields) == 1 else f"{', '.join(fields[:-1])} or {fields[-1]}"
        narrow = f'-m "{_selector(specs[0])}" runs {specs[0].id} alone'
        if fields == ["TP"]:
            narrow += f", as {_flag('tp')}={specs[0].tp} does"
        raise SpecdecUsageError(
            f"{where} {url}: the server does not report its {unsaid} (per its /server_info), so "
            f"the {len(specs)} configurations {', '.join(spec.id for spec in specs)} of this run would all run on "
            f"it, each one's figures recorded and gated under its own key though one server measured them all. "
            f"Run one configuration at a time against it ({narrow}), attach each configuration's own server "
            f"in a run of its own, or have the server report {', '.join(keys[f] for f in fields)} in its "
            f"/server_info")

    def pool(self, state: RunState, run_dir: Path,
             announce: Callable[[str], None] | None = None) -> ServerPool:
        from .servers.pool import ServerPool

        from .servers.attach_lease import AttachedLease, HostTurn

        url = state.settings.server_url
        # in the lease folder of the run, which its workers share, and in the host's, which every run
        # of the host looks in: one test at a time on it
        host = HostTurn(state.claims_folder, run=run_dir.name.removeprefix("run-"), project=str(state.config.root),
                        setting=state.settings.setter("gpu_claims"))
        lease = AttachedLease(run_dir / "leases", url, timeout=state.settings.gpu_wait_timeout,
                              setting=state.settings.setter("gpu_wait_timeout"), announce=announce,
                              folder_setting=state.settings.setter("artifacts"), host=host)
        try:
            return ServerPool.attach(url, announce=announce, stall_timeout=state.settings.stall_timeout,
                                     stall_setting=state.settings.setter("stall_timeout"), lease=lease)
        except Exception as exc:
            raise SpecdecUsageError(f"{state.settings.source('server_url')} {url}: {exc}") from None


def _selector(spec: ServerSpec) -> str:
    """The `-m` expression that selects the tests of `spec`'s configuration alone, by the
    `specdec(method=..., tp=..., budget=...)` marker every matrix test carries."""
    budget = f", budget={spec.budget}" if spec.budget is not None else ""
    return f"specdec(method='{spec.method}', tp={spec.tp}{budget})"


def _route_fix(url: str) -> str:
    """What to do where a server answers at `url` but not /server_info: an SGLang server serves it
    at its root, so a URL with a path (`/v1`, an OpenAI client's base; `/generate`) is the mistake."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.path.strip("/"):
        return (f"a server answers there, but the plugin adds SGLang's routes (/server_info, /generate) to the "
                f"URL, so give the server's root: {parts.scheme}://{parts.netloc}")
    return "a server answers there, but not SGLang's /server_info: attach an SGLang server or the embedded engine"


def _field(shown: str) -> str:
    """A ServerIdentity field's name from its name in messages."""
    from .servers.attach import FIELDS

    return next(name for name, text in FIELDS.items() if text == shown)


def _host_claims(state: RunState, run_dir: Path) -> HostClaims | None:
    """This process's claims on the host's GPUs (a simulated inventory's too, on the GPUs it is laid
    over), or None where no GPU of the host is leased."""
    folder = state.gpu_claims
    if folder is None:
        return None
    from .servers.host_claims import HostClaims

    real = [gpu for gpu in state.hardware.gpus if gpu.real]
    keys = {gpu.index: gpu.uuid for gpu in real if gpu.uuid}  # else the physical index
    try:
        return HostClaims(folder, keys, run=run_dir.name.removeprefix("run-"), project=str(state.config.root),
                          setting=state.settings.setter("gpu_claims"), gpus=[gpu.index for gpu in real])
    except OSError as exc:
        raise SpecdecUsageError(f"GPU claims folder {folder}: {exc.strerror or exc}; set "
                                f"{state.settings.setter('gpu_claims')} to a folder every run on this host "
                                f"can write") from None


def _in_project(model: str, state: RunState) -> str:
    from .models import in_project

    return in_project(model, state.config.root)


def _each(models: Sequence[str | None], step: Callable[[str], Any]) -> list[Any]:
    """`step` of each model given (None where none is), every one tried: one error naming each
    model it refused, rather than the first, fixed, then the next."""
    done, problems = [], []
    for model in models:
        try:
            done.append(step(model) if model else None)
        except SpecdecUsageError as exc:
            problems.append(str(exc))
    if problems:
        raise SpecdecUsageError("; and ".join(problems))
    return done


def _on_hub(model: str, state: RunState) -> None:
    from .models import check_on_hub

    cache = state.config.model_cache
    check_on_hub(_in_project(model, state),
                 **({"cache_dir": state.config.root / Path(cache).expanduser()} if cache else {}))


def _provision(model: str, state: RunState) -> str:
    from .models import provision_model  # huggingface_hub is imported only when needed

    cache = state.config.model_cache
    return str(provision_model(_in_project(model, state),
                               **({"cache_dir": state.config.root / Path(cache).expanduser()} if cache else {})))


@lru_cache(maxsize=8)
def sglang_importable(python: str = sys.executable) -> bool:
    """Whether `python` finds the sglang package; another interpreter is asked in a subprocess
    (finding, not importing: a second or so)."""
    if python == sys.executable:
        return importlib.util.find_spec("sglang") is not None
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('sglang') is None)"
    try:
        return subprocess.run([python, "-c", probe], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _flag(name: str) -> str:
    from .options import OPTIONS_BY_NAME

    return OPTIONS_BY_NAME[name].cli


def choose(requested: str, hardware: Hardware, server_url: str | None,
           python: str = sys.executable, *, source: Callable[[str], str] = _flag) -> Backend:
    """`auto` means SGLang where it is importable (in `python`, the interpreter that launches
    SGLang's servers) and a real GPU is present, else embedded. A server URL attaches, under
    `auto` only: a backend asked for by name launches servers, which an attached run never does.
    `source(option)` says where an option was set, for the errors."""
    if server_url and requested != "auto":  # the default is auto: any other value was given
        raise SpecdecUsageError(
            f"{source('server_url')} {server_url} attaches to a server someone else runs, but "
            f"{source('backend')} {requested} asks for {requested} servers launched by the run; "
            f"to attach, leave the backend at auto (--specdec-backend=auto overrides a value set in a "
            f"file); to launch {requested} servers, drop {source('server_url')}")
    if server_url:
        return AttachBackend(f"attached to {server_url}")
    if requested == "embedded":
        return EmbeddedBackend("requested")
    where = "this Python" if python == sys.executable else f"{python} ([tool.specdec.sglang] python)"
    if requested == "sglang":
        if not sglang_importable(python):
            raise SpecdecUsageError(
                f"{source('backend')} sglang: the sglang package is not importable in {where}; "
                "install it (pip install sglang), point [tool.specdec.sglang] python at the "
                "interpreter that has it, or run the embedded engine (--specdec-backend=embedded)")
        return SGLangBackend("requested")
    if hardware.physical_gpus == 0:
        return EmbeddedBackend("auto: no GPU")
    if not sglang_importable(python):
        return EmbeddedBackend(f"auto: sglang not importable in {where}, though this host has a GPU; "
                               f"{_flag('backend')}=sglang requires it", sglang_missing_in=where)
    return SGLangBackend("auto: GPU and sglang present")
