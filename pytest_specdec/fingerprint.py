"""Fingerprints: one short digest of what a measurement measured.

A journaled or stored figure is only reusable for a test that would measure the same thing: the
same configuration, the same workload (prompt texts, sizes, concurrency, sampling), the same
server settings and the same model. A resumed run that trusted a record by test id alone would
report a stale figure after any of those changed. So every journal record and every baseline
entry carries the digest of those parts, and a mismatch means "measure again".

The parts are plain JSON (canonical: sorted keys, no whitespace), so the digest is stable across
processes, Python versions and xdist workers; the parts themselves are kept beside the digest so
that a mismatch can say which part changed.

A losslessness reference whose requests ask for top logprobs (`--specdec-lossless-margins`) has
a `requests` part, as SGLang then streams more with each token; other tests have none, so their
digests are those they had before the option.

The model part is what the backend serves (`Backend.model_part`): the configured model ids on
SGLang, the engine's preset on the embedded engine, which ignores those ids, and on an attached
server the models it reports (its readiness check stops a run whose configuration says otherwise). Records and entries
written before that part said so hold the configured ids on every backend (and those of an
attached server that did not name its draft model then, such as the embedded engine, the
configured draft); a fingerprint keeps the digests they would have (`former`) and matches them
too, so that those files stay matched where the setup is the same.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from .lossless import reference_top_logprobs

if TYPE_CHECKING:
    from .config import WorkloadSpec
    from .configuration import MatrixCase
    from .state import RunState

#: Bump when the parts' meaning changes, so old records never match new ones by accident.
VERSION = 1
DIGEST_CHARS = 16
#: What a digest mismatch means where every part is equal: the parts were fingerprinted under
#: another VERSION, which changed the digest and nothing measured.
OLDER_VERSION = "measured by an older fingerprint version: no part of the setup differs"


@dataclass(frozen=True)
class Fingerprint:
    """The digest of `parts` ({name: JSON value}), e.g. configuration, workload, server, model."""

    digest: str
    parts: Mapping[str, Any]
    #: the digests records and entries written before `Backend.model_part` gave this same setup
    former: tuple[str, ...] = ()

    def matches(self, digest: str | None) -> bool:
        """Whether a record or entry of fingerprint `digest` measured this setup."""
        return digest is not None and (digest == self.digest or digest in self.former)

    def changed_parts(self, other_parts: Mapping[str, Any] | None) -> list[str]:
        """Names of the parts that differ from `other_parts` (all of them when unknown)."""
        if not isinstance(other_parts, Mapping):
            return sorted(self.parts)
        names = set(self.parts) | set(other_parts)
        return sorted(n for n in names if _compared(self.parts.get(n)) != _compared(other_parts.get(n)))

    def what_changed(self, other: Fingerprint | None, unknown: str) -> str:
        """The parts that differ from `other`'s, for a message (`workload, server`); `unknown`
        where `other` is not known (a record or entry saved without its parts); OLDER_VERSION
        where its parts are all equal but its digest is not."""
        if other is None or not other.parts:
            return unknown
        changed = self.changed_parts(other.parts)
        if changed:
            return ", ".join(changed)
        return OLDER_VERSION if other.digest != self.digest else unknown

    def to_json(self) -> dict[str, Any]:
        former = {"former": list(self.former)} if self.former else {}
        return {"digest": self.digest, "parts": dict(self.parts), **former}

    @classmethod
    def from_json(cls, obj: Any) -> Fingerprint | None:
        """A fingerprint read back from `to_json`; None for records older than fingerprints."""
        if not isinstance(obj, Mapping) or not isinstance(obj.get("digest"), str):
            return None
        parts, former = obj.get("parts"), obj.get("former")
        return cls(obj["digest"], dict(parts) if isinstance(parts, Mapping) else {},
                   tuple(d for d in former if isinstance(d, str)) if isinstance(former, list) else ())

    def __str__(self) -> str:
        return self.digest


def fingerprint(parts: Mapping[str, Any]) -> Fingerprint:
    """The fingerprint of `parts`; values must be JSON-serialisable (tuples become lists)."""
    plain = json.loads(_canonical(dict(parts)))
    text = _canonical({"v": VERSION, "parts": plain})
    return Fingerprint(hashlib.sha256(text.encode("utf-8")).hexdigest()[:DIGEST_CHARS], plain)


def measured_setup(case: MatrixCase | None, workload: str | None, state: RunState) -> Fingerprint:
    """What a test measures: its configuration, its workload as read at configure time, the
    server settings (as its backend sees them) and the model."""
    parts: dict[str, Any] = {
        "configuration": None, "server": None, "workload": None, "model": state.backend.model_part(state),
    }
    if case is not None:
        parts["configuration"] = {"family": case.family, "method": case.method, "tp": case.tp,
                                  "budget": case.budget}
        spec = state.backend.server_spec(case, state)
        parts["server"] = state.backend.server_settings(spec, state)
        asked = reference_top_logprobs(case, state)
        if asked:  # figures of requests that stream logprobs are others; absent, older digests hold
            parts["requests"] = {"top_logprobs": asked}
    if workload is not None and workload in state.workloads:
        configured = next(w for w in state.config.workloads if w.name == workload)
        parts["workload"] = _workload_part(configured, state)
    return _with_former(parts, state)


def _with_former(parts: dict[str, Any], state: RunState) -> Fingerprint:
    """The fingerprint of `parts`, with the digests it had under the model parts earlier releases
    gave the same setup (`Backend.former_model_parts`)."""
    now = fingerprint(parts)
    former = tuple(dict.fromkeys(fingerprint({**parts, "model": model}).digest
                                 for model in state.backend.former_model_parts(state) if model != parts["model"]))
    return replace(now, former=former) if former else now


def _workload_part(configured: WorkloadSpec, state: RunState) -> dict[str, Any]:
    """A configured workload as its prompts were read at configure time, and whether it truncates."""
    return {**state.workload(configured.name).fingerprint_part(), "truncate": configured.truncate}


def run_setup(state: RunState) -> Fingerprint:
    """What every test of a run shares, whatever its configuration: the workloads as read at
    configure time, the server settings of the configuration file and the model. Shards merged into
    one report must agree on it (each configuration's own part is the matrix's)."""
    workloads = {w.name: _workload_part(w, state) for w in state.config.workloads if w.name in state.workloads}
    return _with_former({
        "workloads": workloads,
        "server": {"engine": asdict(state.config.engine), "sglang": asdict(state.config.sglang)},
        "model": state.backend.model_part(state),
    }, state)


def text_digest(texts: Iterable[str]) -> str:
    """A digest of an ordered list of texts (prompts): the fingerprint keeps this, not the texts."""
    h = hashlib.sha256()
    for text in texts:
        data = text.encode("utf-8")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()[:DIGEST_CHARS]


def _compared(value: Any) -> str:
    """`_canonical` for a part read back from a file: a hand edit's NaN or Infinity differs from any
    part this run computes, rather than stopping the message that names what changed."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)


__all__ = ["DIGEST_CHARS", "OLDER_VERSION", "VERSION", "Fingerprint", "fingerprint", "measured_setup", "text_digest"]
