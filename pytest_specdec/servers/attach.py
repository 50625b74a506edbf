"""`AttachedServer`: a server someone else started (`--specdec-server-url`). We never kill it.

What it is comes from its own `/server_info` (SGLang's resolved arguments; the embedded engine
answers the same keys), so a matrix run against an attached server runs exactly the tests whose
spec the server actually is, and skips the rest with a reason naming both. The model it serves
comes from `/model_info` where it answers (SGLang moves it there on a weight update), else from
`/server_info`. A key the server does not answer is unreported: it matches every configuration,
as nothing can be checked against it.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from pytest_specdec import sglang_api as api
from pytest_specdec.configuration import configuration_id, is_speculative, method_of_algorithm, takes_budget
from pytest_specdec.servers.diagnosis import ServerError
from pytest_specdec.servers.direct import proxy_note, urlopen
from pytest_specdec.servers.process import (HEALTH_QUIET_S, HEALTH_TIMEOUT_S, STALL_PROBE_TIMEOUT_S,
                                            ManagedServer, describe_probe, probe, probe_saying)
from pytest_specdec.servers.spec import ServerSpec


class AttachMismatch(Exception):
    """The attached server is not the spec a test asked for: skip that test with `str(error)`."""


#: The fields of a `ServerIdentity` a server may leave unreported, as messages name them.
#: How long a liveness check waits before reading /server_info a second time, after a failed read
#: on a server whose /health has just answered.
REREAD_PAUSE_S = 1.0

#: How long a /server_info read may take (at a liveness check, no longer than its /health's bound).
SERVER_INFO_TIMEOUT_S = 10.0

FIELDS = {"method": "method", "tp": "TP", "budget": "budget", "model": "model", "draft_model": "draft model"}


@dataclass(frozen=True)
class ServerIdentity:
    """What a running server says it is; a field in `unreported` it did not say, and holds a
    placeholder that nothing is compared with."""

    method: str
    tp: int
    budget: int | None
    model: str | None
    draft_model: str | None = None
    served_name: str | None = None  # SGLang's served_model_name, another name the model answers to
    unreported: frozenset[str] = frozenset()

    @property
    def id(self) -> str:
        if not self.unreported & {"method", "tp", "budget"}:
            return configuration_id(self.method, self.tp, self.budget)
        method = "?" if "method" in self.unreported else self.method
        tp = "?" if "tp" in self.unreported else self.tp
        budget = ("" if "method" in self.unreported or self.budget is None and "budget" not in self.unreported
                  else "-b?" if "budget" in self.unreported else f"-b{self.budget}")
        return f"{method}-tp{tp}{budget}"

    def matches(self, spec: ServerSpec) -> bool:
        return all(name in self.unreported or getattr(self, name) == getattr(spec, name)
                   for name in ("method", "tp", "budget"))

    @property
    def speculates(self) -> bool | None:
        """Whether the server drafts (None: it does not say)."""
        return None if "method" in self.unreported else is_speculative(self.method)


def identify(info: dict, model_info: dict | None = None) -> ServerIdentity:
    """Read method, TP, budget and models out of a `/server_info` document (the model out of
    `/model_info`'s where given and it says).

    DDTree forks spell the budget either `speculative_ddtree_budget` or as
    `speculative_num_draft_tokens` = budget + 1; both are understood.
    """
    unreported = set()
    if api.INFO_SPECULATIVE_ALGORITHM not in info and "method" not in info:
        unreported.add("method")
    algorithm = info.get(api.INFO_SPECULATIVE_ALGORITHM) or info.get("method")
    method = method_of_algorithm(algorithm)
    budget = None
    if takes_budget(method):
        key = "speculative_ddtree_budget" if info.get("speculative_ddtree_budget") else "budget"
        budget = _whole(info, key) if info.get(key) else None
        if budget is None and info.get(api.INFO_NUM_DRAFT_TOKENS):
            budget = _whole(info, api.INFO_NUM_DRAFT_TOKENS) - 1
        if budget is None:
            unreported.add("budget")
    if "method" in unreported:
        unreported.add("budget")  # which budget, if any, depends on the method
    if api.INFO_TP_SIZE not in info:
        unreported.add("tp")
    models = [d for d in (model_info, info) if isinstance(d, dict) and _text(d.get(api.INFO_MODEL_PATH))]
    model = models[0][api.INFO_MODEL_PATH] if models else None
    served_name = _text(models[0].get(api.INFO_SERVED_MODEL_NAME)) if models else None
    draft = _text(info.get(api.INFO_DRAFT_MODEL_PATH))
    if model is None:
        unreported.add("model")
    if draft is None:  # a drafting server without one may draft with the target's own layers
        unreported.add("draft_model")
    return ServerIdentity(
        method=method,
        tp=_whole(info, api.INFO_TP_SIZE) if info.get(api.INFO_TP_SIZE) else 1,
        budget=budget,
        model=model,
        draft_model=draft,
        served_name=served_name or _text(info.get(api.INFO_SERVED_MODEL_NAME)),
        unreported=frozenset(unreported),
    )


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


@dataclass(frozen=True)
class Disagreement:
    """One field in which the attached server is not what the configuration says."""

    field: str  # as FIELDS names it
    configured: str
    served: str

    def __str__(self) -> str:
        return f"{self.field}: configured {self.configured}, served {self.served}"


def disagreements(identity: ServerIdentity, cases: Iterable[tuple[str, int, int | None]],
                  model: str | None, draft_model: str | None) -> list[Disagreement]:
    """Where the server is none of the configurations `cases` ((method, tp, budget) each) or
    serves another `model` or `draft_model` than configured; a field the server does not report,
    or the configuration does not set, is not compared."""
    found = []
    cases = list(cases)
    for name, narrow in (("method", lambda c: True), ("tp", lambda c: c[0] == identity.method),
                         ("budget", lambda c: c[:2] == (identity.method, identity.tp))):
        if name in identity.unreported or not cases:
            continue
        index = ("method", "tp", "budget").index(name)
        configured = [c[index] for c in cases if narrow(c)]
        if configured and getattr(identity, name) not in configured:
            shown = " or ".join(dict.fromkeys("none" if v is None else str(v) for v in configured))
            served = getattr(identity, name)
            found.append(Disagreement(FIELDS[name], shown, "none" if served is None else str(served)))
            break  # TP and budget are compared within the method (and TP) served
    if model and "model" not in identity.unreported and not same_model(model, identity.model, identity.served_name):
        found.append(Disagreement(FIELDS["model"], repr(model), repr(identity.model)))
    if draft_model and identity.speculates and "draft_model" not in identity.unreported \
            and not same_model(draft_model, identity.draft_model):
        found.append(Disagreement(FIELDS["draft_model"], repr(draft_model), repr(identity.draft_model)))
    return found


def indistinct(identity: ServerIdentity, specs: Iterable[ServerSpec]) -> tuple[list[ServerSpec], list[str]]:
    """The configurations among `specs` that all match the server, each once, and the fields it
    does not report that would tell them apart (as FIELDS names them); ([], []) where at most one
    matches. Tests of several such configurations would all run on the one server, each
    recorded under its own key."""
    matching = list({spec.id: spec for spec in specs if identity.matches(spec)}.values())
    if len(matching) < 2:
        return [], []
    fields = [FIELDS[name] for name in ("method", "tp", "budget")
              if name in identity.unreported and len({getattr(spec, name) for spec in matching}) > 1]
    return matching, fields


def same_model(configured: str, *served: str | None) -> bool:
    """Whether a configured model id or path names the model a server says it serves: the same
    text, or the same Hub id spelled as a path (`org/name` served from `/models/name`, from a
    provisioned `<cache>/org--name` or from Hugging Face's `models--org--name/snapshots/<sha>`).
    Two paths must be the same path: checkpoints of one name in two folders are two models."""
    want = _model_key(configured)
    for name in filter(None, served):
        if name.rstrip("/") == configured.rstrip("/"):
            return True
        got = _model_key(name)
        if got == want and want[0] is not None or got[1] == want[1] and (got[0] is None) != (want[0] is None):
            return True
    return False


def _model_key(ref: str) -> tuple[str | None, str]:
    """(org or None, name), case-folded, of a Hub id or a local path to a model's folder."""
    parts = [p for p in ref.strip().rstrip("/").split("/") if p]
    if len(parts) >= 3 and parts[-2] == "snapshots":  # Hugging Face's cache: models--org--name/snapshots/sha
        parts = parts[:-2]
    last = parts[-1].removeprefix("models--") if parts else ref
    if "--" in last:
        org, _, name = last.partition("--")
        return org.casefold(), name.casefold()
    if len(parts) == 2 and not ref.startswith(("/", ".", "~")):  # a Hub id
        return parts[0].casefold(), parts[1].casefold()
    return None, last.casefold()


def _whole(info: dict, key: str) -> int:
    """A count out of /server_info, or a ValueError that names the key and what it held."""
    value = info[key]
    try:
        if isinstance(value, bool) or int(value) != float(value):
            raise ValueError
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"its /server_info says {key} = {value!r}, which is not a whole number") from None


def mismatch(url: str, identity: ServerIdentity, spec: ServerSpec) -> str | None:
    """Why a test of `spec` skips on the server attached at `url`, or None where it is that spec."""
    if identity.matches(spec):
        return None
    return f"attached server {url.rstrip('/')} is {identity.id} (per /server_info); this test needs {spec.id}"


def fetch_server_info(url: str, timeout: float = SERVER_INFO_TIMEOUT_S) -> dict:
    """GET /server_info (or the pre-rename /get_server_info) as a dict. A server that takes the
    connection and never answers is `hang` (a stuck scheduler), not `unreachable`."""
    last: Exception | None = None
    for path in (api.SERVER_INFO, api.SERVER_INFO_OLD):
        try:
            with urlopen(url.rstrip("/") + path, timeout=timeout) as resp:
                info = json.loads(resp.read())
        except (urllib.error.URLError, OSError, ValueError) as e:
            if isinstance(getattr(e, "reason", e), (TimeoutError, socket.timeout)):
                # the old name would only wait as long again on the same stuck server
                raise ServerError(
                    url, "hang", f"it accepted the connection but did not answer {path} within {timeout:g}s",
                    headline=f"attached server {url} accepted the connection but did not answer {path} "
                             f"within {timeout:g}s; is it hung?") from None
            last = e
            continue
        if isinstance(info, dict):
            return info
        last = ValueError(f"{path} answered a JSON {type(info).__name__}, not an object of server arguments")
    if isinstance(last, urllib.error.HTTPError) and last.code == 404:  # running, but no such route: the URL is wrong
        raise ServerError(url, "no-route", f"no /server_info at {url}: {last}", headline=(
            f"attached server {url} answered /server_info with {last}{proxy_note()}"))
    raise ServerError(
        url,
        "unreachable",
        f"no /server_info at {url}: {last}{proxy_note()}",
        headline=f"attached server {url} did not answer /server_info ({last}); is it running?{proxy_note()}",
    )


def fetch_model_info(url: str, timeout: float = 10.0) -> dict | None:
    """GET /model_info as a dict; None where the server does not answer it (the model is then
    read from /server_info)."""
    try:
        with urlopen(url.rstrip("/") + api.MODEL_INFO, timeout=timeout) as resp:
            info = json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def read_identity(url: str, info: dict | None = None) -> ServerIdentity:
    """What the server at `url` says it is (`info`: its /server_info, where read already)."""
    return identify(fetch_server_info(url) if info is None else info, fetch_model_info(url))


class AttachedServer:
    """The same surface as `ManagedServer` (url, spec, log_path, check_alive, stop) minus the
    process: `stop()` does nothing, `log_path` and `pid` are None."""

    log_path: Path | None = None
    pid: int | None = None

    def __init__(self, url: str, *, health_timeout: float = HEALTH_TIMEOUT_S, stall_timeout: float | None = None,
                 stall_setting: str = "--specdec-stall-timeout",
                 announce: Callable[[str], None] | None = None) -> None:
        self.url = url.rstrip("/")
        self.health_timeout = health_timeout
        self.stall_timeout = stall_timeout  # the run's bound on silence, which caps each liveness read
        self.stall_setting = stall_setting
        self.announce = announce  # says a /health check's wait as it goes on
        self.info = fetch_server_info(self.url)
        self.identity = identify(self.info)
        self.spec: ServerSpec | None = None

    def for_spec(self, spec: ServerSpec) -> AttachedServer:
        """This server, if it is `spec`; AttachMismatch otherwise."""
        reason = mismatch(self.url, self.identity, spec)
        if reason is not None:
            raise AttachMismatch(reason)
        self.spec = spec
        return self

    # The same cap as a launched server's: the health limit, or the stall timeout where shorter.
    liveness_timeout = ManagedServer.liveness_timeout

    def check_alive(self, timeout: float | None = None, announce: Callable[[str], None] | None = None) -> None:
        name = self.spec.id if self.spec else self.identity.id
        capped = not timeout and self.liveness_timeout < self.health_timeout  # by the stall timeout
        timeout = timeout or self.liveness_timeout
        bound = (f"the stall timeout, {self.stall_setting}" if capped else
                 f"the {self.health_timeout:g}s /health limit; {self.stall_setting} lowers it")
        outcome, status = probe_saying(
            self.url + api.HEALTH, timeout, announce or self.announce,
            lambda rest: f"server {name} (attached at {self.url}): /health did not answer within "
                         f"{HEALTH_QUIET_S:g}s; waiting up to {rest:.0f}s more before counting it as "
                         f"unresponsive (bound: {bound})")
        if outcome != "ok":
            what = describe_probe(api.HEALTH, outcome, status, timeout)
            if outcome == "timeout" and capped:
                what += f"; raise {self.stall_setting} if the server is just slow"
            raise ServerError(
                name,
                "unresponsive",
                f"{what} (attached at {self.url})",
                headline=f"attached server {name} at {self.url} is not healthy: {what}",
            )
        self.check_same(min(timeout, SERVER_INFO_TIMEOUT_S))

    def check_same(self, timeout: float = SERVER_INFO_TIMEOUT_S) -> None:
        """The server is still what it said at the run's start (each liveness check asks): one
        restarted on its URL as another configuration between tests or workloads would have its
        figures recorded and gated as the configuration it was. Raises ServerError (`changed`).
        A failed read is read again once: /health has just answered, and the pool fails every later
        test of a configuration whose attached server fails a check, so one blip would end them all.
        Each read waits at most `timeout` (check_alive's: the stall timeout where that is shorter)."""
        try:
            info = fetch_server_info(self.url, timeout)
        except ServerError as first:
            if first.reason == "hang" and timeout < SERVER_INFO_TIMEOUT_S:  # bound by the stall timeout
                name = self.spec.id if self.spec else self.identity.id
                advice = f"; raise {self.stall_setting} if the server is just slow"
                raise ServerError(name, "hang", f"{first.cause} (attached at {self.url}){advice}",
                                  headline=f"attached server {name} at {self.url} is not healthy: "
                                           f"{first.cause}{advice}") from None
            if first.reason != "unreachable":  # a hang has already waited its whole timeout
                raise
            time.sleep(REREAD_PAUSE_S)
            info = fetch_server_info(self.url, timeout)
        now = identify(info)
        if now == self.identity:
            return
        name = self.spec.id if self.spec else self.identity.id
        what = (f"it now serves {now.id}, model {now.model or '(not reported)'} (per /server_info), where at the "
                f"run's start it served {self.identity.id}, model {self.identity.model or '(not reported)'}: "
                f"restarted as another configuration")
        raise ServerError(name, "changed", f"{what} (attached at {self.url})",
                          headline=f"attached server {name} at {self.url} changed: {what}; its figures would be "
                                   f"recorded as {name}'s. Run again against one server that stays as it is")

    def stall_error(self, stall: str, probe_timeout: float = STALL_PROBE_TIMEOUT_S) -> ServerError:
        """A workload stalled on this server: one /health_generate probe says what it does now."""
        outcome, status = probe(self.url + "/health_generate", probe_timeout)
        seen = describe_probe("/health_generate", outcome, status, probe_timeout)
        name = self.spec.id if self.spec else self.identity.id
        return ServerError(name, "stalled", f"{stall}; probe: {seen}",
                           headline=f"server {name} stalled: {stall}; probe: {seen} "
                                    f"(attached at {self.url})")

    # The same rule as a launched server's: the liveness error, if any, without raising it.
    diagnose = ManagedServer.diagnose

    def stop(self, *args, **kwargs) -> None:
        """Never stop a server we did not start."""
