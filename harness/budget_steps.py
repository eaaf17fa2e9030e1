"""How many engine steps fit vLLM's CUDA graphs at each token budget of Task 2.

vLLM 0.26 captures CUDA graphs for steps of up to 512 tokens for this model
(``max_cudagraph_capture_size`` in the server log). A larger step runs its kernels one by one,
each launched from the engine core's Python thread. At rate inf the engine core, not the GPU,
sets the pace of a 0.6B model on an H200 (report section 4), so the share of steps above the
graph size is a candidate explanation of Task 2's throughput per budget.

This drives vLLM's own scheduler (``sched_engine``, a fake model, no clock) through Task 2's
rate-inf load and counts the tokens of every step; the count does not depend on step times,
because at rate inf every request is waiting from the start.

    python -m harness.budget_steps --out results/sim_budget_steps.json
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.provenance import collect_meta, write_json_atomic
from harness.sched_engine import H200_KV_BLOCKS, SimConfig, make_request, make_scheduler, run_until_done
from harness.step_model import GRAPH_TOKENS


@dataclass(frozen=True)
class BudgetSteps:
    """One budget's steps: how many, how many above the graph size, how full."""

    max_num_batched_tokens: int
    steps: int
    steps_over_graph: int
    share_over_graph: float
    mean_requests_per_step: float
    decode_only_share: float


def count_steps(budget: int, num_prompts: int, input_len: int, output_len: int, max_num_seqs: int,
                num_blocks: int) -> BudgetSteps:
    """Every request waiting at step 0 (rate inf), stepped until all finished."""
    config = SimConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=budget, num_blocks=num_blocks,
                       max_model_len=input_len + output_len + 16)
    scheduler = make_scheduler(config=config)
    requests = [make_request(input_len, output_len) for _ in range(num_prompts)]
    traces = run_until_done(scheduler, [requests], max_steps=num_prompts * (input_len + output_len))
    tokens = [sum(t.scheduled.values()) for t in traces]
    over = sum(n > GRAPH_TOKENS for n in tokens)
    return BudgetSteps(budget, len(traces), over, round(over / len(traces), 4),
                       round(sum(len(t.scheduled) for t in traces) / len(traces), 1),
                       round(sum(t.kind == "decode_only" for t in traces) / len(traces), 4))


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budgets", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192])
    parser.add_argument("--num-prompts", type=int, default=1000)
    parser.add_argument("--input-len", type=int, default=1024)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--num-gpu-blocks", type=int, default=H200_KV_BLOCKS)
    parser.add_argument("--out", type=Path, required=True, help="the JSON record to write")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    rows = []
    for budget in args.budgets:
        rows.append(count_steps(budget, args.num_prompts, args.input_len, args.output_len,
                                args.max_num_seqs, args.num_gpu_blocks))
        print(f"[budget_steps] {budget}: {rows[-1].share_over_graph:.0%} of {rows[-1].steps} steps "
              f"above {GRAPH_TOKENS} tokens", flush=True)
    meta = collect_meta("qwen3-0.6b (no model: vLLM's scheduler only)", "none (simulated)",
                        ["-m", "harness.budget_steps", *argv])
    write_json_atomic(args.out, {
        "meta": {**meta, "simulated": True},
        "config": {"rate": "inf", "num_prompts": args.num_prompts, "input_len": args.input_len,
                   "output_len": args.output_len, "max_num_seqs": args.max_num_seqs,
                   "num_gpu_blocks": args.num_gpu_blocks, "graph_tokens": GRAPH_TOKENS},
        "budgets": [asdict(row) for row in rows]}, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
