"""The ``vllm serve`` process of a harness: its command (``server_command``), a free port, start
and stop in its own process group (failing fast, with the end of its log, when it dies), the
start-up phases read from its log (``start_phases``), and its ``/metrics`` polled during a run
(``MetricsPoller``). ``serve_bench.py`` (one configuration) and a study (``study.py``) share it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from harness.host_monitor import live_group_members
from harness.lab_metrics import PeriodicSampler

ROOT = Path(__file__).resolve().parent.parent
LOG_TAIL_LINES = 40
STALL_S = 120.0  # requests in the server and no token for this long: the run cannot finish
# How often a run's /metrics is read. Every read stalls token streams: the API server that answers
# renders every process's metrics in its event loop, or the harness parses the text in the process
# that runs the client (the runs do not tell which). The runs made with a poll every 0.25 s show
# their late chunks (gaps under 0.1 ms) in bursts 0.27-0.29 s apart, the poll's own period, after
# waits of 15-26 ms (median per study; `python -m harness.lab_metrics late-bursts`): at 8 req/s that
# put token-gap completeness at 0.985-0.995. The readings kept (peaks of gauges, counters, a stalled
# server) need no finer grain.
POLL_INTERVAL_S = 2.0


class HarnessError(RuntimeError):
    """A failure the user can act on; the message says what and where the log is."""


def vllm_cli() -> list[str]:
    """The ``vllm`` command of this interpreter's environment, else of PATH, else its module.

    The console script is preferred: ``vllm bench`` only switches to the CPU platform (and so
    runs on a machine without a GPU) when started as ``vllm bench ...``.
    """
    beside = Path(sys.executable).parent / "vllm"
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("vllm")
    return [found] if found else [sys.executable, "-m", "vllm.entrypoints.cli.main"]


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """Where a failed process's log is, and its last lines, for an error message."""
    try:
        last = "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        last = "(no log)"
    return f"log {path}, last lines:\n{last}"


# ---- The server command ----------------------------------------------------------------------
def server_command(model: str, port: int, dummy_weights: bool, scheduler_cls: str, api_servers: int,
                   additional_config: dict[str, float], flags: list[str]) -> list[str]:
    """The ``vllm serve`` command (``LAB3_SERVE_CMD`` replaces the program), built at the last
    moment from values; ``flags`` are the rest of its flags."""
    command = shlex.split(os.environ.get("LAB3_SERVE_CMD", "")) or vllm_cli() + ["serve"]
    command += ["--model", model, "--host", "127.0.0.1", "--port", str(port)]
    if dummy_weights:
        command += ["--load-format", "dummy"]
    if scheduler_cls:
        command += ["--scheduler-cls", scheduler_cls]
    if api_servers != 1:
        command += ["--api-server-count", str(api_servers)]
    if additional_config:
        command += ["--additional-config", json.dumps(additional_config, sort_keys=True)]
    return command + flags


# ---- Ports -----------------------------------------------------------------------------------
def port_is_busy(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


# ---- The server ------------------------------------------------------------------------------
@dataclass
class Server:
    """A ``vllm serve`` process in its own process group, stopped with all its children."""

    command: list[str]
    env: dict[str, str]
    log_path: Path
    port: int
    host: str = "127.0.0.1"
    process: subprocess.Popen | None = None
    started_unix: float | None = None
    ready_s: float | None = None  # launch to /health 200, once ready
    start_phases_s: dict[str, float] = field(default_factory=dict)  # ``start_phases`` of its log

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # Appended to: a resumed sweep restarts the server, and the first start's log stays.
        handle = open(self.log_path, "a")
        self.started_unix = time.time()
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started_unix))
        handle.write(f"# ---- server started {started} ----\n$ {shlex.join(self.command)}\n")
        handle.flush()
        self.process = subprocess.Popen(self.command, stdout=handle, stderr=subprocess.STDOUT,
                                        env=self.env, start_new_session=True, cwd=ROOT)
        handle.close()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def died(self, when: str) -> HarnessError:
        code = None if self.process is None else self.process.poll()
        return HarnessError(f"the server died {when} (exit code {code}); {log_tail(self.log_path)}")

    def wait_ready(self, timeout_s: float) -> float:
        """Seconds until ``/health`` answered 200 (kept, with the start-up phases read from the
        log, in ``ready_s`` and ``start_phases_s``); fails fast if the process exits."""
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            if not self.alive():
                raise self.died("while starting")
            with contextlib.suppress(urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                with urllib.request.urlopen(f"{self.base_url}/health", timeout=2) as resp:
                    if resp.status == 200:
                        self.ready_s = round(time.monotonic() - start, 1)
                        self.start_phases_s = start_phases(self.log_path.read_text(errors="replace"),
                                                           self.started_unix or time.time())
                        return self.ready_s
            time.sleep(1.0)
        raise HarnessError(f"the server did not become healthy within {timeout_s:.0f} s; "
                           f"{log_tail(self.log_path)}")

    def reset_prefix_cache(self) -> None:
        """Empty the prefix cache (a dev-mode endpoint), so a run never reuses the last one's KV.

        Every run of a configuration replays the same seeded prompts; without this, the second
        run would find all of them cached and skip its prefills.
        """
        request = urllib.request.Request(f"{self.base_url}/reset_prefix_cache", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                ok = resp.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as err:
            raise HarnessError(f"could not reset the prefix cache ({err}); the server must run with "
                               "VLLM_SERVER_DEV_MODE=1") from err
        if not ok:
            raise HarnessError(f"POST /reset_prefix_cache answered {resp.status}")

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM to the process group, then SIGKILL after ``grace_s``; idempotent.

        Returns only once no live process is left in the group (or after 30 s more): the engine
        core outlives the API server by a moment, and until it is gone it still holds the GPU
        memory the next configuration's server needs.
        """
        if self.process is None:
            return
        if self.process.poll() is None:
            self._kill_group(signal.SIGTERM)
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self._kill_group(signal.SIGKILL)
                self.process.wait(timeout=10)
        self._kill_group(signal.SIGKILL)  # children may outlive a dead leader
        deadline = time.monotonic() + 30
        while live_group_members(self.process.pid) and time.monotonic() < deadline:
            time.sleep(0.1)

    def _kill_group(self, sig: int) -> None:
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)


START_MARKERS = {  # phase -> a line of vLLM 0.26's start-up log that ends it
    "api_processes_started": "API server processes",
    "model_loaded": "Model loading took",
    "compiled": "torch.compile took",
    "kv_cache_allocated": "GPU KV cache size",
    "graphs_captured": "Graph capturing finished",
    "engine_ready": "init engine (profile, create kv cache, warmup model) took",
}


def start_phases(log_text: str, started_unix: float) -> dict[str, float]:
    """Seconds from the server's start to the last line of each start-up phase (``START_MARKERS``)
    seen in its log (vLLM's INFO lines; the API servers' readiness is the harness's own ``/health``
    time): where a start's two minutes go."""
    clock_of_line = vllm_log_clock(time.localtime(started_unix).tm_year)
    phases: dict[str, float] = {}
    for line in log_text.splitlines():
        for phase, marker in START_MARKERS.items():
            at = clock_of_line(line) if marker in line else None
            if at is not None and at >= started_unix - 1:  # a log appended to holds earlier starts
                phases[phase] = round(at - started_unix, 1)
    return phases


def vllm_log_clock(year: int) -> Callable[[str], float | None]:
    """The time of a vLLM log line (``INFO 12-02 00:25:06 [...]``, local time, no year) as Unix time."""
    pattern = re.compile(r"\b(?:INFO|WARNING|DEBUG|ERROR) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\b")

    def clock(line: str) -> float | None:
        found = pattern.search(line)
        if not found:
            return None
        month, day, hour, minute, second = map(int, found.groups())
        return time.mktime((year, month, day, hour, minute, second, 0, 0, -1))
    return clock


# ---- /metrics --------------------------------------------------------------------------------
def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Prometheus text exposition as (name, labels, value) samples (prometheus_client's parser,
    which vLLM's own metrics come from)."""
    return [(sample.name, sample.labels, sample.value)
            for family in text_string_to_metric_families(text) for sample in family.samples]


class MetricsPoller(PeriodicSampler):
    """Polls ``/metrics`` in a thread; keeps peaks of gauges and first/last of counters."""

    GAUGES = ("vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting")
    COUNTERS = ("vllm:num_preemptions_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total")

    def __init__(self, url: str, interval_s: float = POLL_INTERVAL_S, stall_s: float = STALL_S) -> None:
        super().__init__(interval_s)
        self.url = url
        self.stall_s = stall_s
        self.in_server = 0.0  # requests running + waiting at the last sample
        self.tokens_seen: float | None = None  # prompt + output tokens at the last sample
        self.progress_at = time.monotonic()  # when the server last produced a token or was empty
        self.peaks: dict[str, float] = {}
        self.first: dict[str, float] = {}
        self.last: dict[str, float] = {}
        self.cache_info: dict[str, str] = {}
        self.num_samples = 0
        self.errors = 0

    def sample(self) -> None:
        try:
            with urllib.request.urlopen(self.url, timeout=5) as resp:
                text = resp.read().decode()
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            self.errors += 1
            return
        self.num_samples += 1
        totals: dict[str, float] = {}
        for name, labels, value in parse_metrics(text):
            if name in self.GAUGES or name in self.COUNTERS:
                totals[name] = totals.get(name, 0.0) + value
            elif name == "vllm:cache_config_info" and not self.cache_info:
                self.cache_info = labels
        for name, value in totals.items():
            if name in self.GAUGES:
                self.peaks[name] = max(self.peaks.get(name, value), value)
            else:
                self.first.setdefault(name, value)
                self.last[name] = value
        tokens = totals.get("vllm:prompt_tokens_total", 0.0) + totals.get("vllm:generation_tokens_total", 0.0)
        self.in_server = totals.get("vllm:num_requests_running", 0.0) + totals.get("vllm:num_requests_waiting", 0.0)
        if tokens != self.tokens_seen or not self.in_server:
            self.tokens_seen, self.progress_at = tokens, time.monotonic()

    def stall(self) -> str | None:
        """Why the run cannot finish, if it cannot: requests in the server and not one prompt or
        output token for ``stall_s`` (a strategy that never schedules a waiting request, say).
        The clients would wait for hours (``vllm bench serve`` allows a request 6 h)."""
        idle = time.monotonic() - self.progress_at
        if not self.in_server or idle < self.stall_s:
            return None
        return (f"the server produced no token for {idle:.0f} s while {self.in_server:.0f} requests were in it "
                "(running + waiting): its scheduler admits nothing (does the strategy ever schedule a "
                "waiting request?)")

    def report(self, bytes_per_token: int | None) -> dict[str, Any]:
        blocks = int(self.cache_info.get("num_gpu_blocks", 0) or 0)
        block_size = int(self.cache_info.get("block_size", 0) or 0)
        capacity = blocks * block_size if blocks and block_size else None
        peak_perc = self.peaks.get("vllm:kv_cache_usage_perc")
        peak_tokens = None if peak_perc is None or capacity is None else peak_perc * capacity
        return {
            "samples": self.num_samples, "poll_errors": self.errors, "interval_s": self.interval_s,
            "peak_kv_cache_usage_perc": peak_perc,
            "kv_capacity_tokens": capacity, "num_gpu_blocks": blocks or None,
            "block_size": block_size or None,
            "peak_kv_tokens": peak_tokens,
            "peak_kv_bytes": None if peak_tokens is None or bytes_per_token is None
            else peak_tokens * bytes_per_token,
            "peak_num_requests_running": self.peaks.get("vllm:num_requests_running"),
            "peak_num_requests_waiting": self.peaks.get("vllm:num_requests_waiting"),
            "counters_delta": {n: self.last[n] - self.first[n] for n in self.last if n in self.first},
        }
