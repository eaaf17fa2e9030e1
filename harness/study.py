r"""Interleaved studies: every configuration of a comparison on one server, run by run, in a
recorded order that time cannot stand in for.

    python -m harness.study run experiments/task2_rate16.json                 # into results/<folder>
    python -m harness.study run experiments/task2_rate16.json --dry-run       # the order; what is left
    python -m harness.study run PLAN --results /tmp/res --until-s 540 --keep-server

Why: a server per configuration costs a start of two minutes or more, so configurations used to
be measured in blocks, one after another, and readings drift on one machine over tens of
minutes. Here one server serves every arm of the study: the per-step token budget
(``max_num_batched_tokens`` for the scheduler) and the strategy are set between runs through
``RuntimeControl`` (``harness/step_recorder.py``), with which the server plans exactly the steps
of a server started at that budget with that strategy's class.
The arms alternate in rounds (a shuffle, then the same order reversed, then a new shuffle ...),
and run ``i`` of the order uses arrival seed ``plan.seed + i``.

The client is ``vllm bench serve`` called in this process (``vllm.benchmarks.serve``, argv built
from the plan), so vLLM is imported once per call, not once per run.

A plan is a JSON file in ``experiments/`` (``StudyPlan``): what is compared and why, the server,
the load, the arms, the runs per arm, the seed. The results folder gets ``study.json`` (the plan,
the run order, every host that ran part of it) and one result file per run (the schema of
``serve_bench.py``: its loader reads both, with ``config.token_budget`` the budget in force and a
``timing`` block: the server's ready time and start phases, the client's set-up, arrival window,
drain and overhead). A run whose file exists is skipped, so a study cut off resumes.
``--until-s`` stops before a run would end past that many seconds into the call, and
``--keep-server`` leaves the server up when the call ends (its state in ``logs/server.json``, or
in ``--server-state``); a later call attaches to it when the machine, the server command and the
step log are the same, and stops it otherwise. Studies that give one ``--server-state`` share a
server: a near-saturation study runs on the server its anchor started, one start fewer a sitting.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import itertools
import json
import multiprocessing
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.host_monitor import GpuUtilSampler, LoadWindow, host_activity  # noqa: E402
from harness.lab_metrics import run_timing, write_run  # noqa: E402
from harness.offline_model import kv_bytes_per_token, load_config  # noqa: E402
from harness.provenance import collect_meta, machine_boot_id, visible_gpu_index, write_json_atomic  # noqa: E402
from harness.bench_client import BENCH_REPORT_FLAGS, GATE_MARKER, MAIN_RUN_MARKER, RESULT_MARKER  # noqa: E402
from harness.run_config import RunConfig, cli_flags  # noqa: E402
from harness.run_record import (SCHEMA_VERSION, measured_blocks, number_text, read_stats,  # noqa: E402
                                strategy_settings, weights_label)
from harness.server import HarnessError, MetricsPoller, Server, free_port  # noqa: E402
from harness import workloads  # noqa: E402
from harness.step_model import STEP_LOG_FILE  # noqa: E402
from harness.study_file import STUDY_FILE  # noqa: E402
from harness.study_plan import (PlannedRun, StudyPlan, class_in_force, note_host,  # noqa: E402
                                open_study, resolve_rate)

# What --until-s plans for a run's wall time beyond its arrival window: measured 8-14 s for 1000
# prompts, 20-24 s for 3000 (the client draws its random prompts first, about 6 ms each).
EXPECTED_OVERHEAD_S, EXPECTED_OVERHEAD_S_PER_PROMPT = 5.0, 0.007
# A rate-inf run has no arrival window to go by: 11 s for 400 prompts, 25-40 s for 1000 on an H100
# or H200 at budgets 2048-8192; planned as this much a prompt (budget 512 runs slower).
RATE_INF_RUN_S_PER_PROMPT = 0.06
MAX_DRAW_WORKERS = 6  # processes writing heavy-tailed draws beside the server's start (HeavyDraws)
STARTUP_TIMEOUT_S = 900.0


def say(message: str) -> None:
    """A progress line on the real stdout (the client's own output goes to its log)."""
    sys.__stdout__.write(f"[study] {time.strftime('%H:%M:%S')} {message}\n")
    sys.__stdout__.flush()


# ---- The server ---------------------------------------------------------------------------------
class AttachedProcess:
    """A server's leader started by an earlier call (in its own session, so it outlived that call):
    the part of ``subprocess.Popen`` that ``server.Server`` uses."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        import psutil

        try:
            alive = psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            alive = False
        if not alive and self.returncode is None:
            self.returncode = -1  # not our child: its exit code is not ours to read
        return None if alive else self.returncode

    def wait(self, timeout: float | None = None) -> int:
        import psutil

        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            time.sleep(0.1)
        with contextlib.suppress(psutil.Error):
            psutil.Process(self.pid).wait(0)
        return self.returncode or 0


@dataclass
class StudyServer:
    """The study's server: started, or attached to when an earlier call left it up."""

    server: Server
    state_path: Path
    ready_s: float
    phases: dict[str, float]
    reused: bool
    stats_path: Path
    control_path: Path

    @classmethod
    def start_or_attach(cls, plan: StudyPlan, logs: Path, state_path: Path | None = None) -> StudyServer:
        """Attach to the server whose state ``state_path`` holds (default ``logs/server.json``)
        when it is up on this machine with this plan's command and step log, else start one. An
        attached server keeps the control and stats files it was started with, which may be in
        another study's ``logs``."""
        from harness.step_recorder import CONTROL_ENV, STATS_ENV, STEP_LOG_ENV

        state_path = state_path or logs / "server.json"
        step_log = str(logs / STEP_LOG_FILE) if plan.server.step_log else None
        model = plan.server.model_path()
        state = json.loads(state_path.read_text()) if state_path.is_file() else None
        if state and state["machine_boot_id"] == machine_boot_id():
            server = Server(state["command"], {}, Path(state["log"]), state["port"],
                            process=AttachedProcess(state["pid"]))
            if (server.alive() and state["command"] == plan.server.command(model, state["port"])
                    and state["step_log"] == step_log):
                say(f"attached to the server an earlier call left up (pid {state['pid']}, port {state['port']}, "
                    f"log {state['log']})")
                return cls(server, state_path, state["ready_s"], state["phases"], True,
                           Path(state["stats"]), Path(state["control"]))
            server.stop()
            state_path.unlink(missing_ok=True)
        stats_path, control_path = logs / "engine_stats.json", logs / "budget_control.json"
        port = free_port()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        env.update({STATS_ENV: str(stats_path), CONTROL_ENV: str(control_path), "VLLM_SERVER_DEV_MODE": "1"})
        if step_log:
            env[STEP_LOG_ENV] = step_log
        server = Server(plan.server.command(model, port), env, logs / "server.log", port)
        server.start()
        say(f"starting the server (port {port}, log {server.log_path})")
        try:
            ready_s = server.wait_ready(STARTUP_TIMEOUT_S)
        except BaseException:
            server.stop()
            raise
        phases = server.start_phases_s
        say(f"server ready in {ready_s:.0f} s; phases (s from start): {phases}")
        state_path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(state_path, {"pid": server.process.pid, "port": port, "command": server.command,
                                       "log": str(server.log_path), "stats": str(stats_path),
                                       "control": str(control_path), "step_log": step_log,
                                       "machine_boot_id": machine_boot_id(), "ready_s": ready_s,
                                       "phases": phases})
        return cls(server, state_path, ready_s, phases, False, stats_path, control_path)

    def stop(self) -> None:
        self.server.stop()
        self.state_path.unlink(missing_ok=True)
        say("server stopped")

    def set_control(self, seq: str, token_budget: int, strategy_name: str, settings: dict[str, float]) -> None:
        """Ask the engine for this budget, strategy and its settings from the run's first step on
        (the strategy always: an arm without one runs the server's, whatever ran before). ``seq``
        names the request; the engine applies a request whose name differs from the last one's."""
        write_json_atomic(self.control_path, {"seq": seq, "token_budget": token_budget, "strategy": strategy_name,
                                              "settings": settings})


# ---- The client, in this process --------------------------------------------------------------
class MarkerStream(io.TextIOBase):
    """Where ``vllm bench serve`` prints while it runs here: each line goes to its log, and the
    lines that open and close the load window call ``on_line``."""

    def __init__(self, log: io.TextIOBase, on_line: Callable[[str], None]) -> None:
        self.log, self.on_line, self.pending = log, on_line, ""

    def write(self, text: str) -> int:
        self.log.write(text)
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            self.on_line(line)
        return len(text)

    def flush(self) -> None:
        self.log.flush()


def heavy_draw(plan: StudyPlan, run: PlannedRun, folder: Path, model: str, write: bool = True) -> Path:
    """The heavy-tailed load's JSONL for this run's seed in ``folder``/datasets (written once,
    with the model's tokenizer; not written when ``write`` is False, e.g. for a dry run's argv)."""
    datasets = folder / "datasets"
    if not write:
        return workloads.dataset_path(datasets, run.num_prompts, run.seed)
    return workloads.ensure_dataset(datasets, model, run.num_prompts, run.seed)


class HeavyDraws:
    """The heavy-tailed draws of a call's pending runs, written in worker processes while the
    server starts and the earlier runs run. Why: one draw of 3000 prompts takes 20-25 s of one
    core (a tokenizer decode per prompt), device time that a run would otherwise wait out; the
    GPU host has cores to spare. Each run waits for its own draw only (``wait``)."""

    def __init__(self, plan: StudyPlan, runs: list[PlannedRun], folder: Path, model: str) -> None:
        self.pending: dict[int, Future[Path]] = {}
        self.pool: ProcessPoolExecutor | None = None
        if plan.load.dataset != "heavy" or not runs:
            return
        workers = max(1, min(len(runs), MAX_DRAW_WORKERS, (os.cpu_count() or 2) // 2))
        self.pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
        for run in runs:
            self.pending[run.index] = self.pool.submit(workloads.ensure_dataset, folder / "datasets", model,
                                                       run.num_prompts, run.seed)
        say(f"drawing {len(runs)} heavy-tailed loads in {workers} worker processes")

    def wait(self, run: PlannedRun) -> None:
        """Until this run's draw is written; a draw that failed raises here, before its run."""
        if (future := self.pending.pop(run.index, None)) is not None:
            future.result()

    def close(self) -> None:
        """Drop the draws not begun (a later call writes them), finish the ones being written."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def bench_argv(plan: StudyPlan, run: PlannedRun, model: str, base_url: str, dataset: Path | None = None) -> list[str]:
    """``vllm bench serve``'s arguments for one run, built from the plan at the last moment
    (``dataset``: the run's heavy-tailed draw, for a heavy load)."""
    argv = ["--backend", "vllm", "--base-url", base_url, "--model", model, "--tokenizer", model,
            "--num-prompts", str(run.num_prompts), "--seed", str(run.seed),
            "--request-rate", run.rate_label, "--save-detailed", "--disable-tqdm", *BENCH_REPORT_FLAGS]
    if plan.load.dataset == "heavy":
        if dataset is None:
            raise HarnessError("a heavy load needs the run's dataset file (heavy_draw)")
        argv += ["--dataset-path", str(dataset)]
    return argv + cli_flags(plan.load.params())


def run_client(argv: list[str], log_path: Path, window: LoadWindow,
               stall: Callable[[], str | None], alive: Callable[[], bool]) -> tuple[dict[str, Any], dict[str, float]]:
    """``vllm bench serve`` in a thread of this process; returns its result and when its load
    started and ended (monotonic). Fails when the server stalls or dies, or the client raises."""
    from vllm.benchmarks.serve import add_cli_args, main_async
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    args = parser.parse_args(argv)
    marks: dict[str, float] = {"begin": time.monotonic()}
    outcome: dict[str, Any] = {}
    pid = os.getpid()

    def on_line(line: str) -> None:
        if MAIN_RUN_MARKER in line or GATE_MARKER in line:
            marks["load"] = time.monotonic()
            window.client_mark(pid, "load")
            window.start()
        elif RESULT_MARKER in line:
            window.client_mark(pid, "done")
            window.end()

    def client() -> None:
        try:
            outcome["result"] = asyncio.run(main_async(args))
        except BaseException as err:  # noqa: BLE001 - re-raised in the calling thread
            outcome["error"] = err

    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log, contextlib.redirect_stdout(MarkerStream(log, on_line)):
        log.write(f"$ vllm bench serve {shlex.join(argv)}\n")
        window.client_mark(pid, "added")
        thread = threading.Thread(target=client, daemon=True, name="bench-serve")
        thread.start()
        while thread.is_alive():
            thread.join(0.5)
            if why := stall():
                raise HarnessError(f"the run cannot finish: {why}")
            if not alive():
                raise HarnessError("the server died during the run")
    marks["end"] = time.monotonic()
    window.end()
    if "error" in outcome:
        raise HarnessError(f"vllm bench serve failed: {outcome['error']!r}; log {log_path}") from outcome["error"]
    return outcome["result"], marks


# ---- One run ----------------------------------------------------------------------------------
def one_run(plan: StudyPlan, run: PlannedRun, served: StudyServer, model: str, folder: Path,
            bytes_per_token: int | None) -> tuple[dict[str, Any], bytes]:
    """Set the arm's budget and strategy, empty the prefix cache, run the client; the result
    record and its packed arrays. A run the engine did not run under its arm is not written."""
    server = served.server
    served.set_control(control_seq(plan, run), run.arm.token_budget, run.arm.strategy or plan.server.scheduler,
                       run.arm.settings)
    server.reset_prefix_cache()
    stats_before = read_stats(served.stats_path)
    dataset = heavy_draw(plan, run, folder, model) if plan.load.dataset == "heavy" else None
    argv = bench_argv(plan, run, model, server.base_url, dataset)
    host: dict[str, Any] = {"before": host_activity(server.process.pid), "lockstep": None}
    with MetricsPoller(f"{server.base_url}/metrics") as poller, GpuUtilSampler(visible_gpu_index()) as gpu:
        window = LoadWindow(server.process.pid, gpu, plan.server.api_servers)
        client, marks = run_client(argv, folder / "logs" / run.file_name.replace(".json", ".bench.log"),
                                   window, poller.stall, server.alive)
    host.update(after=host_activity(server.process.pid), server_cpu=window.server_cpu(),
                client_cpu=window.client_cpu(), gpu_util=window.gpu_util(), client_gate=None)
    time.sleep(0.5)  # the recorder flushes when the engine runs out of requests
    stats_after = read_stats(served.stats_path)
    check_applied(plan, run, stats_after)
    measured, detail, packed = measured_blocks(client, poller.report(bytes_per_token), stats_before, stats_after, host,
                                       plan.warmup_fraction, plan.timeout_s, plan.server.api_servers)
    record = {
        "schema_version": SCHEMA_VERSION,
        "meta": collect_meta(plan.server.model, weights_label(plan.server.dummy_weights),
                             ["-m", "harness.study", *sys.argv[1:]]),
        "config": run_config(plan, run, server, argv),
        **measured,
        "timing": {"server_ready_s": served.ready_s, "server_start_phases_s": served.phases,
                   "server_reused": served.reused,
                   **run_timing(detail, marks["begin"], marks.get("load"), marks["end"])},
    }
    return record, packed


def control_seq(plan: StudyPlan, run: PlannedRun) -> str:
    """The name of a run's control request: the study and the run's index, so that studies sharing
    a server never send two requests of one name in a row (the engine would skip the second)."""
    return f"{plan.name}#{run.index}"


def check_applied(plan: StudyPlan, run: PlannedRun, stats: dict[str, Any] | None) -> None:
    """Fail unless the engine's stats show this run's control request applied: its budget, the
    class of its strategy and the strategy's settings."""
    applied = (stats or {}).get("budget") or {}
    in_force = (stats or {}).get("scheduler_class")
    settings = (stats or {}).get("policy_settings") or {}
    wanted = strategy_settings(run.arm.strategy or plan.server.scheduler, run.arm.settings)
    if (applied.get("control_seq") != control_seq(plan, run) or applied.get("token_budget") != run.arm.token_budget
            or in_force != class_in_force(plan, run.arm) or settings != wanted):
        raise HarnessError(f"run {run.index}: the engine did not apply {run.arm.to_dict()} (its stats say "
                           f"{applied or 'nothing'}, class {in_force}, settings {settings}); not written")


def run_config(plan: StudyPlan, run: PlannedRun, server: Server, argv: list[str]) -> dict[str, Any]:
    """The ``config`` block (``RunConfig``): the budget and strategy in force, and where the run
    sits in its study."""
    policy = run.arm.strategy or plan.server.scheduler
    return RunConfig(
        task=plan.task, tag=run.arm.tag, workload=plan.load.workload, rate=run.rate, run=run.repeat,
        scheduler=policy, scheduler_cls=class_in_force(plan, run.arm),
        strategy_settings=strategy_settings(policy, run.arm.settings),
        server_params=plan.server.params(), bench_params=plan.load.params(), api_server_count=plan.server.api_servers,
        num_prompts=run.num_prompts, seed=run.seed, warmup_fraction=plan.warmup_fraction,
        timeout_s=plan.timeout_s, token_budget=run.arm.token_budget,
        study={"name": plan.name, "index": run.index, "round": run.round, "client": "in-process"},
        server_command=shlex.join(server.command), bench_commands=(f"vllm bench serve {shlex.join(argv)}",),
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES")).to_record()


def log_run(run: PlannedRun, record: dict[str, Any], total: int) -> None:
    s, t, front = record["summary"], record["timing"], record["frontend"]["token_gaps"]
    say(f"run {run.index}/{total} {run.file_name}: TTFT p50 {number_text(s['ttft_ms']['p50'], ' ms', 1)}, "
        f"p99 {number_text(s['ttft_ms']['p99'], ' ms', 1)}; ITL p50 {number_text(s['itl_ms']['p50'], ' ms', 2)}, "
        f"p99 {number_text(s['itl_ms']['p99'], ' ms', 2)}; {number_text(s['output_throughput_tok_s'], ' tok/s', 0)}; "
        f"failed {s['num_failed']}; completeness {number_text(front['completeness'], '', 3)}; "
        f"wall {t['run_wall_s']:.0f} s = window {t['arrival_window_s']:.0f} s + overhead {t['client_overhead_s']:.0f} s")


# ---- The command --------------------------------------------------------------------------------
def expected_run_s(plan: StudyPlan, run: PlannedRun) -> float:
    """The wall time --until-s plans for ``run``: its arrival window and the client's overhead."""
    prompts = run.num_prompts
    if run.rate is None:
        return prompts * RATE_INF_RUN_S_PER_PROMPT
    return prompts / run.rate + EXPECTED_OVERHEAD_S + prompts * EXPECTED_OVERHEAD_S_PER_PROMPT


def runs_within(plan: StudyPlan, runs: list[PlannedRun], until_s: float | None) -> list[PlannedRun]:
    """The first of ``runs`` whose planned wall times (``expected_run_s``) add up to at most
    ``until_s``: those a call may reach, so that it draws no load it will not send."""
    if until_s is None:
        return runs
    ends = itertools.accumulate(expected_run_s(plan, run) for run in runs)
    return [run for run, end in zip(runs, ends) if end <= until_s]


def run_study(plan: StudyPlan, folder: Path, until_s: float | None, keep_server: bool, dry_run: bool,
              max_runs: int | None = None, server_state: Path | None = None) -> int:
    """Every run of the order whose file is missing (at most ``max_runs``), on one server; 0 when
    none is left, 3 when some are. ``keep_server``: leave the server up at the end, for the next
    call (``server_state``: the state file studies share, default the study's ``logs/server.json``)."""
    began = time.monotonic()
    record = open_study(plan, folder)
    order = plan.order()
    todo = [r for r in order if not (folder / r.file_name).exists()]
    say(f"study {plan.name} in {folder}: {len(order) - len(todo)} of {len(order)} runs done, {len(todo)} left")
    if dry_run:
        for run in order:
            state = "todo" if run in todo else "done"
            say(f"  {run.index:3d} round {run.round} {run.arm.tag} seed {run.seed} {run.num_prompts} prompts "
                f"{run.file_name}: {state}")
        return 0
    if not todo:
        return 0
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(folder / STUDY_FILE, record, indent=1)
    model = plan.server.model_path()
    try:
        bytes_per_token = kv_bytes_per_token(load_config(model)) if Path(model).is_dir() else None
    except (OSError, KeyError):
        bytes_per_token = None
    draws = HeavyDraws(plan, runs_within(plan, todo, until_s), folder, model)
    try:
        served = StudyServer.start_or_attach(plan, folder / "logs", server_state)
    except BaseException:
        draws.close()
        raise
    done: list[str] = []
    failed = True  # until the loop ends without raising: a failed call stops its server
    try:
        for run in todo:
            if until_s is not None and time.monotonic() - began + expected_run_s(plan, run) > until_s:
                say(f"stopping before run {run.index}: it would end past --until-s {until_s:g}")
                break
            if max_runs is not None and len(done) >= max_runs:
                say(f"stopping before run {run.index}: --max-runs {max_runs} done")
                break
            say(f"run {run.index}/{len(order)}: round {run.round}, {run.arm.tag}, "
                f"rate {run.rate_label}, seed {run.seed}")
            draws.wait(run)
            result, packed = one_run(plan, run, served, model, folder, bytes_per_token)
            write_run(folder / run.file_name, result, packed)
            done.append(run.file_name)
            log_run(run, result, len(order))
        failed = False
    finally:
        draws.close()
        if done:
            note_host(record, folder, done)
        if keep_server and not failed:
            say(f"server left up for the next call ({served.state_path})")
        else:
            served.stop()
    left = len(todo) - len(done)
    say(f"{len(done)} runs done in this call; {left} left")
    return 0 if left == 0 else 3


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = top.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run what the results folder lacks")
    run.add_argument("plan", type=Path, help="a study plan (experiments/*.json)")
    run.add_argument("--results", type=Path, default=ROOT / "results",
                     help="the folder that holds the plan's results_folder (default: results/)")
    run.add_argument("--until-s", type=float, default=None,
                     help="start no run that would end more than this many seconds after the call began")
    run.add_argument("--max-runs", type=int, default=None, help="do at most this many runs in this call")
    run.add_argument("--keep-server", action="store_true",
                     help="leave the server up when the call ends, for the next call of this study or, "
                          "with --server-state, of another study with the same server")
    run.add_argument("--server-state", type=Path, default=None,
                     help="the server's state file (default: the study's logs/server.json); studies that "
                          "give the same one share a server where their server settings match")
    run.add_argument("--dry-run", action="store_true", help="print the order and what is done; run nothing")
    return top


def main(argv: list[str]) -> int:
    ns = parser().parse_args(argv)
    try:
        plan = StudyPlan.read(ns.plan)
        try:
            plan = resolve_rate(plan, ns.results)
        except HarnessError as err:
            if not ns.dry_run:
                raise
            say(f"study {plan.name}: {err}. Its arms: " + "; ".join(arm.tag for arm in plan.arms))
            return 0
        return run_study(plan, ns.results / plan.results_folder, ns.until_s, ns.keep_server, ns.dry_run,
                         ns.max_runs, ns.server_state)
    except HarnessError as err:
        say(f"error: {err}")
        return 1
    except KeyboardInterrupt:
        say("interrupted; finished runs are kept")
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
