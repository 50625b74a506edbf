"""Replay a gate_power work folder's journals through the gate with other constants (experiment).

    python scripts/gate_replay.py WORKDIR [TOLERANCES] [CONTENTION_NOISE] [ALPHA]

Prints, per unchanged and per slowed run (the save runs skipped), how many figures are red and
noisy. Used to pick CONTENTION_NOISE and ALPHA from the trials of docs/PERF.md.
"""
import glob
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pytest_specdec import gate  # noqa: E402
from pytest_specdec.baselines import load_baselines  # noqa: E402
from pytest_specdec.metrics import MetricValue  # noqa: E402

work = sys.argv[1]
tolerances = gate.parse_tolerances(sys.argv[2] if len(sys.argv) > 2 else "output_tok_s:15%,tpot_ms:15%,ttft_ms:30%")
if len(sys.argv) > 3:
    gate.CONTENTION_NOISE = float(sys.argv[3])
if len(sys.argv) > 4:
    gate.ALPHA = float(sys.argv[4])
base = load_baselines(f"{work}/baselines/cpu.json", "cpu")
for kind in ("unchanged", "slowed"):
    files = sorted(glob.glob(f"{work}/{kind}/.specdec/journal*.jsonl"))
    if kind == "unchanged":
        files = files[3:]  # the three saves
    for path in files:
        red, noisy = [], 0
        for line in open(path):
            data = json.loads(line)["data"]
            for name in ("output_tok_s", "tpot_ms", "ttft_ms"):
                metric = MetricValue.from_json(name, data["metrics"][name])
                c = gate.compare_metric(data["test_id"], metric, base.get(data["test_id"], name),
                                        tolerances.get(name))
                red += [f"{name} {c.change:+.0%}"] if c.verdict == "regression" else []
                noisy += c.verdict == "noisy"
        print(f"{kind:9} red {len(red):2} noisy {noisy:2}  {', '.join(red[:4])}")
