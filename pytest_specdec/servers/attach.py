"""`AttachedServer`: a server someone else started (`--specdec-server-url`). We never kill it.

What it is comes from its own `/server_info` (SGLang's resolved arguments; the embedded engine
answers the same keys), so a matrix run against an attached server runs exactly the tests whose
spec the server actually is, and skips the rest with a reason naming both.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pytest_specdec import sglang_api as api
from pytest_specdec.configuration import configuration_id, method_of_algorithm, takes_budget
from pytest_specdec.servers.diagnosis import ServerError
from pytest_specdec.servers.process import (HEALTH_QUIET_S, HEALTH_TIMEOUT_S, STALL_PROBE_TIMEOUT_S,
                                            ManagedServer, describe_probe, probe, probe_saying)
from pytest_specdec.servers.spec import ServerSpec


class AttachMismatch(Exception):
    """The attached server is not the spec a test asked for: skip that test with `str(error)`."""


@dataclass(frozen=True)
class ServerIdentity:
    """What a running server says it is."""

    method: str
    tp: int
    budget: int | None
    model: str | None

    @property
    def id(self) -> str:
        return configuration_id(self.method, self.tp, self.budget)

    def matches(self, spec: ServerSpec) -> bool:
        return (self.method, self.tp, self.budget) == (spec.method, spec.tp, spec.budget)


def identify(info: dict) -> ServerIdentity:
    """Read method, TP, budget and model out of a `/server_info` document.

    DDTree forks spell the budget either `speculative_ddtree_budget` or as
    `speculative_num_draft_tokens` = budget + 1; both are understood.
    """
    algorithm = info.get(api.INFO_SPECULATIVE_ALGORITHM) or info.get("method")
    method = method_of_algorithm(algorithm)
    budget = None
    if takes_budget(method):
        key = "speculative_ddtree_budget" if info.get("speculative_ddtree_budget") else "budget"
        budget = _whole(info, key) if info.get(key) else None
        if budget is None and info.get(api.INFO_NUM_DRAFT_TOKENS):
            budget = _whole(info, api.INFO_NUM_DRAFT_TOKENS) - 1
    return ServerIdentity(
        method=method,
        tp=_whole(info, api.INFO_TP_SIZE) if info.get(api.INFO_TP_SIZE) else 1,
        budget=budget,
        model=info.get(api.INFO_MODEL_PATH),
    )


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


def fetch_server_info(url: str, timeout: float = 10.0) -> dict:
    """GET /server_info (or the pre-rename /get_server_info) as a dict. A server that takes the
    connection and never answers is `hang` (a stuck scheduler), not `unreachable`."""
    last: Exception | None = None
    for path in (api.SERVER_INFO, api.SERVER_INFO_OLD):
        try:
            with urllib.request.urlopen(url.rstrip("/") + path, timeout=timeout) as resp:
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
    raise ServerError(
        url,
        "unreachable",
        f"no /server_info at {url}: {last}",
        headline=f"attached server {url} did not answer /server_info ({last}); is it running?",
    )


class AttachedServer:
    """The same surface as `ManagedServer` (url, spec, log_path, check_alive, stop) minus the
    process: `stop()` does nothing, `log_path` and `pid` are None."""

    log_path: Path | None = None
    pid: int | None = None

    def __init__(self, url: str, *, health_timeout: float = HEALTH_TIMEOUT_S,
                 announce: Callable[[str], None] | None = None) -> None:
        self.url = url.rstrip("/")
        self.health_timeout = health_timeout
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

    def check_alive(self, timeout: float | None = None, announce: Callable[[str], None] | None = None) -> None:
        name = self.spec.id if self.spec else self.identity.id
        outcome, status = probe_saying(
            self.url + api.HEALTH, timeout or self.health_timeout, announce or self.announce,
            lambda rest: f"server {name} (attached at {self.url}): /health did not answer within "
                         f"{HEALTH_QUIET_S:g}s; waiting up to {rest:.0f}s more before counting it as "
                         f"unresponsive (bound: the {self.health_timeout:g}s /health limit)")
        if outcome != "ok":
            what = describe_probe(api.HEALTH, outcome, status, timeout or self.health_timeout)
            raise ServerError(
                name,
                "unresponsive",
                f"{what} (attached at {self.url})",
                headline=f"attached server {name} at {self.url} is not healthy: {what}",
            )

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
