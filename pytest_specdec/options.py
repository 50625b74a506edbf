"""The plugin's options: one table, three places to set each (CLI, ini, `[tool.specdec]`).

Users configure CI in pyproject.toml rather than in long command lines, so every `--specdec-x-y`
has an ini twin `specdec_x_y` and a `[tool.specdec]` key `x_y`. Precedence: command line, then
`[tool.pytest.ini_options]`, then `[tool.specdec]` (or specdec.toml), then the default.
"""

from __future__ import annotations

import ast
import functools
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Mapping

from .configuration import METHODS, takes_budget
from .errors import SpecdecUsageError

BACKENDS = ("auto", "embedded", "sglang")


def _shard(text: str) -> Any:
    from .shard import parse_shard  # here, not at the top: every pytest run loads this table

    return parse_shard(text)


def _exactness(text: str) -> str:
    from .lossless import parse_exactness

    return str(parse_exactness(text))


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{text!r} is not a boolean (use true or false)")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not 0 < value < math.inf:  # also false for nan
        raise ValueError(f"{text!r} must be a finite number greater than 0")
    return value


def _count(text: str, least: int = 0) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number") from None
    if value < least:
        raise ValueError(f"{text!r} must be {least} or more")
    return value


#: More GPUs than one host has; a simulated inventory holds one object per GPU.
MAX_GPUS = 64


def _gpu_count(text: str) -> int:
    value = _count(text)
    if value > MAX_GPUS:
        raise ValueError(f"{text!r} is more GPUs than one host has; give at most {MAX_GPUS} "
                         f"(the largest tensor-parallel size a matrix runs is 8)")
    return value


def _positive_count(text: str) -> int:
    return _count(text, least=1)


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        sizes = ()
    if not sizes or any(size < 1 for size in sizes):
        raise ValueError(f"{text!r} is not a list of tensor-parallel sizes, e.g. 8 or 1,4")
    for size in sizes:
        if size & (size - 1):  # the matrices accept powers of two only (config._check_tp)
            raise ValueError(f"{text!r}: {size} is not a power of two; tensor-parallel sizes "
                             f"are 1, 2, 4, 8, ...")
    twice = sorted({size for size in sizes if sizes.count(size) > 1}, key=sizes.index)
    if twice:  # refused as a matrix's repeated entry is: a slip, perhaps for another size
        raise ValueError(f"{text!r} lists {', '.join(map(str, twice))} more than once; list each size once")
    return sizes


def _toml_sizes(raw: int | list[Any], key: str = "tp") -> tuple[int, ...]:
    """`tp` as [tool.specdec] writes it (`[1, 4]`, or `4`); its errors quote that spelling, not the
    command line's `1,4`, which the user never wrote there."""
    values = raw if isinstance(raw, list) else [raw]

    def spelled(sizes: list[int]) -> str:  # an ini value is text, as pytest will require of [tool.pytest.ini_options]
        return f"{key} = " + (f"\"{','.join(map(str, sizes))}\"" if key.startswith("specdec_") else repr(sizes))

    if not values:
        raise ValueError(f"[] is empty; list at least one size, e.g. {spelled([1, 4])}")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ValueError(f"{raw!r} must be a list of whole numbers, e.g. {spelled([1, 4])}")
    for size in values:
        if size < 1 or size & (size - 1):
            raise ValueError(f"{raw!r}: {size} is not a power of two; tensor-parallel sizes are 1, 2, 4, 8, ...")
    twice = sorted({size for size in values if values.count(size) > 1}, key=values.index)
    if twice:
        once = sorted(set(values), key=values.index)
        raise ValueError(f"{raw!r} lists {', '.join(map(str, twice))} more than once; list each size once: "
                         f"{spelled(once)}")
    return tuple(values)


def _url(text: str) -> str:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text)
        port = parts.port  # raises ValueError for a port that is not a number, or past 65535
    except ValueError as exc:
        if "out of range" in str(exc):
            raise ValueError(f"{text!r}: its port is out of range; a port is 1-65535") from None
        parts = port = None
    if port == 0:  # urlsplit takes it, but no server listens on it: a connection refused, later
        raise ValueError(f"{text!r}: its port is out of range; a port is 1-65535")
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{text!r} is not an http(s) URL such as http://127.0.0.1:30000")
    # each endpoint's path is appended to the URL: a query or fragment would swallow it, and
    # credentials are sent by neither client (and would be printed in the header)
    extra = "a query" if parts.query else "a fragment" if parts.fragment else \
        "credentials" if parts.username is not None else None
    if extra:
        raise ValueError(f"{text!r} has {extra}, which the server's paths cannot follow; give the server's "
                         f"base URL alone, such as http://127.0.0.1:30000 or http://host/prefix")
    return text


def _arch(text: str) -> str:
    """Checked where it is set, so that its error names the ini key or config key it came from."""
    from .hardware import FAMILIES, family_for_arch, normalise_arch

    try:
        arch = normalise_arch(text)
    except SpecdecUsageError:
        family = family_for_arch(text)
        if family is not None:
            raise ValueError(family) from None
        raise ValueError(f"{text!r} is not a GPU architecture; use a compute capability such as sm_90 "
                         f"(Hopper) or sm_120 (Blackwell RTX PRO 6000); known: {', '.join(FAMILIES)}") from None
    if arch not in FAMILIES:
        raise ValueError(f"{text!r}: no family known for this architecture, so there is no suite to "
                         f"rehearse; use one of {', '.join(FAMILIES)}")
    return arch


def _backend(text: str) -> str:
    from .suggest import hint

    if text not in BACKENDS:
        raise ValueError(f"{text!r} is not a backend; {hint(text, BACKENDS)}")
    return text


#: The methods a reference can be: one configuration per family and TP, so without a tree budget.
REFERENCE_METHODS = tuple(method for method in METHODS if not takes_budget(method))


def _reference(text: str) -> str:
    from .suggest import closest, hint

    if text not in METHODS:
        meant = closest(text, METHODS)
        if meant is not None and meant not in REFERENCE_METHODS:  # a slip for ddtree, which is refused below
            raise ValueError(f"{text!r} is not a method ({meant!r}, if meant, has a configuration per "
                             f"tree budget and cannot be the reference); use one of {', '.join(REFERENCE_METHODS)}")
        raise ValueError(f"{text!r} is not a method; {hint(text, REFERENCE_METHODS)}")
    if takes_budget(text):  # a reference is one configuration per family and TP: it has no budget
        raise ValueError(f"{text!r} has a configuration per tree budget, so no one of them is the "
                         f"reference and no output would be checked; use {' or '.join(REFERENCE_METHODS)}")
    return text


@dataclass(frozen=True)
class Option:
    name: str  # the [tool.specdec] key and the attribute of Settings
    help: str
    parse: Callable[[str], Any] = str
    default: Any = None
    flag: bool = False  # a store_true switch on the command line
    metavar: str | None = None
    #: its values from each place combine (gate.resolve_tolerances), rather than the highest winning
    layered: bool = False

    @property
    def cli(self) -> str:
        return "--specdec-" + self.name.replace("_", "-")

    @property
    def ini(self) -> str:
        return "specdec_" + self.name

    @property
    def described(self) -> str:
        """The help with the default, as `pytest --help` shows it (where the help does not say it)."""
        if self.default is None or self.default is False or "default" in self.help:
            return self.help
        default = f"{self.default:g}" if isinstance(self.default, float) else self.default
        return f"{self.help} (default: {default})"

    @property
    def ini_type(self) -> str:
        """The `addini` type: pytest parses booleans and numbers itself (and says what is wrong)."""
        return {_bool: "bool", _count: "int", _gpu_count: "int", _positive_count: "int",
                _positive_float: "float"}.get(self.parse, "string")


OPTIONS: tuple[Option, ...] = (
    Option("backend", "server backend: auto (SGLang where it is importable and a GPU is present, "
           "else embedded), embedded or sglang", _backend, "auto", metavar="{auto,embedded,sglang}"),
    Option("arch", "pretend the GPUs are ARCH (e.g. sm_120) for dry runs: runs that family's suite "
           "with its known issues on whatever backend is available (on SGLang, on at most the GPUs "
           "the run was given)", _arch, None, metavar="ARCH"),
    Option("gpus", f"GPU inventory to schedule on, at most {MAX_GPUS} (default: detected; on a CPU "
           f"machine, a simulated inventory for scheduling tests)", _gpu_count, None, metavar="N"),
    Option("server_url", "use the server running at URL; launch nothing and never stop it",
           _url, None, metavar="URL"),
    Option("save_baseline", "write this run's results into the baseline file for this hardware "
           "(merged, atomically)", _bool, False, flag=True),
    Option("compare_fail", "fail a test whose metric regressed past a tolerance, e.g. "
           "output_tok_s:5%,accept_length:2%,ttft_ms:10% (METRIC:off ungates one, *:off all; "
           "names and * given here win over the ini's, which win over [tool.specdec.tolerances])", str, None,
           metavar="EXPR", layered=True),
    Option("strict_noise", "fail a test whose figure is worse than its tolerance but too noisy "
           "to call a regression (verdict noisy)", _bool, False, flag=True),
    Option("require_baseline", "fail a test whose gated figure has no baseline entry to compare "
           "with (a first run, a misspelt name in the baseline file, a baseline folder that is not "
           "there) instead of passing it as a new baseline; a run with --specdec-save-baseline "
           "saves them and does not fail", _bool, False, flag=True),
    Option("allow_shared", "record the figures of a workload during which another client used the "
           "server (a shared staging server) instead of failing its test: they are marked shared in "
           "the summary and the reports, never gated and never saved into the baseline", _bool, False,
           flag=True),
    Option("reference", "the method whose greedy outputs every speculative configuration must "
           "reproduce (the losslessness guard)", _reference, "ar", metavar="METHOD"),
    Option("lossless", "how much of each output must match the reference's: exact, prefix:N "
           "(the first N tokens; of a text without token ids, N as the server's tokenizer counts "
           "them, else only N characters, as the summary then says) or off (default: exact on the "
           "embedded engine, prefix:32 on SGLang and attached servers)", _exactness, None,
           metavar="MODE"),
    Option("lossless_margins", "have the reference's requests ask for their output tokens' top two "
           "logprobs, so that a divergence says whether the reference's choice there was a near-tie; "
           "off by default, as it perturbs the reference's own figures (SGLang then streams the "
           "logprobs of every token so far in each event)", _bool, False, flag=True),
    Option("baseline_dir", "folder of per-hardware baseline files and known_issues.toml",
           str, "baselines", metavar="DIR"),
    Option("report", "write results.json, report.md, report.tex, report-standalone.tex and plots "
           "into DIR",
           str, None, metavar="DIR"),
    Option("no_plots", "write the report of --specdec-report without its plots (a shard's, say, "
           "whose merge draws them): the rest of it without matplotlib's seconds", _bool, False, flag=True),
    Option("resume", "skip the tests the results journal records as done, measuring again those "
           "that failed and those whose workload, server settings or model changed", _bool, False,
           flag=True),
    Option("journal", "the results journal (JSONL) every run appends each measurement to as it "
           "finishes; --specdec-resume reads it, and a run without it starts a new one",
           str, ".specdec/journal.jsonl", metavar="PATH"),
    Option("run_known_issues", "run known-broken configurations instead of marking them xfail",
           _bool, False, flag=True),
    Option("startup_timeout", "seconds a server may take to become ready", _positive_float, 600.0,
           metavar="S"),
    Option("stall_timeout", "seconds a running workload may go without any request receiving a "
           "token before its server counts as stalled (probed, stopped, its configuration failed); "
           "a ready server's /health check waits no longer either (and at most 25)",
           _positive_float, 60.0, metavar="S"),
    Option("gpu_wait_timeout", "seconds a configuration may wait for free GPUs (its lease) while "
           "other configurations, or another run on this host, hold them, before its test fails",
           _positive_float, 3600.0, metavar="S"),
    Option("baseline_lock_timeout", "seconds a save of the baseline file (or durations.json) waits "
           "for its lock while another run holds it, before it fails saving nothing (the figures "
           "stay in the journal)", _positive_float, 120.0, metavar="S"),
    Option("warmup_requests", "untimed requests sent to a server before each workload is measured "
           "(its first prompts, at its concurrency and sampling), then its cache flushed; 0 sends none; "
           "a workload's own warmup_requests key wins (default: one round, min(concurrency, num_prompts))",
           _count, None, metavar="N"),
    Option("restart_on_crash", "restart a crashed server up to N times per configuration",
           _count, 0, metavar="N"),
    Option("tp", "run only the configurations of these tensor-parallel sizes (e.g. 8, or 1,4): "
           "one host class's part of the matrix; each size must be in a matrix's tp", _sizes, None, metavar="SIZES"),
    Option("shard", "run only shard K of N (1-based, e.g. 2/4) of the configuration matrix; "
           "every shard works out the same partition, balanced by the durations in the baseline "
           "folder's durations.json; with --specdec-report=DIR, DIR is a shard folder for "
           "python -m pytest_specdec merge", _shard, None, metavar="K/N"),
    Option("artifacts", "folder for server logs and per-run files", str, ".specdec/artifacts",
           metavar="DIR"),
    Option("gpu_claims", "folder of host-wide claims (one lock file per GPU, and per attached server) "
           "through which runs sharing a host (other checkouts, users, CI jobs) never put servers on one "
           "GPU at once, nor measure on one attached server at once; real GPUs only, or attached servers "
           "(default: pytest-specdec-gpu-claims in the temporary directory)",
           str, None, metavar="DIR"),
    Option("cpu_matrix", "also run the cpu matrix on a GPU host whose family has a matrix (by "
           "default only that family's runs)", _bool, False, flag=True),
    Option("keep_runs", "keep the journals and artifact folders of the last N runs; older ones "
           "are deleted", _positive_count, 10, metavar="N"),
    Option("summary_rows", "the most rows the terminal's specdec summary table shows: past N, the "
           "rows of tests that passed ok (or as a new baseline, or resumed) beyond N fold into one line "
           "saying where every row is (--specdec-report's report.md and results.json); a failed, "
           "regressed, improved, noisy, shared, not gated, skipped or xfailed test's row is always "
           "shown; 0 shows every row", _count, 50, metavar="N"),
)

OPTION_NAMES = frozenset(option.name for option in OPTIONS)
OPTIONS_BY_NAME = {option.name: option for option in OPTIONS}


@dataclass(frozen=True)
class Settings:
    """The effective option values, each with where it came from (for the report header)."""

    values: Mapping[str, Any]
    origins: Mapping[str, str]
    #: per option, the lower places that set it too (as the header names them: `said`) and their
    #: values, which the winner hides
    overridden: Mapping[str, tuple[tuple[str, Any], ...]] = field(default_factory=dict)
    #: per (option, place as `said` names it), a boolean as that place wrote it where it wrote text (yes, on, 1)
    spelled: Mapping[tuple[str, str], str] = field(default_factory=dict)
    #: the options whose ini value an `-o` gave: origin "ini" (pytest hands `-o` on as the ini's), but
    #: the command line to a reader of the header and of an error, which name that `-o` key (`said`)
    by_override: frozenset[str] = frozenset()

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None

    def shown(self, name: str, origin: str, value: Any) -> str:
        """`value` of option `name` set at `origin`, as the user wrote it there: a boolean as its
        ini file spells it, else as TOML does (true, never Python's True); a whole number of seconds
        without Python's `.0`."""
        if isinstance(value, bool):
            return self.spelled.get((name, origin), toml_shown(value))
        if isinstance(value, float):  # a timeout of 30 as written, not Python's 30.0; all its digits kept
            return f"{value:.15g}"
        return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)  # tp as its flag takes it

    def said(self, name: str, origin: str | None = None) -> str:
        """`origin` (default: where the option's value came from) as the header names it: an ini
        value that `-o` gave as that `-o` key, not as the ini file, whose own value it hides."""
        origin = self.origins[name] if origin is None else origin
        return ini_said(name, name in self.by_override) if origin == "ini" else origin

    def setter(self, name: str) -> str:
        """Where to change an option: where the user set it, else its command-line flag."""
        return OPTIONS_BY_NAME[name].cli if self.origins[name] == "default" else self.source(name)

    def source(self, name: str) -> str:
        """Where an option's value came from, as a user would write it (for error messages)."""
        return written_at(name, self.said(name))


def ini_said(name: str, by_override: bool) -> str:
    """Option `name`'s ini layer as the header names it: the `-o` key where `-o` gave its value
    (pytest hands that on as the ini file's, which it hides), else the ini file ("ini")."""
    return f"-o {OPTIONS_BY_NAME[name].ini}" if by_override else "ini"


def written_at(name: str, said: str) -> str:
    """Place `said` (as `Settings.said` names it) of option `name` as the user wrote it there, for
    error messages: its flag, `-o specdec_x`, `ini specdec_x` (an ini file), a config file's key."""
    option = OPTIONS_BY_NAME[name]
    if said.startswith("-o "):
        return said
    return {"command line": option.cli, "ini": f"ini {option.ini}", "default": "the default"}.get(
        said, f"{said} key {name!r}")


def toml_shown(value: Any) -> str:
    """A TOML value as an error quotes it: booleans as TOML spells them."""
    return str(value).lower() if isinstance(value, bool) else repr(value)


def not_text(key: str, value: Any, example: str, takes: str | None = None,
             accepts: Callable[[str], bool] | None = None) -> str:
    """Why `value` is no string, and how to write it as one: TOML reads an unquoted 3 as a number, so
    a number or boolean is shown quoted, a list of one string as that string, else the key's example.

    A key of a known set or form names what it `takes` instead where `accepts` refuses the value so
    written: `arch = 5` told `arch = "5"` would only be refused next as no architecture."""
    shown = repr(value) if isinstance(value, (list, dict)) else toml_shown(value) if isinstance(value, bool) \
        else str(value)  # a TOML date as written, not Python's datetime.date(...)
    kind = "a boolean" if isinstance(value, bool) else "a number" if isinstance(value, (int, float)) \
        else {list: "a list", dict: "a TOML table"}.get(type(value), f"a {type(value).__name__}")
    given = f"{shown} is {kind}, not a string"
    one = isinstance(value, list) and len(value) == 1 and isinstance(value[0], str)
    written = value[0] if one else toml_shown(value) if isinstance(value, (int, float)) else None
    if takes is not None and (written is None or accepts is None or not accepts(written)):
        return f"{given}; {key} takes {takes}, e.g. {key} = \"{example}\""
    if one:
        import json  # here: the plugin loads this module in every pytest run, and json nowhere else

        return f"{given}; give the one string, not a list: {key} = {json.dumps(value[0])}"
    if isinstance(value, (int, float)):
        return f"{given}; write it in quotes: {key} = \"{toml_shown(value)}\""
    return f"{given}; write one in quotes, e.g. {key} = \"{example}\""


def parse_value(option: Option, raw: Any, where: str) -> Any:
    """Validate one value; the error names where it was set, the bad value and what is allowed."""
    if raw is None:
        return None
    if isinstance(raw, bool) and option.parse is _bool:
        return raw  # a TOML boolean, or a store_true flag
    parse = option.parse
    # the fix is written under the key the user used (`-o` sets the ini key)
    key = option.ini if where.startswith(("ini ", "-o ")) else option.name
    if parse is _sizes and isinstance(raw, (int, list)) and not isinstance(raw, bool):
        parse = functools.partial(_toml_sizes, key=key)  # TOML [1, 4]
    numeric = option.parse in (_count, _gpu_count, _positive_count, _positive_float)
    number = numeric and isinstance(raw, (int, float)) and not isinstance(raw, bool)
    if number:
        raw = str(raw)  # a TOML number
    if not isinstance(raw, str) and parse is option.parse:  # only TOML gives other types
        shown = toml_shown(raw)
        example = _TEXT_EXAMPLES.get(option.name, option.default)
        if key == option.ini:
            problem = (f"{shown} must be a string: an ini value is written as on the command line, in quotes: "
                       f"{key} = \"{example}\"")
        elif _takes_text(option):
            takes, check = _TAKES.get(option.name, (None, None))
            problem = not_text(key, raw, example or "...", takes, check or functools.partial(accepts, option.parse))
        else:
            problem = f"{shown} must be {_toml_kind(option)}"
        raise SpecdecUsageError(f"{where}: {problem}; {option.cli} takes: {option.help}")
    if parse is str and not raw.strip():  # a path of "" is the project folder itself; "$UNSET" expands to it
        fix = (f"; give one, e.g. {option.name} = \"{_TEXT_EXAMPLES.get(option.name, option.default)}\", or "
               f"remove the key" if where.endswith(f"key {option.name!r}")
               else f" (an unset variable?); give {option.metavar}, or leave "
                    f"{option.ini if where.startswith('ini ') else where} out")  # the flag, or `-o specdec_x`
        raise SpecdecUsageError(f"{where}: {raw!r} is empty{fix}")
    try:
        return parse(raw)
    except ValueError as exc:
        problem = str(exc).replace(repr(raw), raw, 1) if number else str(exc)  # a number, not the text '0'
        raise SpecdecUsageError(f"{where}: {problem}; {option.cli} takes: {option.help}") from None


#: What a [tool.specdec] string key of a known set or form takes, for a value of another type whose
#: quoted form would be refused too (backend = 3 told backend = "3"), and what accepts a text where
#: the option's own parse does not check it.
_TAKES: dict[str, tuple[str, Callable[[str], bool] | None]] = {
    "backend": ("one of auto, embedded or sglang", None), "lossless": ("exact, prefix:N or off", None),
    "arch": ("a GPU architecture such as sm_90 or sm_120", None),
    "shard": ("K/N, shard K of N (1-based)", None), "server_url": ("an http(s) URL", None),
    "compare_fail": ("METRIC:TOLERANCE pairs", lambda text: ":" in text),
    "reference": ("a method without a tree budget, " + " or ".join(REFERENCE_METHODS), None)}


def accepts(parse: Callable[[str], Any], text: str) -> bool:
    """Whether `parse` takes `text`, as the fix for a TOML value of another type would write it."""
    try:
        parse(text)
    except (ValueError, SpecdecUsageError):
        return False
    return True


def _takes_text(option: Option) -> bool:
    """Whether a [tool.specdec] key of this option takes a TOML string (not a boolean, list or number)."""
    return option.parse not in (_bool, _sizes, _positive_float, _count, _gpu_count, _positive_count)


def _toml_kind(option: Option) -> str:
    """What a [tool.specdec] key takes, in TOML's words, with the key written so."""
    if option.parse is _bool:
        return f"true or false, e.g. {option.name} = true"
    if option.parse is _sizes:
        return f"a list of tensor-parallel sizes, e.g. {option.name} = [1, 4]"
    if option.parse is _positive_float:
        return f"a number of seconds, e.g. {option.name} = {option.default:g}"
    if option.parse in (_count, _gpu_count, _positive_count):
        return f"a whole number, e.g. {option.name} = {option.default or 1}"
    example = _TEXT_EXAMPLES.get(option.name, option.default)
    return f"a string, e.g. {option.name} = \"{example}\"" if example else "a string"


def read_ini(getini: Callable[[str], Any], text: Callable[[str], Any] | None = None,
             bool_text: Callable[[str], str | None] | None = None,
             by_override: Collection[str] = ()) -> dict[str, Any]:
    """Every option's ini value (None where unset), typed by pytest per `Option.ini_type`; a value
    pytest cannot convert is a SpecdecUsageError naming the key and what it takes.

    `by_override` names the options whose value an `-o` gave (`ini_file_under_overrides`' keys),
    whose errors name that `-o` key rather than an ini file the user may not even have.

    `text` gives a key's value as the user wrote it (`ini_text`): a number pytest read is kept in
    that form, so that an error echoes '0' rather than the 0.0 pytest made of it. `bool_text`
    (`ini_bool_text`) does so for a boolean, which the header then echoes as written.
    """
    values = {}
    for option in OPTIONS:
        try:
            values[option.name] = getini(option.ini)
        except Exception as exc:  # pytest.UsageError, raised by getini for a bad bool/int/float
            where = written_at(option.name, ini_said(option.name, option.name in by_override))
            raise SpecdecUsageError(f"{where}: {_ini_problem(option, exc)}; {option.cli} takes: "
                                    f"{option.help}") from None
        if values[option.name] == "" and (text is None or not isinstance(text(option.ini), str)):
            values[option.name] = None  # getini's "" for a string option nobody set
        if option.ini_type in ("int", "float") and values[option.name] is not None and text is not None:
            written = text(option.ini)
            if isinstance(written, str):  # a TOML number of [tool.pytest] has no text of its own
                values[option.name] = written.strip()
        if option.ini_type == "bool" and values[option.name] is not None and bool_text is not None:
            written = bool_text(option.ini)
            if written is not None and _spells(written, values[option.name]):
                values[option.name] = written
    return values


def _spells(text: str, value: bool) -> bool:
    """Whether `text` is a spelling `_bool` reads as `value` (pytest's y, t, n and f it does not)."""
    try:
        return _bool(text) is value
    except ValueError:
        return False


def ini_bool_text(config: Any, key: str) -> str | None:
    """Boolean ini `key` as written, where it is text (`-o`, an ini file): yes, on, 1, true. None
    for a TOML file, whose true pytest hands on as Python's 'True', which the user never wrote."""
    override = _override(config, key)
    if override is not None:
        return override.strip()
    if str(getattr(config, "inipath", None) or "").endswith(".toml"):
        return None
    written = ini_text(config, key)
    return written.strip() if isinstance(written, str) else None


def _override(config: Any, key: str) -> str | None:
    """The value of the last `-o key=value`, else None."""
    for override in reversed(getattr(config.option, "override_ini", None) or []):
        name, sep, value = override.partition("=")
        if sep and name.strip() == key:
            return value
    return None


def ini_file_under_overrides(config: Any) -> dict[str, Any]:
    """Per option whose ini key an `-o` sets, the config file's own value of that key, as written
    (None where the file sets none), for `resolve`: pytest hands plugins the `-o` value in its place,
    and pytest 9 keeps no other, so the file is read again with pytest's own reader."""
    given = {option.name: option.ini for option in OPTIONS if _override(config, option.ini) is not None}
    if not given:
        return {}
    written = _config_file_values(getattr(config, "inipath", None))
    return {name: written.get(key) for name, key in given.items()}


def _config_file_values(path: Any) -> dict[str, Any]:
    """The values of pytest's config file `path` as written; none where there is no file, or where
    pytest's reader is gone or now fails on it (read once already, it names less in the header)."""
    if not path:
        return {}
    from pathlib import Path

    try:
        from _pytest.config.findpaths import load_config_dict_from_file

        entries = load_config_dict_from_file(Path(path)) or {}
    except Exception:  # a pytest without this reader, or a file changed since pytest read it
        return {}
    toml = str(path).endswith(".toml")
    out = {}
    for key, entry in entries.items():
        value = getattr(entry, "value", entry)  # pytest 9 wraps each value; pytest 8 keeps it as written
        if isinstance(value, str):
            value = value.strip()
            if toml and value in ("True", "False"):  # TOML's true, which pytest's ini mode made Python's
                value = value.lower()
        out[key] = value
    return out


def ini_value(config: Any, key: str) -> Any:
    """`config.getini(key)`, save for a TOML list under [tool.pytest.ini_options] given to a
    string-typed option, which pytest 9 deprecates passing on: read from the file as it is, for
    `parse_value` to accept (tp) or refuse with its fix in ini form."""
    entries = getattr(config, "_inicfg", None)  # pytest 9; pytest 8 hands the list on unwarned
    entry = entries.get(key) if isinstance(entries, Mapping) else None
    listed = getattr(entry, "value", None)
    if isinstance(listed, list) and getattr(entry, "mode", None) == "ini" and _string_typed(key):
        return listed
    return config.getini(key)


def _string_typed(key: str) -> bool:
    return any(option.ini == key and option.ini_type == "string" for option in OPTIONS)


def ini_text(config: Any, key: str) -> Any:
    """The value of ini `key` as written: the last `-o key=value`, else the config file's (None
    where neither is found); the typed value pytest hands plugins has lost how it was spelled."""
    override = _override(config, key)
    if override is not None:
        return override
    entries = getattr(config, "_inicfg", None)
    if isinstance(entries, Mapping):  # pytest 9 keeps the file's values there and deprecates inicfg
        entry = entries.get(key)
        return getattr(entry, "value", None)
    entries = getattr(config, "inicfg", None)  # pytest 8: the file's values as written
    return entries.get(key) if isinstance(entries, Mapping) else None


# int()'s, float()'s and pytest's boolean words for a value they cannot read, as getini passes them on
_UNREADABLE_RE = re.compile(r"(?:invalid literal for int\(\) with base 10: |could not convert string to float: "
                            r"|invalid truth value )"
                            r"('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")")


# pytest's words for a TOML value of another type under [tool.pytest], whose options are typed strictly
_NOT_TEXT_RE = re.compile(r"expects a string, got (?:list|int|float|bool|dict)\b")

#: What a string-typed option's value looks like, for the fix of a TOML value that is not a string.
_TEXT_EXAMPLES = {"tp": "1,4", "compare_fail": "output_tok_s:5%,accept_length:0", "shard": "2/4",
                  "arch": "sm_120", "backend": "embedded", "server_url": "http://127.0.0.1:30000",
                  "lossless": "prefix:32", "report": "specdec-report", "gpu_claims": "/var/tmp/gpu-claims"}


def _ini_problem(option: Option, exc: Exception) -> str:
    """The option's own words for a value pytest could not convert (as the command line's), else pytest's."""
    match = _UNREADABLE_RE.search(str(exc))
    if match is not None:
        try:
            option.parse(ast.literal_eval(match.group(1)))
        except (ValueError, SyntaxError) as own:
            return str(own)
    if _NOT_TEXT_RE.search(str(exc)):  # e.g. specdec_tp = [1, 4], the form [tool.specdec] takes
        example = _TEXT_EXAMPLES.get(option.name, option.metavar or "...")
        return (f"{exc}; an ini value is written as on the command line, in quotes: "
                f"{option.ini} = \"{example}\"")
    return str(exc)


def resolve(cli: Mapping[str, Any], ini: Mapping[str, Any], toml: Mapping[str, Any],
            toml_name: str, ini_under_override: Mapping[str, Any] | None = None) -> Settings:
    """Merge the three sources per OPTIONS' precedence.

    Every source that sets an option is checked, not only the one that wins: a mistake in
    pyproject.toml under a flag's value would otherwise surface only in the run that drops the flag.

    `ini_under_override` (`ini_file_under_overrides`) names the options whose `ini` value an `-o`
    gave, each with the ini file's own value it replaced (None where the file sets none): shown,
    as written, among the values the winner hides; pytest never hands it on, so it is not checked.
    """
    under = ini_under_override or {}
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    overridden: dict[str, tuple[tuple[str, Any], ...]] = {}
    spelled: dict[tuple[str, str], str] = {}
    for option in OPTIONS:
        given_by = ini_said(option.name, option.name in under)  # the header's name for the ini layer
        layers = []  # (origin, value), highest precedence first
        cli_value = cli.get(option.name)
        if cli_value is not None and cli_value is not False:
            layers.append(("command line", parse_value(option, cli_value, option.cli)))
        if ini.get(option.name) is not None:  # "" too: -o specdec_report=$DIR with DIR unset
            layers.append(("ini", parse_value(option, ini[option.name], written_at(option.name, given_by))))
        hidden = [(given_by if origin == "ini" else origin, value) for origin, value in layers[1:]]
        if under.get(option.name) is not None:
            hidden.append(("ini", under[option.name]))
        if option.name in toml:
            layers.append((toml_name, parse_value(option, toml[option.name], written_at(option.name, toml_name))))
            hidden += [layers[-1]] if len(layers) > 1 else []
        origins[option.name], values[option.name] = layers[0] if layers else ("default", option.default)
        if hidden:
            overridden[option.name] = tuple(hidden)
        if option.parse is _bool:
            for origin, raw in ((given_by, ini.get(option.name)), (toml_name, toml.get(option.name))):
                if isinstance(raw, str) and raw.strip():  # ini text, or a TOML string ("yes")
                    spelled[(option.name, origin)] = raw.strip()
    return Settings(values, origins, overridden, spelled, frozenset(under))
