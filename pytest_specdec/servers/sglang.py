"""Command line for an SGLang server (`python -m sglang.launch_server`).

DDTree is not upstream in SGLang 0.5.23, and the forks that add it spell it differently, so the
method -> flags mapping is configuration, not code: each method maps to a tuple of argv templates
whose `{budget}` and `{num_draft_tokens}` (= budget + 1: the tree's nodes plus its root, i.e. the
verify width) placeholders are filled from the spec. Two presets cover the known spellings:

- `ddtree-budget` (default; the open DDTree pull request):
  `--speculative-algorithm DDTREE --speculative-ddtree-budget B`
- `num-draft-tokens` (the other fork): `--speculative-algorithm DDTREE
  --speculative-num-draft-tokens B+1`, which upstream's own parser already accepts.

Upstream's `--speculative-algorithm` is a free string (plugins register names at run time), so
`DDTREE` parses everywhere; only the fork's server knows how to run it.
"""

from __future__ import annotations

import string
import sys
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from pytest_specdec.configuration import METHODS, takes_budget
from pytest_specdec.errors import SpecdecUsageError
from pytest_specdec.servers.spec import ServerSpec
from pytest_specdec.suggest import closest, hint

MethodFlags = Mapping[str, tuple[str, ...]]

_DFLASH = ("--speculative-algorithm", "DFLASH")

METHOD_FLAG_PRESETS: Mapping[str, MethodFlags] = MappingProxyType(
    {
        "ddtree-budget": MappingProxyType(
            {
                "ar": (),
                "dflash": _DFLASH,
                "ddtree": ("--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", "{budget}"),
            }
        ),
        "num-draft-tokens": MappingProxyType(
            {
                "ar": (),
                "dflash": _DFLASH,
                "ddtree": (
                    "--speculative-algorithm",
                    "DDTREE",
                    "--speculative-num-draft-tokens",
                    "{num_draft_tokens}",
                ),
            }
        ),
    }
)
DEFAULT_METHOD_FLAGS: MethodFlags = METHOD_FLAG_PRESETS["ddtree-budget"]

_PLACEHOLDERS = frozenset({"budget", "num_draft_tokens", "tp"})
_BUDGET_PLACEHOLDERS = frozenset({"budget", "num_draft_tokens"})


def method_flags_from_config(value: str | Mapping[str, Sequence[str]], *, source: str,
                             entry: Callable[[str], str] | None = None) -> MethodFlags:
    """Validate a configured mapping (a preset name, or method -> list of argv templates).

    A partial mapping is merged over the default preset, so a user who only re-spells ddtree does
    not have to repeat the dflash and ar entries. `source` names the file and key in errors, and
    `entry` a method's own entry under it (`source.method` where not given).
    """
    entry = entry or (lambda method: f"{source}.{method}")
    if isinstance(value, str):
        try:
            return METHOD_FLAG_PRESETS[value]
        except KeyError:
            raise SpecdecUsageError(
                f"{source}: unknown SGLang method-flag preset {value!r}; "
                f"{hint(value, METHOD_FLAG_PRESETS)}" + ("" if closest(value, METHOD_FLAG_PRESETS)
                                                         else " or a table method = [argv...]")
            ) from None
    merged = dict(DEFAULT_METHOD_FLAGS)
    for method, templates in value.items():
        if method not in METHODS:
            raise SpecdecUsageError(f"{source}: unknown method {method!r}; {hint(method, METHODS)}")
        if not isinstance(templates, (list, tuple)) or not all(isinstance(t, str) for t in templates):
            raise SpecdecUsageError(
                f"{entry(method)}: {templates!r} is not a list of strings; "
                f"give one, e.g. [\"--flag\", \"{{budget}}\"]"
            )
        for template in templates:
            _check_template(template, entry(method))
            budgeted = {n for _, n, _, _ in string.Formatter().parse(template) if n} & _BUDGET_PLACEHOLDERS
            if budgeted and not takes_budget(method):  # else found only when its server is built
                raise SpecdecUsageError(
                    f"{entry(method)}: placeholder {{{min(budgeted)}}} in {template!r} has no value: method "
                    f"{method} takes no budget; write the number itself, or use {{tp}}")
        merged[method] = tuple(templates)
    return MappingProxyType(merged)


def _check_template(template: str, where: str) -> None:
    """Reject templates `str.format` would choke on later, when a server is already being built."""

    def invalid(problem: object) -> SpecdecUsageError:
        return SpecdecUsageError(
            f"{where}: {template!r} is not a valid flag template ({problem}); write a placeholder "
            f"as {{budget}} and a literal brace doubled ({{{{ or }}}})"
        )

    try:
        fields = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise invalid(exc) from None
    for _, name, _, _ in fields:
        if name is not None and name not in _PLACEHOLDERS:
            raise SpecdecUsageError(
                f"{where}: placeholder {{{name}}} in {template!r} is unknown; "
                + (f"did you mean {{{close}}}?" if (close := closest(name, _PLACEHOLDERS))
                   else f"use {', '.join('{' + p + '}' for p in sorted(_PLACEHOLDERS))}")
            )
    try:  # a bad conversion or format spec ({budget!z}, {budget:q}) only shows when filled in
        template.format(**dict.fromkeys(_PLACEHOLDERS, 1))
    except KeyError as exc:  # a placeholder nested in a format spec: {budget:{depth}}
        raise invalid(f"unknown placeholder {{{exc.args[0]}}}") from None
    except (ValueError, IndexError) as exc:
        raise invalid(exc) from None


def speculative_flags(spec: ServerSpec, method_flags: MethodFlags = DEFAULT_METHOD_FLAGS) -> list[str]:
    """The method's flags with the spec's numbers filled in."""
    try:
        templates = method_flags[spec.method]
    except KeyError:
        raise SpecdecUsageError(
            f"no SGLang flags configured for method {spec.method!r}; add it to the method-flag mapping"
        ) from None
    values = {
        "budget": spec.budget,
        "num_draft_tokens": None if spec.budget is None else spec.budget + 1,
        "tp": spec.tp,
    }
    out = []
    for template in templates:
        names = {n for _, n, _, _ in string.Formatter().parse(template) if n}
        missing = [n for n in names if values.get(n) is None]
        if missing:
            raise SpecdecUsageError(
                f"SGLang flag template {template!r} for {spec.id} needs {missing[0]}, which method "
                f"{spec.method} does not have"
            )
        out.append(template.format(**values))
    return out


def build_sglang_argv(
    spec: ServerSpec,
    port: int,
    *,
    model_path: str | None = None,
    draft_model_path: str | None = None,
    method_flags: MethodFlags = DEFAULT_METHOD_FLAGS,
    host: str = "127.0.0.1",
    python: str = sys.executable,
) -> list[str]:
    """argv for `python -m sglang.launch_server` serving `spec` on `host:port`.

    `model_path` / `draft_model_path` override the spec's model ids with provisioned local paths.
    `--log-level info` is pinned because `warning` hides the readiness and decode-batch lines our
    diagnosis and metrics read; `--enable-metrics` because the acceptance figures come from
    `/metrics` as a cross-check; `--random-seed` because greedy acceptance length gates strictly
    and must be reproducible.
    """
    model = model_path or spec.model
    if not model:
        raise SpecdecUsageError(
            f"{spec.id}: the sglang backend needs a target model; set model in [tool.specdec]"
        )
    argv = [python, "-m", "sglang.launch_server", "--model-path", str(model)]
    if spec.is_speculative:
        draft = draft_model_path or spec.draft_model
        if not draft:
            raise SpecdecUsageError(
                f"{spec.id}: method {spec.method} needs a draft model; set draft_model in [tool.specdec]"
            )
        argv += ["--speculative-draft-model-path", str(draft)]
    argv += ["--tp-size", str(spec.tp)]
    argv += speculative_flags(spec, method_flags)
    argv += ["--host", host, "--port", str(port), "--log-level", "info"]
    argv += ["--random-seed", str(spec.seed), "--enable-metrics"]
    if spec.context_length is not None:
        argv += ["--context-length", str(spec.context_length)]
    argv += list(spec.extra_args)
    return argv
