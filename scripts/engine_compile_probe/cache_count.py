"""Kernel variants in a Triton cache folder, by kernel name (one .json metadata file a compile)."""
import collections, json, pathlib, sys
root = pathlib.Path(sys.argv[1])
names = collections.Counter()
for meta in root.glob("*/*.json"):
    if meta.name.startswith("__grp__"):
        continue
    try:
        data = json.loads(meta.read_text())
    except Exception:
        continue
    names[data.get("name", meta.stem)] += 1
print(sum(names.values()), "compiles;", ", ".join(f"{n} x{c}" for n, c in names.most_common()))
