#!/usr/bin/env bash
# Set up (first time: a virtual environment with requirements.txt, about 4 min and 8 GB) and run
# the CPU test suite. Extra arguments go to pytest, e.g. `bash run_tests.sh -k sjf`.
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
  "$VENV/bin/python" offline_model.py
  "$VENV/bin/python" -m pytest -q tests "$@"
}

main "$@"
