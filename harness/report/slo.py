"""Section 6 of the report, beyond the handout: SLO attainment, goodput and capacity. First the SLO
sweeps measured on the GPU (capacity per strategy with bootstrap intervals, the pace setter, what
the median gains and the tail pays), then the simulated screen, a plan for GPU runs and not a
result. ``sweep_folders`` names the folders read this way, which ``plot_results.py`` draws as
attainment and Pareto figures instead of point by point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pandas as pd

from harness.document import Block, bullets, heading, image, para, table
from harness.results import (BUDGET, BUSIEST_API, CLIENT_CORES, COMPLETED, CORES, ENGINE_CORES, GPU_UTIL,
                             EMITTED_OUTPUT, OFFERED_OUTPUT, PACE, STEP_MS, THIRDS, Results, point_table, provenance_line, shown,
                             sitting_text, span_text, strategy_label)
from harness.rules import (MIN_RUNS_TO_SEPARATE, OVERLOAD_SHORTFALL, SATURATED_CORE, SATURATED_GPU, SCREEN_MODEL,
                           SCREEN_SLOS, CAPACITY_ATTAINMENT, STEADY_DRIFT, STEADY_MIN_ARRIVAL_S, attainment_rows,
                           capacity_table, interval_text, is_sweep, overloaded, steady_trend, third_change)
from harness.report.text import lag_sentence, no_results
from harness.study_file import Study


CAPACITY_FACTOR = 1.2  # the goal: this many times the default's SLO capacity, its interval above 1.0
CAPACITY_BAR = f"the {CAPACITY_FACTOR:g}x bar ({CAPACITY_FACTOR:g}x the default's SLO capacity, 95% interval above 1.0)"


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
    blocks += anchor_section(res) + gpu_capacity_section(res, sweeps, screen[1])
    if not sweeps:
        blocks.append(no_results("SLO-sweep", "slo/", "bash slo_study.sh"))
    return blocks + screen_section(res, *screen) + wait_bound_screen_section(res)


def anchor_folders(res: Results) -> list[str]:
    """The calibration folders that measure a capacity on the heavy-tailed load: every run at rate
    inf on a custom dataset (the sweeps' anchors, and an anchor before its sweep has run)."""
    return [name for name in res.folders("calibration")
            if all(r.config.rate is None and r.config.custom_dataset for r in res.serving[name])]


def anchor_rows(res: Results) -> pd.DataFrame:
    """One row per capacity on the heavy-tailed load (``anchor_folders``): what each model served on
    each machine, in output tokens and in requests at the load's mean output length, with the step
    and inter-token times, and the engine core's and the GPU's busy shares, which say which of the
    two set the pace."""
    from harness.workloads import HEAVY

    rows = []
    for name in anchor_folders(res):
        runs, frame = res.serving[name], res.folder_rows(name)
        rows.append({"folder": name, "model": " / ".join(dict.fromkeys(frame["model"].dropna())),
                     "GPU": " / ".join(dict.fromkeys(frame["gpu"].dropna())), "runs": len(runs),
                     "output (tok/s)": span_text(frame["Throughput (tok/s)"], 0),
                     "req/s at the mean output": span_text(frame["Throughput (tok/s)"] / HEAVY.mean_output_len(), 1),
                     "ITL P50 (ms)": span_text(frame["ITL P50 (ms)"], 1), STEP_MS: span_text(frame[STEP_MS], 1),
                     ENGINE_CORES: span_text(frame[ENGINE_CORES], 2), GPU_UTIL: span_text(frame[GPU_UTIL], 0),
                     "pace set by": pace_owner(frame)})
    return pd.DataFrame(rows)


def anchor_section(res: Results) -> list[Block]:
    """Each machine's rate-inf capacity on the heavy-tailed load, the anchor of its SLO sweep's
    rates (``anchor_rows``), with the settings every one of them shared."""
    from harness.workloads import HEAVY

    rows = anchor_rows(res)
    if rows.empty:
        return []
    every = pd.concat([res.folder_rows(name) for name in rows["folder"]], ignore_index=True)
    policies = " / ".join(strategy_label(s) for s in dict.fromkeys(every["strategy"]))
    return [heading("GPU runs: each machine's capacity on the heavy-tailed load", 3),
            para(f"Every request sent at once (rate inf), budget {span_text(every[BUDGET], 0)}, "
                 f"{span_text(every['api servers'], 0)} API servers, {span_text(every['prompts'], 0)} prompts a run, "
                 f"each run its own draw; {policies}. A sweep's rates are shares of its machine's figure, in requests "
                 f"at the load's mean output length ({HEAVY.mean_output_len():.1f} tokens): a burst sent at once "
                 "reads less than the engine sustains on a paced load (the sweeps below), so the figure anchors "
                 "a grid and is not a ceiling. Machines of one kind differ, so each sweep takes its own."),
            table(rows)]


def anchor_summary(res: Results) -> str | None:
    """The summary's line on the capacities: each model's requests a second on the heavy-tailed load
    and what set the pace, per folder; None without one."""
    rows = anchor_rows(res)
    if rows.empty:
        return None
    return ("Capacity on the heavy-tailed load at rate inf (section 6): "
            + "; ".join(f"{r['model']} {r['req/s at the mean output']} req/s on {r['GPU']} ({r['folder']}, pace set by "
                        f"{r['pace set by']}, GPU busy {r[GPU_UTIL]}%)" for r in rows.to_dict("records")) + ".")


def attainment_grid(att: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Mean attainment per ``keys`` (strategy among them) and rate, one column per rate, the runs'
    range (%) beside each mean."""
    wide = att.groupby([*keys, "rate"], sort=False)["attainment"].agg(
        lambda a: f"{a.mean():.0%} ({span_text(a * 100, 0)})").unstack("rate").fillna("").reset_index()
    return wide.assign(strategy=wide["strategy"].map(strategy_label))


def screen_tables(res: Results, draws: int = 2000) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The screen's attainment per replay and SLO pair, and its capacities (``capacity_table``,
    paired by residual seed)."""
    screen = res.one_with_role("screen")  # simulated replays of the SLO-capacity grid: a plan, not a result
    att = attainment_rows(res.serving[screen] if screen else [])
    return (att, att) if att.empty else (att, capacity_table(att, draws, paired=True))


BOUND_SIGN = {"": "", "at least": ">=", "at most": "<="}


def ratio_cell(value: float, bound: str) -> str:
    """A capacity ratio in a table cell: '>=' for a lower bound, '<=' for an upper one."""
    return "n/a" if np.isnan(value) else f"{BOUND_SIGN[bound]}{value:.2f}x"


def screen_section(res: Results, att: pd.DataFrame, caps: pd.DataFrame) -> list[Block]:
    if caps.empty:
        return []
    wide = attainment_grid(att, ["slo", "workload", "strategy"])
    shown_caps = caps.assign(strategy=caps["strategy"].map(strategy_label), capacity=caps["text"],
                             **{"vs default": [ratio_cell(v, b) for v, b in zip(caps["vs default"], caps["bound"])]}
                             ).drop(columns=["text", "ratio low", "bound", "grid"])
    fixed = caps[caps["workload"] == "fixed"].set_index(["slo", "strategy"])
    ours = caps[caps["strategy"] != "default"]
    best = ours.groupby("strategy")["vs default"].max()
    gaining = ours[(ours["vs default"] >= 1.05) & (ours["bound"] != "at most")]
    gain = "; ".join(f"{strategy_label(s)} at {len(g)} of {len(ours[ours['strategy'] == s])} pairs and loads"
                     for s, g in gaining.groupby("strategy", sort=False))
    capped = ours[ours["grid"] == "over"]  # met at the grid's top rate: a lower bound
    bound = ("" if capped.empty else " Where a capacity reads '>=', every grid rate met the SLO: the ratio is a lower "
             f"bound, and the grid must reach higher rates before a strategy is ruled out of {CAPACITY_FACTOR:g}x.")
    top = ours.loc[ours["vs default"].idxmax()]
    reached = ours[(ours["vs default"] >= CAPACITY_FACTOR) & (ours["ratio low"] > 1.0)]  # CAPACITY_BAR
    names = sorted(set(map(strategy_label, reached["strategy"])))
    verdict = (f"In the simulator {' and '.join(names)} reach{'es' * (len(names) == 1)} "
               f"{CAPACITY_FACTOR:g}x the default's SLO capacity with an interval above 1.0: candidates, to be "
               "confirmed on the GPU" if not reached.empty else
               f"No strategy {'is shown to reach' if bound else 'reaches'} {CAPACITY_FACTOR:g}x the default's SLO "
               "capacity in the simulator")
    verdict += (f" (best: {strategy_label(top['strategy'])} {ratio_cell(top['vs default'], top['bound'])}"
                f", 95% interval {top['ratio interval']}, {top['workload']}, {top['slo']}).")
    vec = att.pivot_table(index=["workload", "slo", "rate", "run"], columns="strategy", values="attainment")
    same = [f"{strategy_label(a)} = {strategy_label(b)} ({w})" for w, g in vec.groupby(level=0)
            for g in [g.dropna(axis=1, how="all")]  # only the strategies replayed on this load
            for i, a in enumerate(g.columns) for b in g.columns[i + 1:] if g[a].equals(g[b])]
    screen = res.one_with_role("screen")  # not None: its replays gave ``caps``
    runs = res.serving[screen]
    return [heading("Simulated screen: where scheduling may pay -- a plan for GPU runs, not a result", 3),
            para(f"Each point replayed {att['run'].max()} times by `harness/sched_sim.py replay` (the H200 step "
                 f"model of section 6b; one workload seed, {runs[0].config.seed}; residual seeds 1-"
                 f"{att['run'].max()}), {len(runs)} replays in `results/{screen}/`. SLO capacity: the rate where "
                 "the replays' mean attainment first falls below 90% as the rate rises, linear between the grid "
                 "rates around it ('>=' or '<': outside the grid); intervals: 95% percentile bootstrap, the "
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
                     "Known error (section 6b gives it point by point): throughput off by more than 5% at some "
                     "points, TTFT near saturation more, and the GPU's own runs of one load spread several-fold; "
                     "API servers and client are not modelled. The intervals here cover only the replays' step-time residuals, not that error: "
                     "a capacity may move by a few req/s on the GPU, and only GPU runs (>= 3 per point) give "
                     "confidence intervals for it."])]


def wait_bound_rows(res: Results, folder: str) -> pd.DataFrame:
    """Per replay of the wait-bound screen: strategy, its wait bound (None: the default; 0: F without
    one), rate, attainment under the lab's pair, the completed request rate, and the longest tenth
    of prompts' attainment and first-token waits."""
    rows = []
    for run in res.serving[folder]:
        attained, cfg = run.attainment(SCREEN_SLOS[0]), run.config
        longest = attained.get("longest_decile") or {}
        bound = cfg.strategy_settings.get("wait_bound_s")
        rows.append({"strategy": cfg.strategy_variant, "bound": bound,
                     "label": strategy_label(cfg.scheduler) + (f", W = {bound:g} s" if bound else ""),
                     "rate": cfg.rate, "run": cfg.run, "attainment": attained["attainment"],
                     "token attainment": attained.get("token_attainment"),
                     "completed": run.completed_req_s, "pace": run.output_pace,
                     "trend": steady_trend(attained.get("by_third")),
                     "third change": np.nan if (change := third_change(attained.get("by_third"))) is None else change,
                     "longest tenth": longest.get("attainment"),
                     "longest P99 (s)": (longest.get("ttft_p99_ms") or np.nan) / 1000,
                     "longest max (s)": (longest.get("ttft_max_ms") or np.nan) / 1000})
    frame = pd.DataFrame(rows)
    return frame.sort_values(["bound", "rate", "run"], na_position="first", kind="stable")


def wait_bound_screen_section(res: Results) -> list[Block]:
    """F with and without a bound on any request's wait, against the default, replayed in steady
    state: what the bound gives the longest prompts and costs in attainment. A plan for GPU runs."""
    folder = res.one_with_role("wait-bound-screen")
    if folder is None:
        return []
    rows = wait_bound_rows(res, folder)
    per = rows.groupby(["label", "rate"], sort=False).agg(
        bound=("bound", "first"), attainment=("attainment", lambda a: f"{a.mean():.0%} ({span_text(a * 100, 0)})"),
        tokens=("token attainment", "mean"), completed=("completed", "mean"), pace=("pace", "median"),
        longest=("longest tenth", "mean"),
        p99=("longest P99 (s)", "max"), worst=("longest max (s)", "max"), runs=("run", "count"),
        change=("third change", points_span), trends=("trend", trend_count)).reset_index()
    per["overload"] = per["pace"].map(overloaded)
    shown_rows = pd.DataFrame({
        "strategy": per["label"], "offered (req/s)": per["rate"].map("{:g}".format),
        "completed (req/s)": per["completed"].map("{:.1f}".format),
        "output pace": per["pace"].map("{:.3f}".format) + np.where(per["overload"], " (overload)", ""),
        "attainment (range, %)": per["attainment"],
        "last third - middle (points)": per["change"] + " " + per["trends"],
        "token attainment": per["tokens"].map("{:.0%}".format),
        "longest tenth: attainment": per["longest"].map("{:.0%}".format),
        "longest tenth: TTFT P99 (s)": per["p99"].map("{:.1f}".format),
        "longest tenth: TTFT max (s)": per["worst"].map("{:.1f}".format), "runs": per["runs"]})
    if rows["trend"].isna().all():  # replays written before the thirds were stored
        shown_rows = shown_rows.drop(columns="last third - middle (points)")
    over = sorted(set(per.loc[per["overload"], "rate"]))
    default = per[per["bound"].isna()].set_index("rate")
    unbounded, bounded = per[per["bound"] == 0], per[per["bound"] > 0]

    def waits(rate: float) -> str:
        at = bounded[bounded["rate"] == rate]
        return ", ".join(f"W = {b:g} s: {w:.1f} s" for b, w in zip(at["bound"], at["worst"]))

    ratio = "; ".join(f"W = {b:g} s: " + ", ".join(f"{r['p99'] / default.loc[r['rate'], 'p99']:.1f}x at {r['rate']:g}"
                                                    for _, r in g.iterrows() if r["rate"] in over)
                      for b, g in bounded.groupby("bound"))
    facts = [f"The engine completes at most {per['completed'].max():.1f} req/s whatever is offered; "
             + (f"at {', '.join(f'{r:g}' for r in over)} req/s it emits less output over the arrival window than "
                f"the arrivals ask for (output pace below {1 - OVERLOAD_SHORTFALL:.2f}: overload): the queue grows "
                "for the whole run, and no order serves everyone." if over else "every point keeps up.")]
    if over and not unbounded.empty and not bounded.empty:
        facts += [f"F without a bound keeps its attainment in overload by starving the longest prompts: their first "
                  f"token waited up to {unbounded['worst'].max():.1f} s, against {default['worst'].max():.1f} s "
                  f"under the default. At {over[0]:g} req/s a bound W holds the longest first-token wait near W "
                  f"({waits(over[0])})"
                  + (f"; at {over[-1]:g} req/s the overdue requests alone outrun the engine and every bound is "
                     f"passed ({waits(over[-1])})" if len(over) > 1 else "")
                  + ". The smaller W, the more attainment goes back to the default's.",
                  f"Longest tenth's TTFT P99 against the default's at the same rate, in overload: {ratio}."]
    facts += [steady_fact(rows.assign(overload=rows["pace"].map(overloaded)))] if rows["trend"].notna().any() else []
    facts += [t for t in [ceiling_fact(rows)] if t]
    runs = res.serving[folder]
    return [heading("Simulated screen: a bound on F's wait, in steady state -- a plan for GPU runs, not a result", 3),
            para(f"{len(runs)} replays in `results/{folder}/` (`experiments/screen.py --grid wait-bound`; the step "
                 f"model of section 6b): {runs[0].config.num_prompts} requests each of the bursty heavy-tailed load, "
                 "each run its own arrival seed and workload draw, under the lab's pair. Strategy F admits the "
                 "requests that can still meet the TTFT target first and the late ones after; with a wait bound W "
                 "(`wait_bound_s`) a request that has waited W goes ahead of all, oldest first. The GPU studies "
                 "`experiments/slo_heavy_steady*.json` measure the default against F with a bound on this load "
                 "(GPU runs above, each with its machine); the screen's pace is the fitted host's."),
            table(shown_rows), bullets(facts)]


def ceiling_fact(rows: pd.DataFrame) -> str | None:
    """The most any order can gain in steady-state SLO capacity on this load: no strategy completes
    more than the engine's pace, and the default already meets the SLO in steady state up to some
    rate, so their ratio bounds every strategy's capacity against the default's. None without a
    steady default point that meets it."""
    default = rows[rows["bound"].isna()]
    steady = default.groupby("rate").apply(lambda g: bool(g["attainment"].mean() >= CAPACITY_ATTAINMENT
                                                          and (g["trend"] == "settled").all()
                                                          and not g["pace"].map(overloaded).any()))
    met = [rate for rate, ok in steady.items() if ok]
    if not met:
        return None
    pace, base = rows["completed"].max(), max(met)
    return (f"Ceiling: in steady state no order serves more than the engine's pace, at most {pace:.1f} req/s "
            f"completed here, and the default met the SLO for {CAPACITY_ATTAINMENT:.0%} of requests or more, "
            f"settled, at {base:g} req/s; so no strategy's steady-state SLO capacity on this load exceeds "
            f"{pace / base:.2f}x the default's in the simulator. A {CAPACITY_FACTOR:g}x gain is out of reach by "
            "reordering here: what an order changes past the pace is who waits.")


def points_span(shares: pd.Series) -> str:
    """Changes in attainment as signed percentage points, '-12 to -2' ('+0' where none); 'n/a'
    when none was recorded."""
    values = sorted({int(round(v * 100)) for v in shares.dropna()})
    if not values:
        return "n/a"
    low, high = (f"{v:+d}" for v in (values[0], values[-1]))
    return low if low == high else f"{low} to {high}"


def trend_count(trends: pd.Series) -> str:
    """How many of a point's runs had not settled, e.g. "(2 of 3 falling)"; "" when all had."""
    moving = trends[trends.isin(["falling", "rising"])]
    return ", ".join(f"({n} of {len(trends)} {t})" for t, n in moving.value_counts().items())


def run_trends(rows: pd.DataFrame) -> pd.Series:
    """Each results row's ``rules.steady_trend`` from its attainment by third of arrivals."""
    return pd.Series([steady_trend(list(t)) for t in rows[list(THIRDS)].itertuples(index=False)], index=rows.index)


def steady_points(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (label, rate) point of runs with a known trend: ``settled`` (every run's last third met
    the SLO as often as its middle third, within ``STEADY_DRIFT``), ``overload`` (any run
    ``overloaded``) and ``steady`` (settled, no overload). A point where the queue grew all along can
    read "settled" at 0%: it counts as overload. ``rows``: one per run, with "label", "rate" (a
    number), "trend" and "overload"."""
    known = rows[rows["trend"].notna()]
    points = known.groupby(["label", "rate"], sort=False).agg(
        settled=("trend", lambda t: (t == "settled").all()), overload=("overload", "any"))
    return points.assign(steady=points["settled"] & ~points["overload"])


def steady_fact(rows: pd.DataFrame) -> str:
    """Which points reached steady state (``steady_points``) and why the others did not."""
    points = steady_points(rows)
    why = [f"{label} at {rate:g} req/s ({'overload' if r['overload'] else 'attainment still moving'})"
           for (label, rate), r in points[~points["steady"]].iterrows()]
    return (f"Steady state (in every run the engine kept pace with the arrivals, output pace at least "
            f"{1 - OVERLOAD_SHORTFALL:.2f}, and the last third of arrivals met the SLO "
            f"within {STEADY_DRIFT * 100:.0f} points as often as its middle third): {int(points['steady'].sum())} of "
            f"{len(points)} points. " + (f"Not steady: {'; '.join(why)}. The attainment of such a run depends on "
                                         "its length: a longer run reads lower where the queue grows." if why else ""))


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


PACE_OWNERS = {  # pace_owner's answers, and how pace_setter spells each out
    "the front end": "the front end (an API server at a full core or chunks merged)",
    "the client": "the client",
    "the GPU": "the GPU",
    "the engine core": "the engine core, whose one Python thread schedules, prepares and launches every step",
    "no single component": "no single component at its limit",
}


def pace_owner(rows: pd.DataFrame) -> str:
    """Which component set the pace of these runs (a key of ``PACE_OWNERS``), by elimination from
    their front-end check: a saturated API server or client first, then a GPU busy >= 90% of the
    window, then the engine core's one thread."""
    if rows["lagged"].any() or rows[BUSIEST_API].max() >= SATURATED_CORE:
        return "the front end"
    if rows[CLIENT_CORES].max() >= SATURATED_CORE:
        return "the client"
    if rows[GPU_UTIL].min() >= SATURATED_GPU:
        return "the GPU"
    if rows[ENGINE_CORES].min() >= SATURATED_CORE:
        return "the engine core"
    return "no single component"


def pace_setter(rows: pd.DataFrame) -> str:
    """``pace_owner`` with the readings it was decided from."""
    return (f"{PACE_OWNERS[pace_owner(rows)]}: completeness {span_text(rows['completeness'])}, busiest API server "
            f"{span_text(rows[BUSIEST_API], 2)} core, client {span_text(rows[CLIENT_CORES], 2)}, engine core "
            f"{span_text(rows[ENGINE_CORES], 2)}, GPU busy {span_text(rows[GPU_UTIL], 0)}% of the window")


def attainment_ratio_text(att: pd.DataFrame, strategy: str, rate: float, draws: int = 2000) -> str:
    """At one offered rate, a strategy's mean attainment over the default's, which is also the ratio of
    the requests per offered second that meet the SLO, with a 95% bootstrap interval, each side's
    runs resampled on their own."""
    rng = np.random.default_rng(0)
    own, base = (att.loc[(att["strategy"] == s) & (att["rate"] == rate), "attainment"].to_numpy()
                 for s in (strategy, "default"))
    with np.errstate(divide="ignore", invalid="ignore"):  # a resample of the default meeting it nowhere: no upper end
        boot = rng.choice(own, (draws, len(own))).mean(axis=1) / rng.choice(base, (draws, len(base))).mean(axis=1)
    return (f"at {rate:g} req/s, {own.mean():.0%} of requests met it against {base.mean():.0%}, "
            f"{own.mean() / base.mean():.2f}x (95% interval {interval_text(boot, 2, 'x')}; {len(own)} / "
            f"{len(base)} runs)" + (": a rate past the default's capacity, where any ratio grows with the "
                                    "rate; the capacity ratio is the fair one" if base.mean() < 0.9 else ""))


def bar_verdict(r: dict[str, Any]) -> str:
    """Whether a strategy's capacity row (``rules.capacity_table``) meets ``CAPACITY_BAR``: "met",
    "missed", or "open" where the grids leave it so (no ratio, a lower bound under 1.2x, an upper
    bound over it)."""
    value = r["vs default"]
    if np.isnan(value):
        return "open"
    met = value >= CAPACITY_FACTOR and r["ratio low"] > 1.0
    if not r["bound"]:
        return "met" if met else "missed"
    if r["bound"] == "at least":
        return "met" if met else "open"
    return "missed" if value < CAPACITY_FACTOR else "open"


def ratio_text(r: dict[str, Any], base_grid: str) -> str:
    """A capacity ratio as the grids allow it (``base_grid``: the default's ``grid_side``): exact, a
    bound with the side the missing grid would settle, or no ratio; and whether it meets
    ``CAPACITY_BAR``, misses it or leaves it open (``bar_verdict``)."""
    if np.isnan(r["vs default"]):
        return (": both over their grids, no ratio: each met the SLO at every rate it ran" if base_grid == "over"
                else ": both under their grids, no ratio")
    value, interval, verdict = r["vs default"], r["ratio interval"], bar_verdict(r)
    meeting = ("meeting" if verdict == "met" else "short of") + f" {CAPACITY_BAR}"
    if not r["bound"]:
        return f": {value:.2f}x (95% interval {interval}), {meeting}"
    default_side = base_grid == ("under" if r["bound"] == "at least" else "over")
    why, widen = {("at least", True): ("the default met the SLO at none of its rates", "its grid goes lower"),
                  ("at least", False): ("the strategy met the SLO at every rate it ran", "the strategy's grid goes higher"),
                  ("at most", True): ("the default met the SLO at every rate it ran", "its grid goes higher"),
                  ("at most", False): ("the strategy met the SLO at none of its rates", "the strategy's grid goes lower"),
                  }[(r["bound"], default_side)]
    return (f": {r['bound']} {value:.2f}x (95% interval {interval}; "
            + ("an upper" if r["bound"] == "at most" else "a lower") + f" bound, {why}"
            + (f"), {meeting}" if verdict != "open" else
               f", so whether the ratio reaches {CAPACITY_BAR} is open until {widen})"))


def shared_rates(frame: pd.DataFrame, name: str) -> list[Any]:
    """The rates (``frame``'s "rate": text in run rows, numbers in attainment rows) that strategy
    ``name`` and the default both ran, lowest first."""
    runs = frame.groupby("strategy")["rate"]
    if name not in runs.groups or "default" not in runs.groups:
        return []
    return sorted(set(runs.get_group(name)) & set(runs.get_group("default")), key=float)


def telling_rate(att: pd.DataFrame, name: str) -> float | None:
    """The rate at which to set strategy ``name``'s attainment beside the default's, of those both
    ran under one SLO pair (``att``): the lowest where either side's mean falls below the SLO's
    90%, nearest the capacities; where both hold it at every shared rate, the highest, nearest the
    crossings. A rate where both meet it for every request would read an uninformative 1.00x."""
    shared = shared_rates(att, name)
    if not shared:
        return None
    means = att.groupby(["strategy", "rate"])["attainment"].mean()
    missed = [r for r in shared if min(means[(name, r)], means[("default", r)]) < 0.9]
    return missed[0] if missed else shared[-1]


def capacity_fact(r: dict[str, Any], caps: pd.DataFrame, att: pd.DataFrame | None = None) -> str:
    """One strategy's capacity against the default's under one SLO pair, with intervals, whether it
    meets ``CAPACITY_BAR``, and, given the runs' attainment ``att``, the attainment ratio at the
    rate ``telling_rate`` picks."""
    base = caps[(caps["slo"] == r["slo"]) & (caps["workload"] == r["workload"]) & (caps["strategy"] == "default")]
    head = (f"{strategy_label(r['strategy'])}, SLO `{r['slo']}`: capacity {r['text']} req/s (95% interval "
            f"{r['95% interval']}) against the default's {base['text'].iloc[0]} req/s")
    head += ratio_text(r, base["grid"].iloc[0])
    if att is None:
        return head + "."
    mine = att[(att["slo"] == r["slo"]) & (att["workload"] == r["workload"])]
    rate = telling_rate(mine, r["strategy"])
    return head + (f"; {attainment_ratio_text(mine, r['strategy'], rate)}." if rate is not None else ".")


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


TAIL = ("attainment", "token attainment", "longest decile attainment", "longest decile TTFT P99 (ms)",
        "longest decile TTFT max (ms)")


def tail_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per strategy and rate, over the runs (their range): the completed request rate and the output
    pace (overloaded runs counted), attainment under the run's SLO beside its token-weighted form and the longest
    tenth of prompts' attainment and TTFT P99 and maximum, so that a strategy which wins attainment
    by making long prompts wait shows it, and how attainment moved from the middle to the last
    third of the arrivals (the steady-state check; n/a for files that predate it)."""
    out = []
    for (name, rate), g in rows.groupby(["strategy", "rate"], sort=False):
        cells = {c: span_text(g[c] * 100, 0) + "%" if "attainment" in c else span_text(g[c] / 1000, 1)
                 for c in TAIL}
        change = [np.nan if (c := third_change(list(t))) is None else c for t in g[list(THIRDS)].itertuples(index=False)]
        over = int(g[PACE].map(overloaded).sum())
        out.append({"strategy": strategy_label(name), "rate": rate,
                    COMPLETED: span_text(g[COMPLETED], 1),
                    PACE: span_text(g[PACE], 2) + (f" ({over} of {len(g)} overloaded)" if over else ""),
                    **{c.replace(" (ms)", " (s)"): v for c, v in cells.items()},
                    "last third - middle (points)": points_span(pd.Series(change))})
    return pd.DataFrame(out).sort_values(["strategy", "rate"], key=lambda c: c.map(
        lambda v: float(v) if c.name == "rate" else v), kind="stable")


def differing_rates(rows: pd.DataFrame) -> Iterator[tuple[str, str, list[str], pd.DataFrame, pd.DataFrame]]:
    """For each strategy other than the default: the rates both ran where its median attainment
    over the runs is above the default's (``"more"``) and where it is below (``"fewer"``), with its
    runs and the default's at those rates."""
    med = rows.groupby(["strategy", "rate"])["attainment"].median()
    for name in (s for s in dict.fromkeys(rows["strategy"]) if s != "default"):
        shared = shared_rates(rows, name)
        for side, differs in (("more", np.greater), ("fewer", np.less)):
            rates = [r for r in shared if differs(med[(name, r)], med[("default", r)])]
            if rates:
                at = rows[rows["rate"].isin(rates)]
                yield name, side, rates, at[at["strategy"] == name], at[at["strategy"] == "default"]


def tail_fact(rows: pd.DataFrame) -> str | None:
    """Where a strategy's attainment (median of runs) is above or below the default's at a rate:
    what its longest tenth of prompts got there, beside the default's."""
    facts = []
    for name, side, rates, own, base in differing_rates(rows):
        facts.append(f"at {' and '.join(rates)} req/s, where {strategy_label(name)} meets the "
                     f"SLO for {side} requests than the default, its longest tenth of prompts met it in "
                     f"{span_text(own['longest decile attainment'] * 100, 0)}% of cases (range over runs) against "
                     f"the default's {span_text(base['longest decile attainment'] * 100, 0)}%, and their longest "
                     f"wait for a first token was {span_text(own['longest decile TTFT max (ms)'] / 1000, 1)} s "
                     f"against {span_text(base['longest decile TTFT max (ms)'] / 1000, 1)} s")
    return ("The tail (table below, every run): " + "; ".join(facts) + ".") if facts else None


def at_cap(runs: pd.DataFrame) -> str:
    """In how many of ``runs`` the running set reached the server's ``max_num_seqs``."""
    return f"{int((runs['peak running'] >= runs['running cap']).sum())} of {len(runs)}"


def separation(own: pd.Series, base: pd.Series) -> str:
    """Whether every run of one side lies above, or below, every run of the other, or their ranges
    overlap: with three runs a point, a difference of medians alone says little."""
    if own.min() > base.max():
        return "higher in every run"
    if own.max() < base.min():
        return "lower in every run"
    return "ranges overlap"


def engine_fact(rows: pd.DataFrame) -> str | None:
    """Where a strategy meets the SLO for more or fewer requests than the default at a rate both
    ran: how its engine fared there beside the default's, from each run's own readings (queues from
    the /metrics poll, the mean step from the scheduler's step count), and whether the runs'
    ranges separate: with three runs a point, only a separation says that one order changed the
    engine's work. None without such a rate or those readings."""
    if rows[["peak running", "peak waiting", STEP_MS, OFFERED_OUTPUT]].isna().any(axis=None):
        return None
    facts = []
    for name, side, rates, own, base in differing_rates(rows):
        facts.append(
            f"at {' and '.join(rates)} req/s, where {strategy_label(name)} meets the SLO for {side} requests than "
            f"the default, on draws asking for {span_text(own[OFFERED_OUTPUT], 0)} output tok/s over the arrival "
            f"window against {span_text(base[OFFERED_OUTPUT], 0)}, its running set reached the cap "
            f"({span_text(own['running cap'], 0)} sequences) in {at_cap(own)} runs against {at_cap(base)}, its waiting "
            f"queue peaked at {span_text(own['peak waiting'], 0)} requests against {span_text(base['peak waiting'], 0)} "
            f"({separation(own['peak waiting'], base['peak waiting'])}), and a step took {span_text(own[STEP_MS], 1)} ms "
            f"on average against {span_text(base[STEP_MS], 1)} ({separation(own[STEP_MS], base[STEP_MS])}), with "
            f"the engine core at {span_text(own[ENGINE_CORES], 2)} of a core against "
            f"{span_text(base[ENGINE_CORES], 2)}")
    return ("The engine (every run; queues from the /metrics poll every 2 s, the mean step over the run's "
            "scheduler steps): " + "; ".join(facts) + ". Where the ranges overlap, these runs do not tell the two "
            "orders' engines apart; where one side is higher in every run, the order changed the engine's "
            "work, and which came first, the queue or the slower steps, these readings do not show.") if facts else None


def arrival_s(rows: pd.DataFrame) -> pd.Series:
    """Each paced run's arrival window in seconds: its prompts over its offered rate."""
    return rows["prompts"] / rows["rate"].astype(float)


def long_enough(rows: pd.DataFrame) -> bool:
    """Whether every run of a sweep offered at least ``STEADY_MIN_ARRIVAL_S`` of arrivals: a
    steady-state sweep, where a short burst is a transient."""
    return not rows.empty and bool((arrival_s(rows) >= STEADY_MIN_ARRIVAL_S).all())


def transient_note(rows: pd.DataFrame) -> str | None:
    """Where every run of a sweep was overloaded: its attainments are those of a burst whose queue
    was still growing when the arrivals stopped, not of steady state; None otherwise."""
    if rows.empty or not rows[PACE].map(overloaded).all():
        return None
    return (f"Every run of this sweep was overloaded (output pace {span_text(rows[PACE], 2)}; "
            f"{span_text(arrival_s(rows), 0)} s of arrivals a run): these are a transient's attainments, and the "
            "capacity read from them is not a steady-state one.")


def gpu_trend_rows(rows: pd.DataFrame) -> pd.DataFrame | None:
    """A GPU sweep's runs in the form ``steady_points`` reads; None for runs that predate the check."""
    trends = run_trends(rows)
    if trends.isna().all():
        return None
    return pd.DataFrame({"label": rows["strategy"].map(strategy_label), "rate": rows["rate"].astype(float),
                         "trend": trends, "overload": rows[PACE].map(overloaded)})


def gpu_steady_fact(rows: pd.DataFrame) -> str | None:
    """The steady-state check over a GPU sweep's runs; None for runs that predate it."""
    trend_rows = gpu_trend_rows(rows)
    return None if trend_rows is None else steady_fact(trend_rows)


def steady_count(rows: pd.DataFrame) -> str | None:
    """How many of a GPU sweep's points reached steady state, for the summary; None before the check."""
    trend_rows = gpu_trend_rows(rows)
    if trend_rows is None:
        return None
    points = steady_points(trend_rows)
    return f"{int(points['steady'].sum())} of {len(points)} points in steady state (section 6)."


def anchor_fact(rows: pd.DataFrame, study: Study, anchor: pd.DataFrame | None = None) -> str | None:
    """Where a sweep's rates are shares of a rate-inf throughput measured just before
    (``load.rate_from``): that figure, whether a run whose front end lagged counted in it (from
    ``anchor``, the capacity folder's rows, where loaded), and what the runs offered more than it
    emitted over their arrival window where they kept pace (output pace's numerator, in requests at
    the load's mean output length). Above the figure, a burst sent all at once read less than the
    engine sustains on the load; at or under it, the figure is about what it sustains. (The whole
    run's completed rate, drain included, reads lower than either.) None for a fixed grid."""
    from harness.workloads import HEAVY
    if study.capacity_from is None or study.capacity_rate is None:
        return None
    lagged = "" if anchor is None else lagged_anchor_text(anchor)
    above = rows[rows["rate"].astype(float) > study.capacity_rate]
    above = above.assign(paced=~above[PACE].map(overloaded),
                         sustained=above[EMITTED_OUTPUT] / HEAVY.mean_output_len())
    paced = above[above["paced"]]
    head = (f"Rates are shares of {study.capacity_rate:g} req/s, the rate-inf throughput that `{study.capacity_from}` "
            f"measured just before on the same machine, in requests at the load's mean output length{lagged}")
    if paced.empty:
        return head + "."
    kept = "; ".join(f"{strategy_label(name)} in {int(g['paced'].sum())} of {len(g)} (emitting "
                     f"{span_text(g.loc[g['paced'], 'sustained'], 1)} req/s)"
                     for name, g in above.groupby("strategy", sort=False) if g["paced"].any())
    beyond = paced["sustained"].max() > study.capacity_rate
    return (f"{head}. Above it, runs kept pace (output pace at least {1 - OVERLOAD_SHORTFALL:.2f}): {kept}, over "
            "their arrival windows, at the mean output length: "
            + ("that throughput, every prompt sent at once, anchors the grid and is not the most the engine "
               "sustains on this load." if beyond else
               "about that throughput, every prompt sent at once, which anchors the grid."))


def lagged_anchor_text(anchor: pd.DataFrame) -> str:
    """' (a figure that counts N of its M runs whose front end lagged, completeness ...; its runs
    that kept up alone read X req/s)' when the anchor's runs include lagging ones, else ''. A lagging
    client's throughput is the front end's as much as the engine's (``results.capacity_tok_s``
    leaves such runs out of a study's anchor)."""
    from harness.workloads import HEAVY
    if "lagged" not in anchor or not anchor["lagged"].any():
        return ""
    kept = anchor.loc[~anchor["lagged"], "Throughput (tok/s)"]
    alone = (f"; its runs that kept up alone read {kept.median() / HEAVY.mean_output_len():.1f} req/s" if not kept.empty
             else "; none of its runs kept up")
    return (f" (a figure that counts {int(anchor['lagged'].sum())} of its {len(anchor)} runs whose front end lagged, "
            f"completeness {span_text(anchor.loc[anchor['lagged'], 'completeness'])}{alone})")


def lab_default(caps: pd.DataFrame) -> dict[str, Any] | None:
    """The default's capacity row under the lab's pair (``SCREEN_SLOS[0]``); None without one."""
    base = caps[(caps["slo"] == SCREEN_SLOS[0]) & (caps["strategy"] == "default")]
    return None if base.empty else base.iloc[0].to_dict()


def engine_fared(runs: pd.DataFrame) -> str:
    """For each strategy and rate of ``runs``: in how many runs the engine fell behind the arrivals,
    what it completed, how long a step took and how busy the GPU was, and the SLO attainment."""
    return "; ".join(
        f"{strategy_label(name)} at {rate} req/s fell behind in {int(g[PACE].map(overloaded).sum())} of {len(g)} "
        f"runs (output pace {span_text(g[PACE], 2)}, completing {span_text(g[COMPLETED], 1)} req/s, a step "
        f"{span_text(g[STEP_MS], 1)} ms on average, GPU busy {span_text(g[GPU_UTIL], 0)}%) and met the SLO for "
        f"{span_text(g['attainment'] * 100, 0)}% of requests"
        for (name, rate), g in runs.groupby(["strategy", "rate"], sort=False))


def bar_fact(rows: pd.DataFrame, caps: pd.DataFrame) -> str | None:
    """What the 1.2x bar asks of a sweep whose default has a capacity under the lab's pair: the rate
    a strategy must hold the SLO at (at least that, where the default met the SLO at every rate
    and its capacity is a lower bound), and how the engine fared at the rates at or above it that
    any strategy ran, else at the sweep's top rate (no order can hold the SLO where the engine falls
    behind). None where the default met the SLO at none of its rates."""
    base = lab_default(caps)
    if base is None or np.isnan(base["capacity"]):
        return None
    target = CAPACITY_FACTOR * float(base["capacity"])
    asked = (f"The {CAPACITY_FACTOR:g}x bar asks a strategy to meet the SLO at {target:.1f} req/s"
             f"{' or more' if base['grid'] == 'over' else ''} under the lab's pair ({CAPACITY_FACTOR:g}x the default's "
             f"{base['text']} req/s)")
    rate = rows["rate"].astype(float)
    high = rows[rate >= target]
    if high.empty:
        return (f"{asked}; no run of this sweep offered that much. At its top rate: "
                f"{engine_fared(rows[rate == rate.max()])}. No order holds the SLO where the engine falls behind "
                "the arrivals.")
    absent = sorted(set(rows["strategy"]) - set(high["strategy"]))
    return (f"{asked}: {engine_fared(high)}"
            + (f"; {', '.join(strategy_label(a) for a in absent)} did not run that high" if absent else "")
            + ". No order holds the SLO where the engine falls behind the arrivals.")


TAIL_BAR = 2.0  # the goal's tail: the longest tenth's TTFT P99 at the default's capacity, at most this x the default's


@dataclass(frozen=True)
class TailRead:
    """The goal's tail check for one strategy: at ``rate`` (the shared rate nearest the default's
    capacity), the longest tenth of prompts' TTFT P99 (s) in each of its runs and the default's."""

    rate: str
    own: pd.Series
    ref: pd.Series

    @property
    def times(self) -> float:
        """The strategy's median over the default's: at most ``TAIL_BAR`` meets the goal's tail."""
        return self.own.median() / self.ref.median()


def tail_reads(rows: pd.DataFrame, caps: pd.DataFrame) -> dict[str, TailRead]:
    """Per strategy other than the default, its ``TailRead`` at the rate both it and the default ran
    nearest the default's capacity under the lab's pair; empty where that capacity is unknown."""
    base = lab_default(caps)
    if base is None or np.isnan(base["capacity"]):
        return {}
    capacity, column = float(base["capacity"]), "longest decile TTFT P99 (ms)"
    reads = {}
    for name in (s for s in dict.fromkeys(rows["strategy"]) if s != "default"):
        shared = shared_rates(rows, name)
        if shared:
            rate = min(shared, key=lambda r: abs(float(r) - capacity))
            own, ref = (rows.loc[(rows["strategy"] == s) & (rows["rate"] == rate), column] / 1000
                        for s in (name, "default"))
            reads[name] = TailRead(rate, own, ref)
    return reads


def tail_bar_fact(rows: pd.DataFrame, caps: pd.DataFrame) -> str | None:
    """The goal's tail check, per strategy (``tail_reads``): the longest tenth of prompts' TTFT P99
    (median over the runs, their range beside it) against the default's, and whether it is within
    ``TAIL_BAR`` times. None where the default's capacity is unknown or no rate was shared."""
    reads = tail_reads(rows, caps)
    if not reads:
        return None
    facts = [f"{strategy_label(name)} at {t.rate} req/s: {t.own.median():.1f} s (runs {span_text(t.own, 1)}) against "
             f"{t.ref.median():.1f} s ({span_text(t.ref, 1)}), {t.times:.1f}x, "
             + ("within the bar" if t.times <= TAIL_BAR else "over the bar") for name, t in reads.items()]
    return (f"Tail bar (the longest tenth of prompts' TTFT P99 at the default's capacity, {lab_default(caps)['text']} "
            f"req/s here, at most {TAIL_BAR:g}x the default's; read at the rate both ran nearest it, medians of the "
            "runs): " + "; ".join(facts) + ".")


def gpu_capacity_section(res: Results, sweeps: dict[str, Sweep], sim: pd.DataFrame) -> list[Block]:
    """SLO sweeps measured on the GPU: attainment per rate, capacity per strategy with
    bootstrap intervals, the attainment ratio at one shared rate (``telling_rate``), which
    component set the pace, and the simulator's prediction for the same load beside it."""
    blocks: list[Block] = []
    for folder, sw in sweeps.items():
        rows, runs, att, caps = sw.rows, res.serving[folder], sw.att, sw.caps
        workloads = sorted(set(rows["workload"]))
        wide = attainment_grid(att, ["slo", "strategy"])
        study = res.studies[folder]
        anchor = res.folder_rows(study.capacity_from) if study.capacity_from in res.serving else None
        facts = [t for t in [transient_note(rows), anchor_fact(rows, study, anchor)] if t] + (
            [capacity_fact(r, caps, att) for r in caps[caps["strategy"] != "default"].to_dict("records")]
            + [t for t in [bar_fact(rows, caps), tail_bar_fact(rows, caps)] if t] + [price_fact(rows, caps)]
            if not sw.gaps else [f"No capacity with intervals is read from these runs: {'; '.join(sw.gaps)}."])
        point = point_table(rows, ["strategy", "rate"])
        if not sim.empty and not sw.gaps and set(rows["model"]) == {SCREEN_MODEL}:
            predicted = sim[sim["workload"].isin(workloads) & (sim["slo"] == SCREEN_SLOS[0])
                            & sim["strategy"].isin(set(rows["strategy"]))]
            replayed = any(folder in res.studies[n].replays_of for n in res.with_role("replay-validation"))
            facts.append("The simulator's screen (the H200 step model) predicted, for the same load and the lab's pair: "
                         + "; ".join(f"{strategy_label(p['strategy'])} {p['text']} req/s" for p in predicted.to_dict("records"))
                         + (". Section 6b sets the replays of these points beside these runs." if replayed else
                            f"; {' and '.join(dict.fromkeys(rows['gpu'].dropna()))} ran these points, and no replay of them is committed."))
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
                   bullets(facts + [t for t in [tail_fact(rows), engine_fact(rows), gpu_steady_fact(rows)] if t]),
                   table(tail_table(rows))]
    if blocks:
        blocks.insert(0, heading("GPU runs: SLO capacity with intervals", 3))
    return blocks
