"""The results layer: one loader of the result files and one row per run, read by the tables, the
figures (``plot_results.py``) and the report (``harness/report/``).

A serving run is a ``Run``: the typed record of one result file (``meta``, ``config``, ``host``,
``frontend``, ``client``, ``engine``, ``summary``; ``serve_bench.py`` writes it) with its folder
and its per-request arrays, unpacked on first use. A serving folder is any folder of runs; what it
holds (its task, its roles in the report, the GPU folders a replay replays) is its study file's
(``harness/study_file.py``), never its name. A run's *setting* (folder, API-server count, client
processes) keeps runs of different settings apart.
Each row carries the run's front-end check: token-gap completeness below 0.99 marks the run
"front end lagged". Tables give the median over the runs of a point with their completeness range.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.lab_metrics import (RequestDetail, is_success, kept_indices, output_pace, parse_slo, read_detail,
                                 request_throughput, slo_attainment, slo_key)
from harness.provenance import read_json, record_paths
from harness.run_config import RunConfig
from harness.strategies import RETIRED, STRATEGIES
from harness.study_file import Study, StudyFileError, read_study

ROOT = Path(__file__).resolve().parent.parent
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
LATE_GAPS = "gaps under 0.1 ms (%)"  # tokens read back to back: late, though in their own chunks
SLO_COLUMNS = ("attainment", "goodput (req/s)")
COMPLETED = "completed (req/s)"  # requests completed per second, beside the offered rate
STEP_MS = "mean step (ms)"  # the client's whole run over the scheduler's steps in it, idle steps too
OFFERED_OUTPUT = "offered output (tok/s)"  # what the run's draw asked for over its arrival window
EMITTED_OUTPUT = "emitted output (tok/s)"  # what the engine emitted over that window (output pace's numerator)
PACE = "output pace"  # output emitted / output offered over the arrival window: below 1, overload
# Attainment of the requests arriving in each third of a run's window: the steady-state check
THIRDS = ("first third attainment", "middle third attainment", "last third attainment")
PREFILL_CHUNK = "prefill tokens per prefill step"
VALUES = (*METRICS, THROUGHPUT, *SLO_COLUMNS, *CORES, "mixed steps", "fallback steps")


def _labels_in_letter_order() -> dict[str, str]:
    """The registry's labels and the retired strategies' (their committed results still need
    one): vLLM's default first, then by handout letter (A, B1, C, ..., F), then the rest."""
    letters = {name: entry.letter for name, entry in STRATEGIES.items()} | {n: r[0] for n, r in RETIRED.items()}
    labels = {name: entry.label for name, entry in STRATEGIES.items()} | {n: r[1] for n, r in RETIRED.items()}
    group = {name: 0 if i == 0 else 1 if letters[name] else 2 for i, name in enumerate(labels)}
    return dict(sorted(labels.items(), key=lambda item: (group[item[0]], letters[item[0]])))


STRATEGY_LABELS = _labels_in_letter_order()


def load_json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


# --- Task 1 and provenance ------------------------------------------------------------------
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
    return " / ".join(dict.fromkeys(values)) if values else (missing or "")  # first-seen order, each once


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
    field = partial(meta_field, metas)
    models = field("model",  # a local copy's path differs per host
                   shorten=lambda v: Path(v).name if v.startswith("/") or (ROOT / v).exists() else v)
    commits = field("git_commit", shorten=lambda v: v[:7])
    return (f"GPU {field('gpu', 'name')} ({field('gpu', 'memory_gib')} GiB, driver "
            f"{field('gpu', 'driver')}); vLLM {field('versions', 'vllm')}, torch "
            f"{field('versions', 'torch')}; model {models}, weights {field('weights')}; "
            f"{date_range([str(m.get('date_utc')) for m in metas])}; commit {commits}")


# --- Serving runs: one loader and one row per run for Tasks 2, 3 and the SLO studies --------
@dataclass
class Run:
    """One serving run: the blocks of its result file, where it lives, and its per-request arrays
    in the compact form (``lab_metrics.RequestDetail``), read once."""

    path: Path
    meta: dict[str, Any]
    config: RunConfig
    summary: dict[str, Any]
    frontend: dict[str, Any]
    client: dict[str, Any]
    host: dict[str, Any] | None  # None: a file from before the harness read the host
    engine: dict[str, Any]
    sim: dict[str, Any] = field(default_factory=dict)  # a replay's ``simulation`` and ``step_model`` blocks
    timing: dict[str, Any] = field(default_factory=dict)  # a study run's server start and client overhead

    @classmethod
    def read(cls, path: Path) -> Run | None:
        """The run in ``path``; None for a JSON file that is not a serving run."""
        data = read_json(path)
        if "summary" not in data or "config" not in data:
            return None
        return cls(path, data.get("meta") or {}, RunConfig.from_record(data["config"]), data["summary"], data["frontend"],
                   data["client"], data.get("host"), data.get("engine") or {},
                   {k: data[k] for k in ("simulation", "step_model") if k in data}, data.get("timing") or {})

    @property
    def folder(self) -> str:
        return self.path.parent.name

    @cached_property
    def detail(self) -> RequestDetail:
        return read_detail(self.path, {"client": self.client, "config": {"warmup_fraction": self.config.warmup_fraction}})

    def attainment(self, slo: str | None) -> dict[str, Any]:
        """SLO attainment (``lab_metrics.slo_attainment``) under ``slo`` ("ttft:500 tpot:50"; None:
        the lab's pair): as the file stores it (``summary.slo_attainment``, the replays written
        without per-request arrays), else recomputed from the arrays."""
        stored = (self.summary.get("slo_attainment") or {}).get(slo_key(slo))
        return stored or slo_attainment(self.detail, parse_slo(slo), self.config.warmup_fraction)

    @property
    def completed_req_s(self) -> float | None:
        """Requests completed per second over the run (``lab_metrics.request_throughput``): as
        stored, else from the arrays. Below the offered rate, the run was overloaded."""
        stored = self.summary.get("request_throughput_req_s")
        if stored is not None or not self.client.get("detail_file"):  # a replay stored without arrays
            return stored
        return request_throughput(self.detail)

    @property
    def output_pace(self) -> float | None:
        """Output emitted / output offered over the arrival window (``lab_metrics.output_pace``):
        as stored, else from the arrays; None at rate inf or for a replay stored without either."""
        if self.config.rate is None:
            return None
        if "output_pace" in self.summary:
            stored = self.summary["output_pace"]
            return stored["ratio"] if stored else None
        if not self.client.get("detail_file"):
            return None
        detail = self.detail
        pace = output_pace(detail, kept_indices(detail.start_times, self.config.warmup_fraction))
        return pace["ratio"] if pace else None

    @property
    def offered_output_tok_s(self) -> float | None:
        """The output tokens a second the run's own draw asked for over its arrival window (the
        denominator of ``output_pace``), as stored; None where the run stored no pace. On a
        heavy-tailed load it differs run by run, since each run draws its own prompts."""
        stored = self.summary.get("output_pace")
        return stored["offered_tok_s"] if stored else None

    @property
    def emitted_output_tok_s(self) -> float | None:
        """The output tokens a second the engine emitted over the run's arrival window (the
        numerator of ``output_pace``), as stored; None where the run stored no pace."""
        stored = self.summary.get("output_pace")
        return stored["emitted_tok_s"] if stored else None

    @property
    def served_by(self) -> tuple[int, int]:
        """(API-server processes, client processes); files from before the knobs had one each."""
        return self.config.api_server_count, self.config.client_processes

    @property
    def setting(self) -> str:
        """Where and how the run was served: its folder, API-server and client processes."""
        api, clients = self.served_by
        return f"{self.folder}: {api} API server{'s' * (api > 1)}, {clients} client{'s' * (clients > 1)}"

    @property
    def simulated(self) -> bool:
        """A replay of the scheduler on a virtual clock (``sched_sim.py replay``), not a GPU run."""
        return self.config.simulated

    @property
    def point(self) -> tuple[str, str]:
        """(workload, rate): the load, whatever served it."""
        return self.config.workload, self.config.rate_label


def load_runs(folder: Path) -> list[Run]:
    """Every run file in ``folder`` (sorted by name); none when the folder does not exist (a task
    not run yet)."""
    return [run for run in map(Run.read, record_paths(folder)) if run is not None]


def capacity_tok_s(folder: Path, budget: int, machine_boot_id: str | None = None,
                   kept_up_only: bool = False) -> float | None:
    """The engine's capacity measured in ``folder``: the median rate-inf output throughput (tok/s)
    of vLLM's own policy at token budget ``budget`` sent by one client (the runs found by their
    ``config``); with ``machine_boot_id``, of the runs on that machine only (machines of one kind
    differ). With ``kept_up_only``, a run whose front end lagged is left out: its client read the
    tokens late, so its throughput is the front end's as much as the engine's (such runs have read
    both above and below the runs beside them that kept up). The SLO studies' anchors take it, whose
    front end is lifted; the handout's one-API-server rates keep every run, since there nearly
    every rate-inf run lags and the committed Task 2 and 3 files are named by the rates so read.
    None when there is no such run."""
    tputs = [run.summary["output_throughput_tok_s"] for run in load_runs(folder)
             if run.config.rate is None and run.config.budget_in_force == budget and run.config.client_processes == 1
             and run.config.scheduler in ("default", "kv-recorder") and not (kept_up_only and run.frontend["lagged"])
             and machine_boot_id in (None, run.meta.get("machine_boot_id"))]
    return float(np.median(tputs)) if tputs else None


def client_start_spread_s(run: Run) -> float | None:
    """How far apart the client processes of a run sent their first requests, in seconds (None
    for one client). Without a start gate (runs before ``client_gate`` was recorded) each process
    started its load after its own set-up, so several clients at rate inf offered staggered
    bursts, not one. The merged arrays hold each process's ``num_prompts`` requests in turn."""
    processes = run.client.get("per_process") or []
    if len(processes) < 2:
        return None
    starts, firsts, at = run.detail.start_times, [], 0
    for process in processes:
        firsts.append(min(starts[at:at + process["num_prompts"]]))
        at += process["num_prompts"]
    return max(firsts) - min(firsts)


def prefill_chunk(counts: dict[str, Any]) -> float | None:
    """Prefill tokens per engine step that held prefill (prefill-only and mixed steps) in one run:
    how much of a prompt a step carries, which the token budget caps."""
    steps, tokens = counts.get("steps") or {}, counts.get("tokens") or {}
    with_prefill = (steps.get("prefill_only") or 0) + (steps.get("mixed") or 0)
    return tokens["prefill"] / with_prefill if with_prefill and "prefill" in tokens else None


def step_ms(run: Run) -> float | None:
    """The run's mean step: the client's duration over the steps the scheduler counted in that
    run; None where either is missing (files that predate the counts)."""
    steps = ((run.engine.get("scheduler_counts_this_run") or {}).get("steps") or {}).get("total")
    duration = run.client.get("duration")
    return 1000 * duration / steps if steps and duration else None


def run_rows(loaded: list[Run]) -> pd.DataFrame:
    """One row per run: what was run (setting, strategy, workload, rate, budget), the summary's
    latencies and throughput, SLO attainment and goodput recomputed from the per-request data,
    the front-end check and the host's CPU/GPU readings."""
    rows = []
    for run in loaded:
        cfg, summary, front, engine = run.config, run.summary, run.frontend, run.engine
        counts = engine.get("scheduler_counts_this_run") or {}
        gpu = (run.host or {}).get("gpu_util") or {}
        roles = front.get("server_cores_by_role") or {}
        attained = run.attainment(cfg.goodput)
        budget = cfg.budget_in_force
        rows.append({
            "setting": run.setting, "folder": run.folder, "file": run.path.name,
            "sitting": run.meta.get("machine_boot_id"), "gpu": (run.meta.get("gpu") or {}).get("name"),
            "model": Path(run.meta["model"]).name if run.meta.get("model") else None,  # a local copy's path differs per host
            **dict(zip(("api servers", "clients"), run.served_by)),
            "strategy": cfg.strategy_variant,
            "workload": cfg.workload, "rate": cfg.rate_label, "run": cfg.run, "prompts": cfg.num_prompts,
            BUDGET: int(budget) if budget else None,
            **{col: summary[key][pct] for col, (key, pct) in METRICS.items()},
            THROUGHPUT: summary["output_throughput_tok_s"],
            "client throughput (tok/s)": run.client.get("output_throughput"),
            "attainment": attained["attainment"], "goodput (req/s)": attained["goodput_req_s"],
            "token attainment": attained.get("token_attainment"), COMPLETED: run.completed_req_s,
            PACE: run.output_pace, OFFERED_OUTPUT: run.offered_output_tok_s, EMITTED_OUTPUT: run.emitted_output_tok_s,
            **dict(zip(THIRDS, attained.get("by_third") or (None, None, None))),
            **{f"longest decile {name}": (attained.get("longest_decile") or {}).get(key) for name, key in (
                ("attainment", "attainment"), ("TTFT P99 (ms)", "ttft_p99_ms"), ("TTFT max (ms)", "ttft_max_ms"))},
            "failed": summary["num_failed"], "timeouts": summary["num_timeouts"],
            "timeout rate": summary["timeout_rate"],
            "completeness": front["token_gaps"]["completeness"], "lagged": bool(front["lagged"]),
            WHOLE_REQUESTS: 100 * front["token_gaps"]["requests_complete_share"],
            "min request completeness": front["token_gaps"]["min_request_completeness"],
            LATE_GAPS: None if (late := front["token_gaps"].get("late_gap_share")) is None else 100 * late,
            API_CORES: front.get("api_server_cores_total"), BUSIEST_API: roles.get("api_server"),
            ENGINE_CORES: roles.get("engine_core"),
            CLIENT_CORES: max(front.get("client_cores") or [], default=None),
            GPU_UTIL: gpu.get("mean_pct") if gpu.get("window") == "load" else None,
            "client start spread (s)": client_start_spread_s(run),
            "mixed steps": (counts.get("steps") or {}).get("mixed"),
            "fallback steps": (counts.get("policy") or {}).get("fallback_steps"),
            "peak running": (engine.get("metrics") or {}).get("peak_num_requests_running"),
            "peak waiting": (engine.get("metrics") or {}).get("peak_num_requests_waiting"),
            "running cap": cfg.server_params.get("max_num_seqs"),
            STEP_MS: step_ms(run),
            PREFILL_CHUNK: prefill_chunk(counts),
            "offered (tok/s)": cfg.offered_tok_s,
            "budget set": "by the flag" if budget == cfg.budget_flag else "at run time",
            "study": (cfg.study or {}).get("name"),
            "round": (cfg.study or {}).get("round"),
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
    return f"{order.index(name) if name in order else len(order):02d}{name}"


def sort_key(column: pd.Series) -> pd.Series:
    if column.name == "rate":
        return column.map(_rate_order)
    return column.map(_strategy_order) if column.name == "strategy" else column


def strategy_label(name: str) -> str:
    """A strategy's display label, a retired one's too; an unknown name stands as it is. A variant
    (``RunConfig.strategy_variant``: ``sjf-ontime (wait_bound_s 5)``) keeps its settings after the label."""
    base, _, settings = name.partition(" (")
    return STRATEGY_LABELS.get(base, base) + (f" ({settings}" if settings else "")


def load_label(rate: str) -> str:
    return "rate inf (all at once)" if rate == "inf" else f"rate {rate} req/s"


def span_text(values: pd.Series, digits: int = 3) -> str:
    """'0.913-0.956' (one value when they agree); 'n/a' when none was recorded."""
    values = values.dropna()
    if values.empty:
        return "n/a"
    low, high = f"{values.min():.{digits}f}", f"{values.max():.{digits}f}"
    return low if low == high else f"{low}-{high}"


def gpu_text(gpus: pd.Series) -> str:
    """The GPU(s) that ran these runs, as their provenance names them."""
    return " / ".join(sorted(set(gpus.dropna()))) or "GPU not recorded"


def sitting_text(sittings: pd.Series) -> str:
    """'one sitting' when every run recorded the same machine boot, else how many (or unknown)."""
    if sittings.isna().any():
        return "sitting not recorded"
    return "one sitting" if sittings.nunique() == 1 else f"{sittings.nunique()} sittings"


def lag_text(lagged: pd.Series) -> str:
    n = int(lagged.sum())
    return "kept up" if n == 0 else ("lagged" if n == len(lagged) else f"lagged in {n} of {len(lagged)}")


def point_table(rows: pd.DataFrame, keys: list[str], extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """Median over the runs of each point (``keys``) of every value column present (``VALUES``
    and any ``extra``), the number of runs, and, where the rows carry the front-end check, the
    runs' completeness range and whether the front end lagged ("front end": kept up / lagged /
    lagged in k of n)."""
    keys = [k for k in keys if k in rows]
    grouped = rows.groupby(keys, sort=False)
    values = dict.fromkeys((*VALUES, *extra))  # each column once: ``extra`` may repeat a value column
    table = grouped[[c for c in values if c in rows and rows[c].notna().any()]].median()
    table["runs"] = grouped.size()
    if "completeness" in rows:
        table["completeness"] = grouped["completeness"].agg(span_text)
        table["front end"] = grouped["lagged"].agg(lag_text)
    return table.reset_index().sort_values(keys, key=sort_key, kind="stable").reset_index(drop=True)


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


def kept_request_values(run: Run) -> dict[str, list[float]]:
    """TTFT (ms; a failed request as inf) and prompt length of each kept request, and every ITL
    (ms, one per streamed chunk) of the kept successful ones, in ascending order (the pooled ITLs
    of ``RequestDetail.itl_pool``)."""
    detail = run.detail
    kept = kept_indices(detail.start_times, run.config.warmup_fraction)
    ok = {i for i in kept if is_success(detail, i)}
    return {"ttft_ms": [detail.ttfts[i] * 1e3 if i in ok else float("inf") for i in kept],
            "input_lens": [detail.input_lens[i] for i in kept],
            "itl_ms": detail.itl_pool.values_ms(run.config.warmup_fraction).tolist()}


def share_arriving_behind(run: Run) -> float:
    """The share of a run's kept requests that arrived while an earlier request (warm-up too) still
    had no first token. Only such requests can meet another in the waiting queue, so this bounds
    what an order of admission (SJF) can move: at a low rate it is small, and so is SJF's reach."""
    detail = run.detail
    by_arrival = sorted(range(len(detail.start_times)), key=lambda i: detail.start_times[i])
    behind, latest_first_token = set(), float("-inf")
    for i in by_arrival:
        if detail.start_times[i] < latest_first_token:
            behind.add(i)
        if is_success(detail, i):
            latest_first_token = max(latest_first_token, detail.start_times[i] + detail.ttfts[i])
    kept = kept_indices(detail.start_times, run.config.warmup_fraction)
    return sum(i in behind for i in kept) / len(kept) if kept else float("nan")


def prompt_lengths(loaded: list[Run], workload: str, rate: str) -> set[int]:
    """The prompt lengths (tokens) a point's runs sent: one value on a fixed-length load."""
    return {n for run in loaded if run.point == (workload, rate) for n in run.detail.input_lens}


def ttft_by_prompt_length(loaded: list[Run], workload: str, rate: str,
                          buckets: int = 4) -> pd.DataFrame:
    """TTFT P50/P99 per prompt-length quartile and strategy, pooled over the point's runs: who
    gains and who pays when the admission order depends on the prompt's length."""
    frames = []
    for run in loaded:
        if run.point == (workload, rate):
            values = kept_request_values(run)
            frames.append(pd.DataFrame({"strategy": run.config.strategy_variant, "len": values["input_lens"],
                                        "ttft": values["ttft_ms"], "lagged": run.frontend["lagged"]}))
    frame = pd.concat(frames) if frames else pd.DataFrame({"len": []})
    if frame["len"].nunique() < buckets:  # one length (the fixed load): no quartiles to compare
        return pd.DataFrame()
    frame["bucket"] = pd.qcut(frame["len"], buckets, duplicates="drop")
    rows = []
    for (tag, bucket), group in frame.groupby(["strategy", "bucket"], observed=True):
        with np.errstate(invalid="ignore"):
            p50, p99 = np.percentile(group["ttft"], [50, 99])
        rows.append({"strategy": tag, "prompt tokens": f"{int(bucket.left) + 1}-{int(bucket.right)}",
                     "requests": len(group), "TTFT P50 (ms)": round(float(p50), 1),
                     "TTFT P99 (ms)": round(float(p99), 1),
                     "front end": "lagged" if group["lagged"].any() else "kept up"})
    return pd.DataFrame(rows).sort_values("strategy", key=sort_key, kind="stable")


BUDGET_STEPS_FILE = "sim_budget_steps.json"


@dataclass
class Results:
    """Task 1's file and every serving folder's runs (folders with runs only), read once."""

    folder: Path
    task1: dict[str, Any] | None
    serving: dict[str, list[Run]]
    budget_steps: dict[str, Any] | None = None  # harness/budget_steps.py's record
    studies: dict[str, Study] = field(default_factory=dict)  # each serving folder's study file
    _rows: dict[str, pd.DataFrame] = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, folder: Path) -> Results:
        """Task 1's file and every folder of runs with its study file (``read_study``: a folder of
        runs without one fails, naming the migration), folders in name order."""
        task1 = load_json(folder / "task1.json")
        serving = {p.name: runs for p in sorted(folder.iterdir() if folder.is_dir() else [])
                   if p.is_dir() and (runs := load_runs(p))}
        return cls(folder, task1 if task1 and task1.get("methods") else None, serving,
                   load_json(folder / BUDGET_STEPS_FILE), {name: read_study(folder / name) for name in serving})

    def folders(self, task: str) -> list[str]:
        """The folders of one report group (``task2``, ``task3``, ``slo``, ``replay``), by study file."""
        return [name for name in self.serving if self.studies[name].task == task]

    def with_role(self, role: str, task: str | None = None) -> list[str]:
        """The folders whose study file gives them ``role`` (``study_file.ROLES``), of ``task`` if given."""
        return [name for name in self.serving if role in self.studies[name].roles
                and task in (None, self.studies[name].task)]

    def one_with_role(self, role: str, task: str | None = None) -> str | None:
        """The folder with ``role``, where the report reads one only; None where none has it."""
        names = self.with_role(role, task)
        if len(names) > 1:
            raise StudyFileError(f"folders {names} all have the role {role!r}; the report reads one")
        return names[0] if names else None

    def runs(self, task: str) -> list[Run]:
        return [run for name in self.folders(task) for run in self.serving[name]]

    def folder_rows(self, name: str) -> pd.DataFrame:
        """One folder's per-run rows (``run_rows``), computed once."""
        if name not in self._rows:
            self._rows[name] = run_rows(self.serving.get(name, []))
        return self._rows[name]

    def rows(self, *tasks: str) -> pd.DataFrame:
        """Per-run rows of every folder of the given tasks (``task2``, ``slo``, ...), in order."""
        frames = [self.folder_rows(n) for task in tasks for n in self.folders(task)]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def points(self, folder: str) -> list[tuple[str, str]]:
        """The (workload, rate) points of a folder, in order."""
        pairs = {r.point for r in self.serving[folder]}
        return sorted(pairs, key=lambda p: (p[0], _rate_order(p[1])))


