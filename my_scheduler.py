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

Each class is ``StepRecorder`` (accounting, in ``harness/step_recorder.py``) in front of a policy
class built on ``LabPolicy``. The recorder wraps the policy's whole step, so what it measures is the
real state after the step was planned, even when the policy hides part of the queues from vLLM while
planning. A policy keeps its own state (queue, counters, settings) in ``start_policy()``, so that a
running server can switch strategy between runs (``LAB3_CONTROL``, see ``RuntimeControl``) and then
plans what a server started with that class plans: one server serves every strategy of a study.

Strategy settings come from ``vllm serve --additional-config '{"key": value}'`` (read in each
policy's ``start_policy``); ``SETTING_DEFAULTS`` lists the keys, ``STRATEGIES`` which strategy reads
which (both in ``harness/strategies.py``). vLLM's own policy has no recorder: measure or calibrate
it as ``kv-recorder``, which plans exactly as vLLM does.
"""

from __future__ import annotations

import heapq
import itertools
import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.request_queue import RequestQueue, SchedulingPolicy, create_request_queue
from vllm.v1.request import Request

# The engine-side accounting; its names are re-exported here, where engines, harness and tests load them.
from harness.step_recorder import (CONTROL_ENV, STATS_ENV, STEP_LOG_ENV, RuntimeControl, StepRecorder,  # noqa: F401
                                   is_prefill_work, step_features, step_type)

# The registry (names, letters, labels, settings) has no vLLM in it: the analysis reads it without
# vLLM. Its names are re-exported here, where sweeps, harness and tests have always found them.
from harness.strategies import (DEFAULT_TTFT_MARGIN_MS, DEFAULT_TTFT_SLO_MS, RETIRED, RUNTIME_STAND_IN,  # noqa: F401
                                SETTING_DEFAULTS, STRATEGIES, Strategy, check_setting, check_settings, main,
                                resolve_strategy, strategy)


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


class LabPolicy(AsyncScheduler):
    """vLLM's own policy, as the base of the lab's: what a policy keeps beyond vLLM's state is
    built in ``start_policy()``, not in ``__init__``, so that a running scheduler can become
    another lab scheduler between runs (``StepRecorder.switch_strategy``) and start that policy
    afresh. Counters (``policy_stats``) survive a switch, so per-run differences stay right;
    settings (``policy_settings``) are the policy's in force."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.start_policy()

    def start_policy(self) -> None:
        self.waiting = create_request_queue(self.policy)
        self.policy_settings: dict[str, float] = {}
        self.policy_stats: dict[str, float] = getattr(self, "policy_stats", {})

    def count(self, *names: str) -> None:
        """Make sure the counters ``names`` exist (kept if they do)."""
        for name in names:
            self.policy_stats.setdefault(name, 0)


class _Queue(RequestQueue):
    """What the waiting queues below (B1's, and F's built on it) derive from the rest of vLLM's
    interface."""

    def remove_request(self, request: Request) -> None:
        self.remove_requests((request,))

    def __bool__(self) -> bool:
        return len(self) > 0


# ---- Strategy A: step-exclusive prefill-first ------------------------------------------------
class PrefillFirstPolicy(LabPolicy):
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

    def start_policy(self) -> None:
        super().start_policy()
        self.count("prefill_steps", "decode_steps", "fallback_steps", "empty_prefill_passes")
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


class ShortestJobFirstPolicy(LabPolicy):
    """Admit waiting requests shortest prompt first (the handout's B1).

    The waiting queue is replaced by a ``ShortestJobFirstQueue``, so the order holds for every
    admission vLLM makes (also after preemption), under both the fcfs and priority policies,
    with no per-step re-sort. Running requests are untouched. Aging is off unless the
    ``--additional-config`` key ``aging_tokens_per_s`` (or the class attribute) sets it.
    """

    aging_tokens_per_s: float | None = None

    def start_policy(self) -> None:
        super().start_policy()
        aging = setting(self, "aging_tokens_per_s")
        self.waiting = ShortestJobFirstQueue(
            use_priority=self.policy == SchedulingPolicy.PRIORITY, aging_tokens_per_s=aging)
        self.policy_settings["aging_tokens_per_s"] = aging


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
    wait_bound_s: float | None = None
    wall_clock: Callable[[], float] = staticmethod(time.time)

    def _start_on_time_admission(self) -> float:
        """The wait budget (TTFT target minus margin) in seconds, kept for the counters; records
        the settings (the wait bound too) and zeroes the counters."""
        slo_ms, margin_ms = target_and_margin(self, "ttft_slo_ms", "ttft_margin_ms")
        self._bound_s = setting(self, "wait_bound_s")
        self.policy_settings.update({"ttft_slo_ms": slo_ms, "ttft_margin_ms": margin_ms, "wait_bound_s": self._bound_s})
        self.count("admitted_on_time", "admitted_late", "admitted_overdue")
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
            self.policy_stats["admitted_overdue"] += 0 < self._bound_s <= waited
        return output


class OnTimeShortestJobFirstQueue(ShortestJobFirstQueue):
    """B1's order among the requests that can still meet their TTFT deadline; the late ones after;
    and, with a wait bound, the overdue ones before all.

    A request that has waited longer than the budget ``D`` (the TTFT SLO minus a margin for its
    own prefill) has missed the SLO whatever happens next; admitting it ahead of one that can still
    make it turns one miss into two. Under overload plain SJF still admits a long prompt once the
    short ones are served, although by then it is late, while new short prompts wait behind it.
    Here a request turns late once it has waited ``D``, at the first read of the queue after that
    (each turns once, in arrival order: O(log n)), and late requests are admitted, shortest first,
    only when no on-time request waits. Nothing is dropped.

    That order can starve: while on-time requests keep coming, a late one waits for a lull. With
    ``wait_bound_s`` ``W`` > 0 a request that has waited ``W`` turns overdue and goes ahead of
    everything, overdue ones first come first served, so no request waits much beyond ``W`` while
    the engine keeps up with the overdue ones (``W`` = 0: no bound, F as first built).

    A request vLLM puts back (preempted) already had its first token: it re-enters the on-time heap
    and never turns late or overdue. ``freeze(now)`` pins the time for one planning step, so
    ``peek_request`` and the ``pop_request`` after it always agree; unfrozen, the queue reads ``clock``.
    """

    ON_TIME, LATE, OVERDUE = 0, 1, 2

    def __init__(self, use_priority: bool, aging_tokens_per_s: float, deadline_s: float,
                 clock: Callable[[], float] = time.time, wait_bound_s: float = 0.0) -> None:
        super().__init__(use_priority, aging_tokens_per_s)
        self._deadline_s, self._bound_s, self._clock, self._frozen_now = deadline_s, wait_bound_s, clock, None
        self._waiting: dict[int, tuple[int, tuple]] = {}  # tiebreak -> (tier, entry) of every request waiting
        self._late: list[tuple[int, float, float, int, Request]] = []  # by key
        self._overdue: list[tuple[float, int, tuple]] = []  # (arrival, tiebreak, entry): first come first served
        self._turns_late: list[tuple[float, int]] = []  # (arrival, tiebreak): who turns late next
        self._turns_overdue: list[tuple[float, int]] = []  # (arrival, tiebreak): who turns overdue next
        # Entries that left a tier (popped, removed, moved on) stay in its heap and are dropped when on top.

    def freeze(self, now: float | None) -> None:
        self._frozen_now = now

    def add_request(self, request: Request) -> None:
        entry = self._entry(request)
        self._push_on_time(entry)
        heapq.heappush(self._turns_late, (request.arrival_time, entry[3]))
        if self._bound_s > 0:
            heapq.heappush(self._turns_overdue, (request.arrival_time, entry[3]))

    def prepend_request(self, request: Request) -> None:
        self._push_on_time(self._entry(request))

    def prepend_requests(self, requests: RequestQueue) -> None:
        for request in requests:
            self.prepend_request(request)

    def _push_on_time(self, entry: tuple) -> None:
        heapq.heappush(self._heap, entry)
        self._waiting[entry[3]] = (self.ON_TIME, entry)

    def _tier(self, tiebreak: int) -> int | None:
        held = self._waiting.get(tiebreak)
        return None if held is None else held[0]

    def _demote(self) -> None:
        """Turn late every on-time request that waited the deadline and overdue every waiting one
        that waited the bound, then drop what left a tier off the tops of the heaps."""
        now = self._frozen_now if self._frozen_now is not None else self._clock()
        while self._turns_late and self._turns_late[0][0] <= now - self._deadline_s:
            _, tiebreak = heapq.heappop(self._turns_late)
            if self._tier(tiebreak) == self.ON_TIME:
                entry = self._waiting[tiebreak][1]
                self._waiting[tiebreak] = (self.LATE, entry)
                heapq.heappush(self._late, entry)
        while self._turns_overdue and self._turns_overdue[0][0] <= now - self._bound_s:
            arrival, tiebreak = heapq.heappop(self._turns_overdue)
            if self._tier(tiebreak) in (self.ON_TIME, self.LATE):
                entry = self._waiting[tiebreak][1]
                self._waiting[tiebreak] = (self.OVERDUE, entry)
                heapq.heappush(self._overdue, (arrival, tiebreak, entry))
        for heap, tier, at in ((self._overdue, self.OVERDUE, 1), (self._heap, self.ON_TIME, 3),
                               (self._late, self.LATE, 3)):
            while heap and self._tier(heap[0][at]) != tier:
                heapq.heappop(heap)

    def _first(self, pop: bool) -> Request:
        """The next request to admit: overdue first, then on time, then late."""
        self._demote()
        for heap, at in ((self._overdue, 1), (self._heap, 3), (self._late, 3)):
            if heap:
                top = heapq.heappop(heap) if pop else heap[0]
                if pop:
                    del self._waiting[top[at]]
                return top[-1] if at == 3 else top[2][-1]
        raise IndexError(f"{'pop' if pop else 'peek'} from an empty queue")

    def pop_request(self) -> Request:
        return self._first(pop=True)

    def peek_request(self) -> Request:
        return self._first(pop=False)

    def remove_requests(self, requests: Iterable[Request]) -> None:
        """Drop ``requests`` (their heap entries go when they reach the top)."""
        doomed = set(requests)
        for tiebreak in [t for t, (_, entry) in self._waiting.items() if entry[-1] in doomed]:
            del self._waiting[tiebreak]
        for heap, tier, at in ((self._overdue, self.OVERDUE, 1), (self._heap, self.ON_TIME, 3),
                               (self._late, self.LATE, 3)):
            heap[:] = [item for item in heap if self._tier(item[at]) == tier]
            heapq.heapify(heap)

    def __len__(self) -> int:
        return len(self._waiting)

    def __iter__(self) -> Iterator[Request]:
        """Admission order at the time of the last read: overdue by arrival, on time by key, late by key."""
        held = self._waiting.values()
        overdue = sorted((entry[2], entry[3], entry) for tier, entry in held if tier == self.OVERDUE)
        on_time = sorted(entry for tier, entry in held if tier == self.ON_TIME)
        late = sorted(entry for tier, entry in held if tier == self.LATE)
        return (entry[-1] for entry in [*(o[2] for o in overdue), *on_time, *late])


class OnTimeShortestJobFirstPolicy(OnTimeAdmission, ShortestJobFirstPolicy):
    """B1 with late requests last (``OnTimeShortestJobFirstQueue``): ours, Strategy F.

    Why: in the simulated screen plain SJF gained most on skewed loads near saturation, and lost
    what it gained once the queue held requests already past the TTFT deadline (a long prompt
    admitted late delays short ones that could still make it). Settings (``--additional-config``
    keys; class attributes win): ``aging_tokens_per_s`` as B1, ``ttft_slo_ms`` (default 500) and
    ``ttft_margin_ms`` (default 100: time left for the prefill itself and the first token's trip),
    ``wait_bound_s`` (default 0, none: the wait after which a request goes ahead of every newer one,
    so that the longest prompts are not starved under sustained load).
    Arrival times are compared with ``wall_clock``. Counters: ``admitted_on_time``,
    ``admitted_late`` and ``admitted_overdue`` (new requests by their wait when first scheduled).
    """

    def start_policy(self) -> None:
        super().start_policy()
        self.waiting = OnTimeShortestJobFirstQueue(self.policy == SchedulingPolicy.PRIORITY,
                                                   self.policy_settings["aging_tokens_per_s"],
                                                   self._start_on_time_admission(), self.wall_clock, self._bound_s)


class OnTimeSJFScheduler(StepRecorder, OnTimeShortestJobFirstPolicy):
    """Strategy F with step accounting (see ``OnTimeShortestJobFirstPolicy``)."""


class KVPeakRecorder(StepRecorder, LabPolicy):
    """vLLM's own policy, with step accounting: Task 1 measures the real KV-cache peak with it."""


# ---- The registry's classes ------------------------------------------------------------------
# harness/strategies.py registers every strategy by name with its class's name; here each name is
# bound to its class (a name there without a class here fails on import, before any engine runs).
SCHEDULER_CLASSES: dict[str, type] = {
    entry.name: globals()[entry.class_name] for entry in STRATEGIES.values() if entry.class_name}
# What a running server can switch to: every class above, and vLLM's own policy as the class that
# plans exactly as it does.
StepRecorder.strategy_classes = {
    **SCHEDULER_CLASSES, **{name: SCHEDULER_CLASSES[stand_in] for name, stand_in in RUNTIME_STAND_IN.items()}}


def scheduler_class(name: str) -> type | None:
    """The class of a short name or ``my_scheduler.Class`` path (None: vLLM's own scheduler)."""
    return SCHEDULER_CLASSES.get(strategy(name).name)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
