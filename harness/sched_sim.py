"""The replay simulator: a strategy's real scheduler class (``harness/sched_engine.py``) through
``vllm bench serve``'s workload for a seed, on a virtual clock, each step's time from a step-time
model fitted to measured engine steps (``harness/step_model.py``); it writes a result file in the
schema of a real run, marked simulated.

    python -m harness.sched_sim replay --strategy prefill-first --rate 40 --num-prompts 1000 \
        --step-model STEP_MODEL.json --out results/sim/prefill-first_rate-40.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.sched_engine import (H200_KV_BLOCKS, SimConfig, fake_model_output, make_request,  # noqa: E402
                                  make_scheduler)

if TYPE_CHECKING:
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.outputs import ModelRunnerOutput

RANDOM_PROMPTS = 1000  # requests of the handout's random loads (vllm bench serve's own --num-prompts default)


# ---- Replay: a benchmark's workload through the real scheduler, on a virtual clock -----------
def bench_arrivals(num_prompts: int, rate: float, burstiness: float, seed: int) -> np.ndarray:
    """Send times (s after the start) of ``vllm bench serve --seed S --request-rate R
    --burstiness B``: its ``get_request`` draws gamma gaps (shape B, scale 1/(R*B)) from numpy's
    global generator seeded with S (the random dataset has its own generator, so nothing draws in
    between), sums them, and rescales the sum to exactly ``num_prompts / R``."""
    if math.isinf(rate):
        return np.zeros(num_prompts)
    if math.isinf(burstiness):
        gaps = np.full(num_prompts, 1.0 / rate)
    else:
        rng = np.random.RandomState(seed)
        gaps = np.array([rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness))
                         for _ in range(num_prompts)])
    times = np.cumsum(gaps)
    return times * (num_prompts / rate / times[-1]) if times[-1] != 0 else times


def bench_lengths(num_prompts: int, input_len: int, output_len: int, range_ratio: float, seed: int,
                  num_special_tokens: int = 0,
                  output_range_ratio: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output lengths of ``vllm bench serve --dataset-name random``: uniform integers
    in [L(1-r), L(1+r)] from ``np.random.default_rng(seed)``, inputs first (minus the tokenizer's
    special tokens: none for Qwen3); ``output_range_ratio`` as ``--random-range-ratio
    '{"input": r, "output": r_out}'`` (default ``range_ratio``). The prompt built from them can differ by a token after
    decoding and re-encoding; the simulator uses the drawn lengths."""
    rng = np.random.default_rng(seed)
    real_in = max(0, input_len - num_special_tokens)
    lo_in, hi_in = math.floor(real_in * (1 - range_ratio)), math.ceil(real_in * (1 + range_ratio))
    out_ratio = range_ratio if output_range_ratio is None else output_range_ratio
    lo_out = max(math.floor(output_len * (1 - out_ratio)), 1)
    hi_out = max(math.ceil(output_len * (1 + out_ratio)), 1)
    return rng.integers(lo_in, hi_in + 1, size=num_prompts), rng.integers(lo_out, hi_out + 1, size=num_prompts)


class VirtualClock:
    """The simulated time, read by strategies that look at the clock (F's ``wall_clock``)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def replay_class(strategy: str, clock: VirtualClock) -> type:
    """The strategy's class (its registry entry's, vLLM's own for the default), with the clock
    it reads (``wall_clock``) set to the virtual one."""
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    import my_scheduler

    cls = my_scheduler.scheduler_class(strategy) or AsyncScheduler
    clocks = {name: staticmethod(clock) for name in ("wall_clock",) if hasattr(cls, name)}
    return type(cls.__name__, (cls,), clocks) if clocks else cls


def replay(cls: type, arrivals: np.ndarray, input_lens: np.ndarray, output_lens: np.ndarray,
           step_model: dict[str, Any], config: SimConfig, clock: VirtualClock, seed: int = 0) -> tuple[dict[str, Any], AsyncScheduler, int]:
    """Serve the workload as vLLM 0.26's async engine loop does, on the virtual clock.

    The engine keeps two steps in flight (``EngineCore.step_with_batch_queue``): it plans step
    N+1 while N runs and applies N's output when N ends, so N+1 sees only the arrivals up to
    N-1's end. A step starts when it is planned or when the previous one ends, whichever is
    later, and lasts what the step-time model says for its features (an empty step nothing),
    plus a residual drawn with ``seed`` where the model has them. Tokens are stamped with the end
    of their step, or with ``output_lag_steps`` = 1 (what the H200 logs show) of the step after
    it. Returns the per-request arrays (as ``vllm bench serve --save-detailed`` has them), the
    scheduler and the number of steps.
    """
    from harness.step_recorder import step_features
    from harness.step_model import predict_s

    sched = make_scheduler(cls, config)
    for attr in ("_step_log", "_stats_path"):  # simulated steps are no calibration data
        if hasattr(sched, attr):
            setattr(sched, attr, None)
    token_times: dict[str, list[float]] = {}
    in_flight: deque[tuple[SchedulerOutput, ModelRunnerOutput, float]] = deque()
    gpu_free, nxt, steps, empty_in_row, total = 0.0, 0, 0, 0, len(arrivals)
    lag, rng = step_model.get("output_lag_steps", 0), np.random.default_rng(seed)
    while nxt < total or in_flight or sched.has_requests():
        while nxt < total and arrivals[nxt] <= clock.now:
            sched.add_request(make_request(int(input_lens[nxt]), int(output_lens[nxt]), request_id=f"sim-{nxt}",
                                           arrival_time=float(arrivals[nxt]), block_size=config.block_size,
                                           hashed=config.enable_prefix_caching))
            nxt += 1
        if not in_flight and not sched.has_requests():
            clock.now = float(arrivals[nxt])  # idle until the next request
            continue
        if sched.has_requests():
            output = sched.schedule()
            steps += 1
            features = step_features(sched, output)
            busy = output.total_num_scheduled_tokens > 0
            start = max(clock.now, gpu_free)
            gpu_free = start + (predict_s(step_model, features.prefill_tokens, features.decode_requests,
                                          features.context_tokens, rng) if busy else 0.0)
            in_flight.appendleft((output, fake_model_output(sched, output), gpu_free))
            empty_in_row = 0 if busy else empty_in_row + 1
            if empty_in_row > 8 and not any(o.total_num_scheduled_tokens for o, _, _ in in_flight):
                # nothing to plan until something arrives
                if nxt >= total:
                    raise RuntimeError(f"{cls.__name__} stopped making progress with nothing left to arrive")
                clock.now, empty_in_row = max(clock.now, float(arrivals[nxt])), 0
            if len(in_flight) < 2 and (busy or sched.has_requests()):
                continue
        output, model_output, ends_at = in_flight.pop()
        clock.now = max(clock.now, in_flight[-1][2] if lag and in_flight else ends_at)
        for engine_outputs in sched.update_from_output(output, model_output).values():
            for out in engine_outputs.outputs:
                token_times.setdefault(out.request_id, []).extend([clock.now] * len(out.new_token_ids))
    return request_arrays(arrivals, input_lens, token_times, step_model.get("frontend_ttft_s", 0.0)), sched, steps


def request_arrays(arrivals: np.ndarray, input_lens: np.ndarray, token_times: dict[str, list[float]],
                   frontend_ttft_s: float = 0.0) -> dict[str, Any]:
    """Per-request TTFT, ITLs, lengths, start times and errors, as a real run's client saves them;
    every TTFT plus the front end's time outside the engine's steps (``harness/calibrate.py``)."""
    detail: dict[str, Any] = {"ttfts": [], "itls": [], "input_lens": [int(n) for n in input_lens],
                              "output_lens": [], "start_times": [float(t) for t in arrivals], "errors": []}
    for i, arrived in enumerate(arrivals):
        times = token_times.get(f"sim-{i}", [])
        detail["ttfts"].append(times[0] - arrived + frontend_ttft_s if times else 0.0)
        detail["itls"].append(np.diff(times).tolist())
        detail["output_lens"].append(len(times))
        detail["errors"].append("" if times else "no token")
    return detail


def workload_lengths(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray]:
    """The replay's prompt and output lengths, one per request: the first ``--num-prompts`` lines
    of ``--dataset-path`` (a custom dataset, sent in file order), else the random dataset's draw.
    Without ``--num-prompts`` the workload's own size: the whole file (it is the workload, as
    written), else ``RANDOM_PROMPTS``; so a dataset of another size than 1000 needs no flag."""
    from harness import workloads

    if args.dataset_path is None:
        count = RANDOM_PROMPTS if args.num_prompts is None else args.num_prompts
        return bench_lengths(count, args.input_len, args.output_len, args.range_ratio, args.seed,
                             output_range_ratio=args.output_range_ratio)
    inputs, outputs = workloads.read_lengths(args.dataset_path)
    count = len(inputs) if args.num_prompts is None else args.num_prompts
    if len(inputs) < count:
        raise ValueError(f"{args.dataset_path} has {len(inputs)} prompts, fewer than --num-prompts {count}")
    return inputs[:count], outputs[:count]


def replay_command(args: argparse.Namespace, argv: list[str]) -> int:
    """``replay``: simulate, time it, write the result file (schema of ``serve_bench.py``)."""
    import my_scheduler
    from harness import step_model, workloads
    from harness.lab_metrics import (compact_detail, frontend_check, pack_detail, parse_slo, slo_attainment, slo_key,
                                     summarize, unpack_detail, write_run)
    from harness.provenance import write_json_atomic
    from harness.provenance import collect_meta
    from harness.run_config import RunConfig, parse_rate
    from harness.run_record import SCHEMA_VERSION, number_text, strategy_settings

    model = step_model.load(args.step_model)
    rate = float(args.rate)
    inputs, outputs = workload_lengths(args)
    num_prompts = len(inputs)  # --num-prompts, else the workload's own
    arrivals = bench_arrivals(num_prompts, rate, args.burstiness, args.seed)
    config = SimConfig(max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                       num_blocks=args.num_gpu_blocks, max_model_len=int(inputs.max() + outputs.max()) + 16,
                       additional_config=json.loads(args.additional_config))
    residual_seed = args.seed if args.residual_seed is None else args.residual_seed
    clock = VirtualClock()
    started, cpu_started = time.perf_counter(), time.process_time()
    raw, sched, steps = replay(replay_class(args.strategy, clock), arrivals, inputs, outputs, model, config,
                                  clock, residual_seed)
    wall_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    print(f"simulated {num_prompts} requests, {steps} steps, {clock.now:.1f} s of virtual time "
          f"in {wall_s:.1f} s wall, {cpu_s:.1f} s CPU ({args.strategy}, rate {args.rate})")
    server_params = {"max_num_batched_tokens": args.max_num_batched_tokens, "max_num_seqs": args.max_num_seqs,
                     "num_gpu_blocks_override": args.num_gpu_blocks,
                     "additional_config": json.loads(args.additional_config)}
    ratio = (args.range_ratio if args.output_range_ratio is None
             else {"input": args.range_ratio, "output": args.output_range_ratio})
    dataset = (workloads.bench_params(args.dataset_path) if args.dataset_path else
               {"dataset_name": "random", "random_input_len": args.input_len, "random_output_len": args.output_len,
                "random_range_ratio": ratio})
    detail = compact_detail(raw, args.warmup_fraction)  # exact times, as a GPU run's summary has
    summary = summarize(detail, args.warmup_fraction, args.timeout_s)
    slos = [*([args.goodput] if args.goodput else []), *args.slo]
    if slos:  # the readers take these as stored, so a file without its arrays still has them
        summary["slo_attainment"] = {slo_key(slo): slo_attainment(detail, parse_slo(slo), args.warmup_fraction)
                                     for slo in slos}
    packed = pack_detail(raw, args.warmup_fraction)
    stored = unpack_detail(packed)  # the front-end check of the arrays as the file keeps them
    record = {
        "schema_version": SCHEMA_VERSION, "simulated": True,
        "meta": collect_meta(model["provenance"].get("model", "?"), "none (simulated)", ["sched_sim.py", *argv]),
        "config": RunConfig(
            task="sim", tag=args.strategy, workload=args.workload, rate=parse_rate(args.rate), run=args.run,
            scheduler=args.strategy, scheduler_cls=my_scheduler.resolve_strategy(args.strategy) or None,
            strategy_settings=strategy_settings(args.strategy, server_params["additional_config"]),
            server_params=server_params,
            bench_params={**dataset, "burstiness": args.burstiness, "ignore_eos": True},
            num_prompts=num_prompts, seed=args.seed, warmup_fraction=args.warmup_fraction,
            timeout_s=args.timeout_s, goodput=args.goodput, simulated=True).to_record(),
        # the fit by reference (file, SHA-256) and its terms; its residual quantiles stay in the file
        "step_model": {"file": str(args.step_model),
                       "sha256": hashlib.sha256(Path(args.step_model).read_bytes()).hexdigest(),
                       **{k: v for k, v in model.items() if k != "residual_quantiles_s"}},
        "simulation": {"residual_seed": residual_seed, "steps": steps, "virtual_s": clock.now,
                       "wall_s": wall_s, "cpu_s": cpu_s},
        "frontend": frontend_check(stored, args.warmup_fraction, None, None, None),
        "client": {"num_prompts": num_prompts, "completed": sum(not e for e in detail.errors),
                   "output_throughput": summary["output_throughput_tok_s"],
                   "request_throughput": summary["request_throughput_req_s"]},
        "engine": {"scheduler_stats_cumulative": sched.stats_dict() if hasattr(sched, "stats_dict") else None},
        "summary": summary,
    }
    if args.no_detail:
        record["client"]["detail_file"] = None
        write_json_atomic(args.out, record)
    else:
        write_run(args.out, record, packed)
    print(f"TTFT P50 {number_text(summary['ttft_ms']['p50'], ' ms', 1)}, "
          f"ITL P99 {number_text(summary['itl_ms']['p99'], ' ms', 1)}, "
          f"request throughput {number_text(summary['request_throughput_req_s'], ' req/s', 2)} -> {args.out}")
    return 0


def add_replay_parser(sub: Any) -> None:
    from harness.lab_metrics import WARMUP_FRACTION

    r = sub.add_parser("replay", help="simulate a strategy on a benchmark workload (needs --step-model)")
    r.add_argument("--strategy", required=True, help="a name of `python my_scheduler.py --list`")
    r.add_argument("--step-model", required=True,  # no default: step times must be measured (step_model.load)
                   help="coefficients from `python -m harness.step_model fit`, e.g. "
                        "results/steplogs/qwen3-0.6b_api-4.fit.json (the committed H200 fit)")
    r.add_argument("--rate", default="inf", help="requests/s, or inf (as vllm bench serve)")
    r.add_argument("--num-gpu-blocks", type=int, default=H200_KV_BLOCKS,
                   help="KV blocks of 16 tokens (default: about the H200's 1.16 M tokens for Qwen3-0.6B)")
    r.add_argument("--workload", default="fixed", help="workload name for the tables")
    r.add_argument("--num-prompts", type=int, default=None,
                   help=f"requests to replay (default: the workload's own: every line of --dataset-path, "
                        f"else {RANDOM_PROMPTS}, the handout's random loads)")
    for flag, kind, default in (("--burstiness", float, 1.0), ("--seed", int, 42),
                                ("--input-len", int, 1024), ("--output-len", int, 256), ("--range-ratio", float, 0.0),
                                ("--max-num-batched-tokens", int, 2048), ("--max-num-seqs", int, 256),
                                ("--timeout-s", float, 30.0)):
        r.add_argument(flag, type=kind, default=default, help=f"as vllm bench serve / vllm serve (default {default})")
    r.add_argument("--warmup-fraction", type=float, default=WARMUP_FRACTION,
                   help=f"share of requests, first by start time, left out of the summary and the SLO "
                        f"attainment (default {WARMUP_FRACTION}, what serve_bench.py and a study drop from a GPU "
                        f"run: the report sets a replay's summary beside its GPU runs' summaries, so both "
                        f"cover the same requests; vllm bench serve's own figures, a GPU run's client block, "
                        f"drop none)")
    r.add_argument("--dataset-path", type=Path, default=None,
                   help="a custom dataset (JSONL with input_tokens and output_tokens, e.g. from "
                        "harness/workloads.py): its lengths in file order instead of the random dataset's")
    r.add_argument("--output-range-ratio", type=float, default=None,
                   help="output's range ratio where it differs from the input's (default --range-ratio)")
    r.add_argument("--residual-seed", type=int, default=None,
                   help="seed of the per-step residual draws (default --seed): replays of one load that differ as runs do")
    r.add_argument("--run", type=int, default=1, help="run number written to the file (as the sweeps' --runs)")
    r.add_argument("--goodput", default=None, help="SLO, as vllm bench serve --goodput (e.g. 'ttft:500 tpot:50')")
    r.add_argument("--slo", action="append", default=[],
                   help="another SLO whose attainment the file stores (repeatable; the --goodput syntax)")
    r.add_argument("--no-detail", action="store_true",
                   help="write no per-request arrays: tables that need only the summary and the stored "
                        "attainments (a screen of many replays) stay small")
    r.add_argument("--additional-config", default="{}", help="strategy settings as JSON, as vllm serve gets them")
    r.add_argument("--out", type=Path, required=True)


def build_parser() -> argparse.ArgumentParser:
    """The replay's arguments. Parsing needs nothing of vLLM's: the modules import it only in the
    functions that drive a scheduler, so ``--help`` and a usage error answer at once."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    add_replay_parser(sub)
    return parser


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 0 <= args.warmup_fraction < 1:
        parser.error("--warmup-fraction must be in [0, 1)")
    if args.num_prompts is not None and args.num_prompts < 1:
        parser.error("--num-prompts must be at least 1")
    try:
        return replay_command(args, argv)
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
