"""Runs ab.py's shapes one worker process at a time under a watchdog: a worker that writes no row
for STALL_S seconds (a kernel that never returns) is killed, its shape recorded as hung, and a new
worker goes on from the next shape.   SHAPES="..." python3 scripts/cluster_merge_probe/run.py OUT"""
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

STALL_S = float(os.environ.get("STALL_S", "45"))
LIMIT_S = float(os.environ.get("LIMIT_S", "300"))


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))
    names = os.environ["SHAPES"].split()
    rows = os.path.join(out_dir, "cluster_merge.jsonl")
    start = time.time()
    # compile each shape's variants in parallel workers, each under a time limit
    hung = set()

    def compile_one(name):
        try:
            done = subprocess.run([sys.executable, os.path.join(here, "ab.py"), out_dir, "--compile", name],
                                  capture_output=True, text=True, timeout=150)
            if done.returncode:
                print(f"compile {name}: rc {done.returncode}\n{done.stdout[-800:]}{done.stderr[-800:]}", flush=True)
                hung.add(name)
        except subprocess.TimeoutExpired:
            print(f"compile {name}: hung, killed", flush=True)
            hung.add(name)

    with ThreadPoolExecutor(12) as pool:
        list(pool.map(compile_one, names))
    print(f"compiled in {time.time() - start:.0f} s; failed or hung: {sorted(hung)}", flush=True)
    todo = [n for n in names if n not in hung]
    while todo and time.time() - start < LIMIT_S:
        before = sum(1 for _ in open(rows)) if os.path.exists(rows) else 0
        worker = subprocess.Popen([sys.executable, os.path.join(here, "ab.py"), out_dir, *todo])
        last, seen = time.time(), before
        while worker.poll() is None:
            time.sleep(1)
            now = sum(1 for _ in open(rows)) if os.path.exists(rows) else 0
            if now != seen:
                last, seen = time.time(), now
            if time.time() - last > STALL_S or time.time() - start > LIMIT_S:
                worker.kill()
                worker.wait()
                break
        done = seen - before
        if worker.returncode == 0:
            todo = []
        else:
            print(f"worker stopped (rc {worker.returncode}) at {todo[done] if done < len(todo) else '-'}", flush=True)
            todo = todo[done + 1:]
    print(f"done in {time.time() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
