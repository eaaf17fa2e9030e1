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
# --near-saturation FRACTION first measures the capacity (budget 2048 at rate inf), then adds the
# Poisson rate FRACTION x capacity (requests/s) to every budget's rates: one load near saturation.
# --api-servers N serves with N API-server processes: one Python front end lags
# behind the engine near a 0.6B model's capacity (see README, "The front end").
#
#   --values "512 1024 2048 4096 8192"  [VALUES]    --rates 16,inf     [RATES]
#   --runs 2                            [RUNS]      --num-prompts 1000 [NUM_PROMPTS]
#   --input-len 1024 [INPUT_LEN]   --output-len 256 [OUTPUT_LEN]   --seed 42 [SEED]
#   --max-num-seqs 256 [MAX_NUM_SEQS]   --gpu-memory-utilization 0.9 [GPU_MEMORY_UTILIZATION]
#   --model Qwen/Qwen3-0.6B [MODEL]     --dummy-weights [DUMMY_WEIGHTS=1]   --offline
#   --server-extra "..." [SERVER_EXTRA] extra vllm serve flags (e.g. --enforce-eager)
#   --out-dir results/task2 [OUT_DIR]   --force   --dry-run   --no-plot
#   --near-saturation 0.9 [NEAR_SATURATION]   --api-servers 1 [API_SERVERS]
#   --clients 1 [CLIENTS]  client processes each load is split over (e.g. "1,2": both)
#   --gpus "0 1" [GPUS]  run one value per listed GPU at once (default: one after another)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/sweep_lib.sh"

VALUES="${VALUES:-512 1024 2048 4096 8192}"
RATES="${RATES:-16,inf}"
RUNS="${RUNS:-2}"
NUM_PROMPTS="${NUM_PROMPTS:-1000}"
OUT_DIR="${OUT_DIR:-$LAB3_ROOT/results/task2}"
NEAR_SATURATION="${NEAR_SATURATION:-}"
CAPACITY_BUDGET=2048

own_flag() {
  # own_flag ARGS...: this script's own flags (see parse_flags in sweep_lib.sh).
  case "$1" in
    --values) require_value "$1" "${2:-}"; VALUES="$2" ;;
    --rates) require_value "$1" "${2:-}"; RATES="$2" ;;
    --near-saturation) require_value "$1" "${2:-}"; NEAR_SATURATION="$2" ;;
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

budget_harness() {
  # budget_harness VALUE RATES: one max_num_batched_tokens value's configuration.
  start_harness --task task2 --tag "mnbt-$1" --out-dir "$OUT_DIR" --model "$MODEL" \
    --workload "random-${INPUT_LEN}in-${OUTPUT_LEN}out" --rates "$2" --runs "$RUNS" \
    --server-args "$(server_args "$1")" \
    --bench-args "$(random_bench_args)" $(harness_args) \
    "${EXTRA_HARNESS[@]}"
}

near_saturation_rate() {
  # Measure the capacity at budget CAPACITY_BUDGET (rate inf; done runs are skipped), then print
  # NEAR_SATURATION x that capacity in requests/s.
  echo "[task2] capacity first: max_num_batched_tokens=$CAPACITY_BUDGET at rate inf" >&2
  budget_harness "$CAPACITY_BUDGET" inf >&2
  wait_harnesses >&2 || die "the capacity runs failed"
  local rate
  rate="$(capacity_rate "$OUT_DIR" "mnbt-$CAPACITY_BUDGET" "$NEAR_SATURATION" none)"
  [ "$rate" != none ] || [[ " ${EXTRA_HARNESS[*]} " == *" --dry-run "* ]] \
    || die "no capacity measured in $OUT_DIR"
  echo "[task2] near saturation: ${NEAR_SATURATION} x capacity = $rate requests/s" >&2
  echo "$rate"
}

main() {
  parse_args "$@"
  local rates="$RATES" near
  if [ -n "$NEAR_SATURATION" ]; then
    near="$(near_saturation_rate)"
    [ "$near" = none ] || rates="$rates,$near"
  fi
  local values=($VALUES) i=0
  LOCKSTEP_TOTAL=${#values[@]}
  for v in "${values[@]}"; do
    i=$((i + 1))
    echo "[task2] max_num_batched_tokens=$v ($i/${#values[@]}), rates $rates, $RUNS run(s) each"
    budget_harness "$v" "$rates"
  done
  local status=0
  wait_harnesses || status=1
  plot_results
  return "$status"
}

main "$@"
