"""Tables, figures and the report from results/: the one command that writes them all.

    .venv/bin/python plot_results.py [--results results] [--pdf]

Only reads result files, through the results layer (``harness/results.py``). Writes
``<results>/tables.md``, ``<results>/<folder>_runs.csv.xz`` (one row per run of each serving folder),
``<results>/figures/*.png`` and, through ``harness/report/``, ``REPORT.md`` (and ``report.pdf``
with ``--pdf``). A task without results gets a sentence saying so, never invented numbers.
Figures draw every run: hollow markers or dashed curves where the front end lagged.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from harness.report import write_report  # noqa: E402
from harness.report.slo import sweep_folders  # noqa: E402
from harness.results import (BUDGET, METRICS, ROOT, THROUGHPUT, Results, Run, _rate_order,  # noqa: E402
                             _strategy_order, kept_request_values, load_label, strategy_label)

LAG_NOTE = "hollow: front end lagged (token-gap completeness < 0.99)"


# --- Figures: every run drawn, lagged runs hollow (or dashed), the median as a line ---------
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
    """The figure as a 256-colour palette PNG: line plots use a few colours, so the palette loses
    nothing visible and the file (and report.pdf, which embeds it) is about a third the size,
    which keeps results/ small enough to commit."""
    from PIL import Image  # matplotlib's own dependency

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=100, format="png")
    plt.close(fig)
    Image.open(buffer).convert("RGB").quantize(colors=256).save(path, optimize=True)
    return path


def plot_task2(runs: pd.DataFrame, figures: Path) -> list[Path]:
    """A1: budget vs TTFT/ITL P50/P99 (log-log), A2: budget vs throughput; a series per setting
    and load that sweeps the budget (one budget alone, the front-end study's, is no sweep), every
    run a marker."""
    runs = runs[runs.groupby(["setting", "rate"])[BUDGET].transform("nunique") > 1]
    series = sorted(runs.groupby(["setting", "rate"], sort=False), key=lambda g: (g[0][0], _rate_order(g[0][1])))
    several = runs["setting"].nunique() > 1
    budgets = sorted(runs[BUDGET].unique())

    def draw(ax: Any, column: str) -> None:
        for i, ((name, rate), part) in enumerate(series):
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


def plain_ms_ticks(ax: Any) -> None:
    """A log x axis in plain numbers (50, 100, not 5x10^1); under two decades also 2x and 5x each
    power of ten, where matplotlib would label every minor tick and the labels would overlap."""
    low, high = ax.get_xlim()
    narrow = np.log10(high / low) < 2

    def minor(x: float, _: Any) -> str:
        leading = round(x / 10 ** np.floor(np.log10(x)))
        return f"{x:g}" if narrow and leading in (2, 5) else ""

    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(minor))


def plot_cdfs(loaded: list[Run], workload: str, rate: str, figures: Path) -> Path:
    """3A: TTFT and ITL CDFs (log-x, ms), one curve per run, a colour per strategy (and setting
    where a folder has several), dashed where the front end lagged. Failed requests keep the
    TTFT curve below 1."""
    part = [r for r in loaded if r.point == (workload, rate)]
    part.sort(key=lambda r: (_strategy_order(r.config.strategy_variant), r.setting, r.config.run))
    several = len({r.setting for r in part}) > 1
    colors: dict[str, str] = {}
    fig, (ax_ttft, ax_itl) = plt.subplots(1, 2, figsize=(11, 4.2))
    for run in part:
        name = strategy_label(run.config.strategy_variant) + (f" [{run.setting}]" if several else "")
        label = None if name in colors else name
        color = colors.setdefault(name, f"C{len(colors)}")
        values = kept_request_values(run)
        for ax, key in ((ax_ttft, "ttft_ms"), (ax_itl, "itl_ms")):
            xs = np.sort(values[key])
            if xs.size:
                ax.step(xs, np.arange(1, xs.size + 1) / xs.size, where="post", color=color, linewidth=1,
                        linestyle="--" if run.frontend["lagged"] else "-",
                        label=label if ax is ax_ttft else None)
    for ax, title in ((ax_ttft, "TTFT"), (ax_itl, "ITL, per streamed chunk")):
        ax.set_xscale("log")
        plain_ms_ticks(ax)
        ax.set_xlabel(f"{title} (ms, log scale)")
        ax.set_ylim(0, 1.01)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(f"{title} CDF")
    ax_ttft.set_ylabel("fraction of requests")
    ax_itl.set_ylabel("fraction of chunk gaps")
    ax_ttft.plot([], [], color="grey", linestyle="--", label="dashed: front end lagged")
    ax_ttft.legend(loc="lower right", fontsize=7)
    lagged = sum(bool(r.frontend["lagged"]) for r in part)
    fig.suptitle(f"3A: {workload}, {load_label(rate)}, every run; front end lagged in {lagged} of "
                 f"{len(part)} (first 10% of requests dropped)")
    return _save(fig, figures / f"{part[0].folder}_3A_cdf_{workload}_rate-{rate}.png")


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
    _lag_legend(ax_good, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2)  # below: a point at any height
    fig.suptitle("SLO attainment and goodput vs rate (lines: median of runs; markers: each run; "
                 f"{lag_count(runs)})")
    return _save(fig, figures / f"{prefix}_attainment_goodput.png")


def plot_pareto(runs: pd.DataFrame, figures: Path, prefix: str) -> Path:
    """P99 TTFT against P99 ITL: one point per strategy and rate at the runs' medians, bars from
    the lowest to the highest run, the rate written beside each point; down and left is better."""
    fig, ax = plt.subplots(figsize=(7, 5))
    for i, (tag, part) in enumerate(sorted(runs.groupby("strategy"), key=lambda g: _strategy_order(g[0]))):
        for j, (rate, point) in enumerate(sorted(part.groupby("rate"), key=lambda g: _rate_order(g[0]))):
            x, y = point["TTFT P99 (ms)"], point["ITL P99 (ms)"]
            ax.errorbar(x.median(), y.median(), fmt="o", color=f"C{i}", capsize=3,
                        xerr=[[x.median() - x.min()], [x.max() - x.median()]],
                        yerr=[[y.median() - y.min()], [y.max() - y.median()]],
                        label=strategy_label(tag) if j == 0 else None)
            ax.annotate(f"{rate}/s", (x.median(), y.median()), textcoords="offset points", xytext=(5, 4), fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("TTFT P99 (ms, log scale)")
    ax.set_ylabel("ITL P99 (ms)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"P99 TTFT vs P99 ITL (median of runs, bars: their range;\n{lag_count(runs)})", fontsize=9)
    return _save(fig, figures / f"{prefix}_pareto.png")


# --- The command: everything read once, then CSVs, figures, tables.md and the report --------
def write_figures(res: Results) -> None:
    figures = res.folder / "figures"
    if res.folders("task2"):
        plot_task2(res.rows("task2"), figures)
    sweeps = sweep_folders(res)
    for name in (f for f in res.folders("task3") if f not in sweeps):
        for workload, rate in res.points(name):
            plot_cdfs(res.serving[name], workload, rate, figures)
    for name in sweeps:
        plot_slo(res.folder_rows(name), figures, name)
        plot_pareto(res.folder_rows(name), figures, name)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=ROOT / "results")
    parser.add_argument("--pdf", action="store_true",
                        help="also render REPORT.md with its figures to <results>/report.pdf")
    args = parser.parse_args(argv)
    if not args.results.is_dir():
        parser.error(f"{args.results} is not a folder")
    res = Results.load(args.results)
    for name in res.serving:
        res.folder_rows(name).to_csv(args.results / f"{name}_runs.csv.xz", index=False)  # pandas reads it as it is
    write_figures(res)
    for path in write_report(res, pdf=args.pdf):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
