#!/usr/bin/env bash
# A study on a GPU host without internet, one device call at a time (each call at most 10 min).
#
#   bash offline_gpu/device_study.sh PLAN [UNTIL_S]
#
# Each call stages the kit's parts it carried (.offline-gpu/part-*, see README.md beside this);
# once every part is staged it activates vLLM and runs the plan's pending runs
# (harness/study.py) for at most UNTIL_S seconds (default 540), leaving the server up for the next
# call, which attaches to it (or, for a plan with other server settings, stops it and starts its
# own). Results go to /root/lab3-results/<results_folder> on the host and, after every call that
# ran, into $OUT/study.tar.xz (the device tool brings $OUT back):
# unpack it into results/. Exit code: 0 when the study is complete, 3 when runs are left, 4 when
# parts are still missing; anything else is a failure (the study stops its server then).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PLAN="${1:?usage: device_study.sh PLAN [UNTIL_S]}"
UNTIL_S="${2:-540}"
RESULTS=/root/lab3-results
STAGE=/root/offline-gpu
PACKED="${OUT:?OUT is not set: this runs under the device tool, which sets it}/study.tar.xz"

if compgen -G ".offline-gpu/part-*" >/dev/null; then
  bash .offline-gpu/install.sh stage .offline-gpu || true  # says how many parts are staged
fi
if ! bash "$STAGE/install.sh" status >/dev/null 2>&1; then
  echo "[device_study] parts still missing; carry the next one"
  exit 4
fi
# shellcheck source=/dev/null
source "$STAGE/install.sh" activate
export PYTHONPATH="$PWD:$PYTHONPATH"  # prepend: the vLLM bundle is on PYTHONPATH too
export PYTHONUNBUFFERED=1
folder=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["results_folder"])' "$PLAN")
rc=0
# One server state for every plan: a plan attaches to the server the last call or the last plan left
# up where its server settings match (an anchor's, for its near-saturation study), and stops it
# otherwise, so two servers never hold the GPU at once.
python3 -m harness.study run "$PLAN" --results "$RESULTS" --until-s "$UNTIL_S" --keep-server \
  --server-state "$RESULTS/.server.json" || rc=$?
if [ -d "$RESULTS/$folder" ]; then
  tar -C "$RESULTS" --exclude="$folder/datasets" -cJf "$PACKED" "$folder"  # a heavy load's draws are rebuilt from their seeds
  echo "[device_study] packed $folder into $PACKED ($(du -h "$PACKED" | cut -f1))"
fi
exit "$rc"
