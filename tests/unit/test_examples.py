"""The shipped examples are safe to copy as they are."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")  # huggingface_hub (the `models` extra) brings PyYAML

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WORKFLOWS = [EXAMPLES / "github-actions-gpu.yml", EXAMPLES / "github-actions-sharded.yml"]
SLURM = EXAMPLES / "slurm-sharded.sh"
OUT_DEFAULT = "specdec-shards"  # the Slurm example's $OUT
#: Where commands are written for users to copy: every file of examples/, the README, docs/, the Makefile.
COMMAND_FILES = sorted(EXAMPLES.iterdir()) + [EXAMPLES.parent / "README.md", EXAMPLES.parent / "Makefile",
                                             *sorted((EXAMPLES.parent / "docs").glob("*.md"))]
#: The README's and the architecture notes' example of the form not to use, named as such.
SPACED_ON_PURPOSE = ("not `--specdec-report /tmp/out`", "(`--specdec-report /tmp/out`) whose")


#: Words that follow a flag named in prose ("raise --specdec-startup-timeout if it is slow"): no value.
PROSE = frozenset({"if", "and", "or", "to", "is", "in", "at", "of", "the", "with", "takes", "folder", "file"})


def spaced_flags(text: str) -> list[str]:
    """Each value-taking specdec flag followed by a space and a value (a word, a metavar, a quoted
    or expanded value, a line continuation) rather than joined to it with '='."""
    from pytest_specdec.early_args import VALUE_FLAGS

    flags = "|".join(sorted(map(re.escape, VALUE_FLAGS), key=len, reverse=True))
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if any(mark in line for mark in SPACED_ON_PURPOSE):
            continue
        found += [f"{number}: {m.group(0)}" for m in re.finditer(rf"(?:{flags})[ \t]+(\S+)", line)
                  if m.group(1).rstrip(";,.:)") not in PROSE]
    return found


@pytest.mark.parametrize("path", COMMAND_FILES, ids=lambda p: p.name)
def test_every_command_joins_a_specdec_flag_to_its_value(path):
    """`--specdec-report $OUT/shard-K` with a space: pytest reads the value as a test path before
    it loads the plugin and, for a folder outside the project, settles on another rootdir without
    the project's configuration. Every command users copy joins the value with '='."""
    assert spaced_flags(path.read_text()) == []


def test_the_spaced_flag_check_sees_each_spelling():
    text = ('--wrap="pytest --specdec-shard \\$SLURM_ARRAY_TASK_ID/$SHARDS \\\n'
            '--specdec-report $OUT/shard-K --specdec-compare-fail $GATE"\n'
            '  --specdec-report "shard-${{ matrix.shard }}" \\\n'
            '| `--specdec-report DIR` | `--specdec-arch sm_120` `--specdec-tp 1,4` --specdec-report out\n'
            '--specdec-backend embedded --specdec-report \\\n'
            'raise --specdec-startup-timeout if it is slow; the same --specdec-report folder; '
            '`--specdec-report=DIR`')
    assert len(spaced_flags(text)) == 10, spaced_flags(text)


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_the_gpu_workflows_never_run_a_fork_pull_request_on_a_self_hosted_runner(path):
    """A fork's pull request would run its own conftest.py on the GPU runner: the examples are
    triggered by pushes to the repository and by hand only, and say why."""
    workflow = yaml.safe_load(path.read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert set(triggers) == {"push", "workflow_dispatch"}
    assert any("self-hosted" in job["runs-on"] for job in workflow["jobs"].values())
    assert workflow["permissions"] == {"contents": "read"}
    assert "a fork's pull request would run its own" in path.read_text()


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_upload_of_a_hidden_folder_includes_hidden_files(path):
    """upload-artifact (v4.4 on) leaves out files and folders whose name starts with a dot unless
    told otherwise, with a warning only: the GPU workflow's `.specdec/` (its server logs, the
    first thing to read after a crash) was never uploaded."""
    workflow = yaml.safe_load(path.read_text())
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            if "upload-artifact" not in step.get("uses", ""):
                continue
            paths = step["with"]["path"].split()
            if any(part.startswith(".") for p in paths for part in Path(p).parts):
                assert step["with"].get("include-hidden-files") is True, (step["name"], paths)


@pytest.mark.parametrize("path", [*WORKFLOWS, SLURM], ids=lambda p: p.name)
def test_every_gpu_benchmark_command_names_its_backend_and_its_venv_sees_sglang(path):
    """The examples made a fresh venv, which cannot see an SGLang installed on the runner, and
    left the backend at `auto`: the run fell back to the embedded engine and gated its figures
    as the Blackwell suite's. Each benchmark command (comments too) names sglang, so a missing
    SGLang stops the run, and each venv sees the runner's packages."""
    text = path.read_text().replace("\\\n", " ")  # continuation lines joined
    commands = [line for line in text.splitlines() if re.search(r"\bpytest\s+tests/", line)]
    assert commands
    for command in commands:
        assert re.search(r"--specdec-backend=(sglang|\$BACKEND)\b", command), command
    assert re.search(r"^BACKEND=\$\{BACKEND:-sglang\}$", text, re.M) or "$BACKEND" not in text
    for line in text.splitlines():
        if "-m venv" in line and not line.lstrip().startswith("#"):
            assert "--system-site-packages" in line, line


def test_the_sharded_workflow_runs_every_shard_then_merges_whatever_happened(tmp_path):
    from pytest_specdec.__main__ import _parser

    workflow = yaml.safe_load((EXAMPLES / "github-actions-sharded.yml").read_text())
    shard, merge = workflow["jobs"]["shard"], workflow["jobs"]["merge"]
    shards = shard["strategy"]["matrix"]["shard"]
    assert shards == list(range(1, workflow["env"]["SHARDS"] + 1))
    assert shard["strategy"]["fail-fast"] is False
    command = next(s["run"] for s in shard["steps"] if "--specdec-shard" in s.get("run", ""))
    assert '--specdec-shard="${{ matrix.shard }}/$SHARDS"' in command
    assert '--specdec-report="shard-${{ matrix.shard }}"' in command
    upload = next(s for s in shard["steps"] if "upload-artifact" in s.get("uses", ""))
    assert upload["if"] == "always()" and "shard-${{ matrix.shard }}/" in upload["with"]["path"]
    assert merge["needs"] == "shard" and merge["if"] == "always()"
    assert "self-hosted" not in merge["runs-on"]
    download = next(s for s in merge["steps"] if "download-artifact" in s.get("uses", ""))
    # download-artifact puts each artifact in <path>/<name>/, holding the uploaded shard-N/
    for k in shards:
        (tmp_path / download["with"]["path"] / f"specdec-shard-{k}" / f"shard-{k}").mkdir(parents=True)
    run = next(s["run"] for s in merge["steps"] if "pytest_specdec merge" in s.get("run", ""))
    expanded = subprocess.run(["bash", "-c", f"echo {run.split(' merge ', 1)[1]}"],
                              cwd=tmp_path, capture_output=True, text=True).stdout.split()
    args = _parser().parse_args(["merge", *expanded])
    assert args.out == "specdec-merged" and len(args.shard_dirs) == len(shards)


def test_the_slurm_script_parses_and_submits_an_array_and_a_merge_after_it(tmp_path):
    """With a stand-in `sbatch` that records its arguments: one array of SHARDS tasks, then a
    merge job that waits for all of them (afterany: also after a failed shard)."""
    assert subprocess.run(["bash", "-n", str(SLURM)]).returncode == 0
    calls = submit_slurm(tmp_path, shards=3)
    assert len(calls) == 2
    array, merge = calls
    assert "--array=1-3" in array and "--dependency=afterany:1001" in merge
    wrap = shlex.split(next(a for a in array if a.startswith("--wrap=")).removeprefix("--wrap="))
    assert wrap[1:4] == ["-m", "pytest", "tests/bench"]
    assert "--specdec-shard=$SLURM_ARRAY_TASK_ID/3" in wrap
    assert f"--specdec-report={OUT_DEFAULT}/shard-$SLURM_ARRAY_TASK_ID" in wrap
    assert "--specdec-backend=sglang" in wrap


def submit_slurm(root: Path, shards: int, out: Path | None = None, backend: str | None = None) -> list[list[str]]:
    """Run the Slurm example in `root` with a stand-in sbatch (and `out` as its $OUT, `backend`
    as its $BACKEND); the arguments of each call."""
    bin_dir = root / "bin"
    bin_dir.mkdir()
    log = root / "sbatch.jsonl"
    (bin_dir / "sbatch").write_text(
        "#!/usr/bin/env python3\nimport json, sys\n"
        f"log = open({str(log)!r}, 'a')\n"
        "log.write(json.dumps(sys.argv[1:]) + '\\n')\nlog.close()\n"
        "print(1000 + sum(1 for _ in open(log.name)))\n")
    (bin_dir / "sbatch").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SHARDS": str(shards),
           "PYTHON": sys.executable, **({"OUT": str(out)} if out is not None else {}),
           **({"BACKEND": backend} if backend is not None else {})}
    done = subprocess.run(["bash", str(SLURM)], cwd=root, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "merge: job 1002, after all of them" in done.stdout
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_the_slurm_jobs_run_as_written(tmp_path):
    """The array's tasks and the merge job, run here as Slurm would run them (their --wrap
    commands through sh, each task with its SLURM_ARRAY_TASK_ID), on a small embedded project
    inside a repository with a pytest configuration of its own, and $OUT beside the project,
    where a shard's folder is there already (a task run again): a value given after a space
    would be a test path to pytest, which would settle on the repository's configuration and
    never read the project's."""
    pytest.importorskip("torch")
    root, out = tmp_path / "project", tmp_path / "shared" / "specdec-shards"
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (out / "shard-1").mkdir(parents=True)
    (root / "tests" / "bench").mkdir(parents=True)
    (root / "tests" / "bench" / "test_generation.py").write_text(
        (EXAMPLES.parent / "tests" / "bench" / "test_generation.py").read_text())
    (root / "pyproject.toml").write_text("""
[tool.pytest.ini_options]

[tool.specdec]
backend = "embedded"
startup_timeout = 60

[tool.specdec.matrix.cpu]
methods = ["ar", "ddtree"]
tp = [1]
budget = [8]

[[tool.specdec.workloads]]
name = "chat"
num_prompts = 2
max_new_tokens = 8
""")
    array, merge = (next(a for a in call if a.startswith("--wrap=")).removeprefix("--wrap=")
                    for call in submit_slurm(root, shards=2, out=out, backend="embedded"))
    for task in (1, 2):
        shard = subprocess.run(["sh", "-c", array], cwd=root, text=True,
                               env={**os.environ, "SLURM_ARRAY_TASK_ID": str(task)},
                               capture_output=True, timeout=300)
        assert shard.returncode == 0, shard.stdout[-2000:] + shard.stderr[-2000:]
    merged = subprocess.run(["sh", "-c", merge], cwd=root, text=True,
                            capture_output=True, timeout=120)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    rows = json.loads((root / "specdec-merged" / "results.json").read_text())["results"]
    assert sorted(r["config"] for r in rows) == ["ar-tp1", "ddtree-tp1-b8"]
    # the merge's report is a run's: Markdown, LaTeX (to \input and standalone), plots, JUnit
    folder = root / "specdec-merged"
    for name, row in (("report.md", "ddtree-tp1-b8"), ("junit.xml", "ddtree-tp1-b8"),
                      ("report.tex", "ddtree & 1 & 8 &"), ("report-standalone.tex", "ddtree & 1 & 8 &")):
        assert row in (folder / name).read_text(), name
    assert {p.name for p in (folder / "plots").iterdir()} >= {"tokens_per_s.png", "tokens_per_s.pdf",
                                                              "accept_length.png", "accept_length.pdf"}
