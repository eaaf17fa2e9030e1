#!/usr/bin/env bash
# Beyond the handout: SLO attainment and goodput per strategy as the request rate rises.
# The sweep is harness/sweep.py's `slo` subcommand; `bash slo_study.sh --help` lists every flag.
#   bash slo_study.sh --offline          # models/qwen3-0.6b with dummy weights
#   bash slo_study.sh --dry-run          # print every command, run nothing
# Interpreter: LAB3_PYTHON, else the project's .venv, else python3.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${LAB3_PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || command -v "$PY" >/dev/null || PY=python3
exec "$PY" "$ROOT/harness/sweep.py" slo "$@"
