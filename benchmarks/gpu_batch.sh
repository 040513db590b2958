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
#   `python -m benchmarks.credit_learning --setting hard --build-sft runs/hard_sft` on the CPU (a rebuild on another
#   CPU host has other weights: pair only runs from one build, which the records' sha256 tells apart).
#   on the CPU, as its test: `SMOKE=1 BUDGET_S=90 JOBS=2 OUT=/tmp/gpu_batch bash benchmarks/gpu_batch.sh`
#
# Settings (environment variables): BUDGET_S (seconds the suite may run before it is stopped; default 500, which
# leaves the 10-minute call time to install the wheels and pack), JOBS (processes at once; default 10), ARMS and
# SEEDS (default: the issue-64 arms rewardflow_official gigpo_official on seeds 0-4), SETTING (hard), MODEL
# (runs/hard_sft/sft_model), WORK (runs/credit_hard), RESULTS (benchmarks/results/credit_learning_hard),
# MAX_RUN_FILES (6, over all suites), SMOKE=1 (the seconds-long smoke budget of credit_learning.py; numbers say
# nothing), SUITES (several suites side by side, see below; default: the one suite of the variables above).
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

# SUITES: one or more suites run side by side, ';'-separated, each
#   "SETTING|ARMS|SEEDS|JOBS|MODEL|WORK|RESULTS|NICE|EXTRA" (ARMS, SEEDS and EXTRA space-separated; NICE the CPU
#   priority of its processes, so that a second suite takes only the cores the first leaves). Default: the one suite
#   of the variables above.
SUITES=${SUITES:-"$SETTING|$ARMS|$SEEDS|$JOBS|$MODEL|$WORK|$RESULTS|0|"}
PIDS=()
WORKS=()
RECORD_DIRS=()
IFS=';' read -ra SUITE_LIST <<< "$SUITES"
for suite in "${SUITE_LIST[@]}"; do
  IFS='|' read -r s_setting s_arms s_seeds s_jobs s_model s_work s_results s_nice s_extra <<< "$suite"
  if [ "${SMOKE:-0}" = 1 ]; then
    s_results="$OUT/smoke_results/credit_learning_$s_setting"
    ARGS=(--smoke --work "$s_work")
  else
    [ -d "$s_model" ] || { say "no pi_SFT at $s_model: carry it (the CPU suite's pi_SFT, checked by its sha256)"; exit 2; }
    ARGS=(--model "$s_model" --work "$s_work" --steps 100)
  fi
  # shellcheck disable=SC2086
  nice -n "${s_nice:-0}" "$PY" -m benchmarks.credit_learning --setting "$s_setting" "${ARGS[@]}" --out "$s_results" \
    --jobs "$s_jobs" --seeds $s_seeds --methods $s_arms -- policy.dtype=float32 $s_extra >> "$LOG" 2>&1 &
  PIDS+=($!)
  WORKS+=("$s_work")
  RECORD_DIRS+=("${s_results}_runs")
  say "suite pid $!: $s_setting, arms [$s_arms] seeds [$s_seeds], $s_jobs at a time (nice ${s_nice:-0})"
done
say "for at most ${BUDGET_S}s"
running() { for p in "${PIDS[@]}"; do kill -0 "$p" 2> /dev/null && return 0; done; return 1; }
waited=0
while running && [ "$waited" -lt "$BUDGET_S" ]; do sleep 5; waited=$((waited + 5)); done
if running; then
  say "budget reached: stopping the suites (their children stop with them and keep their checkpoints)"
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2> /dev/null; done
  for p in "${PIDS[@]}"; do wait "$p"; done
fi
say "suites ended after ${waited}s"

# records of the runs this call finished
NEW=$(find "${RECORD_DIRS[@]}" -name '*.json' -newer "$STAMP" 2> /dev/null)
if [ -n "$NEW" ]; then
  # shellcheck disable=SC2086
  tar -czf "$OUT/records.tgz" $NEW && say "records: $(echo "$NEW" | wc -l) -> records.tgz"
else
  say "no run finished in this call"
fi
rm -f "$STAMP"

# unfinished runs: config, metrics and newest checkpoint, most advanced first (one limit over all suites)
ALSO=()
[ "${#WORKS[@]}" -gt 1 ] && ALSO=(--also "${WORKS[@]:1}")
"$PY" -m benchmarks.gpu_pack "${WORKS[0]}" "$OUT" --limit "$MAX_RUN_FILES" "${ALSO[@]}" >> "$LOG" 2>&1
for w in "${WORKS[@]}"; do
  for f in "$w"/logs/*.log; do [ -f "$f" ] && { echo "== $f"; tail -n 3 "$f"; } >> "$LOG"; done
done
say "done; files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
