#!/usr/bin/env bash
# Set up and run the CPU test suite. The first run builds two virtual environments: .venv with
# requirements.txt (about 4 min, 8 GB) and .venv-cpu-serve, a CPU build of vLLM 0.26.0 that the
# end-to-end tests start real servers from (setup_cpu_server.sh; about 3 min, 6 GB).
# Extra arguments go to pytest, e.g. `bash run_tests.sh -k sjf` or `bash run_tests.sh -m "not e2e"`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

VENV="${LAB3_VENV:-.venv}"

setup_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    echo "[run_tests] creating $VENV"
    python3 -m venv "$VENV"
  fi
  echo "[run_tests] installing requirements.txt into $VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt
}

main() {
  setup_venv
  bash setup_cpu_server.sh
  "$VENV/bin/python" offline_model.py
  "$VENV/bin/python" -m pytest -q tests "$@"
}

main "$@"
