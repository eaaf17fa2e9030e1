"""The engine-side accounting every lab scheduler shares: per-step records, the stats file, the
step-time log, and the run-time control that a study uses to change a server's token budget and
strategy between runs.

``my_scheduler.py`` puts ``StepRecorder`` in front of each policy class (``--scheduler-cls
my_scheduler.<Name>``); this module holds what is not a policy, so that the handout's file shows
the strategies. Environment variables (set by the harness for the engine's process):

* ``LAB3_SCHED_STATS``: the engine-core process writes ``StepRecorder.stats_dict()`` there
  (atomically) at most once a second while busy, whenever the engine runs out of requests, and at
  shutdown.
* ``LAB3_STEP_LOG``: one CSV row per engine step (``StepTimeLog``), from which ``step_model.py``
  fits the replay simulator's step-time model.
* ``LAB3_CONTROL``: a JSON file the recorder reads between runs (``RuntimeControl``): the token
  budget and the strategy in force, so that one server serves every arm of a study, interleaved.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.request import Request

from harness.strategies import SETTING_DEFAULTS, check_settings

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
class RuntimeControl:
    """The scheduler's per-step token budget and its strategy, set between runs from a JSON file
    the harness writes (``{"seq": 3, "token_budget": 2048, "strategy": "sjf-ontime", "settings":
    {"wait_bound_s": 5}}``, path in ``LAB3_CONTROL``; ``strategy`` and ``settings`` may be left out:
    settings not given take the server's ``--additional-config``, else their defaults).

    Why: a server per configuration costs a start of two minutes or more, so configurations were
    measured one after another, hours apart or on other machines. Here one server serves every arm
    of a study, alternating run by run:

    * the budget: the scheduler reads it from ``max_num_scheduled_tokens`` alone (vLLM's own
      ``--max-num-scheduled-tokens`` sets it below ``max_num_batched_tokens``, which sizes the
      model runner's buffers), so a server started at the largest budget and told a smaller one
      plans exactly the steps of a server started at it;
    * the strategy: every lab scheduler is ``StepRecorder`` in front of a policy class, all on
      vLLM's ``AsyncScheduler`` state, so the scheduler becomes another of them
      (``StepRecorder.switch_strategy``) and plans what a server started with that class plans.
      ``tests/test_schedulers.py`` checks both step by step.

    A request takes effect at the first step with no request running (a run's first request), so
    no run mixes two settings. What the server cannot take (a budget above its
    ``max_num_batched_tokens`` or below 1, a strategy without a class here, a setting the strategy
    does not read) is refused whole:
    nothing changes and ``error`` says why, which the harness reads in the stats file.
    """

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.seq: int | None = None  # the request last applied (the file's "seq")
        self.error: str | None = None
        self._stamp: tuple[int, int] | None = None  # (mtime_ns, size) of the file last read

    def poll(self, scheduler: StepRecorder) -> None:
        """Apply the file's request if it changed and no request is running. One ``stat`` a step."""
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
            seq, budget, name = wanted["seq"], wanted["token_budget"], wanted.get("strategy")
            settings = dict(wanted.get("settings") or {})
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            self._refuse(f"unreadable control file {self.path}: {err!r}")
            return
        if seq == self.seq:
            return
        self.seq = seq
        ceiling = scheduler.scheduler_config.max_num_batched_tokens
        if isinstance(budget, bool) or not isinstance(budget, int) or not 1 <= budget <= ceiling:
            self._refuse(f"token budget {budget!r} (request {seq}) is not an integer in [1, {ceiling}], "
                         f"the server's max_num_batched_tokens; nothing changes (budget "
                         f"{scheduler.max_num_scheduled_tokens}, class {type(scheduler).__name__})")
            return
        if name is not None and name not in scheduler.strategy_classes:
            self._refuse(f"strategy {name!r} (request {seq}) is not one this server can switch to "
                         f"({', '.join(sorted(scheduler.strategy_classes))}); nothing changes")
            return
        if settings and name is None:
            self._refuse(f"settings {settings} (request {seq}) without a strategy; nothing changes")
            return
        try:
            settings = check_settings(name, settings) if name is not None else {}
        except ValueError as err:
            self._refuse(f"request {seq}: {err}; nothing changes")
            return
        scheduler.max_num_scheduled_tokens = budget
        if name is not None:
            scheduler.switch_strategy(name, settings)
        self.error = None

    def _refuse(self, why: str) -> None:
        self.error = why
        logger.error("RuntimeControl: %s", why)

    def record(self, scheduler: StepRecorder) -> dict[str, Any]:
        return {"token_budget": scheduler.max_num_scheduled_tokens,
                "server_max_num_batched_tokens": scheduler.scheduler_config.max_num_batched_tokens,
                "control_seq": self.seq, "control_error": self.error}


class StepRecorder:
    """Mixin that accounts for every scheduler step; put it first in the bases, before a policy
    class whose ``start_policy()`` (re)builds what the policy keeps beyond vLLM's own state.

    Per step it records the step type (prefill-only, decode-only, mixed, empty), the prefill and
    decode tokens scheduled, preemptions, queue lengths and two KV-cache measures:

    * ``computed_tokens``: the handout's measure, ``sum(req.num_computed_tokens for req in
      running)``, taken after the step is planned (tokens whose KV exists once the step ran);
    * ``blocks_in_use``: blocks the allocator has handed out (the null block excluded), the real
      footprint, which rounds every request up to whole blocks.

    ``strategy_classes`` names the classes a running scheduler can become between runs
    (``switch_strategy``, asked for through ``RuntimeControl``); ``my_scheduler`` fills it with its
    own, the only ones built on ``start_policy``.
    """

    strategy_classes: Mapping[str, type] = {}

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
        self._control = RuntimeControl(os.environ.get(CONTROL_ENV) or None)
        self._last_flush = 0.0

    # -- the step -----------------------------------------------------------------------------
    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        self._control.poll(self)
        output = super().schedule(*args, **kwargs)
        self._record_step(output)
        return output

    def switch_strategy(self, name: str, settings: Mapping[str, float] | None = None) -> None:
        """Become the class of strategy ``name`` with ``settings`` (the others as the server was
        started: ``--additional-config``, else defaults): same engine state (KV cache, requests,
        counters), the new policy's own state fresh from its ``start_policy()``, and the requests
        that wait moved to its waiting queue in arrival order (a first-come queue keeps that
        order, the others order them by their own keys). Call it with no request running
        (``RuntimeControl`` does), so that no request was planned under both policies."""
        cls, settings = self.strategy_classes[name], dict(settings or {})
        if type(self) is cls and getattr(self, "_runtime_settings", {}) == settings:
            return
        waiting = sorted(self.waiting, key=lambda request: request.arrival_time)
        self.__class__ = cls
        for key in SETTING_DEFAULTS:  # an instance value overrides the config, as a class attribute does
            if key in settings:
                setattr(self, key, settings[key])
            else:
                self.__dict__.pop(key, None)
        self._runtime_settings = settings
        self.start_policy()
        for request in waiting:
            self.waiting.add_request(request)

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
        ``RuntimeControl`` request applied, ``peak_computed_tokens`` / ``_bytes`` (handout
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
            "budget": self._control.record(self),
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
