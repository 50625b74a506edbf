"""Best of the runs of each label (base, new) per shape, and new over base.  python3 summary.py OUT"""
import collections
import json
import statistics
import sys

best = collections.defaultdict(dict)
for line in open(f"{sys.argv[1]}/times.jsonl"):
    r = json.loads(line)
    label = r["label"].split("#")[0]
    best[r["shape"]][label] = min(best[r["shape"]].get(label, 1e9), r["us"])
ratios = []
for shape, t in best.items():
    if "base" in t and "new" in t:
        ratios.append(t["new"] / t["base"])
        print(f"{shape}: base {t['base']} new {t['new']} ({ratios[-1]:.3f})")
print(f"{len(ratios)} shapes: {min(ratios):.3f}-{max(ratios):.3f}x, median {statistics.median(ratios):.3f}")
