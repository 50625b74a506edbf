#!/usr/bin/env bash
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/pip.log" 2>&1 || tail -3 "$OUT/pip.log"
python3 -c "import sys, pytest; print(sys.version.split()[0], pytest.__version__)"; python3 -m pytest --version 2>&1 | head -3
python3 -c "import importlib.metadata as m; print(sorted(e.name for e in m.entry_points(group='pytest11')))"
K='B32-T16-H32 and L32768 or B8-T65-H32 and L8192 or B1-T17-H32 and L8192'
run() {
  v=$1; shift
  env SPECDEC_VERIFY_GRID=full SPECDEC_VERIFY_TABLE=$OUT/$v timeout 150 "$@" >"$OUT/$v.log" 2>&1
  echo "== $v rc=$? $(tail -1 $OUT/$v.log | cut -c1-120)"
  python3 -c "
import json,sys
for l in open('$OUT/$v/verify.jsonl'):
    r=json.loads(l); print('   ', r['shape'], 'host', round(r['host_us'],2), 'floor', r.get('host_floor_us'), 'eager', round(r['eager_us'],1), 'graph', round(r['us'],1))
" 2>&1 | tail -4
}
P="python3 -m pytest tests/bench/test_verify_kernel.py -k"
run base $P "$K" -p no:cacheprovider -p no:xdist -rA
run nospecdec $P "$K" -p no:cacheprovider -p no:xdist -p no:specdec
run nofh_notimeout $P "$K" -p no:cacheprovider -p no:xdist -p no:faulthandler -p no:timeout
run nocapture $P "$K" -p no:cacheprovider -p no:xdist -s
run noautoload env PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 $P "$K" -p no:cacheprovider
mkdir -p $OUT/plain
SPECDEC_VERIFY_TABLE=$OUT/plain timeout 100 python3 -c "
import json, torch
from specdec_kernels.bench import Shape, run_shape, l2_flush, measure_ceilings
c = measure_ceilings(torch.device('cuda'))
print('ceilings', c)
with l2_flush('read'):
    for s in (Shape(32,16,32,8,128,32768), Shape(8,65,32,8,128,8192), Shape(1,17,32,8,128,8192)):
        r = run_shape(s, c, with_flex=False, seed=1); print('   plain', s.name, 'host', round(r['host_us'],2), 'eager', round(r['eager_us'],1), 'graph', round(r['us'],1))
"
