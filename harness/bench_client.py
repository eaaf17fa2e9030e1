"""The ``vllm bench serve`` clients of one run: each client's command (behind the start barrier of
``harness/bench_gate.py`` when a load is split), its share of the prompts and of the rate; running
them all at once while the load window is measured, stopping them when one fails or the server
stalls; what their barrier saw, and their saved results merged into one client record. Also the
file barrier (``LockstepBarrier``) at which the clients of a split load, and lockstep
configurations (``serve_bench.py --sync-dir``), start together.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.host_monitor import LoadWindow
from harness.lab_metrics import DETAIL_KEYS
from harness.run_config import rate_label
from harness.server import ROOT, HarnessError, log_tail, vllm_cli

CLIENT_GATE_TIMEOUT_S = 120  # how long the clients of one run wait for each other to be set up

# What every run asks ``vllm bench serve`` to report (its own table; the summary is recomputed).
BENCH_REPORT_FLAGS = ("--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,95,99")

MAIN_RUN_MARKER = "Starting main benchmark run"  # what `vllm bench serve` prints when load starts
GATE_MARKER = "[bench_gate] load starts"  # ... and bench_gate.py once every client of the run is ready
RESULT_MARKER = "Serving Benchmark Result"  # ... and when every request is done


class LockstepBarrier:
    """Starts the same run of N configurations together (see "Lockstep" in ``serve_bench``'s doc).

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


def client_share(total: int | None, clients: int, index: int) -> int | None:
    """Prompts client ``index`` of ``clients`` sends: an even split, the remainder to the first."""
    if total is None:
        return None
    return total // clients + (1 if index < total % clients else 0)


def client_rate(rate: float | None, clients: int) -> str:
    """``--request-rate`` of each of ``clients`` Poisson streams: rate / clients, so that their union
    offers the rate asked for (a sum of independent Poisson processes is Poisson); None (all at
    once) is ``inf``."""
    return rate_label(None if rate is None else rate / clients)


def bench_program(gate: Path | None, clients: int, index: int) -> list[str]:
    """``vllm bench serve``, or with several clients and a ``gate`` folder, the same behind the
    start barrier of ``harness/bench_gate.py`` (``LAB3_BENCH_CMD`` replaces either, ungated)."""
    if custom := shlex.split(os.environ.get("LAB3_BENCH_CMD", "")):
        return custom
    if gate is None or clients == 1:
        return vllm_cli() + ["bench", "serve"]
    return [sys.executable, "-m", "harness.bench_gate", "--gate", str(gate), "--parties", str(clients),
            "--name", str(index), "--timeout-s", str(CLIENT_GATE_TIMEOUT_S), "--"]


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
