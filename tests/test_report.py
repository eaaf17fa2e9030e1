"""The results report (results/REPORT.md and report.pdf) from the committed results, from results
with a task missing, and the rule that no scheduler conclusion comes from a lagged run."""

from __future__ import annotations

import json
import re
import shutil
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import plot_results
from harness import results as layer, rules, step_model
from harness.report import frontend, replay, slo, summary, task2, task3
from harness.document import render_markdown
from harness.provenance import read_json, record_paths
from harness.study_file import Study, read_study, write_study

RESULTS = Path(__file__).resolve().parent.parent / "results"
SECTIONS = ("## 1 Environment", "## 2 Task 1", "## 3 The serving front end", "## 4 Task 2",
            "## 5 Task 3", "## 6 Beyond the handout", "## 6b The replay simulator", "## 7 Summary")


def copy_results(tmp_path: Path) -> Path:
    """The committed results in a scratch folder, so a test never writes into the repository."""
    dst = tmp_path / "results"
    shutil.copytree(RESULTS, dst, ignore=shutil.ignore_patterns("logs", "figures", "REPORT.md", "report.pdf"))
    return dst


def section(text: str, start: str) -> str:
    """One '## ' section of the report, up to the next one."""
    return text.split(start, 1)[1].split("\n## ", 1)[0]


def test_report_from_the_committed_results(tmp_path):
    results = copy_results(tmp_path)
    assert plot_results.main(["--results", str(results), "--pdf"]) == 0
    text = (results / "REPORT.md").read_text()
    for heading in SECTIONS:
        assert heading in text

    task1 = json.loads((results / "task1.json").read_text())["methods"]
    assert f"{task1['vllm']['output_tokens_per_s']:.1f} tok/s" in section(text, "## 2 Task 1")
    assert f"{task1['hf-serial']['total_s'] / task1['vllm']['total_s']:.2f}x faster" in text
    assert "13302 (32.6%) are padding" in text and "48.4%" not in text
    assert "dummy (random, real shapes)" in section(text, "## 1 Environment")

    # The front-end finding, counted straight from the files' frontend blocks.
    runs = [r for r in (read_json(p) for f in sorted(results.iterdir()) for p in record_paths(f))
            if "frontend" in r and not r.get("simulated")  # GPU runs: no fit file, no replay
            and r["config"]["task"] != "calibration"]  # a calibration's runs log steps, not a task's answers
    lagged = [r["frontend"]["token_gaps"]["completeness"] for r in runs if r["frontend"]["lagged"]]
    front = section(text, "## 3 The serving front end")
    assert f"The front end lagged in {len(lagged)} of {len(runs)} serving runs" in front
    assert "ITL is measured per streamed chunk" in front
    # What the results show, not the history of earlier claims, issues or machines.
    for history in ("Withdrawn", "earlier report", "SJF beating the default on the fixed-length load",
                    "\"unordered\"", "sittings task2-16"):
        assert history not in text
    for md in (text, (results / "tables.md").read_text()):
        assert not re.search(r"#\d|\bissue\b|\blease", md, re.IGNORECASE)
    one = [r for r in runs if r["config"].get("api_server_count", 1) == 1]
    cores = [r["frontend"]["api_server_cores_total"] for r in one if r["frontend"]["api_server_cores_total"]]
    assert f"the API server used {min(cores):.2f}-{max(cores):.2f} of a core" in front
    # The front-end study (the folders whose study file says so, not the budget sweep): several API
    # servers against one, one client, from the roles recorded.
    lift = [f.parent for f in sorted(results.glob("*/study.json"))
            if "frontend-study" in json.loads(f.read_text()).get("study", {}).get("roles", [])]
    assert {f.name for f in lift} == {"task2_api-1", "task2_api-4", "task2_api-8"}
    study = [json.loads(p.read_text()) for f in lift for p in sorted(f.glob("*_run-*.json"))]
    spread = [r for r in study
              if r["config"].get("api_server_count", 1) > 1 and r["config"]["client_processes"] == 1]
    several = [r["frontend"] for r in spread if r["config"]["rate"] == "inf"]
    busiest = [f["server_cores_by_role"]["api_server"] for f in several]
    engine = [f["server_cores_by_role"]["engine_core"] for f in several]
    lift = front.split("### Lifting the front end", 1)[1]
    assert f"the busiest of them used {min(busiest):.2f}-{max(busiest):.2f} of a core" in lift
    assert f"the engine core ({min(engine):.2f}-{max(engine):.2f} of a core)" in lift
    kept = sum(not f["lagged"] for f in several)
    assert f"completeness stayed below 0.99 in {len(several) - kept} of {len(several)} of these runs" in lift
    assert "These runs are shown, not compared" in lift  # two clients started seconds apart
    # Below saturation (Poisson rates, Task 2 and Task 3 alike) the same count, from the files.
    # The line counts Task 2 and Task 3 runs, a folder's group as its study file gives it.
    grouped = {f.name: read_study(f).task for f in results.iterdir() if (f / "study.json").is_file()}
    below = [r["frontend"] for f in sorted(results.iterdir()) if grouped.get(f.name) in ("task2", "task3")
             for r in (read_json(p) for p in record_paths(f))
             if "frontend" in r and not r.get("simulated") and r["config"]["rate"] not in ("inf", None)
             and r["config"].get("api_server_count", 1) > 1 and r["config"]["client_processes"] == 1]
    assert f"kept up in {sum(not f['lagged'] for f in below)} of {len(below)} runs" in lift

    # The report is the analysis; every table, each setting's and point's among them, is in its
    # appendix, tables.md, under the same headings.
    appendix = (results / "tables.md").read_text()
    tables = lambda md: {line for line in md.splitlines() if line.startswith("|")}  # noqa: E731
    assert tables(text) < tables(appendix)
    assert "### task2_api-4_budgets: 4 API servers, 1 client, rate inf" in section(appendix, "## 4 Task 2")
    assert "#### TTFT by prompt length" in section(appendix, "## 5 Task 3")
    assert "task2_api-4_budgets: 4 API servers" not in "".join(h for h in text.splitlines() if h.startswith("#"))
    # Task 2's questions are answered from the rate-16 study, whose runs kept up (budgets
    # alternating on one server), each answer with every budget's runs as the files give them;
    # the sweeps whose runs lagged get tables only (no saturation rule at rate inf).
    task2_text = section(text, "## 4 Task 2")
    assert "| lagged" in section(appendix, "## 4 Task 2") and not tables(task2_text)
    assert "Saturation rule" not in task2_text and "there are none yet" not in task2_text
    study = [r for r in runs if (r["config"].get("study") or {}).get("name") == "task2-rate16"]
    assert len(study) == 15 and not any(r["frontend"]["lagged"] for r in study)
    itl = [r["summary"]["itl_ms"]["p99"] for r in study if r["config"]["token_budget"] == 512]
    lines = task2_text.splitlines()
    rate16 = lines[next(i for i, b in enumerate(lines) if b.startswith("- task2_api-4_rate16:")):]
    line = next(b for b in rate16 if b.startswith("- ITL P99 (theory: rises"))
    assert f"512: {min(itl):.1f}-{max(itl):.1f}" in line and "with the theory: 512 < 1024, 2048, 4096, 8192" in line
    assert ("For chat (rule: ITL P99 within 10% of the best budget's median, then the lowest TTFT P99): 512."
            in task2_text)
    task3_text = section(text, "## 5 Task 3")
    assert "No scheduler conclusion from this point" in task3_text
    for point in task3_text.split("\n### ")[1:]:  # a comparison where a point's runs kept up and a strategy ran
        compared = "(task3_api-4" in point.split("\n", 1)[0] and "Strategy" in point
        assert ("Against vLLM's default" in point) == compared
    for link in ("figures/task2_A1_latency.png", "figures/task2_A2_throughput.png",
                 "figures/task3_3A_cdf_fixed_rate-40.png", "figures/task3_api-4_heavy_pareto.png"):
        assert f"]({link})" in text and (results / link).is_file()
    assert (results / "task2_runs.csv.xz").is_file() and (results / "task3_api-4_heavy_runs.csv.xz").is_file()

    pdf = results / "report.pdf"
    assert pdf.read_bytes()[:4] == b"%PDF" and pdf.stat().st_size < 2 * 2**20


@pytest.mark.parametrize("task", ["task2", "task3"])
def test_a_missing_task_is_reported_not_invented(tmp_path, task):
    results = copy_results(tmp_path)
    for folder in [results / task, *results.glob(f"{task}_*/")]:  # the task's every setting
        shutil.rmtree(folder)
    assert plot_results.main(["--results", str(results)]) == 0
    text = (results / "REPORT.md").read_text()
    for heading in SECTIONS:
        assert heading in text
    number = task[-1]
    gone = section(text, f"## {int(number) + 2} Task {number}")
    assert f"No Task {number} results" in gone and "|" not in gone
    assert f"Task {number}: no results." in section(text, "## 7 Summary")
    assert ("task2_A" if task == "task2" else "task3_3A") not in text


def test_an_empty_results_folder_gives_a_report_of_gaps(tmp_path):
    assert plot_results.main(["--results", str(tmp_path)]) == 0
    text = (tmp_path / "REPORT.md").read_text()
    assert "No results files" in text and "No serving results" in text
    for number in ("1", "2", "3"):
        assert f"No Task {number} results" in text


def test_task2_answers_come_only_from_runs_that_kept_up():
    """The committed Task 2 rows give no answer (19 of 20 lagged). The same rows, read as if
    every run had kept up, give the saturation budget computed here from the files' own
    throughput (the smallest budget within 5% of the best median at rate inf)."""
    rows = layer.run_rows(layer.load_runs(RESULTS / "task2"))
    answers = task2.task2_answers(rows)
    assert len(answers) == 1 and answers[0].startswith("No scheduler conclusion")

    by_budget: dict[int, list[float]] = {}
    for path in (RESULTS / "task2").glob("*_rate-inf_run-*.json"):
        run = json.loads(path.read_text())
        budget = run["config"]["server_params"]["max_num_batched_tokens"]
        by_budget.setdefault(budget, []).append(run["summary"]["output_throughput_tok_s"])
    medians = {b: statistics.median(v) for b, v in by_budget.items()}
    best = max(medians.values())
    saturated = min(b for b, v in medians.items() if v >= 0.95 * best)
    answers = task2.task2_answers(rows.assign(lagged=False))
    assert not any(a.startswith("No scheduler conclusion") for a in answers)
    inf = next(a for a in answers if "rate inf" in a)
    assert f"best median, {best:.1f} tok/s): {saturated}" in inf
    assert "Chat rule" in next(a for a in answers if "rate 16" in a)


def test_task3_answers_claim_only_what_every_run_separates():
    """A strategy is said to differ from the default on a metric only when every one of its runs
    (at least 3) lies beyond every run of the default's, recomputed here from the files."""
    rows = layer.run_rows(layer.load_runs(RESULTS / "task3_api-4"))
    point = {"workload": "fixed", "rate": "39"}
    per_run: dict[str, list[float]] = {}
    for path in (RESULTS / "task3_api-4").glob("*_fixed_rate-39_run-*.json"):
        run = json.loads(path.read_text())
        per_run.setdefault(run["config"]["scheduler"], []).append(run["summary"]["itl_ms"]["p99"])
    a, base = per_run["prefill-first"], per_run["default"]
    apart = min(a) > max(base) or max(a) < min(base)
    answers = task3.task3_answers(rows)
    line = next(x for x in answers if x.startswith("Strategy A") and "fixed at rate 39" in x)
    assert ("ITL P99" in line) == apart and len(a) >= 3 and len(base) >= 3

    # The same default runs against themselves separate on nothing; two runs a side are too few.
    same = rows[(rows["strategy"] == "default") & (rows["workload"] == point["workload"])]
    twin = pd.concat([same, same.assign(strategy="sjf")])
    assert "no metric separated" in task3.task3_answers(twin)[0]
    few = pd.concat([same, same.assign(strategy="sjf", **{"ITL P99 (ms)": same["ITL P99 (ms)"] * 5})])
    assert "every run beyond every run on ITL P99" in task3.task3_answers(few)[0]
    assert "too few runs" in task3.task3_answers(few.iloc[1:])[0]
    assert task3.separations(twin) == [] and task3.separations(few) == ["Strategy B1: SJF ITL P99 5.00x"]
    thrice = pd.concat([same, same.assign(strategy="sjf", **{"ITL P99 (ms)": same["ITL P99 (ms)"] * 3})])
    assert task3.separations(pd.concat([few, thrice.assign(rate="40")])) == [
        "Strategy B1: SJF ITL P99 3.00-5.00x (2 points)"]  # the summary's range over points


def test_the_handout_rate_answer_pairs_runs_within_rounds_recomputed_from_the_files():
    """At 8 req/s the study's answer pairs Strategy A with the default round by round (both kept
    up) and compares that with SJF against the default, an A/A pair on a one-length load; every
    figure is recomputed here from the run files and the study's order."""
    folder = RESULTS / "task3_api-4_rate8"
    order = json.loads((folder / "study.json").read_text())["order"]
    runs = {(o["strategy"], o["round"]): json.loads((folder / o["file"]).read_text()) for o in order}
    up = {key: run for key, run in runs.items() if not run["frontend"]["lagged"]}
    rounds = sorted(r for (name, r) in up if name == "prefill-first" and ("default", r) in up)
    p99 = lambda name, r, metric: up[(name, r)]["summary"][metric]["p99"]  # noqa: E731
    ttft = [p99("prefill-first", r, "ttft_ms") / p99("default", r, "ttft_ms") for r in rounds]
    itl = [p99("prefill-first", r, "itl_ms") / p99("default", r, "itl_ms") for r in rounds]
    rows = layer.run_rows(layer.load_runs(folder))
    points = {("task3_api-4_rate8", "random-1024in-256out", "8")}
    [(finding, mechanism)] = task3.handout_rate_answers(rows, points)
    assert f"TTFT P99 {min(ttft):.2f}-{max(ttft):.2f}x and ITL P99 {min(itl):.2f}-{max(itl):.2f}x" in finding
    twin = [p99("sjf", r, m) / p99("default", r, m) for r in rounds for m in ("ttft_ms", "itl_ms")
            if ("sjf", r) in up]
    own, noise = max(max(x, 1 / x) for x in ttft + itl), max(max(x, 1 / x) for x in twin)
    assert f"at most {own:.2f}x from even" in finding and f"A/A comparison (up to {noise:.2f}x)" in finding
    assert ("not measurable" in finding) == (own <= noise)
    chunks = [runs[("prefill-first", r)]["engine"]["scheduler_counts_this_run"] for r in rounds]
    assert all(c["steps"]["mixed"] == 0 and c["steps"]["prefill_only"] > 0 for c in chunks)
    assert "prompt tokens under A" in mechanism
    # Without the one-length fact there is no A/A pair to compare with; outside a study, no pairs at all.
    assert "A/A" not in task3.handout_rate_answers(rows, set())[0][0]
    assert task3.handout_rate_answers(rows.assign(round=None), points) == []


def test_the_handout_rate_answer_on_varied_lengths_sets_a_against_the_defaults_drift():
    """Where prompts differ there is no A/A twin: A's round ratios are set against how far the
    default's own runs moved across those rounds, both recomputed here from the files; a sitting
    with one round where both kept up is too few to answer from."""
    folder = RESULTS / "task3_api-4_rate8_varlen_b"
    order = json.loads((folder / "study.json").read_text())["order"]
    runs = {(o["strategy"], o["round"]): json.loads((folder / o["file"]).read_text())["summary"] for o in order}
    metrics = ("ttft_ms", "itl_ms")
    pairs = [runs[("prefill-first", r)][m]["p99"] / runs[("default", r)][m]["p99"] for r in (1, 2, 3) for m in metrics]
    own = max(max(x, 1 / x) for x in pairs)
    drift = max(max(runs[("default", r)][m]["p99"] for r in (1, 2, 3)) / min(runs[("default", r)][m]["p99"] for r in (1, 2, 3))
                for m in metrics)
    rows = layer.run_rows(layer.load_runs(folder))
    [(finding, _)] = task3.handout_rate_answers(rows, set())
    assert f"at most {own:.2f}x from even" in finding and f"across these rounds ({drift:.2f}x)" in finding
    assert ("not measurable" in finding) == (own <= drift)
    first = layer.run_rows(layer.load_runs(RESULTS / "task3_api-4_rate8_varlen"))
    [(finding, _)] = task3.handout_rate_answers(first, set())
    assert "1 round with both kept up, too few to answer from" in finding


def test_share_arriving_behind_counts_arrivals_before_an_earlier_first_token():
    """Recomputed here pair by pair from one run's arrays: a kept request counts when some earlier
    request (warm-up too) had arrived and not yet had its first token."""
    run = next(r for r in layer.load_runs(RESULTS / "task3_api-4_rate8_varlen_b") if r.config.strategy_variant == "sjf")
    d = run.detail
    kept = layer.kept_indices(d.start_times, run.config.warmup_fraction)
    behind = [i for i in kept if any(d.start_times[j] < d.start_times[i] < d.start_times[j] + d.ttfts[j]
                                     for j in range(len(d.ttfts)) if layer.is_success(d, j))]
    share = layer.share_arriving_behind(run)
    assert share == len(behind) / len(kept) and 0.05 < share < 0.5  # 8 req/s: some, not most


def test_the_handout_rate_sjf_answer_reads_who_pays_by_prompt_length():
    """SJF at 8 req/s on the variable-length load: its round ratios come from the study's files, and
    the verdict follows the quartiles: a gain in every quartile is not SJF's ordering; make SJF's
    longest prompts slower and the answer says the shortest gained and the longest paid."""
    res = layer.Results.load(RESULTS)
    folder = "task3_api-4_rate8_varlen_b"
    rows = res.rows("task3")
    rows = rows[rows["folder"] == folder]
    [(finding, mechanism)] = task3.sjf_handout_answers(res, rows, task3.one_length_points(res, rows))
    order = json.loads((RESULTS / folder / "study.json").read_text())["order"]
    p50 = {(o["strategy"], o["round"]): json.loads((RESULTS / folder / o["file"]).read_text())["summary"]["ttft_ms"]["p50"]
           for o in order}
    paired = [p50[("sjf", r)] / p50[("default", r)] for r in (1, 2, 3)]
    assert f"TTFT P50 {min(paired):.2f}-{max(paired):.2f}x" in finding
    by_len = layer.ttft_by_prompt_length(res.serving[folder], "random-1024in-256out-range0.9", "8")
    by_len = by_len[by_len["strategy"] != "prefill-first"].set_index(["strategy", "prompt tokens"])["TTFT P50 (ms)"]
    gains = (by_len["sjf"] / by_len["default"].reindex(by_len["sjf"].index)).tolist()
    assert ", ".join(f"{g:.2f}x" for g in gains) in finding
    assert ("every quartile gained" in finding) == all(g < 1 for g in gains)
    assert "% of a run's requests arrived while an earlier one" in mechanism

    for run in res.serving[folder]:  # SJF's prompts above the median wait 3x longer
        if run.config.strategy_variant == "sjf":
            d = run.detail
            cut = float(np.median(d.input_lens))
            run.detail = replace(d, ttfts=[t * 3 if n > cut else t for t, n in zip(d.ttfts, d.input_lens)])
    [(finding, _)] = task3.sjf_handout_answers(res, rows, set())
    assert "the shortest prompts gained and the longest paid" in finding
    # On a one-length load SJF is the default's twin: no SJF answer there.
    fixed = res.rows("task3")
    fixed = fixed[fixed["folder"] == "task3_api-4_rate8"]
    assert task3.sjf_handout_answers(res, fixed, task3.one_length_points(res, fixed)) == []


def test_the_slo_tail_reads_the_longest_tenth_of_prompts_from_the_arrays():
    """The tail table's longest-decile maximum TTFT is recomputed here from one run's arrays."""
    folder = RESULTS / "task3_api-4_heavy"
    runs = layer.load_runs(folder)
    rows = layer.run_rows(runs)
    run = runs[0]
    detail, kept = run.detail, layer.kept_indices(run.detail.start_times, run.config.warmup_fraction)
    bar = np.percentile([detail.input_lens[i] for i in kept], 90)
    longest = [detail.ttfts[i] * 1e3 for i in kept if detail.input_lens[i] >= bar]
    assert rows.iloc[0]["longest decile TTFT max (ms)"] == pytest.approx(max(longest))
    table = slo.tail_table(rows)
    assert len(table) == rows.groupby(["strategy", "rate"]).ngroups
    fact = slo.tail_fact(rows)
    assert fact is None or "longest tenth of prompts" in fact


def test_replay_validation_recomputed_from_the_files():
    """Section 6b's errors: the median of each point's replays (3 residual seeds) against the median
    of the GPU runs of the same load (one client, kept up), recomputed here straight from the JSON
    files; and the
    ranking of Strategy A against the default from the same numbers."""
    v = rules.replay_validation(layer.Results.load(RESULTS))
    v = v.set_index(["folder", "strategy", "workload", "rate", "metric"])
    checked = 0
    for sim_path in sorted((RESULTS / "replay_api-4").glob("*_run-1.json.xz")):
        sim = read_json(sim_path)
        cfg = sim["config"]
        replays = [read_json(p) for p in sorted(sim_path.parent.glob(sim_path.name.replace("run-1", "run-*")))]
        assert len(replays) == 3 and len({r["simulation"]["residual_seed"] for r in replays}) == 3
        assert sim["simulated"] and sim["step_model"]["provenance"]["logs"][0]["path"].endswith("_sjf.csv.xz")
        for folder in ("task2_api-4", "task3_api-4"):
            real = [r for r in map(lambda p: json.loads(p.read_text()), (RESULTS / folder).glob("*_run-*.json"))
                    if (r["config"]["scheduler"], r["config"]["workload"], r["config"]["rate"]) ==
                    (cfg["scheduler"], cfg["workload"], cfg["rate"]) and r["config"].get("client_processes", 1) == 1
                    and not r["frontend"]["lagged"]]
            if not real:
                continue
            for metric, (block, key) in layer.METRICS.items():
                median = statistics.median(r["summary"][block][key] for r in real)
                row = v.loc[(folder, cfg["scheduler"], cfg["workload"], cfg["rate"], metric)]
                simulated = statistics.median(r["summary"][block][key] for r in replays)
                assert row["runs"] == len(real) and row["real"] == pytest.approx(median)
                assert row["replays"] == 3 and row["error"] == pytest.approx(simulated / median - 1)
            checked += 1
    assert checked == 9  # task3_api-4_heavy pairs with replay_api-4_heavy, not read here
    rank = rules.replay_ranking(v.reset_index())
    rank = rank[rank["strategy"] == "prefill-first"].set_index(["workload", "metric"])
    a, d = (v.loc[("task3_api-4", s, "fixed", "39", "ITL P99 (ms)")] for s in ("prefill-first", "default"))
    assert rank.loc[("fixed", "ITL P99 (ms)"), "same"] == ((a["sim"] > d["sim"]) == (a["real"] > d["real"]))


def test_another_machine_s_fits_are_reported_with_their_front_end_and_limits():
    """Section 6b per fit of another machine: the front-end term and the paced run it came from as
    the fit file holds them, the pair of terms its calibration could not separate, the budget
    beyond the calibration's steps (read from the step log), and section 7's line per fit."""
    res = layer.Results.load(RESULTS)
    text = render_markdown(replay.replay_section(res, rules.replay_validation(res)))
    fit = json.loads((RESULTS / "steplogs/qwen3-0.6b_api-4_h100-7bb362be_bounded-frontend.fit.json").read_text())
    (paced,) = fit["frontend_calibration"]["runs"]
    assert (f"front end {fit['frontend_ttft_s'] * 1e3:.1f} ms added to every TTFT" in text
            and f"{paced['gpu_ttft_p50_ms']:.1f} ms on the GPU against {paced['replay_ttft_p50_ms']:.1f} ms" in text)
    assert "decode_requests and context_tokens correlate at r 0.999" in text
    assert "carry at most 2046 of them" in text and "what steps at budget 8192 cost lies outside the data" in text
    # One block per fit of another machine: the H100s 05d7de6c, 303e4375, 1bb4be6f and 7bb362be (two
    # fits) replayed that machine's runs; e7838961's two fits (0.6B and 8B), a822ba02's 8B fit and
    # 22db620a's 0.6B fit replayed other machines'.
    assert text.count("Held out on another machine: NVIDIA H100") == 9
    lines = replay.other_host_summary(res, rules.replay_validation(res))
    first = [line for line in lines if "7bb362be" in line]
    assert len(lines) == 9 and len(first) == 2
    assert all("budget 8192" in line and "at 30 req/s" in line for line in first)
    # The second machine's fit (budgets 2048 and 8192) against held-out budgets below them: how few
    # of its steps with prompt tokens are as small as budget 512's, counted from its step log.
    fit2 = json.loads((RESULTS / "steplogs/qwen3-0.6b_api-4_h100-05d7de6c_budgets.fit.json").read_text())
    x, _ = step_model.fitted_steps([RESULTS.parent / e["path"] for e in fit2["provenance"]["logs"]], fit2["output_lag_steps"])
    prompt = x[:, 4] > 0
    assert (f"{int((prompt & (x[:, 1] <= 512)).sum())} of the calibration's {int(prompt.sum())} such steps do"
            in text.split("qwen3-0.6b_api-4_h100-05d7de6c_budgets.fit.json", 1)[1])


def test_a_fit_replaying_another_machine_s_runs_says_so_with_their_attainment():
    """A fit checked on runs of a machine it was not made on (the second steady sitting's fit on the
    first sitting's runs) is named a transfer, with that machine's boot id from the run files, in
    section 6b and section 7; its SLO attainment, replays against GPU runs, is read from the files."""
    res = layer.Results.load(RESULTS)
    v = rules.replay_validation(res)
    text = render_markdown(replay.replay_section(res, v))
    block = text.split("`qwen3-0.6b_api-4_h100-slo-steady-b.fit.json`)", 1)[1].split("\n### ", 1)[0]
    fit = json.loads((RESULTS / "steplogs/qwen3-0.6b_api-4_h100-slo-steady-b.fit.json").read_text())
    gpu_runs = [read_json(p) for p in sorted((RESULTS / "slo_api-4_heavy_steady").glob("*_run-*.json"))]
    boots = {r["meta"]["machine_boot_id"] for r in gpu_runs}
    assert len(boots) == 1 and not boots & set(fit["host"]["machine_boot_ids"])
    third = json.loads((RESULTS / "slo_api-4_heavy_steady_c" / "default_mnbt-2048_rate-52.3_run-1.json").read_text())
    elsewhere = {*boots, third["meta"]["machine_boot_id"]}  # the first sitting's machine, and the third's
    sentence = block.split("Runs of 2 other machines of the kind (boot ids ", 1)[1].split("), which the fit never saw", 1)[0]
    assert len(elsewhere) == 2 and set(sentence.split(", ")) == elsewhere
    assert "Every run of the same machine" not in block
    replays = [read_json(p) for p in sorted((RESULTS / "replay_slo_heavy_steady_heldout").glob("*.json.xz"))]
    f_high = [r for r in replays if r["config"]["scheduler"] == "sjf-ontime" and r["config"]["rate"] == 86.7]
    sim = sorted(r["summary"]["slo_attainment"]["ttft:500 tpot:50"]["attainment"] for r in f_high)
    assert len(sim) == 3
    sim_text = f"{sim[0]:.0%}" if f"{sim[0]:.0%}" == f"{sim[-1]:.0%}" else f"{sim[0]:.0%}-{sim[-1]:.0%}"
    assert f"late requests last (wait_bound_s 5) at 86.7 req/s {sim_text.replace('%', '')}% against" in block
    summary = [line for line in replay.other_host_summary(res, v) if "slo-steady-b" in line]
    assert len(summary) == 1 and "on 2 other machines' runs (boot ids " in summary[0]
    assert all(f"{boot[:8]}" in summary[0] for boot in elsewhere)


def test_section_6b_leads_with_the_screen_s_fit_whatever_the_folders_are_called():
    """The fit section 6b checks first is the one the simulated screen replays with (the H200's),
    read from the replay files: a validation folder of another machine whose name sorts first
    (replay_8b_...) does not take its place, and gets a block of its own."""
    res = layer.Results.load(RESULTS)
    screen = next((RESULTS / res.one_with_role("screen")).glob("*.json.xz"))
    assert replay.main_fit(res) == read_json(screen)["step_model"]["file"]
    assert sorted(res.with_role("replay-validation"))[0].startswith("replay_8b_heavy_steady")
    text = render_markdown(replay.replay_section(res, rules.replay_validation(res)))
    main = text.split("\n### ", 1)[0]
    assert "qwen3-8b" not in main
    assert all(f"### Held out on another machine: NVIDIA H100 80GB HBM3 (`qwen3-8b_api-4_h100-{fit}" in text
               for fit in ("capacity", "slo-steady.fit"))


def test_simulated_screen_capacity_recomputed_from_the_files():
    """The screen's SLO capacity of the default (fixed load, the tight pair): mean attainment over
    the replays per rate, straight from the committed files, linear between the last rate that
    meets 90% and the next; the report's section states it, marked simulated."""
    by_rate: dict[float, list[float]] = {}
    for path in sorted((RESULTS / layer.Results.load(RESULTS).one_with_role("screen")).glob("default_fixed_*.json.xz")):
        run = read_json(path)  # the attainment each replay stores (no arrays kept)
        assert run["simulated"] and run["config"]["goodput"] == "ttft:500 tpot:50"
        by_rate.setdefault(float(run["config"]["rate"]), []).append(
            run["summary"]["slo_attainment"]["ttft:200 tpot:25"]["attainment"])
    rates = sorted(by_rate)
    assert len(rates) >= 3 and all(len(v) == 3 for v in by_rate.values())
    assert any(len(set(v)) > 1 for v in by_rate.values())  # the residual seeds make the replays differ
    mean = [statistics.mean(by_rate[r]) for r in rates]
    i = max(k for k, a in enumerate(mean) if a >= 0.9)
    assert i < len(rates) - 1  # the tight pair binds inside the grid
    capacity = rates[i] + (mean[i] - 0.9) / (mean[i] - mean[i + 1]) * (rates[i + 1] - rates[i])
    res = layer.Results.load(RESULTS)
    text = render_markdown(slo.screen_section(res, *slo.screen_tables(res)))
    assert "Simulated screen" in text and "not a result" in text
    rows = [line for line in text.splitlines() if line.startswith("|")]
    cells = [c for c in ([x.strip() for x in line.split("|")[1:-1]] for line in rows)  # capacity: 2nd table
             if c[:3] == ["ttft:200 tpot:25", "fixed", layer.strategy_label("default")]][-1]
    assert cells[3] == f"{capacity:.1f}" and cells[-2] == "1.00x" and cells[-1] == "1.00-1.00x"
    lo, hi = map(float, cells[4].split("-"))  # the bootstrap interval holds the capacity of the means
    assert lo <= capacity <= hi and lo < hi
    assert "Simulated screen" in (RESULTS / "REPORT.md").read_text()


def test_capacity_interval_is_a_bootstrap_over_the_runs_of_each_rate():
    """Identical runs leave no spread (30 + 0.1 / 0.5 x 10 = 32 req/s); runs that differ give an
    interval around the capacity of their means, within what the extreme means allow."""
    same = pd.DataFrame({"rate": [30.0] * 3 + [40.0] * 3, "attainment": [1.0] * 3 + [0.5] * 3})
    assert (rules.boot_capacities(same, 200, np.random.default_rng(0)) == 32.0).all()
    spread = same.assign(attainment=[1.0, 1.0, 1.0, 0.2, 0.5, 0.8])
    draws = rules.boot_capacities(spread, 2000, np.random.default_rng(0))
    lo, hi = np.percentile(draws, [2.5, 97.5])
    assert lo < 32.0 < hi and draws.min() >= 31.25 - 1e-9 and draws.max() <= 35.0 + 1e-9
    assert rules.interval_text(draws) == f"{lo:.1f}-{hi:.1f}"
    assert rules.interval_text(np.array([31.0, np.nan])) == "n/a"  # a resample met the SLO nowhere


def test_a_ratio_whose_base_resampled_to_zero_has_no_upper_end():
    """At a rate where the default met the SLO for no request in some resamples, the ratio's draws
    include infinity: the interval keeps its lower end and is open above (percentiles of such
    draws read NaN), and is n/a where even its lower end is infinite."""
    draws = np.concatenate([np.linspace(1.0, 3.0, 90), np.full(10, np.inf)])
    assert rules.interval_text(draws, 2, "x") == f"{np.percentile(draws, 2.5):.2f}x or more"
    assert rules.interval_text(np.concatenate([np.full(99, np.inf), [1.0]]), 2, "x") == "n/a"
    assert rules.interval_text(np.linspace(1.0, 3.0, 100), 2, "x") == "1.05-2.95x"


def test_a_capacity_over_its_grid_has_an_interval_open_at_the_top():
    """Where every rate met the SLO the capacity is the top rate or more, and so is each resample
    that met it everywhere: the interval has a lower end only, not a top rate read as its upper end."""
    att = pd.DataFrame({"slo": "s", "workload": "w", "strategy": "default", "run": [1, 2, 3] * 2,
                        "rate": [25.4] * 3 + [29.4] * 3, "attainment": [1.0, 1.0, 1.0, 0.92, 0.98, 0.96]})
    caps = rules.capacity_table(att, 400, paired=False)
    assert caps["grid"].iloc[0] == "over" and caps["text"].iloc[0] == ">=29"
    assert caps["95% interval"].iloc[0] == "29.4 or more"
    crossing = rules.capacity_table(att.assign(attainment=[1.0, 1.0, 1.0, 0.8, 0.85, 0.95]), 400, paired=False)
    assert crossing["grid"].iloc[0] == "" and "or more" not in crossing["95% interval"].iloc[0]


def budget_sweep_at_rate_inf() -> tuple[pd.DataFrame, dict[int, list[float]]]:
    """The corrected budget sweep's rows, and its runs' throughput per budget straight from the files."""
    folder = RESULTS / "task2_api-4_budgets"
    per_budget: dict[int, list[float]] = {}
    for path in folder.glob("*_rate-inf_run-*.json"):
        run = json.loads(path.read_text())
        per_budget.setdefault(run["config"]["server_params"]["max_num_batched_tokens"], []).append(
            run["summary"]["output_throughput_tok_s"])
    return layer.run_rows(layer.load_runs(folder)), per_budget


def test_rate_inf_capacity_names_the_order_and_what_set_the_pace():
    """The budget sweep at rate inf: the throughput order of the medians and the budgets whose
    every run lies beyond all others', recomputed from the files; the engine core is named only
    while API servers, client and GPU all had slack."""
    rows, per_budget = budget_sweep_at_rate_inf()
    order = sorted(per_budget, key=lambda b: statistics.median(per_budget[b]))
    steps = json.loads((RESULTS / layer.BUDGET_STEPS_FILE).read_text())
    answer = task2.capacity_answer("sweep", rows, steps)
    assert f"throughput by median {' < '.join(map(str, order))}" in answer
    slowest, fastest = order[0], order[-1]
    if max(per_budget[slowest]) < min(min(v) for b, v in per_budget.items() if b != slowest):
        assert f"every run of {slowest} lies below" in answer
    if min(per_budget[fastest]) > max(max(v) for b, v in per_budget.items() if b != fastest):
        assert f"every run of {fastest} lies above" in answer
    assert "by elimination" in answer and "CUDA graphs" in answer
    busy = rows.assign(**{layer.BUSIEST_API: 0.95})  # an API server at a full core held the engine back
    assert task2.capacity_answer("sweep", busy, None) is None
    gpu_bound = rows.assign(**{layer.GPU_UTIL: 95.0})  # the GPU, not the engine core, may set the pace
    assert "by elimination" not in task2.capacity_answer("sweep", gpu_bound, None)
    assert task2.capacity_answer("sweep", rows[rows[layer.BUDGET] == 2048], steps) is None  # one budget


def test_graph_steps_sentence_reads_the_share_and_its_order():
    steps = {"config": {"graph_tokens": 512}, "budgets": [
        {"max_num_batched_tokens": b, "steps": n, "share_over_graph": share}
        for b, n, share in ((512, 300, 0.0), (1024, 200, 0.8), (2048, 150, 0.5), (4096, 120, 0.2))]}
    fits = pd.Series({512: 9.0, 1024: 6.0, 2048: 10.0, 4096: 14.0})
    text = task2.graph_steps_sentence(fits, steps)
    assert "80% at 1024, 50% at 2048, 20% at 4096" in text and "none at 512 (300 steps)" in text
    assert "the fewer such steps, the faster (rank correlation -1.00 over 3 budgets)" in text
    unordered = pd.Series({512: 9.0, 1024: 12.0, 2048: 10.0, 4096: 14.0})
    assert "does not order" in task2.graph_steps_sentence(unordered, steps)
    assert task2.graph_steps_sentence(fits[[512, 1024, 2048]], steps) == ""  # two budgets above 512


def test_task2_verdict_on_unordered_throughput_counts_the_separated_pairs():
    """Whether rate-inf throughput is ordered by the budget or noise, from the sweep: the pairs of
    budgets whose runs separate, recomputed from the files; no verdict where an API server was
    saturated, and the latency claims stay open without a Poisson-rate sweep that kept up."""
    rows, per_budget = budget_sweep_at_rate_inf()
    pairs = [(a, b) for a in per_budget for b in per_budget if a < b]
    apart = sum(max(per_budget[a]) < min(per_budget[b]) or max(per_budget[b]) < min(per_budget[a]) for a, b in pairs)
    verdicts = frontend.task2_verdicts(rows)
    assert f"{apart} of {len(pairs)} pairs of budgets separate" in verdicts[0]
    assert ("The order is real" in verdicts[0]) == (apart > 0)
    assert "still open" in verdicts[-1]
    assert frontend.task2_verdicts(rows.assign(**{layer.BUSIEST_API: 0.95})) == []


def test_held_out_budgets_compare_each_replay_with_the_gpu_median():
    """Section 6b's held-out budgets: each replay's throughput against the median of every GPU run
    of its budget, recomputed from the files; the two orders of the budgets as they come out."""
    _, per_budget = budget_sweep_at_rate_inf()
    sim = {}
    for path in (RESULTS / layer.Results.load(RESULTS).one_with_role("budget-replays")).glob("*_run-*.json.xz"):
        run = read_json(path)
        assert run["simulated"] and run["config"]["rate"] == "inf"
        sim[run["config"]["server_params"]["max_num_batched_tokens"]] = run["summary"]["output_throughput_tok_s"]
    both = sorted(set(sim) & set(per_budget))
    assert len(both) >= 3
    errors = {b: sim[b] / statistics.median(per_budget[b]) - 1 for b in both}
    fact = replay.budget_replay_fact(layer.Results.load(RESULTS))
    assert "throughput " + "; ".join(f"{b} {errors[b]:+.0%}" for b in both) in fact
    gpu_order = " < ".join(str(b) for b in sorted(both, key=lambda b: statistics.median(per_budget[b])))
    assert f"the GPU {gpu_order}" in fact
    assert f"The largest miss is at {max(errors, key=lambda b: abs(errors[b]))}." in fact


def test_graph_boundary_sets_the_fit_against_measured_steps_on_each_side(tmp_path):
    """A step log whose steps with prompt tokens cost the fit's extra only above the graph size:
    the fit over-predicts the steps within it by exactly the extra, and is exact above it."""
    coefficients = {"intercept": 0.002, "prefill_tokens": 1e-5, "decode_requests": 1e-4,
                    "context_tokens": 0.0, "has_prefill": 0.01}
    rows = [(300, 10), (100, 50), (2000, 10), (0, 40)] * 5  # prompt tokens, decoding requests
    seconds = [0.002 + 1e-5 * p + 1e-4 * d + (0.01 if p + d > 512 else 0.0) for p, d in rows]
    (tmp_path / "steplogs").mkdir()
    pd.DataFrame({"prefill_tokens": [p for p, _ in rows], "decode_requests": [d for _, d in rows],
                  "decode_tokens": [d for _, d in rows], "context_tokens": 0,
                  "num_requests": [d + (p > 0) for p, d in rows], "step_time_us": [t * 1e6 for t in seconds],
                  "pipelined": 1}).to_csv(tmp_path / "steplogs" / "log.csv", index=False)
    within = [(p, d, t) for (p, d), t in zip(rows, seconds) if p and p + d <= 512]
    expected = sum(t + 0.01 for *_, t in within) / sum(t for *_, t in within)
    text = replay.graph_boundary_text(tmp_path, {"coefficients": coefficients, "output_lag_steps": 0,
                                                 "graph_tokens": 512})
    assert text == f"log.csv: {expected:.2f}x for {len(within)} steps within, 1.00x for 5 above"


HEAVY = "task3_api-4_heavy"  # the GPU SLO-capacity sweep: default and F at 60, 68 and 76 req/s, 3 runs each


def test_gpu_slo_capacity_recomputed_from_the_committed_runs():
    """F's SLO capacity on the heavy-tailed load, lab's pair: the mean attainment per rate straight
    from each file's per-request arrays (TTFT, and mean TPOT as the ITL sum over output tokens - 1,
    of the requests after the first 10% by start time), linear between
    the last rate meeting 90% before the first that does not, and that one; the default meets it at no rate, so the ratio is a
    lower bound against its lowest rate."""
    per_rate: dict[tuple[str, float], list[float]] = {}
    for run in layer.load_runs(RESULTS / HEAVY):
        d = run.detail
        kept = np.argsort(d.start_times, kind="stable")[int(len(d.start_times) * run.config.warmup_fraction):]
        met = [not d.errors[i] and d.ttfts[i] <= 0.5 and 1e3 * d.gap_sums_s[i] / (d.output_lens[i] - 1) <= 50
               for i in kept]
        per_rate.setdefault((run.config.scheduler, run.config.rate), []).append(np.mean(met))
    mean = {k: float(np.mean(v)) for k, v in per_rate.items()}
    assert all(mean[("default", r)] < 0.9 for r in (60.0, 68.0, 76.0))
    f = [mean[("sjf-ontime", r)] for r in (60.0, 68.0, 76.0)]
    assert f[0] >= 0.9 > f[1]
    capacity = 60 + (f[0] - 0.9) / (f[0] - f[1]) * 8
    caps = rules.capacity_table(rules.attainment_rows(layer.load_runs(RESULTS / HEAVY)), 500, paired=False)
    row = caps[(caps["slo"] == "ttft:500 tpot:50") & (caps["strategy"] == "sjf-ontime")].iloc[0]
    base = caps[(caps["slo"] == "ttft:500 tpot:50") & (caps["strategy"] == "default")].iloc[0]
    assert row["capacity"] == pytest.approx(capacity, abs=0.05) and np.isnan(base["capacity"])
    assert base["text"] == "<60" and row["bound"] and row["vs default"] == pytest.approx(capacity / 60, abs=1e-3)


def test_a_default_under_its_grid_gives_a_bound_and_unpaired_draws_are_stable():
    """The ratio's lower bound divides by the default's lowest rate; without pairing each group
    draws its own stream, the same on every call, whatever the other groups."""
    att = pd.DataFrame({"slo": "s", "workload": "w", "run": [1, 2, 3] * 4,
                        "strategy": ["default"] * 6 + ["mine"] * 6,
                        "rate": [50.0] * 3 + [60.0] * 3 + [50.0] * 3 + [60.0] * 3,
                        "attainment": [0.5, 0.6, 0.7, 0.2, 0.3, 0.4, 1.0, 1.0, 1.0, 0.8, 0.9, 0.7]})
    caps = rules.capacity_table(att, 400, paired=False).set_index("strategy")
    assert caps.loc["default", "text"] == "<50" and caps.loc["mine", "bound"]
    assert caps.loc["mine", "vs default"] == pytest.approx(caps.loc["mine", "capacity"] / 50)
    again = rules.capacity_table(att[att["strategy"] == "mine"], 400, paired=False)
    assert again["95% interval"].iloc[0] == caps.loc["mine", "95% interval"]


def test_pace_setter_names_the_component_by_elimination():
    rows = layer.run_rows(layer.load_runs(RESULTS / HEAVY))
    assert slo.pace_setter(rows).startswith("the engine core")  # GPU busy 38-52%, API under 0.5 core
    assert slo.pace_setter(rows.assign(**{layer.GPU_UTIL: 95.0})).startswith("the GPU")
    assert slo.pace_setter(rows.assign(lagged=True)).startswith("the front end")
    assert slo.pace_setter(rows.assign(**{layer.ENGINE_CORES: 0.5})).startswith("no single")


def test_the_capacity_sweep_has_its_own_section_and_figures(tmp_path):
    """The GPU sweep is read as SLO capacity (section 6, its attainment and Pareto figures), not
    as Task 3's per-point tables; a folder with a lagged run or under 3 runs a point is not one."""
    results = copy_results(tmp_path)
    assert plot_results.main(["--results", str(results)]) == 0
    text = (results / "REPORT.md").read_text()
    assert f"GPU SLO capacity: heavy-burst0.5 ({HEAVY})" in section(text, "## 6 Beyond the handout")
    assert HEAVY not in section(text, "## 5 Task 3")
    for name in ("attainment_goodput", "pareto"):
        assert (results / "figures" / f"{HEAVY}_{name}.png").stat().st_size > 10_000
    res = layer.Results.load(results)
    assert slo.capacity_folders(res) == [HEAVY]
    for path in sorted((results / HEAVY).glob("default_*_rate-60_run-3.*")):
        path.unlink()
    assert slo.capacity_folders(layer.Results.load(results)) == []


def test_an_slo_study_short_of_a_capacity_says_what_it_lacks(tmp_path):
    """An SLO study's folder is read as a sweep in section 6 with its figures, but where the runs
    cannot give a capacity with intervals (one run a point, no default) the report says why and
    states no capacity."""
    results = tmp_path / "results"
    study = results / "slo"
    study.mkdir(parents=True)
    for rate in (60, 68):
        source = RESULTS / HEAVY / f"sjf-ontime_heavy-burst0.5_rate-{rate}_run-1.json"
        for path in (source, source.parent / source.name.replace(".json", ".requests.npz.xz")):
            shutil.copy(path, study / path.name)
    write_study(study, replace(Study.from_runs(study, "an SLO study"), task="slo"))
    assert plot_results.main(["--results", str(results)]) == 0
    six = section((results / "REPORT.md").read_text(), "## 6 Beyond the handout")
    assert "GPU SLO sweep: heavy-burst0.5 (slo)" in six
    assert ("No capacity with intervals is read from these runs: no run of the default to compare with; "
            "1 run(s) at a point, fewer than the 3 an interval needs.") in six
    assert "capacity 6" not in six and "x (95% interval" not in six
    for name in ("attainment_goodput", "pareto"):
        assert (results / "figures" / f"slo_{name}.png").is_file()


def test_the_gated_clients_sitting_gets_its_own_comparison(tmp_path):
    """A task2_api-N_gated folder (sitting gated-clients) is compared within itself, one client
    process against the split ones, and stays out of the front-end study's cross-setting facts.
    Stand-in data: the capacity sitting's budget-2048 rate-inf runs, copied under that name."""
    results = copy_results(tmp_path)
    gated = results / "task2_api-4_gated"
    gated.mkdir()
    for path in (results / "task2_api-4").glob("mnbt-2048_rate-inf_*"):
        shutil.copy(path, gated / path.name)
    write_study(gated, Study.from_runs(gated, "gated clients", ("frontend-gated",)))
    assert plot_results.main(["--results", str(results)]) == 0
    front = section((results / "REPORT.md").read_text(), "## 3 The serving front end")
    assert "### Does the client limit? One process against two started together (task2_api-4_gated)" in front

    rows = layer.run_rows(layer.load_runs(gated))
    one, split = rows[rows["clients"] == 1], rows[rows["clients"] == 2]
    assert len(one) == len(split) == 3
    tps = "Throughput (tok/s)"
    faster = bool(split[tps].min() > one[tps].max())  # every split run beyond every single one
    fact = next(line for line in front.splitlines() if line.startswith("- 3 runs of one client process"))
    assert f"throughput {split[tps].min():.0f}-{split[tps].max():.0f} tok/s" in fact
    assert ("one client process limited this load" in fact) is faster
    assert ("the client is not shown to limit this load" in fact) is not faster
    # The study's own table and facts are unchanged: they read task2_api-<N> folders only.
    assert frontend.lift_rows(layer.Results.load(results))["folder"].str.endswith("_gated").sum() == 0


def test_the_appendix_keeps_every_table_and_the_report_none_of_the_appendix_blocks():
    """Blocks placed in the appendix go to tables.md only; tables.md keeps every table under its
    headings and the sentences placed beside them, whatever their words, and leaves out a heading
    with nothing under it."""
    from harness.document import appendix_blocks, bullets, heading, para, report_blocks, table
    frame = pd.DataFrame({"x": [1]})
    blocks = [heading("A"), para("analysis"), table(frame), heading("B", 3, place="appendix"),
              table(frame, place="appendix"), heading("C", 3), bullets(["a finding"]), heading("D"),
              para("No request failed."), para("No Task 3 results.", place="both")]
    assert [b.text for b in report_blocks(blocks) if b.kind == "heading"] == ["A", "C", "D"]
    assert "No Task 3 results." in [b.text for b in report_blocks(blocks)]
    kept = appendix_blocks(blocks)
    assert [b.text or b.kind for b in kept] == ["A", "table", "B", "table", "D", "No Task 3 results."]


def test_summary_counts_every_rate_inf_run_with_several_api_servers():
    """The summary's 'at rate inf ... completeness still fell below 0.99 in k of n runs' counts the
    rate-inf runs with several API servers, straight from the files' frontend blocks (the budget
    sweep and split loads too), not the front-end study's runs at every rate."""
    runs = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("task*/*.json"))]
    inf = [r for r in runs if "frontend" in r and not r.get("simulated") and r["config"]["rate"] in ("inf", None)
           and (r["config"].get("api_server_count") or 1) > 1]
    lagged = sum(r["frontend"]["lagged"] for r in inf)
    loaded = layer.Results.load(RESULTS)
    text = render_markdown(summary.summary_section(loaded, {}, rules.replay_validation(loaded)))
    line = next(x for x in text.splitlines() if x.startswith("- Front end (section 3)"))
    servers = " or ".join(map(str, sorted({r["config"]["api_server_count"] for r in inf})))
    assert (f"at rate inf with {servers} API servers" in line
            and line.endswith(f"completeness still fell below 0.99 in {lagged} of {len(inf)} runs."))


def test_task3_spread_is_the_highest_run_over_the_lowest():
    """'Runs of one strategy differ by up to ...' at Strategy A's fixed point: the largest highest /
    lowest TTFT P50 or P99 of A's runs or the default's, from the files (A's TTFT P50 7.2x)."""
    per: dict[tuple[str, str], list[float]] = {}
    for path in (RESULTS / "task3_api-4").glob("*_fixed_rate-39_run-*.json"):
        run = json.loads(path.read_text())
        if run["config"]["scheduler"] in ("prefill-first", "default") and not run["frontend"]["lagged"]:
            for key in ("p50", "p99"):
                per.setdefault((run["config"]["scheduler"], key), []).append(run["summary"]["ttft_ms"][key])
    (who, key), values = max(per.items(), key=lambda kv: max(kv[1]) / min(kv[1]))
    rows = layer.run_rows(layer.load_runs(RESULTS / "task3_api-4"))
    line = next(x for x in task3.task3_answers(rows) if x.startswith("Strategy A") and "fixed at rate 39" in x)
    assert (f"differ by up to {max(values) / min(values):.2f}x (highest / lowest) in TTFT P50/P99 "
            f"({layer.strategy_label(who)}, TTFT {key.upper()} {min(values):.0f}-{max(values):.0f} ms)") in line


def test_the_tail_past_a_strategys_capacity_covers_every_run_at_those_rates():
    """F's TTFT P99 at the rates above its SLO capacity (lab's pair), the range over every run there,
    and the default's at the same rates, straight from the files' summaries."""
    rows = layer.run_rows(layer.load_runs(RESULTS / HEAVY))
    caps = rules.capacity_table(rules.attainment_rows(layer.load_runs(RESULTS / HEAVY)), 200, paired=False)
    capacity = caps[(caps["slo"] == rules.SCREEN_SLOS[0]) & (caps["strategy"] == "sjf-ontime")]["capacity"].iloc[0]
    p99: dict[str, list[float]] = {}
    rates = set()
    for path in (RESULTS / HEAVY).glob("*_run-*.json"):
        run = json.loads(path.read_text())
        if float(run["config"]["rate"]) > capacity:
            p99.setdefault(run["config"]["scheduler"], []).append(run["summary"]["ttft_ms"]["p99"])
            rates.add(run["config"]["rate"])
    f, d = p99["sjf-ontime"], p99["default"]
    text = slo.price_fact(rows, caps)
    assert f"at {' and '.join(sorted(rates, key=float))} req/s, the rates above the SLO capacity" in text
    assert (f"its TTFT P99 is {min(f):.0f}-{max(f):.0f} ms over every run against the default's "
            f"{min(d):.0f}-{max(d):.0f} ms") in text


def test_the_handout_runs_order_of_the_budgets_is_computed():
    """Whether the sweep's slowest budget is the slowest in the handout's rate-inf runs too: their
    medians' order over the budgets both ran, from the files, stated as it comes out."""
    rows, per_budget = budget_sweep_at_rate_inf()
    handout: dict[int, list[float]] = {}
    for path in (RESULTS / "task2").glob("*_rate-inf_run-*.json"):
        run = json.loads(path.read_text())
        budget = run["config"]["server_params"]["max_num_batched_tokens"]
        if budget in per_budget:
            handout.setdefault(budget, []).append(run["summary"]["output_throughput_tok_s"])
    order = sorted(handout, key=lambda b: statistics.median(handout[b]))
    slowest = min(per_budget, key=lambda b: statistics.median(per_budget[b]))
    fact = task2.handout_order_fact(rows, pd.concat([rows, layer.run_rows(layer.load_runs(RESULTS / "task2"))]), "task2")
    assert f"order the same budgets {' < '.join(map(str, order))} by median" in fact
    assert (f"{slowest} is the slowest there too" in fact) == (order[0] == slowest)
    assert (f"{slowest}, the sweep's slowest, is not the slowest there ({order[0]} is" in fact) == (order[0] != slowest)
    assert "neither confirm nor contradict" in fact  # 2 runs per budget, API-server CPU not recorded


def test_requests_over_30_s_end_to_end_are_counted_per_run_from_the_arrays():
    """Task 2's requests slower than 30 s end to end (TTFT plus the sum of its gaps), per run, from
    each run's per-request arrays, for every setting, load and budget where any run has one."""
    res = layer.Results.load(RESULTS)
    per: dict[tuple[str, str, int], list[tuple[int, int, int]]] = {}
    for run in res.runs("task2"):
        d = run.detail
        slow = sum(1 for t, gaps, err, n in zip(d.ttfts, d.gap_sums_s, d.errors, d.output_lens)
                   if not err and n > 0 and t + gaps > 30.0)
        per.setdefault((run.setting, run.config.rate_label, run.config.budget_flag),
                       []).append((run.config.run, slow, len(d.ttfts)))
    over = {k: sorted(v) for k, v in per.items() if any(s for _, s, _ in v)}
    assert over  # budget 1024 at rate inf, 4 API servers
    fact = next(a for a in task2.task2_answers(res.rows("task2"), None, task2.slow_request_rows(res.runs("task2")))
                if a.startswith("Requests slower than 30 s end to end"))
    for (setting, rate, budget), runs in over.items():
        counts = [str(s) for _, s, _ in runs]
        joined = counts[0] if len(counts) == 1 else ", ".join(counts[:-1]) + " and " + counts[-1]
        assert f"{setting}, {layer.load_label(rate)}, budget {budget}: {joined} of {runs[0][2]} requests" in fact
    others = sum(len(v) for k, v in per.items() if k not in over)
    assert f"none in the other {others} Task 2 runs" in fact


def test_rate_inf_budgets_join_their_machine_s_2048_across_studies_and_repeats_are_named():
    """Budget 1024 ran at rate inf in its own study right after the 2048 anchor on one H100 (one
    boot): its ratio to that 2048 is recomputed from the files (output throughput, medians, runs of
    one client and 4 API servers grouped by the machine's boot id), and a budget measured on two
    machines is named with both ratios."""
    by_machine: dict[str, dict[int, list[float]]] = {}
    for path in RESULTS.glob("task2_api-4*/*_rate-inf_run-*.json"):
        run = json.loads(path.read_text())
        config, boot = run["config"], run["meta"].get("machine_boot_id")
        if config.get("client_processes", 1) != 1 or config.get("api_server_count") != 4 or boot is None:
            continue
        budget = config.get("token_budget") or int(config["tag"].removeprefix("mnbt-"))
        by_machine.setdefault(boot, {}).setdefault(budget, []).append(
            run["summary"]["output_throughput_tok_s"])
    ratios_1024 = sorted(statistics.median(b[1024]) / statistics.median(b[2048])
                         for b in by_machine.values() if 1024 in b and 2048 in b)
    assert len(ratios_1024) == 2
    res = layer.Results.load(RESULTS)
    fact = task2.anchored_capacity_fact(res.rows("task2"), "task2")
    assert ("1024 " + f"{ratios_1024[1]:.2f}x (task2_api-4_anchor_high_b + task2_api-4_inf_1024_b: "
            "2 studies one after the other") in fact
    assert f"1024 {ratios_1024[0]:.2f}x-{ratios_1024[1]:.2f}x on 2 machines (below 2048 on each)" in fact


def test_a_sittings_cost_is_recomputed_from_its_runs_timing_blocks():
    """The rate-16 study's GPU time: its one server start (every run records the same ready time
    on one machine) plus every run's wall time, recomputed straight from the JSON files; the
    ratio divides it by the arrival windows plus that start."""
    folder = RESULTS / "task2_api-4_rate16"
    timings = [json.loads(p.read_text())["timing"] for p in sorted(folder.glob("*_run-*.json"))]
    starts = {t["server_ready_s"] for t in timings}
    gpu = sum(starts) + sum(t["run_wall_s"] for t in timings)
    arrivals = sum(t["arrival_window_s"] for t in timings)
    cost = rules.sitting_cost(layer.load_runs(folder))
    assert cost["runs"] == len(timings) and cost["configurations"] == 5  # the five budgets
    assert sorted(cost["server starts (s)"]) == sorted(starts)
    assert cost["GPU time (s)"] == pytest.approx(gpu)
    assert cost["vs arrivals and one start"] == pytest.approx(gpu / (arrivals + statistics.mean(starts)))
    assert cost["client overhead (s)"] == (min(t["client_overhead_s"] for t in timings),
                                           max(t["client_overhead_s"] for t in timings))
    assert rules.sitting_cost(layer.load_runs(RESULTS / "task2_api-4_budgets")) is None  # before the timing block
    # The high half's near-saturation study ran on the server its anchor started (every run
    # attached): that start is in the anchor's GPU time, not in its own.
    near, anchor = (layer.load_runs(RESULTS / name) for name in ("task2_api-4_near_saturation_high_b",
                                                                  "task2_api-4_anchor_high_b"))
    timings = [json.loads(p.read_text())["timing"] for p in sorted((RESULTS / "task2_api-4_near_saturation_high_b")
                                                                    .glob("*_run-*.json"))]
    assert all(t["server_reused"] for t in timings)
    shared = rules.sitting_cost(near)
    assert shared["shared starts (s)"] == shared["server starts (s)"] == rules.sitting_cost(anchor)["server starts (s)"]
    assert shared["GPU time (s)"] == pytest.approx(sum(t["run_wall_s"] for t in timings))
    assert rules.sitting_cost(anchor)["shared starts (s)"] == []


def test_the_steady_state_check_reads_each_gpu_runs_thirds_from_its_arrays():
    """The committed heavy-load SLO sweep's runs carry arrays, so each row's attainment by third is
    recomputed; the middle and last thirds of one run are checked here against the arrays."""
    folder = RESULTS / "task3_api-4_heavy"
    runs = layer.load_runs(folder)
    rows = layer.run_rows(runs)
    run = runs[0]
    detail = run.detail
    kept = layer.kept_indices(detail.start_times, run.config.warmup_fraction)
    first = min(detail.start_times[i] for i in kept)
    width = (max(detail.start_times[i] for i in kept) - first) / 3
    last = [i for i in kept if detail.start_times[i] - first >= 2 * width]
    pair = layer.parse_slo(run.config.goodput)
    met = [i for i in last if detail.ttfts[i] * 1e3 <= pair["ttft"] and not detail.errors[i]
           and (detail.output_lens[i] < 2 or detail.gap_sums_s[i] * 1e3 / (detail.output_lens[i] - 1)
                <= pair["tpot"])]
    assert rows.iloc[0]["last third attainment"] == pytest.approx(len(met) / len(last))
    fact = slo.gpu_steady_fact(rows)
    assert fact is not None and fact.startswith("Steady state")


def test_the_held_out_goals_apply_below_the_pace_and_where_throughput_is_the_pace():
    """Latency goals hold below 0.8x the load's pace: on the fixed 1024/256 load the rate-inf runs
    completed about 40 req/s, so 16 req/s is held to them and 39 is not. The throughput goal holds
    at rate inf and where the GPU's runs fell behind their arrivals (the heavy load's points)."""
    res = layer.Results.load(RESULTS)
    v = rules.replay_validation(res)
    inf_runs = [layer.Run.read(p) for p in sorted((RESULTS / "task2_api-4").glob("*rate-inf*_run-*.json"))]
    pace = max(r.completed_req_s for r in inf_runs if r and not r.frontend["lagged"] and r.config.client_processes == 1)
    assert 16 <= rules.GOAL_LOAD_SHARE * pace < 39
    latency = v[v["metric"] != layer.THROUGHPUT]
    held = latency[latency["goal applies"]]
    assert set(held.loc[held["workload"] == "random-1024in-256out", "rate"]) == {"16"}
    # On the heavy load, the first steady sitting's machine: its fastest run (any folder) sets the pace.
    steady = [layer.Run.read(p) for p in sorted((RESULTS / STEADY).glob("*_run-*.json"))]
    boot = {r.meta["machine_boot_id"] for r in steady}
    heavy_pace = max(r.completed_req_s for p in sorted(RESULTS.glob("*/*_run-*.json"))
                     if (r := layer.Run.read(p)) and r.meta.get("machine_boot_id") in boot
                     and r.config.workload == "heavy-burst0.5")
    assert set(held.loc[held["workload"] != "random-1024in-256out", "rate"]) == {
        r.config.rate_label for r in steady if r.config.rate <= rules.GOAL_LOAD_SHARE * heavy_pace}
    throughput = v[v["metric"] == layer.THROUGHPUT].set_index(["folder", "strategy", "workload", "rate"])
    assert throughput.loc[("task2_api-4", "default", "random-1024in-256out", "inf"), "goal applies"]
    assert not throughput.loc[("task2_api-4", "default", "random-1024in-256out", "16"), "goal applies"]
    heavy = throughput.loc["task3_api-4_heavy"]
    assert heavy["goal applies"].all()  # every run there fell behind (section 6's transient note)
    text = render_markdown(replay.replay_section(res, rules.replay_validation(res)))
    assert "Held-out goals, where they apply" in text and "goal 90%" in text


STEADY = "slo_api-4_heavy_steady"  # the steady-state sweep on an H100: default at 65.9/76.3, F (W = 5 s) at 76.3/86.7


@pytest.mark.parametrize("own, base, expected", [
    ((80.0, 80.0), (60.0, 60.0), (80 / 60, "")),  # both crossed inside their grids
    ((66.0, 66.0), (0.0, 60.0), (1.1, "at least")),  # the default under its grid: divide by its lowest rate
    ((76.0, np.inf), (60.0, 60.0), (76 / 60, "at least")),  # the strategy met the SLO at every rate
    ((79.9, 79.9), (76.3, np.inf), (79.9 / 76.3, "at most")),  # the default met it at every rate
    ((0.0, 76.3), (76.3, np.inf), (1.0, "at most")),  # the strategy under its grid, the default over its
    ((0.0, 76.3), (60.0, 60.0), (76.3 / 60, "at most")),
    ((76.0, np.inf), (76.3, np.inf), (np.nan, "")),  # both over: open
    ((0.0, 60.0), (0.0, 60.0), (np.nan, "")),  # both under: open
])
def test_a_capacity_ratio_is_exact_or_a_bound_on_the_side_the_grids_leave_open(own, base, expected):
    value, bound = rules.ratio_bound(own, base)
    assert bound == expected[1]
    assert (np.isnan(value) and np.isnan(expected[0])) or value == pytest.approx(expected[0])


def test_a_default_over_its_grid_makes_the_ratio_an_upper_bound():
    """Where every rate the default ran met the SLO its capacity lies higher, so a strategy that
    crossed inside its own grid has at most its capacity over the default's top rate, and one under
    its grid at most its lowest rate over it; the report says which, not 'both under their grids'."""
    att = pd.DataFrame({"slo": "s", "workload": "w", "run": [1, 2, 3] * 6,
                        "strategy": ["default"] * 6 + ["mine"] * 6 + ["late"] * 6,
                        "rate": ([50.0] * 3 + [60.0] * 3) * 3,
                        "attainment": [1.0] * 6 + [0.95, 0.95, 0.95, 0.8, 0.85, 0.9] + [0.8] * 6})
    caps = rules.capacity_table(att, 400, paired=False).set_index("strategy")
    assert caps.loc["default", "text"] == ">=60" and caps.loc["default", "vs default"] == 1.0
    mine, late = caps.loc["mine"], caps.loc["late"]
    assert mine["bound"] == "at most" and mine["vs default"] == pytest.approx(mine["capacity"] / 60)
    assert late["text"] == "<50" and late["bound"] == "at most" and late["vs default"] == pytest.approx(50 / 60)
    text = slo.capacity_fact({**mine.to_dict(), "strategy": "mine"}, caps.reset_index())
    assert "at most 0.92x" in text and "an upper bound, the default met the SLO at every rate it ran" in text
    assert "short of" in text and "both under" not in text


@pytest.mark.parametrize("default, mine, expected", [
    ([1.0, 0.5, 0.2], [1.0, 0.95, 0.6], 60.0),  # the lowest rate where one side misses: nearest capacity
    ([1.0, 1.0, 0.95], [1.0, 0.99, 0.92], 70.0),  # both hold the SLO everywhere: the top rate, not 1.00x
    ([0.8, 0.5, 0.2], [0.95, 0.9, 0.6], 50.0),  # the default under its grid: its lowest rate
])
def test_the_attainment_ratio_is_read_where_the_two_can_differ(default, mine, expected):
    """The report sets a strategy's attainment beside the default's at one shared rate: where both
    met the SLO for every request at the lowest, a ratio read there says nothing, so the rate is the
    lowest where either misses the 90%, else the highest both ran."""
    rates = [50.0, 60.0, 70.0]
    att = pd.DataFrame({"strategy": ["default"] * 3 + ["mine"] * 3 + ["other"], "rate": rates * 2 + [50.0],
                        "attainment": default + mine + [0.1]})
    assert slo.telling_rate(att, "mine") == expected
    assert slo.telling_rate(att[att["strategy"] != "default"], "mine") is None
    text = slo.attainment_ratio_text(att, "mine", slo.telling_rate(att, "mine"))
    assert text.startswith(f"at {expected:g} req/s")


def test_the_steady_sweep_reads_as_measured():
    """The committed steady-state sweep, from its run files: the rates are shares of the rate-inf
    throughput its capacity folder measured just before (over the heavy load's mean output length);
    the default met the lab's pair at every rate, so F's ratio is an upper bound; where F met the
    SLO for fewer requests, the report sets its engine's queue beside the default's, counted here
    straight from each run's /metrics peaks."""
    res = layer.Results.load(RESULTS)
    study = res.studies[STEADY]
    plan = json.loads((RESULTS / STEADY / "study.json").read_text())["plan"]
    capacity = statistics.median(read_json(p)["summary"]["output_throughput_tok_s"]
                                 for p in (RESULTS / study.capacity_from).glob("*_run-*.json"))
    from harness.workloads import HEAVY
    assert study.capacity_from == plan["load"]["rate_from"]["results_folder"]
    assert study.capacity_rate == round(capacity / HEAVY.mean_output_len(), 1) == plan["load"]["rate"]
    sweep = slo.slo_sweeps(res)[STEADY]
    caps = sweep.caps[sweep.caps["slo"] == "ttft:500 tpot:50"].set_index("strategy")
    (variant,) = set(caps.index) - {"default"}  # F with its wait bound
    assert caps.loc["default", "text"].startswith(">=") and caps.loc[variant, "bound"] == "at most"
    peaks: dict[str, list[bool]] = {}
    offered: dict[str, list[float]] = {}
    for path in sorted((RESULTS / STEADY).glob("*rate-76.3_run-*.json")):
        record = read_json(path)
        peaks.setdefault(record["config"]["scheduler"], []).append(
            record["engine"]["metrics"]["peak_num_requests_running"] >= record["config"]["server_params"]["max_num_seqs"])
        offered.setdefault(record["config"]["scheduler"], []).append(record["summary"]["output_pace"]["offered_tok_s"])
    fact = slo.engine_fact(sweep.rows)
    assert f"in {sum(peaks['sjf-ontime'])} of 3 runs against {sum(peaks['default'])} of 3" in fact
    f_draws, d_draws = (f"{min(offered[s]):.0f}-{max(offered[s]):.0f}" for s in ("sjf-ontime", "default"))
    assert f"on draws asking for {f_draws} output tok/s over the arrival window against {d_draws}" in fact
    assert "at 76.3 req/s, where Strategy F" in slo.tail_fact(sweep.rows) and "for fewer requests" in fact
    anchor = slo.anchor_fact(sweep.rows, study)
    assert f"shares of {study.capacity_rate:g} req/s" in anchor and "vLLM V1 default in 3 of 3" in anchor
    emitted = sorted(r["summary"]["output_pace"]["emitted_tok_s"] / HEAVY.mean_output_len()
                     for r in map(read_json, (RESULTS / STEADY).glob("default_*_run-*.json"))
                     if r["config"]["rate"] > study.capacity_rate)  # what the default emitted over its arrivals
    assert f"vLLM V1 default in 3 of 3 (emitting {emitted[0]:.1f}-{emitted[-1]:.1f} req/s)" in anchor
    assert emitted[-1] > study.capacity_rate and "is not the most the engine sustains" in anchor


def test_a_sweep_study_file_holds_no_plan_only_keys(tmp_path):
    """A sweep's study file says nothing of a plan's capacity; a plan's record gives it back."""
    study = Study.from_runs(RESULTS / HEAVY, "q")
    assert not set(study.to_dict()) & {"planned_runs", "capacity_from", "capacity_rate"}
    assert layer.Results.load(RESULTS).studies[HEAVY].capacity_from is None


STEADY_B = "slo_api-4_heavy_steady_b"  # the second steady sitting: default at 82/93.2/104.3, F (W = 5 s) at 93.2


def test_a_default_crossing_inside_its_grid_sets_the_bar_and_the_engine_at_it(tmp_path):
    """Where the default's capacity is interpolated inside its grid, the report names the rate that
    1.2x of it asks for and how the engine fared at the rates the sweep ran at or above it, counted
    here straight from the run files: the runs whose output fell short of their arrivals' by more
    than the slack. Where the default met the SLO at every rate, the bar is 1.2x its top rate or
    more, and the report says how the engine fared at the sweep's top rate. At the rate both ran,
    it says whether the engine readings of the two orders separate, run by run."""
    res = layer.Results.load(RESULTS)
    sweep = slo.slo_sweeps(res)[STEADY_B]
    caps = sweep.caps[sweep.caps["slo"] == "ttft:500 tpot:50"].set_index("strategy")
    assert caps.loc["default", "grid"] == "" and 82 < caps.loc["default", "capacity"] < 93.2
    target = 1.2 * caps.loc["default", "capacity"]
    behind: dict[str, list[bool]] = {}
    for path in sorted((RESULTS / STEADY_B).glob("*_run-*.json")):
        record = read_json(path)
        if record["config"]["rate"] >= target:
            behind.setdefault(record["config"]["scheduler"], []).append(
                record["summary"]["output_pace"]["ratio"] < 1 - rules.OVERLOAD_SHORTFALL)
    assert set(behind) == {"default"}  # F did not run that high
    fact = slo.bar_fact(sweep.rows, sweep.caps)
    assert f"at {target:.1f} req/s under the lab's pair" in fact
    assert f"fell behind in {sum(behind['default'])} of {len(behind['default'])} runs" in fact
    assert "did not run that high" in fact
    bound = slo.slo_sweeps(res)[STEADY]  # the default met the SLO at every rate: the bar is a floor
    top_default = max(read_json(f)["config"]["rate"] for f in (RESULTS / STEADY).glob("default_*_run-*.json"))
    top = max(read_json(f)["config"]["rate"] for f in (RESULTS / STEADY).glob("*_run-*.json"))
    assert top < 1.2 * top_default
    fact = slo.bar_fact(bound.rows, bound.caps)
    assert f"at {1.2 * top_default:.1f} req/s or more under the lab's pair" in fact
    assert "no run of this sweep offered that much" in fact and "At its top rate: " in fact
    assert f"at {top:g} req/s fell behind in" in fact and "GPU busy" in fact
    waits: dict[str, list[float]] = {}
    for path in sorted((RESULTS / STEADY_B).glob("*rate-93.2_run-*.json")):
        record = read_json(path)
        waits.setdefault(record["config"]["scheduler"], []).append(record["engine"]["metrics"]["peak_num_requests_waiting"])
    verdict = slo.separation(pd.Series(waits["sjf-ontime"]), pd.Series(waits["default"]))
    assert verdict == ("higher in every run" if min(waits["sjf-ontime"]) > max(waits["default"]) else
                       "lower in every run" if max(waits["sjf-ontime"]) < min(waits["default"]) else "ranges overlap")
    assert f"for more requests than the default" in slo.engine_fact(sweep.rows)
    assert f"against {min(waits['default']):.0f}-{max(waits['default']):.0f} ({verdict})" in slo.engine_fact(sweep.rows)


def test_separation_needs_every_run_beyond_every_other():
    assert slo.separation(pd.Series([5.0, 6.0]), pd.Series([1.0, 4.9])) == "higher in every run"
    assert slo.separation(pd.Series([1.0, 2.0]), pd.Series([2.5, 3.0])) == "lower in every run"
    assert slo.separation(pd.Series([1.0, 3.0]), pd.Series([2.0, 4.0])) == "ranges overlap"


def test_each_machine_s_heavy_load_capacity_is_listed_with_what_set_its_pace():
    """Section 6 lists every capacity measured on the heavy-tailed load (each run at rate inf on a
    custom dataset, counted here from the run files), with its throughput range and the component
    that set its pace: a GPU busy for at least 90% of every run's window is the GPU."""
    res = layer.Results.load(RESULTS)
    expected, gpu_bound = [], {}
    for folder in sorted(p for p in RESULTS.iterdir() if p.is_dir() and (p / "study.json").exists()):
        records = [read_json(p) for p in sorted(folder.glob("*_run-*.json"))]
        if not records or json.loads((folder / "study.json").read_text()).get("plan", {}).get("task") != "calibration":
            continue
        if all(r["config"]["rate"] is None and r["config"]["bench_params"]["dataset_name"] == "custom" for r in records):
            expected.append(folder.name)
            gpu_bound[folder.name] = min(r["host"]["gpu_util"]["mean_pct"] for r in records) >= 90
    assert slo.anchor_folders(res) == expected and "calib_capacity_qwen3-8b_api-4_heavy" in expected
    text = render_markdown(slo.anchor_section(res))
    for name in expected:
        row = next(line for line in text.splitlines() if line.startswith(f"| {name} "))
        assert ("| the GPU " in row) == gpu_bound[name]
    assert gpu_bound["calib_capacity_qwen3-8b_api-4_heavy"] and not gpu_bound["calib_capacity_qwen3-0.6b_api-4_heavy"]


def test_the_tail_bar_sets_the_longest_tenth_s_ttft_p99_beside_the_default_s_at_its_capacity():
    """The goal's tail check on the second steady sitting, counted here from the per-request data:
    at the rate both ran nearest the default's capacity, the P99 of the first-token times of the
    kept requests whose prompts are in the longest tenth, median over each side's runs, and their
    ratio against the 2x bar."""
    from harness.lab_metrics import kept_indices

    res = layer.Results.load(RESULTS)
    sweep = slo.slo_sweeps(res)[STEADY_B]
    p99: dict[str, list[float]] = {}
    for run in res.serving[STEADY_B]:
        if run.config.rate_label != "93.2":
            continue
        detail = run.detail
        kept = kept_indices(detail.start_times, run.config.warmup_fraction)
        lengths = np.array([detail.input_lens[i] for i in kept])
        ttfts = np.array([detail.ttfts[i] for i in kept])[lengths >= np.percentile(lengths, 90)]
        p99.setdefault(run.config.scheduler, []).append(float(np.percentile(ttfts, 99)))
    times = statistics.median(p99["sjf-ontime"]) / statistics.median(p99["default"])
    fact = slo.tail_bar_fact(sweep.rows, sweep.caps)
    assert f"at 93.2 req/s: {statistics.median(p99['sjf-ontime']):.1f} s" in fact
    assert f"{times:.1f}x, {'within' if times <= slo.TAIL_BAR else 'over'} the bar" in fact


STEADY_8B = "slo_qwen3-8b_api-4_heavy_steady"  # the 8B pair: default and F (W = 5 s) at 1.2x, 3 runs each


def test_the_8b_pair_reads_as_an_slo_sweep_without_the_0_6b_screen_beside_it():
    """The 8B pair's study file makes it an SLO study, so section 6 reads it with the steady-state
    method; both strategies under 90% at their one rate give no ratio, only bounds; the screen's
    prediction, of a Qwen3-0.6B step model, stands beside the 0.6B sweeps only (model from the files)."""
    res = layer.Results.load(RESULTS)
    assert STEADY_8B in slo.sweep_folders(res)
    records = [read_json(p) for p in sorted((RESULTS / STEADY_8B).glob("*_run-*.json"))]
    assert {Path(r["meta"]["model"]).name for r in records} == {"qwen3-8b"}
    lab = [layer.Run.read(p).attainment("ttft:500 tpot:50")["attainment"]
           for p in sorted((RESULTS / STEADY_8B).glob("*_run-*.json"))]  # from the per-request arrays
    assert len(records) == 6 and max(lab) < rules.CAPACITY_ATTAINMENT
    sweeps = slo.slo_sweeps(res)
    text = render_markdown(slo.gpu_capacity_section(res, sweeps, slo.screen_tables(res)[1]))
    blocks = {b.split(")", 1)[0]: b for b in text.split("#### GPU SLO capacity: heavy-burst0.5 (")[1:]}
    assert "against the default's <31 req/s: both under their grids, no ratio" in blocks[STEADY_8B]
    assert "The simulator's screen" not in blocks[STEADY_8B]
    assert all("The simulator's screen" in blocks[f] for f in (STEADY, STEADY_B))


@pytest.mark.parametrize("value, bound, low, expected", [
    (1.25, "", 1.05, "met"), (1.25, "", 0.95, "missed"), (1.1, "", 1.02, "missed"),  # exact: the interval decides
    (1.25, "at least", 1.1, "met"), (1.09, "at least", 0.99, "open"),  # a floor under 1.2x may rise
    (1.05, "at most", 1.02, "missed"), (1.3, "at most", 1.1, "open"),  # a ceiling over 1.2x may fall short
    (np.nan, "", np.nan, "open"),  # both over, or both under, their grids
])
def test_the_capacity_bar_is_met_missed_or_left_open_by_the_grids(value, bound, low, expected):
    assert slo.bar_verdict({"vs default": value, "bound": bound, "ratio low": low}) == expected


def test_the_summary_states_the_goal_over_every_steady_sweep():
    """Section 7 answers the SLO study's goal in one line over every steady-state sweep (the plans
    that asked for at least 60 s of arrivals; the short-burst transient left out): each strategy's
    capacity ratio under the lab's pair with its verdict, and its longest tenth's tail against the
    default's, as section 6 reads them."""
    res = layer.Results.load(RESULTS)
    sweeps = slo.slo_sweeps(res)
    steady = {f for f in sweeps if (read_json(RESULTS / f / "study.json").get("plan") or {}).get("load", {})
              .get("min_arrival_s", 0) >= 60}
    assert {STEADY, STEADY_B, STEADY_8B} <= steady and "task3_api-4_heavy" in sweeps
    line = summary.goal_summary(sweeps)
    assert f"over the {len(steady)} steady-state sweeps on the GPU" in line
    assert all(f"{f}, " in line or f"{f}: " in line for f in steady) and "task3_api-4_heavy" not in line
    assert "met by no strategy in any of them" in line  # no committed sweep shows 1.2x with the tail bar
    caps = sweeps[STEADY].caps.set_index(["slo", "strategy"]).loc["ttft:500 tpot:50"]
    tail = slo.tail_reads(sweeps[STEADY].rows, sweeps[STEADY].caps)
    f_name = next(s for s in caps.index if s != "default")
    assert (f"{STEADY}, {layer.strategy_label(f_name)}: at most {caps.loc[f_name, 'vs default']:.2f}x (missed), "
            f"tail {tail[f_name].times:.1f}x") in line
    assert f"{STEADY_8B}, {layer.strategy_label(f_name)}: no ratio (open), tail not read" in line
    cut = [f for f in steady if sweeps[f].gaps]  # a sitting that ran out of device time
    assert cut and all(f"{f}: not read ({'; '.join(sweeps[f].gaps)})" in line for f in cut)
    assert summary.goal_summary({}) is None


def test_a_cut_steady_sitting_still_states_its_anchor_and_what_it_lacks():
    """A steady sitting cut short (the third 0.6B sitting: 9 of 12 runs, two at some points) reads
    no capacity, says what it lacks, and still says what its paced runs emitted against the anchor
    its rates are shares of: there, more than the anchor, so the anchor is no ceiling."""
    res = layer.Results.load(RESULTS)
    sweeps = slo.slo_sweeps(res)
    cut = "slo_api-4_heavy_steady_c"
    assert sweeps[cut].gaps
    text = render_markdown(slo.gpu_capacity_section(res, {cut: sweeps[cut]}, slo.screen_tables(res)[1]))
    assert f"GPU SLO sweep: heavy-burst0.5 ({cut})" in text
    assert f"No capacity with intervals is read from these runs: {'; '.join(sweeps[cut].gaps)}." in text
    study = res.studies[cut]
    assert f"Rates are shares of {study.capacity_rate:g} req/s" in text
    assert "is not the most the engine sustains on this load" in text


def test_a_machine_whose_runs_fill_two_folders_counts_once_among_those_a_fit_replays():
    """The third 0.6B sitting's capacity and SLO folders come from one boot: a fit replaying both
    is checked on one other machine, not two."""
    res = layer.Results.load(RESULTS)
    folders = ["calib_capacity_qwen3-0.6b_api-4_heavy_c", "slo_api-4_heavy_steady_c"]
    assert len({h for f in folders for h in res.studies[f].hosts}) == 1
    elsewhere = replay.replayed_elsewhere(res, {}, pd.DataFrame({"folder": folders}))
    assert elsewhere == res.studies[folders[0]].hosts
    assert replay.replayed_runs_text(res, {}, pd.DataFrame({"folder": folders})).startswith(
        "Runs of another machine of the kind (boot id ")


def test_an_anchor_that_counts_a_lagging_run_says_so_and_what_its_other_runs_read():
    """The fourth 0.6B sitting's rates are shares of an anchor one of whose two runs lagged: the
    sweep's anchor line says the figure counts it and what the run that kept up read alone; an
    anchor whose runs all kept up adds nothing."""
    from harness.workloads import HEAVY

    res = layer.Results.load(RESULTS)
    folder = "slo_api-4_heavy_steady_d"
    study = res.studies[folder]
    anchor = res.folder_rows(study.capacity_from)
    lagged, kept = anchor[anchor["lagged"]], anchor[~anchor["lagged"]]
    assert (len(lagged), len(kept)) == (1, 1)
    fact = slo.anchor_fact(res.folder_rows(folder), study, anchor)
    assert (f"a figure that counts 1 of its 2 runs whose front end lagged, completeness "
            f"{lagged['completeness'].iloc[0]:.3f}") in fact
    assert f"its runs that kept up alone read {kept['Throughput (tok/s)'].iloc[0] / HEAVY.mean_output_len():.1f} req/s" in fact
    assert slo.lagged_anchor_text(kept) == "" and "lagged" not in slo.anchor_fact(res.folder_rows(folder), study, kept)
