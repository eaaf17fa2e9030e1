"""The lab's sweeps: one ``serve_bench.py`` per server configuration, one lane per GPU.

    python harness/sweep.py task2 --offline                    # max_num_batched_tokens 512..8192
    python harness/sweep.py task3 --offline                    # default, Strategy A, SJF
    python harness/sweep.py slo --offline                      # SLO attainment and goodput vs rate
    python harness/sweep.py task2 --values "1024 4096" --rates 16 --runs 1 --dry-run

``task2.sh``, ``task3.sh`` and ``slo_study.sh`` run these subcommands; ``--help`` of each lists
its flags with their defaults. Every setting comes from a flag: no environment variable changes a
sweep (a shell that happens to export MODEL or SEED must not change an experiment).

A configuration is one server (``serve_bench.py`` starts it, runs every load on it and always
stops it); a run whose result file exists is skipped there, so an interrupted sweep resumes.
With ``--gpus "0 1"`` configurations run one per GPU at once, in waves, and the runs of a wave
start together (lockstep, ``serve_bench.py --sync-dir``): servers on one host share its CPUs,
and a front end measured next to a busy neighbour is slower, so configurations compared within
a wave saw the same neighbour. ``--no-lockstep`` turns that off. Ctrl-C or SIGTERM is passed on to
every running harness, which stops its server; finished runs are kept.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run by path (task2.sh): my_scheduler and harness import from the root
from harness import strategies, workloads  # noqa: E402
from harness.run_config import json_object, parse_rate, rate_label  # noqa: E402
from harness.study_file import STUDY_FILE, Study, StudyFileError, read_study, write_study  # noqa: E402
CAPACITY_BUDGET = 2048  # Task 2's budget whose rate-inf throughput sets the stress rates
FALLBACK_STRESS_RATE = "48"  # about 85% of what an H200 served with Qwen3-0.6B in a smoke run
SLO_KEYS = ("ttft", "tpot", "e2el")  # what `vllm bench serve --goodput` accepts
SLO_SETTINGS = {"ttft": "ttft_slo_ms"}  # the SLO targets a strategy aims at (F: TTFT)


def words(text: str) -> list[str]:
    """A list flag's items, separated by spaces or commas (``"0 1"``, ``16,inf``)."""
    return [w for w in re.split(r"[\s,]+", text) if w]


def rate(text: str) -> str:
    """A request rate as ``vllm bench serve`` takes it (``run_config.parse_rate``: a positive number
    or ``inf``), kept as its label."""
    try:
        return rate_label(parse_rate(text))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def listed(item_type: Any) -> Any:
    """An argparse type: a list of ``item_type`` items (``words``), at least one."""
    def parse(text: str) -> list[Any]:
        items = [item_type(w) for w in words(text)]
        if not items:
            raise argparse.ArgumentTypeError("expected at least one value")
        return items
    return parse


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return int(text)


def gpu_index(text: str) -> str:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a device index")
    return text


# ---- Arguments -------------------------------------------------------------------------------
@dataclass
class SweepArgs:
    """The flags every sweep takes: model, the handout's load and server settings, front end,
    lanes, and what to do with done runs."""

    model: str
    dummy_weights: bool
    runs: int
    num_prompts: int
    input_len: int
    output_len: int
    seed: int
    max_num_seqs: int
    gpu_memory_utilization: float
    server_params: dict[str, Any]
    api_servers: int
    clients: list[int]
    out_dir: Path
    gpus: list[str]
    lockstep: bool
    force: bool
    dry_run: bool
    plot: bool

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser, runs: int, num_prompts: int, out_dir: str) -> None:
        add = parser.add_argument
        add("--model", default="Qwen/Qwen3-0.6B", help="model name or folder (default: %(default)s)")
        add("--dummy-weights", action="store_true", help="random weights of the real shapes")
        add("--offline", action="store_true", help="models/qwen3-0.6b with dummy weights")
        add("--runs", type=positive_int, default=runs, help="runs per point (default: %(default)s)")
        add("--num-prompts", type=positive_int, default=num_prompts, help="requests per run (default: %(default)s)")
        add("--input-len", type=positive_int, default=1024, help="prompt tokens (default: %(default)s)")
        add("--output-len", type=positive_int, default=256, help="output tokens (default: %(default)s)")
        add("--seed", type=int, default=42, help="the load's seed (default: %(default)s)")
        add("--max-num-seqs", type=positive_int, default=256, help="vllm serve --max-num-seqs (default: %(default)s)")
        add("--gpu-memory-utilization", type=float, default=0.9,
            help="vllm serve --gpu-memory-utilization (default: %(default)s)")
        add("--server-params", type=json_object, default={}, metavar="JSON",
            help='more vllm serve flags as values, e.g. \'{"enforce_eager": true}\' (default: none)')
        add("--api-servers", type=positive_int, default=1,
            help="API-server processes (vllm serve --api-server-count); one lags near a 0.6B "
                 "model's capacity (default: %(default)s)")
        add("--clients", type=listed(positive_int), default="1",
            help='client processes each load is split over ("1,2": both; default: %(default)s)')
        add("--out-dir", type=Path, default=ROOT / out_dir, help=f"(default: {out_dir})")
        add("--gpus", type=listed(gpu_index), default=None,
            help='run one configuration per listed GPU at once, e.g. "0 1" (default: one at a time)')
        add("--no-lockstep", action="store_true",
            help="with --gpus, start each configuration's runs without waiting for the rest of its wave")
        add("--force", action="store_true", help="redo runs whose results exist")
        add("--dry-run", action="store_true", help="print every command, run nothing")
        add("--no-plot", action="store_true", help="do not regenerate tables and figures")

    @classmethod
    def from_cli_args(cls, ns: argparse.Namespace) -> SweepArgs:
        values = {f.name: getattr(ns, f.name) for f in fields(cls) if hasattr(ns, f.name)}
        if ns.offline:
            values.update(model=str(ROOT / "models" / "qwen3-0.6b"), dummy_weights=True)
        return cls(**values | {"gpus": ns.gpus or [], "lockstep": not ns.no_lockstep,
                               "plot": not (ns.no_plot or ns.dry_run)})


@dataclass
class Load:
    """A named workload of one configuration: its rates and the ``vllm bench serve`` flags, as
    values, that shape it."""

    name: str
    rates: list[str]
    bench_params: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """``serve_bench.py --load``'s value."""
        return json.dumps({"name": self.name, "rates": self.rates, "bench_params": self.bench_params})


@dataclass
class Config:
    """One server configuration: what ``serve_bench.py`` gets."""

    task: str
    tag: str
    budget: int
    loads: list[Load]
    scheduler: str = "default"
    settings: dict[str, float] = field(default_factory=dict)
    workload: str = ""
    timeout_s: float | None = None
    goodput: str = ""

    def command(self, sweep: SweepArgs) -> list[str]:
        """The ``serve_bench.py`` command line; settings go as JSON values, never as flag strings."""
        server = {"max_num_batched_tokens": self.budget, "max_num_seqs": sweep.max_num_seqs,
                  "gpu_memory_utilization": sweep.gpu_memory_utilization, **sweep.server_params}
        bench = {"dataset_name": "random", "random_input_len": sweep.input_len,
                 "random_output_len": sweep.output_len, "ignore_eos": True}
        cmd = [sys.executable, str(ROOT / "harness" / "serve_bench.py"), "--task", self.task, "--tag", self.tag,
               "--out-dir", str(sweep.out_dir), "--model", sweep.model, "--scheduler", self.scheduler,
               "--runs", str(sweep.runs), "--num-prompts", str(sweep.num_prompts), "--seed", str(sweep.seed),
               "--api-servers", str(sweep.api_servers), "--clients", ",".join(map(str, sweep.clients)),
               "--server-params", json.dumps(server), "--bench-params", json.dumps(bench)]
        if len(self.loads) == 1 and not self.loads[0].name:
            cmd += ["--rates", ",".join(self.loads[0].rates), "--workload", self.workload]
        else:
            cmd += [arg for load in self.loads for arg in ("--load", load.to_json())]
        if self.settings:
            cmd += ["--additional-config", json.dumps(self.settings)]
        if self.timeout_s is not None:
            cmd += ["--timeout-s", str(self.timeout_s)]
        if self.goodput:
            cmd += ["--goodput", self.goodput]
        return cmd + [flag for flag, on in (("--dummy-weights", sweep.dummy_weights), ("--force", sweep.force),
                                            ("--dry-run", sweep.dry_run)) if on]


# ---- Lanes -----------------------------------------------------------------------------------
class Lanes:
    """At most one harness per GPU lane (one lane, "any", without ``--gpus``); configurations in
    lockstep waves of one per lane. Signals reach every running harness, which stops its server."""

    def __init__(self, name: str, sweep: SweepArgs, total: int) -> None:
        self.name, self.sweep, self.total = name, sweep, total
        self.slots: dict[str, subprocess.Popen | None] = {gpu: None for gpu in sweep.gpus or ["any"]}
        self.lockstep = len(self.slots) > 1 and sweep.lockstep
        self.sync_root = Path(tempfile.mkdtemp(prefix="lab3-lockstep-")) if self.lockstep else None
        self.started = self.failed = 0
        signal.signal(signal.SIGTERM, _terminate)

    def start(self, config: Config) -> None:
        """Start ``config`` on the first free lane (waits for one)."""
        cmd = config.command(self.sweep)
        if self.sync_root is not None:
            n = len(self.slots)
            wave = self.started // n
            cmd += ["--sync-dir", str(self.sync_root / f"wave-{wave}"),
                    "--sync-parties", str(min(n, self.total - wave * n))]
        self.started += 1
        while (slot := self._free_slot()) is None:
            time.sleep(1)
        child_env = dict(os.environ)
        if slot != "any":
            say(self.name, f"GPU {slot}: {config.tag}")
            child_env.update(CUDA_VISIBLE_DEVICES=slot, LAB3_GPU_SLOTS=" ".join(self.sweep.gpus))
        self.slots[slot] = subprocess.Popen(cmd, env=child_env)

    def _free_slot(self) -> str | None:
        for slot, proc in self.slots.items():
            if proc is None or self._reaped(slot, proc):
                return slot
        return None

    def _reaped(self, slot: str, proc: subprocess.Popen) -> bool:
        if proc.poll() is None:
            return False
        if proc.returncode != 0:
            self.failed += 1
            say(self.name, f"a configuration failed (exit code {proc.returncode}); the sweep goes on", sys.stderr)
        self.slots[slot] = None
        return True

    def wait(self) -> bool:
        """Wait for every harness; True when all succeeded."""
        while any(proc is not None and not self._reaped(slot, proc) for slot, proc in self.slots.items()):
            time.sleep(0.5)
        return self.failed == 0

    def stop(self) -> None:
        """Pass the interruption on to every running harness and wait for them (each stops its
        server), so an interrupted sweep never leaves a server holding a GPU."""
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        running = [proc for proc in self.slots.values() if proc is not None]
        for proc in running:
            proc.send_signal(signal.SIGTERM)
        for proc in running:
            proc.wait()

    def close(self) -> None:
        if self.sync_root is not None:
            shutil.rmtree(self.sync_root, ignore_errors=True)


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM as Ctrl-C: unwinds to ``run_all``, which stops the harnesses."""
    raise KeyboardInterrupt(f"signal {signum}")


def say(name: str, message: str, stream: Any = None) -> None:
    print(f"[{name}] {message}", file=stream or sys.stdout, flush=True)


def run_all(name: str, sweep: SweepArgs, configs: list[Config], describe: Any) -> int:
    """Every configuration on the lanes, then tables and figures; 1 if any configuration failed."""
    lanes = Lanes(name, sweep, len(configs))
    try:
        for index, config in enumerate(configs, 1):
            say(name, f"{describe(config)} ({index}/{len(configs)})")
            lanes.start(config)
        ok = lanes.wait()
    except KeyboardInterrupt:
        lanes.stop()
        say(name, "interrupted; finished runs are kept, re-run to resume", sys.stderr)
        sys.exit(130)
    finally:
        lanes.close()
    for task in dict.fromkeys(config.task for config in configs):  # one task a sweep ("slo" for slo_study)
        note_study(task, sweep.out_dir)
    if sweep.plot:
        subprocess.run([sys.executable, str(ROOT / "plot_results.py"), "--results", str(sweep.out_dir.parent)],
                       check=False)
    return 0 if ok else 1


QUESTIONS = {"task2": "How TTFT, ITL and throughput move with max_num_batched_tokens (harness/sweep.py task2).",
             "task3": "The strategies against vLLM's default under the handout's loads (harness/sweep.py task3).",
             "slo": "SLO attainment and goodput against the request rate (harness/sweep.py slo)."}


def note_study(task: str, folder: Path) -> None:
    """The folder's study file (``harness/study_file.py``): its grid and hosts from the runs it
    holds now, its question and roles kept where it has one (edit them there)."""
    if not folder.is_dir() or not any(p.name != STUDY_FILE for p in folder.glob("*.json")):
        return  # nothing ran (a dry run)
    try:
        held = read_study(folder) if (folder / STUDY_FILE).exists() else None
        study = Study.from_runs(folder, held.question if held else QUESTIONS[task],
                                held.roles if held else (), held.replays_of if held else ())
    except StudyFileError as err:
        say(task, f"no study file written: {err}", sys.stderr)
        return
    (folder / STUDY_FILE).unlink(missing_ok=True)
    write_study(folder, study)


def capacity_rate(folder: Path, budget: int, fraction: float, output_len: int) -> float | None:
    """``fraction`` x the capacity measured in ``folder`` (``results.capacity_tok_s``), in
    requests/s of ``output_len`` tokens; None when it holds no capacity run."""
    from harness.results import capacity_tok_s

    capacity = capacity_tok_s(folder, budget)
    return None if capacity is None else fraction * capacity / output_len


# ---- Task 2 ----------------------------------------------------------------------------------
def task2(ns: argparse.Namespace) -> int:
    """One server per max_num_batched_tokens value, every rate on each; with
    ``--near-saturation F`` the capacity (budget 2048, rate inf) first, then the rate F x it."""
    sweep = SweepArgs.from_cli_args(ns)

    def config(budget: int, rates: list[str]) -> Config:
        return Config("task2", f"mnbt-{budget}", budget, [Load("", rates)],
                      workload=f"random-{sweep.input_len}in-{sweep.output_len}out")

    rates = list(ns.rates)
    if ns.near_saturation is not None:
        say("task2", f"capacity first: max_num_batched_tokens={CAPACITY_BUDGET} at rate inf")
        if run_all("task2", replace(sweep, plot=False), [config(CAPACITY_BUDGET, ["inf"])],
                   lambda c: c.tag) != 0:
            sys.exit("task2: the capacity runs failed")
        near = capacity_rate(sweep.out_dir, CAPACITY_BUDGET, ns.near_saturation, sweep.output_len)
        if near is None and not sweep.dry_run:
            sys.exit(f"task2: no capacity measured in {sweep.out_dir}")
        if near is not None:
            say("task2", f"near saturation: {ns.near_saturation:g} x capacity = {near:.0f} requests/s")
            rates.append(f"{near:.0f}")
    return run_all("task2", sweep, [config(v, rates) for v in ns.values],
                   lambda c: f"max_num_batched_tokens={c.budget}, rates {','.join(rates)}, {sweep.runs} run(s) each")


# ---- Task 3 and the SLO study ----------------------------------------------------------------
def strategy_settings(pairs: list[str]) -> dict[str, float]:
    """``--strategy-setting KEY=VALUE`` flags as a dict (checked per strategy later)."""
    settings = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        try:
            settings[key] = float(value)
        except ValueError:
            sys.exit(f"error: --strategy-setting {pair!r}: expected KEY=NUMBER")
    return settings


def settings_for(name: str, settings: dict[str, float]) -> dict[str, float]:
    """The part of ``settings`` that strategy ``name`` reads, checked by the registry."""
    taken = strategies.strategy(name).settings
    try:
        return strategies.check_settings(name, {k: v for k, v in settings.items() if k in taken})
    except ValueError as err:
        sys.exit(f"error: strategy {name}: {err}")


def checked_strategies(names: list[str], settings: dict[str, float]) -> None:
    """Every name is a registered strategy and every setting is read by one of them: stop
    before a server starts otherwise."""
    try:
        taken = {key for name in names for key in strategies.strategy(name).settings}
    except ValueError as err:
        sys.exit(f"error: {err} (python my_scheduler.py --list shows the names)")
    unused = sorted(set(settings) - taken)
    if unused:
        sys.exit(f"error: no strategy of this sweep takes the setting(s) {', '.join(unused)}")


def task3(ns: argparse.Namespace) -> int:
    """One server per strategy; the fixed load at --rate and the stress rate(s), the
    variable-length and heavy-tailed loads at the stress rate(s)."""
    sweep = SweepArgs.from_cli_args(ns)
    settings = strategy_settings(ns.strategy_setting)
    checked_strategies(ns.strategies, settings)
    stress = ns.stress_rate or [stress_rate(ns.capacity_from, sweep.output_len)]
    loads = {"fixed": Load("fixed", list(dict.fromkeys([ns.rate, *stress]))),
             "varlen": Load(f"varlen-{ns.range_ratio:g}", stress,
                            {"random_range_ratio": {"input": ns.range_ratio, "output": 0.0}})}
    if "heavy" in ns.workloads:
        loads["heavy"] = Load("heavy", stress, workloads.bench_params(heavy_dataset(sweep)))
    if ns.burstiness != 1:  # gamma gaps instead of Poisson: the load's name says so
        loads = {w: Load(f"{load.name}-burst{ns.burstiness:g}", load.rates,
                         {**load.bench_params, "burstiness": ns.burstiness}) for w, load in loads.items()}
    configs = [Config("task3", name, ns.max_num_batched_tokens, [loads[w] for w in ns.workloads],
                      scheduler=name, settings=settings_for(name, settings), timeout_s=ns.timeout_s)
               for name in ns.strategies]
    return run_all("task3", sweep, configs, lambda c: f"strategy {c.tag}: workloads "
                   f"{' '.join(ns.workloads)}; rates {ns.rate} and {' '.join(stress)} (stress)")


def heavy_dataset(sweep: SweepArgs) -> Path:
    """The heavy-tailed workload's JSONL for this sweep's prompts and seed, beside its results
    (written once, with the model's tokenizer; a dry run only names it)."""
    from harness.offline_model import resolve_model

    folder = sweep.out_dir / "datasets"
    if sweep.dry_run:
        return workloads.dataset_path(folder, sweep.num_prompts, sweep.seed)
    return workloads.ensure_dataset(folder, resolve_model(sweep.model), sweep.num_prompts, sweep.seed)


def stress_rate(capacity_from: Path, output_len: int) -> str:
    """90% of the default scheduler's saturation throughput (Task 2, budget 2048, rate inf) in the
    runs of ``capacity_from`` (``--capacity-from``: a Task 2 folder of the same setting); 48 req/s
    when it holds none."""
    rate_ = capacity_rate(capacity_from, CAPACITY_BUDGET, 0.9, output_len)
    return FALLBACK_STRESS_RATE if rate_ is None else f"{rate_:.0f}"


def slo_terms(text: str) -> dict[str, float]:
    """``--slo "ttft:500 tpot:50"`` as {"ttft": 500.0, "tpot": 50.0}."""
    terms = {}
    for term in words(text):
        key, _, value = term.partition(":")
        try:
            terms[key] = float(value)
        except ValueError:
            key = ""
        if key not in SLO_KEYS:
            raise argparse.ArgumentTypeError(f"{text!r} is not like 'ttft:500 tpot:50'")
    return terms


def slo(ns: argparse.Namespace) -> int:
    """One server per strategy, every rate on it; the SLO goes to --goodput, and its TTFT target
    to the strategies that aim at it (F's ``ttft_slo_ms``)."""
    sweep = SweepArgs.from_cli_args(ns)
    settings = strategy_settings(ns.strategy_setting)
    checked_strategies(ns.strategies, settings)
    goodput = " ".join(f"{k}:{v:g}" for k, v in ns.slo.items())
    targets = {SLO_SETTINGS[k]: v for k, v in ns.slo.items() if k in SLO_SETTINGS}
    configs = [Config("slo", name, ns.max_num_batched_tokens, [Load("fixed", ns.rates)], scheduler=name,
                      settings=settings_for(name, {**targets, **settings}), timeout_s=ns.timeout_s, goodput=goodput)
               for name in ns.strategies]
    return run_all("slo_study", sweep, configs,
                   lambda c: f"strategy {c.tag}: rates {' '.join(ns.rates)}, SLO {goodput}")


# ---- Command line ----------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    subs = top.add_subparsers(dest="sweep", required=True)
    t2 = subs.add_parser("task2", help="max_num_batched_tokens sweep", description=task2.__doc__)
    SweepArgs.add_cli_args(t2, runs=2, num_prompts=1000, out_dir="results/task2")
    t2.add_argument("--values", type=listed(positive_int), default="512 1024 2048 4096 8192",
                    help="max_num_batched_tokens values (default: %(default)s)")
    t2.add_argument("--rates", type=listed(rate), default="16,inf", help="request rates (default: %(default)s)")
    t2.add_argument("--near-saturation", type=float, default=None, metavar="FRACTION",
                    help="also the rate FRACTION x capacity (default: not)")
    t2.set_defaults(run=task2)

    t3 = subs.add_parser("task3", help="strategies under the handout's loads", description=task3.__doc__)
    SweepArgs.add_cli_args(t3, runs=1, num_prompts=1000, out_dir="results/task3")
    add_strategy_args(t3, "default prefill-first sjf")
    t3.add_argument("--workloads", type=listed(workload), default="fixed varlen",
                    help="fixed, varlen, heavy (log-normal lengths, harness/workloads.py) (default: %(default)s)")
    t3.add_argument("--rate", type=rate, default="8", help="the fixed load's rate (default: %(default)s)")
    t3.add_argument("--stress-rate", type=listed(rate), default=None,
                    help="the varlen and heavy loads' rates, also offered on the fixed load (\"52 60\": both); "
                         "default: 0.9 x the capacity in --capacity-from's runs, else 48")
    t3.add_argument("--capacity-from", type=Path, default=ROOT / "results" / "task2",
                    help="the Task 2 results of the same setting (API servers, host) whose capacity at budget "
                         f"{CAPACITY_BUDGET}, rate inf, sets the default stress rate (default: results/task2)")
    t3.add_argument("--range-ratio", type=float, default=0.9,
                    help="varlen: input lengths uniform in [1-R, 1+R] x --input-len (default: %(default)s)")
    t3.add_argument("--burstiness", type=float, default=1.0,
                    help="arrival burstiness of every load (vllm bench serve --burstiness; 1: Poisson, "
                         "below 1: burstier; default: %(default)s)")
    t3.set_defaults(run=task3)

    st = subs.add_parser("slo", help="SLO attainment and goodput vs request rate", description=slo.__doc__)
    SweepArgs.add_cli_args(st, runs=2, num_prompts=600, out_dir="results/slo")
    add_strategy_args(st, "default prefill-first sjf-ontime")
    st.add_argument("--rates", type=listed(rate), default="36 40 44 48", help="request rates (default: %(default)s)")
    st.add_argument("--slo", type=slo_terms, default="ttft:500 tpot:50",
                    help="the SLO (vllm bench serve --goodput; default: %(default)s)")
    st.set_defaults(run=slo)
    return top


def workload(text: str) -> str:
    if text not in ("fixed", "varlen", "heavy"):
        raise argparse.ArgumentTypeError(f"unknown workload {text!r} (fixed, varlen, heavy)")
    return text


def add_strategy_args(sub: argparse.ArgumentParser, default: str) -> None:
    """The flags Task 3 and the SLO study share: strategies, budget, timeout, settings."""
    sub.add_argument("--strategies", type=listed(str), default=default,
                     help="short names (python my_scheduler.py --list; default: %(default)s)")
    sub.add_argument("--max-num-batched-tokens", type=positive_int, default=2048,
                     help="vllm serve --max-num-batched-tokens (default: %(default)s)")
    sub.add_argument("--timeout-s", type=float, default=30.0,
                     help="end-to-end latency above which a request is a timeout (default: %(default)s)")
    sub.add_argument("--strategy-setting", action="append", default=[], metavar="KEY=VALUE",
                     help="a strategy setting (vllm serve --additional-config) for every strategy that reads "
                          "KEY, e.g. aging_tokens_per_s=100 (keys: python my_scheduler.py --list)")


def main(argv: list[str]) -> int:
    ns = parser().parse_args(argv)
    return ns.run(ns)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
