r"""Harness for Tasks 2 and 3: one ``vllm serve`` configuration, several ``vllm bench serve`` runs.

    python harness/serve_bench.py --task task2 --tag mnbt-2048 --out-dir results/task2 \
        --model models/qwen3-0.6b --dummy-weights \
        --server-params '{"max_num_batched_tokens": 2048, "max_num_seqs": 256, "gpu_memory_utilization": 0.9}' \
        --bench-params '{"dataset_name": "random", "random_input_len": 1024, "random_output_len": 256,
                         "ignore_eos": true}' --num-prompts 1000 --seed 42 \
        --rates 16,inf --runs 3 --api-servers 4 --clients 1,2

Settings are values (JSON objects of flags by name), kept as such in every result's ``config``
(``harness/run_config.RunConfig``) and made into flags only when a command is built.

For each (rate, client count, run) it writes ``<out-dir>/<tag>_rate-<rate>[_clients-<k>]_run-<n>.json``
as soon as that run ends (with ``--load '{"name": NAME, "rates": [...], "bench_params": {...}}'``,
repeatable, several workloads share one server and the files are ``<tag>_<NAME>_rate-...``); a run
whose file exists is skipped
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

Result file (``schema_version`` 5): ``meta`` (provenance), ``config`` (``run_config.RunConfig``: every knob, with the
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
import json
import os
import shlex
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.bench_client import (BENCH_REPORT_FLAGS, BenchClient, LockstepBarrier, bench_program,  # noqa: E402
                                  client_gate_record, client_rate, client_share, merge_client_results,
                                  run_clients)
from harness.host_monitor import GpuUtilSampler, LoadWindow, host_activity  # noqa: E402
from harness.lab_metrics import WARMUP_FRACTION, run_timing, write_run  # noqa: E402
from harness.offline_model import kv_bytes_per_token, load_config, resolve_model  # noqa: E402
from harness.provenance import collect_meta, visible_gpu_index  # noqa: E402
from harness.run_config import RunConfig, cli_flags, json_object, parse_rate, rate_label  # noqa: E402
from harness.run_record import (SCHEMA_VERSION, measured_blocks, number_text, read_stats, result_name,  # noqa: E402
                                strategy_settings, weights_label)
from harness.server import (STALL_S, HarnessError, MetricsPoller, Server, free_port, port_is_busy,  # noqa: E402
                            server_command)


def log(message: str, stream: TextIO | None = None) -> None:
    """One progress line, written in one piece: with several harnesses sharing a console (one
    per GPU), ``print``'s separate writes of text and newline could run two lines together."""
    out = stream or sys.stdout
    out.write(f"[serve_bench] {message}\n")
    out.flush()


@dataclass(frozen=True)
class Load:
    """A named workload: the rates to offer (req/s; None: all at once) and the ``vllm bench
    serve`` flags, as values, that shape its requests (added to ``--bench-params``)."""

    name: str
    rates: tuple[float | None, ...]
    bench_params: dict[str, Any]

    @classmethod
    def from_json(cls, text: str) -> Load:
        """``--load '{"name": "varlen-0.9", "rates": ["48"], "bench_params": {"random_range_ratio": ...}}'``."""
        try:
            data = json.loads(text)
            name, rates, params = data["name"], data["rates"], data.get("bench_params", {})
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"--load {text!r}: expected a JSON object with name, rates and bench_params "
                             f"({err!r})") from None
        if not (isinstance(name, str) and name and all(c.isalnum() or c in ".-" for c in name)):
            raise ValueError(f"--load name {name!r}: letters, digits, '.' and '-'")
        if not isinstance(params, dict) or not isinstance(rates, list):
            raise ValueError(f"--load {text!r}: rates is a list, bench_params an object")
        return cls(name, parse_rates(",".join(map(str, rates))), params)


def parse_rates(text: str) -> tuple[float | None, ...]:
    """``16,inf`` -> (16.0, None); fails naming a rate that is not a positive number or inf."""
    rates = tuple(parse_rate(r) for r in text.split(",") if r.strip())
    if not rates:
        raise ValueError("no request rate given")
    return rates



@dataclass(frozen=True)
class RunSpec:
    """One run of a configuration: the workload, the offered rate, how many client processes
    offer it, the repetition index, and the result file it writes."""

    load: Load
    rate: float | None
    clients: int
    run: int
    path: Path

    @property
    def key(self) -> str:
        """Names the run independently of the configuration: what lockstep partners share."""
        name = result_name(self.load.name or "load", "", rate_label(self.rate), self.run, self.clients)
        return name.removesuffix(".json")


def build_server_command(args: argparse.Namespace, model: str, port: int, scheduler_cls: str) -> list[str]:
    return server_command(model, port, args.dummy_weights, scheduler_cls, args.api_servers, args.additional_config,
                          cli_flags(args.server_params))


def build_bench_command(args: argparse.Namespace, model: str, base_url: str, rate: float | None, load: Load,
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
    return command + cli_flags(bench_params(args, load))


def bench_params(args: argparse.Namespace, load: Load) -> dict[str, Any]:
    """The flags that shape one load's requests: ``--bench-params``, then the load's own."""
    return {**args.bench_params, **load.bench_params}


def compose_result(args: argparse.Namespace, spec: RunSpec, server: Server,
                   bench_cmds: list[list[str]], client: dict[str, Any], metrics: dict[str, Any],
                   stats_before: dict[str, Any] | None, stats_after: dict[str, Any] | None,
                   scheduler_cls: str, host: dict[str, Any],
                   marks: tuple[float, float | None, float]) -> tuple[dict[str, Any], bytes]:
    """The run's result record, and its per-request arrays packed (``lab_metrics.pack_detail``,
    written beside the record); ``marks``:
    when the clients started, began their load and were done (``lab_metrics.run_timing``)."""
    measured, detail, packed = measured_blocks(client, metrics, stats_before, stats_after, host, args.warmup_fraction,
                                       args.timeout_s, args.api_servers)
    record = {
        "schema_version": SCHEMA_VERSION,
        "meta": collect_meta(args.model, weights_label(args.dummy_weights), ["serve_bench.py", *args.argv]),
        "config": RunConfig(
            task=args.task, tag=args.tag, workload=spec.load.name or args.workload, rate=spec.rate, run=spec.run,
            scheduler=args.scheduler, scheduler_cls=scheduler_cls or None,
            strategy_settings=strategy_settings(args.scheduler, args.additional_config),
            server_params=dict(args.server_params), bench_params=bench_params(args, spec.load),
            api_server_count=args.api_servers, client_processes=spec.clients, num_prompts=args.num_prompts,
            seed=args.seed, warmup_fraction=args.warmup_fraction, timeout_s=args.timeout_s,
            goodput=args.goodput or None, server_command=shlex.join(server.command),
            bench_commands=tuple(shlex.join(cmd) for cmd in bench_cmds),
            cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
            parallel_gpu_slots=os.environ.get("LAB3_GPU_SLOTS") or None).to_record(),
        **measured,
        "timing": {"server_ready_s": server.ready_s, "server_start_phases_s": server.start_phases_s,
                   **run_timing(detail, *marks)},
    }
    return record, packed


def all_runs(args: argparse.Namespace) -> list[RunSpec]:
    """Every run of this configuration, in the order they are done."""
    return [RunSpec(load, rate, clients, run,
                    args.out_dir / result_name(args.tag, load.name, rate_label(rate), run, clients))
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
    from harness.step_recorder import STATS_ENV

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
            result, packed = one_run(args, spec, server, model, work, index, stats_path,
                                     bytes_per_token, scheduler_cls, env, barrier)
            write_run(spec.path, result, packed)
            log_run(args.tag, result, spec.path)
    finally:
        server.stop()
        log(f"{args.tag}: server stopped")
    return 0


def one_run(args: argparse.Namespace, spec: RunSpec, server: Server, model: str, work: Path,
            index: int, stats_path: Path, bytes_per_token: int | None, scheduler_cls: str,
            env: dict[str, str], barrier: LockstepBarrier | None) -> tuple[dict[str, Any], bytes]:
    """One benchmark run against the running server; returns its result record and packed arrays."""
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
    parser.add_argument("--server-params", type=json_object, default={}, metavar="JSON",
                        help='vllm serve flags as values, e.g. \'{"max_num_batched_tokens": 2048}\'')
    parser.add_argument("--bench-params", type=json_object, default={}, metavar="JSON",
                        help='vllm bench serve flags that shape the load, as values, e.g. '
                             '\'{"dataset_name": "random", "random_input_len": 1024, "ignore_eos": true}\'')
    parser.add_argument("--workload", default="", help="label of the load, stored in each result")
    parser.add_argument("--rates", default="16", help="comma-separated request rates (inf allowed)")
    parser.add_argument("--load", action="append", default=[], metavar="JSON",
                        help='a named workload (repeatable), \'{"name": "varlen-0.9", "rates": [48], '
                             '"bench_params": {...}}\'; replaces --rates and --workload; its bench_params '
                             'are added to --bench-params; files get _NAME in their names')
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
        args.loads = ([Load.from_json(text) for text in args.load] if args.load
                      else [Load("", parse_rates(args.rates), {})])
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
