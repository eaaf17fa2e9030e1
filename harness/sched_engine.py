"""Drive the real vLLM 0.26 V1 scheduler in-process on a CPU, with a fake model runner.

The scheduler classes are vLLM's own (or this project's subclasses); only the model is fake:
each step, every request whose prompt is fully computed "samples" one token. That is enough to
test scheduling rules exactly and cheaply (about a millisecond a step): the tests in ``tests/``,
the replay simulator (``harness/sched_sim.py``), the scheduler benchmark
(``harness/sched_bench.py``) and the budget replay (``harness/budget_steps.py``) all drive it.
vLLM is imported inside the functions that build a scheduler, so importing this module is quick.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


if TYPE_CHECKING:  # vLLM (and torch under it) take seconds to import: only a subcommand that runs loads them
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

ROOT = Path(__file__).resolve().parent.parent
TINY_MODEL = ROOT / "models" / "tiny-qwen3"

# The fake KV layout: 2 layers, 2 KV heads of 16 dims, float32 (512 B per token in all).
SIM_LAYERS = ("layers.0.attn", "layers.1.attn")
SIM_KV_HEADS = 2
SIM_HEAD_SIZE = 16
FAKE_TOKEN = 7

_hash_ready = False


H200_KV_BLOCKS = 72_500  # KV blocks of 16 tokens: about the H200's 1.16 M tokens for Qwen3-0.6B


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


def make_scheduler(cls: type[AsyncScheduler] | None = None, config: SimConfig | None = None) -> AsyncScheduler:
    """Build ``cls`` (vLLM's ``AsyncScheduler`` by default) exactly as the engine core would, on a
    CPU device config. vLLM is imported here, not with the module, so that ``--help`` is quick."""
    import torch
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    cls = cls or AsyncScheduler
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
                 priority: int = 0, block_size: int = 16, request_id: str | None = None,
                 hashed: bool = True) -> Request:
    """A request with distinct prompt tokens (no accidental prefix-cache hits); ``hashed=False``
    skips the block hashes, which only prefix caching reads (a tenth of a replay's time)."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

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
        block_hasher=get_request_block_hasher(block_size, hash) if hashed else None,
    )


def fake_model_output(scheduler: AsyncScheduler, output: SchedulerOutput) -> ModelRunnerOutput:
    """One sampled token per request whose prompt is done; none for a partial prefill."""
    from vllm.v1.outputs import ModelRunnerOutput

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
    num_running_after: int
    finished: set[str] = field(default_factory=set)

    @property
    def kind(self) -> str:
        from harness.step_recorder import step_type

        return step_type(len(self.prefill_ids), len(self.decode_ids))


def step(scheduler: AsyncScheduler) -> StepTrace:
    """Plan one step, run the fake model, feed the result back."""
    from harness.step_recorder import is_prefill_work

    output = scheduler.schedule()
    prefill, decode = set(), set()
    for rid, n in output.num_scheduled_tokens.items():
        is_prefill = is_prefill_work(scheduler.requests[rid], n, output)
        (prefill if is_prefill else decode).add(rid)
    running_after = len(scheduler.running)
    before = set(scheduler.requests)
    scheduler.update_from_output(output, fake_model_output(scheduler, output))
    finished = before - set(scheduler.requests)
    return StepTrace(dict(output.num_scheduled_tokens), prefill, decode, running_after, finished)


def run_until_done(scheduler: AsyncScheduler, arrivals: Iterable[list[Request]] = (),
                   max_steps: int = 5000) -> list[StepTrace]:
    """Add each step's arrivals, step, until everything finished or ``max_steps`` ran."""
    traces: list[StepTrace] = []
    batches = iter(arrivals)
    exhausted = False
    for _ in range(max_steps):
        batch = None if exhausted else next(batches, None)
        exhausted = batch is None
        for req in batch or ():
            scheduler.add_request(req)
        if exhausted and not scheduler.has_unfinished_requests():
            break
        traces.append(step(scheduler))
    return traces
