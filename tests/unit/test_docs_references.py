"""The docs' references hold at HEAD: every commit they cite (`abc1234`, `abc1234:path`) is in this
repository's history, with that path, and every command they show names a script, make target,
module, option and environment variable that exist, with the stages the script takes. A probe's
commit cited from a branch never merged, an option renamed in the code and not in the docs, a
script removed: each reads well and fails only the reader who runs it."""

from __future__ import annotations

import functools
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The docs a reader copies commands and `git show` arguments from (the README has tests of its own).
DOCS = sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "kernels").glob("README*"))
#: Where the project's code reads its environment variables (tests too: the kernel suite's shard);
#: not this file, whose made-up names would answer for themselves.
CODE = [path for path in (*ROOT.glob("pytest_specdec/**/*.py"), *ROOT.glob("kernels/*.py"),
                          *ROOT.glob("scripts/*"), *ROOT.glob("tests/**/*.py"), ROOT / "Makefile")
        if path != Path(__file__).resolve()]

#: A commit, alone or with a path of it: 7-40 hex digits, not inside a word, number or path.
CITED = re.compile(r"(?<![\w.,/-])([0-9a-f]{7,40})(?::([\w./{}-]*[\w/]))?(?![\w,-])")
#: A commit cited on purpose as absent says so right after it ("`e36da60`, not in this history").
ABSENT = re.compile(r"not in this (?:repository's )?history")
#: Hex words that are not commits: the engine's output fingerprints, named as such just before.
FINGERPRINT = "fingerprint"
#: Paths of the machine the docs were written on; `--specdec-report /tmp/out` is a flag's example.
FOREIGN = re.compile(r"(?<![\w.])(?:/work/|/home/|/root/|/opt/|/tmp/(?!out\b)|\.\./shared\b)")


@dataclass(frozen=True)
class Citation:
    doc: str
    line: int
    commit: str
    path: str | None

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.commit}{':' + self.path if self.path else ''}"


def citations(name: str, text: str) -> list[Citation]:
    """The commits `text` cites as present: not the ones it says are not in the history, nor
    fingerprints. A number of digits only is a commit where it is quoted or has a path."""
    found = []
    for m in CITED.finditer(text):
        commit, path = m.group(1), m.group(2)
        quoted = text[m.start() - 1:m.start()] == "`" or text[m.end():m.end() + 1] == "`"
        if commit.isdigit() and not (quoted or path):
            continue
        if not any(c.isdigit() for c in commit) or FINGERPRINT in text[max(0, m.start() - 40):m.start()].lower():
            continue
        if ABSENT.search(text[m.end():m.end() + 80].replace("\n", " ")):
            continue
        found.append(Citation(name, text.count("\n", 0, m.start()) + 1, commit, path and path.rstrip("/")))
    return found


def spans(text: str) -> list[str]:
    """The text of every code block's command (continuation lines joined) and every inline code
    span (which may wrap), as a reader would copy them."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)
    found = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.M | re.S)
    found += [span.replace("\n", " ") for span in re.findall(r"`([^`]+)`", prose)]
    return found


def module_sources(module: str) -> str | None:
    """The source a `python -m module` command reads its options from: the module (a package's
    __main__.py) and its package's modules it imports; None where the module does not exist."""
    parts = module.split(".")
    base = {"pytest_specdec": ROOT / "pytest_specdec", "specdec_kernels": ROOT / "kernels"}[parts[0]]
    path = base.joinpath(*parts[1:])
    main = path / "__main__.py" if path.is_dir() else path.with_suffix(".py")
    if not main.is_file():
        return None
    text = main.read_text(encoding="utf-8")
    siblings = re.findall(r"^from \.(\w+) import", text, re.M)
    siblings += [n for names in re.findall(r"^from \. import ([\w, ]+)", text, re.M) for n in names.split(", ")]
    return text + "".join((main.parent / f"{n}.py").read_text(encoding="utf-8")
                          for n in siblings if (main.parent / f"{n}.py").is_file())


@functools.cache
def project_code() -> str:
    return "\n".join(path.read_text(encoding="utf-8", errors="replace") for path in CODE if path.is_file())


def make_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M))


def script_stages(script: Path) -> set[str]:
    """The first arguments a script's `case $stage in` takes (its `name)` labels)."""
    return set(re.findall(r"^(\w+)\)", script.read_text(encoding="utf-8"), re.M))


def command_problems(name: str, text: str, cited: list[Citation]) -> list[str]:
    """What a command of `text` names that does not exist at HEAD. A script under a cited commit's
    path (`git show abc1234:scripts/probe/`, then `python3 scripts/probe/run.py`) is that commit's."""
    from pytest_specdec.options import OPTIONS

    problems = []
    flags = {option.cli for option in OPTIONS}
    targets = make_targets()
    historic = [c.path for c in cited if c.path]
    for flag in sorted(set(re.findall(r"--specdec-[\w-]*\w", text)) - flags):
        problems.append(f"{name}: {flag} is no option of the plugin")
    if FOREIGN.search(text):
        problems.append(f"{name}: names a path outside the project: {FOREIGN.search(text).group(0)!r}")
    for span in spans(text):
        for command in re.split(r"&&|;|\|\|?", span):
            for target in re.findall(r"(?:^|\s)make ([\w-]+)", command):
                if target not in targets:
                    problems.append(f"{name}: `make {target}`: no such Makefile target")
            script = re.search(r"(?:^|\s)(?:bash|python3?) (scripts/\S+)", command)
            if script and not (ROOT / script.group(1)).exists() and not any(
                    script.group(1).startswith(path) for path in historic):
                problems.append(f"{name}: `{command.strip()}`: {script.group(1)} is not in the repository")
            runs = ROOT / script.group(1) if script and (ROOT / script.group(1)).is_file() else None
            if runs and runs.suffix == ".py":
                source = runs.read_text(encoding="utf-8")
                for option in re.findall(r"\s(--[a-z][\w-]*)", command[script.end():]):
                    if f'"{option}"' not in source:
                        problems.append(f"{name}: `{command.strip()}`: {script.group(1)} takes no {option}")
            for variable in re.findall(r"(?:^|\s)([A-Z][A-Z0-9_]*)=", command):
                where = runs.read_text(encoding="utf-8") if runs else project_code()
                if not re.search(rf"\b{variable}\b", where):
                    problems.append(f"{name}: `{command.strip()}`: {variable} is read by "
                                    f"{'no line of ' + script.group(1) if runs else 'no code of the project'}")
            stage = re.search(r"scripts/h200_verify\.sh (\w+)", command)
            if stage and stage.group(1) not in script_stages(ROOT / "scripts/h200_verify.sh"):
                problems.append(f"{name}: `{command.strip()}`: h200_verify.sh has no stage {stage.group(1)}")
            run = re.search(r"(?:^|\s)python3? -m ((?:pytest_specdec|specdec_kernels)[\w.]*)(.*)", command)
            if not run:
                continue
            source = module_sources(run.group(1))
            if source is None:
                problems.append(f"{name}: `python -m {run.group(1)}`: no such module")
                continue
            own, _, forwarded = run.group(2).partition(" -- ")  # the bench forwards these to the engine
            for args, where in ((own, source), (forwarded, module_sources("pytest_specdec.engine"))):
                for option in re.findall(r"(?:^|\s)(--[a-z][\w-]*)", args):
                    if f'"{option}"' not in where:
                        problems.append(f"{name}: `python -m {run.group(1)}` takes no {option}")
    return problems


def doc_texts() -> list[tuple[str, str]]:
    return [(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")) for path in DOCS]


def history_unreadable() -> str | None:
    """Why this checkout's history cannot answer for cited commits, or None where it can."""
    try:
        done = subprocess.run(["git", "rev-parse", "--show-toplevel", "--is-shallow-repository"],
                              cwd=ROOT, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        return "git is not installed"
    lines = done.stdout.split()
    if done.returncode or not lines or Path(lines[0]).resolve() != ROOT:
        return "not a git checkout of the project (an sdist or an export): no history to read"
    if lines[-1] == "true":
        return "a shallow clone: cited commits may lie past its depth (git fetch --unshallow reads them)"
    return None


def missing(citations: list[Citation]) -> list[str]:
    """The citations whose commit, or path in it, this repository lacks (one git process)."""
    queries = [f"{c.commit}^{{commit}}" if c.path is None else f"{c.commit}:{c.path}" for c in citations]
    done = subprocess.run(["git", "cat-file", "--batch-check"], cwd=ROOT, input="\n".join(queries) + "\n",
                          capture_output=True, text=True, timeout=60, check=True)
    answers = done.stdout.splitlines()
    assert len(answers) == len(queries), done.stdout
    return [f"{c}: {answer.rsplit(' ', 1)[-1]} (git show {c.commit}{':' + c.path if c.path else ''})"
            for c, answer in zip(citations, answers) if answer.endswith((" missing", " ambiguous"))]


def test_every_cited_commit_and_path_is_in_the_history():
    reason = history_unreadable()
    if reason:
        pytest.skip(reason)
    cited = [c for name, text in doc_texts() for c in citations(name, text)]
    assert len(cited) > 100  # the docs cite that many: a pattern that finds none checks nothing
    assert missing(cited) == []


def test_every_command_names_what_exists_at_head():
    problems = []
    for name, text in doc_texts():
        problems += command_problems(name, text, citations(name, text))
    assert problems == []


def test_a_made_up_commit_or_a_path_not_in_it_is_found():
    reason = history_unreadable()
    if reason:
        pytest.skip(reason)
    text = ("at `0badc0ffee1`, (`06353f7:kernels/PERF.md`, `06353f7:kernels/NOT_THERE.md`), and 1234567 tokens; "
            "the same fingerprint, e5164a09cf1a; `e36da60`, a probe branch not in this history")
    cited = citations("doc.md", text)
    assert [str(c) for c in cited] == ["doc.md:1: 0badc0ffee1", "doc.md:1: 06353f7:kernels/PERF.md",
                                       "doc.md:1: 06353f7:kernels/NOT_THERE.md"]
    assert [m.split(":", 3)[2].strip() for m in missing(cited)] == ["0badc0ffee1", "06353f7"]


def test_a_missing_script_target_module_option_variable_or_stage_is_found():
    text = ("```\npython -m pytest_specdec.engine.bench --methods ar --request 2 \\\n    -- --devices cuda\n```\n"
            "Run `make bench`, `make benchmark`, `bash scripts/gone.sh`, `python -m specdec_kernels.gone`,\n"
            "`OUT=... SUITE_SHARD=1/2 SUITE_SHARDS=2 bash scripts/h200_verify.sh suites`,\n"
            "`NO_SUCH_VARIABLE=1 python3 -m\npytest tests/kernels` and `pytest --specdec-reports=x`; see\n"
            "/work/main/docs and ../shared/notes. `python3 scripts/probe/run.py` (`git show 06353f7:scripts/probe/`),\n"
            "`python scripts/gate_power.py --run 3`")
    problems = command_problems("doc.md", text, citations("doc.md", text))
    expected = ["--specdec-reports is no option", "outside the project: '/work/'", "`make benchmark`: no such",
                "scripts/gone.sh is not in the repository", "specdec_kernels.gone`: no such module",
                "SUITE_SHARDS is read by no line of scripts/h200_verify.sh", "has no stage suites",
                "NO_SUCH_VARIABLE is read by no code", "bench` takes no --request", "bench` takes no --devices",
                "gate_power.py takes no --run"]
    assert sorted(next(e for e in expected if e in p) for p in problems) == sorted(expected), problems
