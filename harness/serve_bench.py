r"""Harness for Tasks 2 and 3: one ``vllm serve`` configuration, several ``vllm bench serve`` runs.

    python harness/serve_bench.py --task task2 --tag mnbt-2048 --out-dir results/task2 \
        --model models/qwen3-0.6b --dummy-weights \
        --server-args "--max-num-batched-tokens 2048 --max-num-seqs 256 --gpu-memory-utilization 0.9" \
        --bench-args "--dataset-name random --random-input-len 1024 --random-output-len 256 \
                      --ignore-eos" --num-prompts 1000 --seed 42 \
        --rates 16,inf --runs 3 --api-servers 4 --clients 1,2

For each (rate, client count, run) it writes ``<out-dir>/<tag>_rate-<rate>[_clients-<k>]_run-<n>.json``
as soon as that run ends (with ``--load NAME|RATES|FLAGS``, repeatable, several workloads share
one server and the files are ``<tag>_<NAME>_rate-...``); a run whose file exists is skipped
(``--force`` redoes it), and the server is not started at all when nothing is left to do, so a
sweep cut off halfway resumes where it stopped. ``--dry-run`` prints the plan.

The front end. Near a small model's capacity one Python API-server process cannot keep up with
the engine (it merges several tokens into one streamed chunk), and the latencies then measure
the front end, not the scheduler. ``--api-servers N`` starts the server with
``--api-server-count N``; ``--clients 1,2`` also runs each load split over two ``vllm bench
serve`` processes (each with its share of the prompts and the rate, and seed + k; set up, they
start their load together behind ``harness/bench_gate.py``'s barrier), which shows whether the
client limits. Every result's ``frontend`` block (``lab_metrics.frontend_check``)
has the token-gap completeness (below 0.99: "front end lagged") and the CPU cores of each
server process, with its role, and of each client.

What it does: checks the scheduler name and the port; starts the server (its own process
group, log in ``<out-dir>/logs/``) with the project on ``PYTHONPATH``; waits for ``/health``
(a server that dies is reported with the end of its log); per run, empties the prefix cache
(runs replay the same seeded prompts; hence ``VLLM_SERVER_DEV_MODE=1``), polls ``/metrics``
in the background and runs the clients; stops the run when a client fails, or when the server
holds requests but produces no token for ``--stall-timeout-s`` (a scheduler that admits nothing);
stops the whole process group on exit, error, Ctrl-C or SIGTERM.

Result file (``schema_version`` 4): ``meta`` (provenance), ``config`` (every knob, with the
strategy's settings and the flags as structured values), ``host`` (load and other vLLM servers
before and after, lockstep partners, the server's and clients' CPU cores over the load window,
GPU utilization from NVML), ``frontend``, ``client`` (what ``vllm bench serve`` saved, merged
over its processes; the per-request arrays are in ``<result stem>.requests.npz.xz`` beside it,
named by ``detail_file``: ``lab_metrics.read_detail``), ``engine`` (``/metrics`` peaks and KV
capacity; for this project's schedulers the recorder's counters for the run and cumulative),
``summary`` (``lab_metrics.summarize`` after dropping the first 10% of requests as warm-up),
``timing`` (the server's ready time and start-up phases; the run's client set-up, arrival window,
drain and overhead: ``lab_metrics.run_timing``).

Lockstep (``--sync-dir DIR --sync-parties N``): configurations running at once on different GPUs
of one host share its CPUs, and the front end is CPU-bound at these rates, so each run waits
until all N configurations are ready for the same run and they start together: strategies
compared within a wave saw the same neighbour. Runs skipped and departures are marked, so no one
waits for them; after ``--sync-timeout`` seconds a run starts anyway and records that it did.

Environment: ``LAB3_SERVE_CMD`` and ``LAB3_BENCH_CMD`` replace the two commands (default:
``vllm serve`` and ``vllm bench serve`` with the ``vllm`` command beside this interpreter, else
on PATH), e.g. for a CPU server started as
``.venv-cpu-serve/bin/python -m vllm.entrypoints.cli.main serve`` (the CLI: the bare API-server
module runs one API server whatever ``--api-server-count`` says).
"""

from __future__ import annotations

import argparse
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
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.host_monitor import GpuUtilSampler, LoadWindow, host_activity, live_group_members  # noqa: E402
from harness.lab_metrics import (DETAIL_KEYS, WARMUP_FRACTION, PeriodicSampler, frontend_check,  # noqa: E402
                                 run_timing, summarize, write_run)
from harness.offline_model import kv_bytes_per_token, load_config, resolve_model  # noqa: E402
from harness.provenance import collect_meta, visible_gpu_index  # noqa: E402

SCHEMA_VERSION = 4  # 2: "host" block (load, other servers, lockstep); 3: "frontend" block, clients;
# 4: per-request arrays in a binary file beside the result (client.detail_file)
LOG_TAIL_LINES = 40
CLIENT_GATE_TIMEOUT_S = 120  # how long the clients of one run wait for each other to be set up
STALL_S = 120.0  # requests in the server and no token for this long: the run cannot finish


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


class HarnessError(RuntimeError):
    """A failure the user can act on; the message says what and where the log is."""


def log(message: str, stream: TextIO | None = None) -> None:
    """One progress line, written in one piece: with several harnesses sharing a console (one
    per GPU), ``print``'s separate writes of text and newline could run two lines together."""
    out = stream or sys.stdout
    out.write(f"[serve_bench] {message}\n")
    out.flush()


def rate_label(rate: str) -> str:
    return "inf" if rate.lower() in ("inf", "infinity") else rate


class LockstepBarrier:
    """Starts the same run of N configurations together (see "Lockstep" in the module doc).

    Files only, in a folder all parties share: ``<dir>/<run key>/<tag>`` says "ready for that
    run", ``<dir>/left/<tag>`` says "gone, wait no more for me".
    """

    def __init__(self, folder: Path, parties: int, tag: str, timeout_s: float, poll_s: float = 0.2) -> None:
        self.folder, self.parties, self.tag, self.timeout_s, self.poll_s = folder, parties, tag, timeout_s, poll_s
        (folder / "left").mkdir(parents=True, exist_ok=True)

    def _mark(self, key: str) -> None:
        (self.folder / key).mkdir(parents=True, exist_ok=True)
        (self.folder / key / self.tag).touch()

    def skip(self, key: str) -> None:
        """A run this configuration will not do (its result exists): nobody waits for it."""
        self._mark(key)

    def wait(self, key: str) -> dict[str, Any]:
        """Ready for run ``key``; returns who was there and whether all N met in time."""
        self._mark(key)
        start = time.monotonic()
        while True:
            ready = {p.name for p in (self.folder / key).iterdir()}
            gone = {p.name for p in (self.folder / "left").iterdir()} - ready
            if len(ready | gone) >= self.parties:
                met = len(ready) >= self.parties
                break
            if time.monotonic() - start > self.timeout_s:
                met = False
                break
            time.sleep(self.poll_s)
        return {"parties": self.parties, "ready": sorted(ready), "left_before": sorted(gone),
                "all_met": met, "waited_s": round(time.monotonic() - start, 1)}

    def leave(self) -> None:
        (self.folder / "left" / self.tag).touch()


@dataclass(frozen=True)
class Load:
    """A named workload: the rates to offer and the client flags that shape the requests."""

    name: str
    rates: tuple[str, ...]
    bench_args: str = ""


def parse_load(text: str) -> Load:
    """``NAME|RATES|BENCH_ARGS``, e.g. ``varlen|8,48|--random-range-ratio '{"input": 0.9}'``."""
    parts = text.split("|", 2)
    if len(parts) != 3 or not re.fullmatch(r"[A-Za-z0-9.-]+", parts[0]):
        raise ValueError(f"--load {text!r}: expected NAME|RATES|BENCH_ARGS, NAME of letters, digits, '.', '-'")
    return Load(parts[0], parse_rates(parts[1]), parts[2])


def parse_rates(text: str) -> tuple[str, ...]:
    rates = tuple(r.strip() for r in text.split(",") if r.strip())
    if not rates:
        raise ValueError("no request rate given")
    for rate in rates:
        if rate_label(rate) != "inf":
            try:
                if float(rate) <= 0:
                    raise ValueError
            except ValueError:
                raise ValueError(f"rate {rate!r} is not a positive number or inf") from None
    return rates


def result_name(tag: str, load: str, rate: str, run: int, clients: int = 1) -> str:
    """``<tag>[_<load>]_rate-<rate>[_clients-<k>]_run-<n>.json``: one file per run, named by
    what varies (the client count only when the load is split over several clients)."""
    middle = f"_{load}" if load else ""
    split = f"_clients-{clients}" if clients != 1 else ""
    return f"{tag}{middle}_rate-{rate_label(rate)}{split}_run-{run}.json"


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """Where a failed process's log is, and its last lines, for an error message."""
    try:
        last = "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        last = "(no log)"
    return f"log {path}, last lines:\n{last}"


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

    def __init__(self, url: str, interval_s: float = 0.25, stall_s: float = STALL_S) -> None:
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


# ---- Engine statistics written by my_scheduler's recorder ------------------------------------
def read_stats(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def counters_delta(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any] | None:
    """The recorder's counters (steps, tokens, preemptions, policy) accrued during one run, and
    the strategy's settings as they were (settings are not counters: never differenced)."""
    if after is None:
        return None
    before = before or {}

    def diff(key: str) -> dict[str, float]:
        old = before.get(key, {})
        return {k: v - old.get(k, 0) for k, v in after.get(key, {}).items()}

    return {"steps": diff("steps"), "tokens": diff("tokens"), "policy": diff("policy"),
            "policy_settings": after.get("policy_settings", {}),
            "preemptions": after["queues"]["preemptions"] - before.get("queues", {}).get("preemptions", 0)}


# ---- One configuration -----------------------------------------------------------------------
def flag_params(tokens: list[str]) -> dict[str, Any]:
    """Command-line flags as the structured record readers use (``--max-num-batched-tokens 2048``
    -> ``{"max_num_batched_tokens": 2048}``; a flag without a value -> True), so that no reader
    parses a flag string back."""
    params: dict[str, Any] = {}
    for i, token in enumerate(tokens):
        if not token.startswith("--"):
            continue
        key, eq, value = token[2:].partition("=")
        if not eq:
            following = tokens[i + 1] if i + 1 < len(tokens) else None
            value = following if following is not None and not following.startswith("--") else True
        params[key.replace("-", "_")] = typed(value)
    return params


def typed(value: str | bool) -> Any:
    """'2048' -> 2048, '0.9' -> 0.9, '{"input": 0.9}' -> a dict, anything else unchanged."""
    for kind in (int, float, json.loads):
        try:
            return kind(value) if isinstance(value, str) else value
        except ValueError:  # json.JSONDecodeError is one
            pass
    return value


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


def build_server_command(args: argparse.Namespace, model: str, port: int, scheduler_cls: str) -> list[str]:
    return server_command(model, port, args.dummy_weights, scheduler_cls, args.api_servers, args.additional_config,
                          shlex.split(args.server_args))


def client_share(total: int | None, clients: int, index: int) -> int | None:
    """Prompts client ``index`` of ``clients`` sends: an even split, the remainder to the first."""
    if total is None:
        return None
    return total // clients + (1 if index < total % clients else 0)


def client_rate(rate: str, clients: int) -> str:
    """Each of ``clients`` Poisson streams offers rate / clients; their union is the rate asked
    for (a sum of independent Poisson processes is Poisson). ``inf`` stays ``inf``."""
    if rate_label(rate) == "inf" or clients == 1:
        return rate
    return f"{float(rate) / clients:g}"


def bench_program(gate: Path | None, clients: int, index: int) -> list[str]:
    """``vllm bench serve``, or with several clients and a ``gate`` folder, the same behind the
    start barrier of ``harness/bench_gate.py`` (``LAB3_BENCH_CMD`` replaces either, ungated)."""
    if custom := shlex.split(os.environ.get("LAB3_BENCH_CMD", "")):
        return custom
    if gate is None or clients == 1:
        return vllm_cli() + ["bench", "serve"]
    return [sys.executable, "-m", "harness.bench_gate", "--gate", str(gate), "--parties", str(clients),
            "--name", str(index), "--timeout-s", str(CLIENT_GATE_TIMEOUT_S), "--"]


# What every run asks ``vllm bench serve`` to report (its own table; the summary is recomputed).
BENCH_REPORT_FLAGS = ("--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,95,99")


def build_bench_command(args: argparse.Namespace, model: str, base_url: str, rate: str, load: Load,
                        result_dir: Path, result_file: str, clients: int = 1,
                        index: int = 0, gate: Path | None = None) -> list[str]:
    """The ``vllm bench serve`` command of client ``index`` of ``clients`` for one run.

    With several clients each sends its share of ``--num-prompts`` at its share of the rate,
    with seed ``--seed + index`` (the same seed would send the same prompts twice, and the
    second copy would be served from the prefix cache), and all start their load together
    (``gate``).
    """
    command = bench_program(gate, clients, index)
    command += ["--backend", "vllm", "--base-url", base_url, "--model", model, "--tokenizer", model,
                "--request-rate", client_rate(rate, clients), "--save-result", "--save-detailed",
                "--result-dir", str(result_dir), "--result-filename", result_file, *BENCH_REPORT_FLAGS]
    prompts = client_share(args.num_prompts, clients, index)
    if prompts is not None:
        command += ["--num-prompts", str(prompts)]
    if args.seed is not None:
        command += ["--seed", str(args.seed + index)]
    if args.goodput:
        command += ["--goodput", *shlex.split(args.goodput)]
    return command + shlex.split(args.bench_args) + shlex.split(load.bench_args)


MAIN_RUN_MARKER = "Starting main benchmark run"  # what `vllm bench serve` prints when load starts
GATE_MARKER = "[bench_gate] load starts"  # ... and bench_gate.py once every client of the run is ready
RESULT_MARKER = "Serving Benchmark Result"  # ... and when every request is done


@dataclass
class BenchClient:
    """One ``vllm bench serve`` process of a run; the first one's output is echoed (progress)."""

    command: list[str]
    log_path: Path
    echo: bool = False
    process: subprocess.Popen | None = None

    @property
    def load_marker(self) -> str:
        """The line that says this client's load has started (a gated client's after the barrier)."""
        return GATE_MARKER if "harness.bench_gate" in self.command else MAIN_RUN_MARKER

    def start(self, env: dict[str, str]) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        env={**env, "PYTHONUNBUFFERED": "1"},  # markers seen when printed
                                        cwd=ROOT, text=True, bufsize=1)

    def pump(self, on_line: Callable[[str], None]) -> None:
        """Copy the client's output to its log (and the console), line by line, until it ends."""
        assert self.process is not None and self.process.stdout is not None
        with open(self.log_path, "w") as handle:
            handle.write(f"$ {shlex.join(self.command)}\n")
            for line in self.process.stdout:
                handle.write(line)
                on_line(line)
                if self.echo and not line.startswith(("INFO", "WARNING", "DEBUG")):
                    sys.stdout.write(line)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def wait_for_clients(processes: list[subprocess.Popen], stall: Callable[[], str | None],
                     poll_s: float = 0.2) -> list[int | None]:
    """The clients' exit codes once all have ended, or as soon as one has failed (None for those
    still running then): a run with a failed client is lost, so the others need not finish.
    Raises ``HarnessError`` when ``stall`` says the server stopped making progress."""
    while True:
        codes = [process.poll() for process in processes]
        if any(code not in (None, 0) for code in codes) or None not in codes:
            return codes
        if why := stall():
            raise HarnessError(f"the run cannot finish: {why}")
        time.sleep(poll_s)


def run_clients(clients: list[BenchClient], env: dict[str, str], window: LoadWindow,
                stall: Callable[[], str | None] = lambda: None) -> None:
    """Run every client of one run at once and wait for all of them.

    The window opens when the first client starts its load and closes when the last one has
    printed its result (see ``LoadWindow``). A client that fails, or a server that stalls
    (``stall``), stops the clients and the run; an interrupted run takes its clients down with it.
    """
    lock = threading.Lock()
    finished: list[int] = []

    def watcher(pid: int, load_marker: str) -> Callable[[str], None]:
        def on_line(line: str) -> None:
            if load_marker in line:
                window.client_mark(pid, "load")
                window.start()
            if RESULT_MARKER in line:
                window.client_mark(pid, "done")
                with lock:
                    finished.append(pid)
                    if len(finished) == len(clients):
                        window.end()
        return on_line

    pumps: list[threading.Thread] = []
    try:
        for client in clients:
            client.start(env)
            assert client.process is not None
            window.client_mark(client.process.pid, "added")
        pumps = [threading.Thread(target=client.pump, args=(watcher(client.process.pid, client.load_marker),),
                                  daemon=True)
                 for client in clients if client.process is not None]
        for pump in pumps:
            pump.start()
        codes = wait_for_clients([client.process for client in clients if client.process is not None], stall)
    finally:
        for client in clients:
            client.kill()
        for pump in pumps:  # the logs are whole before their tail is read
            pump.join()
    for client, code in zip(clients, codes):
        if code not in (None, 0):
            raise HarnessError(f"the benchmark client failed (exit code {code}); {log_tail(client.log_path)}")


def client_gate_record(gate: Path, clients: int) -> dict[str, Any] | None:
    """What the clients' start barrier saw (None: one client, or clients not gated): whether all
    met, how long each waited, and how far apart they passed it."""
    records = [json.loads(p.read_text()) for p in sorted(gate.glob("*.json"))] if gate.is_dir() else []
    if clients == 1 or not records:
        return None
    passed = [r["passed_unix_s"] for r in records]
    return {"parties": clients, "passed": len(records), "all_met": all(r["all_met"] for r in records),
            "waited_s": [r["waited_s"] for r in records], "pass_spread_s": round(max(passed) - min(passed), 4)}


def merge_client_results(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One client record from the saved results of the clients of one run.

    One client: its record as saved. Several: the per-request arrays concatenated (their start
    times share the host's monotonic clock), counts and tokens summed, the duration the longest,
    and each client's own scalars kept under ``per_process``.
    """
    if len(results) == 1:
        return results[0]
    merged: dict[str, Any] = {key: [x for result in results for x in result[key]] for key in DETAIL_KEYS}
    for key in ("completed", "failed", "total_input_tokens", "total_output_tokens"):
        merged[key] = sum(result.get(key) or 0 for result in results)
    merged["duration"] = max(result.get("duration") or 0.0 for result in results)
    merged["output_throughput"] = (merged["total_output_tokens"] / merged["duration"]
                                   if merged["duration"] else None)
    merged["processes"] = len(results)
    merged["per_process"] = [{k: v for k, v in result.items()
                              if k not in DETAIL_KEYS + ("generated_texts",) and not isinstance(v, list)}
                             for result in results]
    return merged


@dataclass(frozen=True)
class RunSpec:
    """One run of a configuration: the workload, the offered rate, how many client processes
    offer it, the repetition index, and the result file it writes."""

    load: Load
    rate: str
    clients: int
    run: int
    path: Path

    @property
    def key(self) -> str:
        """Names the run independently of the configuration: what lockstep partners share."""
        name = result_name(self.load.name or "load", "", self.rate, self.run, self.clients)
        return name.removesuffix(".json")


def compose_result(args: argparse.Namespace, spec: RunSpec, server: Server,
                   bench_cmds: list[list[str]], client: dict[str, Any], metrics: dict[str, Any],
                   stats_before: dict[str, Any] | None, stats_after: dict[str, Any] | None,
                   scheduler_cls: str, host: dict[str, Any],
                   marks: tuple[float, float | None, float]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run's result record, and its per-request arrays (written beside the record); ``marks``:
    when the clients started, began their load and were done (``lab_metrics.run_timing``)."""
    measured, detail = measured_blocks(client, metrics, stats_before, stats_after, host, args.warmup_fraction,
                                       args.timeout_s, args.api_servers)
    record = {
        "schema_version": SCHEMA_VERSION,
        "meta": collect_meta(args.model, weights_label(args.dummy_weights), ["serve_bench.py", *args.argv]),
        "config": {
            "task": args.task, "tag": args.tag, "workload": spec.load.name or args.workload,
            "rate": rate_label(spec.rate),
            "run": spec.run, "scheduler": args.scheduler, "scheduler_cls": scheduler_cls or None,
            "strategy_settings": strategy_settings(args.scheduler, args.additional_config),
            "api_server_count": args.api_servers, "client_processes": spec.clients,
            "num_prompts": args.num_prompts, "seed": args.seed,
            "server_command": shlex.join(server.command), "bench_command": shlex.join(bench_cmds[0]),
            "bench_commands": [shlex.join(cmd) for cmd in bench_cmds],
            "server_args": args.server_args,
            "bench_args": " ".join(filter(None, [args.bench_args, spec.load.bench_args])),
            "server_params": flag_params(shlex.split(args.server_args)),
            "bench_params": flag_params(shlex.split(args.bench_args) + shlex.split(spec.load.bench_args)),
            "warmup_fraction": args.warmup_fraction, "timeout_s": args.timeout_s,
            "goodput": args.goodput or None,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "parallel_gpu_slots": os.environ.get("LAB3_GPU_SLOTS") or None,
        },
        **measured,
        "timing": {"server_ready_s": server.ready_s, "server_start_phases_s": server.start_phases_s,
                   **run_timing(detail, *marks)},
    }
    return record, detail


def weights_label(dummy: bool) -> str:
    return "dummy (random, real shapes)" if dummy else "real"


def measured_blocks(client: dict[str, Any], metrics: dict[str, Any], stats_before: dict[str, Any] | None,
                    stats_after: dict[str, Any] | None, host: dict[str, Any], warmup_fraction: float,
                    timeout_s: float | None, api_servers: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The blocks of a result that every harness fills alike from what it measured (``host``,
    ``frontend``, ``client``, ``engine``, ``summary``), and the per-request arrays."""
    detail = {k: client[k] for k in DETAIL_KEYS}
    return {
        "host": host,
        "frontend": frontend_check(detail, warmup_fraction, host.get("server_cpu"), host.get("client_cpu"),
                                   api_servers),
        "client": {k: v for k, v in client.items() if k not in DETAIL_KEYS + ("generated_texts",)},
        "engine": {"metrics": metrics, "scheduler_counts_this_run": counters_delta(stats_before, stats_after),
                   "scheduler_stats_cumulative": stats_after},
        "summary": summarize(detail, warmup_fraction, timeout_s),
    }, detail


def all_runs(args: argparse.Namespace) -> list[RunSpec]:
    """Every run of this configuration, in the order they are done."""
    return [RunSpec(load, rate, clients, run,
                    args.out_dir / result_name(args.tag, load.name, rate, run, clients))
            for load in args.loads for rate in load.rates for clients in args.clients
            for run in range(1, args.runs + 1)]


def pending_runs(args: argparse.Namespace) -> list[RunSpec]:
    runs = []
    for spec in all_runs(args):
        if spec.path.exists() and not args.force:
            log(f"{spec.path.name}: exists, skipped (--force redoes it)")
            continue
        runs.append(spec)
    return runs


def run_config(args: argparse.Namespace) -> int:
    """Check, skip what is done, then serve and bench; lockstep partners are never left waiting:
    the runs skipped and this configuration's departure (error included) are marked."""
    barrier = (LockstepBarrier(args.sync_dir, args.sync_parties, args.tag, args.sync_timeout)
               if args.sync_dir and not args.dry_run else None)
    try:
        scheduler_cls = checked_scheduler_cls(args)
        todo = pending_runs(args)
        if barrier is not None:
            pending = {spec.key for spec in todo}
            for spec in all_runs(args):
                if spec.key not in pending:
                    barrier.skip(spec.key)
        if args.dry_run:
            return print_plan(args, scheduler_cls, todo)
        if not todo:
            log(f"{args.tag}: nothing to do")
            return 0
        return serve_and_bench(args, scheduler_cls, todo, barrier)
    finally:
        if barrier is not None:
            barrier.leave()


def strategy_settings(name: str, given: dict[str, float]) -> dict[str, float]:
    """Every setting the strategy reads, as it runs: the ones given, else the defaults."""
    from harness.strategies import SETTING_DEFAULTS, strategy

    return {key: given.get(key, SETTING_DEFAULTS[key]) for key in strategy(name).settings}


def checked_scheduler_cls(args: argparse.Namespace) -> str:
    """The ``--scheduler-cls`` value; fails on an unknown strategy, a setting it does not take,
    or a busy ``--port``."""
    from harness.strategies import check_settings, resolve_strategy

    try:
        scheduler_cls = resolve_strategy(args.scheduler)
        args.additional_config = check_settings(args.scheduler, args.additional_config)
    except ValueError as err:
        raise HarnessError(str(err)) from err
    if args.port and port_is_busy(args.port):
        raise HarnessError(f"port {args.port} is busy: another server is listening there "
                           "(stop it, or pass --port 0 for a free one)")
    return scheduler_cls


def print_plan(args: argparse.Namespace, scheduler_cls: str, todo: list[RunSpec]) -> int:
    """``--dry-run``: the server command and every client command, run nothing. When every run
    already has its result, the plan shown is what ``--force`` would redo."""
    model = resolve_model(args.model)
    runs, prefix = todo, "would run"
    if not todo:
        log(f"{args.tag}: nothing to do; with --force it would redo:")
        runs, prefix = all_runs(args), "would redo"
    server = Server(build_server_command(args, model, args.port or 8000, scheduler_cls), {},
                    args.out_dir / "logs" / f"{args.tag}_server.log", args.port or 8000)
    log(f"would start: {shlex.join(server.command)}")
    if args.sync_dir:
        log(f"lockstep: {args.sync_dir} ({args.sync_parties} parties)")
    for spec in runs:
        for index in range(spec.clients):
            cmd = build_bench_command(args, model, server.base_url, spec.rate, spec.load,
                                      Path("<tmp>"), f"raw_{index}.json", spec.clients, index, Path("<tmp>/gate"))
            log(f"{prefix} ({spec.path.name}): {shlex.join(cmd)}")
    return 0


def serve_and_bench(args: argparse.Namespace, scheduler_cls: str, todo: list[RunSpec],
                    barrier: LockstepBarrier | None) -> int:
    """Start the server, do every pending run, always stop the server."""
    from my_scheduler import STATS_ENV

    model = resolve_model(args.model)
    port = args.port or free_port()
    logs = args.out_dir / "logs"
    work = Path(tempfile.mkdtemp(prefix=f"serve-bench-{args.tag}-"))
    stats_path = work / "scheduler_stats.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env[STATS_ENV] = str(stats_path)
    env["VLLM_SERVER_DEV_MODE"] = "1"  # for POST /reset_prefix_cache between runs
    server = Server(build_server_command(args, model, port, scheduler_cls), env,
                    logs / f"{args.tag}_server.log", port)
    try:
        bytes_per_token = kv_bytes_per_token(load_config(model)) if Path(model).is_dir() else None
    except (OSError, KeyError):
        bytes_per_token = None
    try:
        server.start()
        log(f"{args.tag}: starting the server on port {port}, process group "
            f"{server.process.pid} (log {server.log_path})")
        ready_s = server.wait_ready(args.startup_timeout)
        log(f"{args.tag}: server ready in {ready_s:.0f} s")
        for index, spec in enumerate(todo, 1):
            label = f"{spec.load.name}, " if spec.load.name else ""
            split = f", {spec.clients} clients" if spec.clients != 1 else ""
            log(f"{args.tag}: {label}rate {rate_label(spec.rate)}{split}, run {spec.run} ({index}/{len(todo)})")
            result, detail = one_run(args, spec, server, model, work, index, stats_path,
                                     bytes_per_token, scheduler_cls, env, barrier)
            write_run(spec.path, result, detail)
            log_run(args.tag, result, spec.path)
    finally:
        server.stop()
        log(f"{args.tag}: server stopped")
    return 0


def one_run(args: argparse.Namespace, spec: RunSpec, server: Server, model: str, work: Path,
            index: int, stats_path: Path, bytes_per_token: int | None, scheduler_cls: str,
            env: dict[str, str], barrier: LockstepBarrier | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """One benchmark run against the running server; returns its result record and arrays."""
    logs = args.out_dir / "logs"
    raws = [f"raw_{index}_{k}.json" for k in range(spec.clients)]
    gate = work / f"gate_{index}"
    bench_cmds = [build_bench_command(args, model, server.base_url, spec.rate, spec.load, work, raw,
                                      spec.clients, k, gate) for k, raw in enumerate(raws)]
    log_name = spec.path.with_suffix(".bench.log").name
    clients = [BenchClient(cmd, logs / (log_name if k == 0 else log_name.replace(".bench.log", f".bench-{k}.log")),
                           echo=k == 0) for k, cmd in enumerate(bench_cmds)]
    server.reset_prefix_cache()
    stats_before = read_stats(stats_path)
    lockstep = None
    if barrier is not None:
        lockstep = barrier.wait(spec.key)
        if not lockstep["all_met"]:
            log(f"{args.tag}: lockstep partners not ready after {lockstep['waited_s']} s; "
                "this run starts alone (recorded in its file)")
    host = {"before": host_activity(server.process.pid), "lockstep": lockstep}
    with MetricsPoller(f"{server.base_url}/metrics", stall_s=args.stall_timeout_s) as poller, \
            GpuUtilSampler(visible_gpu_index()) as gpu:
        window = LoadWindow(server.process.pid, gpu, args.api_servers)
        begin = time.monotonic()
        run_clients(clients, env, window, poller.stall)
        end = time.monotonic()
        window.end()  # no effect if every client printed its result
    host["after"] = host_activity(server.process.pid)
    host["server_cpu"] = window.server_cpu()
    host["client_cpu"] = window.client_cpu()
    host["gpu_util"] = window.gpu_util()
    host["client_gate"] = client_gate_record(gate, spec.clients)
    if not server.alive():
        raise server.died("during the benchmark")
    time.sleep(0.5)  # the recorder flushes when the engine runs out of requests
    client = merge_client_results([json.loads((work / raw).read_text()) for raw in raws])
    return compose_result(args, spec, server, bench_cmds, client, poller.report(bytes_per_token),
                          stats_before, read_stats(stats_path), scheduler_cls, host,
                          (begin, window.t_start if window.started else None, end))


def number_text(value: float | None, unit: str, digits: int) -> str:
    """A progress-line number; None (no value to measure) reads "n/a" instead of failing."""
    return "n/a" if value is None else f"{value:.{digits}f}{unit}"


def log_run(tag: str, result: dict[str, Any], path: Path) -> None:
    """The run's headline numbers and its front-end check, one line. Any number may be missing:
    when a frozen front end sends each request's tokens in one chunk there is no ITL at all."""
    s, front = result["summary"], result["frontend"]
    completeness = front["token_gaps"]["completeness"]
    verdict = number_text(completeness, "", 3) + (" (front end lagged)" if front["token_gaps"]["lagged"] else "")
    log(f"{tag}: TTFT p50 {number_text(s['ttft_ms']['p50'], ' ms', 1)}, "
        f"p99 {number_text(s['ttft_ms']['p99'], ' ms', 1)}; "
        f"ITL p50 {number_text(s['itl_ms']['p50'], ' ms', 2)}, p99 {number_text(s['itl_ms']['p99'], ' ms', 2)}; "
        f"{number_text(s['output_throughput_tok_s'], ' tok/s', 0)}; failed {s['num_failed']}, "
        f"timeouts {s['num_timeouts']}; token-gap completeness {verdict} -> {path}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True, help="label stored in each result (task2, task3)")
    parser.add_argument("--tag", required=True, help="names this configuration's result files")
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--dummy-weights", action="store_true")
    parser.add_argument("--scheduler", default="default",
                        help="short name or my_scheduler.Class (python my_scheduler.py --list)")
    parser.add_argument("--additional-config", type=json.loads, default={}, metavar="JSON",
                        help="the strategy's settings, e.g. '{\"aging_tokens_per_s\": 100}' "
                             "(passed to vllm serve --additional-config; keys: my_scheduler.py --list)")
    parser.add_argument("--server-args", default="", help="extra vllm serve flags, one string")
    parser.add_argument("--bench-args", default="", help="extra vllm bench serve flags, one string")
    parser.add_argument("--workload", default="", help="label of the load, stored in each result")
    parser.add_argument("--rates", default="16", help="comma-separated request rates (inf allowed)")
    parser.add_argument("--load", action="append", default=[], metavar="NAME|RATES|BENCH_ARGS",
                        help="a named workload (repeatable); replaces --rates and --workload; its "
                             "flags are added to --bench-args; files get _NAME in their names")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--num-prompts", type=int, default=None,
                        help="requests per run, split evenly over the clients (default: the client's)")
    parser.add_argument("--seed", type=int, default=None,
                        help="the client's dataset seed; client k of several uses seed + k")
    parser.add_argument("--api-servers", type=int, default=1,
                        help="API-server processes of the server (vllm serve --api-server-count); "
                             "one Python front end saturates near the capacity of a small model")
    parser.add_argument("--clients", default="1",
                        help="comma-separated client-process counts; each run's load is split over "
                             "that many `vllm bench serve` processes (e.g. 1,2: does the client limit?)")
    parser.add_argument("--goodput", default="", help='passed to --goodput, e.g. "ttft:500 tpot:50"')
    parser.add_argument("--warmup-fraction", type=float, default=WARMUP_FRACTION,
                        help=f"share of requests, first by start time, left out of the summary (default {WARMUP_FRACTION})")
    parser.add_argument("--timeout-s", type=float, default=None,
                        help="end-to-end latency above which a request counts as a timeout")
    parser.add_argument("--port", type=int, default=0, help="0: pick a free port")
    parser.add_argument("--startup-timeout", type=float, default=900.0)
    parser.add_argument("--stall-timeout-s", type=float, default=STALL_S,
                        help="stop the run when requests sit in the server and no token comes for this long")
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--sync-dir", type=Path, default=None,
                        help="lockstep folder shared with configurations on other GPUs")
    parser.add_argument("--sync-parties", type=int, default=1,
                        help="how many configurations run in lockstep (with --sync-dir)")
    parser.add_argument("--sync-timeout", type=float, default=900.0,
                        help="seconds a run waits for its lockstep partners, then starts alone")
    args = parser.parse_args(argv)
    args.argv = argv
    try:
        args.loads = ([parse_load(text) for text in args.load] if args.load
                      else [Load("", parse_rates(args.rates))])
    except ValueError as err:
        parser.error(str(err))
    if not isinstance(args.additional_config, dict):
        parser.error("--additional-config must be a JSON object")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.api_servers < 1:
        parser.error("--api-servers must be at least 1")
    try:
        args.clients = tuple(int(c) for c in args.clients.split(",") if c.strip())
    except ValueError:
        parser.error(f"--clients {args.clients!r}: expected comma-separated positive integers")
    if not args.clients or min(args.clients) < 1:
        parser.error("--clients: expected comma-separated positive integers")
    if max(args.clients) > 1 and args.num_prompts is None:
        parser.error("--clients above 1 needs --num-prompts (the total to split)")
    if args.num_prompts is not None and args.num_prompts < max(args.clients):
        parser.error("--num-prompts must be at least the number of clients")
    if args.sync_parties < 1:
        parser.error("--sync-parties must be at least 1")
    if not 0 <= args.warmup_fraction < 1:
        parser.error("--warmup-fraction must be in [0, 1)")
    return args


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return run_config(args)
    except HarnessError as err:
        log(f"error: {err}", sys.stderr)
        return 1
    except KeyboardInterrupt:
        log("interrupted; the server was stopped, finished runs are kept", sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
