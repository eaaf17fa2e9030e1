#!/usr/bin/env bash
# Task 3: vLLM's default scheduler vs Strategy A (prefill-first) vs Strategy B1 (SJF).
# The sweep is harness/sweep.py's `task3` subcommand; `bash task3.sh --help` lists every flag.
#   bash task3.sh --offline          # models/qwen3-0.6b with dummy weights
#   bash task3.sh --dry-run          # print every command, run nothing
# Interpreter: LAB3_PYTHON, else the project's .venv, else python3.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${LAB3_PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || command -v "$PY" >/dev/null || PY=python3
exec "$PY" "$ROOT/harness/sweep.py" task3 "$@"
