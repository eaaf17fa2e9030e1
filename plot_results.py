"""Tables, figures and the report from results/: the one command that writes them all.

    .venv/bin/python plot_results.py [--results results] [--pdf]

Only reads result files. Writes ``<results>/tables.md``, ``<results>/<folder>_runs.csv`` (one row
per run of each serving folder), ``<results>/figures/*.png`` and, through ``report.py``,
``REPORT.md`` (and ``report.pdf`` with ``--pdf``). A task without results gets a sentence saying
so, never invented numbers.

Serving folders: ``task2``, ``task3`` and the SLO studies ``slo*``, plus any folder named
``<task>_<name>`` beside them (``serving_folders``; e.g. ``task2_lifted`` for runs with the API
server lifted). Every run file has the same schema; a run's *setting* (folder, API-server count,
client processes, from ``config``) keeps runs of different settings apart in tables and figures.
Each row carries the run's front-end check (``frontend`` block, ``lab_metrics.frontend_check``):
token-gap completeness below 0.99 marks the run "front end lagged". Tables give the median over
the runs of a point with their completeness range; figures draw every run (hollow markers or
dashed curves: lagged).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from lab_metrics import (is_success, kept_indices, parse_slo,  # noqa: E402
                         read_detail, slo_attainment)
from my_scheduler import FORMER_NAMES, STRATEGIES  # noqa: E402

ROOT = Path(__file__).resolve().parent
MIB = 2**20
TASK1_LABELS = {"hf-serial": "transformers serial", "hf-static": "transformers static batching",
                "vllm": "vLLM offline"}
METRICS = {"TTFT P50 (ms)": ("ttft_ms", "p50"), "TTFT P99 (ms)": ("ttft_ms", "p99"),
           "ITL P50 (ms)": ("itl_ms", "p50"), "ITL P99 (ms)": ("itl_ms", "p99")}
THROUGHPUT = "Throughput (tok/s)"
BUDGET = "max_num_batched_tokens"
# Host readings over the load window, in cores: a Python process runs one thread, so a process
# near 1.0 is saturated. The API servers are given together and by their busiest process.
API_CORES, BUSIEST_API, ENGINE_CORES = "API servers (cores)", "busiest API server (cores)", "engine core (cores)"
CLIENT_CORES, GPU_UTIL = "busiest client (cores)", "GPU util (%)"
CORES = (API_CORES, BUSIEST_API, ENGINE_CORES, CLIENT_CORES, GPU_UTIL)
WHOLE_REQUESTS = "requests token by token (%)"  # share of kept requests with one chunk per token
SLO_COLUMNS = ("attainment", "goodput (req/s)")
VALUES = (*METRICS, THROUGHPUT, *SLO_COLUMNS, *CORES, "mixed steps", "fallback steps")
STRATEGY_LABELS = {name: entry.label for name, entry in STRATEGIES.items()}  # the registry's order
SLO_TITLES = {"slo": "SLO study (default, A and E, 2 runs per point)",
              "slo_1gpu": "SLO study on one H200 (every strategy, 1 run per point)",
              "slo_pilot": "SLO pilot study (beside another server, not in lockstep)"}
LAG_NOTE = "hollow: front end lagged (token-gap completeness < 0.99)"


def load_json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


# --------------------------------------------------------------------------------------------
# Task 1 and provenance
# --------------------------------------------------------------------------------------------
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
            notes.append(f"padding {entry['padding']['padding_share']:.0%} of KV slots")
        if key == "vllm":
            notes.append(f"cold first call {entry['cold_first_call_s']:.2f} s")
            notes.append(f"KV allocated peak {entry['kv_peak_allocated_bytes'] / MIB:.1f} MiB")
        if serial is not None and key != "hf-serial":
            notes.append(f"{serial['total_s'] / entry['total_s']:.1f}x faster than serial")
        if key == "vllm" and "hf-static" in methods:
            notes.append(f"{methods['hf-static']['total_s'] / entry['total_s']:.1f}x faster than static")
        rows.append({"method": label, "total time (s)": round(entry["total_s"], 2),
                     "throughput (tok/s)": round(entry["output_tokens_per_s"], 1),
                     "peak KV cache (MiB)": round(entry["kv_peak_bytes"] / MIB, 1),
                     "peak GPU memory (MiB)": _gpu_memory_mib(entry), "notes": "; ".join(notes)})
    return pd.DataFrame(rows)


def _distinct(values: list[Any]) -> str:
    """The values in first-seen order, each once: one value, or 'a / b' where runs differ."""
    return " / ".join(dict.fromkeys(str(v) for v in values))


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


def provenance_line(metas: list[dict[str, Any] | None]) -> str:
    """One line of provenance for a set of results (values that differ all listed, dates as a
    range), so a table mixing sessions says so."""
    metas = [m for m in metas if m]
    if not metas:
        return "provenance: missing"

    def field(*path: str) -> str:
        return meta_field(metas, *path)

    models = meta_field(metas, "model",  # a local copy's path differs per host
                        shorten=lambda v: Path(v).name if v.startswith("/") or (ROOT / v).exists() else v)
    commits = meta_field(metas, "git_commit", shorten=lambda v: v[:7])
    return (f"GPU {field('gpu', 'name')} ({field('gpu', 'memory_gib')} GiB, driver "
            f"{field('gpu', 'driver')}); vLLM {field('versions', 'vllm')}, torch "
            f"{field('versions', 'torch')}; model {models}, weights {field('weights')}; "
            f"{date_range([str(m.get('date_utc')) for m in metas])}; commit {commits}")


# --------------------------------------------------------------------------------------------
# Serving runs: one loader and one row per run for Tasks 2, 3 and the SLO studies
# --------------------------------------------------------------------------------------------
def serving_folders(results_dir: Path, task: str) -> list[Path]:
    """``<results>/<task>`` and every ``<results>/<task>_<name>`` folder: a new folder of runs of
    the same schema (e.g. ``task2_lifted``) joins its task's tables, figures and report section."""
    return sorted(p for p in results_dir.glob(f"{task}*") if p.is_dir()
                  and (p.name == task or p.name.startswith(task + "_")))


def load_runs(folder: Path) -> list[dict[str, Any]]:
    """Every run file in ``folder`` (sorted by name), each tagged with its folder and file name;
    none when the folder does not exist (a task not run yet)."""
    runs = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        data = json.loads(path.read_text())
        if "summary" in data and "config" in data:
            runs.append(data | {"_file": path.name, "_folder": folder.name, "_path": path})
    return runs


def run_detail(run: dict[str, Any]) -> dict[str, Any]:
    """The run's per-request arrays, unpacked once."""
    if "_detail" not in run:
        run["_detail"] = read_detail(run["_path"], run)
    return run["_detail"]


def served_by(cfg: dict[str, Any]) -> tuple[int, int]:
    """(API-server processes, client processes) of a run; files from before the knobs had one each."""
    return cfg.get("api_server_count") or 1, cfg.get("client_processes") or 1


def setting(run: dict[str, Any]) -> str:
    """Where and how a run was served: its folder, API-server processes and client processes."""
    api, clients = served_by(run["config"])
    return (f"{run['_folder']}: {api} API server{'s' * (api > 1)}, "
            f"{clients} client{'s' * (clients > 1)}")


def client_start_spread_s(run: dict[str, Any]) -> float | None:
    """How far apart the client processes of a run sent their first requests, in seconds (None
    for one client). Each process starts its own clock after its own set-up, so several clients
    at rate inf offer staggered bursts, not one. The merged arrays hold each process's
    ``num_prompts`` requests in turn."""
    processes = run["client"].get("per_process") or []
    if len(processes) < 2:
        return None
    starts, firsts, at = run_detail(run)["start_times"], [], 0
    for process in processes:
        firsts.append(min(starts[at:at + process["num_prompts"]]))
        at += process["num_prompts"]
    return max(firsts) - min(firsts)


def server_flag(server_args: str, flag: str) -> str | None:
    match = re.search(rf"{re.escape(flag)}[ =](\S+)", server_args or "")
    return match.group(1) if match else None


def run_rows(loaded: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per run: what was run (setting, strategy, workload, rate, budget), the summary's
    latencies and throughput, SLO attainment and goodput recomputed from the per-request data,
    the front-end check and the host's CPU/GPU readings."""
    rows = []
    for run in loaded:
        cfg, summary, front = run["config"], run["summary"], run["frontend"]
        host, engine = run.get("host") or {}, run.get("engine") or {}
        counts = engine.get("scheduler_counts_this_run") or {}
        gpu = host.get("gpu_util") or {}
        roles = front.get("server_cores_by_role") or {}
        attained = slo_attainment(run_detail(run), parse_slo(cfg.get("goodput")), cfg["warmup_fraction"])
        budget = server_flag(cfg.get("server_args"), "--max-num-batched-tokens")
        rows.append({
            "setting": setting(run), "folder": run["_folder"], "file": run["_file"],
            **dict(zip(("api servers", "clients"), served_by(cfg))),
            "strategy": current_name(cfg["tag"] if cfg.get("task") == "slo" else cfg["scheduler"]),
            "workload": cfg["workload"], "rate": cfg["rate"], "run": cfg["run"],
            BUDGET: int(budget) if budget else None,
            **{col: summary[key][pct] for col, (key, pct) in METRICS.items()},
            THROUGHPUT: summary["output_throughput_tok_s"],
            "client throughput (tok/s)": run["client"].get("output_throughput"),
            "attainment": attained["attainment"], "goodput (req/s)": attained["goodput_req_s"],
            "failed": summary["num_failed"], "timeouts": summary["num_timeouts"],
            "timeout rate": summary["timeout_rate"],
            "completeness": front["token_gaps"]["completeness"], "lagged": bool(front["lagged"]),
            WHOLE_REQUESTS: 100 * front["token_gaps"]["requests_complete_share"],
            "min request completeness": front["token_gaps"]["min_request_completeness"],
            API_CORES: front.get("api_server_cores_total"), BUSIEST_API: roles.get("api_server"),
            ENGINE_CORES: roles.get("engine_core"),
            CLIENT_CORES: max(front.get("client_cores") or [], default=None),
            GPU_UTIL: gpu.get("mean_pct") if gpu.get("window") == "load" else None,
            "client start spread (s)": client_start_spread_s(run),
            "mixed steps": (counts.get("steps") or {}).get("mixed"),
            "fallback steps": (counts.get("policy") or {}).get("fallback_steps"),
            "peak running": (engine.get("metrics") or {}).get("peak_num_requests_running"),
        })
    frame = pd.DataFrame(rows)
    if not frame.empty:  # a reading a run lacks is NaN, so medians and rounding stay numeric
        frame[list(CORES)] = frame[list(CORES)].astype(float)
    return frame


def _rate_order(rate: str) -> float:
    return float("inf") if rate == "inf" else float(rate)


def _strategy_order(name: str) -> str:
    """Sort key: the labelled strategies in their order, then any other name."""
    order = list(STRATEGY_LABELS)
    base = re.sub(r"-\d+(?:\.\d+)?ms$", "", name)
    return f"{order.index(base) if base in order else len(order):02d}{name}"


def _sort_key(column: pd.Series) -> pd.Series:
    if column.name == "rate":
        return column.map(_rate_order)
    return column.map(_strategy_order) if column.name == "strategy" else column


def current_name(tag: str) -> str:
    """A strategy name or ``NAME-MSms`` tag as the registry spells it now: committed results
    keep the names they were run under (``slo`` for Strategy C in results/slo_1gpu, slo_pilot)."""
    name, bound = re.fullmatch(r"(.+?)((?:-\d+(?:\.\d+)?ms)?)", tag).groups()
    return FORMER_NAMES.get(name, name) + bound


def strategy_label(tag: str) -> str:
    """``stall-bounded-15ms`` (``slo_study.sh``'s ``stall-bounded@15``) -> Strategy C's label
    with its stall bound."""
    tag = current_name(tag)
    match = re.fullmatch(r"(.+)-(\d+(?:\.\d+)?)ms", tag)
    if match and match.group(1) in STRATEGY_LABELS:
        return f"{STRATEGY_LABELS[match.group(1)]} (stall bound {match.group(2)} ms)"
    return STRATEGY_LABELS.get(tag, tag)


def load_label(rate: str) -> str:
    return "rate inf (all at once)" if rate == "inf" else f"rate {rate} req/s"


def span_text(values: pd.Series, digits: int = 3) -> str:
    """'0.913-0.956' (one value when they agree); 'n/a' when none was recorded."""
    values = values.dropna()
    if values.empty:
        return "n/a"
    low, high = f"{values.min():.{digits}f}", f"{values.max():.{digits}f}"
    return low if low == high else f"{low}-{high}"


def lag_text(lagged: pd.Series) -> str:
    n = int(lagged.sum())
    return "kept up" if n == 0 else ("lagged" if n == len(lagged) else f"lagged in {n} of {len(lagged)}")


def point_table(rows: pd.DataFrame, keys: list[str], extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """Median over the runs of each point (``keys``) of every value column present (``VALUES``
    and any ``extra``), the number
    of runs, and, where the rows carry the front-end check, the runs' completeness range and
    whether the front end lagged ("front end": kept up / lagged / lagged in k of n)."""
    keys = [k for k in keys if k in rows]
    grouped = rows.groupby(keys, sort=False)
    table = grouped[[c for c in (*VALUES, *extra) if c in rows and rows[c].notna().any()]].median()
    table["runs"] = grouped.size()
    if "completeness" in rows:
        table["completeness"] = grouped["completeness"].agg(span_text)
        table["front end"] = grouped["lagged"].agg(lag_text)
    return table.reset_index().sort_values(keys, key=_sort_key, kind="stable").reset_index(drop=True)


def task2_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Task 2's medians per (setting, load, budget)."""
    return point_table(runs, ["setting", "rate", BUDGET])


def shown(table: pd.DataFrame, drop: tuple[str, ...] = ()) -> pd.DataFrame:
    """A table for reading: rounded, strategies labelled, attainment in %, and without the given
    columns, columns no run recorded, or columns that say the same thing in every row (stated in
    the text instead)."""
    out = table.drop(columns=[c for c in drop if c in table]).dropna(axis=1, how="all").copy()
    for column in ("setting", "folder"):
        if column in out and out[column].nunique() == 1:
            out = out.drop(columns=column)
    if "strategy" in out:
        out["strategy"] = out["strategy"].map(strategy_label)
    if "attainment" in out:
        out["attainment"] = out["attainment"].map(lambda v: f"{v:.1%}")
    out = out.round(2)
    return out.astype(object).where(out.notna(), "n/a")


# --------------------------------------------------------------------------------------------
# Figures: every run drawn, lagged runs hollow (or dashed), the median as a line
# --------------------------------------------------------------------------------------------
def _runs_and_median(ax: Any, part: pd.DataFrame, x: str, y: str, color: str, label: str,
                     scale: float = 1.0) -> None:
    """One series: a line through the medians over runs at each x, and each run as a marker,
    filled when its front end kept up, hollow when it lagged."""
    median = part.groupby(x)[y].median().sort_index()
    ax.plot(median.index, median.values * scale, color=color, label=label, linewidth=1.2)
    for lagged, face in ((False, color), (True, "none")):
        each = part[part["lagged"] == lagged]
        ax.scatter(each[x], each[y] * scale, s=26, edgecolors=color, facecolors=face, linewidths=1.1)


def lag_count(runs: pd.DataFrame) -> str:
    return f"front end lagged in {int(runs['lagged'].sum())} of {len(runs)} runs"


def _lag_legend(ax: Any, **placement: Any) -> None:
    ax.scatter([], [], s=26, edgecolors="grey", facecolors="none", label=LAG_NOTE)
    ax.legend(fontsize=7, **placement)


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_task2(runs: pd.DataFrame, figures: Path) -> list[Path]:
    """A1: budget vs TTFT/ITL P50/P99 (log-log), A2: budget vs throughput; a series per setting
    and load, every run a marker."""
    series = sorted(runs.groupby(["setting", "rate"], sort=False).groups,
                    key=lambda k: (k[0], _rate_order(k[1])))
    several = runs["setting"].nunique() > 1
    budgets = sorted(runs[BUDGET].unique())

    def draw(ax: Any, column: str) -> None:
        for i, (name, rate) in enumerate(series):
            part = runs[(runs["setting"] == name) & (runs["rate"] == rate)]
            label = f"{name}, {load_label(rate)}" if several else load_label(rate)
            _runs_and_median(ax, part, BUDGET, column, f"C{i}", label)
        ax.set_xscale("log", base=2)
        ax.set_xticks(budgets, [str(b) for b in budgets])
        ax.minorticks_off()
        ax.grid(True, which="both", alpha=0.3)

    fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharex=True)
    for ax, column in zip(axes.flat, METRICS):
        draw(ax, column)
        ax.set_yscale("log")
        ax.set_title(column + ", log scale")
    for ax in axes[1]:
        ax.set_xlabel(BUDGET)
    _lag_legend(axes[0][0])
    fig.suptitle(f"A1: token budget vs latency (lines: median of runs; markers: each run; {lag_count(runs)})")
    a1 = _save(fig, figures / "task2_A1_latency.png")
    fig, ax = plt.subplots(figsize=(7, 6))
    draw(ax, THROUGHPUT)
    ax.set_xlabel(BUDGET)
    ax.set_ylabel("output tokens/s")
    ax.set_title(f"A2: token budget vs throughput (every run; {lag_count(runs)})", fontsize=10)
    _lag_legend(ax, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)  # below: points at 2048
    return [a1, _save(fig, figures / "task2_A2_throughput.png")]


def kept_request_values(run: dict[str, Any]) -> dict[str, list[float]]:
    """TTFT (ms; a failed request as inf) and prompt length of each kept request, and every ITL
    (ms, one per streamed chunk) of the kept successful ones."""
    detail = run_detail(run)
    kept = kept_indices(detail["start_times"], run["config"]["warmup_fraction"])
    ok = {i for i in kept if is_success(detail, i)}
    return {"ttft_ms": [detail["ttfts"][i] * 1e3 if i in ok else float("inf") for i in kept],
            "input_lens": [detail["input_lens"][i] for i in kept],
            "itl_ms": [x * 1e3 for i in kept if i in ok for x in detail["itls"][i]]}


def plot_cdfs(loaded: list[dict[str, Any]], workload: str, rate: str, figures: Path) -> Path:
    """3A: TTFT and ITL CDFs (log-x, ms), one curve per run, a colour per strategy (and setting
    where a folder has several), dashed where the front end lagged. Failed requests keep the
    TTFT curve below 1."""
    part = [r for r in loaded if (r["config"]["workload"], r["config"]["rate"]) == (workload, rate)]
    part.sort(key=lambda r: (_strategy_order(r["config"]["scheduler"]), setting(r), r["config"]["run"]))
    several = len({setting(r) for r in part}) > 1
    colors: dict[str, str] = {}
    fig, (ax_ttft, ax_itl) = plt.subplots(1, 2, figsize=(11, 4.2))
    for run in part:
        name = strategy_label(run["config"]["scheduler"]) + (f" [{setting(run)}]" if several else "")
        label = None if name in colors else name
        color = colors.setdefault(name, f"C{len(colors)}")
        values = kept_request_values(run)
        for ax, key in ((ax_ttft, "ttft_ms"), (ax_itl, "itl_ms")):
            xs = np.sort(values[key])
            if xs.size:
                ax.step(xs, np.arange(1, xs.size + 1) / xs.size, where="post", color=color, linewidth=1,
                        linestyle="--" if run["frontend"]["lagged"] else "-",
                        label=label if ax is ax_ttft else None)
    for ax, title in ((ax_ttft, "TTFT"), (ax_itl, "ITL, per streamed chunk")):
        ax.set_xscale("log")
        ax.set_xlabel(f"{title} (ms, log scale)")
        ax.set_ylim(0, 1.01)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(f"{title} CDF")
    ax_ttft.set_ylabel("fraction of requests")
    ax_itl.set_ylabel("fraction of chunk gaps")
    ax_ttft.plot([], [], color="grey", linestyle="--", label="dashed: front end lagged")
    ax_ttft.legend(loc="lower right", fontsize=7)
    lagged = sum(bool(r["frontend"]["lagged"]) for r in part)
    fig.suptitle(f"3A: {workload}, {load_label(rate)}, every run; front end lagged in {lagged} of "
                 f"{len(part)} (first 10% of requests dropped)")
    return _save(fig, figures / f"{part[0]['_folder']}_3A_cdf_{workload}_rate-{rate}.png")


def plot_slo(runs: pd.DataFrame, figures: Path, prefix: str) -> Path:
    """SLO attainment and goodput vs request rate: a line per strategy through the medians,
    every run a marker (hollow: lagged)."""
    runs = runs.assign(rate_value=runs["rate"].astype(float))
    fig, (ax_att, ax_good) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, (tag, part) in enumerate(sorted(runs.groupby("strategy"), key=lambda g: _strategy_order(g[0]))):
        _runs_and_median(ax_att, part, "rate_value", "attainment", f"C{i}", strategy_label(tag), 100)
        _runs_and_median(ax_good, part, "rate_value", "goodput (req/s)", f"C{i}", strategy_label(tag))
    rates = sorted(runs["rate_value"].unique())
    ax_good.plot(rates, rates, color="grey", linestyle=":", linewidth=1, label="offered rate")
    ax_att.set_ylabel("requests meeting the SLO (%)")
    ax_good.set_ylabel("goodput (requests/s meeting the SLO)")
    for ax in (ax_att, ax_good):
        ax.set_xlabel("request rate (req/s)")
        ax.grid(True, alpha=0.3)
    _lag_legend(ax_good)
    fig.suptitle("SLO attainment and goodput vs rate (lines: median of runs; markers: each run; "
                 f"{lag_count(runs)})")
    return _save(fig, figures / f"{prefix}_attainment_goodput.png")


def ttft_by_prompt_length(loaded: list[dict[str, Any]], workload: str, rate: str,
                          buckets: int = 4) -> pd.DataFrame:
    """TTFT P50/P99 per prompt-length quartile and strategy, pooled over the point's runs: who
    gains and who pays when the admission order depends on the prompt's length."""
    frames = []
    for run in loaded:
        if (run["config"]["workload"], run["config"]["rate"]) == (workload, rate):
            values = kept_request_values(run)
            frames.append(pd.DataFrame({"strategy": run["config"]["scheduler"], "len": values["input_lens"],
                                        "ttft": values["ttft_ms"], "lagged": run["frontend"]["lagged"]}))
    if not frames:
        return pd.DataFrame()
    frame = pd.concat(frames)
    frame["bucket"] = pd.qcut(frame["len"], buckets, duplicates="drop")
    rows = []
    for (tag, bucket), group in frame.groupby(["strategy", "bucket"], observed=True):
        with np.errstate(invalid="ignore"):
            p50, p99 = np.percentile(group["ttft"], [50, 99])
        rows.append({"strategy": tag, "prompt tokens": f"{int(bucket.left) + 1}-{int(bucket.right)}",
                     "requests": len(group), "TTFT P50 (ms)": round(float(p50), 1),
                     "TTFT P99 (ms)": round(float(p99), 1),
                     "front end": "lagged" if group["lagged"].any() else "kept up"})
    return pd.DataFrame(rows).sort_values("strategy", key=_sort_key, kind="stable")


# --------------------------------------------------------------------------------------------
# The command: everything read once, then CSVs, figures, tables.md and the report
# --------------------------------------------------------------------------------------------
@dataclass
class Results:
    """Task 1's file and every serving folder's runs (folders with runs only), read once."""

    folder: Path
    task1: dict[str, Any] | None
    serving: dict[str, list[dict[str, Any]]]
    _rows: dict[str, pd.DataFrame] = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, folder: Path) -> Results:
        task1 = load_json(folder / "task1.json")
        serving = {p.name: load_runs(p) for task in ("task2", "task3", "slo")
                   for p in serving_folders(folder, task)}
        return cls(folder, task1 if task1 and task1.get("methods") else None,
                   {name: runs for name, runs in serving.items() if runs})

    def folders(self, task: str) -> list[str]:
        return [name for name in self.serving if name == task or name.startswith(task + "_")]

    def runs(self, task: str) -> list[dict[str, Any]]:
        return [run for name in self.folders(task) for run in self.serving[name]]

    def folder_rows(self, name: str) -> pd.DataFrame:
        """One folder's per-run rows (``run_rows``), computed once."""
        if name not in self._rows:
            self._rows[name] = run_rows(self.serving.get(name, []))
        return self._rows[name]

    def rows(self, task: str) -> pd.DataFrame:
        """Per-run rows of every folder of ``task`` (``task2``, ``task3``), or of one folder."""
        frames = [self.folder_rows(n) for n in (self.folders(task) if task in ("task2", "task3") else [task])]
        frames = [f for f in frames if not f.empty]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def points(self, folder: str) -> list[tuple[str, str]]:
        """The (workload, rate) points of a folder, in order."""
        pairs = {(r["config"]["workload"], r["config"]["rate"]) for r in self.serving[folder]}
        return sorted(pairs, key=lambda p: (p[0], _rate_order(p[1])))


def write_figures(res: Results) -> None:
    figures = res.folder / "figures"
    if res.folders("task2"):
        plot_task2(res.rows("task2"), figures)
    for name in res.folders("task3"):
        for workload, rate in res.points(name):
            plot_cdfs(res.serving[name], workload, rate, figures)
    for name in res.folders("slo"):
        plot_slo(res.rows(name), figures, name)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=ROOT / "results")
    parser.add_argument("--pdf", action="store_true",
                        help="also render REPORT.md with its figures to <results>/report.pdf")
    args = parser.parse_args(argv)
    if not args.results.is_dir():
        parser.error(f"{args.results} is not a folder")
    from report import write_report  # imported here: report imports this module

    res = Results.load(args.results)
    for name in res.serving:
        res.folder_rows(name).to_csv(args.results / f"{name}_runs.csv", index=False)
    write_figures(res)
    for path in write_report(res, pdf=args.pdf):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
