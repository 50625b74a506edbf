"""Usage: PYTHONPATH=<clean checkout> .venv/bin/python measure_red.py <clean checkout> [dir].
Seconds-to-red of each fault scenario of tests/unit/test_server_faults.py and of the stall
acceptance scenario: a fresh project per scenario, pytest -v in a subprocess, the time from launch
to the first FAILED/ERROR line, and pytest's own setup/call durations of that test."""
import os, re, shutil, socket, subprocess, sys, time
from pathlib import Path

REPO = Path(sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("/tmp/fs-measure/more") else "/tmp/fs-clean").resolve()
PY = sys.executable  # run with PYTHONPATH=<clean checkout>
GEN = (REPO / "tests" / "bench" / "test_generation.py").read_text()
WL = lambda name, prompts, n, m, c=1: f'''
[[tool.specdec.workloads]]
name = "{name}"
prompts = "{prompts}"
num_prompts = {n}
max_new_tokens = {m}
concurrency = {c}
'''
THREE = WL("w1", "chat", 2, 8) + WL("w2", "code", 2, 8) + WL("w3", "math", 2, 8)
ONE = WL("w1", "chat", 2, 8)


def project(root, engine_args, budgets=(8,), workloads=THREE, startup=60, extra=""):
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    args = ", ".join(f'"{a}"' for a in engine_args)
    (root / "pyproject.toml").write_text(f'''
[tool.specdec]
backend = "embedded"
startup_timeout = {startup}
{extra}
[tool.specdec.matrix.cpu]
methods = ["ddtree"]
tp = [1]
budget = [{", ".join(map(str, budgets))}]
{workloads}
[tool.specdec.engine]
draft_agreement = 0.9
extra_args = [{args}]
''')
    (root / "test_generation.py").write_text(GEN)


def run(root, *args):
    start = time.monotonic()
    proc = subprocess.Popen([PY, "-m", "pytest", "-p", "no:cacheprovider", "-v", "--durations=0",
                             "--durations-min=0", *args], cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    red = None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if red is None and re.search(r"::\S+ (FAILED|ERROR)", line):
            red = (time.monotonic() - start, line.split(" ")[0])
    proc.wait()
    total = time.monotonic() - start
    out = "".join(lines)
    durations = {}
    for m in re.finditer(r"^(\d+\.\d+)s (setup|call|teardown)\s+(\S+)", out, re.M):
        durations.setdefault(m.group(3), {})[m.group(2)] = float(m.group(1))
    return red, total, durations, out


SCENARIOS = {
    "crash mid-run (--fault-crash-after 3)": dict(engine_args=["--fault-crash-after", "3"]),
    "crash during warm-up": dict(engine_args=["--fault-crash-warmup"]),
    "crash budgets 8,12 of 8,12,16": dict(engine_args=["--fault-crash-budgets", "8,12"],
                                          budgets=(8, 12, 16), workloads=ONE),
    "hang (--fault-hang, startup 12 s)": dict(engine_args=["--fault-hang"], workloads=ONE,
                                             startup=12),
    "slow start past a 3 s deadline": dict(engine_args=["--fault-slow-start", "30"],
                                          workloads=ONE, startup=3),
    "port already in use": dict(engine_args=["--port", "{port}"], workloads=ONE),
    "zero tokens": dict(engine_args=["--fault-zero-tokens"], workloads=ONE),
    "restart on crash (1 restart)": dict(engine_args=["--fault-crash-after", "3"],
                                         args=["--specdec-restart-on-crash=1"]),
    "stall: 8 prompts, concurrency 1, --fault-hang-after 2, stall timeout 10":
        dict(engine_args=["--fault-hang-after", "2"], workloads=WL("chat", "chat", 8, 32),
             args=["--specdec-stall-timeout", "10"]),
}

if __name__ == "__main__":
    holder = socket.socket(); holder.bind(("127.0.0.1", 0)); holder.listen()
    port = holder.getsockname()[1]
    base = Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp/fs-measure/projects")
    for i, (name, s) in enumerate(SCENARIOS.items()):
        root = base / f"s{i}"
        args = [a.replace("{port}", str(port)) for a in s["engine_args"]]
        project(root, args, s.get("budgets", (8,)), s.get("workloads", THREE), s.get("startup", 60))
        red, total, durations, out = run(root, *s.get("args", []))
        if red is None:
            print(f"{name}: NO RED LINE (total {total:.1f}s)\n{out[-3000:]}")
            continue
        t = red[1].split("::")[-1]
        d = durations.get(red[1], {})
        first = next(iter(durations.values()), {})
        print(f"{name}: red after {red[0]:.1f}s ({t}; its setup {d.get('setup', 0):.1f}s, "
              f"call {d.get('call', 0):.1f}s; first test's setup (boot) {first.get('setup', 0):.1f}s); "
              f"run {total:.1f}s")
        sys.stdout.flush()
