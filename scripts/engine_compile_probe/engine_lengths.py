"""One engine (ddtree b16, cuda), requests of growing prompt lengths one at a time: each one's latency
and the Triton cache's compile count after it, to see which shapes compile anew."""
import json, subprocess, sys, time, urllib.request, os, pathlib
port = 30123
cache = pathlib.Path(os.environ["TRITON_CACHE_DIR"])
eng = subprocess.Popen([sys.executable, "-m", "pytest_specdec.engine", "--method", "ddtree", "--budget", "16",
                        "--port", str(port), "--device", "cuda", "--model-preset", sys.argv[1] if len(sys.argv) > 1 else "8b-layer"],
                       stdout=open(os.environ["OUT"] + f"/engine-{sys.argv[1] if len(sys.argv) > 1 else '8b'}.log", "w"), stderr=subprocess.STDOUT)
t0 = time.time()
try:
    for _ in range(240):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2); break
        except Exception:
            time.sleep(0.5)
    print(f"ready in {time.time()-t0:.1f} s, compiles {len(list(cache.glob('*/*.json')))}")
    def gen(n, new=64, batch=1):
        body = {"text": ["word " * n] * batch if batch > 1 else "word " * n,
                "sampling_params": {"max_new_tokens": new, "temperature": 0, "ignore_eos": True}}
        req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        s = time.time(); urllib.request.urlopen(req, timeout=120).read(); return time.time() - s
    for n in [20, 20, 37, 60, 100, 100, 170, 300, 301, 500, 800, 800, 1300, 2000]:
        before = len(list(cache.glob('*/*.json')))
        dt = gen(n)
        print(f"prompt ~{n} words: {dt*1000:.0f} ms, new compiles {len(list(cache.glob('*/*.json'))) - before}")
    for b in [2, 3, 4, 4]:
        before = len(list(cache.glob('*/*.json')))
        dt = gen(150, batch=b)
        print(f"batch {b} x ~150 words: {dt*1000:.0f} ms, new compiles {len(list(cache.glob('*/*.json'))) - before}")
finally:
    eng.terminate(); eng.wait(30)
