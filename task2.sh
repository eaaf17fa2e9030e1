#!/usr/bin/env bash
# Task 2: sweep vLLM's max_num_batched_tokens (one server per value, rates 16 and inf).
# The sweep is harness/sweep.py's `task2` subcommand; `bash task2.sh --help` lists every flag.
#   bash task2.sh --offline          # models/qwen3-0.6b with dummy weights
#   bash task2.sh --dry-run          # print every command, run nothing
# Interpreter: LAB3_PYTHON, else the project's .venv, else python3.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${LAB3_PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || command -v "$PY" >/dev/null || PY=python3
exec "$PY" "$ROOT/harness/sweep.py" task2 "$@"
