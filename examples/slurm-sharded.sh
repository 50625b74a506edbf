#!/usr/bin/env bash
# The benchmark matrix as a Slurm job array, one shard per array task, and the merge as a job
# that starts once every shard has ended (whether it passed or not). From the repository's root:
#
#   bash examples/slurm-sharded.sh                  # 4 shards on 8-GPU nodes
#   SHARDS=8 GPUS=4 bash examples/slurm-sharded.sh  # 8 shards on 4-GPU nodes
#
# Each array task runs `pytest --specdec-shard=K/N` and leaves its shard folder in
# $OUT/shard-K; the merge job writes specdec-merged/ and fails (exit 1) when a shard's gate
# failed or a shard left no results (a task that never started, or was killed: resume it with
# --specdec-resume and the same --specdec-report=DIR, then merge again). Each value is joined
# to its flag with '=': pytest chooses its rootdir before it loads the plugin, taking a value
# after a space for a test path, and with $OUT outside the project (a shared file system) may
# settle on another config file and never read the project's (the run then stops, saying so).
set -euo pipefail

SHARDS=${SHARDS:-4}                # shards, one array task each
GPUS=${GPUS:-8}                    # GPUs per node (TP8 configurations need an 8-GPU node)
OUT=${OUT:-specdec-shards}         # where the shard folders go (a shared file system)
PYTHON=${PYTHON:-.venv/bin/python}
GATE=${GATE:-output_tok_s:5%,accept_length:1%,ttft_ms:10%}
# named, not `auto`: a node whose $PYTHON cannot import SGLang would measure, and gate, the
# embedded engine; with sglang a missing SGLang stops each task saying how to install it
BACKEND=${BACKEND:-sglang}

mkdir -p "$OUT" logs

# $SLURM_ARRAY_TASK_ID is escaped: each task expands its own.
shards_job=$(sbatch --parsable --job-name=specdec-shard --array="1-$SHARDS" \
    --nodes=1 --gpus-per-node="$GPUS" --time=04:00:00 --output="logs/%x-%A_%a.out" \
    --wrap="$PYTHON -m pytest tests/bench --specdec-shard=\$SLURM_ARRAY_TASK_ID/$SHARDS \
--specdec-report=$OUT/shard-\$SLURM_ARRAY_TASK_ID --specdec-compare-fail=$GATE --specdec-backend=$BACKEND")

# afterany: merge also after a failed shard; the merge's own exit status says whether all passed.
merge_job=$(sbatch --parsable --job-name=specdec-merge --dependency="afterany:$shards_job" \
    --time=00:30:00 --output="logs/%x-%j.out" \
    --wrap="$PYTHON -m pytest_specdec merge --out specdec-merged $OUT/shard-*")

echo "shards: job $shards_job (array 1-$SHARDS); merge: job $merge_job, after all of them"
