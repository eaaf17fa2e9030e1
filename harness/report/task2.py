"""Section 4 of the report, Task 2: the ``max_num_batched_tokens`` sweep. The handout's questions (how
TTFT and ITL move with the budget, which budget saturates throughput, which suits chat) answered
per setting and load, with the run-to-run spread beside each answer; rate-inf throughput and what
set its pace; the handout's own runs, the runtime budget against the flag, and slow requests.
"""

from __future__ import annotations

import shlex
from typing import Any

import pandas as pd

from harness.document import Block, bullets, heading, image, para, table
from harness.results import (BUDGET, BUSIEST_API, CLIENT_CORES, ENGINE_CORES, GPU_UTIL, METRICS, PREFILL_CHUNK,
                             THROUGHPUT, Results, Run, gpu_text, load_label, provenance_line, shown,
                             sitting_text, sort_key, span_text, task2_table)
from harness.rules import (CHAT_ITL_TOLERANCE, MIN_RUNS_TO_SEPARATE, SATURATED_CORE, SATURATED_GPU,
                           SATURATION_TOLERANCE, SLOW_REQUEST_S, below_pairs, capacity_runs, chat_budget, kept_up,
                           saturation_budget, separated, slow_requests, spearman, spread_pct, theory_pairs,
                           trend_verdict)
from harness.run_config import cli_flags
from harness.report.text import lag_sentence, no_results, tok_s


HANDOUT_BUDGETS = (512, 1024, 2048, 4096, 8192)  # the handout's Task 2 grid
HANDOUT_RUNS = 2  # the handout's runs per point (median of 2)


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
                  slow: pd.DataFrame | None = None, slow_note: str = "", handout: str | None = None) -> list[str]:
    """The handout's three questions, answered per setting and load with the run-to-run spread
    beside each answer: latency from the runs whose front end kept up only, rate-inf throughput
    from every run where ``capacity_runs`` allows, with the handout's runs of the same budgets
    (the folder ``handout``) beside it; and, given ``slow`` (``slow_request_rows``), the requests slower than
    ``SLOW_REQUEST_S`` end to end."""
    capacity = []
    for (name, rate), part in rows.groupby(["setting", "rate"], sort=False):
        if rate == "inf" and (answer := capacity_answer(name, part, steps)):
            capacity += [answer, *filter(None, [handout and part[BUDGET].nunique() >= 3
                                                and handout_order_fact(part, rows, handout)])]
    if anchored := anchored_capacity_fact(rows, handout):
        capacity.append(anchored)
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
    if contrast := load_contrast_fact(rows):
        facts.append(contrast)
    facts += flag_check_facts(rows)
    if rows["lagged"].any():
        facts.append(lag_sentence(rows, "the Task 2 runs that lagged")
                     + " The handout's questions (how TTFT and ITL move with the budget, which budget "
                       "suits chat) are answered only for settings whose runs kept up"
                     + ("." if facts else "; there are none yet.")
                     + (" Throughput at rate inf, which a merged chunk does not change, is answered "
                        "above from every run where no API server had a full core." if capacity else ""))
    return capacity + facts


ANCHOR_BUDGET = 2048  # the budget every rate-inf study runs beside the others, on its own machine


def anchored_capacity_fact(rows: pd.DataFrame, handout: str | None) -> str | None:
    """Rate-inf throughput of every budget as a multiple of the anchor budget's median measured on
    the same machine (one boot, the same number of API servers; one study, or studies run one
    after the other there): machines differ by up to 2x, so machines join only through such
    ratios. None unless two or more machines (not the handout's runs) together cover more budgets
    than any one of them."""
    inf = rows[(rows["rate"] == "inf") & (rows["clients"] == 1) & (rows["folder"] != handout)]
    machines = [part for _, part in inf.groupby(["sitting", "api servers"], sort=False)
                if ANCHOR_BUDGET in set(part[BUDGET]) and part[BUDGET].nunique() >= 2]
    covered = {b for part in machines for b in part[BUDGET]}
    if len(machines) < 2 or max(part[BUDGET].nunique() for part in machines) >= len(covered):
        return None
    texts, by_budget = [], {}
    for part in machines:
        medians = part.groupby(BUDGET)[THROUGHPUT].median()
        ratios = (medians / medians[ANCHOR_BUDGET]).drop(ANCHOR_BUDGET)
        for budget, value in ratios.items():
            by_budget.setdefault(budget, []).append(value)
        folders = list(dict.fromkeys(part["folder"]))
        where = folders[0] if len(folders) == 1 else f"{' + '.join(folders)}: {len(folders)} studies one after the other"
        texts.append(f"{', '.join(f'{b} {r:.2f}x' for b, r in ratios.items())} ({where}, {gpu_text(part['gpu'])}, "
                     f"{ANCHOR_BUDGET} at {medians[ANCHOR_BUDGET]:.0f} tok/s there)")
    def side(r: list[float]) -> str:
        return "below" if max(r) < 1 else "above" if min(r) > 1 else "on either side of"

    repeated = [f"{b} {min(r):.2f}x-{max(r):.2f}x on {len(r)} machines ({side(r)} {ANCHOR_BUDGET} on each)"
                for b, r in sorted(by_budget.items()) if len(r) > 1]
    return (f"Every budget against {ANCHOR_BUDGET} measured beside it on the same machine (median throughput "
            f"at rate inf, one client; machines differ, so studies on different machines join only through "
            f"this ratio): {'; '.join(texts)}."
            + (f" A budget measured on more than one machine: {'; '.join(repeated)}. The ratio, too, moves "
               "between machines: a budget's side of 2048 repeats where it is the same on each machine, its "
               "size is a finding of its machine." if repeated else ""))


def load_contrast_fact(rows: pd.DataFrame) -> str | None:
    """How the budget's trade-off changes with the load: each paced study whose runs kept up,
    its budgets' median TTFT P99 and ITL P99 as multiples of budget 2048's in the same study
    (same machine, same sitting), lightest load first. Ratios, because the studies ran on
    different machines. A budget with fewer runs that kept up than the handout asks is left out.
    None unless two such studies at different rates hold 2048 and 3 budgets."""
    paced = kept_up(rows[rows["rate"] != "inf"])
    studies = []
    for (folder, rate), part in paced.groupby(["folder", "rate"], sort=False):
        part = part[part.groupby(BUDGET)[BUDGET].transform("size") >= HANDOUT_RUNS]  # as task2_answers
        if ANCHOR_BUDGET in set(part[BUDGET]) and part[BUDGET].nunique() >= 3:
            studies.append((float(rate), folder, part.groupby(BUDGET)[["TTFT P99 (ms)", "ITL P99 (ms)"]].median()))
    if len({rate for rate, _, _ in studies}) < 2:
        return None
    texts = []
    for rate, folder, med in sorted(studies, key=lambda s: s[0]):
        anchor = med.loc[ANCHOR_BUDGET]
        ratio = lambda col: ", ".join(f"{b} {med.loc[b, col] / anchor[col]:.2f}x"  # noqa: E731
                                      for b in med.index if b != ANCHOR_BUDGET)
        texts.append(f"at {rate:g} req/s ({folder}; {gpu_text(paced.loc[paced['folder'] == folder, 'gpu'])}): "
                     f"TTFT P99 {ratio('TTFT P99 (ms)')}; ITL P99 {ratio('ITL P99 (ms)')}")
    return (f"The same trade-off as the load rises, each budget's median against budget {ANCHOR_BUDGET}'s in the "
            f"same study (runs that kept up; 1.00x: no different from {ANCHOR_BUDGET}): " + "; ".join(texts)
            + ". The studies ran on different machines, so only these ratios, not the milliseconds, compare "
              "across them.")


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
    separating = {}  # each metric's pairs of budgets whose runs separate
    for column in METRICS:
        metric = column.split()[0]
        pairs = separating[column] = below_pairs(part, column, BUDGET)
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
    separated = bool(separating["ITL P99 (ms)"] or separating["TTFT P99 (ms)"])
    facts.append(f"For chat (rule: ITL P99 within {CHAT_ITL_TOLERANCE:.0%} of the best budget's median, then the "
                 f"lowest TTFT P99): {chat}. Its runs: ITL P99 "
                 f"{span_text(part.loc[part[BUDGET] == chat, 'ITL P99 (ms)'], 1)} ms, TTFT P99 "
                 f"{span_text(part.loc[part[BUDGET] == chat, 'TTFT P99 (ms)'], 1)} ms"
                 + ("." if separated else "; no budget's runs separate from another's in either P99, so the rule "
                    "picks by medians that these runs do not tell apart: at this rate any of these budgets serves chat "
                    "as well as the runs can show."))
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


def handout_order_fact(part: pd.DataFrame, rows: pd.DataFrame, handout_folder: str) -> str | None:
    """The handout's rate-inf runs (the folder ``handout_folder``) at the budgets a capacity sweep ``part``
    shares with them: their order by median, and whether the sweep's slowest budget is the
    slowest there too, every run below the others' (``separated`` needs 3 runs a side, too many
    here, so plainly: its highest run below their lowest)."""
    handout = rows[(rows["folder"] == handout_folder) & (rows["rate"] == "inf")]
    here = part.groupby(BUDGET)[THROUGHPUT].median()
    handout = handout[handout[BUDGET].isin(here.index)]
    if (part["folder"] == handout_folder).any() or handout[BUDGET].nunique() < 2:
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
    return (f"The handout's runs ({handout_folder}: {api} API server{'s' * (api > 1)}, rate inf) order the same "
            f"budgets {' < '.join(map(str, order))} by median "
            f"({'; '.join(f'{b}: {span_text(runs[b], 0)}' for b in sorted(runs))} tok/s): {verdict}."
            + (f" They are not read as the engine's pace ({'; '.join(why)}), so they neither confirm nor "
               "contradict the sweep's order." if why else ""))


def slow_request_rows(runs: list[Run], limit_s: float = SLOW_REQUEST_S) -> pd.DataFrame:
    """Per run: its setting, load and budget, how many requests it sent, and how many of them
    succeeded slower than ``limit_s`` end to end (``slow_requests``)."""
    return pd.DataFrame([{"setting": r.setting, "rate": r.config.rate_label, "run": r.config.run,
                          BUDGET: r.config.budget_in_force,
                          "requests": len(r.detail.ttfts), "slow": slow_requests(r, limit_s)} for r in runs])


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
    other_flags = shlex.join(cli_flags({k: v for k, v in cfg.server_params.items() if k != "max_num_batched_tokens"}))
    blocks.append(para(f"Workload {cfg.workload}, bench flags `{shlex.join(cli_flags(cfg.bench_params))}`, "
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
                     bullets(task2_answers(rows, res.budget_steps, slow_request_rows(res.runs("task2")), slow_note(res),
                                           res.one_with_role("handout-setting", "task2")))]


def slow_note(res: Results) -> str:
    """Where ``SLOW_REQUEST_S`` comes from, where the results show it: Task 3's timeout."""
    limits = {r.config.timeout_s for r in res.runs("task3")}
    return "; the timeout of Task 3's runs" if limits == {SLOW_REQUEST_S} else ""
