set -u
python3 -m pip install -q --no-deps --no-build-isolation -e . > $OUT/pip.log 2>&1 || tail -5 $OUT/pip.log
cd scripts/e2e_sharing_probe
export PYTHONDONTWRITEBYTECODE=1
rm -rf baselines .specdec .benchmarks
echo "== save"; timeout 170 python -m pytest -p no:randomly -q --specdec-save-baseline --specdec-report=$OUT/save 2>&1 | tail -25
echo "== gate"; timeout 120 python -m pytest -p no:randomly -q --specdec-compare-fail="output_tok_s:50%,accept_length:1%" --specdec-report=$OUT/gate 2>&1 | tail -25
echo "== attached, quiet then shared"
python -m pytest_specdec.engine --method ddtree --budget 8 --port 30111 --device cuda --model-preset 8b-layer > $OUT/engine.log 2>&1 &
ENG=$!
for i in $(seq 1 120); do curl -sf http://127.0.0.1:30111/health >/dev/null && break; sleep 1; done
curl -s "http://127.0.0.1:30111/v1/loads?include=core"; echo
timeout 60 python -m pytest -p no:randomly -q --specdec-backend=auto --specdec-server-url=http://127.0.0.1:30111 -k "hopper-ddtree-tp1-b8" --specdec-report=$OUT/quiet 2>&1 | tail -15
python other_client.py http://127.0.0.1:30111 > $OUT/other.log 2>&1 &
OTH=$!
sleep 3
curl -s "http://127.0.0.1:30111/v1/loads?include=core"; echo
timeout 60 python -m pytest -p no:randomly -q --specdec-backend=auto --specdec-server-url=http://127.0.0.1:30111 -k "hopper-ddtree-tp1-b8" --specdec-report=$OUT/shared 2>&1 | tail -15
kill $OTH $ENG; wait
cat $OUT/other.log | tail -3
