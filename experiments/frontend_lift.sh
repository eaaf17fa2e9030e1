#!/usr/bin/env bash
# The front-end study (issue #14): does one API-server process limit a 0.6B model on an H200, do
# several lift the limit, and is the client a limit? Then the scheduler comparison of Task 3 and
# Task 2's budget 2048 in the setting that kept up.
#
#   bash experiments/frontend_lift.sh [--dry-run]
#
# All on one machine, one after another, with the handout's load (random 1024 in / 256 out,
# 1000 prompts, seed 42, --ignore-eos), budget 2048, 256 sequences, RUNS (3) runs per point,
# models/qwen3-0.6b with dummy weights (task2.sh/task3.sh --offline):
#   1. capacity with API_SERVERS (4) API servers at rate inf, the load sent by one client process
#      and split over two (is the client a limit?)          -> results/task2_api-4/
#   2. the same with one API server (the handout's server)    -> results/task2_api-1/
#   3. only if a step-1 run lagged (completeness < 0.99): MORE_API_SERVERS (8) API servers
#                                                              -> results/task2_api-8/
#   4. Task 2 at budget 2048 in the first setting that kept up (N API servers): rate 16 and
#      0.9 x that setting's capacity                           -> results/task2_api-N/
#   5. Task 3 in that setting: default, Strategy A, SJF at the stress rate (0.9 x capacity),
#      fixed and variable-length loads                          -> results/task3_api-N/
# Step 4 comes before step 5 because it needs one server start, not six: a study cut short by a
# time limit still ends with complete points.
# Every run's front-end check is in its file. Done runs are skipped, so a cut-off study resumes;
# the other budgets of Task 2 go into the same folder later (task2.sh --out-dir results/task2_api-N).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RESULTS="${RESULTS:-$ROOT/results}"
API_SERVERS="${API_SERVERS:-4}"
MORE_API_SERVERS="${MORE_API_SERVERS:-8}"
RUNS="${RUNS:-3}"
COMMON=(--offline --runs "$RUNS" --no-plot)

say() {
  echo "[frontend_lift] $(date -u +%H:%M:%S) $*"
}

lab_python() {
  if [ -x "$ROOT/.venv/bin/python" ]; then echo "$ROOT/.venv/bin/python"; else echo python3; fi
}

capacity() {
  # capacity API: Task 2 at budget 2048, rate inf, with API API-server processes.
  local clients="$2"
  bash "$ROOT/task2.sh" "${COMMON[@]}" "${DRY_RUN[@]}" --values 2048 --rates inf \
    --api-servers "$1" --clients "$clients" --out-dir "$RESULTS/task2_api-$1"
}

kept_up() {
  # kept_up FOLDER: true when the folder has runs and every one's completeness is >= 0.99.
  "$(lab_python)" - "$1" <<'PY'
import json, sys
from pathlib import Path
flags = [json.loads(p.read_text())["frontend"]["lagged"] for p in Path(sys.argv[1]).glob("*.json")]
sys.exit(0 if flags and not any(flags) else 1)
PY
}

main() {
  DRY_RUN=()
  [ "${1:-}" = --dry-run ] && DRY_RUN=(--dry-run)
  say "1/5: capacity with $API_SERVERS API servers, 1 and 2 client processes"
  capacity "$API_SERVERS" 1,2
  say "2/5: capacity with 1 API server"
  capacity 1 1
  local api="$API_SERVERS"
  if [ ${#DRY_RUN[@]} -eq 0 ] && ! kept_up "$RESULTS/task2_api-$api"; then
    say "3/5: $api API servers lagged; capacity with $MORE_API_SERVERS"
    api="$MORE_API_SERVERS"
    capacity "$api" 1
  else
    say "3/5: skipped ($api API servers kept up)"
  fi
  local stress
  stress="$(PYTHONPATH="$ROOT" "$(lab_python)" -c 'import sys, sweep
print(sweep.stress_rate(sweep.Path(sys.argv[1]), 256))' "$RESULTS/task3_api-$api")"
  say "4/5: Task 2 at budget 2048 with $api API servers: rate 16 and near saturation"
  bash "$ROOT/task2.sh" "${COMMON[@]}" "${DRY_RUN[@]}" --values 2048 --rates 16 \
    --near-saturation 0.9 --api-servers "$api" --out-dir "$RESULTS/task2_api-$api"
  say "5/5: Task 3 with $api API servers at the stress rate $stress req/s"
  bash "$ROOT/task3.sh" "${COMMON[@]}" "${DRY_RUN[@]}" --api-servers "$api" --rate "$stress" \
    --stress-rate "$stress" --out-dir "$RESULTS/task3_api-$api"
  say "done"
}

main "$@"
