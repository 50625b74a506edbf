#!/usr/bin/env python3
"""Two TP1 configurations of the embedded engine on two GPUs: in parallel, then one after the other.

    OUT=/some/dir python3 scripts/multi_gpu_demo.py        # from the repository root

Needs a host with at least two NVIDIA GPUs, a CUDA build of torch, pytest-xdist, and
pytest-specdec installed (`python3 -m pip install --no-deps --no-build-isolation -e .`; done here
when the import fails). A throwaway project runs the shipped `test_generation` plus a device
check for `ddtree` budgets 8 and 16 at Llama-3-8B layer shapes (`model_preset = "8b-layer"`,
`device = "cuda"`):

1. warm-up, serial, small workload, untimed: fills Triton's kernel cache, so neither timed run
   pays for compiles the other does not;
2. parallel: `pytest -n 2 --dist loadgroup`;
3. serial: `pytest -p no:xdist`.

Checks, for both timed runs: every test passed; each server's /server_info reports exactly its
leased GPU in CUDA_VISIBLE_DEVICES, torch in the engine counts one device, and that device's UUID
is the one nvidia-smi gives for the leased index; the lease history shows no GPU held twice; in
the parallel run both leases were held at one moment; nvidia-smi, sampled every half second,
shows each engine process on one GPU only (where nvidia-smi can see this container's pids).
Prints both wall times; writes OUT/multi_gpu_demo.log, OUT/summary.json and the evidence (pytest
outputs, lease histories, nvidia-smi samples, engine logs). Exit status 0 only when every check
passed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = Path(os.environ.get("OUT") or REPO / "multi-gpu-demo-out").resolve()
PY = sys.executable
BUDGETS = (8, 16)
RUN_TIMEOUT_S = 420

LOG = None  # the open log file


def log(text: str = "") -> None:
    print(text, flush=True)
    LOG.write(text + "\n")
    LOG.flush()


def sh(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, **kwargs)


# -- the throwaway project ------------------------------------------------------------------------

DEVICES_TEST = '''
"""Each server sees only its leased GPU: CUDA_VISIBLE_DEVICES, torch's device count and UUID."""
import json, os, subprocess

from pytest_specdec.servers.direct import urlopen  # the server directly, never through a proxy


def _uuids():
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
                         capture_output=True, text=True, check=True).stdout
    return {int(i): u.strip() for i, u in (line.split(",") for line in out.strip().splitlines())}


def _norm(uuid):
    uuid = uuid.strip().lower()
    return uuid[4:] if uuid.startswith("gpu-") else uuid


def test_devices(specdec_server, specdec_spec, pytestconfig):
    with urlopen(specdec_server.url + "/server_info", timeout=60) as resp:
        info = json.load(resp)
    visible = info.get("cuda_visible_devices")
    expected = [_norm(_uuids()[int(v)]) for v in (visible or "").split(",") if v]
    seen = [_norm(u) for u in info.get("cuda_device_uuids") or [] if u]
    record = {"spec": specdec_server.spec.id, "worker_pid": os.getpid(), "visible": visible,
              "cuda_device_count": info.get("cuda_device_count"), "engine_uuids": seen,
              "leased_uuids": expected,
              "uuid_check": "unavailable" if not seen else ("match" if seen == expected else "MISMATCH")}
    fd = os.open(pytestconfig.rootpath / "seen.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, (json.dumps(record) + "\\n").encode())
    os.close(fd)
    assert visible is not None and len(visible.split(",")) == specdec_spec.tp, record
    assert info.get("cuda_device_count") == specdec_spec.tp, record
    assert record["uuid_check"] != "MISMATCH", record
'''


def write_project(root: Path, family: str, *, num_prompts: int, max_new_tokens: int,
                  concurrency: int) -> None:
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text(f"""
[tool.specdec]
backend = "embedded"
startup_timeout = 300

[tool.specdec.matrix.{family}]
methods = ["ddtree"]
tp = [1]
budget = [{", ".join(str(b) for b in BUDGETS)}]

[[tool.specdec.workloads]]
name = "chat"
prompts = "chat"
num_prompts = {num_prompts}
max_new_tokens = {max_new_tokens}
concurrency = {concurrency}

[tool.specdec.engine]
model_preset = "8b-layer"
device = "cuda"
""")
    shutil.copy(REPO / "tests" / "bench" / "test_generation.py", root / "test_generation.py")
    (root / "test_devices.py").write_text(DEVICES_TEST)


# -- nvidia-smi sampling --------------------------------------------------------------------------


class Sampler(threading.Thread):
    """Every `period` s: memory used per GPU, and which pids hold memory on which GPU."""

    def __init__(self, period: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.period = period
        self.samples: list[dict] = []
        self.cmdlines: dict[int, str] = {}
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            t = time.time()
            gpus = sh(["nvidia-smi", "--query-gpu=index,uuid,memory.used",
                       "--format=csv,noheader,nounits"]).stdout
            apps = sh(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory",
                       "--format=csv,noheader,nounits"]).stdout
            sample = {"time": t, "gpus": [], "apps": []}
            for line in gpus.strip().splitlines():
                index, uuid, used = (f.strip() for f in line.split(","))
                sample["gpus"].append({"index": int(index), "uuid": uuid, "mib": float(used)})
            for line in apps.strip().splitlines():
                fields = [f.strip() for f in line.split(",")]
                if len(fields) < 3 or not fields[0].isdigit():
                    continue
                pid = int(fields[0])
                sample["apps"].append({"pid": pid, "uuid": fields[1], "mib": fields[2]})
                if pid not in self.cmdlines:
                    try:
                        self.cmdlines[pid] = Path(f"/proc/{pid}/cmdline").read_bytes() \
                            .replace(b"\0", b" ").decode(errors="replace")
                    except OSError:
                        self.cmdlines[pid] = ""  # not in this pid namespace
            self.samples.append(sample)
            self._halt.wait(self.period)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)


# -- one timed run --------------------------------------------------------------------------------


def run_pytest(name: str, root: Path, args: list[str]) -> dict:
    argv = [PY, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args]
    log(f"\n=== {name}: {' '.join(argv[1:])}  (in {root})")
    sampler = Sampler()
    sampler.start()
    started = time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                              env=dict(os.environ, PYTHONUNBUFFERED="1"))
        rc, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out = 124, f"{exc.stdout or ''}{exc.stderr or ''}\n(timed out after {RUN_TIMEOUT_S} s)"
    wall = time.monotonic() - started
    sampler.stop()
    (OUT / f"{name}.txt").write_text(out)
    tail = [line for line in out.splitlines() if line.startswith(("specdec [", "PASSED", "FAILED",
                                                                  "ERROR", "SKIPPED", "==="))]
    for line in tail[-14:]:
        log(f"  {line}")
    for line in [x for x in out.splitlines() if x.startswith("E ")][:12]:
        log(f"  {line}")
    log(f"  exit {rc}, wall {wall:.1f} s")
    return {"name": name, "root": root, "rc": rc, "wall_s": wall, "output": out,
            "samples": sampler.samples, "cmdlines": sampler.cmdlines}


def lease_history(root: Path) -> list[dict]:
    files = sorted(root.glob(".specdec/artifacts/run-*/leases/lease-history.jsonl"))
    if len(files) != 1:
        return []
    return [json.loads(line) for line in files[0].read_text().splitlines() if line.strip()]


def check_run(run: dict, *, parallel: bool) -> list[tuple[str, bool, str]]:
    """(check, passed, detail) for one timed run."""
    root, checks = run["root"], []
    checks.append(("all tests passed", run["rc"] == 0 and " 4 passed" in run["output"],
                   f"exit {run['rc']}"))

    seen_path = root / "seen.jsonl"
    seen = [json.loads(x) for x in seen_path.read_text().splitlines()] if seen_path.exists() else []
    isolated = len(seen) == len(BUDGETS) and all(
        r["visible"] is not None and len(r["visible"].split(",")) == 1
        and r["cuda_device_count"] == 1 and r["uuid_check"] != "MISMATCH" for r in seen)
    checks.append(("each server saw exactly one GPU, its leased one", isolated,
                   "; ".join(f"{r['spec']}: CUDA_VISIBLE_DEVICES={r['visible']} device_count="
                             f"{r['cuda_device_count']} uuid {r['uuid_check']}" for r in seen)))

    history = lease_history(root)
    held: dict[int, str] = {}
    leases: dict[str, dict] = {}
    peak, double = 0, []
    for event in history:
        if event["event"] == "acquire":
            double += [f"GPU {g}: {event['owner']} while {held[g]}" for g in event["gpus"] if g in held]
            held.update({g: event["owner"] for g in event["gpus"]})
            leases[event["lease"]] = event
            peak = max(peak, len(leases))
        else:
            for g in leases.pop(event["lease"], {"gpus": []})["gpus"]:
                held.pop(g, None)
    acquired = {e["owner"]: e["gpus"] for e in history if e["event"] == "acquire"}
    checks.append(("no GPU leased twice at once", bool(history) and not double,
                   "; ".join(double) or f"leases: {acquired}"))
    if parallel:
        checks.append(("both configurations held GPUs at the same time", peak >= 2,
                       f"most leases held at once: {peak}"))

    engines: dict[int, set[str]] = {}
    for sample in run["samples"]:
        for app in sample["apps"]:
            if "pytest_specdec.engine" in run["cmdlines"].get(app["pid"], ""):
                engines.setdefault(app["pid"], set()).add(app["uuid"])
    if engines:
        checks.append(("nvidia-smi: each engine process on one GPU only",
                       all(len(u) == 1 for u in engines.values()),
                       "; ".join(f"pid {p}: {sorted(u)}" for p, u in engines.items())))
        if parallel:
            both = any(len({a["uuid"] for a in s["apps"]
                            if "pytest_specdec.engine" in run["cmdlines"].get(a["pid"], "")}) >= 2
                       for s in run["samples"])
            checks.append(("nvidia-smi: engines on both GPUs at one moment", both, ""))
    else:
        log("  (nvidia-smi lists no engine pid of this container: per-process check skipped)")

    if run["samples"]:
        first = {g["index"]: g["mib"] for g in run["samples"][0]["gpus"]}
        peak_mib = {i: max(g["mib"] for s in run["samples"] for g in s["gpus"] if g["index"] == i)
                    for i in first}
        log("  GPU memory used, MiB (start -> peak): "
            + ", ".join(f"GPU {i}: {first[i]:.0f} -> {peak_mib[i]:.0f}" for i in sorted(first)))
    return checks


def metrics(root: Path) -> dict[str, dict]:
    path = root / ".specdec" / "journal.jsonl"
    out = {}
    if path.exists():
        for line in path.read_text().splitlines():
            record = json.loads(line)
            m = record["data"].get("metrics")
            if m is None:  # a 'done' mark: the figures are on the record it confirms
                continue
            out[record["data"].get("config", record["config_id"])] = {
                k: round(m[k]["value"], 3) for k in ("output_tok_s", "accept_length", "ttft_ms")
                if k in m}
    return out


def keep_evidence(run: dict) -> None:
    name, root = run["name"], run["root"]
    history = sorted(root.glob(".specdec/artifacts/run-*/leases/lease-history.jsonl"))
    if history:
        shutil.copy(history[0], OUT / f"{name}-lease-history.jsonl")
    for path in (root / "seen.jsonl", root / ".specdec" / "journal.jsonl"):
        if path.exists():
            shutil.copy(path, OUT / f"{name}-{path.name}")
    logs = OUT / f"{name}-engine-logs"
    logs.mkdir(exist_ok=True)
    for path in root.glob(".specdec/artifacts/run-*/logs/*.log"):
        text = path.read_text(errors="replace")
        (logs / path.name).write_text(text[-20000:])  # the tail says how it ended
    with open(OUT / f"{name}-nvidia-smi.jsonl", "w") as fh:
        for sample in run["samples"]:
            fh.write(json.dumps(sample) + "\n")


# -- main -----------------------------------------------------------------------------------------


def main() -> int:
    global LOG
    if {"-h", "--help"} & set(sys.argv[1:]):
        print(__doc__.strip())
        return 0
    if shutil.which("nvidia-smi") is None:  # checked before OUT is made: nothing left behind
        print("this demo needs a host with at least two NVIDIA GPUs: nvidia-smi is not on PATH",
              file=sys.stderr)
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    LOG = open(OUT / "multi_gpu_demo.log", "w")
    log(f"multi-GPU demo, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; log and evidence in {OUT}")

    if sh([PY, "-c", "import pytest_specdec"]).returncode != 0:
        log("installing pytest-specdec (editable, no dependencies)")
        done = sh([PY, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e",
                   str(REPO)])
        if done.returncode != 0:
            log(done.stdout + done.stderr)
            return 2
    versions = sh([PY, "-c", "import torch, pytest, xdist, sys; print(sys.version.split()[0], "
                   "'torch', torch.__version__, 'cuda', torch.version.cuda, 'available', "
                   "torch.cuda.is_available(), 'pytest', pytest.__version__, 'xdist', "
                   "xdist.__version__)"])
    log(f"python {versions.stdout.strip() or versions.stderr.strip()}")
    for argv in (["nvidia-smi", "-L"], ["nvidia-smi", "topo", "-m"],
                 ["nvidia-smi", "--query-gpu=index,name,driver_version,memory.used,memory.total",
                  "--format=csv"]):
        log(f"$ {' '.join(argv)}\n{sh(argv).stdout.rstrip()}")

    sys.path.insert(0, str(REPO))
    from pytest_specdec import hardware

    hw = hardware.detect()
    log(f"inventory: {hw.describe()} (family {hw.family})")
    if hw.count < 2 or hw.family not in hardware.GPU_FAMILIES:
        log("this demo needs at least two NVIDIA GPUs of a known family")
        return 2

    work = Path(tempfile.mkdtemp(prefix="specdec-multi-gpu-"))
    write_project(work / "warmup", hw.family, num_prompts=1, max_new_tokens=16, concurrency=1)
    for name in ("parallel", "serial"):
        write_project(work / name, hw.family, num_prompts=32, max_new_tokens=256, concurrency=4)

    warm = run_pytest("warmup", work / "warmup", ["-p", "no:xdist"])
    keep_evidence(warm)
    runs = [run_pytest("parallel", work / "parallel", ["-n", "2", "--dist", "loadgroup"]),
            run_pytest("serial", work / "serial", ["-p", "no:xdist"])]

    summary = {"inventory": hw.describe(), "runs": {}}
    ok = warm["rc"] == 0
    if not ok:
        log("warm-up run failed; see warmup.txt")
    for run in runs:
        keep_evidence(run)
        log(f"\n--- checks: {run['name']}")
        checks = check_run(run, parallel=run["name"] == "parallel")
        for check, passed, detail in checks:
            log(f"  [{'ok' if passed else 'FAIL'}] {check}" + (f": {detail}" if detail else ""))
            ok &= passed
        summary["runs"][run["name"]] = {
            "wall_s": round(run["wall_s"], 1), "exit": run["rc"],
            "metrics": metrics(run["root"]),
            "checks": [{"check": c, "passed": p, "detail": d} for c, p, d in checks]}

    parallel, serial = runs[0]["wall_s"], runs[1]["wall_s"]
    log("\n=== wall times (pytest start to exit, servers' start-up included)")
    log(f"  parallel  (-n 2 --dist loadgroup): {parallel:6.1f} s")
    log(f"  serial    (-p no:xdist)          : {serial:6.1f} s")
    log(f"  serial / parallel                : {serial / parallel:6.2f}x")
    for name in ("parallel", "serial"):
        for config, values in summary["runs"][name]["metrics"].items():
            log(f"  {name:8s} {config}: {values}")
    summary.update(parallel_wall_s=round(parallel, 1), serial_wall_s=round(serial, 1),
                   speedup=round(serial / parallel, 2), all_checks_passed=ok,
                   command="OUT=<dir> python3 scripts/multi_gpu_demo.py")
    (OUT / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    log(f"\n{'ALL CHECKS PASSED' if ok else 'SOME CHECKS FAILED'}; summary in {OUT / 'summary.json'}")
    shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
