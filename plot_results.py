"""Read results/*.json and write the lab's tables and figures.

    python plot_results.py [--results results]

Only reads result files; never runs anything. Writes ``<results>/tables.md`` and
``<results>/figures/*.png``. A task whose results are missing gets a line saying so, never
invented numbers.

Task 2 aggregation: each run's ``summary`` (first 10% of requests by start time dropped, then
TTFT/ITL percentiles and throughput recomputed from the per-request data, see ``lab_metrics``);
per ``max_num_batched_tokens`` value and load, the median over runs, with every run's value kept
in ``task2_runs.csv``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

ROOT = Path(__file__).resolve().parent
MIB = 2**20
TASK1_LABELS = {"hf-serial": "transformers serial", "hf-static": "transformers static batching",
                "vllm": "vLLM offline"}


def load_json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _gpu_memory_mib(entry: dict[str, Any]) -> float | None:
    """transformers: the allocator's peak; vLLM: device-wide peak minus the baseline before start."""
    if entry.get("gpu_memory_peak_allocated_mib") is not None:
        return entry["gpu_memory_peak_allocated_mib"]
    peak, base = entry.get("gpu_memory_device_peak_mib"), entry.get("gpu_memory_device_baseline_mib")
    return None if peak is None or base is None else round(peak - base, 1)


def task1_table(results: dict[str, Any]) -> pd.DataFrame:
    """The handout's Task 1 table, one row per method that ran, in the handout's order."""
    methods = results.get("methods", {})
    serial = methods.get("hf-serial")
    rows = []
    for key, label in TASK1_LABELS.items():
        entry = methods.get(key)
        if entry is None:
            continue
        notes = []
        if key == "hf-static":
            label = f"{label} (batch={entry['batch_size']})"
            notes.append(f"padding waste {entry['padding']['padding_waste_ratio']:.0%}")
        if key == "vllm":
            notes.append(f"cold first call {entry['cold_first_call_s']:.2f} s")
            notes.append(f"KV allocated peak {entry['kv_peak_allocated_bytes'] / MIB:.1f} MiB")
        if serial is not None and key != "hf-serial":
            notes.append(f"{serial['total_s'] / entry['total_s']:.1f}x faster than serial")
        if key == "vllm" and "hf-static" in methods:
            notes.append(f"{methods['hf-static']['total_s'] / entry['total_s']:.1f}x faster than static")
        rows.append({
            "method": label,
            "total time (s)": round(entry["total_s"], 2),
            "throughput (tok/s)": round(entry["output_tokens_per_s"], 1),
            "peak KV cache (MiB)": round(entry["kv_peak_bytes"] / MIB, 1),
            "peak GPU memory (MiB)": _gpu_memory_mib(entry),
            "notes": "; ".join(notes),
        })
    return pd.DataFrame(rows)


def _distinct(values: list[Any]) -> str:
    """The values in first-seen order, each once: one value, or 'a / b' where runs differ."""
    seen: list[str] = []
    for value in values:
        if str(value) not in seen:
            seen.append(str(value))
    return " / ".join(seen)


def meta_field(metas: list[dict[str, Any]], *path: str, shorten: Any = str,
               missing: str | None = None) -> str:
    """The distinct values of one provenance field over a set of results ('a / b' where they
    differ). A value that is absent reads ``missing`` if given, else 'None'."""
    values = []
    for meta in metas:
        value: Any = meta
        for key in path:
            value = (value or {}).get(key)
        values.append(missing if value is None and missing is not None else shorten(str(value)))
    return _distinct(values) if values else (missing or "")


def date_range(dates: list[str]) -> str:
    """One date, or 'first to last' (ISO strings sort by time); 'missing' for none."""
    if not dates:
        return "missing"
    dates = sorted(dates)
    return dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}"


def provenance_line(metas: dict[str, Any] | list[dict[str, Any] | None] | None) -> str:
    """One line of provenance for one result or for a set of runs (values that differ are all
    listed, dates as a range), so a table mixing sessions says so."""
    if isinstance(metas, dict):
        metas = [metas]
    metas = [m for m in (metas or []) if m]
    if not metas:
        return "provenance: missing"

    def field(*path: str) -> str:
        return meta_field(metas, *path)

    models = meta_field(metas, "model",  # a local copy's path differs per host
                        shorten=lambda v: Path(v).name if v.startswith("/") or (ROOT / v).exists() else v)
    commits = meta_field(metas, "git_commit",
                         shorten=lambda v: v[:7] + ("-dirty" if v.endswith("-dirty") else ""))
    when = date_range([str(m.get("date_utc")) for m in metas])
    return (f"GPU {field('gpu', 'name')} ({field('gpu', 'memory_gib')} GiB, driver "
            f"{field('gpu', 'driver')}); vLLM {field('versions', 'vllm')}, torch "
            f"{field('versions', 'torch')}, transformers {field('versions', 'transformers')}; "
            f"model {models}, weights {field('weights')}; {when}; commit {commits}")


def task1_section(results_dir: Path) -> str:
    results = load_json(results_dir / "task1.json")
    if not results or not results.get("methods"):
        return "## Task 1\n\nNo Task 1 results yet (run `python task1_vllm_vs_hf.py`).\n"
    cfg = results["config"]
    lines = ["## Task 1: transformers vs vLLM offline", "",
             f"{cfg['num_prompts']} prompts, {cfg['max_new_tokens']} new tokens each, {cfg['dtype']}, "
             f"weights: {cfg['weights']}; fixed output length: {cfg['fixed_output_len']}; "
             f"KV bytes/token {cfg['kv_bytes_per_token']}.", "",
             provenance_line(results.get("meta")), "",
             task1_table(results).to_markdown(index=False), ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Task 2
# --------------------------------------------------------------------------------------------
TASK2_METRICS = {  # column -> (summary key, percentile)
    "TTFT P50 (ms)": ("ttft_ms", "p50"), "TTFT P99 (ms)": ("ttft_ms", "p99"),
    "ITL P50 (ms)": ("itl_ms", "p50"), "ITL P99 (ms)": ("itl_ms", "p99"),
}
THROUGHPUT = "Throughput (tok/s)"


def load_runs(folder: Path) -> list[dict[str, Any]]:
    """Every run file in ``folder`` (sorted by name), skipping anything that is not one; none
    when the folder does not exist (a task not run yet)."""
    if not folder.is_dir():
        return []
    runs = []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        if "summary" in data and "config" in data:
            data["_file"] = path.name
            runs.append(data)
    return runs


def server_flag(server_args: str, flag: str) -> str | None:
    match = re.search(rf"{re.escape(flag)}[ =](\S+)", server_args)
    return match.group(1) if match else None


def load_label(rate: str) -> str:
    return "rate inf (all at once)" if rate == "inf" else f"rate {rate} req/s"


def task2_runs(loaded: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per run (from ``load_runs``): the knob, the load, the run index and the summary."""
    rows = []
    for run in loaded:
        cfg, summary = run["config"], run["summary"]
        value = server_flag(cfg.get("server_args", ""), "--max-num-batched-tokens")
        if value is None:
            continue
        row = {"max_num_batched_tokens": int(value), "rate": cfg["rate"], "run": cfg["run"],
               "failed": summary["num_failed"], "file": run["_file"]}
        for column, (key, pct) in TASK2_METRICS.items():
            row[column] = summary[key][pct]
        row[THROUGHPUT] = summary["output_throughput_tok_s"]
        rows.append(row)
    return pd.DataFrame(rows)


THROUGHPUT_SPREAD = "throughput run spread (%)"


def task2_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Median over runs per (load, value), in the handout's columns, and the run-to-run spread
    of throughput ((max - min) / median): a difference between budgets smaller than it is noise."""
    columns = list(TASK2_METRICS) + [THROUGHPUT]
    grouped = runs.groupby(["rate", "max_num_batched_tokens"], sort=True)
    table = grouped[columns].median().round(2)
    spread = grouped[THROUGHPUT].agg(lambda v: (v.max() - v.min()) / v.median() * 100)
    table[THROUGHPUT_SPREAD] = spread.round(1)
    table["runs"] = grouped.size()
    return table.reset_index()


def _rate_order(rate: str) -> float:
    return float("inf") if rate == "inf" else float(rate)


def _budget_axis(ax: Any, table: pd.DataFrame) -> None:
    """Log-2 x axis labelled with the budgets that were run."""
    values = sorted(table["max_num_batched_tokens"].unique())
    ax.set_xscale("log", base=2)
    ax.set_xticks(values, [str(v) for v in values])
    ax.minorticks_off()


def plot_task2(table: pd.DataFrame, figures: Path) -> list[Path]:
    """A1: the knob vs TTFT/ITL P50/P99 (log-x), A2: the knob vs throughput; a curve per load."""
    figures.mkdir(parents=True, exist_ok=True)
    rates = sorted(table["rate"].unique(), key=_rate_order)
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharex=True)
    for ax, column in zip(axes.flat, TASK2_METRICS):
        for rate in rates:
            part = table[table["rate"] == rate]
            ax.plot(part["max_num_batched_tokens"], part[column], marker="o", label=load_label(rate))
        _budget_axis(ax, table)
        ax.set_yscale("log")  # loads differ by orders of magnitude; log keeps each readable
        ax.set_title(column + ", log scale")
        ax.grid(True, which="both", alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("max_num_batched_tokens")
    axes[0][0].legend()
    fig.suptitle("A1: token budget vs latency (median of runs, first 10% dropped)")
    fig.tight_layout()
    a1 = figures / "task2_A1_latency.png"
    fig.savefig(a1, dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for rate in rates:
        part = table[table["rate"] == rate]
        ax.plot(part["max_num_batched_tokens"], part[THROUGHPUT], marker="o", label=load_label(rate))
    _budget_axis(ax, table)
    ax.set_xlabel("max_num_batched_tokens")
    ax.set_ylabel("output tokens/s")
    ax.set_title("A2: token budget vs throughput")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    a2 = figures / "task2_A2_throughput.png"
    fig.savefig(a2, dpi=120)
    plt.close(fig)
    return [a1, a2]


def task2_section(results_dir: Path, loaded: list[dict[str, Any]]) -> str:
    runs = task2_runs(loaded)
    if runs.empty:
        return "## Task 2\n\nNo Task 2 results yet (run `bash task2.sh`).\n"
    runs.to_csv(results_dir / "task2_runs.csv", index=False)
    table = task2_table(runs)
    figures = plot_task2(table, results_dir / "figures")
    example = loaded[0]
    other_flags = re.sub(r"--max-num-batched-tokens[ =]\S+ ?", "", example["config"].get("server_args", ""))
    lines = ["## Task 2: max_num_batched_tokens sweep", "",
             f"Workload: {example['config'].get('workload')}; bench flags: "
             f"`{example['config'].get('bench_args')}`; server flags (besides the budget): "
             f"`{other_flags.strip()}`.",
             "Median over runs; first 10% of requests (by start time) dropped; per-run values in "
             "`task2_runs.csv`.", "", provenance_line([run.get("meta") for run in loaded]), ""]
    for rate in sorted(table["rate"].unique(), key=_rate_order):
        part = table[table["rate"] == rate].drop(columns="rate")
        lines += [f"### {load_label(rate)}", "", part.to_markdown(index=False), ""]
    lines += [f"![{f.stem}](figures/{f.name})" for f in figures] + [""]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Task 3
# --------------------------------------------------------------------------------------------
STRATEGY_LABELS = {"default": "vLLM V1 default", "prefill-first": "Strategy A: prefill-first",
                   "sjf": "Strategy B1: SJF", "slo": "Strategy C: stall-bounded prefill-first",
                   "deadline": "Strategy D: deadline-aware (C + on-time first)",
                   "paced": "Strategy E: TPOT-paced prefill-first"}


def strategy_label(name: str) -> str:
    return STRATEGY_LABELS.get(name, name)


def _strategy_order(name: str) -> tuple[int, str]:
    order = list(STRATEGY_LABELS)
    return (order.index(name) if name in order else len(order), name)


def task3_runs(loaded: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per run (from ``load_runs``): strategy, workload, load, latency/throughput,
    timeouts, step counts."""
    rows = []
    for run in loaded:
        cfg, summary = run["config"], run["summary"]
        counts = (run.get("engine") or {}).get("scheduler_counts_this_run") or {}
        steps, policy = counts.get("steps", {}), counts.get("policy", {})
        row = {"strategy": cfg["scheduler"], "workload": cfg["workload"], "rate": cfg["rate"],
               "run": cfg["run"], "file": run["_file"]}
        for column, (key, pct) in TASK2_METRICS.items():
            row[column] = summary[key][pct]
        row[THROUGHPUT] = summary["output_throughput_tok_s"]
        row["timeouts"] = summary["num_timeouts"]
        row["failed"] = summary["num_failed"]
        row["timeout rate"] = summary["timeout_rate"]
        row["timeout_s"] = summary["timeout_s"]
        row["mixed steps"] = steps.get("mixed")
        row["fallback steps"] = policy.get("fallback_steps")
        rows.append(row)
    return pd.DataFrame(rows)


def task3_table(runs: pd.DataFrame, workload: str, rate: str) -> pd.DataFrame:
    """The handout's main comparison table for one workload and load (median over runs)."""
    part = runs[(runs["workload"] == workload) & (runs["rate"] == rate)]
    columns = list(TASK2_METRICS) + [THROUGHPUT, "timeouts", "failed", "timeout rate",
                                     "mixed steps", "fallback steps"]
    grouped = part.groupby("strategy")
    table = grouped[columns].median()
    table["runs"] = grouped.size()
    table = table.loc[sorted(table.index, key=_strategy_order)]
    table.insert(0, "strategy", [strategy_label(s) for s in table.index])
    table["timeout rate"] = table["timeout rate"].map(lambda v: f"{v:.1%}")
    table = table.round(2).reset_index(drop=True)
    for column in ("mixed steps", "fallback steps"):  # the stock scheduler records no steps
        table[column] = table[column].map(lambda v: "n/a" if pd.isna(v) else f"{v:.0f}")
    return table


def _run_detail(folder: Path, file_name: str) -> dict[str, Any]:
    from lab_metrics import is_success, kept_indices, unpack_detail

    run = json.loads((folder / file_name).read_text())
    detail = unpack_detail(run["client"]["detail_npz_b64"])
    kept = kept_indices(detail["start_times"], run["config"]["warmup_fraction"])
    ok = [i for i in kept if is_success(detail, i)]
    ok_set = set(ok)
    return {"n": len(kept), "start_s": [detail["start_times"][i] for i in ok],
            "ttft_ms": [detail["ttfts"][i] * 1e3 for i in ok],
            "itl_ms": [x * 1e3 for i in ok for x in detail["itls"][i]],
            "input_lens": [detail["input_lens"][i] for i in kept],
            "ttft_or_inf_ms": [detail["ttfts"][i] * 1e3 if i in ok_set else float("inf") for i in kept]}


def plot_cdfs(folder: Path, runs: pd.DataFrame, workload: str, rate: str, figures: Path) -> Path:
    """3A: TTFT and ITL CDFs of each strategy (run 1), log-x in ms. A failed request keeps the
    TTFT curve below 1, so failures stay visible."""
    figures.mkdir(parents=True, exist_ok=True)
    part = runs[(runs["workload"] == workload) & (runs["rate"] == rate) & (runs["run"] == 1)]
    fig, (ax_ttft, ax_itl) = plt.subplots(1, 2, figsize=(11, 4))
    for _, row in sorted(part.iterrows(), key=lambda item: _strategy_order(item[1]["strategy"])):
        detail = _run_detail(folder, row["file"])
        for ax, values, total in ((ax_ttft, detail["ttft_ms"], detail["n"]),
                                  (ax_itl, detail["itl_ms"], len(detail["itl_ms"]))):
            if not values:
                continue
            xs = sorted(values)
            ys = [(i + 1) / total for i in range(len(xs))]
            ax.step(xs, ys, where="post", label=strategy_label(row["strategy"]))
    for ax, title in ((ax_ttft, "TTFT"), (ax_itl, "ITL")):
        ax.set_xscale("log")
        ax.set_xlabel(f"{title} (ms, log scale)")
        ax.set_ylabel("fraction of requests" if ax is ax_ttft else "fraction of token gaps")
        ax.set_ylim(0, 1.01)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(f"{title} CDF")
    ax_ttft.legend(loc="lower right")
    fig.suptitle(f"3A: {workload}, {load_label(rate)} (first 10% of requests dropped)")
    fig.tight_layout()
    path = figures / f"task3_3A_cdf_{workload}_rate-{rate}.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def ttft_by_prompt_length(folder: Path, runs: pd.DataFrame, workload: str, rate: str,
                          buckets: int = 4) -> pd.DataFrame:
    """TTFT P50/P99 per prompt-length quartile and strategy: who wins and who pays under SJF."""
    import numpy as np

    part = runs[(runs["workload"] == workload) & (runs["rate"] == rate) & (runs["run"] == 1)]
    rows = []
    for _, row in sorted(part.iterrows(), key=lambda item: _strategy_order(item[1]["strategy"])):
        detail = _run_detail(folder, row["file"])
        frame = pd.DataFrame({"len": detail["input_lens"], "ttft": detail["ttft_or_inf_ms"]})
        frame["bucket"] = pd.qcut(frame["len"], buckets, duplicates="drop")
        for bucket, group in frame.groupby("bucket", observed=True):
            with np.errstate(invalid="ignore"):
                p50, p99 = np.percentile(group["ttft"], [50, 99])
            rows.append({"strategy": strategy_label(row["strategy"]),
                         "prompt tokens": f"{int(bucket.left) + 1}-{int(bucket.right)}",
                         "requests": len(group), "TTFT P50 (ms)": round(float(p50), 1),
                         "TTFT P99 (ms)": round(float(p99), 1)})
    return pd.DataFrame(rows)


def task3_section(results_dir: Path) -> str:
    folder = results_dir / "task3"
    loaded = load_runs(folder)
    runs = task3_runs(loaded)
    if runs.empty:
        return "## Task 3\n\nNo Task 3 results yet (run `bash task3.sh`).\n"
    runs.to_csv(results_dir / "task3_runs.csv", index=False)
    example = loaded[0]
    lines = ["## Task 3: scheduling strategies", "",
             f"Server flags: `{example['config'].get('server_args')}`; common bench flags: see each "
             "result's `config.bench_command`. First 10% of requests dropped; failed requests count "
             f"as +inf latency; a request slower than {example['config'].get('timeout_s')} s end to "
             "end is a timeout (timeout rate = (timeouts + failed) / requests kept). Mixed steps and "
             "fallback steps come from the engine-side recorder (custom strategies only).", "",
             provenance_line([run.get("meta") for run in loaded]), ""]
    pairs = runs[["workload", "rate"]].drop_duplicates()
    pairs = sorted(map(tuple, pairs.values), key=lambda p: (p[0], _rate_order(p[1])))
    for workload, rate in pairs:
        lines += [f"### {workload}, {load_label(rate)}", "",
                  task3_table(runs, workload, rate).to_markdown(index=False), ""]
        figure = plot_cdfs(folder, runs, workload, rate, results_dir / "figures")
        lines += [f"![{figure.stem}](figures/{figure.name})", ""]
        if workload.startswith("varlen"):
            lines += ["TTFT by prompt length (quartiles of this workload's prompts):", "",
                      ttft_by_prompt_length(folder, runs, workload, rate).to_markdown(index=False), ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Beyond the handout: SLO attainment and goodput vs request rate (slo_study.sh)
# --------------------------------------------------------------------------------------------
SLO_TARGET_ATTAINMENT = 0.9


def variant_label(tag: str) -> str:
    """``slo-15ms`` -> 'Strategy C: ... (stall bound 15 ms)'; plain names as ``strategy_label``."""
    match = re.fullmatch(r"(.+)-(\d+(?:\.\d+)?)ms", tag)
    if match and match.group(1) in STRATEGY_LABELS:
        return f"{strategy_label(match.group(1))} (stall bound {match.group(2)} ms)"
    return strategy_label(tag)


def _variant_order(tag: str) -> tuple[int, str]:
    base = re.sub(r"-\d+(?:\.\d+)?ms$", "", tag)
    return (_strategy_order(base)[0], tag)


def _int_or_none(text: str | None) -> int | None:
    return int(text) if text is not None else None


def slo_runs(loaded: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per run: the strategy variant (tag), rate, SLO attainment and goodput recomputed
    from the per-request data, and the usual latency/throughput summary."""
    from lab_metrics import parse_slo, slo_attainment, unpack_detail

    rows = []
    for run in loaded:
        cfg, summary = run["config"], run["summary"]
        slo = parse_slo(cfg.get("goodput"))
        detail = unpack_detail(run["client"]["detail_npz_b64"])
        attained = slo_attainment(detail, slo, cfg["warmup_fraction"])
        policy = ((run.get("engine") or {}).get("scheduler_counts_this_run") or {}).get("policy", {})
        rows.append({
            "strategy": cfg["tag"], "rate": cfg["rate"], "run": cfg["run"], "file": run["_file"],
            "slo": cfg.get("goodput") or "ttft:500 tpot:50",
            "attainment": attained["attainment"], "goodput (req/s)": attained["goodput_req_s"],
            **{f"missed {term.upper()}": count / attained["num_kept"]
               for term, count in attained["num_missed_by_term"].items()},
            "TTFT P99 (ms)": summary["ttft_ms"]["p99"], "ITL P99 (ms)": summary["itl_ms"]["p99"],
            "TTFT P50 (ms)": summary["ttft_ms"]["p50"], "ITL P50 (ms)": summary["itl_ms"]["p50"],
            THROUGHPUT: summary["output_throughput_tok_s"],
            "failed": summary["num_failed"], "timeouts": summary["num_timeouts"],
            "stall guard steps": policy.get("stall_guard_steps"),
            "pace guard steps": policy.get("pace_guard_steps"),
            "peak running": ((run.get("engine") or {}).get("metrics") or {}).get("peak_num_requests_running"),
            "seq cap": _int_or_none(server_flag(cfg.get("server_args") or "", "--max-num-seqs")),
            "GPU util window": ((run.get("host") or {}).get("gpu_util") or {}).get("window"),
            **host_load_columns(run),
        })
    return pd.DataFrame(rows)


HOST_COLUMNS = ("busiest server process (cores)", "GPU util (%)")
MISSED_COLUMNS = ("missed TTFT", "missed TPOT")  # share of kept requests over each SLO term


def host_load_columns(run: dict[str, Any]) -> dict[str, float | None]:
    """From the ``host`` block (schema 2): the server's busiest process in cores over the run
    (near 1.0: a saturated Python process, e.g. the API server) and the GPU's mean utilization."""
    host = run.get("host") or {}
    busiest = (host.get("server_cpu") or [{}])[0].get("cpu_cores")
    return dict(zip(HOST_COLUMNS, (busiest, (host.get("gpu_util") or {}).get("mean_pct"))))


def slo_medians(runs: pd.DataFrame) -> pd.DataFrame:
    """Median over runs per (strategy, rate), rates as numbers, ordered for plotting."""
    columns = ["attainment", "goodput (req/s)", "TTFT P50 (ms)", "TTFT P99 (ms)", "ITL P50 (ms)",
               "ITL P99 (ms)", THROUGHPUT]
    columns += [c for c in MISSED_COLUMNS + HOST_COLUMNS if c in runs and runs[c].notna().any()]
    grouped = runs.groupby(["strategy", "rate"])
    table = grouped[columns].median()
    table["attainment min"] = grouped["attainment"].min()
    table["attainment max"] = grouped["attainment"].max()
    table["runs"] = grouped.size()
    table = table.reset_index()
    table["rate"] = table["rate"].astype(float)
    table["order"] = table["strategy"].map(_variant_order)
    return table.sort_values(["order", "rate"]).drop(columns="order").reset_index(drop=True)


def slo_target_check(medians: pd.DataFrame, challenger: str = "slo",
                     baseline: str = "default") -> pd.DataFrame:
    """The issue's target: at the highest rate where the baseline still meets the SLO for 90% of
    requests, and at the next rate above, the challenger's goodput and throughput against the
    baseline's. Empty when either strategy or such a rate is missing.

    Note: at the first of the two rates the ratio cannot exceed 1 / 0.9 = 1.11 when goodput is
    bounded by the offered rate, whatever the challenger does.
    """
    base = medians[medians["strategy"] == baseline].set_index("rate")
    other = medians[medians["strategy"] == challenger].set_index("rate")
    meeting = base[base["attainment"] >= SLO_TARGET_ATTAINMENT].index
    if base.empty or other.empty or meeting.empty:
        return pd.DataFrame()
    knee = max(meeting)
    above = [r for r in base.index if r > knee]
    rows = []
    for label, rate in (("highest rate at >= 90%", knee), ("next rate above", min(above) if above else None)):
        if rate is None or rate not in other.index:
            continue
        rows.append({
            "point": label, "rate (req/s)": rate,
            f"{baseline} attainment": base.at[rate, "attainment"],
            f"{challenger} attainment": other.at[rate, "attainment"],
            "goodput ratio": other.at[rate, "goodput (req/s)"] / base.at[rate, "goodput (req/s)"],
            "throughput ratio": other.at[rate, THROUGHPUT] / base.at[rate, THROUGHPUT],
        })
    return pd.DataFrame(rows)


def attainment_range(medians: pd.DataFrame) -> pd.Series:
    """'47.9-94.3%' per row: the runs' lowest and highest attainment (one value for one run)."""
    return medians.apply(lambda r: f"{r['attainment min']:.1%}" if r["runs"] < 2 else
                         f"{r['attainment min'] * 100:.1f}-{r['attainment max']:.1%}", axis=1)


def missing_reference_note(medians: pd.DataFrame, ratios_at: str, baseline: str = "default") -> str | None:
    """Why a study with the baseline and a challenger has no target check: the baseline met the
    SLO for 90% of requests at no measured rate, so the issue's reference point does not exist.
    ``ratios_at`` says where the reader finds the goodput ratios instead."""
    base = medians[medians["strategy"] == baseline]
    challengers = set(medians["strategy"]) & set(SLO_CHALLENGERS)
    if base.empty or not challengers or (base["attainment"] >= SLO_TARGET_ATTAINMENT).any():
        return None
    best = base.loc[base["attainment"].idxmax()]
    return (f"No target check: its reference point is the highest rate at which the default "
            f"meets the SLO for >= {SLO_TARGET_ATTAINMENT:.0%} of requests, and here the "
            f"default's median attainment stayed below that at every measured rate (best: "
            f"{best['attainment']:.1%} at {best['rate']:g} req/s). Goodput ratios at every rate "
            f"are {ratios_at}.")


def plot_slo(medians: pd.DataFrame, slo: str, figures: Path, prefix: str = "slo",
             budgets: pd.DataFrame | None = None, runs: pd.DataFrame | None = None) -> list[Path]:
    """Attainment and goodput vs rate; P99 TTFT vs P99 ITL across strategies (one point a rate)
    and, beside it when Task 2 results exist, across token budgets (the default scheduler).
    With several runs per point, each run is drawn too (small crosses): the median alone would
    hide how far runs of one configuration land apart."""
    figures.mkdir(parents=True, exist_ok=True)
    fig, (ax_att, ax_good) = plt.subplots(1, 2, figsize=(11, 4))
    several = runs is not None and medians["runs"].max() > 1
    for tag, part in medians.groupby("strategy", sort=False):
        line, = ax_att.plot(part["rate"], part["attainment"] * 100, marker="o", label=variant_label(tag))
        ax_good.plot(part["rate"], part["goodput (req/s)"], marker="o", label=variant_label(tag))
        if several:
            each = runs[runs["strategy"] == tag]
            for ax, column, scale in ((ax_att, "attainment", 100), (ax_good, "goodput (req/s)", 1)):
                ax.scatter(each["rate"].astype(float), each[column] * scale, marker="x", s=22,
                           color=line.get_color(), alpha=0.7)
    if several:
        ax_att.set_title("lines: median over runs; crosses: each run", fontsize=9)
    ax_att.axhline(SLO_TARGET_ATTAINMENT * 100, color="grey", linestyle="--", linewidth=1)
    ax_att.set_ylabel("requests meeting the SLO (%)")
    ax_good.set_ylabel("goodput (requests/s meeting the SLO)")
    rates = sorted(medians["rate"].unique())
    ax_good.plot(rates, rates, color="grey", linestyle=":", linewidth=1, label="offered rate")
    for ax in (ax_att, ax_good):
        ax.set_xlabel("request rate (req/s)")
        ax.grid(True, alpha=0.3)
    ax_good.legend(fontsize=8)
    fig.suptitle(f"SLO {slo}: attainment and goodput vs rate (first 10% of requests dropped)")
    fig.tight_layout()
    attainment = figures / f"{prefix}_attainment_goodput.png"
    fig.savefig(attainment, dpi=120)
    plt.close(fig)

    panels = 2 if budgets is not None and not budgets.empty else 1
    fig, axes = plt.subplots(1, panels, figsize=(7 * panels, 5), squeeze=False)
    ax = axes[0][0]
    for tag, part in medians.groupby("strategy", sort=False):
        ax.plot(part["ITL P99 (ms)"], part["TTFT P99 (ms)"], marker="o", label=variant_label(tag))
        for _, row in part.iterrows():
            ax.annotate(f"{row['rate']:g}", (row["ITL P99 (ms)"], row["TTFT P99 (ms)"]),
                        textcoords="offset points", xytext=(4, 3), fontsize=7)
    ax.set_title("strategies (labels: request rate)")
    if panels == 2:
        ax_b = axes[0][1]
        for rate, part in budgets.groupby("rate", sort=False):
            part = part.sort_values("max_num_batched_tokens")
            ax_b.plot(part["ITL P99 (ms)"], part["TTFT P99 (ms)"], marker="s", label=load_label(rate))
            for _, row in part.iterrows():
                ax_b.annotate(f"{row['max_num_batched_tokens']}", (row["ITL P99 (ms)"], row["TTFT P99 (ms)"]),
                              textcoords="offset points", xytext=(4, 3), fontsize=7)
        ax_b.set_title("vLLM default, Task 2 (labels: max_num_batched_tokens)")
    for ax in axes[0]:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("ITL P99 (ms, log scale)")
        ax.set_ylabel("TTFT P99 (ms, log scale)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("P99 TTFT vs P99 ITL: lower left is better")
    fig.tight_layout()
    tradeoff = figures / f"{prefix}_tradeoff.png"
    fig.savefig(tradeoff, dpi=120)
    plt.close(fig)
    return [attainment, tradeoff]


def gpu_count(run: dict[str, Any]) -> int:
    return ((run.get("meta") or {}).get("gpu") or {}).get("count") or 1


def host_condition(run: dict[str, Any]) -> str:
    """What ran beside a run on its host: "lockstep" (its wave's partners, started together),
    "beside" (another vLLM server, not in lockstep), "unrecorded" (a file from before the
    ``host`` block, made on a host with several GPUs, where the other GPU may have been busy)
    or "alone"."""
    host = run.get("host")
    if host is None:
        slots = (run["config"].get("parallel_gpu_slots") or "").split()
        return "unrecorded" if gpu_count(run) > 1 or len(slots) > 1 else "alone"
    if ((host.get("lockstep") or {}).get("all_met")):
        return "lockstep"
    if any((host.get(when) or {}).get("other_vllm_servers", 0) > 0 for when in ("before", "after")):
        return "beside"
    return "alone"


def unpaired_runs(loaded: list[dict[str, Any]]) -> int:
    """Runs that may have had a busy neighbour and no lockstep: what ran beside them differed
    between strategies, so their comparison carries that difference too."""
    return sum(host_condition(run) in ("beside", "unrecorded") for run in loaded)


def gpu_window_note(loaded: list[dict[str, Any]]) -> str | None:
    """For runs whose GPU utilization averages over the client's whole life (before the load
    window existed): how much longer that life was than the load, i.e. how far the mean is
    diluted by idle start-up time. None when every run measured the load window only."""
    spans = []
    for run in loaded:
        gpu = (run.get("host") or {}).get("gpu_util") or {}
        duration = (run.get("client") or {}).get("duration")
        if gpu and gpu.get("window") != "load" and duration:
            spans.append(gpu["samples"] * gpu["interval_s"] / duration)
    if not spans:
        return None
    return (f"GPU util: {len(spans)} of {len(loaded)} runs predate the load window, so their GPU "
            "utilization averages over the client's whole life, idle start-up included: at least "
            f"{statistics.median(spans):.1f}x as long as the load itself (median; sample count x "
            "interval / benchmark duration), so the GPU was busier during the load than the column "
            "shows, by up to that factor. Newer runs measure the load only "
            "(`host.gpu_util.window`).")


SLO_FOLDERS = {"slo": "SLO study: attainment and goodput vs request rate",
               "slo_1gpu": "SLO study on one H200 (every strategy, 1 run per point)",
               "slo_pilot": "SLO pilot study (first session, not in lockstep)"}
SLO_CHALLENGERS = ("paced", "deadline", "slo", "prefill-first")  # ours first, then A for reference


def slo_section(results_dir: Path, folder_name: str = "slo",
                budgets: pd.DataFrame | None = None) -> str:
    """One SLO study's tables, target checks and figures (files prefixed with the folder name);
    ``budgets``, Task 2's medians at finite rates, if any, join the trade-off figure."""
    title = SLO_FOLDERS.get(folder_name, folder_name)
    loaded = load_runs(results_dir / folder_name)
    if not loaded:
        return f"## {title}\n\nNo results yet (run `bash slo_study.sh`).\n"
    runs = slo_runs(loaded)
    runs.to_csv(results_dir / f"{folder_name}_runs.csv", index=False)
    medians = slo_medians(runs)
    slo = _distinct(list(runs["slo"]))
    example = loaded[0]
    lines = [f"## {title}", "",
             f"SLO per request: `{slo}` (TTFT and mean TPOT in ms). Attainment = share of kept "
             "requests meeting it (failed requests miss it); goodput = those requests per second "
             "of the run's span. First 10% of requests dropped. Server flags: "
             f"`{example['config'].get('server_args')}`; bench flags: "
             f"`{example['config'].get('bench_args')}`. Per-run values in `{folder_name}_runs.csv`.", "",
             provenance_line([run.get("meta") for run in loaded]), ""]
    unpaired = unpaired_runs(loaded)
    if unpaired:
        lines += [f"Caution: {unpaired} of {len(loaded)} runs ran while another server worked on "
                  "the other GPU of the same host, not in lockstep, so strategies met different "
                  "neighbours (README: \"Measurement noise\"). Differences between strategies "
                  "here mix the policy with that.", ""]
    shown = medians.copy()
    shown.insert(0, "strategy", shown.pop("strategy").map(variant_label))
    for column in ("attainment",) + MISSED_COLUMNS:
        if column in shown:
            shown[column] = shown[column].map(lambda v: f"{v:.1%}")
    if shown["runs"].max() > 1:  # the runs' spread beside their median
        shown.insert(shown.columns.get_loc("attainment") + 1, "attainment range", attainment_range(medians))
    shown = shown.drop(columns=["attainment min", "attainment max"])
    lines += [shown.round(2).to_markdown(index=False), ""]
    note = gpu_window_note(loaded)
    if note:
        lines += [note, ""]
    for challenger in SLO_CHALLENGERS:
        check = slo_target_check(medians, challenger=challenger)
        if not check.empty:
            lines += [f"Target check ({strategy_label(challenger)} against the default; goodput "
                      "ratio >= 1.2 and throughput ratio >= 0.95 wanted; at the first point the "
                      "ratio is at most 1 / 0.9 = 1.11 by construction):", "",
                      check.round(3).to_markdown(index=False), ""]
    reference_note = missing_reference_note(medians, ratios_at="in REPORT.md")
    if reference_note:
        lines += [reference_note, ""]
    figures = plot_slo(medians, slo, results_dir / "figures", folder_name, budgets, runs)
    lines += [f"![{f.stem}](figures/{f.name})" for f in figures] + [""]
    return "\n".join(lines)


def finite_rate_budgets(task2_loaded: list[dict[str, Any]]) -> pd.DataFrame | None:
    """Task 2's medians at finite rates (the trade-off figure's budget panel), or None."""
    runs = task2_runs(task2_loaded)
    if runs.empty:
        return None
    table = task2_table(runs)
    return table[table["rate"] != "inf"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=ROOT / "results")
    parser.add_argument("--pdf", action="store_true",
                        help="also render REPORT.md with its figures to <results>/report.pdf")
    args = parser.parse_args(argv)
    if not args.results.is_dir():
        parser.error(f"{args.results} is not a folder")
    text = "# Lab 3 results\n\nGenerated by `plot_results.py` from the JSON files in this folder.\n\n"
    task2_loaded = load_runs(args.results / "task2")  # read once: Task 2 and the SLO figures
    budgets = finite_rate_budgets(task2_loaded)
    text += "\n".join([task1_section(args.results), task2_section(args.results, task2_loaded),
                       task3_section(args.results)]
                      + [slo_section(args.results, name, budgets) for name in SLO_FOLDERS
                         if name == "slo" or (args.results / name).is_dir()])
    out = args.results / "tables.md"
    out.write_text(text)
    print(f"wrote {out}")
    from report import write_report  # imported here: report imports this module

    for path in write_report(args.results, pdf=args.pdf):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
