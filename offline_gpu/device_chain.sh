#!/usr/bin/env bash
# Several study plans in one device call, in order, sharing the call's time:
#
#   bash offline_gpu/device_chain.sh UNTIL_S PLAN [PLAN ...]
#
# Each plan runs through device_study.sh with the seconds left of UNTIL_S (counted from this
# script's start). The same command serves every call of a sitting: a plan whose runs are all on
# the host is skipped at once, the first plan with runs left continues, and a plan that ends with
# runs left (exit 3) or with parts still missing (exit 4) ends the call with that exit code. Each
# plan that ran is packed into $OUT/<results_folder>.tar.xz for offline_gpu/unpack.sh. Why: a plan
# that needs another's results (a near-saturation rate taken from an anchor) must run after it on
# the same machine, and a call should not sit idle for want of the next command.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
UNTIL_S="${1:?usage: device_chain.sh UNTIL_S PLAN [PLAN ...]}"
shift
[ "$#" -gt 0 ] || { echo "usage: device_chain.sh UNTIL_S PLAN [PLAN ...]" >&2; exit 2; }
: "${OUT:?OUT is not set: this runs under the device tool, which sets it}"
DONE_LIST="${LAB3_CHAIN_DONE:-/root/lab3-results/.chain-done}"  # plans that finished on this machine
MIN_START_S=200

for plan in "$@"; do
  [ -f "$plan" ] || { echo "[device_chain] no plan $plan" >&2; exit 2; }
  folder=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["results_folder"])' "$plan")
  if [ -f "$DONE_LIST" ] && grep -qxF "$folder" "$DONE_LIST"; then
    echo "[device_chain] $plan: done in an earlier call"
    continue
  fi
  left=$((UNTIL_S - SECONDS))
  if [ "$left" -lt "$MIN_START_S" ]; then  # a server's start alone may take this long
    echo "[device_chain] $plan: only $left s left of $UNTIL_S; the next call starts it"
    exit 3
  fi
  echo "[device_chain] $plan: $left s left of $UNTIL_S"
  rc=0
  bash offline_gpu/device_study.sh "$plan" "$left" || rc=$?
  if [ -f "$OUT/study.tar.xz" ]; then
    mv "$OUT/study.tar.xz" "$OUT/$folder.tar.xz"
  fi
  if [ "$rc" -ne 0 ]; then
    exit "$rc"
  fi
  mkdir -p "$(dirname "$DONE_LIST")"
  echo "$folder" >> "$DONE_LIST"
done
echo "[device_chain] every plan is done"
