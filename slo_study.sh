#!/usr/bin/env bash
# Beyond the handout (issue #6): SLO attainment and goodput of each strategy as the request rate
# goes from light to past saturation, on the handout's Task 3 workload and server settings.
#
#   bash slo_study.sh --offline            # models/qwen3-0.6b with dummy weights
#   bash slo_study.sh --dry-run            # print every command, run nothing
#
# One server per strategy; every rate runs on it (prefix cache emptied before each run). The SLO
# (--slo, default TTFT <= 500 ms and mean TPOT <= 50 ms per request) goes to `vllm bench serve
# --goodput`; plot_results.py recomputes attainment and goodput from the per-request data with
# the first 10% of requests dropped, like every other number here. Results:
# results/slo/<strategy>_fixed_rate-<rate>_run-<k>.json.
# A strategy written NAME@MS runs with LAB3_MAX_DECODE_STALL_MS=MS (Strategy C's stall bound),
# tagged NAME-MSms, so several bounds can be compared on one plot. The SLO's TTFT and TPOT go to
# Strategies D and E as LAB3_TTFT_SLO_MS and LAB3_TPOT_SLO_MS (unless set), so they aim at the
# target being measured. With --gpus "0 1" strategies run two at a time in lockstep (see
# sweep_lib.sh): list the two to compare first.
#
#   --strategies "default paced prefill-first" [STRATEGIES]
#   --rates "36 40 44 48" [RATES]
#   --slo "ttft:500 tpot:50" [SLO]   --runs 2 [RUNS]   --num-prompts 600 [NUM_PROMPTS]
#   --input-len 1024 [INPUT_LEN]   --output-len 256 [OUTPUT_LEN]   --seed 42 [SEED]
#   --max-num-batched-tokens 2048 [MNBT]   --max-num-seqs 256 [MAX_NUM_SEQS]
#   --gpu-memory-utilization 0.9 [GPU_MEMORY_UTILIZATION]   --timeout-s 30 [TIMEOUT_S]
#   --model M [MODEL]   --dummy-weights   --offline   --server-extra "..." [SERVER_EXTRA]
#   --out-dir results/slo [OUT_DIR]   --force --dry-run --no-plot   --gpus "0 1" [GPUS]
#   --api-servers 1 [API_SERVERS]   --clients 1 [CLIENTS]
# The defaults fit one 30-minute lease of one H200: they are the study proper as it ran there
# (results/slo): 3 strategies x 4 rates x 2 runs in 26.5 minutes (server start 62-140 s, about
# 55 s a run including the client's 20 s start-up). They compare Strategy E with the default and
# A, at the rates where the default stopped meeting the SLO in the earlier rounds. Strategies C,
# D and SJF ran in the single-GPU round (results/slo_1gpu); add them with --strategies. On this
# fixed-length load SJF admits in arrival order, like the default.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/sweep_lib.sh"

STRATEGIES="${STRATEGIES:-default paced prefill-first}"
RATES="${RATES:-36 40 44 48}"
SLO="${SLO:-ttft:500 tpot:50}"
RUNS="${RUNS:-2}"
NUM_PROMPTS="${NUM_PROMPTS:-600}"
MNBT="${MNBT:-2048}"
TIMEOUT_S="${TIMEOUT_S:-30}"
OUT_DIR="${OUT_DIR:-$LAB3_ROOT/results/slo}"

own_flag() {
  # own_flag ARGS...: this script's own flags (see parse_flags in sweep_lib.sh).
  case "$1" in
    --strategies) require_value "$1" "${2:-}"; STRATEGIES="$2" ;;
    --rates) require_value "$1" "${2:-}"; RATES="$2" ;;
    --slo) require_value "$1" "${2:-}"; SLO="$2" ;;
    --max-num-batched-tokens) require_value "$1" "${2:-}"; MNBT="$2" ;;
    --timeout-s) require_value "$1" "${2:-}"; TIMEOUT_S="$2" ;;
    *) return 0 ;;
  esac
  OWN_SHIFT=2
}

parse_args() {
  parse_flags "$@"
  local spec
  for spec in $STRATEGIES; do
    check_strategy "${spec%@*}"
    if [[ "$spec" == *@* ]]; then
      [[ "${spec#*@}" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "'$spec': the stall bound after @ must be a number of ms"
    fi
  done
  local rate
  for rate in $RATES; do
    [[ "$rate" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--rates: '$rate' is not a request rate"
  done
  [[ "$SLO" =~ ^((ttft|tpot|e2el):[0-9.]+ ?)+$ ]] || die "--slo: '$SLO' is not like 'ttft:500 tpot:50'"
}

slo_term() {
  # slo_term NAME: the value of NAME:VALUE in --slo, or nothing.
  grep -o "$1:[0-9.]*" <<<"$SLO" | cut -d: -f2 || true
}

main() {
  parse_args "$@"
  local rates_csv="${RATES// /,}" ttft tpot
  ttft="$(slo_term ttft)"
  if [ -n "$ttft" ] && [ -z "${LAB3_TTFT_SLO_MS:-}" ]; then
    export LAB3_TTFT_SLO_MS="$ttft"  # read by Strategy D in the servers started below
  fi
  tpot="$(slo_term tpot)"
  if [ -n "$tpot" ] && [ -z "${LAB3_TPOT_SLO_MS:-}" ]; then
    export LAB3_TPOT_SLO_MS="$tpot"  # read by Strategy E
  fi
  local specs=($STRATEGIES) i=0 spec name tag stall user_stall="${LAB3_MAX_DECODE_STALL_MS:-}"
  LOCKSTEP_TOTAL=${#specs[@]}
  for spec in "${specs[@]}"; do
    i=$((i + 1))
    name="${spec%@*}"
    tag="$name"
    if [[ "$spec" == *@* ]]; then
      stall="${spec#*@}"
      tag="$name-${stall}ms"
      export LAB3_MAX_DECODE_STALL_MS="$stall"  # read by Strategy C in this harness's server
    elif [ -n "$user_stall" ]; then
      export LAB3_MAX_DECODE_STALL_MS="$user_stall"
    else
      unset LAB3_MAX_DECODE_STALL_MS
    fi
    echo "[slo_study] strategy $tag ($i/${#specs[@]}): rates $RATES, SLO $SLO"
    start_harness --task slo --tag "$tag" --scheduler "$name" \
      --out-dir "$OUT_DIR" --model "$MODEL" --runs "$RUNS" --timeout-s "$TIMEOUT_S" \
      --goodput "$SLO" --bench-args "$(random_bench_args)" --load "fixed|$rates_csv|" $(harness_args) \
      --server-args "$(server_args "$MNBT")" \
      "${EXTRA_HARNESS[@]}"
  done
  local status=0
  wait_harnesses || status=1
  plot_results
  return "$status"
}

main "$@"
