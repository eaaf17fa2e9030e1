"""Section 6b of the report: the replay simulator (``harness/sched_sim.py replay`` with the step model
of ``harness/step_model.py``) set against the H200 runs of the same loads: errors per metric, the
ranking against the default, the held-out step logs and budgets, and what the replay leaves out,
so the simulated screen of section 6 is read with its known error.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness import step_model
from harness.document import Block, bullets, heading, para, table
from harness.results import BUDGET, THROUGHPUT, Results, span_text, strategy_label
from harness.rules import GOAL_LOAD_SHARE, RANKING_GOAL, REPLAY_GOAL, REPLAY_METRICS, replay_ranking
from harness.report.slo import capacity_folders
from harness.report.text import unit_less


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


def goal_fact(v: pd.DataFrame, rank: pd.DataFrame) -> str:
    """The held-out goals (``rules.REPLAY_GOAL``) where they apply, each met or the cells that miss
    it, and the ranking goal over the pairs the GPU separates: which term fails, with numbers."""
    held = v[v["goal applies"]]
    parts = []
    for key, words in (("Throughput", "throughput where it is the engine's pace (rate inf, or runs that "
                                      "completed less than offered)"),
                       ("P50", f"P50 below {GOAL_LOAD_SHARE:g}x the load's pace"),
                       ("P99", f"P99 below {GOAL_LOAD_SHARE:g}x the load's pace")):
        cells = held[held["metric"].str.contains(key)]
        misses = cells[~cells["within goal"]]
        missed = "; ".join(f"{strategy_label(m['strategy'])}, {m['workload']} at {m['rate']} req/s"
                           + ("" if key == "Throughput" else f", {unit_less(m['metric'])}") + f": {m['error']:+.0%}"
                           for m in misses.to_dict("records"))
        parts.append(f"{words} within {REPLAY_GOAL[key]:.0%}: {len(cells) - len(misses)} of {len(cells)} cells"
                     + (f" (missed: {missed})" if missed else ""))
    sep = rank[rank["GPU separated"]] if not rank.empty else rank
    right = int(sep["same"].sum()) if not sep.empty else 0
    ranked = (f"the ranking against the default right in {right} of the {len(sep)} point-metrics the GPU's runs "
              f"separate ({right / len(sep):.0%}; goal {RANKING_GOAL:.0%})" if len(sep) else
              "no point-metric where the GPU's runs separate a strategy from the default, so no ranking to check")
    return "Held-out goals, where they apply: " + "; ".join(parts) + f"; {ranked}."


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
    change (section 4), so lagged runs count. The replays are the folder with the role
    ``budget-replays``, the sweep the folder its study file says it replays."""
    replays = res.one_with_role("budget-replays")
    sweep = next((f for f in res.studies[replays].replays_of if f in res.serving), None) if replays else None
    if sweep is None:
        return None
    sim = res.folder_rows(replays).groupby(BUDGET)[THROUGHPUT].median()
    gpu = res.folder_rows(sweep).groupby(BUDGET)[THROUGHPUT].median()
    both = sorted(set(sim.index) & set(gpu.index))
    if len(both) < 2:
        return None
    errors = {b: sim[b] / gpu[b] - 1 for b in both}
    fit = res.serving[replays][0].sim["step_model"]
    coef, boundary = fit["coefficients"], graph_boundary_text(res.folder, fit)
    graph = fit.get("graph_tokens", step_model.GRAPH_TOKENS)
    worst = max(errors, key=lambda b: abs(errors[b]))
    order = {name: " < ".join(str(b) for b in series[both].sort_values().index) for name, series in
             (("sim", sim), ("gpu", gpu))}
    return (f"Budgets held out (the fit saw budget 2048 only): the default at rate inf, replayed at budgets "
            f"{', '.join(map(str, both))} (`results/{replays}/`) against the median of every GPU run of "
            f"`{sweep}`: throughput " + "; ".join(f"{b} {errors[b]:+.0%}" for b in both)
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


def fit_file(res: Results, replay_folder: str) -> str:
    """The step-time fit a replay folder's runs used (its file, as the replays record it)."""
    return res.serving[replay_folder][0].sim["step_model"]["file"]


def main_fit(res: Results) -> str:
    """The fit section 6b checks first (the H200's): the one the simulated screen replays with, as
    the screen is what section 6 reads the simulator for; without a screen, the first validation
    folder's. Every other fit is another machine's, checked in a block of its own."""
    screen = res.one_with_role("screen")
    return fit_file(res, screen or res.with_role("replay-validation")[0])


def cells_by_fit(res: Results, v: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The validation cells per step-time fit (its file), in the order the replay folders come."""
    return dict(tuple(v.groupby(v["replay folder"].map(lambda name: fit_file(res, name)), sort=False)))


def fit_and_gpu(res: Results, v: pd.DataFrame) -> tuple[dict[str, Any], str]:
    """The step model that made the replays in ``v`` (as their records hold it) and its host's GPU."""
    sm = next(r.sim["step_model"] for name in v["replay folder"].unique() for r in res.serving[name])
    gpu = " / ".join(g.get("name", "?") for g in (sm.get("host") or {}).get("gpu", []))
    return sm, gpu


def replayed_elsewhere(res: Results, sm: dict[str, Any], v: pd.DataFrame) -> tuple[str, ...]:
    """The machines (boot ids) whose GPU runs ``v`` replays but the fit ``sm`` was not made on: empty
    where every replayed run comes from the fit's own machine (runs it did not see), else the check
    is how the fit carries to another machine of its kind."""
    fitted_on = set((sm.get("host") or {}).get("machine_boot_ids", []))
    return tuple(dict.fromkeys(h for folder in dict.fromkeys(v["folder"]) for h in res.studies[folder].hosts
                               if h not in fitted_on))  # one machine's two folders count once


def held_out_runs_text(res: Results, sm: dict[str, Any], v: pd.DataFrame) -> str:
    """Whose runs a fit of another machine is checked on: its own machine's, or another's."""
    elsewhere = replayed_elsewhere(res, sm, v)
    if not elsewhere:
        return "on that machine's runs its calibration did not see"
    whose = "another machine's" if len(elsewhere) == 1 else f"{len(elsewhere)} other machines'"
    return f"on {whose} runs ({boot_ids_text([h[:8] for h in elsewhere])}), which its calibration never saw"


def error_span(errors: pd.Series) -> str:
    """'-43% to -9%', or one value where the ends agree as printed."""
    low, high = f"{errors.min():+.0%}", f"{errors.max():+.0%}"
    return low if low == high else f"{low} to {high}"


def other_host_summary(res: Results, v_all: pd.DataFrame) -> list[str]:
    """Section 7's line per fit of another machine: its held-out errors, paced and at rate inf
    (``v_all``: ``rules.replay_validation``'s cells)."""
    if v_all.empty:
        return []
    by_fit = cells_by_fit(res, v_all)
    by_fit.pop(main_fit(res))
    lines = []
    for fit, v in by_fit.items():
        sm, gpu = fit_and_gpu(res, v)
        paced, flat_out = v[v["rate"] != "inf"], v[(v["rate"] == "inf") & (v["metric"] == THROUGHPUT)]
        parts = [f"{unit_less(metric)} {error_span(paced.loc[paced['metric'] == metric, 'error'])}"
                 for metric in ("TTFT P50 (ms)", "TTFT P99 (ms)") if (paced["metric"] == metric).any()]
        if parts:
            parts[0] = f"at {', '.join(dict.fromkeys(paced['rate']))} req/s, {parts[0]}"
        parts += [f"throughput at rate inf, budget {b}: {e:+.0%}" for b, e in zip(flat_out["budget"], flat_out["error"])]
        lines.append(f"Simulator on another machine ({gpu}, `{Path(fit).name}`), "
                     f"{held_out_runs_text(res, sm, v)}: {'; '.join(parts)} (section 6b).")
    return lines


def error_table(v: pd.DataFrame, mark_outside_range: bool) -> pd.DataFrame:
    """One row per replayed point, one column per metric: "replays' median / GPU median (error)",
    with * where asked and the replays' median lies outside the range of 2 or more GPU runs."""
    def text(row: pd.Series) -> str:
        outside = mark_outside_range and row["runs"] >= 2 and not row["low"] <= row["sim"] <= row["high"]
        return f"{row['sim']:.0f} / {row['real']:.0f} ({row['error']:+.0%})" + (" *" if outside else "")

    wide = v.assign(text=v.apply(text, axis=1)).pivot_table(
        index=["folder", "strategy", "workload", "rate", "budget", "runs"], columns="metric", values="text",
        aggfunc="first", sort=False)[list(REPLAY_METRICS)].reset_index()
    return wide.assign(strategy=wide["strategy"].map(strategy_label))


def replay_section(res: Results, v_all: pd.DataFrame) -> list[Block]:
    """Section 6b from ``v_all``, ``rules.replay_validation``'s cells (computed once per report)."""
    blocks = [heading("6b The replay simulator against the H200")]
    if v_all.empty:
        return blocks + [para("No replay results (`results/replay_*/`): see README, \"Simulating a strategy\".",
                              place="both")]
    main = main_fit(res)
    first = next(name for name in res.with_role("replay-validation") if fit_file(res, name) == main)
    by_fit = cells_by_fit(res, v_all)
    v = by_fit.pop(main)
    runs = res.serving[first]
    sm, cpu = runs[0].sim["step_model"], pd.Series([r.sim["simulation"]["cpu_s"] for r in runs])
    coef = ", ".join(f"{k} {val:.3g}" for k, val in sm["coefficients"].items())
    logs = ", ".join(Path(entry["path"]).name for entry in sm["provenance"]["logs"])
    wide = error_table(v, mark_outside_range=True)
    rank = replay_ranking(v)
    spread = v[v["runs"] >= 3].assign(x=lambda f: f["high"] / f["low"]).groupby("metric")["x"].max()
    a_ttft = v[(v["strategy"] == "prefill-first") & v["metric"].str.startswith("TTFT")].set_index("workload")["error"]
    itl = v[(v["metric"] == "ITL P50 (ms)") & v["folder"].isin(res.folders("task3")) & (v["rate"] == "39")]  # stress
    facts = [
        f"Step model: {sm['formula']}, fitted to {sm['num_steps']} steps of {logs} only (SJF; "
        f"the default and Strategy A held out): {coef} (seconds); R^2 {sm['r2']:.3f}, median relative "
        f"error {sm['median_relative_error']:.1%}; a step's output is applied after the next step "
        f"(lag {sm['output_lag_steps']}); per-step residuals drawn from the fit's (seed 42). Predicted / "
        f"measured total step time in the logs not fitted: {held_out_step_error(res.folder, sm)}.",
        goal_fact(v, rank)
        + f" The simulated value lies inside the GPU runs' range in {int(v['in range'].sum())} of "
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
        table(wide), bullets(facts)] + [block for fit, part in by_fit.items() for block in other_host_blocks(res, fit, part)]


def other_host_blocks(res: Results, fit: str, v: pd.DataFrame) -> list[Block]:
    """A calibration on another machine, checked on that machine's runs that its fit did not see:
    the fit's host and terms, each held-out point's error, and the goals."""
    sm, gpu = fit_and_gpu(res, v)
    host = sm.get("host") or {}
    gpu = gpu or "GPU not recorded"
    wide = error_table(v, mark_outside_range=False)
    coef = ", ".join(f"{k} {val:.3g}" for k, val in sm["coefficients"].items())
    rank = replay_ranking(v)
    return [heading(f"Held out on another machine: {gpu} (`{Path(fit).name}`)", 3),
            para(f"Fitted by `python -m {'harness.calibrate' if 'frontend_ttft_s' in sm else 'harness.step_model fit-study'}` "
                 f"to the step log of study {host.get('study', '?')} "
                 f"(machine boot id {', '.join(host.get('machine_boot_ids', []))}, {' to '.join(host.get('dates_utc', []))}, "
                 f"vLLM {', '.join(host.get('vllm', []))}, {host.get('api_servers', '?')} API servers, budget "
                 f"{host.get('max_num_batched_tokens', '?')}): {sm['num_steps']} steps, R^2 {sm['r2']:.3f}, median "
                 f"relative error {sm['median_relative_error']:.1%}; {sm.get('method', 'least squares')}: {coef} (seconds)"
                 f"{frontend_text(sm)}. {replayed_runs_text(res, sm, v)} "
                 "(`python -m harness.replay_study`). Cells: replays' median / GPU median (relative error)."),
            table(wide),
            bullets([goal_fact(v, rank), ranking_fact(rank), *attainment_fact(res, v)] + fit_limit_facts(res, sm, v))]


def attainment_fact(res: Results, v: pd.DataFrame) -> list[str]:
    """SLO attainment replayed against the GPU's, per point whose runs carry it (the SLO sweeps'):
    the measure a capacity is read from, which the latency cells above only bracket. Paced points
    only: at rate inf every request waits behind the whole load and none meets an SLO."""
    parts = []
    paced = v[v["rate"] != "inf"]
    for (replays, folder, strategy, rate), _ in paced.groupby(["replay folder", "folder", "strategy", "rate"], sort=False):
        pick = lambda rows: rows.loc[(rows["strategy"] == strategy) & (rows["rate"] == rate), "attainment"].dropna()  # noqa: E731
        sim, real = pick(res.folder_rows(replays)), pick(res.folder_rows(folder))
        if sim.empty or real.empty:
            continue
        parts.append(f"{strategy_label(strategy)} at {rate} req/s {span_text(sim * 100, 0)}% against "
                     f"{span_text(real * 100, 0)}%")
    if not parts:
        return []
    return ["SLO attainment (each run's SLO), replays against GPU runs (ranges over runs): " + "; ".join(parts) + "."]


def replayed_runs_text(res: Results, sm: dict[str, Any], v: pd.DataFrame) -> str:
    """Section 6b's sentence on which runs a fit of another machine replays."""
    elsewhere = replayed_elsewhere(res, sm, v)
    if not elsewhere:
        return "Every run of the same machine that the fit did not see is replayed once with its own load and seed"
    return (f"Runs of {machines_text(elsewhere)} of the kind ({boot_ids_text(elsewhere)}), which the fit never saw, are "
            "replayed once each with their own load and seed: how far the fit carries to another machine")


def machines_text(boots: list[str]) -> str:
    """'another machine' or 'N other machines'."""
    return "another machine" if len(boots) == 1 else f"{len(boots)} other machines"


def boot_ids_text(boots: list[str]) -> str:
    """'boot id A' or 'boot ids A, B'."""
    return f"boot id{'s' if len(boots) > 1 else ''} {', '.join(boots)}"


def frontend_text(sm: dict[str, Any]) -> str:
    """The fit's front-end term, where it has one (``harness/calibrate.py``), and how it was measured."""
    if "frontend_ttft_s" not in sm:
        return ""
    runs = sm["frontend_calibration"]["runs"]
    return (f"; front end {sm['frontend_ttft_s'] * 1e3:.1f} ms added to every TTFT: the calibration's paced "
            "run" + "s" * (len(runs) > 1) + " read TTFT P50 "
            + ", ".join(f"{r['gpu_ttft_p50_ms']:.1f} ms on the GPU against {r['replay_ttft_p50_ms']:.1f} ms replayed "
                        "with the step model alone" for r in runs))


def fit_limit_facts(res: Results, sm: dict[str, Any], v: pd.DataFrame) -> list[str]:
    """What the calibration's steps could not teach its fit, from those steps: terms that rose
    together in them (and those fitted below zero), held-out budgets larger than the
    calibration's, where its steps with prompt tokens stop, and smaller ones, whose steps few of
    the calibration's resemble. The step log is read where the fit names it; without it, only
    what the fit file stores."""
    logs = [res.folder.parent / e["path"] for e in sm["provenance"]["logs"]]  # paths from the project's root
    x, y = step_model.fitted_steps(logs, sm["output_lag_steps"]) if all(map(Path.exists, logs)) else (None, None)
    facts = []
    if pairs := sm.get("correlated_terms") or (step_model.correlated_terms(x) if x is not None else []):
        negative = [k for k, val in sm["coefficients"].items() if val < 0 and k != "prefill_in_graph"]
        facts.append("In the calibration's steps " + ", ".join(f"{p['terms'][0]} and {p['terms'][1]} correlate at "
                                                               f"r {p['r']:.3f}" for p in pairs)
                     + ": the fit cannot tell such terms apart"
                     + (f", and put {', '.join(negative)} below zero" if negative else "") + ".")
    if x is None:  # the step log is not beside these results
        return facts
    with_prompt = x[:, 4] > 0
    prompt = with_prompt & ~step_model.in_graph(x[:, 1], x[:, 2], sm.get("graph_tokens", step_model.GRAPH_TOKENS))
    largest, middle = int(x[prompt, 1].max()), float(np.median(x[prompt, 1]))
    budgets = (sm.get("host") or {}).get("token_budgets") or [largest]
    if beyond := sorted({int(b) for b in v["budget"] if b > max(budgets)}):
        below, above = (1e3 * float(np.median(y[prompt & side])) for side in (x[:, 1] <= middle, x[:, 1] > middle))
        facts.append(f"Its steps with prompt tokens (above the graphs) carry at most {largest} of them, and take "
                     f"{below:.1f} ms (median) at up to {middle:.0f} tokens and {above:.1f} ms above ({above / below - 1:+.0%}): "
                     f"what steps at budget {', '.join(map(str, beyond))} cost lies outside the data.")
    smallest = min(budgets)
    for budget in sorted({int(b) for b in v["budget"] if b < smallest}):
        fits = with_prompt & (x[:, 1] <= budget)
        facts.append(f"At budget {budget}, below the calibration's {smallest}, every step with prompt tokens carries at "
                     f"most {budget} of them; {int(fits.sum())} of the calibration's {int(with_prompt.sum())} such steps do"
                     + (f" (median {1e3 * float(np.median(y[fits])):.1f} ms)" if fits.any() else "")
                     + ": the fit's cost of those steps rests on them.")
    return facts
