"""The lab's schedulers on the real vLLM 0.26 scheduler, driven in-process with a fake model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from vllm.v1.core.sched.async_scheduler import AsyncScheduler

import harness.step_recorder as sr
import my_scheduler as ms
from harness.sched_engine import SimConfig, make_request, make_scheduler, run_until_done, step

ROOT = Path(__file__).resolve().parent.parent


class NaiveHandoutStrategyA(AsyncScheduler):
    """The handout's sample Strategy A (with ``*args`` so the engine can call it at all)."""

    def schedule(self, *args: Any, **kwargs: Any):
        if len(self.waiting) > 0:
            saved_running = self.running
            self.running = []
            try:
                return super().schedule(*args, **kwargs)
            finally:
                self.running = saved_running + self.running
        return super().schedule(*args, **kwargs)


def arrivals(num_steps: int, per_step: int, prompt_len: int, max_tokens: int) -> list[list]:
    return [[make_request(prompt_len, max_tokens) for _ in range(per_step)] for _ in range(num_steps)]


# ---------------------------------------------------------------------------------------------
# Strategy A
# ---------------------------------------------------------------------------------------------
def test_prefill_first_plans_pure_steps_while_prefill_work_is_pending():
    """No step mixes prefill and decode while prompts wait or a chunked prefill is unfinished.

    Prompts of 600 tokens against a 256-token budget force chunked prefills, the case the naive
    version gets wrong (it stalls the partial prompt, then mixes it with decodes).
    """
    sched = make_scheduler(ms.StepExclusivePrefillFirstScheduler,
                           SimConfig(max_num_seqs=64, max_num_batched_tokens=256, num_blocks=5000))
    traces = run_until_done(sched, arrivals(8, 2, 600, 30))
    assert not sched.has_unfinished_requests()
    assert [t.kind for t in traces].count("mixed") == 0
    assert sched.policy_stats["fallback_steps"] == 0
    stats = sched.stats_dict()
    assert stats["steps"]["prefill_only"] > 0 and stats["steps"]["decode_only"] > 0
    assert stats["steps"]["mixed"] == 0


def test_prefill_first_continues_a_chunked_prompt_while_others_wait():
    """A partial prefill gets its next chunk at once, even with more prompts queued behind it."""
    sched = make_scheduler(ms.StepExclusivePrefillFirstScheduler,
                           SimConfig(max_num_seqs=64, max_num_batched_tokens=256, num_blocks=5000))
    long_req = make_request(1000, 4)
    sched.add_request(long_req)
    for _ in range(3):
        sched.add_request(make_request(1000, 4))
    chunks = [step(sched).scheduled.get(long_req.request_id, 0) for _ in range(4)]
    assert chunks == [256, 256, 256, 232]


def test_naive_handout_strategy_a_stalls_chunked_prompts_and_mixes():
    """The pitfalls are real on this vLLM: the naive version breaks both properties above."""
    sched = make_scheduler(NaiveHandoutStrategyA,
                           SimConfig(max_num_seqs=64, max_num_batched_tokens=256, num_blocks=5000))
    long_req = make_request(1000, 4)
    sched.add_request(long_req)
    for _ in range(3):
        sched.add_request(make_request(1000, 4))
    assert [step(sched).scheduled.get(long_req.request_id, 0) for _ in range(3)] == [256, 0, 0]
    traces = run_until_done(sched)
    assert "mixed" in [t.kind for t in traces]


def test_prefill_first_keeps_the_seq_cap():
    """Cap 4, 3 arrivals a step: running never exceeds 4 and every request finishes."""
    sched = make_scheduler(ms.StepExclusivePrefillFirstScheduler,
                           SimConfig(max_num_seqs=4, max_num_batched_tokens=512, num_blocks=5000))
    traces = run_until_done(sched, arrivals(10, 3, 40, 20))
    assert not sched.has_unfinished_requests()
    assert max(t.num_running_after for t in traces) <= 4
    assert sched.stats_dict()["queues"]["peak_running"] <= 4
    assert sched.policy_stats["fallback_steps"] > 0  # decode steps forced by the full cap


def test_naive_handout_strategy_a_breaks_the_seq_cap():
    sched = make_scheduler(NaiveHandoutStrategyA,
                           SimConfig(max_num_seqs=4, max_num_batched_tokens=512, num_blocks=5000))
    with pytest.raises(AssertionError):
        run_until_done(sched, arrivals(10, 3, 40, 20))


def _overloaded_kv_run(cls: type, max_steps: int = 3000):
    """12 prompts of 200 tokens, 200 output tokens each, on 60 blocks of 16 tokens.

    One request needs 25 blocks at the end, so at most two fit: vLLM must preempt.
    """
    sched = make_scheduler(cls, SimConfig(max_num_seqs=16, max_num_batched_tokens=512,
                                          num_blocks=61))
    reqs = [make_request(200, 200) for _ in range(12)]
    traces = run_until_done(sched, [reqs[0:3], reqs[3:6], reqs[6:9], reqs[9:12]], max_steps=max_steps)
    finished = set().union(*(t.finished for t in traces))
    return sched, finished, {r.request_id for r in reqs}


def test_prefill_first_finishes_everything_when_kv_cache_is_far_too_small():
    stock, stock_done, ids = _overloaded_kv_run(AsyncScheduler)
    assert stock_done == ids
    sched, done, ids = _overloaded_kv_run(ms.StepExclusivePrefillFirstScheduler)
    assert done == ids
    assert not sched.has_unfinished_requests()
    stats = sched.stats_dict()
    assert stats["queues"]["preemptions"] > 0
    assert stats["policy"]["fallback_steps"] > 0


def test_naive_handout_strategy_a_livelocks_when_kv_cache_is_full():
    sched, done, ids = _overloaded_kv_run(NaiveHandoutStrategyA, max_steps=2000)
    assert done != ids and sched.has_unfinished_requests()


class _ExplodingParent(AsyncScheduler):
    """Stands in below the policy in the MRO and fails while the policy has running hidden."""

    explode = False

    def schedule(self, *args: Any, **kwargs: Any):
        if self.explode:
            raise RuntimeError("planner failed")
        return super().schedule(*args, **kwargs)


class _ExplodingPrefillFirst(ms.PrefillFirstPolicy, _ExplodingParent):
    pass


def test_prefill_first_restores_running_and_cap_when_planning_raises():
    sched = make_scheduler(_ExplodingPrefillFirst,
                           SimConfig(max_num_seqs=8, max_num_batched_tokens=512, num_blocks=5000))
    for _ in range(3):
        sched.add_request(make_request(64, 50))
    step(sched)
    step(sched)  # three requests decoding
    sched.add_request(make_request(64, 50))
    running_before = list(sched.running)
    sched.explode = True
    with pytest.raises(RuntimeError, match="planner failed"):
        sched.schedule()
    assert sched.running == running_before
    assert sched.max_num_running_reqs == 8
    sched.explode = False
    assert not run_until_done(sched) == [] and not sched.has_unfinished_requests()


def _burst_run(cls: type) -> tuple[int, list]:
    """4 requests start decoding, then a burst of 12 one-chunk prompts (10 output tokens each)
    arrives at once.

    Budget 256 and prompts of 256 tokens: a prefill-only step admits one prompt. Returns the
    longest run of steps in which requests were decoding but none got a token, and the traces.
    """
    sched = make_scheduler(cls, SimConfig(max_num_seqs=64, max_num_batched_tokens=256,
                                          num_blocks=5000))
    for _ in range(4):
        sched.add_request(make_request(32, 60))
    traces, longest, run = [], 0, 0
    for i in range(400):
        if i == 2:
            for _ in range(12):
                sched.add_request(make_request(256, 10))
        if i > 2 and not sched.has_unfinished_requests():
            break
        decoding = {r.request_id for r in sched.running if not r.is_prefill_chunk}
        trace = step(sched)
        traces.append(trace)
        run = run + 1 if decoding and not decoding & trace.decode_ids else 0
        longest = max(longest, run)
    assert not sched.has_unfinished_requests()
    return longest, traces


def test_strategy_a_starves_decoders_through_a_burst():
    """A's cost (its ITL tail on the GPU): it runs the whole burst of prefills before any decode."""
    longest, traces = _burst_run(ms.StepExclusivePrefillFirstScheduler)
    assert longest >= 12
    assert [t.kind for t in traces].count("mixed") == 0


# ---------------------------------------------------------------------------------------------
# SJF
# ---------------------------------------------------------------------------------------------
def _admission_order(sched, reqs) -> list[int]:
    """Prompt lengths in the order the scheduler first scheduled them (one at a time: cap 1)."""
    for req in reqs:
        sched.add_request(req)
    lengths = {r.request_id: r.num_prompt_tokens for r in reqs}
    order: list[int] = []
    for trace in run_until_done(sched):
        for rid in trace.scheduled:
            if lengths[rid] not in order:
                order.append(lengths[rid])
    return order


def test_sjf_admits_shortest_prompt_first():
    cfg = SimConfig(max_num_seqs=1, max_num_batched_tokens=2048, num_blocks=5000)
    lengths = [900, 100, 500, 300, 700]
    stock = _admission_order(make_scheduler(AsyncScheduler, cfg),
                             [make_request(n, 3, arrival_time=i) for i, n in enumerate(lengths)])
    assert stock == lengths
    sjf = _admission_order(make_scheduler(ms.SJFScheduler, cfg),
                           [make_request(n, 3, arrival_time=i) for i, n in enumerate(lengths)])
    assert sjf == sorted(lengths)


def test_sjf_orders_by_priority_then_length_under_the_priority_policy():
    cfg = SimConfig(max_num_seqs=1, max_num_batched_tokens=2048, num_blocks=5000, policy="priority")
    specs = [(900, 0), (100, 1), (500, 0), (300, 1), (700, 0)]
    reqs = [make_request(n, 3, arrival_time=i, priority=p) for i, (n, p) in enumerate(specs)]
    assert _admission_order(make_scheduler(ms.SJFScheduler, cfg), reqs) == [500, 700, 900, 100, 300]


def _long_job_wait(aging: float | None, steps: int = 300) -> int | None:
    """A 1000-token prompt arrives at t=0, then a 100-token prompt every step (t = step index).

    Returns the step at which the long prompt was first scheduled, or None within ``steps``.
    """
    cls = type("AgingSJF", (ms.SJFScheduler,), {"aging_tokens_per_s": aging})
    sched = make_scheduler(cls, SimConfig(max_num_seqs=1, max_num_batched_tokens=2048,
                                          num_blocks=5000))
    long_req = make_request(1000, 2, arrival_time=0.0)
    sched.add_request(long_req)
    for t in range(steps):
        sched.add_request(make_request(100, 2, arrival_time=float(t)))
        if long_req.request_id in step(sched).scheduled:
            return t
    return None


def test_sjf_without_aging_starves_a_long_prompt():
    assert _long_job_wait(aging=0.0) is None


def test_sjf_aging_bounds_the_wait_of_a_long_prompt():
    """With aging R, only prompts arriving before (1000 - 100) / R can overtake the long one.

    R = 100 tokens/s: arrivals up to t = 9 overtake it; each short job takes 2 steps on the single
    slot, so it must be scheduled by about step 20 (vs never without aging).
    """
    waited = _long_job_wait(aging=100.0)
    assert waited is not None and waited <= 22


def test_sjf_aging_rate_comes_from_additional_config():
    sched = make_scheduler(ms.SJFScheduler, SimConfig(additional_config={"aging_tokens_per_s": 250}))
    assert sched.stats_dict()["policy_settings"]["aging_tokens_per_s"] == 250.0
    with pytest.raises(ValueError, match="aging_tokens_per_s"):
        make_scheduler(ms.SJFScheduler, SimConfig(additional_config={"aging_tokens_per_s": "fast"}))


# ---------------------------------------------------------------------------------------------
# Strategy F: SJF among the requests still on time, late ones last
# ---------------------------------------------------------------------------------------------
class FakeClock:
    """The time the policy reads; the test advances it by a simulated step time."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _burst_ttfts(cls: type, clock: FakeClock, step_s: float = 0.01) -> dict[str, float]:
    """A burst of 80 one-chunk prompts at t = 0, then one prompt every 2 steps for 200 steps.

    Budget 256 and prompts of 256 tokens: one prompt a step, so the burst alone keeps the queue
    80 steps (0.8 s) long, and the arrivals after it (half the capacity) find a backlog for
    about 160 steps. Returns each request's TTFT: from arrival to the end of the step that
    finished its prompt; the burst's requests have ids in ``burst``.
    """
    sched = make_scheduler(cls, SimConfig(max_num_seqs=256, max_num_batched_tokens=256,
                                          num_blocks=20_000))
    clock.now = 0.0
    arrival: dict[str, float] = {}
    ttft: dict[str, float] = {}
    for i in range(1000):
        batch = [make_request(256, 4, request_id=f"burst-{k}") for k in range(80)] if i == 0 else (
            [make_request(256, 4)] if i % 2 == 0 and i <= 400 else [])
        for req in batch:
            req.arrival_time = clock.now
            arrival[req.request_id] = clock.now
            sched.add_request(req)
        if i > 400 and not sched.has_unfinished_requests():
            break
        trace = step(sched)
        clock.now += step_s
        for rid in trace.prefill_ids:
            request = sched.requests.get(rid)
            if request is None or request.num_computed_tokens >= request.num_prompt_tokens:
                ttft.setdefault(rid, clock.now - arrival[rid])
    assert not sched.has_unfinished_requests()
    assert set(ttft) == set(arrival)  # every request was served: nothing dropped
    return ttft


def test_on_time_sjf_keeps_the_seq_cap_and_never_livelocks():
    """Its queue takes preempted requests back (``prepend_request``) without losing any."""
    sched = make_scheduler(ms.OnTimeSJFScheduler, SimConfig(max_num_seqs=4, max_num_batched_tokens=512,
                                                            num_blocks=5000))
    traces = run_until_done(sched, arrivals(10, 3, 40, 20))
    assert not sched.has_unfinished_requests()
    assert max(t.num_running_after for t in traces) <= 4
    sched, done, ids = _overloaded_kv_run(ms.OnTimeSJFScheduler)
    assert done == ids and not sched.has_unfinished_requests()
    assert sched.stats_dict()["queues"]["preemptions"] > 0


def test_on_time_sjf_queue_puts_late_requests_last_shortest_first_within_each():
    """Budget 0.4 s. At t = 1.0 the prompts that arrived at 0.8 and 0.9 are on time (shortest
    first), those of 0.0 and 0.5 are late (shortest first) and go after them, whatever their
    length; a request vLLM puts back never turns late. ``peek``, ``pop`` and iteration agree."""
    clock = FakeClock()
    clock.now = 1.0
    queue = ms.OnTimeShortestJobFirstQueue(False, 0.0, deadline_s=0.4, clock=clock)
    reqs = {(n, t): make_request(n, 2, arrival_time=t) for n, t in ((50, 0.0), (900, 0.9), (30, 0.5), (400, 0.8))}
    for req in reqs.values():
        queue.add_request(req)
    expected = [(400, 0.8), (900, 0.9), (30, 0.5), (50, 0.0)]
    assert [(r.num_prompt_tokens, r.arrival_time) for r in queue] == [(30, 0.5), (50, 0.0), (400, 0.8), (900, 0.9)]
    popped = []  # the first read at t = 1.0 moves the late ones
    while queue:
        head = queue.peek_request()
        popped.append(queue.pop_request())
        assert popped[-1] is head
    assert [(r.num_prompt_tokens, r.arrival_time) for r in popped] == expected
    plain = ms.ShortestJobFirstQueue(False, 0.0)  # B1 would admit the late short ones first
    for req in reqs.values():
        plain.add_request(req)
    assert [plain.pop_request().num_prompt_tokens for _ in range(4)] == [30, 50, 400, 900]
    queue.prepend_request(reqs[(900, 0.9)])  # preempted: back in by its length, never late
    queue.add_request(reqs[(400, 0.8)])
    clock.now = 5.0
    assert [r.num_prompt_tokens for r in queue] == [400, 900] and queue.peek_request() is reqs[(900, 0.9)]
    assert len(queue) == 2
    queue.remove_requests([reqs[(900, 0.9)]])
    assert len(queue) == 1 and queue.pop_request() is reqs[(400, 0.8)] and not queue


def test_a_wait_bound_puts_overdue_requests_first_oldest_first():
    """Deadline 0.4 s, bound 3 s. At t = 5.0 the prompts of 0.5 and 1.0 have waited over 3 s:
    they go first, oldest first, whatever their length; then the on-time one; then the late one
    (waited 0.4-3 s). A preempted request never turns overdue. Removal keeps the rest in order."""
    clock = FakeClock()
    queue = ms.OnTimeShortestJobFirstQueue(False, 0.0, deadline_s=0.4, clock=clock, wait_bound_s=3.0)
    reqs = {t: make_request(n, 2, arrival_time=t) for n, t in ((900, 1.0), (2000, 0.5), (30, 4.0), (10, 4.8))}
    for req in reqs.values():
        queue.add_request(req)
    back = make_request(5000, 2, arrival_time=0.0)
    queue.prepend_request(back)  # preempted at 0.0: on time for good
    clock.now = 5.0
    order = [(r.num_prompt_tokens, r.arrival_time) for r in queue]  # as of the last read: none yet
    assert queue.peek_request() is reqs[0.5]
    assert [(r.num_prompt_tokens, r.arrival_time) for r in queue] == [(2000, 0.5), (900, 1.0), (10, 4.8),
                                                                        (5000, 0.0), (30, 4.0)] != order
    queue.remove_requests([reqs[1.0]])
    assert [queue.pop_request() for _ in range(len(queue))] == [reqs[0.5], reqs[4.8], back, reqs[4.0]]
    with pytest.raises(IndexError):
        queue.peek_request()


def test_a_wait_bound_caps_the_longest_prompts_wait_under_sustained_short_arrivals():
    """One long prompt behind two short ones, then a short one every 2 steps, more than 2 sequences
    can serve: the queue
    grows, its short prompts turn late too, and F (shortest first among the late) never admits the
    long one while they keep coming. With a 1 s bound it goes first about 1 s after it arrived,
    and the engine counts it overdue."""
    clock = FakeClock()
    admitted: dict[float, float | None] = {}
    for bound in (0.0, 1.0):
        sched = make_scheduler(_on_time_sjf(clock, slo_ms=300.0, margin_ms=50.0, bound_s=bound),
                               SimConfig(max_num_seqs=2, max_num_batched_tokens=256, num_blocks=5000))
        clock.now = 0.0
        for _ in range(2):  # the long one finds both sequences taken
            sched.add_request(make_request(64, 8, arrival_time=0.0))
        sched.add_request(make_request(1500, 2, arrival_time=0.0, request_id=f"long-{bound}"))
        admitted[bound] = None
        for i in range(400):  # 8 s at 20 ms a step
            clock.now = i * 0.02
            if i % 2 == 0:
                sched.add_request(make_request(64, 8, arrival_time=clock.now))
            if f"long-{bound}" in step(sched).prefill_ids and admitted[bound] is None:
                admitted[bound] = clock.now
        if bound:
            assert sched.policy_stats["admitted_overdue"] >= 1
    assert admitted[0.0] is None, admitted  # starved for as long as the short ones came
    assert admitted[1.0] is not None and 1.0 <= admitted[1.0] <= 1.5, admitted


def _on_time_sjf(clock: FakeClock, slo_ms: float = 500.0, margin_ms: float = 100.0, bound_s: float = 0.0) -> type:
    return type("TestOnTimeSJF", (ms.OnTimeSJFScheduler,),
                {"wall_clock": staticmethod(clock), "ttft_slo_ms": slo_ms, "ttft_margin_ms": margin_ms,
                 "wait_bound_s": bound_s})


def test_on_time_sjf_admits_the_on_time_request_before_a_shorter_late_one_and_counts_both():
    clock = FakeClock()
    sched = make_scheduler(_on_time_sjf(clock), SimConfig(max_num_seqs=1, max_num_batched_tokens=2048,
                                                           num_blocks=5000))
    clock.now = 100.0
    late, fresh = make_request(64, 2, arrival_time=99.0), make_request(96, 2, arrival_time=99.9)
    assert _admission_order(sched, [late, fresh]) == [96, 64]
    assert sched.policy_stats == {"admitted_on_time": 1, "admitted_late": 1, "admitted_overdue": 0}
    settings = sched.stats_dict()["policy_settings"]
    assert settings == {"aging_tokens_per_s": 0.0, "ttft_slo_ms": 500.0, "ttft_margin_ms": 100.0, "wait_bound_s": 0.0}
    plain = make_scheduler(ms.SJFScheduler, SimConfig(max_num_seqs=1, max_num_batched_tokens=2048, num_blocks=5000))
    late, fresh = make_request(64, 2, arrival_time=99.0), make_request(96, 2, arrival_time=99.9)
    assert _admission_order(plain, [late, fresh]) == [64, 96]


def test_on_time_sjf_meets_more_ttft_deadlines_after_a_burst_than_sjf():
    """``_burst_ttfts``' load (80 prompts at once, then one every 2 steps; all one length, so
    SJF is FCFS here), TTFT target 0.3 s: SJF serves the backlog first and the later arrivals
    wait behind it; F serves every later arrival on time and the burst's late ones after."""
    clock = FakeClock()
    runs = {"sjf": _burst_ttfts(ms.SJFScheduler, clock),
            "ontime": _burst_ttfts(_on_time_sjf(clock, slo_ms=300.0, margin_ms=50.0), clock)}
    met = {name: sum(t <= 0.3 for rid, t in ttft.items() if not rid.startswith("burst-"))
           for name, ttft in runs.items()}
    assert met["ontime"] == 200 and met["sjf"] <= 160, met
    assert max(runs["ontime"].values()) < 10.0  # nothing dropped: the late ones were served


def test_on_time_sjf_settings_come_from_additional_config_and_are_checked():
    given = {"ttft_slo_ms": 800, "ttft_margin_ms": 150, "aging_tokens_per_s": 20, "wait_bound_s": 4}
    settings = make_scheduler(ms.OnTimeSJFScheduler, SimConfig(additional_config=given)).stats_dict()["policy_settings"]
    assert settings == {"aging_tokens_per_s": 20.0, "ttft_slo_ms": 800.0, "ttft_margin_ms": 150.0, "wait_bound_s": 4.0}
    with pytest.raises(ValueError, match="wait_bound_s must be a number >= 0"):
        make_scheduler(ms.OnTimeSJFScheduler, SimConfig(additional_config={**given, "wait_bound_s": -1}))
    with pytest.raises(ValueError, match="ttft_margin_ms"):
        make_scheduler(ms.OnTimeSJFScheduler, SimConfig(additional_config={**given, "ttft_margin_ms": 900}))


# ---------------------------------------------------------------------------------------------
# Recorder
# ---------------------------------------------------------------------------------------------
def test_recorder_peaks_equal_hand_computed_values(tmp_path, monkeypatch):
    """Prompts of 30 and 14 tokens, 5 output tokens each, blocks of 16 tokens, 512 B per token.

    Step 1 prefills both (30 + 14 = 44 tokens). Decode steps 2-5 each add one token per request;
    the last decode step computes positions 30..33 and 14..17, so the peak of the handout's
    measure is 34 + 18 = 52 tokens. Blocks: 34 tokens -> 3 blocks, 18 -> 2 blocks: 5 blocks =
    80 token slots = 40960 B; 52 tokens = 26624 B.
    """
    path = tmp_path / "stats" / "engine.json"
    monkeypatch.setenv(ms.STATS_ENV, str(path))
    sched = make_scheduler(ms.KVPeakRecorder, SimConfig(max_num_batched_tokens=256))
    traces = run_until_done(sched, [[make_request(30, 5), make_request(14, 5)]])
    assert [t.kind for t in traces] == ["prefill_only"] + ["decode_only"] * 4
    stats = json.loads(path.read_text())
    assert stats["kv"] == {
        "bytes_per_token": 512, "block_size": 16, "capacity_blocks": 9999,
        "capacity_tokens": 9999 * 16, "peak_computed_tokens": 52, "peak_computed_bytes": 26624,
        "peak_blocks_in_use": 5, "peak_allocated_tokens": 80, "peak_allocated_bytes": 40960,
    }
    assert stats["steps"] == {"total": 5, "prefill_only": 1, "decode_only": 4, "mixed": 0, "empty": 0}
    assert stats["tokens"] == {"prefill": 44, "decode": 8}
    assert stats["scheduler_class"] == "my_scheduler.KVPeakRecorder"
    assert list(path.parent.iterdir()) == [path]  # no temporary file left behind


def test_recorder_counts_mixed_steps_of_the_stock_policy():
    sched = make_scheduler(ms.KVPeakRecorder, SimConfig(max_num_batched_tokens=256))
    run_until_done(sched, [[make_request(100, 10)], [make_request(100, 10)]])
    steps = sched.stats_dict()["steps"]
    assert steps["mixed"] >= 1 and steps["total"] == sum(v for k, v in steps.items() if k != "total")


def test_kv_bytes_per_token_matches_qwen3_0_6b():
    """Qwen3-0.6B in bf16: 28 layers x 2 (K, V) x 8 heads x 128 dims x 2 bytes = 114688."""
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec

    spec = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128, dtype=torch.bfloat16)
    config = KVCacheConfig(num_blocks=1, kv_cache_tensors=[], kv_cache_groups=[
        KVCacheGroupSpec([f"model.layers.{i}.self_attn.attn" for i in range(28)], spec)])
    assert sr.kv_bytes_per_token(config) == 114688


# ---------------------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------------------
def test_strategy_names_resolve_and_typos_fail_early():
    assert ms.resolve_strategy("default") == ""
    assert ms.resolve_strategy("prefill-first") == "my_scheduler.StepExclusivePrefillFirstScheduler"
    assert ms.resolve_strategy("my_scheduler.SJFScheduler") == "my_scheduler.SJFScheduler"
    assert ms.resolve_strategy("sjf-ontime") == "my_scheduler.OnTimeSJFScheduler"
    with pytest.raises(ValueError, match="unknown scheduler 'slo'"):  # the SLO study's name, not C's
        ms.resolve_strategy("slo")
    with pytest.raises(ValueError, match="unknown scheduler 'my_scheduler.SJF'"):
        ms.resolve_strategy("my_scheduler.SJF")
    with pytest.raises(ValueError, match="unknown scheduler"):
        ms.resolve_strategy("my_scheduler.ShortestJobFirstQueue")


@pytest.mark.parametrize("name, letter", [("stall-bounded", "C"), ("deadline", "D"), ("paced", "E")])
def test_a_retired_strategy_is_refused_by_name(name, letter):
    """C, D and E were retired with their code: no sweep or harness may start them, and the
    error says so rather than only that the name is unknown."""
    assert name in ms.RETIRED and name not in ms.STRATEGIES
    with pytest.raises(ValueError, match=rf"unknown scheduler '{name}' \(Strategy {letter}: .*\(retired\)\)"):
        ms.strategy(name)
    with pytest.raises(ValueError, match="choose one of: default, prefill-first, sjf, sjf-ontime, kv-recorder"):
        ms.resolve_strategy(name)


def test_results_of_retired_strategies_keep_their_labels():
    """Committed replays still carry C, D and E's names: the tables and the report label them from
    ``RETIRED``, in letter order with the rest."""
    from harness.results import STRATEGY_LABELS, strategy_label

    assert strategy_label("stall-bounded") == "Strategy C: stall-bounded prefill-first (retired)"
    assert strategy_label("deadline") == "Strategy D: deadline-aware (retired)"
    assert strategy_label("paced") == "Strategy E: TPOT-paced prefill-first (retired)"
    assert strategy_label("sjf-ontime") == ms.STRATEGIES["sjf-ontime"].label
    assert list(STRATEGY_LABELS) == ["default", "prefill-first", "sjf", "stall-bounded", "deadline", "paced",
                                     "sjf-ontime", "kv-recorder"]


def test_the_registry_orders_strategies_by_letter_and_checks_their_settings():
    lettered = [s.letter for s in ms.STRATEGIES.values() if s.letter]
    assert lettered == ["A", "B1", "F"]
    assert ms.strategy("my_scheduler.SJFScheduler").name == "sjf"
    assert ms.check_settings("sjf-ontime", {"ttft_slo_ms": 800}) == {"ttft_slo_ms": 800.0}
    with pytest.raises(ValueError, match="takes no setting 'ttft_slo_ms'"):
        ms.check_settings("sjf", {"ttft_slo_ms": 800})
    with pytest.raises(ValueError, match="must be a number >= 0"):
        ms.check_settings("sjf", {"aging_tokens_per_s": -1})
    with pytest.raises(ValueError, match="takes no setting 'max_decode_stall_ms'"):  # C's, retired with it
        ms.check_settings("prefill-first", {"max_decode_stall_ms": 15})
    with pytest.raises(ValueError, match="unknown strategy setting 'tpot_slo_ms'"):  # E's, retired with it
        ms.check_setting("tpot_slo_ms", 50)


# ---------------------------------------------------------------------------------------------
# Runtime token budget (one server for every budget of a Task 2 study)
# ---------------------------------------------------------------------------------------------
def _budget_load() -> list[list]:
    """Prompts of 1500 tokens arriving 3 per step for 6 steps, 20 output tokens each: chunked
    prefills beside decodes, so the budget shapes every step."""
    return [[make_request(1500, 20) for _ in range(3)] for _ in range(6)]


def _step_shapes(traces: list, ids: list[str]) -> list[list[tuple[int, int]]]:
    """Each step's (request by arrival index, tokens): comparable across schedulers whose
    requests carry different ids."""
    index = {rid: i for i, rid in enumerate(ids)}
    return [sorted((index[rid], n) for rid, n in t.scheduled.items()) for t in traces]


def _run_budget_load(sched) -> list[list[tuple[int, int]]]:
    load = _budget_load()
    traces = run_until_done(sched, load)
    assert not sched.has_unfinished_requests()
    return _step_shapes(traces, [r.request_id for batch in load for r in batch])


def _write_control(path, seq: int, budget: Any, strategy: str | None = None, settings: dict | None = None) -> None:
    from harness.provenance import write_json_atomic

    write_json_atomic(path, {"seq": seq, "token_budget": budget} | ({"strategy": strategy} if strategy else {})
                      | ({"settings": settings} if settings is not None else {}))


@pytest.mark.parametrize("budget", [512, 2048])
def test_a_runtime_budget_plans_the_steps_of_a_server_started_at_that_budget(tmp_path, monkeypatch, budget):
    """A server started at 8192 and told budget B plans, step by step, what a server started
    at B plans; without the control file it plans otherwise (the test can fail)."""
    started_at_budget = _run_budget_load(
        make_scheduler(ms.KVPeakRecorder, SimConfig(max_num_batched_tokens=budget, num_blocks=5000)))
    at_8192 = _run_budget_load(
        make_scheduler(ms.KVPeakRecorder, SimConfig(max_num_batched_tokens=8192, num_blocks=5000)))
    control = tmp_path / "control.json"
    _write_control(control, 1, budget)
    monkeypatch.setenv(ms.CONTROL_ENV, str(control))
    told = make_scheduler(ms.KVPeakRecorder, SimConfig(max_num_batched_tokens=8192, num_blocks=5000))
    assert _run_budget_load(told) == started_at_budget
    assert at_8192 != started_at_budget
    assert told.stats_dict()["budget"] == {"token_budget": budget, "server_max_num_batched_tokens": 8192,
                                           "control_seq": 1, "control_error": None}


def test_a_runtime_budget_waits_for_an_idle_step_and_refuses_what_the_server_cannot_take(
        tmp_path, monkeypatch):
    control = tmp_path / "control.json"
    _write_control(control, 1, 1024)
    monkeypatch.setenv(ms.CONTROL_ENV, str(control))
    sched = make_scheduler(ms.StepExclusivePrefillFirstScheduler,
                           SimConfig(max_num_batched_tokens=4096, num_blocks=5000))
    sched.add_request(make_request(3000, 5))
    assert sum(step(sched).scheduled.values()) == 1024
    _write_control(control, 2, 256)  # a request is running: this budget waits for the next run
    assert sum(step(sched).scheduled.values()) == 1024
    run_until_done(sched)
    sched.add_request(make_request(3000, 5))
    assert sum(step(sched).scheduled.values()) == 256
    run_until_done(sched)
    _write_control(control, 3, 8192)  # above the server's max_num_batched_tokens
    sched.add_request(make_request(3000, 5))
    assert sum(step(sched).scheduled.values()) == 256
    record = sched.stats_dict()["budget"]
    assert record["token_budget"] == 256 and record["control_seq"] == 3
    assert "not an integer in [1, 4096]" in record["control_error"]


# ---------------------------------------------------------------------------------------------
# Runtime strategy (one server for every strategy of a Task 3 study)
# ---------------------------------------------------------------------------------------------
def _mixed_load() -> list[list]:
    """Prompts of 1500, 300 and 800 tokens arriving together, 3 per step for 6 steps: the order
    of admission (SJF) and the step shapes (prefill-first) both differ from vLLM's own."""
    return [[make_request(n, 20) for n in (1500, 300, 800)] for _ in range(6)]


def _run_mixed_load(sched) -> list[list[tuple[int, int]]]:
    load = _mixed_load()
    traces = run_until_done(sched, load)
    assert not sched.has_unfinished_requests()
    return _step_shapes(traces, [r.request_id for batch in load for r in batch])


MIXED = SimConfig(max_num_batched_tokens=2048, num_blocks=5000)


@pytest.mark.parametrize("name", ["prefill-first", "sjf"])
def test_a_runtime_strategy_plans_the_steps_of_a_server_started_with_it(tmp_path, monkeypatch, name):
    """A server started with vLLM's policy and told strategy X plans, step by step, what a server
    started with X's class plans (the requests waiting at the switch included); told 'default'
    afterwards, it plans vLLM's steps again. Without the control file it plans vLLM's steps, which
    differ (the test can fail)."""
    started_with = _run_mixed_load(make_scheduler(ms.SCHEDULER_CLASSES[name], MIXED))
    vllms = _run_mixed_load(make_scheduler(ms.KVPeakRecorder, MIXED))
    assert started_with != vllms
    control = tmp_path / "control.json"
    monkeypatch.setenv(ms.CONTROL_ENV, str(control))
    told = make_scheduler(ms.KVPeakRecorder, MIXED)
    assert _run_mixed_load(told) == vllms  # no control file yet: vLLM's own plan
    _write_control(control, 1, 2048, name)
    assert _run_mixed_load(told) == started_with
    assert type(told) is ms.SCHEDULER_CLASSES[name]
    stats = told.stats_dict()
    assert stats["scheduler_class"] == f"my_scheduler.{ms.SCHEDULER_CLASSES[name].__name__}"
    assert stats["budget"]["control_seq"] == 1 and stats["budget"]["control_error"] is None
    _write_control(control, 2, 2048, "default")
    assert _run_mixed_load(told) == vllms
    assert type(told) is ms.KVPeakRecorder


def test_a_strategy_switch_keeps_counters_and_refuses_what_the_server_cannot_take(tmp_path, monkeypatch):
    control = tmp_path / "control.json"
    monkeypatch.setenv(ms.CONTROL_ENV, str(control))
    sched = make_scheduler(ms.KVPeakRecorder, SimConfig(max_num_batched_tokens=4096, num_blocks=5000))
    _write_control(control, 1, 1024, "prefill-first")
    _run_mixed_load(sched)
    prefill_steps = sched.stats_dict()["policy"]["prefill_steps"]
    assert prefill_steps > 0
    _write_control(control, 2, 2048, "sjf")
    _run_mixed_load(sched)
    stats = sched.stats_dict()
    assert stats["policy"]["prefill_steps"] == prefill_steps  # A's counters survive, unchanged under SJF
    assert stats["policy_settings"] == {"aging_tokens_per_s": 0.0}
    _write_control(control, 3, 2048, "fastest-first")  # no such strategy: nothing changes
    sched.add_request(make_request(3000, 5))
    assert sum(step(sched).scheduled.values()) == 2048
    run_until_done(sched)
    _write_control(control, 4, 8192, "default")  # above max_num_batched_tokens: the strategy stays too
    sched.add_request(make_request(3000, 5))
    step(sched)
    run_until_done(sched)
    assert type(sched) is ms.SJFScheduler
    record = sched.stats_dict()["budget"]
    assert record["control_seq"] == 4 and record["token_budget"] == 2048
    assert "not an integer in [1, 4096]" in record["control_error"]
    _write_control(control, 5, 512, "fastest-first")
    sched.add_request(make_request(3000, 5))
    step(sched)
    assert "strategy 'fastest-first' (request 5) is not one this server can switch to" in \
        sched.stats_dict()["budget"]["control_error"]


def test_a_runtime_switch_sets_the_strategys_settings_and_drops_them_with_the_next_request(tmp_path, monkeypatch):
    """Told F with a wait bound, the server runs F with it (the other settings as it was started:
    its --additional-config, else defaults); told F again without settings, the bound is gone; a
    setting the strategy does not read, or settings without a strategy, are refused whole."""
    control = tmp_path / "control.json"
    monkeypatch.setenv(ms.CONTROL_ENV, str(control))
    sched = make_scheduler(ms.KVPeakRecorder, SimConfig(max_num_batched_tokens=2048, num_blocks=5000,
                                                        additional_config={"ttft_slo_ms": 800}))
    _write_control(control, 1, 2048, "sjf-ontime", {"wait_bound_s": 5})
    _run_mixed_load(sched)
    assert type(sched) is ms.OnTimeSJFScheduler and sched.waiting._bound_s == 5.0
    assert sched.stats_dict()["policy_settings"] == {"aging_tokens_per_s": 0.0, "ttft_slo_ms": 800.0,
                                                     "ttft_margin_ms": 100.0, "wait_bound_s": 5.0}
    _write_control(control, 2, 2048, "sjf-ontime")
    _run_mixed_load(sched)
    assert sched.stats_dict()["policy_settings"]["wait_bound_s"] == 0.0 and sched.waiting._bound_s == 0.0
    for seq, strategy, settings, why in ((3, "sjf", {"wait_bound_s": 5}, "strategy 'sjf' takes no setting 'wait_bound_s'"),
                                         (4, None, {"wait_bound_s": 5}, "without a strategy")):
        _write_control(control, seq, 1024, strategy, settings)
        sched.add_request(make_request(3000, 5))
        assert sum(step(sched).scheduled.values()) == 2048  # nothing changed, the budget neither
        run_until_done(sched)
        assert type(sched) is ms.OnTimeSJFScheduler and why in sched.stats_dict()["budget"]["control_error"]


def test_every_registered_strategy_is_bound_to_its_class_here():
    """harness/strategies.py names each strategy's class without importing vLLM; my_scheduler
    binds every such name to a scheduler class of its own, and re-exports the registry (one
    object, not a copy), so a name that loads nothing cannot reach a server."""
    from harness import strategies

    assert ms.STRATEGIES is strategies.STRATEGIES and ms.strategy is strategies.strategy
    bound = {name: f"my_scheduler.{cls.__name__}" for name, cls in ms.SCHEDULER_CLASSES.items()}
    assert bound == {e.name: e.scheduler_cls for e in ms.STRATEGIES.values() if e.class_name}
    for name, cls in ms.SCHEDULER_CLASSES.items():
        assert cls.__module__ == "my_scheduler" and issubclass(cls, (ms.StepRecorder, AsyncScheduler))
        assert ms.scheduler_class(name) is cls is ms.scheduler_class(ms.resolve_strategy(name))
    assert ms.scheduler_class("default") is None


def test_python_my_scheduler_lists_and_resolves_the_registry():
    listed = subprocess.run([sys.executable, str(ROOT / "my_scheduler.py"), "--list"], capture_output=True,
                            text=True, timeout=300)
    assert listed.returncode == 0, listed.stderr[-2000:]
    rows = [line.split("\t") for line in listed.stdout.splitlines() if "\t" in line]
    assert rows[2] == ["sjf", "B1", "my_scheduler.SJFScheduler", "Strategy B1: SJF", "aging_tokens_per_s"]
    assert [row[0] for row in rows] == list(ms.STRATEGIES)
    resolved = subprocess.run([sys.executable, str(ROOT / "my_scheduler.py"), "--resolve", "paced"],
                              capture_output=True, text=True, timeout=300)
    assert resolved.returncode == 2 and "unknown scheduler 'paced' (Strategy E" in resolved.stderr
