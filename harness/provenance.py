"""Provenance for every result file (where, with what, how a number was produced), and writing it."""

from __future__ import annotations

import datetime as dt
import json
import lzma
import os
import platform
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
COMMIT_ENV = "LAB3_GIT_COMMIT"


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        module = sys.modules.get(name)
        return getattr(module, "__version__", None)


def git_commit() -> str:
    """The project's commit; ``LAB3_GIT_COMMIT`` wins (GPU hosts get a copy without ``.git``)."""
    if os.environ.get(COMMIT_ENV):
        return os.environ[COMMIT_ENV]
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True)
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def visible_gpu_index() -> str:
    """The physical index of the first GPU this process may use (``CUDA_VISIBLE_DEVICES``)."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return first if first.isdigit() else "0"


def _gpu_info_from_nvidia_smi() -> dict[str, Any] | None:
    """Ask nvidia-smi, which opens no CUDA context: the harness runs beside a server on that GPU."""
    query = "name,memory.total,driver_version,compute_cap,count"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits",
                              "-i", visible_gpu_index()],
                             capture_output=True, text=True, timeout=20, check=True).stdout
        name, mem_mib, driver, capability, count = (f.strip() for f in out.splitlines()[0].split(","))
        memory_gib = round(float(mem_mib) / 1024, 1)
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        return None
    cuda = None
    try:
        import torch
        cuda = torch.version.cuda
    except ImportError:
        pass
    return {"name": name, "memory_gib": memory_gib, "count": int(count), "driver": driver,
            "cuda": cuda, "compute_capability": capability}


def gpu_info() -> dict[str, Any]:
    """Name, memory and driver of the first visible GPU, or ``{"name": None}`` without one.

    nvidia-smi first; torch only where nvidia-smi is missing (it opens a CUDA context).
    """
    from_smi = _gpu_info_from_nvidia_smi()
    if from_smi is not None:
        return from_smi
    try:
        import torch
    except ImportError:
        return {"name": None}
    if not torch.cuda.is_available():
        return {"name": None}
    props = torch.cuda.get_device_properties(0)
    return {"name": props.name, "memory_gib": round(props.total_memory / 2**30, 1),
            "count": torch.cuda.device_count(), "driver": None,
            "cuda": torch.version.cuda, "compute_capability": f"{props.major}.{props.minor}"}


def machine_boot_id() -> str | None:
    """This boot of this machine (Linux's random boot id). Every GPU session starts a fresh machine,
    so runs that share it ran in one sitting, the only runs that may be compared with each other
    (machines of one kind differ by up to 2x)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def collect_meta(model: str, weights: str, argv: list[str] | None = None) -> dict[str, Any]:
    """The ``meta`` block of a result file.

    ``weights`` says whether the weights were real or dummy; ``argv`` is the full command line,
    script included (default ``sys.argv``).
    """
    return {
        "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "machine_boot_id": machine_boot_id(),
        "python": platform.python_version(),
        "gpu": gpu_info(),
        "versions": {name: package_version(name) for name in ("vllm", "torch", "transformers")},
        "model": model,
        "weights": weights,
        "git_commit": git_commit(),
        "command": shlex.join(["python"] + (argv if argv is not None else sys.argv)),
    }


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write a file through a temporary file and a rename: never half-written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


COMPRESSED_RECORD_SUFFIX = ".json.xz"  # a simulated run's record: hundreds of them per screen, each mostly repeats


def write_json_atomic(path: Path, data: dict[str, Any], indent: int | None = None) -> None:
    """Write a result file atomically (``write_bytes_atomic``), xz-compressed when its name ends
    in ``.xz`` (``read_json`` reads both)."""
    text = (json.dumps(data, indent=indent) + "\n").encode()
    write_bytes_atomic(path, lzma.compress(text, preset=9) if path.suffix == ".xz" else text)


def read_json(path: Path) -> Any:
    """A JSON file, plain or xz-compressed (``write_json_atomic``)."""
    raw = path.read_bytes()
    return json.loads(lzma.decompress(raw) if path.suffix == ".xz" else raw)


def record_paths(folder: Path) -> list[Path]:
    """The JSON files of a results folder, plain and compressed, sorted by name."""
    if not folder.is_dir():
        return []
    return sorted([*folder.glob("*.json"), *folder.glob("*" + COMPRESSED_RECORD_SUFFIX)], key=lambda p: p.name)
