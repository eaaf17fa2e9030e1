#!/usr/bin/env bash
# Set up and run the lab on a machine with one CUDA GPU, then regenerate tables (and figures).
#
#   bash run_lab.sh             # Qwen/Qwen3-0.6B with its real weights (needs Hub access)
#   bash run_lab.sh --offline   # models/qwen3-0.6b, dummy weights: no download at all
#
# Env: LAB3_VENV (default .venv); LAB3_NO_VENV=1 uses the current python3 as is (e.g. after
# `source /root/offline-gpu/install.sh activate` on a host without internet).
# Each task skips runs whose results already exist; pass work again with the task's --force.
# Without a GPU (`nvidia-smi -L` lists none) it stops at once, before installing anything.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

PY=python3
MODEL_ARGS=(--model Qwen/Qwen3-0.6B)

usage() {
  # The header comment above, without its '#' marks: it stops at the first line of code.
  awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' run_lab.sh
}

parse_args() {
  for arg in "$@"; do
    case "$arg" in
      --offline) MODEL_ARGS=(--model models/qwen3-0.6b --dummy-weights) ;;
      -h|--help) usage; exit 0 ;;
      *) echo "run_lab.sh: unknown argument $arg (try --help)" >&2; exit 2 ;;
    esac
  done
}

require_gpu() {
  # Before the 8 GB install, not after it: a machine without a GPU learns that in a second.
  if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "run_lab.sh: no CUDA GPU visible (\`nvidia-smi -L\` lists none); the lab needs one." >&2
    echo "run_lab.sh: on a CPU-only machine, run the tests instead: bash run_tests.sh" >&2
    exit 1
  fi
}

setup() {
  if [ "${LAB3_NO_VENV:-0}" = 1 ]; then
    return
  fi
  local venv="${LAB3_VENV:-.venv}"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt
  PY="$venv/bin/python"
}

main() {
  parse_args "$@"
  require_gpu
  setup
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # --scheduler-cls my_scheduler.X in the engine
  "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "run_lab.sh: no CUDA GPU visible")'
  "$PY" harness/offline_model.py
  "$PY" task1_vllm_vs_hf.py "${MODEL_ARGS[@]}"
  LAB3_PYTHON="$PY" bash task2.sh "${MODEL_ARGS[@]}" --no-plot
  LAB3_PYTHON="$PY" bash task3.sh "${MODEL_ARGS[@]}" --no-plot
  "$PY" plot_results.py
}

main "$@"
