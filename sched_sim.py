"""Drive the real vLLM 0.26 V1 scheduler in-process on a CPU, with a fake model runner.

The scheduler classes are vLLM's own (or this project's subclasses); only the model is fake:
each step, every request whose prompt is fully computed "samples" one token. That is enough to
test scheduling rules exactly and cheaply (about a millisecond a step), which is how the tests
in ``tests/`` use it.

Run as a script it is the scheduler overhead benchmark:

    python sched_sim.py bench [--waiting 1000] [--running 256] [--repeats 200]

prints the CPU time of one ``schedule()`` call for each strategy against vLLM's stock
``AsyncScheduler``, with the given numbers of waiting and running requests.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from collections.abc import Iterable
from typing import Any
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

import torch  # noqa: E402
from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.core.sched.output import SchedulerOutput  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec  # noqa: E402
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

ROOT = Path(__file__).resolve().parent
TINY_MODEL = ROOT / "models" / "tiny-qwen3"

# The fake KV layout: 2 layers, 2 KV heads of 16 dims, float32 -> 2*2*16*4 = 256 B per token per
# layer, 512 B per token in all.
SIM_LAYERS = ("layers.0.attn", "layers.1.attn")
SIM_KV_HEADS = 2
SIM_HEAD_SIZE = 16
SIM_BYTES_PER_TOKEN = 2 * len(SIM_LAYERS) * SIM_KV_HEADS * SIM_HEAD_SIZE * 4
FAKE_TOKEN = 7

_hash_ready = False


@dataclass
class SimConfig:
    """Scheduler knobs for one simulated engine."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    num_blocks: int = 10_000
    block_size: int = 16
    max_model_len: int = 4096
    enable_prefix_caching: bool = False
    policy: str = "fcfs"
    additional_config: dict[str, Any] = field(default_factory=dict)  # strategy settings, as vllm serve gets them


def make_scheduler(cls: type = AsyncScheduler, config: SimConfig | None = None) -> AsyncScheduler:
    """Build ``cls`` exactly as the engine core would, on a CPU device config."""
    cfg = config or SimConfig()
    scheduler_config = SchedulerConfig(
        max_num_seqs=cfg.max_num_seqs,
        max_num_batched_tokens=cfg.max_num_batched_tokens,
        max_model_len=cfg.max_model_len,
        enable_chunked_prefill=True,
        async_scheduling=True,
        is_encoder_decoder=False,
        policy=cfg.policy,
    )
    model_config = ModelConfig(model=str(TINY_MODEL), skip_tokenizer_init=True, dtype="float32",
                               seed=0, max_model_len=cfg.max_model_len)
    cache_config = CacheConfig(block_size=cfg.block_size,
                               enable_prefix_caching=cfg.enable_prefix_caching)
    cache_config.num_gpu_blocks = cfg.num_blocks
    vllm_config = VllmConfig(scheduler_config=scheduler_config, model_config=model_config,
                             cache_config=cache_config, device_config=DeviceConfig(device="cpu"),
                             additional_config=dict(cfg.additional_config))
    spec = FullAttentionSpec(block_size=cfg.block_size, num_kv_heads=SIM_KV_HEADS,
                             head_size=SIM_HEAD_SIZE, dtype=torch.float32)
    kv_cache_config = KVCacheConfig(num_blocks=cfg.num_blocks, kv_cache_tensors=[],
                                    kv_cache_groups=[KVCacheGroupSpec(list(SIM_LAYERS), spec)])
    return cls(vllm_config=vllm_config, kv_cache_config=kv_cache_config,
               structured_output_manager=StructuredOutputManager(vllm_config),
               block_size=cfg.block_size, log_stats=True)


_ids = itertools.count()


def make_request(prompt_len: int, max_tokens: int, *, arrival_time: float | None = None,
                 priority: int = 0, block_size: int = 16, request_id: str | None = None) -> Request:
    """A request with distinct prompt tokens (no accidental prefix-cache hits)."""
    global _hash_ready
    if not _hash_ready:
        init_none_hash(hash)
        _hash_ready = True
    rid = request_id or f"r{next(_ids)}"
    base = (abs(hash(rid)) % 50_000) + 1
    return Request(
        request_id=rid,
        prompt_token_ids=[base + i for i in range(prompt_len)],
        sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True),
        pooling_params=None,
        arrival_time=arrival_time,
        priority=priority,
        block_hasher=get_request_block_hasher(block_size, hash),
    )


def fake_model_output(scheduler: AsyncScheduler, output: SchedulerOutput) -> ModelRunnerOutput:
    """One sampled token per request whose prompt is done; none for a partial prefill."""
    ids = list(output.num_scheduled_tokens)
    sampled = [[] if scheduler.requests[rid].is_prefill_chunk else [FAKE_TOKEN] for rid in ids]
    return ModelRunnerOutput(req_ids=ids, req_id_to_index={rid: i for i, rid in enumerate(ids)},
                             sampled_token_ids=sampled)


@dataclass
class StepTrace:
    """What one step planned, classified the way the recorder classifies it."""

    scheduled: dict[str, int]
    prefill_ids: set[str]
    decode_ids: set[str]
    num_waiting_before: int
    num_running_after: int
    finished: set[str] = field(default_factory=set)

    @property
    def kind(self) -> str:
        if self.prefill_ids and self.decode_ids:
            return "mixed"
        if self.prefill_ids:
            return "prefill_only"
        if self.decode_ids:
            return "decode_only"
        return "empty"


def step(scheduler: AsyncScheduler) -> StepTrace:
    """Plan one step, run the fake model, feed the result back."""
    waiting_before = len(scheduler.waiting) + len(scheduler.skipped_waiting)
    output = scheduler.schedule()
    prefill, decode = set(), set()
    for rid, n in output.num_scheduled_tokens.items():
        req = scheduler.requests[rid]
        start = req.num_computed_tokens - n
        (prefill if start < req.num_prompt_tokens or n > 1 else decode).add(rid)
    running_after = len(scheduler.running)
    before = set(scheduler.requests)
    scheduler.update_from_output(output, fake_model_output(scheduler, output))
    finished = before - set(scheduler.requests)
    return StepTrace(dict(output.num_scheduled_tokens), prefill, decode, waiting_before,
                     running_after, finished)


def run_until_done(scheduler: AsyncScheduler, arrivals: Iterable[list[Request]] = (),
                   max_steps: int = 5000) -> list[StepTrace]:
    """Add each step's arrivals, step, until everything finished or ``max_steps`` ran."""
    traces: list[StepTrace] = []
    arrival_iter = iter(arrivals)
    exhausted = False
    for _ in range(max_steps):
        if not exhausted:
            batch = next(arrival_iter, None)
            if batch is None:
                exhausted = True
            else:
                for req in batch:
                    scheduler.add_request(req)
        if exhausted and not scheduler.has_unfinished_requests():
            break
        traces.append(step(scheduler))
    return traces


# --------------------------------------------------------------------------------------------
# Scheduler overhead benchmark
# --------------------------------------------------------------------------------------------
def _loaded_scheduler(cls: type, waiting: int, running: int, max_num_seqs: int,
                      seed: int) -> AsyncScheduler:
    """A scheduler with ``running`` decoding requests and ``waiting`` queued ones."""
    import random

    rng = random.Random(seed)
    cfg = SimConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=2048, num_blocks=400_000,
                    max_model_len=4096)
    sched = make_scheduler(cls, cfg)
    for _ in range(running):
        sched.add_request(make_request(rng.randint(128, 1024), 2_000))
    while any(r.is_prefill_chunk for r in sched.running) or sched.waiting:
        step(sched)
    for _ in range(waiting):
        sched.add_request(make_request(rng.randint(128, 1024), 2_000))
    return sched


def bench(waiting: int, running: int, repeats: int,
          max_num_seqs: int | None = None) -> list[tuple[str, float, float]]:
    """Median and p90 microseconds per ``schedule()`` call (the fake model update is not timed).

    With ``max_num_seqs == running`` (the default) the seq cap is full: no waiting request can be
    admitted and every step decodes. With headroom, each step also admits prompts, which are
    refilled so the waiting queue keeps its size; running then grows by the admitted requests.
    """
    import my_scheduler

    classes = [("vLLM AsyncScheduler", AsyncScheduler),
               ("KVPeakRecorder", my_scheduler.KVPeakRecorder),
               ("StepExclusivePrefillFirstScheduler", my_scheduler.StepExclusivePrefillFirstScheduler),
               ("SJFScheduler", my_scheduler.SJFScheduler),
               ("StallBoundedPrefillFirstScheduler", my_scheduler.StallBoundedPrefillFirstScheduler),
               ("DeadlineAwareScheduler", my_scheduler.DeadlineAwareScheduler),
               ("TpotPacedPrefillFirstScheduler", my_scheduler.TpotPacedPrefillFirstScheduler)]
    rows = []
    for name, cls in classes:
        sched = _loaded_scheduler(cls, waiting, running, max_num_seqs or running, seed=0)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            output = sched.schedule()
            times.append(time.perf_counter() - start)
            sched.update_from_output(output, fake_model_output(sched, output))
            # Keep the queues at the stated sizes: refill what was admitted or finished.
            while len(sched.waiting) < waiting:
                sched.add_request(make_request(512, 2_000))
        times.sort()
        rows.append((name, statistics.median(times) * 1e6, times[int(0.9 * len(times))] * 1e6))
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("bench", help="CPU time per schedule() call, each strategy vs stock")
    b.add_argument("--waiting", type=int, default=1000)
    b.add_argument("--running", type=int, default=256)
    b.add_argument("--repeats", type=int, default=200)
    b.add_argument("--max-num-seqs", type=int, default=None, help="seq cap (default: --running)")
    args = parser.parse_args(argv)
    rows = bench(args.waiting, args.running, args.repeats, args.max_num_seqs)
    print(f"schedule() CPU time, {args.waiting} waiting, {args.running} running at start, "
          f"max_num_seqs {args.max_num_seqs or args.running}, {args.repeats} calls each")
    print(f"{'scheduler':40s} {'median us':>10s} {'p90 us':>10s} {'vs stock':>9s}")
    base = rows[0][1]
    for name, med, p90 in rows:
        print(f"{name:40s} {med:10.0f} {p90:10.0f} {med / base:8.2f}x")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
