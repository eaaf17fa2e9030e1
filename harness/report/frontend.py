"""Section 3 of the report, the serving front end: how a serving run is read (ITL per streamed chunk,
token-gap completeness), how often the front end lagged, the study that tried to lift it (several
API servers, several clients) and what the sweeps with several API servers settle. Every serving
conclusion of sections 4-6 rests on this check, so it comes first.
"""

from __future__ import annotations

import pandas as pd

from harness.document import Block, bullets, heading, para, table
from harness.results import (BUDGET, BUSIEST_API, CLIENT_CORES, CORES, ENGINE_CORES, GPU_UTIL, LATE_GAPS, THROUGHPUT,
                             WHOLE_REQUESTS, Results, Run, point_table, shown, sitting_text, span_text, strategy_label)
from harness.rules import capacity_runs, kept_up, separated, spread_pct


FRONTEND_DEFINITIONS = (
    "How the serving runs are read. ITL is measured per streamed chunk: the client records one "
    "gap per chunk it receives. Token-gap completeness is ITL entries / (output tokens - 1), "
    "pooled over a run's kept successful requests: 1.0 means one chunk per token. Below 0.99 the "
    "API server fell behind the engine and merged tokens into chunks; such a run is marked "
    "\"front end lagged\", its latencies include queueing in the API server, and no scheduler "
    "conclusion is drawn from it. Throughput is the output tokens emitted inside [first kept "
    "start, last kept end] by any successful request, divided by that window. The first 10% of "
    "requests by start time are dropped as warm-up.")


def frontend_section(res: Results) -> list[Block]:
    """Completeness and CPU per folder and load, the finding, the study that tried to lift the
    front end, and the claims it withdraws."""
    blocks = [heading("3 The serving front end"), para(FRONTEND_DEFINITIONS)]
    names = [n for task in ("task2", "task3", "slo") for n in res.folders(task)]
    if not names:
        return blocks + [para("No serving results.", place="both")]
    rows = res.rows("task2", "task3", "slo")
    blocks += [table(front_end_table([res.folder_rows(n) for n in names], (LATE_GAPS, *CORES))),
               bullets(handout_front_end_facts(rows))]
    lift = lift_rows(res)
    if not lift.empty:
        blocks += [heading("Lifting the front end: several API servers, several clients", 3),
                   para(LIFT_INTRO),
                   table(front_end_table([lift], (WHOLE_REQUESTS, *CORES, THROUGHPUT)), place="appendix"),
                   bullets(lift_facts(lift, rows, below_saturation_rows(res), res.with_role("handout-setting", "task2")))]
    if bursts := poll_burst_facts([run for task in ("task2", "task3", "slo") for run in res.runs(task)]):
        blocks += [heading("What the harness's own /metrics poll costs the streams", 3), bullets(bursts)]
    for folder in res.with_role("frontend-gated"):
        gated = res.folder_rows(folder)
        blocks += [heading(f"Does the client limit? One process against two started together ({folder})", 3),
                   table(front_end_table([gated], (*CORES, THROUGHPUT)), place="appendix")]
        if fact := gated_client_fact(gated):
            blocks.append(bullets([fact]))
    if verdicts := task2_verdicts(res.rows("task2")):
        blocks += [para("What the runs with several API servers settle: Task 2's below (section 4); Task 3's in "
                        "section 5's answers, point by point, from the runs that kept up."), bullets(verdicts)]
    return blocks


def task2_verdicts(rows: pd.DataFrame) -> list[str]:
    """What the sweeps with several API servers settle: whether rate-inf throughput is ordered by
    the budget or within the runs' noise (``capacity_runs``, 3 budgets or more), and the latency
    questions, open until a sweep at a Poisson rate has runs that kept up."""
    if rows.empty:
        return []
    several = rows[rows["api servers"] > 1]
    verdicts = []
    for name, part in several[several["rate"] == "inf"].groupby("setting", sort=False):
        runs = capacity_runs(part)
        if runs is None or len(runs) < 3:
            continue
        by_budget = part.groupby(BUDGET)[THROUGHPUT]
        pairs = [(a, b) for a in runs for b in runs if a < b]
        medians = by_budget.median()
        apart = sum(separated(runs[a], runs[b]) for a, b in pairs)
        verdicts.append(
            f"Rate-inf throughput across budgets ({name}, {by_budget.size().min()}+ runs per budget): "
            f"{apart} of {len(pairs)} pairs of budgets "
            f"separate (every run of one beyond every run of the other); runs of one budget differ by up to "
            f"{spread_pct(part, THROUGHPUT, BUDGET):.0f}%, the budgets' medians by "
            f"{(medians.max() / medians.min() - 1) * 100:.0f}%."
            + (" The order is real, not measurement noise (section 4)." if apart else
               " No pair separates: the order is within the runs' noise."))
    swept = kept_up(several[several["rate"] != "inf"]).groupby("setting")[BUDGET].nunique()
    if verdicts and not (swept >= 3).any():
        verdicts.append("How the TTFT and ITL tails move with the budget, and the chat pick: still open; they "
                        "need a budget sweep at a Poisson rate whose runs keep up.")
    return verdicts


def handout_front_end_facts(rows: pd.DataFrame) -> list[str]:
    """How often the front end lagged, the throughput check, and the CPU of one API server."""
    facts = [f"The front end lagged in {int(rows['lagged'].sum())} of {len(rows)} serving runs "
             f"(completeness {span_text(rows['completeness'])} over all runs)."]
    inf = rows[(rows["rate"] == "inf") & (rows["clients"] == 1)]
    if not inf.empty:
        gap = (inf[THROUGHPUT] / inf["client throughput (tok/s)"] - 1).abs().max()
        facts.append(f"At rate inf with one client, where every request is in the window, this "
                     f"throughput is within {gap:.1%} of the client's own figure (all requests over "
                     f"the whole run) in each of the {len(inf)} runs.")
    one = rows[rows["api servers"] == 1]
    api, engine, gpu = (one[c].dropna() for c in (BUSIEST_API, ENGINE_CORES, GPU_UTIL))
    if not api.empty:
        where = ", ".join(sorted(set(one.loc[api.index, "folder"])))
        facts.append(f"With one API server, where the harness recorded the server's processes "
                     f"({where}), the API server used {span_text(api, 2)} of a core and the engine "
                     f"core {span_text(engine, 2)} while the load ran; each is one Python thread, so "
                     "the API server was at or near saturation"
                     + (f", while the GPU was busy {gpu.min():.0f}-{gpu.max():.0f}% of the time "
                        "(utilization.gpu from nvidia-smi or NVML, load window only)" if not gpu.empty else "") + ".")
    handout = rows[(rows["api servers"] == 1) & (rows["clients"] == 1)]
    if not handout.empty and handout["lagged"].mean() > 0.5:
        facts.append("These runs used the handout's flags (one API server). They stay as the "
                     "handout's tables and as the evidence that, near saturation, one API server "
                     "limits a 0.6B model on an H200: they measure vLLM's front end as much as the "
                     "scheduler.")
    return facts


LIFT_INTRO = (
    "`experiments/sittings.sh capacity` ran Task 2's budget 2048 on one H200, one setting after another "
    "in one sitting: first at rate inf (1000 requests of 1024 tokens in, 256 out, all at once) with "
    "one API server, the OpenAI front end spread over several processes (`--api-server-count`), and "
    "the load sent by one `vllm bench serve` process or split over two; then, in a second sitting, "
    "with 4 API servers at Poisson rates below saturation (16 req/s and 0.9 x the capacity measured "
    "at rate inf). Its table (`tables.md`) gives each setting's median over its runs and completeness "
    "range; cores are averages over the load window.")


def lift_rows(res: Results) -> pd.DataFrame:
    """The front-end study's runs: every folder with the study file's role ``frontend-study`` (one
    per API-server count, one sitting; not the gated clients' or a budget sweep's)."""
    frames = [res.folder_rows(n) for n in res.with_role("frontend-study")]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def below_saturation_rows(res: Results) -> pd.DataFrame:
    """Runs at a Poisson rate with several API servers, Task 2 and Task 3 alike: the setting the
    corrected runs use, where the question is whether the front end keeps up below saturation."""
    rows = res.rows("task2", "task3")  # not empty: the front-end study's folders are Task 2's
    return rows[(rows["rate"] != "inf") & (rows["api servers"] > 1) & (rows["clients"] == 1)]


def several_api_servers(lift: pd.DataFrame) -> pd.DataFrame:
    """The study's runs with the front end spread over several processes, the load from one client
    (a split load starts staggered, so it is not the same load)."""
    return lift[(lift["api servers"] > 1) & (lift["clients"] == 1)]


def front_end_table(frames: list[pd.DataFrame], columns: tuple[str, ...]) -> pd.DataFrame:
    """Per setting and load of each frame: runs, completeness range, front end and the medians of
    ``columns`` (those recorded)."""
    frame = pd.concat([point_table(f, ["setting", "rate"], extra=columns) for f in frames], ignore_index=True)
    return shown(frame[["setting", "rate", "runs", "completeness", "front end", *[c for c in columns if c in frame]]])


def lift_facts(lift: pd.DataFrame, rows: pd.DataFrame, below: pd.DataFrame, handout: list[str]) -> list[str]:
    """What the front-end study shows, each statement with the range it rests on: capacity (rate
    inf) settings compared with each other, then whether several API servers keep up below it."""
    capacity = lift[lift["rate"] == "inf"]
    one = capacity[capacity["api servers"] == 1]
    several = several_api_servers(capacity)
    facts = []
    if not one.empty and not several.empty:
        facts.append(
            f"Several API servers take the front end off one core: the busiest of them used "
            f"{span_text(several[BUSIEST_API], 2)} of a core against {span_text(one[BUSIEST_API], 2)} "
            f"for a single one, and the share of requests streamed token by token rose from "
            f"{span_text(one[WHOLE_REQUESTS], 0)}% to {span_text(several[WHOLE_REQUESTS], 0)}%. "
            f"Throughput: {span_text(one[THROUGHPUT], 0)} tok/s with one API server; "
            + "; ".join(f"{span_text(part[THROUGHPUT], 0)} with {n} ({len(part)} run{'s' * (len(part) > 1)}, "
                        f"median {part[THROUGHPUT].median() / one[THROUGHPUT].median():.2f}x)"
                        for n, part in several.groupby("api servers")) + ".")
        lagged = several[several["lagged"]]
        facts.append(
            f"Yet completeness stayed below 0.99 in {len(lagged)} of {len(several)} of these runs "
            f"({span_text(several['completeness'])}): a minority of requests still got tokens merged, "
            f"down to {100 * lagged['min request completeness'].min():.0f}% of their gaps. The busiest "
            f"process is now the engine core ({span_text(several[ENGINE_CORES], 2)} of a core), the "
            "one Python thread that schedules each step, prepares its inputs and hands its tokens to "
            f"the API servers, while the GPU is busy {span_text(several[GPU_UTIL], 0)}% of the load "
            f"window. At rate inf, with {' or '.join(str(n) for n in sorted(several['api servers'].unique()))} "
            "API servers, this H200 serves the 0.6B model about as fast as host-side Python lets it; "
            "the window averages do not show which process merged the remaining chunks."
            if not lagged.empty else
            f"Completeness reached 0.99 in every run ({span_text(several['completeness'])}).")
    single = lift[lift["clients"] == 1]
    facts += below_saturation_facts(below, rows)
    if not single.empty:
        facts.append(f"The client is not the limit: one `vllm bench serve` process used "
                     f"{span_text(single[CLIENT_CORES], 2)} of a core.")
    split = capacity[capacity["clients"] > 1]
    if not split.empty:
        facts.append(
            f"Split over {int(split['clients'].max())} processes, the load is not the same load: each "
            f"process starts its own clock after its own set-up, and their first requests went out "
            f"{span_text(split['client start spread (s)'], 1)} s apart, so rate inf became staggered "
            f"bursts (completeness {span_text(split['completeness'])}, throughput "
            f"{span_text(split[THROUGHPUT], 0)} tok/s). These runs are shown, not compared (`harness/bench_gate.py` "
            "starts the clients of a split load together, recorded as `client_gate`).")
    earlier = rows[rows["folder"].isin(handout) & (rows["rate"] == "inf") & (rows[BUDGET] == 2048)]
    if not earlier.empty and not one.empty:
        facts.append(
            f"The same setting on another H200 host (the committed Task 2 runs at budget 2048, rate "
            f"inf) read {span_text(earlier[THROUGHPUT], 0)} tok/s, "
            f"{earlier[THROUGHPUT].median() / one[THROUGHPUT].median():.2f}x this sitting's "
            "one-API-server median: hosts differ, so settings are compared only within one sitting.")
    if several.empty or several.groupby("setting")["lagged"].any().all():
        facts.append("So no rate-inf run here supports a scheduler conclusion. "
                     + ("Below saturation with several API servers the front end kept up in every "
                        "run, so that is the setting of the corrected Task 2 and Task 3 runs."
                        if not below.empty and not below["lagged"].any() else
                        "The corrected Task 2 and Task 3 runs are still to be made, at Poisson rates "
                        "below saturation with several API servers, each run's completeness checked."))
    return facts


def gated_client_fact(gated: pd.DataFrame) -> str | None:
    """One sitting's runs of one client process against the same load split over several that
    start together (``harness/bench_gate.py``): the client limits only if every split run is
    faster than every single-process run."""
    one, split = gated[gated["clients"] == 1], gated[gated["clients"] > 1]
    if one.empty or split.empty:
        return None
    faster = separated(split[THROUGHPUT], one[THROUGHPUT]) and split[THROUGHPUT].min() > one[THROUGHPUT].max()
    return (f"{len(one)} runs of one client process against {len(split)} with the load split over "
            f"{int(split['clients'].max())} processes, {sitting_text(gated['sitting'])}: the split processes sent their first requests "
            f"{span_text(split['client start spread (s)'], 3)} s apart; throughput {span_text(split[THROUGHPUT], 0)} "
            f"tok/s against {span_text(one[THROUGHPUT], 0)} with one process, which used "
            f"{span_text(one[CLIENT_CORES], 2)} of a core. "
            + ("Every split run is faster than every single-process run: one client process limited this load."
               if faster else
               "The split runs are not faster than every single-process run: the client is not shown to limit "
               "this load."))


def below_saturation_facts(below: pd.DataFrame, rows: pd.DataFrame) -> list[str]:
    """Completeness, engine core and GPU at Poisson rates with several API servers, beside one API
    server's completeness at the same or lower rates."""
    if below.empty:
        return []
    lowest = min(float(r) for r in below["rate"])
    one = rows[(rows["api servers"] == 1) & (rows["rate"] != "inf")]
    one = one[one["rate"].astype(float) <= lowest]
    against = " and ".join(f"{span_text(part['completeness'])} at {rate} req/s"
                           for rate, part in sorted(one.groupby("rate"), key=lambda kv: -float(kv[0])))
    lagged = int(below["lagged"].sum())
    rates = " and ".join(sorted({str(r) for r in below["rate"]}, key=float))
    itl = below.groupby("rate")["ITL P50 (ms)"].median()
    late = ", ".join(f"{strategy_label(name)} {value:.1f}%"
                     for name, value in below.groupby("strategy", sort=False)[LATE_GAPS].median().items())
    return [
        f"Below saturation, {int(below['api servers'].min())} API servers kept up in "
        f"{len(below) - lagged} of {len(below)} runs at {rates} req/s (completeness "
        f"{span_text(below['completeness'])}; Task 2 and Task 3 runs)"
        + (f", against {against} with one API server (sections 4 and 5). Even at these rates one "
           "API server merged chunks: a prompt's arrival and every step's outputs share one Python "
           "event loop, and a step of a few milliseconds leaves it no slack." if against else "."),
        f"The engine core used {span_text(below[ENGINE_CORES], 2)} of a core at every one of these "
        f"rates and the GPU was busy {span_text(below[GPU_UTIL], 0)}% of the load window, while ITL "
        f"P50 (median of each rate's runs) went from {itl.min():.1f} to {itl.max():.1f} ms. The engine "
        "core runs its steps back to back whenever requests are in flight, so a full core there means a loop that never waits, not a saturated one; with "
        "the GPU idle about half the time at every load, host-side work, not the GPU, sets the step "
        "time of this 0.6B model.",
        f"Completeness is necessary, not sufficient: in these runs {span_text(below[LATE_GAPS], 1)}% of "
        f"the chunk gaps were under 0.1 ms (per strategy, median of runs: {late}). No engine step is "
        "that short (one token per request per step, a few milliseconds each), so those tokens were "
        "sent in their own chunks but waited in an API server or the client and were read back to "
        "back; the gap before each such pair is longer by the same wait. Such runs still count as "
        "kept up (no token merged), and the ITL tails carry this share of front-end or client delay. "
        "docs/frontend.md traces these late chunks, in the runs stored with every gap, to bursts at the "
        "period of the harness's own /metrics poll, which stalled the streams; the poll now runs less often.",
    ]


def poll_burst_facts(runs: list[Run]) -> list[str]:
    """The runs that recorded when their late chunks came (``frontend.late_gap_bursts``, from every
    gap at run time), by how often the harness read ``/metrics`` during them: the bursts' period
    beside the poll's. A stall at each poll shows as bursts at the poll's period."""
    by_interval: dict[float, list[Run]] = {}
    for run in runs:
        interval = (run.engine.get("metrics") or {}).get("interval_s")
        if (run.frontend or {}).get("late_gap_bursts") and interval is not None:
            by_interval.setdefault(float(interval), []).append(run)
    facts = []
    for interval, group in sorted(by_interval.items()):
        bursts = pd.DataFrame([r.frontend["late_gap_bursts"] for r in group])
        completeness = pd.Series([r.frontend["token_gaps"]["completeness"] for r in group])
        rates = sorted({r.config.rate_label for r in group}, key=lambda x: float(x))
        facts.append(
            f"With the poll every {interval:g} s, {len(group)} run{'s' * (len(group) > 1)} "
            f"({', '.join(sorted({r.folder for r in group}))}; {' and '.join(rates)} req/s): late chunks came in "
            f"bursts every {span_text(bursts['period_s_median'], 2)} s (median gap between bursts), "
            f"{span_text(bursts['share_in_bursts'] * 100, 0)}% of them in bursts, after waits of "
            f"{span_text(bursts['stall_ms_median'], 1)} ms; {span_text(bursts['late_chunks'], 0)} late chunks a run, "
            f"completeness {span_text(completeness)}.")
    return facts
