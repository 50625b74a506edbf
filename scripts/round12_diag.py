"""Round 12's diagnostics on a GPU (kernels/PERF.md, round 12): where a compute-bound program's
time goes on a short cache. Per-program time, from the table, grows by about 1.0-1.3 us a key
tile between L1k and L8k but starts at some 14 us: at L1k a third of each program is fixed.

    python3 scripts/round12_diag.py OUT_DIR

Round 11's ``stamps`` and ``trace`` views (scripts/round11_diag.py) on the compute-bound shapes
of the ping-pong kernel, each at a 1k and an 8k cache.
"""
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import round11_diag  # noqa: E402

round11_diag.SHAPES = [(32, 65, 64, 1024), (32, 65, 64, 8192), (32, 65, 32, 1024), (32, 65, 32, 8192),
                       (8, 65, 32, 1024), (8, 65, 32, 8192), (32, 33, 64, 1024), (8, 65, 64, 1024),
                       (1, 65, 32, 8192)]

if __name__ == "__main__":
    round11_diag.main(sys.argv[1], ["trace", "stamps"])
    rows = json.loads((pathlib.Path(sys.argv[1]) / "round11_diag.json").read_text())
    (pathlib.Path(sys.argv[1]) / "round12_diag.json").write_text(json.dumps(rows, indent=1))
