"""Compare two dump dirs: PTX without debug/line info and comments, SASS as printed (cuobjdump
-sass: no line info), TTGIR without locations. usage: compare.py A B"""
import os, re, sys

def norm_ptx(t):
    out = []
    for line in t.splitlines():
        s = line.strip()
        if s.startswith(".section") and ".debug" in s:
            break  # debug sections run to the end
        if s.startswith((".loc", ".file", "//")) or not s:
            continue
        out.append(re.sub(r"\s*//.*$", "", line))
    return out

def norm_sass(t):
    return [l for l in t.splitlines() if l.strip() and not l.lstrip().startswith(("Fatbin", "code for", ".section", "arch =", "host =", "compile_size", "Function :"))]

def norm_ttgir(t):
    out = []
    for l in t.splitlines():
        if l.startswith("#loc"):
            continue
        l = re.sub(r" loc\(#loc\d*\)", "", l)
        l = re.sub(r" loc\([^)]*\)", "", l)
        out.append(l)
    return out

a, b = sys.argv[1], sys.argv[2]
names = sorted(n for n in os.listdir(a) if n.endswith((".ptx", ".sass", ".ttgir")))
only = set(sys.argv[3].split(",")) if len(sys.argv) > 3 else None
res = {}
for n in names:
    ext = n.rsplit(".", 1)[1]
    if only and ext not in only:
        continue
    pb = os.path.join(b, n)
    if not os.path.exists(pb):
        print("MISSING in B", n); res[n] = False; continue
    f = {"ptx": norm_ptx, "sass": norm_sass, "ttgir": norm_ttgir}[ext]
    x, y = f(open(os.path.join(a, n)).read()), f(open(pb).read())
    same = x == y
    res[n] = same
    if not same:
        import difflib
        d = list(difflib.unified_diff(x, y, lineterm="", n=0))
        print("DIFF", n, f"{len(x)} vs {len(y)} lines, {sum(1 for l in d if l[:1] in '+-') - 2} changed")
for n in sorted(set(os.listdir(b)) - set(os.listdir(a))):
    if n.endswith((".ptx", ".sass", ".FAILED")): print("EXTRA in B", n)
by = {}
for n, s in res.items():
    by.setdefault(n.rsplit(".", 1)[1], []).append(s)
for ext, v in sorted(by.items()):
    print(f"{ext}: {sum(v)}/{len(v)} identical")
