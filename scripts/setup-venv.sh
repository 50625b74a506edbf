#!/usr/bin/env bash
# Create (or refresh) the project's virtual environment with everything the tests and the
# benchmark suite need. Safe to re-run: it reinstalls only when pyproject.toml or this file change.
#
#   SPECDEC_VENV         where the venv lives (default .venv)
#   SPECDEC_TORCH        the torch requirement installed first into a venv without torch
#                        (default torch==2.13.0; a venv that has a torch, your CUDA build on a GPU
#                        host say, keeps it)
#   SPECDEC_TORCH_INDEX  the index torch comes from (default: pip's configured index, which on a
#                        fresh Linux machine serves the multi-GB CUDA build; for the CPU build:
#                        https://download.pytorch.org/whl/cpu)
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${SPECDEC_VENV:-.venv}
torch_req=${SPECDEC_TORCH:-torch==2.13.0}
torch_index=${SPECDEC_TORCH_INDEX:-}
stamp="$venv/.specdec-installed"
want=$(cat pyproject.toml scripts/setup-venv.sh | sha256sum | cut -d' ' -f1)

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "setup-venv: creating the virtual environment $venv" >&2
  python3 -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install --disable-pip-version-check -q)

# SGLang's own code, read by the contract tests (its argv parser, request schema, endpoints, metric
# and log names) and imported by the client tests (its frontend, bench_serving): installed into a
# directory of its own that only those tests put on sys.path, because SGLang pins dependencies
# (torch among them) that this venv does not and must not have. It needs nothing of the venv's
# packages, so it installs while torch and the project do.
sglang_dir="$venv/sglang-reference"
sglang_reqs=(sglang==0.5.23 msgspec orjson pybase64 requests pillow starlette pydantic pyzmq tqdm ipython)
sglang_pid=
if [ "$(cat "$sglang_dir/.installed" 2>/dev/null)" != "${sglang_reqs[*]}" ]; then
  echo "setup-venv: installing ${sglang_reqs[0]} without its dependencies, plus the light ones its" \
       "modules import, into $sglang_dir (read by the contract and client tests only)" >&2
  (
    rm -rf "$sglang_dir"
    "${pip[@]}" --target "$sglang_dir" --no-deps "${sglang_reqs[0]}"
    rm -rf "$sglang_dir/bin"  # sglang's console scripts, unused; pip would warn that the next install clashes
    "${pip[@]}" --target "$sglang_dir" "${sglang_reqs[@]:1}"
    echo "${sglang_reqs[*]}" > "$sglang_dir/.installed"
  ) &
  sglang_pid=$!
  trap '[ -z "$sglang_pid" ] || kill "$sglang_pid" 2>/dev/null || true' EXIT  # no install outlives a failed setup
fi

# torch first: anything that depends on it would otherwise pull a multi-GB CUDA build.
if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
  from=${torch_index:-the configured package index}
  echo "setup-venv: installing $torch_req from $from (a large download the first time;" \
       "a few minutes)" >&2
  "${pip[@]}" ${torch_index:+--index-url "$torch_index"} "$torch_req"
fi
echo "setup-venv: installing pytest-specdec with its test extras" >&2
"${pip[@]}" -e ".[test]"

if [ -n "$sglang_pid" ]; then
  status=0
  wait "$sglang_pid" || status=$?
  sglang_pid=
  if [ "$status" != 0 ]; then
    echo "setup-venv: installing ${sglang_reqs[0]} into $sglang_dir failed (pip's message is above)" >&2
    exit 1
  fi
fi

echo "$want" > "$stamp"
echo "setup-venv: ready ($venv)" >&2
