"""What the host does while a run loads the server: its processes and their CPU time, the GPU's
utilization, and the window over which both are read (``LoadWindow``).

Near saturation a small model on a large GPU is limited by Python processes (the API server, the
engine core's scheduling thread, the client), not by the GPU. These readings, taken by
``serve_bench.py`` around every run and kept in its ``host`` and ``frontend`` blocks, are what say
which component set the pace.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil

from harness.lab_metrics import PeriodicSampler


def live_processes() -> Iterator[tuple[psutil.Process, int]]:
    """Every live process and its process group. Zombies are left out: ``os.killpg(pgid, 0)``
    also succeeds for them, but they hold nothing and only their new parent (init) can reap them,
    so they say nothing about a live server."""
    for process in psutil.process_iter():
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                yield process, os.getpgid(process.pid)
        except (psutil.Error, ProcessLookupError):
            continue  # the process ended while we looked


def live_group_members(pgid: int) -> list[int]:
    """PIDs in process group ``pgid`` that are not zombies."""
    return [process.pid for process, group in live_processes() if group == pgid]


def command_line(pid: int) -> list[str]:
    """A process's arguments, or none once it has ended (or when another user's is unreadable)."""
    try:
        return psutil.Process(pid).cmdline()
    except (psutil.Error, ValueError):  # ended, or no such pid
        return []


def other_vllm_servers(own_pgid: int | None) -> int:
    """Live ``vllm serve`` / OpenAI API-server process groups on this host other than ours."""
    groups = set()
    for process, group in live_processes():
        if group == own_pgid or group in groups:
            continue
        words = [os.path.basename(a) for a in command_line(process.pid) if a]
        # `vllm serve ...` (or `python -m vllm.entrypoints.cli.main serve`) or the API server
        # module; not `vllm bench serve` (a client).
        is_serve = any(a in ("vllm", "vllm.entrypoints.cli.main") and b == "serve"
                       for a, b in zip(words, words[1:]))
        if is_serve or "vllm.entrypoints.openai.api_server" in words:
            groups.add(group)
    return len(groups)


def host_activity(own_pgid: int | None) -> dict[str, float]:
    """What else loads the host's CPUs now: 1-minute load average and other vLLM servers."""
    return {"loadavg_1m": round(os.getloadavg()[0], 2),
            "other_vllm_servers": other_vllm_servers(own_pgid)}


def group_cpu_seconds(pgid: int) -> dict[int, tuple[str, float]]:
    """CPU time (user + system, seconds) of each live process in group ``pgid``, with its name."""
    usage = {}
    for process, group in live_processes():
        if group != pgid:
            continue
        try:
            with process.oneshot():
                times = process.cpu_times()
                usage[process.pid] = (process.name(), times.user + times.system)
        except psutil.Error:
            continue
    return usage


def server_cpu_load(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]],
                    wall_s: float, top: int = 8) -> list[dict[str, Any]]:
    """The server's busiest processes during a run, in cores (1.0 = one core all the time).

    Why: at high rates the API server process (tokenizing, streaming) can be the bottleneck,
    not the GPU; a process near 1.0 core is saturated, as Python runs one thread at a time.
    """
    rows = [{"pid": pid, "name": name, "cpu_cores": round((cpu - before.get(pid, (name, 0.0))[1]) / wall_s, 2)}
            for pid, (name, cpu) in after.items()] if wall_s > 0 else []
    return sorted(rows, key=lambda row: -row["cpu_cores"])[:top]


def process_role(pid: int, name: str, pgid: int, api_server_count: int) -> str:
    """What a server process does: ``engine_core`` (the scheduler, and on one GPU the model
    runner too), ``worker`` (a model-runner process of its own: vLLM's CPU backend, several
    GPUs), ``api_server`` (HTTP, tokenizing, streaming), ``launcher`` (the parent of several API
    servers, which only waits) or ``other`` (helpers such as multiprocessing's resource tracker).

    vLLM names its processes (``VLLM::EngineCore``, ``VLLM::APIServer_<i>``); with one API server,
    that server is the process-group leader, which keeps the interpreter's name.
    """
    label = f"{name} {' '.join(command_line(pid))}"
    if "EngineCore" in label or "EngineCor" in name:
        return "engine_core"
    if "APIServer" in label:
        return "api_server"
    if "VLLM::Worker" in label:
        return "worker"
    if pid == pgid:
        return "api_server" if api_server_count == 1 else "launcher"
    return "other"


def process_cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system, seconds) of one process, or None once it has ended."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return times.user + times.system


def load_pynvml() -> ModuleType | None:
    """NVML's Python bindings: ``pynvml`` from nvidia-ml-py (vLLM pulls it in through
    flashinfer-python), else the copy vLLM carries in ``vllm/third_party``, loaded by its path so
    that vLLM itself (14 s to import) is not: the offline kit leaves flashinfer, and with it
    nvidia-ml-py, out. None when neither is there."""
    try:
        import pynvml
        return pynvml
    except ImportError:
        vllm = importlib.util.find_spec("vllm")
    path = Path(vllm.origin).parent / "third_party" / "pynvml.py" if vllm and vllm.origin else None
    if path is None or not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("pynvml", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class GpuUtilSampler(PeriodicSampler):
    """``utilization.gpu`` of the server's GPU from NVML (no CUDA context), every 0.5 s.

    The share of time a kernel ran: far from 100% at a saturating load, the limit is elsewhere
    (the front end, the scheduler). ``report`` averages over a window (``LoadWindow``: the
    client's own start-up, about 20 s with the GPU idle, would otherwise halve the figure). NVML
    in-process, not nvidia-smi: no fork and exec competing with the server for the host's cores.
    ``gpu_index`` is the physical index (``CUDA_VISIBLE_DEVICES``'s entry). Without NVML (no
    bindings, no driver) it records nothing.
    """

    def __init__(self, gpu_index: str, interval_s: float = 0.5) -> None:
        super().__init__(interval_s)
        self.gpu_index = gpu_index
        self.samples: list[tuple[float, float]] = []
        self.nvml = load_pynvml()
        self.handle: Any = None

    def __enter__(self) -> "GpuUtilSampler":
        if self.nvml is not None:
            try:
                self.nvml.nvmlInit()
                self.handle = self.nvml.nvmlDeviceGetHandleByIndex(int(self.gpu_index))
            except self.nvml.NVMLError:  # no driver (nvmlInit), or no such GPU
                self.handle = None
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        if self.handle is not None:
            self.handle = None
            self.nvml.nvmlShutdown()

    def sample(self) -> None:
        if self.handle is None:
            return
        try:
            busy = self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu
        except self.nvml.NVMLError:
            return
        self.samples.append((time.monotonic(), float(busy)))

    def report(self, start: float | None = None, end: float | None = None) -> dict[str, Any] | None:
        """Mean and median of the samples taken in [start, end] (open ends: every sample);
        ``window`` says "load" when a start was given, else "client" (the client's whole life)."""
        values = [v for t, v in self.samples
                  if (start is None or t >= start) and (end is None or t <= end)]
        if not values:
            return None
        return {"samples": len(values), "mean_pct": round(statistics.fmean(values), 1),
                "p50_pct": statistics.median(values), "interval_s": self.interval_s,
                "window": "load" if start is not None else "client"}


class LoadWindow:
    """The span in which the clients send load; the server's and the clients' CPU use and the
    GPU's utilization are measured over it, not over the clients' start-up and wrap-up, when the
    server idles.

    Until ``start`` is called (the first client's "load starts" line), the window opens when this
    object is made, so a client that never prints the line still gets a reading (the GPU's
    then covers every sample: ``window: client``). ``start`` and ``end`` count once each.
    """

    def __init__(self, pgid: int, gpu: GpuUtilSampler, api_server_count: int = 1) -> None:
        self.pgid = pgid
        self.gpu = gpu
        self.api_server_count = api_server_count
        self.cpu_start, self.t_start = group_cpu_seconds(pgid), time.monotonic()
        self.cpu_end: dict[int, tuple[str, float]] = {}
        self.t_end = 0.0
        self.started = self.ended = False
        # Per client pid: (time, its CPU seconds) when it started its load and when it finished.
        self.client_marks: dict[int, dict[str, tuple[float, float | None]]] = {}

    def client_mark(self, pid: int, event: str) -> None:
        """Client ``pid`` started (``added``), started its load (``load``) or finished it
        (``done``): read its CPU now, while it is still alive (clients end at different times)."""
        self.client_marks.setdefault(pid, {})[event] = (time.monotonic(), process_cpu_seconds(pid))

    def start(self) -> None:
        if not self.started:
            self.cpu_start, self.t_start, self.started = group_cpu_seconds(self.pgid), time.monotonic(), True

    def end(self) -> None:
        if not self.ended:
            self.cpu_end, self.t_end, self.ended = group_cpu_seconds(self.pgid), time.monotonic(), True

    def server_cpu(self) -> list[dict[str, Any]]:
        """The server's busiest processes in cores, each with its role (``process_role``)."""
        rows = server_cpu_load(self.cpu_start, self.cpu_end, self.t_end - self.t_start)
        return [row | {"role": process_role(row["pid"], row["name"], self.pgid, self.api_server_count)}
                for row in rows]

    def client_cpu(self) -> list[float | None]:
        """Cores each client process used while it sent load (from its "load starts" line to its
        result; from its start where it printed no such line). None: no reading."""
        cores: list[float | None] = []
        for marks in self.client_marks.values():
            t0, before = marks.get("load", marks.get("added", (0.0, None)))
            t1, after = marks.get("done", (0.0, None))
            ok = before is not None and after is not None and t1 > t0
            cores.append(round((after - before) / (t1 - t0), 2) if ok else None)
        return cores

    def gpu_util(self) -> dict[str, Any] | None:
        return self.gpu.report(self.t_start, self.t_end) if self.started else self.gpu.report()
