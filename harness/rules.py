"""The rules the report's conclusions rest on, as numbers and booleans (the report words them):
which runs count (``kept_up``), when two sets of runs differ (``separated``), which Task 2 budget
saturates or suits chat, when rate-inf throughput measures the engine (``capacity_runs``), SLO
capacity with bootstrap intervals (``capacity_table``), and the replay simulator's errors against
the GPU runs (``replay_validation``).

Each threshold is a named constant with the reason for its value beside it.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from harness.lab_metrics import is_success, request_e2e_s
from harness.results import BUDGET, BUSIEST_API, COMPLETED, METRICS, PACE, THROUGHPUT, Results, Run, sort_key
from harness.run_config import parse_rate

SATURATION_TOLERANCE = 0.05  # a budget within 5% of the best throughput counts as saturated
CHAT_ITL_TOLERANCE = 0.10  # chat rule: ITL P99 within 10% of the best budget's
SATURATED_CORE = 0.9  # a one-thread Python process at this share of a core has no slack left
SATURATED_GPU = 90.0  # GPU busy this % of the load window: the GPU sets the pace
MIN_RUNS_TO_SEPARATE = 3  # 3 against 3: two equal strategies separate by chance 1 time in 10
SCREEN_SLOS = ("ttft:500 tpot:50", "ttft:200 tpot:25")  # the lab's pair, and the tight one
# The model the simulated screen's step model (results/steplogs/qwen3-0.6b_api-4.fit.json, a fit from
# before fits recorded their host) was fitted on: its predictions stand beside GPU sweeps of this model only.
SCREEN_MODEL = "qwen3-0.6b"
REPLAY_METRICS = (*METRICS, THROUGHPUT)
# The simulator's goals on held-out GPU points, as relative errors of the medians. Latency goals
# hold below GOAL_LOAD_SHARE of the load's pace (near saturation TTFT is a queue that a few percent
# of step time moves several-fold); the throughput goal where throughput is the engine's pace (rate
# inf, or GPU runs that completed less than offered); the ranking goal over the pairs of
# strategies that the GPU's runs separate.
REPLAY_GOAL = {"P50": 0.25, "P99": 0.40, "Throughput": 0.05}
GOAL_LOAD_SHARE = 0.8
RANKING_GOAL = 0.9
CAPACITY_ATTAINMENT = 0.9  # SLO capacity: the rate where the share meeting the SLO first falls below this
SLOW_REQUEST_S = 30.0  # end to end: Task 3's per-request timeout (its runs' timeout_s), applied to any run
Comparison = tuple[tuple[str, str, str], str, pd.DataFrame, pd.DataFrame]


def ratio(a: float, b: float) -> float:
    """a / b, inf when b is 0 (a division by a zero latency must not crash the report)."""
    return a / b if b else math.inf


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman rank correlation (average ranks for ties), without scipy."""
    return float(np.corrcoef(pd.Series(x).rank(), pd.Series(y).rank())[0, 1])


def separated(a: pd.Series, b: pd.Series) -> bool:
    """Every run of one side beyond every run of the other, with at least 3 runs a side. Medians
    alone say little here: near saturation, runs with one seed's identical arrivals and prompts
    still give TTFT medians several-fold apart."""
    enough = min(len(a.dropna()), len(b.dropna())) >= MIN_RUNS_TO_SEPARATE
    return bool(enough and (a.max() < b.min() or b.max() < a.min()))


def separating(own: pd.DataFrame, base: pd.DataFrame,
               columns: tuple[str, ...] = (*METRICS, THROUGHPUT)) -> list[str]:
    """The columns on which two sets of runs separate."""
    return [c for c in columns if separated(own[c], base[c])]


def below_pairs(part: pd.DataFrame, column: str, by: str) -> list[tuple[Any, Any]]:
    """Pairs (a, b) of ``by`` values whose runs separate in ``column`` with a's below: every run of
    a under every run of b, at least ``MIN_RUNS_TO_SEPARATE`` runs a side (``separated``)."""
    runs = {key: group[column] for key, group in part.groupby(by)}
    return [(a, b) for a in runs for b in runs
            if a != b and separated(runs[a], runs[b]) and runs[a].max() < runs[b].min()]


def theory_pairs(pairs: list[tuple[Any, Any]], rises: bool) -> tuple[list[tuple[Any, Any]], list[tuple[Any, Any]]]:
    """Separated pairs (lower value first) split into those that agree with a metric that should
    rise (``rises``) or fall with the key, and those that disagree."""
    return [(a, b) for a, b in pairs if (a < b) == rises], [(a, b) for a, b in pairs if (a < b) != rises]


def trend_verdict(pairs: list[tuple[Any, Any]], rises: bool) -> str:
    """Whether separated pairs (lower value first) bear out a metric that should rise (``rises``)
    or fall with the key: 'holds' (some pair agrees, none disagrees), 'contradicted' (some pair
    disagrees, none agrees), 'mixed' (both) or 'no pair separates'."""
    agree, disagree = theory_pairs(pairs, rises)
    if agree and disagree:
        return "mixed"
    return "holds" if agree else "contradicted" if disagree else "no pair separates"


OVERLOAD_SHORTFALL = 0.05  # the engine may emit this much less output than offered (arrival noise) and keep up


def overloaded(pace: float | None) -> bool:
    """A run whose engine emitted less output over its arrival window than its arrivals asked for
    (``lab_metrics.output_pace``'s ratio, beyond the slack): the queue grew for the whole run, so
    its latencies depend on how long it ran. False where the pace is unknown."""
    return pace is not None and not math.isnan(pace) and pace < 1 - OVERLOAD_SHORTFALL


# A steady-state run offers at least this many seconds of arrivals, so that its queue can settle (or
# show that it does not); shorter sweeps are bursts, read as transients.
STEADY_MIN_ARRIVAL_S = 60.0

# Attainment in a run's last third of arrivals may differ from its middle third by this much (a
# share) and the run still counts as settled. Sampling alone moves a third's share of 1000 requests
# at 90% attainment by about 1 point (one standard error).
STEADY_DRIFT = 0.05


def third_change(by_third: list[float | None] | None) -> float | None:
    """A run's attainment in its last third of arrivals minus its middle third's
    (``lab_metrics.attainment_by_third``); None where a file predates the thirds or a third is empty."""
    if not by_third or by_third[1] is None or by_third[2] is None:
        return None
    return by_third[2] - by_third[1]


def steady_trend(by_third: list[float | None] | None) -> str | None:
    """"settled", "falling" or "rising": how a run's attainment moved from the middle third of its
    arrivals to the last. A falling run has not reached steady state: a longer run would read lower."""
    change = third_change(by_third)
    if change is None:
        return None
    return "settled" if abs(change) <= STEADY_DRIFT else ("falling" if change < 0 else "rising")


SITTING_COST_GOAL = 1.3  # a sitting's GPU time: at most this times its arrival windows plus a start per configuration


def measured_window_s(run: Run) -> float:
    """The part of a run that measures the load: its arrival window, and at rate inf, where every
    request is sent at once (a window of about 0 s), the drain too (first request sent to last token)."""
    window = run.timing["arrival_window_s"]
    return window + (run.timing.get("drain_s") or 0.0) if run.config.rate_label == "inf" else window


def sitting_cost(runs: list[Run]) -> dict[str, Any] | None:
    """Where a study's GPU time went, from its runs' ``timing`` blocks: server starts (each distinct
    start once: machine boot and ready time), the runs' arrival windows, and the rest of each run
    (client set-up, drain). A start counts in the study's GPU time when one of its runs ran on the
    server before any call attached to it (``server_reused`` false); a server another study
    started and left up (``shared starts``) cost this one nothing. The goal's allowance is the
    arrival windows plus one start per configuration (arm) the study compares
    (``measured_window_s``: at rate inf, the drain stands in for the window). None for runs that
    predate the timing block."""
    timed = [r for r in runs if r.timing]
    if not timed:
        return None
    key = lambda r: (r.meta.get("machine_boot_id"), r.timing["server_ready_s"])  # noqa: E731
    starts = {key(r): r.timing["server_ready_s"] for r in timed}
    paid = {key(r) for r in timed if not r.timing.get("server_reused")}
    arrivals = sum(measured_window_s(r) for r in timed)
    gpu = sum(starts[k] for k in paid) + sum(r.timing["run_wall_s"] for r in timed)
    arms = len({(r.config.budget_in_force, r.config.strategy_variant, r.config.rate_label) for r in timed})
    overhead = [r.timing["client_overhead_s"] for r in timed]
    one_start = float(np.mean(list(starts.values())))
    return {"runs": len(timed), "configurations": arms, "server starts (s)": list(starts.values()),
            "shared starts (s)": [v for k, v in starts.items() if k not in paid], "arrivals (s)": arrivals,
            "GPU time (s)": gpu, "client overhead (s)": (min(overhead), max(overhead)),
            "vs arrivals and one start": gpu / (arrivals + one_start),
            "vs allowance": gpu / (arrivals + arms * one_start)}


def kept_up(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[~rows["lagged"]] if not rows.empty else rows


def spread_factor(part: pd.DataFrame, column: str, by: str) -> tuple[float, Any]:
    """How far the runs of one ``by`` value differ at most in ``column``: the largest highest /
    lowest run (inf where a lowest is 0), and the ``by`` value where it is."""
    grouped = part.groupby(by)[column]
    factors = pd.Series({key: ratio(g.max(), g.min()) for key, g in grouped})
    return float(factors.max()), factors.idxmax()


def spread_pct(part: pd.DataFrame, column: str, by: str) -> float:
    """How far the runs of one ``by`` value differ at most in ``column``, in %: the highest run
    above the lowest (``spread_factor`` - 1)."""
    return (spread_factor(part, column, by)[0] - 1) * 100


def slow_requests(run: Run, limit_s: float = SLOW_REQUEST_S) -> int:
    """How many of a run's requests (all of them, warm-up too) succeeded slower than ``limit_s``
    end to end (TTFT plus every inter-token gap)."""
    detail = run.detail
    return sum(1 for i in range(len(detail.ttfts)) if is_success(detail, i) and request_e2e_s(detail, i) > limit_s)


def saturation_budget(med: pd.DataFrame) -> tuple[int, float]:
    """Rule: the smallest budget whose median throughput is within 5% of the best budget's."""
    best = med[THROUGHPUT].max()
    return int(med.loc[med[THROUGHPUT] >= (1 - SATURATION_TOLERANCE) * best, BUDGET].min()), float(best)


def chat_budget(med: pd.DataFrame) -> int:
    """Rule: among budgets whose ITL P99 is within 10% of the best, the lowest TTFT P99 (a chat
    user feels the token pace first, then the wait for the first token)."""
    ok = med[med["ITL P99 (ms)"] <= (1 + CHAT_ITL_TOLERANCE) * med["ITL P99 (ms)"].min()]
    return int(ok.sort_values(["TTFT P99 (ms)", BUDGET]).iloc[0][BUDGET])


def capacity_runs(part: pd.DataFrame) -> dict[int, pd.Series] | None:
    """Rate-inf throughput per budget where it measures the engine: every run counts, lagged or
    not (a merged chunk carries the same tokens), provided no API server had a full core (the front
    end did not hold the engine back; recorded in every run) and each of 2 budgets or more has 3
    runs. None otherwise."""
    by_budget = part.groupby(BUDGET)[THROUGHPUT]
    if (by_budget.ngroups < 2 or by_budget.size().min() < MIN_RUNS_TO_SEPARATE
            or part[BUSIEST_API].isna().any() or part[BUSIEST_API].max() >= SATURATED_CORE):
        return None
    return dict(list(by_budget))


def against_default(rows: pd.DataFrame) -> Iterator[Comparison]:
    """Each (point, strategy, its runs, the default's runs) among the runs that kept up."""
    if rows.empty:
        return
    for point, part in kept_up(rows).groupby(["folder", "workload", "rate"], sort=False):
        base = part[part["strategy"] == "default"]
        for name, own in part[part["strategy"] != "default"].groupby("strategy", sort=False):
            if not base.empty:
                yield point, name, own, base


def round_ratios(own: pd.DataFrame, base: pd.DataFrame, column: str) -> pd.Series:
    """``own`` / ``base`` in ``column`` within each round of an interleaved study where both have
    a run (minutes apart, on one server), by round: the comparison on which a drift of the machine
    over the study weighs least. Empty for runs outside a study."""
    a, b = (side.dropna(subset=["round"]).set_index("round")[column] for side in (own, base))
    both = a.index.intersection(b.index).sort_values()
    return a[both] / b[both]


def slo_capacity(rates: pd.Series, attained: pd.Series, level: float = CAPACITY_ATTAINMENT) -> float:
    """The first crossing: where attainment first falls below ``level`` as the rate rises, linear
    between the two grid rates that bracket it. A rise again at a higher rate (run-to-run noise in
    overload) does not move it. The top rate where none falls below (a lower bound), NaN where the
    lowest rate already does (an upper bound: below the grid)."""
    r, a = np.asarray(rates, float), np.asarray(attained, float)
    below = np.flatnonzero(a < level)
    if not len(below):
        return r[-1]
    j = below[0]
    if j == 0:
        return float("nan")
    return r[j - 1] + (a[j - 1] - level) / (a[j - 1] - a[j]) * (r[j] - r[j - 1])


def boot_capacities(g: pd.DataFrame, draws: int, rng: np.random.Generator) -> np.ndarray:
    """SLO capacities of ``draws`` bootstrap resamples: at each rate the runs are drawn with
    replacement and their attainment averaged, then ``slo_capacity`` of those means."""
    rates = sorted(g["rate"].unique())
    means = np.column_stack([rng.choice(v, size=(draws, len(v))).mean(axis=1) for v in
                             (g.loc[g["rate"] == r, "attainment"].to_numpy() for r in rates)])
    return np.array([slo_capacity(pd.Series(rates), pd.Series(row)) for row in means])


def interval_text(draws: np.ndarray, digits: int = 1, suffix: str = "", open_top: bool = False) -> str:
    """A 95% percentile interval, or n/a where a resample met the SLO at no rate of the grid.
    ``open_top``: the capacity is over its grid, so a draw at the top rate means that rate or more
    and the interval has no upper end. An infinite draw (a ratio whose base resampled to runs that
    all met the SLO for no request) leaves the end it falls in open too, where percentiles of it
    would read NaN."""
    if np.isnan(draws).any():
        return "n/a"
    huge = np.finfo(float).max
    lo, hi = np.percentile(np.where(np.isposinf(draws), huge, draws), [2.5, 97.5])
    if lo >= huge / 2:
        return "n/a"
    if open_top or hi >= huge / 2:
        return f"{lo:.{digits}f}{suffix} or more"
    return f"{lo:.{digits}f}-{hi:.{digits}f}{suffix}"


def attainment_rows(runs: list[Run], slos: tuple[str, ...] = SCREEN_SLOS) -> pd.DataFrame:
    """One row per run and SLO pair: its attainment and the share of kept requests over the TPOT term."""
    att = pd.DataFrame([{"slo": slo, "strategy": r.config.strategy_variant, "workload": r.config.workload,
                         "rate": r.config.rate, "run": r.config.run, "attainment": a["attainment"],
                         "tpot missed": a["num_missed_by_term"]["tpot"] / a["num_kept"]}
                        for r in runs for slo in slos for a in [r.attainment(slo)]])
    return att if att.empty else att.sort_values(["slo", "workload", "strategy", "rate", "run"], key=sort_key,
                                                 kind="stable")


def grid_side(cap: float, highest: float) -> str:
    """Where a capacity lies against its grid: ``"under"`` where no rate met the SLO (NaN),
    ``"over"`` where every rate did (``slo_capacity`` returned the top rate), ``""`` for a crossing
    inside it."""
    return "under" if np.isnan(cap) else ("over" if cap == highest else "")


def capacity_bounds(cap: float, side: str, lowest: float) -> tuple[float, float]:
    """The range a capacity read from one grid can lie in, by its ``grid_side``: the crossing
    itself; from the top rate up; from 0 to the lowest rate."""
    return {"under": (0.0, lowest), "over": (cap, np.inf), "": (cap, cap)}[side]


def ratio_bound(own: tuple[float, float], base: tuple[float, float]) -> tuple[float, str]:
    """A strategy's capacity over the default's from their ranges: exact (``""``), a lower bound
    (``"at least"``: the default under its grid or the strategy over its), an upper bound (``"at
    most"``: the default over its grid or the strategy under its), or NaN where the ranges leave
    the ratio open (both over, or both under, their grids)."""
    low, high = own[0] / base[1], own[1] / base[0] if base[0] else np.inf
    if low == high:
        return low, ""
    if low > 0 and np.isinf(high):
        return low, "at least"
    if low == 0 and np.isfinite(high):
        return high, "at most"
    return np.nan, ""


def ratio_draws(own: np.ndarray, base: np.ndarray, own_span: tuple[float, float],
                base_span: tuple[float, float], bound: str) -> np.ndarray:
    """The bootstrap draws of a capacity ratio that ``ratio_bound`` gives. A draw under its grid
    (NaN) stands at its lowest rate where that gives the bound's side: the default's for a lower
    bound, the strategy's for an upper one."""
    if bound == "at least":
        base = np.where(np.isnan(base), base_span[1], base)
    elif bound == "at most":
        own = np.where(np.isnan(own), own_span[1], own)
    return own / base


def capacity_table(att: pd.DataFrame, draws: int = 2000, paired: bool = True) -> pd.DataFrame:
    """SLO capacity per SLO pair, workload and strategy (of the runs' mean attainment) with a
    bootstrap interval, and its ratio to the default's with one. ``paired``: every group resampled
    with the same generator, so run k of one strategy is drawn with run k of the default (replays
    of one residual seed); GPU runs share nothing, so each group draws on its own. A capacity
    outside its grid (``grid``: ``grid_side``) makes the ratio a bound (``bound``: "at least", "at
    most", see ``ratio_bound``); its draws divide by the grid rate that bounds it."""
    keys = ["slo", "workload", "strategy"]
    mean = att.groupby([*keys, "rate"], sort=False)["attainment"].mean().reset_index()
    caps = mean.groupby(keys, sort=False).apply(lambda g: slo_capacity(g["rate"], g["attainment"])
                                                ).rename("capacity").reset_index()
    boot = {key: boot_capacities(g, draws, np.random.default_rng(0 if paired else zlib.crc32(repr(key).encode())))
            for key, g in att.groupby(keys, sort=False)}  # unpaired: each group's own stream, stable
    grid = att.groupby(keys, sort=False)["rate"].agg(["min", "max"])
    caps["grid"] = [grid_side(c, grid.loc[tuple(k), "max"]) for c, k in zip(caps["capacity"], caps[keys].values)]
    caps["95% interval"] = [interval_text(boot[tuple(k)], open_top=side == "over")
                            for side, k in zip(caps["grid"], caps[keys].values)]
    caps["text"] = [{"under": f"<{grid.loc[tuple(k), 'min']:.0f}", "over": f">={c:.0f}", "": f"{c:.1f}"}[side]
                    for c, side, k in zip(caps["capacity"], caps["grid"], caps[keys].values)]
    span = {tuple(k): capacity_bounds(c, side, grid.loc[tuple(k), "min"])
            for c, side, k in zip(caps["capacity"], caps["grid"], caps[keys].values)}
    ratios, points, bounds = [], [], []
    for (slo, w, st), cap in zip(caps[keys].values, caps["capacity"]):
        own, base = (slo, w, st), (slo, w, "default")
        if base not in boot:
            point, bound, draws_ = np.nan, "", np.array([np.nan])
        elif own == base:  # the default against itself: 1 wherever it has a capacity
            point, bound, draws_ = cap / cap, "", boot[own] / boot[own]
        else:
            point, bound = ratio_bound(span[own], span[base])
            draws_ = (np.full(len(boot[own]), np.nan) if np.isnan(point)  # open: both over, or both under
                      else ratio_draws(boot[own], boot[base], span[own], span[base], bound))
        points.append(point)
        bounds.append(bound)
        ratios.append(draws_)
    caps["vs default"] = points
    caps["bound"] = bounds
    caps["ratio interval"] = [interval_text(r, 2, "x") for r in ratios]
    caps["ratio low"] = [np.nan if np.isnan(r).any() else np.percentile(r, 2.5) for r in ratios]
    return caps


def is_sweep(rows: pd.DataFrame) -> bool:
    """One load at several rates under more than one strategy."""
    return rows.groupby("workload")["rate"].nunique().max() > 1 and rows["strategy"].nunique() > 1


def replay_validation(res: Results) -> pd.DataFrame:
    """One row per replayed point and metric: the replays' median and range (a folder with the role
    ``replay-validation``, one replay per residual seed) against the GPU runs of the same strategy,
    workload and rate in the folders its study file says it replays (one client, front end kept
    up): their median, range and values; relative error of the medians."""
    out, real_rows = [], []
    for name in res.with_role("replay-validation"):
        real = [res.folder_rows(f) for f in res.studies[name].replays_of if f in res.serving]
        if not real:
            continue
        real = pd.concat(real)
        real = kept_up(real[real["clients"] == 1])
        real_rows.append(real)
        keys = ["strategy", "workload", "rate", BUDGET]
        for (strategy, workload, rate, budget), sim in res.folder_rows(name).groupby(keys, sort=False):
            match = real[(real["strategy"] == strategy) & (real["workload"] == workload) & (real["rate"] == rate)
                         & (real[BUDGET] == budget)]
            for folder, g in match.groupby("folder", sort=False):
                out += [{"replay folder": name, "folder": folder, "strategy": strategy, "workload": workload,
                         "rate": rate, "budget": budget, "metric": c,
                         "real": g[c].median(), "low": g[c].min(), "high": g[c].max(), "runs": len(g),
                         "values": tuple(g[c]), "sim": sim[c].median(), "sim low": sim[c].min(),
                         "sim high": sim[c].max(), "replays": len(sim)} for c in REPLAY_METRICS]
    v = pd.DataFrame(out)
    if not v.empty:
        v["error"] = v["sim"] / v["real"] - 1
        goal = v["metric"].map(lambda c: next(g for k, g in REPLAY_GOAL.items() if k in c))
        v["within goal"] = v["error"].abs() <= goal
        v["goal applies"] = goal_applies(v, real_rows)
        v["in range"] = v["sim"].between(v["low"], v["high"]).where(v["runs"] >= 2)  # None: one run
    return v


def goal_applies(v: pd.DataFrame, real_rows: list[pd.DataFrame]) -> pd.Series:
    """Whether a validation cell is held to ``REPLAY_GOAL``: a latency below ``GOAL_LOAD_SHARE`` of
    the load's pace (the most requests per second any GPU run of that workload completed on the
    machines that ran the cell's GPU folder: machines differ), a throughput where it measures the
    pace (rate inf, or the point's GPU runs overloaded by median)."""
    columns = ["folder", "sitting", "workload", "rate", COMPLETED, PACE]
    real = pd.concat(real_rows) if real_rows else pd.DataFrame(columns=columns)
    kept_pace = real.groupby(["workload", "rate"])[PACE].median()
    applies = []
    for folder, workload, rate, metric in zip(v["folder"], v["workload"], v["rate"], v["metric"]):
        offered = parse_rate(rate)
        if metric == THROUGHPUT:
            applies.append(offered is None or overloaded(kept_pace.get((workload, rate))))
        else:
            machines = set(real.loc[real["folder"] == folder, "sitting"])
            pace = real.loc[(real["workload"] == workload) & real["sitting"].isin(machines), COMPLETED].max()
            applies.append(offered is not None and offered <= GOAL_LOAD_SHARE * pace)
    return pd.Series(applies, index=v.index)


def replay_ranking(v: pd.DataFrame) -> pd.DataFrame:
    """Per strategy of ours, point and metric: does the simulator order it and the default as the
    GPU runs do? The GPU orders them only where their runs separate (``separated``); medians otherwise.
    Each replay folder on its own: two fits that replay one GPU folder are two rankings."""
    rows = []
    keys = ["replay folder", "folder", "workload", "rate", "metric"]
    for (replays, folder, workload, rate, metric), g in v.groupby(keys, sort=False):
        g = g.set_index("strategy")
        for other in (s for s in g.index if s != "default" and "default" in g.index):
            a, d = g.loc[other], g.loc["default"]
            rows.append({"strategy": other, "replay folder": replays, "folder": folder, "workload": workload,
                         "rate": rate, "metric": metric,
                         "GPU separated": separated(pd.Series(a["values"]), pd.Series(d["values"])),
                         "GPU higher": a["real"] > d["real"], "sim higher": a["sim"] > d["sim"]})
    r = pd.DataFrame(rows)
    if not r.empty:
        r["same"] = r["GPU higher"] == r["sim higher"]
    return r
