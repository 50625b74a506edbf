# The engine's start-up warm on the GPU at --max-batch 8, 16 and 32 (auto: every size up to it), on a
# fresh Triton cache and again on the warm one; the "Warmed ..." line, the seconds to ready and the
# /server_info figures. From the repository root, OUT set.
export PYTHONDONTWRITEBYTECODE=1
run() {  # preset method budget max_batch cache_label
  local log=$OUT/$1-$2-b$3-mb$4-$5.log port=$((30000 + RANDOM % 2000)) t0=$SECONDS
  timeout 400 python -m pytest_specdec.engine --device cuda --model-preset $1 --method $2 --budget $3 \
      --max-batch $4 --port $port > $log 2>&1 &
  local pid=$!
  for _ in $(seq 1 800); do grep -q "The server is fired up" $log && break; kill -0 $pid 2>/dev/null || break; sleep 0.5; done
  echo "$1 $2 b$3 max-batch $4 ($5 cache): ready after $((SECONDS - t0)) s"
  grep -E "Warmed|Warm-up of batch size" $log | sed 's/^.*\] //' | tail -3
  python - "$port" <<'PY'
import json, sys, urllib.request
info = json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/server_info", timeout=10))
st = info["startup_time"]
print("  server_info:", {k: round(st[k], 2) for k in ("load_weight", "scheduler_e2e", "tokenizer_e2e")},
      "warmup_batch_sizes", info["warmup_batch_sizes"][:3], "...", len(info["warmup_batch_sizes"]))
PY
  kill $pid; wait $pid 2>/dev/null
}
for mb in 8 16 32; do
  export TRITON_CACHE_DIR=/tmp/tc-$mb; rm -rf $TRITON_CACHE_DIR
  run 8b-layer ddtree 16 $mb fresh
  run 8b-layer ddtree 16 $mb warm
done
export TRITON_CACHE_DIR=/tmp/tc-h32; rm -rf $TRITON_CACHE_DIR
run 27b-hybrid-layers ddtree 16 32 fresh
run 27b-hybrid-layers ddtree 16 32 warm
