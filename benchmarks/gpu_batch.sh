#!/usr/bin/env bash
# One device call that runs as many of a learning suite's missing runs as fit in its time, and brings them back.
#
# For a lent GPU machine (the `device` tool's `run`: one call of at most 10 minutes, about 15 minutes of device
# time per task). It commits nothing. Each finished run leaves its record (<arm>_s<seed>.json, the format
# benchmarks/learning.py writes and reuses); each unfinished run leaves its config, metrics and newest checkpoint,
# from which `benchmarks/credit_learning.py` continues it on any machine (same command, same --work) exactly as
# `creditflow train --resume` would. Everything comes back under $OUT:
#   $OUT/records.tgz       the new records, to untar in the repository root and commit
#   $OUT/run_<arm>_s<N>.tgz one per unfinished run (config.yaml, metrics.jsonl, newest checkpoint), at most
#                          MAX_RUN_FILES of them, most advanced first (a checkpoint of the tiny policy is ~10 MB and
#                          a call returns at most 64 MiB), to untar in the repository root
#   $OUT/log.txt           the suite's output and each run's log tail
#
# The runs are the CPU suite's runs: float32 (`policy.dtype=float32`; `auto` would be bf16 on a GPU), the same
# pi_SFT (carried), one process per run at one torch thread, all sharing the GPU (--jobs). Records name the
# pi_SFT by the sha256 of its weights; the CPU results stay the reference, and a results note must say which
# steps ran where (records carry `resumed_at_step`).
#
# Usage, from the repository root:
#   on the GPU machine (device tool): carry [".whl", "runs/hard_sft"] (+ "runs/credit_hard" to continue runs
#   stopped earlier) and run `bash benchmarks/gpu_batch.sh`; .whl/ holds the wheels of the packages the machine
#   lacks (benchmarks/gpu_wheels.sh downloads them here first). runs/hard_sft comes from
#   `python benchmarks/credit_learning.py --setting hard --build-sft runs/hard_sft` on the CPU (a rebuild on another
#   CPU host has other weights: pair only runs from one build, which the records' sha256 tells apart).
#   on the CPU, as its test: `SMOKE=1 BUDGET_S=90 JOBS=2 OUT=/tmp/gpu_batch bash benchmarks/gpu_batch.sh`
#
# Settings (environment variables): BUDGET_S (seconds the suite may run before it is stopped; default 500, which
# leaves the 10-minute call time to install the wheels and pack), JOBS (processes at once; default 10), ARMS and
# SEEDS (default: the issue-64 arms rewardflow_official gigpo_official on seeds 0-4), SETTING (hard), MODEL
# (runs/hard_sft/sft_model), WORK (runs/credit_hard), RESULTS (benchmarks/results/credit_learning_hard),
# MAX_RUN_FILES (6), SMOKE=1 (the seconds-long smoke budget of credit_learning.py; numbers say nothing).
set -uo pipefail
cd "$(dirname "$0")/.."

BUDGET_S=${BUDGET_S:-500}
JOBS=${JOBS:-10}
ARMS=${ARMS:-rewardflow_official gigpo_official}
SEEDS=${SEEDS:-0 1 2 3 4}
SETTING=${SETTING:-hard}
MODEL=${MODEL:-runs/hard_sft/sft_model}
WORK=${WORK:-runs/credit_hard}
RESULTS=${RESULTS:-benchmarks/results/credit_learning_hard}
MAX_RUN_FILES=${MAX_RUN_FILES:-6}
OUT=${OUT:-/tmp/gpu_batch}
PY=${PY:-python3}
mkdir -p "$OUT"
LOG="$OUT/log.txt"
: > "$LOG"
STAMP=$(mktemp /tmp/gpu_batch_start.XXXXXX)  # records newer than this came from this call
say() { echo "[gpu_batch $(date +%H:%M:%S)] $*" | tee -a "$LOG"; }

# the packages the GPU image lacks (gpu_wheels.sh), where they are missing
if ! "$PY" -c "import pydantic, trl, datasets, bm25s, rapidfuzz" 2> /dev/null && ls .whl/*.whl > /dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >> "$LOG" 2>&1 || { say "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')" 2>&1 | tee -a "$LOG"

if [ "${SMOKE:-0}" = 1 ]; then
  RESULTS="$OUT/smoke_results/credit_learning_$SETTING"
  ARGS=(--smoke --work "$WORK")
else
  [ -d "$MODEL" ] || { say "no pi_SFT at $MODEL: carry it (the CPU suite's pi_SFT, checked by its sha256)"; exit 2; }
  ARGS=(--model "$MODEL" --work "$WORK" --steps 100)
fi
RECORDS="${RESULTS}_runs"
# shellcheck disable=SC2086
"$PY" benchmarks/credit_learning.py --setting "$SETTING" "${ARGS[@]}" --out "$RESULTS" --jobs "$JOBS" \
  --seeds $SEEDS --methods $ARMS -- policy.dtype=float32 >> "$LOG" 2>&1 &
SUITE=$!
say "suite pid $SUITE: arms [$ARMS] seeds [$SEEDS], $JOBS at a time, for at most ${BUDGET_S}s"
waited=0
while kill -0 "$SUITE" 2> /dev/null && [ "$waited" -lt "$BUDGET_S" ]; do sleep 5; waited=$((waited + 5)); done
if kill -0 "$SUITE" 2> /dev/null; then
  say "budget reached: stopping the suite (its children stop with it and keep their checkpoints)"
  kill -TERM "$SUITE"
  wait "$SUITE"
fi
say "suite ended after ${waited}s"

# records of the runs this call finished
NEW=$(find "$RECORDS" -name '*.json' -newer "$STAMP" 2> /dev/null)
if [ -n "$NEW" ]; then
  # shellcheck disable=SC2086
  tar -czf "$OUT/records.tgz" $NEW && say "records: $(echo "$NEW" | wc -l) -> records.tgz"
else
  say "no run finished in this call"
fi
rm -f "$STAMP"

# unfinished runs: config, metrics and newest checkpoint, most advanced first
"$PY" benchmarks/gpu_pack.py "$WORK" "$OUT" --limit "$MAX_RUN_FILES" >> "$LOG" 2>&1
for f in "$WORK"/logs/*.log; do [ -f "$f" ] && { echo "== $f"; tail -n 3 "$f"; } >> "$LOG"; done
say "done; files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
