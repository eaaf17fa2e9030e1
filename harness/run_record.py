"""A serving run's result record, as every harness that writes one fills it (``serve_bench.py``, a
study, the replay of ``sched_sim.py``): the schema version, the file name, the recorder's counters
over a run, the strategy's settings, and the blocks filled alike from what was measured
(``measured_blocks``); the ``config`` block is ``run_config.RunConfig``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.lab_metrics import (DETAIL_KEYS, RequestDetail, compact_detail, frontend_check, late_gap_bursts, pack_detail,
                                 summarize)

SCHEMA_VERSION = 5  # 2: "host" block (load, other servers, lockstep); 3: "frontend" block, clients;
# 4: per-request arrays in a binary file beside the result (client.detail_file); 5: "config" is a
# RunConfig (rate a number, null for inf; no flag strings)


def result_name(tag: str, load: str, rate: str, run: int, clients: int = 1) -> str:
    """``<tag>[_<load>]_rate-<rate>[_clients-<k>]_run-<n>.json``: one file per run, named by
    what varies (``rate`` as ``run_config.rate_label`` writes it; the client count only when the
    load is split over several clients)."""
    middle = f"_{load}" if load else ""
    split = f"_clients-{clients}" if clients != 1 else ""
    return f"{tag}{middle}_rate-{rate}{split}_run-{run}.json"


def number_text(value: float | None, unit: str, digits: int) -> str:
    """A progress-line number; None (no value to measure) reads "n/a" instead of failing."""
    return "n/a" if value is None else f"{value:.{digits}f}{unit}"


# ---- Engine statistics written by my_scheduler's recorder ------------------------------------
def read_stats(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def counters_delta(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any] | None:
    """The recorder's counters (steps, tokens, preemptions, policy) accrued during one run, and
    the strategy's settings as they were (settings are not counters: never differenced)."""
    if after is None:
        return None
    before = before or {}

    def diff(key: str) -> dict[str, float]:
        old = before.get(key, {})
        return {k: v - old.get(k, 0) for k, v in after.get(key, {}).items()}

    return {"steps": diff("steps"), "tokens": diff("tokens"), "policy": diff("policy"),
            "policy_settings": after.get("policy_settings", {}),
            "preemptions": after["queues"]["preemptions"] - before.get("queues", {}).get("preemptions", 0)}


# ---- The measured blocks ---------------------------------------------------------------------
def weights_label(dummy: bool) -> str:
    return "dummy (random, real shapes)" if dummy else "real"


def strategy_settings(name: str, given: dict[str, float]) -> dict[str, float]:
    """Every setting the strategy reads, as it runs: the ones given, else the defaults."""
    from harness.strategies import SETTING_DEFAULTS, strategy

    return {key: given.get(key, SETTING_DEFAULTS[key]) for key in strategy(name).settings}


def measured_blocks(client: dict[str, Any], metrics: dict[str, Any], stats_before: dict[str, Any] | None,
                    stats_after: dict[str, Any] | None, host: dict[str, Any], warmup_fraction: float,
                    timeout_s: float | None, api_servers: int) -> tuple[dict[str, Any], RequestDetail, bytes]:
    """The blocks of a result that every harness fills alike from what it measured (``host``,
    ``frontend``, ``client``, ``engine``, ``summary``), the per-request arrays in the compact form
    (from exact times, as the summaries are) and packed for the file beside the result."""
    raw = {k: client[k] for k in DETAIL_KEYS}
    detail = compact_detail(raw, warmup_fraction)
    return {
        "host": host,
        "frontend": frontend_check(detail, warmup_fraction, host.get("server_cpu"), host.get("client_cpu"),
                                   api_servers, late_gap_bursts(raw)),
        "client": {k: v for k, v in client.items() if k not in DETAIL_KEYS + ("generated_texts",)},
        "engine": {"metrics": metrics, "scheduler_counts_this_run": counters_delta(stats_before, stats_after),
                   "scheduler_stats_cumulative": stats_after},
        "summary": summarize(detail, warmup_fraction, timeout_s),
    }, detail, pack_detail(raw, warmup_fraction)
