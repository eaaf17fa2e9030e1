"""Custom vLLM V1 schedulers for the lab, loaded with ``--scheduler-cls my_scheduler.<Name>``.

Every class here derives from vLLM 0.26's ``AsyncScheduler`` (the class ``vllm serve`` uses by
default on GPU), so a strategy is compared with the default on the same serving pipeline.
Each one overrides ``schedule(self, *args, **kwargs)``: the engine calls
``schedule(throttle_prefills)``, and an override without ``*args`` kills the engine.

``STRATEGIES`` registers them (``harness/strategies.py``, without vLLM, so the analysis runs
without it; re-exported here, ``SCHEDULER_CLASSES`` binds each name to its class below;
``python my_scheduler.py --list`` prints it): vLLM's own policy
with step accounting (``KVPeakRecorder``, Task 1's KV-cache peak) and Strategies A (prefill-first),
B1 (SJF) and F (SJF among the requests still on time, late ones last); each policy's docstring says
what it does and why. Strategies C, D and E were retired (``RETIRED`` says why); only the labels of
their committed results remain.

Each class is ``StepRecorder`` (accounting) in front of a policy class. The recorder wraps the
policy's whole step, so what it measures is the real state after the step was planned, even
when the policy hides part of the queues from vLLM while planning.

Strategy settings come from ``vllm serve --additional-config '{"key": value}'`` (read in each
policy's ``__init__``); ``SETTING_DEFAULTS`` lists the keys, ``STRATEGIES`` which strategy reads which
(both in ``harness/strategies.py``).

When ``LAB3_CONTROL`` names a file, the recorder reads a per-step token budget from it between
runs (``RuntimeBudget``): one server then serves every budget of a Task 2 study, interleaved.

When ``LAB3_SCHED_STATS`` names a file, the engine-core process writes ``StepRecorder.stats_dict()``
there (atomically) at most once a second while busy, whenever the engine runs out of requests,
and at shutdown. When ``LAB3_STEP_LOG`` names a file, the recorder also appends one CSV row per
engine step there (``StepTimeLog``), from which ``step_model.py`` fits the replay simulator's
step-time model. vLLM's own policy has no recorder: calibrate it as ``kv-recorder``, which plans
exactly as vLLM does.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.request_queue import RequestQueue, SchedulingPolicy
from vllm.v1.request import Request

# The registry (names, letters, labels, settings) has no vLLM in it: the analysis reads it without
# vLLM. Its names are re-exported here, where sweeps, harness and tests have always found them.
from harness.strategies import (DEFAULT_TTFT_MARGIN_MS, DEFAULT_TTFT_SLO_MS, RETIRED, SETTING_DEFAULTS,  # noqa: F401
                                STRATEGIES, Strategy, check_setting, check_settings, main, resolve_strategy,
                                strategy)

logger = logging.getLogger(__name__)

STATS_ENV = "LAB3_SCHED_STATS"
STEP_LOG_ENV = "LAB3_STEP_LOG"
CONTROL_ENV = "LAB3_CONTROL"
STATS_FLUSH_INTERVAL_S = 1.0
STATS_SCHEMA_VERSION = 3  # 2: strategy settings moved from "policy" to "policy_settings"; 3: "budget"


def kv_bytes_per_token(kv_cache_config: Any) -> int:
    """Bytes of KV cache one token occupies across all layers, from the engine's own KV spec.

    Taken from the allocator's page size rather than from the model config, so it is what the
    engine really reserves (for Qwen3-0.6B in bf16: 2 x 28 x 8 x 128 x 2 = 114688).
    """
    total = 0.0
    for group in kv_cache_config.kv_cache_groups:
        spec = group.kv_cache_spec
        total += spec.page_size_bytes / spec.block_size * len(group.layer_names)
    return int(round(total))


def setting(scheduler: Any, key: str) -> float:
    """A strategy's setting: the class attribute ``key`` when not None (set by a test), else
    ``additional_config[key]`` of the engine's ``VllmConfig``, else the default. Other keys of
    ``additional_config`` belong to vLLM or its platforms and are left alone."""
    override = getattr(scheduler, key, None)
    if override is not None:
        return float(override)
    given = (scheduler.vllm_config.additional_config or {}).get(key)
    return SETTING_DEFAULTS[key] if given is None else check_setting(key, given)


def target_and_margin(scheduler: Any, target: str, margin: str) -> tuple[float, float]:
    """An SLO target and the safety margin a strategy keeps below it; the margin must leave
    something."""
    target_ms, margin_ms = setting(scheduler, target), setting(scheduler, margin)
    if margin_ms >= target_ms:
        raise ValueError(f"{margin} ({margin_ms:g} ms) must be below {target} ({target_ms:g} ms)")
    return target_ms, margin_ms


def is_prefill_work(request: Request, num_tokens: int, output: SchedulerOutput) -> bool:
    """A scheduled chunk is prefill if it covers prompt tokens or recomputes several tokens.

    ``schedule()`` has already advanced ``num_computed_tokens`` by the chunk, so the chunk
    started at ``num_computed_tokens - num_tokens``. A decode chunk is one token plus any
    speculative tokens; a longer chunk past the prompt is recomputation after preemption.
    """
    start = request.num_computed_tokens - num_tokens
    num_spec = len(output.scheduled_spec_decode_tokens.get(request.request_id, ()))
    return start < request.num_prompt_tokens or num_tokens > 1 + num_spec


def step_type(prefill_tokens: int, decode_tokens: int) -> str:
    """A step's kind from its prefill and decode amounts (tokens, or requests in the simulator)."""
    if prefill_tokens and decode_tokens:
        return "mixed"
    if prefill_tokens:
        return "prefill_only"
    if decode_tokens:
        return "decode_only"
    return "empty"


class RuntimeBudget:
    """The scheduler's per-step token budget, set between runs from a JSON file the harness writes
    (``{"seq": 3, "token_budget": 2048}``, path in ``LAB3_CONTROL``).

    Why: Task 2 compares ``max_num_batched_tokens`` values, and a server per value costs a start of
    two minutes or more, so the values were measured one after another, hours apart or on other
    machines. The scheduler reads its budget from ``max_num_scheduled_tokens`` alone (vLLM's own
    ``--max-num-scheduled-tokens`` sets it below ``max_num_batched_tokens``, which sizes the model
    runner's buffers); setting that attribute on a server started at the largest budget plans
    exactly the steps a server started at the smaller one plans (``tests/test_schedulers.py``
    checks it step by step), and the budgets can then alternate run by run on one server.

    A new budget takes effect at the first step with no request running (a run's first request), so
    no run mixes two budgets. A budget above the server's ``max_num_batched_tokens`` or below 1 is
    refused: the budget stays and ``error`` says why, which the harness reads in the stats file.
    """

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.seq: int | None = None  # the request last applied (the file's "seq")
        self.error: str | None = None
        self._stamp: tuple[int, int] | None = None  # (mtime_ns, size) of the file last read

    def poll(self, scheduler: AsyncScheduler) -> None:
        """Apply the file's budget if it changed and no request is running. One ``stat`` a step."""
        if self.path is None or scheduler.running:
            return
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return
        if (info.st_mtime_ns, info.st_size) == self._stamp:
            return
        self._stamp = (info.st_mtime_ns, info.st_size)
        try:
            with open(self.path) as handle:
                wanted = json.load(handle)
            seq, budget = wanted["seq"], wanted["token_budget"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            self._refuse(f"unreadable control file {self.path}: {err!r}")
            return
        if seq == self.seq:
            return
        self.seq = seq
        ceiling = scheduler.scheduler_config.max_num_batched_tokens
        if isinstance(budget, bool) or not isinstance(budget, int) or not 1 <= budget <= ceiling:
            self._refuse(f"token budget {budget!r} (request {seq}) is not an integer in [1, {ceiling}], "
                         f"the server's max_num_batched_tokens; the budget stays "
                         f"{scheduler.max_num_scheduled_tokens}")
            return
        scheduler.max_num_scheduled_tokens = budget
        self.error = None

    def _refuse(self, why: str) -> None:
        self.error = why
        logger.error("RuntimeBudget: %s", why)

    def record(self, scheduler: AsyncScheduler) -> dict[str, Any]:
        return {"token_budget": scheduler.max_num_scheduled_tokens,
                "server_max_num_batched_tokens": scheduler.scheduler_config.max_num_batched_tokens,
                "control_seq": self.seq, "control_error": self.error}


class StepRecorder:
    """Mixin that accounts for every scheduler step; put it first in the bases.

    Per step it records the step type (prefill-only, decode-only, mixed, empty), the prefill and
    decode tokens scheduled, preemptions, queue lengths and two KV-cache measures:

    * ``computed_tokens``: the handout's measure, ``sum(req.num_computed_tokens for req in
      running)``, taken after the step is planned (tokens whose KV exists once the step ran);
    * ``blocks_in_use``: blocks the allocator has handed out (the null block excluded), the real
      footprint, which rounds every request up to whole blocks.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.step_counts: dict[str, int] = {"prefill_only": 0, "decode_only": 0, "mixed": 0, "empty": 0}
        self.token_counts: dict[str, int] = {"prefill": 0, "decode": 0}
        self.num_preemptions = 0
        self.peak_computed_tokens = 0
        self.peak_blocks_in_use = 0
        self.peak_running = 0
        self.peak_waiting = 0
        self._kv_bytes_per_token = kv_bytes_per_token(self.kv_cache_config)
        self._stats_path = os.environ.get(STATS_ENV) or None
        self._step_log = StepTimeLog(log_path) if (log_path := os.environ.get(STEP_LOG_ENV)) else None
        self._budget = RuntimeBudget(os.environ.get(CONTROL_ENV) or None)
        self._last_flush = 0.0

    # -- the step -----------------------------------------------------------------------------
    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        self._budget.poll(self)
        output = super().schedule(*args, **kwargs)
        self._record_step(output)
        return output

    def update_from_output(self, scheduler_output: SchedulerOutput, model_runner_output: Any) -> Any:
        if self._step_log is not None:
            self._step_log.applied(scheduler_output)
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        now = time.monotonic()
        if not self.has_unfinished_requests() or now - self._last_flush >= STATS_FLUSH_INTERVAL_S:
            self.flush_stats()
        return outputs

    def shutdown(self) -> None:
        self.flush_stats()
        super().shutdown()

    def _record_step(self, output: SchedulerOutput) -> None:
        features = step_features(self, output)
        if self._step_log is not None:
            self._step_log.planned(output, features)
        self.step_counts[step_type(features.prefill_tokens, features.decode_tokens)] += 1
        self.token_counts["prefill"] += features.prefill_tokens
        self.token_counts["decode"] += features.decode_tokens
        self.num_preemptions += len(output.preempted_req_ids or ())
        computed = sum(req.num_computed_tokens for req in self.running)
        self.peak_computed_tokens = max(self.peak_computed_tokens, computed)
        self.peak_blocks_in_use = max(self.peak_blocks_in_use, self.blocks_in_use())
        self.peak_running = max(self.peak_running, len(self.running))
        self.peak_waiting = max(self.peak_waiting, len(self.waiting) + len(self.skipped_waiting))

    def blocks_in_use(self) -> int:
        pool = self.kv_cache_manager.block_pool
        return pool.num_gpu_blocks - 1 - pool.get_num_free_blocks()

    # -- the stats file -----------------------------------------------------------------------
    def stats_dict(self) -> dict[str, Any]:
        """The recorder's JSON.

        ``steps``: step counts by type; ``tokens``: prefill and decode tokens scheduled;
        ``kv``: ``bytes_per_token``, ``block_size``, ``capacity_blocks`` and ``capacity_tokens``
        (the KV cache the engine allocated), ``budget``: the token budget in force and the last
        ``RuntimeBudget`` request applied, ``peak_computed_tokens`` / ``_bytes`` (handout
        measure), ``peak_blocks_in_use`` and ``peak_allocated_tokens`` / ``_bytes`` (blocks x
        block size); ``queues``: peak running and waiting lengths, preemptions; ``policy``: the
        strategy's own counters (e.g. Strategy A's fallbacks); ``policy_settings``: its knobs
        (e.g. SJF's aging rate), kept apart so that per-run differences of counters make sense.
        """
        block_size = self.block_size
        capacity_blocks = self.kv_cache_manager.block_pool.num_gpu_blocks - 1
        allocated_tokens = self.peak_blocks_in_use * block_size
        return {
            "schema_version": STATS_SCHEMA_VERSION,
            "scheduler_class": f"{type(self).__module__}.{type(self).__name__}",
            "pid": os.getpid(),
            "written_at_unix": time.time(),
            "max_num_seqs": self.scheduler_config.max_num_seqs,
            "max_num_batched_tokens": self.max_num_scheduled_tokens,
            "budget": self._budget.record(self),
            "steps": {"total": sum(self.step_counts.values()), **self.step_counts},
            "tokens": dict(self.token_counts),
            "kv": {
                "bytes_per_token": self._kv_bytes_per_token,
                "block_size": block_size,
                "capacity_blocks": capacity_blocks,
                "capacity_tokens": capacity_blocks * block_size,
                "peak_computed_tokens": self.peak_computed_tokens,
                "peak_computed_bytes": self.peak_computed_tokens * self._kv_bytes_per_token,
                "peak_blocks_in_use": self.peak_blocks_in_use,
                "peak_allocated_tokens": allocated_tokens,
                "peak_allocated_bytes": allocated_tokens * self._kv_bytes_per_token,
            },
            "queues": {
                "peak_running": self.peak_running,
                "peak_waiting": self.peak_waiting,
                "preemptions": self.num_preemptions,
            },
            "policy": dict(getattr(self, "policy_stats", {})),
            "policy_settings": dict(getattr(self, "policy_settings", {})),
        }

    def flush_stats(self) -> None:
        """Write the stats file atomically; a reader never sees a half-written file."""
        self._last_flush = time.monotonic()
        if self._step_log is not None:
            self._step_log.flush()
        if self._stats_path is None:
            return
        directory = os.path.dirname(os.path.abspath(self._stats_path))
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".sched-stats-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(self.stats_dict(), handle, indent=1)
            os.replace(tmp, self._stats_path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise


class StepFeatures(NamedTuple):
    """What a planned step asks of the GPU. ``context_tokens`` is each scheduled request's length
    once the step ran (``num_computed_tokens``, which ``schedule()`` already advanced by the chunk):
    the keys its attention reads."""

    prefill_tokens: int
    decode_requests: int
    decode_tokens: int
    context_tokens: int
    num_requests: int


def step_features(scheduler: AsyncScheduler, output: SchedulerOutput) -> StepFeatures:
    """A planned step's features. One function for the engine's log and the replay simulator, so
    the step-time model is fitted and applied to the same numbers."""
    prefill = decode_reqs = decode = context = 0
    for req_id, num_tokens in output.num_scheduled_tokens.items():
        request = scheduler.requests[req_id]
        context += request.num_computed_tokens
        if is_prefill_work(request, num_tokens, output):
            prefill += num_tokens
        else:
            decode_reqs, decode = decode_reqs + 1, decode + num_tokens
    return StepFeatures(prefill, decode_reqs, decode, context, len(output.num_scheduled_tokens))


class StepTimeLog:
    """One CSV row per engine step, its features and wall time: the calibration data of the
    replay simulator (``LAB3_STEP_LOG``). Rows are appended at each flush, under a header written
    when the file is new, so servers run one after another share one log.

    With async scheduling the engine plans step N+1 while step N runs and applies N's output when
    it has finished, so the time of step N is ``t_update(N) - max(t_update(N-1), t_planned(N))``
    (``pipelined`` = 1 when the first term is the larger), the clock read when
    ``update_from_output`` is entered. This is the engine's cycle, GPU and host together: where
    the host's work per step is the longer, it measures the host, which a replay of this engine
    needs but which is no GPU kernel time.
    """

    COLUMNS = (*StepFeatures._fields, "step_time_us", "pipelined")

    def __init__(self, path: str, clock: Callable[[], float] = time.perf_counter) -> None:
        self.path = path
        self._clock = clock
        self._planned: dict[int, tuple[float, StepFeatures]] = {}
        self._last_update: float | None = None
        self._rows: list[str] = []

    def planned(self, output: SchedulerOutput, features: StepFeatures) -> None:
        self._planned[id(output)] = (self._clock(), features)

    def applied(self, output: SchedulerOutput) -> None:
        now = self._clock()
        entry = self._planned.pop(id(output), None)
        if entry is not None:
            planned_at, features = entry
            pipelined = self._last_update is not None and planned_at < self._last_update
            start = self._last_update if pipelined else planned_at
            self._rows.append(",".join(map(str, (*features, round((now - start) * 1e6), int(pipelined)))))
        self._last_update = now

    def flush(self) -> None:
        if not self._rows:
            return
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        new = not os.path.exists(self.path) or os.path.getsize(self.path) == 0
        with open(self.path, "a") as handle:
            handle.write((",".join(self.COLUMNS) + "\n" if new else "") + "\n".join(self._rows) + "\n")
        self._rows.clear()


class _Queue(RequestQueue):
    """What the waiting queues below (B1's, and F's built on it) derive from the rest of vLLM's
    interface."""

    def remove_request(self, request: Request) -> None:
        self.remove_requests((request,))

    def __bool__(self) -> bool:
        return len(self) > 0


# ---- Strategy A: step-exclusive prefill-first ------------------------------------------------
class PrefillFirstPolicy(AsyncScheduler):
    """While prefill work is pending, plan a prefill-only step; otherwise a decode-only step.

    Prefill work is pending when a request waits (``waiting`` or ``skipped_waiting``) or a
    running request is part-way through a chunked prefill. A prefill-only step hides the
    decoding requests from vLLM's planner and lets it plan the rest: the partial prefills first
    (so a chunked prompt keeps going instead of stalling), then new prompts up to the token
    budget. The handout's one-liner (hide ``running``, call the parent) breaks in three ways,
    which this class closes:

    * seq cap: the parent counts ``len(running)`` against ``max_num_seqs``; with decodes hidden
      it would admit past the cap and trip vLLM's assertion next step. The cap is lowered by the
      number of hidden requests for the pass.
    * livelock: with the KV cache full, a prefill-only pass can schedule nothing, and the
      requests that could be preempted or could finish are hidden, forever. When the pass
      cannot progress (predicted from the seq cap and free blocks, or observed as an empty
      step) the step falls back to vLLM's normal planning; ``policy.fallback_steps`` counts it.
    * exceptions: ``running`` and the cap are restored in ``finally``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.policy_stats: dict[str, float] = {"prefill_steps": 0, "decode_steps": 0,
                                               "fallback_steps": 0, "empty_prefill_passes": 0}
        super().__init__(*args, **kwargs)
        self._fall_back_next_step = False

    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        if not self._prefill_work_pending():
            self.policy_stats["decode_steps"] += 1
            return super().schedule(*args, **kwargs)
        if self._fall_back_next_step or not self._prefill_pass_can_progress():
            self._fall_back_next_step = False
            self.policy_stats["fallback_steps"] += 1
            return super().schedule(*args, **kwargs)
        output = self._prefill_only_pass(*args, **kwargs)
        if output.total_num_scheduled_tokens == 0:
            self._fall_back_next_step = True
            self.policy_stats["empty_prefill_passes"] += 1
        else:
            self.policy_stats["prefill_steps"] += 1
        return output

    def _prefill_work_pending(self) -> bool:
        return bool(self.waiting) or bool(self.skipped_waiting) or any(
            req.is_prefill_chunk for req in self.running)

    def _prefill_pass_can_progress(self) -> bool:
        """Cheap prediction; a wrong 'yes' costs one empty step, then a fallback."""
        if any(req.is_prefill_chunk for req in self.running):
            return True
        num_decoding = len(self.running) + self.num_waiting_for_streaming_input
        if num_decoding >= self.max_num_running_reqs:
            return False
        if not self.waiting:
            return True
        head = self.waiting.peek_request()
        chunk = min(head.num_tokens - head.num_computed_tokens, self.max_num_scheduled_tokens)
        blocks_needed = math.ceil(chunk / self.block_size)
        return self.kv_cache_manager.block_pool.get_num_free_blocks() >= blocks_needed

    def _prefill_only_pass(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        saved_running = self.running
        saved_cap = self.max_num_running_reqs
        decoding = [req for req in saved_running if not req.is_prefill_chunk]
        self.running = [req for req in saved_running if req.is_prefill_chunk]
        self.max_num_running_reqs = saved_cap - len(decoding)
        try:
            return super().schedule(*args, **kwargs)
        finally:
            self.running = self._merge_running(saved_running, decoding, self.running)
            self.max_num_running_reqs = saved_cap

    @staticmethod
    def _merge_running(saved: list[Request], hidden: list[Request],
                       visible_after: list[Request]) -> list[Request]:
        """Original order for requests still running, then those the pass admitted."""
        keep = set(hidden) | set(visible_after)
        saved_set = set(saved)
        return ([req for req in saved if req in keep]
                + [req for req in visible_after if req not in saved_set])


class StepExclusivePrefillFirstScheduler(StepRecorder, PrefillFirstPolicy):
    """Strategy A with step accounting (see ``PrefillFirstPolicy``)."""


# ---- Strategy B1: shortest-job-first ---------------------------------------------------------
class ShortestJobFirstQueue(_Queue):
    """Waiting queue ordered by prompt length, shortest first, with optional aging.

    Sort key: ``(priority, prompt_tokens - aging * seconds_waited, arrival_time)``. Since
    ``seconds_waited = now - arrival_time``, the middle term orders like ``prompt_tokens +
    aging * arrival_time``, which does not change while a request waits, so a heap stays valid.
    With aging ``R`` tokens/s, a request of length ``L`` that arrived at ``t`` can be overtaken
    only by requests arriving before ``t + L / R``: its wait is bounded. ``R = 0`` is pure SJF.
    ``priority`` is used only under vLLM's priority policy (lower first, as in vLLM).
    """

    def __init__(self, use_priority: bool, aging_tokens_per_s: float) -> None:
        self._use_priority = use_priority
        self._aging = aging_tokens_per_s
        self._heap: list[tuple[int, float, float, int, Request]] = []
        self._tiebreak = itertools.count()

    def _entry(self, request: Request) -> tuple[int, float, float, int, Request]:
        priority = request.priority if self._use_priority else 0
        effective_len = request.num_prompt_tokens + self._aging * request.arrival_time
        return (priority, effective_len, request.arrival_time, next(self._tiebreak), request)

    def add_request(self, request: Request) -> None:
        heapq.heappush(self._heap, self._entry(request))

    def pop_request(self) -> Request:
        if not self._heap:
            raise IndexError("pop from an empty queue")
        return heapq.heappop(self._heap)[-1]

    def peek_request(self) -> Request:
        if not self._heap:
            raise IndexError("peek from an empty queue")
        return self._heap[0][-1]

    def prepend_request(self, request: Request) -> None:
        """A preempted request re-enters by its key: SJF has no 'front' to jump to."""
        self.add_request(request)

    def prepend_requests(self, requests: RequestQueue) -> None:
        for request in requests:
            self.add_request(request)

    def remove_requests(self, requests: Iterable[Request]) -> None:
        doomed = set(requests)
        self._heap = [entry for entry in self._heap if entry[-1] not in doomed]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Request]:
        return (entry[-1] for entry in sorted(self._heap))


class ShortestJobFirstPolicy(AsyncScheduler):
    """Admit waiting requests shortest prompt first (the handout's B1).

    The waiting queue is replaced by a ``ShortestJobFirstQueue``, so the order holds for every
    admission vLLM makes (also after preemption), under both the fcfs and priority policies,
    with no per-step re-sort. Running requests are untouched. Aging is off unless the
    ``--additional-config`` key ``aging_tokens_per_s`` (or the class attribute) sets it.
    """

    aging_tokens_per_s: float | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        aging = setting(self, "aging_tokens_per_s")
        self.waiting = ShortestJobFirstQueue(
            use_priority=self.policy == SchedulingPolicy.PRIORITY, aging_tokens_per_s=aging)
        self.policy_settings: dict[str, float] = {"aging_tokens_per_s": aging}


class SJFScheduler(StepRecorder, ShortestJobFirstPolicy):
    """Strategy B1 with step accounting (see ``ShortestJobFirstPolicy``)."""


# ---- Strategy F: SJF among the requests still on time ----------------------------------------
class OnTimeAdmission:
    """Strategy F's on-time bookkeeping, apart from its queue order: a TTFT wait budget, a
    waiting queue whose time is pinned for each planning step (``freeze``), and counters of new
    requests by whether they were on time when first scheduled. Arrival times are vLLM's
    ``Request.arrival_time`` (wall clock, set by the API server), compared with ``wall_clock``.
    Put it before the policy in the bases."""

    ttft_slo_ms: float | None = None
    ttft_margin_ms: float | None = None
    wall_clock: Callable[[], float] = staticmethod(time.time)

    def _start_on_time_admission(self) -> float:
        """The wait budget (TTFT target minus margin) in seconds, kept for the counters; records
        both settings and zeroes the counters."""
        slo_ms, margin_ms = target_and_margin(self, "ttft_slo_ms", "ttft_margin_ms")
        self.policy_settings.update({"ttft_slo_ms": slo_ms, "ttft_margin_ms": margin_ms})
        self.policy_stats = {**getattr(self, "policy_stats", {}), "admitted_on_time": 0, "admitted_late": 0}
        self._budget_s = (slo_ms - margin_ms) / 1000.0
        return self._budget_s

    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        now = self.wall_clock()
        self.waiting.freeze(now)
        try:
            output = super().schedule(*args, **kwargs)
        finally:
            self.waiting.freeze(None)
        for new in output.scheduled_new_reqs:
            waited = now - self.requests[new.req_id].arrival_time
            self.policy_stats["admitted_on_time" if waited < self._budget_s else "admitted_late"] += 1
        return output


class OnTimeShortestJobFirstQueue(ShortestJobFirstQueue):
    """B1's order among the requests that can still meet their TTFT deadline; the late ones after.

    A request that has waited longer than the budget ``D`` (the TTFT SLO minus a margin for its
    own prefill) has missed the SLO whatever happens next; admitting it ahead of one that can still
    make it turns one miss into two. Under overload plain SJF still admits a long prompt once the
    short ones are served, although by then it is late, while new short prompts wait behind it.
    Here a request moves to the late heap once it has waited ``D``, at the first read of the queue
    after that (each moves once, in arrival order: O(log n)), and late requests are admitted,
    shortest first, only when no on-time request waits. Nothing is dropped. A request vLLM puts
    back (preempted) already had its first token: it re-enters the on-time heap and never turns late.
    ``freeze(now)`` pins the time for one planning step, so ``peek_request`` and the
    ``pop_request`` after it always agree; unfrozen, the queue reads ``clock``.
    """

    def __init__(self, use_priority: bool, aging_tokens_per_s: float, deadline_s: float,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(use_priority, aging_tokens_per_s)
        self._deadline_s, self._clock, self._frozen_now = deadline_s, clock, None
        self._on_time: set[int] = set()  # tiebreaks of the entries of the on-time heap still there
        self._by_arrival: list[tuple[float, int, tuple]] = []  # (arrival, tiebreak, entry): who turns late next
        self._late: list[tuple[int, float, float, int, Request]] = []

    def freeze(self, now: float | None) -> None:
        self._frozen_now = now

    def add_request(self, request: Request) -> None:
        entry = self._entry(request)
        heapq.heappush(self._heap, entry)
        heapq.heappush(self._by_arrival, (request.arrival_time, entry[3], entry))
        self._on_time.add(entry[3])

    def prepend_request(self, request: Request) -> None:
        entry = self._entry(request)
        heapq.heappush(self._heap, entry)
        self._on_time.add(entry[3])

    def prepend_requests(self, requests: RequestQueue) -> None:
        for request in requests:
            self.prepend_request(request)

    def _demote(self) -> None:
        """Move every on-time entry whose wait reached the deadline to the late heap, then drop
        moved (or popped) entries off the top of the on-time heap."""
        now = self._frozen_now if self._frozen_now is not None else self._clock()
        while self._by_arrival and self._by_arrival[0][0] <= now - self._deadline_s:
            _, tiebreak, entry = heapq.heappop(self._by_arrival)
            if tiebreak in self._on_time:  # not popped or removed meanwhile
                self._on_time.discard(tiebreak)
                heapq.heappush(self._late, entry)
        while self._heap and self._heap[0][3] not in self._on_time:
            heapq.heappop(self._heap)

    def pop_request(self) -> Request:
        self._demote()
        if self._heap:
            entry = heapq.heappop(self._heap)
            self._on_time.discard(entry[3])
            return entry[-1]
        if self._late:
            return heapq.heappop(self._late)[-1]
        raise IndexError("pop from an empty queue")

    def peek_request(self) -> Request:
        self._demote()
        if self._heap:
            return self._heap[0][-1]
        if self._late:
            return self._late[0][-1]
        raise IndexError("peek from an empty queue")

    def remove_requests(self, requests: Iterable[Request]) -> None:
        doomed = set(requests)
        self._heap = [e for e in self._heap if e[3] in self._on_time and e[-1] not in doomed]
        self._late = [e for e in self._late if e[-1] not in doomed]
        self._on_time = {e[3] for e in self._heap}
        self._by_arrival = [a for a in self._by_arrival if a[1] in self._on_time]
        for heap in (self._heap, self._late, self._by_arrival):
            heapq.heapify(heap)

    def __len__(self) -> int:
        return len(self._on_time) + len(self._late)

    def __iter__(self) -> Iterator[Request]:
        """Admission order at the time of the last read: on time by key, then late by key."""
        on_time = sorted(e for e in self._heap if e[3] in self._on_time)
        return (entry[-1] for entry in [*on_time, *sorted(self._late)])


class OnTimeShortestJobFirstPolicy(OnTimeAdmission, ShortestJobFirstPolicy):
    """B1 with late requests last (``OnTimeShortestJobFirstQueue``): ours, Strategy F.

    Why: in the simulated screen plain SJF gained most on skewed loads near saturation, and lost
    what it gained once the queue held requests already past the TTFT deadline (a long prompt
    admitted late delays short ones that could still make it). Settings (``--additional-config``
    keys; class attributes win): ``aging_tokens_per_s`` as B1, ``ttft_slo_ms`` (default 500) and
    ``ttft_margin_ms`` (default 100: time left for the prefill itself and the first token's trip).
    Arrival times are compared with ``wall_clock``. Counters: ``admitted_on_time`` and
    ``admitted_late`` (new requests by their wait when first scheduled).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.waiting = OnTimeShortestJobFirstQueue(self.policy == SchedulingPolicy.PRIORITY,
                                                   self.policy_settings["aging_tokens_per_s"],
                                                   self._start_on_time_admission(), self.wall_clock)


class OnTimeSJFScheduler(StepRecorder, OnTimeShortestJobFirstPolicy):
    """Strategy F with step accounting (see ``OnTimeShortestJobFirstPolicy``)."""


class KVPeakRecorder(StepRecorder, AsyncScheduler):
    """vLLM's own policy, with step accounting: Task 1 measures the real KV-cache peak with it."""


# ---- The registry's classes ------------------------------------------------------------------
# harness/strategies.py registers every strategy by name with its class's name; here each name is
# bound to its class (a name there without a class here fails on import, before any engine runs).
SCHEDULER_CLASSES: dict[str, type] = {
    entry.name: globals()[entry.class_name] for entry in STRATEGIES.values() if entry.class_name}


def scheduler_class(name: str) -> type | None:
    """The class of a short name or ``my_scheduler.Class`` path (None: vLLM's own scheduler)."""
    return SCHEDULER_CLASSES.get(strategy(name).name)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
