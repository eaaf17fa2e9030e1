"""Section 1 of the report, the environment: GPU, model, weights and versions per task, read from the
``meta`` block of every results file, so each number below can be traced to the machine it ran on.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.document import Block, bullets, heading, para, table
from harness.results import Results, date_range, meta_field
from harness.rules import SITTING_COST_GOAL, sitting_cost


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
    return (blocks + [para("From the provenance (`meta`) of every results file; values that differ "
                           "between runs are all listed."), table(frame), bullets(notes)] + sitting_cost_blocks(res))


def sitting_cost_blocks(res: Results) -> list[Block]:
    """What each interleaved study cost on the GPU, from its runs' ``timing`` blocks, against the
    goal: at most ``SITTING_COST_GOAL`` times its arrival windows plus one server start per
    configuration."""
    rows, ratios, short = [], [], []
    for folder, runs in res.serving.items():
        cost = sitting_cost(runs)
        if cost is None or runs[0].simulated:
            continue
        starts = cost["server starts (s)"]
        shared = cost["shared starts (s)"]
        ratios.append(cost["vs arrivals and one start"])
        planned = res.studies[folder].planned_runs
        if planned and cost["runs"] < planned:
            short.append(f"{folder} ({cost['runs']} of {planned})")
        runs_text = f"{cost['runs']} of {planned}" if planned else str(cost["runs"])
        rows.append({"study": folder, "runs": runs_text, "configurations": cost["configurations"],
                     "server ready (s)": ", ".join(f"{s_:.0f}" + (" (another study's)" if s_ in shared else "")
                                                   for s_ in starts),
                     "measured windows (min)": f"{cost['arrivals (s)'] / 60:.1f}",
                     "client overhead per run (s)": "{:.1f}-{:.1f}".format(*cost["client overhead (s)"]),
                     "GPU time (min)": f"{cost['GPU time (s)'] / 60:.1f}",
                     "/ (windows + one start)": f"{cost['vs arrivals and one start']:.2f}x",
                     "/ (windows + a start per configuration)": f"{cost['vs allowance']:.2f}x"})
    if not rows:
        return []
    frame = pd.DataFrame(rows)
    return [heading("What a sitting costs", 3),
            para("Each interleaved study (`python -m harness.study run PLAN`) serves every configuration from one "
                 "server and runs `vllm bench serve` in its own process, so the client's imports and dataset are "
                 "paid once; every run records the server's ready time and its own client overhead (set-up and "
                 "drain beyond the arrival window). GPU time here is the server's start plus the written runs' "
                 "wall time (a study that ran on a server another study started and left up pays no start); a run's measured window is its arrival window, or at rate inf, where every request "
                 f"is sent at once, the time from the first request to the last token. The goal is at most "
                 f"{SITTING_COST_GOAL:g}x the measured windows plus one server start per configuration; against a single start, the studies below took at most {max(ratios):.2f}x."),
            table(frame)] + ([bullets([f"Studies with fewer runs than their plan: {', '.join(short)}. Their runs "
                                       "stand as measured; the runs they lack were not made on their machine, "
                                       "and the sections read a budget or strategy only where it has the runs "
                                       "they ask for."])] if short else [])
