"""Typed settings from `[tool.specdec]` in pyproject.toml or from `specdec.toml`.

Parsed once at configure time into frozen dataclasses; everything downstream takes these, never
raw dicts. Every mistake (unknown key, wrong type, empty matrix, impossible value) stops the run
at start with one line naming the file, the key and the fix.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import unicodedata
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from .configuration import METHODS, takes_budget
from .engine.cli import DEVICES, MIN_BLOCK_SIZE, MODEL_PRESETS, parse_args, rejecting_parser
from .errors import SpecdecUsageError
from .file_kind import link_fault_said, no_file, special
from .directions import METRIC_DIRECTIONS, METRIC_NAME, Direction, case_clash, known_directions
from .gate import parse_tolerance_table
from .hardware import ALL_FAMILIES, FAMILIES, GPU_FAMILIES, arch_family, family_for_arch, family_of, normalise_arch
from .options import OPTION_NAMES, accepts, not_text, toml_shown
from .servers.sglang import DEFAULT_METHOD_FLAGS, METHOD_FLAG_PRESETS, method_flags_from_config
from .sglang_api import SKIP_TOKENIZER_INIT_FLAG
from .suggest import closest, hint

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

BUILTIN_PROMPT_SETS = ("chat", "code", "math")
KNOWN_ISSUE_BACKENDS = ("embedded", "sglang")  # what a run resolves auto to, so what an issue can name
ENGINE_DEVICES = ("auto", *DEVICES)  # auto: no --device given, so the engine runs on the CPU


@dataclass(frozen=True)
class Matrix:
    """One hardware family's configurations: methods x tp x budget (budget applies to ddtree)."""

    family: str
    methods: tuple[str, ...]
    tp: tuple[int, ...]
    budget: tuple[int, ...]

    def entries(self) -> list[tuple[str, int, int | None]]:
        """(method, tp, budget) in a stable order; methods without a budget appear once per tp."""
        out = []
        for method in self.methods:
            for tp in self.tp:
                if takes_budget(method):
                    out.extend((method, tp, budget) for budget in self.budget)
                else:
                    out.append((method, tp, None))
        return out


@dataclass(frozen=True)
class KnownIssue:
    """A declaratively known-broken configuration; unset fields match anything."""

    reason: str
    arch: str | None = None
    family: str | None = None
    methods: tuple[str, ...] | None = None
    tp: tuple[int, ...] | None = None
    budget: tuple[int, ...] | None = None
    backend: tuple[str, ...] | None = None
    where: str = field(default="", compare=False)  # its file and entry, as errors and warnings name it

    def matches(self, *, arch: str | None, family: str, method: str | None, tp: int,
                budget: int | None, backend: str) -> bool:
        if self.arch is not None and self.arch != arch:
            return False
        if self.family is not None and self.family != family:
            return False
        if self.methods is not None and method not in self.methods:
            return False
        if self.tp is not None and tp not in self.tp:
            return False
        if self.budget is not None and budget not in self.budget:
            return False
        if self.backend is not None and backend not in self.backend:
            return False
        return True


def find_known_issue(issues: Iterable[KnownIssue], *, arch: str | None, family: str,
                     method: str | None, tp: int, budget: int | None,
                     backend: str) -> KnownIssue | None:
    """The first known issue matching a configuration on this hardware and backend."""
    return next((issue for issue in issues
                 if issue.matches(arch=arch, family=family, method=method, tp=tp, budget=budget,
                                  backend=backend)), None)


def unlisted_arch_warnings(issues: Iterable[KnownIssue], host_arch: str | None) -> list[str]:
    """A warning for each known issue whose arch is of no known family and not this host's.

    Such an entry applies only on a host of that very architecture, which may be meant (a chip newer
    than FAMILIES), so it is no error; but it is as likely a slip (sm_91, sm_12) that silently
    never applies, so it is named with the known architectures nearest it.
    """
    out = []
    for issue in issues:
        if issue.arch is None or issue.arch in FAMILIES or issue.arch == host_arch:
            continue
        nearest = _nearest_arches(issue.arch)
        families = sorted({family_of(arch) for arch in nearest})
        out.append(f"{issue.where} key 'arch': {issue.arch!r} is an architecture of no known family, so the "
                   f"entry applies only on a host of exactly that architecture (this one is {host_arch or 'no GPU'}); "
                   f"if a slip, write the nearest known: arch = {' or '.join(map(repr, nearest))}"
                   + (f" ({families[0]})" if len(families) == 1 else ""))
    return out


def _nearest_arches(arch: str) -> list[str]:
    """The known architectures fewest edits away from `arch` (sm_12 is a digit short of sm_120 and
    sm_121 alike); of those as long as it, the nearest in compute capability. All where several tie."""
    def edits(a: str, b: str) -> int:
        row = list(range(len(b) + 1))
        for i, ca in enumerate(a, 1):
            prev, row[0] = row[0], i
            for j, cb in enumerate(b, 1):
                prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
        return row[-1]

    def capability(name: str) -> float:  # sm_120 -> 12.0
        digits = name.removeprefix("sm_")
        return int(digits[:-1]) + int(digits[-1]) / 10

    distance = {known: edits(arch, known) for known in FAMILIES}
    nearest = [known for known, d in distance.items() if d == min(distance.values())]
    if all(len(known) == len(arch) for known in nearest):  # digits for digits: a neighbouring chip
        gap = {known: round(abs(capability(known) - capability(arch)), 1) for known in nearest}
        nearest = [known for known in nearest if gap[known] == min(gap.values())]
    return nearest


@dataclass(frozen=True)
class WorkloadSpec:
    """A workload to drive each server with; `prompts` is a built-in set or a JSONL path."""

    name: str
    prompts: str = "chat"
    num_prompts: int = 8
    max_new_tokens: int = 64
    concurrency: int = 1
    temperature: float = 0.0
    truncate: bool = False
    #: untimed requests sent before it is measured (warmup.py); None: the run-wide setting's
    warmup_requests: int | None = None


@dataclass(frozen=True)
class EngineSettings:
    """Options passed to the embedded engine for every server it runs."""

    model_preset: str = "tiny"
    draft_agreement: float = 0.9
    block_size: int = 16
    seed: int = 0
    device: str = "auto"
    num_layers: int | None = None
    extra_args: tuple[str, ...] = ()

    def argv(self) -> list[str]:
        """The engine flags these settings give every server, before ``extra_args``."""
        args = ["--model-preset", self.model_preset, "--draft-agreement", str(self.draft_agreement),
                "--block-size", str(self.block_size)]
        if self.device != "auto":  # auto leaves the engine on its default device, the CPU
            args += ["--device", self.device]
        if self.num_layers is not None:
            args += ["--num-layers", str(self.num_layers)]
        return args


@dataclass(frozen=True)
class SGLangSettings:
    """How methods map to SGLang flags: forks differ (README, "DDTree budget semantics"), so it is
    configuration.

    `method_flags` is a preset name (`ddtree-budget`, `num-draft-tokens`) or a table of
    method -> argv templates merged over the default preset (see servers/sglang.py).
    """

    method_flags: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: dict(DEFAULT_METHOD_FLAGS))
    extra_args: tuple[str, ...] = ()
    python: str = sys.executable


@dataclass(frozen=True)
class SpecdecConfig:
    source: str  # what the header shows: "pyproject.toml [tool.specdec]", "specdec.toml", "defaults"
    root: Path
    model: str | None = None
    draft_model: str | None = None
    model_cache: str | None = None
    matrices: Mapping[str, Matrix] = field(default_factory=dict)
    workloads: tuple[WorkloadSpec, ...] = ()
    tolerances: Mapping[str, Any] = field(default_factory=dict)  # gate.parse_tolerance_table
    metrics: Mapping[str, Direction] = field(default_factory=dict)  # the user's own, [tool.specdec.metrics]
    known_issues: tuple[KnownIssue, ...] = ()
    min_accept_length: float | None = None  # None: derived per configuration (random-draft bound)
    engine: EngineSettings = EngineSettings()
    sglang: SGLangSettings = SGLangSettings()
    options: Mapping[str, Any] = field(default_factory=dict)  # option values set in the file


DEFAULT_MATRICES = {
    "cpu": Matrix("cpu", METHODS, (1,), (8, 16, 32)),
    "blackwell": Matrix("blackwell", ("dflash", "ddtree"), (1, 4, 8), (8, 12, 15, 16, 32, 64)),
    "hopper": Matrix("hopper", ("dflash", "ddtree"), (1, 4, 8), (8, 12, 15, 16, 32, 64)),
}
DEFAULT_WORKLOADS = (WorkloadSpec("chat"),)
#: The most requests a workload sends: a run builds every request first, so a slip of extra digits
#: (num_prompts = 80000000000) would fill memory and end in an internal error, not this key's name.
MAX_NUM_PROMPTS = 1_000_000

_MATRIX_KEYS = frozenset({"methods", "tp", "budget"})
_TOP_KEYS = {"model", "draft_model", "model_cache", "matrix", "workloads", "tolerances", "metrics",
             "known_issues", "min_accept_length", "engine", "sglang"} \
    | OPTION_NAMES


# what a user wrote in TOML, not Python's name
_KIND_NAMES = {int: "a whole number", float: "a number", dict: "a TOML table", str: "a string", bool: "true or false",
               list: "a list"}


#: Unicode categories of characters a name cannot show in one line of text: controls (a tab, a line
#: feed, NUL) and the line and paragraph separators.
_BREAKING = frozenset({"Cc", "Zl", "Zp"})


#: What each list key holds, as the fix for a value of another type writes it.
_LIST_EXAMPLES = {"tp": "[1, 4, 8]", "budget": "[8, 16, 32]", "methods": '["dflash", "ddtree"]',
                  "method": '["ddtree"]', "backend": '["sglang"]', "extra_args": '["--flag", "value"]'}
_NO_LIST_EXAMPLE = '["..."]'

#: A number key's example where it has no default to show.
_NUMBER_EXAMPLES = {"min_accept_length": 1.5, "num_layers": 2}

#: What each string key names, as the fix for a value of another type writes it.
_TEXT_EXAMPLES = {"model": "Qwen/Qwen3.6-27B", "draft_model": "z-lab/Qwen3.6-27B-DFlash",
                  "model_cache": "/dev/shm/models", "reason": "verify crashes", "arch": "sm_120",
                  "family": "blackwell", "prompts": "chat", "name": "chat", "model_preset": "tiny",
                  "device": "cuda", "python": "/opt/sglang/bin/python"}


#: What a string key of a known set or form takes, and whether a text is one: where the value given,
#: quoted, would be refused next (arch = 5 as "5"), the fix names these instead of the quotes.
_TEXT_FORMS: dict[str, tuple[str, Callable[[str], bool]]] = {
    "arch": ("a GPU architecture such as sm_90, sm_120 or 12.0", partial(accepts, normalise_arch)),
    "family": (f"one of {', '.join(ALL_FAMILIES)}", ALL_FAMILIES.__contains__),
    "device": (f"one of {', '.join(ENGINE_DEVICES)}", ENGINE_DEVICES.__contains__),
    "model_preset": (f"one of {', '.join(MODEL_PRESETS)}", MODEL_PRESETS.__contains__),
    # a list's one path is written as that path; a number or boolean names no prompt file
    "prompts": (f"a built-in set ({', '.join(BUILTIN_PROMPT_SETS)}) or the path of a JSONL file",
                lambda text: text in BUILTIN_PROMPT_SETS or not (text in ("true", "false") or accepts(float, text))),
}


class _Reader:
    """Checks one table's keys and types; errors name the file and the dotted key."""

    def __init__(self, filename: str, table: str, data: Mapping[str, Any], header: str | None = None):
        self.filename, self.table, self.data = filename, table, data
        if not isinstance(data, Mapping):
            kind = _KIND_NAMES.get(type(data), f"a {type(data).__name__}")
            self.fail(None, f"{toml_shown(data)} must be a table, not {kind}; write its keys under a "
                            f"{header or f'[{table}]'} header")

    def where(self, key: str | None) -> str:
        return f"{self.filename} [{self.table}]" + (f" key {key!r}" if key else "")

    def fail(self, key: str | None, problem: str) -> None:
        raise SpecdecUsageError(f"{self.where(key)}: {problem}")

    def check_keys(self, known: set[str] | frozenset[str]) -> None:
        for key in self.data:
            if key not in known:
                meant = closest(key, sorted(known))
                self.fail(None, f"unknown key {key!r}; " + (f"did you mean {meant!r}?" if meant
                                                              else f"known keys: {', '.join(sorted(known))}"))

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
        if key not in self.data:
            return default
        value = self.data[key]
        number = kind in (int, float, (int, float))
        if isinstance(value, bool) and number:
            self.fail(key, f"{toml_shown(value)} must be a number{self._number_fix(key, kind, value, default)}")
        if kind is float and isinstance(value, int):
            value = float(value)
        if not isinstance(value, kind):
            kinds = (kind,) if isinstance(kind, type) else kind
            names = " or ".join(_KIND_NAMES.get(k, f"a {k.__name__}") for k in kinds)
            if kind is str:
                takes, accepts = _TEXT_FORMS.get(key, (None, None))
                self.fail(key, not_text(key, value, _TEXT_EXAMPLES.get(key, "..."), takes, accepts))
            fix = self._number_fix(key, kind, value, default) if number else \
                f"; write {key} = true or {key} = false" if kind is bool else \
                f"; write its keys under a [{self.sub(key)}] header" if kind is dict else ""
            self.fail(key, f"{toml_shown(value)} must be {names}{fix}")
        if isinstance(value, float) and not math.isfinite(value):  # TOML spells nan and inf
            self.fail(key, f"{value!r} must be a finite number{self._number_fix(key, kind, value, default)}")
        return value

    def sub(self, key: str) -> str:
        """The header of the sub-table `key` of this table, as the file spells it."""
        return key if self.table == "top level" else f"{self.table}.{key}"

    @staticmethod
    def _number_fix(key: str, kind: Any, value: Any, default: Any) -> str:
        """How to write a number: without quotes where one was quoted, else as the key's example."""
        try:
            quoted = float(value) if isinstance(value, str) else None
        except ValueError:
            quoted = None
        if quoted is not None and math.isfinite(quoted) and (kind is not int or quoted.is_integer()):
            return f"; write it without quotes: {key} = {value.strip()}"
        example = default if default is not None else _NUMBER_EXAMPLES.get(key, 1)
        return f"; write a {'whole ' if kind is int else ''}number without quotes, e.g. {key} = {example}"

    def text(self, key: str, example: str) -> str | None:
        """A string that names something: a blank one names nothing, and its key would read as unset."""
        value = self.get(key, str)
        if value is not None and not value.strip():
            self.fail(key, f"{value!r} is empty; name it ({key} = {example}) or leave the key out")
        return value

    def int_list(self, key: str, default: tuple[int, ...] | None = None) -> tuple[int, ...] | None:
        if key not in self.data:
            return default
        value = self.data[key]
        if isinstance(value, int) and not isinstance(value, bool):
            value = [value]
        if not isinstance(value, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in value):
            self.fail(key, f"{value!r} must be a list of whole numbers, e.g. {key} = "
                           f"{_LIST_EXAMPLES.get(key, '[1, 4, 8]')}")
        return tuple(value)

    def str_list(self, key: str, default: tuple[str, ...] | None = None) -> tuple[str, ...] | None:
        if key not in self.data:
            return default
        value = self.data[key]
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.fail(key, f"{value!r} must be a list of strings, e.g. {key} = "
                           f"{_LIST_EXAMPLES.get(key, _NO_LIST_EXAMPLE)}")
        return tuple(value)


def _table_name(filename: str, name: str) -> str:
    """A sub-table's name as its file spells it: under `tool.specdec.` in pyproject.toml, at the
    top level of specdec.toml (errors must name a table the user can find)."""
    return f"tool.specdec.{name}" if filename.endswith("pyproject.toml") else name


def _quoted_whole(reader: _Reader, key: str) -> bool:
    """Whether `key` holds a whole number in quotes, which a workload's warmup_requests takes as its
    run-wide twin, [tool.specdec] warmup_requests (an option, read as the command line's text), does."""
    value = reader.data.get(key)
    return isinstance(value, str) and value.strip().lstrip("+-").isdigit()


def _family_hint(family: str) -> str:
    """The family a misspelt one most likely stands for, as unknown keys and flags are answered;
    else the families there are."""
    return hint(family, ALL_FAMILIES)


def _check_methods(reader: _Reader, key: str, methods: tuple[str, ...]) -> None:
    for method in methods:
        if method not in METHODS:
            reader.fail(key, f"unknown method {method!r}; {hint(method, METHODS)}")


def _check_tp(reader: _Reader, key: str, tps: tuple[int, ...]) -> None:
    for tp in tps:
        if tp < 1 or tp & (tp - 1):
            reader.fail(key, f"{tp} is not a power of two; tensor-parallel sizes are 1, 2, 4, 8, ...")


def _check_budgets(reader: _Reader, key: str, budgets: tuple[int, ...]) -> None:
    for budget in budgets:
        if budget < 1:
            reader.fail(key, f"{budget} is impossible; a tree budget counts draft nodes and must "
                             f"be at least 1")


def _check_once(reader: _Reader, key: str, values: tuple[Any, ...] | None) -> None:
    """A value listed twice is a slip, perhaps for another value."""
    values = values or ()
    twice = sorted({v for v in values if values.count(v) > 1}, key=values.index)
    if twice:
        reader.fail(key, f"lists {', '.join(map(repr, twice))} more than once; list each once")


def _check_matrix_keys_at_top(reader: _Reader, filename: str) -> None:
    """A matrix's key (methods, budget, or a slip for one) written at the top: it configures one
    hardware family's table, which the unknown-key answer alone does not say."""
    for key, value in reader.data.items():
        meant = None if key in _TOP_KEYS else closest(key, _MATRIX_KEYS)
        if meant is not None:
            spelt = "" if key == meant else f", spelt {meant}"
            table = _table_name(filename, "matrix.<family>")
            reader.fail(key, f"{toml_shown(value)} belongs in a matrix table{spelt}, one per hardware family "
                             f"([{table}], family one of {', '.join(ALL_FAMILIES)}); move it there, e.g. "
                             f"[{_table_name(filename, 'matrix.cpu')}] {meant} = {json.dumps(value, default=str)}"
                        + ("; move tp there too (at the top, tp only filters the matrix's sizes)"
                           if "tp" in reader.data else ""))


def _parse_matrix(filename: str, family: str, data: Any) -> Matrix:
    reader = _Reader(filename, _table_name(filename, f"matrix.{family}"), data)
    reader.check_keys(_MATRIX_KEYS)
    methods = reader.str_list("methods", ())
    tps = reader.int_list("tp", (1,))
    budgets = reader.int_list("budget", ())
    for key, values in (("methods", methods), ("tp", tps), ("budget", budgets)):
        _check_once(reader, key, values)  # each would be a test of its own, measuring one configuration again
    if not methods:
        reader.fail("methods", f"[] is empty; list at least one of {', '.join(METHODS)}, e.g. methods = "
                               f"[\"{METHODS[0]}\"]")
    _check_methods(reader, "methods", methods)
    if not tps:
        reader.fail("tp", "[] is empty; list at least one size, e.g. tp = [1]")
    _check_tp(reader, "tp", tps)
    _check_budgets(reader, "budget", budgets)
    budgeted = [m for m in methods if takes_budget(m)]
    if budgeted and not budgets:
        reader.fail("budget", f"is missing or empty but methods include {budgeted[0]}; list budgets, e.g. "
                              f"budget = [8, 16, 32]")
    if budgets and not budgeted:  # it would be read by no configuration
        reader.fail("budget", f"{list(budgets)} is given but none of the methods {', '.join(methods)} takes a budget "
                              f"(only {', '.join(m for m in METHODS if takes_budget(m))} does); add "
                              f"one, or remove budget")
    return Matrix(family, methods, tps, budgets)


def _parse_known_issue(filename: str, index: int, data: Any) -> KnownIssue:
    table = _table_name(filename, "known_issues")  # the entry's header as its file spells it
    reader = _Reader(filename, f"{table} #{index + 1}", data, f"[[{table}]]")
    reader.check_keys({"reason", "arch", "family", "method", "tp", "budget", "backend"})
    reason = reader.get("reason", str)
    if not (reason or "").strip():
        reader.fail("reason", f"{'missing' if reason is None else repr(reason) + ' is blank'}; say what breaks, "
                              f"e.g. reason = \"verify crashes\"")
    arch = reader.get("arch", str)
    if arch is not None:
        try:
            arch = normalise_arch(arch)
        except SpecdecUsageError:
            family = closest(arch, GPU_FAMILIES)
            reader.fail("arch", f"{family_for_arch(arch)}; or write family = {family!r} to match them all" if family
                        else family_for_arch(arch) or f"{arch!r} is not an arch; use e.g. sm_120 "
                                                      f"({', '.join(FAMILIES)})")
    family = reader.get("family", str)
    if family is not None and family not in ALL_FAMILIES:
        of = arch_family(family)
        reader.fail("family", f"{family!r} is an architecture, not a family; write family = {of!r}, or "
                              f"arch = {family!r} for that architecture only" if of
                    else f"{family!r} is unknown; {_family_hint(family)}")
    if arch is not None and family is not None and family_of(arch) != family:
        # both must match, so the entry would never apply
        reader.fail("family", f"{family!r} contradicts arch = {arch!r}, which is "
                              f"{family_of(arch)}; give one of them")
    methods = reader.str_list("method")
    tps = reader.int_list("tp")
    budgets = reader.int_list("budget")
    backends = reader.str_list("backend")
    for key, values in (("method", methods), ("tp", tps), ("budget", budgets), ("backend", backends)):
        if values == ():  # matches no configuration, so the entry would never apply
            reader.fail(key, f"[] is empty, so the entry matches nothing; list at least one value, or remove "
                             f"{key} to match any")
        _check_once(reader, key, values)  # refused as a matrix's repeat is: harmless here, but a slip all the same
    if methods is not None:
        _check_methods(reader, "method", methods)
    if tps is not None:
        _check_tp(reader, "tp", tps)
    if budgets is not None:
        _check_budgets(reader, "budget", budgets)
        if methods is not None and not any(takes_budget(m) for m in methods):
            # a configuration without a budget never matches a budget
            reader.fail("budget", f"{list(budgets)} is given, but {', '.join(methods)} "
                                  f"take{'s' if len(methods) == 1 else ''} "
                                  f"no budget (a tree budget is ddtree's); remove the budget or "
                                  f"add ddtree to method")
    if backends is not None:
        for backend in backends:
            if backend not in KNOWN_ISSUE_BACKENDS:
                reader.fail("backend", f"{backend!r} is unknown; {hint(backend, KNOWN_ISSUE_BACKENDS)}")
    return KnownIssue(reason, arch, family, methods, tps, budgets, backends, where=reader.where(None))


def _parse_workload(filename: str, index: int, data: Any, root: Path) -> WorkloadSpec:
    table = _table_name(filename, "workloads")  # the entry's header as its file spells it
    reader = _Reader(filename, f"{table} #{index + 1}", data, f"[[{table}]]")
    reader.check_keys({"name", "prompts", "num_prompts", "max_new_tokens", "concurrency",
                       "temperature", "truncate", "warmup_requests"})
    prompts = reader.get("prompts", str, "chat")
    if not prompts.strip():  # else read as the project root, a folder, or as an empty default name
        reader.fail("prompts", f"{prompts!r} is {'blank' if prompts else 'empty'}; name a built-in set "
                               f"({', '.join(BUILTIN_PROMPT_SETS)}) or a JSONL file, e.g. prompts = \"chat\"")
    name = reader.get("name", str, Path(prompts).stem)
    if not name.strip():
        reader.fail("name", f"{name!r} is {'blank' if name else 'empty'}; give the workload a name, e.g. "
                            f"name = \"chat\"")
    unprintable = next((c for c in name if unicodedata.category(c) in _BREAKING), None)
    if unprintable is not None:  # a test id, a summary row and report.md's table cell would each break there
        reader.fail("name", f"{name!r} holds {unprintable!r} (U+{ord(unprintable):04X}), a control character or "
                            f"line break that no row of the summary or report shows as written; remove it")
    if prompts not in BUILTIN_PROMPT_SETS:
        path = Path(prompts).expanduser()  # as the model paths are
        path = path if path.is_absolute() else root / path
        meant = closest(prompts, BUILTIN_PROMPT_SETS) if "/" not in prompts and not path.suffix else None
        try:
            is_file, is_dir = path.is_file(), path.is_dir()
        except OSError as exc:  # a name too long, a folder on the way that cannot be searched
            reader.fail("prompts", f"{prompts!r} cannot be looked up ({exc.strerror or exc}); fix the path")
        if not is_file:
            broken = None if is_dir else link_fault_said(path)
            if broken is not None:  # the link is what to fix: the path may well be the one meant
                reader.fail("prompts", f"{prompts!r} leads to no file: {broken}; repoint or remove the link, "
                                       f"or fix the path")
            kind = None if is_dir else special(path)
            if kind is not None:  # a pipe is read once, or waits for a writer; a device is no prompts
                reader.fail("prompts", f"{path} is {kind}, not a regular file; write the prompts to a "
                                       f"JSONL file and give that file's path")
            # the path looked at, since a relative one is the project root's, not the current folder's
            found = f"{path} is a folder" if is_dir else f"no file at {path}"
            relative = "" if Path(prompts).expanduser().is_absolute() else " (a relative path is the project root's)"
            reader.fail("prompts", f"{prompts!r} is neither a built-in set "
                                   f"({', '.join(BUILTIN_PROMPT_SETS)}) nor a JSONL file; "
                                   + (f"did you mean the built-in set {meant!r}?" if meant
                                      else f"{found}{relative}: fix the path"))
        prompts = str(path)
    spec = WorkloadSpec(
        name=name, prompts=prompts,
        num_prompts=reader.get("num_prompts", int, 8),
        max_new_tokens=reader.get("max_new_tokens", int, 64),
        concurrency=reader.get("concurrency", int, 1),
        temperature=reader.get("temperature", float, 0.0),
        truncate=reader.get("truncate", bool, False),
        warmup_requests=reader.get("warmup_requests", int, None) if not _quoted_whole(reader, "warmup_requests")
        else int(reader.data["warmup_requests"]),
    )
    if spec.warmup_requests is not None and spec.warmup_requests < 0:
        reader.fail("warmup_requests", f"{spec.warmup_requests} must be 0 (no warm-up) or more")
    for key in ("num_prompts", "max_new_tokens", "concurrency"):
        if getattr(spec, key) < 1:
            reader.fail(key, f"{getattr(spec, key)} must be at least 1")
    if spec.num_prompts > MAX_NUM_PROMPTS:  # every request is built before the first is sent
        reader.fail("num_prompts", f"{spec.num_prompts} is more requests than a run sends (at most "
                                   f"{MAX_NUM_PROMPTS:_}); lower it, e.g. num_prompts = 64")
    if spec.temperature < 0:
        reader.fail("temperature", f"{spec.temperature} must be 0 (greedy) or more")
    return spec


def _parse_metrics(filename: str, table: Mapping[str, Any]) -> dict[str, Direction]:
    """`[tool.specdec.metrics]`: the metrics tests record of their own, with the way each improves,
    so that tolerances may name them (a misspelt name stays an error) and `metric()` need not."""
    reader = _Reader(filename, _table_name(filename, "metrics"), table)
    out: dict[str, Direction] = {}
    for name, direction in table.items():
        if not METRIC_NAME.match(name):
            reader.fail(name, f"{name!r} is not a metric name: letters, digits, _ and ., not starting with a "
                              f"digit; rename it, e.g. kv_hit_rate = \"higher\"")
        if direction not in ("higher", "lower"):
            meant = closest(direction, ("higher", "lower")) if isinstance(direction, str) else None
            reader.fail(name, f"{direction!r} is not a direction; " + (f"did you mean {meant!r}?" if meant else
                              "write \"higher\" (bigger is better) or \"lower\""))
        if name in METRIC_DIRECTIONS:
            reader.fail(name, f"{name} is a built-in metric ({METRIC_DIRECTIONS[name]} is better), whose "
                              f"direction is known; remove it from this table")
        clash = case_clash(name, out)
        if clash:
            reader.fail(name, clash)
        out[name] = direction
    return out


def _parse_engine(filename: str, data: Any) -> EngineSettings:
    reader = _Reader(filename, _table_name(filename, "engine"), data)
    reader.check_keys({"model_preset", "draft_agreement", "block_size", "seed", "device",
                       "num_layers", "extra_args"})
    settings = EngineSettings(
        model_preset=reader.get("model_preset", str, "tiny"),
        draft_agreement=reader.get("draft_agreement", float, 0.9),
        block_size=reader.get("block_size", int, 16),
        seed=reader.get("seed", int, 0),
        device=reader.get("device", str, "auto"),
        num_layers=reader.get("num_layers", int, None),
        extra_args=_argv_list(reader, ENGINE_FLAGS_SET_BY_PLUGIN),
    )
    if not 0.0 <= settings.draft_agreement <= 1.0:
        reader.fail("draft_agreement", f"{settings.draft_agreement:g} must lie in [0, 1], a probability per drafted "
                                       f"position; e.g. draft_agreement = 0.9")
    if settings.block_size < MIN_BLOCK_SIZE:
        reader.fail("block_size", f"{settings.block_size} must be at least {MIN_BLOCK_SIZE} (the root "
                                  f"and at least one draft position)")
    if settings.num_layers is not None and settings.num_layers < 1:
        reader.fail("num_layers", f"{settings.num_layers} must be at least 1, or leave it out for the "
                                  f"preset's layer count")
    if settings.device not in ENGINE_DEVICES:
        reader.fail("device", f"{settings.device!r} is unknown; {hint(settings.device, ENGINE_DEVICES)}")
    if settings.model_preset not in MODEL_PRESETS:
        reader.fail("model_preset", f"{settings.model_preset!r} is unknown; {hint(settings.model_preset, MODEL_PRESETS)}")
    _check_engine_extra_args(reader, settings)
    return settings


def _check_engine_extra_args(reader: _Reader, settings: EngineSettings) -> None:
    """Parse extra_args with the engine's own parser and checks, after the settings the plugin
    passes beside them, so a typo or a bad value stops the run before any boot."""
    parser = rejecting_parser(
        lambda message: reader.fail("extra_args", f"{message}; see python -m pytest_specdec.engine --help"))
    parser.print_help = lambda file=None: reader.fail(  # type: ignore[method-assign]
        "extra_args", "-h/--help is not an engine setting; remove it")
    parse_args(["--method", METHODS[0], *settings.argv(), *settings.extra_args], parser)


def _parse_sglang(filename: str, data: Any, root: Path) -> SGLangSettings:
    reader = _Reader(filename, _table_name(filename, "sglang"), data)
    reader.check_keys({"method_flags", "extra_args", "python"})
    raw = reader.data.get("method_flags")
    if raw is not None and not isinstance(raw, (str, dict)):
        reader.fail("method_flags", f"{toml_shown(raw)} must be a preset's name or a table; write e.g. method_flags "
                                    f"= \"ddtree-budget\" ({', '.join(METHOD_FLAG_PRESETS)}), or method = [argv...] "
                                    f"under a [{reader.sub('method_flags')}] header")
    flags = DEFAULT_METHOD_FLAGS if raw is None else method_flags_from_config(
        raw, source=reader.where("method_flags"), entry=lambda method: reader.where(f"method_flags.{method}"))
    python = reader.get("python", str, sys.executable)
    if "/" in python:  # a path, the project root's as every path here; a bare name is looked up in PATH
        python = str(root / Path(python).expanduser())
    if shutil.which(python) is None:  # a path that is no program failed every test with a traceback
        reader.fail("python", f"{python!r} is not an executable Python; give the interpreter that has "
                              f"SGLang installed, e.g. \"/opt/sglang/bin/python\"")
    return SGLangSettings(dict(flags), _argv_list(reader, SGLANG_FLAGS_SET_BY_PLUGIN, SGLANG_FLAGS_REFUSED),
                          python)


#: Flags the plugin passes every server itself, and what a user sets instead: in extra_args they
#: would override it (a --port the plugin never hears of, a budget other than the test's).
ENGINE_FLAGS_SET_BY_PLUGIN = {
    "--host": "the plugin binds each server to 127.0.0.1", "--port": "the plugin picks each server's port",
    "--method": "the matrix sets each test's method", "--budget": "the matrix sets each test's budget",
    "--seed": "set [tool.specdec.engine] seed", "--log-level": "the plugin reads the server's info log",
    "--model-preset": "set [tool.specdec.engine] model_preset",
}
SGLANG_FLAGS_SET_BY_PLUGIN = {
    "--host": ENGINE_FLAGS_SET_BY_PLUGIN["--host"], "--port": ENGINE_FLAGS_SET_BY_PLUGIN["--port"],
    "--tp-size": "the matrix sets each test's tensor-parallel size", "--tp": "the matrix sets each test's "
    "tensor-parallel size", "--tensor-parallel-size": "the matrix sets each test's tensor-parallel size",
    "--model-path": "set [tool.specdec] model",
    "--log-level": ENGINE_FLAGS_SET_BY_PLUGIN["--log-level"], "--random-seed": "set [tool.specdec.engine] seed",
    "--speculative-algorithm": "the matrix sets each test's method, through [tool.specdec.sglang] method_flags",
    "--speculative-ddtree-budget": "the matrix sets each test's budget, through [tool.specdec.sglang] "
    "method_flags", "--speculative-num-draft-tokens": "the matrix sets each test's budget, through "
    "[tool.specdec.sglang] method_flags", "--speculative-draft-model-path": "set [tool.specdec] draft_model",
    # GPUs beyond the TP size the plugin leases, or other than those it gives as CUDA_VISIBLE_DEVICES
    **dict.fromkeys(("--dp-size", "--data-parallel-size", "--pp-size", "--pipeline-parallel-size",
                     "--base-gpu-id", "--gpu-id-step", "--nnodes", "--node-rank"),
                    "the plugin leases each server the matrix's TP size in GPUs and gives them as "
                    "CUDA_VISIBLE_DEVICES; this would take others, or more"),
}

#: Flags no server of the plugin's can run with, and why.
SGLANG_FLAGS_REFUSED = {
    SKIP_TOKENIZER_INIT_FLAG: "SGLang then loads no tokenizer and refuses every request the plugin sends, "
                              "whose prompts are text",
}


def _argv_list(reader: _Reader, set_by_plugin: Mapping[str, str],
               refused: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """extra_args: a list of arguments, one element each, none of the flags the plugin sets or
    `refused` names."""
    if isinstance(reader.data.get("extra_args"), str):
        words = reader.data["extra_args"].split()
        reader.fail("extra_args", f"{reader.data['extra_args']!r} is one string; give one argument an "
                                  f"element, e.g. {json.dumps(words)}")
    args = reader.str_list("extra_args", ())
    for arg in args:
        flag = arg.split("=", 1)[0]
        meant = _flag_set_by_plugin(flag, set_by_plugin)
        if meant == flag:
            reader.fail("extra_args", f"{flag} is set by the plugin ({set_by_plugin[flag]}); remove it")
        if meant is not None:
            reader.fail("extra_args", f"{flag} reads as {meant}, which is set by the plugin "
                                      f"({set_by_plugin[meant]}); remove it")
        meant = _flag_set_by_plugin(flag, refused or {})
        if meant is not None:
            spelled = flag if meant == flag else f"{flag} (read as {meant})"
            reader.fail("extra_args", f"{spelled}: {refused[meant]}; remove it")
    return args


def _flag_set_by_plugin(flag: str, set_by_plugin: Mapping[str, str]) -> str | None:
    """The plugin's flag that `flag` sets: itself, or one it abbreviates, as argparse reads a
    unique prefix (and as SGLang's aliases --model, --speculative-draft-model are)."""
    if flag in set_by_plugin:
        return flag
    if not flag.startswith("--") or len(flag) < 3:
        return None
    return next((full for full in set_by_plugin if full.startswith(flag)), None)


def _array_of_tables(reader: _Reader, key: str, what: str) -> list[Any]:
    """`[[key]]` entries; `[key]`, one table, is the usual slip and is named as such."""
    header = f"tool.specdec.{key}" if reader.table == "tool.specdec" else key
    value = reader.data.get(key, [])
    if isinstance(value, Mapping):
        reader.fail(key, f"is one table, [{header}]; give each {what} an entry of its own headed [[{header}]] "
                         f"(two brackets)")
    if not isinstance(value, list):
        reader.fail(key, f"{toml_shown(value)} must be a list of tables; give each {what} an entry of its own "
                         f"headed [[{header}]]")
    return value


def parse(data: Mapping[str, Any], filename: str, root: Path) -> SpecdecConfig:
    """Build a SpecdecConfig from the `[tool.specdec]` table (or specdec.toml's top level)."""
    reader = _Reader(filename, "tool.specdec" if filename.endswith("pyproject.toml") else "top level",
                     data)
    _check_matrix_keys_at_top(reader, filename)
    reader.check_keys(_TOP_KEYS)
    matrices: dict[str, Matrix]
    if "matrix" in data:
        raw = reader.get("matrix", dict)
        if not raw:
            reader.fail("matrix", "{} is empty; add e.g. [tool.specdec.matrix.cpu] with methods, tp "
                                  "and budget")
        matrices = {}
        for family, table in raw.items():
            if family not in ALL_FAMILIES:
                of = arch_family(family)
                reader.fail(f"matrix.{family}", f"{family} is an architecture, not a hardware family; a matrix "
                                                f"is per family: [{_table_name(filename, 'matrix.' + of)}]"
                            if of else f"{family!r} is an unknown hardware family; {_family_hint(family)}")
            matrices[family] = _parse_matrix(filename, family, table)
    else:
        matrices = dict(DEFAULT_MATRICES)

    workloads = DEFAULT_WORKLOADS
    if "workloads" in data:
        raw_workloads = _array_of_tables(reader, "workloads", "workload")
        if not raw_workloads:
            reader.fail("workloads", "[] is empty; add at least one [[tool.specdec.workloads]] entry")
        workloads = tuple(_parse_workload(filename, i, w, root) for i, w in enumerate(raw_workloads))
        names = [w.name for w in workloads]
        if len(set(names)) != len(names):
            reader.fail("workloads", f"names {names} repeat; give each workload its own name")

    issues = [_parse_known_issue(filename, i, entry)
              for i, entry in enumerate(_array_of_tables(reader, "known_issues", "known issue"))]

    metrics = _parse_metrics(filename, reader.get("metrics", dict, {}))
    min_accept = reader.get("min_accept_length", float, None)
    if min_accept is not None and min_accept < 1.0:
        reader.fail("min_accept_length", f"{min_accept} is below 1; an accept length counts the "
                                         f"bonus token, so 1.0 means nothing was accepted")
    return SpecdecConfig(
        source=f"{filename} [tool.specdec]" if filename.endswith("pyproject.toml") else filename,
        root=root,
        model=reader.text("model", '"Qwen/Qwen3.6-27B"'),
        draft_model=reader.text("draft_model", '"z-lab/Qwen3.6-27B-DFlash"'),
        model_cache=reader.text("model_cache", '"/dev/shm/models"'),
        matrices=matrices,
        workloads=workloads,
        tolerances=parse_tolerance_table(
            reader.get("tolerances", dict, {}),
            f"{filename} [tool.specdec.tolerances]" if filename.endswith("pyproject.toml")
            else f"{filename} [tolerances]", known_directions(metrics)),
        metrics=metrics,
        known_issues=tuple(issues),
        min_accept_length=min_accept,
        engine=_parse_engine(filename, reader.get("engine", dict, {})),
        sglang=_parse_sglang(filename, reader.get("sglang", dict, {}), root),
        options={k: v for k, v in data.items() if k in OPTION_NAMES},
    )


def _read_toml(path: Path, shown: str | None = None) -> dict[str, Any]:
    """`shown`: the file's name in messages (default its own name, as at the project root)."""
    name = shown or path.name
    try:
        raw = path.read_bytes()
        # an editor's byte-order mark: invisible, and tomllib refuses it at line 1, column 1
        return tomllib.loads(raw.removeprefix(b"\xef\xbb\xbf").decode("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise SpecdecUsageError(f"{name}: invalid TOML ({exc}); fix the syntax") from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise SpecdecUsageError(f"{name}: invalid TOML (arrays or tables nested too deeply to read); "
                                f"fix the syntax") from None
    except UnicodeDecodeError as exc:  # TOML is UTF-8 by definition; tomllib does not say where
        line = exc.object.count(b"\n", 0, exc.start) + 1
        raise SpecdecUsageError(f"{name}: line {line} is not UTF-8 (byte "
                                f"{exc.object[exc.start]:#04x}); save the file as UTF-8") from None
    except OSError as exc:
        raise SpecdecUsageError(f"{name} cannot be read ({exc.strerror or exc}); fix its "
                                f"permissions or remove it") from None


def load_known_issues(path: Path, shown: str | None = None) -> list[KnownIssue]:
    """Known issues from a file of `[[known_issues]]` entries (e.g. baselines/known_issues.toml).
    `shown`: its path in messages (the run gives it relative to the project root, since a bare
    `known_issues.toml` does not say which folder holds it); default its own name."""
    if not path.is_file():
        if not os.path.lexists(path):
            raise SpecdecUsageError(f"known issues file {path} does not exist; give the path of an existing "
                                    f"file")
        raise SpecdecUsageError(f"known issues file {path} is {no_file(path)}, not a TOML file; make it the file of "
                                f"[[known_issues]] entries, or remove it")
    name = shown or path.name
    data = _read_toml(path, name)
    if "tool" in data:  # pyproject.toml's [[tool.specdec.known_issues]], copied as it is
        raise SpecdecUsageError(f"{name} [top level]: unknown key 'tool'; this file lists known issues at its "
                                f"top level, each headed [[known_issues]] (not [[tool.specdec.known_issues]], "
                                f"pyproject.toml's header), with the same keys")
    _Reader(name, "top level", data).check_keys({"known_issues"})
    entries = _array_of_tables(_Reader(name, "top level", data), "known_issues", "known issue")
    return [_parse_known_issue(name, i, entry) for i, entry in enumerate(entries)]


def _settings_table(root: Path) -> tuple[Mapping[str, Any], str] | None:
    """The table that configures the plugin in `root` and its file's name: specdec.toml or
    pyproject.toml's [tool.specdec], not both (one would be ignored without a word); None for neither."""
    specdec_toml = root / "specdec.toml"
    pyproject = root / "pyproject.toml"
    tool = _read_toml(pyproject).get("tool", {}) if pyproject.is_file() else {}
    table = tool.get("specdec") if isinstance(tool, dict) else None  # `tool = 1` holds no table of ours
    if os.path.lexists(specdec_toml) and not specdec_toml.is_file():
        # is_file says no to a folder, a dangling link or a link loop: the run would measure the defaults
        raise SpecdecUsageError(f"{specdec_toml} is {no_file(specdec_toml)}, not a settings file; make it the TOML file "
                                f"that configures pytest-specdec, or remove it to run the defaults")
    if specdec_toml.is_file():
        if table is not None:
            raise SpecdecUsageError("both specdec.toml and pyproject.toml [tool.specdec] configure "
                                    "pytest-specdec; keep one of them (merge the other into it)")
        return _read_toml(specdec_toml), "specdec.toml"
    return (table, "pyproject.toml") if table is not None else None


def load(root: Path) -> SpecdecConfig:
    """The settings file of `root` (`_settings_table`) parsed; neither file gives the defaults."""
    found = _settings_table(root)
    if found is not None:
        return parse(found[0], found[1], root)
    return SpecdecConfig(source="defaults", root=root, matrices=dict(DEFAULT_MATRICES),
                         workloads=DEFAULT_WORKLOADS)


def load_options(root: Path) -> tuple[dict[str, Any], str]:
    """The option keys of `root`'s settings file as written, with the source name their errors give
    (SpecdecConfig.source), the rest of the file unchecked: for a command outside pytest (the merge),
    which a mistake in the matrix or workloads, the runs' to report, must not stop."""
    found = _settings_table(root)
    if found is None:
        return {}, "defaults"
    data, filename = found
    source = f"{filename} [tool.specdec]" if filename.endswith("pyproject.toml") else filename
    if not isinstance(data, Mapping):  # `[tool] specdec = 1`, no table: the reader says so, as a run's does
        _Reader(filename, "tool.specdec", data)
    return {k: v for k, v in data.items() if k in OPTION_NAMES}, source
