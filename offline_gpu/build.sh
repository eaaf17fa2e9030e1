#!/bin/bash
# Build an offline install bundle of vLLM 0.26.0 for a GPU host that has no internet.
#
# The target host must already have Python 3.12, torch 2.11.0 (CUDA 13), transformers, numpy,
# aiohttp, pillow and the usual scientific stack; wheels.txt lists everything else vLLM needs.
# The bundle is a site-packages folder (xz-compressed tar) split into parts of PART_MB megabytes,
# so that it can be moved to the host in pieces.
#
#   bash offline_gpu/build.sh [OUT_DIR [PART_MB]]   # default OUT_DIR: .offline-gpu at the project
#                                                   # root (git-ignored); PART_MB: 32
#
# Wheels are cached in LAB3_OFFLINE_GPU_CACHE (default ~/.cache/offline-gpu-wheels).
#
# wheels.txt and install.sh are read from this script's own folder, whatever the current directory.
# Output: OUT_DIR/part-00, part-01, ..., OUT_DIR/SHA256SUMS and a copy of install.sh. On the GPU host:
#   bash OUT_DIR/install.sh stage OUT_DIR        # copy the parts present to /root/offline-gpu/parts
#                                                # (and the script itself to /root/offline-gpu/install.sh)
#   source /root/offline-gpu/install.sh activate # once all parts are staged: unpack (once), set env
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${1:-$(dirname "$HERE")/.offline-gpu}"
PART_MB="${2:-32}"  # a part plus the repository (25 MB of results) under a 64 MiB transfer
CACHE="${LAB3_OFFLINE_GPU_CACHE:-$HOME/.cache/offline-gpu-wheels}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

PLAT=(--python-version 3.12 --implementation cp --only-binary=:all:)
for t in manylinux_2_17 manylinux_2_18 manylinux_2_24 manylinux_2_27 manylinux_2_28 manylinux_2_31 \
         manylinux_2_34 manylinux_2_35 manylinux2014 manylinux1; do
  PLAT+=(--platform "${t}_x86_64")
done

mkdir -p "$CACHE" "$OUT"
echo "[build] downloading wheels into $CACHE"
python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$CACHE" -r "$HERE/wheels.txt"

echo "[build] unpacking into a site folder"
wanted=$(grep -vE '^\s*(#|$)' "$HERE/wheels.txt" | sed -E 's/==.*//; s/[-_.]+/_/g' | tr 'A-Z' 'a-z')
files=()
for w in "$CACHE"/*.whl; do
  n=$(basename "$w" | cut -d- -f1 | sed -E 's/[-_.]+/_/g' | tr 'A-Z' 'a-z')
  grep -qx "$n" <<<"$wanted" && files+=("$w")
done
python3 -m pip install -q --no-deps --no-compile "${PLAT[@]}" --target "$WORK/site" "${files[@]}"

# Kernels a dense bf16 model on Hopper never loads: FlashAttention-2 (Hopper uses FA3), MoE,
# FlashMLA, the Rust front end, and C++ headers for JIT kernels of other architectures.
V="$WORK/site/vllm"
rm -f "$V/vllm_flash_attn/_vllm_fa2_C.abi3.so" "$V/_moe_C_stable_libtorch.abi3.so" \
      "$V/vllm-rs" "$V/_flashmla_C.abi3.so"
rm -rf "$V/third_party/deep_gemm" "$V/third_party/fmha_sm100"

# Console scripts carry this machine's interpreter path: replace them with portable ones.
rm -rf "$WORK/site/bin" && mkdir -p "$WORK/site/bin"
cat > "$WORK/site/bin/vllm" <<'PY'
#!/usr/bin/env python3
import sys
from vllm.entrypoints.cli.main import main
if __name__ == "__main__":  # vLLM starts its engine with multiprocessing "spawn", which re-imports this file
    sys.exit(main())
PY
chmod +x "$WORK/site/bin/vllm"

echo "[build] compressing ($(du -sh "$WORK/site" | cut -f1) unpacked)"
rm -f "$OUT"/part-* "$OUT/SHA256SUMS"
tar -C "$WORK" -cf - site | xz -T0 -6 | split -b "${PART_MB}M" -d -a 2 - "$OUT/part-"
(cd "$OUT" && sha256sum part-* > SHA256SUMS)
cp "$HERE/install.sh" "$OUT/install.sh"
ls -la "$OUT"
echo "[build] done: $(ls "$OUT"/part-* | wc -l) parts in $OUT"
