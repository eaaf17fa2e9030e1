#!/usr/bin/env bash
# Task 3: vLLM's default scheduler vs Strategy A (prefill-first) vs Strategy B1 (SJF), each loaded
# into `vllm serve` with --scheduler-cls, under the same loads.
#
#   bash task3.sh                     # real Qwen3-0.6B weights
#   bash task3.sh --offline           # models/qwen3-0.6b with dummy weights
#   bash task3.sh --dry-run           # print every command, run nothing
#
# One server per strategy; every workload runs on it (prefix cache emptied before each run):
#   fixed  : the handout's load, random 1024 in / 256 out, at --rate (8) and at --stress-rate;
#   varlen : input lengths uniform in [0.1, 1.9] x 1024 (--random-range-ratio '{"input": 0.9}'),
#            256 out, at --stress-rate: with all prompts 1024 tokens long SJF cannot differ from FCFS.
# --stress-rate defaults to 90% of the default scheduler's saturation throughput in requests/s
# measured by Task 2 (mnbt-2048, rate inf) in the same setting (results/task3_<name> reads
# results/task2_<name>) when those results exist, else 48 (about 85% of what an
# H200 served with Qwen3-0.6B in a smoke run). Results: results/task3/<strategy>_<workload>_rate-
# <rate>_run-<k>.json; engine-side step statistics of the custom strategies are inside each file.
# A request slower end to end than --timeout-s (30 s) counts as a timeout; failed requests count
# too; neither is dropped from the percentiles.
#
#   --strategies "default prefill-first sjf" [STRATEGIES]   (names: python my_scheduler.py --list)
#   --rate 8 [RATE]   --stress-rate R [STRESS_RATE]   --runs 1 [RUNS]   --num-prompts 1000 [NUM_PROMPTS]
#   --input-len 1024 [INPUT_LEN]   --output-len 256 [OUTPUT_LEN]   --range-ratio 0.9 [RANGE_RATIO]
#   --seed 42 [SEED]   --max-num-batched-tokens 2048 [MNBT]   --max-num-seqs 256 [MAX_NUM_SEQS]
#   --gpu-memory-utilization 0.9 [GPU_MEMORY_UTILIZATION]   --timeout-s 30 [TIMEOUT_S]
#   --workloads "fixed varlen" [WORKLOADS]   --model M [MODEL]   --dummy-weights   --offline
#   --server-extra "..." [SERVER_EXTRA]   --out-dir results/task3 [OUT_DIR]   --force --dry-run --no-plot
#   --api-servers 1 [API_SERVERS]  API-server processes (one lags near a 0.6B model's capacity)
#   --clients 1 [CLIENTS]  client processes each load is split over (e.g. "1,2": both)
#   --gpus "0 1" [GPUS]  run one strategy per listed GPU at once (default: one after another)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/sweep_lib.sh"

STRATEGIES="${STRATEGIES:-default prefill-first sjf}"
WORKLOADS="${WORKLOADS:-fixed varlen}"
RATE="${RATE:-8}"
STRESS_RATE="${STRESS_RATE:-}"
RUNS="${RUNS:-1}"
NUM_PROMPTS="${NUM_PROMPTS:-1000}"
RANGE_RATIO="${RANGE_RATIO:-0.9}"
MNBT="${MNBT:-2048}"
TIMEOUT_S="${TIMEOUT_S:-30}"
OUT_DIR="${OUT_DIR:-$LAB3_ROOT/results/task3}"
FALLBACK_STRESS_RATE=48

own_flag() {
  # own_flag ARGS...: this script's own flags (see parse_flags in sweep_lib.sh).
  case "$1" in
    --strategies) require_value "$1" "${2:-}"; STRATEGIES="$2" ;;
    --workloads) require_value "$1" "${2:-}"; WORKLOADS="$2" ;;
    --rate) require_value "$1" "${2:-}"; RATE="$2" ;;
    --stress-rate) require_value "$1" "${2:-}"; STRESS_RATE="$2" ;;
    --range-ratio) require_value "$1" "${2:-}"; RANGE_RATIO="$2" ;;
    --max-num-batched-tokens) require_value "$1" "${2:-}"; MNBT="$2" ;;
    --timeout-s) require_value "$1" "${2:-}"; TIMEOUT_S="$2" ;;
    *) return 0 ;;
  esac
  OWN_SHIFT=2
}

parse_args() {
  parse_flags "$@"
  for s in $STRATEGIES; do
    check_strategy "$s"
  done
  for w in $WORKLOADS; do
    case "$w" in fixed|varlen) ;; *) die "unknown workload '$w' (fixed, varlen)" ;; esac
  done
}

capacity_folder() {
  # The Task 2 folder measured in the same setting as OUT_DIR: results/task3_<name> reads
  # results/task2_<name> (e.g. task3_api-4 and task2_api-4), results/task3 reads results/task2.
  local name
  name="$(basename "$OUT_DIR")"
  echo "$(dirname "$OUT_DIR")/task2${name#task3}"
}

stress_rate() {
  # 90% of the default scheduler's measured saturation (Task 2, budget 2048, rate inf), if any.
  if [ -n "$STRESS_RATE" ]; then
    echo "$STRESS_RATE"
  else
    capacity_rate "$(capacity_folder)" mnbt-2048 0.9 "$FALLBACK_STRESS_RATE"
  fi
}

fixed_rates() {
  # fixed_rates STRESS: the fixed load's rates, RATE then STRESS, once each (--rate equal to the
  # stress rate runs the stress point only).
  if [ "$RATE" = "$1" ]; then echo "$1"; else echo "$RATE,$1"; fi
}

main() {
  parse_args "$@"
  local stress
  stress="$(stress_rate)"
  local loads=()
  for w in $WORKLOADS; do
    case "$w" in
      fixed) loads+=(--load "fixed|$(fixed_rates "$stress")|") ;;
      varlen) loads+=(--load "varlen-$RANGE_RATIO|$stress|--random-range-ratio '{\"input\": $RANGE_RATIO, \"output\": 0.0}'") ;;
    esac
  done
  local strategies=($STRATEGIES) i=0
  LOCKSTEP_TOTAL=${#strategies[@]}
  for s in "${strategies[@]}"; do
    i=$((i + 1))
    echo "[task3] strategy $s ($i/${#strategies[@]}): workloads $WORKLOADS; rates $RATE and $stress (stress)"
    start_harness --task task3 --tag "$s" --scheduler "$s" --out-dir "$OUT_DIR" --model "$MODEL" \
      --runs "$RUNS" --timeout-s "$TIMEOUT_S" --bench-args "$(random_bench_args)" "${loads[@]}" \
      $(harness_args) \
      --server-args "$(server_args "$MNBT")" \
      "${EXTRA_HARNESS[@]}"
  done
  local status=0
  wait_harnesses || status=1
  plot_results
  return "$status"
}

main "$@"
