# Shared shell code for task2.sh, task3.sh and slo_study.sh; source it, do not run it.
#
# start_harness runs serve_bench.py (which starts, uses and always stops one vllm server) as a
# child, at most one per GPU slot at a time, and forward_signal passes Ctrl-C / SIGTERM on to every
# running child, so an interrupted sweep never leaves a server holding a GPU.
#
# GPU slots: with GPUS empty (the default) configurations run one after another on whatever GPU
# the environment gives; with GPUS="0 1" two run at once, each with CUDA_VISIBLE_DEVICES set to
# its own device (one server per GPU, e.g. on a 2-GPU host, to halve the wall time of a sweep).
#
# Lockstep: servers on one host share its CPUs, and at these rates a server's front end is
# CPU-bound, so a run measured next to a busy neighbour is slower than one measured alone (the
# first 2-GPU session showed it: see README). With several slots, configurations therefore run
# in waves of one per slot, and the runs of a wave start together (serve_bench.py --sync-dir):
# configurations compared within a wave saw the same neighbour. The calling script sets
# LOCKSTEP_TOTAL (its number of configurations) before the first start_harness; LOCKSTEP=0
# turns lockstep off.

LAB3_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
GPUS="${GPUS:-}"
# Defaults of the flags parse_common_flag reads (the handout's settings), each overridable by the
# env var of the same name; a sweep sets its own RUNS, NUM_PROMPTS and OUT_DIR.
INPUT_LEN="${INPUT_LEN:-1024}"
OUTPUT_LEN="${OUTPUT_LEN:-256}"
SEED="${SEED:-42}"
MAX_NUM_SEQS="${MAX_NUM_SEQS:-256}"
GPU_MEMORY_UTILIZATION="${GPU_MEMORY_UTILIZATION:-0.9}"
MODEL="${MODEL:-Qwen/Qwen3-0.6B}"
DUMMY_WEIGHTS="${DUMMY_WEIGHTS:-0}"
SERVER_EXTRA="${SERVER_EXTRA:-}"
API_SERVERS="${API_SERVERS:-1}"
CLIENTS="${CLIENTS:-1}"
EXTRA_HARNESS=()
PLOT=1
declare -A SLOT_PID=()
FAILED_CONFIGS=0
LOCKSTEP="${LOCKSTEP:-1}"
LOCKSTEP_TOTAL=""
HARNESS_INDEX=0
SYNC_ROOT=""

die() {
  echo "$(basename "$0"): $*" >&2
  exit 2
}

usage() {
  # The calling script's header comment, up to its `set -euo`.
  sed -n '2,/^set -euo/p' "$0" | grep '^#' | cut -c3-
}

check_strategy() {
  # check_strategy NAME: a name my_scheduler.py resolves, else stop before any server starts.
  "$(lab_python)" "$LAB3_ROOT/my_scheduler.py" --resolve "$1" >/dev/null 2>&1 \
    || die "unknown strategy '$1' (python my_scheduler.py --list shows the names)"
}

lab_python() {
  # The interpreter that has vLLM: LAB3_PYTHON, else the project's .venv, else python3.
  if [ -n "${LAB3_PYTHON:-}" ]; then
    echo "$LAB3_PYTHON"
  elif [ -x "$LAB3_ROOT/.venv/bin/python" ]; then
    echo "$LAB3_ROOT/.venv/bin/python"
  else
    echo python3
  fi
}

slots() {
  # The GPU slots: the ids in GPUS, or one slot named "any" that leaves CUDA_VISIBLE_DEVICES alone.
  if [ -n "$GPUS" ]; then echo $GPUS; else echo any; fi
}

forward_signal() {
  local sig="$1" pid
  for pid in "${SLOT_PID[@]}"; do
    kill -"$sig" "$pid" 2>/dev/null || true
  done
  for pid in "${SLOT_PID[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  [ -z "$SYNC_ROOT" ] || rm -rf "$SYNC_ROOT"
  echo "$(basename "$0"): interrupted; finished runs are kept, re-run to resume" >&2
  exit 130
}

reap_slot() {
  # reap_slot SLOT: if the slot's harness has ended, collect its exit code and free the slot.
  local slot="$1" pid="${SLOT_PID[$1]:-}" code=0
  [ -n "$pid" ] || return 0
  kill -0 "$pid" 2>/dev/null && return 1
  wait "$pid" || code=$?
  unset "SLOT_PID[$slot]"
  if [ "$code" -ne 0 ]; then
    FAILED_CONFIGS=$((FAILED_CONFIGS + 1))
    echo "$(basename "$0"): a configuration failed (exit code $code); the sweep goes on" >&2
  fi
  return 0
}

tag_of() {
  # The value after --tag in a harness command line.
  while [ $# -gt 1 ]; do
    [ "$1" = --tag ] && { echo "$2"; return; }
    shift
  done
}

lockstep_on() {
  # Lockstep applies: not turned off, several slots, and the script said how many configs.
  local slots_list=($(slots))
  [ "$LOCKSTEP" != 0 ] && [ "${#slots_list[@]}" -ge 2 ] && [ -n "$LOCKSTEP_TOTAL" ]
}

lockstep_args() {
  # lockstep_args INDEX: the serve_bench.py flags that put configuration INDEX (0-based) into
  # its wave: wave INDEX / slots, of size min(slots, configurations left).
  local slots_list=($(slots)) n wave size
  n=${#slots_list[@]}
  wave=$(($1 / n))
  size=$((LOCKSTEP_TOTAL - wave * n))
  [ "$size" -le "$n" ] || size=$n
  echo "--sync-dir $SYNC_ROOT/wave-$wave --sync-parties $size"
}

start_harness() {
  # start_harness ARGS...: one server configuration, on the first free slot (waits for one).
  trap 'forward_signal TERM' TERM
  trap 'forward_signal INT' INT
  local slot
  if lockstep_on; then
    [ -n "$SYNC_ROOT" ] || SYNC_ROOT="$(mktemp -d "${TMPDIR:-/tmp}/lab3-lockstep.XXXXXX")"
    set -- "$@" $(lockstep_args "$HARNESS_INDEX")
  fi
  HARNESS_INDEX=$((HARNESS_INDEX + 1))
  while true; do
    for slot in $(slots); do
      if reap_slot "$slot"; then
        if [ "$slot" = any ]; then
          "$(lab_python)" "$LAB3_ROOT/serve_bench.py" "$@" &
        else
          echo "[$(basename "$0")] GPU $slot: $(tag_of "$@")"
          CUDA_VISIBLE_DEVICES="$slot" LAB3_GPU_SLOTS="$GPUS" \
            "$(lab_python)" "$LAB3_ROOT/serve_bench.py" "$@" &
        fi
        SLOT_PID[$slot]=$!
        return 0
      fi
    done
    sleep 1
  done
}

wait_harnesses() {
  # Wait for every configuration; fails if any of them failed.
  local slot
  for slot in $(slots); do
    while ! reap_slot "$slot"; do sleep 1; done
  done
  trap - TERM INT
  [ -z "$SYNC_ROOT" ] || rm -rf "$SYNC_ROOT"
  [ "$FAILED_CONFIGS" -eq 0 ]
}

require_value() {
  # require_value FLAG VALUE: a flag that takes a value got one.
  [ -n "${2:-}" ] || die "$1 needs a value"
}

parse_common_flag() {
  # parse_common_flag ARGS...: a flag both sweeps take. Sets the variable it names and
  # COMMON_SHIFT to the number of words used; COMMON_SHIFT=0 means "not a common flag".
  COMMON_SHIFT=2
  case "$1" in
    --runs) require_value "$1" "${2:-}"; RUNS="$2" ;;
    --num-prompts) require_value "$1" "${2:-}"; NUM_PROMPTS="$2" ;;
    --input-len) require_value "$1" "${2:-}"; INPUT_LEN="$2" ;;
    --output-len) require_value "$1" "${2:-}"; OUTPUT_LEN="$2" ;;
    --seed) require_value "$1" "${2:-}"; SEED="$2" ;;
    --max-num-seqs) require_value "$1" "${2:-}"; MAX_NUM_SEQS="$2" ;;
    --gpu-memory-utilization) require_value "$1" "${2:-}"; GPU_MEMORY_UTILIZATION="$2" ;;
    --model) require_value "$1" "${2:-}"; MODEL="$2" ;;
    --server-extra) require_value "$1" "${2:-}"; SERVER_EXTRA="$2" ;;
    --api-servers) require_value "$1" "${2:-}"; API_SERVERS="$2" ;;
    --clients) require_value "$1" "${2:-}"; CLIENTS="$2" ;;
    --out-dir) require_value "$1" "${2:-}"; OUT_DIR="$2" ;;
    --gpus) require_value "$1" "${2:-}"; GPUS="$2" ;;
    *)
      COMMON_SHIFT=1
      case "$1" in
        --dummy-weights) DUMMY_WEIGHTS=1 ;;
        --offline) MODEL="$LAB3_ROOT/models/qwen3-0.6b"; DUMMY_WEIGHTS=1 ;;
        --force) EXTRA_HARNESS+=(--force) ;;
        --dry-run) EXTRA_HARNESS+=(--dry-run); PLOT=0 ;;
        --no-plot) PLOT=0 ;;
        *) COMMON_SHIFT=0 ;;
      esac
      ;;
  esac
}

parse_flags() {
  # parse_flags ARGS...: every flag of a sweep. The calling script's own flags go to its
  # own_flag function, which sets OWN_SHIFT to the words it used (0: not one of its flags);
  # the rest go to parse_common_flag; anything else is an error.
  while [ $# -gt 0 ]; do
    case "$1" in -h|--help) usage; exit 0 ;; esac
    OWN_SHIFT=0
    own_flag "$@"
    if [ "$OWN_SHIFT" -eq 0 ]; then
      parse_common_flag "$@"
      [ "$COMMON_SHIFT" -gt 0 ] || die "unknown argument $1 (see --help)"
      OWN_SHIFT=$COMMON_SHIFT
    fi
    shift "$OWN_SHIFT"
  done
  finish_common_flags
}

server_args() {
  # server_args BUDGET: the `vllm serve` flags of every sweep, with max_num_batched_tokens BUDGET.
  echo "--max-num-batched-tokens $1 --max-num-seqs $MAX_NUM_SEQS --gpu-memory-utilization $GPU_MEMORY_UTILIZATION $SERVER_EXTRA"
}

random_bench_args() {
  # The `vllm bench serve` flags of the handout's random workload (a load may add its own);
  # prompts and seed go to the harness as numbers (harness_args), which splits them over clients.
  echo "--dataset-name random --random-input-len $INPUT_LEN --random-output-len $OUTPUT_LEN --ignore-eos"
}

harness_args() {
  # The serve_bench.py flags every sweep passes: prompts, seed, API servers, client processes.
  echo "--num-prompts $NUM_PROMPTS --seed $SEED --api-servers $API_SERVERS --clients $CLIENTS"
}

capacity_rate() {
  # capacity_rate FOLDER TAG FRACTION FALLBACK: FRACTION x the median rate-inf throughput of the
  # runs <TAG>_rate-inf_run-*.json in FOLDER, in requests/s of OUTPUT_LEN tokens; FALLBACK if none.
  "$(lab_python)" - "$1" "$2" "$3" "$OUTPUT_LEN" "$4" <<'PY'
import json, statistics, sys
from pathlib import Path
folder, tag, fraction, output_len, fallback = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
tputs = [json.loads(p.read_text())["summary"]["output_throughput_tok_s"]
         for p in sorted(folder.glob(f"{tag}_rate-inf_run-*.json"))]
print(f"{fraction * statistics.median(tputs) / output_len:.0f}" if tputs else fallback)
PY
}

finish_common_flags() {
  [ "$DUMMY_WEIGHTS" = 1 ] && EXTRA_HARNESS+=(--dummy-weights)
  [[ "$API_SERVERS" =~ ^[1-9][0-9]*$ ]] || die "--api-servers: '$API_SERVERS' is not a positive integer"
  [[ "$CLIENTS" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || die "--clients: '$CLIENTS' is not a list of positive integers"
  local gpu
  for gpu in $GPUS; do
    [[ "$gpu" =~ ^[0-9]+$ ]] || die "--gpus: '$gpu' is not a device index"
  done
  return 0
}

plot_results() {
  # Tables and figures from the results folder above OUT_DIR, unless --no-plot / --dry-run.
  if [ "$PLOT" = 1 ]; then
    "$(lab_python)" "$LAB3_ROOT/plot_results.py" --results "$(dirname "$OUT_DIR")"
  fi
}
