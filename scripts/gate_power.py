"""Measure the regression gate's error rates on this machine: false reds and detected slowdowns.

    python scripts/gate_power.py --runs 10 [--slow-factor 1.5] [--compare-fail EXPR]

Runs the benchmark suite (tests/bench, the embedded engine) as CI would: to save a baseline
(as many saves as a baseline entry pools, so that it knows how much the figures move between
runs), then N times unchanged (every red run is a false red), then N times with the engine's
`--fault-slow-factor F` planted (every red run that names a regressed figure is a detection).
The gate in force is this repository's `[tool.specdec.tolerances]` unless `--compare-fail`
replaces it. Each run happens in a scratch project (a copy of the repository's `[tool.specdec]`
settings, with its own baseline folder, journal and artifacts), so nothing in the checkout
changes. Prints one table row per run, then `gate_power: false_red=A/N detected=B/N`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from pytest_specdec.baselines import POOLED_RUNS  # noqa: E402  (this checkout's, not an installed one)

SUITE = REPO / "tests" / "bench"


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {value!r} as TOML")


def toml_table(name: str, table: dict) -> list[str]:
    """`table` under `[name]`: plain keys first, then sub-tables and arrays of tables."""
    plain = {k: v for k, v in table.items()
             if not isinstance(v, dict) and not (isinstance(v, list) and v and isinstance(v[0], dict))}
    out = [f"[{name}]", *(f"{json.dumps(k)} = {toml_value(v)}" for k, v in plain.items()), ""]
    for key, value in table.items():
        if isinstance(value, dict):
            out += toml_table(f"{name}.{json.dumps(key)}", value)
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            for entry in value:
                out += [f"[[{name}.{json.dumps(key)}]]",
                        *(f"{json.dumps(k)} = {toml_value(v)}" for k, v in entry.items()), ""]
    return out


def scratch_project(root: Path, engine_args: list[str]) -> Path:
    """A project folder holding this repository's [tool.specdec] (plus `engine_args`)."""
    doc = tomllib.loads((REPO / "pyproject.toml").read_text())
    specdec = doc["tool"]["specdec"]
    specdec["backend"] = "embedded"
    engine = dict(specdec.get("engine", {}))
    engine["extra_args"] = list(engine.get("extra_args", [])) + engine_args
    specdec["engine"] = engine
    ini = {"timeout": doc["tool"].get("pytest", {}).get("ini_options", {}).get("timeout", 600)}
    root.mkdir(parents=True, exist_ok=True)
    text = toml_table("tool.pytest.ini_options", ini) + toml_table("tool.specdec", specdec)
    (root / "pyproject.toml").write_text("\n".join(text))
    return root


def run_suite(project: Path, junit: Path, *extra: str) -> tuple[int, float]:
    started = time.monotonic()
    argv = [sys.executable, "-m", "pytest", str(SUITE), "-c", str(project / "pyproject.toml"),
            "--rootdir", str(project), "-p", "no:cacheprovider", "-q", "--benchmark-disable",
            f"--junitxml={junit}", *extra]
    proc = subprocess.run(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    (junit.with_suffix(".log")).write_text(proc.stdout)
    return proc.returncode, time.monotonic() - started


def verdicts(junit: Path) -> tuple[list[str], Counter]:
    """(failure messages of gated figures, count of every figure's verdict) of one run."""
    messages, counts = [], Counter()
    for case in ET.parse(junit).getroot().iter("testcase"):
        for prop in case.iter("property"):
            # specdec.<figure>.verdict only: specdec.verdict is the test's, no figure's
            prefix, _, figure = prop.get("name", "").partition(".")
            if prefix == "specdec" and figure.endswith(".verdict") and figure != "verdict":
                counts[prop.get("value")] += 1
        for failure in list(case.iter("failure")) + list(case.iter("error")):
            # a regression's whole report: pytest (9.2 on) cuts the message attribute to 500 characters
            report = failure.text if "regression against" in (failure.text or "") else failure.get("message", "")
            messages.append(f"{case.get('name')}: {report}")
    return messages, counts


def regressed_figures(messages: list[str]) -> list[str]:
    """The figures a run's failures name as regressed (lines after 'regression against')."""
    names = []
    for message in messages:
        body = message.split("regression against", 1)
        if len(body) < 2:
            continue
        for line in body[1].splitlines()[1:]:
            if line.strip():
                names.append(line.split()[0])
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="unchanged runs and slowed runs (each)")
    parser.add_argument("--slow-factor", type=float, default=1.5,
                        help="the engine's --fault-slow-factor in the planted runs")
    parser.add_argument("--compare-fail", default=None,
                        help="tolerances instead of the repository's [tool.specdec.tolerances]")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="keep every run's junit XML, log and journal here (default: a temp dir)")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="gate-power-"))
    work.mkdir(parents=True, exist_ok=True)
    baselines = work / "baselines"
    gate = ["--specdec-baseline-dir", str(baselines)]
    if args.compare_fail:
        gate += ["--specdec-compare-fail", args.compare_fail]
    unchanged = scratch_project(work / "unchanged", [])
    slowed = scratch_project(work / "slowed", ["--fault-slow-factor", str(args.slow_factor)])
    started = time.monotonic()

    print(f"gate_power: {args.runs} unchanged and {args.runs} runs at --fault-slow-factor "
          f"{args.slow_factor:g}; work in {work}; load average {os.getloadavg()[0]:.1f}", flush=True)
    for save in range(1, POOLED_RUNS + 1):
        code, seconds = run_suite(unchanged, work / f"save-{save}.xml", "--specdec-save-baseline",
                                  "--specdec-baseline-dir", str(baselines))
        if code != 0:
            print(f"gate_power: saving the baseline failed (exit {code}); see {work / f'save-{save}.log'}")
            return 2
        print(f"save {save}/{POOLED_RUNS} in {seconds:.0f} s: {baselines / 'cpu.json'}", flush=True)
    print(f"{'run':>4}  {'planted':>7}  {'exit':>4}  {'red':>3}  {'noisy':>5}  {'load':>4}  "
          f"{'secs':>4}  figures named")
    false_red = detected = 0
    for planted, project in ((False, unchanged), (True, slowed)):
        for index in range(1, args.runs + 1):
            junit = work / f"{'slow' if planted else 'same'}-{index:02d}.xml"
            load = os.getloadavg()[0]
            code, seconds = run_suite(project, junit, *gate)
            messages, counts = verdicts(junit)
            named = regressed_figures(messages)
            red = code != 0
            if planted:
                detected += red and bool(named)
            else:
                false_red += red
            shown = ", ".join(f"{n} x{c}" for n, c in sorted(Counter(named).items())) or \
                ("; ".join(m[:80] for m in messages[:2]) if red else "-")
            print(f"{index:>4}  {'slow' if planted else 'none':>7}  {code:>4}  {len(messages):>3}  "
                  f"{counts.get('noisy', 0):>5}  {load:>4.1f}  {seconds:>4.0f}  {shown}", flush=True)
    minutes = (time.monotonic() - started) / 60
    print(f"took {minutes:.0f} min; load average now {os.getloadavg()[0]:.1f}")
    print(f"gate_power: false_red={false_red}/{args.runs} detected={detected}/{args.runs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
