set -u
python3 -m pip install -q --no-deps --no-build-isolation -e . > $OUT/pip.log 2>&1 || tail -5 $OUT/pip.log
cd scripts/e2e_sharing_probe
export PYTHONDONTWRITEBYTECODE=1
cat >> pyproject.toml <<'TOML'

[[tool.specdec.workloads]]
name = "code"
prompts = "code"
num_prompts = 8
max_new_tokens = 64
concurrency = 4
TOML
python -m pytest_specdec.engine --method ddtree --budget 8 --port 30111 --device cuda --model-preset 8b-layer > $OUT/engine.log 2>&1 &
ENG=$!
for i in $(seq 1 120); do curl -sf http://127.0.0.1:30111/health >/dev/null && break; sleep 1; done
echo "== xdist -n 2 --dist load, attached"
timeout 150 python -m pytest -p no:randomly -q -n 2 --dist load --specdec-backend=auto --specdec-server-url=http://127.0.0.1:30111 -k "hopper-ddtree-tp1-b8" --specdec-report=$OUT/xdist 2>&1 | tail -15
kill $ENG; wait
