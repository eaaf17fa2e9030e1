#!/usr/bin/env bash
# Task 2: sweep vLLM's max_num_batched_tokens with `vllm serve` + `vllm bench serve`.
#
#   bash task2.sh                          # the handout's settings, real Qwen3-0.6B weights
#   bash task2.sh --offline                # models/qwen3-0.6b with dummy weights
#   bash task2.sh --dry-run                # print every command, run nothing
#
# One server per value; for each value every rate in --rates runs --runs times. Results:
# results/task2/mnbt-<value>_rate-<rate>_run-<k>.json (existing ones are skipped; --force redoes).
# Defaults follow the handout (random 1024 in / 256 out, seed 42, 1000 prompts, rate 16, 2 runs,
# --max-num-seqs 256, --gpu-memory-utilization 0.9, --ignore-eos); rate inf is added because an
# H200 is not loaded by rate 16 with a 0.6B model. Every flag also reads an env var (in brackets).
#
#   --values "512 1024 2048 4096 8192"  [VALUES]    --rates 16,inf     [RATES]
#   --runs 2                            [RUNS]      --num-prompts 1000 [NUM_PROMPTS]
#   --input-len 1024 [INPUT_LEN]   --output-len 256 [OUTPUT_LEN]   --seed 42 [SEED]
#   --max-num-seqs 256 [MAX_NUM_SEQS]   --gpu-memory-utilization 0.9 [GPU_MEMORY_UTILIZATION]
#   --model Qwen/Qwen3-0.6B [MODEL]     --dummy-weights [DUMMY_WEIGHTS=1]   --offline
#   --server-extra "..." [SERVER_EXTRA] extra vllm serve flags (e.g. --enforce-eager)
#   --out-dir results/task2 [OUT_DIR]   --force   --dry-run   --no-plot
#   --gpus "0 1" [GPUS]  run one value per listed GPU at once (default: one after another)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/sweep_lib.sh"

VALUES="${VALUES:-512 1024 2048 4096 8192}"
RATES="${RATES:-16,inf}"
RUNS="${RUNS:-2}"
NUM_PROMPTS="${NUM_PROMPTS:-1000}"
OUT_DIR="${OUT_DIR:-$LAB3_ROOT/results/task2}"

own_flag() {
  # own_flag ARGS...: this script's own flags (see parse_flags in sweep_lib.sh).
  case "$1" in
    --values) require_value "$1" "${2:-}"; VALUES="$2" ;;
    --rates) require_value "$1" "${2:-}"; RATES="$2" ;;
    *) return 0 ;;
  esac
  OWN_SHIFT=2
}

parse_args() {
  parse_flags "$@"
  for v in $VALUES; do
    [[ "$v" =~ ^[0-9]+$ ]] || die "--values: '$v' is not a positive integer"
  done
}

main() {
  parse_args "$@"
  local values=($VALUES) i=0
  LOCKSTEP_TOTAL=${#values[@]}
  for v in "${values[@]}"; do
    i=$((i + 1))
    echo "[task2] max_num_batched_tokens=$v ($i/${#values[@]}), rates $RATES, $RUNS run(s) each"
    start_harness --task task2 --tag "mnbt-$v" --out-dir "$OUT_DIR" --model "$MODEL" \
      --workload "random-${INPUT_LEN}in-${OUTPUT_LEN}out" --rates "$RATES" --runs "$RUNS" \
      --server-args "$(server_args "$v")" \
      --bench-args "$(random_bench_args)" \
      "${EXTRA_HARNESS[@]}"
  done
  local status=0
  wait_harnesses || status=1
  plot_results
  return "$status"
}

main "$@"
