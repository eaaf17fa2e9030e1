#!/usr/bin/env bash
# Set up and run the CPU test suite. The first run builds two virtual environments: .venv with
# requirements.txt (about 4 min, 8 GB) and .venv-cpu-serve, a CPU build of vLLM 0.26.0 that the
# end-to-end tests start real servers from (setup_cpu_server.sh; it shares .venv's packages and
# adds about 0.5 GB). The second is
# built only when the e2e tests will run: `-m "not e2e"` (or any -m expression that leaves out the
# e2e marker) skips it.
# Extra arguments go to pytest, e.g. `bash run_tests.sh -k sjf` or `bash run_tests.sh -m "not e2e"`.
# LAB3_TESTS_DRY_RUN=1 prints each step instead of running it (installs nothing, runs no test).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

VENV="${LAB3_VENV:-.venv}"
DRY_RUN="${LAB3_TESTS_DRY_RUN:-0}"

step() {
  # Run a command, or in a dry run print it: the dry run shows what a real run would do.
  if [ "$DRY_RUN" = 1 ]; then
    echo "[run_tests] would run:$(printf ' %q' "$@")"
  else
    "$@"
  fi
}

setup_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    echo "[run_tests] creating $VENV"
    step python3 -m venv "$VENV"
  fi
  echo "[run_tests] installing requirements.txt into $VENV ($(df -h --output=avail . | tail -1 | tr -d ' ') free on disk)"
  step "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-cache-dir -r requirements.txt
}

e2e_selected() {
  # Whether the pytest arguments keep the tests marked e2e. pytest's own parser evaluates the last
  # -m expression (the one pytest uses) for a test whose only marker is e2e. Only -m is read: with
  # -k or a file path the e2e tests may still be deselected, and the server environment is built
  # as before. Anything unexpected (no pytest yet, a parser that moved, a bad expression) answers
  # yes, so the e2e tests never run without their server.
  local py="$VENV/bin/python"
  [ -x "$py" ] || py=python3
  local answer
  answer=$("$py" - "$@" <<'PY' 2>/dev/null || true
import sys

args = sys.argv[1:]
expr = None
for i, arg in enumerate(args):
    if arg == "--":
        break
    if arg == "-m" and i + 1 < len(args):
        expr = args[i + 1]
    elif arg.startswith("-m") and len(arg) > 2:
        expr = arg[2:]
try:
    from _pytest.mark.expression import Expression

    keeps = expr is None or Expression.compile(expr).evaluate(lambda name, **kwargs: name == "e2e")
except Exception:
    keeps = True
print("yes" if keeps else "no")
PY
)
  [ "$answer" != no ]
}

setup_cpu_server() {
  if e2e_selected "$@"; then
    echo "[run_tests] e2e tests selected: building .venv-cpu-serve if needed"
    LAB3_CPU_SERVE_BASE="${LAB3_CPU_SERVE_BASE-$VENV}" step bash setup_cpu_server.sh
  else
    echo "[run_tests] e2e tests deselected: not building .venv-cpu-serve"
  fi
}

main() {
  setup_venv
  setup_cpu_server "$@"
  step "$VENV/bin/python" harness/offline_model.py
  step "$VENV/bin/python" -m pytest -q tests "$@"
}

main "$@"
