"""Section 5 of the report, Task 3: the scheduling strategies against vLLM's default, point by point
(tables, figure 3A, factors against the default), and what the runs that kept up resolve. The
folders that measure SLO capacity are left to section 6 (``harness/report/slo.py``).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator

import pandas as pd

from harness.document import Block, bullets, heading, image, para, table
from harness.results import (BUDGET, PREFILL_CHUNK, THROUGHPUT, Results, load_label, point_table, prompt_lengths,
                             gpu_text, provenance_line, share_arriving_behind, shown, sitting_text, span_text, strategy_label,
                             ttft_by_prompt_length)
from harness.rules import (MIN_RUNS_TO_SEPARATE, against_default, kept_up, ratio, round_ratios, separated, separating,
                           spread_factor)
from harness.run_config import cli_flags
from harness.report.slo import capacity_folders
from harness.report.text import factor, lag_sentence, no_results, unit_less


STRATEGY_MOTIVATION = {
    "prefill-first": "Strategy A (the handout's): while any prefill work is pending, a step holds "
                     "only prefills; otherwise only decodes. Expected: lower TTFT, higher ITL.",
    "sjf": "Strategy B1 (ours): the waiting queue ordered by prompt length, shortest first. "
           "Expected: short prompts stop waiting behind long ones; long prompts pay.",
}


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


PAIRED = ("TTFT P50 (ms)", "TTFT P99 (ms)", "ITL P50 (ms)", "ITL P99 (ms)")


def drift_across_rounds(base: pd.DataFrame, rounds: pd.Index, columns: tuple[str, ...]) -> tuple[float, str]:
    """How far the default's own runs moved across ``rounds`` of an interleaved study (highest /
    lowest), in the column where they moved most: the noise floor a pair of strategies measured
    round by round must beat."""
    runs = base[base["round"].isin(rounds)]
    return max((ratio(runs[c].max(), runs[c].min()), c) for c in columns)


def within_rounds(own: pd.DataFrame, base: pd.DataFrame) -> str | None:
    """A strategy against the default round by round of an interleaved study (both runs kept
    up), beside how far the default's own runs drift across those rounds: when the pairs differ
    less than the default does from round to round, the two are not told apart at this point,
    whatever the medians say."""
    pairs = {c: round_ratios(own, base, c) for c in PAIRED}
    rounds = pairs[PAIRED[0]].index
    if rounds.empty:
        return None
    within = max(max(r, 1 / r) for x in pairs.values() for r in x if r > 0)
    drift, column = drift_across_rounds(base, rounds, PAIRED)
    drifted = base[base["round"].isin(rounds)][column]
    listed = "; ".join(f"{unit_less(c)} " + ", ".join(f"{r:.2f}x" for r in x) for c, x in pairs.items())
    verdict = (f"within a round the two differ by at most {factor(within)}, less than the default's own "
               f"{unit_less(column)} moved across these rounds ({span_text(drifted, 1)} ms, "
               f"{factor(drift)}): at this point they are not told apart"
               if within < drift else
               f"within a round they differ by up to {factor(within)}, more than the default's own drift "
               f"across these rounds (up to {factor(drift)}, {unit_less(column)})")
    return (f"Paired within the study's round{'s' if len(rounds) > 1 else ''} "
            f"{', '.join(str(int(r)) for r in rounds)} (strategy / default, runs minutes apart on one "
            f"server): {listed}; {verdict}")


def step_text(part: pd.DataFrame) -> str | None:
    """What the engine's recorder saw per run, by strategy: the mixed steps and the prompt tokens
    a step holding prefill carried, which show how the strategies laid out the same load."""
    facts = [f"{strategy_label(name)}: mixed steps {span_text(g['mixed steps'], 0)}, "
             f"{span_text(g[PREFILL_CHUNK], 0)} prompt tokens per step holding prefill"
             for name, g in part.groupby("strategy", sort=False) if g[PREFILL_CHUNK].notna().any()]
    return ("Engine steps per run (the recorder's counts): " + "; ".join(facts) + ".") if facts else None


HANDOUT_RATE = "8"  # the handout's Task 3 rate (req/s)
HANDOUT_PAIRED = ("TTFT P99 (ms)", "ITL P99 (ms)")  # the handout's question to A: its TTFT gain, its ITL cost
MIN_HANDOUT_ROUNDS = 2  # rounds where both strategies kept up, for an answer at the handout's rate
A_A = ("Every prompt of this load has the same length, so SJF admits in arrival order, as vLLM's "
       "default does: SJF against the default is an A/A comparison here, and how far their runs "
       "differ is this point's noise floor.")


def one_length_points(res: Results, rows: pd.DataFrame) -> set[tuple[str, str, str]]:
    """The (folder, workload, rate) points whose prompts all have one length (the fixed load)."""
    points = rows[["folder", "workload", "rate"]].drop_duplicates().itertuples(index=False)
    return {tuple(p) for p in points if len(prompt_lengths(res.serving[p.folder], p.workload, p.rate)) == 1}


def handout_rate_points(rows: pd.DataFrame) -> Iterator[tuple[tuple[str, str, str], pd.DataFrame]]:
    """Each (folder, workload, rate) point of an interleaved study at the handout's Task 3 rate,
    with its runs that kept up: where the handout's questions are answered."""
    study = kept_up(rows[(rows["rate"] == HANDOUT_RATE) & rows["round"].notna()])
    yield from study.groupby(["folder", "workload", "rate"], sort=False)


def handout_rate_answers(rows: pd.DataFrame, one_length: set[tuple[str, str, str]]) -> list[tuple[str, str]]:
    """The handout's Task 3 questions at its own rate, from the interleaved studies there: what
    Strategy A gains and costs against the default, round by round, set beside a noise floor:
    SJF against the default where the load makes SJF the default's twin (``one_length``: the
    points whose prompts share one length), else the default's own drift across those rounds.
    Each answer is (the finding, the mechanism the engine's steps show)."""
    facts = []
    deviation = lambda x: max(max(r, 1 / r) for r in x)  # noqa: E731 - how far from 1, either way
    for (folder, workload, rate), part in handout_rate_points(rows):
        base, a = part[part["strategy"] == "default"], part[part["strategy"] == "prefill-first"]
        pairs = {c: round_ratios(a, base, c) for c in HANDOUT_PAIRED}
        rounds = pairs[HANDOUT_PAIRED[0]].index
        if base.empty or rounds.empty:
            continue
        text = (f"At the handout's {load_label(rate)} ({folder}, {gpu_text(part['gpu'])}, {workload}, one server "
                f"switching strategy "
                f"run by run): Strategy A / default within each round, TTFT P99 "
                f"{span_text(pairs['TTFT P99 (ms)'], 2)}x and ITL P99 {span_text(pairs['ITL P99 (ms)'], 2)}x")
        own = deviation(pd.concat(pairs.values()))
        twin = part[part["strategy"] == "sjf"]
        if len(rounds) < MIN_HANDOUT_ROUNDS:
            text += (f": {len(rounds)} round with both kept up, too few to answer from (at least "
                     f"{MIN_HANDOUT_ROUNDS})")
        elif (folder, workload, rate) in one_length and not twin.empty:
            noise = deviation(pd.concat([round_ratios(twin, base, c) for c in HANDOUT_PAIRED]))
            text += (f": at most {factor(own)} from even, "
                     + (f"less than SJF against the default on this load, an A/A comparison (up to {factor(noise)}): "
                        "A's gain and cost are not measurable at this rate" if own <= noise else
                        f"more than SJF against the default on this load, an A/A comparison (up to {factor(noise)})"))
        else:
            drift, column = drift_across_rounds(base, rounds, HANDOUT_PAIRED)
            text += (f": at most {factor(own)} from even, "
                     + (f"less than the default's own {unit_less(column)} moved across these rounds "
                        f"({factor(drift)}): A's gain and cost are not measurable at this rate" if own <= drift else
                        f"more than the default's own drift across these rounds (up to {factor(drift)}, "
                        f"{unit_less(column)})"))
        a_chunk, base_chunk = span_text(a[PREFILL_CHUNK], 0), span_text(base[PREFILL_CHUNK], 0)
        facts.append((text + ".", f"A step holding prefill carried {a_chunk} prompt tokens under A and "
                      f"{base_chunk} in the default's mixed steps, about one prompt a step: A's "
                      "prefill-only step takes the place of one mixed step, and the running decodes wait "
                      "for about the same work either way. A's ITL cost shows where prompts queue and its "
                      "prefill-only steps carry several of them (the points at higher rates below)."))
    return facts


def sjf_handout_answers(res: Results, rows: pd.DataFrame,
                        one_length: set[tuple[str, str, str]]) -> list[tuple[str, str]]:
    """The handout's question to Strategy B at its own rate, where prompt lengths differ (on one
    length SJF is the default's twin): what SJF gains and who pays, round by round and by
    prompt-length quartile. Ordering by length moves waiting from long prompts to short ones, so
    a gain in every quartile, the longest too, is not SJF's doing; how many requests could meet
    another in the queue at all (``share_arriving_behind``) says how much there was to reorder.
    ``one_length``: as for ``handout_rate_answers``.
    Each answer is (the finding, the mechanism)."""
    facts = []
    for (folder, workload, rate), part in handout_rate_points(rows):
        base, own = part[part["strategy"] == "default"], part[part["strategy"] == "sjf"]
        pairs = {c: round_ratios(own, base, c) for c in ("TTFT P50 (ms)", "TTFT P99 (ms)")}
        rounds = pairs["TTFT P50 (ms)"].index
        if (folder, workload, rate) in one_length or len(rounds) < MIN_HANDOUT_ROUNDS:
            continue
        runs = [r for r in res.serving[folder] if r.point == (workload, rate) and not r.frontend["lagged"]
                and r.config.strategy_variant in ("sjf", "default")]
        quartiles = ttft_by_prompt_length(runs, workload, rate).set_index(["strategy", "prompt tokens"])
        sjf_p50 = quartiles.loc["sjf", "TTFT P50 (ms)"]  # shortest quartile first
        gain = (sjf_p50 / quartiles.loc["default", "TTFT P50 (ms)"].reindex(sjf_p50.index)).dropna()
        text = (f"Strategy B1 (SJF) at the handout's {load_label(rate)} ({folder}, {gpu_text(part['gpu'])}, "
                f"{workload}): SJF / default within each round, TTFT P50 {span_text(pairs['TTFT P50 (ms)'], 2)}x "
                f"and TTFT P99 {span_text(pairs['TTFT P99 (ms)'], 2)}x; by prompt-length quartile (runs pooled), "
                f"TTFT P50 {', '.join(f'{x:.2f}x' for x in gain)} from the shortest to the longest")
        if (gain < 1).all():
            text += (": every quartile gained, the longest too, where ordering by length would make the "
                     "longest pay: this gain is not SJF's reordering, and stays a lead to re-test")
        elif gain.iloc[0] < 1 <= gain.iloc[-1]:
            text += ": the shortest prompts gained and the longest paid, as ordering by length does"
        behind = pd.Series([share_arriving_behind(r) for r in runs])
        prompts = pd.Series([n for r in runs for n in r.detail.input_lens])
        budget = int(part[BUDGET].iloc[0])
        facts.append((text + ".", f"SJF can reorder only requests that wait together: {span_text(behind * 100, 0)}% "
                      "of a run's requests arrived while an earlier one still had no first token, and a step of "
                      f"{budget} tokens admits about {budget / prompts.mean():.0f} of these prompts "
                      f"({prompts.mean():.0f} tokens on average) at once."))
    return facts


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
                     f"{gpu_text(pd.concat([own, base])['gpu'])}, {sitting_text(pd.concat([own, base])['sitting'])}, {len(own)} / "
                     f"{len(base)} runs against the default): "
                     + (f"too few runs to separate (at least {MIN_RUNS_TO_SEPARATE} a side)"
                        if min(len(own), len(base)) < MIN_RUNS_TO_SEPARATE else
                        f"every run beyond every run on {'; '.join(found)}" if found else "no metric separated")
                     + f". Runs of one strategy differ by up to {factor(spread)} (highest / lowest) in TTFT "
                       f"P50/P99 ({strategy_label(who)}, {unit_less(column)} {span_text(widest, 0)} ms), so "
                       "a TTFT difference smaller than that is not resolved by these runs."
                     + (f" {paired}." if (paired := within_rounds(own, base)) else ""))
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
               para(f"Server flags `{shlex.join(cli_flags(cfg.server_params))}`; a request slower than "
                    f"{cfg.timeout_s} s end to end is a timeout, failures count as +inf "
                    f"latency; mixed and fallback steps from the engine-side recorder (our "
                    f"strategies only); each point's table is in `tables.md`. "
                    f"{provenance_line([r.meta for r in res.runs('task3')])}.")]
    sweeps = capacity_folders(res)  # their runs are read in section 6, as SLO capacity
    rows = rows[~rows["folder"].isin(sweeps)]
    one_length = one_length_points(res, rows)
    for folder in (f for f in res.folders("task3") if f not in sweeps):
        for workload, rate in res.points(folder):
            part = rows[(rows["folder"] == folder) & (rows["workload"] == workload) & (rows["rate"] == rate)]
            title = f"{workload}, {load_label(rate)}" + ("" if "handout-setting" in res.studies[folder].roles else f" ({folder})")
            blocks += [heading(title, 3),
                       table(shown(point_table(part, ["setting", "strategy"]),
                                   (BUDGET, "attainment", "goodput (req/s)")), place="appendix"),
                       image(res.folder, f"{folder}_3A_cdf_{workload}_rate-{rate}.png",
                             f"3A: TTFT and ITL CDFs, {title}, every run")]
            factors = factors_table(part)
            if factors is not None:
                blocks += [para("Against vLLM's default, from runs that kept up:"), table(factors)]
            if steps := step_text(part):
                blocks.append(para(steps))
            if (folder, workload, rate) in one_length and {"sjf", "default"} <= set(part["strategy"]):
                blocks.append(para(A_A))
            if part["lagged"].any():
                blocks.append(para(lag_sentence(part, "this point's lagged runs"), place="both"))
            by_len = ttft_by_prompt_length(res.serving[folder], workload, rate)
            if {"sjf", "sjf-ontime"} & set(part["strategy"]) and not by_len.empty:
                blocks += [heading(f"TTFT by prompt length (quartiles, each strategy's runs pooled): {title}", 4,
                                   place="appendix"), table(shown(by_len), place="appendix")]
    blocks += [heading("Answers from the data", 3),
               bullets([" ".join(answer) for answer in handout_rate_answers(rows, one_length)
                        + sjf_handout_answers(res, rows, one_length)] + task3_answers(rows))]
    failed = int(rows["timeouts"].sum() + rows["failed"].sum())
    blocks.append(para("No request timed out or failed in any Task 3 run." if failed == 0 else
                       f"{failed} requests timed out or failed over all Task 3 runs (per run in "
                       "`task3_runs.csv.xz`); they stay in the percentiles, failures as +inf."))
    return blocks
