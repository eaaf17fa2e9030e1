"""The lab's schedulers on the real vLLM 0.26 scheduler, driven in-process with a fake model."""

from __future__ import annotations

import json
from typing import Any

import pytest
from vllm.v1.core.sched.async_scheduler import AsyncScheduler

import my_scheduler as ms
from harness.sched_sim import SimConfig, make_request, make_scheduler, run_until_done, step


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


# ---------------------------------------------------------------------------------------------
# Strategy C: prefill-first with a bounded decode stall
# ---------------------------------------------------------------------------------------------
class FakeClock:
    """The time the policy reads; the test advances it by a simulated step time."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _stall_bounded(clock: FakeClock, stall_ms: float, run_cap: int) -> type:
    return type("TestStallBounded", (ms.StallBoundedPrefillFirstScheduler,),
                {"clock": staticmethod(clock), "max_decode_stall_ms": stall_ms,
                 "max_prefill_steps_in_row": run_cap})


def _burst_run(cls: type, clock: FakeClock | None = None, step_ms: float = 10.0, burst_tokens: int = 10):
    """4 requests start decoding, then a burst of 12 one-chunk prompts (``burst_tokens`` output
    tokens each) arrives at once.

    Budget 256 and prompts of 256 tokens: a prefill-only step admits one prompt, so A starves
    the 4 decoders for about 12 steps in a row. Returns (longest run of steps in which requests
    were decoding but none got a token, traces, steps in which the decoders were served while
    prompts waited).
    """
    sched = make_scheduler(cls, SimConfig(max_num_seqs=64, max_num_batched_tokens=256,
                                          num_blocks=5000))
    for _ in range(4):
        sched.add_request(make_request(32, 60))
    traces, longest, run, served_with_backlog = [], 0, 0, []
    for i in range(400):
        if i == 2:
            for _ in range(12):
                sched.add_request(make_request(256, burst_tokens))
        if i > 2 and not sched.has_unfinished_requests():
            break
        decoding = {r.request_id for r in sched.running if not r.is_prefill_chunk}
        backlog = len(sched.waiting)
        trace = step(sched)
        traces.append(trace)
        if clock is not None:
            clock.now += step_ms / 1000.0
        if decoding and not decoding & trace.decode_ids:
            run += 1
            longest = max(longest, run)
        else:
            run = 0
            if decoding and backlog:
                served_with_backlog.append(trace)
    assert not sched.has_unfinished_requests()
    return longest, traces, served_with_backlog, sched


def test_strategy_a_starves_decoders_through_a_burst():
    """The problem Strategy C solves: A runs the whole burst of prefills before any decode."""
    longest, traces, _, _ = _burst_run(ms.StepExclusivePrefillFirstScheduler)
    assert longest >= 12
    assert [t.kind for t in traces].count("mixed") == 0


def test_stall_bound_in_time_caps_the_decode_gap():
    """Steps of 12 ms and a 30 ms bound: at most 2 steps in a row without a token (24 ms), then a
    step planned like vLLM's (decodes and a prompt chunk together), until the burst is gone."""
    clock = FakeClock()
    longest, traces, guarded, sched = _burst_run(_stall_bounded(clock, 30.0, 0), clock, 12.0)
    assert longest == 2
    assert sched.policy_stats["stall_guard_steps"] == len(guarded) > 0
    assert all(t.kind == "mixed" for t in guarded)  # prompts progress in guard steps too
    assert sched.policy_stats["fallback_steps"] == 0


def test_stall_bound_in_steps_caps_the_decode_gap():
    """With time frozen, only the step bound acts: at most 3 prefill-only steps in a row."""
    clock = FakeClock()
    longest, _, guarded, sched = _burst_run(_stall_bounded(clock, 1e9, 3), clock, 0.0)
    assert longest == 3
    assert sched.policy_stats["stall_guard_steps"] == len(guarded) > 0


@pytest.mark.parametrize("cls", [ms.StallBoundedPrefillFirstScheduler, ms.DeadlineAwareScheduler,
                                 ms.TpotPacedPrefillFirstScheduler])
def test_strategies_c_d_and_e_keep_the_seq_cap_and_never_livelock(cls):
    sched = make_scheduler(cls, SimConfig(max_num_seqs=4, max_num_batched_tokens=512, num_blocks=5000))
    traces = run_until_done(sched, arrivals(10, 3, 40, 20))
    assert not sched.has_unfinished_requests()
    assert max(t.num_running_after for t in traces) <= 4
    sched, done, ids = _overloaded_kv_run(cls)
    assert done == ids and not sched.has_unfinished_requests()


def test_stall_bound_settings_come_from_additional_config():
    config = SimConfig(additional_config={"max_decode_stall_ms": 15, "max_prefill_steps_in_row": 4,
                                          "gdn_prefill_backend": "x"})  # vLLM's own keys are left alone
    policy = make_scheduler(ms.StallBoundedPrefillFirstScheduler, config).stats_dict()["policy_settings"]
    assert policy["max_decode_stall_ms"] == 15.0 and policy["max_prefill_steps_in_row"] == 4
    with pytest.raises(ValueError, match="max_decode_stall_ms"):
        make_scheduler(ms.StallBoundedPrefillFirstScheduler,
                       SimConfig(additional_config={"max_decode_stall_ms": "soon"}))


# ---------------------------------------------------------------------------------------------
# Strategy D: Strategy C plus deadline-aware admission
# ---------------------------------------------------------------------------------------------
def test_deadline_queue_admits_on_time_requests_first_and_bounds_the_wait():
    """Wait budget 0.4 s, wait bound 10 s. At t = 1.0 the requests that arrived at 0.9 and 1.0
    are on time and go first; at t = 10.5 the two oldest have waited over 10 s and go first.
    ``peek``, ``pop`` and iteration agree at every point."""
    clock = FakeClock()
    clock.now = 1.0
    queue = ms.DeadlineAwareQueue(deadline_s=0.4, max_wait_s=10.0, clock=clock)
    reqs = {t: make_request(16, 2, arrival_time=t) for t in (0.5, 1.0, 0.0, 0.9)}
    for req in reqs.values():
        queue.add_request(req)
    assert [r.arrival_time for r in queue] == [0.9, 1.0, 0.0, 0.5]
    clock.now = 10.5
    assert [r.arrival_time for r in queue] == [0.0, 0.5, 0.9, 1.0]
    clock.now = 1.0
    popped = []
    while queue:
        head = queue.peek_request()
        popped.append(queue.pop_request())
        assert popped[-1] is head
    assert [r.arrival_time for r in popped] == [0.9, 1.0, 0.0, 0.5]
    queue.add_request(reqs[0.9])
    queue.prepend_request(reqs[0.0])  # vLLM puts a preempted request back: it resumes first
    assert [r.arrival_time for r in queue] == [0.0, 0.9]
    queue.remove_requests([reqs[0.0]])
    assert len(queue) == 1 and queue.pop_request() is reqs[0.9] and not queue


def _deadline(clock: FakeClock, slo_ms: float = 500.0, margin_ms: float = 100.0) -> type:
    return type("TestDeadline", (ms.DeadlineAwareScheduler,),
                {"wall_clock": staticmethod(clock), "clock": staticmethod(clock),
                 "ttft_slo_ms": slo_ms, "ttft_margin_ms": margin_ms})


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


def test_deadline_admission_meets_more_ttft_deadlines_after_a_burst_than_fcfs():
    """Same step rule (Strategy C), FCFS vs deadline-aware admission, TTFT target 0.3 s.

    FCFS: the requests arriving after the burst wait behind its backlog and many are late.
    Deadline-aware: each of them goes ahead of the late backlog and makes it; the burst's own
    requests fare about the same either way (the first 25 to 28 make it).
    """
    clock = FakeClock()
    runs = {"fcfs": _burst_ttfts(_stall_bounded(clock, 30.0, 0), clock),
            "deadline": _burst_ttfts(_deadline(clock, slo_ms=300.0, margin_ms=50.0), clock)}
    met = {name: {part: sum(t <= 0.3 for rid, t in ttft.items()
                            if rid.startswith("burst-") == (part == "burst"))
                  for part in ("burst", "after")} for name, ttft in runs.items()}
    assert len(runs["fcfs"]) == len(runs["deadline"]) == 80 + 200
    assert met["deadline"]["after"] == 200, met
    assert met["fcfs"]["after"] <= 160, met  # 148 on vLLM 0.26.0
    # The margin makes D stop favouring burst requests 50 ms early: 25 vs 28 make it.
    assert abs(met["deadline"]["burst"] - met["fcfs"]["burst"]) <= 5, met
    assert max(runs["deadline"].values()) < 10.0  # the late ones were served, within the bound


def test_deadline_strategy_admits_the_on_time_request_first_and_counts_both():
    clock = FakeClock()
    sched = make_scheduler(_deadline(clock), SimConfig(max_num_seqs=1, max_num_batched_tokens=2048,
                                                        num_blocks=5000))
    clock.now = 100.0
    late, fresh = make_request(64, 2, arrival_time=99.0), make_request(96, 2, arrival_time=99.9)
    order = _admission_order(sched, [late, fresh])
    assert order == [96, 64] and sched.policy_stats["admitted_on_time"] == 1
    assert sched.policy_stats["admitted_late"] == 1


def test_deadline_settings_come_from_additional_config_and_are_checked():
    given = {"ttft_slo_ms": 800, "ttft_margin_ms": 150}
    settings = make_scheduler(ms.DeadlineAwareScheduler,
                              SimConfig(additional_config=given)).stats_dict()["policy_settings"]
    assert settings["ttft_slo_ms"] == 800.0 and settings["ttft_margin_ms"] == 150.0
    assert settings["max_late_wait_s"] == ms.DEFAULT_MAX_LATE_WAIT_S
    assert settings["max_decode_stall_ms"] == ms.DEFAULT_MAX_DECODE_STALL_MS  # C's guard is on
    with pytest.raises(ValueError, match="ttft_margin_ms"):
        make_scheduler(ms.DeadlineAwareScheduler, SimConfig(additional_config={**given, "ttft_margin_ms": 900}))
    with pytest.raises(ValueError, match="fcfs"):
        make_scheduler(ms.DeadlineAwareScheduler, SimConfig(policy="priority"))


# ---------------------------------------------------------------------------------------------
# Strategy E: prefill-first paced by the mean-TPOT target
# ---------------------------------------------------------------------------------------------
def _paced(clock: FakeClock, tpot_ms: float, margin_ms: float) -> type:
    return type("TestPaced", (ms.TpotPacedPrefillFirstScheduler,),
                {"clock": staticmethod(clock), "tpot_slo_ms": tpot_ms, "tpot_margin_ms": margin_ms})


def _decoder_mean_tpots_ms(traces, step_ms: float) -> list[float]:
    """Mean TPOT of the 4 requests that start decoding before the burst, in simulated time: a
    request gets a token in each step that schedules it (its one-chunk prefill included)."""
    decoders = list(traces[0].scheduled)
    tpots = []
    for rid in decoders:
        token_steps = [i for i, t in enumerate(traces) if rid in t.scheduled]
        tpots.append((token_steps[-1] - token_steps[0]) * step_ms / (len(token_steps) - 1))
    return tpots


def test_paced_strategy_spends_only_the_tpot_slack_on_the_burst():
    """Steps of 10 ms; the 4 decoders (60 tokens) have 59 gaps. A stalls them 12 steps for the
    burst (one-token requests, which have no TPOT): mean TPOT 10 + 120 / 59 = 12.0 ms. With a
    target of 11.5 ms (margin 0.5: 59 ms of slack, about 5 steps), E stalls them for as long as
    that allows, then serves them every step: every decoder ends under 11.5 ms, and the burst
    is still done."""
    longest_a, traces_a, _, _ = _burst_run(ms.StepExclusivePrefillFirstScheduler, burst_tokens=1)
    clock = FakeClock()
    longest_e, traces_e, _, sched = _burst_run(_paced(clock, 11.5, 0.5), clock, 10.0, burst_tokens=1)
    assert min(_decoder_mean_tpots_ms(traces_a, 10.0)) > 11.5
    assert max(_decoder_mean_tpots_ms(traces_e, 10.0)) <= 11.5
    assert 3 <= longest_e <= 5 < longest_a
    assert sched.policy_stats["pace_guard_steps"] > 0
    assert sched.policy_stats["fallback_steps"] == 0


def test_paced_strategy_is_strategy_a_while_the_slack_lasts():
    """With the study's target (50 ms, margin 10) and 10 ms steps the decoders have seconds of
    slack, so the burst runs exactly as under Strategy A: same steps, no guard step."""
    _, traces_a, _, _ = _burst_run(ms.StepExclusivePrefillFirstScheduler)
    clock = FakeClock()
    _, traces_e, _, sched = _burst_run(_paced(clock, 50.0, 10.0), clock, 10.0)
    assert [sorted(t.scheduled.values()) for t in traces_e] == [sorted(t.scheduled.values()) for t in traces_a]
    assert sched.policy_stats["pace_guard_steps"] == 0


def test_paced_settings_come_from_additional_config_and_are_checked():
    given = {"tpot_slo_ms": 80, "tpot_margin_ms": 20}
    settings = make_scheduler(ms.TpotPacedPrefillFirstScheduler,
                              SimConfig(additional_config=given)).stats_dict()["policy_settings"]
    assert settings == {"tpot_slo_ms": 80.0, "tpot_margin_ms": 20.0}
    with pytest.raises(ValueError, match="tpot_margin_ms"):
        make_scheduler(ms.TpotPacedPrefillFirstScheduler,
                       SimConfig(additional_config={**given, "tpot_margin_ms": 80}))


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


def _on_time_sjf(clock: FakeClock, slo_ms: float = 500.0, margin_ms: float = 100.0) -> type:
    return type("TestOnTimeSJF", (ms.OnTimeSJFScheduler,),
                {"wall_clock": staticmethod(clock), "ttft_slo_ms": slo_ms, "ttft_margin_ms": margin_ms})


def test_on_time_sjf_admits_the_on_time_request_before_a_shorter_late_one_and_counts_both():
    clock = FakeClock()
    sched = make_scheduler(_on_time_sjf(clock), SimConfig(max_num_seqs=1, max_num_batched_tokens=2048,
                                                           num_blocks=5000))
    clock.now = 100.0
    late, fresh = make_request(64, 2, arrival_time=99.0), make_request(96, 2, arrival_time=99.9)
    assert _admission_order(sched, [late, fresh]) == [96, 64]
    assert sched.policy_stats == {"admitted_on_time": 1, "admitted_late": 1}
    settings = sched.stats_dict()["policy_settings"]
    assert settings == {"aging_tokens_per_s": 0.0, "ttft_slo_ms": 500.0, "ttft_margin_ms": 100.0}
    plain = make_scheduler(ms.SJFScheduler, SimConfig(max_num_seqs=1, max_num_batched_tokens=2048, num_blocks=5000))
    late, fresh = make_request(64, 2, arrival_time=99.0), make_request(96, 2, arrival_time=99.9)
    assert _admission_order(plain, [late, fresh]) == [64, 96]


def test_on_time_sjf_meets_more_ttft_deadlines_after_a_burst_than_sjf():
    """The burst of the D test (80 prompts at once, then one every 2 steps; all one length, so
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
    given = {"ttft_slo_ms": 800, "ttft_margin_ms": 150, "aging_tokens_per_s": 20}
    settings = make_scheduler(ms.OnTimeSJFScheduler, SimConfig(additional_config=given)).stats_dict()["policy_settings"]
    assert settings == {"aging_tokens_per_s": 20.0, "ttft_slo_ms": 800.0, "ttft_margin_ms": 150.0}
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
    assert ms.kv_bytes_per_token(config) == 114688


# ---------------------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------------------
def test_strategy_names_resolve_and_typos_fail_early():
    assert ms.resolve_strategy("default") == ""
    assert ms.resolve_strategy("prefill-first") == "my_scheduler.StepExclusivePrefillFirstScheduler"
    assert ms.resolve_strategy("my_scheduler.SJFScheduler") == "my_scheduler.SJFScheduler"
    assert ms.resolve_strategy("stall-bounded") == "my_scheduler.StallBoundedPrefillFirstScheduler"
    with pytest.raises(ValueError, match="unknown scheduler 'slo'"):  # the SLO study's name, not C's
        ms.resolve_strategy("slo")
    with pytest.raises(ValueError, match="unknown scheduler 'my_scheduler.SJF'"):
        ms.resolve_strategy("my_scheduler.SJF")
    with pytest.raises(ValueError, match="unknown scheduler"):
        ms.resolve_strategy("my_scheduler.ShortestJobFirstQueue")


def test_the_registry_orders_strategies_by_letter_and_checks_their_settings():
    lettered = [s.letter for s in ms.STRATEGIES.values() if s.letter]
    assert lettered == ["A", "B1", "C", "D", "E", "F"]
    assert ms.strategy("my_scheduler.SJFScheduler").name == "sjf"
    assert ms.check_settings("paced", {"tpot_slo_ms": 60}) == {"tpot_slo_ms": 60.0}
    with pytest.raises(ValueError, match="takes no setting 'tpot_slo_ms'"):
        ms.check_settings("deadline", {"tpot_slo_ms": 60})
    with pytest.raises(ValueError, match="must be a number >= 0"):
        ms.check_settings("stall-bounded", {"max_decode_stall_ms": -1})
