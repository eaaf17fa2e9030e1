# Shared shell code for task2.sh and task3.sh; source it, do not run it.
#
# run_harness runs serve_bench.py (which starts, uses and always stops one vllm server) as a child
# and forwards Ctrl-C / SIGTERM to it, so an interrupted sweep never leaves a server holding the GPU.

LAB3_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HARNESS_PID=""

die() {
  echo "$(basename "$0"): $*" >&2
  exit 2
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

forward_signal() {
  local sig="$1"
  if [ -n "$HARNESS_PID" ] && kill -0 "$HARNESS_PID" 2>/dev/null; then
    kill -"$sig" "$HARNESS_PID" 2>/dev/null || true
    wait "$HARNESS_PID" 2>/dev/null || true
  fi
  echo "$(basename "$0"): interrupted; finished runs are kept, re-run to resume" >&2
  exit 130
}

run_harness() {
  # run_harness ARGS...: one server configuration; returns the harness's exit code.
  trap 'forward_signal TERM' TERM
  trap 'forward_signal INT' INT
  "$(lab_python)" "$LAB3_ROOT/serve_bench.py" "$@" &
  HARNESS_PID=$!
  local code=0
  wait "$HARNESS_PID" || code=$?
  HARNESS_PID=""
  trap - TERM INT
  return "$code"
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
    --out-dir) require_value "$1" "${2:-}"; OUT_DIR="$2" ;;
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

finish_common_flags() {
  [ "$DUMMY_WEIGHTS" = 1 ] && EXTRA_HARNESS+=(--dummy-weights)
  return 0
}

plot_results() {
  # Tables and figures from the results folder above OUT_DIR, unless --no-plot / --dry-run.
  if [ "$PLOT" = 1 ]; then
    "$(lab_python)" "$LAB3_ROOT/plot_results.py" --results "$(dirname "$OUT_DIR")"
  fi
}
