"""The rest of tests/unit/test_server_faults.py's scenarios: time to the XFAIL of the sm_120 dry
run, to red of the timed-out test (pytest-timeout, both methods), of crash-after 0, of the stall
test's two-configuration project; and, for SIGINT and SIGKILL of pytest mid-run, the seconds from
the signal until no engine process of the project is left."""
import os, re, signal, subprocess, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).parent))  # PYTHONPATH=<clean checkout> as for measure_red.py
import measure_red as m  # noqa: E402  (runs nothing at import: guarded below)

base = Path("/tmp/fs-measure/more")


def engines(root):
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                cwd = os.readlink(entry / "cwd")
            except OSError:
                continue
            if "pytest_specdec.engine" in args and cwd.startswith(str(root)):
                found.append(entry.name)
    return found


def timed(name, root, *args, pattern=r"::\S+ (FAILED|ERROR)"):
    start = time.monotonic()
    proc = subprocess.Popen([m.PY, "-m", "pytest", "-p", "no:cacheprovider", "-v", *args], cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    hit = None
    out = []
    for line in proc.stdout:
        out.append(line)
        if hit is None and re.search(pattern, line):
            hit = time.monotonic() - start
    proc.wait()
    total = time.monotonic() - start
    print(f"{name}: {'%.1fs' % hit if hit else 'NO MATCH'} (run {total:.1f}s)")
    if hit is None:
        print("".join(out[-40:]))
    sys.stdout.flush()


r = base / "sm120"
m.project(r, [], workloads=m.ONE, extra="")
(r / "pyproject.toml").write_text((r / "pyproject.toml").read_text() + '''
[tool.specdec.matrix.blackwell]
methods = ["ddtree"]
tp = [1, 4]
budget = [8, 16]

[[tool.specdec.known_issues]]
arch = "sm_120"
method = "ddtree"
budget = [8, 12]
reason = "verify crashes with CUDA illegal instruction on sm_120"
''')
timed("sm_120 dry run: known crash as XFAIL", r, "--specdec-arch=sm_120", "-m", "blackwell",
      pattern=r"::\S+ XFAIL")

for method in ("signal", "thread"):
    r = base / f"timeout-{method}"
    m.project(r, [], workloads=m.ONE)
    (r / "test_slow.py").write_text('''
import time

def test_slow(specdec_server):
    assert specdec_server.generate("hi", max_new_tokens=4)["meta_info"]["completion_tokens"] == 4
    time.sleep(60)
''')
    timed(f"timed-out test (pytest-timeout 8 s, {method})", r, "test_slow.py", "-p", "timeout",
          "--timeout=8", f"--timeout-method={method}", pattern=r"(FAILED|ERROR|Timeout)")

r = base / "crash0"
m.project(r, ["--fault-crash-after", "0"], workloads=m.ONE)
timed("crash at the first request (--fault-crash-after 0)", r)

r = base / "stall2"
m.project(r, ["--fault-hang-after", "2"], budgets=(8, 16), workloads=m.ONE)
(r / "test_generation.py").write_text('''
from pytest_specdec.workloads import builtin_workload


def test_workload(specdec_server, specdec_spec, specdec_record):
    prompts = 8 if specdec_spec.budget == 8 else 2
    workload = builtin_workload("chat", max_new_tokens=16).resized(prompts)
    specdec_record.run(specdec_server, workload)


def test_alive(specdec_server):
    specdec_server.check_alive()
''')
timed("stall test project (b8 stalls, b16 passes), stall timeout 5", r, "--specdec-stall-timeout", "5")

for sig in (signal.SIGINT, signal.SIGKILL):
    r = base / f"kill-{sig.name}"
    m.project(r, [], workloads=m.THREE.replace("max_new_tokens = 8", "max_new_tokens = 400")
              .replace("num_prompts = 2", "num_prompts = 16"))
    proc = subprocess.Popen([m.PY, "-m", "pytest", "-p", "no:cacheprovider", "-q"], cwd=r,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not engines(r):
        time.sleep(0.1)
    time.sleep(1.0)
    sent = time.monotonic()
    proc.send_signal(sig)
    while engines(r):
        time.sleep(0.05)
    gone = time.monotonic() - sent
    proc.wait()
    print(f"{sig.name} of pytest mid-run: no engine left {gone:.1f}s after the signal")
    sys.stdout.flush()
