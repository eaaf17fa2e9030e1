#!/usr/bin/env bash
# Unpack what device_study.sh brought back into results/, in the form results/ keeps:
#
#   bash offline_gpu/unpack.sh STUDY_TAR_XZ [RESULTS_DIR]
#
# The server log loses its per-request access lines ("POST /v1/completions ... 200 OK": one per
# request, nothing the analysis reads; the run records count the requests), the engine's control
# and stats files (the run records hold what they said) go, and every log is xz-compressed.
# Re-running it on a newer tarball of the same study replaces the folder's files with the newer ones.
set -euo pipefail
TARBALL="${1:?usage: unpack.sh STUDY_TAR_XZ [RESULTS_DIR]}"
RESULTS="${2:-$(dirname "${BASH_SOURCE[0]}")/../results}"
folder=$(tar -tJf "$TARBALL" | awk -F/ 'NR == 1 {print $1}')  # awk reads it all: head would end tar with SIGPIPE
[ -n "$folder" ] || { echo "[unpack] $TARBALL holds no folder" >&2; exit 2; }
tar -C "$RESULTS" -xJf "$TARBALL"
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
