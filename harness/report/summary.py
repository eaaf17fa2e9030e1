"""Section 7 of the report, the summary: a line per task and per finding, built from the same
functions as the sections it summarises (front-end verdicts, separations, SLO capacities), so the
summary states nothing the sections do not.
"""

from __future__ import annotations

import pandas as pd

from harness.document import Block, bullets, heading
from harness.results import (BUDGET, BUSIEST_API, ENGINE_CORES, GPU_UTIL, PACE, Results, load_label, span_text,
                             strategy_label, task2_table)
from harness.rules import MIN_RUNS_TO_SEPARATE, SCREEN_SLOS, below_pairs, chat_budget, kept_up, ratio, trend_verdict
from harness.report.frontend import lift_rows, several_api_servers, task2_verdicts
from harness.report.replay import other_host_summary
from harness.report.slo import (CAPACITY_BAR, TAIL_BAR, Sweep, anchor_summary, bar_fact, bar_verdict, capacity_fact,
                                capacity_folders, long_enough, steady_count, tail_bar_fact, tail_reads,
                                transient_note)
from harness.report.task2 import THEORY
from harness.report.task3 import handout_rate_answers, one_length_points, separations, sjf_handout_answers
from harness.report.text import factor


def summary_section(res: Results, sweeps: dict[str, Sweep], validation: pd.DataFrame) -> list[Block]:
    """Section 7 (``validation``: ``rules.replay_validation``'s cells, as section 6b read them)."""
    items = []
    if res.task1 and {"vllm", "hf-static"} <= set(res.task1["methods"]):
        m = res.task1["methods"]
        items.append(f"Task 1: vLLM is {factor(ratio(m['hf-static']['total_s'], m['vllm']['total_s']))} "
                     f"faster than static batching; static batching's KV peak is "
                     f"{factor(ratio(m['hf-static']['kv_peak_bytes'], m['vllm']['kv_peak_bytes']))} vLLM's, "
                     f"because {m['hf-static']['padding']['padding_share']:.1%} of its slots hold padding "
                     "while paged blocks hold real tokens only.")
    else:
        items.append("Task 1: no results.")
    for task, label in (("task2", "Task 2"), ("task3", "Task 3"), ("slo", "SLO studies")):
        rows = res.rows(task)
        if rows.empty:
            if task != "slo":  # the SLO study is optional
                items.append(f"{label}: no results.")
            continue
        lagged = rows[rows["lagged"]]
        items.append(f"{label}: the front end lagged in {len(lagged)} of {len(rows)} runs"
                     + (f" (completeness {span_text(lagged['completeness'])}); their tables stand as "
                        "measured, and no scheduler conclusion is drawn from them" if len(lagged) else "")
                     + (". Answers in the section come only from runs that kept up, where a point "
                        "has them." if len(lagged) < len(rows) else "."))
        if task == "task2":
            items += [f"Task 2, {v[0].lower()}{v[1:]}" for v in task2_verdicts(rows)[:1]]
            items += task2_rate_summary(rows)
        if task == "task3":
            sweeps_rows = rows[~rows["folder"].isin(capacity_folders(res))]
            one_length = one_length_points(res, sweeps_rows)
            items += [f"Task 3: {'a' if finding.startswith('At ') else finding[0]}{finding[1:-1]} (section 5)."
                      for finding, _ in handout_rate_answers(sweeps_rows, one_length)
                      + sjf_handout_answers(res, sweeps_rows, one_length)]
        if task == "task3" and (found := separations(rows)):
            items.append("Task 3, runs that kept up: where every run of a strategy lies beyond every run of "
                         f"the default (strategy / default, medians): {'; '.join(found)}; nothing else separated.")
    items += [t for t in [anchor_summary(res)] if t]
    for folder, sw in sweeps.items():
        caps = sw.caps[sw.caps["slo"] == SCREEN_SLOS[0]]
        state = transient_note(sw.rows) or steady_count(sw.rows)
        bars = " ".join(t for t in [bar_fact(sw.rows, sw.caps), tail_bar_fact(sw.rows, sw.caps)] if t)
        items += [f"SLO capacity on the GPU ({folder}, lab's pair): " + capacity_fact(r, caps, sw.att)
                  + (f" {state}" if state else "") + (f" {bars}" if bars else "")
                  for r in caps[caps["strategy"] != "default"].to_dict("records")]
    items += [t for t in [goal_summary(sweeps)] if t]
    items += other_host_summary(res, validation)
    lift = lift_rows(res)
    several = several_api_servers(lift) if not lift.empty else lift
    if not several.empty:
        items.append(f"Front end (section 3): in the front-end study ({', '.join(dict.fromkeys(several['folder']))}; "
                     f"one client process), with several API servers the busiest used at most "
                     f"{several[BUSIEST_API].max():.2f} of a core, and the engine core "
                     f"({span_text(several[ENGINE_CORES], 2)}) became the busiest process while the GPU "
                     f"was busy {span_text(several[GPU_UTIL], 0)}%"
                     + "".join(f"; {t}" for t in [rate_inf_lag_text(res.rows("task2", "task3", "slo"))] if t) + ".")
    return [heading("7 Summary"), bullets(items)]


def goal_summary(sweeps: dict[str, Sweep]) -> str | None:
    """The SLO study's goal over every steady-state sweep on the GPU (the transients left out): for
    each strategy and sweep, its capacity ratio under the lab's pair with ``bar_verdict``, and its
    longest tenth's TTFT P99 against the default's (``tail_reads``); met only where both hold. A
    steady-state sweep (every run at least ``STEADY_MIN_ARRIVAL_S`` of arrivals) with too few runs
    for an interval, or whose every run fell behind its arrivals, is named with what it lacks, not
    left out unsaid."""
    reads, met = [], []
    steady = {f: sw for f, sw in sweeps.items() if long_enough(sw.rows)}
    for folder, sw in steady.items():
        if sw.gaps:  # a cut sitting: section 6 reads no capacity from it
            reads.append(f"{folder}: not read ({'; '.join(sw.gaps)})")
            continue
        if transient_note(sw.rows):  # past the engine's pace at every point: no crossing to read
            reads.append(f"{folder}: not read (every run fell behind its arrivals, output pace "
                         f"{span_text(sw.rows[PACE], 2)})")
            continue
        caps = sw.caps[sw.caps["slo"] == SCREEN_SLOS[0]]
        tails = tail_reads(sw.rows, sw.caps)
        for r in caps[caps["strategy"] != "default"].to_dict("records"):
            verdict, tail = bar_verdict(r), tails.get(r["strategy"])
            ratio = "no ratio" if pd.isna(r["vs default"]) else f"{r['bound']} {r['vs default']:.2f}x".strip()
            tail_text = f"tail {tail.times:.1f}x" if tail else "tail not read"
            reads.append(f"{folder}, {strategy_label(r['strategy'])}: {ratio} ({verdict}), {tail_text}")
            if verdict == "met" and tail and tail.times <= TAIL_BAR:
                met.append(f"{folder}, {strategy_label(r['strategy'])}")
    if not reads:
        return None
    return (f"The SLO study's goal, {CAPACITY_BAR} with the longest tenth of prompts' TTFT P99 at the default's "
            f"capacity at most {TAIL_BAR:g}x the default's, over the {len(steady)} steady-state sweeps on the GPU: "
            + (f"met by {'; '.join(met)}" if met else "met by no strategy in any of them")
            + ". Capacity ratio (whether it meets the bar; open where the grids leave it unsettled) and the tail "
            "against the default's, per strategy: " + "; ".join(reads) + " (section 6).")


def task2_rate_summary(rows: pd.DataFrame) -> list[str]:
    """One line per Poisson-rate budget sweep whose runs kept up and separate (section 4's answers,
    short): the theory's two halves by the P99s, the chat budget, and throughput."""
    words = {"holds": "as the theory says", "contradicted": "against the theory", "mixed": "only in part",
             "no pair separates": "no budget separates"}
    lines = []
    for (name, rate), part in kept_up(rows[rows["rate"] != "inf"]).groupby(["setting", "rate"], sort=False):
        med = task2_table(part).sort_values(BUDGET)
        if len(med) < 3 or med["runs"].min() < MIN_RUNS_TO_SEPARATE:
            continue
        chat = chat_budget(med)
        found = {c: trend_verdict(below_pairs(part, c, BUDGET), THEORY[c.split()[0]]) for c in ("TTFT P99 (ms)", "ITL P99 (ms)")}
        verdicts = [f"{c.removesuffix(' (ms)')}: {words[v]}" for c, v in found.items()]
        mine, others = part[part[BUDGET] == chat], part[part[BUDGET] != chat]
        unconfirmed = set(found.values()) == {"no pair separates"}
        lines.append(f"Task 2 at {load_label(rate)} ({name}, {int(med['runs'].min())} runs per budget, every run kept "
                     f"up), set against the theory (a larger budget lowers TTFT and raises ITL): {'; '.join(verdicts)}. "
                     f"For chat, budget {chat}: ITL P99 {span_text(mine['ITL P99 (ms)'], 1)} ms against "
                     f"{span_text(others['ITL P99 (ms)'], 1)} ms at the other budgets, TTFT P99 "
                     f"{span_text(mine['TTFT P99 (ms)'], 1)} ms against {span_text(others['TTFT P99 (ms)'], 1)}"
                     + ("; a pick of the medians only, since no budget's runs separate from another's" if unconfirmed else "")
                     + " (section 4).")
    return lines


def rate_inf_lag_text(rows: pd.DataFrame) -> str:
    """How many serving runs at rate inf with several API servers lagged, and which they are ('' for none)."""
    inf = rows[(rows["rate"] == "inf") & (rows["api servers"] > 1)]
    if inf.empty:
        return ""
    servers = " or ".join(map(str, sorted(inf["api servers"].unique())))
    clients = " or ".join(map(str, sorted(inf["clients"].unique())))
    return (f"at rate inf with {servers} API servers ({', '.join(dict.fromkeys(inf['folder']))}; {clients} "
            f"client process{'es' * bool(inf['clients'].max() > 1)}) completeness still fell below 0.99 in "
            f"{int(inf['lagged'].sum())} of {len(inf)} runs")
