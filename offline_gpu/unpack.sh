#!/usr/bin/env bash
# Unpack what device_study.sh brought back into results/, in the form results/ keeps:
#
#   bash offline_gpu/unpack.sh STUDY_TAR_XZ [RESULTS_DIR]
#
# The server log loses its per-request access lines ("POST /v1/completions ... 200 OK": one per
# request, nothing the analysis reads; the run records count the requests), the engine's control
# and stats files (the run records hold what they said) go, and every log is xz-compressed.
# Re-running it on a newer tarball of the same study replaces the folder's files with the newer ones.
# It refuses (exit 3, nothing changed) a tarball whose study started afresh on another machine than
# the runs the folder already holds: its study.json would replace the order and hosts of those runs,
# and a compared set must come from one machine; give such a plan a new results_folder instead.
set -euo pipefail
TARBALL="${1:?usage: unpack.sh STUDY_TAR_XZ [RESULTS_DIR]}"
RESULTS="${2:-$(dirname "${BASH_SOURCE[0]}")/../results}"
folder=$(tar -tJf "$TARBALL" | awk -F/ 'NR == 1 {print $1}')  # awk reads it all: head would end tar with SIGPIPE
[ -n "$folder" ] || { echo "[unpack] $TARBALL holds no folder" >&2; exit 2; }
staging=$(mktemp -d "$RESULTS/.unpack.XXXXXX")
trap 'rm -rf "$staging"' EXIT
tar -C "$staging" -xJf "$TARBALL"
held="$RESULTS/$folder/study.json"
came="$staging/$folder/study.json"
if [ -f "$held" ] && [ -f "$came" ]; then
  lost=$(python3 - "$held" "$came" <<'PY'
import json, sys
def boots(path: str) -> set[str]:
    return {host["machine_boot_id"] for host in json.load(open(path)).get("hosts", [])}
print(" ".join(sorted(boots(sys.argv[1]) - boots(sys.argv[2]))))
PY
)
  if [ -n "$lost" ]; then
    echo "[unpack] $RESULTS/$folder holds runs from machine boot $lost, which $TARBALL does not" \
         "continue: its study started afresh on another machine. Nothing was changed; give the plan" \
         "a new results_folder and run it whole on one machine." >&2
    exit 3
  fi
fi
mkdir -p "$RESULTS/$folder"
cp -a "$staging/$folder/." "$RESULTS/$folder/"
logs="$RESULTS/$folder/logs"
if [ -d "$logs" ]; then
  rm -f "$logs/budget_control.json" "$logs/engine_stats.json" "$logs/server.json"
  for log in "$logs"/*server.log; do
    [ -f "$log" ] || continue
    grep -v -E '"(POST|GET) /(v1/|metrics|health)' "$log" > "$log.trimmed" || true
    mv "$log.trimmed" "$log"
  done
  for log in "$logs"/*.log "$logs"/*.csv; do
    [ -f "$log" ] && xz -9 -f "$log"
  done
fi
echo "[unpack] $RESULTS/$folder: $(du -sh "$RESULTS/$folder" | cut -f1)"
