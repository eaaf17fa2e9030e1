"""The lab's report (``results/REPORT.md``, ``report.pdf``) and ``tables.md``, from the results only.

    .venv/bin/python plot_results.py [--results results] [--pdf]

``plot_results.main`` reads the results once, writes the CSVs and figures, then calls
``write_report``. The report is a list of blocks (``harness/document.py``) rendered to Markdown and
PDF; every table, and the blocks placed ``"appendix"`` (each setting's and point's values), go to its
appendix, ``tables.md``, so the report itself states what the data show. Every number is read or
computed from a results file through the results layer (``harness/results.py``); a section
without data says so. The rules behind each conclusion (when runs separate, which budget
saturates, SLO capacity and its intervals) are in ``harness/rules.py``: this module words what
they return.

The rule behind every serving conclusion: it is drawn only from runs whose front end kept up
(token-gap completeness >= 0.99, ``frontend`` block). Runs that lagged are reported, marked and
counted, and no scheduler conclusion is drawn from them. The report states what the committed
results show, not the history of earlier claims.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness import step_model
from harness.document import (Block, appendix_blocks, bullets, heading, image, para, render_markdown, render_pdf,
                               report_blocks, table)
from harness.results import (BUDGET, BUSIEST_API, CLIENT_CORES, CORES, ENGINE_CORES, GPU_UTIL, LATE_GAPS, METRICS,
                             MIB, PREFILL_CHUNK, THROUGHPUT, WHOLE_REQUESTS, Results, Run, budget_in_force,
                             date_range, load_label, meta_field, point_table, provenance_line, shown, sitting_text,
                             sort_key, span_text, strategy_label, task1_table, task2_table, ttft_by_prompt_length)
from harness.rules import (CHAT_ITL_TOLERANCE, MIN_RUNS_TO_SEPARATE, REPLAY_METRICS, SATURATED_CORE, SATURATED_GPU,
                           SATURATION_TOLERANCE, SCREEN_SLOS, SLOW_REQUEST_S, against_default, attainment_rows,
                           capacity_runs, capacity_table, chat_budget, interval_text, is_sweep, kept_up, ratio,
                           replay_ranking, replay_validation, saturation_budget, separated, separating,
                           slow_requests, spearman, spread_factor, spread_pct, below_pairs, theory_pairs, trend_verdict)

HANDOUT_BUDGETS = (512, 1024, 2048, 4096, 8192)  # the handout's Task 2 grid
HANDOUT_RUNS = 2  # the handout's runs per point (median of 2)
HANDOUT_FOLDER = "task2"  # the handout's Task 2 runs (its flags: one API server)
CAPACITY_BAR = "the 1.2x bar (1.2x the default's SLO capacity, 95% interval above 1.0)"
STRATEGY_MOTIVATION = {
    "prefill-first": "Strategy A (the handout's): while any prefill work is pending, a step holds "
                     "only prefills; otherwise only decodes. Expected: lower TTFT, higher ITL.",
    "sjf": "Strategy B1 (ours): the waiting queue ordered by prompt length, shortest first. "
           "Expected: short prompts stop waiting behind long ones; long prompts pay.",
}


def factor(value: float) -> str:
    return f"{value:.2f}x"


def tok_s(value: float) -> str:
    return f"{value:.1f} tok/s"


def mib(num_bytes: float) -> str:
    return f"{num_bytes / MIB:.1f} MiB"


def no_results(what: str, where: str, command: str, needs: str = "") -> Block:
    """What a section without results says instead: where they would be and what makes them."""
    return para(f"No {what} results (`results/{where}` is missing or empty): run `{command}`."
                + (f" {needs} need them." if needs else ""), place="both")


def lag_sentence(rows: pd.DataFrame, what: str) -> str:
    """'No scheduler conclusion from ...: all 20 runs lagged (completeness 0.913-0.990).'"""
    lagged = rows[rows["lagged"]]
    share = f"all {len(rows)}" if len(lagged) == len(rows) else f"{len(lagged)} of {len(rows)}"
    return (f"No scheduler conclusion from {what}: the front end lagged in {share} runs "
            f"(completeness {span_text(lagged['completeness'])}), so their latencies include "
            "queueing in the API server (section 3).")


# --- 1 Environment and 2 Task 1 -------------------------------------------------------------
def environment_section(res: Results) -> list[Block]:
    """GPU, model, weights and versions per task, straight from the ``meta`` blocks."""
    task1 = [m.get("meta") or {} for m in (res.task1 or {}).get("methods", {}).values()]
    tasks = {"Task 1": task1, "Task 2": [r.meta for r in res.runs("task2")],
             "Task 3": [r.meta for r in res.runs("task3")],
             "SLO studies": [r.meta for r in res.runs("slo")]}
    present = {name: metas for name, metas in tasks.items() if metas}
    blocks = [heading("1 Environment")]
    if not present:
        return blocks + [para("No results files under `results/`: nothing to report.", place="both")]
    env = lambda m, *path, **kw: meta_field(m, *path, missing="missing", **kw)  # noqa: E731
    rows = {
        "results": lambda n, m: f"{len(m)} {'methods' if n == 'Task 1' else 'run files'}",
        "GPU": lambda n, m: f"{env(m, 'gpu', 'count')}x {env(m, 'gpu', 'name')}",
        "GPU memory (GiB)": lambda n, m: env(m, "gpu", "memory_gib"),
        "driver / CUDA": lambda n, m: f"{env(m, 'gpu', 'driver')} / {env(m, 'gpu', 'cuda')}",
        "vLLM / torch / transformers": lambda n, m: " / ".join(env(m, "versions", k) for k in
                                                              ("vllm", "torch", "transformers")),
        "model, weights": lambda n, m: (f"{env(m, 'model', shorten=lambda v: Path(v).name)}, "
                                        f"{env(m, 'weights')}"),
        "dates (UTC)": lambda n, m: date_range([str(x["date_utc"]) for x in m if x.get("date_utc")]),
    }
    frame = pd.DataFrame([{"": label, **{n: get(n, m) for n, m in present.items()}}
                          for label, get in rows.items()])
    notes = ["GPU memory reads 139.8 GiB (torch's `total_memory`, earlier files) or 140.4 GiB "
             "(nvidia-smi's `memory.total`) for the same H200."]
    if any(str(m.get("weights")).startswith("dummy") for ms_ in present.values() for m in ms_):
        notes.append("Weights are dummy: random values in the model's real shapes. Latency, "
                     "throughput and memory depend on shapes, not values; every request is "
                     "forced to its full output length (`ignore_eos`).")
    missing = [name for name in tasks if name not in present and name != "SLO studies"]  # the study is optional
    if missing:
        notes.append(f"No results for {', '.join(missing)}.")
    return blocks + [para("From the provenance (`meta`) of every results file; values that differ "
                          "between runs are all listed."), table(frame), bullets(notes)]


def task1_facts(results: dict[str, Any]) -> list[str]:
    """The numbers behind Task 1's questions: speed-up, KV peaks, padding, reserved pool."""
    methods = results["methods"]
    serial, static, vllm = (methods.get(k) for k in ("hf-serial", "hf-static", "vllm"))
    facts = []
    if vllm and serial:
        facts.append(f"Continuous batching in paged memory: vLLM is {factor(ratio(serial['total_s'], vllm['total_s']))} "
                     f"faster than serial generation ({tok_s(vllm['output_tokens_per_s'])} against "
                     f"{tok_s(serial['output_tokens_per_s'])})" + (
                         f" and {factor(ratio(static['total_s'], vllm['total_s']))} faster than static batching"
                         if static else "") + ".")
    if static:
        pad = static["padding"]
        facts.append(f"Static batching (batch {static['batch_size']}) pads every prompt to the "
                     f"longest in its batch: of the {pad['held_token_slots']} KV token slots it holds, "
                     f"{pad['padding_slots']} ({pad['padding_share']:.1%}) are padding and "
                     f"{pad['real_tokens']} hold real tokens; its KV peak (B x L x bytes/token) is "
                     f"{mib(static['kv_peak_bytes'])}.")
        if static.get("oom_search") and all(s.get("fits") for s in static["oom_search"]):
            facts.append(f"The requested batch of {static['requested_batch_size']} fit on this GPU "
                         "(no OOM): the OOM question is answered from the padding arithmetic.")
    if vllm:
        kv_token = results["config"].get("kv_bytes_per_token")
        line = ("vLLM's measured KV peak (largest sum of computed tokens over all steps) is "
                f"{mib(vllm['kv_peak_bytes'])}")
        if kv_token and static:
            used = vllm["kv_peak_bytes"] / kv_token
            line += f", {used:.0f} tokens, {used / static['padding']['real_tokens']:.1%} of the real tokens"
        if "kv_peak_allocated_bytes" in vllm:
            line += (f"; its allocated blocks peak at {mib(vllm['kv_peak_allocated_bytes'])} "
                     f"({1 - vllm['kv_peak_bytes'] / vllm['kv_peak_allocated_bytes']:.1%} unused: "
                     "the tail of each request's last block)")
        facts.append(line + ".")
        if static:
            facts.append(f"KV peak, static batching vs vLLM: "
                         f"{factor(ratio(static['kv_peak_bytes'], vllm['kv_peak_bytes']))}.")
        if vllm.get("kv_capacity_bytes"):
            facts.append(f"vLLM's 'peak GPU memory' is the pool it reserves up front "
                         f"(gpu_memory_utilization {vllm.get('engine', {}).get('gpu_memory_utilization')}): "
                         f"{vllm['kv_capacity_tokens']} tokens ({vllm['kv_capacity_bytes'] / 2**30:.1f} GiB), "
                         f"of which this run used {vllm['kv_peak_bytes'] / vllm['kv_capacity_bytes']:.1%}.")
    return facts


def task1_section(res: Results) -> list[Block]:
    blocks = [heading("2 Task 1: transformers vs vLLM offline")]
    if not res.task1:
        return blocks + [no_results("Task 1", "task1.json", "python task1_vllm_vs_hf.py")]
    cfg = res.task1["config"]
    metas = [m.get("meta") for m in res.task1["methods"].values()]
    fixed = " (fixed output length)" if cfg.get("fixed_output_len") else ""
    return blocks + [para(f"{cfg['num_prompts']} prompts, {cfg['max_new_tokens']} new tokens each{fixed}, "
                          f"{cfg['dtype']}, KV bytes per token {cfg['kv_bytes_per_token']}. {provenance_line(metas)}."),
                     table(task1_table(res.task1)), heading("Numbers for the analysis questions", 3),
                     bullets(task1_facts(res.task1))]


# --- 3 The serving front end ----------------------------------------------------------------
FRONTEND_DEFINITIONS = (
    "How the serving runs are read. ITL is measured per streamed chunk: the client records one "
    "gap per chunk it receives. Token-gap completeness is ITL entries / (output tokens - 1), "
    "pooled over a run's kept successful requests: 1.0 means one chunk per token. Below 0.99 the "
    "API server fell behind the engine and merged tokens into chunks; such a run is marked "
    "\"front end lagged\", its latencies include queueing in the API server, and no scheduler "
    "conclusion is drawn from it. Throughput is the output tokens emitted inside [first kept "
    "start, last kept end] by any successful request, divided by that window. The first 10% of "
    "requests by start time are dropped as warm-up.")


LIFT_PREFIX = "task2_api-"  # experiments/sittings.sh: one folder per API-server count, one sitting
GATED_SUFFIX = "_gated"  # sitting gated-clients: one client process against two started together


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
                   bullets(lift_facts(lift, rows, below_saturation_rows(res)))]
    for folder in (n for n in res.folders("task2") if n.startswith(LIFT_PREFIX) and n.endswith(GATED_SUFFIX)):
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
    """The front-end study's runs: every ``task2_api-N`` folder (not the budget sweep's
    ``task2_api-N_budgets``, a later sitting of another question)."""
    frames = [res.folder_rows(n) for n in res.folders("task2")
              if n.startswith(LIFT_PREFIX) and n.removeprefix(LIFT_PREFIX).isdigit()]
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


def lift_facts(lift: pd.DataFrame, rows: pd.DataFrame, below: pd.DataFrame) -> list[str]:
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
    earlier = rows[(rows["folder"] == "task2") & (rows["rate"] == "inf") & (rows[BUDGET] == 2048)]
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
        "kept up (no token merged), and the ITL tails carry this share of front-end or client delay.",
    ]


# --- 4 Task 2 -------------------------------------------------------------------------------
def capacity_answer(name: str, part: pd.DataFrame, steps: dict[str, Any] | None) -> str | None:
    """Rate inf: how the budget moves throughput (``capacity_runs``), and which component set the
    pace, named by elimination. ``steps``: the record of ``harness/budget_steps.py``, which may
    explain the order."""
    if (runs := capacity_runs(part)) is None:
        return None
    by_budget = part.groupby(BUDGET)[THROUGHPUT]
    medians = by_budget.median()
    order = " < ".join(str(b) for b in medians.sort_values().index)
    ends = [f"every run of {b} lies {side} every run of the other budgets" for side, b in
            (("below", medians.idxmin()), ("above", medians.idxmax()))
            if all(separated(runs[b], runs[o]) for o in runs if o != b)]
    counts = by_budget.size()
    per_budget = str(counts.min()) if counts.min() == counts.max() else f"{counts.min()}-{counts.max()}"
    line = (f"{name}, {load_label('inf')} ({len(part)} runs, {per_budget} per budget): throughput by median {order} "
            f"({'; '.join(f'{b}: {span_text(v, 0)}' for b, v in runs.items())} tok/s)"
            + (f"; {' and '.join(ends)}." if ends else "; the runs of the budgets overlap."))
    slack = part[CLIENT_CORES].max() < SATURATED_CORE and part[GPU_UTIL].max() < SATURATED_GPU  # API: above
    if slack:
        line += (f" What set the pace, by elimination: the busiest API server used at most "
                 f"{part[BUSIEST_API].max():.2f} core, the client {part[CLIENT_CORES].max():.2f}, and the "
                 f"GPU was busy {span_text(part[GPU_UTIL], 0)}% of the window, so the engine core "
                 f"({span_text(part[ENGINE_CORES], 2)} core), whose one thread schedules, prepares and "
                 "launches every step, did: throughput here measures host-side work per step, not the GPU.")
    return line + (" " + graph_steps_sentence(medians, steps) if steps else "")


def graph_steps_sentence(medians: pd.Series, steps: dict[str, Any]) -> str:
    """The budgets' share of steps above the largest CUDA graph (vLLM's scheduler replayed on the
    same load), and whether, among budgets above that size, fewer such steps went with more
    throughput. Budgets at or below it have no such steps but need more, smaller ones."""
    graph = steps["config"]["graph_tokens"]
    by_budget = {row["max_num_batched_tokens"]: row for row in steps["budgets"]
                 if row["max_num_batched_tokens"] in medians.index}
    share = {b: row["share_over_graph"] for b, row in by_budget.items()}
    above = [b for b in by_budget if b > graph]
    if len(above) < 3:  # two points always rank-correlate perfectly
        return ""
    rho = spearman([share[b] for b in above], [medians[b] for b in above])
    small = [f"{b} ({by_budget[b]['steps']} steps)" for b in by_budget if b <= graph]
    return (f"A candidate cause: vLLM captures CUDA graphs for steps of up to {graph} tokens here (server "
            "log); a larger step launches each kernel from the engine core's Python thread. vLLM's "
            "scheduler, replayed on a CPU with this load (`python -m harness.budget_steps`, no model), "
            f"puts {', '.join(f'{share[b]:.0%} at {b}' for b in above)} of the steps above "
            f"that size" + (f", none at {', '.join(small)}, which take more, smaller steps than the "
                            f"{by_budget[max(above)]['steps']} at {max(above)}" if small else "")
            + (f". Above {graph}, the fewer such steps, the faster (rank correlation {rho:+.2f} over "
               f"{len(above)} budgets)" if rho <= -0.99 else
               f". Above {graph} the share does not order the throughput (rank correlation {rho:+.2f})")
            + ". The GPU runs of the sweep do not record which steps used a graph: an explanation the data "
              "fit, not one they prove; section 6b sets it against measured step times.")


def task2_answers(rows: pd.DataFrame, steps: dict[str, Any] | None = None,
                  slow: pd.DataFrame | None = None, slow_note: str = "") -> list[str]:
    """The handout's three questions, answered per setting and load with the run-to-run spread
    beside each answer: latency from the runs whose front end kept up only, rate-inf throughput
    from every run where ``capacity_runs`` allows, with the handout's runs of the same budgets
    beside it; and, given ``slow`` (``slow_request_rows``), the requests slower than
    ``SLOW_REQUEST_S`` end to end."""
    capacity = []
    for (name, rate), part in rows.groupby(["setting", "rate"], sort=False):
        if rate == "inf" and (answer := capacity_answer(name, part, steps)):
            capacity += [answer, *filter(None, [handout_order_fact(part, rows)])]
    if slow is not None and not slow.empty:
        capacity.append(slow_requests_fact(slow, slow_note))
    facts = []
    for (name, rate), part in kept_up(rows).groupby(["setting", "rate"], sort=False):
        enough = part.groupby(BUDGET)[BUDGET].transform("size") >= HANDOUT_RUNS
        part = part[enough]  # a budget with fewer runs that kept up than the handout asks answers nothing
        med = task2_table(part).sort_values(BUDGET)
        if len(med) < 3:
            continue
        if rate != "inf" and med["runs"].min() >= MIN_RUNS_TO_SEPARATE:
            facts += budget_answers(name, rate, part, med)
            continue
        budgets = list(med[BUDGET])
        rhos = ", ".join(f"{c.replace(' (ms)', '')} {spearman(budgets, list(med[c])):+.2f}" for c in METRICS)
        line = (f"{name}, {load_label(rate)} ({len(part)} runs that kept up, {int(med['runs'].min())}-"
                f"{int(med['runs'].max())} per budget): rank correlation with the budget (Spearman, "
                f"+1 = rises at every step): {rhos}; runs of one budget differ by up to "
                f"{spread_pct(part, 'TTFT P99 (ms)', BUDGET):.0f}% in TTFT P99, "
                f"{spread_pct(part, 'ITL P99 (ms)', BUDGET):.0f}% in ITL P99 and "
                f"{spread_pct(part, THROUGHPUT, BUDGET):.0f}% in throughput.")
        if rate == "inf":
            sat, best = saturation_budget(med)
            between = (med[THROUGHPUT].max() - med[THROUGHPUT].min()) / med[THROUGHPUT].mean() * 100
            line += (f" Saturation rule (the smallest budget within {SATURATION_TOLERANCE:.0%} of the "
                     f"best median, {tok_s(best)}): {sat}"
                     + ("; not resolved, since runs of one budget differ more than the budgets' medians "
                        f"({between:.0f}%)." if spread_pct(part, THROUGHPUT, BUDGET) > between else "."))
        else:
            line += (f" Chat rule (ITL P99 within {CHAT_ITL_TOLERANCE:.0%} of the best budget's, then "
                     f"the lowest TTFT P99): {chat_budget(med)}.")
        facts.append(line)
    facts += flag_check_facts(rows)
    if rows["lagged"].any():
        facts.append(lag_sentence(rows, "the Task 2 runs that lagged")
                     + " The handout's questions (how TTFT and ITL move with the budget, which budget "
                       "suits chat) are answered only for settings whose runs kept up"
                     + ("." if facts else "; there are none yet.")
                     + (" Throughput at rate inf, which a merged chunk does not change, is answered "
                        "above from every run where no API server had a full core." if capacity else ""))
    return capacity + facts


THEORY = {"TTFT": False, "ITL": True}  # the handout's expectation: TTFT falls, ITL rises with the budget
THEORY_WORDS = {"holds": "as the theory says", "contradicted": "against the theory",  # trend_verdict's answers
                "mixed": "partly as the theory says", "no pair separates": "no budget separates from another"}


def runs_by_budget(part: pd.DataFrame, column: str, digits: int = 1) -> str:
    """'512: 11.4-13.7, 1024: 26.5-30.8, ...': each budget's runs, lowest to highest."""
    return ", ".join(f"{budget}: {span_text(group, digits)}" for budget, group in part.groupby(BUDGET)[column])


def pairs_text(pairs: list[tuple[int, int]]) -> str:
    """'512 < 1024, 2048; 4096 < 1024' (each lower budget with those it is below), or 'none'."""
    lower: dict[int, list[int]] = {}
    for a, b in sorted(pairs):
        lower.setdefault(a, []).append(b)
    return "; ".join(f"{a} < {', '.join(map(str, bs))}" for a, bs in lower.items()) or "none"


def budget_answers(name: str, rate: str, part: pd.DataFrame, med: pd.DataFrame) -> list[str]:
    """The handout's Task 2 questions in sentences a student can check against A1 and A2, for a
    setting with enough runs per budget to separate them (``below_pairs``): how each latency
    moves with the budget against the theory, what a step carries, throughput against the
    offered load, and the budget for chat."""
    studies = part["study"].dropna().unique()
    how = (f"study {', '.join(studies)}: the budgets alternate run by run on one server, in the order its "
           f"study.json records" if len(studies) else "one server per budget")
    facts = [f"{name}, {load_label(rate)} ({len(part)} runs that kept up, {int(med['runs'].min())} per budget; "
             f"{how}; {sitting_text(part['sitting'])}). A pair of budgets 'separates' when every run of one is "
             f"below every run of the other."]
    for column in METRICS:
        metric = column.split()[0]
        pairs = below_pairs(part, column, BUDGET)
        rises = THEORY[metric]
        agree, against = theory_pairs(pairs, rises)
        facts.append(f"{column.removesuffix(' (ms)')} (theory: {'rises' if rises else 'falls'} as the budget grows): "
                     f"{THEORY_WORDS[trend_verdict(pairs, rises)]}"
                     + (f"; with the theory: {pairs_text(agree)}" if agree else "")
                     + (f"; against it: {pairs_text(against)}" if against else "")
                     + f" (a < b: every run of budget a below every run of b). Runs (ms): {runs_by_budget(part, column)}.")
    chunk = part.groupby(BUDGET)[PREFILL_CHUNK].median()
    if chunk.notna().all():
        slack = [int(b) for b, c in chunk.items() if c < 0.6 * b]
        facts.append("What a step carries (prefill tokens per step that holds prefill, median of runs): "
                     + ", ".join(f"{b}: {c:.0f}" for b, c in chunk.items())
                     + (f"; from {slack[0]} on a step holds well under the budget (under 60% of it), so larger "
                        "budgets change little at this rate." if slack else "."))
    offered = part["offered (tok/s)"].dropna()
    kept_pace = not offered.empty and (part[THROUGHPUT] >= (1 - SATURATION_TOLERANCE) * part["offered (tok/s)"]).all()
    facts.append(f"Throughput: {span_text(part[THROUGHPUT], 0)} tok/s over every run"
                 + (f" against {offered.median():.0f} tok/s offered ({rate} req/s x the output length)"
                    if not offered.empty else "")
                 + (f"; every run within {SATURATION_TOLERANCE:.0%} of what was offered, so at this rate throughput "
                    "is the offered load whatever the budget (A2 is flat; each run's own arrival draw moves it "
                    "a little); the budget's effect on throughput shows at rate inf." if kept_pace else "."))
    chat = chat_budget(med)
    facts.append(f"For chat (rule: ITL P99 within {CHAT_ITL_TOLERANCE:.0%} of the best budget's median, then the "
                 f"lowest TTFT P99): {chat}. Its runs: ITL P99 "
                 f"{span_text(part.loc[part[BUDGET] == chat, 'ITL P99 (ms)'], 1)} ms, TTFT P99 "
                 f"{span_text(part.loc[part[BUDGET] == chat, 'TTFT P99 (ms)'], 1)} ms.")
    return facts


def flag_check_facts(rows: pd.DataFrame) -> list[str]:
    """Budgets set at run time against runs of the same budget, rate and machine on a server
    started with the flag: the runtime budget's check on the GPU (that it plans the same steps
    is a test on the real scheduler)."""
    keys = ["rate", "api servers", "sitting", BUDGET]
    runtime = rows[rows["budget set"] == "at run time"]
    flag = rows[(rows["budget set"] == "by the flag") & rows["study"].notna()]
    facts = []
    for key, own in flag.groupby(keys, sort=False):
        base = runtime[(runtime[keys] == pd.Series(key, index=keys)).all(axis=1)]
        if base.empty:
            continue
        shown_metrics = ["TTFT P50 (ms)", "TTFT P99 (ms)", "ITL P99 (ms)"]
        split = [c.removesuffix(" (ms)") for c in shown_metrics if separated(own[c], base[c])]
        enough = min(len(own), len(base)) >= MIN_RUNS_TO_SEPARATE
        facts.append(
            f"The runtime budget checked against the flag, budget {key[3]}, {load_label(key[0])}, one machine: "
            f"{len(own)} run(s) on a server started with --max-num-batched-tokens {key[3]} ({', '.join(own['folder'].unique())}) "
            "read " + ", ".join(f"{c.removesuffix(' (ms)')} {span_text(own[c], 1)}" for c in shown_metrics)
            + f" ms (completeness {span_text(own['completeness'])}), against "
            + ", ".join(f"{span_text(base[c], 1)}" for c in shown_metrics)
            + f" ms in the {len(base)} runs set at run time. "
            + (f"They separate in {', '.join(split)}." if split else "No metric separates." if enough else
               f"Too few runs to separate ({MIN_RUNS_TO_SEPARATE} a side): whether the runtime budget changes "
               "latency on the GPU is still open; within a study every budget shares the one server, so the "
               "budgets' comparison does not depend on it."))
    return facts


def handout_order_fact(part: pd.DataFrame, rows: pd.DataFrame) -> str | None:
    """The handout's rate-inf runs (``HANDOUT_FOLDER``) at the budgets a capacity sweep ``part``
    shares with them: their order by median, and whether the sweep's slowest budget is the
    slowest there too, every run below the others' (``separated`` needs 3 runs a side, too many
    here, so plainly: its highest run below their lowest)."""
    handout = rows[(rows["folder"] == HANDOUT_FOLDER) & (rows["rate"] == "inf")]
    here = part.groupby(BUDGET)[THROUGHPUT].median()
    handout = handout[handout[BUDGET].isin(here.index)]
    if (part["folder"] == HANDOUT_FOLDER).any() or handout[BUDGET].nunique() < 2:
        return None
    runs = dict(list(handout.groupby(BUDGET)[THROUGHPUT]))
    order = handout.groupby(BUDGET)[THROUGHPUT].median().sort_values().index
    slowest = here.idxmin()
    overlap = [str(b) for b in runs if b != slowest
               and not (runs[slowest].max() < runs[b].min() or runs[b].max() < runs[slowest].min())]
    counts = handout.groupby(BUDGET).size()
    why = ([f"{counts.min()} runs per budget"] if counts.min() < MIN_RUNS_TO_SEPARATE else []) + (
        ["API-server CPU not recorded"] if handout[BUSIEST_API].isna().any() else
        ["an API server at a full core"] if handout[BUSIEST_API].max() >= SATURATED_CORE else [])
    if slowest not in runs:
        verdict = f"{slowest}, the sweep's slowest, did not run there"
    elif order[0] == slowest:
        verdict = (f"{slowest} is the slowest there too" + (f" by median, but its runs overlap those of "
                                                            f"{' and '.join(overlap)}" if overlap else
                                                            ", every run below every run of the others"))
    else:
        verdict = (f"{slowest}, the sweep's slowest, is not the slowest there ({order[0]} is, by median)"
                   + (f" and its runs overlap those of {' and '.join(overlap)}" if overlap else ""))
    api = int(handout["api servers"].max())
    return (f"The handout's runs ({HANDOUT_FOLDER}: {api} API server{'s' * (api > 1)}, rate inf) order the same "
            f"budgets {' < '.join(map(str, order))} by median "
            f"({'; '.join(f'{b}: {span_text(runs[b], 0)}' for b in sorted(runs))} tok/s): {verdict}."
            + (f" They are not read as the engine's pace ({'; '.join(why)}), so they neither confirm nor "
               "contradict the sweep's order." if why else ""))


def slow_request_rows(runs: list[Run], limit_s: float = SLOW_REQUEST_S) -> pd.DataFrame:
    """Per run: its setting, load and budget, how many requests it sent, and how many of them
    succeeded slower than ``limit_s`` end to end (``slow_requests``)."""
    return pd.DataFrame([{"setting": r.setting, "rate": r.config["rate"], "run": r.config["run"],
                          BUDGET: budget_in_force(r.config),
                          "requests": len(r.detail["ttfts"]), "slow": slow_requests(r, limit_s)} for r in runs])


def slow_requests_fact(slow: pd.DataFrame, note: str = "", limit_s: float = SLOW_REQUEST_S) -> str:
    """How many requests per run exceeded ``limit_s`` end to end, for every setting, load and
    budget where any did; how many other runs had none."""
    head = f"Requests slower than {limit_s:g} s end to end (TTFT plus the sum of the ITLs{note})"
    parts, listed = [], 0
    ordered = slow.sort_values(["setting", "rate", BUDGET, "run"], key=sort_key, kind="stable")
    for (setting, rate, budget), g in ordered.groupby(["setting", "rate", BUDGET], sort=False):
        if g["slow"].any():
            counts = [str(n) for n in g["slow"]]
            joined = counts[0] if len(counts) == 1 else ", ".join(counts[:-1]) + " and " + counts[-1]
            total = (f"{g['requests'].iloc[0]}" if g["requests"].nunique() == 1 else
                     "/".join(map(str, g["requests"])))
            parts.append(f"{setting}, {load_label(rate)}, budget {budget}: {joined} of {total} requests "
                         f"({'one run' if len(g) == 1 else f'{len(g)} runs'})")
            listed += len(g)
    if not parts:
        return f"{head}: none in any of the {len(slow)} Task 2 runs."
    return (f"{head}, per run: {'; '.join(parts)}"
            + (f"; none in the other {len(slow) - listed} Task 2 runs." if len(slow) > listed else ".")
            + " They stay in the runs' percentiles.")


def task2_section(res: Results) -> list[Block]:
    blocks = [heading("4 Task 2: max_num_batched_tokens sweep")]
    rows = res.rows("task2")
    if rows.empty:
        return blocks + [no_results("Task 2", "task2/", "bash task2.sh", "Figures A1/A2 and the analysis")]
    cfg = res.runs("task2")[0].config
    present = sorted(rows[BUDGET].unique())
    missing = [b for b in HANDOUT_BUDGETS if b not in present]
    other_flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in cfg["server_params"].items()
                           if k != "max_num_batched_tokens")
    blocks.append(para(f"Workload {cfg.get('workload')}, bench flags `{cfg.get('bench_args')}`, "
                       f"other server flags `{other_flags}`; budgets "
                       f"{', '.join(map(str, present))}"
                       + (f" (missing from the handout's grid: {', '.join(map(str, missing))})" if missing else "")
                       + f"; each setting's table (median over runs, completeness range beside it) is in "
                       "`tables.md`, the figures draw every run. "
                       f"{provenance_line([r.meta for r in res.runs('task2')])}."))
    for (name, rate), part in task2_table(rows).groupby(["setting", "rate"], sort=False):
        blocks += [heading(f"{name}, {load_label(rate)}", 3, place="appendix"),
                   table(shown(part, ("setting", "rate", "attainment", "goodput (req/s)")), place="appendix")]
    return blocks + [image(res.folder, "task2_A1_latency.png", "A1: budget vs TTFT/ITL P50/P99"),
                     image(res.folder, "task2_A2_throughput.png", "A2: budget vs throughput"),
                     heading("Answers from the data", 3),
                     bullets(task2_answers(rows, res.budget_steps, slow_request_rows(res.runs("task2")), slow_note(res)))]


def slow_note(res: Results) -> str:
    """Where ``SLOW_REQUEST_S`` comes from, where the results show it: Task 3's timeout."""
    limits = {r.config.get("timeout_s") for r in res.runs("task3")}
    return "; the timeout of Task 3's runs" if limits == {SLOW_REQUEST_S} else ""


# --- 5 Task 3 -------------------------------------------------------------------------------
def factors_table(part: pd.DataFrame) -> pd.DataFrame | None:
    """Each strategy against vLLM's default at one point, from runs that kept up: TTFT gain =
    default / strategy (>1 better), ITL cost = strategy / default (>1 worse); medians over runs,
    marked where the two strategies' runs do not separate (``separated``)."""
    up = kept_up(part)
    med = point_table(up, ["strategy"]).set_index("strategy")
    if "default" not in med.index or len(med) < 2:
        return None
    runs = {name: group for name, group in up.groupby("strategy")}

    def cell(name: str, column: str, gain: bool) -> str:
        a, b = (med.at["default", column], med.at[name, column]) if gain else (med.at[name, column], med.at["default", column])
        own, base = runs[name][column], runs["default"][column]
        few = min(len(own), len(base)) < MIN_RUNS_TO_SEPARATE
        return factor(ratio(a, b)) + ("" if separated(own, base) else " (too few runs)" if few else " (overlap)")

    return pd.DataFrame([{
        "strategy": strategy_label(name),
        **{f"{unit_less(c)} gain": cell(name, c, True) for c in ("TTFT P50 (ms)", "TTFT P99 (ms)")},
        **{f"{unit_less(c)} cost": cell(name, c, False) for c in ("ITL P50 (ms)", "ITL P99 (ms)")},
        "throughput": cell(name, THROUGHPUT, False),
        "runs (strategy / default)": f"{int(med.at[name, 'runs'])} / {int(med.at['default', 'runs'])}",
    } for name in med.index if name != "default"])


def unit_less(column: str) -> str:
    """'ITL P99 (ms)' -> 'ITL P99', 'Throughput (tok/s)' -> 'Throughput'."""
    return column.rsplit(" (", 1)[0]


def separations(rows: pd.DataFrame) -> list[str]:
    """Per strategy, the metrics on which its runs and the default's separate at some point, with
    the range of strategy / default (medians): 'Strategy A: prefill-first ITL P99 3.99-5.07x (2 points)'."""
    found = pd.DataFrame([{"strategy": name, "metric": unit_less(c), "x": ratio(own[c].median(), base[c].median())}
                          for _, name, own, base in against_default(rows) for c in separating(own, base)])
    if found.empty:
        return []
    spans = lambda x: factor(x.iloc[0]) if len(x) == 1 else f"{x.min():.2f}-{x.max():.2f}x ({len(x)} points)"  # noqa: E731
    return [f"{strategy_label(name)} " + ", ".join(f"{metric} {spans(x)}" for metric, x in
                                                     g.groupby("metric", sort=False)["x"])
            for name, g in found.groupby("strategy", sort=False)]


def task3_answers(rows: pd.DataFrame) -> list[str]:
    """What the runs that kept up resolve at each point: the metrics on which a strategy's runs and
    the default's separate, and how far runs of one strategy spread on the rest."""
    facts = []
    for (folder, workload, rate), name, own, base in against_default(rows):
        found = [f"{unit_less(c)} {span_text(own[c], 0)} against {span_text(base[c], 0)}"
                 for c in separating(own, base)]
        (spread, who), column = max((spread_factor(p, c, "strategy"), c) for p in (own, base)
                                    for c in ("TTFT P50 (ms)", "TTFT P99 (ms)"))
        widest = pd.concat([own, base]).query("strategy == @who")[column]
        facts.append(f"{strategy_label(name)}, {workload} at {load_label(rate)} ({folder}, "
                     f"{sitting_text(pd.concat([own, base])['sitting'])}, {len(own)} / "
                     f"{len(base)} runs against the default): "
                     + (f"too few runs to separate (at least {MIN_RUNS_TO_SEPARATE} a side)"
                        if min(len(own), len(base)) < MIN_RUNS_TO_SEPARATE else
                        f"every run beyond every run on {'; '.join(found)}" if found else "no metric separated")
                     + f". Runs of one strategy differ by up to {factor(spread)} (highest / lowest) in TTFT "
                       f"P50/P99 ({strategy_label(who)}, {unit_less(column)} {span_text(widest, 0)} ms), so "
                       "a TTFT difference smaller than that is not resolved by these runs.")
    if facts:
        facts.append("With 3 runs a side, two equal strategies separate on one metric by chance 1 time "
                     "in 10, so a separation with a small factor is a lead to re-test, not a finding; a "
                     "large factor that separates on both loads is both.")
    if rows["lagged"].any():
        facts.append(lag_sentence(rows, "the Task 3 runs that lagged"))
    return facts


def task3_section(res: Results) -> list[Block]:
    blocks = [heading("5 Task 3: scheduling strategies")]
    rows = res.rows("task3")
    if rows.empty:
        return blocks + [no_results("Task 3", "task3/", "bash task3.sh",
                                    "The strategy tables, figure 3A and the analysis")]
    cfg = res.runs("task3")[0].config
    motivation = [STRATEGY_MOTIVATION[n] for n in sorted(set(rows["strategy"])) if n in STRATEGY_MOTIVATION]
    blocks += [bullets(motivation),
               para(f"Server flags `{cfg.get('server_args', '').strip()}`; a request slower than "
                    f"{cfg.get('timeout_s')} s end to end is a timeout, failures count as +inf "
                    f"latency; mixed and fallback steps from the engine-side recorder (our "
                    f"strategies only); each point's table is in `tables.md`. "
                    f"{provenance_line([r.meta for r in res.runs('task3')])}.")]
    sweeps = capacity_folders(res)  # their runs are read in section 6, as SLO capacity
    rows = rows[~rows["folder"].isin(sweeps)]
    for folder in (f for f in res.folders("task3") if f not in sweeps):
        for workload, rate in res.points(folder):
            part = rows[(rows["folder"] == folder) & (rows["workload"] == workload) & (rows["rate"] == rate)]
            title = f"{workload}, {load_label(rate)}" + (f" ({folder})" if folder != "task3" else "")
            blocks += [heading(title, 3),
                       table(shown(point_table(part, ["setting", "strategy"]),
                                   (BUDGET, "attainment", "goodput (req/s)")), place="appendix"),
                       image(res.folder, f"{folder}_3A_cdf_{workload}_rate-{rate}.png",
                             f"3A: TTFT and ITL CDFs, {title}, every run")]
            factors = factors_table(part)
            if factors is not None:
                blocks += [para("Against vLLM's default, from runs that kept up:"), table(factors)]
            if part["lagged"].any():
                blocks.append(para(lag_sentence(part, "this point's lagged runs"), place="both"))
            if not workload.startswith("fixed") and {"sjf", "sjf-ontime"} & set(part["strategy"]):
                by_len = ttft_by_prompt_length(res.serving[folder], workload, rate)
                blocks += [heading(f"TTFT by prompt length (quartiles, each strategy's runs pooled): {title}", 4,
                                   place="appendix"), table(shown(by_len), place="appendix")]
    blocks += [heading("Answers from the data", 3), bullets(task3_answers(rows))]
    failed = int(rows["timeouts"].sum() + rows["failed"].sum())
    blocks.append(para("No request timed out or failed in any Task 3 run." if failed == 0 else
                       f"{failed} requests timed out or failed over all Task 3 runs (per run in "
                       "`task3_runs.csv`); they stay in the percentiles, failures as +inf."))
    return blocks


# --- 6 Beyond the handout: SLO studies ------------------------------------------------------
SLO_MOTIVATION = (
    "Our SLO-aware strategy (README, \"Schedulers\"): F is SJF among the waiting requests that can still "
    "meet the TTFT target, the late ones last. The earlier ones, C (stall-bounded prefill-first), D "
    "(deadline-aware admission) and E (TPOT-paced), are retired: in the simulated screen below C and E "
    "reach at most the default's capacity and F beats D on every load; their replays there keep "
    "their labels. Each study offers the same load at rising rates and counts the requests meeting TTFT and "
    "mean-TPOT targets (attainment; failures miss) and their rate (goodput), recomputed from the "
    "per-request data.")


def slo_section(res: Results, sweeps: dict[str, Sweep], screen: tuple[pd.DataFrame, pd.DataFrame]) -> list[Block]:
    """The SLO sweeps measured on the GPU first, then the simulated screen (a plan, not a result)."""
    blocks = [heading("6 Beyond the handout: SLO attainment and goodput"), para(SLO_MOTIVATION)]
    blocks += gpu_capacity_section(res, sweeps, screen[1])
    if not sweeps:
        blocks.append(no_results("SLO-sweep", "slo/", "bash slo_study.sh"))
    return blocks + screen_section(res, *screen)


SCREEN = "replay_screen_api-4"  # simulated replays of the SLO-capacity grid: a plan for GPU runs, not a result
BUDGET_REPLAYS, BUDGET_SWEEP = "replay_budgets_api-4", "task2_api-4_budgets"  # held-out budgets, rate inf


def attainment_grid(att: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Mean attainment per ``keys`` (strategy among them) and rate, one column per rate, the runs'
    range (%) beside each mean."""
    wide = att.groupby([*keys, "rate"], sort=False)["attainment"].agg(
        lambda a: f"{a.mean():.0%} ({span_text(a * 100, 0)})").unstack("rate").fillna("").reset_index()
    return wide.assign(strategy=wide["strategy"].map(strategy_label))


def screen_tables(res: Results, draws: int = 2000) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The screen's attainment per replay and SLO pair, and its capacities (``capacity_table``,
    paired by residual seed)."""
    att = attainment_rows(res.serving.get(SCREEN, []))
    return (att, att) if att.empty else (att, capacity_table(att, draws, paired=True))


def screen_section(res: Results, att: pd.DataFrame, caps: pd.DataFrame) -> list[Block]:
    if caps.empty:
        return []
    wide = attainment_grid(att, ["slo", "workload", "strategy"])
    shown_caps = caps.assign(strategy=caps["strategy"].map(strategy_label), capacity=caps["text"],
                             **{"vs default": caps["vs default"].map(lambda v: "n/a" if np.isnan(v) else f"{v:.2f}x")}
                             ).drop(columns=["text", "ratio low", "bound"])
    fixed = caps[caps["workload"] == "fixed"].set_index(["slo", "strategy"])
    ours = caps[caps["strategy"] != "default"]
    best = ours.groupby("strategy")["vs default"].max()
    gaining = ours[ours["vs default"] >= 1.05]
    gain = "; ".join(f"{strategy_label(s)} at {len(g)} of {len(ours[ours['strategy'] == s])} pairs and loads"
                     for s, g in gaining.groupby("strategy", sort=False))
    capped = ours[ours["text"].str.startswith(">=")]  # met at the grid's top rate: a lower bound
    bound = ("" if capped.empty else " Where a capacity reads '>=', every grid rate met the SLO: the ratio is a lower "
             "bound, and the grid must reach higher rates before a strategy is ruled out of 1.2x.")
    top = ours.loc[ours["vs default"].idxmax()]
    reached = ours[(ours["vs default"] >= 1.2) & (ours["ratio low"] > 1.0)]  # CAPACITY_BAR
    names = sorted(set(map(strategy_label, reached["strategy"])))
    verdict = (f"In the simulator {' and '.join(names)} reach{'es' * (len(names) == 1)} "
               "1.2x the default's SLO capacity with an interval above 1.0: candidates, to be confirmed on "
               "the GPU" if not reached.empty else
               f"No strategy {'is shown to reach' if bound else 'reaches'} 1.2x the default's SLO "
               "capacity in the simulator")
    verdict += (f" (best: {strategy_label(top['strategy'])} {'>=' * top['text'].startswith('>=')}"
                f"{top['vs default']:.2f}x, 95% interval {top['ratio interval']}, {top['workload']}, {top['slo']}).")
    vec = att.pivot_table(index=["workload", "slo", "rate", "run"], columns="strategy", values="attainment")
    same = [f"{strategy_label(a)} = {strategy_label(b)} ({w})" for w, g in vec.groupby(level=0)
            for g in [g.dropna(axis=1, how="all")]  # only the strategies replayed on this load
            for i, a in enumerate(g.columns) for b in g.columns[i + 1:] if g[a].equals(g[b])]
    runs = res.serving[SCREEN]
    return [heading("Simulated screen: where scheduling may pay -- a plan for GPU runs, not a result", 3),
            para(f"Each point replayed {att['run'].max()} times by `harness/sched_sim.py replay` (the H200 step "
                 f"model of section 6b; one workload seed, {runs[0].config['seed']}; residual seeds 1-"
                 f"{att['run'].max()}), {len(runs)} replays in `results/{SCREEN}/`. SLO capacity: the highest "
                 "rate with >= 90% of kept requests meeting the SLO, linear between grid rates, of the replays' "
                 "mean attainment ('>=' or '<': outside the grid); intervals: 95% percentile bootstrap, the "
                 "replays of each rate resampled with replacement (2000 draws; for the ratio the same draws for "
                 "both strategies, whose replay k used residual seed k). The tight pair "
                 f"binds: the default's capacity on the fixed load is {fixed.loc[(SCREEN_SLOS[1], 'default'), 'text']} "
                 f"req/s under it against {fixed.loc[(SCREEN_SLOS[0], 'default'), 'text']} under the lab's "
                 "pair; requests over the TPOT term: at most "
                 + " and ".join(f"{att.loc[att['slo'] == slo, 'tpot missed'].max():.0%}" for slo in SCREEN_SLOS)
                 + " of a replay's kept requests under the two pairs. The appendix (`tables.md`) gives every "
                   "point's mean attainment (replays' range, %) and every capacity with its interval."),
            table(wide, place="appendix"), table(shown_caps, place="appendix"),
            bullets([f"{verdict} At 1.05x the default's capacity or more: {gain or 'none'}: the candidates for GPU "
                     "runs (3 or more per point, at rates around the default's capacity and theirs)." + bound,
                     "Expected to earn nothing (at most 1.00x at every pair and load): "
                     f"{', '.join(map(strategy_label, best[best <= 1.0].index)) or 'none'}. Identical replays "
                     f"(same attainment everywhere): {'; '.join(same) or 'none'}. D and E ran at their "
                     "default settings (the lab's pair); tuned to the tight pair they are not screened.",
                     "Known error (section 6b): throughput within 5%, but TTFT near saturation off by up to 2x "
                     "and the GPU's own runs of one load spread several-fold; API servers and client are not "
                     "modelled. The intervals here cover only the replays' step-time residuals, not that error: "
                     "a capacity may move by a few req/s on the GPU, and only GPU runs (>= 3 per point) give "
                     "confidence intervals for it."])]


def sweep_gaps(rows: pd.DataFrame) -> list[str]:
    """Why these runs give no capacity ratio with intervals (none: they do)."""
    gaps = [lag_sentence(rows, "these runs")] if rows["lagged"].any() else []
    if "default" not in set(rows["strategy"]):
        gaps.append("no run of the default to compare with")
    if (fewest := rows.groupby(["strategy", "rate"]).size().min()) < MIN_RUNS_TO_SEPARATE:
        gaps.append(f"{fewest} run(s) at a point, fewer than the {MIN_RUNS_TO_SEPARATE} an interval needs")
    return gaps


def capacity_folders(res: Results) -> list[str]:
    """The Task 3 folders that measure SLO capacity on the GPU: one load at several rates under the
    default and at least one strategy of ours, 3 or more runs per point, every front end kept up."""
    return [f for f in res.folders("task3") if is_sweep(rows := res.folder_rows(f)) and not sweep_gaps(rows)]


@dataclass
class Sweep:
    """An SLO sweep's runs read once: attainment per run and SLO pair, and the capacities with
    intervals (empty where ``gaps`` says why there are none)."""
    rows: pd.DataFrame
    att: pd.DataFrame
    caps: pd.DataFrame
    gaps: list[str]


def sweep_folders(res: Results) -> list[str]:
    """The folders read as SLO sweeps, not point by point: the SLO studies' and the Task 3
    capacity folders (section 6, and their attainment and Pareto figures)."""
    return res.folders("slo") + capacity_folders(res)


def slo_sweeps(res: Results) -> dict[str, Sweep]:
    """Every ``sweep_folders`` folder, read once for section 6 and the summary."""
    sweeps = {}
    for folder in sweep_folders(res):
        rows, att = res.folder_rows(folder), attainment_rows(res.serving[folder])
        gaps = sweep_gaps(rows)
        sweeps[folder] = Sweep(rows, att, att.iloc[:0] if gaps else capacity_table(att, paired=False), gaps)
    return sweeps


def pace_setter(rows: pd.DataFrame) -> str:
    """Which component set the pace of these runs, by elimination from their front-end check: a
    saturated API server or client first, then a GPU busy >= 90% of the window, then the engine
    core's one thread."""
    if rows["lagged"].any() or rows[BUSIEST_API].max() >= SATURATED_CORE:
        who = "the front end (an API server at a full core or chunks merged)"
    elif rows[CLIENT_CORES].max() >= SATURATED_CORE:
        who = "the client"
    elif rows[GPU_UTIL].min() >= SATURATED_GPU:
        who = "the GPU"
    elif rows[ENGINE_CORES].min() >= SATURATED_CORE:
        who = "the engine core, whose one Python thread schedules, prepares and launches every step"
    else:
        who = "no single component at its limit"
    return (f"{who}: completeness {span_text(rows['completeness'])}, busiest API server "
            f"{span_text(rows[BUSIEST_API], 2)} core, client {span_text(rows[CLIENT_CORES], 2)}, engine core "
            f"{span_text(rows[ENGINE_CORES], 2)}, GPU busy {span_text(rows[GPU_UTIL], 0)}% of the window")


def attainment_ratio_text(att: pd.DataFrame, strategy: str, rate: float, draws: int = 2000) -> str:
    """At one offered rate, a strategy's mean attainment over the default's, which is also the ratio of
    the requests per offered second that meet the SLO, with a 95% bootstrap interval, each side's
    runs resampled on their own."""
    rng = np.random.default_rng(0)
    own, base = (att.loc[(att["strategy"] == s) & (att["rate"] == rate), "attainment"].to_numpy()
                 for s in (strategy, "default"))
    boot = rng.choice(own, (draws, len(own))).mean(axis=1) / rng.choice(base, (draws, len(base))).mean(axis=1)
    return (f"at {rate:g} req/s, {own.mean():.0%} of requests met it against {base.mean():.0%}, "
            f"{own.mean() / base.mean():.2f}x (95% interval {interval_text(boot, 2, 'x')}; {len(own)} / "
            f"{len(base)} runs)" + (": a rate past the default's capacity, where any ratio grows with the "
                                    "rate; the capacity ratio is the fair one" if base.mean() < 0.9 else ""))


def capacity_fact(r: dict[str, Any], caps: pd.DataFrame, att: pd.DataFrame | None = None) -> str:
    """One strategy's capacity against the default's under one SLO pair, with intervals, whether it
    meets ``CAPACITY_BAR``, and, given the runs' attainment ``att``, the attainment ratio at the
    lowest rate both ran."""
    base = caps[(caps["slo"] == r["slo"]) & (caps["workload"] == r["workload"]) & (caps["strategy"] == "default")]
    head = (f"{strategy_label(r['strategy'])}, SLO `{r['slo']}`: capacity {r['text']} req/s (95% interval "
            f"{r['95% interval']}) against the default's {base['text'].iloc[0]} req/s")
    if np.isnan(r["vs default"]):
        head += ": both under their grids, no ratio"
    else:
        met = r["vs default"] >= 1.2 and r["ratio low"] > 1.0  # CAPACITY_BAR
        head += (f": {'at least ' * r['bound']}{r['vs default']:.2f}x (95% interval {r['ratio interval']}"
                 + ("; a lower bound, the default met the SLO at none of its rates, so whether the ratio "
                    f"reaches {CAPACITY_BAR} is open until its grid goes lower)"
                    if r["bound"] and not met else
                    f"), {'meeting' if met else 'short of'} {CAPACITY_BAR}"))
    if att is None:
        return head + "."
    mine = att[(att["slo"] == r["slo"]) & (att["workload"] == r["workload"])]
    shared = sorted(set(mine.loc[mine["strategy"] == r["strategy"], "rate"])
                    & set(mine.loc[mine["strategy"] == "default", "rate"]))
    return head + (f"; {attainment_ratio_text(mine, r['strategy'], shared[0])}." if shared else ".")


def price_fact(rows: pd.DataFrame, caps: pd.DataFrame | None = None) -> str:
    """What the median request gains and the tail pays, over every rate of the sweep, and, given the
    capacities ``caps``, each strategy's TTFT P99 over every run at the rates above its capacity
    under the lab's pair (all rates where it is under its grid), beside the default's at those rates."""
    spans = {s: (span_text(g["TTFT P50 (ms)"], 0), span_text(g["TTFT P99 (ms)"], 0))
             for s, g in rows.groupby("strategy", sort=False)}
    past = []
    lab = pd.DataFrame() if caps is None else caps[(caps["slo"] == SCREEN_SLOS[0]) & (caps["strategy"] != "default")]
    for r in lab.to_dict("records"):
        above = rows[rows["workload"] == r["workload"]]
        above = above[above["rate"].astype(float) > (-np.inf if np.isnan(r["capacity"]) else r["capacity"])]
        own, base = (above.loc[above["strategy"] == s, "TTFT P99 (ms)"] for s in (r["strategy"], "default"))
        if own.empty:
            continue
        rates = sorted(set(above.loc[own.index, "rate"]), key=float)
        past.append(f"at {' and '.join(rates)} req/s, the rates above the SLO capacity of {strategy_label(r['strategy'])} "
                    f"under the lab's pair ({r['text']} req/s), its TTFT P99 is {span_text(own, 0)} ms over every run"
                    + (f" against the default's {span_text(base, 0)} ms" if not base.empty else ""))
    return ("TTFT P50 and P99 over every run of the sweep: "
            + "; ".join(f"{strategy_label(s)} {p50} and {p99} ms" for s, (p50, p99) in spans.items())
            + "".join(f"; {p}" for p in past)
            + ". An order that serves the requests still on time first and the late ones last keeps the median "
              "low, and once the queue outgrows what the SLO allows its late requests wait longest: "
              "read P99 TTFT beside attainment (Pareto figure).")


def gpu_capacity_section(res: Results, sweeps: dict[str, Sweep], sim: pd.DataFrame) -> list[Block]:
    """SLO sweeps measured on the GPU: attainment per rate, capacity per strategy with
    bootstrap intervals, attainment at the lowest rate both ran, which component set the pace,
    and the simulator's prediction for the same load beside it."""
    blocks: list[Block] = []
    for folder, sw in sweeps.items():
        rows, runs, att, caps = sw.rows, res.serving[folder], sw.att, sw.caps
        workloads = sorted(set(rows["workload"]))
        wide = attainment_grid(att, ["slo", "strategy"])
        facts = ([capacity_fact(r, caps, att) for r in caps[caps["strategy"] != "default"].to_dict("records")]
                 + [price_fact(rows, caps)] if not sw.gaps else
                 [f"No capacity with intervals is read from these runs: {'; '.join(sw.gaps)}."])
        point = point_table(rows, ["strategy", "rate"])
        if not sim.empty and not sw.gaps:
            predicted = sim[sim["workload"].isin(workloads) & (sim["slo"] == SCREEN_SLOS[0])
                            & sim["strategy"].isin(set(rows["strategy"]))]
            facts.append("The simulator's screen predicted, for the same load and the lab's pair: "
                         + "; ".join(f"{strategy_label(p['strategy'])} {p['text']} req/s" for p in predicted.to_dict("records"))
                         + ". Section 6b sets the replays of these points beside these runs.")
        blocks += [heading(f"GPU SLO {'sweep' if sw.gaps else 'capacity'}: {', '.join(workloads)} ({folder})", 4),
                   para(f"{len(runs)} runs, {point['runs'].min()}-{point['runs'].max()} per point, "
                        f"{sitting_text(rows['sitting'])}; the same two SLO pairs as the screen below; capacity "
                        "and intervals as there, but each strategy's runs resampled on their own (GPU runs of two "
                        "strategies share no seed). Cells: mean attainment over the runs (their range, %) at "
                        f"each offered rate (req/s). Pace set by {pace_setter(rows)}. "
                        f"{provenance_line([r.meta for r in runs])}."),
                   table(wide), table(shown(point, (BUDGET, "attainment", "goodput (req/s)", *CORES)), place="appendix"),
                   image(res.folder, f"{folder}_attainment_goodput.png", "attainment and goodput vs rate, every run"),
                   image(res.folder, f"{folder}_pareto.png", "P99 TTFT against P99 ITL, one point per strategy and rate"),
                   bullets(facts)]
    if blocks:
        blocks.insert(0, heading("GPU runs: SLO capacity with intervals", 3))
    return blocks


# --- 6b The replay simulator against the H200 -----------------------------------------------
def ranking_fact(rank: pd.DataFrame) -> str:
    """'Ranking against the default: A, the GPU runs separate on 4 of 10 point-metrics ...' per strategy."""
    if rank.empty:
        return "Ranking against the default: no GPU point ran a strategy of ours beside the default."
    parts = []
    for strategy, r in rank.groupby("strategy", sort=False):
        sep = r[r["GPU separated"]]
        parts.append(f"{strategy_label(strategy)}: the GPU runs separate on {len(sep)} of {len(r)} point-metrics "
                     f"and the simulator orders {int(sep['same'].sum())} of those the same way; on the medians "
                     f"of all {len(r)}, {int(r['same'].sum())} agree")
    return "Ranking against the default. " + "; ".join(parts) + "."


def residual_spread_fact(v: pd.DataFrame) -> str:
    """How far the replays of one point spread (step-time residuals only) against how far the GPU
    runs of that point spread: noise in step times alone, or something the replay leaves out."""
    both = v[(v["replays"] > 1) & (v["runs"] >= 3)].assign(sim_x=lambda f: f["sim high"] / f["sim low"],
                                                            gpu_x=lambda f: f["high"] / f["low"])
    per = both.groupby("metric", sort=False)[["sim_x", "gpu_x"]].max()
    text = "; ".join(f"{unit_less(m)} {r['sim_x']:.2f}x against {r['gpu_x']:.2f}x" for m, r in per.iterrows())
    return ("Largest spread of one point (highest / lowest), replays (residual seeds only) against GPU runs (3 or "
            f"more): {text}. Where the GPU's spread is the larger, the step times' noise as fitted does not "
            "explain it: what differs between runs of one seed (host timing, the front end, slow steps) does.")


def throughput_miss_fact(v: pd.DataFrame, folders: list[str]) -> str | None:
    """Throughput error per strategy on the GPU's SLO-capacity sweeps: where the replay is faster
    than the GPU for one strategy only, it misplaces that strategy's knee."""
    tp = v[v["folder"].isin(folders) & (v["metric"] == THROUGHPUT)]
    if tp.empty:
        return None
    errs = "; ".join(f"{strategy_label(s)} {g['error'].min():+.0%} to {g['error'].max():+.0%}"
                     for s, g in tp.groupby("strategy", sort=False))
    return (f"On the SLO-capacity sweeps ({', '.join(folders)}) the replay's throughput error is {errs}. "
            "Where it over-predicts one strategy's pace, the replay places that strategy's capacity too high: "
            "the screen's capacities are a plan, the GPU's the result. The step logs of our strategies "
            "from these runs are predicted within the held-out errors above; vLLM's default logs no steps, "
            "so its steps on this load are the part not checked (a run of `kv-recorder`, the default policy "
            "with the recorder, would check them).")


def step_log_predictions(folder: Path, sm: dict[str, Any]) -> Iterator[tuple[str, np.ndarray, np.ndarray, np.ndarray]]:
    """(log name, regressors, measured seconds, predicted seconds) for every step log in the
    results folder, each step against the model ``sm`` at its output lag."""
    for log in sorted((folder / "steplogs").glob("*.csv*")):
        x, y = step_model.aligned(step_model.read_step_log(log), sm["output_lag_steps"])
        yield log.name, x, y, x @ np.array([sm["coefficients"].get(t, 0.0) for t in step_model.TERMS])


def held_out_step_error(folder: Path, sm: dict[str, Any]) -> str:
    """Predicted / measured total time per regime in every step log beside the fit's (held out)."""
    fitted, out = {Path(e["path"]).name for e in sm["provenance"]["logs"]}, []
    for name, x, y, pred in step_log_predictions(folder, sm):
        if name not in fitted:
            out += [f"{name} {label} {pred[m].sum() / y[m].sum() - 1:+.1%}"
                    for label, m in (("decode-only", x[:, 4] == 0), ("with prompt tokens", x[:, 4] > 0))]
    return "; ".join(out) or "none"


def graph_boundary_text(folder: Path, sm: dict[str, Any]) -> str:
    """Predicted / measured total time, in every step log, of the steps with prompt tokens that fit
    the model's largest CUDA graph and of those above it: one fixed extra per such step fits only
    one kind."""
    out = []
    for name, x, y, pred in step_log_predictions(folder, sm):
        within = step_model.in_graph(x[:, 1], x[:, 2], sm.get("graph_tokens", step_model.GRAPH_TOKENS))
        above = (x[:, 4] > 0) & ~within
        if within.any() and above.any():
            out.append(f"{name}: {pred[within].sum() / y[within].sum():.2f}x for {int(within.sum())} steps "
                       f"within, {pred[above].sum() / y[above].sum():.2f}x for {int(above.sum())} above")
    return "; ".join(out)


def budget_replay_fact(res: Results) -> str | None:
    """The step model, fitted at budget 2048, replayed at Task 2's budgets (the default, rate inf)
    against every GPU run of the budget sweep: throughput only, which a merged chunk does not
    change (section 4), so lagged runs count."""
    if BUDGET_REPLAYS not in res.serving or BUDGET_SWEEP not in res.serving:
        return None
    sim = res.folder_rows(BUDGET_REPLAYS).groupby(BUDGET)[THROUGHPUT].median()
    gpu = res.folder_rows(BUDGET_SWEEP).groupby(BUDGET)[THROUGHPUT].median()
    both = sorted(set(sim.index) & set(gpu.index))
    if len(both) < 2:
        return None
    errors = {b: sim[b] / gpu[b] - 1 for b in both}
    fit = res.serving[BUDGET_REPLAYS][0].sim["step_model"]
    coef, boundary = fit["coefficients"], graph_boundary_text(res.folder, fit)
    graph = fit.get("graph_tokens", step_model.GRAPH_TOKENS)
    worst = max(errors, key=lambda b: abs(errors[b]))
    order = {name: " < ".join(str(b) for b in series[both].sort_values().index) for name, series in
             (("sim", sim), ("gpu", gpu))}
    return (f"Budgets held out (the fit saw budget 2048 only): the default at rate inf, replayed at budgets "
            f"{', '.join(map(str, both))} (`results/{BUDGET_REPLAYS}/`) against the median of every GPU run of "
            f"`{BUDGET_SWEEP}`: throughput " + "; ".join(f"{b} {errors[b]:+.0%}" for b in both)
            + f". The simulator orders them {order['sim']}, the GPU {order['gpu']}"
            + (" (the same)" if order["sim"] == order["gpu"] else "")
            + f". The largest miss is at {worst}. "
            + (f"The step model's extra for a step with prompt tokens is {1e3 * coef['has_prefill']:+.1f} ms, and "
               f"corrected by {1e3 * coef['prefill_in_graph']:+.1f} ms where its tokens fit the {graph}-token CUDA graphs "
               "(section 4's candidate cause), both fitted at budget 2048"
               if "prefill_in_graph" in coef else
               "The step model has no term for a step with prompt tokens that fits the "
               f"{graph}-token CUDA graphs (section 4's candidate cause)")
            + (f"; predicted / measured time of the steps with prompt tokens within and above {graph} tokens, "
               f"per step log: {boundary}." if boundary else "."))


def replay_section(res: Results) -> list[Block]:
    blocks = [heading("6b The replay simulator against the H200")]
    v = replay_validation(res)
    if v.empty:
        return blocks + [para("No replay results (`results/replay_*/`): see README, \"Simulating a strategy\".",
                              place="both")]
    runs = res.serving[next(f for f in res.folders("replay") if f not in (SCREEN, BUDGET_REPLAYS))]
    sm, cpu = runs[0].sim["step_model"], pd.Series([r.sim["simulation"]["cpu_s"] for r in runs])
    coef = ", ".join(f"{k} {val:.3g}" for k, val in sm["coefficients"].items())
    logs = ", ".join(Path(entry["path"]).name for entry in sm["provenance"]["logs"])
    cell = v.assign(text=[f"{sim:.0f} / {real:.0f} ({err:+.0%})" + (" *" if n >= 2 and not lo <= sim <= hi else "")
                          for sim, real, err, n, lo, hi in zip(*(v[c] for c in
                                                                 ("sim", "real", "error", "runs", "low", "high")))])
    wide = cell.pivot_table(index=["folder", "strategy", "workload", "rate", "runs"], columns="metric",
                            values="text", aggfunc="first", sort=False)[list(REPLAY_METRICS)].reset_index()
    wide["strategy"] = wide["strategy"].map(strategy_label)
    rank = replay_ranking(v)
    spread = v[v["runs"] >= 3].assign(x=lambda f: f["high"] / f["low"]).groupby("metric")["x"].max()
    a_ttft = v[(v["strategy"] == "prefill-first") & v["metric"].str.startswith("TTFT")].set_index("workload")["error"]
    itl = v[(v["metric"] == "ITL P50 (ms)") & v["folder"].str.startswith("task3") & (v["rate"] == "39")]  # stress
    goal = v.groupby(v["metric"].str.extract(r"(P50|P99|Throughput)")[0])["within goal"].agg(["sum", "size"])
    facts = [
        f"Step model: {sm['formula']}, fitted to {sm['num_steps']} steps of {logs} only (SJF; "
        f"the default and Strategy A held out): {coef} (seconds); R^2 {sm['r2']:.3f}, median relative "
        f"error {sm['median_relative_error']:.1%}; a step's output is applied after the next step "
        f"(lag {sm['output_lag_steps']}); per-step residuals drawn from the fit's (seed 42). Predicted / "
        f"measured total step time in the logs not fitted: {held_out_step_error(res.folder, sm)}.",
        "Within the simulator's goals (P50 10%, P99 20%, throughput 5%): "
        + "; ".join(f"{k} {int(r['sum'])} of {int(r['size'])}" for k, r in goal.iterrows())
        + f". The simulated value lies inside the GPU runs' range in {int(v['in range'].sum())} of "
          f"{int(v['in range'].notna().sum())} cells with 2 or more runs.",
        ranking_fact(rank),
        "Misses, and why: near saturation (39 req/s, 256-sequence cap reached) TTFT is a queue that a few "
        "percent of step time changes several-fold; the GPU's own runs of one seed spread up to "
        f"{spread['TTFT P50 (ms)']:.1f}x in TTFT P50 and {spread['TTFT P99 (ms)']:.1f}x in P99, and one replay "
        f"can sit anywhere in or beyond that. A's TTFT error (P50 and P99): "
        + "; ".join(f"{w} {e.min():+.0%} to {e.max():+.0%}" for w, e in a_ttft.groupby(level=0))
        + ": where it is over-predicted, slightly slower decode-only steps than in A's log (the held-out "
        "step error above) lengthen A's prefill queue. ITL P50 lies between two modes (decode-only steps ~10 ms, steps with prompt "
        f"tokens ~30 ms): GPU runs read {itl['low'].min():.0f}-{itl['high'].max():.0f} ms at 39 req/s, the "
        "replay the upper mode for the default. Not modelled: API servers and client, slow steps in runs, "
        "prefix caching. SJF on the fixed load is the default's policy (equal prompts), so its replay is the default's.",
        f"Speed: {cpu.min():.1f}-{cpu.max():.1f} s of CPU per 1000-request replay (median "
        f"{cpu.median():.1f} s; one process per core, vLLM's import not counted).",
    ]
    if held_out := budget_replay_fact(res):
        facts.insert(-1, held_out)
    if (v["replays"] > 1).any():
        facts.insert(-1, residual_spread_fact(v))
    if missed := throughput_miss_fact(v, capacity_folders(res)):
        facts.insert(-1, missed)
    return blocks + [
        para(f"Each point replayed {span_text(v['replays'], 0)} times by `harness/sched_sim.py replay` (the real "
             "scheduler class, vLLM bench's arrivals and lengths for seed 42, 1000 prompts; the replays differ "
             "only in the step-time residuals drawn) against the GPU runs of the same load. Cells: median of "
             "the replays / GPU median (relative error); * where the replays' median lies outside the GPU "
             "runs' range."),
        table(wide), bullets(facts)]


# --- 7 Summary, assembly and rendering ------------------------------------------------------
def summary_section(res: Results, sweeps: dict[str, Sweep]) -> list[Block]:
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
        if task == "task3" and (found := separations(rows)):
            items.append("Task 3, runs that kept up: where every run of a strategy lies beyond every run of "
                         f"the default (strategy / default, medians): {'; '.join(found)}; nothing else separated.")
    for folder, sw in sweeps.items():
        caps = sw.caps[sw.caps["slo"] == SCREEN_SLOS[0]]
        items += [f"SLO capacity on the GPU ({folder}, lab's pair): " + capacity_fact(r, caps)
                  for r in caps[caps["strategy"] != "default"].to_dict("records")]
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
        verdicts = [f"{c.removesuffix(' (ms)')} {words[trend_verdict(below_pairs(part, c, BUDGET), THEORY[c.split()[0]])]}"
                    for c in ("TTFT P99 (ms)", "ITL P99 (ms)")]
        mine, others = part[part[BUDGET] == chat], part[part[BUDGET] != chat]
        lines.append(f"Task 2 at {load_label(rate)} ({name}, {int(med['runs'].min())} runs per budget, every run kept "
                     f"up): against the theory (a larger budget lowers TTFT and raises ITL), {' and '.join(verdicts)}; "
                     f"for chat, budget {chat}: ITL P99 {span_text(mine['ITL P99 (ms)'], 1)} ms against "
                     f"{span_text(others['ITL P99 (ms)'], 1)} ms at the other budgets, TTFT P99 "
                     f"{span_text(mine['TTFT P99 (ms)'], 1)} ms against {span_text(others['TTFT P99 (ms)'], 1)} "
                     f"(section 4).")
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


def build_report(res: Results) -> list[Block]:
    intro = para("Generated by `plot_results.py` from the JSON files in this folder (`.venv/bin/python plot_results.py "
                 "--pdf` regenerates it); every number below is read from, or computed from, a results file. "
                 "This is the analysis: every point's values are in its appendix, `tables.md` (under the same "
                 "headings), and every run's in `<folder>_runs.csv`.")
    sweeps = slo_sweeps(res)
    return ([heading("Lab 3 report: prefill/decode scheduling in vLLM", 1), intro]
            + environment_section(res) + task1_section(res) + frontend_section(res)
            + task2_section(res) + task3_section(res) + slo_section(res, sweeps, screen_tables(res))
            + replay_section(res) + summary_section(res, sweeps))


def newest_date(res: Results) -> datetime | None:
    """The latest ``date_utc`` of any result: the PDF's creation date."""
    metas = [m.get("meta") or {} for m in (res.task1 or {}).get("methods", {}).values()]
    metas += [r.meta for runs in res.serving.values() for r in runs if not r.simulated]
    dates = [datetime.fromisoformat(m["date_utc"]) for m in metas if m.get("date_utc")]
    return max(dates) if dates else None


def write_report(res: Results, pdf: bool = False) -> list[Path]:
    """Write ``tables.md`` (the appendix: every table under its headings), ``REPORT.md`` (the
    analysis) and, with ``pdf``, ``report.pdf`` (the same as ``REPORT.md``) into the results folder."""
    blocks = build_report(res)
    title = heading("Lab 3 tables: every point's values (the appendix of REPORT.md)", 1)
    tables, report = [title] + appendix_blocks(blocks[1:]), report_blocks(blocks)
    written = [res.folder / "tables.md", res.folder / "REPORT.md"]
    written[0].write_text(render_markdown(tables))
    written[1].write_text(render_markdown(report))
    if pdf:
        written.append(res.folder / "report.pdf")
        render_pdf(report, res.folder, written[-1], created=newest_date(res))
    return written
