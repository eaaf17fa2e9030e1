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
